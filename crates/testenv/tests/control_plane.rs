//! The control plane is a real Kubernetes API: CRDs installed and validated by the API server,
//! RBAC enforced, garbage collection running.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use std::time::Duration;
use testenv::TestEnv;

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn captf_crds_are_served_and_validated_by_the_api_server() {
    let env = TestEnv::shared().unwrap();
    let ns = env.namespace("crds").await.unwrap();
    let client = env.client().await.unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1alpha1",
        "TerraformCluster",
    );
    let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, &ns, &ar);

    let valid: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformCluster",
        "metadata": {"name": "ok"},
        "spec": {"source": {"image": "registry.example.com/noop:v1"}, "identityRef": {"name": "id"}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &valid).await.unwrap();

    // An out-of-range deadline, an unknown enum value and a missing identityRef (a CEL rule) are
    // each refused by the API server with the field named.
    for (name, spec, field) in [
        (
            "deadline",
            json!({"source": {"image": "x:1"}, "identityRef": {"name": "id"}, "jobs": {"activeDeadlineSeconds": 86401}}),
            "activeDeadlineSeconds",
        ),
        (
            "policy",
            json!({"source": {"image": "x:1"}, "identityRef": {"name": "id"}, "applyPolicy": "Sometimes"}),
            "applyPolicy",
        ),
        (
            "identity",
            json!({"source": {"image": "x:1"}}),
            "identityRef",
        ),
        (
            "lock",
            json!({"source": {"image": "x:1"}, "identityRef": {"name": "id"}, "jobs": {"activeDeadlineSeconds": 60, "lockTimeoutSeconds": 60}}),
            "lockTimeoutSeconds",
        ),
    ] {
        let obj: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "TerraformCluster",
            "metadata": {"name": name},
            "spec": spec
        }))
        .unwrap();
        let err = api
            .create(&PostParams::default(), &obj)
            .await
            .expect_err(name);
        assert!(err.to_string().contains(field), "{name}: {err}");
    }
}

#[tokio::test]
async fn cluster_api_crds_are_installed() {
    let env = TestEnv::shared().unwrap();
    let client = env.client().await.unwrap();
    for kind in ["Cluster", "Machine", "MachinePool"] {
        let gvk = kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
        kube::discovery::pinned_kind(&client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
}

#[tokio::test]
async fn garbage_collection_removes_a_secret_owned_by_a_deleted_object() {
    let env = TestEnv::shared().unwrap();
    let ns = env.namespace("gc").await.unwrap();
    let client = env.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client, &ns);
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = cms.create(&PostParams::default(), &owner).await.unwrap();

    let mut owned = Secret::default();
    owned.metadata.name = Some("owned".into());
    owned.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: owner.name_any(),
            uid: owner.uid().unwrap(),
            ..Default::default()
        },
    ]);
    secrets
        .create(&PostParams::default(), &owned)
        .await
        .unwrap();

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually("the owned Secret to be collected", || {
        let secrets = secrets.clone();
        async move { secrets.get_opt("owned").await.unwrap().is_none() }
    })
    .await;
}

#[tokio::test]
async fn rbac_is_enforced_for_service_accounts() {
    let env = TestEnv::shared().unwrap();
    let ns = env.namespace("rbac").await.unwrap();
    let client = env.client().await.unwrap();
    let reviews: Api<k8s_openapi::api::authorization::v1::SubjectAccessReview> = Api::all(client);
    let review: k8s_openapi::api::authorization::v1::SubjectAccessReview =
        serde_json::from_value(json!({
            "spec": {
                "user": format!("system:serviceaccount:{ns}:default"),
                "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "secrets"}
            }
        }))
        .unwrap();
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    assert!(
        !answer.status.unwrap().allowed,
        "the default ServiceAccount must not read Secrets"
    );
}
