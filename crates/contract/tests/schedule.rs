//! Backoff, refresh cadence and jitter, one test per rule (The Reconcile Lifecycle "Retry
//! backoff" and "Choosing the next operation", Common health table).

use contract::schedule::{
    DEFAULT_FAILED_JOBS_HISTORY_LIMIT, due_at, is_due, jitter, jittered, pending_refresh_delay,
    retry_at, retry_backoff, soonest, until,
};
use proptest::prelude::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MIN: Duration = Duration::from_secs(60);

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn retry_backoff_starts_at_one_minute_and_doubles_to_a_ten_minute_cap() {
    let limit = 100;
    let got: Vec<Duration> = (0..7).map(|n| retry_backoff(n, limit)).collect();
    assert_eq!(
        got,
        vec![
            Duration::ZERO,
            MIN,
            2 * MIN,
            4 * MIN,
            8 * MIN,
            10 * MIN,
            10 * MIN
        ]
    );
    assert_eq!(retry_backoff(u32::MAX - 1, u32::MAX), 10 * MIN);
}

#[test]
fn retry_backoff_jumps_to_the_cap_once_failures_reach_the_history_limit() {
    let limit = DEFAULT_FAILED_JOBS_HISTORY_LIMIT;
    let got: Vec<Duration> = (1..=4).map(|n| retry_backoff(n, limit)).collect();
    assert_eq!(got, vec![MIN, 2 * MIN, 10 * MIN, 10 * MIN]);
    assert_eq!(retry_backoff(1, 0), 10 * MIN);
    assert_eq!(retry_backoff(1, 1), 10 * MIN);
}

#[test]
fn retry_at_adds_the_backoff_to_the_last_failure() {
    assert_eq!(retry_at(at(1_000), 2, 3), at(1_120));
}

#[test]
fn pending_refresh_backs_off_30s_1m_2m_4m_then_5m() {
    let got: Vec<u64> = (1..=7)
        .map(|n| pending_refresh_delay(n).as_secs())
        .collect();
    assert_eq!(got, vec![30, 60, 120, 240, 300, 300, 300]);
    assert_eq!(pending_refresh_delay(0).as_secs(), 30);
    assert_eq!(pending_refresh_delay(u32::MAX).as_secs(), 300);
}

#[test]
fn jitter_is_deterministic_per_uid_and_at_most_a_tenth() {
    let interval = Duration::from_secs(1_800);
    let a = jitter("6b1e0c7e-1111-4e1a-9e0d-000000000001", interval);
    assert_eq!(a, jitter("6b1e0c7e-1111-4e1a-9e0d-000000000001", interval));
    assert!(a <= interval / 10);
    assert_eq!(jittered("u", interval), interval + jitter("u", interval));
}

#[test]
fn jitter_spreads_objects_created_together() {
    let interval = Duration::from_secs(1_800);
    let offsets: std::collections::BTreeSet<Duration> = (0..50)
        .map(|i| jitter(&format!("uid-{i}"), interval))
        .collect();
    assert!(offsets.len() > 45, "{}", offsets.len());
}

#[test]
fn a_zero_interval_is_never_due() {
    assert_eq!(due_at(at(0), Duration::ZERO, "u"), None);
}

#[test]
fn first_drift_check_is_due_one_jittered_interval_after_the_last_apply() {
    let interval = Duration::from_secs(1_800);
    let due = due_at(at(10_000), interval, "u").expect("enabled");
    assert_eq!(due, at(10_000) + jittered("u", interval));
    assert!(!is_due(due, at(10_000 + 1_799)));
    assert!(is_due(due, due));
    assert_eq!(until(due, at(10_000)), jittered("u", interval));
    assert_eq!(until(at(5), at(10)), Duration::ZERO);
}

#[test]
fn requeue_is_the_soonest_deadline() {
    assert_eq!(soonest([None, Some(at(30)), Some(at(10))]), Some(at(10)));
    assert_eq!(soonest([None, None]), None);
}

proptest! {
    #[test]
    fn jitter_never_exceeds_a_tenth(uid in ".{0,40}", secs in 0u64..10_000_000, nanos in 0u32..1_000_000_000) {
        let interval = Duration::new(secs, nanos);
        prop_assert!(jitter(&uid, interval) <= interval / 10);
    }

    #[test]
    fn retry_backoff_is_monotonic_and_capped(n in 0u32..1_000, limit in 0u32..100) {
        let d = retry_backoff(n, limit);
        prop_assert!(d <= 10 * MIN);
        prop_assert!(retry_backoff(n + 1, limit) >= d);
    }
}
