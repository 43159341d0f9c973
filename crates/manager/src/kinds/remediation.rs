//! Machine Remediation (spec: Machine Remediation; Drift and Health "Unhealthy samples"): a
//! TerraformMachine counts its consecutive unhealthy health samples in `status.unhealthySamples`
//! and, with `spec.remediation.annotateMachine`, asks Cluster API to replace its instance by
//! annotating the owning Machine with `cluster.x-k8s.io/remediate-machine` (marked as CAPTF's own
//! by `captf.io/remediation-requested`, whose value says why) once the count reaches
//! `unhealthyThreshold`, or at once for a terminated instance. Both annotations are withdrawn
//! when the instance reads Healthy again and the Machine is not being deleted; a
//! `remediate-machine` set by someone else is never touched.

use api::capi::Machine;
use api::constants::{annotations, conditions as ctype, events, reasons};
use contract::health::{HealthCondition, HealthReason, refresh_failed_because_gone};
use contract::names::Operation;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::kinds::inputs::Owner;
use crate::pass::Pass;
use crate::pass::observed::Books;
use crate::pass::observed::JobOutcome;
use crate::pass::observed::OwnerCheck;
use crate::pass::status::Fact;
use crate::runtime::context::Target;
use crate::runtime::events::Outbox;
use crate::runtime::metrics::Metrics;

/// The next `status.unhealthySamples` after one sample whose `InfrastructureHealthy` reason is
/// `reason`: Healthy resets it, unhealthy, degraded or stopped adds one, anything else (pending,
/// unknown, terminated) leaves it.
pub fn next_count(before: i32, reason: Option<&str>) -> i32 {
    match reason
        .and_then(HealthReason::parse)
        .and_then(HealthReason::counts_as_unhealthy_sample)
    {
        Some(false) => 0,
        Some(true) => before.saturating_add(1),
        None => before,
    }
}

/// What to do with the owning Machine's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineAction {
    /// Nothing.
    None,
    /// Ask for remediation, saying why.
    Request(String),
    /// Withdraw CAPTF's own request.
    Withdraw,
}

/// The remediation step's choice: `annotate` is `spec.remediation.annotateMachine`, `threshold`
/// its `unhealthyThreshold`, `samples` the count after this pass, `reason` the health reason,
/// `ours` whether the Machine carries `captf.io/remediation-requested`, `requested` whether it
/// carries `cluster.x-k8s.io/remediate-machine` at all.
pub fn choose(
    annotate: bool,
    threshold: i32,
    samples: i32,
    reason: Option<&str>,
    ours: bool,
    requested: bool,
) -> MachineAction {
    if reason == Some(reasons::HEALTHY) {
        return if ours {
            MachineAction::Withdraw
        } else {
            MachineAction::None
        };
    }
    if !annotate || requested {
        return MachineAction::None;
    }
    match reason {
        Some(reasons::INSTANCE_TERMINATED) => {
            MachineAction::Request("the instance is terminated".to_owned())
        }
        Some(r) if samples >= threshold.max(1) => {
            MachineAction::Request(format!("{r} for {samples} consecutive samples"))
        }
        _ => MachineAction::None,
    }
}

/// A remediation request written to (or withdrawn from) the owning Machine, planned by
/// [`plan`] and made by Act ([`annotate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemediationWrite {
    /// The Machine's name.
    pub machine: String,
    /// Its resourceVersion as the cache showed it (the write's precondition).
    pub resource_version: Option<String>,
    /// Request (saying why) or withdraw.
    pub action: MachineAction,
}

/// The remediation step of a provisioned TerraformMachine's pass (pure but for the gauge):
/// counts the sample when this pass took one (`sampled`), then plans the request or withdrawal
/// on the owning Machine. A Machine that fails the owner check is no owner (Owner references are
/// checked against the owner): nothing is written to it.
pub fn plan(p: &mut Pass<'_>, owner: &Owner, sampled: bool) -> Option<RemediationWrite> {
    let Target::Machine(tm) = p.target else {
        return None;
    };
    let reason = p
        .findings
        .reason(ctype::INFRASTRUCTURE_HEALTHY)
        .map(str::to_owned);
    let before = tm
        .status
        .as_ref()
        .and_then(|s| s.unhealthy_samples)
        .unwrap_or(0);
    let samples = if sampled {
        next_count(before, reason.as_deref())
    } else {
        before
    };
    if samples != before {
        p.facts.record(Fact::UnhealthySamples(samples));
    }
    p.ctx
        .metrics
        .set_unhealthy_samples(&p.ns, &p.name, i64::from(samples));
    let machine = machine_to_annotate(owner)?;
    let policy = tm.spec.remediation.clone().unwrap_or_default();
    let a = machine.metadata.annotations.clone().unwrap_or_default();
    let action = choose(
        policy.annotate_machine_or_default(),
        policy.unhealthy_threshold_or_default(),
        samples,
        reason.as_deref(),
        a.contains_key(annotations::REMEDIATION_REQUESTED),
        a.contains_key(annotations::REMEDIATE_MACHINE),
    );
    (action != MachineAction::None).then(|| RemediationWrite {
        machine: machine.metadata.name.clone().unwrap_or_default(),
        resource_version: machine.metadata.resource_version.clone(),
        action,
    })
}

/// The terminated shortcut for a refresh that fails because the instance is gone (Common
/// "Out-of-band termination"): when a refresh or drift Job bookkept in this pass failed that
/// way (see [`refresh_failed_because_gone`]) and no Job of the pass took a good sample
/// (`sampled`), `InfrastructureHealthy` reads `False/InstanceTerminated`. The state still holds
/// the instance's last outputs, so that reading stands on later passes until a new sample
/// replaces it. Returns whether this pass took such a sample.
pub fn refresh_gone(p: &mut Pass<'_>, books: &Books, sampled: bool) -> bool {
    if sampled {
        return false;
    }
    let gone = books
        .kept
        .iter()
        .filter(|k| {
            k.outcome == JobOutcome::Failed
                && matches!(k.record.operation, Operation::Refresh | Operation::Drift)
        })
        .filter_map(|k| k.report.result.as_ref()?.error.as_ref())
        .find(|e| refresh_failed_because_gone(e));
    let reading = if let Some(e) = gone {
        HealthCondition::refresh_gone(e.summary.as_deref())
    } else {
        let Some(standing) = p.findings.before().iter().find(|c| {
            c.type_ == ctype::INFRASTRUCTURE_HEALTHY
                && HealthCondition::is_refresh_gone(&c.reason, &c.message)
        }) else {
            return false;
        };
        HealthCondition {
            message: standing.message.clone(),
            ..HealthCondition::refresh_gone(None)
        }
    };
    p.findings.set(
        ctype::INFRASTRUCTURE_HEALTHY,
        reading.status,
        reading.reason.as_str(),
        &reading.message,
    );
    gone.is_some()
}

/// The owning Machine a remediation request may be written to: one that passes the owner check
/// (an owner failing a check is no owner: CAPTF writes nothing to it) and is not being deleted.
pub fn machine_to_annotate(owner: &Owner) -> Option<&Machine> {
    if owner.check != OwnerCheck::Ok {
        return None;
    }
    owner
        .machine
        .as_ref()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
}

/// Makes a planned [`RemediationWrite`] (Act): both remediation annotations set (saying why)
/// or removed on the Machine, under the resourceVersion the pass saw; its event goes to
/// `announced` and its metric is counted once the write landed.
pub async fn annotate(
    client: &kube::Client,
    ns: &str,
    write: &RemediationWrite,
    announced: &mut Outbox,
    metrics: &Metrics,
) -> kube::Result<()> {
    let why = match &write.action {
        MachineAction::None => return Ok(()),
        MachineAction::Request(why) => Some(why.as_str()),
        MachineAction::Withdraw => None,
    };
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": write.resource_version,
        "annotations": {
            annotations::REMEDIATE_MACHINE: why.map(|_| ""),
            annotations::REMEDIATION_REQUESTED: why,
        }
    }});
    machines
        .patch(
            &write.machine,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let name = &write.machine;
    if let Some(why) = why {
        metrics.remediation_request("requested");
        announced.warning(
            events::REMEDIATION_REQUESTED,
            format!("Machine {name} annotated for remediation: {why}"),
        );
    } else {
        metrics.remediation_request("withdrawn");
        announced.normal(
            events::REMEDIATION_WITHDRAWN,
            format!(
                "The instance is healthy again: remediation request on Machine {name} withdrawn"
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_count_unhealthy_degraded_and_stopped_and_reset_on_healthy() {
        assert_eq!(next_count(2, Some(reasons::INSTANCE_UNHEALTHY)), 3);
        assert_eq!(next_count(2, Some(reasons::INSTANCE_DEGRADED)), 3);
        assert_eq!(next_count(2, Some(reasons::INSTANCE_STOPPED)), 3);
        assert_eq!(next_count(2, Some(reasons::HEALTHY)), 0);
        for left in [
            reasons::INSTANCE_PENDING,
            reasons::HEALTH_UNKNOWN,
            reasons::INSTANCE_TERMINATED,
        ] {
            assert_eq!(next_count(2, Some(left)), 2, "{left}");
        }
        assert_eq!(
            next_count(i32::MAX, Some(reasons::INSTANCE_UNHEALTHY)),
            i32::MAX
        );
    }

    #[test]
    fn a_request_waits_for_the_threshold_and_terminated_skips_it() {
        let unhealthy = Some(reasons::INSTANCE_UNHEALTHY);
        assert_eq!(
            choose(true, 3, 2, unhealthy, false, false),
            MachineAction::None
        );
        assert_eq!(
            choose(true, 3, 3, unhealthy, false, false),
            MachineAction::Request("InstanceUnhealthy for 3 consecutive samples".into())
        );
        assert_eq!(
            choose(true, 3, 0, Some(reasons::INSTANCE_TERMINATED), false, false),
            MachineAction::Request("the instance is terminated".into())
        );
        // Off by default, and never over a request already there.
        assert_eq!(
            choose(false, 3, 9, unhealthy, false, false),
            MachineAction::None
        );
        assert_eq!(
            choose(true, 3, 9, unhealthy, true, true),
            MachineAction::None
        );
        assert_eq!(
            choose(true, 3, 9, unhealthy, false, true),
            MachineAction::None
        );
    }

    #[test]
    fn only_our_own_request_is_withdrawn_when_healthy() {
        let healthy = Some(reasons::HEALTHY);
        assert_eq!(
            choose(true, 3, 0, healthy, true, true),
            MachineAction::Withdraw
        );
        // Withdrawn even once annotateMachine was turned off.
        assert_eq!(
            choose(false, 3, 0, healthy, true, true),
            MachineAction::Withdraw
        );
        // Someone else's remediate-machine is left alone.
        assert_eq!(
            choose(true, 3, 0, healthy, false, true),
            MachineAction::None
        );
    }

    /// M1: a Machine that fails the owner check (it does not reference this TerraformMachine
    /// back, say) is no owner, and gets no remediation annotation; one that passes gets it.
    #[test]
    fn a_machine_that_fails_the_owner_check_gets_no_remediation_request() {
        let machine = Machine::new("m", api::capi::MachineSpec::default());
        let mut owner = Owner::none();
        owner.machine = Some(machine);
        assert!(machine_to_annotate(&owner).is_some());
        for check in [
            OwnerCheck::Mismatch,
            OwnerCheck::Gone,
            OwnerCheck::NotYet {
                reason: reasons::WAITING_FOR_OWNER_MACHINE,
            },
        ] {
            owner.check = check;
            assert!(machine_to_annotate(&owner).is_none(), "{check:?}");
        }
    }
}
