//! A TerraformMachinePool's write-back to a real MachinePool stored by the test API server
//! (MachinePool Role "Lifecycle" — "Write-back"): claim and write in one patch, a user's edit
//! overwritten, zero written explicitly, a foreign claim never touched, our claim released when
//! autoscaling ends, and the patch refused when the MachinePool changed meanwhile.
//!
//! Needs the test binaries (API server, etcd); no runner, no kubelet, no Cluster API manager.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use api::capi::MachinePool;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use manager::events::Outbox;
use manager::pool::write_back;
use serde_json::json;
use testenv::TestEnv;

const MANAGED_BY: &str = "cluster.x-k8s.io/replicas-managed-by";

async fn machine_pool(client: &Client, ns: &str, name: &str, replicas: Option<i32>) -> MachinePool {
    let mut spec = json!({
        "clusterName": "c",
        "template": {"spec": {
            "clusterName": "c",
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "TerraformMachinePool", "name": name},
        }},
    });
    if let Some(r) = replicas {
        spec["replicas"] = json!(r);
    }
    let mp: MachinePool = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachinePool",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    let api: Api<MachinePool> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &mp).await.unwrap()
}

async fn get(client: &Client, ns: &str, name: &str) -> MachinePool {
    Api::<MachinePool>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_write_back_claims_writes_and_releases() {
    let env = TestEnv::shared().expect("test environment starts");
    let client = env.client().await.unwrap();
    let ns = env.namespace("pool-wb").await.unwrap();
    let mp = machine_pool(&client, &ns, "workers", Some(3)).await;

    // Autoscaled: the claim and the raw observed count (outside any [min, max]) in one patch.
    let mut outbox = Outbox::default();
    write_back(&client, &mp, true, Some(12), &mut outbox)
        .await
        .unwrap();
    let mp = get(&client, &ns, "workers").await;
    assert_eq!(
        mp.annotations().get(MANAGED_BY).map(String::as_str),
        Some("captf")
    );
    assert_eq!(mp.spec.replicas, Some(12));
    assert_eq!(outbox.events().len(), 1);
    assert_eq!(outbox.events()[0].reason, "ReplicasWrittenBack");

    // Nothing to do on the next pass: no write, no event.
    let mut outbox = Outbox::default();
    let sync = write_back(&client, &mp, true, Some(12), &mut outbox)
        .await
        .unwrap();
    assert!(sync.is_noop() && outbox.events().is_empty());
    assert_eq!(
        get(&client, &ns, "workers").await.metadata.resource_version,
        mp.metadata.resource_version
    );

    // A user's edit of spec.replicas is overwritten; zero is written explicitly.
    let api: Api<MachinePool> = Api::namespaced(client.clone(), &ns);
    api.patch(
        "workers",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 7}})),
    )
    .await
    .unwrap();
    let mp = get(&client, &ns, "workers").await;
    write_back(&client, &mp, true, Some(0), &mut Outbox::default())
        .await
        .unwrap();
    assert_eq!(get(&client, &ns, "workers").await.spec.replicas, Some(0));

    // A stale MachinePool (changed meanwhile) is refused, not overwritten.
    let stale = get(&client, &ns, "workers").await;
    api.patch(
        "workers",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    let err = write_back(&client, &stale, true, Some(9), &mut Outbox::default())
        .await
        .unwrap_err();
    assert!(manager::kubeutil::is_conflict(&err), "{err}");
    assert_eq!(get(&client, &ns, "workers").await.spec.replicas, Some(4));

    // Autoscaling ends: our claim goes, spec.replicas is the user's again.
    let mp = get(&client, &ns, "workers").await;
    let mut outbox = Outbox::default();
    write_back(&client, &mp, false, Some(9), &mut outbox)
        .await
        .unwrap();
    let mp = get(&client, &ns, "workers").await;
    assert_eq!(mp.annotations().get(MANAGED_BY), None);
    assert_eq!(mp.spec.replicas, Some(4));
    assert!(outbox.events().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_claim_is_never_touched() {
    let env = TestEnv::shared().expect("test environment starts");
    let client = env.client().await.unwrap();
    let ns = env.namespace("pool-foreign").await.unwrap();
    machine_pool(&client, &ns, "workers", None).await;
    let api: Api<MachinePool> = Api::namespaced(client.clone(), &ns);
    api.patch(
        "workers",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {MANAGED_BY: "another-autoscaler"}}})),
    )
    .await
    .unwrap();
    for autoscaling in [false, true] {
        let mp = get(&client, &ns, "workers").await;
        write_back(&client, &mp, autoscaling, Some(2), &mut Outbox::default())
            .await
            .unwrap();
        let mp = get(&client, &ns, "workers").await;
        assert_eq!(
            mp.annotations().get(MANAGED_BY).map(String::as_str),
            Some("another-autoscaler")
        );
    }
}
