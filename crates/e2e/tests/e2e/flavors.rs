//! Every flavor under `templates/`, rendered by clusterctl, is accepted by the API server with
//! Cluster API's and CAPTF's admission webhooks (a server-side dry run; ClusterClass noop itself is
//! applied for real, since the ClusterClass flavor's Cluster must find it). This covers the
//! MachinePool flavor too (brought up for real in the pools test). The libvirt and docker flavors
//! and their identity templates are only dry-run here (their modules need a libvirt host or a
//! Docker daemon; docs/src/libvirt-host.md, docs/src/development/real-nodes.md).

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
    let libvirt = clusterctl
        .clone()
        .var("NAMESPACE", &ns)
        .var("LIBVIRT_HOST", "virt.example")
        .var("LIBVIRT_SSH_PRIVATE_KEY_B64", "a2V5Cg==")
        .var("LIBVIRT_KNOWN_HOSTS_B64", "aG9zdHMK");
    let identity = libvirt.generate_yaml(&template("identity-libvirt.yaml"))?;
    let applied = kube.apply_yaml_with(&identity, &ns, true).await?;
    assert_eq!(applied.len(), 2, "identity-libvirt.yaml: {applied:?}");
    let yaml =
        libvirt.generate_cluster("dry", &template("cluster-template-libvirt.yaml"), &ns, 3, 2)?;
    let applied = kube.apply_yaml_with(&yaml, &ns, true).await?;
    assert!(!applied.is_empty(), "the libvirt flavor rendered nothing");
    let docker = clusterctl
        .clone()
        .var("NAMESPACE", &ns)
        .var("DOCKER_HOST", "tcp://10.244.0.1:23750");
    let identity = docker.generate_yaml(&template("identity-docker.yaml"))?;
    let applied = kube.apply_yaml_with(&identity, &ns, true).await?;
    assert_eq!(applied.len(), 2, "identity-docker.yaml: {applied:?}");
    let yaml =
        docker.generate_cluster("dry", &template("cluster-template-docker.yaml"), &ns, 3, 2)?;
    let applied = kube.apply_yaml_with(&yaml, &ns, true).await?;
    assert!(!applied.is_empty(), "the docker flavor rendered nothing");
    Ok(())
}
