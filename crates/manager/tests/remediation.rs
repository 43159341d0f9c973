//! Instance health and machine remediation with real Jobs (spec: Machine Remediation; Drift and
//! Health "Unhealthy samples"): samples counted, the Machine annotated at the threshold and the
//! request withdrawn when healthy again; a terminated instance taking the shortcut.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use common::*;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const TM: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(300);

/// A provisioned cluster and a provisioned machine of the ailing module, with remediation on at
/// `threshold` and a drift check (one health sample) every 5 seconds.
async fn provisioned_machine(
    client: &kube::Client,
    env: &testenv::TestEnv,
    images: &Images,
    ns: &str,
    identity_name: &str,
    threshold: u32,
) {
    let tcs = "prod";
    cluster(client, ns, tcs, identity_name, &images.cluster).await;
    wait_ready(client, ns, "TerraformCluster", tcs, "True", LONG).await;
    capi_cluster_provisioned(client, ns, tcs).await;
    capi_control_plane_initialized(client, ns, tcs).await;
    let image = ailing_machine_image(env).await;
    machine(client, ns, tcs, "sick", &image, false, "#cloud-config\n").await;
    let tms: Api<api::machine::TerraformMachine> = Api::namespaced(client.clone(), ns);
    tms.patch(
        "sick",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "drift": {"intervalSeconds": 5},
            "remediation": {"annotateMachine": true, "unhealthyThreshold": threshold,
                            "healthCheckIntervalSeconds": 60}}})),
    )
    .await
    .unwrap();
    wait_ready(client, ns, "TerraformMachine", "sick", "True", LONG).await;
}

async fn machine_annotations(client: &kube::Client, ns: &str) -> Value {
    let m = get_json(client, ns, "cluster.x-k8s.io/v1beta2", "Machine", "sick").await;
    m["metadata"]["annotations"].clone()
}

/// Waits for CAPTF's remediation request on the Machine; returns its annotations.
async fn remediation_request(client: &kube::Client, ns: &str) -> Value {
    eventually(LONG, "the remediation request", || async {
        let a = machine_annotations(client, ns).await;
        a.get("captf.io/remediation-requested")
            .is_some()
            .then_some(a)
    })
    .await
}

async fn samples(client: &kube::Client, ns: &str) -> Option<u64> {
    let tm = get_json(client, ns, TM, "TerraformMachine", "sick").await;
    tm["status"]["unhealthySamples"].as_u64()
}

/// Unhealthy samples are counted; below the threshold the Machine is left alone, at it the
/// Machine gets `cluster.x-k8s.io/remediate-machine` and `captf.io/remediation-requested`; once
/// the instance reads Healthy again both go and the count resets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_instance_is_annotated_at_the_threshold_and_withdrawn_when_healthy() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("remediate").await.unwrap();
    identity(&client, "id-remediate", &[ns.as_str()], "planted-rem-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-remediate");
    provisioned_machine(&client, env, &images, &ns, "id-remediate", 3).await;
    assert_eq!(samples(&client, &ns).await.unwrap_or(0), 0);

    set_drift_knob(&client, &ns, "unhealthy").await;
    // Below the threshold: counted, the Machine untouched.
    eventually(LONG, "one unhealthy sample", || async {
        (samples(&client, &ns).await == Some(1)).then_some(())
    })
    .await;
    let a = machine_annotations(&client, &ns).await;
    assert!(
        a.get("cluster.x-k8s.io/remediate-machine").is_none(),
        "requested below the threshold: {a}"
    );
    let tm = get_json(&client, &ns, TM, "TerraformMachine", "sick").await;
    assert_eq!(
        condition(&tm, "InfrastructureHealthy"),
        Some(("False".to_owned(), "InstanceUnhealthy".to_owned()))
    );
    // At the threshold: requested, and why.
    let a = remediation_request(&client, &ns).await;
    assert_eq!(a["cluster.x-k8s.io/remediate-machine"], "");
    assert_eq!(
        a["captf.io/remediation-requested"],
        "InstanceUnhealthy for 3 consecutive samples"
    );
    // The count is in the status patch of the pass that annotated the Machine.
    eventually(LONG, "three unhealthy samples", || async {
        (samples(&client, &ns).await >= Some(3)).then_some(())
    })
    .await;

    // Healthy again: withdrawn, and the count starts over.
    set_drift_knob(&client, &ns, "steady").await;
    eventually(LONG, "the withdrawal", || async {
        let a = machine_annotations(&client, &ns).await;
        let gone = a.get("captf.io/remediation-requested").is_none()
            && a.get("cluster.x-k8s.io/remediate-machine").is_none();
        (gone && samples(&client, &ns).await.is_none()).then_some(())
    })
    .await;
    let enc = mgr.metrics.encode();
    assert_eq!(
        metric_sum(
            &enc,
            "captf_remediation_requests_total",
            &["action=\"requested\""]
        ),
        1
    );
    assert_eq!(
        metric_sum(
            &enc,
            "captf_remediation_requests_total",
            &["action=\"withdrawn\""]
        ),
        1
    );
}

/// A terminated instance skips the threshold: the first sample reading terminated requests
/// remediation, and the count is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_instance_takes_the_shortcut() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("terminated").await.unwrap();
    identity(&client, "id-terminated", &[ns.as_str()], "planted-term-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-terminated");
    provisioned_machine(&client, env, &images, &ns, "id-terminated", 50).await;
    set_drift_knob(&client, &ns, "terminated").await;
    let tm = shortcut_taken(&client, &ns).await;
    assert_eq!(tm["status"]["unhealthySamples"].as_u64().unwrap_or(0), 0);
}

/// A `provider_id` that comes back null after provisioning reads the instance as terminated on
/// the first sample that shows it (book: Drift and Health, "a provider_id output that turns null
/// after provisioning is read as terminated"; Machine Remediation "Terminated instances": the
/// annotations on the very first sample). Watched every 250 ms from the knob on, the condition
/// goes from `True/Healthy` straight to `False/InstanceTerminated`, with no reading in between;
/// the drift interval is 5 s, so a reading held for one sample would be seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_provider_id_is_terminated_on_the_first_sample() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("vanished").await.unwrap();
    identity(&client, "id-vanished", &[ns.as_str()], "planted-van-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-vanished");
    provisioned_machine(&client, env, &images, &ns, "id-vanished", 50).await;
    set_drift_knob(&client, &ns, "vanished").await;
    let healthy = Some(("True".to_owned(), "Healthy".to_owned()));
    let gone = Some(("False".to_owned(), "InstanceTerminated".to_owned()));
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let tm = get_json(&client, &ns, TM, "TerraformMachine", "sick").await;
        let reading = condition(&tm, "InfrastructureHealthy");
        if reading == gone {
            break;
        }
        assert_eq!(reading, healthy, "a reading between healthy and terminated");
        assert!(
            tokio::time::Instant::now() < deadline,
            "never terminated: {tm}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let tm = shortcut_taken(&client, &ns).await;
    // spec.providerID is kept, and a terminated reading is no unhealthy sample.
    assert!(tm["spec"]["providerID"].is_string(), "{tm}");
    assert_eq!(tm["status"]["unhealthySamples"].as_u64().unwrap_or(0), 0);
}

/// A refresh that fails because the instance is gone (its read finds nothing) takes the
/// terminated shortcut too: `InfrastructureHealthy=False/InstanceTerminated` although the state
/// still holds the instance's healthy outputs, the Machine annotated at once, and the reading
/// standing between checks; once a check succeeds and reads Healthy, the request is withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_failing_because_the_instance_is_gone_takes_the_shortcut() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("gone").await.unwrap();
    identity(&client, "id-gone", &[ns.as_str()], "planted-gone-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-gone");
    provisioned_machine(&client, env, &images, &ns, "id-gone", 50).await;
    set_drift_knob(&client, &ns, "gone").await;
    let tm = shortcut_taken(&client, &ns).await;
    let message = condition_message(&tm, "InfrastructureHealthy");
    assert!(
        message.starts_with("The instance is gone: its refresh failed: ")
            && message.contains("Error: Unable to find remote state"),
        "{message}"
    );
    assert_eq!(
        condition(&tm, "DriftJobSucceeded").map(|(s, _)| s),
        Some("False".to_owned())
    );
    assert_eq!(
        tm["status"]["lastRun"]["error"]["step"],
        "apply-refresh-only"
    );
    assert_eq!(tm["status"]["unhealthySamples"].as_u64().unwrap_or(0), 0);

    // The reading stands on the passes between checks (the state still reads healthy).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let tm = get_json(&client, &ns, TM, "TerraformMachine", "sick").await;
    assert_eq!(
        condition(&tm, "InfrastructureHealthy"),
        Some(("False".to_owned(), "InstanceTerminated".to_owned()))
    );
    let a = machine_annotations(&client, &ns).await;
    assert!(a.get("captf.io/remediation-requested").is_some(), "{a}");

    // A check that succeeds again reads Healthy and withdraws the request.
    set_drift_knob(&client, &ns, "steady").await;
    eventually(LONG, "the withdrawal", || async {
        let a = machine_annotations(&client, &ns).await;
        a.get("captf.io/remediation-requested")
            .is_none()
            .then_some(())
    })
    .await;
    // The condition is in the status patch of the pass that withdrew the request.
    eventually(LONG, "InfrastructureHealthy=True", || async {
        let tm = get_json(&client, &ns, TM, "TerraformMachine", "sick").await;
        (condition(&tm, "InfrastructureHealthy") == Some(("True".to_owned(), "Healthy".to_owned())))
            .then_some(())
    })
    .await;
}

/// The TerraformMachine once its status reads `InfrastructureHealthy=False/InstanceTerminated`.
/// The Machine's annotations are written in the pass's Act step and the condition in its status
/// patch after it, so a read right after the request may still see the pass before.
async fn terminated(client: &kube::Client, ns: &str) -> Value {
    eventually(
        LONG,
        "InfrastructureHealthy=False/InstanceTerminated",
        || async {
            let tm = get_json(client, ns, TM, "TerraformMachine", "sick").await;
            (condition(&tm, "InfrastructureHealthy")
                == Some(("False".to_owned(), "InstanceTerminated".to_owned())))
            .then_some(tm)
        },
    )
    .await
}

/// The terminated shortcut taken: the Machine carries both annotations, the reason "the instance
/// is terminated", and the TerraformMachine reads `InstanceTerminated` (returned).
async fn shortcut_taken(client: &kube::Client, ns: &str) -> Value {
    let a = remediation_request(client, ns).await;
    assert_eq!(
        a["captf.io/remediation-requested"],
        "the instance is terminated"
    );
    assert_eq!(a["cluster.x-k8s.io/remediate-machine"], "");
    terminated(client, ns).await
}

/// The machine's `InfrastructureHealthy` and `Ready` for the current knob, once it reads `reason`.
async fn health_reads(client: &kube::Client, ns: &str, reason: &str) -> (String, String, u64) {
    eventually(LONG, &format!("InfrastructureHealthy {reason}"), || async {
        let tm = get_json(client, ns, TM, "TerraformMachine", "sick").await;
        let (status, got) = condition(&tm, "InfrastructureHealthy")?;
        let ready = condition(&tm, "Ready")?.0;
        let samples = tm["status"]["unhealthySamples"].as_u64().unwrap_or(0);
        (got == reason).then_some((status, ready, samples))
    })
    .await
}

/// Drift and Health "Health" (book l.2030) and "Unhealthy samples", from real module outputs:
/// `degraded` and `stopped` read `InfrastructureHealthy=False` (`InstanceDegraded`,
/// `InstanceStopped`) and count as unhealthy samples; `pending` is `False/InstancePending` and
/// `unknown` is `Unknown/HealthUnknown`, and neither moves the count; `Ready` follows (False, or
/// Unknown for an unknown health); running and healthy again resets the count. Below the
/// threshold the Machine is never annotated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_health_state_a_module_reports_reads_as_the_book_says() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("healthstates").await.unwrap();
    identity(&client, "id-healthstates", &[ns.as_str()], "planted-hs-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-healthstates");
    provisioned_machine(&client, env, &images, &ns, "id-healthstates", 100).await;

    set_drift_knob(&client, &ns, "degraded").await;
    let (status, ready, _) = health_reads(&client, &ns, "InstanceDegraded").await;
    assert_eq!((status.as_str(), ready.as_str()), ("False", "False"));
    eventually(LONG, "degraded samples are counted", || async {
        (samples(&client, &ns).await >= Some(2)).then_some(())
    })
    .await;

    set_drift_knob(&client, &ns, "stopped").await;
    let (status, ready, before) = health_reads(&client, &ns, "InstanceStopped").await;
    assert_eq!((status.as_str(), ready.as_str()), ("False", "False"));
    eventually(LONG, "stopped samples are counted", || async {
        (samples(&client, &ns).await > Some(before)).then_some(())
    })
    .await;

    for (knob, reason, status, ready) in [
        ("pending", "InstancePending", "False", "False"),
        ("unknown", "HealthUnknown", "Unknown", "Unknown"),
    ] {
        set_drift_knob(&client, &ns, knob).await;
        let (got, got_ready, count) = health_reads(&client, &ns, reason).await;
        assert_eq!(
            (got.as_str(), got_ready.as_str()),
            (status, ready),
            "{knob}"
        );
        // Two more checks (one every 5 s) leave the count where it was.
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_eq!(samples(&client, &ns).await.unwrap_or(0), count, "{knob}");
    }

    set_drift_knob(&client, &ns, "steady").await;
    let (status, ready, _) = health_reads(&client, &ns, "Healthy").await;
    assert_eq!((status.as_str(), ready.as_str()), ("True", "True"));
    eventually(LONG, "the count starts over", || async {
        (samples(&client, &ns).await.unwrap_or(0) == 0).then_some(())
    })
    .await;
    let a = machine_annotations(&client, &ns).await;
    assert!(a.get("captf.io/remediation-requested").is_none(), "{a}");
    assert!(!events_json(&client, &ns).await.contains("planted-hs-1"));
}
