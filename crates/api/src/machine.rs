//! TerraformMachine and TerraformMachineTemplate: the machine role (the book's The Kinds,
//! Machine Role, Machine Remediation).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::schema;
use crate::shared::{Architecture, MachineDriftPolicy, MachineRemediation};
use crate::status::{MachineAddress, WorkloadStatus};
use crate::workload::{TemplateObjectMeta, WorkspaceSpec};

/// The desired state of a TerraformMachine: one instance a machine-role module provisions for one
/// Cluster API Machine. `source`, `identityRef`, `variables` and `variablesFrom` are immutable:
/// change a machine by rolling out a new one.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachine",
    plural = "terraformmachines",
    namespaced,
    status = "TerraformMachineStatus",
    category = "cluster-api",
    shortname = "tfm",
    doc = "A TerraformMachine is a Cluster API infrastructure machine provisioned by running a machine-role Terraform/OpenTofu module image as Kubernetes Jobs.",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"The Cluster API Cluster this belongs to"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the infrastructure is ready"}"#,
    printcolumn = r#"{"name":"Provisioned","type":"boolean","jsonPath":".status.initialization.provisioned","description":"Whether the infrastructure is provisioned"}"#,
    printcolumn = r#"{"name":"ProviderID","type":"string","jsonPath":".spec.providerID","description":"Provider ID of the instance"}"#,
    printcolumn = r#"{"name":"Image","type":"string","priority":1,"jsonPath":".spec.source.image","description":"Module image"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineSpec {
    /// The module image, identity, Job policy and variables.
    #[serde(flatten)]
    pub workspace: WorkspaceSpec,
    /// The instance's provider ID, written once by CAPTF from the module's `provider_id`
    /// output. It only ever moves from empty to set.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// Drift checking (always report-only for a machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<MachineDriftPolicy>,
    /// Asking Cluster API to replace the machine when its instance stays unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineRemediation>,
}

/// The observed state of a TerraformMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineStatus {
    /// Conditions, provisioning, Jobs, state and backups.
    #[serde(flatten)]
    pub workload: WorkloadStatus,
    /// The instance's addresses from the module's `addresses` output, sorted InternalIP,
    /// InternalDNS, ExternalIP, ExternalDNS, Hostname, then by address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub addresses: Option<Vec<MachineAddress>>,
    /// The failure domain the instance runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// Whether the instance can be interrupted by its cloud (spot/preemptible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// Consecutive unhealthy health samples; at `remediation.unhealthyThreshold` CAPTF asks for
    /// remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub unhealthy_samples: Option<i32>,
}

/// The desired state of a TerraformMachineTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachineTemplate",
    plural = "terraformmachinetemplates",
    namespaced,
    status = "TerraformMachineTemplateStatus",
    category = "cluster-api",
    shortname = "tfmt",
    doc = "A TerraformMachineTemplate is what a MachineDeployment, MachineSet or control-plane provider expands into one TerraformMachine per Machine.",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.template.spec.source.image","description":"Module image"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineTemplateSpec {
    /// The TerraformMachine this template creates.
    pub template: TerraformMachineTemplateResource,
}

/// The metadata and spec of the TerraformMachines a template creates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineTemplateResource {
    /// Labels and annotations of the created objects. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// The spec of the created objects. Immutable once the template exists.
    pub spec: TerraformMachineSpec,
}

/// What a TerraformMachineTemplate resolved from its image's labels, for Cluster Autoscaler
/// scale-from-zero.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineTemplateStatus {
    /// Conditions (`CapacityResolved`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// Resources one machine offers, from the image label `io.captf.capacity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// Architecture and operating system of one machine, from the image label
    /// `io.captf.node-info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
    /// The image the capacity was resolved from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_source: Option<CapacitySource>,
}

/// Architecture and operating system of a template's machines.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// The CPU architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Architecture>,
    /// The operating system (for example `linux`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub operating_system: Option<String>,
}

/// The image a template's capacity was resolved from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySource {
    /// The image reference.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
}
