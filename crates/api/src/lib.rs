//! CAPTF's API: the seven kinds of `infrastructure.cluster.x-k8s.io/v1alpha1`, the Cluster API
//! v1beta2 subset CAPTF reads and patches, and every documented annotation, label, finalizer,
//! condition and reason (the book's The Kinds and API reference).
//!
//! The types' doc comments are the user's documentation: they become the CRD schema descriptions
//! and the generated API reference (`docs/src/reference/api.md`).

pub mod capi;
pub mod cluster;
pub mod constants;
pub mod crd;
pub mod identity;
pub mod machine;
pub mod machinepool;
mod schema;
pub mod shared;
pub mod status;
pub mod workload;

/// CAPTF's API group.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// CAPTF's API version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of CAPTF's kinds.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// The module contract version this release renders inputs for.
pub const CONTRACT_VERSION: &str = "v1alpha1";

pub use cluster::{
    TerraformCluster, TerraformClusterSpec, TerraformClusterStatus, TerraformClusterTemplate,
};
pub use identity::{TerraformClusterIdentity, TerraformClusterIdentitySpec};
pub use machine::{
    TerraformMachine, TerraformMachineSpec, TerraformMachineStatus, TerraformMachineTemplate,
};
pub use machinepool::{
    TerraformMachinePool, TerraformMachinePoolSpec, TerraformMachinePoolStatus,
    TerraformMachinePoolTemplate,
};
