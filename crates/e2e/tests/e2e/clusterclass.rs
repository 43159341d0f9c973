//! Test 3: the ClusterClass flavor renders, applies and reaches the same state as the Quick
//! Start: ClusterClass noop applied to the namespace, a Cluster generated from
//! `cluster-template-clusterclass.yaml`, Cluster API's topology controller (feature gate
//! ClusterTopology) creating the TerraformCluster and the control-plane TerraformMachine from the
//! class's templates with the patched images and identity.

use e2e::clusterctl::template;
use e2e::quickstart;
use e2e::suite::JobLog;

const CLUSTER: &str = "classy";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clusterclass_flavor_reaches_the_quick_starts_state() -> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("clusterclass").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    quickstart::apply_identity(&kube, &clusterctl, &ns, &ns).await?;
    let class = std::fs::read_to_string(template("clusterclass-noop.yaml"))?;
    kube.apply_yaml(&class, &ns).await?;
    let yaml = clusterctl.generate_cluster(
        CLUSTER,
        &template("cluster-template-clusterclass.yaml"),
        &ns,
        1,
        0,
    )?;
    let jobs = JobLog::watch(&kube, &ns);
    kube.apply_yaml(&yaml, &ns).await?;

    // The topology controller names the TerraformCluster; the Cluster's ref finds it.
    let (_, tc) = quickstart::wait_cluster_provisioned(&kube, &ns, CLUSTER).await?;
    let tc_name = e2e::kube_ops::name_of(&tc);
    assert_eq!(
        tc["spec"]["source"]["image"],
        suite.images.cluster.as_str(),
        "the clusterImage patch"
    );
    assert_eq!(
        tc["spec"]["identityRef"]["name"],
        ns.as_str(),
        "the identity patch"
    );
    assert_eq!(
        tc["spec"]["defaults"]["identityRef"]["name"],
        ns.as_str(),
        "the identity patch's defaults"
    );

    let machine = quickstart::control_plane_machine(&kube, &ns, CLUSTER).await?;
    let (machine, tm) =
        quickstart::wait_machine_provisioned(&kube, &ns, &e2e::kube_ops::name_of(&machine)).await?;
    assert_eq!(
        tm["spec"]["source"]["image"],
        suite.images.machine.as_str(),
        "the machineImage patch"
    );
    quickstart::check_bootstrap_hash(&kube, &ns, &machine, &e2e::kube_ops::name_of(&tm)).await?;

    quickstart::delete_cluster(&kube, &ns, CLUSTER).await?;
    quickstart::check_deleted(&kube, &ns, &jobs, &[tc_name, e2e::kube_ops::name_of(&tm)]).await
}
