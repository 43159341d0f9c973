//! The generated root module and the size cap (Module Contract "Injection mechanics", Job
//! Inputs §9), one test per rule.
#![allow(clippy::unwrap_used)]

mod render_support;

use contract::inputs::{
    BootstrapSource, MachineInputsSource, RoleInputs, cluster_inputs, contract_inputs,
    machine_inputs, machinepool_inputs,
};
use contract::names::ObjectKind;
use contract::render::{
    MAX_RENDERED_BYTES, RenderError, contract_outputs, render, render_machine, restore_main_tf_json,
};
use contract::variables::{
    NameError, SourceKind, UserVariables, VariablesFormat, VariablesSource, merge_variables,
};
use render_support::{IMAGE, cluster_source, machine_source, parse, pool_source};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn all_roles() -> Vec<RoleInputs> {
    vec![
        cluster_inputs(&cluster_source()).into(),
        machine_inputs(&machine_source()).unwrap().into(),
        machinepool_inputs(&pool_source()).unwrap().into(),
    ]
}

fn root(inputs: &RoleInputs, variables: &UserVariables) -> Value {
    parse(&render(inputs, variables, IMAGE).unwrap().main_tf_json)
}

fn variables(kind: ObjectKind) -> UserVariables {
    let secret = VariablesSource {
        kind: SourceKind::Secret,
        name: "db-credentials".into(),
        format: VariablesFormat::String,
        data: BTreeMap::from([("db_password".into(), b"hunter2".to_vec())]),
    };
    merge_variables(
        kind,
        &[secret],
        Some(&json!({"instance_type": "m6i.xlarge", "root_volume_gib": 100})),
    )
    .unwrap()
}

#[test]
fn backend_is_a_partial_kubernetes_stub() {
    for inputs in all_roles() {
        let root = root(&inputs, &UserVariables::none());
        assert_eq!(root["terraform"], json!({"backend": {"kubernetes": {}}}));
    }
}

#[test]
fn one_root_variable_per_contract_input() {
    for inputs in all_roles() {
        let root = root(&inputs, &UserVariables::none());
        let declared: Vec<&String> = root["variable"].as_object().unwrap().keys().collect();
        let expected: Vec<&str> = contract_inputs(inputs.kind())
            .iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(declared, expected);
        let tfvars: Vec<String> = inputs.to_map().keys().cloned().collect();
        assert_eq!(tfvars, expected, "tfvars keys and declarations agree");
    }
}

#[test]
fn nullable_contract_inputs_default_to_null() {
    let nullable: BTreeMap<ObjectKind, &[&str]> = BTreeMap::from([
        (
            ObjectKind::Cluster,
            &[
                "control_plane_endpoint",
                "kubernetes_version",
                "cluster_network",
            ][..],
        ),
        (
            ObjectKind::Machine,
            &[
                "captf_cluster_outputs",
                "failure_domain",
                "kubernetes_version",
            ][..],
        ),
        (
            ObjectKind::MachinePool,
            &["captf_cluster_outputs", "kubernetes_version"][..],
        ),
    ]);
    for inputs in all_roles() {
        let root = root(&inputs, &UserVariables::none());
        for (name, decl) in root["variable"].as_object().unwrap() {
            let expect_default = nullable[&inputs.kind()].contains(&name.as_str());
            assert_eq!(
                decl.as_object().unwrap().get("default"),
                expect_default.then_some(&Value::Null),
                "{name}"
            );
        }
    }
}

#[test]
fn only_bootstrap_data_is_a_sensitive_contract_input() {
    for inputs in all_roles() {
        let root = root(&inputs, &UserVariables::none());
        for (name, decl) in root["variable"].as_object().unwrap() {
            assert_eq!(
                decl.get("sensitive") == Some(&json!(true)),
                name == "bootstrap_data",
                "{name}"
            );
        }
    }
}

#[test]
fn contract_inputs_carry_the_contract_types() {
    let cluster = root(&all_roles()[0], &UserVariables::none());
    assert_eq!(
        cluster["variable"]["control_plane_endpoint"],
        json!({"type": "object({ host = string, port = number })", "default": null})
    );
    let pool = root(&all_roles()[2], &UserVariables::none());
    assert_eq!(
        pool["variable"]["autoscaling"],
        json!({"type": "object({ enabled = bool, min = number, max = number })"})
    );
    assert_eq!(
        pool["variable"]["captf_cluster_outputs"],
        json!({"type": "any", "default": null})
    );
}

#[test]
fn module_role_calls_the_module_and_forwards_every_variable_by_name() {
    for inputs in all_roles() {
        let vars = variables(inputs.kind());
        let root = root(&inputs, &vars);
        let module = root["module"]["role"].as_object().unwrap();
        assert_eq!(module["source"], "../../module");
        let declared: Vec<&String> = root["variable"].as_object().unwrap().keys().collect();
        assert_eq!(module.len(), declared.len() + 1, "nothing else is passed");
        for name in declared {
            assert_eq!(module[name.as_str()], format!("${{var.{name}}}"));
        }
    }
}

#[test]
fn every_contract_output_is_re_exported_sensitive() {
    for inputs in all_roles() {
        let root = root(&inputs, &UserVariables::none());
        let outputs = root["output"].as_object().unwrap();
        let names: Vec<&String> = outputs.keys().collect();
        assert_eq!(names, contract_outputs(inputs.kind()));
        for (name, output) in outputs {
            assert_eq!(
                output,
                &json!({"value": format!("${{module.role.{name}}}"), "sensitive": true})
            );
        }
    }
}

#[test]
fn user_variables_are_declared_without_a_type() {
    for inputs in all_roles() {
        let root = root(&inputs, &variables(inputs.kind()));
        assert_eq!(root["variable"]["instance_type"], json!({}));
        assert_eq!(root["variable"]["root_volume_gib"], json!({}));
    }
}

#[test]
fn user_variables_from_a_secret_are_declared_sensitive() {
    for inputs in all_roles() {
        let root = root(&inputs, &variables(inputs.kind()));
        assert_eq!(root["variable"]["db_password"], json!({"sensitive": true}));
    }
}

#[test]
fn user_variables_are_valued_in_tfvars_next_to_the_contract_inputs() {
    let inputs = &all_roles()[1];
    let rendered = render(inputs, &variables(ObjectKind::Machine), IMAGE).unwrap();
    let tfvars = parse(&rendered.tfvars_json);
    assert_eq!(tfvars["instance_type"], "m6i.xlarge");
    assert_eq!(tfvars["root_volume_gib"], 100);
    assert_eq!(tfvars["db_password"], "hunter2");
    assert_eq!(tfvars["machine_name"], "prod-md-0-abcde-xyz12");
}

#[test]
fn variables_reserved_for_the_role_are_refused_at_render() {
    // machine_name is fine on a cluster, but not on a machine.
    let vars = merge_variables(
        ObjectKind::Cluster,
        &[],
        Some(&json!({"machine_name": "x"})),
    )
    .unwrap();
    assert!(render(&all_roles()[0], &vars, IMAGE).is_ok());
    assert_eq!(
        render(&all_roles()[1], &vars, IMAGE).unwrap_err(),
        RenderError::InvalidVariable {
            name: "machine_name".into(),
            reason: NameError::ContractInput { role: "machine" }
        }
    );
}

#[test]
fn restore_root_is_the_backend_block_alone() {
    assert_eq!(
        parse(&restore_main_tf_json()),
        json!({"terraform": {"backend": {"kubernetes": {}}}})
    );
}

#[test]
fn total_bytes_counts_both_files() {
    let rendered = render(&all_roles()[0], &UserVariables::none(), IMAGE).unwrap();
    assert_eq!(
        rendered.total_bytes(),
        rendered.main_tf_json.len() + rendered.tfvars_json.len()
    );
}

#[test]
fn inputs_over_one_million_bytes_are_too_large() {
    let small = render_machine(&machine_source(), &UserVariables::none(), IMAGE).unwrap();
    let overhead = small.total_bytes() - "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtdCg==".len();
    // Base64 of n bytes (n a multiple of 3) is 4n/3 characters: pick n so the total lands
    // exactly on the cap, then one step (3 bytes, 4 characters) over it.
    let room = MAX_RENDERED_BYTES - overhead;
    let exact = room / 4 * 3;
    let with_value = |n: usize| MachineInputsSource {
        bootstrap: BootstrapSource {
            value: vec![b'a'; n],
            format: None,
        },
        ..machine_source()
    };
    let fits = render_machine(&with_value(exact), &UserVariables::none(), IMAGE).unwrap();
    assert!(fits.total_bytes() <= MAX_RENDERED_BYTES);
    assert!(fits.total_bytes() > MAX_RENDERED_BYTES - 4);
    let err = render_machine(&with_value(exact + 3), &UserVariables::none(), IMAGE).unwrap_err();
    assert_eq!(
        err,
        RenderError::InputsTooLarge {
            size: fits.total_bytes() + 4
        }
    );
    assert!(
        err.to_string()
            .contains(&(fits.total_bytes() + 4).to_string())
    );
}
