//! TerraformMachinePool and TerraformMachinePoolTemplate: the machinepool role (the book's The
//! Kinds, Machine Pools, MachinePool Role).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::{DEFAULT_MEMBERSHIP_REFRESH_INTERVAL_SECONDS, PoolDriftPolicy};
use crate::status::{MachinePoolInstance, WorkloadStatus};
use crate::workload::{TemplateObjectMeta, WorkspaceSpec};

/// The desired state of a TerraformMachinePool: a group of instances (an autoscaling group, a
/// scale set) a machinepool-role module provisions for one Cluster API MachinePool. Every field
/// is mutable: a change re-applies the module.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachinePool",
    plural = "terraformmachinepools",
    namespaced,
    status = "TerraformMachinePoolStatus",
    category = "cluster-api",
    shortname = "tfmp",
    doc = "A TerraformMachinePool is a Cluster API infrastructure machine pool provisioned by running a machinepool-role Terraform/OpenTofu module image as Kubernetes Jobs.",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"The Cluster API Cluster this belongs to"}"#,
    printcolumn = r#"{"name":"MachinePool","type":"string","jsonPath":".metadata.ownerReferences[?(@.kind==\"MachinePool\")].name","description":"The Cluster API MachinePool that owns it"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the infrastructure is ready"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas","description":"Instances the module reports"}"#,
    printcolumn = r#"{"name":"Provisioned","type":"boolean","jsonPath":".status.initialization.provisioned","description":"Whether the infrastructure is provisioned"}"#,
    printcolumn = r#"{"name":"Image","type":"string","priority":1,"jsonPath":".spec.source.image","description":"Module image"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachinePoolSpec {
    /// The module image, identity, Job policy and variables.
    #[serde(flatten)]
    pub workspace: WorkspaceSpec,
    /// The group's own ID (an autoscaling group, a scale set), from the module's `provider_id`
    /// output. Informational.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// The provider IDs of the group's instances, from the module's `provider_id_list` output,
    /// sorted and de-duplicated. Cluster API matches them against Nodes.
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 512)))]
    pub provider_id_list: Option<Vec<String>>,
    /// Drift checking; a pool's cannot be turned off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<PoolDriftPolicy>,
    /// Seconds between membership refreshes that keep `providerIDList` current: 15 to 86400
    /// (anything else, 0 included, is rejected). Unset means 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 15, max = 86400))]
    pub membership_refresh_interval_seconds: Option<i32>,
}

impl TerraformMachinePoolSpec {
    /// Seconds between membership refreshes.
    pub fn membership_refresh_interval_seconds_or_default(&self) -> i32 {
        match self.membership_refresh_interval_seconds {
            Some(s) if s > 0 => s,
            _ => DEFAULT_MEMBERSHIP_REFRESH_INTERVAL_SECONDS,
        }
    }
}

/// The observed state of a TerraformMachinePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachinePoolStatus {
    /// Conditions, provisioning, Jobs, state and backups.
    #[serde(flatten)]
    pub workload: WorkloadStatus,
    /// Cluster API v1.14 still reads this for a machine pool: true once provisioned, latched
    /// with `initialization.provisioned`.
    #[serde(default)]
    pub ready: bool,
    /// Instances in the group, from the module's `replicas` output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// The group's instances from the module's `instances` output, at most 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1000))]
    pub instances: Option<Vec<MachinePoolInstance>>,
}

/// The desired state of a TerraformMachinePoolTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachinePoolTemplate",
    plural = "terraformmachinepooltemplates",
    namespaced,
    category = "cluster-api",
    shortname = "tfmpt",
    doc = "A TerraformMachinePoolTemplate is what a ClusterClass topology expands into one TerraformMachinePool.",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.template.spec.source.image","description":"Module image"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachinePoolTemplateSpec {
    /// The TerraformMachinePool this template creates.
    pub template: TerraformMachinePoolTemplateResource,
}

/// The metadata and spec of the TerraformMachinePool a template creates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachinePoolTemplateResource {
    /// Labels and annotations of the created object. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// The spec of the created object. Immutable once the template exists.
    pub spec: TerraformMachinePoolSpec,
}
