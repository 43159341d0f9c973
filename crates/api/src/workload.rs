//! The spec every workload kind carries (the book's API reference "WorkspaceSpec"): the module
//! image, the identity, the Job policy and the module variables.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;
use crate::shared::{IdentityReference, JobPolicy, Source, VariablesSource};

/// Module variables as one JSON object (`spec.variables`).
pub type Variables = serde_json::Map<String, serde_json::Value>;

/// The module, identity, Job policy and variables of one TerraformCluster, TerraformMachine or
/// TerraformMachinePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// The module image.
    pub source: Source,
    /// The TerraformClusterIdentity whose credentials the module runs with. A TerraformCluster
    /// must set it; a machine or pool falls back to its cluster's `spec.defaults.identityRef`,
    /// then the cluster's own `spec.identityRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<IdentityReference>,
    /// How this object's Jobs run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<JobPolicy>,
    /// Module variables, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::variables")]
    pub variables: Option<Variables>,
    /// ConfigMaps and Secrets labelled `captf.io/variables=true` whose keys become module
    /// variables, merged in order (a later source wins; inline `variables` win over all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub variables_from: Option<Vec<VariablesSource>>,
}

/// The metadata a template stamps onto the objects it creates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateObjectMeta {
    /// Labels copied onto each created object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// Annotations copied onto each created object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}
