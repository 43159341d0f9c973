//! The inputs hash (Job Inputs §7, Common "What is hashed"), one test per rule, plus the worked
//! example the Job Inputs chapter of the docs shows.
#![allow(clippy::unwrap_used)]

mod render_support;

use contract::canonical::{CanonicalError, canonical_json};
use contract::hash::{HashError, hash_document, hashed_document, inputs_hash, is_inputs_hash};
use contract::inputs::{
    ClusterHandoff, ClusterInputsSource, MachinePoolInputsSource, ObjectSource, RoleInputs,
    cluster_inputs, machinepool_inputs,
};
use contract::names::ObjectKind;
use contract::render::{render_cluster, render_machine, render_machinepool};
use contract::variables::{
    SourceKind, UserVariables, VariablesFormat, VariablesSource, merge_variables,
};
use render_support::{IMAGE, cluster_source, machine_source, parse, pool_source};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

fn cluster_hash(source: &ClusterInputsSource) -> String {
    render_cluster(source, &UserVariables::none(), IMAGE)
        .unwrap()
        .inputs_hash
}

fn pool_hash(source: &MachinePoolInputsSource) -> String {
    render_machinepool(source, &UserVariables::none(), IMAGE)
        .unwrap()
        .inputs_hash
}

/// The example of `docs/src/job-inputs.md` "Recomputing a hash by hand".
fn worked_example() -> ClusterInputsSource {
    ClusterInputsSource {
        object: ObjectSource {
            cluster_name: "demo".into(),
            namespace: "default".into(),
            object_name: "demo".into(),
            cloned_from_name: None,
        },
        topology_version: None,
        cluster_endpoint: None,
        object_endpoint: None,
        endpoint_source: None,
        control_plane_initialized: None,
        durable_control_plane_initialized: None,
        cluster_network: None,
    }
}

const WORKED_IMAGE: &str = "ghcr.io/example/cluster:v1";
const WORKED_CANONICAL: &str = r#"{"contract":"v1alpha1","image":"ghcr.io/example/cluster:v1","inputs":{"captf_cluster":{"name":"demo","namespace":"default"},"captf_contract":"v1alpha1","captf_object":{"kind":"TerraformCluster","name":"demo","namespace":"default"},"captf_tags":{"captf.io/cluster":"demo","captf.io/kind":"TerraformCluster","captf.io/managed-by":"captf","captf.io/name":"demo","captf.io/namespace":"default","captf.io/template":""},"cluster_network":null,"control_plane_endpoint":null,"control_plane_initialized":false,"kubernetes_version":null},"role":"cluster","scheme":"h2"}"#;
const WORKED_HASH: &str = "h2:457fc26551adf416cde00849c494ad0d912da26f2138e4feea2415f588e81f5f";

#[test]
fn worked_example_matches_the_docs() {
    let inputs: RoleInputs = cluster_inputs(&worked_example()).into();
    let doc = hashed_document(
        ObjectKind::Cluster,
        WORKED_IMAGE,
        inputs.hashed_map(),
        &UserVariables::none(),
    );
    assert_eq!(canonical_json(&doc).unwrap(), WORKED_CANONICAL);
    let by_hand = format!(
        "h2:{}",
        hex::encode(Sha256::digest(WORKED_CANONICAL.as_bytes()))
    );
    let rendered = render_cluster(&worked_example(), &UserVariables::none(), WORKED_IMAGE).unwrap();
    assert_eq!(rendered.inputs_hash, by_hand);
    assert_eq!(rendered.inputs_hash, WORKED_HASH);
}

#[test]
fn hash_is_h2_and_64_lowercase_hex() {
    let hash = cluster_hash(&cluster_source());
    assert!(is_inputs_hash(&hash), "{hash}");
    assert!(!is_inputs_hash("h1:abc"));
    assert!(!is_inputs_hash(&hash.to_uppercase()));
}

#[test]
fn hash_is_sha256_of_the_canonical_document() {
    let inputs: RoleInputs = cluster_inputs(&cluster_source()).into();
    let doc = hashed_document(
        ObjectKind::Cluster,
        IMAGE,
        inputs.hashed_map(),
        &UserVariables::none(),
    );
    let canonical = canonical_json(&doc).unwrap();
    assert_eq!(
        cluster_hash(&cluster_source()),
        format!("h2:{}", hex::encode(Sha256::digest(canonical.as_bytes())))
    );
    let keys: Vec<&String> = doc.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["scheme", "contract", "role", "image", "inputs"]);
}

#[test]
fn hash_covers_the_image_as_written() {
    let inputs: RoleInputs = cluster_inputs(&cluster_source()).into();
    let none = UserVariables::none();
    let tag = inputs_hash(&inputs, "ghcr.io/example/m:v1", &none).unwrap();
    let digest = inputs_hash(
        &inputs,
        "ghcr.io/example/m@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        &none,
    )
    .unwrap();
    assert_ne!(tag, digest);
    assert_ne!(
        tag,
        inputs_hash(&inputs, "ghcr.io/example/m:v2", &none).unwrap()
    );
}

#[test]
fn hash_covers_the_role() {
    let inputs: RoleInputs = cluster_inputs(&cluster_source()).into();
    let map = inputs.hashed_map();
    let none = UserVariables::none();
    let as_cluster = hash_document(&hashed_document(
        ObjectKind::Cluster,
        IMAGE,
        map.clone(),
        &none,
    ));
    let as_pool = hash_document(&hashed_document(ObjectKind::MachinePool, IMAGE, map, &none));
    assert_ne!(as_cluster.unwrap(), as_pool.unwrap());
}

#[test]
fn hash_covers_every_rendered_input() {
    let base = cluster_hash(&cluster_source());
    let changes: Vec<ClusterInputsSource> = vec![
        ClusterInputsSource {
            topology_version: Some("v1.36.3".into()),
            ..cluster_source()
        },
        ClusterInputsSource {
            control_plane_initialized: Some(false),
            ..cluster_source()
        },
        ClusterInputsSource {
            cluster_network: None,
            ..cluster_source()
        },
        ClusterInputsSource {
            endpoint_source: Some("module".into()),
            ..cluster_source()
        },
        ClusterInputsSource {
            object: ObjectSource {
                cloned_from_name: Some("tmpl-2".into()),
                ..cluster_source().object
            },
            ..cluster_source()
        },
    ];
    for changed in changes {
        assert_ne!(cluster_hash(&changed), base, "{changed:?}");
    }
}

#[test]
fn an_endpoint_copied_by_capi_does_not_change_the_hash() {
    // Once CAPI copies the TerraformCluster endpoint to the Cluster, both hold the same value.
    let endpoint = cluster_source().cluster_endpoint;
    let before = ClusterInputsSource {
        cluster_endpoint: None,
        object_endpoint: endpoint.clone(),
        ..cluster_source()
    };
    let after = ClusterInputsSource {
        cluster_endpoint: endpoint.clone(),
        object_endpoint: endpoint,
        ..cluster_source()
    };
    assert_eq!(cluster_hash(&before), cluster_hash(&after));
}

#[test]
fn object_without_variables_hashes_as_before_variables_existed() {
    let inputs: RoleInputs = cluster_inputs(&cluster_source()).into();
    let mut doc = Map::new();
    doc.insert("scheme".into(), json!("h2"));
    doc.insert("contract".into(), json!("v1alpha1"));
    doc.insert("role".into(), json!("cluster"));
    doc.insert("image".into(), json!(IMAGE));
    doc.insert("inputs".into(), Value::Object(inputs.to_map()));
    assert_eq!(
        inputs_hash(&inputs, IMAGE, &UserVariables::none()).unwrap(),
        hash_document(&Value::Object(doc)).unwrap()
    );
}

#[test]
fn user_variables_are_hashed_when_present() {
    let inputs: RoleInputs = cluster_inputs(&cluster_source()).into();
    let vars = merge_variables(ObjectKind::Cluster, &[], Some(&json!({"size": "large"}))).unwrap();
    let other = merge_variables(ObjectKind::Cluster, &[], Some(&json!({"size": "small"}))).unwrap();
    let none = inputs_hash(&inputs, IMAGE, &UserVariables::none()).unwrap();
    let large = inputs_hash(&inputs, IMAGE, &vars).unwrap();
    assert_ne!(none, large);
    assert_ne!(large, inputs_hash(&inputs, IMAGE, &other).unwrap());
    let doc = hashed_document(ObjectKind::Cluster, IMAGE, inputs.hashed_map(), &vars);
    assert_eq!(
        doc["variables"],
        json!({"values": {"size": "large"}, "sensitive": []})
    );
}

#[test]
fn variable_sensitivity_is_hashed() {
    let inputs: RoleInputs = cluster_inputs(&cluster_source()).into();
    let source = |kind| VariablesSource {
        kind,
        name: "sizing".into(),
        format: VariablesFormat::String,
        data: BTreeMap::from([("size".into(), b"large".to_vec())]),
    };
    let from_cm =
        merge_variables(ObjectKind::Cluster, &[source(SourceKind::ConfigMap)], None).unwrap();
    let from_secret =
        merge_variables(ObjectKind::Cluster, &[source(SourceKind::Secret)], None).unwrap();
    assert_ne!(
        inputs_hash(&inputs, IMAGE, &from_cm).unwrap(),
        inputs_hash(&inputs, IMAGE, &from_secret).unwrap()
    );
}

#[test]
fn fractional_or_exponent_numbers_cannot_be_hashed() {
    for raw in ["0.5", "1e3", "-2.0", "1E-2"] {
        let doc: Value =
            serde_json::from_str(&format!(r#"{{"inputs": {{"x": [{raw}]}}}}"#)).unwrap();
        assert_eq!(
            hash_document(&doc),
            Err(HashError::NotCanonical(CanonicalError::NonInteger {
                path: "$.inputs.x[0]".into()
            })),
            "{raw}"
        );
    }
}

#[test]
fn pool_replicas_is_excluded_from_the_hash_while_autoscaling() {
    let autoscaled = |status| MachinePoolInputsSource {
        autoscaler_min_size: Some("1".into()),
        autoscaler_max_size: Some("10".into()),
        status_replicas: Some(status),
        ..pool_source()
    };
    assert_eq!(pool_hash(&autoscaled(2)), pool_hash(&autoscaled(7)));
    let inputs: RoleInputs = machinepool_inputs(&autoscaled(2)).unwrap().into();
    assert!(inputs.hashed_map().get("replicas").is_none());
    assert_eq!(inputs.to_map()["replicas"], 2, "still rendered");
}

#[test]
fn pool_replicas_is_hashed_without_autoscaling() {
    let fixed = |spec| MachinePoolInputsSource {
        spec_replicas: Some(spec),
        ..pool_source()
    };
    assert_ne!(pool_hash(&fixed(2)), pool_hash(&fixed(3)));
}

#[test]
fn pool_exports_change_re_applies_the_pool() {
    let with_exports = |exports| MachinePoolInputsSource {
        cluster: ClusterHandoff::State {
            exports,
            failure_domains: vec![],
        },
        ..pool_source()
    };
    assert_ne!(
        pool_hash(&with_exports(json!({"lb": "a"}))),
        pool_hash(&with_exports(json!({"lb": "b"})))
    );
}

#[test]
fn pool_html_escaping_does_not_change_the_hash() {
    // The hash is over values, not bytes: recomputing it from the escaped tfvars gives the same.
    let rendered = render_machinepool(&pool_source(), &UserVariables::none(), IMAGE).unwrap();
    let mut inputs = parse(&rendered.tfvars_json).as_object().unwrap().clone();
    assert!(rendered.tfvars_json.contains("\\u003c"));
    if inputs["autoscaling"]["enabled"] == true {
        inputs.remove("replicas");
    }
    let doc = hashed_document(
        ObjectKind::MachinePool,
        IMAGE,
        inputs,
        &UserVariables::none(),
    );
    assert_eq!(hash_document(&doc).unwrap(), rendered.inputs_hash);
}

#[test]
fn hash_can_be_recomputed_from_the_durable_secret_files() {
    // The recipe of the docs: contract inputs are the tfvars keys whose root variable has a type.
    let vars = merge_variables(ObjectKind::Machine, &[], Some(&json!({"size": 3}))).unwrap();
    let rendered = render_machine(&machine_source(), &vars, IMAGE).unwrap();
    let root = parse(&rendered.main_tf_json);
    let tfvars = parse(&rendered.tfvars_json);
    let mut inputs = Map::new();
    let mut values = Map::new();
    let mut sensitive = Vec::new();
    for (name, decl) in root["variable"].as_object().unwrap() {
        if decl.get("type").is_some() {
            inputs.insert(name.clone(), tfvars[name].clone());
        } else {
            values.insert(name.clone(), tfvars[name].clone());
            if decl.get("sensitive") == Some(&json!(true)) {
                sensitive.push(name.clone());
            }
        }
    }
    let doc = json!({
        "scheme": "h2", "contract": "v1alpha1", "role": "machine", "image": IMAGE,
        "inputs": inputs, "variables": {"values": values, "sensitive": sensitive}
    });
    assert_eq!(hash_document(&doc).unwrap(), rendered.inputs_hash);
}
