//! What differs between the workload kinds that share the reconcile core (spec: The Kinds, The
//! Reconcile Lifecycle "After the shared flow", Cluster Role, Machine Role, MachinePool Role;
//! ENGINEERING.md §4): one [`Workload`] trait, implemented by TerraformCluster, TerraformMachine
//! and TerraformMachinePool, for the kind
//! code, the owner lookup and gates, which cluster defaults apply, mutability, the drift and
//! apply policies, how inputs are gathered, what a deleting object waits for and what `Ready`
//! summarises. The pass reaches the implementation through [`Target`] and the one macro below.

use std::time::Duration;

use api::cluster::TerraformCluster;
use api::constants::{conditions as ctype, labels};
use api::machine::TerraformMachine;
use api::machinepool::TerraformMachinePool;
use api::shared::{ApplyPolicy, DriftAction, JobPolicy};
use api::workload::WorkspaceSpec;
use contract::names::ObjectKind;
use contract::render::RenderedInputs;
use kube::Api;
use kube::api::ListParams;

use crate::kinds::inputs::{self, NotBuilt, Owner};
use crate::pass::{Error, Pass};
use crate::runtime::caches::Caches;
use crate::runtime::context::Target;
use crate::state::durable::Durable;

/// Runs `$body` with `$o` bound to the concrete object of a [`Target`]: the one place that lists
/// the workload kinds.
macro_rules! each_workload {
    ($target:expr, $o:ident => $body:expr) => {
        match $target {
            Target::Cluster($o) => $body,
            Target::Machine($o) => $body,
            Target::Pool($o) => $body,
        }
    };
}

/// What one workload kind brings to the shared reconcile core.
pub trait Workload {
    /// The kind.
    const KIND: ObjectKind;
    /// Whether its inputs follow its spec after the first apply (a cluster, a pool) or are fixed
    /// then (a machine).
    const MUTABLE: bool;

    /// Its workspace (source, identity, Jobs, variables).
    fn workspace(&self) -> &WorkspaceSpec;

    /// The owner lookup (preamble step 2), from the caches.
    fn owner(&self, caches: &Caches) -> Owner;

    /// The TerraformCluster whose `spec.defaults` apply to it.
    fn defaults(&self, owner: &Owner) -> Option<TerraformCluster>;

    /// `spec.applyPolicy` (Automatic for the kinds without one).
    fn apply_policy(&self) -> ApplyPolicy {
        ApplyPolicy::Automatic
    }

    /// Its drift action (Report for the kinds without one).
    fn drift_action(&self) -> DriftAction {
        DriftAction::Report
    }

    /// Its own drift interval, else its cluster's default; `None` means the manager default.
    fn drift_interval(&self, defaults: Option<&TerraformCluster>) -> Option<Duration>;

    /// The Job policy: its own `spec.jobs` over its cluster's `spec.defaults.jobs` (Tuning
    /// Jobs: the object's own entries first).
    fn job_policy(&self, defaults: Option<&TerraformCluster>) -> JobPolicy {
        let own = self.workspace().jobs.clone().unwrap_or_default();
        let inherited = defaults
            .and_then(|tc| tc.spec.defaults.as_ref())
            .and_then(|d| d.jobs.clone());
        match inherited {
            Some(d) if Self::KIND != ObjectKind::Cluster => own.merged_over(&d),
            _ => own,
        }
    }

    /// Builds and renders its current inputs.
    fn inputs(
        &self,
        client: &kube::Client,
        caches: &Caches,
        owner: &Owner,
        durable: &Durable,
    ) -> impl std::future::Future<Output = kube::Result<Result<RenderedInputs, NotBuilt>>> + Send;

    /// The conditions `Ready` summarises, before and after provisioning.
    fn ready_inputs(provisioned: bool) -> &'static [&'static str] {
        if provisioned {
            ctype::READY_INPUTS_PROVISIONED
        } else {
            ctype::READY_INPUTS_BEFORE_PROVISIONED
        }
    }
}

fn seconds(s: Option<i32>) -> Option<Duration> {
    s.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
}

impl Workload for TerraformCluster {
    const KIND: ObjectKind = ObjectKind::Cluster;
    const MUTABLE: bool = true;

    fn workspace(&self) -> &WorkspaceSpec {
        &self.spec.workspace
    }

    fn owner(&self, caches: &Caches) -> Owner {
        inputs::cluster_owner(caches, self)
    }

    fn defaults(&self, _owner: &Owner) -> Option<TerraformCluster> {
        Some(self.clone())
    }

    fn apply_policy(&self) -> ApplyPolicy {
        self.spec.apply_policy.unwrap_or_default()
    }

    fn drift_action(&self) -> DriftAction {
        self.spec
            .drift
            .as_ref()
            .and_then(|d| d.action)
            .unwrap_or_default()
    }

    fn drift_interval(&self, _defaults: Option<&TerraformCluster>) -> Option<Duration> {
        seconds(self.spec.drift.as_ref().and_then(|d| d.interval_seconds))
    }

    async fn inputs(
        &self,
        client: &kube::Client,
        caches: &Caches,
        owner: &Owner,
        durable: &Durable,
    ) -> kube::Result<Result<RenderedInputs, NotBuilt>> {
        match &owner.cluster {
            Some(c) => {
                let initialized = durable.control_plane_initialized();
                inputs::cluster_inputs(client, caches, self, c, initialized).await
            }
            None => Ok(Err(NotBuilt {
                reason: api::constants::reasons::WAITING_FOR_OWNER,
                waiting: true,
                message: "The Cluster is not there".to_owned(),
                size: None,
            })),
        }
    }
}

impl Workload for TerraformMachine {
    const KIND: ObjectKind = ObjectKind::Machine;
    const MUTABLE: bool = false;

    fn workspace(&self) -> &WorkspaceSpec {
        &self.spec.workspace
    }

    fn owner(&self, caches: &Caches) -> Owner {
        inputs::machine_owner(caches, self)
    }

    fn defaults(&self, owner: &Owner) -> Option<TerraformCluster> {
        owner.terraform_cluster.clone()
    }

    fn drift_interval(&self, defaults: Option<&TerraformCluster>) -> Option<Duration> {
        seconds(
            self.spec
                .drift
                .as_ref()
                .and_then(|d| d.interval_seconds)
                .or_else(|| inherited_drift_interval(defaults)),
        )
    }

    async fn inputs(
        &self,
        client: &kube::Client,
        caches: &Caches,
        owner: &Owner,
        _durable: &Durable,
    ) -> kube::Result<Result<RenderedInputs, NotBuilt>> {
        inputs::machine_inputs(client, caches, self, owner).await
    }
}

impl Workload for TerraformMachinePool {
    const KIND: ObjectKind = ObjectKind::MachinePool;
    const MUTABLE: bool = true;

    fn workspace(&self) -> &WorkspaceSpec {
        &self.spec.workspace
    }

    fn owner(&self, caches: &Caches) -> Owner {
        inputs::pool_owner(caches, self)
    }

    fn defaults(&self, owner: &Owner) -> Option<TerraformCluster> {
        owner.terraform_cluster.clone()
    }

    fn drift_action(&self) -> DriftAction {
        self.spec
            .drift
            .as_ref()
            .and_then(|d| d.action)
            .unwrap_or_default()
    }

    /// A pool's drift cannot be turned off: 0 at either level falls through to the manager
    /// default (Machine Pools "Drift"), which `None` stands for.
    fn drift_interval(&self, defaults: Option<&TerraformCluster>) -> Option<Duration> {
        let own = self.spec.drift.as_ref().and_then(|d| d.interval_seconds);
        let inherited = inherited_drift_interval(defaults);
        seconds(own.filter(|s| *s > 0).or(inherited.filter(|s| *s > 0)))
    }

    async fn inputs(
        &self,
        client: &kube::Client,
        caches: &Caches,
        owner: &Owner,
        _durable: &Durable,
    ) -> kube::Result<Result<RenderedInputs, NotBuilt>> {
        inputs::pool_inputs(client, caches, self, owner).await
    }

    /// A provisioned pool's `Ready` also summarises `ApplyJobSucceeded`: a pool re-applies for
    /// every membership change, so a failed apply must show (Conditions, "Ready").
    fn ready_inputs(provisioned: bool) -> &'static [&'static str] {
        if provisioned {
            ctype::READY_INPUTS_PROVISIONED_POOL
        } else {
            ctype::READY_INPUTS_BEFORE_PROVISIONED
        }
    }
}

/// `spec.defaults.drift.intervalSeconds` of the TerraformCluster a machine or pool inherits from.
fn inherited_drift_interval(defaults: Option<&TerraformCluster>) -> Option<i32> {
    defaults
        .and_then(|tc| tc.spec.defaults.as_ref())
        .and_then(|d| d.drift.as_ref())
        .and_then(|d| d.interval_seconds)
}

/// Whether the kind's inputs follow its spec after the first apply.
pub fn mutable(kind: ObjectKind) -> bool {
    match kind {
        ObjectKind::Cluster => TerraformCluster::MUTABLE,
        ObjectKind::Machine => TerraformMachine::MUTABLE,
        ObjectKind::MachinePool => TerraformMachinePool::MUTABLE,
    }
}

/// The owner lookup.
pub fn owner(target: &Target, caches: &Caches) -> Owner {
    each_workload!(target, o => o.owner(caches))
}

/// The TerraformCluster whose defaults apply.
pub fn defaults(target: &Target, owner: &Owner) -> Option<TerraformCluster> {
    each_workload!(target, o => o.defaults(owner))
}

/// The merged Job policy.
pub fn job_policy(target: &Target, defaults: Option<&TerraformCluster>) -> JobPolicy {
    each_workload!(target, o => o.job_policy(defaults))
}

/// The apply policy.
pub fn apply_policy(target: &Target) -> ApplyPolicy {
    each_workload!(target, o => o.apply_policy())
}

/// The drift action.
pub fn drift_action(target: &Target) -> DriftAction {
    each_workload!(target, o => o.drift_action())
}

/// The drift interval.
pub fn drift_interval(target: &Target, defaults: Option<&TerraformCluster>) -> Option<Duration> {
    each_workload!(target, o => o.drift_interval(defaults))
}

/// The conditions `Ready` summarises.
pub fn ready_inputs(target: &Target, provisioned: bool) -> &'static [&'static str] {
    match target {
        Target::Cluster(_) => TerraformCluster::ready_inputs(provisioned),
        Target::Machine(_) => TerraformMachine::ready_inputs(provisioned),
        Target::Pool(_) => TerraformMachinePool::ready_inputs(provisioned),
    }
}

/// Builds the current inputs.
pub async fn build_inputs(
    p: &Pass<'_>,
    owner: &Owner,
    durable: &Durable,
) -> Result<Result<RenderedInputs, NotBuilt>, Error> {
    let (client, caches) = (&p.ctx.client, &p.ctx.caches);
    Ok(each_workload!(p.target, o => o.inputs(client, caches, owner, durable).await)?)
}

/// A TerraformMachine's own refresh cadence for health samples: `healthCheckIntervalSeconds`
/// while `remediation.annotateMachine` is on (Machine Remediation); `None` otherwise.
pub fn health_check_interval(target: &Target) -> Option<Duration> {
    let Target::Machine(tm) = target else {
        return None;
    };
    let r = tm.spec.remediation.as_ref()?;
    r.annotate_machine_or_default().then(|| {
        Duration::from_secs(
            u64::try_from(r.health_check_interval_seconds_or_default()).unwrap_or(300),
        )
    })
}

/// A deleting cluster's TerraformMachines and TerraformMachinePools in the namespace, by the
/// cluster name (Deletion order); `None` when no cluster name is known. Read from the API server,
/// ignoring `--watch-filter`: a filtered-out machine still blocks its cluster's destroy.
pub async fn dependents(p: &Pass<'_>, cluster_name: &str) -> Result<Option<(u32, u32)>, Error> {
    if cluster_name.is_empty() {
        return Ok(None);
    }
    let lp = ListParams::default().labels(&format!("{}={cluster_name}", labels::CLUSTER_NAME));
    let tms: Api<TerraformMachine> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let machines = tms.list_metadata(&lp).await?.items.len() as u32;
    let tmps: Api<api::machinepool::TerraformMachinePool> =
        Api::namespaced(p.ctx.client.clone(), &p.ns);
    let pools = tmps.list_metadata(&lp).await?.items.len() as u32;
    Ok(Some((machines, pools)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provisioned_pools_ready_summarises_its_apply_and_a_machines_does_not() {
        let pool = TerraformMachinePool::ready_inputs(true);
        assert!(pool.contains(&ctype::APPLY_JOB_SUCCEEDED), "{pool:?}");
        for kind in [
            TerraformCluster::ready_inputs(true),
            TerraformMachine::ready_inputs(true),
        ] {
            assert!(!kind.contains(&ctype::APPLY_JOB_SUCCEEDED), "{kind:?}");
        }
        assert_eq!(
            TerraformMachinePool::ready_inputs(false),
            ctype::READY_INPUTS_BEFORE_PROVISIONED
        );
    }
}
