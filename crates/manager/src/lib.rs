//! The CAPTF manager library: the reconcile core shared by TerraformCluster and TerraformMachine
//! (spec: The Reconcile Lifecycle), its controllers, and the pieces each step of a pass uses.
//!
//! A pass observes ([`inputs`], [`identity`], [`runner_rbac`], [`state`]), keeps the books of
//! finished Jobs ([`bookkeeping`]), decides ([`decide`]), acts ([`job`], [`leases`]) and writes
//! the status once ([`patch`], [`conditions`], [`events`]); [`reconcile`] holds the pass in order.

pub mod bookkeeping;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod decide;
pub mod diagnostics;
pub mod events;
pub mod history;
pub mod identity;
pub mod identity_status;
pub mod inputs;
pub mod job;
pub mod kubeutil;
pub mod leader;
pub mod leases;
pub mod metrics;
pub mod outputs;
pub mod patch;
pub mod reconcile;
pub mod runner_rbac;
pub mod state;
pub mod sweep;

pub use context::{Context, Settings};
