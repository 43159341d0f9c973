//! A pool's outputs written back (MachinePool Role "Outputs", "Provisioned rule"):
//! `spec.providerIDList` (sorted, de-duplicated, capped), `spec.providerID`, `status.replicas`
//! (0 written explicitly), `status.instances` (`InstancesTruncated` past 1,000) and the
//! provisioned latch with `status.ready`.

use api::machinepool::TerraformMachinePool;
use api::status::{MachineAddress, MachinePoolInstance};
use contract::health::HealthState;
use contract::outputs::decode_machinepool_outputs;
use contract::state::StateSummary;
use serde_json::{Value, json};

use crate::kinds::outputs::{Applied, latch, reading_of, set_health, set_verdict};
use crate::pass::conditions::Findings;
use crate::pass::status::{Fact, StatusFacts};
use crate::runtime::context::Context;
use crate::runtime::events::Outbox;

/// Whether a pool's apply latches `provisioned` (and `status.ready`): applied, valid outputs and
/// a health reading that is not pending. Unlike a machine, no provider ID is required: a pool of
/// zero is provisioned.
pub fn pool_latches(applied: bool, outputs_valid: bool, health: Option<HealthState>) -> bool {
    applied && outputs_valid && health.is_some_and(|s| s != HealthState::Pending)
}

/// The spec fields the outputs write when they differ from the pool's: `providerIDList` (already
/// sorted and de-duplicated by the decoder) and `providerID`.
pub fn spec_patch(
    tmp: &TerraformMachinePool,
    provider_id_list: Option<&Vec<String>>,
    provider_id: Option<&String>,
) -> Option<Value> {
    let mut spec = serde_json::Map::new();
    if let Some(list) = provider_id_list
        && tmp.spec.provider_id_list.as_ref() != Some(list)
    {
        spec.insert("providerIDList".to_owned(), json!(list));
    }
    if let Some(id) = provider_id
        && tmp.spec.provider_id.as_ref() != Some(id)
    {
        spec.insert("providerID".to_owned(), json!(id));
    }
    (!spec.is_empty()).then(|| json!({ "spec": spec }))
}

fn instance(i: &contract::outputs::MachinePoolInstance) -> MachinePoolInstance {
    MachinePoolInstance {
        provider_id: i.provider_id.clone(),
        instance_id: i.instance_id.clone(),
        addresses: Some(
            i.addresses
                .iter()
                .map(|a| MachineAddress {
                    address_type: a.kind,
                    address: a.address.clone(),
                })
                .collect::<Vec<_>>(),
        )
        .filter(|a| !a.is_empty()),
        failure_domain: i.failure_domain.clone(),
        state: i.state,
    }
}

/// Applies a pool's outputs to its status; its spec fields come back in [`Applied::spec_patch`].
pub fn outputs(
    ctx: &Context,
    tmp: &TerraformMachinePool,
    summary: &StateSummary,
    applied: bool,
    facts: &mut StatusFacts,
    conds: &mut Findings,
    outbox: &mut Outbox,
) -> Applied {
    let decoded = decode_machinepool_outputs(&summary.outputs);
    set_verdict(conds, &decoded.verdict, ctx, "TerraformMachinePool");
    let out = &decoded.outputs;
    let health_state = out.health.as_ref().map(|h| h.state);
    let valid = decoded.verdict.is_valid();
    latch(
        facts,
        pool_latches(applied, valid, health_state),
        outbox,
        "TerraformMachinePool",
    );
    let provisioned = facts.provisioned();
    let mut spec = None;
    if valid {
        spec = spec_patch(tmp, out.provider_id_list.as_ref(), out.provider_id.as_ref());
        facts.record(Fact::PoolOutputs {
            replicas: out.replicas,
            instances: out
                .instances
                .as_ref()
                .map(|l| l.iter().map(instance).collect()),
        });
    }
    if let Some(h) = &out.health
        && (provisioned || h.state != HealthState::Pending)
    {
        set_health(conds, &h.condition());
    }
    Applied {
        reading: reading_of(health_state),
        definite: valid
            && health_state
                .is_some_and(|s| !matches!(s, HealthState::Pending | HealthState::Unknown)),
        spec_patch: spec,
        spec_events: Outbox::default(),
    }
}
