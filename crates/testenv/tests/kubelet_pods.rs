//! The process kubelet against the real API server: pods bound, run as real processes with
//! their volumes, environment and security context, status written as a kubelet does, SIGTERM
//! and SIGKILL on deletion, `activeDeadlineSeconds`, pull and configuration errors.
//!
//! Needs root (namespaces, mounts) and the test binaries (`make testbin`).
#![allow(clippy::unwrap_used)]

mod kubelet_common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kubelet_common::{create, phase, shared, terminated, wait_log, wait_pod};
use serde_json::json;

/// A pod exercising volumes, env, envFrom, the security context and the termination message runs
/// to `Succeeded`, as uid 65532 in its own PID namespace, with every value where a kubelet would
/// put it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_runs_with_volumes_env_and_security_context() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-basic").await.unwrap();
    let client = sh.env.client().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
               "stringData": {"token": "s3cret", "other": "x", "user": "alice"}}),
    )
    .await;
    create(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
               "data": {"mode": "fast", "level": "3"}}),
    )
    .await;

    let started = Instant::now();
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "probe", "labels": {"app": "probe"}},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"fsGroup": 65532, "runAsNonRoot": true},
                "volumes": [
                    {"name": "work", "emptyDir": {}},
                    {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 288,
                        "items": [{"key": "token", "path": "auth/token"}]}},
                    {"name": "settings", "configMap": {"name": "settings"}},
                ],
                "containers": [{
                    "name": "main",
                    "image": sh.fixture,
                    "args": ["probe", "--out", "/work/probe.json", "--check-writable", "/work",
                             "--read", "/creds/auth/token", "--read", "/settings/mode",
                             "--read", "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
                             "--read", "/work/missing"],
                    "workingDir": "/work",
                    "env": [
                        {"name": "PLAIN", "value": "v-$(POD_NAME)-$$(X)"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                        {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope", "optional": true}}},
                    ],
                    "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CM_"}, {"secretRef": {"name": "creds"}}],
                    "volumeMounts": [
                        {"name": "work", "mountPath": "/work"},
                        {"name": "creds", "mountPath": "/creds", "readOnly": true},
                        {"name": "settings", "mountPath": "/settings", "readOnly": true},
                    ],
                    "securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                                        "capabilities": {"drop": ["ALL"]}},
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "probe", Duration::from_secs(90), |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    eprintln!("pod creation → Succeeded: {:?}", started.elapsed());
    let status = pod.status.clone().unwrap();
    assert_eq!(phase(&pod), "Succeeded", "{status:#?}");
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("captf-testenv")
    );
    // Its own address on the pod network, published in its status.
    let gateway = sh.env.pod_gateway().unwrap().to_string();
    let subnet = gateway.strip_suffix(".1").unwrap();
    let pod_ip = status.pod_ip.clone().unwrap();
    assert!(pod_ip.starts_with(&format!("{subnet}.")), "pod IP {pod_ip}");
    assert_ne!(pod_ip, gateway);
    assert!(status.start_time.is_some());
    let cs = &status.container_statuses.as_ref().unwrap()[0];
    let digest = sh.fixture.split('@').nth(1).unwrap();
    assert!(cs.image_id.ends_with(digest), "imageID {}", cs.image_id);
    assert!(cs.image_id.starts_with(&sh.registry.host()));
    let t = terminated(&pod, "main").unwrap();
    assert_eq!(t.exit_code, 0);
    assert_eq!(t.reason.as_deref(), Some("Completed"));
    let conds: Vec<(String, String)> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    for (t, s) in [
        ("PodScheduled", "True"),
        ("Initialized", "True"),
        ("Ready", "False"),
    ] {
        assert!(conds.contains(&(t.to_owned(), s.to_owned())), "{conds:?}");
    }

    let log = sh.kubelet.logs(&ns, "probe", "main");
    let probe: serde_json::Value = serde_json::from_str(&log).expect("probe JSON in the log");
    assert_eq!(probe["pid"], 1, "PID 1 of its own PID namespace");
    assert_eq!(probe["uid"], 65532);
    assert_eq!(probe["gid"], 65532);
    assert!(
        probe["groups"].as_array().unwrap().contains(&json!(65532)),
        "fsGroup is a supplementary group"
    );
    assert_eq!(probe["cwd"], "/work");
    assert_eq!(probe["hostname"], "probe");
    assert_eq!(probe["root_writable"], false);
    assert_eq!(probe["writable"]["/work"], true);
    assert_eq!(
        probe["files"]["/creds/auth/token"], "s3cret",
        "0440 root:65532, read through fsGroup"
    );
    assert_eq!(probe["files"]["/settings/mode"], "fast");
    assert_eq!(
        probe["files"]["/var/run/secrets/kubernetes.io/serviceaccount/namespace"],
        ns.as_str()
    );
    let env = &probe["env"];
    assert_eq!(
        env["PLAIN"], "v-$(POD_NAME)-$(X)",
        "POD_NAME is defined after PLAIN"
    );
    assert_eq!(env["POD_NAME"], "probe");
    assert_eq!(env["FROM_SECRET"], "s3cret");
    assert_eq!(env["FROM_CM"], "fast");
    assert_eq!(env["CM_level"], "3");
    assert_eq!(env["user"], "alice");
    assert!(env.get("OPTIONAL").is_none());
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], gateway.as_str());
    assert_eq!(
        env["KUBERNETES_SERVICE_PORT"],
        sh.env.endpoints().port.to_string().as_str()
    );
    assert_eq!(env["HOSTNAME"], "probe");
}

/// Deleting a running pod sends SIGTERM to its container (which traps it, writes its
/// termination message and exits 42), records that exit, and removes the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_delivers_sigterm_and_records_the_exit() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-sigterm").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            // A finalizer keeps the object after the kubelet's final delete, to read its status.
            "metadata": {"name": "trap", "finalizers": ["test.captf.io/hold"]},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "main", "image": sh.fixture, "args": ["wait-signal", "--exit-code", "42"]}],
            },
        }),
    )
    .await;
    let started = Instant::now();
    wait_pod(&pods, "trap", Duration::from_secs(60), |p| {
        phase(p) == "Running"
    })
    .await;
    eprintln!("pod creation → Running: {:?}", started.elapsed());
    // The fixture says so once its SIGTERM handler is installed.
    wait_log(
        &ns,
        "trap",
        "main",
        "waiting for SIGTERM",
        Duration::from_secs(10),
    )
    .await;
    let deleted = Instant::now();
    pods.delete("trap", &DeleteParams::default()).await.unwrap();
    let pod = wait_pod(&pods, "trap", Duration::from_secs(20), |p| {
        terminated(p, "main").is_some() && p.metadata.deletion_timestamp.is_some()
    })
    .await;
    let t = terminated(&pod, "main").unwrap();
    assert_eq!(t.exit_code, 42);
    assert_eq!(t.reason.as_deref(), Some("Error"));
    assert_eq!(t.message.as_deref(), Some("received SIGTERM"));
    assert_eq!(phase(&pod), "Failed");
    assert!(
        deleted.elapsed() < Duration::from_secs(10),
        "no wait for the grace period"
    );
    assert!(
        sh.kubelet
            .logs(&ns, "trap", "main")
            .contains("received SIGTERM")
    );
    // The kubelet deleted the pod with grace period 0: only the test's finalizer holds it.
    let pod = wait_pod(&pods, "trap", Duration::from_secs(10), |p| {
        p.metadata.deletion_grace_period_seconds == Some(0)
    })
    .await;
    assert_eq!(
        pod.metadata.finalizers.as_deref(),
        Some(&["test.captf.io/hold".to_owned()][..])
    );
    pods.patch(
        "trap",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// A container that ignores SIGTERM is SIGKILLed when the grace period ends (exit 137).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_ignoring_sigterm_is_killed_after_the_grace_period() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-sigkill").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "stubborn", "finalizers": ["test.captf.io/hold"]},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "main", "image": sh.fixture, "args": ["wait-signal", "--ignore-sigterm"]}],
            },
        }),
    )
    .await;
    wait_pod(&pods, "stubborn", Duration::from_secs(60), |p| {
        phase(p) == "Running"
    })
    .await;
    wait_log(
        &ns,
        "stubborn",
        "main",
        "waiting for SIGTERM",
        Duration::from_secs(10),
    )
    .await;
    let deleted = Instant::now();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    let pod = wait_pod(&pods, "stubborn", Duration::from_secs(20), |p| {
        terminated(p, "main").is_some()
    })
    .await;
    let waited = deleted.elapsed();
    assert_eq!(terminated(&pod, "main").unwrap().exit_code, 137);
    assert!(
        waited >= Duration::from_secs(2),
        "SIGKILL only after the grace period ({waited:?})"
    );
    assert!(
        sh.kubelet
            .logs(&ns, "stubborn", "main")
            .contains("received SIGTERM")
    );
    pods.patch(
        "stubborn",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// The pod's own `activeDeadlineSeconds`: the kubelet stops it and marks it `DeadlineExceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_active_deadline_stops_the_pod() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-deadline").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "slow"},
            "spec": {
                "restartPolicy": "Never",
                "activeDeadlineSeconds": 3,
                "containers": [{"name": "main", "image": sh.fixture, "args": ["wait-signal"]}],
            },
        }),
    )
    .await;
    let pod = wait_pod(&pods, "slow", Duration::from_secs(60), |p| {
        phase(p) == "Failed"
    })
    .await;
    let status = pod.status.clone().unwrap();
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        terminated(&pod, "main").unwrap().exit_code,
        42,
        "it got SIGTERM first"
    );
}

/// Init containers run in order before the main container; a failing init container fails a
/// `restartPolicy: Never` pod without running the main container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_and_a_failure_fails_the_pod() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-init").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    let pod_json = |name: &str, first_code: i32| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "shared", "emptyDir": {}}],
                "initContainers": [
                    {"name": "first", "image": sh.fixture,
                     "args": ["exit", "--code", first_code.to_string(), "--message", "first done"]},
                    {"name": "second", "image": sh.fixture, "args": ["probe", "--out", "/shared/second.json"],
                     "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]},
                ],
                "containers": [{"name": "main", "image": sh.fixture,
                    "args": ["probe", "--read", "/shared/second.json"],
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared", "readOnly": true}]}],
            },
        })
    };
    create(&pods, pod_json("ok", 0)).await;
    create(&pods, pod_json("bad", 3)).await;
    let ok = wait_pod(&pods, "ok", Duration::from_secs(60), |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    assert_eq!(phase(&ok), "Succeeded");
    assert_eq!(
        terminated(&ok, "first").unwrap().message.as_deref(),
        Some("first done")
    );
    let log = sh.kubelet.logs(&ns, "ok", "main");
    let probe: serde_json::Value = serde_json::from_str(&log).unwrap();
    assert!(
        probe["files"]["/shared/second.json"]
            .as_str()
            .unwrap()
            .contains("\"pid\": 1")
    );

    let bad = wait_pod(&pods, "bad", Duration::from_secs(60), |p| {
        phase(p) == "Failed"
    })
    .await;
    let t = terminated(&bad, "first").unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert!(terminated(&bad, "second").is_none());
    assert!(terminated(&bad, "main").is_none());
}

/// `runAsNonRoot` with an image running as root is refused (`CreateContainerConfigError`); an
/// image that does not exist gives `ErrImagePull`/`ImagePullBackOff`; a missing command gives a
/// `StartError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_pull_and_start_errors_are_reported_like_a_kubelet() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-errors").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    let waiting_reason = |p: &Pod| -> Option<String> {
        p.status.as_ref()?.container_statuses.as_ref()?[0]
            .state
            .as_ref()?
            .waiting
            .as_ref()?
            .reason
            .clone()
    };
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
               "spec": {"restartPolicy": "Never", "securityContext": {"runAsNonRoot": true, "runAsUser": 0},
                        "containers": [{"name": "main", "image": sh.fixture, "args": ["exit"]}]}}),
    )
    .await;
    let missing = format!("{}/captf/missing:v0", sh.registry.host());
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "missing"},
               "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": missing}]}}),
    )
    .await;
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nocmd"},
               "spec": {"restartPolicy": "Never",
                        "containers": [{"name": "main", "image": sh.fixture, "command": ["/not/there"]}]}}),
    )
    .await;
    let p = wait_pod(&pods, "root", Duration::from_secs(60), |p| {
        waiting_reason(p).is_some_and(|r| r == "CreateContainerConfigError")
    })
    .await;
    assert_eq!(phase(&p), "Pending");
    wait_pod(&pods, "missing", Duration::from_secs(60), |p| {
        waiting_reason(p).is_some_and(|r| r == "ErrImagePull")
    })
    .await;
    wait_pod(&pods, "missing", Duration::from_secs(60), |p| {
        waiting_reason(p).is_some_and(|r| r == "ImagePullBackOff")
    })
    .await;
    let p = wait_pod(&pods, "nocmd", Duration::from_secs(60), |p| {
        phase(p) == "Failed"
    })
    .await;
    let t = terminated(&p, "main").unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (128, Some("StartError"))
    );
    assert!(t.message.unwrap().contains("/not/there"));
}

/// A Secret volume follows the Secret while the pod runs: the container waits until the file it
/// reads shows the new value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_volumes_follow_secret_updates() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-sync").await.unwrap();
    let client = sh.env.client().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "old"}}),
    )
    .await;
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "watcher"},
            "spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "s", "secret": {"secretName": "s"}}],
                "containers": [{"name": "main", "image": sh.fixture,
                    "args": ["wait-file", "--path", "/s/k", "--content", "new", "--timeout", "60"],
                    "volumeMounts": [{"name": "s", "mountPath": "/s", "readOnly": true}]}],
            },
        }),
    )
    .await;
    wait_pod(&pods, "watcher", Duration::from_secs(60), |p| {
        phase(p) == "Running"
    })
    .await;
    secrets
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"k": "new"}})),
        )
        .await
        .unwrap();
    let p = wait_pod(&pods, "watcher", Duration::from_secs(60), |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    assert_eq!(
        phase(&p),
        "Succeeded",
        "{}",
        sh.kubelet.logs(&ns, "watcher", "main")
    );
}

/// `restartPolicy: OnFailure` restarts a failed init container (and counts the restart) until it
/// succeeds; the pod then runs its main container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_restarts_a_failed_init_container() {
    let sh = shared();
    let ns = sh.env.namespace("kubelet-restart").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "retry"},
            "spec": {
                "restartPolicy": "OnFailure",
                "volumes": [{"name": "state", "emptyDir": {}}],
                "initContainers": [{"name": "flaky", "image": sh.fixture,
                    "args": ["fail-once", "--marker", "/state/failed"],
                    "volumeMounts": [{"name": "state", "mountPath": "/state"}]}],
                "containers": [{"name": "main", "image": sh.fixture, "args": ["exit"]}],
            },
        }),
    )
    .await;
    let p = wait_pod(&pods, "retry", Duration::from_secs(60), |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    assert_eq!(phase(&p), "Succeeded");
    let init = &p
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(init.restart_count, 1);
    let last = init
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(last.exit_code, 1);
    assert_eq!(terminated(&p, "flaky").unwrap().exit_code, 0);
    let log = sh.kubelet.logs(&ns, "retry", "flaky");
    assert!(
        log.contains("first run") && log.contains("second run"),
        "{log}"
    );
}
