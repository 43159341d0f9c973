//! A MachinePool of the MachinePool flavor, brought up by Cluster API's real MachinePool
//! controller on a TerraformMachinePool (book: Machine Pools; MachinePool Role): the pool is
//! provisioned with 3 sorted provider IDs, Cluster API reads its `status.ready` and marks the
//! MachinePool's infrastructure provisioned, and deleting the Cluster destroys the pool.
//!
//! How far the MachinePool gets: Cluster API copies `providerIDList` and `replicas` to the
//! MachinePool only once it reaches the workload cluster (ClusterCache), and moves it to phase
//! Running only with Nodes whose provider IDs match; the no-op modules create no workload cluster,
//! so the MachinePool stops at its infrastructure provisioned (phase ScalingUp with Cluster API
//! v1.14.2; the phase reached is printed as an `e2e figures:` line).
//!
//! Stand-in bootstrap data, as in the workers test: kubeadm gives a pool its join configuration
//! only once the control plane is initialized, which a no-op control plane never is, so the
//! MachinePool takes its bootstrap data from a Secret this test writes.

use e2e::clusterctl::template;
use e2e::kube_ops::{CAPI, INFRA};
use e2e::quickstart::{self, WAIT};
use serde_json::json;

const CLUSTER: &str = "pools";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_pool_is_provisioned_by_cluster_apis_controller() -> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("pools").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    quickstart::apply_identity(&kube, &clusterctl, &ns, &ns).await?;
    let secret = e2e::stand_in::bootstrap_secret(&kube, &ns, CLUSTER, "mp-0").await?;
    let yaml = clusterctl.generate_cluster(
        CLUSTER,
        &template("cluster-template-machinepool.yaml"),
        &ns,
        1,
        3,
    )?;
    kube.apply_yaml(&e2e::stand_in::machine_pool(&yaml, CLUSTER, &secret)?, &ns)
        .await?;
    quickstart::wait_cluster_provisioned(&kube, &ns, CLUSTER).await?;

    let pool = format!("{CLUSTER}-mp-0");
    let tmp = quickstart::wait_ready(&kube, "TerraformMachinePool", &ns, &pool).await?;
    let ids: Vec<String> = (0..3).map(|i| format!("noop:///{ns}/{pool}/{i}")).collect();
    assert_eq!(tmp["spec"]["providerIDList"], json!(ids), "{tmp:#}");
    assert_eq!(tmp["status"]["replicas"], 3);
    assert_eq!(tmp["status"]["ready"], true);
    // Cluster API's MachinePool controller owns the pool and reads its status.ready.
    assert_eq!(tmp["metadata"]["ownerReferences"][0]["kind"], "MachinePool");
    let mp = kube
        .wait_for(
            (CAPI, "MachinePool"),
            &ns,
            &pool,
            WAIT,
            "infrastructure provisioned",
            |o| o["status"]["initialization"]["infrastructureProvisioned"] == json!(true),
        )
        .await?;
    println!(
        "e2e figures: pools: MachinePool phase {} with infrastructure provisioned, status.replicas {}",
        mp["status"]["phase"], mp["status"]["replicas"]
    );

    quickstart::delete_cluster(&kube, &ns, CLUSTER).await?;
    kube.wait_gone((INFRA, "TerraformMachinePool"), &ns, &pool, WAIT)
        .await?;
    quickstart::wait_no_leftovers(&kube, &ns).await
}
