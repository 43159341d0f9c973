//! The Act step of a pass (spec: The Reconcile Lifecycle "Run leases and the cluster operation
//! gate", "The clusterctl move block", "Deletion order", "One pass, one status patch";
//! ENGINEERING.md §4 "Act"): the decision carried out, each write idempotent so that a crash
//! between two of them is repaired by the next pass. Starting a Job takes the run lease, crosses
//! the cluster operation gate, checks the state lock, writes the durable inputs at an apply's
//! start, sets the move block, then creates the Job and its per-run Secret; both names are
//! deterministic, so a second pass finds what the first created. Writes to the object carry its
//! resourceVersion; a conflict ends the pass and requeues it.

use std::time::{Duration, SystemTime};

use api::constants::{annotations, conditions as ctype, events, reasons};
use api::shared::ApplyPolicy;
use contract::health::ConditionStatus;
use contract::names::{
    ObjectKind, Operation, cluster_lease_name, durable_inputs_secret_name, run_lease_name,
};
use contract::render::RenderedInputs;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use tracing::{info, warn};

use crate::decide::{
    self, ApplyReason, Decision, JobOutcome, JobRecord, StartJob, StartReason, WaitReason,
};
use crate::kubeutil::{delete_opt, is_conflict};
use crate::leases::{self, Take};
use crate::observe::Observation;
use crate::reconcile::{Error, Pass};
use crate::state::{self, LockCheck};
use crate::{identity, inputs, job, report};

/// What Act did.
#[derive(Debug)]
pub struct Acted {
    /// The decision, as carried out (a start that met a lease or lock became a wait).
    pub decision: Decision,
    /// The Job started: the start and the Job's name.
    pub started: Option<(StartJob, String)>,
    /// When to look again.
    pub requeue: Option<Duration>,
    /// The pass stops after the status patch (the finalizer was just added).
    pub stop_after_patch: bool,
}

/// Carries out `decision`.
pub async fn act(
    p: &mut Pass<'_>,
    o: &mut Observation,
    decision: Decision,
) -> Result<Acted, Error> {
    let mut acted = Acted {
        decision,
        started: None,
        requeue: None,
        stop_after_patch: false,
    };
    if let Decision::Wait {
        reason: WaitReason::MachineOperations { operation, job },
        ..
    } = &acted.decision
        && let Some(reason) =
            take_run_and_cluster_leases(p, &o.cluster_name, *operation, job).await?
    {
        acted.decision = Decision::Wait {
            reason,
            requeue_after: Some(decide::schedule_jitter(&p.uid, decide::LEASE_RECHECK)),
        };
    }
    if let Decision::StartJob(start) = &acted.decision {
        let start = start.clone();
        match start_job(p, o, &start).await? {
            Started::Yes(job) => acted.started = Some((start, job)),
            Started::Wait(reason) => {
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
        repair_run_secret(p, o, &record).await?;
    }
    match &acted.decision {
        Decision::AddFinalizer => {
            add_finalizer(p).await?;
            acted.stop_after_patch = true;
        }
        Decision::DeleteStuckJob { job } => {
            let jobs: Api<Job> = Api::namespaced(p.ctx.client.clone(), &p.ns);
            delete_opt(&jobs, job).await?;
            p.announced.warning(
                events::STUCK_JOB_DELETED,
                format!(
                    "Job {job} could never start (its per-run Secret is missing) and was deleted"
                ),
            );
            acted.requeue = Some(Duration::from_secs(1));
        }
        Decision::Wait { requeue_after, .. } | Decision::Nothing { requeue_after } => {
            acted.requeue = *requeue_after;
        }
        Decision::StartJob(_) | Decision::DropFinalizer => {}
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
    {
        set_block_move(p, false).await?;
    }
    Ok(acted)
}

enum Started {
    Yes(String),
    Wait(WaitReason),
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
/// was applied); a cluster's drift, refresh or restore uses the current inputs when they carry
/// that very hash, else the durable ones.
pub fn render_from(
    op: Operation,
    kind: ObjectKind,
    current_hash: Option<&str>,
    hash: &str,
) -> RenderFrom {
    match op {
        Operation::Apply | Operation::Plan => RenderFrom::Current,
        Operation::Destroy => RenderFrom::Durable,
        _ if kind == ObjectKind::Cluster && current_hash == Some(hash) => RenderFrom::Current,
        _ => RenderFrom::Durable,
    }
}

/// The inputs a Job renders, per [`render_from`].
async fn inputs_to_render(
    p: &Pass<'_>,
    o: &mut Observation,
    operation: Operation,
    inputs_hash: &str,
) -> Result<Option<RenderedInputs>, Error> {
    // A restore's root is the backend alone (the runner writes it); its per-run Secret carries
    // no module inputs.
    if operation == Operation::Restore {
        return Ok(Some(RenderedInputs {
            kind: p.kind,
            main_tf_json: contract::render::restore_main_tf_json(),
            tfvars_json: "{}".to_owned(),
            inputs_hash: inputs_hash.to_owned(),
        }));
    }
    let current_hash = o.current.as_ref().map(|c| c.inputs_hash.as_str());
    match render_from(operation, p.kind, current_hash, inputs_hash) {
        RenderFrom::Current => Ok(o.current.clone()),
        RenderFrom::Durable => {
            let durable = o
                .durable
                .rendered(&p.ctx.client, p.kind, inputs_hash)
                .await?;
            Ok(durable.or_else(|| o.current.clone()))
        }
    }
}

/// Takes the leases, checks the lock, writes the durable and per-run inputs and creates the Job.
async fn start_job(
    p: &mut Pass<'_>,
    o: &mut Observation,
    start: &StartJob,
) -> Result<Started, Error> {
    let op = start.operation;
    let Some(identity) = o.identity.clone() else {
        return Ok(Started::Wait(WaitReason::InputsUnavailable {
            reason: None,
        }));
    };
    let Some(rendered) = inputs_to_render(p, o, op, &start.inputs_hash).await? else {
        if op == Operation::Destroy {
            p.findings.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::False,
                reasons::DESTROY_FAILED,
                "The durable inputs Secret is missing: destroy has nothing to run against",
            );
        }
        return Ok(Started::Wait(WaitReason::InputsUnavailable {
            reason: None,
        }));
    };
    let (target, ctx) = (p.target, p.ctx);
    let spec_image = target.workspace().source.image.clone();
    let image = image_to_run(p, o, op);
    let approved_destructive = target.annotation(annotations::APPROVE_DESTRUCTIVE_PLAN);
    let guard_deletes = p.kind == ObjectKind::Cluster && op == Operation::Apply;
    let expect_plan = expected_plan(p, start);
    let (ns, name, uid, suffix) = (
        p.ns.clone(),
        p.name.clone(),
        p.uid.clone(),
        p.suffix.clone(),
    );
    let (cluster_name, policy) = (o.cluster_name.clone(), o.policy.clone());
    let mut request = job::JobRequest {
        kind: p.kind,
        namespace: &ns,
        name: &name,
        uid: &uid,
        cluster_name: &cluster_name,
        operation: op,
        attempt: start.attempt,
        tick: start.tick.as_deref(),
        inputs_hash: &start.inputs_hash,
        image: &image,
        image_ref: &spec_image,
        pull_policy: target.workspace().source.image_pull_policy,
        policy: &policy,
        identity: &identity,
        runner_image: &ctx.settings.runner_image,
        state_suffix: &suffix,
        guard_deletes,
        allow_deletes_hash: approved_destructive.filter(|_| guard_deletes),
        expect_plan: expect_plan.as_deref(),
        force_unlock: None,
        runner_events: p.ctx.settings.runner_events,
        drift_remediation: start.drift_remediation(),
        approved_plan: expect_plan.as_deref(),
        restore: start.restore,
    };
    let job_name = job::job_name(&request);
    // The cache may not show yet a Job a pass just created: a deterministic name that exists is
    // that Job, started already (its leases and lock are its own; nothing is taken again).
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(existing) = jobs.get_opt(&job_name).await? {
        ctx.caches.created.add(existing);
        return Ok(Started::Yes(job_name));
    }
    if let Some(wait) = take_leases(p, &cluster_name, op, &job_name).await? {
        return Ok(Started::Wait(wait));
    }
    confirm_state(p, o, &cluster_name, &job_name).await?;
    let force_unlock = match lock(p, &cluster_name, &job_name).await? {
        Ok(unlock) => unlock,
        Err(wait) => return Ok(Started::Wait(wait)),
    };
    if op == Operation::Apply {
        write_durable(p, o, &request, &rendered).await?;
    }
    // The clusterctl move block, just before the Job.
    if p.target.annotation(annotations::BLOCK_MOVE).is_none() {
        set_block_move(p, true).await?;
    }
    request.force_unlock = force_unlock.as_deref();
    if create_job(p, &request, &rendered).await? {
        if let Some(changed) = changed_at(start, p.target.meta(), &o.books.records) {
            let delay = SystemTime::now()
                .duration_since(changed)
                .unwrap_or_default();
            (p.ctx.metrics).job_create_delay(p.kind_name(), op.as_str(), delay.as_secs_f64());
        }
        let unlock = force_unlock.is_some();
        announce(p, start, &job_name, &image, unlock, expect_plan.as_deref());
    }
    Ok(Started::Yes(job_name))
}

/// When the object changed in the way that made `start` due (`captf_job_create_delay_seconds`
/// measures from there to the Job's creation): a destroy from the deletion timestamp; a first
/// apply, an apply of changed inputs, or the plan standing in for either, from the object's last
/// spec write (the newest `managedFields` entry of the object itself that owns `spec` fields),
/// else its creation. Changed inputs count from no earlier than the end of the last successful
/// apply: inputs that changed through a referenced ConfigMap, Secret or the Cluster changed after
/// it. A restore counts from the last write of its `captf.io/restore-state` annotation. Retries,
/// refreshes and drift checks are due by a schedule, not a change: `None`.
/// When `captf.io/restore-state` was last written (the newest `managedFields` entry owning it).
fn restore_asked_at(meta: &ObjectMeta) -> Option<SystemTime> {
    let owned = format!(
        "/f:metadata/f:annotations/f:{}",
        annotations::RESTORE_STATE
            .replace('~', "~0")
            .replace('/', "~1")
    );
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(&owned).is_some())
        })
        .filter_map(|m| m.time.as_ref().map(|t| SystemTime::from(t.0)))
        .max()
}

pub(crate) fn changed_at(
    start: &StartJob,
    meta: &ObjectMeta,
    records: &[JobRecord],
) -> Option<SystemTime> {
    let reason = match start.reason {
        StartReason::Destroy => return meta.deletion_timestamp.as_ref().map(|t| t.0.into()),
        StartReason::Apply(r) | StartReason::Plan(r) => r,
        StartReason::Refresh(_) | StartReason::DriftCheck => return None,
        StartReason::Restore => return restore_asked_at(meta),
    };
    let spec_written = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or_default().is_empty())
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:spec").is_some())
        })
        .filter_map(|m| m.time.as_ref().map(|t| SystemTime::from(t.0)));
    let created = meta.creation_timestamp.as_ref().map(|t| t.0.into());
    let changed = spec_written.chain(created).max();
    match reason {
        ApplyReason::FirstApply => changed,
        ApplyReason::InputsChanged | ApplyReason::NoInputsHash => {
            let applied = records
                .iter()
                .filter(|r| {
                    r.operation == Operation::Apply && r.outcome == Some(JobOutcome::Succeeded)
                })
                .filter_map(|r| r.finished);
            changed.into_iter().chain(applied).max()
        }
        ApplyReason::RetryFailedApply | ApplyReason::DriftRemediation => None,
    }
}

/// Under applyPolicy Manual an apply (but the first) runs only the plan reviewed in status.plan:
/// approved, or without changes.
fn expected_plan(p: &Pass<'_>, start: &StartJob) -> Option<String> {
    let plan = p.facts.plan()?;
    let manual = crate::workload::apply_policy(p.target) == ApplyPolicy::Manual;
    (manual && start.operation == Operation::Apply && plan.inputs_hash == start.inputs_hash)
        .then(|| plan.plan_hash.clone())
}

/// The image to run: a machine's pinned `repo@digest` once it has one, else `spec.source.image`.
fn image_to_run(p: &Pass<'_>, o: &Observation, op: Operation) -> String {
    let spec_image = p.target.workspace().source.image.clone();
    let pinned = match p.kind {
        ObjectKind::Machine if op != Operation::Apply => o
            .durable
            .annotation(annotations::IMAGE_DIGEST)
            .zip(o.durable.annotation(annotations::IMAGE)),
        _ => None,
    };
    let Some((digest, image)) = pinned else {
        return spec_image;
    };
    match contract::image_ref::parse(image) {
        Ok(r) => {
            let repo = match r.host {
                Some(h) => format!("{h}/{}", r.path),
                None => r.path.to_owned(),
            };
            format!("{repo}@{digest}")
        }
        Err(_) => spec_image,
    }
}

/// The run lease, then the cluster operation gate; `Some(wait)` when the Job must wait. `decide`
/// already waited on what the caches show; this is the write itself, and its check against the
/// API server: a lease taken meanwhile by another pass or manager turns the start into a wait.
/// A lease taken and then not used is given back.
async fn take_leases(
    p: &Pass<'_>,
    cluster_name: &str,
    op: Operation,
    job_name: &str,
) -> Result<Option<WaitReason>, Error> {
    let gated = matches!(
        op,
        Operation::Apply | Operation::Destroy | Operation::Restore
    );
    let gate = p.ctx.settings.cluster_operation_gate && gated && !cluster_name.is_empty();
    let (client, ns) = (&p.ctx.client, &p.ns);
    if gate && p.kind == ObjectKind::Cluster {
        if let Some(wait) = take_run_and_cluster_leases(p, cluster_name, op, job_name).await? {
            return Ok(Some(wait));
        }
        // The cluster keeps both leases while it waits: machines wait behind it meanwhile.
        if leases::machines_operating(client, ns, cluster_name).await? > 0 {
            return Ok(Some(WaitReason::MachineOperations {
                operation: op,
                job: job_name.to_owned(),
            }));
        }
        return Ok(None);
    }
    if let Some(wait) = take_run_lease(p, cluster_name, op, job_name).await? {
        return Ok(Some(wait));
    }
    if !gate {
        return Ok(None);
    }
    let cluster_lease = cluster_lease_name(ns, cluster_name);
    if leases::live_holder(client, ns, &cluster_lease)
        .await?
        .is_some()
    {
        leases::give_back(client, ns, &run_lease_name(&p.suffix), job_name).await?;
        return Ok(Some(WaitReason::ClusterOperation { operation: op }));
    }
    Ok(None)
}

/// The object's run lease for `job_name`; `Some(wait)` when another Job holds it.
async fn take_run_lease(
    p: &Pass<'_>,
    cluster_name: &str,
    op: Operation,
    job_name: &str,
) -> Result<Option<WaitReason>, Error> {
    let labels = leases::lease_labels(leases::RUN_LEASE, p.kind_name(), &p.name, cluster_name);
    let run_lease = run_lease_name(&p.suffix);
    match leases::take(
        &p.ctx.client,
        &p.ns,
        &run_lease,
        job_name,
        op.as_str(),
        labels,
    )
    .await?
    {
        Take::HeldBy(holder) => Ok(Some(WaitReason::RunLease {
            operation: op,
            job: holder,
        })),
        Take::Taken => Ok(None),
    }
}

/// A cluster's write lease for `job_name` (its run lease given back when another Job holds it).
async fn take_cluster_lease(
    p: &Pass<'_>,
    cluster_name: &str,
    op: Operation,
    job_name: &str,
) -> Result<Option<WaitReason>, Error> {
    let (client, ns) = (&p.ctx.client, &p.ns);
    let labels = leases::lease_labels(leases::CLUSTER_LEASE, p.kind_name(), &p.name, cluster_name);
    let cluster_lease = cluster_lease_name(ns, cluster_name);
    if let Take::HeldBy(holder) =
        leases::take(client, ns, &cluster_lease, job_name, op.as_str(), labels).await?
    {
        leases::give_back(client, ns, &run_lease_name(&p.suffix), job_name).await?;
        return Ok(Some(WaitReason::RunLease {
            operation: op,
            job: holder,
        }));
    }
    Ok(None)
}

/// A cluster's run lease, then its cluster write lease, for `job_name`; `Some(wait)` when another
/// Job holds one (the run lease is given back then). A cluster starting a gated Job takes both,
/// and a cluster waiting for its machines' operations holds (and so renews) both this way.
async fn take_run_and_cluster_leases(
    p: &Pass<'_>,
    cluster_name: &str,
    op: Operation,
    job_name: &str,
) -> Result<Option<WaitReason>, Error> {
    if let Some(wait) = take_run_lease(p, cluster_name, op, job_name).await? {
        return Ok(Some(wait));
    }
    take_cluster_lease(p, cluster_name, op, job_name).await
}

/// The state lock: free, stale (the Job force-unlocks it), or held by something else (the Job
/// waits, its leases given back).
async fn lock(
    p: &mut Pass<'_>,
    cluster_name: &str,
    job_name: &str,
) -> Result<Result<Option<String>, WaitReason>, Error> {
    let client = &p.ctx.client;
    let check = state::check_lock(client, &p.ns, &p.suffix, p.kind, &p.name).await?;
    let who = match check {
        LockCheck::Free => return Ok(Ok(None)),
        LockCheck::Stale { id } if state::exists(client, &p.ns, &p.suffix).await? => {
            return Ok(Ok(Some(id)));
        }
        LockCheck::Stale { id } => {
            release_lock_before_first_state(p, &id).await?;
            return Ok(Ok(None));
        }
        LockCheck::Held { who } => who,
    };
    p.findings.set(
        ctype::STATE_READABLE,
        ConditionStatus::False,
        reasons::STATE_LOCKED,
        &format!(
            "The state lock is held by {who}, not by one of this object's finished runner pods"
        ),
    );
    give_back_leases(p, cluster_name, job_name).await?;
    Ok(Err(WaitReason::StateUnreadable {
        reason: reasons::STATE_LOCKED,
    }))
}

/// The run lease (and a cluster's write lease) taken for `job_name`, given back unused.
async fn give_back_leases(p: &Pass<'_>, cluster_name: &str, job_name: &str) -> Result<(), Error> {
    let client = &p.ctx.client;
    leases::give_back(client, &p.ns, &run_lease_name(&p.suffix), job_name).await?;
    if p.kind == ObjectKind::Cluster && !cluster_name.is_empty() {
        let lease = cluster_lease_name(&p.ns, cluster_name);
        leases::give_back(client, &p.ns, &lease, job_name).await?;
    }
    Ok(())
}

/// With the run lease held, the state the decision read is checked against the API server when
/// a Job of the object ran before: a Job that finished wrote its state before it finished, but
/// the Secret cache may show that later than the Job cache shows the Job finished, and a decision
/// made on the older state would run the operation again (a second apply of the same inputs,
/// say). A state that changed gives the leases back and ends the pass: the next pass, a second
/// later, reads the state from the API server and decides again.
async fn confirm_state(
    p: &Pass<'_>,
    o: &Observation,
    cluster_name: &str,
    job_name: &str,
) -> Result<(), Error> {
    let Some(version) = o.state_version.as_deref() else {
        return Ok(());
    };
    if o.books.records.is_empty() {
        return Ok(());
    }
    let (client, caches) = (&p.ctx.client, &p.ctx.caches);
    if state::still_current(client, caches, &p.ns, &p.suffix, &p.uid, version).await? {
        return Ok(());
    }
    give_back_leases(p, cluster_name, job_name).await?;
    Err(Error::Stale("the state changed since the cache showed it"))
}

/// A stale lock over an object with no state yet is released by the manager, not by the Job: the
/// backend's init takes the lock to write the first, empty state, and fails on a held one before
/// the Job's force-unlock step could run. Counted and announced as a force-unlock.
async fn release_lock_before_first_state(p: &mut Pass<'_>, id: &str) -> Result<(), Error> {
    if state::release_stale_lock(&p.ctx.client, &p.ns, &p.suffix, id).await? {
        p.ctx.metrics.lock_force_unlock(p.kind_name());
        p.announced.warning(
            events::FORCE_UNLOCKED,
            "Released a stale state lock left by one of this object's runner pods: there is no \
             state yet, and the next Job's init would fail on the lock before it could \
             force-unlock it"
                .to_owned(),
        );
    }
    Ok(())
}

/// The durable inputs, written at an apply's start (with the digest pinned for this image).
async fn write_durable(
    p: &mut Pass<'_>,
    o: &mut Observation,
    request: &job::JobRequest<'_>,
    rendered: &RenderedInputs,
) -> Result<(), Error> {
    let previous_image = o.durable.annotation(annotations::IMAGE).map(str::to_owned);
    let spec_image = p.target.workspace().source.image.as_str();
    let digest = o
        .durable
        .annotation(annotations::IMAGE_DIGEST)
        .filter(|_| previous_image.as_deref() == Some(spec_image))
        .map(str::to_owned);
    let secret = job::durable_inputs_secret(
        &request.durable_inputs(digest.as_deref()),
        &rendered.main_tf_json,
        &rendered.tfvars_json,
    );
    let api: Api<Secret> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let name = durable_inputs_secret_name(p.kind, &p.name);
    let own = &p.ctx.caches.own_writes;
    let pp = PostParams::default();
    let written = if let Some(rv) = o.durable.resource_version() {
        let mut s = secret;
        s.metadata.resource_version = Some(rv);
        let write = api.replace(&name, &pp, &s);
        own.write("Secret", &p.ns, &name, write).await?
    } else {
        let write = api.create(&pp, &secret);
        own.write("Secret", &p.ns, &name, write).await?
    };
    o.durable.written(written);
    o.durable.remember(&p.ctx.caches, &p.uid);
    record_user_endpoint(p, o).await
}

/// `captf.io/endpoint-source: user` before the first apply when an endpoint is already set.
async fn record_user_endpoint(p: &mut Pass<'_>, o: &Observation) -> Result<(), Error> {
    let target = p.target;
    let crate::context::Target::Cluster(tc) = target else {
        return Ok(());
    };
    let record = contract::inputs::cluster::endpoint_source_to_record(
        target.annotation(annotations::ENDPOINT_SOURCE),
        !p.facts.provisioned(),
        inputs::endpoint(
            o.owner
                .cluster
                .as_ref()
                .and_then(|c| c.spec.control_plane_endpoint.as_ref()),
        )
        .as_ref(),
        inputs::endpoint(tc.spec.control_plane_endpoint.as_ref()).as_ref(),
        false,
    );
    if let Some(source) = record {
        let patch = serde_json::json!({"metadata": {"annotations": {
            annotations::ENDPOINT_SOURCE: source.as_str()}}});
        p.patch_object(&patch).await?;
    }
    Ok(())
}

/// The Job, then its per-run Secret; `true` when this pass created the Job (another manager, or
/// a pass before a crash, may have created this very Job already: it is then only completed).
async fn create_job(
    p: &mut Pass<'_>,
    request: &job::JobRequest<'_>,
    rendered: &RenderedInputs,
) -> Result<bool, Error> {
    let built = job::build_job(request);
    for dropped in &built.dropped_env {
        p.announced.warning(
            events::JOB_ENV_DROPPED,
            format!("spec.jobs.env entry {dropped} is reserved (TF_*, KUBE_* or set by the Job) and was dropped"),
        );
    }
    let jobs: Api<Job> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let job_name = job::job_name(request);
    let pp = PostParams::default();
    let create = jobs.create(&pp, &built.job);
    let own = &p.ctx.caches.own_writes;
    let (created, new) = match own.write("Job", &p.ns, &job_name, create).await {
        Ok(j) => (j, true),
        Err(e) if is_conflict(&e) => (jobs.get(&job_name).await?, false),
        Err(e) => return Err(e.into()),
    };
    p.ctx.caches.created.add(created.clone());
    create_run_secret(p, &created, rendered).await?;
    Ok(new)
}

/// Creates the per-run Secret of `job`; whether it was not there yet.
async fn create_run_secret(
    p: &Pass<'_>,
    job: &Job,
    rendered: &RenderedInputs,
) -> Result<bool, Error> {
    let run_secret = job::run_secret(job, &rendered.main_tf_json, &rendered.tfvars_json);
    let secrets: Api<Secret> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    match secrets.create(&PostParams::default(), &run_secret).await {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The per-run Secret of an active Job that has none and never ran a pod (a pass stopped between
/// creating the Job and its Secret, by a crash say): written now, from the inputs the Job was
/// named after, the way [`start_job`] renders them, so the Job starts instead of waiting to be
/// judged stuck and replaced by a second Job of the same attempt.
async fn repair_run_secret(
    p: &mut Pass<'_>,
    o: &mut Observation,
    record: &JobRecord,
) -> Result<(), Error> {
    if record.run_secret_exists || record.pod_ever_started || !record.is_active() {
        return Ok(());
    }
    // What the Job's pass had: the durable inputs it may just have written (the cache may not
    // show them yet) and the current inputs (not built while a Job is active).
    if !o.durable.exists() {
        let secrets: Api<Secret> = Api::namespaced(p.ctx.client.clone(), &p.ns);
        let name = durable_inputs_secret_name(p.kind, &p.name);
        if let Some(durable) = crate::kubeutil::get_opt(&secrets, &name).await? {
            o.durable.written(durable);
        }
    }
    let built = o.current.is_none();
    if built {
        o.current = crate::workload::build_inputs(p, &o.owner, &o.durable)
            .await?
            .ok();
    }
    let rendered = inputs_to_render(p, o, record.operation, &record.inputs_hash).await;
    if built {
        // The rest of the pass sees what observe saw.
        o.current = None;
    }
    let Some(rendered) = rendered? else {
        return Ok(());
    };
    let jobs: Api<Job> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let Some(created) = jobs.get_opt(&record.name).await? else {
        return Ok(());
    };
    if create_run_secret(p, &created, &rendered).await? {
        info!(namespace = %p.ns, job = %record.name, "per-run Secret of a Job written late");
    }
    Ok(())
}

/// The events and conditions of a Job this pass created.
fn announce(
    p: &mut Pass<'_>,
    start: &StartJob,
    job_name: &str,
    image: &str,
    force_unlock: bool,
    expect_plan: Option<&str>,
) {
    let kind = p.kind_name();
    if force_unlock {
        p.ctx.metrics.lock_force_unlock(kind);
        p.announced.warning(
            events::FORCE_UNLOCKED,
            format!("Job {job_name} force-unlocks a stale state lock left by one of this object's runner pods"),
        );
    }
    if start.reason == decide::StartReason::Apply(decide::ApplyReason::InputsChanged) {
        p.ctx.metrics.inputs_hash_change(kind);
        p.announced.normal(
            events::INPUTS_CHANGED,
            format!(
                "The inputs hash changed to {}; a new apply starts",
                start.inputs_hash
            ),
        );
    }
    if start.drift_remediation() {
        p.announced.normal(
            events::DRIFT_REMEDIATION_STARTED,
            format!("Remediation apply {job_name} started"),
        );
    }
    if let Some(hash) = expect_plan {
        p.announced.normal(
            events::PLAN_APPROVED,
            format!("Apply Job {job_name} runs the approved plan {hash}"),
        );
    }
    p.announced.normal(
        events::JOB_CREATED,
        format!(
            "{} Job {job_name} created (attempt {}, image {image}, reason {})",
            start.operation.as_str(),
            start.attempt,
            report::decision_reason(&Decision::StartJob(start.clone()))
        ),
    );
    info!(kind, namespace = %p.ns, name = %p.name, job = %job_name, "job created");
}

async fn set_block_move(p: &mut Pass<'_>, on: bool) -> Result<(), Error> {
    let value = if on {
        serde_json::Value::String(String::new())
    } else {
        serde_json::Value::Null
    };
    let patch = serde_json::json!({"metadata": {"annotations": {annotations::BLOCK_MOVE: value}}});
    p.patch_object_accounted(&patch).await
}

async fn add_finalizer(p: &mut Pass<'_>) -> Result<(), Error> {
    let mut finalizers = p.target.meta().finalizers.clone().unwrap_or_default();
    finalizers.push(p.target.finalizer().to_owned());
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
    p.patch_object(&patch).await
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
    if drop_finalizer {
        p.outbox.extend(reported.events);
        cleanup(&mut p, &o.cluster_name).await?;
    } else if !report::write_status(&mut p, reported).await? {
        // The object changed since the cache showed it (or it is gone): the newer version
        // wakes this object again; of this pass only the writes already made are announced.
        let reference = p.target.reference();
        p.announced.publish(p.ctx, &reference).await;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let jobs: Api<Job> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    for k in &o.books.kept {
        crate::bookkeeping::mark_bookkept(
            &jobs,
            &k.record.name,
            k.outcome,
            &p.ctx.caches.own_writes,
        )
        .await?;
        crate::bookkeeping::count(&p.ctx.metrics, &p, k, &o.books.records);
    }
    if drop_finalizer {
        return drop_the_finalizer(p).await;
    }
    let reference = p.target.reference();
    let ctx = p.ctx;
    p.announced.publish(ctx, &reference).await;
    p.outbox.publish(ctx, &reference).await;
    Ok(Action::requeue(requeue_after(
        acted.requeue,
        acted.started.is_some(),
        acted.stop_after_patch,
        ctx.settings.sync_period,
    )))
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

async fn drop_the_finalizer(mut p: Pass<'_>) -> Result<Action, Error> {
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
    // The last object of the namespace takes the runner's RBAC and CAPTF's leases with it.
    let client = &p.ctx.client;
    if let Err(e) = crate::sweep::sweep_namespace(client, &p.ns, Some(&p.uid), Duration::ZERO).await
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
    p.announced.publish(ctx, &reference).await;
    p.outbox.publish(ctx, &reference).await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            run_secret_exists: true,
            pod_ever_started: true,
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
}
