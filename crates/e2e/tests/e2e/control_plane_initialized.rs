//! Known from a trial run, fix 1: without a control-plane provider, Cluster API sets only the
//! Cluster's `ControlPlaneInitialized` condition, not `status.initialization.controlPlaneInitialized`.
//! CAPTF must accept either: once a control-plane Machine's Node joins, the cluster module
//! re-applies with `control_plane_initialized = true`. (The other shape, the field set from
//! KubeadmControlPlane, is covered by the `clusterctl move` test.)

use e2e::kube_ops::{CAPI, INFRA, KUBEADM, is_true};
use e2e::quickstart::{self, WAIT};
use e2e::suite::JobLog;
use e2e::workload::Workload;
use serde_json::json;

const CLUSTER: &str = "bare";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_initialized_condition_alone_re_applies_the_cluster() -> anyhow::Result<()>
{
    let (suite, kube, ns) = crate::setup("cp-init").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    quickstart::apply_identity(&kube, &clusterctl, &ns, &ns).await?;
    let jobs = JobLog::watch(&kube, &ns);
    let machine = format!("{CLUSTER}-cp-0");
    for obj in [
        json!({"apiVersion": CAPI, "kind": "Cluster", "metadata": {"name": CLUSTER, "namespace": ns},
               "spec": {"clusterNetwork": {"apiServerPort": 6443, "pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": CLUSTER}}}),
        json!({"apiVersion": INFRA, "kind": "TerraformCluster", "metadata": {"name": CLUSTER, "namespace": ns},
               "spec": {"source": {"image": suite.images.cluster}, "identityRef": {"name": ns}}}),
        json!({"apiVersion": KUBEADM, "kind": "KubeadmConfig", "metadata": {"name": machine, "namespace": ns},
               "spec": {"initConfiguration": {"nodeRegistration": {"imagePullPolicy": "IfNotPresent"}}}}),
        json!({"apiVersion": INFRA, "kind": "TerraformMachine", "metadata": {"name": machine, "namespace": ns},
               "spec": {"source": {"image": suite.images.machine}}}),
        json!({"apiVersion": CAPI, "kind": "Machine",
               "metadata": {"name": machine, "namespace": ns, "labels": {"cluster.x-k8s.io/control-plane": ""}},
               "spec": {"clusterName": CLUSTER, "version": e2e::clusterctl::KUBERNETES_VERSION,
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": machine}},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformMachine", "name": machine}}}),
    ] {
        kube.apply(&obj, &ns).await?;
    }
    quickstart::wait_cluster_provisioned(&kube, &ns, CLUSTER).await?;
    let (m, tm) = quickstart::wait_machine_provisioned(&kube, &ns, &machine).await?;
    quickstart::check_bootstrap_hash(&kube, &ns, &m, &machine).await?;

    let workload = Workload::start("captf-e2e-workload-bare").await?;
    workload.serve_cluster(&kube, &ns, CLUSTER).await?;
    workload
        .join(&machine, tm["spec"]["providerID"].as_str().unwrap(), true)
        .await?;
    let cluster = kube
        .wait_for(
            (CAPI, "Cluster"),
            &ns,
            CLUSTER,
            WAIT,
            "ControlPlaneInitialized=True",
            |o| is_true(o, "ControlPlaneInitialized"),
        )
        .await?;
    assert_ne!(
        cluster["status"]["initialization"]["controlPlaneInitialized"], true,
        "this Cluster API sets the field without a control-plane provider too: the test no longer shows the condition-only shape"
    );
    quickstart::wait_applies(&jobs, CLUSTER, 2).await?;
    let state =
        quickstart::state_document(&kube, &ns, contract::names::ObjectKind::Cluster, CLUSTER)
            .await?;
    assert_eq!(
        quickstart::find_value(&state, "control_plane_initialized"),
        Some(json!(true)),
        "the re-apply did not pass control_plane_initialized = true"
    );

    kube.delete(CAPI, "Cluster", &ns, CLUSTER).await?;
    kube.wait_gone((CAPI, "Cluster"), &ns, CLUSTER, WAIT)
        .await?;
    quickstart::wait_no_leftovers(&kube, &ns).await
}
