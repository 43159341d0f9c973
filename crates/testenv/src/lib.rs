//! The test environment (ENGINEERING.md §2): a real control plane built from source, a process
//! kubelet, an OCI registry and an image builder, for integration and end-to-end tests.
//!
//! - [`testbin`] finds the binaries `hack/testbin.sh` builds.
//! - [`control_plane`] runs etcd, kube-apiserver and kube-controller-manager on loopback;
//!   [`audit`] reads back the API server's audit log of every request.
//! - [`capi`] installs Cluster API into it and runs its three managers, as `clusterctl init`
//!   would.
//! - [`env`] shares one environment per test binary and hands each test its own namespace.
//! - [`manifests`] renders `config/` and applies manifests server-side, keeping warnings.
//! - [`registry`] runs an OCI registry on loopback; [`image`] builds images into it and pulls
//!   and unpacks them.
//! - [`docker`] runs a Docker daemon of the environment's own, for real nodes.
//! - [`kubelet`] is the process kubelet; [`shim`] runs one container; [`podnet`] gives pods their
//!   own network namespaces and addresses; [`fixture`] holds the behaviours of the test fixture
//!   image.
//! - [`upgrade`] holds the previous release, the upgrade notes and the previous release's
//!   stored objects, for the upgrade tests.
//! - [`rbac`] makes callers for endpoints behind Kubernetes authentication: a ServiceAccount
//!   token and a grant of non-resource URLs.

pub mod audit;
pub mod capi;
pub mod control_plane;
pub mod docker;
pub mod env;
pub mod fixture;
pub mod image;
pub mod knob;
pub mod kubelet;
pub mod manifests;
pub mod net;
pub mod podnet;
pub mod rbac;
pub mod registry;
pub mod registry_auth;
pub mod shim;
pub mod testbin;
pub mod upgrade;

pub use env::TestEnv;
