//! The runner inside a real module image, in a real Job pod: the Job controller makes the pod,
//! the process kubelet pulls the runner image and the module image from the loopback registry,
//! the init container copies the static runner into the shared volume, and the main container
//! runs it in the module image (OpenTofu at `/captf/runtime`, no shell, no libc) as UID 65532
//! with a read-only root, the per-run Secret mounted 0440, the `kubernetes` backend in-cluster,
//! events posted with the pod's service-account token and the in-cluster CA as the only root,
//! and the result read back from the pod's termination message.
//!
//! Needs root (the kubelet's namespaces and mounts), the test binaries (`make testbin`), the
//! `captf-testenv` binary (`cargo build -p captf-testenv`) and a static runner (see
//! [`testenv::testbin::static_runner`]); skipped with a message when one of the last two is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use testenv::TestEnv;
use testenv::image::{ModuleImage, push_module_image, push_runner_image};

/// The shared test environment with its registry and process kubelet.
fn shared() -> &'static TestEnv {
    let env = TestEnv::shared().expect("test environment starts");
    env.registry().expect("registry starts");
    env.kubelet().expect("kubelet starts");
    env
}

async fn create(client: &kube::Client, ns: &str, v: Value) {
    let api_version = v["apiVersion"].as_str().unwrap().to_owned();
    let kind = v["kind"].as_str().unwrap().to_owned();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

/// The runner ServiceAccount with exactly the static `captf-runner` ClusterRole's rules
/// (INTERFACE-FACTS §8), bound in the namespace.
async fn runner_rbac(client: &kube::Client, ns: &str) {
    create(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "captf-runner"}}),
    )
    .await;
    create(
        client,
        ns,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "captf-runner"},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"],
                 "verbs": ["get", "list", "create", "update", "delete"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["get", "create", "update"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
            ],
        }),
    )
    .await;
    create(client, ns, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "captf-runner"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "captf-runner"},
        "subjects": [{"kind": "ServiceAccount", "name": "captf-runner", "namespace": ns}],
    }))
    .await;
}

/// A Job shaped as INTERFACE-FACTS §6 describes CAPTF's.
fn runner_job(p: &JobParams<'_>) -> Value {
    let main_args = json!([
        "run",
        "--op=apply",
        "--bin=/captf/runtime",
        format!("--image={}", p.module_image),
        "--module=/captf/module",
        "--providers=/captf/providers",
        "--workdir=/captf/work",
        "--config=/captf/config",
        "--lock-timeout=300s",
        "--stop-timeout=570s",
        format!("--backend-config=secret_suffix={}", p.suffix),
        format!("--backend-config=namespace={}", p.ns),
        "--backend-config=in_cluster_config=true",
        r#"--backend-config=labels={"captf.io/managed"="true","clusterctl.cluster.x-k8s.io/move"=""}"#,
        format!("--event-object={}", p.event_object),
        format!("--job-name={}", p.name),
    ]);
    let locked_down = json!({
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": true,
    });
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": p.name},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": {"captf.io/managed": "true"}},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": "captf-runner",
                    "terminationGracePeriodSeconds": 600,
                    "securityContext": {"fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [
                        {"name": "runner", "emptyDir": {}},
                        {"name": "work", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                        {"name": "config", "secret": {"secretName": format!("captf-run-{}", p.name), "defaultMode": 288}},
                    ],
                    "initContainers": [{
                        "name": "runner", "image": p.runner_image,
                        "command": ["/runner", "copy", "/captf/bin/runner"],
                        "volumeMounts": [{"name": "runner", "mountPath": "/captf/bin"}],
                        "securityContext": {
                            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": true, "runAsUser": 65532, "readOnlyRootFilesystem": true,
                        },
                    }],
                    "containers": [{
                        "name": "source", "image": p.module_image,
                        "command": ["/captf/bin/runner"],
                        "args": main_args,
                        "terminationMessagePolicy": "File",
                        "env": [
                            {"name": "TF_IN_AUTOMATION", "value": "1"},
                            {"name": "TF_INPUT", "value": "0"},
                            {"name": "HOME", "value": "/captf/work"},
                            {"name": "TMPDIR", "value": "/tmp"},
                            {"name": "KUBE_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "CHECKPOINT_DISABLE", "value": "1"},
                        ],
                        "volumeMounts": [
                            {"name": "runner", "mountPath": "/captf/bin", "readOnly": true},
                            {"name": "work", "mountPath": "/captf/work"},
                            {"name": "tmp", "mountPath": "/tmp"},
                            {"name": "config", "mountPath": "/captf/config", "readOnly": true},
                        ],
                        "securityContext": locked_down,
                    }],
                },
            },
        },
    })
}

struct JobParams<'a> {
    name: &'a str,
    ns: &'a str,
    runner_image: &'a str,
    module_image: &'a str,
    suffix: &'a str,
    event_object: &'a str,
}

async fn job_outcome(jobs: &Api<Job>, name: &str, timeout: Duration) -> String {
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
                return c.type_;
            }
        }
        assert!(
            Instant::now() < deadline,
            "job {name} did not finish: {:#?}",
            job.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An apply Job runs the runner from the runner image inside the module image and succeeds:
/// the termination message is the result document, the state is written in-cluster, and the
/// events were posted with the pod's own ServiceAccount under the runner's RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_job_runs_the_runner_inside_the_module_image() {
    if common::tofu().is_none() {
        return;
    }
    let Some(runner) = testenv::testbin::static_runner() else {
        return;
    };
    let env = shared();
    let host = env.registry().unwrap().host();
    let started = Instant::now();
    let runner_image = push_runner_image(&host, "captf/runner", "test", &runner)
        .await
        .unwrap()
        .to_string();
    let module_dir = tempfile::tempdir().unwrap();
    std::fs::write(module_dir.path().join("main.tf"), common::MODULE).unwrap();
    let mirror = tempfile::tempdir().unwrap();
    let mut module = ModuleImage::new(module_dir.path(), "cluster");
    module.providers_dir = Some(mirror.path().to_path_buf());
    let module_image = push_module_image(&host, "captf/module-test", "v1", &module)
        .await
        .unwrap()
        .to_string();
    eprintln!("images pushed in {:?}", started.elapsed());

    let ns = env.namespace("runner-pod").await.unwrap();
    let client = env.client().await.unwrap();
    runner_rbac(&client, &ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    let name = "captf-c-owner-apply-a1-0a1b2c";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("captf-run-{name}")},
                "stringData": {
                    "main.tf.json": common::MAIN_TF_JSON,
                    "terraform.tfvars.json": common::tfvars("from-a-pod", "1", true),
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let suffix = contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, "owner");
    let event_object = format!("v1/ConfigMap/{ns}/owner/{uid}");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job: Job = serde_json::from_value(runner_job(&JobParams {
        name,
        ns: &ns,
        runner_image: &runner_image,
        module_image: &module_image,
        suffix: &suffix,
        event_object: &event_object,
    }))
    .unwrap();
    // The Job controller needs the namespace's default ServiceAccount machinery to settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let created = Instant::now();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let outcome = job_outcome(&jobs, name, Duration::from_secs(300)).await;
    eprintln!("Job created → {outcome} in {:?}", created.elapsed());

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
        .await
        .unwrap()
        .items
        .remove(0);
    let pod_name = pod.metadata.name.clone().unwrap();
    let log = env.kubelet().unwrap().logs(&ns, &pod_name, "source");
    assert_eq!(
        outcome,
        "Complete",
        "source log:\n{log}\ninit log:\n{}",
        env.kubelet().unwrap().logs(&ns, &pod_name, "runner")
    );
    let terminated = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap()
        .into_iter()
        .find(|c| c.name == "source")
        .and_then(|c| c.state?.terminated)
        .unwrap();
    assert_eq!(terminated.exit_code, 0);
    let message = terminated.message.unwrap();
    let result: Value = serde_json::from_str(&message).unwrap();
    assert!(
        log.trim_end().ends_with(message.trim_end()),
        "the result is the log's last line"
    );
    assert!(log.contains("Apply complete! Resources: 2 added"), "{log}");
    assert_eq!(result["op"], "apply");
    assert_eq!(
        result["image"],
        json!({"ref": module_image, "providersMirror": true})
    );
    assert_eq!(
        result["runtime"],
        json!({"command": ["/captf/runtime"], "version": "1.12.6"})
    );
    let steps: Vec<&str> = result["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["version", "init", "validate", "plan", "apply"]);
    assert_eq!(
        result["changes"],
        json!({"add": 2, "change": 0, "destroy": 0})
    );
    assert!(result["error"].is_null());

    let state = secrets
        .get(&format!("tfstate-default-{suffix}"))
        .await
        .unwrap();
    let labels = state.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("captf.io/managed").map(String::as_str),
        Some("true")
    );

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let mut posted: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid.as_str()))
        .collect();
    posted.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    let reasons: Vec<&str> = posted.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert_eq!(reasons.first(), Some(&"RunStarted"), "{reasons:?}");
    assert_eq!(reasons.last(), Some(&"RunFinished"), "{reasons:?}");
    assert!(reasons.contains(&"ResourcesChanged"), "{reasons:?}");
    let e = &posted[0];
    assert_eq!(e.reporting_controller.as_deref(), Some("captf.io/runner"));
    assert_eq!(e.reporting_instance.as_deref(), Some(pod_name.as_str()));
    let related = e.related.as_ref().unwrap();
    assert_eq!(
        (related.kind.as_deref(), related.name.as_deref()),
        (Some("Job"), Some(name))
    );
}
