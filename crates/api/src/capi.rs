//! The subset of Cluster API v1beta2 (`cluster.x-k8s.io`) that CAPTF reads and patches: Cluster,
//! Machine and MachinePool (Cluster API contract summary §7).
//!
//! No Cluster API crate works with kube 5, so these are written by hand. Every struct keeps the
//! fields it does not model in `extra`, so an object read and written back loses nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::shared::ApiEndpoint;
use crate::status::{FailureDomain, MachineAddress};

/// Fields a struct does not model, kept as read.
pub type Extra = BTreeMap<String, Value>;

/// A reference to an object in the referrer's namespace (`ContractVersionedObjectReference`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContractVersionedObjectReference {
    /// The referenced object's API group.
    #[serde(default)]
    pub api_group: String,
    /// The referenced object's kind.
    #[serde(default)]
    pub kind: String,
    /// The referenced object's name.
    #[serde(default)]
    pub name: String,
}

impl ContractVersionedObjectReference {
    /// Whether this references `kind` of CAPTF's API group, named `name`.
    pub fn is_captf(&self, kind: &str, name: &str) -> bool {
        self.api_group == crate::GROUP && self.kind == kind && self.name == name
    }
}

/// The spec of a Cluster API Cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Whether reconciliation of the Cluster and its objects is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The workload cluster's API endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The workload cluster's network settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<ClusterNetwork>,
    /// The infrastructure cluster (a TerraformCluster for CAPTF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    /// The control-plane object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ContractVersionedObjectReference>,
    /// The ClusterClass topology, when the Cluster is managed by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A Cluster's network settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// The API server's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_port: Option<i32>,
    /// Service CIDR blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<NetworkRanges>,
    /// Pod CIDR blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NetworkRanges>,
    /// The service DNS domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_domain: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A list of CIDR blocks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    /// The CIDR blocks.
    #[serde(default)]
    pub cidr_blocks: Vec<String>,
}

/// A Cluster's ClusterClass topology (only what CAPTF reads).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// The Kubernetes version of the topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The status of a Cluster API Cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Provisioning progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitialization>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Failure domains copied from the infrastructure cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The Cluster condition type that says the control plane is initialized (the condition form of
/// `status.initialization.controlPlaneInitialized`, Cluster API contract summary §7).
pub const CONTROL_PLANE_INITIALIZED_CONDITION: &str = "ControlPlaneInitialized";

impl ClusterStatus {
    /// Whether the control plane is initialized: `true` when
    /// `status.initialization.controlPlaneInitialized` is true or the `ControlPlaneInitialized`
    /// condition is `True` (Cluster API v1.14 without a control-plane provider sets only the
    /// condition); otherwise the field as read (`None` when neither says anything).
    pub fn control_plane_initialized(&self) -> Option<bool> {
        let field = self
            .initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized);
        let condition = self
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == CONTROL_PLANE_INITIALIZED_CONDITION)
            .map(|c| c.status == "True");
        match (field, condition) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (field, condition) => field.or(condition),
        }
    }
}

/// A Cluster's provisioning progress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    /// The infrastructure cluster reported provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    /// The control plane is initialized (feeds the cluster role's `control_plane_initialized`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The spec of a Cluster API Machine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    namespaced,
    status = "MachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The Cluster the Machine belongs to.
    #[serde(default)]
    pub cluster_name: String,
    /// Where the Machine's bootstrap data comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
    /// The infrastructure machine (a TerraformMachine for CAPTF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    /// The Kubernetes version of the Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The failure domain to place the Machine in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// The provider ID copied from the infrastructure machine.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Where a Machine's (or MachinePool template's) bootstrap data comes from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// The Secret holding the bootstrap data (keys `value` and `format`), once it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The status of a Cluster API Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// The addresses copied from the infrastructure machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// The Machine's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The spec of a Cluster API MachinePool.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachinePool",
    namespaced,
    status = "MachinePoolStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolSpec {
    /// The Cluster the MachinePool belongs to.
    #[serde(default)]
    pub cluster_name: String,
    /// The desired number of instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The template of the pool's machines.
    #[serde(default)]
    pub template: MachinePoolTemplate,
    /// The failure domains the pool may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<Vec<String>>,
    /// The provider IDs copied from the infrastructure machine pool.
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id_list: Option<Vec<String>>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A MachinePool's machine template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolTemplate {
    /// Labels and annotations of the pool's machines (labels feed `node_labels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::workload::TemplateObjectMeta>,
    /// The machines' spec.
    #[serde(default)]
    pub spec: MachinePoolTemplateSpec,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The spec of a MachinePool's machines.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolTemplateSpec {
    /// Where the pool's bootstrap data comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
    /// The infrastructure machine pool (a TerraformMachinePool for CAPTF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    /// The Kubernetes version of the pool's machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The status of a Cluster API MachinePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolStatus {
    /// Instances Cluster API counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The pool's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::ClusterStatus;

    fn status(v: serde_json::Value) -> ClusterStatus {
        serde_json::from_value(v).expect("a Cluster status")
    }

    #[test]
    fn control_plane_initialized_accepts_the_field_or_the_condition() {
        let cond = |s: &str| {
            serde_json::json!({"type": "ControlPlaneInitialized", "status": s, "reason": "R",
                               "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
        };
        assert_eq!(
            status(serde_json::json!({})).control_plane_initialized(),
            None
        );
        assert_eq!(
            status(serde_json::json!({"initialization": {"controlPlaneInitialized": true}}))
                .control_plane_initialized(),
            Some(true)
        );
        // Cluster API v1.14 without a control-plane provider: only the condition.
        assert_eq!(
            status(serde_json::json!({"conditions": [cond("True")]})).control_plane_initialized(),
            Some(true)
        );
        assert_eq!(
            status(
                serde_json::json!({"initialization": {"controlPlaneInitialized": false},
                                      "conditions": [cond("True")]})
            )
            .control_plane_initialized(),
            Some(true)
        );
        assert_eq!(
            status(serde_json::json!({"conditions": [cond("False")]})).control_plane_initialized(),
            Some(false)
        );
    }
}
