//! The TerraformMachinePool (spec: Machine Pools; MachinePool Role): the `autoscaling` input and
//! mode its MachinePool's autoscaler annotations give and the `AutoscalingActive` condition
//! (Machine Pools "Choose fixed replicas or autoscaling"; INTERFACE-FACTS §1
//! `AutoscalingActive`), its membership refresh interval (MachinePool Role "Membership
//! refresh"); its outputs mapping ([`outputs`]) and its write to the MachinePool ([`sync`]).

pub mod outputs;
pub mod sync;

use api::capi::MachinePool;
use api::constants::{annotations, conditions as ctype, reasons};
use api::machinepool::TerraformMachinePool;
use contract::health::ConditionStatus;
use contract::inputs::{Autoscaling, AutoscalingMode, parse_autoscaling};
use kube::ResourceExt;

use crate::pass::conditions::Findings;

pub use outputs::{outputs, pool_latches, spec_patch};
pub use sync::{PoolSync, decide, patch_body, write_back};

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

/// The pool's next membership refresh interval (MachinePool Role "Membership refresh"): every
/// 30 s (or the interval, when shorter) while `providerIDList` and `status.replicas` disagree or
/// health reads pending, else `spec.membershipRefreshIntervalSeconds` (60 s unset).
pub fn membership_refresh(
    tmp: &TerraformMachinePool,
    status: &crate::runtime::context::StatusDraft,
    health: crate::pass::observed::HealthReading,
) -> std::time::Duration {
    let interval =
        contract::pool::membership_refresh_interval(tmp.spec.membership_refresh_interval_seconds);
    let replicas = match status {
        crate::runtime::context::StatusDraft::Pool(ps) => ps.replicas,
        _ => None,
    };
    let ids = tmp.spec.provider_id_list.as_ref().map(Vec::len);
    let converged = contract::pool::converged(ids, replicas);
    let pending = health == crate::pass::observed::HealthReading::Pending;
    contract::pool::next_membership_refresh(interval, converged, pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pass::status::Fact;
    use contract::health::HealthState;
    use serde_json::json;

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

    fn status(replicas: Option<i32>) -> crate::runtime::context::StatusDraft {
        crate::runtime::context::StatusDraft::Pool(api::machinepool::TerraformMachinePoolStatus {
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
        let folded = crate::pass::status::fold(&status(Some(3)), &facts);
        let v = folded.to_value();
        assert_eq!(v["ready"], json!(true));
        assert_eq!(v["initialization"]["provisioned"], json!(true));
        assert_eq!(v["replicas"], json!(0));
        assert!(v.get("instances").is_none());
        assert!(v.get("failureReason").is_none() && v.get("failureMessage").is_none());
        // Pending outputs keep the last count.
        let kept = crate::pass::status::fold(
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
        use crate::pass::observed::HealthReading::{Definite, Pending};
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
