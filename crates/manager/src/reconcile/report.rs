//! The Report step of a pass (spec: The Reconcile Lifecycle "One pass, one status patch",
//! "Provisioned and Ready"; INTERFACE-FACTS §1 "Ready summarization", §2 events; ENGINEERING.md
//! §4 "Report"): a pure function from what the pass observed, what it decided and what Act did
//! to the whole new status, conditions included, and the events of its net transitions. The
//! conditions keep their `lastTransitionTime` when their status did not change, and a condition
//! that went True, False and True again inside the pass is no transition and announces nothing
//! (see [`crate::pass::conditions`]). Observe and Act record findings; only Report turns them into
//! conditions. Observe records the rest as plain facts (a finished Job with its result
//! document, the state read, the outputs, the source: [`crate::pass::status::Fact`]); Report folds
//! them over the status the object had into every other field ([`crate::pass::status::fold`], which
//! also clamps what a result document carries to the CRD's bounds). The one status write follows
//! ([`write_status`]).

use api::constants::{annotations, conditions as ctype, events, reasons};
use api::status::ActiveJob;
use contract::health::ConditionStatus;
use contract::names::Operation;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::pass::conditions::{Conditions, Findings, Transition};
use crate::pass::status::StatusFacts;
use crate::pass::{Error, Pass};
use crate::reconcile::act::Acted;
use crate::reconcile::decide::{self, Decision, JobRecord, Observed, WaitReason};
use crate::runtime::context::StatusDraft;
use crate::runtime::events::Outbox;
use crate::runtime::kubeutil::is_conflict;

/// What Report reads besides `Observed` and what Act did: plain data Observe recorded.
#[derive(Debug)]
pub struct Facts<'a> {
    /// What Observe recorded for the status fields (a finished Job's result, the state read,
    /// the outputs, the source), over the status the object had.
    pub status: &'a StatusFacts,
    /// What Observe and Act found, in order.
    pub findings: &'a Findings,
    /// The object's generation.
    pub generation: Option<i64>,
    /// The time of the pass, as the API writes it.
    pub now: Time,
    /// The conditions `Ready` summarises in this phase (the kind's, [`crate::kinds::workload`]).
    pub ready_inputs: &'a [&'a str],
    /// The newest active Job the pass observed.
    pub active: Option<&'a JobRecord>,
    /// The reasons of the events the pass's steps already queued (a condition change one of
    /// them announces gets no `ConditionChanged`).
    pub pass_events: &'a [&'static str],
}

/// The new status and what to announce once it is written.
#[derive(Debug)]
pub struct Reported {
    /// The whole new status.
    pub status: StatusDraft,
    /// The net transitions of the conditions.
    pub transitions: Vec<Transition>,
    /// The events of the net transitions and of the waits that began in this pass.
    pub events: Outbox,
    /// A lease wait that began in this pass, for `captf_lease_waits_total`.
    pub lease_wait: Option<&'static str>,
}

/// The Report step: the whole new status from what the pass observed, decided and did.
pub fn report(observed: &Observed, acted: &Acted, facts: &Facts<'_>) -> Reported {
    let mut conds = Conditions::new(
        Some(facts.findings.before().to_vec()),
        facts.generation,
        facts.now.clone(),
    );
    facts.findings.apply_to(&mut conds);
    let mut events = Outbox::default();
    let mut lease_wait = None;
    if let Decision::Wait { reason, .. } = &acted.decision {
        lease_wait = wait(&mut conds, &mut events, reason, observed.deleting);
    }
    let mut status = crate::pass::status::fold(&facts.status.before, &facts.status.recorded);
    let active_job = match (&acted.started, facts.active) {
        (Some((start, job)), _) => {
            started(&mut conds, start, job, observed.provisioned);
            Some(ActiveJob {
                name: job.clone(),
                operation: start.operation,
                attempt: start.attempt as i32,
                start_time: Some(facts.now.clone()),
            })
        }
        (None, Some(a)) => Some(ActiveJob {
            name: a.name.clone(),
            operation: a.operation,
            attempt: a.attempt as i32,
            start_time: active_start(&facts.status.before, a),
        }),
        (None, None) => None,
    };
    ready(
        &mut conds,
        facts.ready_inputs,
        observed.provisioned,
        observed.deleting,
    );
    let transitions = conds.transitions();
    if transitions
        .iter()
        .any(|t| t.type_ == ctype::DELETING && t.status == "True")
    {
        events.normal(
            events::DELETION_STARTED,
            format!(
                "{} {} is being deleted",
                observed.kind.kind(),
                observed.name
            ),
        );
    }
    let mut pass_events: Vec<&str> = facts.pass_events.to_vec();
    pass_events.extend(events.events().iter().map(|e| e.reason));
    crate::pass::conditions::transition_events(&mut events, &transitions, &pass_events);
    let w = status.workload_mut();
    w.active_job = active_job;
    w.observed_generation = facts.generation;
    w.conditions = Some(conds.into_list());
    if let Some(value) = handled_request(observed, acted) {
        w.last_handled_requested_at = Some(value);
    }
    Reported {
        status,
        transitions,
        events,
        lease_wait,
    }
}

/// When the active Job was created (`status.activeJob.startTime`): as the status already records
/// it for this very Job (the pass that created the Job wrote it), else the Job's creation time.
/// A pass that sees the Job running writes no status only to restate when it began.
fn active_start(before: &StatusDraft, a: &JobRecord) -> Option<Time> {
    let recorded = before.workload().active_job.as_ref();
    recorded
        .filter(|j| j.name == a.name)
        .and_then(|j| j.start_time.clone())
        .or_else(|| {
            (a.created != std::time::SystemTime::UNIX_EPOCH)
                .then(|| crate::pass::status::to_time(a.created))
                .flatten()
        })
        .or_else(|| a.started.and_then(crate::pass::status::to_time))
}

/// On-demand checks: the `captf.io/requested-at` value this pass's status records as handled,
/// once a check was started for it (in this pass, or by an earlier one whose status write did
/// not land).
fn handled_request(observed: &Observed, acted: &Acted) -> Option<String> {
    let request = observed.requested.as_ref()?;
    let started_now = acted
        .started
        .as_ref()
        .is_some_and(|(start, _)| start.reason == decide::StartReason::Requested);
    (request.answered || started_now).then(|| request.value.clone())
}

/// A Job just started: `Provisioning` while the first apply runs, `DriftRemediating` while a
/// remediation apply runs.
fn started(conds: &mut Conditions, start: &decide::StartJob, job: &str, provisioned: bool) {
    if start.operation == Operation::Apply && !provisioned {
        conds.set(
            ctype::INFRASTRUCTURE_HEALTHY,
            ConditionStatus::False,
            reasons::PROVISIONING,
            "The first apply is running",
        );
    }
    // What the passes that see the Job running report (Observe's `active_job`), said by the pass
    // that starts it: the next pass has nothing to write.
    if matches!(start.operation, Operation::Drift | Operation::Refresh) {
        conds.set(
            ctype::DRIFT_JOB_SUCCEEDED,
            ConditionStatus::Unknown,
            reasons::DRIFT_JOB_RUNNING,
            &crate::reconcile::observe::running_message(job),
        );
    }
    if start.drift_remediation() {
        conds.set(
            ctype::DRIFT_DETECTED,
            ConditionStatus::True,
            reasons::DRIFT_REMEDIATING,
            &format!("Remediation apply {job} is running"),
        );
    }
}

/// The gauges of the status a pass reported.
pub fn gauges(p: &Pass<'_>, status: &StatusDraft) {
    let conds = status.workload().conditions.as_deref().unwrap_or_default();
    let of = |t: &str| {
        conds
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.status.as_str())
    };
    let gauge = |s: Option<&str>| match s {
        Some("True") => 1,
        Some("False") => 0,
        _ => -1,
    };
    let (kind, m) = (p.kind_name(), &p.ctx.metrics);
    m.set_ready(kind, &p.ns, &p.name, gauge(of(ctype::READY)));
    m.set_infrastructure_healthy(
        kind,
        &p.ns,
        &p.name,
        gauge(of(ctype::INFRASTRUCTURE_HEALTHY)),
    );
    m.set_drift_detected(
        kind,
        &p.ns,
        &p.name,
        i64::from(of(ctype::DRIFT_DETECTED) == Some("True")),
    );
}

/// `Ready`: the summary of `inputs`; False/Deleting while deleting; False/Provisioning while the
/// first apply runs and nothing else is wrong.
pub fn ready(conds: &mut Conditions, inputs: &[&str], provisioned: bool, deleting: bool) {
    conds.summarize_ready(inputs);
    if deleting {
        conds.set(
            ctype::READY,
            ConditionStatus::False,
            reasons::DELETING,
            "The object is being deleted",
        );
    } else if !provisioned
        && conds.status(ctype::READY) == Some("False")
        && conds.reason(ctype::INFRASTRUCTURE_HEALTHY) == Some(reasons::PROVISIONING)
        && inputs
            .iter()
            .filter(|t| **t != ctype::INFRASTRUCTURE_HEALTHY && **t != ctype::DELETING)
            .all(|t| conds.status(t) != Some("False"))
    {
        conds.set(
            ctype::READY,
            ConditionStatus::False,
            reasons::PROVISIONING,
            "The first apply is running",
        );
    }
}

/// The one status write of the pass: a merge patch from the status the pass started from to the
/// one Report built, carrying the object's resourceVersion; once it landed, the events of the net
/// transitions are queued. `false` when the object changed meanwhile (or is gone): nothing was
/// written.
pub async fn write_status(p: &mut Pass<'_>, reported: Reported) -> Result<bool, Error> {
    let after = reported.status.to_value();
    let Some(patch) = crate::runtime::patch::merge_patch(&p.before, &after) else {
        p.outbox.extend(reported.events);
        return Ok(true);
    };
    let body = serde_json::json!({
        "metadata": {"resourceVersion": p.rv},
        "status": patch,
    });
    match p.target.merge_patch(&p.ctx.client, &body, true).await {
        Ok(Some(meta)) => {
            p.rv = meta.resource_version;
            p.outbox.extend(reported.events);
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The metrics `reason` label of a decision.
pub fn decision_reason(d: &Decision) -> &'static str {
    use decide::{ApplyReason, StartReason};
    match d {
        Decision::AddFinalizer => "finalizer",
        Decision::StartJob(s) => match s.reason {
            StartReason::Destroy => "deleting",
            StartReason::Apply(a) | StartReason::Plan(a) => match a {
                ApplyReason::FirstApply => "first_apply",
                ApplyReason::NoInputsHash => "no_inputs_hash",
                ApplyReason::InputsChanged => "inputs_changed",
                ApplyReason::RetryFailedApply => "retry",
                ApplyReason::DriftRemediation => "drift_remediation",
            },
            StartReason::Refresh(_) => "refresh",
            StartReason::DriftCheck => "drift_interval",
            StartReason::Restore => "restore",
            StartReason::Requested => "requested",
        },
        Decision::DeleteStuckJob { .. } => "stuck_job",
        Decision::DropFinalizer => "drop_finalizer",
        Decision::Wait { .. } => "wait",
        Decision::Nothing { .. } => "nothing_due",
    }
}

/// The condition a wait of `op` reports on.
fn condition_for(op: Operation) -> &'static str {
    match op {
        Operation::Drift | Operation::Refresh => ctype::DRIFT_JOB_SUCCEEDED,
        Operation::Restore => ctype::RESTORE_JOB_SUCCEEDED,
        _ => ctype::APPLY_JOB_SUCCEEDED,
    }
}

/// A lease wait: the operation's condition goes Unknown with `reason`; the event and the metric
/// (returned) only when it was not waiting for that already.
fn lease_wait(
    conds: &mut Conditions,
    out: &mut Outbox,
    op: Operation,
    (reason, event, metric): (&'static str, &'static str, &'static str),
    message: &str,
) -> Option<&'static str> {
    let condition = condition_for(op);
    let began = conds.reason(condition) != Some(reason);
    if began {
        out.normal(event, message.to_owned());
    }
    conds.set(condition, ConditionStatus::Unknown, reason, message);
    began.then_some(metric)
}

/// The conditions a wait reports; the lease wait that began, if one did.
pub fn wait(
    conds: &mut Conditions,
    out: &mut Outbox,
    reason: &WaitReason,
    deleting: bool,
) -> Option<&'static str> {
    match reason {
        WaitReason::RunLease { operation, job } => lease_wait(
            conds,
            out,
            *operation,
            (
                reasons::WAITING_FOR_RUN_LEASE,
                events::WAITING_FOR_RUN_LEASE,
                "run_lease",
            ),
            &format!(
                "The {} waits for Job {job}, which holds the run lease",
                operation.as_str()
            ),
        ),
        WaitReason::ClusterOperation { operation } => lease_wait(
            conds,
            out,
            *operation,
            (
                reasons::WAITING_FOR_CLUSTER_OPERATION,
                events::WAITING_FOR_CLUSTER_OPERATION,
                "cluster_operation",
            ),
            &format!(
                "The {} waits for the cluster's own operation",
                operation.as_str()
            ),
        ),
        WaitReason::MachineOperations { operation, .. } => lease_wait(
            conds,
            out,
            *operation,
            (
                reasons::WAITING_FOR_MACHINE_OPERATIONS,
                events::WAITING_FOR_MACHINE_OPERATIONS,
                "machine_operations",
            ),
            &format!(
                "The {} waits for the cluster's machine operations",
                operation.as_str()
            ),
        ),
        other => {
            wait_conditions(conds, other, deleting);
            None
        }
    }
}

/// The conditions the waits other than lease waits report.
pub fn wait_conditions(conds: &mut Conditions, reason: &WaitReason, deleting: bool) {
    match reason {
        WaitReason::PlanAwaitingApproval
            if !matches!(
                conds.reason(ctype::APPLY_JOB_SUCCEEDED),
                Some(reasons::PLAN_CHANGED | reasons::PLAN_AWAITING_APPROVAL)
            ) =>
        {
            conds.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::Unknown,
                reasons::PLAN_AWAITING_APPROVAL,
                &format!(
                    "The plan in status.plan waits for the {} annotation naming its planHash",
                    annotations::APPROVE_PLAN
                ),
            );
        }
        // Revoke access: a deletion waits for the identity, and says so where the destroy's
        // outcome is reported.
        WaitReason::Gate(g) if g.condition == ctype::IDENTITY_ALLOWED && deleting => conds.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::False,
            reasons::IDENTITY_NOT_ALLOWED,
            "The destroy waits: the identity does not allow this namespace; allow it again in \
             the identity's spec.allowedNamespaces to let the destroy run",
        ),
        WaitReason::Gate(g)
            if g.condition == ctype::IDENTITY_ALLOWED
                && matches!(
                    conds.reason(ctype::APPLY_JOB_SUCCEEDED),
                    None | Some(reasons::NO_APPLY_YET)
                ) =>
        {
            conds.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::False,
                reasons::IDENTITY_NOT_ALLOWED,
                "No Job is created: the identity does not allow this object",
            );
        }
        // A deleting object with nothing to destroy from: it says so.
        WaitReason::InputsUnavailable { reason: None } if deleting => conds.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::False,
            reasons::DESTROY_FAILED,
            "The durable inputs Secret is missing: destroy has nothing to run against",
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    use api::cluster::TerraformClusterStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use crate::reconcile::decide::{StartJob, StartReason};

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    /// A provisioned TerraformCluster's observation.
    fn observed() -> Observed {
        Observed::provisioned_cluster(
            "c",
            "uid",
            SystemTime::UNIX_EPOCH + Duration::from_secs(2_000),
        )
    }

    fn condition(type_: &str, status: &str, reason: &str, since: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: at(since),
            observed_generation: Some(1),
        }
    }

    fn acted(decision: Decision) -> Acted {
        Acted {
            decision,
            started: None,
            requeue: None,
            stop_after_patch: false,
            taken_backup: None,
        }
    }

    fn nothing() -> Acted {
        acted(Decision::Nothing {
            requeue_after: None,
        })
    }

    /// Report over `before` (the conditions the object had) and `findings` built by `find`.
    fn run(
        o: &Observed,
        a: &Acted,
        before: Vec<Condition>,
        find: impl FnOnce(&mut Findings),
    ) -> Reported {
        let mut status = TerraformClusterStatus::default();
        status.workload.conditions = Some(before.clone());
        let status = StatusFacts::new(StatusDraft::Cluster(status));
        let mut findings = Findings::new(Some(before));
        find(&mut findings);
        let inputs = if o.provisioned {
            ctype::READY_INPUTS_PROVISIONED
        } else {
            ctype::READY_INPUTS_BEFORE_PROVISIONED
        };
        report(
            o,
            a,
            &Facts {
                status: &status,
                findings: &findings,
                generation: Some(2),
                now: at(2_000),
                ready_inputs: inputs,
                active: None,
                pass_events: &[],
            },
        )
    }

    fn get<'a>(r: &'a Reported, type_: &str) -> &'a Condition {
        r.status
            .workload()
            .conditions
            .as_ref()
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
            .unwrap_or_else(|| panic!("no {type_}"))
    }

    fn healthy() -> Vec<Condition> {
        vec![
            condition(
                ctype::INFRASTRUCTURE_HEALTHY,
                "True",
                "InstanceHealthy",
                100,
            ),
            condition(ctype::DELETING, "False", reasons::NOT_DELETING, 100),
            condition(ctype::READY, "True", reasons::READY, 100),
        ]
    }

    /// A condition whose status did not change keeps its `lastTransitionTime`, even when its
    /// reason or message did; one whose status changed takes the pass's time.
    #[test]
    fn a_condition_keeps_its_transition_time_unless_its_status_changed() {
        let before = vec![condition(ctype::STATE_READABLE, "True", "StateRead", 100)];
        let r = run(&observed(), &nothing(), before.clone(), |f| {
            f.set(
                ctype::STATE_READABLE,
                ConditionStatus::True,
                "StateRead",
                "serial 9",
            );
        });
        assert_eq!(get(&r, ctype::STATE_READABLE).last_transition_time, at(100));
        let r = run(&observed(), &nothing(), before, |f| {
            f.set(
                ctype::STATE_READABLE,
                ConditionStatus::False,
                reasons::STATE_LOST,
                "",
            );
        });
        assert_eq!(
            get(&r, ctype::STATE_READABLE).last_transition_time,
            at(2_000)
        );
        assert_eq!(get(&r, ctype::STATE_READABLE).observed_generation, Some(2));
    }

    /// Only net transitions count: a condition found True, then False, then True again inside
    /// one pass is no transition and announces nothing.
    #[test]
    fn a_condition_that_flips_and_flips_back_in_one_pass_announces_nothing() {
        let r = run(&observed(), &nothing(), healthy(), |f| {
            for status in [ConditionStatus::False, ConditionStatus::True] {
                f.set(ctype::INFRASTRUCTURE_HEALTHY, status, "InstanceHealthy", "");
            }
        });
        assert!(r.transitions.is_empty(), "{:?}", r.transitions);
        assert!(r.events.events().is_empty(), "{:?}", r.events.events());
        assert_eq!(
            get(&r, ctype::INFRASTRUCTURE_HEALTHY).last_transition_time,
            at(100)
        );
    }

    /// Finding 7: a held foreign lock does not flip `StateReadable` inside a pass. Observe reads
    /// the state (`True/StateRead`), Act finds the lock held by someone else (`False/StateLocked`):
    /// on an object already reporting the lock, that is no transition, no event, and the
    /// condition keeps its `lastTransitionTime` (so no status write every 30 s).
    #[test]
    fn a_held_foreign_lock_does_not_flip_state_readable_inside_a_pass() {
        let mut before = healthy();
        before.push(condition(
            ctype::STATE_READABLE,
            "False",
            reasons::STATE_LOCKED,
            100,
        ));
        let r = run(&observed(), &nothing(), before, |f| {
            f.set(
                ctype::STATE_READABLE,
                ConditionStatus::True,
                reasons::STATE_READ,
                "State serial 4 read",
            );
            f.set(
                ctype::STATE_READABLE,
                ConditionStatus::False,
                reasons::STATE_LOCKED,
                "The state lock is held by someone@elsewhere",
            );
        });
        assert!(r.transitions.is_empty(), "{:?}", r.transitions);
        assert!(r.events.events().is_empty(), "{:?}", r.events.events());
        let c = get(&r, ctype::STATE_READABLE);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", reasons::STATE_LOCKED)
        );
        assert_eq!(c.last_transition_time, at(100));
    }

    /// A transition is announced once, with the event its condition documents.
    #[test]
    fn a_net_transition_is_announced() {
        let r = run(&observed(), &nothing(), healthy(), |f| {
            f.set(
                ctype::INFRASTRUCTURE_HEALTHY,
                ConditionStatus::False,
                reasons::INSTANCE_UNHEALTHY,
                "",
            );
        });
        let reasons_: Vec<&str> = r.events.events().iter().map(|e| e.reason).collect();
        assert_eq!(reasons_, [events::INSTANCE_UNHEALTHY]);
        assert_eq!(get(&r, ctype::READY).status, "False");
    }

    /// `DeletionStarted` is announced when `Deleting` turns True, not at every pass after.
    #[test]
    fn deletion_started_is_announced_when_deleting_turns_true() {
        let o = Observed {
            deleting: true,
            ..observed()
        };
        let deleting = |f: &mut Findings| {
            f.set(
                ctype::DELETING,
                ConditionStatus::True,
                reasons::DELETING,
                "",
            );
        };
        let r = run(&o, &nothing(), healthy(), deleting);
        assert!(
            r.events
                .events()
                .iter()
                .any(|e| e.reason == events::DELETION_STARTED)
        );
        let mut before = healthy();
        before[1] = condition(ctype::DELETING, "True", reasons::DELETING, 100);
        let r = run(&o, &nothing(), before, deleting);
        assert!(
            !r.events
                .events()
                .iter()
                .any(|e| e.reason == events::DELETION_STARTED)
        );
        assert_eq!(get(&r, ctype::READY).reason, reasons::DELETING);
    }

    /// A lease wait reports `Unknown` with its reason on the operation's condition; the event and
    /// the metric only when the wait begins, not at each recheck.
    #[test]
    fn a_lease_wait_is_announced_when_it_begins() {
        let wait = acted(Decision::Wait {
            reason: WaitReason::RunLease {
                operation: Operation::Apply,
                job: "captf-c-c-apply-a2-000000".into(),
            },
            requeue_after: None,
        });
        let r = run(&observed(), &wait, healthy(), |_| {});
        assert_eq!(r.lease_wait, Some("run_lease"));
        assert_eq!(
            get(&r, ctype::APPLY_JOB_SUCCEEDED).reason,
            reasons::WAITING_FOR_RUN_LEASE
        );
        let mut before = healthy();
        before.push(condition(
            ctype::APPLY_JOB_SUCCEEDED,
            "Unknown",
            reasons::WAITING_FOR_RUN_LEASE,
            100,
        ));
        let r = run(&observed(), &wait, before, |_| {});
        assert_eq!(r.lease_wait, None);
        assert!(
            !r.events
                .events()
                .iter()
                .any(|e| e.reason == events::WAITING_FOR_RUN_LEASE)
        );
    }

    /// A first apply just started: `status.activeJob` names it, `InfrastructureHealthy` and
    /// `Ready` read `False/Provisioning`.
    /// On-demand checks: `status.lastHandledRequestedAt` takes the value once a check started
    /// for it (in this pass, or by an earlier pass a Job of which carries it), never before.
    #[test]
    fn a_request_is_recorded_once_its_check_started() {
        let request = |answered| {
            Some(decide::CheckRequest {
                value: "7".into(),
                answered,
            })
        };
        let o = Observed {
            requested: request(false),
            ..observed()
        };
        let handled = |o: &Observed, a: &Acted| {
            run(o, a, Vec::new(), |_| {})
                .status
                .workload()
                .last_handled_requested_at
                .clone()
        };
        assert_eq!(handled(&o, &nothing()), None);
        let start = StartJob {
            operation: Operation::Drift,
            reason: StartReason::Requested,
            attempt: 1,
            tick: None,
            inputs_hash: "h".into(),
            restore: None,
        };
        let a = Acted {
            started: Some((start.clone(), "captf-c-c-drift-a1-abcdef".into())),
            ..acted(Decision::StartJob(start))
        };
        assert_eq!(handled(&o, &a).as_deref(), Some("7"));
        let answered = Observed {
            requested: request(true),
            ..observed()
        };
        assert_eq!(handled(&answered, &nothing()).as_deref(), Some("7"));
    }

    /// The pass that starts a drift check reports it running, as every later pass that sees it
    /// running does: the pass after it writes no status.
    #[test]
    fn a_started_drift_check_reports_it_running() {
        let start = StartJob {
            operation: Operation::Drift,
            reason: StartReason::DriftCheck,
            attempt: 1,
            tick: Some("t".into()),
            inputs_hash: "h".into(),
            restore: None,
        };
        let job = "captf-c-c-drift-a1-abcdef";
        let a = Acted {
            started: Some((start.clone(), job.into())),
            ..acted(Decision::StartJob(start))
        };
        let r = run(&observed(), &a, healthy(), |_| {});
        let c = get(&r, ctype::DRIFT_JOB_SUCCEEDED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.clone()),
            (
                "Unknown",
                reasons::DRIFT_JOB_RUNNING,
                crate::reconcile::observe::running_message(job)
            )
        );
    }

    #[test]
    fn a_started_first_apply_reports_provisioning_and_the_active_job() {
        let o = Observed {
            provisioned: false,
            ..observed()
        };
        let start = StartJob {
            operation: Operation::Apply,
            reason: StartReason::Apply(decide::ApplyReason::FirstApply),
            attempt: 1,
            tick: None,
            inputs_hash: "h".into(),
            restore: None,
        };
        let a = Acted {
            started: Some((start.clone(), "captf-c-c-apply-a1-abcdef".into())),
            ..acted(Decision::StartJob(start))
        };
        let r = run(&o, &a, Vec::new(), |f| {
            for t in ctype::READY_INPUTS_BEFORE_PROVISIONED {
                f.set(t, ConditionStatus::True, "Fine", "");
            }
            f.set(ctype::DELETING, ConditionStatus::False, "NotDeleting", "");
        });
        let active = r.status.workload().active_job.clone().unwrap();
        assert_eq!(active.name, "captf-c-c-apply-a1-abcdef");
        assert_eq!(active.start_time, Some(at(2_000)));
        assert_eq!(
            get(&r, ctype::INFRASTRUCTURE_HEALTHY).reason,
            reasons::PROVISIONING
        );
        assert_eq!(get(&r, ctype::READY).reason, reasons::PROVISIONING);
    }

    /// A running Job's `activeJob.startTime` is what the pass that created it recorded: a later
    /// pass does not restate it from the Job (whose `status.startTime` the Job controller sets a
    /// moment later); a Job the status does not show yet gets its creation time.
    #[test]
    fn a_running_jobs_start_time_is_kept_as_recorded() {
        let record = decide::JobRecord {
            name: "captf-c-c-apply-a1-abcdef".into(),
            operation: Operation::Apply,
            attempt: 1,
            tick: None,
            inputs_hash: "h".into(),
            created: SystemTime::UNIX_EPOCH + Duration::from_secs(1_001),
            started: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_003)),
            finished: None,
            outcome: None,
            drift_remediation: false,
            requested: None,
            run_secret_exists: true,
            pod_ever_started: false,
            module_never_started: false,
            pull_failure: None,
        };
        let start = |recorded: Option<ActiveJob>| {
            let mut before = TerraformClusterStatus::default();
            before.workload.conditions = Some(healthy());
            before.workload.active_job = recorded;
            let facts = StatusFacts::new(StatusDraft::Cluster(before));
            let findings = Findings::new(Some(healthy()));
            let r = report(
                &observed(),
                &acted(Decision::Wait {
                    reason: decide::WaitReason::JobActive {
                        job: record.name.clone(),
                    },
                    requeue_after: None,
                }),
                &Facts {
                    status: &facts,
                    findings: &findings,
                    generation: Some(2),
                    now: at(2_000),
                    ready_inputs: ctype::READY_INPUTS_PROVISIONED,
                    active: Some(&record),
                    pass_events: &[],
                },
            );
            r.status.workload().active_job.clone().unwrap().start_time
        };
        let recorded = ActiveJob {
            name: record.name.clone(),
            operation: Operation::Apply,
            attempt: 1,
            start_time: Some(at(1_000)),
        };
        assert_eq!(start(Some(recorded.clone())), Some(at(1_000)));
        let other = ActiveJob {
            name: "captf-c-c-apply-a0-000000".into(),
            ..recorded
        };
        assert_eq!(start(Some(other)), Some(at(1_001)));
        assert_eq!(start(None), Some(at(1_001)));
    }

    /// The whole status is Report's: the fields Observe recorded as facts (a finished Job's
    /// result, the state read, the latch, the source) are folded over the status the object had,
    /// with the conditions, `activeJob` and `observedGeneration` Report computes.
    #[test]
    fn the_recorded_facts_make_the_reported_status() {
        use crate::pass::status::{Fact, FinishedRun};
        let mut before = TerraformClusterStatus::default();
        before.workload.observed_state_serial = Some(3);
        before.workload.conditions = Some(healthy());
        let mut facts = StatusFacts::new(StatusDraft::Cluster(before));
        let record = decide::JobRecord {
            name: "captf-c-c-refresh-a1-abcdef".into(),
            operation: Operation::Refresh,
            attempt: 1,
            tick: None,
            inputs_hash: "h".into(),
            created: SystemTime::UNIX_EPOCH,
            started: None,
            finished: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_900)),
            outcome: Some(decide::JobOutcome::Succeeded),
            drift_remediation: false,
            requested: None,
            run_secret_exists: false,
            pod_ever_started: true,
            module_never_started: false,
            pull_failure: None,
        };
        facts.record(Fact::Finished(Box::new(FinishedRun {
            record,
            outcome: decide::JobOutcome::Succeeded,
            result: None,
            start_time: Some(at(1_800)),
            completion_time: Some(at(1_900)),
        })));
        facts.record(Fact::StateSerial(5));
        facts.record(Fact::StateSuffix("ns-c-c".into()));
        let findings = Findings::new(Some(healthy()));
        let r = report(
            &observed(),
            &nothing(),
            &Facts {
                status: &facts,
                findings: &findings,
                generation: Some(2),
                now: at(2_000),
                ready_inputs: ctype::READY_INPUTS_PROVISIONED,
                active: None,
                pass_events: &[],
            },
        );
        let w = r.status.workload();
        let run = w.last_run.as_ref().unwrap();
        assert_eq!(run.job, "captf-c-c-refresh-a1-abcdef");
        assert_eq!(run.completion_time, Some(at(1_900)));
        assert!(run.error.is_none());
        assert_eq!(w.last_refresh, Some(at(1_900)));
        assert_eq!(w.observed_state_serial, Some(5));
        assert_eq!(w.state_secret_suffix.as_deref(), Some("ns-c-c"));
        assert_eq!(w.observed_generation, Some(2));
        assert_eq!(get(&r, ctype::READY).status, "True");
        // The facts are folded over the status the object had; nothing else changed it.
        assert_eq!(facts.status().workload().last_run, w.last_run);
    }

    /// Once provisioned, `Ready` summarises only `InfrastructureHealthy` and `Deleting`: a failed
    /// re-apply does not make the object un-Ready.
    #[test]
    fn a_provisioned_object_stays_ready_through_a_failed_apply() {
        let r = run(&observed(), &nothing(), healthy(), |f| {
            f.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::False,
                "ApplyFailed",
                "",
            );
        });
        assert_eq!(get(&r, ctype::READY).status, "True");
        assert!(r.status.workload().active_job.is_none());
    }

    /// A deleting object (a provisioned TerraformMachine, say) whose durable inputs Secret is gone
    /// reports `ApplyJobSucceeded=False/DestroyFailed` instead of waiting silently.
    #[test]
    fn a_deleting_object_without_durable_inputs_says_destroy_failed() {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let mut conds = Conditions::new(None, None, now);
        let waiting = WaitReason::InputsUnavailable { reason: None };
        wait_conditions(&mut conds, &waiting, false);
        assert_eq!(conds.get(ctype::APPLY_JOB_SUCCEEDED), None);
        wait_conditions(&mut conds, &waiting, true);
        assert_eq!(conds.status(ctype::APPLY_JOB_SUCCEEDED), Some("False"));
        assert_eq!(
            conds.reason(ctype::APPLY_JOB_SUCCEEDED),
            Some(reasons::DESTROY_FAILED)
        );
    }

    /// Revoke access: a provisioned object deleted while its identity does not allow the
    /// namespace says that its destroy waits for the identity; the same wait before deletion
    /// leaves the last apply's outcome alone.
    #[test]
    fn a_deletion_held_by_the_identity_says_the_destroy_waits() {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let mut conds = Conditions::new(None, None, now);
        conds.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::True,
            reasons::APPLY_SUCCEEDED,
            "",
        );
        let waiting = WaitReason::Gate(crate::pass::observed::GateBlock {
            condition: ctype::IDENTITY_ALLOWED,
            reason: reasons::NAMESPACE_NOT_ALLOWED,
        });
        wait_conditions(&mut conds, &waiting, false);
        assert_eq!(
            conds.reason(ctype::APPLY_JOB_SUCCEEDED),
            Some(reasons::APPLY_SUCCEEDED)
        );
        wait_conditions(&mut conds, &waiting, true);
        assert_eq!(conds.status(ctype::APPLY_JOB_SUCCEEDED), Some("False"));
        assert_eq!(
            conds.reason(ctype::APPLY_JOB_SUCCEEDED),
            Some(reasons::IDENTITY_NOT_ALLOWED)
        );
        let message = &conds.get(ctype::APPLY_JOB_SUCCEEDED).unwrap().message;
        assert!(message.contains("destroy waits"), "{message}");
    }

    #[test]
    fn ready_is_deleting_while_deleting() {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let mut conds = Conditions::new(None, None, now);
        ready(&mut conds, ctype::READY_INPUTS_PROVISIONED, true, true);
        assert_eq!(conds.reason(ctype::READY), Some(reasons::DELETING));
    }
}
