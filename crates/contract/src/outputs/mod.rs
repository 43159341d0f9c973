//! Decoding and validating a role's contract outputs from the state's root outputs (spec: Module
//! Contract "Null semantics" and "Type conventions", Common "Outputs", Cluster/Machine/MachinePool
//! Role "Outputs").
//!
//! Each role has one entry point — [`decode_cluster_outputs`], [`decode_machine_outputs`],
//! [`decode_machinepool_outputs`] — returning the values CAPTF writes to status together with an
//! [`OutputsVerdict`], which says what the `OutputsValid` condition reads.
//!
//! Absent and null. OpenTofu and Terraform remove a root output whose value is null from the state
//! file altogether, so a declared output left null and an undeclared one would look the same in
//! state. The runner tells them apart before it runs the module: it drops from the generated root
//! every contract output the module does not declare (a reference to it would fail the plan) and
//! records their names in the root output [`UNDECLARED_OUTPUTS`]. An output named there is
//! `OutputsMissing`, as is every contract output of a state that carries none of them (a state not
//! written by CAPTF's generated root). An output absent otherwise is a declared one left null:
//! pending (`OutputsPending`) unless the role gives null a meaning of its own.
//!
//! Violations name the output and the rule they break, never the value: outputs may be sensitive.

mod cluster;
mod machine;
mod machinepool;

pub use cluster::{
    ApiEndpoint, CLUSTER_OUTPUTS, ClusterOutputs, FailureDomain, decode_cluster_outputs,
};
pub use machine::{MACHINE_OUTPUTS, MachineOutputs, decode_machine_outputs, provider_id_change};
pub use machinepool::{
    MACHINEPOOL_OUTPUTS, MachinePoolInstance, MachinePoolOutputs, decode_machinepool_outputs,
};

use crate::health::{ConditionStatus, Health, HealthState};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// The longest `provider_id` (and `provider_id_list` entry), in characters.
pub const MAX_PROVIDER_ID: usize = 512;
/// The longest failure-domain name, in characters.
pub const MAX_FAILURE_DOMAIN: usize = 256;
/// The root output in which the runner lists the role's contract outputs the module does not
/// declare (Module Contract "Null semantics": an absent output is `OutputsMissing`).
pub const UNDECLARED_OUTPUTS: &str = "captf_undeclared_outputs";

/// The most failure domains a cluster may report.
pub const MAX_FAILURE_DOMAINS: usize = 100;
/// The longest address, in characters.
pub const MAX_ADDRESS: usize = 256;
/// The most addresses a machine (or pool instance) may report.
pub const MAX_ADDRESSES: usize = 256;
/// The longest control-plane endpoint host, in characters.
pub const MAX_ENDPOINT_HOST: usize = 512;
/// The most entries `provider_id_list` may have once de-duplicated.
pub const MAX_PROVIDER_IDS: usize = 10_000;
/// The most pool instances kept in status; beyond this the list is truncated.
pub const MAX_INSTANCES: usize = 1_000;
/// The longest pool `instance_id`, in characters.
pub const MAX_INSTANCE_ID: usize = 256;

/// How deep JSON values nest before the state reader gives up on one (serde_json's recursion
/// limit).
pub const MAX_OUTPUT_DEPTH: usize = 128;

/// One root output as the state records it.
#[derive(Clone, PartialEq)]
pub struct RootOutput {
    /// The value (may be sensitive: never log it); null when [`RootOutput::undecodable`].
    pub value: Value,
    /// Whether the output was declared sensitive.
    pub sensitive: bool,
    /// Whether the value nests deeper than [`MAX_OUTPUT_DEPTH`] levels and could not be decoded.
    /// The rest of the state is read all the same; a contract output in this case is reported
    /// by name as [`Rule::Undecodable`].
    pub undecodable: bool,
}

impl RootOutput {
    /// A non-sensitive output with this value (handy in tests and tools).
    pub fn new(value: Value) -> Self {
        Self {
            value,
            sensitive: false,
            undecodable: false,
        }
    }
}

impl fmt::Debug for RootOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootOutput")
            .field("value", &"<redacted>")
            .field("sensitive", &self.sensitive)
            .field("undecodable", &self.undecodable)
            .finish()
    }
}

/// The root outputs of a state, by name.
pub type RootOutputs = BTreeMap<String, RootOutput>;

/// A contract rule an output value breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// The value does not have the shape the contract decodes (for example a number where a
    /// string belongs).
    WrongType {
        /// What the contract expects there.
        expected: &'static str,
    },
    /// A required attribute of an object is missing or null.
    MissingAttribute,
    /// A string's length, in characters, is outside the allowed range.
    Length {
        /// Shortest allowed.
        min: usize,
        /// Longest allowed.
        max: usize,
    },
    /// A list has more items than allowed.
    TooManyItems {
        /// The most allowed.
        max: usize,
    },
    /// A string is not one of a closed set of values.
    NotInEnum {
        /// The allowed values.
        allowed: &'static [&'static str],
    },
    /// A number is not an integer within the allowed range.
    IntegerOutOfRange {
        /// Smallest allowed.
        min: i64,
        /// Largest allowed.
        max: i64,
    },
    /// Two list entries share a name that must be unique.
    DuplicateName,
    /// Only one of `host` and `port` is set: an endpoint needs both or neither.
    EndpointHalfSet,
    /// `exports` holds a value that cannot be canonicalized for hashing (a fractional or exponent
    /// number), so machines and pools could never hash their inputs.
    NotCanonicalizable {
        /// JSON path of the offending number inside the output (`$` is the output itself).
        path: String,
    },
    /// A machine's `failure_domain` differs from the one it was asked to use.
    FailureDomainMismatch,
    /// A machine's `provider_id` changed after it was first written.
    ProviderIdChanged,
    /// The value nests deeper than [`MAX_OUTPUT_DEPTH`] levels, so it could not be decoded.
    Undecodable,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongType { expected } => write!(f, "must be {expected}"),
            Self::MissingAttribute => f.write_str("is required"),
            Self::Length { min, max } => {
                write!(f, "must be {min} to {max} characters long")
            }
            Self::TooManyItems { max } => write!(f, "must have at most {max} items"),
            Self::NotInEnum { allowed } => write!(f, "must be one of {}", allowed.join(", ")),
            Self::IntegerOutOfRange { min, max } => {
                write!(f, "must be an integer from {min} to {max}")
            }
            Self::DuplicateName => f.write_str("repeats a name already used in the list"),
            Self::EndpointHalfSet => f.write_str("must set both host and port, or neither"),
            Self::NotCanonicalizable { path } => write!(
                f,
                "holds a fractional or exponent number at {path}; only integers can be hashed"
            ),
            Self::FailureDomainMismatch => {
                f.write_str("must equal the failure domain the machine was asked to use")
            }
            Self::ProviderIdChanged => f.write_str("must not change once written"),
            Self::Undecodable => write!(
                f,
                "cannot be decoded: its value nests deeper than {MAX_OUTPUT_DEPTH} levels"
            ),
        }
    }
}

/// One output violating one rule. `output` is a path into the output (`addresses[2].type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The output, and where inside it.
    pub output: String,
    /// The rule broken.
    pub rule: Rule,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "output {} {}", self.output, self.rule)
    }
}

/// The `OutputsValid` reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputsReason {
    /// Every output satisfies the contract.
    OutputsValid,
    /// Valid, but the pool's `instances` list was cut to [`MAX_INSTANCES`].
    InstancesTruncated,
    /// A machine's `failure_domain` differs from the requested one.
    FailureDomainMismatch,
    /// An output violates the contract or a Cluster API marker.
    OutputsInvalid,
    /// The state carries none of the role's contract outputs.
    OutputsMissing,
    /// A machine's `provider_id` differs from the one written first.
    ProviderIdChanged,
    /// A required output is still null.
    OutputsPending,
}

impl OutputsReason {
    /// The reason string on the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OutputsValid => "OutputsValid",
            Self::InstancesTruncated => "InstancesTruncated",
            Self::FailureDomainMismatch => "FailureDomainMismatch",
            Self::OutputsInvalid => "OutputsInvalid",
            Self::OutputsMissing => "OutputsMissing",
            Self::ProviderIdChanged => "ProviderIDChanged",
            Self::OutputsPending => "OutputsPending",
        }
    }

    /// The condition status this reason carries.
    pub fn status(self) -> ConditionStatus {
        match self {
            Self::OutputsValid | Self::InstancesTruncated => ConditionStatus::True,
            Self::OutputsPending => ConditionStatus::Unknown,
            Self::FailureDomainMismatch
            | Self::OutputsInvalid
            | Self::OutputsMissing
            | Self::ProviderIdChanged => ConditionStatus::False,
        }
    }
}

impl fmt::Display for OutputsReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What decoding found wrong (or not) with a role's outputs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputsVerdict {
    /// Contract outputs the module does not declare ([`UNDECLARED_OUTPUTS`]), or all of them
    /// when none of the role's outputs is in the state at all.
    pub missing: Vec<&'static str>,
    /// Required outputs that are still null.
    pub pending: Vec<&'static str>,
    /// Every rule broken, in output order.
    pub violations: Vec<Violation>,
    /// When the pool's `instances` list was cut: how many entries the module reported.
    pub instances_truncated_from: Option<usize>,
}

impl OutputsVerdict {
    /// Whether nothing is missing, pending or invalid, so the decoded values may be written.
    pub fn is_valid(&self) -> bool {
        self.missing.is_empty() && self.pending.is_empty() && self.violations.is_empty()
    }

    /// The `OutputsValid` reason: missing outputs first, then any violation (a failure-domain
    /// mismatch or changed provider ID alone gets its own reason), then pending outputs, then a
    /// truncated instance list.
    pub fn reason(&self) -> OutputsReason {
        if !self.missing.is_empty() {
            return OutputsReason::OutputsMissing;
        }
        if !self.violations.is_empty() {
            let only = |rule: &Rule| self.violations.iter().all(|v| &v.rule == rule);
            if only(&Rule::FailureDomainMismatch) {
                return OutputsReason::FailureDomainMismatch;
            }
            if only(&Rule::ProviderIdChanged) {
                return OutputsReason::ProviderIdChanged;
            }
            return OutputsReason::OutputsInvalid;
        }
        if !self.pending.is_empty() {
            return OutputsReason::OutputsPending;
        }
        if self.instances_truncated_from.is_some() {
            return OutputsReason::InstancesTruncated;
        }
        OutputsReason::OutputsValid
    }

    /// The condition status.
    pub fn status(&self) -> ConditionStatus {
        self.reason().status()
    }

    /// A message naming every output and rule concerned, never a value.
    pub fn message(&self) -> String {
        match self.reason() {
            OutputsReason::OutputsMissing => format!(
                "The module does not declare the contract outputs {} of its role: declare each \
                 one (its value may be null until known) and publish a new module image",
                self.missing.join(", ")
            ),
            OutputsReason::OutputsPending => {
                format!(
                    "Waiting for outputs still null: {}",
                    self.pending.join(", ")
                )
            }
            OutputsReason::InstancesTruncated => format!(
                "Outputs are valid; instances lists {} entries, status keeps the first {MAX_INSTANCES}",
                self.instances_truncated_from.unwrap_or(MAX_INSTANCES)
            ),
            OutputsReason::OutputsValid => "Outputs satisfy the contract".to_owned(),
            OutputsReason::FailureDomainMismatch
            | OutputsReason::OutputsInvalid
            | OutputsReason::ProviderIdChanged => self
                .violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    /// Adds a violation.
    pub(crate) fn invalid(&mut self, output: impl Into<String>, rule: Rule) {
        self.violations.push(Violation {
            output: output.into(),
            rule,
        });
    }
}

/// A role's decoded outputs and the verdict on them.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<T> {
    /// The values as they would be written; a field whose output is invalid or pending is empty.
    pub outputs: T,
    /// What `OutputsValid` reads.
    pub verdict: OutputsVerdict,
}

/// The type of a machine address (Cluster API's `MachineAddressType`), in the canonical order
/// CAPTF sorts addresses by: `InternalIP`, `InternalDNS`, `ExternalIP`, `ExternalDNS`, `Hostname`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum AddressType {
    /// `InternalIP` (sorts first).
    #[serde(rename = "InternalIP")]
    InternalIp,
    /// `InternalDNS`.
    #[serde(rename = "InternalDNS")]
    InternalDns,
    /// `ExternalIP`.
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    /// `ExternalDNS`.
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    /// `Hostname` (sorts last).
    Hostname,
}

/// The address types, spelled as Cluster API spells them, in canonical order.
pub const ADDRESS_TYPES: &[&str] = &[
    "InternalIP",
    "InternalDNS",
    "ExternalIP",
    "ExternalDNS",
    "Hostname",
];

impl AddressType {
    /// Every type, in the canonical sort order.
    pub const ALL: [Self; 5] = [
        Self::InternalIp,
        Self::InternalDns,
        Self::ExternalIp,
        Self::ExternalDns,
        Self::Hostname,
    ];

    /// The Cluster API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InternalIp => "InternalIP",
            Self::InternalDns => "InternalDNS",
            Self::ExternalIp => "ExternalIP",
            Self::ExternalDns => "ExternalDNS",
            Self::Hostname => "Hostname",
        }
    }

    /// Parses the exact Cluster API spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// One machine address; the derived order is the canonical one (type precedence, then address).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MachineAddress {
    /// The address type.
    pub kind: AddressType,
    /// The address.
    pub address: String,
}

/// The `health.state` values, for messages.
const HEALTH_STATES: &[&str] = &[
    "pending",
    "running",
    "degraded",
    "stopped",
    "terminated",
    "unknown",
];

/// The names the runner listed in [`UNDECLARED_OUTPUTS`]; none when the output is absent or not
/// a list of strings (a state written before the runner recorded it).
fn undeclared(outputs: &RootOutputs) -> Vec<&str> {
    output(outputs, UNDECLARED_OUTPUTS)
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Looks an output up; `None` when absent or null (the two are the same in state).
pub(crate) fn output<'a>(outputs: &'a RootOutputs, name: &str) -> Option<&'a Value> {
    outputs.get(name).map(|o| &o.value).filter(|v| !v.is_null())
}

/// Records as missing the names the runner listed in [`UNDECLARED_OUTPUTS`], or every name when
/// none of them is in `outputs`, and returns whether it recorded any; otherwise records each of
/// them whose value could not be decoded as [`Rule::Undecodable`].
pub(crate) fn check_missing(
    outputs: &RootOutputs,
    names: &[&'static str],
    verdict: &mut OutputsVerdict,
) -> bool {
    let undeclared = undeclared(outputs);
    verdict.missing.extend(
        names
            .iter()
            .filter(|n| undeclared.iter().any(|u| u == *n))
            .copied(),
    );
    if verdict.missing.is_empty() && !names.iter().any(|n| outputs.contains_key(*n)) {
        verdict.missing.extend_from_slice(names);
    }
    if !verdict.missing.is_empty() {
        return true;
    }
    for name in names {
        if outputs.get(*name).is_some_and(|o| o.undecodable) {
            verdict.invalid(*name, Rule::Undecodable);
        }
    }
    false
}

/// Counts characters the way Kubernetes length markers do.
fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// An identifier string: null or `""` is `Ok(None)`, a string of `1..=max` characters is
/// `Ok(Some)`, anything else a violation.
pub(crate) fn id_string(
    value: Option<&Value>,
    path: &str,
    max: usize,
    verdict: &mut OutputsVerdict,
) -> Result<Option<String>, ()> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => {
            if char_len(s) > max {
                verdict.invalid(path, Rule::Length { min: 1, max });
                Err(())
            } else {
                Ok(Some(s.clone()))
            }
        }
        Some(_) => {
            verdict.invalid(
                path,
                Rule::WrongType {
                    expected: "a string",
                },
            );
            Err(())
        }
    }
}

/// A required non-empty string of `1..=max` characters.
pub(crate) fn required_string(
    value: Option<&Value>,
    path: &str,
    max: usize,
    verdict: &mut OutputsVerdict,
) -> Result<String, ()> {
    match value {
        None | Some(Value::Null) => {
            verdict.invalid(path, Rule::MissingAttribute);
            Err(())
        }
        Some(Value::String(s)) => {
            let len = char_len(s);
            if len == 0 || len > max {
                verdict.invalid(path, Rule::Length { min: 1, max });
                Err(())
            } else {
                Ok(s.clone())
            }
        }
        Some(_) => {
            verdict.invalid(
                path,
                Rule::WrongType {
                    expected: "a string",
                },
            );
            Err(())
        }
    }
}

/// An integer within `min..=max`.
pub(crate) fn integer(
    value: &Value,
    path: &str,
    min: i64,
    max: i64,
    verdict: &mut OutputsVerdict,
) -> Result<i64, ()> {
    let Value::Number(n) = value else {
        verdict.invalid(
            path,
            Rule::WrongType {
                expected: "a number",
            },
        );
        return Err(());
    };
    match n.as_i64() {
        Some(i) if (min..=max).contains(&i) => Ok(i),
        _ => {
            verdict.invalid(path, Rule::IntegerOutOfRange { min, max });
            Err(())
        }
    }
}

/// A list; `Err` (with a violation) for anything else.
pub(crate) fn list<'a>(
    value: &'a Value,
    path: &str,
    verdict: &mut OutputsVerdict,
) -> Result<&'a [Value], ()> {
    if let Value::Array(items) = value {
        Ok(items)
    } else {
        verdict.invalid(path, Rule::WrongType { expected: "a list" });
        Err(())
    }
}

/// An object; `Err` (with a violation) for anything else.
pub(crate) fn object<'a>(
    value: &'a Value,
    path: &str,
    verdict: &mut OutputsVerdict,
) -> Result<&'a serde_json::Map<String, Value>, ()> {
    if let Value::Object(map) = value {
        Ok(map)
    } else {
        verdict.invalid(
            path,
            Rule::WrongType {
                expected: "an object",
            },
        );
        Err(())
    }
}

/// Decodes `addresses` (a machine's output, or a pool instance's attribute): a list of at most
/// [`MAX_ADDRESSES`] `{type, address}` objects, returned in canonical order.
pub(crate) fn decode_addresses(
    value: &Value,
    path: &str,
    verdict: &mut OutputsVerdict,
) -> Result<Vec<MachineAddress>, ()> {
    let items = list(value, path, verdict)?;
    let before = verdict.violations.len();
    if items.len() > MAX_ADDRESSES {
        verdict.invalid(path, Rule::TooManyItems { max: MAX_ADDRESSES });
    }
    let mut addresses = Vec::with_capacity(items.len().min(MAX_ADDRESSES));
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let Ok(map) = object(item, &item_path, verdict) else {
            continue;
        };
        let type_path = format!("{item_path}.type");
        let kind = match map.get("type") {
            None | Some(Value::Null) => {
                verdict.invalid(&type_path, Rule::MissingAttribute);
                None
            }
            Some(Value::String(s)) => {
                let kind = AddressType::parse(s);
                if kind.is_none() {
                    verdict.invalid(
                        &type_path,
                        Rule::NotInEnum {
                            allowed: ADDRESS_TYPES,
                        },
                    );
                }
                kind
            }
            Some(_) => {
                verdict.invalid(
                    &type_path,
                    Rule::WrongType {
                        expected: "a string",
                    },
                );
                None
            }
        };
        let address = required_string(
            map.get("address"),
            &format!("{item_path}.address"),
            MAX_ADDRESS,
            verdict,
        );
        if let (Some(kind), Ok(address)) = (kind, address) {
            addresses.push(MachineAddress { kind, address });
        }
    }
    if verdict.violations.len() > before {
        return Err(());
    }
    addresses.sort();
    Ok(addresses)
}

/// Decodes a `health.state`-valued string (required).
pub(crate) fn health_state(
    value: Option<&Value>,
    path: &str,
    verdict: &mut OutputsVerdict,
) -> Result<HealthState, ()> {
    match value {
        None | Some(Value::Null) => {
            verdict.invalid(path, Rule::MissingAttribute);
            Err(())
        }
        Some(Value::String(s)) => HealthState::parse(s).ok_or_else(|| {
            verdict.invalid(
                path,
                Rule::NotInEnum {
                    allowed: HEALTH_STATES,
                },
            );
        }),
        Some(_) => {
            verdict.invalid(
                path,
                Rule::WrongType {
                    expected: "a string",
                },
            );
            Err(())
        }
    }
}

/// Decodes the `health` output every role declares; null (or absent) is pending.
pub(crate) fn decode_health(outputs: &RootOutputs, verdict: &mut OutputsVerdict) -> Option<Health> {
    const NAME: &str = "health";
    let Some(value) = output(outputs, NAME) else {
        verdict.pending.push(NAME);
        return None;
    };
    let map = object(value, NAME, verdict).ok()?;
    let before = verdict.violations.len();
    let state = health_state(map.get("state"), "health.state", verdict);
    let healthy = match map.get("healthy") {
        Some(Value::Bool(b)) => Some(*b),
        None | Some(Value::Null) => {
            verdict.invalid("health.healthy", Rule::MissingAttribute);
            None
        }
        Some(_) => {
            verdict.invalid("health.healthy", Rule::WrongType { expected: "a bool" });
            None
        }
    };
    let message = match map.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            verdict.invalid(
                "health.message",
                Rule::WrongType {
                    expected: "a string",
                },
            );
            None
        }
    };
    let mut reasons = Vec::new();
    match map.get("reasons") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => reasons.push(s.clone()),
                    _ => verdict.invalid(
                        format!("health.reasons[{i}]"),
                        Rule::WrongType {
                            expected: "a string",
                        },
                    ),
                }
            }
        }
        Some(_) => verdict.invalid(
            "health.reasons",
            Rule::WrongType {
                expected: "a list of strings",
            },
        ),
    }
    if verdict.violations.len() > before {
        return None;
    }
    Some(Health {
        state: state.ok()?,
        healthy: healthy?,
        message,
        reasons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn verdict_reason_precedence() {
        let mut v = OutputsVerdict::default();
        assert_eq!(v.reason(), OutputsReason::OutputsValid);
        v.instances_truncated_from = Some(1_001);
        assert_eq!(v.reason(), OutputsReason::InstancesTruncated);
        v.pending.push("health");
        assert_eq!(v.reason(), OutputsReason::OutputsPending);
        v.invalid("failure_domain", Rule::FailureDomainMismatch);
        assert_eq!(v.reason(), OutputsReason::FailureDomainMismatch);
        v.invalid("addresses", Rule::TooManyItems { max: 256 });
        assert_eq!(v.reason(), OutputsReason::OutputsInvalid);
        v.missing.push("health");
        assert_eq!(v.reason(), OutputsReason::OutputsMissing);
    }

    #[test]
    fn root_output_debug_redacts_the_value() {
        let o = RootOutput::new(json!("s3cr3t"));
        assert!(!format!("{o:?}").contains("s3cr3t"));
    }
}
