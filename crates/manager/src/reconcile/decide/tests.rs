//! One test per rule of The Reconcile Lifecycle (and the chapters it defers to), each with a
//! hand-built `Observed`.

use std::time::{Duration, SystemTime};

use api::constants::reasons;
use api::shared::{ApplyPolicy, DriftAction};
use contract::names::{ObjectKind, Operation};
use contract::schedule;
use proptest::prelude::*;

use super::*;

const NOW_SECS: u64 = 2_000_000_000;

/// The UID every hand-built `Observed` carries (the jitter seed).
const UID_OF_TESTS: &str = "0b0c4f3e-6c1d-4a55-9a77-1f0c2c1f0001";

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(NOW_SECS)
}

fn ago(secs: u64) -> SystemTime {
    now() - Duration::from_secs(secs)
}

/// A provisioned, healthy TerraformCluster applied ten minutes ago with nothing to do.
fn mk_observed() -> Observed {
    Observed {
        jobs: vec![job(Operation::Apply, 1, Some(JobOutcome::Succeeded), 600)],
        state: StateRead::Read {
            serial: 3,
            inputs_hash: Some("h1".into()),
        },
        inputs: Inputs::Built { hash: "h1".into() },
        last: LastTimes {
            apply: Some(ago(600)),
            refresh: None,
            drift_check: None,
            apply_health_definite: true,
        },
        ..Observed::provisioned_cluster("x", UID_OF_TESTS, now())
    }
}

fn mk_machine() -> Observed {
    Observed {
        kind: ObjectKind::Machine,
        mutable: false,
        inputs: Inputs::NotBuilt,
        ..mk_observed()
    }
}

/// A finished (or, with `None`, active) Job that finished `finished_ago` seconds ago.
fn job(
    operation: Operation,
    attempt: u32,
    outcome: Option<JobOutcome>,
    finished_ago: u64,
) -> JobRecord {
    JobRecord {
        name: format!("captf-c-x-{operation}-a{attempt}-abcdef"),
        operation,
        attempt,
        tick: None,
        inputs_hash: "h1".into(),
        created: ago(finished_ago + 120),
        started: Some(ago(finished_ago + 110)),
        finished: outcome.map(|_| ago(finished_ago)),
        outcome,
        drift_remediation: false,
        requested: None,
        run_secret_exists: true,
        pod_ever_started: true,
        module_never_started: false,
        pull_failure: None,
    }
}

fn cfg() -> Config {
    Config::default()
}

fn started(decision: &Decision) -> &StartJob {
    match decision {
        Decision::StartJob(start) => start,
        other => panic!("expected a Job to start, got {other:?}"),
    }
}

fn waited(decision: &Decision) -> (&WaitReason, Option<Duration>) {
    match decision {
        Decision::Wait {
            reason,
            requeue_after,
        } => (reason, *requeue_after),
        other => panic!("expected a wait, got {other:?}"),
    }
}

// Preamble.

/// The requeue of a pass that decides nothing but when to look again.
fn requeue_after(o: &Observed) -> Duration {
    let Decision::Nothing {
        requeue_after: Some(after),
    } = decide(o, &cfg())
    else {
        panic!("expected a requeue");
    };
    after
}

#[test]
fn externally_managed_object_is_left_alone() {
    let o = Observed {
        externally_managed: true,
        state: StateRead::None,
        ..mk_observed()
    };
    assert_eq!(
        decide(&o, &cfg()),
        Decision::Nothing {
            requeue_after: None
        }
    );
}

#[test]
fn owner_missing_waits_for_owner() {
    let o = Observed {
        owner: OwnerCheck::NotYet {
            reason: reasons::WAITING_FOR_OWNER,
        },
        ..mk_observed()
    };
    let d = decide(&o, &cfg());
    assert_eq!(
        waited(&d).0.documented_reason(),
        Some(reasons::WAITING_FOR_OWNER)
    );
}

#[test]
fn owner_missing_while_deleting_without_state_drops_finalizer() {
    let o = Observed {
        owner: OwnerCheck::NotYet {
            reason: reasons::WAITING_FOR_OWNER,
        },
        deleting: true,
        state: StateRead::None,
        ..mk_observed()
    };
    assert_eq!(decide(&o, &cfg()), Decision::DropFinalizer);
}

#[test]
fn owner_mismatch_starts_no_job() {
    let o = Observed {
        owner: OwnerCheck::Mismatch,
        ..mk_observed()
    };
    let d = decide(&o, &cfg());
    assert_eq!(
        waited(&d).0.documented_reason(),
        Some(reasons::OWNER_MISMATCH)
    );
}

#[test]
fn owner_gone_or_mismatched_does_not_stop_deletion() {
    for owner in [
        OwnerCheck::Gone,
        OwnerCheck::Mismatch,
        OwnerCheck::Gated {
            reason: reasons::CLUSTER_NOT_TERRAFORM,
        },
    ] {
        let o = Observed {
            owner,
            deleting: true,
            ..mk_observed()
        };
        assert_eq!(started(&decide(&o, &cfg())).operation, Operation::Destroy);
    }
}

#[test]
fn finalizer_is_added_before_anything_else() {
    let o = Observed {
        finalizer: false,
        state: StateRead::None,
        ..mk_observed()
    };
    assert_eq!(decide(&o, &cfg()), Decision::AddFinalizer);
}

// The paused branch and the active Job.

#[test]
fn paused_object_starts_nothing() {
    let o = Observed {
        paused: true,
        state: StateRead::None,
        ..mk_observed()
    };
    assert_eq!(waited(&decide(&o, &cfg())).0, &WaitReason::Paused);
}

#[test]
fn paused_object_still_deletes_a_stuck_job() {
    let mut stuck = job(Operation::Apply, 2, None, 0);
    stuck.run_secret_exists = false;
    stuck.pod_ever_started = false;
    let o = Observed {
        paused: true,
        jobs: vec![stuck.clone()],
        ..mk_observed()
    };
    assert_eq!(
        decide(&o, &cfg()),
        Decision::DeleteStuckJob {
            job: stuck.name,
            why: Stuck::NeverStarts
        }
    );
}

#[test]
fn active_job_is_waited_for() {
    let active = job(Operation::Drift, 1, None, 0);
    let o = Observed {
        jobs: vec![active.clone()],
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    assert_eq!(
        waited(&decide(&o, &cfg())).0,
        &WaitReason::JobActive { job: active.name }
    );
}

#[test]
fn stuck_job_is_deleted_once_a_minute_old() {
    let mut stuck = job(Operation::Apply, 1, None, 0);
    stuck.run_secret_exists = false;
    stuck.pod_ever_started = false;
    stuck.created = ago(59);
    let young = Observed {
        jobs: vec![stuck.clone()],
        ..mk_observed()
    };
    let (_, requeue) = waited(&decide(&young, &cfg()));
    assert_eq!(requeue, Some(Duration::from_secs(1)));
    stuck.created = ago(60);
    let old = Observed {
        jobs: vec![stuck.clone()],
        ..mk_observed()
    };
    assert_eq!(
        decide(&old, &cfg()),
        Decision::DeleteStuckJob {
            job: stuck.name,
            why: Stuck::NeverStarts
        }
    );
}

#[test]
fn job_with_a_started_pod_is_never_stuck() {
    let mut running = job(Operation::Apply, 1, None, 0);
    running.run_secret_exists = false;
    running.created = ago(3600);
    let o = Observed {
        jobs: vec![running],
        ..mk_observed()
    };
    assert!(matches!(
        waited(&decide(&o, &cfg())).0,
        WaitReason::JobActive { .. }
    ));
}

// Rule 2: deletion.

#[test]
fn deleting_cluster_waits_for_its_machines_and_pools() {
    let o = Observed {
        deleting: true,
        dependents: 2,
        ..mk_observed()
    };
    assert_eq!(waited(&decide(&o, &cfg())).0, &WaitReason::DependentsExist);
}

#[test]
fn deleting_without_state_drops_the_finalizer_at_once() {
    let o = Observed {
        deleting: true,
        state: StateRead::None,
        ..mk_machine()
    };
    assert_eq!(decide(&o, &cfg()), Decision::DropFinalizer);
}

#[test]
fn deleting_with_state_destroys() {
    let o = Observed {
        deleting: true,
        inputs: Inputs::Failed {
            reason: reasons::WAITING_FOR_BOOTSTRAP_DATA,
        },
        ..mk_machine()
    };
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        (start.operation, start.reason),
        (Operation::Destroy, StartReason::Destroy)
    );
    assert_eq!(start.inputs_hash, "h1");
}

#[test]
fn deleting_after_a_successful_destroy_drops_the_finalizer() {
    let mut o = Observed {
        deleting: true,
        ..mk_observed()
    };
    o.jobs
        .push(job(Operation::Destroy, 1, Some(JobOutcome::Succeeded), 10));
    assert_eq!(decide(&o, &cfg()), Decision::DropFinalizer);
}

#[test]
fn dependency_gates_do_not_stop_a_destroy() {
    let o = Observed {
        deleting: true,
        gates: Gates {
            dependencies: Some(GateBlock {
                condition: "DependenciesReady",
                reason: reasons::WAITING_FOR_CLUSTER_EXPORTS,
            }),
            credentials: None,
        },
        ..mk_machine()
    };
    assert_eq!(started(&decide(&o, &cfg())).operation, Operation::Destroy);
}

// Rules 3-7: applies.

#[test]
fn no_state_yet_first_apply() {
    let o = Observed {
        state: StateRead::None,
        jobs: vec![],
        inputs: Inputs::Built { hash: "h0".into() },
        ..mk_machine()
    };
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(start.reason, StartReason::Apply(ApplyReason::FirstApply));
    assert_eq!((start.attempt, start.tick.as_deref()), (1, None));
}

#[test]
fn state_without_inputs_hash_applies_even_when_immutable() {
    let o = Observed {
        state: StateRead::Read {
            serial: 1,
            inputs_hash: None,
        },
        jobs: vec![job(Operation::Apply, 1, Some(JobOutcome::Interrupted), 600)],
        inputs: Inputs::Built { hash: "h1".into() },
        ..mk_machine()
    };
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(start.reason, StartReason::Apply(ApplyReason::NoInputsHash));
    assert_eq!(start.attempt, 2);
}

#[test]
fn mutable_kind_with_changed_inputs_applies() {
    let o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(start.reason, StartReason::Apply(ApplyReason::InputsChanged));
    assert_eq!((start.inputs_hash.as_str(), start.attempt), ("h2", 2));
}

#[test]
fn immutable_kind_never_applies_for_changed_inputs() {
    let o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_machine()
    };
    assert!(matches!(decide(&o, &cfg()), Decision::Nothing { .. }));
}

#[test]
fn mutable_kind_whose_newest_apply_failed_applies_again() {
    let mut o = mk_observed();
    o.jobs
        .push(job(Operation::Apply, 2, Some(JobOutcome::Failed), 300));
    let d = decide(&o, &cfg());
    assert_eq!(
        started(&d).reason,
        StartReason::Apply(ApplyReason::RetryFailedApply)
    );
}

#[test]
fn failed_drift_remediation_is_not_retried_as_a_failed_apply() {
    let mut o = mk_observed();
    let mut remediation = job(Operation::Apply, 2, Some(JobOutcome::Failed), 300);
    remediation.drift_remediation = true;
    o.jobs.push(remediation);
    assert!(matches!(decide(&o, &cfg()), Decision::Nothing { .. }));
}

#[test]
fn blocked_apply_waits_for_its_destructive_approval() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    let mut blocked = job(Operation::Apply, 2, Some(JobOutcome::Blocked), 30);
    blocked.inputs_hash = "h2".into();
    o.jobs.push(blocked);
    let d = decide(&o, &cfg());
    assert_eq!(
        waited(&d),
        (
            &WaitReason::DestructivePlanBlocked,
            Some(super::schedule_jitter(
                UID_OF_TESTS,
                schedule::APPROVAL_RECHECK
            ))
        )
    );
    o.approvals.approved_destructive_hash = Some("h2".into());
    // Approved: applies at once, with no backoff (a block does not count).
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!((start.operation, start.attempt), (Operation::Apply, 3));
}

#[test]
fn drift_remediate_applies_under_the_failure_cap() {
    let mut o = mk_observed();
    o.drift.found = true;
    o.drift.action = DriftAction::Remediate;
    o.drift.remediation_failures = 2;
    o.last.drift_check = Some(ago(100));
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert!(start.drift_remediation());
    assert_eq!(start.tick, Some(format!("r{}", NOW_SECS - 100)));
    o.drift.remediation_failures = 3;
    assert!(matches!(decide(&o, &cfg()), Decision::Nothing { .. }));
}

#[test]
fn drift_report_never_applies() {
    let mut o = mk_observed();
    o.drift.found = true;
    assert!(matches!(decide(&o, &cfg()), Decision::Nothing { .. }));
}

#[test]
fn blocked_drift_remediation_keeps_the_schedule_running() {
    let mut o = mk_observed();
    o.drift.found = true;
    o.drift.action = DriftAction::Remediate;
    o.last.apply = Some(ago(3 * 3600));
    o.last.drift_check = Some(ago(3 * 3600));
    let mut blocked = job(Operation::Apply, 2, Some(JobOutcome::Blocked), 2 * 3600);
    blocked.drift_remediation = true;
    o.jobs.push(blocked);
    assert_eq!(started(&decide(&o, &cfg())).operation, Operation::Drift);
}

// Plan approval.

#[test]
fn manual_policy_does_not_gate_the_first_apply() {
    let mut o = Observed {
        state: StateRead::None,
        jobs: vec![],
        ..mk_observed()
    };
    o.approvals.policy = ApplyPolicy::Manual;
    assert_eq!(started(&decide(&o, &cfg())).operation, Operation::Apply);
}

#[test]
fn manual_policy_plans_then_waits_for_approval_then_applies() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    o.approvals.policy = ApplyPolicy::Manual;
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        (start.operation, start.reason),
        (
            Operation::Plan,
            StartReason::Plan(ApplyReason::InputsChanged)
        )
    );
    o.approvals.plan = Some(PlanStatus {
        inputs_hash: "h2".into(),
        plan_hash: "p1:abc".into(),
        has_changes: true,
    });
    assert_eq!(
        waited(&decide(&o, &cfg())),
        (
            &WaitReason::PlanAwaitingApproval,
            Some(super::schedule_jitter(
                UID_OF_TESTS,
                schedule::APPROVAL_RECHECK
            ))
        )
    );
    o.approvals.approved_plan_hash = Some("p1:abc".into());
    assert_eq!(started(&decide(&o, &cfg())).operation, Operation::Apply);
}

#[test]
fn manual_policy_plan_without_changes_needs_no_approval() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    o.approvals.policy = ApplyPolicy::Manual;
    o.approvals.plan = Some(PlanStatus {
        inputs_hash: "h2".into(),
        plan_hash: "p1:empty".into(),
        has_changes: false,
    });
    assert_eq!(started(&decide(&o, &cfg())).operation, Operation::Apply);
}

#[test]
fn manual_policy_plan_of_other_inputs_is_planned_again() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h3".into() },
        ..mk_observed()
    };
    o.approvals.policy = ApplyPolicy::Manual;
    o.approvals.plan = Some(PlanStatus {
        inputs_hash: "h2".into(),
        plan_hash: "p1:abc".into(),
        has_changes: true,
    });
    o.approvals.approved_plan_hash = Some("p1:abc".into());
    assert_eq!(started(&decide(&o, &cfg())).operation, Operation::Plan);
}

// Retry backoff.

#[test]
fn retry_backoff_one_minute_after_one_failure() {
    let mut o = mk_observed();
    o.jobs
        .push(job(Operation::Apply, 2, Some(JobOutcome::Failed), 20));
    assert_eq!(
        waited(&decide(&o, &cfg())),
        (
            &WaitReason::RetryBackoff {
                operation: Operation::Apply
            },
            Some(Duration::from_secs(40))
        )
    );
    o.now = ago(0) + Duration::from_secs(40);
    assert_eq!(started(&decide(&o, &cfg())).attempt, 3);
}

#[test]
fn retry_backoff_jumps_to_the_cap_at_the_history_limit() {
    let mut o = mk_observed();
    for attempt in 2..=4 {
        o.jobs.push(job(
            Operation::Apply,
            attempt,
            Some(JobOutcome::DeadlineExceeded),
            400 - u64::from(attempt),
        ));
    }
    let (_, requeue) = waited(&decide(&o, &cfg()));
    assert_eq!(
        requeue,
        Some(schedule::RETRY_CAP.saturating_sub(Duration::from_secs(396)))
    );
}

#[test]
fn interrupted_blocked_and_plan_changed_jobs_do_not_count_toward_backoff() {
    let mut o = mk_observed();
    o.jobs
        .push(job(Operation::Apply, 2, Some(JobOutcome::Failed), 1000));
    o.jobs
        .push(job(Operation::Apply, 3, Some(JobOutcome::PlanChanged), 50));
    o.jobs
        .push(job(Operation::Apply, 4, Some(JobOutcome::Interrupted), 10));
    // One failure 1000 s ago: its one-minute backoff is long over.
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        (start.reason, start.attempt),
        (StartReason::Apply(ApplyReason::RetryFailedApply), 5)
    );
}

#[test]
fn failed_refresh_backs_off_before_the_next_refresh() {
    let mut o = mk_machine();
    o.health = HealthReading::Pending;
    o.pending_refreshes = 1;
    o.last.refresh = Some(ago(200));
    o.jobs
        .push(job(Operation::Refresh, 2, Some(JobOutcome::Failed), 5));
    let (reason, requeue) = match decide(&o, &cfg()) {
        Decision::Nothing { requeue_after } => ((), requeue_after),
        other => panic!("{other:?}"),
    };
    let () = reason;
    assert_eq!(requeue, Some(Duration::from_secs(55)));
}

// Attempts.

#[test]
fn attempt_is_one_more_than_the_highest_retained_attempt() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    o.jobs = vec![
        job(Operation::Apply, 4, Some(JobOutcome::Succeeded), 900),
        job(Operation::Drift, 9, Some(JobOutcome::Succeeded), 800),
    ];
    assert_eq!(started(&decide(&o, &cfg())).attempt, 5);
}

// The schedule.

#[test]
fn machine_refreshes_once_after_an_apply_without_a_definite_reading() {
    let mut o = mk_machine();
    o.last.apply_health_definite = false;
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(start.reason, StartReason::Refresh(RefreshReason::PostApply));
    assert_eq!(start.tick.as_deref(), Some("0"));
    o.last.refresh = Some(ago(100));
    assert!(matches!(decide(&o, &cfg()), Decision::Nothing { .. }));
}

#[test]
fn cluster_takes_no_post_apply_refresh() {
    let mut o = mk_observed();
    o.last.apply_health_definite = false;
    assert!(matches!(decide(&o, &cfg()), Decision::Nothing { .. }));
}

#[test]
fn pending_health_refresh_backs_off_to_five_minutes() {
    let mut o = mk_observed();
    o.health = HealthReading::Pending;
    o.pending_refreshes = 9;
    o.last.refresh = Some(ago(290));
    let after = requeue_after(&o);
    assert_eq!(
        after,
        schedule::jittered(&o.uid, Duration::from_secs(300))
            .saturating_sub(Duration::from_secs(290))
    );
    o.last.refresh = Some(ago(331));
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        start.reason,
        StartReason::Refresh(RefreshReason::HealthPending)
    );
    assert_eq!(start.tick, Some((NOW_SECS - 331).to_string()));
}

/// A pool refreshes its membership at the interval Observe gives it (30 s while unconverged),
/// counted from its last apply or refresh; the other kinds have none.
#[test]
fn a_pool_refreshes_its_membership_on_its_interval() {
    let mut o = Observed {
        kind: ObjectKind::MachinePool,
        membership_refresh: Some(Duration::from_secs(30)),
        ..mk_observed()
    };
    o.last.refresh = Some(ago(20));
    let after = requeue_after(&o);
    assert!(after <= Duration::from_secs(14), "{after:?}");
    o.last.refresh = Some(ago(40));
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        (start.operation, start.reason),
        (
            Operation::Refresh,
            StartReason::Refresh(RefreshReason::Membership)
        )
    );
    o.membership_refresh = Some(Duration::from_secs(60));
    assert!(matches!(decide(&o, &cfg()), Decision::Nothing { .. }));
}

#[test]
fn drift_check_is_due_one_interval_after_the_last_apply() {
    let mut o = mk_observed();
    o.last.apply = Some(ago(1800));
    assert!(matches!(
        decide(&o, &cfg()),
        Decision::Nothing {
            requeue_after: Some(_)
        }
    ));
    o.last.apply = Some(ago(1800 + 181));
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        (start.operation, start.reason),
        (Operation::Drift, StartReason::DriftCheck)
    );
    assert_eq!(start.attempt, 1);
}

#[test]
fn drift_interval_zero_turns_drift_off() {
    let mut o = mk_observed();
    o.drift.interval = Some(Duration::ZERO);
    o.last.apply = Some(ago(86_400));
    assert_eq!(
        decide(&o, &cfg()),
        Decision::Nothing {
            requeue_after: None
        }
    );
}

#[test]
fn nothing_due_requeues_at_the_soonest() {
    let mut o = mk_machine();
    o.health = HealthReading::Pending;
    o.pending_refreshes = 9;
    o.last.refresh = Some(ago(100));
    let after = requeue_after(&o);
    assert_eq!(
        after,
        schedule::jittered(&o.uid, Duration::from_secs(300))
            .saturating_sub(Duration::from_secs(100))
    );
}

// Leases and the cluster operation gate.

#[test]
fn run_lease_held_by_another_job_waits() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    o.leases.run_lease_holder = Some("captf-c-x-apply-a2-000000".into());
    let d = decide(&o, &cfg());
    let (reason, _) = waited(&d);
    assert_eq!(
        reason.documented_reason(),
        Some(reasons::WAITING_FOR_RUN_LEASE)
    );
}

/// A run lease held for the very Job this pass would create (taken by an earlier pass that
/// waited, or crashed before creating it) is the object's own: the Job starts.
#[test]
fn run_lease_held_for_the_job_to_start_is_its_own() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    let own = contract::names::job_name(&contract::names::JobNameParts {
        kind: ObjectKind::Cluster,
        name: "x",
        operation: Operation::Apply,
        attempt: 2,
        inputs_hash: "h2",
        tick: None,
    });
    o.leases.run_lease_holder = Some(own.clone());
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!((start.operation, start.attempt), (Operation::Apply, 2));
}

#[test]
fn cluster_operation_waits_for_machine_operations() {
    let mut o = Observed {
        inputs: Inputs::Built { hash: "h2".into() },
        ..mk_observed()
    };
    o.leases.machines_operating = 1;
    let d = decide(&o, &cfg());
    assert_eq!(
        waited(&d).0.documented_reason(),
        Some(reasons::WAITING_FOR_MACHINE_OPERATIONS)
    );
    // The wait names the Job the cluster holds both leases for, and the next pass, finding its
    // own run lease taken for that Job, still waits for the machines, not for itself.
    let WaitReason::MachineOperations { job, .. } = waited(&d).0.clone() else {
        panic!("a machine-operations wait");
    };
    o.leases.run_lease_holder = Some(job.clone());
    assert_eq!(
        waited(&decide(&o, &cfg())).0,
        &WaitReason::MachineOperations {
            operation: Operation::Apply,
            job
        }
    );
    let off = Config {
        cluster_operation_gate: false,
        ..cfg()
    };
    assert_eq!(started(&decide(&o, &off)).operation, Operation::Apply);
}

#[test]
fn machine_apply_waits_for_the_cluster_operation_but_refresh_does_not() {
    let mut o = Observed {
        state: StateRead::None,
        inputs: Inputs::Built { hash: "m1".into() },
        ..mk_machine()
    };
    o.leases.cluster = ClusterLease::HeldByCluster;
    assert_eq!(
        waited(&decide(&o, &cfg())).0.documented_reason(),
        Some(reasons::WAITING_FOR_CLUSTER_OPERATION)
    );
    let mut refresh = mk_machine();
    refresh.leases.cluster = ClusterLease::HeldByCluster;
    refresh.last.apply_health_definite = false;
    assert_eq!(
        started(&decide(&refresh, &cfg())).operation,
        Operation::Refresh
    );
}

// Gates and state.

#[test]
fn dependency_gate_blocks_an_apply() {
    let o = Observed {
        state: StateRead::None,
        gates: Gates {
            dependencies: Some(GateBlock {
                condition: "DependenciesReady",
                reason: reasons::WAITING_FOR_BOOTSTRAP_DATA,
            }),
            credentials: None,
        },
        ..mk_observed()
    };
    assert_eq!(
        waited(&decide(&o, &cfg())).0.documented_reason(),
        Some(reasons::WAITING_FOR_BOOTSTRAP_DATA)
    );
}

#[test]
fn waiting_for_dependencies_or_inputs_looks_again_soon() {
    let gated = Observed {
        gates: Gates {
            dependencies: Some(GateBlock {
                condition: "DependenciesReady",
                reason: reasons::WAITING_FOR_BOOTSTRAP_DATA,
            }),
            credentials: None,
        },
        inputs: Inputs::Built { hash: "h0".into() },
        state: StateRead::None,
        ..mk_observed()
    };
    assert_eq!(
        waited(&decide(&gated, &cfg())).1,
        Some(super::schedule_jitter(UID_OF_TESTS, DEPENDENCY_RECHECK))
    );
    let unbuilt = Observed {
        inputs: Inputs::Failed {
            reason: reasons::WAITING_FOR_CLUSTER_EXPORTS,
        },
        state: StateRead::None,
        ..mk_observed()
    };
    assert_eq!(
        waited(&decide(&unbuilt, &cfg())).1,
        Some(super::schedule_jitter(UID_OF_TESTS, DEPENDENCY_RECHECK))
    );
}

#[test]
fn unreadable_or_lost_state_starts_nothing() {
    let locked = Observed {
        state: StateRead::Unreadable {
            reason: reasons::STATE_LOCKED,
        },
        ..mk_observed()
    };
    assert_eq!(
        waited(&decide(&locked, &cfg())).0.documented_reason(),
        Some(reasons::STATE_LOCKED)
    );
    let lost = Observed {
        state: StateRead::Lost,
        ..mk_observed()
    };
    assert_eq!(
        waited(&decide(&lost, &cfg())).0.documented_reason(),
        Some(reasons::STATE_LOST)
    );
}

// Invariants.

fn arb_outcome() -> impl Strategy<Value = Option<JobOutcome>> {
    prop_oneof![
        Just(None),
        Just(Some(JobOutcome::Succeeded)),
        Just(Some(JobOutcome::Failed)),
        Just(Some(JobOutcome::DeadlineExceeded)),
        Just(Some(JobOutcome::Interrupted)),
        Just(Some(JobOutcome::Blocked)),
        Just(Some(JobOutcome::PlanChanged)),
    ]
}

fn arb_op() -> impl Strategy<Value = Operation> {
    proptest::sample::select(Operation::ALL.to_vec())
}

fn arb_time() -> impl Strategy<Value = Option<SystemTime>> {
    proptest::option::of(
        (0u64..400_000).prop_map(|s| now() + Duration::from_secs(100_000) - Duration::from_secs(s)),
    )
}

prop_compose! {
    fn arb_job()(op in arb_op(), attempt in 0u32..20, outcome in arb_outcome(), age in 0u64..100_000,
                 secret in any::<bool>(), pod in any::<bool>(), remediation in any::<bool>(),
                 hash in proptest::sample::select(vec!["h1", "h2"])) -> JobRecord {
        let mut j = job(op, attempt, outcome, age);
        j.run_secret_exists = secret;
        j.pod_ever_started = pod;
        j.drift_remediation = remediation;
        j.inputs_hash = hash.into();
        j
    }
}

prop_compose! {
    fn arb_observed()(kind in proptest::sample::select(vec![ObjectKind::Cluster, ObjectKind::Machine]),
                      flags in proptest::collection::vec(any::<bool>(), 12),
                      jobs in proptest::collection::vec(arb_job(), 0..6),
                      state in 0u8..5, inputs in 0u8..4,
                      interval in proptest::option::of(0u64..200_000),
                      failures in 0u32..6, pending in 0u32..20,
                      apply in arb_time(), refresh in arb_time(), drift_check in arb_time(),
                      dependents in 0u32..3, machines in 0u32..3) -> Observed {
        let mut o = mk_observed();
        o.kind = kind;
        o.mutable = kind != ObjectKind::Machine;
        o.externally_managed = flags[0] && flags[1];
        o.deleting = flags[2];
        o.finalizer = flags[3] || flags[4];
        o.paused = flags[5] && flags[6];
        o.jobs = jobs;
        o.state = match state {
            0 => StateRead::None,
            1 => StateRead::Read { serial: 1, inputs_hash: None },
            2 => StateRead::Unreadable { reason: reasons::STATE_CORRUPT },
            3 => StateRead::Lost,
            _ => StateRead::Read { serial: 2, inputs_hash: Some("h1".into()) },
        };
        o.inputs = match inputs {
            0 => Inputs::NotBuilt,
            1 => Inputs::Failed { reason: reasons::INPUTS_TOO_LARGE },
            2 => Inputs::Built { hash: "h2".into() },
            _ => Inputs::Built { hash: "h1".into() },
        };
        o.drift.interval = interval.map(Duration::from_secs);
        o.drift.found = flags[7];
        o.drift.action = if flags[8] { DriftAction::Remediate } else { DriftAction::Report };
        o.drift.remediation_failures = failures;
        o.health = if flags[9] { HealthReading::Pending } else { HealthReading::Definite };
        o.pending_refreshes = pending;
        o.last = LastTimes { apply, refresh, drift_check, apply_health_definite: flags[10] };
        o.approvals.policy = if flags[11] { ApplyPolicy::Manual } else { ApplyPolicy::Automatic };
        o.dependents = dependents;
        o.leases.machines_operating = machines;
        o
    }
}

proptest! {
    #[test]
    fn decide_never_panics_nor_requeues_beyond_the_longest_interval(o in arb_observed()) {
        let config = cfg();
        let longest = longest_interval(&o, &config);
        match decide(&o, &config) {
            Decision::Wait { requeue_after, .. } | Decision::Nothing { requeue_after } => {
                prop_assert!(requeue_after.is_none_or(|d| d <= longest));
            }
            Decision::StartJob(start) => prop_assert!(start.attempt >= 1),
            _ => {}
        }
    }
}

#[test]
fn credential_gates_block_every_job_even_a_destroy() {
    let o = Observed {
        deleting: true,
        gates: Gates {
            dependencies: None,
            credentials: Some(GateBlock {
                condition: "IdentityAllowed",
                reason: reasons::NAMESPACE_NOT_ALLOWED,
            }),
        },
        ..mk_observed()
    };
    assert_eq!(
        waited(&decide(&o, &cfg())).0.documented_reason(),
        Some(reasons::NAMESPACE_NOT_ALLOWED)
    );
}

#[test]
fn drift_check_waits_for_the_run_lease() {
    let mut o = mk_observed();
    o.last.apply = Some(ago(7200));
    o.leases.run_lease_holder = Some("captf-c-x-apply-a9-000000".into());
    assert_eq!(
        waited(&decide(&o, &cfg())),
        (
            &WaitReason::RunLease {
                operation: Operation::Drift,
                job: "captf-c-x-apply-a9-000000".into()
            },
            Some(super::schedule_jitter(UID_OF_TESTS, LEASE_RECHECK))
        )
    );
}

#[test]
fn requeue_never_exceeds_the_longest_interval_for_future_timestamps() {
    let mut o = mk_observed();
    o.last.apply = Some(now() + Duration::from_secs(86_400));
    let after = requeue_after(&o);
    assert_eq!(after, longest_interval(&o, &cfg()));
}

/// Every fixed recheck carries the object's jitter: a lease, dependency or approval wait of one
/// object does not look again at the same instant as another's.
#[test]
fn fixed_rechecks_have_jitter() {
    let mut gated = mk_observed();
    gated.gates.dependencies = Some(GateBlock {
        condition: api::constants::conditions::DEPENDENCIES_READY,
        reason: reasons::WAITING_FOR_BOOTSTRAP_DATA,
    });
    gated.inputs = Inputs::Built {
        hash: "changed".into(),
    };
    let mut other = gated.clone();
    other.uid = "another-uid-entirely".into();
    let a = waited(&decide(&gated, &cfg())).1.expect("a recheck");
    let b = waited(&decide(&other, &cfg())).1.expect("a recheck");
    assert!(a >= DEPENDENCY_RECHECK && a <= DEPENDENCY_RECHECK + DEPENDENCY_RECHECK / 10);
    assert!(b >= DEPENDENCY_RECHECK && b <= DEPENDENCY_RECHECK + DEPENDENCY_RECHECK / 10);
    assert_ne!(a, b, "two objects recheck at different times");
}

/// A dependency gate blocks only an apply and a plan: a drift check (or refresh) that is due
/// still runs, from the durable inputs, while the current inputs cannot be built.
#[test]
fn a_dependency_gate_blocks_only_apply_and_plan() {
    let mut o = mk_observed();
    o.gates.dependencies = Some(GateBlock {
        condition: api::constants::conditions::DEPENDENCIES_READY,
        reason: reasons::VARIABLES_SOURCE_NOT_FOUND,
    });
    o.inputs = Inputs::Failed {
        reason: reasons::VARIABLES_SOURCE_NOT_FOUND,
    };
    o.last.apply = Some(ago(1800 + 181));
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(start.operation, Operation::Drift);
    assert_eq!(start.inputs_hash, "h1", "the state's (durable) inputs hash");
    // An apply of changed inputs still waits for the gate.
    o.inputs = Inputs::Built { hash: "h2".into() };
    assert!(matches!(waited(&decide(&o, &cfg())).0, WaitReason::Gate(_)));
}

// Terraform State "Restore".

fn ask(serial: u64) -> RestoreAsk {
    RestoreAsk {
        backup: crate::job::RestoreBackup {
            serial,
            chunks: 2,
            resources: 3,
        },
        inputs_hash: Some("h1:backup".to_owned()),
    }
}

#[test]
fn a_restore_beats_an_apply_and_runs_on_a_lost_state() {
    for state in [
        StateRead::Lost,
        StateRead::Unreadable {
            reason: reasons::STATE_CORRUPT,
        },
        StateRead::None,
    ] {
        let o = Observed {
            restore: Some(ask(7)),
            inputs: Inputs::Built {
                hash: "h1:changed".to_owned(),
            },
            state,
            ..mk_observed()
        };
        let d = decide(&o, &cfg());
        let s = started(&d);
        assert_eq!(s.operation, Operation::Restore);
        assert_eq!(s.reason, StartReason::Restore);
        assert_eq!(s.tick.as_deref(), Some("7"));
        // The restored state is adopted with the backup's inputs hash.
        assert_eq!(s.inputs_hash, "h1:backup");
        assert_eq!(s.restore, Some(ask(7).backup));
    }
}

#[test]
fn deletion_pause_and_an_active_job_beat_a_restore() {
    let deleting = Observed {
        restore: Some(ask(7)),
        deleting: true,
        ..mk_observed()
    };
    assert_eq!(
        started(&decide(&deleting, &cfg())).operation,
        Operation::Destroy
    );
    let paused = Observed {
        restore: Some(ask(7)),
        paused: true,
        ..mk_observed()
    };
    assert_eq!(waited(&decide(&paused, &cfg())).0, &WaitReason::Paused);
}

#[test]
fn a_machines_restore_waits_behind_the_clusters_operation() {
    let machine = Observed {
        restore: Some(ask(3)),
        names_cluster: true,
        leases: Leases {
            cluster: ClusterLease::HeldByCluster,
            ..Leases::default()
        },
        ..mk_machine()
    };
    assert_eq!(
        waited(&decide(&machine, &cfg())).0,
        &WaitReason::ClusterOperation {
            operation: Operation::Restore
        }
    );
}

// Machine Remediation: `healthCheckIntervalSeconds`.

#[test]
fn a_machine_with_annotate_machine_refreshes_on_its_health_check_interval() {
    let mut o = mk_machine();
    o.provisioned = true;
    // Drift off: without remediation nothing more is due.
    o.drift.interval = Some(Duration::ZERO);
    o.last.apply = Some(ago(400));
    assert!(matches!(
        decide(&o, &cfg()),
        Decision::Nothing {
            requeue_after: None
        }
    ));
    o.health_check_interval = Some(Duration::from_secs(300));
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        (start.operation, start.reason),
        (
            Operation::Refresh,
            StartReason::Refresh(RefreshReason::HealthCheck)
        )
    );
    // Sampled recently: the next one waits for the interval.
    o.last.refresh = Some(ago(10));
    let after = requeue_after(&o);
    assert_eq!(
        after,
        schedule::jittered(&o.uid, Duration::from_secs(300))
            .saturating_sub(Duration::from_secs(10))
    );
}

/// Issue 29: a deletion deletes an active Job whose module container never started (an image
/// its pod cannot pull) instead of waiting for its deadline; a Job that ran, or a destroy, is
/// waited for.
#[test]
fn a_deletion_deletes_a_job_that_never_started_instead_of_waiting() {
    let mut pulling = job(Operation::Apply, 1, None, 0);
    pulling.module_never_started = true;
    let o = Observed {
        deleting: true,
        jobs: vec![pulling.clone()],
        ..mk_observed()
    };
    assert_eq!(
        decide(&o, &cfg()),
        Decision::DeleteStuckJob {
            job: pulling.name.clone(),
            why: Stuck::Deleting
        }
    );
    let not_deleting = Observed {
        jobs: vec![pulling.clone()],
        ..mk_observed()
    };
    assert!(matches!(
        decide(&not_deleting, &cfg()),
        Decision::Wait {
            reason: WaitReason::JobActive { .. },
            ..
        }
    ));
    let mut destroy = job(Operation::Destroy, 1, None, 0);
    destroy.module_never_started = true;
    let destroying = Observed {
        deleting: true,
        jobs: vec![destroy],
        ..mk_observed()
    };
    assert!(matches!(decide(&destroying, &cfg()), Decision::Wait { .. }));
}

/// On-demand checks: a `captf.io/requested-at` value no Job answered starts the drift check now
/// (a pool's refresh), even with drift turned off; one a Job answers starts nothing; a paused
/// object and an active Job hold it like any scheduled check.
#[test]
fn a_requested_check_runs_now_once_per_value() {
    let request = |answered| {
        Some(CheckRequest {
            value: "2026-12-05T10:00:00Z".into(),
            answered,
        })
    };
    let mut o = mk_observed();
    o.drift.interval = Some(Duration::ZERO);
    o.requested = request(false);
    let d = decide(&o, &cfg());
    let start = started(&d);
    assert_eq!(
        (start.operation, start.reason),
        (Operation::Drift, StartReason::Requested)
    );
    let mut pool = Observed {
        kind: ObjectKind::MachinePool,
        ..o.clone()
    };
    pool.drift.interval = None;
    assert_eq!(
        started(&decide(&pool, &cfg())).operation,
        Operation::Refresh
    );
    o.requested = request(true);
    assert_eq!(
        decide(&o, &cfg()),
        Decision::Nothing {
            requeue_after: None
        }
    );
    o.requested = request(false);
    o.paused = true;
    assert_eq!(waited(&decide(&o, &cfg())).0, &WaitReason::Paused);
    o.paused = false;
    o.jobs.push(job(Operation::Drift, 1, None, 0));
    assert!(matches!(
        waited(&decide(&o, &cfg())).0,
        WaitReason::JobActive { .. }
    ));
}
