//! A role's outputs written back (spec: Cluster Role "Outputs", "Provisioned rule",
//! "EndpointAvailable condition"; Machine Role "Outputs", "Provisioned rule"; Drift and Health
//! "From module health to InfrastructureHealthy"): decoding the state's root outputs, the
//! `OutputsValid` verdict, the provisioned latch, the endpoint and provider ID written once to
//! the spec, and the status fields each role maps (recorded as [`crate::pass::status::Fact`]s, which
//! Report turns into status).

use api::capi::Cluster;
use api::cluster::TerraformCluster;
use api::constants::{annotations, conditions as ctype, events, reasons};
use api::machine::TerraformMachine;
use api::status::{FailureDomain, MachineAddress};
use contract::health::{ConditionStatus, HealthCondition, HealthState};
use contract::outputs::{
    OutputsVerdict, decode_cluster_outputs, decode_machine_outputs, provider_id_change,
};
use contract::state::StateSummary;
use serde_json::Value;

use crate::kinds::inputs::Owner;
use crate::pass::conditions::Findings;
use crate::pass::observed::HealthReading;
use crate::pass::status::{Fact, StatusFacts};
use crate::runtime::context::{Context, StatusDraft, Target};
use crate::runtime::events::Outbox;

/// What the outputs told the pass about health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The health reading.
    pub reading: HealthReading,
    /// Whether the outputs are valid with a definite health reading (no post-apply refresh).
    pub definite: bool,
    /// The write-once spec fields (and annotations) to patch onto the object, if any: the
    /// cluster's endpoint, the machine's providerID, a pool's providerIDList.
    pub spec_patch: Option<serde_json::Value>,
    /// The events of that write, published when it lands (no later pass repeats it).
    pub spec_events: Outbox,
}

pub(crate) fn set_verdict(
    conds: &mut Findings,
    verdict: &OutputsVerdict,
    ctx: &Context,
    kind: &str,
) {
    let status = verdict.status();
    let reason = verdict.reason();
    if status == ConditionStatus::False
        && conds.reason(ctype::OUTPUTS_VALID) != Some(reason.as_str())
    {
        ctx.metrics.outputs_invalid(kind, reason.as_str());
    }
    conds.set(
        ctype::OUTPUTS_VALID,
        status,
        reason.as_str(),
        &verdict.message(),
    );
}

pub(crate) fn latch(
    facts: &mut StatusFacts,
    now_provisioned: bool,
    outbox: &mut Outbox,
    kind: &str,
) {
    if now_provisioned && !facts.provisioned() {
        facts.record(Fact::Provisioned);
        outbox.normal(events::PROVISIONED, format!("{kind} is provisioned"));
    }
}

pub(crate) fn set_health(conds: &mut Findings, h: &HealthCondition) {
    conds.set(
        ctype::INFRASTRUCTURE_HEALTHY,
        h.status,
        h.reason.as_str(),
        &h.message,
    );
}

/// Applies the outputs of a read state to the object's status; what it would write to the spec
/// (once) comes back in [`Applied::spec_patch`].
#[allow(clippy::too_many_arguments)]
pub fn apply(
    ctx: &Context,
    target: &Target,
    owner: &Owner,
    summary: &StateSummary,
    durable_tfvars: &Value,
    applied: bool,
    facts: &mut StatusFacts,
    conds: &mut Findings,
    outbox: &mut Outbox,
) -> Applied {
    match target {
        Target::Cluster(tc) => cluster(
            ctx,
            target,
            tc,
            owner.cluster.as_ref(),
            summary,
            durable_tfvars,
            applied,
            facts,
            conds,
            outbox,
        ),
        Target::Machine(tm) => machine(
            ctx,
            tm,
            summary,
            durable_tfvars,
            applied,
            facts,
            conds,
            outbox,
        ),
        Target::Pool(tmp) => {
            crate::kinds::pool::outputs(ctx, tmp, summary, applied, facts, conds, outbox)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn cluster(
    ctx: &Context,
    target: &Target,
    tc: &TerraformCluster,
    cluster: Option<&Cluster>,
    summary: &StateSummary,
    durable_tfvars: &Value,
    applied: bool,
    facts: &mut StatusFacts,
    conds: &mut Findings,
    outbox: &mut Outbox,
) -> Applied {
    let decoded = decode_cluster_outputs(&summary.outputs);
    set_verdict(conds, &decoded.verdict, ctx, "TerraformCluster");
    let out = &decoded.outputs;
    let health_state = out.health.as_ref().map(|h| h.state);
    let now_provisioned = applied
        && decoded.verdict.is_valid()
        && health_state.is_some_and(|s| s != HealthState::Pending);
    latch(facts, now_provisioned, outbox, "TerraformCluster");
    let provisioned = facts.provisioned();

    // The endpoint, written once from the module when the apply rendered none.
    let spec_has_host = tc
        .spec
        .control_plane_endpoint
        .as_ref()
        .is_some_and(api::shared::ApiEndpoint::has_host);
    let rendered_null = durable_tfvars
        .get("control_plane_endpoint")
        .is_none_or(Value::is_null);
    let mut module_endpoint_valid = false;
    let mut spec_patch = None;
    let mut spec_events = Outbox::default();
    if let Some(ep) = &out.control_plane_endpoint {
        module_endpoint_valid = true;
        if applied && !spec_has_host && rendered_null {
            let mut patch = serde_json::json!({
                "spec": {"controlPlaneEndpoint": {"host": ep.host, "port": ep.port}},
            });
            if target
                .annotation(annotations::ENDPOINT_SOURCE)
                .is_none_or(str::is_empty)
            {
                patch["metadata"] =
                    serde_json::json!({"annotations": {annotations::ENDPOINT_SOURCE: "module"}});
            }
            spec_patch = Some(patch);
            spec_events.normal(
                events::CONTROL_PLANE_ENDPOINT_SET,
                format!(
                    "spec.controlPlaneEndpoint set to {}:{} from the module's output",
                    ep.host, ep.port
                ),
            );
        }
    }

    // Failure domains.
    if let Some(fds) = &out.failure_domains {
        let new: Option<Vec<FailureDomain>> = Some(
            fds.iter()
                .map(|f| FailureDomain {
                    name: f.name.clone(),
                    control_plane: Some(f.control_plane),
                    attributes: Some(f.attributes.clone()).filter(|a| !a.is_empty()),
                })
                .collect::<Vec<_>>(),
        )
        .filter(|v| !v.is_empty());
        let shown = match facts.status() {
            StatusDraft::Cluster(s) => s.failure_domains,
            StatusDraft::Machine(_) | StatusDraft::Pool(_) => None,
        };
        if shown != new {
            if shown.is_some() || new.is_some() {
                outbox.normal(
                    events::FAILURE_DOMAINS_CHANGED,
                    format!(
                        "status.failureDomains now lists {} domains",
                        new.as_ref().map_or(0, Vec::len)
                    ),
                );
            }
            facts.record(Fact::FailureDomains(new));
        }
    }

    // Health.
    if let Some(h) = &out.health
        && (provisioned || h.state != HealthState::Pending)
    {
        set_health(conds, &h.condition());
    }

    // EndpointAvailable.
    if provisioned {
        let valid = |e: Option<&api::shared::ApiEndpoint>| {
            crate::kinds::inputs::endpoint(e).is_some_and(|e| e.valid().is_some())
        };
        if module_endpoint_valid
            || valid(cluster.and_then(|c| c.spec.control_plane_endpoint.as_ref()))
            || valid(tc.spec.control_plane_endpoint.as_ref())
        {
            conds.set(
                ctype::ENDPOINT_AVAILABLE,
                ConditionStatus::True,
                reasons::ENDPOINT_AVAILABLE,
                "A valid control-plane endpoint is known",
            );
        } else {
            conds.set(
                ctype::ENDPOINT_AVAILABLE,
                ConditionStatus::False,
                reasons::WAITING_FOR_ENDPOINT,
                "Neither the module's control_plane_endpoint output nor the Cluster's spec holds a valid endpoint",
            );
        }
    }
    Applied {
        reading: reading_of(health_state),
        definite: decoded.verdict.is_valid()
            && health_state
                .is_some_and(|s| !matches!(s, HealthState::Pending | HealthState::Unknown)),
        spec_patch,
        spec_events,
    }
}

/// Whether a machine's apply latches `provisioned` (Machine Role "Provisioned"): applied, valid
/// outputs, a provider ID, and a health reading that is not pending. As for the cluster, invalid
/// outputs never latch.
pub fn machine_latches(
    applied: bool,
    outputs_valid: bool,
    provider_id: Option<&str>,
    health: Option<HealthState>,
) -> bool {
    applied
        && outputs_valid
        && provider_id.is_some()
        && health.is_some_and(|s| s != HealthState::Pending)
}

/// Whether a machine's module providerID is written to `spec.providerID` (once): applied, valid
/// outputs, and none written yet.
pub fn writes_provider_id(applied: bool, outputs_valid: bool, written: Option<&str>) -> bool {
    applied && outputs_valid && written.is_none_or(str::is_empty)
}

#[allow(clippy::too_many_arguments)]
fn machine(
    ctx: &Context,
    tm: &TerraformMachine,
    summary: &StateSummary,
    durable_tfvars: &Value,
    applied: bool,
    facts: &mut StatusFacts,
    conds: &mut Findings,
    outbox: &mut Outbox,
) -> Applied {
    let requested = durable_tfvars.get("failure_domain").and_then(Value::as_str);
    let mut decoded = decode_machine_outputs(&summary.outputs, requested);
    let written = tm.spec.provider_id.as_deref();
    if let Some(v) = provider_id_change(written, decoded.outputs.provider_id.as_deref()) {
        decoded.verdict.violations.push(v);
    }
    set_verdict(conds, &decoded.verdict, ctx, "TerraformMachine");
    let out = &decoded.outputs;
    let health_state = out.health.as_ref().map(|h| h.state);
    let was_provisioned = facts.provisioned();
    let valid = decoded.verdict.is_valid();
    let now_provisioned = machine_latches(applied, valid, out.provider_id.as_deref(), health_state);
    latch(facts, now_provisioned, outbox, "TerraformMachine");
    let provisioned = facts.provisioned();

    // providerID, written once, from valid outputs only.
    let mut spec_patch = None;
    let mut spec_events = Outbox::default();
    if let Some(id) = &out.provider_id
        && writes_provider_id(applied, valid, written)
    {
        spec_patch = Some(serde_json::json!({"spec": {"providerID": id}}));
        spec_events.normal(
            events::PROVIDER_ID_SET,
            format!("spec.providerID set to {id}"),
        );
    }

    if decoded.verdict.violations.is_empty() {
        facts.record(Fact::MachineOutputs {
            addresses: out.addresses.as_ref().map(|addresses| {
                addresses
                    .iter()
                    .map(|a| MachineAddress {
                        address_type: a.kind,
                        address: a.address.clone(),
                    })
                    .collect()
            }),
            failure_domain: out.failure_domain.clone(),
            interruptible: out.interruptible,
        });
    }

    // Health: a vanished instance after provisioning is terminated, whatever health says, on
    // the first sample that shows it (Drift and Health; Machine Remediation "Terminated
    // instances").
    if was_provisioned && out.provider_id.is_none() {
        set_health(conds, &HealthCondition::instance_vanished());
    } else if let Some(h) = &out.health
        && (provisioned || h.state != HealthState::Pending)
    {
        set_health(conds, &h.condition());
    }
    Applied {
        reading: reading_of(health_state),
        definite: decoded.verdict.is_valid()
            && health_state
                .is_some_and(|s| !matches!(s, HealthState::Pending | HealthState::Unknown)),
        spec_patch,
        spec_events,
    }
}

/// A health reading as `decide` sees it.
pub(crate) fn reading_of(state: Option<HealthState>) -> HealthReading {
    match state {
        None | Some(HealthState::Unknown) => HealthReading::Unknown,
        Some(HealthState::Pending) => HealthReading::Pending,
        Some(_) => HealthReading::Definite,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TerraformMachine with invalid outputs (a `FailureDomainMismatch`, say) latches nothing
    /// and writes no `spec.providerID`, as the cluster already did not.
    #[test]
    fn a_machine_with_invalid_outputs_neither_latches_nor_writes_its_provider_id() {
        let running = Some(HealthState::Running);
        assert!(machine_latches(true, true, Some("noop://m"), running));
        assert!(!machine_latches(true, false, Some("noop://m"), running));
        assert!(!machine_latches(true, true, None, running));
        assert!(!machine_latches(
            true,
            true,
            Some("noop://m"),
            Some(HealthState::Pending)
        ));
        assert!(!machine_latches(false, true, Some("noop://m"), running));
        assert!(writes_provider_id(true, true, None));
        assert!(writes_provider_id(true, true, Some("")));
        assert!(!writes_provider_id(true, false, None));
        assert!(!writes_provider_id(true, true, Some("noop://m")));
        assert!(!writes_provider_id(false, true, None));
    }
}
