//! TerraformMachineTemplate capacity from real images in the test registry (Machine Role
//! "Autoscale-from-zero", Image Contract "OCI labels"): the labels are read through a private
//! registry with a pull Secret, a malformed label gives `CapacityLabelInvalid` naming it and
//! writes nothing, and only a manifest and a config blob are ever fetched.
//!
//! Needs the test binaries (API server, etcd, crane, tofu); no runner and no kubelet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use manager::Context;
use manager::Settings;
use manager::runtime::metrics::Metrics;
use serde_json::{Value, json};
use testenv::TestEnv;
use testenv::image::{ModuleImage, push_module_image};
use testenv::registry_auth::AuthProxy;

const TMT: &str = "terraformmachinetemplates";

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Pushes the no-op machine module with `labels` as `repo:v1`; returns `host/repo:v1`.
async fn push(host: &str, repo: &str, labels: &[(&str, &str)]) -> String {
    let mut image = ModuleImage::new(repo_root().join("modules/noop/machine"), "machine");
    image.labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect::<BTreeMap<_, _>>();
    push_module_image(host, repo, "v1", &image).await.unwrap();
    format!("{host}/{repo}:v1")
}

fn start_manager(client: &Client, ns: &str) -> (tokio::sync::oneshot::Sender<()>, Metrics) {
    let settings = Settings {
        // No TerraformCluster or TerraformMachine here: no Job is ever made.
        runner_image: "127.0.0.1:1/captf/runner:unused".to_owned(),
        namespace: Some(ns.to_owned()),
        instance: "templates".to_owned(),
        ..Settings::default()
    };
    let metrics = Metrics::new();
    let ctx = Context::new(client.clone(), settings, metrics.clone());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        manager::controller::run(ctx, async move {
            let _ = rx.await;
        })
        .await;
    });
    (tx, metrics)
}

fn templates(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha1",
            "TerraformMachineTemplate",
        ),
        TMT,
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn template(client: &Client, ns: &str, name: &str, image: &str, pull_secret: Option<&str>) {
    let mut spec = json!({"source": {"image": image}});
    if let Some(s) = pull_secret {
        spec["jobs"] = json!({"imagePullSecrets": [{"name": s}]});
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformMachineTemplate",
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}},
    }))
    .unwrap();
    templates(client, ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

/// The template's status once its `CapacityResolved` has `reason` for `image`.
async fn resolved(client: &Client, ns: &str, name: &str, image: &str, reason: &str) -> Value {
    let api = templates(client, ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let obj = api.get(name).await.unwrap();
        let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
        let cond = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "CapacityResolved")
            .cloned();
        if let Some(c) = &cond
            && c["reason"] == reason
            && c["message"].as_str().is_some_and(|m| m.contains(image))
        {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: CapacityResolved never became {reason} for {image}; last: {cond:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn events(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    api.list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// The object's events once one has `reason`: the manager publishes a pass's events after it
/// patched the status, so a status just read may come before them. Panics after 30 s.
async fn events_with(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<(String, String)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let all = events(client, ns, name).await;
        if all.iter().any(|(r, _)| r == reason) {
            return all;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {reason} event on {name} in 30 s: {all:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn inspect_errors(metrics: &Metrics, reason: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .find(|l| {
            l.starts_with("captf_image_inspect_errors_total{")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

const CAPACITY: &str = r#"{"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}"#;
const NODE_INFO: &str = r#"{"architecture": "arm64", "operatingSystem": "linux"}"#;

/// Through a private registry: without the pull Secret the read is refused
/// (`ImageInspectFailed`, counted once as `pull_secret`); with it the labels land in
/// `status.capacity` and `status.nodeInfo`; only manifests and the config blob are fetched; a new
/// image is read again.
#[tokio::test(flavor = "multi_thread")]
async fn capacity_from_a_private_registry_with_a_pull_secret() {
    let env = TestEnv::shared().expect("test environment starts");
    let registry = env.registry().expect("registry starts");
    let client = env.client().await.unwrap();
    let ns = env.namespace("tmt-private").await.unwrap();
    let host = registry.host();
    let repo = format!("captf/{ns}-labelled");
    push(
        &host,
        &repo,
        &[
            ("io.captf.capacity", CAPACITY),
            ("io.captf.node-info", NODE_INFO),
        ],
    )
    .await;
    let proxy = AuthProxy::start(&host, "puller", "s3cret-pull").unwrap();
    let image = format!("{}/{repo}:v1", proxy.host());
    let (stop, metrics) = start_manager(&client, &ns);

    // The Secret is named but missing: a clear failure, nothing written.
    template(&client, &ns, "private", &image, Some("regcred")).await;
    let status = resolved(&client, &ns, "private", &image, "ImageInspectFailed").await;
    assert!(
        status.get("capacity").is_none_or(Value::is_null),
        "{status}"
    );
    let message = status["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("regcred"), "{message}");
    assert!(inspect_errors(&metrics, "pull_secret") >= 1.0);
    events_with(&client, &ns, "private", "ImageInspectFailed").await;

    let auth = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        "puller:s3cret-pull",
    );
    let config = json!({"auths": {proxy.host(): {"auth": auth}}}).to_string();
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config},
    }))
    .unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let status = resolved(&client, &ns, "private", &image, "CapacityResolved").await;
    assert_eq!(
        status["capacity"],
        json!({"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"})
    );
    assert_eq!(
        status["nodeInfo"],
        json!({"architecture": "arm64", "operatingSystem": "linux"})
    );
    let all = events_with(&client, &ns, "private", "CapacityResolved").await;
    assert!(
        all.iter().all(|(_, note)| !note.contains("s3cret-pull")),
        "no credential in an event: {all:?}"
    );
    let requests = proxy.requests();
    assert!(
        requests.iter().any(|r| r.contains("/manifests/")),
        "{requests:?}"
    );
    // The blobs fetched are config blobs only: one per successful read.
    let blob_gets = requests
        .iter()
        .filter(|r| r.starts_with("GET") && r.contains("/blobs/"))
        .count();
    assert_eq!(blob_gets, 1, "one config blob, no layer: {requests:?}");

    // A new image is read again; the same one is not.
    let other = push(
        &host,
        &format!("{repo}-small"),
        &[("io.captf.capacity", r#"{"cpu":"1"}"#)],
    )
    .await;
    let other = other.replacen(&host, &proxy.host(), 1);
    templates(&client, &ns)
        .patch(
            "private",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"source": {"image": other}}}}})),
        )
        .await
        .unwrap();
    let status = resolved(&client, &ns, "private", &other, "CapacityResolved").await;
    assert_eq!(status["capacity"], json!({"cpu": "1"}));
    assert!(
        status.get("nodeInfo").is_none_or(Value::is_null),
        "{status}"
    );
    let _ = stop.send(());
}

/// A malformed label: `CapacityResolved=False/CapacityLabelInvalid` naming the label, no
/// capacity and no node info written (though the other label is valid), counted once as
/// `label_invalid`; an image without the labels is `CapacityNotDeclared`.
#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_label_writes_nothing() {
    let env = TestEnv::shared().expect("test environment starts");
    let registry = env.registry().expect("registry starts");
    let client = env.client().await.unwrap();
    let ns = env.namespace("tmt-bad").await.unwrap();
    let host = registry.host();
    let bad = push(
        &host,
        &format!("captf/{ns}-bad"),
        &[
            ("io.captf.capacity", r#"{"cpu": "4", "memory": "-2Gi"}"#),
            ("io.captf.node-info", NODE_INFO),
        ],
    )
    .await;
    let plain = push(&host, &format!("captf/{ns}-plain"), &[]).await;
    let (stop, metrics) = start_manager(&client, &ns);
    template(&client, &ns, "bad", &bad, None).await;
    template(&client, &ns, "plain", &plain, None).await;

    let status = resolved(&client, &ns, "bad", &bad, "CapacityLabelInvalid").await;
    let cond = &status["conditions"][0];
    assert_eq!(cond["status"], "False");
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.contains("io.captf.capacity") && message.contains("memory"),
        "{message}"
    );
    assert!(
        status.get("capacity").is_none_or(Value::is_null),
        "{status}"
    );
    assert!(
        status.get("nodeInfo").is_none_or(Value::is_null),
        "{status}"
    );
    assert!((inspect_errors(&metrics, "label_invalid") - 1.0).abs() < f64::EPSILON);

    let status = resolved(&client, &ns, "plain", &plain, "CapacityNotDeclared").await;
    assert_eq!(status["conditions"][0]["status"], "True");
    assert!(
        status.get("capacity").is_none_or(Value::is_null),
        "{status}"
    );
    let _ = stop.send(());
}
