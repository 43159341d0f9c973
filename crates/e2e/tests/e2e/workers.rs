//! Test 2: workers. A MachineDeployment of the default flavor creates TerraformMachines from its
//! TerraformMachineTemplate; scaling it up and down by 2 applies and destroys them, the removed
//! ones from their durable inputs.
//!
//! Stand-in bootstrap data: kubeadm gives a worker its join configuration only once the control
//! plane is initialized, which a no-op control plane never is. So the MachineDeployment's
//! machines take their bootstrap data from a Secret this test writes (`bootstrap.dataSecretName`,
//! which Cluster API supports in place of a bootstrap provider), not from KubeadmConfig.

use e2e::clusterctl::template;
use e2e::kube_ops::{CAPI, INFRA, eventually};
use e2e::quickstart::{self, WAIT};
use e2e::stand_in::{bootstrap_secret, machine_deployment, provisioned, scale};
use e2e::suite::JobLog;

const CLUSTER: &str = "workers";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_scales_terraform_machines_up_and_down() -> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("workers").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    quickstart::apply_identity(&kube, &clusterctl, &ns, &ns).await?;
    let secret = bootstrap_secret(&kube, &ns, CLUSTER, "md-0").await?;
    let yaml =
        clusterctl.generate_cluster(CLUSTER, &template("cluster-template.yaml"), &ns, 1, 0)?;
    let jobs = JobLog::watch(&kube, &ns);
    kube.apply_yaml(&machine_deployment(&yaml, &secret, 2)?, &ns)
        .await?;
    quickstart::wait_cluster_provisioned(&kube, &ns, CLUSTER).await?;

    let two = provisioned(&kube, &ns, CLUSTER, 2).await?;
    scale(&kube, &ns, CLUSTER, 4).await?;
    let four = provisioned(&kube, &ns, CLUSTER, 4).await?;
    assert!(
        two.is_subset(&four),
        "scaling up replaced machines: {two:?} -> {four:?}"
    );
    scale(&kube, &ns, CLUSTER, 2).await?;
    let remaining = provisioned(&kube, &ns, CLUSTER, 2).await?;
    let removed: Vec<&String> = four.difference(&remaining).collect();
    assert_eq!(removed.len(), 2, "{four:?} -> {remaining:?}");
    for tm in &removed {
        kube.wait_gone((INFRA, "TerraformMachine"), &ns, tm, WAIT)
            .await?;
        let destroy = eventually(WAIT, &format!("the destroy Job of {tm}"), || async {
            Ok(jobs
                .of_op("destroy")
                .into_iter()
                .find(|j| &&j.owner == tm && j.succeeded))
        })
        .await?;
        assert_eq!(
            destroy.destroyed_from_durable_inputs,
            Some(Ok(true)),
            "the destroy Job of {tm} did not run from the durable inputs captf-inputs-m-{tm}"
        );
    }
    println!(
        "e2e figures: workers: {} Jobs for 1 cluster, 1 control-plane and 4 worker machines (2 destroyed)",
        jobs.jobs().len()
    );

    kube.delete(CAPI, "Cluster", &ns, CLUSTER).await?;
    kube.wait_gone((CAPI, "Cluster"), &ns, CLUSTER, WAIT)
        .await?;
    quickstart::wait_no_leftovers(&kube, &ns).await
}
