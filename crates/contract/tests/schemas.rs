//! The JSON Schemas in `schemas/`: well-formed draft 2020-12, resolvable offline, and every
//! example behaves as its name says.
#![allow(clippy::unwrap_used)]

mod render_support;

use render_support::{
    SCHEMAS, error_paths, read_json, schema, schemas_dir, validator, validator_for,
};
use serde_json::{Value, json};

fn example(name: &str, which: &str) -> Value {
    read_json(&schemas_dir().join(format!("examples/{name}.{which}.json")))
}

#[test]
fn every_schema_is_a_valid_draft_2020_12_schema() {
    for name in SCHEMAS {
        let doc = schema(name);
        assert_eq!(
            doc["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
        assert!(
            jsonschema::meta::is_valid(&doc),
            "{name} is not a valid schema"
        );
        assert_eq!(
            doc["$id"],
            format!("https://captf.io/schemas/contract/v1alpha1/{name}.json")
        );
    }
}

/// `definitions` has no root type: its examples map each `$defs` entry to an instance.
fn check_definitions(which: &str) -> Vec<(String, Vec<String>)> {
    let examples = example("definitions", which);
    let defs = schema("definitions");
    let mut results = Vec::new();
    for (def, instance) in examples.as_object().unwrap() {
        assert!(defs["$defs"].get(def).is_some(), "unknown definition {def}");
        let v = validator_for(&json!({
            "$ref": format!("https://captf.io/schemas/contract/v1alpha1/definitions.json#/$defs/{def}")
        }));
        results.push((def.clone(), error_paths(&v, instance)));
    }
    results
}

#[test]
fn valid_examples_pass() {
    for name in SCHEMAS.iter().filter(|n| **n != "definitions") {
        let errors = error_paths(&validator(name), &example(name, "valid"));
        assert!(errors.is_empty(), "{name}.valid.json: {errors:?}");
    }
    for (def, errors) in check_definitions("valid") {
        assert!(
            errors.is_empty(),
            "definitions.valid.json {def}: {errors:?}"
        );
    }
}

#[test]
fn invalid_examples_fail_where_they_are_broken() {
    // A nullable property reports its error at the property itself (the `anyOf` of null or
    // the type), not deeper; "" is the root (a missing or an unexpected key).
    let expected: &[(&str, &[&str])] = &[
        (
            "cluster-inputs",
            &["/control_plane_endpoint", "/cluster_network"],
        ),
        (
            "cluster-outputs",
            &["/control_plane_endpoint", "/health/state"],
        ),
        ("machine-inputs", &["", "/bootstrap_data"]),
        ("machine-outputs", &["/provider_id", "/addresses"]),
        ("machinepool-inputs", &["/replicas", "/autoscaling"]),
        (
            "machinepool-outputs",
            &["/provider_id_list", "/replicas", "/instances"],
        ),
    ];
    for (name, paths) in expected {
        let errors = error_paths(&validator(name), &example(name, "invalid"));
        assert!(!errors.is_empty(), "{name}.invalid.json passed");
        for path in *paths {
            assert!(
                errors.iter().any(|e| e == path),
                "{name}.invalid.json: no error at {path:?} in {errors:?}"
            );
        }
    }
    for (def, errors) in check_definitions("invalid") {
        assert!(!errors.is_empty(), "definitions.invalid.json {def} passed");
    }
}

#[test]
fn inputs_are_closed_and_outputs_are_open() {
    let mut cluster = example("cluster-inputs", "valid");
    cluster["instance_type"] = json!("m6i.xlarge");
    assert!(!validator("cluster-inputs").is_valid(&cluster));
    let mut tags = example("cluster-inputs", "valid");
    tags["captf_tags"]["team"] = json!("a");
    assert!(!validator("cluster-inputs").is_valid(&tags));
    let mut outputs = example("machine-outputs", "valid");
    outputs["extra"] = json!({ "anything": [1, 2] });
    outputs["health"]["observed_at"] = json!("now");
    assert!(validator("machine-outputs").is_valid(&outputs));
}

#[test]
fn cluster_inputs_accept_captf_cluster_outputs_only_as_null() {
    let mut cluster = example("cluster-inputs", "valid");
    cluster["captf_cluster_outputs"] = Value::Null;
    assert!(validator("cluster-inputs").is_valid(&cluster));
    cluster["captf_cluster_outputs"] = json!({});
    assert!(!validator("cluster-inputs").is_valid(&cluster));
}

#[test]
fn every_schema_has_both_examples() {
    for name in SCHEMAS {
        for which in ["valid", "invalid"] {
            assert!(
                schemas_dir()
                    .join(format!("examples/{name}.{which}.json"))
                    .is_file(),
                "missing {name}.{which}.json"
            );
        }
    }
}

/// The output schemas agree with the decoder: an absent contract output reads as null (OpenTofu
/// and Terraform drop null root outputs from state), so none is required on its own, and a state
/// with none of the role's contract outputs at all is `OutputsMissing`.
#[test]
fn outputs_schemas_accept_absent_outputs_as_the_decoder_does() {
    use contract::outputs::{
        CLUSTER_OUTPUTS, MACHINE_OUTPUTS, MACHINEPOOL_OUTPUTS, OutputsReason, RootOutput,
        RootOutputs, decode_cluster_outputs, decode_machine_outputs, decode_machinepool_outputs,
    };
    fn reason(role: &str, value: &Value) -> OutputsReason {
        let outputs: RootOutputs = value
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), RootOutput::new(v.clone())))
            .collect();
        match role {
            "cluster" => decode_cluster_outputs(&outputs).verdict.reason(),
            "machine" => decode_machine_outputs(&outputs, None).verdict.reason(),
            _ => decode_machinepool_outputs(&outputs).verdict.reason(),
        }
    }
    for (role, names) in [
        ("cluster", CLUSTER_OUTPUTS),
        ("machine", MACHINE_OUTPUTS),
        ("machinepool", MACHINEPOOL_OUTPUTS),
    ] {
        let name = format!("{role}-outputs");
        let v = validator(&name);
        let full = example(&name, "valid");
        for absent in names {
            let mut outputs = full.clone();
            outputs.as_object_mut().unwrap().remove(*absent);
            assert!(
                v.is_valid(&outputs),
                "{name} without {absent}: {:?}",
                error_paths(&v, &outputs)
            );
            assert_ne!(reason(role, &outputs), OutputsReason::OutputsMissing);
        }
        for none in [json!({}), json!({"extra": 1})] {
            assert_eq!(error_paths(&v, &none), vec![String::new()], "{name} {none}");
            assert_eq!(reason(role, &none), OutputsReason::OutputsMissing);
        }
    }
}
