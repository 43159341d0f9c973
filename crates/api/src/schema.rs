//! Schema helpers for the CRDs: patterns, free-form objects and the list-map markers Kubernetes
//! needs but schemars does not derive on its own.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A DNS-1123 subdomain (the names of most Kubernetes objects, including Secrets and ConfigMaps).
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A DNS-1123 label (namespace names).
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// `spec.variables`: a free JSON object of 1 to 256 module variables whose values keep their
/// JSON types.
pub fn variables(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "Module variables as one JSON object: each key is a variable the module declares, each value is passed with its JSON type. Keys are Terraform identifiers; names starting with captf_, the role's contract inputs and the module meta-arguments are reserved. Inline variables win over variablesFrom.",
        "minProperties": 1,
        "maxProperties": 256,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// `status.conditions`: Kubernetes conditions, a list-map keyed by `type`, at most 32.
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        <Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>::json_schema(generator);
    schema.insert("maxItems".into(), 32.into());
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema.insert(
        "description".into(),
        "The object's conditions, one per type. Ready summarises the others and is what Cluster API mirrors.".into(),
    );
    schema
}
