//! A TerraformMachinePool's write to its MachinePool (spec: MachinePool Role "Lifecycle" —
//! "Write-back"; Machine Pools "Choose fixed replicas or autoscaling"): the one `SyncReplicas`
//! merge patch that claims or releases `cluster.x-k8s.io/replicas-managed-by` and writes the
//! raw observed desired capacity to `MachinePool.spec.replicas`, under the MachinePool's
//! resourceVersion, and its `ReplicasWrittenBack` event. What to write is
//! [`contract::pool::sync_replicas`]'s; Observe plans it ([`plan`]), Act writes it
//! ([`write_back`]).

use api::capi::MachinePool;
use api::constants::{annotations, events};
use contract::pool::{ManagedByEdit, SyncReplicas, sync_replicas, written_back_note};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::{autoscaling, autoscaling_active};
use crate::kinds::inputs::Owner;
use crate::pass::conditions::Findings;
use crate::pass::status::StatusFacts;
use crate::runtime::events::Outbox;

/// What the pass must write to `mp`, given whether autoscaling is enabled and the pool's
/// observed `status.replicas`.
pub fn decide(mp: &MachinePool, autoscaling: bool, observed: Option<i32>) -> SyncReplicas {
    let managed_by = mp
        .annotations()
        .get(annotations::REPLICAS_MANAGED_BY)
        .map(String::as_str);
    sync_replicas(autoscaling, managed_by, observed, mp.spec.replicas)
}

/// The merge patch of `sync`, preconditioned on `resource_version`; `None` when it changes
/// nothing.
pub fn patch_body(sync: &SyncReplicas, resource_version: Option<&str>) -> Option<Value> {
    if sync.is_noop() {
        return None;
    }
    let mut body = json!({"metadata": {"resourceVersion": resource_version}});
    match sync.managed_by {
        ManagedByEdit::Keep => {}
        ManagedByEdit::Claim => {
            body["metadata"]["annotations"] = json!({
                (annotations::REPLICAS_MANAGED_BY): annotations::REPLICAS_MANAGED_BY_CAPTF,
            });
        }
        ManagedByEdit::Release => {
            body["metadata"]["annotations"] = json!({ (annotations::REPLICAS_MANAGED_BY): null });
        }
    }
    if let Some((_, to)) = sync.write_back {
        body["spec"] = json!({ "replicas": to });
    }
    Some(body)
}

/// Writes the `SyncReplicas` patch to `mp` (a conflict is the caller's: the pass ends and the
/// newer MachinePool is read next time) and queues `ReplicasWrittenBack` on `outbox` when
/// `spec.replicas` was written. Returns what was written.
pub async fn write_back(
    client: &kube::Client,
    mp: &MachinePool,
    autoscaling: bool,
    observed: Option<i32>,
    outbox: &mut Outbox,
) -> kube::Result<SyncReplicas> {
    let sync = decide(mp, autoscaling, observed);
    let Some(body) = patch_body(&sync, mp.metadata.resource_version.as_deref()) else {
        return Ok(sync);
    };
    let api: Api<MachinePool> =
        Api::namespaced(client.clone(), &mp.namespace().unwrap_or_default());
    api.patch(
        &mp.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&body),
    )
    .await?;
    if let Some((from, to)) = sync.write_back {
        outbox.normal(events::REPLICAS_WRITTEN_BACK, written_back_note(from, to));
    }
    Ok(sync)
}

/// What a pool's pass plans for its MachinePool once Observe read the outputs (pure): records
/// `AutoscalingActive` from the autoscaler annotations, and returns the `SyncReplicas` write
/// (claim or release `replicas-managed-by`, the observed count written back) when it changes
/// anything. Act makes it with [`write_back`].
pub fn plan(owner: &Owner, facts: &StatusFacts, findings: &mut Findings) -> Option<PoolSync> {
    let mp = owner.machine_pool.as_ref()?;
    let (scaling, mode) = autoscaling(mp);
    autoscaling_active(findings, mode, scaling);
    let observed = match facts.status() {
        crate::runtime::context::StatusDraft::Pool(ps) => ps.replicas,
        _ => None,
    };
    (!decide(mp, scaling.enabled, observed).is_noop()).then(|| PoolSync {
        machine_pool: mp.clone(),
        autoscaling: scaling.enabled,
        observed,
    })
}

/// A write to a pool's MachinePool, planned by [`plan`].
#[derive(Debug, Clone)]
pub struct PoolSync {
    /// The MachinePool as the cache showed it (its resourceVersion is the write's precondition).
    pub machine_pool: MachinePool,
    /// Whether autoscaling is enabled.
    pub autoscaling: bool,
    /// The pool's observed `status.replicas`.
    pub observed: Option<i32>,
}

impl PartialEq for PoolSync {
    /// The same write: to the same MachinePool (name and resourceVersion), with the same
    /// inputs.
    fn eq(&self, other: &Self) -> bool {
        let meta = |s: &Self| {
            (
                s.machine_pool.metadata.namespace.clone(),
                s.machine_pool.metadata.name.clone(),
                s.machine_pool.metadata.resource_version.clone(),
            )
        };
        meta(self) == meta(other)
            && self.autoscaling == other.autoscaling
            && self.observed == other.observed
    }
}
