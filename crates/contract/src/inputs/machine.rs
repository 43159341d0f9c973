//! The machine role's inputs (spec: Machine Role "Inputs", Job Inputs §3 and §5).

use super::{
    BootstrapSource, ClusterHandoff, CommonInputs, InputsError, ObjectSource, bootstrap_data,
    bootstrap_format, non_empty,
};
use crate::names::ObjectKind;
use serde::Serialize;
use serde_json::Value;
use std::fmt;

/// Everything the machine role's inputs are built from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachineInputsSource {
    /// The TerraformMachine and its Cluster.
    pub object: ObjectSource,
    /// The owning Machine's `metadata.name`.
    pub machine_name: String,
    /// The Secret named by `Machine.spec.bootstrap.dataSecretName`.
    pub bootstrap: BootstrapSource,
    /// `Machine.spec.failureDomain`; `""` counts as unset.
    pub failure_domain: Option<String>,
    /// `Machine.spec.version`; `""` counts as unset.
    pub version: Option<String>,
    /// Whether the Machine carries the `cluster.x-k8s.io/control-plane` label.
    pub control_plane: bool,
    /// The owning TerraformCluster's state outputs, or its being externally managed.
    pub cluster: ClusterHandoff,
}

/// The machine role's inputs, in `terraform.tfvars.json` order.
#[derive(Clone, PartialEq, Serialize)]
pub struct MachineInputs {
    /// `captf_contract`, `captf_cluster`, `captf_object`, `captf_tags`.
    #[serde(flatten)]
    pub common: CommonInputs,
    /// The cluster's `exports`, character for character; `{}` for an externally managed cluster.
    pub captf_cluster_outputs: Value,
    /// The owning Machine's name (may differ from the TerraformMachine's).
    pub machine_name: String,
    /// Base64 of the bootstrap payload. Sensitive.
    pub bootstrap_data: String,
    /// `cloud-config` unless the bootstrap Secret says otherwise.
    pub bootstrap_format: String,
    /// The requested failure domain; `null` when unset.
    pub failure_domain: Option<String>,
    /// `Machine.spec.version` verbatim (a `+rke2r1` suffix stays); `null` when unset.
    pub kubernetes_version: Option<String>,
    /// Whether this is a control-plane machine.
    pub control_plane: bool,
}

impl fmt::Debug for MachineInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MachineInputs")
            .field("common", &self.common)
            .field("captf_cluster_outputs", &"<redacted>")
            .field("machine_name", &self.machine_name)
            .field("bootstrap_data", &"<redacted>")
            .field("bootstrap_format", &self.bootstrap_format)
            .field("failure_domain", &self.failure_domain)
            .field("kubernetes_version", &self.kubernetes_version)
            .field("control_plane", &self.control_plane)
            .finish()
    }
}

/// Builds a TerraformMachine's inputs.
pub fn machine_inputs(source: &MachineInputsSource) -> Result<MachineInputs, InputsError> {
    Ok(MachineInputs {
        common: CommonInputs::new(ObjectKind::Machine, &source.object),
        captf_cluster_outputs: source.cluster.cluster_outputs()?,
        machine_name: source.machine_name.clone(),
        bootstrap_data: bootstrap_data(&source.bootstrap.value),
        bootstrap_format: bootstrap_format(source.bootstrap.format.as_deref())?,
        failure_domain: non_empty(source.failure_domain.as_ref()),
        kubernetes_version: non_empty(source.version.as_ref()),
        control_plane: source.control_plane,
    })
}
