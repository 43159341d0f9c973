//! A TerraformMachinePool's own decisions, without I/O (spec: MachinePool Role "Lifecycle"
//! — "Membership refresh", "Write-back"; Machine Pools "Set the membership refresh interval",
//! "Drift on a pool"; The Reconcile Lifecycle "Requeue"): when the next membership refresh is
//! due, which drift interval a pool runs on, whether its membership has converged, and the one
//! `SyncReplicas` patch of a MachinePool (the `replicas-managed-by` claim or release, and the
//! raw observed count written back to `spec.replicas`).
//!
//! The rendering of the pool's inputs (the clamped `replicas` input, `autoscaling`) is in
//! [`crate::inputs::machinepool`]; decoding its outputs (`provider_id_list` sorted,
//! de-duplicated and bounded, `instances` capped with `InstancesTruncated`) in
//! [`crate::outputs::decode_machinepool_outputs`].

use std::time::Duration;

/// `spec.membershipRefreshIntervalSeconds` when unset (or 0).
pub const DEFAULT_MEMBERSHIP_REFRESH: Duration = Duration::from_secs(60);
/// The least membership refresh interval the CRD admits.
pub const MIN_MEMBERSHIP_REFRESH_SECONDS: i32 = 15;
/// The greatest membership refresh interval the CRD admits.
pub const MAX_MEMBERSHIP_REFRESH_SECONDS: i32 = 86_400;
/// The fixed cadence while a pool is unconverged or its health reads pending.
pub const CONVERGING_REFRESH: Duration = Duration::from_secs(30);
/// The value of `cluster.x-k8s.io/replicas-managed-by` CAPTF claims.
pub const MANAGED_BY_CAPTF: &str = "captf";

/// The membership refresh interval of `spec.membershipRefreshIntervalSeconds`: unset or 0 is
/// 60 s; anything else is held to the CRD's 15–86400 s (a value the schema would refuse, from
/// an object stored before it, never makes a refresh loop or a stall).
pub fn membership_refresh_interval(seconds: Option<i32>) -> Duration {
    match seconds {
        None | Some(0) => DEFAULT_MEMBERSHIP_REFRESH,
        Some(s) => {
            let s = s.clamp(
                MIN_MEMBERSHIP_REFRESH_SECONDS,
                MAX_MEMBERSHIP_REFRESH_SECONDS,
            );
            Duration::from_secs(u64::from(s.unsigned_abs()))
        }
    }
}

/// Whether a pool's membership has converged: its `provider_id_list` and `replicas` are both
/// known and the list holds exactly `replicas` members. Unknown either way is unconverged.
pub fn converged(provider_ids: Option<usize>, replicas: Option<i32>) -> bool {
    match (provider_ids, replicas) {
        (Some(n), Some(r)) => usize::try_from(r).is_ok_and(|r| r == n),
        _ => false,
    }
}

/// The delay until the next membership refresh after one that just ran (or an apply): every
/// 30 s, or the configured interval when it is shorter, while the pool is unconverged or its
/// health reads pending (fixed, never backed off: a pool that never converges is refreshed
/// every 30 s indefinitely); the configured interval otherwise.
pub fn next_membership_refresh(interval: Duration, converged: bool, pending: bool) -> Duration {
    if converged && !pending {
        interval
    } else {
        interval.min(CONVERGING_REFRESH)
    }
}

/// A pool's drift interval: its own `spec.drift.intervalSeconds`, else its cluster's
/// `spec.defaults.drift.intervalSeconds`, else `default` (`--drift-default-interval`). A pool's
/// drift cannot be disabled: 0 (or less) at either level falls through to the next, ending at
/// the manager default, never at "off".
pub fn drift_interval(own: Option<i32>, inherited: Option<i32>, default: Duration) -> Duration {
    [own, inherited]
        .into_iter()
        .flatten()
        .find(|s| *s > 0)
        .map_or(default, |s| {
            Duration::from_secs(u64::from(s.unsigned_abs()))
        })
}

/// What happens to the MachinePool's `cluster.x-k8s.io/replicas-managed-by` annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedByEdit {
    /// Left as it is.
    Keep,
    /// Set to `captf` (it was absent or `"false"`).
    Claim,
    /// Removed (it carried `captf` and autoscaling is off).
    Release,
}

/// The one `SyncReplicas` patch of a MachinePool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncReplicas {
    /// The annotation.
    pub managed_by: ManagedByEdit,
    /// `spec.replicas` before and after, when it is written (a `ReplicasWrittenBack` event).
    pub write_back: Option<(Option<i32>, i32)>,
}

impl SyncReplicas {
    /// Whether the patch changes nothing.
    pub fn is_noop(&self) -> bool {
        self.managed_by == ManagedByEdit::Keep && self.write_back.is_none()
    }
}

/// The `SyncReplicas` patch for a MachinePool whose `replicas-managed-by` annotation is
/// `managed_by` and `spec.replicas` is `spec_replicas`, given whether autoscaling is enabled and
/// the pool's `status.replicas` (`observed`, the desired capacity the module last reported).
///
/// With autoscaling, `captf` is claimed when the annotation is absent or the literal `"false"`
/// (Cluster API counts any other value as set, so a foreign value is left untouched), and the
/// raw observed count (unclamped by min and max, unlike the rendered `replicas` input) is written
/// whenever it is known and differs from `spec.replicas`. Without autoscaling, only CAPTF's own
/// claim is released, and `spec.replicas` is never written.
pub fn sync_replicas(
    autoscaling: bool,
    managed_by: Option<&str>,
    observed: Option<i32>,
    spec_replicas: Option<i32>,
) -> SyncReplicas {
    if !autoscaling {
        let managed_by = if managed_by == Some(MANAGED_BY_CAPTF) {
            ManagedByEdit::Release
        } else {
            ManagedByEdit::Keep
        };
        return SyncReplicas {
            managed_by,
            write_back: None,
        };
    }
    let managed_by = match managed_by {
        None | Some("false") => ManagedByEdit::Claim,
        Some(_) => ManagedByEdit::Keep,
    };
    let write_back = observed
        .filter(|o| Some(*o) != spec_replicas)
        .map(|o| (spec_replicas, o));
    SyncReplicas {
        managed_by,
        write_back,
    }
}

/// The note of a `ReplicasWrittenBack` event: `"X → Y"` (`unset` for no earlier value).
pub fn written_back_note(from: Option<i32>, to: i32) -> String {
    let from = from.map_or_else(|| "unset".to_owned(), |f| f.to_string());
    format!("MachinePool spec.replicas {from} → {to} (observed desired capacity)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_interval_defaults_and_bounds() {
        assert_eq!(
            membership_refresh_interval(None),
            DEFAULT_MEMBERSHIP_REFRESH
        );
        assert_eq!(
            membership_refresh_interval(Some(0)),
            DEFAULT_MEMBERSHIP_REFRESH
        );
        assert_eq!(
            membership_refresh_interval(Some(20)),
            Duration::from_secs(20)
        );
        assert_eq!(
            membership_refresh_interval(Some(1)),
            Duration::from_secs(15)
        );
        assert_eq!(
            membership_refresh_interval(Some(-5)),
            Duration::from_secs(15)
        );
        assert_eq!(
            membership_refresh_interval(Some(i32::MAX)),
            Duration::from_secs(86_400)
        );
    }

    #[test]
    fn converged_needs_both_known_and_equal() {
        assert!(converged(Some(3), Some(3)));
        assert!(
            converged(Some(0), Some(0)),
            "an empty group at 0 is converged"
        );
        assert!(!converged(Some(2), Some(3)));
        assert!(!converged(None, Some(3)));
        assert!(!converged(Some(3), None));
        assert!(!converged(Some(0), Some(-1)));
    }

    #[test]
    fn unconverged_or_pending_refreshes_every_30s_or_sooner() {
        let minute = Duration::from_secs(60);
        assert_eq!(next_membership_refresh(minute, true, false), minute);
        assert_eq!(
            next_membership_refresh(minute, false, false),
            CONVERGING_REFRESH
        );
        assert_eq!(
            next_membership_refresh(minute, true, true),
            CONVERGING_REFRESH
        );
        let short = Duration::from_secs(15);
        assert_eq!(next_membership_refresh(short, false, true), short);
    }

    #[test]
    fn pool_drift_cannot_be_disabled() {
        let default = Duration::from_secs(1800);
        assert_eq!(drift_interval(Some(0), None, default), default);
        assert_eq!(drift_interval(None, Some(0), default), default);
        assert_eq!(
            drift_interval(Some(0), Some(600), default),
            Duration::from_secs(600)
        );
        assert_eq!(
            drift_interval(Some(90), Some(600), default),
            Duration::from_secs(90)
        );
        assert_eq!(drift_interval(None, None, default), default);
        assert_eq!(drift_interval(Some(-3), None, default), default);
    }

    #[test]
    fn autoscaling_claims_and_writes_the_raw_count_back() {
        // First pass: claim, and nothing observed yet.
        let s = sync_replicas(true, None, None, Some(3));
        assert_eq!(s.managed_by, ManagedByEdit::Claim);
        assert_eq!(s.write_back, None);
        // The module reports 12, outside a [3, 10] range: written raw.
        let s = sync_replicas(true, Some("captf"), Some(12), Some(3));
        assert_eq!(s.managed_by, ManagedByEdit::Keep);
        assert_eq!(s.write_back, Some((Some(3), 12)));
        assert!(written_back_note(Some(3), 12).contains("3 → 12"));
        // Equal: nothing to do.
        assert!(sync_replicas(true, Some("captf"), Some(4), Some(4)).is_noop());
        // "false" counts as unset for Cluster API: claimed.
        assert_eq!(
            sync_replicas(true, Some("false"), Some(4), Some(4)).managed_by,
            ManagedByEdit::Claim
        );
        // A foreign value is never overwritten.
        assert_eq!(
            sync_replicas(true, Some("other-autoscaler"), Some(4), Some(4)).managed_by,
            ManagedByEdit::Keep
        );
        // Zero is a value, written explicitly.
        assert_eq!(
            sync_replicas(true, Some("captf"), Some(0), None).write_back,
            Some((None, 0))
        );
    }

    #[test]
    fn without_autoscaling_only_our_claim_is_released() {
        let s = sync_replicas(false, Some("captf"), Some(9), Some(3));
        assert_eq!(s.managed_by, ManagedByEdit::Release);
        assert_eq!(s.write_back, None, "spec.replicas is authoritative again");
        assert!(sync_replicas(false, Some("other"), Some(9), Some(3)).is_noop());
        assert!(sync_replicas(false, None, Some(9), Some(3)).is_noop());
    }
}
