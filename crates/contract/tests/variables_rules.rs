//! User variables (Module Variables, Common "User variables"), one test per rule.
#![allow(clippy::unwrap_used, clippy::needless_pass_by_value)]

use contract::names::ObjectKind;
use contract::variables::{
    MAX_INLINE_VARIABLES, MAX_VARIABLES_SOURCES, META_ARGUMENTS, NAME_PATTERN, NameError,
    SourceKind, UserVariables, VariableOrigin, VariablesError, VariablesFormat, VariablesSource,
    check_inline_variables, check_sources_count, check_variable_name, is_identifier,
    is_reserved_variable_name, merge_variables,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn source(
    kind: SourceKind,
    name: &str,
    format: VariablesFormat,
    data: &[(&str, &[u8])],
) -> VariablesSource {
    VariablesSource {
        kind,
        name: name.into(),
        format,
        data: data
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
            .collect(),
    }
}

fn cm(name: &str, data: &[(&str, &[u8])]) -> VariablesSource {
    source(SourceKind::ConfigMap, name, VariablesFormat::String, data)
}

fn secret(name: &str, data: &[(&str, &[u8])]) -> VariablesSource {
    source(SourceKind::Secret, name, VariablesFormat::String, data)
}

fn merge(
    sources: &[VariablesSource],
    inline: Option<Value>,
) -> Result<UserVariables, VariablesError> {
    merge_variables(ObjectKind::Machine, sources, inline.as_ref())
}

#[test]
fn names_are_terraform_identifiers() {
    for ok in ["a", "_", "instance_type", "Disk-Size", "x9", "_9-a"] {
        assert!(is_identifier(ok), "{ok}");
        assert_eq!(check_variable_name(ObjectKind::Machine, ok), Ok(()));
    }
    for bad in ["", "9x", "-a", "a.b", "a b", "é", "a/b", "a:b"] {
        assert_eq!(
            check_variable_name(ObjectKind::Machine, bad),
            Err(NameError::NotAnIdentifier),
            "{bad:?}"
        );
    }
}

#[test]
fn every_captf_prefixed_name_is_reserved() {
    for name in [
        "captf_",
        "captf_foo",
        "captf_contract",
        "captf_cluster_outputs",
    ] {
        for kind in [
            ObjectKind::Cluster,
            ObjectKind::Machine,
            ObjectKind::MachinePool,
        ] {
            assert_eq!(
                check_variable_name(kind, name),
                Err(NameError::ReservedPrefix)
            );
            assert!(is_reserved_variable_name(kind, name));
        }
    }
    assert_eq!(
        check_variable_name(ObjectKind::Machine, "CAPTF_foo"),
        Ok(())
    );
}

#[test]
fn contract_inputs_of_the_role_are_reserved() {
    let role = |kind| check_variable_name(kind, "machine_name");
    assert_eq!(
        role(ObjectKind::Machine),
        Err(NameError::ContractInput { role: "machine" })
    );
    assert_eq!(role(ObjectKind::Cluster), Ok(()), "not a cluster input");
    assert_eq!(
        check_variable_name(ObjectKind::Cluster, "control_plane_initialized"),
        Err(NameError::ContractInput { role: "cluster" })
    );
    for name in [
        "replicas",
        "autoscaling",
        "node_labels",
        "bootstrap_data",
        "kubernetes_version",
    ] {
        assert_eq!(
            check_variable_name(ObjectKind::MachinePool, name),
            Err(NameError::ContractInput {
                role: "machinepool"
            }),
            "{name}"
        );
    }
}

#[test]
fn module_meta_arguments_are_reserved() {
    assert_eq!(
        META_ARGUMENTS,
        [
            "source",
            "version",
            "providers",
            "count",
            "for_each",
            "depends_on",
            "lifecycle",
            "locals"
        ]
    );
    for name in META_ARGUMENTS {
        assert_eq!(
            check_variable_name(ObjectKind::Cluster, name),
            Err(NameError::MetaArgument)
        );
    }
}

#[test]
fn a_later_source_wins_over_an_earlier_one() {
    let vars = merge(
        &[
            cm("a", &[("size", b"small")]),
            cm("b", &[("size", b"large")]),
        ],
        None,
    )
    .unwrap();
    assert_eq!(vars.get("size").unwrap().value, "large");
}

#[test]
fn inline_variables_win_over_every_source() {
    let vars = merge(
        &[cm("a", &[("size", b"small"), ("zone", b"z1")])],
        Some(json!({"size": "xl"})),
    )
    .unwrap();
    assert_eq!(vars.get("size").unwrap().value, "xl");
    assert_eq!(vars.get("zone").unwrap().value, "z1");
}

#[test]
fn string_format_passes_each_value_as_a_string() {
    let vars = merge(
        &[cm(
            "a",
            &[("disk", b"100"), ("on", b"true"), ("list", b"[1]")],
        )],
        None,
    )
    .unwrap();
    assert_eq!(vars.get("disk").unwrap().value, json!("100"));
    assert_eq!(vars.get("on").unwrap().value, json!("true"));
    assert_eq!(vars.get("list").unwrap().value, json!("[1]"));
}

#[test]
fn json_format_parses_each_value() {
    let s = source(
        SourceKind::ConfigMap,
        "j",
        VariablesFormat::Json,
        &[
            ("subnets", br#"["a","b"]"#),
            ("team", br#"{"name":"a"}"#),
            ("n", b"3"),
            ("s", br#""x""#),
        ],
    );
    let vars = merge(&[s], None).unwrap();
    assert_eq!(vars.get("subnets").unwrap().value, json!(["a", "b"]));
    assert_eq!(vars.get("team").unwrap().value, json!({"name": "a"}));
    assert_eq!(vars.get("n").unwrap().value, json!(3));
    assert_eq!(vars.get("s").unwrap().value, json!("x"));
}

#[test]
fn invalid_json_names_the_source_and_key_never_the_value() {
    let s = source(
        SourceKind::Secret,
        "db",
        VariablesFormat::Json,
        &[("password", b"hunter2-not-json")],
    );
    let err = merge(&[s], None).unwrap_err();
    assert!(matches!(
        &err,
        VariablesError::InvalidJson { origin: VariableOrigin::Source { kind: SourceKind::Secret, name }, key, .. }
            if name == "db" && key == "password"
    ));
    let text = err.to_string();
    assert!(
        text.contains("Secret db") && text.contains("password"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn values_must_be_utf8() {
    let err = merge(&[secret("s", &[("blob", &[0xff, 0xfe])])], None).unwrap_err();
    assert_eq!(
        err,
        VariablesError::NotUtf8 {
            origin: VariableOrigin::Source {
                kind: SourceKind::Secret,
                name: "s".into()
            },
            key: "blob".into()
        }
    );
}

#[test]
fn a_variable_is_sensitive_when_its_winning_value_comes_from_a_secret() {
    let vars = merge(
        &[cm("a", &[("pw", b"x")]), secret("b", &[("pw", b"y")])],
        None,
    )
    .unwrap();
    assert!(vars.get("pw").unwrap().sensitive);
    assert_eq!(vars.sensitive_names(), ["pw"]);
}

#[test]
fn a_variable_is_not_sensitive_when_a_configmap_or_inline_value_wins_over_a_secret() {
    let vars = merge(
        &[secret("a", &[("pw", b"x")]), cm("b", &[("pw", b"y")])],
        None,
    )
    .unwrap();
    assert!(!vars.get("pw").unwrap().sensitive);
    let vars = merge(&[secret("a", &[("pw", b"x")])], Some(json!({"pw": "z"}))).unwrap();
    assert!(!vars.get("pw").unwrap().sensitive);
}

#[test]
fn sensitive_values_never_appear_in_debug_output() {
    let vars = merge(&[secret("a", &[("pw", b"hunter2")])], None).unwrap();
    assert!(!format!("{vars:?}").contains("hunter2"));
    assert!(!format!("{:?}", secret("a", &[("pw", b"hunter2")])).contains("hunter2"));
}

#[test]
fn at_most_sixteen_sources() {
    assert_eq!(MAX_VARIABLES_SOURCES, 16);
    assert_eq!(check_sources_count(16), Ok(()));
    let sources: Vec<_> = (0..17).map(|i| cm(&format!("s{i}"), &[])).collect();
    assert_eq!(
        merge(&sources, None).unwrap_err(),
        VariablesError::TooManySources { count: 17 }
    );
    assert!(merge(&sources[..16], None).unwrap().is_empty());
}

#[test]
fn at_most_256_inline_keys_and_at_least_one() {
    assert_eq!(MAX_INLINE_VARIABLES, 256);
    let many = |n: usize| Value::Object((0..n).map(|i| (format!("v{i}"), json!(i))).collect());
    assert_eq!(
        check_inline_variables(ObjectKind::Cluster, &many(256)),
        Ok(())
    );
    assert_eq!(
        check_inline_variables(ObjectKind::Cluster, &many(257)),
        Err(VariablesError::TooManyInlineVariables { count: 257 })
    );
    assert_eq!(
        check_inline_variables(ObjectKind::Cluster, &json!({})),
        Err(VariablesError::EmptyInlineVariables)
    );
    assert_eq!(
        check_inline_variables(ObjectKind::Cluster, &json!(["a"])),
        Err(VariablesError::InlineNotAnObject)
    );
}

#[test]
fn a_bad_key_is_refused_even_in_a_losing_source() {
    let err = merge(
        &[
            cm("first", &[("count", b"3")]),
            cm("second", &[("size", b"1")]),
        ],
        Some(json!({"count": 1})),
    )
    .unwrap_err();
    assert_eq!(
        err,
        VariablesError::InvalidName {
            origin: VariableOrigin::Source {
                kind: SourceKind::ConfigMap,
                name: "first".into()
            },
            key: "count".into(),
            reason: NameError::MetaArgument
        }
    );
    assert!(err.to_string().contains("ConfigMap first"));
}

#[test]
fn a_bad_inline_key_names_spec_variables() {
    let err = merge(&[], Some(json!({"captf_tags": {}}))).unwrap_err();
    assert_eq!(
        err,
        VariablesError::InvalidName {
            origin: VariableOrigin::Inline,
            key: "captf_tags".into(),
            reason: NameError::ReservedPrefix
        }
    );
    assert!(
        err.to_string()
            .starts_with("spec.variables: key \"captf_tags\"")
    );
}

#[test]
fn fractional_or_exponent_numbers_are_refused_in_json_and_inline_values() {
    let s = source(
        SourceKind::ConfigMap,
        "j",
        VariablesFormat::Json,
        &[("ratio", br#"{"r": [0.5]}"#)],
    );
    assert_eq!(
        merge(&[s], None).unwrap_err(),
        VariablesError::NonIntegerNumber {
            origin: VariableOrigin::Source {
                kind: SourceKind::ConfigMap,
                name: "j".into()
            },
            key: "ratio".into(),
            path: "$.r[0]".into()
        }
    );
    let inline: Value = serde_json::from_str(r#"{"big": 1e3}"#).unwrap();
    assert!(matches!(
        merge(&[], Some(inline)).unwrap_err(),
        VariablesError::NonIntegerNumber {
            origin: VariableOrigin::Inline,
            ..
        }
    ));
    let as_string = merge(&[cm("s", &[("ratio", b"0.5")])], None).unwrap();
    assert_eq!(as_string.get("ratio").unwrap().value, "0.5");
}

#[test]
fn no_variables_at_all_is_empty() {
    assert!(merge(&[], None).unwrap().is_empty());
    assert_eq!(merge(&[], None).unwrap(), UserVariables::none());
}

proptest! {
    #[test]
    fn identifier_check_matches_the_documented_pattern(name in "[a-zA-Z0-9_.:/ é-]{0,12}") {
        let re = regex::Regex::new(NAME_PATTERN).unwrap();
        prop_assert_eq!(is_identifier(&name), re.is_match(&name));
    }

    #[test]
    fn errors_never_carry_a_value(value in proptest::collection::vec(any::<u8>(), 1..64), key in "[a-z]{1,8}") {
        let marker = "S3CRET-MARKER";
        let mut bytes = marker.as_bytes().to_vec();
        bytes.extend(&value);
        for format in [VariablesFormat::String, VariablesFormat::Json] {
            let s = VariablesSource {
                kind: SourceKind::Secret,
                name: "creds".into(),
                format,
                data: BTreeMap::from([(key.clone(), bytes.clone())]),
            };
            if let Err(err) = merge(&[s], None) {
                prop_assert!(!err.to_string().contains(marker));
                let debug = format!("{err:?}");
                prop_assert!(!debug.contains(marker));
            }
        }
    }
}
