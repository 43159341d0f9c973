//! The CAPTF manager library: the reconcile core shared by TerraformCluster, TerraformMachine and
//! TerraformMachinePool (spec: The Reconcile Lifecycle), its controllers, and the pieces each step
//! of a pass uses. Its folders, from the bottom up (each imports only from those below it):
//!
//! - [`runtime`]: the context, caches, leases, leader election, metrics, diagnostics and events;
//! - [`pass`]: what one pass carries — the [`pass::Pass`], its [`pass::Error`], the plain values
//!   its steps exchange, the conditions and status facts it records;
//! - [`state`]: Terraform state, backups, restore, the durable inputs and Job history;
//! - [`kinds`]: what differs between the kinds — owner, inputs, outputs, pools, remediation,
//!   identities and credentials, templates;
//! - [`job`]: the Job a pass starts, built by pure functions;
//! - [`reconcile`]: one pass in four steps — Observe (reads only), Decide (pure), Act (every
//!   write, in the book's order), Report (the one status patch);
//! - [`controller`]: the controllers that run passes.

pub mod controller;
pub mod job;
pub mod kinds;
pub mod pass;
pub mod reconcile;
pub mod runtime;
pub mod state;

pub use runtime::context::{Context, Settings};
