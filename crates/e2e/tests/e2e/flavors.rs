//! Every flavor under `templates/`, rendered by clusterctl, is accepted by the API server with
//! Cluster API's and CAPTF's admission webhooks (a server-side dry run; ClusterClass noop itself is
//! applied for real, since the ClusterClass flavor's Cluster must find it). This covers the
//! MachinePool flavor too (brought up for real in the pools test).

use e2e::clusterctl::template;
use e2e::quickstart;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flavor_is_accepted_by_the_api_server_and_the_webhooks() -> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("flavors").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    let identity = clusterctl
        .clone()
        .var("NAMESPACE", &ns)
        .generate_yaml(&template("identity.yaml"))?;
    kube.apply_yaml_with(&identity, &ns, true).await?;
    kube.apply_yaml(
        &std::fs::read_to_string(template("clusterclass-noop.yaml"))?,
        &ns,
    )
    .await?;
    for flavor in [
        "cluster-template.yaml",
        "cluster-template-machinepool.yaml",
        "cluster-template-clusterclass.yaml",
    ] {
        let yaml = clusterctl.generate_cluster("dry", &template(flavor), &ns, 3, 2)?;
        let applied = kube.apply_yaml_with(&yaml, &ns, true).await?;
        assert!(!applied.is_empty(), "{flavor} rendered nothing");
    }
    Ok(())
}
