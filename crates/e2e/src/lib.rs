//! CAPTF's end-to-end suite (issue 13; the book's Quick Start, Templates and ClusterClass,
//! Machine Pools and the `clusterctl move` runbook): Cluster API's real core, kubeadm bootstrap
//! and kubeadm control-plane managers in the test environment, CAPTF's own `manager` and
//! `webhook` binaries as a user runs them, and every flow driven by `clusterctl` and the kube API
//! exactly as the book's commands are.
//!
//! - [`kube_ops`]: the kube API as `kubectl` uses it.
//! - [`clusterctl`]: `clusterctl generate` and `move`, offline.
//! - [`install`]: the installation page's commands and the local repositories and image mirror
//!   of Cluster API and cert-manager, for the install tests.
//! - [`installed`]: the checks of an installed CAPTF the install tests share.
//! - [`operator`]: the Cluster API Operator and its provider objects, for the Operator install
//!   test.
//! - [`product`]: the manager and webhook processes with the shipped RBAC.
//! - [`stand_in`]: stand-in bootstrap data for worker Machines and MachinePools.
//! - [`suite`]: the shared environment, images and Job log.
//! - [`quickstart`]: the Quick Start flow, for test 1 and `make quickstart`.
//! - [`real_nodes`]: the docker flavor on real nodes, for `make quickstart FLAVOR=docker`.
//! - [`upgrade`]: the previous release, the upgrade notes and what an upgrade must not touch.
//! - [`workload`]: a stand-in workload cluster, where a flow needs Nodes.

pub mod clusterctl;
pub mod install;
pub mod installed;
pub mod kube_ops;
pub mod operator;
pub mod product;
pub mod quickstart;
pub mod real_nodes;
pub mod scale;
pub mod stand_in;
pub mod suite;
pub mod upgrade;
pub mod workload;
