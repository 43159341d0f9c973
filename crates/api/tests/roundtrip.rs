//! Every kind round-trips through serde without losing or inventing a field, and the Cluster API
//! subset keeps the fields it does not model.

use api::capi::{Cluster, Machine, MachinePool};
use api::{
    TerraformCluster, TerraformClusterIdentity, TerraformClusterTemplate, TerraformMachine,
    TerraformMachinePool, TerraformMachinePoolTemplate, TerraformMachineTemplate,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Deserializes `value` as `T`, serializes it back and asserts nothing changed.
fn assert_roundtrip<T: Serialize + DeserializeOwned>(value: &Value) {
    let typed: T = serde_json::from_value(value.clone()).expect("fixture deserializes");
    let back = serde_json::to_value(&typed).expect("object serializes");
    assert_eq!(&back, value, "round trip changed the object");
}

#[test]
fn terraform_cluster_round_trips() {
    assert_roundtrip::<TerraformCluster>(&fixture("terraformcluster-full.json"));
}

#[test]
fn terraform_cluster_template_round_trips() {
    assert_roundtrip::<TerraformClusterTemplate>(&fixture("terraformclustertemplate-full.json"));
}

#[test]
fn terraform_machine_round_trips() {
    assert_roundtrip::<TerraformMachine>(&fixture("terraformmachine-full.json"));
}

#[test]
fn terraform_machine_template_round_trips() {
    assert_roundtrip::<TerraformMachineTemplate>(&fixture("terraformmachinetemplate-full.json"));
}

#[test]
fn terraform_machine_pool_round_trips() {
    assert_roundtrip::<TerraformMachinePool>(&fixture("terraformmachinepool-full.json"));
}

#[test]
fn terraform_machine_pool_template_round_trips() {
    assert_roundtrip::<TerraformMachinePoolTemplate>(&fixture(
        "terraformmachinepooltemplate-full.json",
    ));
}

#[test]
fn terraform_cluster_identity_round_trips() {
    assert_roundtrip::<TerraformClusterIdentity>(&fixture("terraformclusteridentity-full.json"));
}

#[test]
fn pool_status_always_writes_ready_for_cluster_api() {
    let pool: TerraformMachinePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformMachinePool",
        "metadata": {"name": "p"},
        "spec": {"source": {"image": "x:1"}},
        "status": {}
    }))
    .expect("pool deserializes");
    let status = serde_json::to_value(pool.status.expect("status present")).expect("serializes");
    assert_eq!(status, serde_json::json!({"ready": false}));
}

#[test]
fn cluster_api_cluster_keeps_unknown_fields() {
    let cluster = serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "prod", "namespace": "team-a"},
        "spec": {
            "paused": false,
            "controlPlaneEndpoint": {"host": "1.2.3.4", "port": 6443},
            "clusterNetwork": {"apiServerPort": 6443, "pods": {"cidrBlocks": ["192.168.0.0/16"]},
                               "services": {"cidrBlocks": ["10.96.0.0/12"]}, "serviceDomain": "cluster.local",
                               "futureField": 1},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": "prod"},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "prod"},
            "topology": {"version": "v1.36.3", "classRef": {"name": "noop"}},
            "availabilityGates": [{"conditionType": "X"}]
        },
        "status": {
            "initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": false},
            "phase": "Provisioned",
            "failureDomains": [{"name": "az-1", "controlPlane": true}]
        }
    });
    assert_roundtrip::<Cluster>(&cluster);
    let typed: Cluster = serde_json::from_value(cluster).expect("deserializes");
    assert!(
        typed
            .spec
            .infrastructure_ref
            .expect("infrastructureRef")
            .is_captf("TerraformCluster", "prod")
    );
}

#[test]
fn cluster_api_machine_keeps_unknown_fields() {
    assert_roundtrip::<Machine>(&serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "m", "namespace": "team-a", "labels": {"cluster.x-k8s.io/control-plane": ""}},
        "spec": {
            "clusterName": "prod",
            "bootstrap": {"dataSecretName": "m-bootstrap", "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "m"}},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformMachine", "name": "m"},
            "version": "v1.36.3",
            "failureDomain": "az-1",
            "providerID": "noop://m",
            "deletion": {"nodeDrainTimeoutSeconds": 10}
        },
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}], "phase": "Provisioned", "nodeRef": {"name": "n"}}
    }));
}

#[test]
fn cluster_api_machine_pool_keeps_unknown_fields() {
    assert_roundtrip::<MachinePool>(&serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachinePool",
        "metadata": {"name": "mp", "namespace": "team-a"},
        "spec": {
            "clusterName": "prod",
            "replicas": 3,
            "template": {
                "metadata": {"labels": {"node-role": "worker"}},
                "spec": {
                    "bootstrap": {"dataSecretName": "mp-bootstrap"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformMachinePool", "name": "mp"},
                    "version": "v1.36.3",
                    "clusterName": "prod"
                }
            },
            "failureDomains": ["az-1"],
            "providerIDList": ["noop://1"]
        },
        "status": {"replicas": 3, "phase": "Running", "readyReplicas": 3}
    }));
}
