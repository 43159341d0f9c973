//! The cluster's exports handed to machines and pools (spec: Module Contract, the cluster role's
//! `exports` and "When it is read"), with real Jobs: a malformed exports value holds machines at
//! `WaitingForClusterExports` until fixed; a pool re-reads exports for its whole life and
//! re-applies on a change; an externally managed cluster hands `{}`.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

async fn set_exports_value(client: &kube::Client, ns: &str, name: &str, value: Value) {
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), ns);
    tcs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"exports_value": value}}})),
    )
    .await
    .unwrap();
}

/// `captf_cluster_outputs` as the object's durable inputs Secret (`captf-inputs-<m|mp>-<name>`)
/// recorded it at its last Job start.
async fn handed_exports(client: &kube::Client, ns: &str, secret: &str) -> Option<Value> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let s = api.get_opt(secret).await.unwrap()?;
    let tfvars = s.data?.get("terraform.tfvars.json")?.0.clone();
    let tfvars: Value = serde_json::from_slice(&tfvars).ok()?;
    Some(tfvars["captf_cluster_outputs"].clone())
}

/// Module Contract "When it is read" (book l.748): a provisioned cluster whose re-apply makes its
/// `exports` output hold a fractional number reads `OutputsValid=False` (an output violation on
/// the cluster side), and a machine created then stays
/// `DependenciesReady=Unknown/WaitingForClusterExports` naming the cluster, with no Job, until the
/// cluster module's exports are fixed; then it applies with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_exports_value_holds_machines_until_it_is_fixed() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = exporting_image(env).await;
    let ns = env.namespace("badexports").await.unwrap();
    identity(
        &client,
        "id-badexports",
        &[ns.as_str()],
        "planted-badexports-1",
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-badexports");
    cluster(&client, &ns, "prod", "id-badexports", &image).await;
    wait_ready(&client, &ns, "TerraformCluster", "prod", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "prod").await;
    capi_control_plane_initialized(&client, &ns, "prod").await;
    // A re-apply makes the exports malformed: an output violation on the cluster side.
    set_exports_value(&client, &ns, "prod", json!("fraction")).await;
    let tc = until(
        &client,
        &ns,
        TC,
        "TerraformCluster",
        "prod",
        "the cluster's OutputsValid=False",
        LONG,
        |tc| condition(tc, "OutputsValid").is_some_and(|c| c.0 == "False"),
    )
    .await;
    let message = condition_message(&tc, "OutputsValid");
    assert!(message.contains("exports"), "{message}");
    machine(
        &client,
        &ns,
        "prod",
        "worker",
        &images.machine,
        false,
        "#cloud-config\n",
    )
    .await;
    let tm = eventually(LONG, "WaitingForClusterExports", || async {
        let tm = get_json(&client, &ns, TC, "TerraformMachine", "worker").await;
        (condition(&tm, "DependenciesReady")
            == Some(("Unknown".to_owned(), "WaitingForClusterExports".to_owned())))
        .then_some(tm)
    })
    .await;
    let message = condition_message(&tm, "DependenciesReady");
    assert!(message.contains("TerraformCluster prod"), "{message}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "worker").await.is_empty());

    set_exports_value(&client, &ns, "prod", json!("fixed")).await;
    wait_ready(&client, &ns, "TerraformMachine", "worker", "True", LONG).await;
    let handed = handed_exports(&client, &ns, "captf-inputs-m-worker").await;
    assert_eq!(
        handed,
        Some(json!({"cluster": format!("{ns}/prod"), "value": "fixed"}))
    );
    assert!(
        !events_json(&client, &ns)
            .await
            .contains("planted-badexports-1")
    );
}

/// Module Contract "When it is read": a pool re-reads the cluster's exports for its whole life;
/// a change re-applies it with the new `captf_cluster_outputs` (in its inputs hash), where a
/// provisioned machine keeps the exports its apply started with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_re_applies_when_the_exports_change_and_a_machine_does_not() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = exporting_image(env).await;
    let pool_image = pool_image(env, "v1").await;
    let ns = env.namespace("handoff").await.unwrap();
    identity(&client, "id-handoff", &[ns.as_str()], "planted-handoff-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-handoff");
    cluster(&client, &ns, "prod", "id-handoff", &image).await;
    wait_ready(&client, &ns, "TerraformCluster", "prod", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "prod").await;
    capi_control_plane_initialized(&client, &ns, "prod").await;
    pool(&client, &ns, "prod", "workers", &pool_image, 2).await;
    machine(
        &client,
        &ns,
        "prod",
        "worker",
        &images.machine,
        false,
        "#cloud-config\n",
    )
    .await;
    wait_ready(
        &client,
        &ns,
        "TerraformMachinePool",
        "workers",
        "True",
        LONG,
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "worker", "True", LONG).await;
    let one = json!({"cluster": format!("{ns}/prod"), "value": "one"});
    assert_eq!(
        handed_exports(&client, &ns, "captf-inputs-mp-workers").await,
        Some(one.clone())
    );

    let first = op_hashes(&jobs_of(&client, &ns, "workers").await, "apply");
    let machine_first = op_hashes(&jobs_of(&client, &ns, "worker").await, "apply");
    assert_eq!(first.len(), 1, "one inputs hash applied so far: {first:?}");
    set_exports_value(&client, &ns, "prod", json!("two")).await;
    let two = json!({"cluster": format!("{ns}/prod"), "value": "two"});
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let jobs = jobs_of(&client, &ns, "workers").await;
        // A new inputs hash; a retried attempt (a failure on a loaded machine) repeats its hash.
        let applied = op_hashes(&jobs, "apply");
        let handed = handed_exports(&client, &ns, "captf-inputs-mp-workers").await;
        if applied.len() == 2 && applied.is_superset(&first) && handed.as_ref() == Some(&two) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pool did not re-apply with the new exports; handed {handed:?}, Jobs:\n{}",
            job_summary(&jobs)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wait_ready(
        &client,
        &ns,
        "TerraformMachinePool",
        "workers",
        "True",
        LONG,
    )
    .await;
    // The machine keeps what its apply started with, and does not apply again.
    assert_eq!(
        handed_exports(&client, &ns, "captf-inputs-m-worker").await,
        Some(one)
    );
    let jobs = jobs_of(&client, &ns, "worker").await;
    assert_eq!(
        op_hashes(&jobs, "apply"),
        machine_first,
        "{}",
        job_summary(&jobs)
    );
}

/// Module Contract "When it is read": a machine of an externally managed cluster (the
/// `cluster.x-k8s.io/managed-by` annotation on its TerraformCluster, which CAPTF leaves alone) is
/// handed `captf_cluster_outputs = {}` without any cluster state, and applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_of_an_externally_managed_cluster_is_handed_empty_exports() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("extexports").await.unwrap();
    identity(
        &client,
        "id-extexports",
        &[ns.as_str()],
        "planted-extexports-1",
    )
    .await;
    cluster_with_spec(
        &client,
        &ns,
        "byo",
        "id-extexports",
        &images.cluster,
        json!({"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}}),
    )
    .await;
    annotate(
        &client,
        &ns,
        "byo",
        "cluster.x-k8s.io/managed-by",
        "someone-else",
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-extexports");
    capi_cluster_provisioned(&client, &ns, "byo").await;
    capi_control_plane_initialized(&client, &ns, "byo").await;
    machine(
        &client,
        &ns,
        "byo",
        "worker",
        &images.machine,
        false,
        "#cloud-config\n",
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "worker", "True", LONG).await;
    assert_eq!(
        handed_exports(&client, &ns, "captf-inputs-m-worker").await,
        Some(json!({}))
    );
    assert!(
        jobs_of(&client, &ns, "byo").await.is_empty(),
        "the cluster is left alone"
    );
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "byo").await;
    assert!(tc["status"].is_null(), "{tc:#}");
}
