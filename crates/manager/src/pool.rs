//! A TerraformMachinePool's write to its MachinePool (spec: MachinePool Role "Lifecycle" —
//! "Write-back"; Machine Pools "Choose fixed replicas or autoscaling"): the one `SyncReplicas`
//! merge patch that claims or releases `cluster.x-k8s.io/replicas-managed-by` and writes the
//! raw observed desired capacity to `MachinePool.spec.replicas`, under the MachinePool's
//! resourceVersion, and its `ReplicasWrittenBack` event. What to write is
//! [`contract::pool::sync_replicas`]'s. Also the `autoscaling` the MachinePool's autoscaler
//! annotations give, and the `AutoscalingActive` condition it reports (Machine Pools "Choose fixed
//! replicas or autoscaling"; INTERFACE-FACTS §1 `AutoscalingActive`).
//!
//! The TerraformMachinePool controller that will call it once per pass is not built yet.

use api::capi::MachinePool;
use api::constants::{annotations, conditions as ctype, events, reasons};
use contract::health::ConditionStatus;
use contract::inputs::{Autoscaling, AutoscalingMode, parse_autoscaling};
use contract::pool::{ManagedByEdit, SyncReplicas, sync_replicas, written_back_note};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::conditions::Findings;
use crate::events::Outbox;

/// The `autoscaling` input and mode the MachinePool's autoscaler min/max-size annotations give.
pub fn autoscaling(mp: &MachinePool) -> (Autoscaling, AutoscalingMode) {
    let get = |k: &str| mp.annotations().get(k).map(String::as_str);
    parse_autoscaling(
        get(annotations::AUTOSCALER_MIN_SIZE),
        get(annotations::AUTOSCALER_MAX_SIZE),
    )
}

/// Records the `AutoscalingActive` condition of a pool whose MachinePool's annotations gave
/// `mode` (and, when enabled, `scaling`).
pub fn autoscaling_active(findings: &mut Findings, mode: AutoscalingMode, scaling: Autoscaling) {
    let (status, reason, message) = match mode {
        AutoscalingMode::Enabled => (
            ConditionStatus::True,
            reasons::REPLICAS_MANAGED_BY_MODULE,
            format!(
                "The module owns the desired count within [{}, {}]; the observed count is written back to MachinePool.spec.replicas",
                scaling.min, scaling.max
            ),
        ),
        AutoscalingMode::Disabled => (
            ConditionStatus::False,
            reasons::AUTOSCALING_DISABLED,
            "No autoscaler annotations: MachinePool.spec.replicas alone decides the capacity"
                .to_owned(),
        ),
        AutoscalingMode::AnnotationsInvalid => (
            ConditionStatus::False,
            reasons::AUTOSCALING_ANNOTATIONS_INVALID,
            format!(
                "{} and {} must both be present, non-negative integers, and min <= max; applying without autoscaling",
                annotations::AUTOSCALER_MIN_SIZE,
                annotations::AUTOSCALER_MAX_SIZE
            ),
        ),
    };
    findings.set(ctype::AUTOSCALING_ACTIVE, status, reason, &message);
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn mp(replicas: Option<i32>, managed_by: Option<&str>) -> MachinePool {
        let mut mp = MachinePool::new("p", api::capi::MachinePoolSpec::default());
        mp.spec.replicas = replicas;
        if let Some(v) = managed_by {
            mp.annotations_mut()
                .insert(annotations::REPLICAS_MANAGED_BY.to_owned(), v.to_owned());
        }
        mp
    }

    #[test]
    fn the_patch_claims_and_writes_in_one_body() {
        let sync = decide(&mp(Some(3), None), true, Some(5));
        let body = patch_body(&sync, Some("42")).expect("a patch");
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "42",
                                "annotations": {"cluster.x-k8s.io/replicas-managed-by": "captf"}},
                   "spec": {"replicas": 5}})
        );
    }

    #[test]
    fn releasing_removes_only_our_claim() {
        let body = patch_body(&decide(&mp(Some(3), Some("captf")), false, Some(5)), None)
            .expect("a patch");
        assert_eq!(
            body["metadata"]["annotations"],
            json!({"cluster.x-k8s.io/replicas-managed-by": null})
        );
        assert!(body.get("spec").is_none(), "spec.replicas is not written");
        assert!(patch_body(&decide(&mp(Some(3), Some("other")), false, Some(5)), None).is_none());
    }

    #[test]
    fn the_annotations_give_the_mode_and_the_condition() {
        let mut m = mp(None, None);
        let (scaling, mode) = autoscaling(&m);
        assert_eq!((scaling.enabled, mode), (false, AutoscalingMode::Disabled));
        m.annotations_mut()
            .insert(annotations::AUTOSCALER_MIN_SIZE.to_owned(), "3".to_owned());
        assert_eq!(autoscaling(&m).1, AutoscalingMode::AnnotationsInvalid);
        m.annotations_mut()
            .insert(annotations::AUTOSCALER_MAX_SIZE.to_owned(), "10".to_owned());
        let (scaling, mode) = autoscaling(&m);
        assert_eq!(mode, AutoscalingMode::Enabled);
        assert_eq!((scaling.min, scaling.max), (3, 10));
        for (mode, status, reason) in [
            (
                AutoscalingMode::Enabled,
                ConditionStatus::True,
                reasons::REPLICAS_MANAGED_BY_MODULE,
            ),
            (
                AutoscalingMode::Disabled,
                ConditionStatus::False,
                reasons::AUTOSCALING_DISABLED,
            ),
            (
                AutoscalingMode::AnnotationsInvalid,
                ConditionStatus::False,
                reasons::AUTOSCALING_ANNOTATIONS_INVALID,
            ),
        ] {
            let mut findings = Findings::new(None);
            autoscaling_active(&mut findings, mode, scaling);
            assert_eq!(findings.reason(ctype::AUTOSCALING_ACTIVE), Some(reason));
            assert_eq!(
                findings.status(ctype::AUTOSCALING_ACTIVE),
                Some(status.as_str())
            );
        }
    }

    #[test]
    fn zero_is_written_explicitly() {
        let body =
            patch_body(&decide(&mp(Some(2), Some("captf")), true, Some(0)), None).expect("a patch");
        assert_eq!(body["spec"], json!({"replicas": 0}));
    }
}
