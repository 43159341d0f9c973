//! Callers for endpoints behind Kubernetes authentication (the diagnostics endpoints of
//! INTERFACE-FACTS §3, "Component extras"): a ServiceAccount with a token, as a person or a tool
//! such as Prometheus would present, and a grant of non-resource URLs to it.

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Api;
use kube::api::PostParams;

/// Creates the ServiceAccount `name` in `ns` and answers a token for it (valid ten minutes).
pub async fn service_account_token(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(name.into());
    sas.create(&PostParams::default(), &sa).await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    sas.create_token_request(name, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .context("the TokenRequest answered no token")
}

/// Grants the ServiceAccount `sa` of `ns` the `verbs` on the non-resource `urls`: a ClusterRole
/// and its ClusterRoleBinding, both named `<ns>-<what>`. The authorizer sees the change within
/// seconds, not at once: callers retry until it does.
pub async fn grant_non_resource_urls(
    client: &kube::Client,
    ns: &str,
    sa: &str,
    what: &str,
    urls: &[&str],
    verbs: &[&str],
) -> anyhow::Result<()> {
    let name = format!("{ns}-{what}");
    let mut role = ClusterRole {
        rules: Some(vec![PolicyRule {
            non_resource_urls: Some(urls.iter().map(|u| (*u).to_owned()).collect()),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    role.metadata.name = Some(name.clone());
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await?;
    let mut binding = ClusterRoleBinding {
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(ns.into()),
            api_group: None,
        }]),
        ..ClusterRoleBinding::default()
    };
    binding.metadata.name = Some(name);
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}
