//! Test 2: workers. A MachineDeployment of the default flavor creates TerraformMachines from its
//! TerraformMachineTemplate; scaling it up and down by 2 applies and destroys them, the removed
//! ones from their durable inputs.
//!
//! Stand-in bootstrap data: kubeadm gives a worker its join configuration only once the control
//! plane is initialized, which a no-op control plane never is. So the MachineDeployment's
//! machines take their bootstrap data from a Secret this test writes (`bootstrap.dataSecretName`,
//! which Cluster API supports in place of a bootstrap provider), not from KubeadmConfig.

use std::collections::BTreeSet;

use e2e::clusterctl::template;
use e2e::kube_ops::{CAPI, INFRA, Kube, eventually, name_of};
use e2e::quickstart::{self, WAIT};
use e2e::suite::JobLog;
use serde_json::{Value, json};

const CLUSTER: &str = "workers";

/// The Machines of `cluster`'s MachineDeployment `<cluster>-md-0`.
pub async fn machines(kube: &Kube, ns: &str, cluster: &str) -> anyhow::Result<Vec<Value>> {
    kube.list(
        CAPI,
        "Machine",
        ns,
        &format!("cluster.x-k8s.io/deployment-name={cluster}-md-0"),
    )
    .await
}

/// Waits until `cluster`'s MachineDeployment has exactly `n` Machines, all Provisioned with Ready
/// TerraformMachines created from its template; returns the TerraformMachines' names.
pub async fn provisioned(
    kube: &Kube,
    ns: &str,
    cluster: &str,
    n: usize,
) -> anyhow::Result<BTreeSet<String>> {
    let names = eventually(WAIT, &format!("{n} worker Machines"), || async {
        let ms = machines(kube, ns, cluster).await?;
        let live: Vec<&Value> = ms
            .iter()
            .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
            .collect();
        Ok((ms.len() == n && live.len() == n)
            .then(|| live.iter().map(|m| name_of(m)).collect::<Vec<_>>()))
    })
    .await?;
    let mut tms = BTreeSet::new();
    for m in names {
        let (machine, tm) = quickstart::wait_machine_provisioned(kube, ns, &m).await?;
        assert_eq!(
            tm["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"],
            format!("{cluster}-md-0"),
            "TerraformMachine {} was not created from the MachineDeployment's template",
            name_of(&tm)
        );
        quickstart::check_bootstrap_hash(kube, ns, &machine, &name_of(&tm)).await?;
        tms.insert(name_of(&tm));
    }
    Ok(tms)
}

async fn scale(kube: &Kube, ns: &str, replicas: i64) -> anyhow::Result<()> {
    kube.merge(
        CAPI,
        "MachineDeployment",
        ns,
        &format!("{CLUSTER}-md-0"),
        json!({"spec": {"replicas": replicas}}),
    )
    .await
}

/// Writes the stand-in bootstrap data Secret of `cluster`'s MachineDeployment; returns its name.
pub async fn stand_in_bootstrap_secret(
    kube: &Kube,
    ns: &str,
    cluster: &str,
) -> anyhow::Result<String> {
    let secret = format!("{cluster}-md-0-bootstrap-stand-in");
    kube.apply(
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
                "metadata": {"name": secret, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "stringData": {"value": "#cloud-config\n# stand-in worker bootstrap data (see the workers test's doc)\n", "format": "cloud-config"}}),
        ns,
    )
    .await?;
    Ok(secret)
}

/// The generated default flavor with the MachineDeployment's bootstrap data from `secret`.
pub fn with_stand_in_bootstrap(yaml: &str, secret: &str, replicas: i64) -> anyhow::Result<String> {
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(yaml)?;
    for doc in &mut docs {
        if doc["kind"] == "MachineDeployment" {
            doc["spec"]["replicas"] = json!(replicas);
            doc["spec"]["template"]["spec"]["bootstrap"] = json!({"dataSecretName": secret});
        }
    }
    let mut out = String::new();
    for doc in docs
        .iter()
        .filter(|d| d.is_object() && d["kind"] != "KubeadmConfigTemplate")
    {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string(doc)?);
        out.push('\n');
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_scales_terraform_machines_up_and_down() -> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("workers").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    quickstart::apply_identity(&kube, &clusterctl, &ns, &ns).await?;
    let secret = stand_in_bootstrap_secret(&kube, &ns, CLUSTER).await?;
    let yaml =
        clusterctl.generate_cluster(CLUSTER, &template("cluster-template.yaml"), &ns, 1, 0)?;
    let jobs = JobLog::watch(&kube, &ns);
    kube.apply_yaml(&with_stand_in_bootstrap(&yaml, &secret, 2)?, &ns)
        .await?;
    quickstart::wait_cluster_provisioned(&kube, &ns, CLUSTER).await?;

    let two = provisioned(&kube, &ns, CLUSTER, 2).await?;
    scale(&kube, &ns, 4).await?;
    let four = provisioned(&kube, &ns, CLUSTER, 4).await?;
    assert!(
        two.is_subset(&four),
        "scaling up replaced machines: {two:?} -> {four:?}"
    );
    scale(&kube, &ns, 2).await?;
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
