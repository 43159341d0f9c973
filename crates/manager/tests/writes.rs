//! Who writes what in a pass (issue 28; spec: The Reconcile Lifecycle "One pass, one status
//! patch"; ENGINEERING.md §4 "Observe", "Act"): the Observe step of real passes, over objects in
//! every phase a pass meets, makes no request to the API server but get, list and watch — as its
//! audit log records them — while the same passes plan the writes Act would make; and the event
//! of a write no later pass repeats is published with that write, whether or not the pass's
//! status write lands.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use contract::names::Operation;
use kube::Api;
use kube::api::{Patch, PatchParams};
use manager::reconcile::decide::{ApplyReason, Decision, StartReason, WaitReason};
use manager::reconcile::plan::Write;
use serde_json::{Value, json};

const TF: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(300);
/// The user agent of the client the observing passes use, to find their requests in the audit
/// log.
const AGENT: &str = "captf-observe-only-test";

/// What the one pass over an object planned.
fn planned(writes: &[Write], what: impl Fn(&Write) -> bool) -> bool {
    writes.iter().any(what)
}

/// The Observe step over: a cluster whose first apply is due; a cluster whose apply Job just
/// finished, with its state to adopt and its endpoint to write back; a provisioned cluster with a
/// restore requested; a deleting machine; a pool under autoscaling whose MachinePool's count a
/// user edited; a machine whose health asks for remediation. Every one of its requests is a get,
/// a list or a watch, while the passes plan the writes each phase needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_makes_no_request_but_get_list_and_watch() {
    let (env, images) = setup().await;
    let admin = env.client().await.unwrap();
    install_runner_cluster_role(&admin).await;
    let ns = env.namespace("observe").await.unwrap();
    identity(&admin, "id-observe", &[ns.as_str()], "planted-observe-1").await;
    let mgr = start_manager(&admin, &ns, &images, "manager-observe");

    // A provisioned cluster, its machines and its pool.
    cluster(&admin, &ns, "c", "id-observe", &images.cluster).await;
    wait_ready(&admin, &ns, "TerraformCluster", "c", "True", LONG).await;
    capi_cluster_provisioned(&admin, &ns, "c").await;
    capi_control_plane_initialized(&admin, &ns, "c").await;
    let ailing = ailing_machine_image(env).await;
    set_drift_knob(&admin, &ns, "unhealthy").await;
    machine(&admin, &ns, "c", "sick", &ailing, false, "#cloud-config\n").await;
    let tms: Api<api::machine::TerraformMachine> = Api::namespaced(admin.clone(), &ns);
    tms.patch(
        "sick",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "drift": {"intervalSeconds": 5},
            "remediation": {"annotateMachine": true, "unhealthyThreshold": 1}}})),
    )
    .await
    .unwrap();
    machine(
        &admin,
        &ns,
        "c",
        "doomed",
        &images.machine,
        false,
        "#cloud-config\n",
    )
    .await;
    let pool_image = pool_image(env, "observe").await;
    pool(&admin, &ns, "c", "workers", &pool_image, 2).await;
    let mps: Api<api::capi::MachinePool> = Api::namespaced(admin.clone(), &ns);
    mps.patch(
        "workers",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5"}}})),
    )
    .await
    .unwrap();
    wait_ready(&admin, &ns, "TerraformMachine", "doomed", "True", LONG).await;
    eventually(LONG, "the remediation request on sick", || async {
        let m = get_json(&admin, &ns, "cluster.x-k8s.io/v1beta2", "Machine", "sick").await;
        m["metadata"]["annotations"]["captf.io/remediation-requested"]
            .as_str()
            .map(drop)
    })
    .await;
    eventually(LONG, "the pool's count written back", || async {
        let mp = get_json(
            &admin,
            &ns,
            "cluster.x-k8s.io/v1beta2",
            "MachinePool",
            "workers",
        )
        .await;
        (mp["metadata"]["annotations"]["cluster.x-k8s.io/replicas-managed-by"] == "captf")
            .then_some(())
    })
    .await;
    // A second cluster whose apply runs long enough to stop the manager while it runs.
    let slow = slow_image(env).await;
    cluster_with_spec(
        &admin,
        &ns,
        "late",
        "id-observe",
        &slow,
        json!({"variables": {"sleep_seconds": 20}}),
    )
    .await;
    let late_job = eventually(LONG, "the apply Job of late", || async {
        op_jobs(&jobs_of(&admin, &ns, "late").await, "apply")
            .first()
            .and_then(|j| j.metadata.name.clone())
    })
    .await;
    let c = get_json(&admin, &ns, TF, "TerraformCluster", "c").await;
    let serial = c["status"]["stateBackups"][0]["serial"].as_i64().unwrap();
    mgr.stop().await;

    // The phases, made while no manager runs.
    let apply_done = || async {
        let jobs = jobs_of(&admin, &ns, "late").await;
        let job = jobs
            .iter()
            .find(|j| j.metadata.name.as_deref() == Some(late_job.as_str()))?;
        let done = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            });
        done.then_some(())
    };
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(admin.clone(), &ns);
    tcs.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "captf.io/restore-state": serial.to_string()}}})),
    )
    .await
    .unwrap();
    delete(&admin, &ns, TF, "TerraformMachine", "doomed").await;
    let machines: Api<api::capi::Machine> = Api::namespaced(admin.clone(), &ns);
    machines
        .patch(
            "sick",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "cluster.x-k8s.io/remediate-machine": null,
                "captf.io/remediation-requested": null}}})),
        )
        .await
        .unwrap();
    mps.patch(
        "workers",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    cluster(&admin, &ns, "fresh", "id-observe", &images.cluster).await;
    tcs.patch(
        "fresh",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [
            "terraformcluster.infrastructure.cluster.x-k8s.io"]}})),
    )
    .await
    .unwrap();
    eventually(LONG, "the apply Job of late finished", apply_done).await;

    // The Observe step of one pass over each, through a client the audit log tells apart.
    let observing = client_mapping(env, |mut req: http::Request<kube::client::Body>| {
        req.headers_mut().insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(AGENT),
        );
        req
    })
    .await;
    let passes = Passes::start(&observing, &ns, &images, "manager-observe-only").await;
    let since = k8s_openapi::jiff::Timestamp::now().as_microsecond();
    let mut seen = Vec::new();
    for (kind, name) in [
        ("TerraformCluster", "fresh"),
        ("TerraformCluster", "late"),
        ("TerraformCluster", "c"),
        ("TerraformMachine", "doomed"),
        ("TerraformMachine", "sick"),
        ("TerraformMachinePool", "workers"),
    ] {
        let t = target(&admin, &ns, kind, name).await;
        let (decision, writes) = manager::reconcile::observe_only(&t, &passes.ctx)
            .await
            .unwrap();
        eprintln!(
            "OBSERVE {kind} {name}: {decision:?}; {} writes planned",
            writes.len()
        );
        for w in &writes {
            eprintln!("  {w}");
        }
        seen.push((name, decision, writes));
    }
    drop(passes);

    let phase = |name: &str| seen.iter().find(|(n, _, _)| *n == name).unwrap();
    let (_, d, _) = phase("fresh");
    assert!(
        matches!(d, Decision::StartJob(s) if s.reason == StartReason::Apply(ApplyReason::FirstApply)),
        "fresh: {d:?}"
    );
    let (_, _, w) = phase("late");
    assert!(
        planned(w, |w| matches!(w, Write::AdoptState { .. })),
        "late adopts its state"
    );
    assert!(
        planned(w, |w| matches!(w, Write::ReleaseRun { .. })),
        "late releases its Job"
    );
    assert!(
        planned(w, |w| matches!(w, Write::PatchSpec(_))),
        "late writes its endpoint"
    );
    // The restore is decided. It starts at once, or waits behind a machine operation whose lease
    // the stopped manager never gave back (sick's drift checks run every 5 s): the cluster
    // operation gate, which Act carries out by holding the leases.
    let (_, d, _) = phase("c");
    assert!(
        matches!(d, Decision::StartJob(s) if s.reason == StartReason::Restore)
            || matches!(
                d,
                Decision::Wait {
                    reason: WaitReason::MachineOperations {
                        operation: Operation::Restore,
                        ..
                    },
                    ..
                }
            ),
        "c: {d:?}"
    );
    let (_, d, _) = phase("doomed");
    assert!(
        matches!(d, Decision::StartJob(s) if s.reason == StartReason::Destroy),
        "doomed: {d:?}"
    );
    let (_, _, w) = phase("sick");
    assert!(
        planned(w, |w| matches!(w, Write::Remediation(_))),
        "sick: {w:?}"
    );
    let (_, _, w) = phase("workers");
    assert!(
        planned(w, |w| matches!(w, Write::SyncMachinePool(_))),
        "workers: {w:?}"
    );

    // The audit log: every request of the observing client is a read.
    let requests = eventually(Duration::from_secs(30), "the audit log", || async {
        let all = testenv::audit::read(&env.endpoints().dir).ok()?;
        let ours: Vec<_> = all
            .into_iter()
            .filter(|r| r.user_agent.starts_with(AGENT) && r.received_micros >= since)
            .collect();
        (!ours.is_empty()).then_some(ours)
    })
    .await;
    let others: Vec<String> = requests
        .iter()
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .map(|r| format!("{} {}/{} {}", r.verb, r.resource, r.subresource, r.name))
        .collect();
    eprintln!(
        "OBSERVE: {} requests of the observing passes, {} not get, list or watch",
        requests.len(),
        others.len()
    );
    assert!(others.is_empty(), "Observe wrote: {others:#?}");
}

/// M4: the event of a write no later pass repeats is published with the write. A machine's pass
/// writes `spec.providerID` once from its first apply's outputs; when that pass's status write
/// does not land (here the API server answers it 404), `ProviderIDSet` and `StateAdopted` are
/// published all the same, and the next pass, which finds the spec written, does not write it
/// (nor announce it) again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_of_a_write_is_published_even_when_the_status_write_fails() {
    let (env, images) = setup().await;
    let admin = env.client().await.unwrap();
    install_runner_cluster_role(&admin).await;
    let ns = env.namespace("announce").await.unwrap();
    identity(&admin, "id-announce", &[ns.as_str()], "planted-announce-1").await;
    let mgr = start_manager(&admin, &ns, &images, "manager-announce");
    cluster(&admin, &ns, "c", "id-announce", &images.cluster).await;
    wait_ready(&admin, &ns, "TerraformCluster", "c", "True", LONG).await;
    capi_cluster_provisioned(&admin, &ns, "c").await;
    capi_control_plane_initialized(&admin, &ns, "c").await;
    mgr.stop().await;
    machine(
        &admin,
        &ns,
        "c",
        "m",
        &images.machine,
        false,
        "#cloud-config\n",
    )
    .await;

    // Status writes of `m` go to a name that does not exist while `broken` is set.
    let broken = Arc::new(AtomicBool::new(false));
    let flag = broken.clone();
    let client = client_mapping(env, move |mut req: http::Request<kube::client::Body>| {
        let path = req.uri().path().to_owned();
        if flag.load(Ordering::SeqCst)
            && req.method() == http::Method::PATCH
            && path.ends_with("/terraformmachines/m/status")
        {
            let moved = path.replace(
                "/terraformmachines/m/status",
                "/terraformmachines/m-gone/status",
            );
            let query = req
                .uri()
                .query()
                .map(|q| format!("?{q}"))
                .unwrap_or_default();
            *req.uri_mut() = format!("{moved}{query}").parse().unwrap();
        }
        req
    })
    .await;
    let passes = Passes::start(&client, &ns, &images, "passes-announce").await;
    let pass = || async {
        passes.caught_up(&admin, &ns, "TerraformMachine", "m").await;
        passes
            .pass(target(&admin, &ns, "TerraformMachine", "m").await)
            .await;
    };
    // The finalizer, then the first apply: no pass runs once its Job exists, so that the pass
    // that bookkeeps it is the one below, with its status write broken.
    pass().await;
    eventually(LONG, "the first apply started", || async {
        pass().await;
        let jobs = op_jobs(&jobs_of(&admin, &ns, "m").await, "apply");
        (!jobs.is_empty()).then_some(())
    })
    .await;
    eventually(LONG, "the first apply", || async {
        let jobs = op_jobs(&jobs_of(&admin, &ns, "m").await, "apply");
        jobs.first()
            .and_then(|j| j.status.as_ref())
            .and_then(|s| s.succeeded)
            .filter(|n| *n == 1)
            .map(drop)
    })
    .await;
    let announced = |reason: &'static str| {
        let admin = admin.clone();
        let ns = ns.clone();
        async move {
            let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin, &ns);
            events
                .list(&kube::api::ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("m")
                })
                .count()
        }
    };
    assert_eq!(announced("ProviderIDSet").await, 0);

    // The pass that bookkeeps the apply: its writes land, its status write does not.
    broken.store(true, Ordering::SeqCst);
    let tm = eventually(LONG, "spec.providerID written", || async {
        pass().await;
        let tm = get_json(&admin, &ns, TF, "TerraformMachine", "m").await;
        tm["spec"]["providerID"].is_string().then_some(tm)
    })
    .await;
    assert!(
        tm["status"]["initialization"]["provisioned"].is_null(),
        "the status write did not land: {tm:#}"
    );
    eventually(
        Duration::from_secs(30),
        "ProviderIDSet published",
        || async {
            (announced("ProviderIDSet").await == 1 && announced("StateAdopted").await >= 1)
                .then_some(())
        },
    )
    .await;

    // The next pass writes its status, and the spec is not written again.
    broken.store(false, Ordering::SeqCst);
    eventually(LONG, "the status written", || async {
        pass().await;
        let tm = get_json(&admin, &ns, TF, "TerraformMachine", "m").await;
        (tm["status"]["initialization"]["provisioned"] == true).then_some(())
    })
    .await;
    let count = announced("ProviderIDSet").await;
    if count != 1 {
        let events = events_json(&admin, &ns).await;
        let ours: Vec<Value> = serde_json::from_str::<Vec<Value>>(&events)
            .unwrap()
            .into_iter()
            .filter(|e| e["reason"] == "ProviderIDSet")
            .collect();
        panic!(
            "ProviderIDSet announced {count} times, not once: {ours:#?}\nJobs:\n{}",
            job_summary(&jobs_of(&admin, &ns, "m").await)
        );
    }
}
