//! TerraformCluster and TerraformClusterTemplate: the cluster role (the book's The Kinds,
//! Cluster Role, Plan Approval).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::{
    ApiEndpoint, ApplyPolicy, DriftPolicy, IdentityReference, JobPolicy, MachineDriftPolicy,
};
use crate::status::{FailureDomain, PlanPreview, WorkloadStatus};
use crate::workload::{TemplateObjectMeta, WorkspaceSpec};

/// The desired state of a TerraformCluster: the cluster-wide substrate (network, load balancer,
/// control-plane endpoint) a cluster-role module provisions for one Cluster API Cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformCluster",
    plural = "terraformclusters",
    namespaced,
    status = "TerraformClusterStatus",
    category = "cluster-api",
    shortname = "tfc",
    doc = "A TerraformCluster is a Cluster API infrastructure cluster provisioned by running a cluster-role Terraform/OpenTofu module image as Kubernetes Jobs.",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']","description":"The Cluster API Cluster this belongs to"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the infrastructure is ready"}"#,
    printcolumn = r#"{"name":"Provisioned","type":"boolean","jsonPath":".status.initialization.provisioned","description":"Whether the infrastructure is provisioned"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".spec.controlPlaneEndpoint.host","description":"Control-plane endpoint host"}"#,
    printcolumn = r#"{"name":"Image","type":"string","priority":1,"jsonPath":".spec.source.image","description":"Module image"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterSpec {
    /// The module image, identity, Job policy and variables. `identityRef` is required on a
    /// TerraformCluster (a rule of the TerraformCluster CRD only: a TerraformClusterTemplate may
    /// leave it to a ClusterClass patch).
    #[serde(flatten)]
    pub workspace: WorkspaceSpec,
    /// The Kubernetes API endpoint of the workload cluster. Set it yourself, or leave it empty
    /// for the module's `control_plane_endpoint` output to fill in once. Immutable once it has a
    /// host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Drift checking of the cluster's infrastructure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftPolicy>,
    /// `Automatic` (the default) applies changes directly; `Manual` applies a change only after
    /// its plan has been reviewed and approved. The first apply is never gated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_policy: Option<ApplyPolicy>,
    /// Defaults for the cluster's TerraformMachines and TerraformMachinePools (never for the
    /// cluster itself), merged field by field under their own settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<ClusterDefaults>,
}

/// What a TerraformCluster hands to its machines and pools.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDefaults {
    /// The identity of machines and pools that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<IdentityReference>,
    /// The Job policy machines and pools merge their own over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<JobPolicy>,
    /// The drift interval of machines and pools that set none (0 turns machine drift off; a
    /// pool treats 0 as "use the manager's default").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<MachineDriftPolicy>,
}

/// The observed state of a TerraformCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterStatus {
    /// Conditions, provisioning, Jobs, state and backups.
    #[serde(flatten)]
    pub workload: WorkloadStatus,
    /// The failure domains the module's `failure_domains` output offers, copied by Cluster API
    /// to the Cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// The plan waiting for approval under `applyPolicy: Manual`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanPreview>,
}

/// The desired state of a TerraformClusterTemplate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformClusterTemplate",
    plural = "terraformclustertemplates",
    namespaced,
    category = "cluster-api",
    shortname = "tfct",
    doc = "A TerraformClusterTemplate is what a ClusterClass topology expands into one TerraformCluster.",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.template.spec.source.image","description":"Module image"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterTemplateSpec {
    /// The TerraformCluster this template creates.
    pub template: TerraformClusterTemplateResource,
}

/// The metadata and spec of the TerraformCluster a template creates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterTemplateResource {
    /// Labels and annotations of the created object. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// The spec of the created object. Immutable once the template exists.
    pub spec: TerraformClusterSpec,
}
