//! Starting a Job (spec: The Reconcile Lifecycle "Run leases and the cluster operation gate",
//! "The clusterctl move block", "Job names and history"; Job Inputs "Where inputs come from";
//! Terraform State "Locks"): the run lease and the cluster operation gate taken against the API
//! server, the state checked against the API server once the lease is held, the lock checked,
//! the durable inputs written at an apply's start, the move block set, then the Job and its
//! per-run Secret. A Job whose per-run Secret is missing is repaired from the inputs it was named
//! after.

use std::time::SystemTime;

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
use tracing::info;

use super::{RenderFrom, block_move_patch, render_from};
use crate::job;
use crate::kinds::inputs;
use crate::pass::{Error, Pass};
use crate::reconcile::decide::{
    self, ApplyReason, Decision, JobOutcome, JobRecord, StartJob, StartReason, WaitReason,
};
use crate::reconcile::observe::Observation;
use crate::reconcile::report;
use crate::runtime::kubeutil::is_conflict;
use crate::runtime::leases::{self, Take};
use crate::state::{self, LockCheck};

pub(super) enum Started {
    Yes(String),
    Wait(WaitReason),
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
pub(super) async fn start_job(
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
    let (service_account, keyless) = (o.service_account.clone(), o.keyless.clone());
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
        service_account: &service_account,
        keyless: keyless.as_deref(),
        runner_image: &ctx.settings.runner_image,
        state_suffix: &suffix,
        guard_deletes,
        allow_deletes_hash: approved_destructive.filter(|_| guard_deletes),
        expect_plan: expect_plan.as_deref(),
        force_unlock: None,
        runner_events: p.ctx.settings.runner_events,
        drift_remediation: start.drift_remediation(),
        requested: (start.reason == StartReason::Requested)
            .then(|| crate::reconcile::observe::requested_value(target))
            .flatten(),
        approved_plan: expect_plan.as_deref(),
        restore: start.restore,
    };
    let job_name = job::job_name(&request);
    // The inputs, the leases (with the Job looked up when the run lease named it already) and
    // the state lock go out at once: none depends on another's answer. The lock's reading counts
    // only once the leases are held (a pass that waits for a lease has read it for nothing).
    let (rendered, leases, lock_read) = tokio::join!(
        inputs_to_render(p, o, op, &start.inputs_hash),
        // Boxed: the leases' writes would make every pass's future as large as their own.
        Box::pin(take_leases(p, &cluster_name, op, &job_name)),
        state::check_lock(&ctx.client, &ns, &suffix, p.kind, &name)
    );
    let taken = match leases? {
        Leases::JobExists(existing) => {
            ctx.caches.written_jobs.add(*existing);
            return Ok(Started::Yes(job_name));
        }
        Leases::Taken { created } => Ok(created),
        Leases::Wait(wait) => Err(wait),
    };
    let Some(rendered) = rendered? else {
        give_back_leases(p, &cluster_name, &job_name).await?;
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
    let run_lease_created = match taken {
        Ok(created) => created,
        Err(wait) => return Ok(Started::Wait(wait)),
    };
    confirm_state(p, o, (&cluster_name, &job_name), run_lease_created).await?;
    let force_unlock = match lock(p, lock_read?, &cluster_name, &job_name).await? {
        Ok(unlock) => unlock,
        Err(wait) => return Ok(Started::Wait(wait)),
    };
    durable_and_move_block(p, o, &request, &rendered, op == Operation::Apply).await?;
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
        // A request's time is its annotation's write, which the cache does not keep (managed
        // fields are dropped).
        StartReason::Refresh(_) | StartReason::DriftCheck | StartReason::Requested => return None,
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
    let manual = crate::kinds::workload::apply_policy(p.target) == ApplyPolicy::Manual;
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

/// What taking the leases for a Job found.
enum Leases {
    /// Taken (and the gate passed): whether the run lease was created by this take.
    Taken { created: bool },
    /// The Job of this very name exists already, which the Job cache may not show yet (another
    /// manager, or a pass before a crash, created it): it is started, and the leases are its own.
    JobExists(Box<Job>),
    /// The Job must wait.
    Wait(WaitReason),
}

/// The run lease, then the cluster operation gate. `decide` already waited on what the caches
/// show; this is the write itself, and its check against the API server: a lease taken meanwhile
/// by another pass or manager turns the start into a wait. A lease taken and then not used is
/// given back.
///
/// A run lease this very Job held already may have been taken by a pass that went on to create
/// the Job, which the Job cache does not show yet (another manager's, or one before a crash): its
/// deterministic name is looked up before any gate or check. Otherwise no Job of that name exists:
/// a Job is created only while its run lease names it, and the lease names another Job (or none)
/// only once the Job is bookkept, after which no decision names it again (the Job cache that
/// showed it to the bookkeeping shows it to every later decision). A lease that was missing,
/// free, or held by a Job that is gone is not followed by a lookup.
async fn take_leases(
    p: &Pass<'_>,
    cluster_name: &str,
    op: Operation,
    job_name: &str,
) -> Result<Leases, Error> {
    let gated = matches!(
        op,
        Operation::Apply | Operation::Destroy | Operation::Restore
    );
    let gate = p.ctx.settings.cluster_operation_gate && gated && !cluster_name.is_empty();
    let (client, ns) = (&p.ctx.client, &p.ns);
    let (created, held_already) = match take_run_lease(p, cluster_name, op, job_name).await? {
        Ok(taken) => taken,
        Err(wait) => return Ok(Leases::Wait(wait)),
    };
    if held_already {
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        if let Some(existing) = jobs.get_opt(job_name).await? {
            return Ok(Leases::JobExists(Box::new(existing)));
        }
    }
    if !gate {
        return Ok(Leases::Taken { created });
    }
    if p.kind == ObjectKind::Cluster {
        if let Some(wait) = take_cluster_lease(p, cluster_name, op, job_name).await? {
            return Ok(Leases::Wait(wait));
        }
        // The cluster keeps both leases while it waits: machines wait behind it meanwhile.
        if leases::machines_operating(client, &p.ctx.caches.lease_clock, ns, cluster_name).await?
            > 0
        {
            return Ok(Leases::Wait(WaitReason::MachineOperations {
                operation: op,
                job: job_name.to_owned(),
            }));
        }
        return Ok(Leases::Taken { created });
    }
    let cluster_lease = cluster_lease_name(ns, cluster_name);
    if leases::live_holder(client, &p.ctx.caches.lease_clock, ns, &cluster_lease)
        .await?
        .is_some()
    {
        give_back_run_lease(p, job_name).await?;
        return Ok(Leases::Wait(WaitReason::ClusterOperation { operation: op }));
    }
    Ok(Leases::Taken { created })
}

/// The object's run lease for `job_name`: whether this take created it and whether this very Job
/// held it already, or the wait when another Job holds it.
async fn take_run_lease(
    p: &Pass<'_>,
    cluster_name: &str,
    op: Operation,
    job_name: &str,
) -> Result<Result<(bool, bool), WaitReason>, Error> {
    let labels = leases::lease_labels(leases::RUN_LEASE, p.kind_name(), &p.name, cluster_name);
    let run_lease = run_lease_name(&p.suffix);
    match leases::take(
        &p.ctx.client,
        &p.ctx.caches.lease_clock,
        &p.ctx.caches.leases,
        &p.ns,
        &run_lease,
        job_name,
        op.as_str(),
        labels,
    )
    .await?
    {
        Take::HeldBy(holder) => Ok(Err(WaitReason::RunLease {
            operation: op,
            job: holder,
        })),
        Take::Taken {
            created,
            held_already,
        } => Ok(Ok((created, held_already))),
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
    if let Take::HeldBy(holder) = leases::take(
        client,
        &p.ctx.caches.lease_clock,
        &p.ctx.caches.leases,
        ns,
        &cluster_lease,
        job_name,
        op.as_str(),
        labels,
    )
    .await?
    {
        give_back_run_lease(p, job_name).await?;
        return Ok(Some(WaitReason::RunLease {
            operation: op,
            job: holder,
        }));
    }
    Ok(None)
}

/// A cluster's run lease, then its cluster write lease, for `job_name`: the wait when another
/// Job holds one (the run lease is given back then). A cluster waiting for its machines'
/// operations holds (and so renews) both this way.
pub(super) async fn take_run_and_cluster_leases(
    p: &Pass<'_>,
    cluster_name: &str,
    op: Operation,
    job_name: &str,
) -> Result<Option<WaitReason>, Error> {
    if let Err(wait) = take_run_lease(p, cluster_name, op, job_name).await? {
        return Ok(Some(wait));
    }
    take_cluster_lease(p, cluster_name, op, job_name).await
}

/// The state lock: free, stale (the Job force-unlocks it), or held by something else (the Job
/// waits, its leases given back).
async fn lock(
    p: &mut Pass<'_>,
    check: LockCheck,
    cluster_name: &str,
    job_name: &str,
) -> Result<Result<Option<String>, WaitReason>, Error> {
    let client = &p.ctx.client;
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
    give_back_run_lease(p, job_name).await?;
    if p.kind == ObjectKind::Cluster && !cluster_name.is_empty() {
        let lease = cluster_lease_name(&p.ns, cluster_name);
        leases::give_back(&p.ctx.client, &p.ctx.caches.leases, &p.ns, &lease, job_name).await?;
    }
    Ok(())
}

/// The object's run lease, taken for `job_name`, given back.
pub(super) async fn give_back_run_lease(p: &Pass<'_>, job_name: &str) -> Result<(), Error> {
    let (client, leases_cache) = (&p.ctx.client, &p.ctx.caches.leases);
    leases::give_back(
        client,
        leases_cache,
        &p.ns,
        &run_lease_name(&p.suffix),
        job_name,
    )
    .await?;
    Ok(())
}

/// With the run lease held, the state the decision read is checked against the API server before
/// every Job, the object's first included: a Job that finished wrote its state before it
/// finished, but the Secret cache may show that later than the Job cache shows the Job finished
/// (or, for a first Job, not show a state another manager's Job wrote at all), and a decision
/// made on the older state would run the operation again (a second apply of the same inputs,
/// say). A state that changed gives the leases back and ends the pass: the next pass, a second
/// later, reads the state from the API server and decides again. Not asked when the pass listed
/// the state from the API server itself and then created the run lease: a lease that did not
/// exist means no Job of the object ran in between.
async fn confirm_state(
    p: &Pass<'_>,
    o: &Observation,
    (cluster_name, job_name): (&str, &str),
    run_lease_created: bool,
) -> Result<(), Error> {
    let Some(version) = o.state_version.as_deref() else {
        return Ok(());
    };
    // Read from the API server in this very pass, before a run lease that did not exist yet:
    // no Job of the object ran since, so the state is the one the pass read.
    if o.state_listed.is_some() && run_lease_created {
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

/// The durable inputs (at an apply's start) and the clusterctl move block (unless set), just
/// before the Job: written at once, two objects neither of which waits for the other. Then, at an
/// apply's start, a cluster's endpoint source.
async fn durable_and_move_block(
    p: &mut Pass<'_>,
    o: &mut Observation,
    request: &job::JobRequest<'_>,
    rendered: &RenderedInputs,
    apply: bool,
) -> Result<(), Error> {
    let block = p.target.annotation(annotations::BLOCK_MOVE).is_none();
    let patch = block_move_patch(true);
    let pass = &*p;
    let durable = async {
        if apply {
            write_durable(pass, o, request, rendered).await
        } else {
            Ok(())
        }
    };
    let moved = async {
        if block {
            pass.send_object_patch_accounted(&patch).await
        } else {
            Ok(None)
        }
    };
    let (durable, moved) = tokio::join!(durable, moved);
    p.patched(moved?);
    durable?;
    if apply {
        record_user_endpoint(p, o).await?;
    }
    Ok(())
}

/// The durable inputs, written at an apply's start (with the digest pinned for this image).
async fn write_durable(
    p: &Pass<'_>,
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
    Ok(())
}

/// `captf.io/endpoint-source: user` before the first apply when an endpoint is already set.
async fn record_user_endpoint(p: &mut Pass<'_>, o: &Observation) -> Result<(), Error> {
    let target = p.target;
    let crate::runtime::context::Target::Cluster(tc) = target else {
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
    p.ctx.caches.written_jobs.add(created.clone());
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

/// Where a missing per-run Secret is written from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RepairFrom {
    /// A restore's: the backend-only root.
    Restore,
    /// The durable inputs written for the Job (they carry its inputs hash).
    Durable,
    /// The current inputs, only if they still carry the Job's inputs hash.
    CurrentOfSameHash,
}

/// Where the per-run Secret of a Job of `op` named for inputs hash `job_hash` is repaired from,
/// the durable inputs carrying `durable_hash`: never from inputs of another hash.
pub(crate) fn repair_from(op: Operation, job_hash: &str, durable_hash: Option<&str>) -> RepairFrom {
    if op == Operation::Restore {
        RepairFrom::Restore
    } else if durable_hash == Some(job_hash) {
        RepairFrom::Durable
    } else {
        RepairFrom::CurrentOfSameHash
    }
}

/// The per-run Secret of an active Job that has none and never ran a pod (a pass stopped between
/// creating the Job and its Secret, by a crash say): written now, so the Job starts instead of
/// waiting to be judged stuck and replaced by a second Job of the same attempt. Only from inputs
/// of the very hash the Job was named (and, under Manual, approved) for: the durable inputs
/// written for it, or the current inputs when they still carry that hash; else the Job is left
/// to be judged stuck, and never runs inputs it was not started for.
pub(super) async fn repair_run_secret(
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
        if let Some(durable) = crate::runtime::kubeutil::get_opt(&secrets, &name).await? {
            o.durable.written(durable);
        }
    }
    let durable_hash = o.durable.annotation(annotations::INPUTS_HASH);
    let rendered = match repair_from(record.operation, &record.inputs_hash, durable_hash) {
        RepairFrom::Restore => {
            inputs_to_render(p, o, record.operation, &record.inputs_hash).await?
        }
        RepairFrom::Durable => {
            o.durable
                .rendered(&p.ctx.client, p.kind, &record.inputs_hash)
                .await?
        }
        RepairFrom::CurrentOfSameHash => {
            let current = crate::kinds::workload::build_inputs(p, &o.owner, &o.durable)
                .await?
                .ok();
            current.filter(|c| c.inputs_hash == record.inputs_hash)
        }
    };
    let Some(rendered) = rendered else {
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
