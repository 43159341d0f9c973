//! The machine role's outputs: `provider_id`, `addresses`, `failure_domain`, `interruptible`,
//! `health` (spec: Machine Role "Outputs").

use super::{
    Decoded, MAX_FAILURE_DOMAIN, MAX_PROVIDER_ID, MachineAddress, OutputsVerdict, RootOutputs,
    Rule, Violation, check_missing, decode_addresses, decode_health, id_string, output,
};
use crate::health::Health;
use serde_json::Value;

/// The machine role's contract outputs.
pub const MACHINE_OUTPUTS: &[&str] = &[
    "provider_id",
    "addresses",
    "failure_domain",
    "interruptible",
    "health",
];

/// What a machine's outputs write to its status and spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachineOutputs {
    /// `spec.providerID`: 1–512 characters; `""` reads as null, and null is pending.
    pub provider_id: Option<String>,
    /// `status.addresses`, in canonical order; null is pending, `[]` means no addresses.
    pub addresses: Option<Vec<MachineAddress>>,
    /// `status.failureDomain`: the requested domain when one was requested, else the module's.
    pub failure_domain: Option<String>,
    /// `status.interruptible`; null is written as false.
    pub interruptible: bool,
    /// The `health` reading; null is pending.
    pub health: Option<Health>,
}

/// Decodes and validates a machine's outputs. `requested_failure_domain` is the rendered
/// `failure_domain` input; when it is set, the output must equal it.
pub fn decode_machine_outputs(
    outputs: &RootOutputs,
    requested_failure_domain: Option<&str>,
) -> Decoded<MachineOutputs> {
    let mut verdict = OutputsVerdict::default();
    let mut decoded = MachineOutputs::default();
    if check_missing(outputs, MACHINE_OUTPUTS, &mut verdict) {
        return Decoded {
            outputs: decoded,
            verdict,
        };
    }

    match id_string(
        output(outputs, "provider_id"),
        "provider_id",
        MAX_PROVIDER_ID,
        &mut verdict,
    ) {
        Ok(Some(id)) => decoded.provider_id = Some(id),
        Ok(None) => verdict.pending.push("provider_id"),
        Err(()) => {}
    }

    match output(outputs, "addresses") {
        None => verdict.pending.push("addresses"),
        Some(value) => {
            decoded.addresses = decode_addresses(value, "addresses", &mut verdict).ok();
        }
    }

    let requested = requested_failure_domain.filter(|d| !d.is_empty());
    if let Ok(reported) = id_string(
        output(outputs, "failure_domain"),
        "failure_domain",
        MAX_FAILURE_DOMAIN,
        &mut verdict,
    ) {
        match (requested, reported) {
            // The module has not reported its placement yet: pending, not a mismatch.
            (Some(_), None) => verdict.pending.push("failure_domain"),
            (Some(want), got) if got.as_deref() != Some(want) => {
                verdict.invalid("failure_domain", Rule::FailureDomainMismatch);
            }
            (_, got) => decoded.failure_domain = got,
        }
    }

    match output(outputs, "interruptible") {
        None => decoded.interruptible = false,
        Some(Value::Bool(b)) => decoded.interruptible = *b,
        Some(_) => verdict.invalid("interruptible", Rule::WrongType { expected: "a bool" }),
    }

    decoded.health = decode_health(outputs, &mut verdict);

    Decoded {
        outputs: decoded,
        verdict,
    }
}

/// Checks a decoded `provider_id` against the one already written to `spec.providerID`: it is
/// written once, and a later different non-null value is `ProviderIDChanged`. A null one after
/// provisioning is not a change (it reads as a vanished instance instead).
pub fn provider_id_change(written: Option<&str>, decoded: Option<&str>) -> Option<Violation> {
    match (written.filter(|w| !w.is_empty()), decoded) {
        (Some(w), Some(d)) if w != d => Some(Violation {
            output: "provider_id".to_owned(),
            rule: Rule::ProviderIdChanged,
        }),
        _ => None,
    }
}
