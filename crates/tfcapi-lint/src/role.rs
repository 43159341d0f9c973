//! The three roles a module implements and what the contract asks of each (spec: Module Contract
//! "Naming rules", Common "Inputs", Cluster/Machine/MachinePool Role "Inputs" and "Outputs").
//!
//! The names, types and nullability come from the `contract` crate, which owns them for the whole
//! workspace; this module only adds the few facts a linter needs on top.

use contract::inputs::{InputDecl, contract_inputs};
use contract::names::ObjectKind;
use serde::Serialize;
use std::fmt;

/// The contract versions this release lints against (`tfcapi-lint version --json`).
pub const SUPPORTED_CONTRACTS: &[&str] = &[contract::inputs::CONTRACT_VERSION];

/// The reserved prefix of every controller-injected name.
pub const RESERVED_PREFIX: &str = contract::variables::RESERVED_PREFIX;

/// Common "captf_cluster_outputs": the cluster module's `exports`, not passed to the cluster role.
pub const CAPTF_CLUSTER_OUTPUTS: &str = "captf_cluster_outputs";

/// Common "captf_tags": the tags every module must apply to its cloud resources.
pub const CAPTF_TAGS: &str = "captf_tags";

/// Common "Outputs": the `health` output every role returns.
pub const HEALTH_OUTPUT: &str = "health";

/// Cluster Role "control_plane_endpoint (output)".
pub const CONTROL_PLANE_ENDPOINT_OUTPUT: &str = "control_plane_endpoint";

/// Cluster Role "exports (output)".
pub const EXPORTS_OUTPUT: &str = "exports";

/// Machine Role "addresses (output)".
pub const ADDRESSES_OUTPUT: &str = "addresses";

/// MachinePool Role "provider_id_list (output)".
pub const PROVIDER_ID_LIST_OUTPUT: &str = "provider_id_list";

/// The module meta-arguments no variable may be named after (Common "User variables").
pub const META_ARGUMENTS: &[&str] = &contract::variables::META_ARGUMENTS;

/// The closed `health.state` enum (Common "Outputs").
pub fn health_states() -> impl Iterator<Item = &'static str> {
    contract::health::HealthState::ALL
        .into_iter()
        .map(contract::health::HealthState::as_str)
}

/// Cluster API's `MachineAddressType` enum (Machine Role "addresses (output)").
pub const ADDRESS_TYPES: &[&str] = contract::outputs::ADDRESS_TYPES;

/// The role a module implements; `--role` on `module` and `image`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// TerraformCluster.
    Cluster,
    /// TerraformMachine.
    Machine,
    /// TerraformMachinePool.
    Machinepool,
}

impl Role {
    /// Every role, in documentation order.
    pub const ALL: [Self; 3] = [Self::Cluster, Self::Machine, Self::Machinepool];

    /// The spelling of `--role` and of the `io.captf.role` label.
    pub fn as_str(self) -> &'static str {
        contract::inputs::role_name(self.kind())
    }

    /// The workload kind that runs this role.
    pub fn kind(self) -> ObjectKind {
        match self {
            Self::Cluster => ObjectKind::Cluster,
            Self::Machine => ObjectKind::Machine,
            Self::Machinepool => ObjectKind::MachinePool,
        }
    }

    /// The contract inputs the controller passes to this role's module.
    pub fn inputs(self) -> &'static [InputDecl] {
        contract_inputs(self.kind())
    }

    /// The contract input named `name`, if this role receives one.
    pub fn input(self, name: &str) -> Option<&'static InputDecl> {
        self.inputs().iter().find(|d| d.name == name)
    }

    /// The outputs this role's module must declare.
    pub fn outputs(self) -> &'static [&'static str] {
        contract::render::contract_outputs(self.kind())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
