//! Properties of a pool's own decisions and outputs (spec: MachinePool Role "Outputs",
//! "Lifecycle" — "Membership refresh", "Write-back"; Machine Pools "Drift on a pool"): the
//! write-back converges in one patch and never touches what it does not own, refreshes are never
//! later than the interval, a pool's drift never stops, and `provider_id_list` always comes out
//! sorted, de-duplicated and bounded.

use std::collections::BTreeSet;
use std::time::Duration;

use contract::outputs::{RootOutput, RootOutputs, decode_machinepool_outputs};
use contract::pool::{
    CONVERGING_REFRESH, MANAGED_BY_CAPTF, ManagedByEdit, converged, drift_interval,
    membership_refresh_interval, next_membership_refresh, sync_replicas,
};
use proptest::prelude::*;
use serde_json::json;

fn annotation() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        Just(MANAGED_BY_CAPTF.to_owned()),
        Just("false".to_owned()),
        Just("true".to_owned()),
        "[a-z-]{1,12}",
    ])
}

/// Applies a `SyncReplicas` patch to a MachinePool's annotation and `spec.replicas`.
fn apply(
    edit: ManagedByEdit,
    write_back: Option<(Option<i32>, i32)>,
    managed_by: Option<String>,
    spec: Option<i32>,
) -> (Option<String>, Option<i32>) {
    let managed_by = match edit {
        ManagedByEdit::Keep => managed_by,
        ManagedByEdit::Claim => Some(MANAGED_BY_CAPTF.to_owned()),
        ManagedByEdit::Release => None,
    };
    (managed_by, write_back.map_or(spec, |(_, to)| Some(to)))
}

fn pool_outputs(ids: &[String]) -> RootOutputs {
    let doc = json!({
        "provider_id": null,
        "provider_id_list": ids,
        "replicas": ids.len(),
        "instances": null,
        "health": {"state": "running", "healthy": true, "message": null, "reasons": []},
    });
    doc.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), RootOutput::new(v.clone())))
        .collect()
}

proptest! {
    #[test]
    fn the_write_back_converges_in_one_patch(
        autoscaling in any::<bool>(),
        managed_by in annotation(),
        observed in prop::option::of(0i32..1000),
        spec in prop::option::of(0i32..1000),
    ) {
        let first = sync_replicas(autoscaling, managed_by.as_deref(), observed, spec);
        let (after_annotation, after_spec) =
            apply(first.managed_by, first.write_back, managed_by.clone(), spec);
        // The same pass again has nothing left to do.
        let second = sync_replicas(autoscaling, after_annotation.as_deref(), observed, after_spec);
        prop_assert!(second.is_noop(), "{first:?} then {second:?}");
        // A foreign claim is never touched, in either mode.
        let foreign = managed_by.as_deref().is_some_and(|v| v != MANAGED_BY_CAPTF && v != "false");
        if foreign {
            prop_assert_eq!(first.managed_by, ManagedByEdit::Keep);
        }
        if autoscaling {
            // The raw observed value, unclamped, whenever it is known.
            if let Some(o) = observed {
                prop_assert_eq!(after_spec, Some(o));
            }
            if let Some((from, _)) = first.write_back {
                prop_assert_eq!(from, spec);
            }
        } else {
            prop_assert_eq!(first.write_back, None);
            prop_assert_ne!(after_annotation.as_deref(), Some(MANAGED_BY_CAPTF));
        }
    }

    #[test]
    fn a_refresh_is_never_later_than_the_interval(
        seconds in prop::option::of(any::<i32>()),
        is_converged in any::<bool>(),
        pending in any::<bool>(),
    ) {
        let interval = membership_refresh_interval(seconds);
        prop_assert!(interval >= Duration::from_secs(15) && interval <= Duration::from_secs(86_400));
        let next = next_membership_refresh(interval, is_converged, pending);
        prop_assert!(next <= interval);
        prop_assert!(next >= Duration::from_secs(15));
        if !is_converged || pending {
            prop_assert!(next <= CONVERGING_REFRESH);
        }
    }

    #[test]
    fn a_pools_drift_never_stops(
        own in prop::option::of(any::<i32>()),
        inherited in prop::option::of(any::<i32>()),
        default_secs in 1u64..100_000,
    ) {
        let default = Duration::from_secs(default_secs);
        let d = drift_interval(own, inherited, default);
        prop_assert!(d > Duration::ZERO);
        if let Some(o) = own.filter(|o| *o > 0) {
            prop_assert_eq!(d, Duration::from_secs(u64::from(o.unsigned_abs())));
        }
    }

    #[test]
    fn provider_id_list_is_sorted_deduplicated_and_converges_with_replicas(
        ids in prop::collection::vec("p:///[a-c]{1,3}", 0..40),
    ) {
        let decoded = decode_machinepool_outputs(&pool_outputs(&ids));
        let list = decoded.outputs.provider_id_list.expect("a valid list");
        let want: Vec<String> = ids.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        prop_assert_eq!(&list, &want);
        let replicas = decoded.outputs.replicas;
        // Duplicates in the module's list make it shorter than its replicas: unconverged.
        prop_assert_eq!(
            converged(Some(list.len()), replicas),
            want.len() == ids.len()
        );
    }
}
