//! Drift and membership intervals (spec: Drift, Drift and Health, Machine Pools "Set the
//! membership refresh interval").
//!
//! A TerraformCluster's or TerraformMachine's `intervalSeconds: 0` turns drift checks off, and a
//! cluster's `spec.defaults.drift.intervalSeconds: 0` does the same for its machines; a
//! TerraformMachinePool's drift can never be turned off, so its own 0 is rejected (leave it unset
//! for the default). No interval may be negative. A pool refreshes its membership every 15 to
//! 86400 seconds; 0 (like unset) means the default of 60.

use super::{Rule, Violation};

/// Shortest `membershipRefreshIntervalSeconds`.
pub const MIN_MEMBERSHIP_REFRESH_SECONDS: i32 = 15;
/// Longest `membershipRefreshIntervalSeconds`.
pub const MAX_MEMBERSHIP_REFRESH_SECONDS: i32 = 86_400;

/// Checks a drift interval at `path` (for example `spec.drift.intervalSeconds`) of a cluster, a
/// machine or a cluster's defaults: 0 (off) or more.
pub fn check_interval(path: &str, interval: Option<i32>, out: &mut Vec<Violation>) {
    if let Some(seconds) = interval
        && seconds < 0
    {
        out.push(Violation::new(
            Rule::DriftInterval,
            format!("{path}: {seconds} is negative: use 0 to turn drift checks off, or a number of seconds"),
        ));
    }
}

/// Checks a TerraformMachinePool's drift interval at `path`: at least 1 when set.
pub fn check_pool_interval(path: &str, interval: Option<i32>, out: &mut Vec<Violation>) {
    match interval {
        Some(0) => out.push(Violation::new(
            Rule::DriftInterval,
            format!(
                "{path}: 0 is not allowed on a TerraformMachinePool: a pool's drift checks cannot be turned off (leave it unset for the default interval)"
            ),
        )),
        Some(seconds) if seconds < 0 => out.push(Violation::new(
            Rule::DriftInterval,
            format!("{path}: {seconds} is negative: a pool's drift interval is at least 1 second"),
        )),
        _ => {}
    }
}

/// Checks a TerraformMachinePool's `membershipRefreshIntervalSeconds` at `path`.
pub fn check_membership_interval(path: &str, interval: Option<i32>, out: &mut Vec<Violation>) {
    if let Some(seconds) = interval
        && seconds != 0
        && !(MIN_MEMBERSHIP_REFRESH_SECONDS..=MAX_MEMBERSHIP_REFRESH_SECONDS).contains(&seconds)
    {
        out.push(Violation::new(
            Rule::MembershipInterval,
            format!(
                "{path}: {seconds} is out of bounds: use {MIN_MEMBERSHIP_REFRESH_SECONDS} to {MAX_MEMBERSHIP_REFRESH_SECONDS} seconds (0 or unset means 60)"
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        f: fn(&str, Option<i32>, &mut Vec<Violation>),
        path: &str,
        v: Option<i32>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        f(path, v, &mut out);
        out.into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn a_pool_drift_interval_of_zero_is_rejected() {
        assert_eq!(
            run(check_pool_interval, "spec.drift.intervalSeconds", Some(0)),
            [
                "spec.drift.intervalSeconds: 0 is not allowed on a TerraformMachinePool: a pool's drift checks cannot be turned off (leave it unset for the default interval)"
            ]
        );
        assert_eq!(
            run(check_pool_interval, "spec.drift.intervalSeconds", Some(-5)),
            [
                "spec.drift.intervalSeconds: -5 is negative: a pool's drift interval is at least 1 second"
            ]
        );
        assert!(run(check_pool_interval, "spec.drift.intervalSeconds", Some(1)).is_empty());
        assert!(run(check_pool_interval, "spec.drift.intervalSeconds", None).is_empty());
    }

    #[test]
    fn cluster_and_machine_drift_may_be_off_but_not_negative() {
        assert!(run(check_interval, "spec.drift.intervalSeconds", Some(0)).is_empty());
        assert!(
            run(
                check_interval,
                "spec.defaults.drift.intervalSeconds",
                Some(0)
            )
            .is_empty()
        );
        assert_eq!(
            run(check_interval, "spec.drift.intervalSeconds", Some(-1)),
            [
                "spec.drift.intervalSeconds: -1 is negative: use 0 to turn drift checks off, or a number of seconds"
            ]
        );
    }

    #[test]
    fn membership_interval_is_15_to_86400_or_the_default() {
        let p = "spec.membershipRefreshIntervalSeconds";
        for ok in [None, Some(0), Some(15), Some(86_400)] {
            assert!(run(check_membership_interval, p, ok).is_empty(), "{ok:?}");
        }
        assert_eq!(
            run(check_membership_interval, p, Some(14)),
            [
                "spec.membershipRefreshIntervalSeconds: 14 is out of bounds: use 15 to 86400 seconds (0 or unset means 60)"
            ]
        );
        assert_eq!(
            run(check_membership_interval, p, Some(86_401)),
            [
                "spec.membershipRefreshIntervalSeconds: 86401 is out of bounds: use 15 to 86400 seconds (0 or unset means 60)"
            ]
        );
        assert_eq!(run(check_membership_interval, p, Some(-1)).len(), 1);
    }
}
