//! A stand-in workload cluster: the no-op modules boot nothing, so no kubelet ever joins and
//! Cluster API never sees a Node. Where a flow needs one (a Machine's nodeRef, an initialized
//! control plane, `clusterctl move`'s preconditions), a second API server of the test
//! environment plays the workload cluster: the Cluster's `<name>-kubeconfig` Secret points at it,
//! Nodes carry the machines' providerIDs, and `kube-system/kubeadm-config` says kubeadm ran.

use anyhow::Context as _;
use serde_json::{Value, json};
use testenv::control_plane::ControlPlane;

use crate::kube_ops::Kube;

/// A running stand-in workload cluster. Dropping it stops it.
#[derive(Debug)]
pub struct Workload {
    control_plane: ControlPlane,
    kubeconfig: String,
}

impl Workload {
    /// Starts an API server (with etcd and the controllers) in the scratch directory
    /// `<tmp>/<name>-<pid>`.
    pub async fn start(name: &str) -> anyhow::Result<Workload> {
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || {
            let dir = testenv::kubelet::scratch_dir(&name)?;
            let control_plane = ControlPlane::start(&dir)?;
            let kubeconfig = std::fs::read_to_string(&control_plane.endpoints().kubeconfig)?;
            Ok(Workload {
                control_plane,
                kubeconfig,
            })
        })
        .await?
    }

    /// An admin client of the workload cluster.
    pub async fn kube(&self) -> anyhow::Result<Kube> {
        Ok(Kube::new(self.control_plane.client().await?))
    }

    /// Points Cluster `ns/cluster`'s kubeconfig Secret (`<cluster>-kubeconfig`, Cluster API's
    /// name and shape) at this API server, creating it when no control-plane provider has.
    pub async fn serve_cluster(&self, mgmt: &Kube, ns: &str, cluster: &str) -> anyhow::Result<()> {
        use base64::Engine as _;
        let name = format!("{cluster}-kubeconfig");
        let value = base64::engine::general_purpose::STANDARD.encode(&self.kubeconfig);
        if mgmt.get("v1", "Secret", ns, &name).await?.is_some() {
            mgmt.merge("v1", "Secret", ns, &name, json!({"data": {"value": value}}))
                .await
        } else {
            mgmt.apply(
                &json!({
                    "apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
                    "metadata": {"name": name, "namespace": ns,
                                 "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                    "data": {"value": value}
                }),
                ns,
            )
            .await
        }
    }

    /// Registers a Ready Node with `provider_id`, as a kubelet on the machine would.
    pub async fn join(
        &self,
        node: &str,
        provider_id: &str,
        control_plane: bool,
    ) -> anyhow::Result<()> {
        let kube = self.kube().await?;
        let mut labels = json!({"kubernetes.io/hostname": node});
        if control_plane {
            labels["node-role.kubernetes.io/control-plane"] = json!("");
        }
        kube.apply(
            &json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node, "labels": labels},
                    "spec": {"providerID": provider_id}}),
            "",
        )
        .await?;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status: Value = json!({"status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "stand-in node of the end-to-end tests",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
        let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(kube.client.clone());
        api.patch_status(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(status),
        )
        .await
        .with_context(|| format!("marking Node {node} Ready"))?;
        Ok(())
    }

    /// Writes `kube-system/kubeadm-config`, which KubeadmControlPlane reads as "kubeadm init ran".
    pub async fn kubeadm_initialized(&self) -> anyhow::Result<()> {
        let kube = self.kube().await?;
        kube.apply(
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
                    "data": {"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n"}}),
            "kube-system",
        )
        .await
    }
}
