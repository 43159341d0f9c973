//! The machinepool role's value rules (MachinePool Role "Inputs", Job Inputs §4), one test per
//! rule.
#![allow(clippy::unwrap_used)]

mod render_support;

use contract::inputs::{
    Autoscaling, AutoscalingMode, ClusterHandoff, MachinePoolInputsSource, machinepool_inputs,
    parse_autoscaling, pool_replicas,
};
use contract::render::{escape_html, render_machinepool, tfvars_json};
use contract::variables::UserVariables;
use render_support::{IMAGE, parse, pool_source};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn tfvars(source: &MachinePoolInputsSource) -> Value {
    parse(&tfvars_json(
        &machinepool_inputs(source).unwrap().into(),
        &UserVariables::none(),
    ))
}

fn autoscaled(min: &str, max: &str) -> MachinePoolInputsSource {
    MachinePoolInputsSource {
        autoscaler_min_size: Some(min.into()),
        autoscaler_max_size: Some(max.into()),
        ..pool_source()
    }
}

const ON: Autoscaling = Autoscaling {
    enabled: true,
    min: 2,
    max: 5,
};

#[test]
fn replicas_is_spec_replicas_without_autoscaling() {
    assert_eq!(tfvars(&pool_source())["replicas"], 3);
}

#[test]
fn replicas_defaults_to_one_when_spec_replicas_is_unset() {
    let source = MachinePoolInputsSource {
        spec_replicas: None,
        ..pool_source()
    };
    assert_eq!(tfvars(&source)["replicas"], 1);
}

#[test]
fn replicas_explicit_zero_stays_zero() {
    let source = MachinePoolInputsSource {
        spec_replicas: Some(0),
        ..pool_source()
    };
    assert_eq!(tfvars(&source)["replicas"], 0);
}

#[test]
fn replicas_ignores_status_without_autoscaling() {
    let source = MachinePoolInputsSource {
        status_replicas: Some(9),
        ..pool_source()
    };
    assert_eq!(tfvars(&source)["replicas"], 3);
}

#[test]
fn replicas_is_the_observed_status_replicas_while_autoscaling() {
    assert_eq!(pool_replicas(Some(3), Some(4), ON), 4);
    let source = MachinePoolInputsSource {
        status_replicas: Some(4),
        ..autoscaled("2", "5")
    };
    assert_eq!(tfvars(&source)["replicas"], 4);
}

#[test]
fn replicas_falls_back_to_spec_replicas_before_the_first_refresh() {
    assert_eq!(pool_replicas(Some(3), None, ON), 3);
    assert_eq!(pool_replicas(None, None, ON), 2, "1 clamped up to min");
}

#[test]
fn replicas_is_clamped_into_min_max_while_autoscaling() {
    assert_eq!(pool_replicas(Some(3), Some(9), ON), 5);
    assert_eq!(pool_replicas(Some(3), Some(0), ON), 2);
    assert_eq!(pool_replicas(Some(30), None, ON), 5);
}

#[test]
fn replicas_is_never_negative() {
    assert_eq!(pool_replicas(Some(-4), None, Autoscaling::default()), 0);
}

#[test]
fn replicas_never_panics_on_an_inverted_range() {
    let inverted = Autoscaling {
        enabled: true,
        min: 5,
        max: 2,
    };
    assert_eq!(pool_replicas(Some(3), Some(4), inverted), 2);
}

#[test]
fn autoscaling_is_enabled_when_both_annotations_parse_with_min_le_max() {
    assert_eq!(
        parse_autoscaling(Some("2"), Some("5")),
        (ON, AutoscalingMode::Enabled)
    );
    assert_eq!(
        parse_autoscaling(Some("0"), Some("0")),
        (
            Autoscaling {
                enabled: true,
                min: 0,
                max: 0
            },
            AutoscalingMode::Enabled
        )
    );
    assert_eq!(
        tfvars(&autoscaled("2", "5"))["autoscaling"],
        json!({"enabled": true, "min": 2, "max": 5})
    );
}

#[test]
fn autoscaling_is_disabled_without_annotations() {
    assert_eq!(
        parse_autoscaling(None, None),
        (Autoscaling::default(), AutoscalingMode::Disabled)
    );
    assert_eq!(
        tfvars(&pool_source())["autoscaling"],
        json!({"enabled": false, "min": 0, "max": 0})
    );
}

#[test]
fn autoscaling_annotations_incomplete_unparsable_or_inverted_are_invalid() {
    for (min, max) in [
        (Some("2"), None),
        (None, Some("5")),
        (Some("two"), Some("5")),
        (Some("2"), Some("")),
        (Some(" 2"), Some("5")),
        (Some("6"), Some("5")),
        (Some("-1"), Some("5")),
        (Some("2"), Some("99999999999")),
    ] {
        assert_eq!(
            parse_autoscaling(min, max),
            (Autoscaling::default(), AutoscalingMode::AnnotationsInvalid),
            "{min:?} {max:?}"
        );
    }
}

#[test]
fn failure_domains_is_an_empty_list_when_unset() {
    assert_eq!(tfvars(&pool_source())["failure_domains"], json!([]));
}

#[test]
fn failure_domains_is_machinepool_failure_domains_verbatim() {
    let source = MachinePoolInputsSource {
        failure_domains: Some(vec!["zone-c".into(), "zone-a".into()]),
        ..pool_source()
    };
    assert_eq!(
        tfvars(&source)["failure_domains"],
        json!(["zone-c", "zone-a"])
    );
}

#[test]
fn cluster_failure_domains_come_from_the_cluster_state() {
    assert_eq!(
        tfvars(&pool_source())["cluster_failure_domains"],
        json!(["zone-a", "zone-b"])
    );
}

#[test]
fn cluster_failure_domains_come_from_status_for_an_externally_managed_cluster() {
    let source = MachinePoolInputsSource {
        cluster: ClusterHandoff::ExternallyManaged {
            status_failure_domains: vec!["dc-2".into(), "dc-1".into(), "dc-2".into()],
        },
        ..pool_source()
    };
    let v = tfvars(&source);
    assert_eq!(v["cluster_failure_domains"], json!(["dc-1", "dc-2"]));
    assert_eq!(v["captf_cluster_outputs"], json!({}));
}

#[test]
fn node_labels_are_the_template_labels_verbatim() {
    let labels = BTreeMap::from([
        ("node-role.example.com/batch".to_owned(), String::new()),
        ("tier".to_owned(), "gold".to_owned()),
    ]);
    let source = MachinePoolInputsSource {
        node_labels: Some(labels),
        ..pool_source()
    };
    assert_eq!(
        tfvars(&source)["node_labels"],
        json!({"node-role.example.com/batch": "", "tier": "gold"})
    );
}

#[test]
fn node_labels_are_an_empty_map_when_absent() {
    let source = MachinePoolInputsSource {
        node_labels: None,
        ..pool_source()
    };
    assert_eq!(tfvars(&source)["node_labels"], json!({}));
}

#[test]
fn kubernetes_version_is_null_when_unset() {
    let source = MachinePoolInputsSource {
        version: None,
        ..pool_source()
    };
    assert_eq!(tfvars(&source)["kubernetes_version"], Value::Null);
    let rke2 = MachinePoolInputsSource {
        version: Some("v1.31.4+rke2r1".into()),
        ..pool_source()
    };
    assert_eq!(tfvars(&rke2)["kubernetes_version"], "v1.31.4+rke2r1");
}

#[test]
fn pool_role_escapes_html_characters_in_every_string() {
    let source = MachinePoolInputsSource {
        node_labels: Some(BTreeMap::from([("a&b".into(), "x>y".into())])),
        ..pool_source()
    };
    let rendered = render_machinepool(&source, &UserVariables::none(), IMAGE).unwrap();
    let raw = &rendered.tfvars_json;
    assert!(
        raw.contains(r#""note": "a\u003cb \u0026 c\u003ed""#),
        "{raw}"
    );
    assert!(raw.contains(r#""a\u0026b": "x\u003ey""#), "{raw}");
    assert!(!raw.contains('<') && !raw.contains('>') && !raw.contains('&'));
}

#[test]
fn pool_role_escaping_decodes_to_the_same_values() {
    let source = pool_source();
    let rendered = render_machinepool(&source, &UserVariables::none(), IMAGE).unwrap();
    let inputs = machinepool_inputs(&source).unwrap();
    let plain = contract::inputs::RoleInputs::from(inputs).to_map();
    assert_eq!(parse(&rendered.tfvars_json), Value::Object(plain));
    assert_eq!(
        parse(&rendered.tfvars_json)["captf_cluster_outputs"]["note"],
        "a<b & c>d"
    );
}

#[test]
fn escape_html_replaces_exactly_three_characters() {
    assert_eq!(
        escape_html(r#"{"k":"<a href='x'>&amp;</a> é"}"#),
        r#"{"k":"\u003ca href='x'\u003e\u0026amp;\u003c/a\u003e é"}"#
    );
}
