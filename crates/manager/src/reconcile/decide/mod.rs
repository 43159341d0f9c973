//! The pure decision step of the reconcile core (ENGINEERING.md §4, "Decide"): from one
//! [`Observed`] value, choose what this pass does next, in the order of the spec chapter The
//! Reconcile Lifecycle. No I/O and no clock: time comes in as [`Observed::now`].

#[cfg(test)]
mod tests;

use std::time::{Duration, SystemTime};

use api::constants::reasons;
use api::shared::{ApplyPolicy, DriftAction};
use contract::names::{ObjectKind, Operation};
use contract::schedule;

pub use crate::pass::observed::{
    Approvals, CheckRequest, ClusterLease, Config, Drift, GateBlock, Gates, HealthReading, Inputs,
    JobOutcome, JobRecord, LastTimes, Leases, Observed, OwnerCheck, PlanStatus, RestoreAsk,
    StateRead,
};

/// How old an active Job must be before it may be judged stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);
/// How often a lease wait or a deletion waiting for dependents is re-checked.
pub const LEASE_RECHECK: Duration = Duration::from_secs(30);
/// How often an object whose inputs cannot be built, or whose dependencies gate it, is looked at
/// again: what it waits for (another object's state, a bootstrap Secret, a variables source) is
/// not always something a watch reports.
pub const DEPENDENCY_RECHECK: Duration = Duration::from_secs(30);

/// A fixed recheck delay with the object's jitter (up to a tenth more, from its UID), so objects
/// waiting together do not all look again in lockstep.
pub fn recheck(o: &Observed, delay: Duration) -> Duration {
    schedule_jitter(&o.uid, delay)
}

/// `delay` with the jitter of the object `uid`.
pub fn schedule_jitter(uid: &str, delay: Duration) -> Duration {
    schedule::jittered(uid, delay)
}

/// Why an apply is due (Choosing the next operation, rules 3-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyReason {
    /// Rule 3: no state yet.
    FirstApply,
    /// Rule 4: state without an inputs hash.
    NoInputsHash,
    /// Rule 5: a mutable kind's inputs changed.
    InputsChanged,
    /// Rule 6: a mutable kind's newest apply failed.
    RetryFailedApply,
    /// Rule 7: drift found under `Remediate`.
    DriftRemediation,
}

/// Why a refresh is due (the refresh schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshReason {
    /// A successful apply not yet followed by a refresh (machine).
    PostApply,
    /// Health reads pending.
    HealthPending,
    /// A machine's `remediation.healthCheckIntervalSeconds` elapsed (with `annotateMachine`).
    HealthCheck,
    /// A pool's membership refresh (30 s while unconverged or pending, else its interval).
    Membership,
}

/// Why a Job starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartReason {
    /// The object is being deleted.
    Destroy,
    /// An apply.
    Apply(ApplyReason),
    /// A plan for approval, under `applyPolicy: Manual`, standing in for this apply.
    Plan(ApplyReason),
    /// A refresh.
    Refresh(RefreshReason),
    /// The drift interval elapsed.
    DriftCheck,
    /// `captf.io/restore-state` names a backup to restore.
    Restore,
    /// `captf.io/requested-at` holds a value no check was started for (On-demand checks): a
    /// drift check, or a pool's refresh.
    Requested,
}

/// Why nothing starts now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// The paused branch.
    Paused,
    /// A Job is active.
    JobActive {
        /// Its name.
        job: String,
    },
    /// The owner lookup stops the pass (`DependenciesReady`).
    Owner {
        /// The documented reason.
        reason: &'static str,
    },
    /// A gate keeps Jobs from starting.
    Gate(GateBlock),
    /// A cluster's deletion waits for its machines and pools.
    DependentsExist,
    /// State cannot be read (`StateReadable` reason).
    StateUnreadable {
        /// The documented reason.
        reason: &'static str,
    },
    /// Inputs to run with are not available.
    InputsUnavailable {
        /// The documented reason, when there is one.
        reason: Option<&'static str>,
    },
    /// The operation failed recently and backs off.
    RetryBackoff {
        /// The operation.
        operation: Operation,
    },
    /// Manual policy: the plan waits for `captf.io/approve-plan`.
    PlanAwaitingApproval,
    /// The newest apply of these inputs was blocked before a destructive plan.
    DestructivePlanBlocked,
    /// The run lease is held by another live Job.
    RunLease {
        /// The operation waiting.
        operation: Operation,
        /// The Job holding the lease.
        job: String,
    },
    /// A machine or pool waits for its cluster's operation.
    ClusterOperation {
        /// The operation waiting.
        operation: Operation,
    },
    /// A cluster waits for its machines' and pools' operations, holding its run lease and the
    /// cluster write lease for the Job it will create meanwhile.
    MachineOperations {
        /// The operation waiting.
        operation: Operation,
        /// The Job the leases are held for.
        job: String,
    },
}

impl WaitReason {
    /// The documented condition reason this wait reports, when it has one of its own.
    pub fn documented_reason(&self) -> Option<&'static str> {
        match self {
            Self::Owner { reason } | Self::StateUnreadable { reason } => Some(reason),
            Self::Gate(gate) => Some(gate.reason),
            Self::DependentsExist => Some(reasons::DEPENDENTS_EXIST),
            Self::InputsUnavailable { reason } => *reason,
            Self::PlanAwaitingApproval => Some(reasons::PLAN_AWAITING_APPROVAL),
            Self::DestructivePlanBlocked => Some(reasons::DESTRUCTIVE_PLAN_BLOCKED),
            Self::RunLease { .. } => Some(reasons::WAITING_FOR_RUN_LEASE),
            Self::ClusterOperation { .. } => Some(reasons::WAITING_FOR_CLUSTER_OPERATION),
            Self::MachineOperations { .. } => Some(reasons::WAITING_FOR_MACHINE_OPERATIONS),
            Self::Paused | Self::JobActive { .. } | Self::RetryBackoff { .. } => None,
        }
    }
}

/// A Job to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartJob {
    /// The operation.
    pub operation: Operation,
    /// Why.
    pub reason: StartReason,
    /// One more than the highest retained attempt of this operation.
    pub attempt: u32,
    /// The tick of a refresh, drift or drift-remediation apply.
    pub tick: Option<String>,
    /// The inputs hash the Job renders (the Job name's seed).
    pub inputs_hash: String,
    /// For a restore: the backup it pushes.
    pub restore: Option<crate::job::RestoreBackup>,
}

impl StartJob {
    /// Whether this is a drift-remediation apply.
    pub fn drift_remediation(&self) -> bool {
        self.reason == StartReason::Apply(ApplyReason::DriftRemediation)
    }
}

/// Why an active Job is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stuck {
    /// Its per-run Secret is missing and no pod ever started, a minute on.
    NeverStarts,
    /// The object is being deleted and none of the Job's containers ever started (an image
    /// its pod cannot pull, say): nothing ran, so it is deleted instead of waited for.
    Deleting,
}

/// What this pass does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Add the finalizer; the pass stops so the write is visible first.
    AddFinalizer,
    /// Start a Job (Act takes the leases first).
    StartJob(StartJob),
    /// Delete an active Job that can never start, or that a deletion need not wait for.
    DeleteStuckJob {
        /// Its name.
        job: String,
        /// Why.
        why: Stuck,
    },
    /// Clean up and drop the finalizer.
    DropFinalizer,
    /// Wait; re-check after the delay (`None`: only on a watch event or the sync period).
    Wait {
        /// Why.
        reason: WaitReason,
        /// When to look again.
        requeue_after: Option<Duration>,
    },
    /// Nothing to do; requeue after the delay (`None`: leave it to watches and the sync period).
    Nothing {
        /// When to look again.
        requeue_after: Option<Duration>,
    },
}

/// Chooses what one reconcile pass does, per The Reconcile Lifecycle ("One pass, one status
/// patch", "The paused branch", "Bookkeeping", "Choosing the next operation", "Retry backoff",
/// "Run leases and the cluster operation gate", "Deletion order"), with Plan Approval, Drift and
/// Health, Machine Remediation and Machine Pools for the parts they own. In order:
///
/// 1. externally managed: nothing;
/// 2. owner lookup: wait, or drop the finalizer of a deleting object with no state and no Job;
/// 3. finalizer missing: add it;
/// 4. paused: delete a stuck Job, else wait;
/// 5. a Job is active: delete it when stuck, or when the object is being deleted and none of
///    its containers ever started (not a destroy), else wait;
/// 6. deleting: wait for dependents (cluster), drop the finalizer (no state, or destroyed),
///    else destroy;
/// 7. unreadable or lost state: wait;
/// 8. apply when: no state; state without inputs hash; a mutable kind's inputs changed; its
///    newest apply failed (not blocked / plan-changed / remediation); drift to remediate under
///    the failure cap. Under `applyPolicy: Manual` every one but the first apply goes through a
///    plan and its approval; under Automatic a blocked hash waits for its destructive approval;
/// 9. the schedule, first due wins: post-apply refresh, pending health, a pool's membership
///    refresh, drift; else requeue at the soonest.
///
/// A restore (`captf.io/restore-state`) comes right after the deletion branch: it beats every
/// apply, refresh and drift check, and needs no readable state (it is how a lost or damaged
/// state is put back).
///
/// Every Job start passes the gates (the dependency gate only for an apply or plan), the retry
/// backoff (failed Jobs only), the run lease and the cluster operation gate, any of which turns
/// it into a [`Decision::Wait`].
pub fn decide(observed: &Observed, config: &Config) -> Decision {
    let decision = decide_unclamped(observed, config);
    clamp(decision, longest_interval(observed, config))
}

fn decide_unclamped(o: &Observed, cfg: &Config) -> Decision {
    // Preamble.
    if o.externally_managed {
        return Decision::Nothing {
            requeue_after: None,
        };
    }
    let active = o
        .jobs
        .iter()
        .filter(|job| job.is_active())
        .max_by_key(|job| job.created);
    if let Some(decision) = owner_lookup(o, active.is_some()) {
        return decision;
    }
    if !o.finalizer {
        return if o.deleting {
            Decision::Nothing {
                requeue_after: None,
            }
        } else {
            Decision::AddFinalizer
        };
    }

    // The paused branch and the active Job.
    if let Some(job) = active {
        if is_stuck(job, o.now) {
            return Decision::DeleteStuckJob {
                job: job.name.clone(),
                why: Stuck::NeverStarts,
            };
        }
        // A deletion does not wait for a Job that never ran (its destroy would wait for the
        // same pull to fail).
        if o.deleting && job.module_never_started && job.operation != Operation::Destroy {
            return Decision::DeleteStuckJob {
                job: job.name.clone(),
                why: Stuck::Deleting,
            };
        }
        let reason = if o.paused {
            WaitReason::Paused
        } else {
            WaitReason::JobActive {
                job: job.name.clone(),
            }
        };
        return Decision::Wait {
            reason,
            requeue_after: stuck_check_in(job, o.now),
        };
    }
    if o.paused {
        return Decision::Wait {
            reason: WaitReason::Paused,
            requeue_after: None,
        };
    }

    // Choosing the next operation.
    if o.deleting {
        return deleting(o, cfg);
    }
    if let Some(ask) = &o.restore {
        return restore(o, cfg, ask);
    }
    let state_hash = match &o.state {
        // Rule 3: no state yet.
        StateRead::None => return apply(o, cfg, ApplyReason::FirstApply),
        // Rule 4: state without an inputs hash.
        StateRead::Read {
            inputs_hash: None, ..
        } => return apply(o, cfg, ApplyReason::NoInputsHash),
        StateRead::Read {
            inputs_hash: Some(hash),
            ..
        } => hash.as_str(),
        StateRead::Unreadable { reason } => {
            return Decision::Wait {
                reason: WaitReason::StateUnreadable { reason },
                requeue_after: Some(schedule::RETRY_BASE),
            };
        }
        StateRead::Lost => {
            return Decision::Wait {
                reason: WaitReason::StateUnreadable {
                    reason: reasons::STATE_LOST,
                },
                requeue_after: None,
            };
        }
    };
    if let Some(reason) = apply_reason(o, cfg, state_hash) {
        return apply(o, cfg, reason);
    }
    scheduled(o, cfg, state_hash)
}

/// Preamble step 2.
fn owner_lookup(o: &Observed, job_active: bool) -> Option<Decision> {
    let reason = match o.owner {
        OwnerCheck::Ok => return None,
        OwnerCheck::NotYet { reason } => {
            if o.deleting && o.state == StateRead::None && !job_active {
                return Some(if o.finalizer {
                    Decision::DropFinalizer
                } else {
                    Decision::Nothing {
                        requeue_after: None,
                    }
                });
            }
            reason
        }
        // Deletion proceeds past a gone, mismatched or gated owner.
        _ if o.deleting => return None,
        OwnerCheck::Gone => reasons::OWNER_NOT_FOUND,
        OwnerCheck::Mismatch => reasons::OWNER_MISMATCH,
        OwnerCheck::Gated { reason } => reason,
    };
    Some(wait(WaitReason::Owner { reason }, None))
}

/// A Job that can never start: no per-run Secret, no pod ever, at least a minute old.
fn is_stuck(job: &JobRecord, now: SystemTime) -> bool {
    !job.run_secret_exists
        && !job.pod_ever_started
        && now.duration_since(job.created).unwrap_or(Duration::ZERO) >= STUCK_AFTER
}

/// When a Job that may turn out stuck is old enough to be judged.
fn stuck_check_in(job: &JobRecord, now: SystemTime) -> Option<Duration> {
    if job.run_secret_exists || job.pod_ever_started {
        return None;
    }
    let age = now.duration_since(job.created).unwrap_or(Duration::ZERO);
    Some(STUCK_AFTER.saturating_sub(age).max(Duration::from_secs(1)))
}

/// Rule 2 and Deletion order.
fn deleting(o: &Observed, cfg: &Config) -> Decision {
    if o.kind == ObjectKind::Cluster && o.dependents > 0 {
        return Decision::Wait {
            reason: WaitReason::DependentsExist,
            requeue_after: Some(recheck(o, LEASE_RECHECK)),
        };
    }
    match &o.state {
        StateRead::None => return Decision::DropFinalizer,
        StateRead::Unreadable { reason } => {
            return Decision::Wait {
                reason: WaitReason::StateUnreadable { reason },
                requeue_after: Some(schedule::RETRY_BASE),
            };
        }
        StateRead::Lost => {
            return Decision::Wait {
                reason: WaitReason::StateUnreadable {
                    reason: reasons::STATE_LOST,
                },
                requeue_after: None,
            };
        }
        StateRead::Read { .. } => {}
    }
    if let Some(destroy) = newest_finished(o, Operation::Destroy, |_| true) {
        let after_apply = match (destroy.finished, o.last.apply) {
            (Some(finished), Some(applied)) => finished >= applied,
            _ => true,
        };
        if destroy.outcome == Some(JobOutcome::Succeeded) && after_apply {
            return Decision::DropFinalizer;
        }
    }
    if !o.durable_inputs && !matches!(o.inputs, Inputs::Built { .. }) {
        return Decision::Wait {
            reason: WaitReason::InputsUnavailable { reason: None },
            requeue_after: None,
        };
    }
    let hash = current_or_state_hash(o);
    start_job(o, cfg, Operation::Destroy, StartReason::Destroy, hash, None)
}

/// A restore Job for `ask`, named after the backup's serial; it renders (and is adopted with) the
/// backup's inputs hash, else the current or state one.
fn restore(o: &Observed, cfg: &Config, ask: &RestoreAsk) -> Decision {
    let hash = ask
        .inputs_hash
        .clone()
        .unwrap_or_else(|| current_or_state_hash(o));
    let tick = Some(ask.backup.serial.to_string());
    match start_job(o, cfg, Operation::Restore, StartReason::Restore, hash, tick) {
        Decision::StartJob(start) => Decision::StartJob(StartJob {
            restore: Some(ask.backup),
            ..start
        }),
        other => other,
    }
}

/// Rules 5-7, for state carrying `state_hash`.
fn apply_reason(o: &Observed, cfg: &Config, state_hash: &str) -> Option<ApplyReason> {
    if !o.mutable {
        return None;
    }
    let Inputs::Built { hash } = &o.inputs else {
        // The inputs cannot be compared; Report says why, the schedule goes on.
        return None;
    };
    if hash != state_hash {
        return Some(ApplyReason::InputsChanged);
    }
    if let Some(newest) = newest_finished(o, Operation::Apply, |_| true) {
        let failed = matches!(
            newest.outcome,
            Some(JobOutcome::Failed | JobOutcome::DeadlineExceeded | JobOutcome::Interrupted)
        );
        if failed && !newest.drift_remediation {
            return Some(ApplyReason::RetryFailedApply);
        }
    }
    if o.drift.found
        && o.drift.action == DriftAction::Remediate
        && o.drift.remediation_failures < cfg.failed_jobs_history_limit
        && !remediation_blocked(o, hash)
    {
        return Some(ApplyReason::DriftRemediation);
    }
    None
}

/// A blocked (or plan-changed) remediation of these inputs, not yet approved, keeps the drift and
/// health schedule running instead of re-trying the remediation.
fn remediation_blocked(o: &Observed, hash: &str) -> bool {
    let newest = newest_finished(o, Operation::Apply, |job| {
        job.drift_remediation && job.inputs_hash == hash
    });
    match newest.and_then(|job| job.outcome) {
        Some(JobOutcome::Blocked) => {
            o.approvals.policy == ApplyPolicy::Automatic
                && o.approvals.approved_destructive_hash.as_deref() != Some(hash)
        }
        _ => false,
    }
}

/// An apply for `reason`, through Manual's plan approval or Automatic's destructive guard.
fn apply(o: &Observed, cfg: &Config, reason: ApplyReason) -> Decision {
    let Inputs::Built { hash } = &o.inputs else {
        let documented = match &o.inputs {
            Inputs::Failed { reason } => Some(*reason),
            _ => None,
        };
        return Decision::Wait {
            reason: WaitReason::InputsUnavailable { reason: documented },
            requeue_after: Some(recheck(o, DEPENDENCY_RECHECK)),
        };
    };
    let tick =
        (reason == ApplyReason::DriftRemediation).then(|| format!("r{}", secs(o.last.drift_check)));
    let gated = o.kind == ObjectKind::Cluster && reason != ApplyReason::FirstApply;
    if gated && o.approvals.policy == ApplyPolicy::Manual {
        let plan = o
            .approvals
            .plan
            .as_ref()
            .filter(|plan| plan.inputs_hash == *hash);
        let Some(plan) = plan else {
            return start_job(
                o,
                cfg,
                Operation::Plan,
                StartReason::Plan(reason),
                hash.clone(),
                tick,
            );
        };
        let approved = !plan.has_changes
            || o.approvals.approved_plan_hash.as_deref() == Some(plan.plan_hash.as_str());
        if !approved {
            return Decision::Wait {
                reason: WaitReason::PlanAwaitingApproval,
                requeue_after: Some(recheck(o, schedule::APPROVAL_RECHECK)),
            };
        }
    } else if gated {
        let newest = newest_finished(o, Operation::Apply, |job| job.inputs_hash == *hash);
        if newest.and_then(|job| job.outcome) == Some(JobOutcome::Blocked)
            && o.approvals.approved_destructive_hash.as_deref() != Some(hash.as_str())
        {
            return Decision::Wait {
                reason: WaitReason::DestructivePlanBlocked,
                requeue_after: Some(recheck(o, schedule::APPROVAL_RECHECK)),
            };
        }
    }
    start_job(
        o,
        cfg,
        Operation::Apply,
        StartReason::Apply(reason),
        hash.clone(),
        tick,
    )
}

/// The refresh and drift schedule.
fn scheduled(o: &Observed, cfg: &Config, state_hash: &str) -> Decision {
    let now = o.now;
    let uid = o.uid.as_str();
    let last_sample = [o.last.apply, o.last.refresh, o.last.drift_check]
        .into_iter()
        .flatten()
        .max();
    let every = |interval: Duration| due_from(last_sample, interval, uid, now);

    let mut candidates: Vec<(Option<SystemTime>, Operation, StartReason)> = Vec::new();
    // On demand first: due now, under the same backoff, leases and gates as the schedule.
    if o.requested.as_ref().is_some_and(|r| !r.answered) {
        let op = if o.kind == ObjectKind::MachinePool {
            Operation::Refresh
        } else {
            Operation::Drift
        };
        candidates.push((Some(now), op, StartReason::Requested));
    }
    let refreshed_since_apply = match o.last.apply {
        Some(applied) => [o.last.refresh, o.last.drift_check]
            .into_iter()
            .flatten()
            .any(|sampled| sampled >= applied),
        None => true,
    };
    if o.kind != ObjectKind::Cluster && !o.last.apply_health_definite && !refreshed_since_apply {
        candidates.push((
            Some(now),
            Operation::Refresh,
            StartReason::Refresh(RefreshReason::PostApply),
        ));
    }
    if o.health == HealthReading::Pending {
        candidates.push((
            every(schedule::pending_refresh_delay(o.pending_refreshes)),
            Operation::Refresh,
            StartReason::Refresh(RefreshReason::HealthPending),
        ));
    }
    if let Some(interval) = o.health_check_interval.filter(|_| o.provisioned) {
        candidates.push((
            every(interval),
            Operation::Refresh,
            StartReason::Refresh(RefreshReason::HealthCheck),
        ));
    }
    if let Some(interval) = o.membership_refresh {
        candidates.push((
            every(interval),
            Operation::Refresh,
            StartReason::Refresh(RefreshReason::Membership),
        ));
    }
    let drift_since = [o.last.apply, o.last.drift_check]
        .into_iter()
        .flatten()
        .max();
    candidates.push((
        due_from(drift_since, drift_interval(o, cfg), uid, now),
        Operation::Drift,
        StartReason::DriftCheck,
    ));

    // A failed refresh or drift backs off under the normal retry backoff.
    let candidates: Vec<_> = candidates
        .into_iter()
        .map(|(due, op, reason)| {
            let due = due.map(|due| match retry_deadline(o, cfg, op) {
                Some(retry) => due.max(retry),
                None => due,
            });
            (due, op, reason)
        })
        .collect();

    if let Some((_, op, reason)) = candidates
        .iter()
        .find(|(due, _, _)| due.is_some_and(|due| schedule::is_due(due, now)))
    {
        let last_success = match op {
            Operation::Drift => o.last.drift_check,
            _ => o.last.refresh,
        };
        let hash = match &o.inputs {
            Inputs::Built { hash } if o.mutable => hash.clone(),
            _ => state_hash.to_owned(),
        };
        return start_job(
            o,
            cfg,
            *op,
            *reason,
            hash,
            Some(secs(last_success).to_string()),
        );
    }
    let soonest = schedule::soonest(candidates.iter().map(|(due, _, _)| *due));
    Decision::Nothing {
        requeue_after: soonest.map(|due| schedule::until(due, now)),
    }
}

/// The object's drift interval: its own (resolved by Observe), else the manager default.
fn drift_interval(o: &Observed, cfg: &Config) -> Duration {
    o.drift.interval.unwrap_or(cfg.drift_default_interval)
}

/// `since` plus the jittered interval; with no `since` known, due now. `None` when disabled.
fn due_from(
    since: Option<SystemTime>,
    interval: Duration,
    uid: &str,
    now: SystemTime,
) -> Option<SystemTime> {
    if interval.is_zero() {
        return None;
    }
    match since {
        Some(since) => schedule::due_at(since, interval, uid),
        None => Some(now),
    }
}

/// Gates, retry backoff, run lease and cluster operation gate, then the Job.
fn start_job(
    o: &Observed,
    cfg: &Config,
    operation: Operation,
    reason: StartReason,
    inputs_hash: String,
    tick: Option<String>,
) -> Decision {
    if let Some(gate) = o.gates.credentials {
        return wait(WaitReason::Gate(gate), None);
    }
    // A dependency gate blocks only what renders the current inputs (Job Inputs: drift and
    // refresh fall back to the durable inputs; a destroy never needs them).
    if matches!(operation, Operation::Apply | Operation::Plan)
        && let Some(gate) = o.gates.dependencies
    {
        return wait(WaitReason::Gate(gate), Some(recheck(o, DEPENDENCY_RECHECK)));
    }
    if operation != Operation::Restore
        && let Some(retry) = retry_deadline(o, cfg, operation)
        && !schedule::is_due(retry, o.now)
    {
        return wait(
            WaitReason::RetryBackoff { operation },
            Some(schedule::until(retry, o.now)),
        );
    }
    let attempt = next_attempt(o, operation);
    let job_name = contract::names::job_name(&contract::names::JobNameParts {
        kind: o.kind,
        name: &o.name,
        operation,
        attempt,
        inputs_hash: &inputs_hash,
        tick: tick.as_deref(),
    });
    // The run lease held by another Job (running, or taken for a Job not created yet); a lease
    // this very Job holds (a cluster waiting for its machines renews it) is its own.
    if let Some(holder) = o
        .leases
        .run_lease_holder
        .as_ref()
        .filter(|h| **h != job_name)
    {
        return wait(
            WaitReason::RunLease {
                operation,
                job: holder.clone(),
            },
            Some(recheck(o, LEASE_RECHECK)),
        );
    }
    let gated_op = matches!(
        operation,
        Operation::Apply | Operation::Destroy | Operation::Restore
    );
    if cfg.cluster_operation_gate && o.names_cluster && gated_op {
        match o.kind {
            // The cluster takes both leases and keeps them while it waits (Act holds them for
            // `job`), so new machine operations wait behind it.
            ObjectKind::Cluster if o.leases.machines_operating > 0 => {
                return wait(
                    WaitReason::MachineOperations {
                        operation,
                        job: job_name,
                    },
                    Some(recheck(o, LEASE_RECHECK)),
                );
            }
            ObjectKind::Machine | ObjectKind::MachinePool
                if o.leases.cluster == ClusterLease::HeldByCluster =>
            {
                return wait(
                    WaitReason::ClusterOperation { operation },
                    Some(recheck(o, LEASE_RECHECK)),
                );
            }
            _ => {}
        }
    }
    Decision::StartJob(StartJob {
        operation,
        reason,
        attempt,
        tick,
        inputs_hash,
        restore: None,
    })
}

fn wait(reason: WaitReason, requeue_after: Option<Duration>) -> Decision {
    Decision::Wait {
        reason,
        requeue_after,
    }
}

/// `1 +` the highest retained attempt of the operation.
fn next_attempt(o: &Observed, operation: Operation) -> u32 {
    o.jobs
        .iter()
        .filter(|job| job.operation == operation)
        .map(|job| job.attempt)
        .max()
        .unwrap_or(0)
        .saturating_add(1)
}

/// The newest finished Job of an operation that matches `filter`.
fn newest_finished(
    o: &Observed,
    operation: Operation,
    filter: impl Fn(&JobRecord) -> bool,
) -> Option<&JobRecord> {
    o.jobs
        .iter()
        .filter(|job| job.operation == operation && job.finished.is_some() && filter(job))
        .max_by_key(|job| (job.finished, job.attempt))
}

/// When the operation may be retried after its consecutive failures: newest first, failures
/// counted, interruptions, blocks and plan changes skipped, stopping at a success.
fn retry_deadline(o: &Observed, cfg: &Config, operation: Operation) -> Option<SystemTime> {
    let mut finished: Vec<&JobRecord> = o
        .jobs
        .iter()
        .filter(|job| job.operation == operation && job.finished.is_some())
        .collect();
    finished.sort_by_key(|job| std::cmp::Reverse((job.finished, job.attempt)));
    let mut failures = 0u32;
    let mut last_failure: Option<SystemTime> = None;
    for job in finished {
        match job.outcome {
            Some(JobOutcome::Succeeded) => break,
            Some(outcome) if outcome.counts_as_failure() => {
                failures += 1;
                last_failure = last_failure.max(job.finished);
            }
            _ => {}
        }
    }
    last_failure.map(|last| schedule::retry_at(last, failures, cfg.failed_jobs_history_limit))
}

fn current_or_state_hash(o: &Observed) -> String {
    if let Inputs::Built { hash } = &o.inputs {
        return hash.clone();
    }
    match &o.state {
        StateRead::Read {
            inputs_hash: Some(hash),
            ..
        } => hash.clone(),
        _ => String::new(),
    }
}

/// Seconds since the epoch, the tick's spelling; `0` for never.
fn secs(time: Option<SystemTime>) -> u64 {
    time.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

/// The longest delay any decision may ask for: the longest interval in play, jittered.
pub fn longest_interval(o: &Observed, cfg: &Config) -> Duration {
    let longest = [
        drift_interval(o, cfg),
        schedule::APPROVAL_RECHECK,
        schedule::RETRY_CAP,
        schedule::PENDING_REFRESH_STEPS[schedule::PENDING_REFRESH_STEPS.len() - 1],
    ]
    .into_iter()
    .max()
    .unwrap_or(schedule::RETRY_CAP);
    schedule::jittered(&o.uid, longest)
}

/// Keeps every requeue within `longest` (a timestamp in the future must not park an object).
fn clamp(decision: Decision, longest: Duration) -> Decision {
    match decision {
        Decision::Wait {
            reason,
            requeue_after,
        } => Decision::Wait {
            reason,
            requeue_after: requeue_after.map(|d| d.min(longest)),
        },
        Decision::Nothing { requeue_after } => Decision::Nothing {
            requeue_after: requeue_after.map(|d| d.min(longest)),
        },
        other => other,
    }
}
