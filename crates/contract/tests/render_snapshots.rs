//! Snapshots of the rendered files of every role, byte for byte (review a change to any of them
//! as a change to what every module receives).
#![allow(clippy::unwrap_used)]

mod render_support;

use contract::names::ObjectKind;
use contract::render::{
    RenderedInputs, render_cluster, render_machine, render_machinepool, restore_main_tf_json,
};
use contract::variables::{
    SourceKind, UserVariables, VariablesFormat, VariablesSource, merge_variables,
};
use render_support::{IMAGE, cluster_source, machine_source, pool_source};
use serde_json::json;
use std::collections::BTreeMap;

fn snapshot(name: &str, rendered: &RenderedInputs) {
    insta::assert_snapshot!(format!("{name}_main_tf_json"), rendered.main_tf_json);
    insta::assert_snapshot!(format!("{name}_tfvars_json"), rendered.tfvars_json);
    insta::assert_snapshot!(format!("{name}_inputs_hash"), rendered.inputs_hash);
}

#[test]
fn cluster_role_files() {
    snapshot(
        "cluster",
        &render_cluster(&cluster_source(), &UserVariables::none(), IMAGE).unwrap(),
    );
}

#[test]
fn machine_role_files() {
    snapshot(
        "machine",
        &render_machine(&machine_source(), &UserVariables::none(), IMAGE).unwrap(),
    );
}

#[test]
fn machinepool_role_files() {
    let mut source = pool_source();
    source.autoscaler_min_size = Some("2".into());
    source.autoscaler_max_size = Some("5".into());
    source.status_replicas = Some(4);
    snapshot(
        "machinepool",
        &render_machinepool(&source, &UserVariables::none(), IMAGE).unwrap(),
    );
}

#[test]
fn machine_role_files_with_user_variables() {
    let sources = [
        VariablesSource {
            kind: SourceKind::ConfigMap,
            name: "aws-sizing".into(),
            format: VariablesFormat::String,
            data: BTreeMap::from([("instance_type".into(), b"m6i.large".to_vec())]),
        },
        VariablesSource {
            kind: SourceKind::Secret,
            name: "db-credentials".into(),
            format: VariablesFormat::Json,
            data: BTreeMap::from([(
                "db".into(),
                br#"{"user": "app", "password": "hunter2"}"#.to_vec(),
            )]),
        },
    ];
    let vars = merge_variables(
        ObjectKind::Machine,
        &sources,
        Some(&json!({"instance_type": "m6i.xlarge", "subnet_ids": ["subnet-0a1", "subnet-0b2"]})),
    )
    .unwrap();
    snapshot(
        "machine_with_variables",
        &render_machine(&machine_source(), &vars, IMAGE).unwrap(),
    );
}

#[test]
fn restore_root_file() {
    insta::assert_snapshot!("restore_main_tf_json", restore_main_tf_json());
}
