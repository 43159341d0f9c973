//! The module contract as pure functions of plain data: no I/O, no Kubernetes client.
//!
//! Every rule of the contract that can be stated without talking to Kubernetes lives here, once
//! (spec: Module Contract, Common, Cluster/Machine/MachinePool Role, Job Inputs, Terraform State,
//! Plan Approval, The Reconcile Lifecycle). The manager, runner, webhook and tfcapi-lint call it.

pub mod canonical;
pub mod capacity;
pub mod hash;
pub mod hcl;
pub mod health;
pub mod image_ref;
pub mod inputs;
pub mod job_env;
pub mod leader;
pub mod names;
pub mod outputs;
pub mod path;
pub mod plan;
pub mod pool;
pub mod registry_auth;
pub mod render;
pub mod result;
pub mod schedule;
pub mod state;
pub mod variables;
pub mod web_identity;
