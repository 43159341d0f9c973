//! The generated CRD schemas accept the book's objects and reject out-of-range and unknown-enum
//! values. Checked with a JSON Schema validator here; CEL rules (`x-kubernetes-validations`) are
//! checked by the real API server in the test environment's suite.

use api::crd;
use serde_json::{Value, json};

fn schema(kind: &str) -> Value {
    let crd = crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    serde_json::to_value(crd::schema_of(&crd).expect("CRD has a schema"))
        .expect("schema serializes")
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture readable"))
        .expect("fixture parses")
}

fn is_valid(kind: &str, object: &Value) -> bool {
    let validator = jsonschema::validator_for(&schema(kind)).expect("schema compiles");
    validator.is_valid(object)
}

/// Sets the value at a JSON pointer, creating nothing: the path must exist up to its parent.
fn with(mut object: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer has a parent");
    let target = object
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent}"));
    match target {
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        Value::Array(items) => {
            let i: usize = key.parse().expect("array index");
            items[i] = value;
        }
        _ => panic!("{parent} is not a container"),
    }
    object
}

#[test]
fn full_examples_of_every_kind_are_valid() {
    for (kind, file) in [
        ("TerraformCluster", "terraformcluster-full.json"),
        (
            "TerraformClusterTemplate",
            "terraformclustertemplate-full.json",
        ),
        ("TerraformMachine", "terraformmachine-full.json"),
        (
            "TerraformMachineTemplate",
            "terraformmachinetemplate-full.json",
        ),
        ("TerraformMachinePool", "terraformmachinepool-full.json"),
        (
            "TerraformMachinePoolTemplate",
            "terraformmachinepooltemplate-full.json",
        ),
        (
            "TerraformClusterIdentity",
            "terraformclusteridentity-full.json",
        ),
    ] {
        assert!(is_valid(kind, &fixture(file)), "{file} should be valid");
    }
}

#[test]
fn source_image_is_required() {
    let tc = fixture("terraformcluster-full.json");
    let mut no_image = tc.clone();
    no_image["spec"]["source"]
        .as_object_mut()
        .expect("source")
        .remove("image");
    assert!(!is_valid("TerraformCluster", &no_image));
}

#[test]
fn out_of_range_values_are_rejected() {
    let tc = fixture("terraformcluster-full.json");
    let cases = [
        ("/spec/jobs/activeDeadlineSeconds", json!(86401)),
        ("/spec/jobs/activeDeadlineSeconds", json!(0)),
        ("/spec/jobs/lockTimeoutSeconds", json!(3601)),
        ("/spec/jobs/successfulJobsHistoryLimit", json!(101)),
        ("/spec/jobs/failedJobsHistoryLimit", json!(-1)),
        ("/spec/controlPlaneEndpoint/port", json!(70000)),
        ("/spec/source/image", json!("")),
        ("/spec/source/image", json!("x".repeat(513))),
        ("/spec/drift/intervalSeconds", json!(-5)),
        ("/spec/variablesFrom", json!([])),
        ("/spec/variables", json!({})),
        ("/status/pendingRefreshes", json!(0)),
        (
            "/status/stateBackups",
            json!(
                (0..17)
                    .map(
                        |i| json!({"serial": i + 1, "takenAt": "2026-11-30T00:00:00Z", "bytes": 1})
                    )
                    .collect::<Vec<_>>()
            ),
        ),
        ("/status/lastRun/error/summary", json!("x".repeat(513))),
        (
            "/status/lastRun/drift/resources",
            json!((0..21).map(|i| format!("r{i}")).collect::<Vec<_>>()),
        ),
        (
            "/status/plan/resources",
            json!(
                (0..51)
                    .map(|i| format!("r{i} (create)"))
                    .collect::<Vec<_>>()
            ),
        ),
    ];
    for (pointer, value) in cases {
        let object = with(tc.clone(), pointer, value.clone());
        assert!(
            !is_valid("TerraformCluster", &object),
            "{pointer} = {value} should be rejected"
        );
    }
}

#[test]
fn too_many_inline_variables_are_rejected() {
    let tc = fixture("terraformcluster-full.json");
    let many: serde_json::Map<String, Value> =
        (0..257).map(|i| (format!("v{i}"), json!(i))).collect();
    assert!(!is_valid(
        "TerraformCluster",
        &with(tc, "/spec/variables", Value::Object(many))
    ));
}

#[test]
fn unknown_enum_values_are_rejected() {
    let tc = fixture("terraformcluster-full.json");
    for (pointer, value) in [
        ("/spec/applyPolicy", "Sometimes"),
        ("/spec/drift/action", "Ignore"),
        ("/spec/source/imagePullPolicy", "Maybe"),
        ("/spec/variablesFrom/1/format", "YAML"),
        ("/status/lastRun/operation", "import"),
        ("/status/lastRun/error/kind", "crash"),
        ("/status/activeJob/operation", "Apply"),
    ] {
        let object = with(tc.clone(), pointer, json!(value));
        assert!(
            !is_valid("TerraformCluster", &object),
            "{pointer} = {value} should be rejected"
        );
    }
    let tmt = fixture("terraformmachinetemplate-full.json");
    assert!(!is_valid(
        "TerraformMachineTemplate",
        &with(tmt, "/status/nodeInfo/architecture", json!("x86"))
    ));
    let tmp = fixture("terraformmachinepool-full.json");
    assert!(!is_valid(
        "TerraformMachinePool",
        &with(tmp, "/status/instances/0/state", json!("broken"))
    ));
}

#[test]
fn machine_bounds_are_enforced() {
    let tm = fixture("terraformmachine-full.json");
    for (pointer, value) in [
        ("/spec/remediation/unhealthyThreshold", json!(0)),
        ("/spec/remediation/unhealthyThreshold", json!(101)),
        ("/spec/remediation/healthCheckIntervalSeconds", json!(59)),
        ("/spec/remediation/healthCheckIntervalSeconds", json!(86401)),
        ("/spec/providerID", json!("")),
        ("/status/addresses/0/type", json!("PublicIP")),
        ("/status/unhealthySamples", json!(0)),
    ] {
        let object = with(tm.clone(), pointer, value.clone());
        assert!(
            !is_valid("TerraformMachine", &object),
            "{pointer} = {value} should be rejected"
        );
    }
}

#[test]
fn pool_bounds_are_enforced() {
    let tmp = fixture("terraformmachinepool-full.json");
    for (pointer, value) in [
        ("/spec/drift/intervalSeconds", json!(0)),
        ("/spec/membershipRefreshIntervalSeconds", json!(14)),
        ("/spec/membershipRefreshIntervalSeconds", json!(86401)),
        ("/spec/providerIDList", json!([""])),
        ("/status/replicas", json!(-1)),
        ("/status/instances", json!([])),
    ] {
        let object = with(tmp.clone(), pointer, value.clone());
        assert!(
            !is_valid("TerraformMachinePool", &object),
            "{pointer} = {value} should be rejected"
        );
    }
}

#[test]
fn identity_bounds_are_enforced() {
    let tci = fixture("terraformclusteridentity-full.json");
    for (pointer, value) in [
        ("/spec/secretRef/namespace", json!("Not_A_Label")),
        ("/spec/secretRef/name", json!("")),
        ("/spec/allowedNamespaces/list", json!([])),
        (
            "/spec/allowedNamespaces/list",
            json!((0..101).map(|i| format!("ns{i}")).collect::<Vec<_>>()),
        ),
    ] {
        let object = with(tci.clone(), pointer, value.clone());
        assert!(
            !is_valid("TerraformClusterIdentity", &object),
            "{pointer} = {value} should be rejected"
        );
    }
}

#[test]
fn every_crd_carries_the_contract_and_provider_labels_and_category() {
    for crd in crd::all() {
        let labels = crd.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
            Some("v1alpha1")
        );
        assert_eq!(
            labels.get("cluster.x-k8s.io/provider").map(String::as_str),
            Some("infrastructure-terraform")
        );
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{}.{}", crd.spec.names.plural, crd.spec.group).as_str())
        );
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["cluster-api".to_owned()])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        let is_template = crd.spec.names.kind.ends_with("Template");
        let has_status = version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some());
        let needs_status = !is_template || crd.spec.names.kind == "TerraformMachineTemplate";
        assert_eq!(
            has_status, needs_status,
            "{} status subresource",
            crd.spec.names.kind
        );
    }
}

#[test]
fn only_the_identity_is_cluster_scoped() {
    for crd in crd::all() {
        let expected = if crd.spec.names.kind == "TerraformClusterIdentity" {
            "Cluster"
        } else {
            "Namespaced"
        };
        assert_eq!(crd.spec.scope, expected, "{}", crd.spec.names.kind);
    }
}
