//! The Observe step of a pass (spec: The Reconcile Lifecycle "One pass, one status patch" steps
//! 2-4, "The paused branch", "Bookkeeping", "Choosing the next operation" up to the decision;
//! ENGINEERING.md §4 "Observe"): the owner lookup, the finalizer and pause, the object's Jobs
//! (with [`crate::reconcile::bookkeeping`]), the durable inputs, credentials, state, the current
//! inputs, the outputs and a deleting cluster's dependents, read into one [`Observation`]; then
//! the plain [`Observed`] value `decide` reads. Observe only reads: from the caches, and from the
//! API server where the book asks for a fresh read (a finished Job's pod, the state a Job just
//! wrote, a Secret's data). What the status will show is recorded, not written: findings for the
//! conditions, [`crate::pass::status::Fact`]s for the other fields, both turned into status by
//! Report. What must be written is recorded as plain intents ([`Writes`]), each chosen by a pure
//! function, and written by Act in the order [`crate::reconcile::plan`] gives. Where a write
//! changes what the pass decides on (the state adopted after a succeeded apply, Jobs pruned),
//! the observation already shows its outcome.
//!
//! A paused object runs only the paused branch: bookkeeping and the active Job, nothing else is
//! read. An object without its finalizer stops right after the owner lookup: the decision is to
//! add it.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use api::constants::labels;
use contract::names::{cluster_lease_name, run_lease_name};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::pass::observed::ClusterLease;
use crate::runtime::caches::Caches;
use crate::runtime::leases;

use api::cluster::TerraformCluster;
use api::constants::{annotations, conditions as ctype, reasons};
use api::shared::{ApplyPolicy, JobPolicy};
use contract::health::ConditionStatus;
use contract::names::{ObjectKind, Operation, durable_inputs_secret_name};
use contract::render::RenderedInputs;
use contract::state::StateSummary;

use crate::kinds::identity;
use crate::kinds::identity::MirrorWrite;
use crate::kinds::identity::runner_rbac;
use crate::kinds::identity::runner_rbac::RbacWrite;
use crate::kinds::inputs::{NotBuilt, Owner};
use crate::kinds::outputs;
use crate::kinds::pool::PoolSync;
use crate::kinds::remediation::RemediationWrite;
use crate::kinds::workload;
use crate::pass::observed::Books;
use crate::pass::status::Fact;
use crate::pass::{Error, Pass};
use crate::reconcile::bookkeeping;
use crate::reconcile::decide::{
    self, Approvals, Config, Drift, Gates, HealthReading, Inputs, JobOutcome, JobRecord, LastTimes,
    Leases, Observed, OwnerCheck, StateRead,
};
use crate::reconcile::plan::Consumed;
use crate::runtime::context::Target;
use crate::runtime::events::Outbox;
use crate::state;
use crate::state::StateReading;
use crate::state::backups::BackupPlan;
use crate::state::durable::Durable;
use crate::state::history;

/// Everything one pass observed, for Act and Report; [`observed`] reduces it to what `decide`
/// reads.
#[derive(Debug)]
pub struct Observation {
    /// The owner lookup.
    pub owner: Owner,
    /// The cluster the object belongs to (empty when none is known).
    pub cluster_name: String,
    /// Whether our finalizer is present.
    pub finalizer: bool,
    /// The TerraformCluster whose defaults apply (the cluster itself, a machine's cluster).
    pub defaults: Option<TerraformCluster>,
    /// The merged Job policy.
    pub policy: JobPolicy,
    /// The object's Jobs and what bookkeeping found.
    pub books: Books,
    /// The durable inputs Secret.
    pub durable: Durable,
    /// The newest active Job.
    pub active: Option<JobRecord>,
    /// Whether the credentials step ran (owned, unpaused, finalizer present).
    pub credentials_checked: bool,
    /// The gates.
    pub gates: Gates,
    /// The identity allowed and mirrored.
    pub identity: Option<String>,
    /// A keyless identity's ServiceAccount, audience and cloud fields.
    pub keyless: Option<Box<api::identity::WorkloadIdentity>>,
    /// The ServiceAccount the object's Jobs run as ([`identity::job_service_account`]).
    pub service_account: String,
    /// The state read.
    pub state: StateRead,
    /// The state summary, when read.
    pub summary: Option<Box<StateSummary>>,
    /// When the base state Secret was created.
    pub state_created: Option<SystemTime>,
    /// The version (names and resourceVersions) of the state Secrets the state was read from,
    /// when it was read.
    pub state_version: Option<String>,
    /// The digest of the state's content, when it was read.
    pub state_digest: Option<String>,
    /// The current inputs, when built.
    pub current: Option<RenderedInputs>,
    /// The current inputs as `decide` sees them.
    pub inputs: Inputs,
    /// The health reading.
    pub health: HealthReading,
    /// Whether the outputs gave a valid, definite health reading.
    pub health_definite: bool,
    /// A deleting cluster's machines and pools.
    pub dependents: u32,
    /// The leases, as the caches show them.
    pub leases: Leases,
    /// The restore `captf.io/restore-state` asks for.
    pub restore: Option<decide::RestoreAsk>,
    /// The object carries `cluster.x-k8s.io/managed-by`: nothing else was read.
    pub externally_managed: bool,
    /// Whether a Job of the object was bookkept in this pass with its state read fresh from the
    /// API server, or none was read (the state then rests on what the caches showed).
    pub state_fresh: bool,
    /// The state Secrets as this pass listed them from the API server (not when the state was
    /// read from what an earlier pass decoded).
    pub state_listed: Option<Vec<k8s_openapi::api::core::v1::Secret>>,
    /// What Act must write besides the decision and the status.
    pub writes: Writes,
    /// `status.stateBackups` as Observe read it, and the sizes of the sets it does not list.
    pub backup_sizes: std::collections::BTreeMap<u64, u64>,
}

/// What a pass must write besides its decision and its status, as Observe found it (each chosen
/// by a pure function); [`crate::reconcile::plan::plan`] orders them for Act.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes {
    /// The state of a succeeded apply or restore to adopt: (Job, inputs hash).
    pub adopt: Option<(String, String)>,
    /// The image digest a succeeded apply ran, to pin on the durable inputs.
    pub pin_digest: Option<String>,
    /// The approvals a succeeded apply consumed.
    pub approvals: Option<Consumed>,
    /// A succeeded restore whose annotation goes.
    pub restore_done: Option<String>,
    /// Finished Jobs whose per-run Secret goes and whose leases are given back: (Job, the
    /// cluster write lease a TerraformCluster's Job held).
    pub release: Vec<(String, Option<String>)>,
    /// Jobs beyond the history limits.
    pub prune: Vec<String>,
    /// The credential mirror write.
    pub mirror: Option<MirrorWrite>,
    /// The runner RBAC writes.
    pub rbac: Vec<RbacWrite>,
    /// The backup step.
    pub backups: BackupPlan,
    /// The write-once spec fields the outputs give, with the events of that write.
    pub spec: Option<serde_json::Value>,
    /// The events of the spec write.
    pub spec_events: Outbox,
    /// The remediation request on the owning Machine.
    pub remediation: Option<RemediationWrite>,
    /// The write to the owning MachinePool.
    pub pool: Option<PoolSync>,
}

impl Observation {
    /// An observation of nothing (every field empty), the base of the others.
    pub fn empty() -> Self {
        Self {
            externally_managed: false,
            ..Self::externally_managed()
        }
    }

    /// The observation of an externally managed object: that fact alone.
    fn externally_managed() -> Self {
        Self {
            owner: Owner::none(),
            cluster_name: String::new(),
            finalizer: false,
            defaults: None,
            policy: JobPolicy::default(),
            books: Books::default(),
            durable: Durable::default(),
            active: None,
            credentials_checked: false,
            gates: Gates::default(),
            identity: None,
            keyless: None,
            service_account: String::new(),
            state: StateRead::None,
            summary: None,
            state_created: None,
            state_version: None,
            state_digest: None,
            current: None,
            inputs: Inputs::NotBuilt,
            health: HealthReading::Unknown,
            health_definite: false,
            dependents: 0,
            leases: Leases::default(),
            restore: None,
            externally_managed: true,
            state_fresh: false,
            state_listed: None,
            writes: Writes::default(),
            backup_sizes: std::collections::BTreeMap::new(),
        }
    }
}

/// Observes the object: the preamble, then (unless it stops there) the paused branch or the
/// whole observation.
pub async fn observe(p: &mut Pass<'_>) -> Result<Observation, Error> {
    // Externally managed: nothing else is read, for every kind.
    if p.target.externally_managed() {
        return Ok(Observation::externally_managed());
    }
    let owner = workload::owner(p.target, &p.ctx.caches);
    let cluster_name = owner
        .cluster
        .as_ref()
        .and_then(|c| c.metadata.name.clone())
        .or_else(|| owner.machine.as_ref().map(|m| m.spec.cluster_name.clone()))
        .or_else(|| {
            owner
                .machine_pool
                .as_ref()
                .map(|m| m.spec.cluster_name.clone())
        })
        .or_else(|| p.target.cluster_label())
        .or_else(|| {
            p.target
                .meta()
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.kind == "Cluster")
                .map(|r| r.name.clone())
        })
        .unwrap_or_default();
    preamble_conditions(p, &owner);
    let finalizer = p
        .target
        .meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == p.target.finalizer());
    let defaults = workload::defaults(p.target, &owner);
    let policy = workload::job_policy(p.target, defaults.as_ref());
    let durable_name = durable_inputs_secret_name(p.kind, &p.name);
    let mut o = Observation {
        owner,
        cluster_name,
        finalizer,
        defaults,
        policy,
        books: Books::default(),
        durable: Durable::observe(&p.ctx.client, &p.ctx.caches, &p.ns, &durable_name, &p.uid)
            .await?,
        externally_managed: false,
        ..Observation::externally_managed()
    };
    if !o.finalizer {
        return Ok(o);
    }
    o.books = bookkeeping::keep_books(p).await?;
    o.writes.release = bookkeeping::releases(p, &o.books, &o.cluster_name);
    bookkeeping::after_apply(p, &mut o);
    active_job(p, &mut o);
    if o.owner.paused {
        return Ok(o);
    }
    o.leases = leases_of(&p.ctx.caches, &p.ns, p.kind, &p.suffix, &o.cluster_name);
    prune_history(&mut o);
    credentials(p, &mut o).await?;
    if o.active.is_none() {
        read_state(p, &mut o).await?;
        o.restore = crate::state::restore::requested(p, &o.books.records);
        plan_backups(p, &mut o).await?;
    }
    // The outputs first: a machine they provision in this very pass has fixed inputs, which are
    // not built again (no read of its bootstrap data).
    apply_outputs(p, &mut o);
    current_inputs(p, &mut o).await?;
    if let Target::Pool(_) = p.target
        && o.owner.check == OwnerCheck::Ok
        && !p.target.deleting()
    {
        o.writes.pool = crate::kinds::pool::sync::plan(&o.owner, &p.facts, &mut p.findings);
    }
    source_status(p, &o);
    applied_by_state(p, &o);
    default_conditions(p, o.credentials_checked);
    dependents(p, &mut o).await?;
    Ok(o)
}

/// Step 2's conditions (`DependenciesReady` from the owner lookup), `Deleting` and `Paused`.
/// `Deleting=True/DeletionCompleted`'s message: what CAPTF did, and why the object is still there.
/// The same whether CAPTF destroyed and dropped its finalizer or someone removed it by hand.
pub const DELETION_COMPLETED_MESSAGE: &str = "CAPTF's part of the deletion is done and its finalizer is gone; another finalizer keeps the \
     object";

fn preamble_conditions(p: &mut Pass<'_>, owner: &Owner) {
    let (status, reason) = match owner.check {
        OwnerCheck::Ok => (None, ""),
        OwnerCheck::NotYet { reason }
            if reason == reasons::WAITING_FOR_OWNER_MACHINE
                || reason == reasons::WAITING_FOR_OWNER_MACHINE_POOL =>
        {
            (Some(ConditionStatus::False), reason)
        }
        OwnerCheck::NotYet { reason } => (Some(ConditionStatus::Unknown), reason),
        OwnerCheck::Gone => (Some(ConditionStatus::False), reasons::OWNER_NOT_FOUND),
        OwnerCheck::Mismatch => (Some(ConditionStatus::False), reasons::OWNER_MISMATCH),
        OwnerCheck::Gated { reason } => (Some(ConditionStatus::False), reason),
    };
    if let Some(status) = status {
        p.findings
            .set(ctype::DEPENDENCIES_READY, status, reason, &owner.message);
    }
    let own_finalizer = p
        .target
        .meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == p.target.finalizer());
    if p.target.deleting() && !own_finalizer {
        // CAPTF's part is over; another finalizer keeps the object, and a later pass (woken
        // by that finalizer's edits) must not turn the reading back to `Deleting`.
        p.findings.set(
            ctype::DELETING,
            ConditionStatus::True,
            reasons::DELETION_COMPLETED,
            DELETION_COMPLETED_MESSAGE,
        );
    } else if p.target.deleting() {
        p.findings.set(
            ctype::DELETING,
            ConditionStatus::True,
            reasons::DELETING,
            "The object is being deleted",
        );
    } else {
        p.findings.set(
            ctype::DELETING,
            ConditionStatus::False,
            reasons::NOT_DELETING,
            "The object is not being deleted",
        );
    }
    let (status, reason, message) = if owner.paused {
        (
            ConditionStatus::True,
            reasons::PAUSED,
            "The object or its Cluster is paused",
        )
    } else {
        (ConditionStatus::False, reasons::NOT_PAUSED, "Not paused")
    };
    p.findings.set(ctype::PAUSED, status, reason, message);
}

/// The newest active Job (Report writes it to `status.activeJob`), and a running drift or
/// refresh on `DriftJobSucceeded`.
fn active_job(p: &mut Pass<'_>, o: &mut Observation) {
    if workload::apply_policy(p.target) == ApplyPolicy::Automatic && p.kind == ObjectKind::Cluster {
        p.facts.record(Fact::PlanCleared);
    }
    o.active = o
        .books
        .records
        .iter()
        .filter(|r| r.is_active())
        .max_by_key(|r| r.created)
        .cloned();
    if let Some(a) = &o.active
        && let Some(failure) = &a.pull_failure
    {
        bookkeeping::pull_failure_condition(a, failure, &mut p.findings);
    } else if let Some(a) = &o.active
        && matches!(a.operation, Operation::Drift | Operation::Refresh)
    {
        p.findings.set(
            ctype::DRIFT_JOB_SUCCEEDED,
            ConditionStatus::Unknown,
            reasons::DRIFT_JOB_RUNNING,
            &running_message(&a.name),
        );
    }
}

/// `DriftJobSucceeded`'s message while drift or refresh Job `job` runs.
pub fn running_message(job: &str) -> String {
    format!("Job {job} is running")
}

/// History beyond the limits goes (Job names and history), never a Job bookkept this pass: the
/// Jobs to prune are planned, and the decision sees the history as it will be.
fn prune_history(o: &mut Observation) {
    let (successful, failed) = history_limits(&o.policy);
    let prune: Vec<String> = history::jobs_to_prune(&o.books.records, successful, failed)
        .into_iter()
        .filter(|stale| !o.books.kept.iter().any(|k| &k.record.name == stale))
        .collect();
    o.books.records.retain(|r| !prune.contains(&r.name));
    o.writes.prune = prune;
}

fn history_limits(policy: &JobPolicy) -> (u32, u32) {
    (
        policy.successful_jobs_history_limit_or_default().max(0) as u32,
        policy.failed_jobs_history_limit_or_default().max(0) as u32,
    )
}

/// Credentials: identity, mirror, runner RBAC (only for an owned object; an owner that stops the
/// pass stops them too, unless the object is being deleted).
async fn credentials(p: &mut Pass<'_>, o: &mut Observation) -> Result<(), Error> {
    let owner_stops = !matches!(o.owner.check, OwnerCheck::Ok) && !p.target.deleting();
    if owner_stops {
        return Ok(());
    }
    o.credentials_checked = true;
    let pinned = match p.kind {
        ObjectKind::Machine if p.facts.provisioned() || p.target.deleting() => o
            .durable
            .annotation(annotations::IDENTITY)
            .map(str::to_owned),
        _ => None,
    };
    let wanted = pinned.or_else(|| {
        identity::resolve_identity_name(
            p.target
                .workspace()
                .identity_ref
                .as_ref()
                .map(|r| r.name.as_str()),
            o.defaults.as_ref(),
        )
    });
    let checked = identity::check(
        &p.ctx.client,
        &p.ctx.caches,
        &p.ns,
        wanted,
        &p.target.owner_reference(false),
        &mut p.findings,
        &p.ctx.metrics,
    )
    .await?;
    o.writes.mirror = checked.mirror;
    match checked.outcome {
        identity::IdentityOutcome::Ready { identity, keyless } => {
            match identity::job_service_account(&o.policy, &identity, keyless.as_deref()) {
                Ok(sa) => {
                    o.service_account = sa;
                    o.identity = Some(identity);
                    o.keyless = keyless;
                }
                Err(message) => {
                    let gate = identity::service_account_conflict(&mut p.findings, &message);
                    o.gates.credentials = Some(gate);
                }
            }
        }
        identity::IdentityOutcome::Blocked(gate) => o.gates.credentials = Some(gate),
    }
    if o.service_account.is_empty() {
        o.policy
            .service_account_name_or_default()
            .clone_into(&mut o.service_account);
    }
    let sa = o.service_account.clone();
    let (gate, writes) = runner_rbac::check(&p.ctx.caches, &p.ns, &sa, &mut p.findings);
    o.writes.rbac = writes;
    if let Some(gate) = gate
        && o.gates.credentials.is_none()
    {
        o.gates.credentials = Some(gate);
    }
    Ok(())
}

/// State, when no Job is active: `StateReadable`, the serial, the state metrics. Read fresh from
/// the API server when a Job of the object was bookkept in this pass (the Secret cache may not
/// show the state it wrote yet); a succeeded apply's or restore's adoption, which Act writes, is
/// already in what the pass decides on.
async fn read_state(p: &mut Pass<'_>, o: &mut Observation) -> Result<(), Error> {
    let fresh = !o.books.kept.is_empty();
    let (client, caches) = (&p.ctx.client, &p.ctx.caches);
    let (view, listed) = state::observe(client, caches, &p.ns, &p.suffix, &p.uid, fresh).await?;
    o.state_fresh = fresh;
    o.state_listed = listed;
    o.state_created = view.base_created;
    o.state_version = Some(view.version.clone());
    o.state_digest = Some(view.digest.clone());
    match &view.reading {
        StateReading::Read(s) => {
            let mut s = s.as_ref().clone();
            if let Some((_, hash)) = &o.writes.adopt {
                s.inputs_hash = Some(hash.clone());
            }
            let backups = crate::state::backups::list(caches, &p.ns, &p.suffix);
            match crate::state::backups::foreign_lineage(&backups, &s.lineage) {
                // Not backed up either: the newest backup stays the object's own.
                Some(message) => state_unreadable(p, o, reasons::STATE_INCONSISTENT, &message),
                None => state_read(p, o, &s),
            }
        }
        StateReading::NotFound => state_not_found(p, o),
        StateReading::Unreadable(e) => state_unreadable(p, o, e.reason(), &e.to_string()),
    }
    p.facts.record(Fact::StateSuffix(p.suffix.clone()));
    Ok(())
}

/// The backup step (Terraform State "State backups"), planned: a copy of the state read when it
/// is not backed up yet, the sets past `--state-backups`, never one a pending restore names; and
/// the sizes of the kept sets `status.stateBackups` does not list yet, read now for Act's status.
async fn plan_backups(p: &mut Pass<'_>, o: &mut Observation) -> Result<(), Error> {
    use crate::state::backups;
    let (Some(summary), Some(digest)) = (o.summary.as_ref(), o.state_digest.as_ref()) else {
        return Ok(());
    };
    let listed = p
        .facts
        .status()
        .workload()
        .state_backups
        .clone()
        .unwrap_or_default();
    let read = backups::ReadState {
        serial: summary.serial,
        digest: digest.clone(),
    };
    let source_job = o.books.applied().map(|k| k.record.name.clone());
    o.writes.backups = backups::plan(
        backups::list(&p.ctx.caches, &p.ns, &p.suffix),
        &listed,
        &read,
        p.ctx.settings.state_backups as usize,
        p.target.deleting(),
        o.restore.as_ref().map(|r| r.backup.serial),
        source_job.as_deref(),
    );
    o.backup_sizes = backups::sizes(
        &p.ctx.client,
        &p.ns,
        &p.suffix,
        &o.writes.backups.kept,
        &listed,
    )
    .await?;
    Ok(())
}

/// A state read: `StateReadable=True`, or `StateLost` for a provisioned machine whose state
/// carries no inputs hash; the serial and the state metrics.
fn state_read(p: &mut Pass<'_>, o: &mut Observation, s: &StateSummary) {
    let kind_name = p.kind_name();
    let lost = p.facts.provisioned() && p.kind == ObjectKind::Machine && s.inputs_hash.is_none();
    if lost {
        o.state = StateRead::Lost;
        p.findings.set(
            ctype::STATE_READABLE,
            ConditionStatus::False,
            reasons::STATE_LOST,
            "The provisioned machine's state carries no inputs hash",
        );
    } else {
        o.state = StateRead::Read {
            serial: s.serial,
            inputs_hash: s.inputs_hash.clone(),
        };
        p.findings.set(
            ctype::STATE_READABLE,
            ConditionStatus::True,
            reasons::STATE_READ,
            &format!("State serial {} read", s.serial),
        );
    }
    let m = &p.ctx.metrics;
    m.set_state_bytes(kind_name, &p.ns, &p.name, s.compressed_bytes as i64);
    m.set_state_resources(kind_name, &p.ns, &p.name, s.managed_resources as i64);
    p.facts.record(Fact::StateSerial(s.serial));
    o.summary = Some(Box::new(s.clone()));
}

/// A state that cannot be trusted: `StateReadable=False` with `reason`, counted once per new
/// reason; no Job runs over it.
fn state_unreadable(p: &mut Pass<'_>, o: &mut Observation, reason: &'static str, message: &str) {
    if p.findings.reason(ctype::STATE_READABLE) != Some(reason) {
        p.ctx
            .metrics
            .state_read_error(p.kind_name(), metric_reason(reason));
    }
    p.findings.set(
        ctype::STATE_READABLE,
        ConditionStatus::False,
        reason,
        message,
    );
    o.state = StateRead::Unreadable { reason };
}

/// No state Secret: lost for a provisioned object (unless its destroy succeeded and a cleanup
/// was cut short), else not applied yet.
fn state_not_found(p: &mut Pass<'_>, o: &mut Observation) {
    let destroyed = p.target.deleting()
        && o.books
            .records
            .iter()
            .any(|r| r.operation == Operation::Destroy && r.outcome == Some(JobOutcome::Succeeded));
    if p.facts.provisioned() && !destroyed {
        o.state = StateRead::Lost;
        if p.findings.reason(ctype::STATE_READABLE) != Some(reasons::STATE_LOST) {
            p.ctx.metrics.state_read_error(p.kind_name(), "lost");
        }
        p.findings.set(
            ctype::STATE_READABLE,
            ConditionStatus::False,
            reasons::STATE_LOST,
            "The provisioned object's state Secret is gone",
        );
    } else {
        p.findings.set(
            ctype::STATE_READABLE,
            ConditionStatus::Unknown,
            reasons::STATE_NOT_FOUND,
            "No state yet: the object was never applied",
        );
    }
}

fn metric_reason(reason: &str) -> &'static str {
    match reason {
        reasons::STATE_INCONSISTENT => "inconsistent",
        reasons::STATE_ENCRYPTED => "encrypted",
        reasons::STATE_LOCKED => "locked",
        reasons::STATE_LOST => "lost",
        _ => "corrupt",
    }
}

/// The current inputs, for a mutable kind or an immutable one not yet provisioned, when no Job
/// is active and the owner is found: `DependenciesReady`, `InputsTooLarge`, the dependencies
/// gate.
async fn current_inputs(p: &mut Pass<'_>, o: &mut Observation) -> Result<(), Error> {
    let owner_ok = matches!(o.owner.check, OwnerCheck::Ok);
    if fixed_inputs(p, o) {
        return Ok(());
    }
    if o.active.is_some() || !owner_ok {
        return Ok(());
    }
    let built = workload::build_inputs(p, &o.owner, &o.durable).await?;
    match built {
        Ok(r) => {
            p.ctx
                .metrics
                .set_inputs_bytes(p.kind_name(), &p.ns, &p.name, r.total_bytes() as i64);
            o.inputs = Inputs::Built {
                hash: r.inputs_hash.clone(),
            };
            p.findings.set(
                ctype::DEPENDENCIES_READY,
                ConditionStatus::True,
                reasons::DEPENDENCIES_READY,
                "Owner, inputs and variable sources are resolved",
            );
            o.current = Some(r);
        }
        Err(nb) => not_built(p, o, &nb),
    }
    Ok(())
}

/// A provisioned machine's inputs are fixed: `DependenciesReady=True` once its owner resolves,
/// whatever its Machine's bootstrap data or cluster say now. Asked after the outputs step, so a
/// machine provisioned by this very pass reports what the passes after it will, and builds no
/// inputs.
fn fixed_inputs(p: &mut Pass<'_>, o: &Observation) -> bool {
    let owner_ok = matches!(o.owner.check, OwnerCheck::Ok);
    let immutable_done = !workload::mutable(p.kind) && p.facts.provisioned();
    if owner_ok && immutable_done {
        p.findings.set(
            ctype::DEPENDENCIES_READY,
            ConditionStatus::True,
            reasons::DEPENDENCIES_READY,
            "Owner resolved; a provisioned machine's inputs are fixed",
        );
    }
    owner_ok && immutable_done
}

fn not_built(p: &mut Pass<'_>, o: &mut Observation, nb: &NotBuilt) {
    if let Some(size) = nb.size {
        p.ctx
            .metrics
            .set_inputs_bytes(p.kind_name(), &p.ns, &p.name, size as i64);
        p.findings.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::False,
            reasons::INPUTS_TOO_LARGE,
            &nb.message,
        );
        o.inputs = Inputs::Failed {
            reason: reasons::INPUTS_TOO_LARGE,
        };
        return;
    }
    let status = if nb.waiting {
        ConditionStatus::Unknown
    } else {
        ConditionStatus::False
    };
    p.findings
        .set(ctype::DEPENDENCIES_READY, status, nb.reason, &nb.message);
    o.gates.dependencies = Some(decide::GateBlock {
        condition: ctype::DEPENDENCIES_READY,
        reason: nb.reason,
    });
    o.inputs = Inputs::Failed { reason: nb.reason };
}

/// The outputs of a read state into status (and, planned, once into spec); the remediation
/// request a machine's health asks for; `status.pendingRefreshes`.
fn apply_outputs(p: &mut Pass<'_>, o: &mut Observation) {
    let Some(s) = &o.summary else {
        if !p.facts.provisioned() && o.active.is_none() {
            p.findings.set_if_missing(
                ctype::OUTPUTS_VALID,
                ConditionStatus::Unknown,
                reasons::OUTPUTS_PENDING,
                "No state yet",
            );
        }
        return;
    };
    let applied = s.inputs_hash.is_some();
    // A refresh or drift Job that finished in this pass took a new health sample.
    let sampled = o.books.kept.iter().any(|k| {
        k.outcome == JobOutcome::Succeeded
            && matches!(k.record.operation, Operation::Refresh | Operation::Drift)
    });
    let out = outputs::apply(
        p.ctx,
        p.target,
        &o.owner,
        s,
        o.durable.kept_variables(),
        applied,
        &mut p.facts,
        &mut p.findings,
        &mut p.outbox,
    );
    o.writes.spec = out.spec_patch;
    o.writes.spec_events = out.spec_events;
    o.health = out.reading;
    o.health_definite = out.definite;
    // Consecutive samples reading pending, for the refresh backoff (30 s, 1 m, 2 m, 4 m, 5 m).
    match o.health {
        HealthReading::Pending if sampled => p.facts.record(Fact::HealthPending),
        HealthReading::Pending => {}
        _ => p.facts.record(Fact::HealthSettled),
    }
    // Machine Remediation: an apply's own definite reading is a sample too (it stands in for the
    // post-apply refresh).
    if p.kind == ObjectKind::Machine && p.facts.provisioned() {
        let applied_now = o
            .books
            .applied()
            .is_some_and(|k| k.record.operation == Operation::Apply);
        let sampled = sampled || (applied_now && o.health_definite);
        let gone = crate::kinds::remediation::refresh_gone(p, &o.books, sampled);
        o.writes.remediation = crate::kinds::remediation::plan(p, &o.owner, sampled || gone);
    }
}

/// `status.source`: the image and digest the durable inputs record, the runtime state reports.
/// A pass that did not read the state (a Job is active) keeps the runtime the status shows: the
/// field does not go away while a Job runs, to come back when it finished.
fn source_status(p: &mut Pass<'_>, o: &Observation) {
    let runtime_version = match (&o.summary, &o.state_version) {
        (Some(s), _) => Some(s.runtime_version.clone()),
        (None, Some(_)) => None,
        (None, None) => p
            .facts
            .before
            .workload()
            .source
            .as_ref()
            .and_then(|s| s.runtime_version.clone()),
    };
    p.facts.record(Fact::Source {
        image: o
            .durable
            .annotation(annotations::IMAGE)
            .map(str::to_owned)
            .or_else(|| Some(p.target.workspace().source.image.clone())),
        digest: o.writes.pin_digest.clone().or_else(|| {
            o.durable
                .annotation(annotations::IMAGE_DIGEST)
                .map(str::to_owned)
        }),
        runtime_version,
    });
}

/// A state carrying an inputs hash records a successful apply (the hash is written only after
/// one, or after a restore of such a state): with no apply outcome known here, as on the target
/// of a `clusterctl move` (status does not move), `ApplyJobSucceeded` says so instead of waiting
/// for a first apply that already happened. A pool's `Ready` reads it once provisioned.
fn applied_by_state(p: &mut Pass<'_>, o: &Observation) {
    let StateRead::Read {
        inputs_hash: Some(hash),
        ..
    } = &o.state
    else {
        return;
    };
    let known = p.findings.reason(ctype::APPLY_JOB_SUCCEEDED);
    if matches!(known, None | Some(reasons::NO_APPLY_YET)) {
        p.findings.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::True,
            reasons::APPLY_SUCCEEDED,
            &format!("The state records a successful apply of inputs hash {hash}"),
        );
    }
}

/// The conditions every object reports before its first apply, drift check or state.
fn default_conditions(p: &mut Pass<'_>, credentials_checked: bool) {
    let c = &mut p.findings;
    c.set_if_missing(
        ctype::APPLY_JOB_SUCCEEDED,
        ConditionStatus::Unknown,
        reasons::NO_APPLY_YET,
        "The first apply has not completed yet",
    );
    c.set_if_missing(
        ctype::DRIFT_JOB_SUCCEEDED,
        ConditionStatus::Unknown,
        reasons::DRIFT_NOT_CHECKED,
        "No drift check yet",
    );
    c.set_if_missing(
        ctype::DRIFT_DETECTED,
        ConditionStatus::Unknown,
        reasons::DRIFT_NOT_CHECKED,
        "No drift check yet",
    );
    c.set_if_missing(
        ctype::STATE_READABLE,
        ConditionStatus::Unknown,
        reasons::STATE_NOT_FOUND,
        "No state yet",
    );
    if !p.facts.provisioned() && c.status(ctype::INFRASTRUCTURE_HEALTHY).is_none() {
        c.set(
            ctype::INFRASTRUCTURE_HEALTHY,
            ConditionStatus::Unknown,
            reasons::WAITING_FOR_PROVISIONING,
            "Waiting for the first apply",
        );
    }
    if !credentials_checked {
        c.set_if_missing(
            ctype::IDENTITY_ALLOWED,
            ConditionStatus::Unknown,
            reasons::IDENTITY_CHECK_FAILED,
            "Not checked yet: the object has no owner or is paused",
        );
        c.set_if_missing(
            ctype::CREDENTIALS_MIRRORED,
            ConditionStatus::Unknown,
            reasons::MIRROR_PENDING,
            "Not mirrored yet",
        );
    }
}

/// Deletion order: a deleting cluster's machines and pools (`DeletionBlocked`).
async fn dependents(p: &mut Pass<'_>, o: &mut Observation) -> Result<(), Error> {
    if p.kind != ObjectKind::Cluster {
        return Ok(());
    }
    let blocked = if p.target.deleting() {
        workload::dependents(p, &o.cluster_name).await?
    } else {
        None
    };
    match blocked {
        Some((machines, pools)) if machines + pools > 0 => {
            o.dependents = machines + pools;
            p.findings.set(
                ctype::DELETION_BLOCKED,
                ConditionStatus::True,
                reasons::DEPENDENTS_EXIST,
                &format!(
                    "{machines} TerraformMachines and {pools} TerraformMachinePools of Cluster {} still exist",
                    o.cluster_name
                ),
            );
        }
        _ => p.findings.set(
            ctype::DELETION_BLOCKED,
            ConditionStatus::False,
            reasons::NOT_BLOCKED,
            "Nothing blocks deletion",
        ),
    }
    Ok(())
}

/// The manager-wide and per-object settings `decide` reads.
pub fn config(p: &Pass<'_>, o: &Observation) -> Config {
    let (successful, failed) = history_limits(&o.policy);
    Config {
        drift_default_interval: p.ctx.settings.drift_default_interval,
        failed_jobs_history_limit: failed,
        successful_jobs_history_limit: successful,
        cluster_operation_gate: p.ctx.settings.cluster_operation_gate,
    }
}

/// The longest `captf.io/requested-at` value (`status.lastHandledRequestedAt`'s limit).
pub const REQUESTED_AT_MAX: usize = 256;

/// The object's `captf.io/requested-at` value, trimmed: `None` when absent, empty, or longer
/// than [`REQUESTED_AT_MAX`] (the webhook refuses that; without it, the value is ignored with a
/// warning, since no status could record it).
pub fn requested_value(target: &crate::runtime::context::Target) -> Option<&str> {
    let value = target
        .annotation(api::constants::annotations::REQUESTED_AT)?
        .trim();
    if value.chars().count() > REQUESTED_AT_MAX {
        tracing::warn!(
            "{} is longer than {REQUESTED_AT_MAX} characters: ignored",
            api::constants::annotations::REQUESTED_AT
        );
        return None;
    }
    (!value.is_empty()).then_some(value)
}

/// On-demand checks: the request `status.lastHandledRequestedAt` does not record yet, and
/// whether a Job of the object already answers it.
fn check_request(p: &Pass<'_>, records: &[JobRecord]) -> Option<decide::CheckRequest> {
    let value = requested_value(p.target)?;
    let status = p.facts.status();
    if status.workload().last_handled_requested_at.as_deref() == Some(value) {
        return None;
    }
    Some(decide::CheckRequest {
        value: value.to_owned(),
        answered: records
            .iter()
            .any(|r| r.requested.as_deref() == Some(value)),
    })
}

/// The plain value `decide` reads. The "last" times come from the live Job list, not from a
/// status the cache may not show yet.
pub fn observed(p: &Pass<'_>, o: &Observation) -> Observed {
    let records = &o.books.records;
    let last_success = |op: Operation| {
        records
            .iter()
            .filter(|r| r.operation == op && r.outcome == Some(JobOutcome::Succeeded))
            .filter_map(|r| r.finished)
            .max()
    };
    let from_status = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.map(|t| SystemTime::from(t.0))
    };
    let status = p.facts.status();
    let w = status.workload();
    let applied_state = o.summary.as_ref().filter(|s| s.inputs_hash.is_some());
    let last = LastTimes {
        apply: last_success(Operation::Apply).or_else(|| applied_state.and(o.state_created)),
        refresh: last_success(Operation::Refresh).max(from_status(w.last_refresh.as_ref())),
        drift_check: last_success(Operation::Drift).max(from_status(w.last_drift_check.as_ref())),
        apply_health_definite: o.health_definite,
    };
    Observed {
        kind: p.kind,
        name: p.name.clone(),
        uid: p.uid.clone(),
        mutable: workload::mutable(p.kind),
        provisioned: p.facts.provisioned(),
        names_cluster: !o.cluster_name.is_empty(),
        externally_managed: o.externally_managed,
        deleting: p.target.deleting(),
        finalizer: o.finalizer,
        paused: o.owner.paused,
        owner: o.owner.check,
        gates: o.gates,
        jobs: records.clone(),
        state: o.state.clone(),
        inputs: o.inputs.clone(),
        durable_inputs: o.durable.exists(),
        drift: Drift {
            interval: workload::drift_interval(p.target, o.defaults.as_ref()),
            action: workload::drift_action(p.target),
            found: p.findings.status(ctype::DRIFT_DETECTED) == Some("True"),
            remediation_failures: remediation_failures(records, last.drift_check),
        },
        health: o.health,
        pending_refreshes: w.pending_refreshes.unwrap_or(0).max(0) as u32,
        last,
        approvals: approvals(p),
        leases: o.leases.clone(),
        dependents: o.dependents,
        restore: o.restore.clone(),
        requested: check_request(p, records),
        health_check_interval: workload::health_check_interval(p.target),
        membership_refresh: match p.target {
            Target::Pool(tmp) => Some(crate::kinds::pool::membership_refresh(
                tmp, &status, o.health,
            )),
            _ => None,
        },
        now: p.now,
    }
}

fn approvals(p: &Pass<'_>) -> Approvals {
    Approvals {
        policy: workload::apply_policy(p.target),
        plan: p.facts.plan().map(|pl| decide::PlanStatus {
            has_changes: contract::plan::plan_hash_has_changes(&pl.plan_hash),
            inputs_hash: pl.inputs_hash,
            plan_hash: pl.plan_hash,
        }),
        approved_plan_hash: p
            .target
            .annotation(annotations::APPROVE_PLAN)
            .map(str::to_owned),
        approved_destructive_hash: p
            .target
            .annotation(annotations::APPROVE_DESTRUCTIVE_PLAN)
            .map(str::to_owned),
    }
}

/// Failed drift-remediation applies since the last successful drift check (Drift and Health
/// "Report or remediate").
fn remediation_failures(records: &[JobRecord], since: Option<SystemTime>) -> u32 {
    records
        .iter()
        .filter(|r| {
            r.operation == Operation::Apply
                && r.drift_remediation
                && r.outcome.is_some_and(JobOutcome::counts_as_failure)
                && since.is_none_or(|s| r.finished.is_some_and(|f| f > s))
        })
        .count() as u32
}

/// The leases of an object as the caches show them, for `decide`: who holds its run lease, and
/// (with the cluster operation gate, for an object that names a cluster) whether its cluster's
/// operation holds the cluster write lease (a machine) or how many of its machines operate (a
/// cluster). A lease whose Job does not exist yet is judged on this manager's [`LeaseClock`].
fn leases_of(caches: &Caches, ns: &str, kind: ObjectKind, suffix: &str, cluster: &str) -> Leases {
    let now = Instant::now();
    let clock = &caches.lease_clock;
    let lease = |name: &str| caches.leases.get(&ObjectRef::new(name).within(ns));
    let holder_job = |lease: &Lease| {
        let holder = lease.spec.as_ref()?.holder_identity.clone()?;
        caches
            .jobs_where(ns, |j| j.metadata.name.as_deref() == Some(holder.as_str()))
            .into_iter()
            .next()
    };
    let holder_if_held = |lease: &Lease| {
        let job = holder_job(lease);
        leases::held(lease, job.as_deref(), clock.age(lease, now))
            .then(|| lease.spec.as_ref().and_then(|s| s.holder_identity.clone()))
            .flatten()
    };
    let mut out = Leases {
        run_lease_holder: lease(&run_lease_name(suffix)).and_then(|l| holder_if_held(&l)),
        ..Leases::default()
    };
    if cluster.is_empty() {
        return out;
    }
    if kind == ObjectKind::Cluster {
        let of_cluster = |l: &BTreeMap<String, String>| {
            l.get(labels::CLUSTER_NAME).map(String::as_str) == Some(cluster)
        };
        let jobs = caches.jobs_where(ns, |j| of_cluster(j.labels()));
        let cached = caches.leases.state_filter(|l| {
            l.metadata.namespace.as_deref() == Some(ns) && of_cluster(l.labels())
        });
        out.machines_operating = leases::count_operating(
            &jobs.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &cached.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            |l| clock.age(l, now),
        );
    } else if lease(&cluster_lease_name(ns, cluster)).is_some_and(|l| holder_if_held(&l).is_some())
    {
        out.cluster = ClusterLease::HeldByCluster;
    }
    out
}
