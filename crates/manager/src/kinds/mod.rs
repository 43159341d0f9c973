//! What differs between the kinds (spec: The Kinds; Cluster Role, Machine Role and MachinePool
//! Role "Inputs", "Outputs", "Provisioned rule"; Identities and Credentials; Templates and
//! ClusterClass): the owner lookup and the inputs each kind builds ([`inputs`], [`workload`]),
//! the outputs each role maps to status and spec ([`outputs`], [`pool`]), a machine's
//! remediation request ([`remediation`]), the identity, credential mirror and runner RBAC
//! ([`identity`]), and the TerraformMachineTemplate's capacity ([`template`]). The reconcile
//! core in [`crate::reconcile`] calls these; they read what [`crate::pass`] carries and never
//! import the core back.

pub mod identity;
pub mod inputs;
pub mod outputs;
pub mod pool;
pub mod remediation;
pub mod template;
pub mod workload;
