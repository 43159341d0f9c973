//! Keyless identity: the variables a Job's runtime gets for web-identity federation (spec:
//! Identities and Credentials, "Keyless identity"; Runtime Environment).
//!
//! A keyless TerraformClusterIdentity gives its Jobs a projected ServiceAccount token instead of
//! a Secret. Cloud SDKs and Terraform providers find such a token through variables of their own:
//! [`WebIdentity::environment`] lists them for the clouds the identity configures, and
//! [`WebIdentity::gcp_credential_config`] is the external-account credential file Google's
//! libraries read instead of a variable.

use serde_json::json;

/// Where a keyless identity's projected token is mounted.
pub const TOKEN_DIR: &str = "/var/run/captf/identity";
/// The token file.
pub const TOKEN_FILE: &str = "/var/run/captf/identity/token";
/// The Google external-account credential file's name, in the runner's work directory.
pub const GCP_CREDENTIALS_FILE: &str = "gcp-credentials.json";

/// Every variable [`WebIdentity::environment`] may set, sorted.
pub const EXPORTED: [&str; 12] = [
    "ARM_CLIENT_ID",
    "ARM_OIDC_TOKEN_FILE_PATH",
    "ARM_TENANT_ID",
    "ARM_USE_OIDC",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
    "AZURE_CLIENT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_TENANT_ID",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// A keyless identity as the runner receives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebIdentity {
    /// The projected token file.
    pub token_file: String,
    /// AWS: assume a role with the token.
    pub aws: Option<Aws>,
    /// Azure: sign in as an application with a federated credential.
    pub azure: Option<Azure>,
    /// Google Cloud: exchange the token at a workload identity pool provider.
    pub gcp: Option<Gcp>,
}

/// AWS web-identity federation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aws {
    /// `AWS_ROLE_ARN`.
    pub role_arn: String,
    /// `AWS_ROLE_SESSION_NAME`, when given.
    pub role_session_name: Option<String>,
}

/// Azure workload identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Azure {
    /// The application (client) ID.
    pub client_id: String,
    /// The directory (tenant) ID.
    pub tenant_id: String,
    /// `AZURE_AUTHORITY_HOST`, when given.
    pub authority_host: Option<String>,
}

/// Google Cloud workload identity federation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gcp {
    /// `projects/<number>/locations/global/workloadIdentityPools/<pool>/providers/<provider>`.
    pub workload_identity_provider: String,
    /// The service account to impersonate after the exchange, when given.
    pub service_account_email: Option<String>,
}

impl WebIdentity {
    /// The variables the runtime gets, sorted by name: for each cloud configured, those its SDKs
    /// and Terraform providers read for web-identity federation; none when no cloud is (the token
    /// file is still there for a module that reads it itself). `gcp_credentials_path` is where
    /// the runner writes [`Self::gcp_credential_config`].
    pub fn environment(&self, gcp_credentials_path: &str) -> Vec<(String, String)> {
        let token = self.token_file.as_str();
        let mut out: Vec<(String, String)> = Vec::new();
        let mut set = |name: &str, value: &str| out.push((name.to_owned(), value.to_owned()));
        if let Some(aws) = &self.aws {
            set("AWS_ROLE_ARN", &aws.role_arn);
            set("AWS_WEB_IDENTITY_TOKEN_FILE", token);
            if let Some(name) = non_empty(aws.role_session_name.as_deref()) {
                set("AWS_ROLE_SESSION_NAME", name);
            }
        }
        if let Some(azure) = &self.azure {
            set("AZURE_CLIENT_ID", &azure.client_id);
            set("AZURE_TENANT_ID", &azure.tenant_id);
            set("AZURE_FEDERATED_TOKEN_FILE", token);
            if let Some(host) = non_empty(azure.authority_host.as_deref()) {
                set("AZURE_AUTHORITY_HOST", host);
            }
            set("ARM_CLIENT_ID", &azure.client_id);
            set("ARM_TENANT_ID", &azure.tenant_id);
            set("ARM_USE_OIDC", "true");
            set("ARM_OIDC_TOKEN_FILE_PATH", token);
        }
        if self.gcp.is_some() {
            set("GOOGLE_APPLICATION_CREDENTIALS", gcp_credentials_path);
        }
        out.sort();
        out
    }

    /// Google's external-account credential file: it reads the token from [`Self::token_file`],
    /// exchanges it at the pool provider, and impersonates the service account when one is
    /// given. `None` without Google.
    pub fn gcp_credential_config(&self) -> Option<String> {
        let gcp = self.gcp.as_ref()?;
        let mut doc = json!({
            "type": "external_account",
            "audience": format!("//iam.googleapis.com/{}", gcp.workload_identity_provider),
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": "https://sts.googleapis.com/v1/token",
            "credential_source": {"file": self.token_file},
        });
        if let Some(email) = non_empty(gcp.service_account_email.as_deref()) {
            doc["service_account_impersonation_url"] = json!(format!(
                "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{email}:generateAccessToken"
            ));
        }
        serde_json::to_string_pretty(&doc).ok()
    }
}

fn non_empty(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const CREDS: &str = "/captf/work/gcp-credentials.json";

    fn every_cloud() -> WebIdentity {
        WebIdentity {
            token_file: TOKEN_FILE.into(),
            aws: Some(Aws {
                role_arn: "arn:aws:iam::123456789012:role/captf".into(),
                role_session_name: Some("captf".into()),
            }),
            azure: Some(Azure {
                client_id: "11111111-1111-1111-1111-111111111111".into(),
                tenant_id: "22222222-2222-2222-2222-222222222222".into(),
                authority_host: Some("https://login.microsoftonline.us/".into()),
            }),
            gcp: Some(Gcp {
                workload_identity_provider:
                    "projects/42/locations/global/workloadIdentityPools/pool/providers/k8s".into(),
                service_account_email: Some("captf@project.iam.gserviceaccount.com".into()),
            }),
        }
    }

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn no_cloud_exports_nothing_and_writes_no_file() {
        let id = WebIdentity {
            token_file: TOKEN_FILE.into(),
            ..WebIdentity::default()
        };
        assert!(id.environment(CREDS).is_empty());
        assert_eq!(id.gcp_credential_config(), None);
    }

    #[test]
    fn aws_gets_the_role_and_the_token_file() {
        let mut id = every_cloud();
        id.azure = None;
        id.gcp = None;
        assert_eq!(
            id.environment(CREDS),
            vec![
                (
                    "AWS_ROLE_ARN".to_owned(),
                    "arn:aws:iam::123456789012:role/captf".to_owned()
                ),
                ("AWS_ROLE_SESSION_NAME".to_owned(), "captf".to_owned()),
                (
                    "AWS_WEB_IDENTITY_TOKEN_FILE".to_owned(),
                    TOKEN_FILE.to_owned()
                ),
            ]
        );
        id.aws.as_mut().unwrap().role_session_name = Some(String::new());
        assert_eq!(
            names(&id.environment(CREDS)),
            ["AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"]
        );
    }

    #[test]
    fn azure_gets_the_sdk_and_the_provider_variables() {
        let mut id = every_cloud();
        id.aws = None;
        id.gcp = None;
        let env = id.environment(CREDS);
        assert_eq!(
            names(&env),
            [
                "ARM_CLIENT_ID",
                "ARM_OIDC_TOKEN_FILE_PATH",
                "ARM_TENANT_ID",
                "ARM_USE_OIDC",
                "AZURE_AUTHORITY_HOST",
                "AZURE_CLIENT_ID",
                "AZURE_FEDERATED_TOKEN_FILE",
                "AZURE_TENANT_ID",
            ]
        );
        let get = |n: &str| env.iter().find(|(k, _)| k == n).unwrap().1.as_str();
        assert_eq!(get("ARM_USE_OIDC"), "true");
        assert_eq!(get("ARM_OIDC_TOKEN_FILE_PATH"), TOKEN_FILE);
        assert_eq!(get("AZURE_FEDERATED_TOKEN_FILE"), TOKEN_FILE);
        assert_eq!(get("ARM_CLIENT_ID"), get("AZURE_CLIENT_ID"));
        assert_eq!(get("ARM_TENANT_ID"), get("AZURE_TENANT_ID"));
    }

    #[test]
    fn every_cloud_at_once_is_sorted_and_within_the_exported_names() {
        let env = every_cloud().environment(CREDS);
        let got = names(&env);
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(got, sorted);
        assert_eq!(got.len(), 12);
        assert!(got.iter().all(|n| EXPORTED.contains(n)), "{got:?}");
        let mut exported = EXPORTED.to_vec();
        exported.sort_unstable();
        assert_eq!(exported, EXPORTED);
    }

    #[test]
    fn google_reads_an_external_account_file_that_reads_the_token() {
        let mut id = every_cloud();
        id.aws = None;
        id.azure = None;
        assert_eq!(
            id.environment(CREDS),
            vec![(
                "GOOGLE_APPLICATION_CREDENTIALS".to_owned(),
                CREDS.to_owned()
            )]
        );
        let doc: serde_json::Value =
            serde_json::from_str(&id.gcp_credential_config().unwrap()).unwrap();
        assert_eq!(doc["type"], "external_account");
        assert_eq!(
            doc["audience"],
            "//iam.googleapis.com/projects/42/locations/global/workloadIdentityPools/pool/providers/k8s"
        );
        assert_eq!(
            doc["subject_token_type"],
            "urn:ietf:params:oauth:token-type:jwt"
        );
        assert_eq!(doc["token_url"], "https://sts.googleapis.com/v1/token");
        assert_eq!(doc["credential_source"]["file"], TOKEN_FILE);
        assert_eq!(
            doc["service_account_impersonation_url"],
            "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/captf@project.iam.gserviceaccount.com:generateAccessToken"
        );
        id.gcp.as_mut().unwrap().service_account_email = None;
        let doc: serde_json::Value =
            serde_json::from_str(&id.gcp_credential_config().unwrap()).unwrap();
        assert!(doc.get("service_account_impersonation_url").is_none());
    }
}
