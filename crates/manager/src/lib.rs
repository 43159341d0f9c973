//! The CAPTF manager library: the reconcile core shared by TerraformCluster and TerraformMachine
//! (spec: The Reconcile Lifecycle), its controllers, and the pieces each step of a pass uses.
//!
//! A pass ([`reconcile`]) has four steps: [`observe`] (with [`bookkeeping`], [`inputs`],
//! [`identity`], [`runner_rbac`], [`state`], [`backups`], [`restore`], [`durable`],
//! [`outputs`]) reads everything from
//! the [`caches`] into one observation; [`decide`] chooses, pure and clock-free; [`act`] carries
//! the decision out ([`job`], [`leases`]); [`report`] builds the whole status and writes it once
//! ([`patch`], [`conditions`], [`events`]). What differs between the kinds is [`workload`]'s.

pub mod act;
pub mod backups;
pub mod bookkeeping;
pub mod caches;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod decide;
pub mod diagnostics;
pub mod durable;
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
pub mod observe;
pub mod outputs;
pub mod patch;
pub mod pool;
pub mod reconcile;
pub mod remediation;
pub mod report;
pub mod restore;
pub mod runner_rbac;
pub mod state;
pub mod status;
pub mod sweep;
pub mod template;
pub mod workload;

pub use context::{Context, Settings};
