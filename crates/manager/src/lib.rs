//! The CAPTF manager library: the reconcile core shared by TerraformCluster, TerraformMachine and
//! TerraformMachinePool (spec: The Reconcile Lifecycle).
//!
//! So far only the pure decision step exists ([`decide`]); observing the cluster, acting on a
//! decision and reporting status come with their own issues.

pub mod decide;
