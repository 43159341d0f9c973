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
    doc = "A TerraformClusterIdentity names the cloud credentials module Jobs run with (a Secret, or a ServiceAccount token for web-identity federation) and the namespaces allowed to use it.",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the credentials Secret exists, or the identity is keyless"}"#,
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.secretRef.name","description":"Credentials Secret"}"#,
    printcolumn = r#"{"name":"ServiceAccount","type":"string","jsonPath":".spec.workloadIdentity.serviceAccountName","description":"The ServiceAccount a keyless identity's Jobs run as"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.secretRef) != has(self.workloadIdentity)",
    "message": "set exactly one of secretRef (a Secret of credentials) and workloadIdentity (a ServiceAccount token, keyless)"
}]))]
pub struct TerraformClusterIdentitySpec {
    /// The Secret holding the credentials. Its keys reach a Job as environment variables and as
    /// files under `/var/run/captf/credentials`. Whoever sets or changes this must be allowed to
    /// read that Secret. Exactly one of `secretRef` and `workloadIdentity` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// Keyless identity: no Secret; Jobs run as a ServiceAccount of their own namespace with a
    /// projected token for `audience` at `/var/run/captf/identity/token`, and the runner exports
    /// the variables the cloud SDKs read for web-identity federation. Whoever sets or changes this,
    /// or the allowed namespaces of a keyless identity, must be allowed to create tokens for that
    /// ServiceAccount in those namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_identity: Option<WorkloadIdentity>,
    /// The namespaces whose objects may use this identity. Unset allows none; `selector: {}`
    /// allows every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<AllowedNamespaces>,
}

impl TerraformClusterIdentitySpec {
    /// The keyless part, when this identity is keyless.
    pub fn keyless(&self) -> Option<&WorkloadIdentity> {
        self.workload_identity.as_ref()
    }
}

/// Keyless identity (web-identity federation): the ServiceAccount Jobs run as, the audience of
/// their projected token, and what each cloud's SDK needs besides the token.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadIdentity {
    /// The ServiceAccount, in each namespace using the identity, that its Jobs run as. It must
    /// exist there and carry `captf.io/runner=true`; the token's subject is
    /// `system:serviceaccount:<namespace>:<name>`, which the cloud's trust policy matches.
    #[schemars(length(min = 1, max = 253), regex(pattern = schema::DNS_SUBDOMAIN_PATTERN))]
    pub service_account_name: String,
    /// The token's audience (`aud`), as the cloud's trust expects: for example
    /// `sts.amazonaws.com`, `api://AzureADTokenExchange`, or the audience of a Google workload
    /// identity pool provider.
    #[schemars(length(min = 1, max = 1024))]
    pub audience: String,
    /// The token's requested lifetime in seconds; the kubelet renews it at 80% of it. Default
    /// 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 600, max = 86400))]
    pub expiration_seconds: Option<i64>,
    /// AWS: the role to assume with the token (`AWS_ROLE_ARN`, `AWS_WEB_IDENTITY_TOKEN_FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsWebIdentity>,
    /// Azure: the application to sign in as (`AZURE_*`, and `ARM_*` with `ARM_USE_OIDC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureWorkloadIdentity>,
    /// Google Cloud: the workload identity pool provider to exchange the token with
    /// (`GOOGLE_APPLICATION_CREDENTIALS`, an external-account credential file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<GcpWorkloadIdentity>,
}

/// The token's lifetime when `expirationSeconds` is unset.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

impl WorkloadIdentity {
    /// `expirationSeconds`, or its default.
    pub fn expiration_seconds_or_default(&self) -> i64 {
        self.expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS)
    }
}

/// AWS web-identity federation (IAM OIDC provider trust).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsWebIdentity {
    /// The IAM role to assume (`AWS_ROLE_ARN`).
    #[serde(rename = "roleARN")]
    #[schemars(
        length(min = 20, max = 2048),
        regex(pattern = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/\S+$")
    )]
    pub role_arn: String,
    /// The session name (`AWS_ROLE_SESSION_NAME`); unset lets the SDK choose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 64), regex(pattern = r"^[\w+=,.@-]+$"))]
    pub role_session_name: Option<String>,
}

/// Azure workload identity (federated credential of an application or managed identity).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureWorkloadIdentity {
    /// The application (client) ID (`AZURE_CLIENT_ID`, `ARM_CLIENT_ID`).
    #[serde(rename = "clientID")]
    #[schemars(regex(
        pattern = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    ))]
    pub client_id: String,
    /// The directory (tenant) ID (`AZURE_TENANT_ID`, `ARM_TENANT_ID`).
    #[serde(rename = "tenantID")]
    #[schemars(regex(
        pattern = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    ))]
    pub tenant_id: String,
    /// The Microsoft Entra authority (`AZURE_AUTHORITY_HOST`), for a sovereign cloud; unset lets
    /// the SDK use the public cloud's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 9, max = 253), regex(pattern = r"^https://[^\s/]+/?$"))]
    pub authority_host: Option<String>,
}

/// Google Cloud workload identity federation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcpWorkloadIdentity {
    /// The pool provider's resource name:
    /// `projects/<number>/locations/global/workloadIdentityPools/<pool>/providers/<provider>`.
    #[schemars(
        length(max = 512),
        regex(
            pattern = r"^projects/[0-9]+/locations/global/workloadIdentityPools/[a-z0-9-]+/providers/[a-z0-9-]+$"
        )
    )]
    pub workload_identity_provider: String,
    /// A service account to impersonate after the exchange; unset uses the federated principal
    /// directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 254), regex(pattern = r"^[^@\s]+@[^@\s]+$"))]
    pub service_account_email: Option<String>,
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
