//! The Act step of a pass (spec: The Reconcile Lifecycle "One pass, one status patch", "Run
//! leases and the cluster operation gate", "The clusterctl move block", "Deletion order";
//! ENGINEERING.md §4 "Act"): every write of the pass, in the order [`plan::plan`] gives (each
//! logged at `-v=4` before it is made), each idempotent so that a crash between two of them is
//! repaired by the next pass. [`writes`] makes what Observe found to write; [`start`] starts a
//! Job (the run lease, the cluster operation gate, the state lock, the durable inputs at an
//! apply's start, the move block, then the Job and its per-run Secret, both named
//! deterministically so a second pass finds what the first created); [`finish`] writes the
//! status, marks the Jobs bookkept, and cleans up a deletion before it drops the finalizer.
//! Writes to the object carry its resourceVersion; a conflict ends the pass and requeues it. An
//! event that reports a write no later pass repeats is published with that write, whether or not
//! the status write lands.

mod start;
mod writes;

use std::time::Duration;

use api::constants::{annotations, events};
use contract::names::{
    ObjectKind, Operation, cluster_lease_name, durable_inputs_secret_name, run_lease_name,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::controller::Action;
use tracing::{debug, warn};

use crate::kinds::identity;
use crate::pass::observed::{GateBlock, StateRead};
use crate::pass::{Error, Pass};
use crate::reconcile::bookkeeping;
use crate::reconcile::decide::{self, Decision, StartJob, WaitReason};
use crate::reconcile::observe::Observation;
use crate::reconcile::plan::{self, Write};
use crate::reconcile::report;
use crate::runtime::context::StatusDraft;
use crate::runtime::kubeutil::{delete_opt, is_conflict};
use crate::state;

/// What Act did.
#[derive(Debug)]
pub struct Acted {
    /// The decision, as carried out (a start that met a lease or lock became a wait).
    pub decision: Decision,
    /// The Job started: the start and the Job's name.
    pub started: Option<(StartJob, String)>,
    /// When to look again.
    pub requeue: Option<Duration>,
    /// The pass stops after the status patch and looks again at once (the finalizer was just
    /// added to an object that is not paused).
    pub stop_after_patch: bool,
    /// The state backup this pass copied, for `status.stateBackups`.
    pub taken_backup: Option<api::status::StateBackup>,
}

/// The tracing target of the planned-write log lines (`-v=4` shows them).
pub const WRITES_TARGET: &str = "captf::writes";

/// Carries out the pass: every write [`plan`] lists, in its order, the decision among them.
pub async fn act(
    p: &mut Pass<'_>,
    o: &mut Observation,
    decision: Decision,
) -> Result<Acted, Error> {
    let planned = plan::plan(o, &decision);
    let mut acted = Acted {
        decision,
        started: None,
        requeue: None,
        stop_after_patch: false,
        taken_backup: None,
    };
    for write in planned {
        debug!(
            target: WRITES_TARGET,
            kind = p.kind_name(), namespace = %p.ns, name = %p.name, write = %write,
            "planned write"
        );
        match write {
            Write::Decision(_) => carry_out(p, o, &mut acted).await?,
            other => writes::make(p, o, &mut acted, other).await?,
        }
    }
    writes::backup_status(p, o, &acted);
    Ok(acted)
}

/// The decision carried out: the leases a waiting cluster holds, a Job started (or the start
/// turned into a wait), a stuck Job deleted, the finalizer added; the move block cleared once
/// no Job is active.
async fn carry_out(p: &mut Pass<'_>, o: &mut Observation, acted: &mut Acted) -> Result<(), Error> {
    if let Decision::Wait {
        reason: WaitReason::MachineOperations { operation, job },
        ..
    } = &acted.decision
        && let Some(reason) =
            start::take_run_and_cluster_leases(p, &o.cluster_name, *operation, job).await?
    {
        acted.decision = Decision::Wait {
            reason,
            requeue_after: Some(decide::schedule_jitter(&p.uid, decide::LEASE_RECHECK)),
        };
    }
    if let Decision::StartJob(start) = &acted.decision {
        let start = start.clone();
        match start::start_job(p, o, &start).await? {
            start::Started::Yes(job) => acted.started = Some((start, job)),
            start::Started::Wait(reason) => {
                acted.decision = Decision::Wait {
                    reason,
                    requeue_after: Some(decide::schedule_jitter(&p.uid, decide::LEASE_RECHECK)),
                };
            }
        }
    }
    if let Decision::Wait {
        reason: WaitReason::JobActive { job },
        ..
    } = &acted.decision
        && let Some(record) = o.books.records.iter().find(|r| &r.name == job).cloned()
    {
        start::repair_run_secret(p, o, &record).await?;
    }
    match &acted.decision {
        Decision::AddFinalizer => {
            add_finalizer(p, o.owner.paused).await?;
            until_cached(p).await;
            // A paused object is looked at again when it is unpaused (a watch event), not at
            // once: this pass did all its paused branch does.
            acted.stop_after_patch = !o.owner.paused;
        }
        Decision::DeleteStuckJob { job, why } => {
            if matches!(why, decide::Stuck::Deleting)
                && bookkeeping::module_ever_started(&p.ctx.client, &p.ns, job).await?
            {
                return Err(Error::Stale(
                    "the Job's module started since the pod cache showed it",
                ));
            }
            let jobs: Api<Job> = Api::namespaced(p.ctx.client.clone(), &p.ns);
            delete_opt(&jobs, job).await?;
            let note = match why {
                decide::Stuck::NeverStarts => format!(
                    "Job {job} could never start (its per-run Secret is missing) and was deleted"
                ),
                decide::Stuck::Deleting => format!(
                    "Job {job} was deleted with its object: its module never started (an image it cannot \
                     pull, say)"
                ),
            };
            p.announced.warning(events::STUCK_JOB_DELETED, note);
            acted.requeue = Some(Duration::from_secs(1));
        }
        Decision::Wait { requeue_after, .. } | Decision::Nothing { requeue_after } => {
            acted.requeue = *requeue_after;
        }
        Decision::DropFinalizer => confirm_nothing_to_destroy(p, o).await?,
        Decision::StartJob(_) => {}
    }
    let op = match &acted.decision {
        Decision::StartJob(s) => s.operation.as_str(),
        _ => "none",
    };
    p.ctx
        .metrics
        .op_decision(p.kind_name(), op, report::decision_reason(&acted.decision));
    // The clusterctl move block: cleared once no Job is active, paused or not.
    if o.active.is_none()
        && acted.started.is_none()
        && p.target.annotation(annotations::BLOCK_MOVE).is_some()
        && !p.move_block_cleared
    {
        set_block_move(p, false).await?;
    }
    Ok(())
}

/// A deletion that drops the finalizer because it found no state (rather than after a succeeded
/// destroy) checks that against the API server first: the Secret cache may lag the Job cache, and
/// a first apply that wrote state and then failed must not have its state removed and its
/// infrastructure orphaned. A state found ends the pass without a write; the next pass reads it.
async fn confirm_nothing_to_destroy(p: &Pass<'_>, o: &Observation) -> Result<(), Error> {
    if o.state != StateRead::None {
        return Ok(());
    }
    if state::exists(&p.ctx.client, &p.ns, &p.suffix).await? {
        state::forget_decoded(&p.ctx.caches, &p.uid);
        return Err(Error::Stale(
            "a state exists that the cache did not show; nothing is removed",
        ));
    }
    Ok(())
}

/// A start the credentials step could not prepare (the mirror or the runner RBAC write failed
/// for a reason the user must see) waits behind `gate` instead.
pub(crate) fn block_start(acted: &mut Acted, gate: GateBlock) {
    let starting = matches!(
        acted.decision,
        Decision::StartJob(_)
            | Decision::Wait {
                reason: WaitReason::MachineOperations { .. },
                ..
            }
    );
    if starting {
        acted.decision = Decision::Wait {
            reason: WaitReason::Gate(gate),
            requeue_after: None,
        };
    }
}

/// Where a Job's rendered inputs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderFrom {
    /// The current inputs.
    Current,
    /// The durable inputs Secret, else (when there is none) the current inputs.
    Durable,
}

/// Where the inputs of a Job of `op` for inputs hash `hash` come from (Job Inputs): an apply or
/// plan renders the current inputs; a destroy always prefers the durable inputs (it runs what
/// was applied); a mutable kind's (a cluster's or a pool's) drift, refresh or restore uses the
/// current inputs when they built, carrying that very hash, else the durable ones; a machine's
/// always the durable ones.
pub fn render_from(
    op: Operation,
    kind: ObjectKind,
    current_hash: Option<&str>,
    hash: &str,
) -> RenderFrom {
    match op {
        Operation::Apply | Operation::Plan => RenderFrom::Current,
        Operation::Destroy => RenderFrom::Durable,
        _ if crate::kinds::workload::mutable(kind) && current_hash == Some(hash) => {
            RenderFrom::Current
        }
        _ => RenderFrom::Durable,
    }
}

async fn set_block_move(p: &mut Pass<'_>, on: bool) -> Result<(), Error> {
    p.patch_object_accounted(&block_move_patch(on)).await
}

/// The merge patch that sets (`on`) or clears the clusterctl move block.
fn block_move_patch(on: bool) -> serde_json::Value {
    let value = if on {
        serde_json::Value::String(String::new())
    } else {
        serde_json::Value::Null
    };
    serde_json::json!({"metadata": {"annotations": {annotations::BLOCK_MOVE: value}}})
}

/// Adds the finalizer. On a paused object the write is one this pass accounts for (its watch
/// event wakes no one): the pass writes the status as well, and nothing is left for another
/// pass before the unpause.
async fn add_finalizer(p: &mut Pass<'_>, paused: bool) -> Result<(), Error> {
    let mut finalizers = p.target.meta().finalizers.clone().unwrap_or_default();
    finalizers.push(p.target.finalizer().to_owned());
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
    if paused {
        p.patch_object_accounted(&patch).await
    } else {
        p.patch_object(&patch).await
    }
}

/// How long the pass that adds the finalizer waits for the cache to show it.
const FINALIZER_SEEN_WITHIN: Duration = Duration::from_secs(1);

/// Waits, up to [`FINALIZER_SEEN_WITHIN`], until the object's cache shows a version newer than
/// the one the pass began from (the finalizer's own, or a later one). A pass that another watch
/// wakes meanwhile (the Secrets created with a moved object, say) runs once this one ended, on
/// the object with its finalizer, instead of adding it again under the old resourceVersion (a
/// refused write, and one more pass).
async fn until_cached(p: &Pass<'_>) {
    use crate::runtime::context::Target;
    use kube::runtime::reflector::ObjectRef;
    let began = p.target.meta().resource_version.clone();
    let (caches, ns, name) = (&p.ctx.caches, p.ns.as_str(), p.name.as_str());
    let cached = || match p.target {
        Target::Cluster(_) => (caches.terraform_clusters)
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|o| o.metadata.resource_version.clone()),
        Target::Machine(_) => (caches.terraform_machines)
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|o| o.metadata.resource_version.clone()),
        Target::Pool(_) => (caches.terraform_machine_pools)
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|o| o.metadata.resource_version.clone()),
    };
    let deadline = std::time::Instant::now() + FINALIZER_SEEN_WITHIN;
    while cached() == began && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deletion order's cleanup: mirror ownership, leases, durable inputs, then state (last: a
/// cleanup cut short is finished by the next pass, which still finds the succeeded destroy).
async fn cleanup(p: &mut Pass<'_>, cluster_name: &str) -> Result<(), Error> {
    let client = &p.ctx.client;
    let ns = &p.ns;
    identity::release_mirrors(client, ns, &p.uid, &mut p.outbox).await?;
    let leases_api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    delete_opt(&leases_api, &run_lease_name(&p.suffix)).await?;
    if p.kind == ObjectKind::Cluster && !cluster_name.is_empty() {
        delete_opt(&leases_api, &cluster_lease_name(ns, cluster_name)).await?;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    delete_opt(&secrets, &durable_inputs_secret_name(p.kind, &p.name)).await?;
    state::remove(client, ns, &p.suffix).await?;
    Ok(())
}

/// The end of a pass: the cleanup of a deletion, the one status patch (under the object's
/// resourceVersion), the finished Jobs marked bookkept and counted, the finalizer dropped (also
/// under a precondition), the events published.
pub async fn finish(
    mut p: Pass<'_>,
    o: Observation,
    acted: Acted,
    reported: report::Reported,
) -> Result<Action, Error> {
    let drop_finalizer = acted.decision == Decision::DropFinalizer;
    let mut last = None;
    if drop_finalizer {
        p.outbox.extend(reported.events);
        last = Some(reported.status);
        cleanup(&mut p, &o.cluster_name).await?;
    } else if acted.stop_after_patch {
        // The pass that added the finalizer writes no status: the next pass, a moment later,
        // writes the same conditions and announces their transitions (Status: no pass whose
        // only write is a status another pass writes anyway). On a paused object no next pass
        // acts until the unpause, so that one writes `Paused=True` with the rest.
    } else if !report::write_status(&mut p, reported).await? {
        // The object changed since the cache showed it (or it is gone): the newer version
        // wakes this object again; of this pass only the writes already made are announced.
        let reference = p.target.reference();
        p.announced.publish(p.ctx, &reference).await;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if let Some(last) = last {
        mark_bookkept(&p, &o).await?;
        return drop_the_finalizer(p, last).await;
    }
    // The status landed: the Jobs are marked bookkept and the pass's events posted, at once
    // (neither waits for the other).
    let reference = p.target.reference();
    let ctx = p.ctx;
    let mut events = std::mem::take(&mut p.announced);
    events.extend(std::mem::take(&mut p.outbox));
    let (marked, ()) = tokio::join!(mark_bookkept(&p, &o), events.publish(ctx, &reference));
    marked?;
    Ok(Action::requeue(requeue_after(
        acted.requeue,
        acted.started.is_some(),
        acted.stop_after_patch,
        ctx.settings.sync_period,
    )))
}

/// The Jobs this pass bookkept marked `captf.io/bookkept`, after its status write, and counted.
async fn mark_bookkept(p: &Pass<'_>, o: &Observation) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    for k in &o.books.kept {
        crate::reconcile::bookkeeping::mark_bookkept(&jobs, k, &p.ctx.caches).await?;
        crate::reconcile::bookkeeping::count(&p.ctx.metrics, p, k, &o.books.records);
    }
    Ok(())
}

/// When a pass looks at the object again: right after adding the finalizer; after a Job start,
/// once the Job may be judged stuck; else when the decision asked (at least half a second
/// later); never later than `--sync-period`.
pub fn requeue_after(
    asked: Option<Duration>,
    started: bool,
    finalizer_added: bool,
    sync_period: Duration,
) -> Duration {
    if finalizer_added {
        return Duration::from_millis(200);
    }
    let after = if started {
        decide::STUCK_AFTER + Duration::from_secs(1)
    } else {
        asked.unwrap_or(sync_period).max(Duration::from_millis(500))
    };
    after.min(sync_period)
}

/// `Deleting=True/DeletionCompleted` on an object another finalizer still holds, right after
/// CAPTF's finalizer went (under the resourceVersion that removal returned), with the rest of the
/// status this pass reported (the destroy's `ApplyJobSucceeded`). An object already gone is left
/// as it is; one changed meanwhile is not written, and the pass its change wakes reads the same
/// (Observe keeps `DeletionCompleted` on a deleting object without CAPTF's finalizer).
async fn deletion_completed(p: &mut Pass<'_>, mut status: StatusDraft) {
    use api::constants::{conditions as ctype, reasons};
    let w = status.workload_mut();
    let mut conds = crate::pass::conditions::Conditions::new(
        w.conditions.take(),
        p.generation,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(p.now_ts),
    );
    conds.set(
        ctype::DELETING,
        contract::health::ConditionStatus::True,
        reasons::DELETION_COMPLETED,
        crate::reconcile::observe::DELETION_COMPLETED_MESSAGE,
    );
    w.conditions = Some(conds.into_list());
    let Some(patch) = crate::runtime::patch::merge_patch(&p.before, &status.to_value()) else {
        return;
    };
    let body = serde_json::json!({
        "metadata": {"resourceVersion": p.rv},
        "status": patch,
    });
    match p.target.merge_patch(&p.ctx.client, &body, true).await {
        Ok(Some(meta)) => p.rv = meta.resource_version,
        Ok(None) => {}
        Err(e) => {
            warn!(namespace = %p.ns, name = %p.name, error = %e, "DeletionCompleted not written");
        }
    }
}

async fn drop_the_finalizer(mut p: Pass<'_>, last: StatusDraft) -> Result<Action, Error> {
    let finalizers: Vec<String> = p
        .target
        .meta()
        .finalizers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != p.target.finalizer())
        .collect();
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
    match p.patch_object(&patch).await {
        Ok(()) => {}
        Err(Error::Kube(e)) if is_conflict(&e) => {
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        Err(e) => return Err(e),
    }
    // Another finalizer keeps the object: its status says the deletion is done on CAPTF's side.
    if !finalizers.is_empty() {
        deletion_completed(&mut p, last).await;
    }
    // The last object of the namespace takes the runner's RBAC and CAPTF's leases with it.
    let client = &p.ctx.client;
    if let Err(e) =
        crate::runtime::sweep::sweep_namespace(client, &p.ns, Some(&p.uid), Duration::ZERO).await
    {
        warn!(namespace = %p.ns, error = %e, "orphan sweep after a finalizer's removal");
    }
    let (kind, name) = (p.kind_name(), p.name.clone());
    p.outbox.normal(
        events::DESTROYED,
        format!("{kind} {name}: infrastructure destroyed and state removed"),
    );
    p.outbox.normal(
        events::FINALIZER_REMOVED,
        format!("Finalizer removed from {kind} {name}"),
    );
    p.ctx.metrics.forget_object(kind, &p.ns, &name);
    let reference = p.target.reference();
    let ctx = p.ctx;
    p.announced.extend(p.outbox);
    p.announced.publish(ctx, &reference).await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::start::changed_at;
    use super::*;
    use crate::reconcile::decide::{ApplyReason, JobOutcome, JobRecord, StartJob, StartReason};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::SystemTime;

    fn t(secs: i64) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(secs).unwrap(),
        )
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn starting(reason: StartReason) -> StartJob {
        let operation = match reason {
            StartReason::Destroy => Operation::Destroy,
            StartReason::Plan(_) => Operation::Plan,
            StartReason::Refresh(_) | StartReason::DriftCheck => Operation::Refresh,
            StartReason::Apply(_) => Operation::Apply,
            StartReason::Restore => Operation::Restore,
            StartReason::Requested => Operation::Drift,
        };
        StartJob {
            operation,
            reason,
            attempt: 1,
            tick: None,
            inputs_hash: "h".into(),
            restore: None,
        }
    }

    /// Created at 100; spec written by a user at 300; status (a subresource) written at 900, and
    /// the manager's metadata-only write (the move block) at 800: neither is a spec change.
    fn meta() -> ObjectMeta {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let entry = |manager: &str, fields: serde_json::Value, sub: Option<&str>, time: i64| {
            ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some("Update".into()),
                fields_v1: Some(FieldsV1(fields)),
                subresource: sub.map(str::to_owned),
                time: Some(t(time)),
                ..ManagedFieldsEntry::default()
            }
        };
        ObjectMeta {
            creation_timestamp: Some(t(100)),
            managed_fields: Some(vec![
                entry(
                    "kubectl",
                    serde_json::json!({"f:spec": {"f:x": {}}}),
                    None,
                    300,
                ),
                entry(
                    "captf",
                    serde_json::json!({"f:status": {}}),
                    Some("status"),
                    900,
                ),
                entry(
                    "captf",
                    serde_json::json!({"f:metadata": {"f:annotations": {}}}),
                    None,
                    800,
                ),
            ]),
            ..ObjectMeta::default()
        }
    }

    fn applied(finished: u64, outcome: JobOutcome) -> JobRecord {
        JobRecord {
            name: "j".into(),
            operation: Operation::Apply,
            attempt: 1,
            tick: None,
            inputs_hash: "h0".into(),
            created: at(finished - 10),
            started: None,
            finished: Some(at(finished)),
            outcome: Some(outcome),
            drift_remediation: false,
            requested: None,
            run_secret_exists: true,
            pod_ever_started: true,
            module_never_started: false,
            pull_failure: None,
        }
    }

    /// `captf_job_create_delay_seconds` counts from the change that made the operation due: the
    /// last spec write (not a status or metadata write) for a first apply or its plan, no earlier
    /// than the last successful apply for changed inputs, the deletion for a destroy; scheduled
    /// operations and retries are no change.
    #[test]
    fn the_create_delay_counts_from_the_change_that_made_the_operation_due() {
        let m = meta();
        let first = StartReason::Apply(ApplyReason::FirstApply);
        assert_eq!(changed_at(&starting(first), &m, &[]), Some(at(300)));
        let plan = StartReason::Plan(ApplyReason::FirstApply);
        assert_eq!(changed_at(&starting(plan), &m, &[]), Some(at(300)));
        let bare = ObjectMeta {
            creation_timestamp: Some(t(100)),
            ..ObjectMeta::default()
        };
        assert_eq!(changed_at(&starting(first), &bare, &[]), Some(at(100)));
        let changed = StartReason::Apply(ApplyReason::InputsChanged);
        let records = [
            applied(500, JobOutcome::Succeeded),
            applied(700, JobOutcome::Failed),
        ];
        assert_eq!(changed_at(&starting(changed), &m, &records), Some(at(500)));
        assert_eq!(changed_at(&starting(changed), &m, &[]), Some(at(300)));
        let deleting = ObjectMeta {
            deletion_timestamp: Some(t(1_000)),
            ..meta()
        };
        let destroy = starting(StartReason::Destroy);
        assert_eq!(changed_at(&destroy, &deleting, &[]), Some(at(1_000)));
        for scheduled in [
            StartReason::Apply(ApplyReason::RetryFailedApply),
            StartReason::Apply(ApplyReason::DriftRemediation),
            StartReason::DriftCheck,
            StartReason::Refresh(decide::RefreshReason::PostApply),
        ] {
            assert_eq!(changed_at(&starting(scheduled), &m, &records), None);
        }
    }

    /// A destroy always renders from the durable inputs Secret, even when the current inputs
    /// carry the same hash (a TerraformCluster's current inputs may no longer be buildable, or
    /// may differ from what was applied in what the hash does not cover).
    #[test]
    fn a_destroy_always_prefers_the_durable_inputs() {
        for kind in [ObjectKind::Cluster, ObjectKind::Machine] {
            assert_eq!(
                render_from(Operation::Destroy, kind, Some("h1"), "h1"),
                RenderFrom::Durable
            );
            assert_eq!(
                render_from(Operation::Apply, kind, Some("h2"), "h2"),
                RenderFrom::Current
            );
        }
        assert_eq!(
            render_from(Operation::Drift, ObjectKind::Cluster, Some("h1"), "h1"),
            RenderFrom::Current
        );
        assert_eq!(
            render_from(Operation::Drift, ObjectKind::Cluster, Some("h2"), "h1"),
            RenderFrom::Durable
        );
        assert_eq!(
            render_from(Operation::Refresh, ObjectKind::Machine, None, "h1"),
            RenderFrom::Durable
        );
    }

    /// L5: a pool, mutable like a cluster, checks drift and refreshes against its current
    /// inputs when they built; a machine always against its durable inputs (Job Inputs).
    #[test]
    fn a_pools_drift_and_refresh_render_its_current_inputs() {
        for op in [Operation::Drift, Operation::Refresh] {
            assert_eq!(
                render_from(op, ObjectKind::MachinePool, Some("h1"), "h1"),
                RenderFrom::Current
            );
            assert_eq!(
                render_from(op, ObjectKind::MachinePool, None, "h1"),
                RenderFrom::Durable
            );
            assert_eq!(
                render_from(op, ObjectKind::Machine, Some("h1"), "h1"),
                RenderFrom::Durable
            );
        }
    }

    /// Every requeue is capped by `--sync-period`.
    #[test]
    fn requeues_are_capped_by_the_sync_period() {
        let sync = Duration::from_secs(600);
        assert_eq!(requeue_after(None, false, false, sync), sync);
        assert_eq!(
            requeue_after(Some(Duration::from_secs(3600)), false, false, sync),
            sync
        );
        assert_eq!(
            requeue_after(Some(Duration::from_secs(30)), false, false, sync),
            Duration::from_secs(30)
        );
        assert_eq!(
            requeue_after(Some(Duration::ZERO), false, false, sync),
            Duration::from_millis(500)
        );
        let short = Duration::from_secs(20);
        assert_eq!(requeue_after(None, true, false, short), short);
        assert_eq!(
            requeue_after(None, false, true, sync),
            Duration::from_millis(200)
        );
    }

    /// A restore counts from the last write of its annotation, not from the spec.
    #[test]
    fn a_restore_is_due_from_its_annotation_write() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let entry = |secs: i64, fields: serde_json::Value| ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            operation: Some("Update".into()),
            time: Some(t(secs)),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        };
        let meta = ObjectMeta {
            creation_timestamp: Some(t(100)),
            managed_fields: Some(vec![
                entry(300, serde_json::json!({"f:spec": {"f:x": {}}})),
                entry(
                    500,
                    serde_json::json!({"f:metadata": {"f:annotations": {
                        "f:captf.io/restore-state": {}}}}),
                ),
                entry(
                    700,
                    serde_json::json!({"f:metadata": {"f:annotations": {"f:other": {}}}}),
                ),
            ]),
            ..ObjectMeta::default()
        };
        assert_eq!(
            changed_at(&starting(StartReason::Restore), &meta, &[]),
            Some(at(500))
        );
        assert_eq!(
            changed_at(&starting(StartReason::Restore), &ObjectMeta::default(), &[]),
            None
        );
    }

    /// M2: a missing per-run Secret is written from the inputs of the very hash its Job was
    /// named (and, under Manual, approved) for: the durable inputs when they carry that hash,
    /// else only current inputs of that hash (checked after they are built), never the durable
    /// inputs of another apply.
    #[test]
    fn a_missing_per_run_secret_is_repaired_only_from_inputs_of_its_jobs_hash() {
        use super::start::{RepairFrom, repair_from};
        assert_eq!(
            repair_from(Operation::Apply, "x", Some("x")),
            RepairFrom::Durable
        );
        assert_eq!(
            repair_from(Operation::Apply, "x", Some("x2")),
            RepairFrom::CurrentOfSameHash
        );
        assert_eq!(
            repair_from(Operation::Destroy, "x", None),
            RepairFrom::CurrentOfSameHash
        );
        assert_eq!(
            repair_from(Operation::Restore, "x", None),
            RepairFrom::Restore
        );
    }
}
