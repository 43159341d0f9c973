//! Test 1: the Quick Start, verbatim.

use e2e::quickstart::{self, Progress};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_brings_a_cluster_up_and_down_with_cluster_apis_controllers()
-> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("quickstart").await?;
    let f = quickstart::run(
        suite,
        &kube,
        &ns,
        &ns,
        "my-cluster",
        &Progress::new(true),
        false,
    )
    .await?;
    println!(
        "e2e figures: quick start: apply to Cluster Provisioned {:.1}s, apply to Machine Provisioned {:.1}s, {} Jobs started, delete {:.1}s",
        f.apply_to_cluster_provisioned.as_secs_f64(),
        f.apply_to_machine_provisioned.as_secs_f64(),
        f.jobs_started,
        f.delete.as_secs_f64()
    );
    // The cluster apply, the control-plane machine's apply, their two destroys; the cluster
    // re-applies only once the control plane initializes, which a no-op control plane never does.
    assert!(f.jobs_started >= 4, "{} Jobs", f.jobs_started);
    Ok(())
}
