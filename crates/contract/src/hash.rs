//! The inputs hash, `captf.io/inputs-hash` (spec: Job Inputs §7, Common "What is hashed").
//!
//! The hash is `h2:` followed by the lowercase hex SHA-256 of the canonical JSON
//! ([`crate::canonical`]) of one document:
//!
//! ```json
//! {
//!   "contract": "v1alpha1",
//!   "image": "<spec.source.image as written>",
//!   "inputs": { "<every contract input of the role>": "..." },
//!   "role": "cluster | machine | machinepool",
//!   "scheme": "h2",
//!   "variables": { "sensitive": ["<names>"], "values": { "<name>": "..." } }
//! }
//! ```
//!
//! `inputs` is the role's rendered contract inputs exactly as in `terraform.tfvars.json`, minus
//! a pool's `replicas` while `autoscaling.enabled`. `variables` is present only when the object
//! sets at least one user variable, so an object without variables hashes exactly as before
//! variables existed. Nothing else is covered: no metadata, no resolved digest, no pull policy.

use crate::canonical::{CanonicalError, canonical_json};
use crate::inputs::{CONTRACT_VERSION, RoleInputs, role_name};
use crate::names::ObjectKind;
use crate::variables::UserVariables;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The hash scheme this crate computes.
pub const HASH_SCHEME: &str = "h2";

/// Why inputs cannot be hashed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// A fractional or exponent number somewhere in the hashed document (in practice, in the
    /// cluster's `exports` carried as `captf_cluster_outputs`).
    #[error("the inputs cannot be hashed: {0}")]
    NotCanonical(#[from] CanonicalError),
}

/// The document the hash is computed over (see the module documentation).
pub fn hashed_document(
    kind: ObjectKind,
    image: &str,
    inputs: Map<String, Value>,
    variables: &UserVariables,
) -> Value {
    let mut doc = Map::new();
    doc.insert("scheme".into(), HASH_SCHEME.into());
    doc.insert("contract".into(), CONTRACT_VERSION.into());
    doc.insert("role".into(), role_name(kind).into());
    doc.insert("image".into(), image.into());
    doc.insert("inputs".into(), Value::Object(inputs));
    if !variables.is_empty() {
        let mut vars = Map::new();
        vars.insert("values".into(), Value::Object(variables.values()));
        vars.insert(
            "sensitive".into(),
            variables.sensitive_names().into_iter().collect(),
        );
        doc.insert("variables".into(), Value::Object(vars));
    }
    Value::Object(doc)
}

/// The hash of an already built document: `h2:<sha256 hex of its canonical JSON>`.
pub fn hash_document(document: &Value) -> Result<String, HashError> {
    let canonical = canonical_json(document)?;
    Ok(format!(
        "{HASH_SCHEME}:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    ))
}

/// The inputs hash of a role's inputs, run from `image` (as written in `spec.source.image`).
pub fn inputs_hash(
    inputs: &RoleInputs,
    image: &str,
    variables: &UserVariables,
) -> Result<String, HashError> {
    hash_document(&hashed_document(
        inputs.kind(),
        image,
        inputs.hashed_map(),
        variables,
    ))
}

/// Whether `value` is a well-formed hash of the current scheme (`h2:` and 64 lowercase hex).
pub fn is_inputs_hash(value: &str) -> bool {
    value.strip_prefix("h2:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}
