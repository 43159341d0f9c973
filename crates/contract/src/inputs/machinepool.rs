//! The machinepool role's inputs (spec: MachinePool Role "Inputs", Job Inputs §4, Machine Pools
//! "Choose fixed replicas or autoscaling").

use super::{
    BootstrapSource, ClusterHandoff, CommonInputs, InputsError, ObjectSource, bootstrap_data,
    bootstrap_format, non_empty,
};
use crate::names::ObjectKind;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// `MachinePool.spec.replicas` when unset (Cluster API's own default).
pub const DEFAULT_REPLICAS: i32 = 1;

/// Everything the machinepool role's inputs are built from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachinePoolInputsSource {
    /// The TerraformMachinePool and its Cluster.
    pub object: ObjectSource,
    /// The owning MachinePool's `metadata.name`.
    pub machinepool_name: String,
    /// `MachinePool.spec.replicas` (`None` when unset; an explicit 0 is `Some(0)`).
    pub spec_replicas: Option<i32>,
    /// `TerraformMachinePool.status.replicas`, the desired capacity observed at the last refresh.
    pub status_replicas: Option<i32>,
    /// The MachinePool's `cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size` annotation.
    pub autoscaler_min_size: Option<String>,
    /// The MachinePool's `cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size` annotation.
    pub autoscaler_max_size: Option<String>,
    /// The Secret named by `MachinePool.spec.template.spec.bootstrap.dataSecretName`.
    pub bootstrap: BootstrapSource,
    /// `MachinePool.spec.failureDomains`.
    pub failure_domains: Option<Vec<String>>,
    /// `MachinePool.spec.template.spec.version`; `""` counts as unset.
    pub version: Option<String>,
    /// `MachinePool.spec.template.metadata.labels`.
    pub node_labels: Option<BTreeMap<String, String>>,
    /// The owning TerraformCluster's state outputs, or its being externally managed.
    pub cluster: ClusterHandoff,
}

/// The `autoscaling` input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Autoscaling {
    /// Whether the module owns the desired count.
    pub enabled: bool,
    /// The lower bound (0 when disabled).
    pub min: i32,
    /// The upper bound (0 when disabled).
    pub max: i32,
}

/// What the autoscaler annotations say, for the pool's `AutoscalingActive` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoscalingMode {
    /// Neither annotation is present (`AutoscalingActive=False/AutoscalingDisabled`).
    Disabled,
    /// Both parse and `0 <= min <= max` (`AutoscalingActive=True/ReplicasManagedByModule`).
    Enabled,
    /// An annotation is present but the pair is incomplete, unparsable or `min > max`
    /// (`AutoscalingActive=False/AutoscalingAnnotationsInvalid`); the pool applies without
    /// autoscaling.
    AnnotationsInvalid,
}

/// Parses the autoscaler min/max-size annotations. `enabled` only when both are present and
/// parse as integers with `0 <= min <= max`; otherwise `{false, 0, 0}`.
pub fn parse_autoscaling(min: Option<&str>, max: Option<&str>) -> (Autoscaling, AutoscalingMode) {
    match (min, max) {
        (None, None) => (Autoscaling::default(), AutoscalingMode::Disabled),
        (Some(min), Some(max)) => match (min.parse::<i32>(), max.parse::<i32>()) {
            (Ok(min), Ok(max)) if 0 <= min && min <= max => (
                Autoscaling {
                    enabled: true,
                    min,
                    max,
                },
                AutoscalingMode::Enabled,
            ),
            _ => (Autoscaling::default(), AutoscalingMode::AnnotationsInvalid),
        },
        _ => (Autoscaling::default(), AutoscalingMode::AnnotationsInvalid),
    }
}

/// The `replicas` input. Without autoscaling: `MachinePool.spec.replicas`, 1 when unset. With
/// autoscaling: the observed `status.replicas` once there is one, else `spec.replicas` (1 when
/// unset), clamped into `[min, max]`. A negative count (which the API never holds) renders as 0.
pub fn pool_replicas(spec: Option<i32>, status: Option<i32>, autoscaling: Autoscaling) -> i32 {
    let spec = spec.unwrap_or(DEFAULT_REPLICAS);
    let replicas = if autoscaling.enabled {
        // Not `clamp`, which panics on an inverted range; `parse_autoscaling` never yields one,
        // but the fields are public.
        status
            .unwrap_or(spec)
            .max(autoscaling.min)
            .min(autoscaling.max)
    } else {
        spec
    };
    replicas.max(0)
}

/// The machinepool role's inputs, in `terraform.tfvars.json` order.
#[derive(Clone, PartialEq, Serialize)]
pub struct MachinePoolInputs {
    /// `captf_contract`, `captf_cluster`, `captf_object`, `captf_tags`.
    #[serde(flatten)]
    pub common: CommonInputs,
    /// The cluster's `exports`; `{}` for an externally managed cluster.
    pub captf_cluster_outputs: Value,
    /// The owning MachinePool's name.
    pub machinepool_name: String,
    /// See [`pool_replicas`]; not hashed while `autoscaling.enabled`.
    pub replicas: i32,
    /// Base64 of the bootstrap payload. Sensitive.
    pub bootstrap_data: String,
    /// `cloud-config` unless the bootstrap Secret says otherwise.
    pub bootstrap_format: String,
    /// `MachinePool.spec.failureDomains` verbatim; `[]` (the module chooses) when unset.
    pub failure_domains: Vec<String>,
    /// The cluster's failure-domain names (see [`ClusterHandoff::failure_domain_names`]).
    pub cluster_failure_domains: Vec<String>,
    /// `MachinePool.spec.template.spec.version` verbatim; `null` when unset.
    pub kubernetes_version: Option<String>,
    /// `MachinePool.spec.template.metadata.labels` verbatim; `{}` when absent.
    pub node_labels: BTreeMap<String, String>,
    /// See [`parse_autoscaling`].
    pub autoscaling: Autoscaling,
}

impl fmt::Debug for MachinePoolInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MachinePoolInputs")
            .field("common", &self.common)
            .field("captf_cluster_outputs", &"<redacted>")
            .field("machinepool_name", &self.machinepool_name)
            .field("replicas", &self.replicas)
            .field("bootstrap_data", &"<redacted>")
            .field("bootstrap_format", &self.bootstrap_format)
            .field("failure_domains", &self.failure_domains)
            .field("cluster_failure_domains", &self.cluster_failure_domains)
            .field("kubernetes_version", &self.kubernetes_version)
            .field("node_labels", &self.node_labels)
            .field("autoscaling", &self.autoscaling)
            .finish()
    }
}

/// Builds a TerraformMachinePool's inputs.
pub fn machinepool_inputs(
    source: &MachinePoolInputsSource,
) -> Result<MachinePoolInputs, InputsError> {
    let (autoscaling, _) = parse_autoscaling(
        source.autoscaler_min_size.as_deref(),
        source.autoscaler_max_size.as_deref(),
    );
    Ok(MachinePoolInputs {
        common: CommonInputs::new(ObjectKind::MachinePool, &source.object),
        captf_cluster_outputs: source.cluster.cluster_outputs()?,
        machinepool_name: source.machinepool_name.clone(),
        replicas: pool_replicas(source.spec_replicas, source.status_replicas, autoscaling),
        bootstrap_data: bootstrap_data(&source.bootstrap.value),
        bootstrap_format: bootstrap_format(source.bootstrap.format.as_deref())?,
        failure_domains: source.failure_domains.clone().unwrap_or_default(),
        cluster_failure_domains: source.cluster.failure_domain_names(),
        kubernetes_version: non_empty(source.version.as_ref()),
        node_labels: source.node_labels.clone().unwrap_or_default(),
        autoscaling,
    })
}
