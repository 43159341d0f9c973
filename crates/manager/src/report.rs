//! The Report step of a pass (spec: The Reconcile Lifecycle "One pass, one status patch";
//! INTERFACE-FACTS §1 "Ready summarization", §2 events; ENGINEERING.md §4 "Report"): the
//! conditions a wait reports, `Ready` summarised from the kind's inputs, the gauges, and the one
//! status write. The conditions keep their `lastTransitionTime` when their status did not change,
//! and only the net transitions of the pass become events (see [`crate::conditions`]).

use api::constants::{annotations, conditions as ctype, events, reasons};
use contract::health::ConditionStatus;
use contract::names::Operation;

use crate::conditions::Conditions;
use crate::decide::{self, Decision, WaitReason};
use crate::kubeutil::is_conflict;
use crate::observe::Observation;
use crate::reconcile::{Error, Pass};
use crate::workload;

/// `Ready` and the gauges, from what the pass observed and did.
pub fn report(p: &mut Pass<'_>, o: &Observation, _acted: &crate::act::Acted) {
    let provisioned = p.draft.provisioned();
    let inputs = workload::ready_inputs(p.target, provisioned);
    ready(&mut p.conds, inputs, provisioned, p.target.deleting());
    let kind = p.kind_name();
    let m = &p.ctx.metrics;
    let gauge = |s: Option<&str>| match s {
        Some("True") => 1,
        Some("False") => 0,
        _ => -1,
    };
    m.set_ready(kind, &p.ns, &p.name, gauge(p.conds.status(ctype::READY)));
    m.set_infrastructure_healthy(
        kind,
        &p.ns,
        &p.name,
        gauge(p.conds.status(ctype::INFRASTRUCTURE_HEALTHY)),
    );
    m.set_drift_detected(
        kind,
        &p.ns,
        &p.name,
        i64::from(p.conds.status(ctype::DRIFT_DETECTED) == Some("True")),
    );
    for (op, n) in &o.active_counts {
        m.set_jobs_active(kind, op, *n);
    }
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
/// one it built, carrying the object's resourceVersion; once it landed, the events of the net
/// transitions are queued. `false` when the object changed meanwhile (or is gone): nothing was
/// written.
pub async fn write_status(p: &mut Pass<'_>) -> Result<bool, Error> {
    let transitions = p.conds.transitions();
    let generation = p.target.meta().generation;
    let conds = std::mem::replace(
        &mut p.conds,
        Conditions::new(
            None,
            generation,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(p.now_ts),
        ),
    );
    let w = p.draft.workload_mut();
    w.observed_generation = generation;
    w.conditions = Some(conds.into_list());
    let after = p.draft.to_value();
    let Some(patch) = crate::patch::merge_patch(&p.before, &after) else {
        p.outbox.for_transitions(&transitions);
        return Ok(true);
    };
    let body = serde_json::json!({
        "metadata": {"resourceVersion": p.rv},
        "status": patch,
    });
    match p.target.merge_patch(&p.ctx.client, &body, true).await {
        Ok(Some(rv)) => {
            p.rv = Some(rv);
            p.outbox.for_transitions(&transitions);
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
            StartReason::Restore => "restore",
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
/// only when it was not waiting for that already.
fn lease_wait(
    p: &mut Pass<'_>,
    op: Operation,
    reason: &'static str,
    event: &'static str,
    metric: &str,
    message: &str,
) {
    let condition = condition_for(op);
    if p.conds.reason(condition) != Some(reason) {
        p.ctx.metrics.lease_wait(p.kind_name(), metric);
        p.outbox.normal(event, message.to_owned());
    }
    p.conds
        .set(condition, ConditionStatus::Unknown, reason, message);
}

/// Sets the conditions a wait reports, and counts lease waits.
pub fn wait(p: &mut Pass<'_>, reason: &WaitReason) {
    let deleting = p.target.deleting();
    match reason {
        WaitReason::RunLease { operation, job } => lease_wait(
            p,
            *operation,
            reasons::WAITING_FOR_RUN_LEASE,
            events::WAITING_FOR_RUN_LEASE,
            "run_lease",
            &format!(
                "The {} waits for Job {job}, which holds the run lease",
                operation.as_str()
            ),
        ),
        WaitReason::ClusterOperation { operation } => lease_wait(
            p,
            *operation,
            reasons::WAITING_FOR_CLUSTER_OPERATION,
            events::WAITING_FOR_CLUSTER_OPERATION,
            "cluster_operation",
            &format!(
                "The {} waits for the cluster's own operation",
                operation.as_str()
            ),
        ),
        WaitReason::MachineOperations { operation } => lease_wait(
            p,
            *operation,
            reasons::WAITING_FOR_MACHINE_OPERATIONS,
            events::WAITING_FOR_MACHINE_OPERATIONS,
            "machine_operations",
            &format!(
                "The {} waits for the cluster's machine operations",
                operation.as_str()
            ),
        ),
        other => wait_conditions(&mut p.conds, other, deleting),
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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

    #[test]
    fn ready_is_deleting_while_deleting() {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let mut conds = Conditions::new(None, None, now);
        ready(&mut conds, ctype::READY_INPUTS_PROVISIONED, true, true);
        assert_eq!(conds.reason(ctype::READY), Some(reasons::DELETING));
    }
}
