//! The generated CRDs, installed into the test environment's real API server, accept the book's
//! objects and reject out-of-range values, unknown enum values and CEL-rule violations. Every case
//! is a server-side dry-run create, so the API server's own validation decides.

use api::crd;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture readable"))
        .expect("fixture parses")
}

/// Asks the real API server (dry run) whether it accepts `object`; returns its refusal message.
async fn admit(kind: &str, object: &Value) -> Result<(), String> {
    let env = testenv::TestEnv::shared().expect("test environment starts");
    let client = env.client().await.expect("client");
    let gvk = GroupVersionKind::gvk(api::GROUP, api::VERSION, kind);
    let (resource, _) = kube::discovery::pinned_kind(&client, &gvk)
        .await
        .expect("kind is served");
    let mut object: DynamicObject = serde_json::from_value(object.clone()).expect("object parses");
    // Status is a subresource: drop it so the create validates the spec (status is validated
    // separately below through the status subresource's schema, which is the same schema).
    object.data.as_object_mut().map(|o| o.remove("status"));
    let api: Api<DynamicObject> = if kind == "TerraformClusterIdentity" {
        Api::all_with(client, &resource)
    } else {
        object.metadata.namespace = Some("default".into());
        Api::namespaced_with(client, "default", &resource)
    };
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&params, &object)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

async fn is_valid(kind: &str, object: &Value) -> bool {
    admit(kind, object).await.is_ok()
}

/// The status schema, checked with a JSON Schema validator: the API server validates status only
/// through the status subresource, which a dry-run create cannot reach.
fn status_is_valid(kind: &str, object: &Value) -> bool {
    let crd = crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let schema = serde_json::to_value(crd::schema_of(&crd).expect("CRD has a schema"))
        .expect("schema serializes");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
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

/// Whether the object with `value` at `pointer` is accepted: spec paths by the real API server,
/// status paths by the status schema.
async fn accepts(kind: &str, object: &Value, pointer: &str) -> bool {
    if pointer.starts_with("/status") {
        status_is_valid(kind, object)
    } else {
        is_valid(kind, object).await
    }
}

/// Asserts that each `(pointer, value)` change to the fixture is refused.
async fn assert_rejected(kind: &str, file: &str, cases: &[(&str, Value)]) {
    let base = fixture(file);
    for (pointer, value) in cases {
        let object = with(base.clone(), pointer, value.clone());
        assert!(
            !accepts(kind, &object, pointer).await,
            "{kind}: {pointer} = {value} should be rejected"
        );
    }
}

const KINDS: [(&str, &str); 7] = [
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
];

#[tokio::test]
async fn full_examples_of_every_kind_are_accepted() {
    for (kind, file) in KINDS {
        let object = fixture(file);
        if let Err(e) = admit(kind, &object).await {
            panic!("{file} should be accepted: {e}");
        }
        assert!(
            status_is_valid(kind, &object),
            "{file}: status should be valid"
        );
    }
}

#[tokio::test]
async fn source_image_is_required() {
    let mut no_image = fixture("terraformcluster-full.json");
    no_image["spec"]["source"]
        .as_object_mut()
        .expect("source")
        .remove("image");
    let err = admit("TerraformCluster", &no_image)
        .await
        .expect_err("refused");
    assert!(err.contains("spec.source.image"), "{err}");
}

#[tokio::test]
async fn out_of_range_values_are_rejected() {
    let backups: Vec<Value> = (0..17)
        .map(|i| json!({"serial": i + 1, "takenAt": "2026-11-30T00:00:00Z", "bytes": 1}))
        .collect();
    let drift: Vec<String> = (0..21).map(|i| format!("r{i}")).collect();
    let plan: Vec<String> = (0..51).map(|i| format!("r{i} (create)")).collect();
    let many: serde_json::Map<String, Value> =
        (0..257).map(|i| (format!("v{i}"), json!(i))).collect();
    assert_rejected(
        "TerraformCluster",
        "terraformcluster-full.json",
        &[
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
            ("/spec/variables", Value::Object(many)),
            ("/status/pendingRefreshes", json!(0)),
            ("/status/stateBackups", json!(backups)),
            ("/status/lastRun/error/summary", json!("x".repeat(513))),
            ("/status/lastRun/drift/resources", json!(drift)),
            ("/status/plan/resources", json!(plan)),
        ],
    )
    .await;
}

#[tokio::test]
async fn unknown_enum_values_are_rejected() {
    assert_rejected(
        "TerraformCluster",
        "terraformcluster-full.json",
        &[
            ("/spec/applyPolicy", json!("Sometimes")),
            ("/spec/drift/action", json!("Ignore")),
            ("/spec/source/imagePullPolicy", json!("Maybe")),
            ("/spec/variablesFrom/1/format", json!("YAML")),
            ("/status/lastRun/operation", json!("import")),
            ("/status/lastRun/error/kind", json!("crash")),
            ("/status/activeJob/operation", json!("Apply")),
        ],
    )
    .await;
    assert_rejected(
        "TerraformMachineTemplate",
        "terraformmachinetemplate-full.json",
        &[("/status/nodeInfo/architecture", json!("x86"))],
    )
    .await;
    assert_rejected(
        "TerraformMachinePool",
        "terraformmachinepool-full.json",
        &[("/status/instances/0/state", json!("broken"))],
    )
    .await;
}

#[tokio::test]
async fn cel_rules_are_enforced_by_the_api_server() {
    let mut no_identity = fixture("terraformcluster-full.json");
    no_identity["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("identityRef");
    let err = admit("TerraformCluster", &no_identity)
        .await
        .expect_err("refused");
    assert!(err.contains("spec.identityRef is required"), "{err}");

    let lock = with(
        fixture("terraformcluster-full.json"),
        "/spec/jobs/lockTimeoutSeconds",
        json!(7200),
    );
    let err = admit("TerraformCluster", &lock).await.expect_err("refused");
    assert!(
        err.contains("lockTimeoutSeconds must be less than activeDeadlineSeconds"),
        "{err}"
    );

    let both = with(
        fixture("terraformcluster-full.json"),
        "/spec/variablesFrom/0",
        json!({"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}),
    );
    let err = admit("TerraformCluster", &both).await.expect_err("refused");
    assert!(
        err.contains("exactly one of configMapRef or secretRef"),
        "{err}"
    );

    let empty = with(
        fixture("terraformclusteridentity-full.json"),
        "/spec/allowedNamespaces",
        json!({}),
    );
    let err = admit("TerraformClusterIdentity", &empty)
        .await
        .expect_err("refused");
    assert!(
        err.contains("allowedNamespaces must set list or selector"),
        "{err}"
    );
}

#[tokio::test]
async fn identity_ref_is_required_on_a_terraformcluster_only_not_on_its_template() {
    let mut template = fixture("terraformclustertemplate-full.json");
    template["spec"]["template"]["spec"]
        .as_object_mut()
        .expect("template spec")
        .remove("identityRef");
    admit("TerraformClusterTemplate", &template)
        .await
        .expect("a template may leave identityRef to a ClusterClass patch");
    let mut cluster = fixture("terraformcluster-full.json");
    cluster["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("identityRef");
    let err = admit("TerraformCluster", &cluster)
        .await
        .expect_err("refused");
    assert!(err.contains("spec.identityRef is required"), "{err}");
}

#[tokio::test]
async fn machine_bounds_are_enforced() {
    assert_rejected(
        "TerraformMachine",
        "terraformmachine-full.json",
        &[
            ("/spec/remediation/unhealthyThreshold", json!(0)),
            ("/spec/remediation/unhealthyThreshold", json!(101)),
            ("/spec/remediation/healthCheckIntervalSeconds", json!(59)),
            ("/spec/remediation/healthCheckIntervalSeconds", json!(86401)),
            ("/spec/providerID", json!("")),
            ("/status/addresses/0/type", json!("PublicIP")),
            ("/status/unhealthySamples", json!(0)),
        ],
    )
    .await;
}

#[tokio::test]
async fn pool_bounds_are_enforced() {
    assert_rejected(
        "TerraformMachinePool",
        "terraformmachinepool-full.json",
        &[
            ("/spec/drift/intervalSeconds", json!(0)),
            // Contract Changelog: 15-86400, rejected below 15 by the CRD schema: 0 included.
            ("/spec/membershipRefreshIntervalSeconds", json!(0)),
            ("/spec/membershipRefreshIntervalSeconds", json!(14)),
            ("/spec/membershipRefreshIntervalSeconds", json!(86401)),
            ("/spec/providerIDList", json!([""])),
            ("/status/replicas", json!(-1)),
            ("/status/instances", json!([])),
        ],
    )
    .await;
}

#[tokio::test]
async fn identity_bounds_are_enforced() {
    let too_many: Vec<String> = (0..101).map(|i| format!("ns{i}")).collect();
    assert_rejected(
        "TerraformClusterIdentity",
        "terraformclusteridentity-full.json",
        &[
            ("/spec/secretRef/namespace", json!("Not_A_Label")),
            ("/spec/secretRef/name", json!("")),
            ("/spec/allowedNamespaces/list", json!([])),
            ("/spec/allowedNamespaces/list", json!(too_many)),
        ],
    )
    .await;
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
