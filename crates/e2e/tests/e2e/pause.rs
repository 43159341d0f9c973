//! Test 5: `spec.paused` on the Cluster stops new Jobs; unpausing resumes them. The Job that is
//! due: a drift check, once the TerraformCluster's drift interval is made short.

use std::time::Duration;

use e2e::clusterctl::template;
use e2e::kube_ops::{CAPI, INFRA, condition, eventually};
use e2e::quickstart::{self, WAIT};
use e2e::suite::JobLog;
use serde_json::json;

const CLUSTER: &str = "paused";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_starts_no_job_until_it_is_unpaused() -> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("pause").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    quickstart::apply_identity(&kube, &clusterctl, &ns, &ns).await?;
    let yaml =
        clusterctl.generate_cluster(CLUSTER, &template("cluster-template.yaml"), &ns, 1, 0)?;
    let jobs = JobLog::watch(&kube, &ns);
    kube.apply_yaml(&yaml, &ns).await?;
    quickstart::wait_cluster_provisioned(&kube, &ns, CLUSTER).await?;
    let machine = quickstart::control_plane_machine(&kube, &ns, CLUSTER).await?;
    quickstart::wait_machine_provisioned(&kube, &ns, &e2e::kube_ops::name_of(&machine)).await?;
    // Let every Job the bring-up started finish.
    eventually(WAIT, "the bring-up's Jobs to finish", || async {
        let all = jobs.jobs();
        Ok((!all.is_empty() && all.iter().all(|j| j.succeeded)).then_some(()))
    })
    .await?;

    kube.merge(
        CAPI,
        "Cluster",
        &ns,
        CLUSTER,
        json!({"spec": {"paused": true}}),
    )
    .await?;
    kube.wait_for(
        (INFRA, "TerraformCluster"),
        &ns,
        CLUSTER,
        WAIT,
        "Paused=True",
        |o| condition(o, "Paused").is_some_and(|(s, _)| s == "True"),
    )
    .await?;
    let before = jobs.jobs().len();
    kube.merge(
        INFRA,
        "TerraformCluster",
        &ns,
        CLUSTER,
        json!({"spec": {"drift": {"intervalSeconds": 5}}}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let during = jobs.jobs();
    assert_eq!(
        during.len(),
        before,
        "a paused cluster started Jobs: {during:?}"
    );

    kube.merge(
        CAPI,
        "Cluster",
        &ns,
        CLUSTER,
        json!({"spec": {"paused": false}}),
    )
    .await?;
    let resumed = eventually(WAIT, "a Job after unpausing", || async {
        Ok(jobs
            .jobs()
            .into_iter()
            .find(|j| j.owner == CLUSTER && !during.iter().any(|d| d.name == j.name)))
    })
    .await?;
    println!(
        "e2e figures: pause: {before} Jobs before the pause, none while paused for 30s, then {} ({})",
        resumed.name, resumed.op
    );
    kube.merge(
        INFRA,
        "TerraformCluster",
        &ns,
        CLUSTER,
        json!({"spec": {"drift": {"intervalSeconds": 0}}}),
    )
    .await?;

    kube.delete(CAPI, "Cluster", &ns, CLUSTER).await?;
    kube.wait_gone((CAPI, "Cluster"), &ns, CLUSTER, WAIT)
        .await?;
    quickstart::wait_no_leftovers(&kube, &ns).await
}
