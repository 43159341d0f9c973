//! Jobs end to end: the real Job controller turns them into Pods, the process kubelet runs them,
//! and a module image's OpenTofu talks to the real API server through the `kubernetes` backend as
//! the pod's ServiceAccount, under real RBAC.
//!
//! Needs root (namespaces, mounts) and the test binaries (`make testbin`).
#![allow(clippy::unwrap_used)]

mod kubelet_common;

use std::io::Read as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubelet_common::shared;
use serde_json::json;
use testenv::image::{ModuleImage, push_module_image};
use tokio::sync::OnceCell;

const MODULE: &str = r#"
terraform {
  backend "kubernetes" {}
}

variable "greeting" {
  type = string
}

resource "terraform_data" "hello" {
  input = var.greeting
}

output "greeting" {
  value = terraform_data.hello.output
}
"#;

/// The module image (built and pushed once per test binary).
async fn module_image() -> &'static str {
    static IMAGE: OnceCell<String> = OnceCell::const_new();
    IMAGE
        .get_or_init(|| async {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("main.tf"), MODULE).unwrap();
            let started = Instant::now();
            let r = push_module_image(
                &shared().registry.host(),
                "captf/module-hello",
                "v1",
                &ModuleImage::new(dir.path(), "cluster"),
            )
            .await
            .unwrap();
            eprintln!("module image built and pushed in {:?}", started.elapsed());
            r.to_string()
        })
        .await
}

async fn apply<K>(api: &Api<K>, value: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).expect("valid object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create")
}

/// A ServiceAccount `name`, with a Role on Secrets and Leases when `allowed`.
async fn service_account(client: &kube::Client, ns: &str, name: &str, allowed: bool) {
    let dynamic = |kind: &str, api_version: &str, plural: &str| {
        let gvk = kube::api::GroupVersionKind::gvk(
            api_version.split_once('/').map_or("", |(g, _)| g),
            api_version.rsplit('/').next().unwrap(),
            kind,
        );
        let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), ns, &ar)
    };
    let create = |api: Api<kube::api::DynamicObject>, v: serde_json::Value| async move {
        let obj: kube::api::DynamicObject = serde_json::from_value(v).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
    };
    create(
        dynamic("ServiceAccount", "v1", "serviceaccounts"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
    )
    .await;
    if !allowed {
        return;
    }
    create(
        dynamic("Role", "rbac.authorization.k8s.io/v1", "roles"),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            ],
        }),
    )
    .await;
    create(
        dynamic(
            "RoleBinding",
            "rbac.authorization.k8s.io/v1",
            "rolebindings",
        ),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        }),
    )
    .await;
}

/// A Job shaped like CAPTF's (INTERFACE-FACTS §6): non-root, read-only root, emptyDir work and
/// tmp, the run's inputs from a Secret mounted 0440 and read through `fsGroup`; `tofu init` as
/// the init container and `tofu apply` as the main one, sharing `TF_DATA_DIR` in the work volume
/// (the image has no shell, and the runner binary is another issue).
fn tofu_job(name: &str, ns: &str, image: &str, sa: &str, suffix: &str) -> serde_json::Value {
    let env = json!([
        {"name": "TF_IN_AUTOMATION", "value": "1"},
        {"name": "TF_INPUT", "value": "0"},
        {"name": "HOME", "value": "/captf/work"},
        {"name": "TMPDIR", "value": "/tmp"},
        {"name": "TF_DATA_DIR", "value": "/captf/work/.terraform"},
        {"name": "CHECKPOINT_DISABLE", "value": "1"},
        {"name": "KUBE_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]);
    let mounts = json!([
        {"name": "work", "mountPath": "/captf/work"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "config", "mountPath": "/captf/config", "readOnly": true},
    ]);
    let sc = json!({
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": true, "runAsNonRoot": true,
    });
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": {"captf.io/managed": "true"}},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": sa,
                    "terminationGracePeriodSeconds": 600,
                    "securityContext": {"fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [
                        {"name": "work", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                        {"name": "config", "secret": {"secretName": format!("{name}-config"), "defaultMode": 288}},
                    ],
                    "initContainers": [{
                        "name": "init", "image": image,
                        "command": ["/captf/runtime"],
                        "args": ["init", "-input=false", "-no-color",
                                 format!("-backend-config=secret_suffix={suffix}"),
                                 format!("-backend-config=namespace={ns}"),
                                 "-backend-config=in_cluster_config=true"],
                        "workingDir": "/captf/module",
                        "env": env, "volumeMounts": mounts, "securityContext": sc,
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                    }],
                    "containers": [{
                        "name": "apply", "image": image,
                        "command": ["/captf/runtime"],
                        "args": ["apply", "-auto-approve", "-input=false", "-no-color",
                                 "-var-file=/captf/config/terraform.tfvars.json"],
                        "workingDir": "/captf/module",
                        "env": env, "volumeMounts": mounts, "securityContext": sc,
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                    }],
                },
            },
        },
    })
}

async fn inputs_secret(client: &kube::Client, ns: &str, job: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    apply(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{job}-config")},
               "stringData": {"terraform.tfvars.json": "{\"greeting\": \"hello from a pod\"}"}}),
    )
    .await;
}

/// Waits for the Job's `Complete` or `Failed` condition; returns its type and reason.
async fn job_outcome(jobs: &Api<Job>, name: &str, timeout: Duration) -> (String, Option<String>) {
    let deadline = Instant::now() + timeout;
    loop {
        let job = jobs.get(name).await.unwrap();
        for c in job
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
        {
            if (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True" {
                return (c.type_, c.reason);
            }
        }
        assert!(
            Instant::now() < deadline,
            "job {name} did not finish: {:#?}",
            job.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn job_pod(client: &kube::Client, ns: &str, job: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "one pod (backoffLimit 0)");
    list.items.into_iter().next().unwrap()
}

/// The module Job runs to completion through the Job controller and the process kubelet, and its
/// state lands in `tfstate-default-<suffix>`, gzip-compressed state v4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_job_runs_to_completion_and_writes_its_state_secret() {
    let sh = shared();
    let image = module_image().await;
    let ns = sh.env.namespace("kubelet-job").await.unwrap();
    let client = sh.env.client().await.unwrap();
    service_account(&client, &ns, "runner", true).await;
    inputs_secret(&client, &ns, "apply").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);

    let suffix = "0123456789abcdef-c";
    let created = Instant::now();
    apply(&jobs, tofu_job("apply", &ns, image, "runner", suffix)).await;
    let (outcome, reason) = job_outcome(&jobs, "apply", Duration::from_secs(180)).await;
    let took = created.elapsed();
    let pod = job_pod(&client, &ns, "apply").await;
    let pod_name = pod.metadata.name.clone().unwrap();
    assert_eq!(
        outcome,
        "Complete",
        "reason {reason:?}\ninit log:\n{}\napply log:\n{}",
        sh.kubelet.logs(&ns, &pod_name, "init"),
        sh.kubelet.logs(&ns, &pod_name, "apply")
    );
    let status = pod.status.clone().unwrap();
    let started = status.start_time.clone().unwrap().0;
    let pod_created = pod.metadata.creation_timestamp.clone().unwrap().0;
    eprintln!(
        "Job creation → Complete: {took:?} (pod created → started: {:?})",
        started.duration_since(pod_created)
    );
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let digest = image.split('@').nth(1).unwrap();
    for cs in status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
    {
        assert!(cs.image_id.ends_with(digest), "imageID {}", cs.image_id);
    }
    let apply_log = sh.kubelet.logs(&ns, &pod_name, "apply");
    assert!(
        apply_log.contains("Apply complete! Resources: 1 added"),
        "{apply_log}"
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let state = secrets
        .get(&format!("tfstate-default-{suffix}"))
        .await
        .unwrap();
    let labels = state.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("tfstate").map(String::as_str), Some("true"));
    assert_eq!(
        labels.get("tfstateSecretSuffix").map(String::as_str),
        Some(suffix)
    );
    let gz = state.data.unwrap().remove("tfstate").unwrap().0;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["version"], 4);
    assert_eq!(doc["outputs"]["greeting"]["value"], "hello from a pod");
}

/// The same Job under a ServiceAccount without any permission on Secrets fails with the
/// backend's authorization error: RBAC is real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_job_without_secret_permissions_fails_with_the_authorization_error() {
    let sh = shared();
    let image = module_image().await;
    let ns = sh.env.namespace("kubelet-rbac").await.unwrap();
    let client = sh.env.client().await.unwrap();
    service_account(&client, &ns, "nobody", false).await;
    inputs_secret(&client, &ns, "denied").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    apply(
        &jobs,
        tofu_job("denied", &ns, image, "nobody", "fedcba9876543210-c"),
    )
    .await;
    let (outcome, _) = job_outcome(&jobs, "denied", Duration::from_secs(180)).await;
    assert_eq!(outcome, "Failed");
    let pod = job_pod(&client, &ns, "denied").await;
    let status = pod.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let init = &status.init_container_statuses.unwrap()[0];
    let t = init.state.as_ref().unwrap().terminated.clone().unwrap();
    assert_ne!(t.exit_code, 0);
    let message = t.message.unwrap_or_default();
    let expected = format!("User \"system:serviceaccount:{ns}:nobody\" cannot");
    assert!(
        message.contains("forbidden") && message.contains(&expected),
        "termination message (from the log):\n{message}"
    );
    assert!(
        status.container_statuses.unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .is_none(),
        "the main container never ran"
    );
}

/// A Job past its `activeDeadlineSeconds` is stopped by the Job controller (which deletes its
/// pod: the kubelet sends SIGTERM) and ends `DeadlineExceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_deadline_ends_deadline_exceeded() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-job-deadline").await.unwrap();
    let client = sh.env.client().await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    // The `default` ServiceAccount must exist before the Job controller can create pods.
    tokio::time::sleep(Duration::from_millis(500)).await;
    apply(
        &jobs,
        json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "slow"},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": 4,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{"name": "main", "image": sh.fixture, "args": ["wait-signal"]}],
                }},
            },
        }),
    )
    .await;
    let created = Instant::now();
    let (outcome, reason) = job_outcome(&jobs, "slow", Duration::from_secs(60)).await;
    assert_eq!(
        (outcome.as_str(), reason.as_deref()),
        ("Failed", Some("DeadlineExceeded"))
    );
    assert!(created.elapsed() >= Duration::from_secs(4));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod_names: Vec<String> = std::fs::read_dir(sh.kubelet.state_dir.join("logs"))
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().to_string_lossy().into_owned();
            let rest = n.strip_prefix(&format!("{ns}_"))?;
            Some(rest.rsplit_once('_')?.0.to_owned())
        })
        .collect();
    assert_eq!(pod_names.len(), 1, "{pod_names:?}");
    assert!(
        sh.kubelet
            .logs(&ns, &pod_names[0], "main")
            .contains("received SIGTERM"),
        "the container got SIGTERM"
    );
    // The pod is gone: the kubelet deleted it after its containers stopped.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pods.get_opt(&pod_names[0]).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "pod still there");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
