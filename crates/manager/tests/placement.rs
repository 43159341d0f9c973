//! Job placement (Tuning Jobs, "Placement") with real components: a second process kubelet
//! registers a Node with a label and a `NoSchedule` taint, and binds a pod only where
//! kube-scheduler's NodeSelector, NodeAffinity and TaintToleration filters allow it; the real API
//! server's Priority admission resolves the Job pod's PriorityClass.
//!
//! Needs the test binaries, the static runner and the kubelet's shim (`make unit` builds them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

/// The dedicated node's label and taint key, and its value.
const POOL_KEY: &str = "captf.io/test-pool";
const POOL: &str = "dedicated";
const DEDICATED_NODE: &str = "captf-dedicated";
const PRIORITY_CLASS: &str = "captf-test-jobs";

/// The pods of `owner`'s Jobs in `ns`.
async fn pods_of(client: &kube::Client, ns: &str, owner: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.list(&ListParams::default().labels(&format!(
        "captf.infrastructure.cluster.x-k8s.io/owner-name={owner}"
    )))
    .await
    .unwrap()
    .items
}

/// The node each pod of `owner` was bound to ("" while unbound).
async fn nodes_of(client: &kube::Client, ns: &str, owner: &str) -> Vec<String> {
    pods_of(client, ns, owner)
        .await
        .iter()
        .map(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default()
        })
        .collect()
}

async fn ensure_priority_class(client: &kube::Client) {
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let class = PriorityClass {
        metadata: kube::api::ObjectMeta {
            name: Some(PRIORITY_CLASS.into()),
            ..Default::default()
        },
        value: Some(1000),
        description: Some("CAPTF placement test".into()),
        ..PriorityClass::default()
    };
    match classes.create(&PostParams::default(), &class).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating the PriorityClass: {e}"),
    }
}

/// Tuning Jobs "Placement": a cluster whose `spec.jobs` selects (by `nodeSelector`, or by required
/// node affinity) and tolerates the dedicated node runs its Job there, at its PriorityClass's
/// priority; one that selects it without tolerating
/// its taint is bound nowhere (no node may take it); one without placement runs where it always
/// did, never on the tainted node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_lands_only_on_a_node_its_placement_allows() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("placement").await;
    env.start_node(
        DEDICATED_NODE,
        BTreeMap::from([(POOL_KEY.to_owned(), POOL.to_owned())]),
        vec![Taint {
            key: POOL_KEY.into(),
            value: Some(POOL.into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }],
    )
    .expect("the dedicated node starts");
    ensure_priority_class(&client).await;
    let _mgr = start_manager(&client, &ns, &images, "manager-placement");
    let id = "id-placement";

    let selector = json!({ POOL_KEY: POOL });
    cluster_with_spec(
        &client,
        &ns,
        "placed",
        id,
        &images.cluster,
        json!({"jobs": {
            "nodeSelector": selector,
            "tolerations": [{"key": POOL_KEY, "operator": "Equal", "value": POOL, "effect": "NoSchedule"}],
            "priorityClassName": PRIORITY_CLASS,
        }}),
    )
    .await;
    cluster_with_spec(
        &client,
        &ns,
        "intolerant",
        id,
        &images.cluster,
        json!({"jobs": {"nodeSelector": selector}}),
    )
    .await;
    cluster_with_spec(&client, &ns, "anywhere", id, &images.cluster, json!({})).await;
    // Required node affinity instead of a selector, tolerating every taint of the key.
    cluster_with_spec(
        &client,
        &ns,
        "affine",
        id,
        &images.cluster,
        json!({"jobs": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": POOL_KEY, "operator": "In", "values": [POOL]}]}]}}},
            "tolerations": [{"key": POOL_KEY, "operator": "Exists"}],
        }}),
    )
    .await;

    wait_ready(&client, &ns, "TerraformCluster", "placed", "True", LONG).await;
    wait_ready(&client, &ns, "TerraformCluster", "anywhere", "True", LONG).await;
    let placed = pods_of(&client, &ns, "placed").await;
    assert!(!placed.is_empty());
    for pod in &placed {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_name.as_deref(),
            Some(DEDICATED_NODE),
            "pod {:?}",
            pod.metadata.name
        );
        assert_eq!(spec.priority_class_name.as_deref(), Some(PRIORITY_CLASS));
        assert_eq!(
            spec.priority,
            Some(1000),
            "set by the Priority admission plugin"
        );
    }
    wait_ready(&client, &ns, "TerraformCluster", "affine", "True", LONG).await;
    let affine = nodes_of(&client, &ns, "affine").await;
    assert!(!affine.is_empty());
    assert!(
        affine.iter().all(|n| n == DEDICATED_NODE),
        "required node affinity picks the dedicated node: {affine:?}"
    );
    let anywhere = nodes_of(&client, &ns, "anywhere").await;
    assert!(!anywhere.is_empty());
    assert!(
        anywhere
            .iter()
            .all(|n| n != DEDICATED_NODE && !n.is_empty()),
        "a pod without a toleration never lands on the tainted node: {anywhere:?}"
    );

    // The pod that selects the dedicated node without tolerating its taint fits no node; the Job
    // is still running, so the cluster reads as provisioning.
    let intolerant = eventually(LONG, "the intolerant cluster's pod exists", || async {
        let nodes = nodes_of(&client, &ns, "intolerant").await;
        (!nodes.is_empty()).then_some(nodes)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let intolerant_now = nodes_of(&client, &ns, "intolerant").await;
    assert_eq!(intolerant, intolerant_now);
    assert!(
        intolerant_now.iter().all(String::is_empty),
        "bound although no node may take it: {intolerant_now:?}"
    );
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "intolerant").await;
    assert_eq!(condition(&tc, "Ready").unwrap().0, "False", "{tc:#}");
}
