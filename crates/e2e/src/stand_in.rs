//! Stand-in bootstrap data for worker Machines and MachinePools (the workers, pools and upgrade
//! tests): kubeadm gives a worker or a pool its join configuration only once the control plane
//! is initialized, which a no-op control plane never is. So their bootstrap data comes from a
//! Secret the test writes (`bootstrap.dataSecretName`, which Cluster API supports in place of a
//! bootstrap provider), not from KubeadmConfig.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::kube_ops::{CAPI, Kube, eventually, name_of};
use crate::quickstart::{self, WAIT};

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

/// Scales `cluster`'s MachineDeployment `<cluster>-md-0` to `replicas`.
pub async fn scale(kube: &Kube, ns: &str, cluster: &str, replicas: i64) -> anyhow::Result<()> {
    kube.merge(
        CAPI,
        "MachineDeployment",
        ns,
        &format!("{cluster}-md-0"),
        json!({"spec": {"replicas": replicas}}),
    )
    .await
}

/// Writes the stand-in bootstrap data Secret of `cluster`'s MachineDeployment or MachinePool
/// `<cluster>-<group>` (`md-0`, `mp-0`); returns its name.
pub async fn bootstrap_secret(
    kube: &Kube,
    ns: &str,
    cluster: &str,
    group: &str,
) -> anyhow::Result<String> {
    let secret = format!("{cluster}-{group}-bootstrap-stand-in");
    kube.apply(
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
                "metadata": {"name": secret, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "stringData": {"value": "#cloud-config\n# stand-in bootstrap data (see e2e::stand_in)\n", "format": "cloud-config"}}),
        ns,
    )
    .await?;
    Ok(secret)
}

/// The documents of the YAML stream `yaml` that `keep` keeps, each changed by `edit`, as a
/// stream again.
pub fn rewrite(
    yaml: &str,
    keep: impl Fn(&Value) -> bool,
    mut edit: impl FnMut(&mut Value),
) -> anyhow::Result<String> {
    let mut out = String::new();
    for mut doc in serde_saphyr::from_multiple::<Value>(yaml)? {
        if doc.is_object() && keep(&doc) {
            edit(&mut doc);
            out.push_str("---\n");
            out.push_str(&serde_json::to_string(&doc)?);
            out.push('\n');
        }
    }
    Ok(out)
}

/// The generated default flavor with the MachineDeployment's bootstrap data from `secret`.
pub fn machine_deployment(yaml: &str, secret: &str, replicas: i64) -> anyhow::Result<String> {
    rewrite(
        yaml,
        |d| d["kind"] != "KubeadmConfigTemplate",
        |doc| {
            if doc["kind"] == "MachineDeployment" {
                doc["spec"]["replicas"] = json!(replicas);
                doc["spec"]["template"]["spec"]["bootstrap"] = json!({"dataSecretName": secret});
            }
        },
    )
}

/// The generated MachinePool flavor of `cluster` with the pool's bootstrap data from `secret`
/// (its KubeadmConfig left out).
pub fn machine_pool(yaml: &str, cluster: &str, secret: &str) -> anyhow::Result<String> {
    let pool_config = format!("{cluster}-mp-0");
    rewrite(
        yaml,
        |d| !(d["kind"] == "KubeadmConfig" && d["metadata"]["name"] == pool_config),
        |doc| {
            if doc["kind"] == "MachinePool" {
                doc["spec"]["template"]["spec"]["bootstrap"] = json!({"dataSecretName": secret});
            }
        },
    )
}
