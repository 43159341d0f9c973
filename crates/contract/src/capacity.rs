//! A machine image's capacity labels, read for TerraformMachineTemplate's `status.capacity` and
//! `status.nodeInfo` (spec: Image Contract "OCI labels", Machine Role "Autoscale-from-zero",
//! The Kinds "Templates"; INTERFACE-FACTS §1 `CapacityResolved`).
//!
//! `io.captf.capacity` is a JSON object of resource name to Kubernetes quantity (`{"cpu": "4",
//! "memory": "16Gi"}`); `io.captf.node-info` a JSON object with `architecture` and
//! `operatingSystem`. Both are optional, and an empty value counts as absent. A label that is present but wrong fails the whole
//! resolution with the label's name and the rule it broke, so nothing partial is written.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// The capacity label: resource name to quantity.
pub const CAPACITY_LABEL: &str = "io.captf.capacity";
/// The node-info label: architecture and operating system.
pub const NODE_INFO_LABEL: &str = "io.captf.node-info";
/// The architectures `status.nodeInfo.architecture` accepts (Cluster API's enum).
pub const ARCHITECTURES: &[&str] = &["amd64", "arm64", "s390x", "ppc64le"];
/// The longest `operatingSystem`.
pub const MAX_OPERATING_SYSTEM: usize = 64;
/// The most resources one capacity label may declare.
pub const MAX_RESOURCES: usize = 64;

/// `status.nodeInfo` as the label declares it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// One of [`ARCHITECTURES`].
    pub architecture: Option<String>,
    /// For example `linux`; 1 to 64 characters.
    pub operating_system: Option<String>,
}

/// What an image's labels declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capacity {
    /// Neither label is present (`CapacityResolved=True/CapacityNotDeclared`).
    NotDeclared,
    /// At least one label is present, and every present one is valid
    /// (`CapacityResolved=True/CapacityResolved`).
    Resolved {
        /// From [`CAPACITY_LABEL`], each quantity in its canonical text; `None` without the label.
        capacity: Option<BTreeMap<String, String>>,
        /// From [`NODE_INFO_LABEL`]; `None` without the label.
        node_info: Option<NodeInfo>,
    },
}

/// A present label that cannot be used (`CapacityResolved=False/CapacityLabelInvalid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelError {
    /// The label's name.
    pub label: &'static str,
    /// What is wrong, naming the entry.
    pub message: String,
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "image label {}: {}", self.label, self.message)
    }
}

impl std::error::Error for LabelError {}

/// Reads the capacity labels out of an image config's labels.
pub fn resolve(labels: &BTreeMap<String, String>) -> Result<Capacity, LabelError> {
    // An empty value is what a Containerfile's `LABEL k="${ARG}"` leaves when the build arg is
    // unset: not declared.
    let present = |k: &str| labels.get(k).filter(|v| !v.trim().is_empty());
    let capacity = present(CAPACITY_LABEL);
    let node_info = present(NODE_INFO_LABEL);
    if capacity.is_none() && node_info.is_none() {
        return Ok(Capacity::NotDeclared);
    }
    Ok(Capacity::Resolved {
        capacity: capacity.map(|c| parse_capacity(c)).transpose()?,
        node_info: node_info.map(|n| parse_node_info(n)).transpose()?,
    })
}

fn invalid(label: &'static str, message: impl Into<String>) -> LabelError {
    LabelError {
        label,
        message: message.into(),
    }
}

fn json_object(
    label: &'static str,
    text: &str,
) -> Result<serde_json::Map<String, Value>, LabelError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(invalid(
            label,
            format!("must be a JSON object, not {}", json_type(&other)),
        )),
        Err(e) => Err(invalid(label, format!("is not JSON: {e}"))),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses `io.captf.capacity`: a non-empty object of resource name to non-negative quantity (a
/// string such as `"16Gi"`, or a JSON number).
pub fn parse_capacity(text: &str) -> Result<BTreeMap<String, String>, LabelError> {
    const L: &str = CAPACITY_LABEL;
    let map = json_object(L, text)?;
    if map.is_empty() {
        return Err(invalid(L, "declares no resource"));
    }
    if map.len() > MAX_RESOURCES {
        return Err(invalid(
            L,
            format!("declares {} resources, at most {MAX_RESOURCES}", map.len()),
        ));
    }
    let mut out = BTreeMap::new();
    for (name, value) in map {
        if let Err(rule) = check_resource_name(&name) {
            return Err(invalid(L, format!("resource name {name:?} {rule}")));
        }
        let quantity = match &value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(invalid(
                    L,
                    format!(
                        "{name}: the quantity must be a string or a number, not {}",
                        json_type(other)
                    ),
                ));
            }
        };
        match parse_quantity(&quantity) {
            Ok(q) if q.negative => {
                return Err(invalid(L, format!("{name}: {quantity:?} is negative")));
            }
            Ok(_) => {}
            Err(rule) => {
                return Err(invalid(
                    L,
                    format!("{name}: {quantity:?} is not a Kubernetes quantity: {rule}"),
                ));
            }
        }
        out.insert(name, quantity);
    }
    Ok(out)
}

/// Parses `io.captf.node-info`: `{"architecture": …, "operatingSystem": …}`, at least one of
/// them, nothing else.
pub fn parse_node_info(text: &str) -> Result<NodeInfo, LabelError> {
    const L: &str = NODE_INFO_LABEL;
    let map = json_object(L, text)?;
    let mut info = NodeInfo::default();
    for (key, value) in map {
        let Value::String(s) = &value else {
            return Err(invalid(
                L,
                format!("{key} must be a string, not {}", json_type(&value)),
            ));
        };
        match key.as_str() {
            "architecture" => {
                if !ARCHITECTURES.contains(&s.as_str()) {
                    return Err(invalid(
                        L,
                        format!(
                            "architecture {s:?} is not one of {}",
                            ARCHITECTURES.join(", ")
                        ),
                    ));
                }
                info.architecture = Some(s.clone());
            }
            "operatingSystem" => {
                let n = s.chars().count();
                if n == 0 || n > MAX_OPERATING_SYSTEM {
                    return Err(invalid(
                        L,
                        format!(
                            "operatingSystem must be 1 to {MAX_OPERATING_SYSTEM} characters, is {n}"
                        ),
                    ));
                }
                info.operating_system = Some(s.clone());
            }
            other => {
                return Err(invalid(
                    L,
                    format!("unknown key {other:?} (allowed: architecture, operatingSystem)"),
                ));
            }
        }
    }
    if info == NodeInfo::default() {
        return Err(invalid(
            L,
            "declares neither architecture nor operatingSystem",
        ));
    }
    Ok(info)
}

/// A resource name: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters, alphanumerics with `-`, `_` or `.` inside (Kubernetes' qualified name).
fn check_resource_name(name: &str) -> Result<(), &'static str> {
    let (prefix, local) = match name.split_once('/') {
        Some((p, l)) => (Some(p), l),
        None => (None, name),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !ok {
            return Err("has an invalid prefix (a lowercase DNS subdomain before the /)");
        }
    }
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    let ok = !local.is_empty()
        && local.len() <= 63
        && local.bytes().next().is_some_and(alnum)
        && local.bytes().last().is_some_and(alnum)
        && local
            .bytes()
            .all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(
            "is not a qualified name (at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends)",
        )
    }
}

/// A parsed Kubernetes quantity: only what the checks need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    /// Whether the number carries a `-` sign (and is not zero).
    pub negative: bool,
}

const BINARY_SI: &[&str] = &["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const DECIMAL_SI: &[&str] = &["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];

/// Checks Kubernetes' quantity grammar: a signed decimal number (`1`, `1.5`, `.5`, `5.`) and a
/// suffix — binary (`Ki` … `Ei`), decimal (`n`, `u`, `m`, none, `k`, `M` … `E`) or an exponent
/// (`e3`, `E-2`).
pub fn parse_quantity(text: &str) -> Result<Quantity, &'static str> {
    if text.is_empty() {
        return Err("it is empty");
    }
    if text.len() > 64 {
        return Err("it is longer than 64 characters");
    }
    let (negative, rest) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, suffix) = rest.split_at(number_len);
    let digits = number.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 || number.bytes().filter(|b| *b == b'.').count() > 1 {
        return Err("it does not start with a number");
    }
    let ok_suffix = BINARY_SI.contains(&suffix) || DECIMAL_SI.contains(&suffix) || exponent(suffix);
    if !ok_suffix {
        return Err(
            "its unit is none of Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent such as e3",
        );
    }
    let zero = number.bytes().all(|b| b == b'0' || b == b'.');
    Ok(Quantity {
        negative: negative && !zero,
    })
}

fn exponent(suffix: &str) -> bool {
    let Some(rest) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn no_label_is_not_declared() {
        assert_eq!(
            resolve(&labels(&[("org.opencontainers.image.title", "x")])),
            Ok(Capacity::NotDeclared)
        );
    }

    #[test]
    fn empty_labels_are_not_declared() {
        assert_eq!(
            resolve(&labels(&[(CAPACITY_LABEL, ""), (NODE_INFO_LABEL, " ")])),
            Ok(Capacity::NotDeclared)
        );
    }

    #[test]
    fn both_labels_resolve() {
        let got = resolve(&labels(&[
            (
                CAPACITY_LABEL,
                r#"{"cpu":"4","memory":"16Gi","nvidia.com/gpu":1,"ephemeral-storage":"100G"}"#,
            ),
            (
                NODE_INFO_LABEL,
                r#"{"architecture":"arm64","operatingSystem":"linux"}"#,
            ),
        ]))
        .expect("valid");
        let Capacity::Resolved {
            capacity,
            node_info,
        } = got
        else {
            panic!("resolved expected");
        };
        let capacity = capacity.expect("capacity");
        assert_eq!(capacity["cpu"], "4");
        assert_eq!(capacity["memory"], "16Gi");
        assert_eq!(capacity["nvidia.com/gpu"], "1");
        assert_eq!(
            node_info,
            Some(NodeInfo {
                architecture: Some("arm64".into()),
                operating_system: Some("linux".into())
            })
        );
    }

    #[test]
    fn one_label_resolves_alone() {
        let got = resolve(&labels(&[(CAPACITY_LABEL, r#"{"cpu":"500m"}"#)])).expect("valid");
        assert!(matches!(
            got,
            Capacity::Resolved {
                capacity: Some(_),
                node_info: None
            }
        ));
    }

    #[test]
    fn bad_labels_name_the_label_and_the_rule() {
        let cases: &[(&str, &str, &str)] = &[
            (CAPACITY_LABEL, "cpu=4", "is not JSON"),
            (
                CAPACITY_LABEL,
                r#"["cpu"]"#,
                "must be a JSON object, not an array",
            ),
            (CAPACITY_LABEL, "{}", "declares no resource"),
            (
                CAPACITY_LABEL,
                r#"{"memory":"16GB"}"#,
                "memory: \"16GB\" is not a Kubernetes quantity",
            ),
            (CAPACITY_LABEL, r#"{"cpu":"-2"}"#, "cpu: \"-2\" is negative"),
            (CAPACITY_LABEL, r#"{"cpu":-2}"#, "cpu: \"-2\" is negative"),
            (
                CAPACITY_LABEL,
                r#"{"cpu":true}"#,
                "must be a string or a number",
            ),
            (
                CAPACITY_LABEL,
                r#"{"bad name":"1"}"#,
                "resource name \"bad name\"",
            ),
            (
                NODE_INFO_LABEL,
                r#"{"architecture":"x86"}"#,
                "architecture \"x86\" is not one of",
            ),
            (NODE_INFO_LABEL, r#"{"os":"linux"}"#, "unknown key \"os\""),
            (NODE_INFO_LABEL, "{}", "declares neither"),
            (
                NODE_INFO_LABEL,
                r#"{"operatingSystem":""}"#,
                "1 to 64 characters",
            ),
            (NODE_INFO_LABEL, "linux", "is not JSON"),
        ];
        for (label, value, want) in cases {
            let err = resolve(&labels(&[(label, value)])).expect_err(value);
            assert_eq!(err.label, *label, "{value}");
            assert!(err.message.contains(want), "{value}: {}", err.message);
            assert!(
                err.to_string()
                    .starts_with(&format!("image label {label}: "))
            );
        }
    }

    #[test]
    fn one_bad_label_spoils_both() {
        let err = resolve(&labels(&[
            (CAPACITY_LABEL, r#"{"cpu":"4"}"#),
            (NODE_INFO_LABEL, r#"{"architecture":"mips"}"#),
        ]))
        .expect_err("invalid");
        assert_eq!(err.label, NODE_INFO_LABEL);
    }

    #[test]
    fn quantity_grammar() {
        for ok in [
            "0", "1", "1.5", ".5", "5.", "+3", "100m", "16Gi", "1Ei", "2e3", "2E-3", "1k", "3n",
            "-0",
        ] {
            assert!(parse_quantity(ok).is_ok_and(|q| !q.negative), "{ok}");
        }
        for bad in [
            "", "Gi", "1GB", "1.2.3", "1 Gi", "e3", "1e", "1K", "1gi", "--1", "0x10",
        ] {
            assert!(parse_quantity(bad).is_err(), "{bad}");
        }
        assert!(parse_quantity("-1m").is_ok_and(|q| q.negative));
    }
}
