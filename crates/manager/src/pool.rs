//! A TerraformMachinePool's write to its MachinePool (spec: MachinePool Role "Lifecycle" —
//! "Write-back"; Machine Pools "Choose fixed replicas or autoscaling"): the one `SyncReplicas`
//! merge patch that claims or releases `cluster.x-k8s.io/replicas-managed-by` and writes the
//! raw observed desired capacity to `MachinePool.spec.replicas`, under the MachinePool's
//! resourceVersion, and its `ReplicasWrittenBack` event. What to write is
//! [`contract::pool::sync_replicas`]'s. Also the `autoscaling` the MachinePool's autoscaler
//! annotations give, and the `AutoscalingActive` condition it reports (Machine Pools "Choose fixed
//! replicas or autoscaling"; INTERFACE-FACTS §1 `AutoscalingActive`).
//!
//! Also a pool's outputs written back (MachinePool Role "Outputs", "Provisioned rule"):
//! `spec.providerIDList` (sorted, de-duplicated, capped), `spec.providerID`, `status.replicas`
//! (0 written explicitly), `status.instances` (`InstancesTruncated` past 1,000) and the
//! provisioned latch with `status.ready`; and [`sync`], what every pass of a pool does with its
//! MachinePool once Observe has read the outputs.

use api::capi::MachinePool;
use api::constants::{annotations, conditions as ctype, events, reasons};
use contract::health::ConditionStatus;
use contract::inputs::{Autoscaling, AutoscalingMode, parse_autoscaling};
use contract::pool::{ManagedByEdit, SyncReplicas, sync_replicas, written_back_note};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use api::machinepool::TerraformMachinePool;
use api::status::{MachineAddress, MachinePoolInstance};
use contract::health::HealthState;
use contract::outputs::decode_machinepool_outputs;
use contract::state::StateSummary;

use crate::conditions::Findings;
use crate::context::Context;
use crate::events::Outbox;
use crate::inputs::Owner;
use crate::outputs::{Applied, latch, reading_of, set_health, set_verdict};
use crate::status::{Fact, StatusFacts};

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

/// Whether a pool's apply latches `provisioned` (and `status.ready`): applied, valid outputs and
/// a health reading that is not pending. Unlike a machine, no provider ID is required: a pool of
/// zero is provisioned.
pub fn pool_latches(applied: bool, outputs_valid: bool, health: Option<HealthState>) -> bool {
    applied && outputs_valid && health.is_some_and(|s| s != HealthState::Pending)
}

/// The spec fields the outputs write when they differ from the pool's: `providerIDList` (already
/// sorted and de-duplicated by the decoder) and `providerID`.
pub fn spec_patch(
    tmp: &TerraformMachinePool,
    provider_id_list: Option<&Vec<String>>,
    provider_id: Option<&String>,
) -> Option<Value> {
    let mut spec = serde_json::Map::new();
    if let Some(list) = provider_id_list
        && tmp.spec.provider_id_list.as_ref() != Some(list)
    {
        spec.insert("providerIDList".to_owned(), json!(list));
    }
    if let Some(id) = provider_id
        && tmp.spec.provider_id.as_ref() != Some(id)
    {
        spec.insert("providerID".to_owned(), json!(id));
    }
    (!spec.is_empty()).then(|| json!({ "spec": spec }))
}

fn instance(i: &contract::outputs::MachinePoolInstance) -> MachinePoolInstance {
    MachinePoolInstance {
        provider_id: i.provider_id.clone(),
        instance_id: i.instance_id.clone(),
        addresses: Some(
            i.addresses
                .iter()
                .map(|a| MachineAddress {
                    address_type: a.kind,
                    address: a.address.clone(),
                })
                .collect::<Vec<_>>(),
        )
        .filter(|a| !a.is_empty()),
        failure_domain: i.failure_domain.clone(),
        state: i.state,
    }
}

/// Applies a pool's outputs to its status; its spec fields come back in [`Applied::spec_patch`].
pub fn outputs(
    ctx: &Context,
    tmp: &TerraformMachinePool,
    summary: &StateSummary,
    applied: bool,
    facts: &mut StatusFacts,
    conds: &mut Findings,
    outbox: &mut Outbox,
) -> Applied {
    let decoded = decode_machinepool_outputs(&summary.outputs);
    set_verdict(conds, &decoded.verdict, ctx, "TerraformMachinePool");
    let out = &decoded.outputs;
    let health_state = out.health.as_ref().map(|h| h.state);
    let valid = decoded.verdict.is_valid();
    latch(
        facts,
        pool_latches(applied, valid, health_state),
        outbox,
        "TerraformMachinePool",
    );
    let provisioned = facts.provisioned();
    let mut spec = None;
    if valid {
        spec = spec_patch(tmp, out.provider_id_list.as_ref(), out.provider_id.as_ref());
        facts.record(Fact::PoolOutputs {
            replicas: out.replicas,
            instances: out
                .instances
                .as_ref()
                .map(|l| l.iter().map(instance).collect()),
        });
    }
    if let Some(h) = &out.health
        && (provisioned || h.state != HealthState::Pending)
    {
        set_health(conds, &h.condition());
    }
    Applied {
        reading: reading_of(health_state),
        definite: valid
            && health_state
                .is_some_and(|s| !matches!(s, HealthState::Pending | HealthState::Unknown)),
        spec_patch: spec,
    }
}

/// The pool's next membership refresh interval (MachinePool Role "Membership refresh"): every
/// 30 s (or the interval, when shorter) while `providerIDList` and `status.replicas` disagree or
/// health reads pending, else `spec.membershipRefreshIntervalSeconds` (60 s unset).
pub fn membership_refresh(
    tmp: &TerraformMachinePool,
    status: &crate::context::StatusDraft,
    health: crate::decide::HealthReading,
) -> std::time::Duration {
    let interval =
        contract::pool::membership_refresh_interval(tmp.spec.membership_refresh_interval_seconds);
    let replicas = match status {
        crate::context::StatusDraft::Pool(ps) => ps.replicas,
        _ => None,
    };
    let ids = tmp.spec.provider_id_list.as_ref().map(Vec::len);
    let converged = contract::pool::converged(ids, replicas);
    let pending = health == crate::decide::HealthReading::Pending;
    contract::pool::next_membership_refresh(interval, converged, pending)
}

/// What a pool's pass does with its MachinePool once Observe read the outputs: records
/// `AutoscalingActive` from the autoscaler annotations, and writes the `SyncReplicas` patch
/// (claim or release `replicas-managed-by`, the observed count written back) when it changes
/// anything.
pub async fn sync(
    client: &kube::Client,
    owner: &Owner,
    facts: &StatusFacts,
    findings: &mut Findings,
    outbox: &mut Outbox,
) -> kube::Result<()> {
    let Some(mp) = &owner.machine_pool else {
        return Ok(());
    };
    let (scaling, mode) = autoscaling(mp);
    autoscaling_active(findings, mode, scaling);
    let observed = match facts.status() {
        crate::context::StatusDraft::Pool(ps) => ps.replicas,
        _ => None,
    };
    write_back(client, mp, scaling.enabled, observed, outbox).await?;
    Ok(())
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

    fn pool(list: Option<Vec<&str>>, interval: Option<i32>) -> TerraformMachinePool {
        let mut tmp =
            TerraformMachinePool::new("p", api::machinepool::TerraformMachinePoolSpec::default());
        tmp.spec.provider_id_list = list.map(|l| l.into_iter().map(str::to_owned).collect());
        tmp.spec.membership_refresh_interval_seconds = interval;
        tmp
    }

    fn status(replicas: Option<i32>) -> crate::context::StatusDraft {
        crate::context::StatusDraft::Pool(api::machinepool::TerraformMachinePoolStatus {
            replicas,
            ..Default::default()
        })
    }

    /// A pool of zero is provisioned; pending health or invalid outputs never latch.
    #[test]
    fn a_pool_latches_without_a_provider_id() {
        let running = Some(HealthState::Running);
        assert!(pool_latches(true, true, running));
        assert!(!pool_latches(true, true, Some(HealthState::Pending)));
        assert!(!pool_latches(true, false, running));
        assert!(!pool_latches(false, true, running));
        assert!(!pool_latches(true, true, None));
    }

    /// `status.ready` latches with `provisioned`; 0 replicas is written as 0; an empty instance
    /// list is no list; never a failureReason or failureMessage.
    #[test]
    fn the_status_writes_zero_and_ready() {
        let facts = [
            Fact::Provisioned,
            Fact::PoolOutputs {
                replicas: Some(0),
                instances: Some(vec![]),
            },
        ];
        let folded = crate::status::fold(&status(Some(3)), &facts);
        let v = folded.to_value();
        assert_eq!(v["ready"], json!(true));
        assert_eq!(v["initialization"]["provisioned"], json!(true));
        assert_eq!(v["replicas"], json!(0));
        assert!(v.get("instances").is_none());
        assert!(v.get("failureReason").is_none() && v.get("failureMessage").is_none());
        // Pending outputs keep the last count.
        let kept = crate::status::fold(
            &folded,
            &[Fact::PoolOutputs {
                replicas: None,
                instances: None,
            }],
        );
        assert_eq!(kept.to_value()["replicas"], json!(0));
    }

    /// The spec is patched only with what changed: the list, the group ID.
    #[test]
    fn the_spec_patch_holds_only_what_changed() {
        let tmp = pool(Some(vec!["a", "b"]), None);
        let same = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(spec_patch(&tmp, Some(&same), None), None);
        let empty: Vec<String> = vec![];
        assert_eq!(
            spec_patch(&tmp, Some(&empty), Some(&"g".to_owned())),
            Some(json!({"spec": {"providerIDList": [], "providerID": "g"}}))
        );
        assert_eq!(spec_patch(&pool(None, None), None, None), None);
    }

    /// 30 s while the list and the count disagree or health is pending; the interval otherwise.
    #[test]
    fn the_membership_refresh_is_fast_until_converged() {
        use crate::decide::HealthReading::{Definite, Pending};
        let secs = std::time::Duration::from_secs;
        let converged = pool(Some(vec!["a", "b"]), Some(300));
        assert_eq!(
            membership_refresh(&converged, &status(Some(2)), Definite),
            secs(300)
        );
        assert_eq!(
            membership_refresh(&converged, &status(Some(3)), Definite),
            secs(30)
        );
        assert_eq!(
            membership_refresh(&converged, &status(Some(2)), Pending),
            secs(30)
        );
        assert_eq!(
            membership_refresh(&pool(None, None), &status(None), Definite),
            secs(30)
        );
        let short = pool(Some(vec!["a"]), Some(15));
        assert_eq!(
            membership_refresh(&short, &status(Some(3)), Definite),
            secs(15)
        );
        assert_eq!(
            membership_refresh(&pool(Some(vec![]), None), &status(Some(0)), Definite),
            secs(60)
        );
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
