//! The machinepool role's outputs: `provider_id`, `provider_id_list`, `replicas`, `instances`,
//! `health` (spec: MachinePool Role "Outputs").

use super::{
    Decoded, MAX_FAILURE_DOMAIN, MAX_INSTANCE_ID, MAX_INSTANCES, MAX_PROVIDER_ID, MAX_PROVIDER_IDS,
    MachineAddress, OutputsVerdict, RootOutputs, Rule, check_missing, decode_addresses,
    decode_health, health_state, id_string, integer, list, object, output, required_string,
};
use crate::health::{Health, HealthState};
use serde_json::Value;

/// The machinepool role's contract outputs.
pub const MACHINEPOOL_OUTPUTS: &[&str] = &[
    "provider_id",
    "provider_id_list",
    "replicas",
    "instances",
    "health",
];

/// One entry of `status.instances`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MachinePoolInstance {
    /// `provider_id` → `providerID`, required, 1–512 characters.
    pub provider_id: String,
    /// `instance_id` → `instanceID`, 1–256 characters; `""` reads as none.
    pub instance_id: Option<String>,
    /// `addresses` → `addresses`, validated and ordered like a machine's.
    pub addresses: Vec<MachineAddress>,
    /// `failure_domain` → `failureDomain`, 1–256 characters; `""` reads as none.
    pub failure_domain: Option<String>,
    /// `state` → `state`, the `health.state` enum.
    pub state: Option<HealthState>,
}

/// What a pool's outputs write to its spec and status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachinePoolOutputs {
    /// `spec.providerID`, the group id; optional, so null is simply none.
    pub provider_id: Option<String>,
    /// `spec.providerIDList`, sorted and de-duplicated; null is pending, `[]` is an empty group.
    pub provider_id_list: Option<Vec<String>>,
    /// `status.replicas`; an explicit 0 stays `Some(0)`, null is pending.
    pub replicas: Option<i32>,
    /// `status.instances`, sorted by provider ID and cut to the first 1,000; null is none.
    pub instances: Option<Vec<MachinePoolInstance>>,
    /// The `health` reading; null is pending.
    pub health: Option<Health>,
}

/// Decodes and validates a machine pool's outputs.
pub fn decode_machinepool_outputs(outputs: &RootOutputs) -> Decoded<MachinePoolOutputs> {
    let mut verdict = OutputsVerdict::default();
    let mut decoded = MachinePoolOutputs::default();
    if check_missing(outputs, MACHINEPOOL_OUTPUTS, &mut verdict) {
        return Decoded {
            outputs: decoded,
            verdict,
        };
    }

    if let Ok(id) = id_string(
        output(outputs, "provider_id"),
        "provider_id",
        MAX_PROVIDER_ID,
        &mut verdict,
    ) {
        decoded.provider_id = id;
    }

    match output(outputs, "provider_id_list") {
        None => verdict.pending.push("provider_id_list"),
        Some(value) => decoded.provider_id_list = decode_provider_id_list(value, &mut verdict).ok(),
    }

    match output(outputs, "replicas") {
        None => verdict.pending.push("replicas"),
        Some(value) => {
            decoded.replicas = integer(value, "replicas", 0, i64::from(i32::MAX), &mut verdict)
                .ok()
                .and_then(|r| i32::try_from(r).ok());
        }
    }

    decoded.instances = match output(outputs, "instances") {
        None => Some(Vec::new()),
        Some(value) => decode_instances(value, &mut verdict).ok(),
    };

    decoded.health = decode_health(outputs, &mut verdict);

    Decoded {
        outputs: decoded,
        verdict,
    }
}

fn decode_provider_id_list(value: &Value, verdict: &mut OutputsVerdict) -> Result<Vec<String>, ()> {
    const NAME: &str = "provider_id_list";
    let items = list(value, NAME, verdict)?;
    let before = verdict.violations.len();
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Ok(id) = required_string(
            Some(item),
            &format!("{NAME}[{i}]"),
            MAX_PROVIDER_ID,
            verdict,
        ) {
            ids.push(id);
        }
    }
    if verdict.violations.len() > before {
        return Err(());
    }
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > MAX_PROVIDER_IDS {
        verdict.invalid(
            NAME,
            Rule::TooManyItems {
                max: MAX_PROVIDER_IDS,
            },
        );
        return Err(());
    }
    Ok(ids)
}

fn decode_instances(
    value: &Value,
    verdict: &mut OutputsVerdict,
) -> Result<Vec<MachinePoolInstance>, ()> {
    const NAME: &str = "instances";
    let items = list(value, NAME, verdict)?;
    let before = verdict.violations.len();
    let mut instances = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("{NAME}[{i}]");
        let Ok(map) = object(item, &path, verdict) else {
            continue;
        };
        let provider_id = required_string(
            map.get("provider_id"),
            &format!("{path}.provider_id"),
            MAX_PROVIDER_ID,
            verdict,
        );
        let instance_id = id_string(
            map.get("instance_id"),
            &format!("{path}.instance_id"),
            MAX_INSTANCE_ID,
            verdict,
        );
        let addresses = match map.get("addresses") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(v) => decode_addresses(v, &format!("{path}.addresses"), verdict),
        };
        let failure_domain = id_string(
            map.get("failure_domain"),
            &format!("{path}.failure_domain"),
            MAX_FAILURE_DOMAIN,
            verdict,
        );
        let state = match map.get("state") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => health_state(Some(v), &format!("{path}.state"), verdict).map(Some),
        };
        if let (Ok(provider_id), Ok(instance_id), Ok(addresses), Ok(failure_domain), Ok(state)) =
            (provider_id, instance_id, addresses, failure_domain, state)
        {
            instances.push(MachinePoolInstance {
                provider_id,
                instance_id,
                addresses,
                failure_domain,
                state,
            });
        }
    }
    if verdict.violations.len() > before {
        return Err(());
    }
    instances.sort();
    if instances.len() > MAX_INSTANCES {
        verdict.instances_truncated_from = Some(instances.len());
        instances.truncate(MAX_INSTANCES);
    }
    Ok(instances)
}
