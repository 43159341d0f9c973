//! The machine role's value rules (Machine Role "Inputs", Job Inputs §3 and §5), one test per
//! rule.
#![allow(clippy::unwrap_used)]

mod render_support;

use base64::Engine as _;
use contract::canonical::CanonicalError;
use contract::inputs::{
    BootstrapSource, ClusterHandoff, InputsError, MachineInputsSource, machine_inputs,
};
use contract::render::{RenderError, render_machine, tfvars_json};
use contract::variables::UserVariables;
use render_support::{IMAGE, machine_source, parse};
use serde_json::{Value, json};

fn tfvars(source: &MachineInputsSource) -> Value {
    parse(&tfvars_json(
        &machine_inputs(source).unwrap().into(),
        &UserVariables::none(),
    ))
}

fn decode(b64: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(b64.as_str().unwrap())
        .unwrap()
}

#[test]
fn bootstrap_data_is_standard_padded_base64_of_the_value_key() {
    let v = tfvars(&machine_source());
    assert_eq!(v["bootstrap_data"], "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtdCg==");
    assert_eq!(decode(&v["bootstrap_data"]), b"#cloud-config\nruncmd: []\n");
}

#[test]
fn bootstrap_data_is_base64_even_when_the_payload_is_not_utf8() {
    let gzip = vec![0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe, 0x00, 0x80];
    let source = MachineInputsSource {
        bootstrap: BootstrapSource {
            value: gzip.clone(),
            format: Some(b"cloud-config".to_vec()),
        },
        ..machine_source()
    };
    assert_eq!(decode(&tfvars(&source)["bootstrap_data"]), gzip);
}

#[test]
fn bootstrap_data_is_base64_whatever_the_format() {
    let source = MachineInputsSource {
        bootstrap: BootstrapSource {
            value: br#"{"ignition":{"version":"3.4.0"}}"#.to_vec(),
            format: Some(b"ignition".to_vec()),
        },
        ..machine_source()
    };
    let v = tfvars(&source);
    assert_eq!(
        decode(&v["bootstrap_data"]),
        br#"{"ignition":{"version":"3.4.0"}}"#
    );
    assert_eq!(v["bootstrap_format"], "ignition");
}

#[test]
fn bootstrap_format_defaults_to_cloud_config_when_the_key_is_absent() {
    for format in [None, Some(Vec::new())] {
        let source = MachineInputsSource {
            bootstrap: BootstrapSource {
                value: b"x".to_vec(),
                format,
            },
            ..machine_source()
        };
        assert_eq!(tfvars(&source)["bootstrap_format"], "cloud-config");
    }
}

#[test]
fn bootstrap_format_that_is_not_utf8_is_refused() {
    let source = MachineInputsSource {
        bootstrap: BootstrapSource {
            value: b"x".to_vec(),
            format: Some(vec![0xff, 0xfe]),
        },
        ..machine_source()
    };
    assert_eq!(
        machine_inputs(&source).unwrap_err(),
        InputsError::BootstrapFormatNotUtf8
    );
}

#[test]
fn bootstrap_data_is_a_sensitive_root_variable() {
    let rendered = render_machine(&machine_source(), &UserVariables::none(), IMAGE).unwrap();
    let root = parse(&rendered.main_tf_json);
    assert_eq!(
        root["variable"]["bootstrap_data"],
        json!({"type": "string", "sensitive": true})
    );
}

#[test]
fn bootstrap_data_never_appears_in_debug_output() {
    let secret = "TOP-SECRET-CA-KEY";
    let source = MachineInputsSource {
        bootstrap: BootstrapSource {
            value: secret.as_bytes().to_vec(),
            format: None,
        },
        ..machine_source()
    };
    let inputs = machine_inputs(&source).unwrap();
    let rendered = render_machine(&source, &UserVariables::none(), IMAGE).unwrap();
    let encoded = inputs.bootstrap_data.clone();
    for text in [
        format!("{source:?}"),
        format!("{inputs:?}"),
        format!("{rendered:?}"),
    ] {
        assert!(!text.contains(secret), "{text}");
        assert!(!text.contains(&encoded), "{text}");
    }
}

#[test]
fn machine_name_is_the_owning_machine_name() {
    let v = tfvars(&machine_source());
    assert_eq!(v["machine_name"], "prod-md-0-abcde-xyz12");
    assert_eq!(v["captf_object"]["name"], "prod-md-0-abcde");
}

#[test]
fn failure_domain_is_null_when_unset() {
    for fd in [None, Some(String::new())] {
        let source = MachineInputsSource {
            failure_domain: fd,
            ..machine_source()
        };
        assert_eq!(tfvars(&source)["failure_domain"], Value::Null);
    }
    let source = MachineInputsSource {
        failure_domain: Some("zone-a".into()),
        ..machine_source()
    };
    assert_eq!(tfvars(&source)["failure_domain"], "zone-a");
}

#[test]
fn kubernetes_version_is_machine_version_verbatim_with_distro_suffix() {
    let source = MachineInputsSource {
        version: Some("v1.31.4+rke2r1".into()),
        ..machine_source()
    };
    assert_eq!(tfvars(&source)["kubernetes_version"], "v1.31.4+rke2r1");
    let unset = MachineInputsSource {
        version: None,
        ..machine_source()
    };
    assert_eq!(tfvars(&unset)["kubernetes_version"], Value::Null);
}

#[test]
fn control_plane_follows_the_control_plane_label() {
    assert_eq!(tfvars(&machine_source())["control_plane"], false);
    let cp = MachineInputsSource {
        control_plane: true,
        ..machine_source()
    };
    assert_eq!(tfvars(&cp)["control_plane"], true);
}

#[test]
fn captf_cluster_outputs_is_the_cluster_exports_verbatim() {
    let exports = json!({"vip": "10.0.0.5", "pools": [{"id": 7, "tags": null}], "n": -3});
    let source = MachineInputsSource {
        cluster: ClusterHandoff::State {
            exports: exports.clone(),
            failure_domains: vec![],
        },
        ..machine_source()
    };
    assert_eq!(tfvars(&source)["captf_cluster_outputs"], exports);
}

#[test]
fn captf_cluster_outputs_is_empty_for_an_externally_managed_cluster() {
    let source = MachineInputsSource {
        cluster: ClusterHandoff::ExternallyManaged {
            status_failure_domains: vec!["zone-a".into()],
        },
        ..machine_source()
    };
    assert_eq!(tfvars(&source)["captf_cluster_outputs"], json!({}));
}

#[test]
fn machine_role_keeps_exports_characters_unescaped() {
    let rendered = render_machine(&machine_source(), &UserVariables::none(), IMAGE).unwrap();
    assert!(rendered.tfvars_json.contains(r#""note": "a<b & c>d""#));
    assert!(!rendered.tfvars_json.contains("\\u003c"));
}

#[test]
fn exports_with_a_fractional_or_exponent_number_cannot_be_rendered() {
    for raw in [r#"{"ratio": 0.5}"#, r#"{"big": [1e3]}"#] {
        let source = MachineInputsSource {
            cluster: ClusterHandoff::State {
                exports: serde_json::from_str(raw).unwrap(),
                failure_domains: vec![],
            },
            ..machine_source()
        };
        let err = render_machine(&source, &UserVariables::none(), IMAGE).unwrap_err();
        assert!(
            matches!(
                err,
                RenderError::Inputs(InputsError::ExportsNotCanonical(
                    CanonicalError::NonInteger { .. }
                ))
            ),
            "{err:?}"
        );
    }
}

#[test]
fn machine_tfvars_key_order_follows_the_contract() {
    let rendered = render_machine(&machine_source(), &UserVariables::none(), IMAGE).unwrap();
    let keys: Vec<String> = parse(&rendered.tfvars_json)
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        keys,
        [
            "captf_contract",
            "captf_cluster",
            "captf_object",
            "captf_tags",
            "captf_cluster_outputs",
            "machine_name",
            "bootstrap_data",
            "bootstrap_format",
            "failure_domain",
            "kubernetes_version",
            "control_plane"
        ]
    );
}
