//! TerraformMachinePools against the test API server (Machine Pools; MachinePool Role).
//!
//! The write-back to a real MachinePool stored by the test API server ("Lifecycle" —
//! "Write-back"): claim and write in one patch, a user's edit overwritten, zero written
//! explicitly, a foreign claim never touched, our claim released when autoscaling ends, and the
//! patch refused when the MachinePool changed meanwhile (API server and etcd only).
//!
//! The pool controller with real Jobs of the no-op machinepool module, from hand-made
//! MachinePools (no Cluster API manager runs here): a pool of 3 reaches Ready with its sorted
//! providerIDList, status.replicas, status.instances and status.ready; scaled to 0, replicas 0 is
//! written explicitly; under the autoscaler annotations the module's count is written back to
//! the MachinePool, and removing them releases the claim; a new image re-applies it once, and so
//! does a rotated bootstrap token;
//! deletion destroys it and leaves nothing (needs the runner, the registry and the kubelet as
//! well).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine;
use contract::names::ObjectKind;
use sha2::Digest;

use api::capi::MachinePool;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use manager::kinds::pool::write_back;
use manager::runtime::events::Outbox;
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
    assert!(manager::runtime::kubeutil::is_conflict(&err), "{err}");
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

const LONG: Duration = Duration::from_secs(240);
const TMP: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

async fn patch_mp(client: &Client, ns: &str, name: &str, patch: serde_json::Value) {
    Api::<MachinePool>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Waits until the pool's outputs show `replicas` members, and returns the pool.
async fn members(client: &Client, ns: &str, name: &str, replicas: i64) -> serde_json::Value {
    common::eventually(LONG, &format!("{name} with {replicas} members"), || async {
        let o = common::get_json(client, ns, TMP, "TerraformMachinePool", name).await;
        (o["status"]["replicas"] == json!(replicas)
            && o["spec"]["providerIDList"].as_array().map(Vec::len)
                == Some(usize::try_from(replicas).unwrap()))
        .then_some(o)
    })
    .await
}

/// The input of the no-op module's one resource, the group, in a state document.
fn group(state: &serde_json::Value) -> &serde_json::Value {
    &state["resources"][0]["instances"][0]["attributes"]["input"]["value"]
}

/// The pool's succeeded Jobs of `op`, as `captf_jobs_total` counts them.
fn pool_jobs(metrics: &manager::runtime::metrics::Metrics, op: &str) -> u64 {
    metrics
        .encode()
        .lines()
        .filter(|l| {
            l.starts_with("captf_jobs_total{")
                && l.contains("kind=\"TerraformMachinePool\"")
                && l.contains(&format!("op=\"{op}\""))
                && l.contains("result=\"succeeded\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// The row `kubectl get` shows for `name`: the API server's Table of the object, as column name
/// to cell.
async fn table_row(
    client: &Client,
    ns: &str,
    plural: &str,
    name: &str,
) -> serde_json::Map<String, serde_json::Value> {
    let request = http::Request::get(format!(
        "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/{ns}/{plural}/{name}"
    ))
    .header(
        http::header::ACCEPT,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .body(Vec::new())
    .unwrap();
    let table: serde_json::Value =
        serde_json::from_str(&client.request_text(request).await.unwrap()).unwrap();
    let names = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned());
    names
        .zip(
            table["rows"][0]["cells"]
                .as_array()
                .unwrap()
                .iter()
                .cloned(),
        )
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_from_its_machine_pool_to_destroy() {
    let (env, images) = common::setup().await;
    let client = env.client().await.unwrap();
    common::install_runner_cluster_role(&client).await;
    let ns = env.namespace("pools").await.unwrap();
    common::identity(&client, "id-pools", &[ns.as_str()], "pool-credential").await;
    let image = common::pool_image(env, "v1").await;
    // The manager runs as its ServiceAccount with exactly config/rbac/role.yaml.
    let manager_client = common::manager_client(env, &client).await;
    let mgr = common::start_manager(&manager_client, &ns, &images, "manager-pools");
    common::cluster(&client, &ns, "prod", "id-pools", &images.cluster).await;
    common::wait_ready(&client, &ns, "TerraformCluster", "prod", "True", LONG).await;
    common::capi_cluster_provisioned(&client, &ns, "prod").await;

    // A pool of 3 reaches Ready with its sorted providerIDList, replicas and instances.
    common::pool(&client, &ns, "prod", "workers", &image, 3).await;
    let tmp = common::wait_ready(
        &client,
        &ns,
        "TerraformMachinePool",
        "workers",
        "True",
        LONG,
    )
    .await;
    let ids: Vec<String> = (0..3)
        .map(|i| format!("noop:///{ns}/workers/{i}"))
        .collect();
    assert_eq!(tmp["spec"]["providerIDList"], json!(ids), "{tmp:#}");
    assert_eq!(
        tmp["spec"]["providerID"],
        format!("noop-group:///{ns}/workers")
    );
    assert_eq!(tmp["status"]["replicas"], 3);
    // `kubectl get terraformmachinepool` shows the owning cluster, MachinePool, replicas and
    // Ready (the book's "Check the group's members"): the API server's Table of the object.
    let row = table_row(&client, &ns, "terraformmachinepools", "workers").await;
    assert_eq!(row["Cluster"], "prod", "{row:?}");
    assert_eq!(row["MachinePool"], "workers", "{row:?}");
    assert_eq!(row["Replicas"], 3, "{row:?}");
    assert_eq!(row["Ready"], "True", "{row:?}");
    assert_eq!(tmp["status"]["ready"], true);
    assert_eq!(tmp["status"]["initialization"]["provisioned"], true);
    assert_eq!(tmp["status"]["instances"].as_array().unwrap().len(), 3);
    assert_eq!(
        tmp["status"]["instances"][0]["instanceID"],
        "noop-workers-0"
    );
    assert!(tmp["status"].get("failureReason").is_none());
    assert!(tmp["status"].get("failureMessage").is_none());
    assert_eq!(
        common::condition(&tmp, "AutoscalingActive").unwrap().0,
        "False"
    );
    // node_labels came from the MachinePool template's labels.
    let state = common::state_document(&client, &ns, ObjectKind::MachinePool, "workers").await;
    assert_eq!(
        group(&state)["node_labels"],
        json!({"pool": "workers"}),
        "{state:#}"
    );

    // Scaled to 5, then to 0: status.replicas 0 is written explicitly, the list is empty.
    patch_mp(&client, &ns, "workers", json!({"spec": {"replicas": 5}})).await;
    members(&client, &ns, "workers", 5).await;
    patch_mp(&client, &ns, "workers", json!({"spec": {"replicas": 0}})).await;
    let tmp = members(&client, &ns, "workers", 0).await;
    assert_eq!(tmp["status"]["replicas"], json!(0), "{tmp:#}");
    assert!(tmp["status"].get("instances").is_none());

    // The autoscaler annotations hand the count to the module (its stand-in autoscaler says 4,
    // outside [1, 3]); the observed count is written back to the MachinePool with its claim.
    Api::<api::machinepool::TerraformMachinePool>::namespaced(client.clone(), &ns)
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"variables": {"noop_autoscaled_replicas": 4}}})),
        )
        .await
        .unwrap();
    patch_mp(
        &client,
        &ns,
        "workers",
        json!({"metadata": {"annotations": {
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "3"}}}),
    )
    .await;
    members(&client, &ns, "workers", 4).await;
    let mp = common::eventually(LONG, "the count written back", || async {
        let mp = get(&client, &ns, "workers").await;
        (mp.spec.replicas == Some(4)).then_some(mp)
    })
    .await;
    assert_eq!(
        mp.annotations().get(MANAGED_BY).map(String::as_str),
        Some("captf")
    );
    let tmp = common::get_json(&client, &ns, TMP, "TerraformMachinePool", "workers").await;
    assert_eq!(
        common::condition(&tmp, "AutoscalingActive"),
        Some(("True".to_owned(), "ReplicasManagedByModule".to_owned()))
    );

    // Removing the annotations releases the claim; spec.replicas decides again.
    Api::<MachinePool>::namespaced(client.clone(), &ns)
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": null,
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": null}},
                "spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    common::eventually(LONG, "the claim released", || async {
        let mp = get(&client, &ns, "workers").await;
        mp.annotations().get(MANAGED_BY).is_none().then_some(())
    })
    .await;
    members(&client, &ns, "workers", 2).await;

    // A new image re-applies the pool once (the same module under another tag: the image as
    // written is in the inputs hash).
    let applies = || pool_jobs(&mgr.metrics, "apply");
    let before = applies();
    let v2 = common::pool_image(env, "v2").await;
    Api::<api::machinepool::TerraformMachinePool>::namespaced(client.clone(), &ns)
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"source": {"image": v2}}})),
        )
        .await
        .unwrap();
    common::eventually(LONG, "the new image applied", || async {
        let o = common::get_json(&client, &ns, TMP, "TerraformMachinePool", "workers").await;
        (o["status"]["source"]["image"] == json!(v2) && applies() > before).then_some(())
    })
    .await;
    // A membership refresh after it changes nothing: still one apply.
    let refreshes = pool_jobs(&mgr.metrics, "refresh");
    common::eventually(LONG, "a refresh after the apply", || async {
        (pool_jobs(&mgr.metrics, "refresh") > refreshes).then_some(())
    })
    .await;
    assert_eq!(applies(), before + 1, "one apply for the new image");

    // A rotated bootstrap token (rewritten in place, as kubeadm does) is applied once: the new
    // data reaches the module.
    let before = applies();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .patch(
            "workers-bootstrap",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"value": "pool-bootstrap-token-rotated"}})),
        )
        .await
        .unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode("pool-bootstrap-token-rotated");
    let want = hex::encode(sha2::Sha256::digest(b64.as_bytes()));
    common::eventually(LONG, "the rotated token applied", || async {
        let state =
            common::state_document_now(&client, &ns, ObjectKind::MachinePool, "workers").await?;
        (group(&state)["bootstrap_sha256"] == json!(want) && applies() > before).then_some(())
    })
    .await;
    let refreshes = pool_jobs(&mgr.metrics, "refresh");
    common::eventually(LONG, "a refresh after the rotation", || async {
        (pool_jobs(&mgr.metrics, "refresh") > refreshes).then_some(())
    })
    .await;
    assert_eq!(applies(), before + 1, "one apply for the rotation");

    // Deletion destroys it from the durable inputs (the bootstrap Secret is gone first, as
    // Cluster API deletes it in the same pass), and leaves nothing of CAPTF's.
    common::delete(&client, &ns, "v1", "Secret", "workers-bootstrap").await;
    common::delete(&client, &ns, TMP, "TerraformMachinePool", "workers").await;
    common::eventually(LONG, "the pool gone", || async {
        common::get_json_opt(&client, &ns, TMP, "TerraformMachinePool", "workers")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(pool_jobs(&mgr.metrics, "destroy"), 1, "one destroy");
    common::eventually(Duration::from_secs(60), "no pool Secret left", || async {
        let left: BTreeSet<String> = common::secrets(&client, &ns)
            .await
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .filter(|n| {
                n.contains("workers") && (n.starts_with("tfstate-") || n.starts_with("captf-"))
            })
            .collect();
        left.is_empty().then_some(())
    })
    .await;
    mgr.stop().await;
}
