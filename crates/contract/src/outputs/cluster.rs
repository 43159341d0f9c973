//! The cluster role's outputs: `control_plane_endpoint`, `failure_domains`, `exports`, `health`
//! (spec: Cluster Role "Outputs").

use super::{
    Decoded, MAX_ENDPOINT_HOST, MAX_FAILURE_DOMAIN, MAX_FAILURE_DOMAINS, OutputsVerdict,
    RootOutputs, Rule, check_missing, decode_health, integer, list, object, output,
    required_string,
};
use crate::canonical::{CanonicalError, check_canonicalizable};
use crate::health::Health;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The cluster role's contract outputs.
pub const CLUSTER_OUTPUTS: &[&str] = &[
    "control_plane_endpoint",
    "failure_domains",
    "exports",
    "health",
];

/// Cluster API's `APIEndpoint`, valid only with both parts set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiEndpoint {
    /// 1–512 characters.
    pub host: String,
    /// 1–65535.
    pub port: u16,
}

/// One entry of `status.failureDomains` (Cluster API v1beta2 `FailureDomain`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FailureDomain {
    /// 1–256 characters, unique in the list.
    pub name: String,
    /// Whether control-plane machines may go there; the contract defaults it to true.
    pub control_plane: bool,
    /// Free-form attributes.
    pub attributes: BTreeMap<String, String>,
}

/// What a cluster's outputs write to its spec and status.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterOutputs {
    /// The module's endpoint; `None` when null (allowed forever: CAPI may supply the endpoint).
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// `status.failureDomains`, sorted by name; null and `[]` both clear the field (`Some(vec![])`).
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// The `exports` value handed to machines and pools; null is pending.
    pub exports: Option<Value>,
    /// The `health` reading; null is pending.
    pub health: Option<Health>,
}

/// Decodes and validates a cluster's outputs.
pub fn decode_cluster_outputs(outputs: &RootOutputs) -> Decoded<ClusterOutputs> {
    let mut verdict = OutputsVerdict::default();
    let mut decoded = ClusterOutputs::default();
    if check_missing(outputs, CLUSTER_OUTPUTS, &mut verdict) {
        return Decoded {
            outputs: decoded,
            verdict,
        };
    }

    if let Some(value) = output(outputs, "control_plane_endpoint") {
        decoded.control_plane_endpoint = decode_endpoint(value, &mut verdict).ok().flatten();
    }

    decoded.failure_domains = match output(outputs, "failure_domains") {
        None => Some(Vec::new()),
        Some(value) => decode_failure_domains(value, &mut verdict).ok(),
    };

    match output(outputs, "exports") {
        None => verdict.pending.push("exports"),
        Some(value) => match check_canonicalizable(value) {
            Ok(()) => decoded.exports = Some(value.clone()),
            Err(CanonicalError::NonInteger { path }) => {
                verdict.invalid("exports", Rule::NotCanonicalizable { path });
            }
        },
    }

    decoded.health = decode_health(outputs, &mut verdict);

    Decoded {
        outputs: decoded,
        verdict,
    }
}

/// `{host, port}`: both set is an endpoint, neither set (null or `""`/0) is none, one alone is
/// invalid.
fn decode_endpoint(value: &Value, verdict: &mut OutputsVerdict) -> Result<Option<ApiEndpoint>, ()> {
    const NAME: &str = "control_plane_endpoint";
    let map = object(value, NAME, verdict)?;
    let host = match map.get("host") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(host) => Some(required_string(
            Some(host),
            "control_plane_endpoint.host",
            MAX_ENDPOINT_HOST,
            verdict,
        )?),
    };
    let port = match map.get("port") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64() == Some(0) => None,
        Some(port) => Some(integer(
            port,
            "control_plane_endpoint.port",
            1,
            i64::from(u16::MAX),
            verdict,
        )?),
    };
    match (host, port) {
        (Some(host), Some(port)) => Ok(Some(ApiEndpoint {
            host,
            port: u16::try_from(port).map_err(|_| ())?,
        })),
        (None, None) => Ok(None),
        _ => {
            verdict.invalid(NAME, Rule::EndpointHalfSet);
            Err(())
        }
    }
}

/// A list of at most 100 `{name, control_plane?, attributes?}` with unique names.
fn decode_failure_domains(
    value: &Value,
    verdict: &mut OutputsVerdict,
) -> Result<Vec<FailureDomain>, ()> {
    const NAME: &str = "failure_domains";
    let items = list(value, NAME, verdict)?;
    let before = verdict.violations.len();
    if items.len() > MAX_FAILURE_DOMAINS {
        verdict.invalid(
            NAME,
            Rule::TooManyItems {
                max: MAX_FAILURE_DOMAINS,
            },
        );
    }
    let mut seen = BTreeSet::new();
    let mut domains = Vec::with_capacity(items.len().min(MAX_FAILURE_DOMAINS));
    for (i, item) in items.iter().enumerate() {
        let path = format!("{NAME}[{i}]");
        let Ok(map) = object(item, &path, verdict) else {
            continue;
        };
        let Ok(name) = required_string(
            map.get("name"),
            &format!("{path}.name"),
            MAX_FAILURE_DOMAIN,
            verdict,
        ) else {
            continue;
        };
        if !seen.insert(name.clone()) {
            verdict.invalid(format!("{path}.name"), Rule::DuplicateName);
            continue;
        }
        let Ok(control_plane) = control_plane_flag(map, &path, verdict) else {
            continue;
        };
        let Ok(attributes) = attributes(map.get("attributes"), &path, verdict) else {
            continue;
        };
        domains.push(FailureDomain {
            name,
            control_plane,
            attributes,
        });
    }
    if verdict.violations.len() > before {
        return Err(());
    }
    domains.sort();
    Ok(domains)
}

/// `control_plane` (the contract's spelling; `controlPlane` is accepted too), defaulting to true.
fn control_plane_flag(
    map: &serde_json::Map<String, Value>,
    path: &str,
    verdict: &mut OutputsVerdict,
) -> Result<bool, ()> {
    let value = map
        .get("control_plane")
        .filter(|v| !v.is_null())
        .or_else(|| map.get("controlPlane"));
    match value {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => {
            verdict.invalid(
                format!("{path}.control_plane"),
                Rule::WrongType { expected: "a bool" },
            );
            Err(())
        }
    }
}

fn attributes(
    value: Option<&Value>,
    path: &str,
    verdict: &mut OutputsVerdict,
) -> Result<BTreeMap<String, String>, ()> {
    let path = format!("{path}.attributes");
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => {
            let mut out = BTreeMap::new();
            for (key, v) in map {
                let Value::String(s) = v else {
                    verdict.invalid(
                        path,
                        Rule::WrongType {
                            expected: "a map of strings",
                        },
                    );
                    return Err(());
                };
                out.insert(key.clone(), s.clone());
            }
            Ok(out)
        }
        Some(_) => {
            verdict.invalid(
                path,
                Rule::WrongType {
                    expected: "a map of strings",
                },
            );
            Err(())
        }
    }
}
