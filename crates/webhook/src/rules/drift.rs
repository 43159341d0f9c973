//! Drift and membership intervals (spec: Drift, Drift and Health, Machine Pools "Set the
//! membership refresh interval").
//!
//! A TerraformCluster's or TerraformMachine's `intervalSeconds: 0` turns drift checks off, and a
//! cluster's `spec.defaults.drift.intervalSeconds: 0` does the same for its machines; a
//! TerraformMachinePool's drift can never be turned off, so its own 0 is rejected (leave it unset
//! for the default). No interval may be negative.
//!
//! A pool's `membershipRefreshIntervalSeconds` is not checked here: following the Contract
//! Changelog ("15-86400, rejected below 15 by the CRD schema, not the webhook"), its bounds are
//! the CRD schema's alone, 0 included (unset means 60). The API server applies them before any
//! webhook runs.

use super::{Rule, Violation};

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
}
