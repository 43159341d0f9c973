//! The state lock and the drift schedule with real Jobs (spec: Terraform State "Locks", Drift and
//! Health "What runs, and when").
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

async fn set_lock(client: &kube::Client, ns: &str, name: &str, id: &str, who: &str) {
    let suffix = contract::names::state_suffix(ns, contract::names::ObjectKind::Cluster, name);
    let lease_name = format!("lock-tfstate-default-{suffix}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let info = json!({"ID": id, "Operation": "OperationTypeApply", "Info": "", "Who": who,
                      "Version": "1.12.6", "Created": "2026-01-01T00:00:00Z", "Path": ""});
    let mut lease: Lease = match leases.get_opt(&lease_name).await.unwrap() {
        Some(l) => l,
        None => serde_json::from_value(json!({"metadata": {"name": lease_name}})).unwrap(),
    };
    lease
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("app.terraform.io/lock-info".to_owned(), info.to_string());
    lease.spec.get_or_insert_default().holder_identity = Some(id.to_owned());
    if lease.metadata.resource_version.is_some() {
        leases
            .replace(&lease_name, &PostParams::default(), &lease)
            .await
            .unwrap();
    } else {
        leases.create(&PostParams::default(), &lease).await.unwrap();
    }
}

/// A lock held by something else is reported and runs nothing; a lock left by one of the
/// object's own runner pods that is gone is force-unlocked by the next Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_lock_is_reported_and_a_stale_own_lock_is_force_unlocked() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("locks").await.unwrap();
    identity(&client, "id-locks", &[ns.as_str()], "planted-locks-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-locks");
    cluster(&client, &ns, "locked", "id-locks", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "locked", "True", LONG).await;
    let lock_id = "4a7c8b1e-0000-4000-8000-locked000001";
    set_lock(&client, &ns, "locked", lock_id, "alice@workstation").await;
    // A Cluster change the cluster role renders: a re-apply is due.
    set_service_domain(&client, &ns, "locked", "example.internal").await;
    let tc = eventually(LONG, "StateLocked", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "locked").await;
        (condition(&tc, "StateReadable").map(|c| c.1) == Some("StateLocked".to_owned()))
            .then_some(tc)
    })
    .await;
    assert_eq!(
        condition(&tc, "Ready").unwrap().0,
        "True",
        "a held lock never un-Readies"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        jobs_of(&client, &ns, "locked").await.len(),
        1,
        "nothing ran"
    );

    // The holder is one of this object's own runner pods, and it is gone.
    set_lock(
        &client,
        &ns,
        "locked",
        lock_id,
        "root@captf-c-locked-apply-a1-000000-zzzzz",
    )
    .await;
    poke(&client, &ns, "locked", "1").await;
    let job = eventually(LONG, "the re-apply", || async {
        let jobs = op_jobs(&jobs_of(&client, &ns, "locked").await, "apply");
        (jobs.len() == 2).then(|| jobs[1].clone())
    })
    .await;
    let args = job.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.contains(&format!("--force-unlock={lock_id}")),
        "{args:?}"
    );
    let tc = eventually(LONG, "StateRead again", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "locked").await;
        (condition(&tc, "StateReadable").map(|c| c.1) == Some("StateRead".to_owned())
            && tc["status"]["activeJob"].is_null())
        .then_some(tc)
    })
    .await;
    assert_eq!(
        condition(&tc, "ApplyJobSucceeded").unwrap().1,
        "ApplySucceeded",
        "{tc:#}"
    );
    let steps: Vec<String> = tc["status"]["lastRun"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        steps[..3],
        [
            "version".to_owned(),
            "init".to_owned(),
            "force-unlock".to_owned()
        ]
    );
    let enc = mgr.metrics.encode();
    assert!(
        enc.contains("captf_lock_force_unlocks_total{kind=\"TerraformCluster\"} 1"),
        "{enc}"
    );
}

/// A stale lock left by one of the object's own runner pods before any state exists (issue 19:
/// the fault harness killed a first apply's pod, then every retry failed in `init` with "Error
/// loading state"): the backend's init must take the lock to write the first state, so the
/// manager releases the lock itself, the Job runs without `--force-unlock`, and the object gets
/// Ready; likewise when the backend's first write was cut short, leaving an empty base Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_own_lock_before_the_first_state_is_released_and_the_first_apply_succeeds() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("firstlock").await.unwrap();
    identity(
        &client,
        "id-firstlock",
        &[ns.as_str()],
        "planted-firstlock-1",
    )
    .await;
    let lock_id = "4a7c8b1e-0000-4000-8000-firstlock001";
    let who = "root@captf-c-fresh-apply-a1-000000-zzzzz";
    set_lock(&client, &ns, "fresh", lock_id, who).await;
    let mgr = start_manager(&client, &ns, &images, "manager-firstlock");
    cluster(&client, &ns, "fresh", "id-firstlock", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "fresh", "True", LONG).await;
    let applies = op_jobs(&jobs_of(&client, &ns, "fresh").await, "apply");
    assert_eq!(applies.len(), 1, "the first apply succeeded at once");
    let args = applies[0]
        .spec
        .clone()
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        !args.iter().any(|a| a.starts_with("--force-unlock")),
        "{args:?}"
    );
    let events = events_json(&client, &ns).await;
    assert!(
        events.contains("Released a stale state lock") && events.contains("ForceUnlocked"),
        "{events}"
    );

    // The backend's first write cut short as well (found by the fault harness: its `Put` creates
    // the base Secret empty, then writes into it): the empty base reads as no state, not as an
    // inconsistent one, and the first apply writes into it.
    let suffix = contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, "cut");
    let empty_base = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": contract::names::state_secret_name(&suffix),
        "annotations": {"encoding": "gzip"},
        "labels": {"tfstate": "true", "tfstateSecretSuffix": suffix, "tfstateWorkspace": "default",
                   "app.kubernetes.io/managed-by": "terraform"}}});
    create(&client, &ns, empty_base).await;
    set_lock(
        &client,
        &ns,
        "cut",
        "5b8d9c2f-0000-4000-8000-firstlock002",
        "root@captf-c-cut-apply-a1-000000-zzzzz",
    )
    .await;
    cluster(&client, &ns, "cut", "id-firstlock", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "cut", "True", LONG).await;
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "cut").await, "apply").len(),
        1
    );
    let enc = mgr.metrics.encode();
    assert!(
        enc.contains("captf_lock_force_unlocks_total{kind=\"TerraformCluster\"} 2"),
        "{enc}"
    );
}

/// A drift interval runs drift checks that find nothing on an unchanged no-op module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_checks_run_on_their_interval() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("drift").await.unwrap();
    identity(&client, "id-drift", &[ns.as_str()], "planted-drift-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-drift");
    cluster(&client, &ns, "drifty", "id-drift", &images.cluster).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "drifty",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"drift": {"intervalSeconds": 5}}})),
    )
    .await
    .unwrap();
    let tc = eventually(LONG, "a drift check", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "drifty").await;
        (condition(&tc, "DriftJobSucceeded").map(|c| c.1) == Some("DriftChecked".to_owned()))
            .then_some(tc)
    })
    .await;
    assert_eq!(
        condition(&tc, "DriftDetected"),
        Some(("False".to_owned(), "NoDrift".to_owned()))
    );
    assert!(tc["status"]["lastDriftCheck"].is_string(), "{tc:#}");
    assert_eq!(tc["status"]["lastRun"]["operation"], "drift");
    assert_eq!(condition(&tc, "Ready").unwrap().0, "True");
    let drifts = op_jobs(&jobs_of(&client, &ns, "drifty").await, "drift");
    assert!(!drifts.is_empty());
    // Drift checks never re-apply.
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "drifty").await, "apply").len(),
        1
    );
}

/// Waits until the TerraformCluster's `StateReadable` has `reason`, then checks for a few
/// seconds that no Job beyond the first apply was started.
async fn reported_and_nothing_ran(client: &kube::Client, ns: &str, name: &str, reason: &str) {
    let tc = eventually(LONG, reason, || async {
        let tc = get_json(client, ns, TC, "TerraformCluster", name).await;
        (condition(&tc, "StateReadable").map(|c| c.1) == Some(reason.to_owned())).then_some(tc)
    })
    .await;
    assert_eq!(
        condition(&tc, "StateReadable").unwrap().0,
        "False",
        "{tc:#}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let jobs = jobs_of(client, ns, name).await;
    assert_eq!(jobs.len(), 1, "a Job ran over the {reason} state");
}

/// A state Secret corrupted, then deleted, under a provisioned object (issue 19): the object
/// reports `StateCorrupt`, then `StateLost`, and no Job runs over either, though a re-apply is
/// due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_or_deleted_state_is_reported_and_never_applied_over() {
    use k8s_openapi::api::core::v1::Secret;
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("lost").await.unwrap();
    identity(&client, "id-lost", &[ns.as_str()], "planted-lost-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-lost");
    cluster(&client, &ns, "lost", "id-lost", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "lost", "True", LONG).await;
    let suffix = contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, "lost");
    let state = contract::names::state_secret_name(&suffix);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // Not gzip any more; and a Cluster change the cluster role renders makes a re-apply due.
    let garbage = k8s_openapi::ByteString(b"this is not a gzip stream".to_vec());
    secrets
        .patch(
            &state,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"tfstate": garbage}})),
        )
        .await
        .unwrap();
    set_service_domain(&client, &ns, "lost", "lost.internal").await;
    reported_and_nothing_ran(&client, &ns, "lost", "StateCorrupt").await;

    secrets
        .delete(&state, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    poke(&client, &ns, "lost", "after-delete").await;
    reported_and_nothing_ran(&client, &ns, "lost", "StateLost").await;
}

/// The state a decision read is checked against the API server before a Job starts, once a Job
/// of the object ran: a Secret cache that lags (here: frozen) still shows a state the finished
/// Job replaced, and a decision made on it would apply the same inputs a second time. The pass
/// gives its leases back and writes nothing; the next pass reads the state from the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_newer_than_the_cache_starts_no_second_job() {
    use k8s_openapi::api::core::v1::Secret;
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("behind").await.unwrap();
    identity(&client, "id-behind", &[ns.as_str()], "planted-behind-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-behind");
    cluster(&client, &ns, "behind", "id-behind", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "behind", "True", LONG).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    mgr.stop().await;
    let jobs = jobs_of(&client, &ns, "behind").await.len();
    let suffix = contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, "behind");
    let state = contract::names::state_secret_name(&suffix);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let hash_key = contract::state::INPUTS_HASH_ANNOTATION;
    let set_hash = |hash: String| {
        let secrets = secrets.clone();
        let state = state.clone();
        async move {
            let patch = json!({"metadata": {"annotations": {hash_key: hash}}});
            let patch = Patch::Merge(&patch);
            let pp = PatchParams::default();
            let written = secrets.patch(&state, &pp, &patch).await.unwrap();
            written.metadata.resource_version.unwrap()
        }
    };
    let applied = secrets
        .get(&state)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()[hash_key]
        .clone();

    // What the state looked like before: another inputs hash, so a re-apply is due. A foreign
    // lock stops the pass that reads it before a Job starts.
    let before = set_hash(format!("h1:{}", "0".repeat(64))).await;
    set_lock(&client, &ns, "behind", "foreign-id", "someone@workstation").await;
    let passes = Passes::start(&client, &ns, &images, "passes-behind").await;
    eventually(
        Duration::from_secs(20),
        "the cache shows the older state",
        || async {
            let cached = passes.ctx.caches.secrets_labelled(
                &ns,
                api::constants::labels::TFSTATE_SECRET_SUFFIX,
                &suffix,
            );
            cached
                .iter()
                .any(|s| s.metadata.resource_version.as_deref() == Some(before.as_str()))
                .then_some(())
        },
    )
    .await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "behind").await)
        .await;
    let o = get_json(&client, &ns, TC, "TerraformCluster", "behind").await;
    assert_eq!(
        condition(&o, "StateReadable").map(|c| c.1),
        Some("StateLocked".to_owned()),
        "{o:#}"
    );

    // The state is replaced (as a finished apply and its adoption would) and the lock released,
    // while the cache keeps showing the older state.
    passes.freeze();
    set_hash(applied).await;
    Api::<Lease>::namespaced(client.clone(), &ns)
        .delete(
            &format!("lock-tfstate-default-{suffix}"),
            &kube::api::DeleteParams::default(),
        )
        .await
        .unwrap();
    let fresh = get_json(&client, &ns, TC, "TerraformCluster", "behind").await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "behind").await)
        .await;
    assert_eq!(
        jobs_of(&client, &ns, "behind").await.len(),
        jobs,
        "no Job started from the cached state"
    );
    let after = get_json(&client, &ns, TC, "TerraformCluster", "behind").await;
    assert_eq!(
        after["metadata"]["resourceVersion"], fresh["metadata"]["resourceVersion"],
        "the pass wrote nothing: {after:#}"
    );
    let run_lease = format!("captf-run-{suffix}");
    let lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get(&run_lease)
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "the run lease was given back"
    );
}

/// A copy of the state of the TerraformCluster `from` as the state of the object with state
/// suffix `suffix` (what a Job of that object would have written), on the API server only.
async fn copy_state(client: &kube::Client, ns: &str, from: &str, suffix: &str) {
    use k8s_openapi::api::core::v1::Secret;
    let src = contract::names::state_suffix(ns, contract::names::ObjectKind::Cluster, from);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut s = secrets
        .get(&contract::names::state_secret_name(&src))
        .await
        .unwrap();
    s.metadata = kube::api::ObjectMeta {
        name: Some(contract::names::state_secret_name(suffix)),
        labels: s.metadata.labels.map(|mut l| {
            l.insert(
                api::constants::labels::TFSTATE_SECRET_SUFFIX.to_owned(),
                suffix.to_owned(),
            );
            l
        }),
        annotations: Some(
            [("encoding".to_owned(), "gzip".to_owned())]
                .into_iter()
                .collect(),
        ),
        ..kube::api::ObjectMeta::default()
    };
    secrets.create(&PostParams::default(), &s).await.unwrap();
}

/// What an earlier pass's Observe does while the object has no state: it reads "no state" and
/// keeps it while the cached state Secrets keep their versions.
async fn remember_no_state(
    client: &kube::Client,
    passes: &Passes,
    ns: &str,
    suffix: &str,
    uid: &str,
) {
    let (none, _) = manager::state::observe(client, &passes.ctx.caches, ns, suffix, uid, false)
        .await
        .unwrap();
    assert!(
        matches!(none.reading, manager::state::StateReading::NotFound),
        "no state yet"
    );
}

/// H1: a deletion that finds no state drops the finalizer only once the API server agrees. A
/// machine deleted while its first apply ran has a state that apply wrote; a Secret cache that
/// lags (here: frozen before the state was written) shows none. The pass checks against the API
/// server before its cleanup, writes nothing and removes nothing; the state and the finalizer
/// stay, and the next pass, which reads the state, destroys it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_resting_on_no_state_checks_the_api_server_first() {
    use k8s_openapi::api::core::v1::Secret;
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("nostate").await.unwrap();
    identity(&client, "id-nostate", &[ns.as_str()], "planted-nostate-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-nostate");
    cluster(&client, &ns, "donor", "id-nostate", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "donor", "True", LONG).await;
    mgr.stop().await;

    // A machine the manager added its finalizer to, and whose first apply is under way.
    create(
        &client,
        &ns,
        json!({"apiVersion": TC, "kind": "TerraformMachine",
               "metadata": {"name": "m", "finalizers": ["terraformmachine.infrastructure.cluster.x-k8s.io"]},
               "spec": {"source": {"image": images.machine}}}),
    )
    .await;
    let passes = Passes::start(&client, &ns, &images, "passes-nostate").await;
    passes.freeze();
    // An earlier pass read "no state" (Observe keeps what it decoded while the cached state
    // Secrets keep their versions); then the apply writes its state, which the frozen cache does
    // not show, and the machine is deleted.
    let suffix = contract::names::state_suffix(&ns, contract::names::ObjectKind::Machine, "m");
    let uid = get_json(&client, &ns, TC, "TerraformMachine", "m").await["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    remember_no_state(&client, &passes, &ns, &suffix, &uid).await;
    copy_state(&client, &ns, "donor", &suffix).await;
    delete(&client, &ns, TC, "TerraformMachine", "m").await;
    passes
        .pass(target(&client, &ns, "TerraformMachine", "m").await)
        .await;
    let m = get_json(&client, &ns, TC, "TerraformMachine", "m").await;
    assert!(
        m["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "the finalizer stays: {m:#}"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert!(
        secrets
            .get_opt(&contract::names::state_secret_name(&suffix))
            .await
            .unwrap()
            .is_some(),
        "the state stays"
    );
}

/// L1: an object's first Job, too, starts only over the state the API server has. A cache that
/// shows no state yet, for an object with no Job, would start a first apply over a state another
/// manager's Job already wrote; the pass takes the run lease, finds the state, gives the lease
/// back and starts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_job_starts_only_over_the_state_the_api_server_has() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("firstjob").await.unwrap();
    identity(&client, "id-firstjob", &[ns.as_str()], "planted-firstjob-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-firstjob");
    cluster(&client, &ns, "donor", "id-firstjob", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "donor", "True", LONG).await;
    mgr.stop().await;
    cluster(&client, &ns, "second", "id-firstjob", &images.cluster).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "second",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [
            "terraformcluster.infrastructure.cluster.x-k8s.io"]}})),
    )
    .await
    .unwrap();
    let passes = Passes::start(&client, &ns, &images, "passes-firstjob").await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "second")
        .await;
    passes.freeze();
    let suffix = contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, "second");
    // An earlier pass read "no state" (Observe keeps what it decoded while the cached state
    // Secrets keep their versions): only then does the lagging cache hide the state below.
    let uid = tcs.get("second").await.unwrap().metadata.uid.unwrap();
    remember_no_state(&client, &passes, &ns, &suffix, &uid).await;
    copy_state(&client, &ns, "donor", &suffix).await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "second").await)
        .await;
    assert_eq!(
        jobs_of(&client, &ns, "second").await.len(),
        0,
        "no first apply over a state the cache did not show"
    );
    let lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get_opt(&format!("captf-run-{suffix}"))
        .await
        .unwrap();
    assert_eq!(
        lease.and_then(|l| l.spec).and_then(|s| s.holder_identity),
        None,
        "the run lease was given back"
    );
}

/// The stale state lock runbook (docs/src/runbooks/stale-lock.md), step by step, for a lock held
/// by someone else: the signs (`StateReadable=False/StateLocked` naming the holder, the
/// `StateLocked` Warning event); step 1 reads the holder from the Lease the runbook names, through
/// `status.stateSecretSuffix`; step 4 clears it with the runbook's JSON patch; step 5 confirms
/// the holder is empty and the next Job runs with `StateReadable=True`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_lock_runbook_step_by_step() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("lockbook").await.unwrap();
    identity(&client, "id-lockbook", &[ns.as_str()], "planted-lockbook-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-lockbook");
    cluster(&client, &ns, "runbook", "id-lockbook", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "runbook", "True", LONG).await;
    let lock_id = "4a7c8b1e-0000-4000-8000-runbook00001";
    set_lock(&client, &ns, "runbook", lock_id, "bob@laptop").await;
    // A Cluster change the cluster role renders: a re-apply is due, and waits for the lock.
    set_service_domain(&client, &ns, "runbook", "example.internal").await;

    // Signs.
    let tc = eventually(LONG, "StateLocked", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "runbook").await;
        (condition(&tc, "StateReadable") == Some(("False".to_owned(), "StateLocked".to_owned())))
            .then_some(tc)
    })
    .await;
    assert!(
        condition_message(&tc, "StateReadable").contains("bob@laptop"),
        "{tc:#}"
    );
    eventually(LONG, "the StateLocked event", || async {
        events_json(&client, &ns)
            .await
            .contains("StateLocked")
            .then_some(())
    })
    .await;

    // Step 1: the holder, from the Lease named through status.stateSecretSuffix.
    let suffix = tc["status"]["stateSecretSuffix"]
        .as_str()
        .unwrap()
        .to_owned();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease_name = format!("lock-tfstate-default-{suffix}");
    let lease = leases.get(&lease_name).await.unwrap();
    assert_eq!(
        lease.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some(lock_id)
    );
    let info: serde_json::Value = serde_json::from_str(
        &lease.metadata.annotations.as_ref().unwrap()["app.terraform.io/lock-info"],
    )
    .unwrap();
    assert_eq!(info["Who"], "bob@laptop");
    // Steps 2 and 3 do not apply (no runner pod of this object holds it); nothing ran.
    assert_eq!(jobs_of(&client, &ns, "runbook").await.len(), 1);

    // Step 4: clear it as force-unlock does, with the runbook's patch.
    let patch = json!([
        {"op": "remove", "path": "/spec/holderIdentity"},
        {"op": "remove", "path": "/metadata/annotations/app.terraform.io~1lock-info"}
    ]);
    let request = http::Request::patch(format!(
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease_name}"
    ))
    .header("Content-Type", "application/json-patch+json")
    .body(serde_json::to_vec(&patch).unwrap())
    .unwrap();
    let _: Lease = client.request(request).await.unwrap();

    // Step 5: the holder is empty, and after the next Job (the re-apply that waited) the state
    // reads again.
    let lease = leases.get(&lease_name).await.unwrap();
    assert!(lease.spec.as_ref().unwrap().holder_identity.is_none());
    let tc = eventually(LONG, "StateRead after the next Job", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "runbook").await;
        let applies = op_jobs(&jobs_of(&client, &ns, "runbook").await, "apply").len();
        (condition(&tc, "StateReadable").map(|c| c.1) == Some("StateRead".to_owned())
            && applies == 2
            && tc["status"]["activeJob"].is_null())
        .then_some(tc)
    })
    .await;
    assert_eq!(
        condition(&tc, "ApplyJobSucceeded").unwrap().1,
        "ApplySucceeded",
        "{tc:#}"
    );
}
