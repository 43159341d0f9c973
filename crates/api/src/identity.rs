//! TerraformClusterIdentity: cloud credentials and the namespaces allowed to use them (the book's
//! Identities and Credentials).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// The desired state of a TerraformClusterIdentity.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformClusterIdentity",
    plural = "terraformclusteridentities",
    status = "TerraformClusterIdentityStatus",
    category = "cluster-api",
    shortname = "tfci",
    doc = "A TerraformClusterIdentity names the Secret holding cloud credentials that module Jobs run with, and the namespaces allowed to use it.",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the credentials Secret exists"}"#,
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.secretRef.name","description":"Credentials Secret"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterIdentitySpec {
    /// The Secret holding the credentials. Its keys reach a Job as environment variables and as
    /// files under `/var/run/captf/credentials`. Whoever sets or changes this must be allowed to
    /// read that Secret.
    pub secret_ref: SecretReference,
    /// The namespaces whose objects may use this identity. Unset allows none; `selector: {}`
    /// allows every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<AllowedNamespaces>,
}

/// A Secret in a named namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = schema::DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// The Secret's namespace.
    #[schemars(length(min = 1, max = 63), regex(pattern = schema::DNS_LABEL_PATTERN))]
    pub namespace: String,
}

/// Namespaces allowed to use an identity: those listed, plus those the selector matches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.list) || has(self.selector)",
    "message": "allowedNamespaces must set list or selector; write selector: {} to allow every namespace"
}]))]
pub struct AllowedNamespaces {
    /// Namespace names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 63), regex(pattern = schema::DNS_LABEL_PATTERN)))]
    pub list: Option<Vec<String>>,
    /// A namespace label selector; `{}` matches every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// The observed state of a TerraformClusterIdentity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterIdentityStatus {
    /// Conditions: `Ready` tells whether the credentials Secret exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// Namespaces the credentials are mirrored into now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000), inner(length(min = 1, max = 63)))]
    pub namespaces: Option<Vec<String>>,
}
