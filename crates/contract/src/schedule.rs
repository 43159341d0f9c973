//! Delays and deadlines of the reconcile flow: retry backoff after failed Jobs, the pending-health
//! refresh backoff, the fixed pool convergence cadence, and the deterministic per-UID jitter added
//! to every interval (spec: The Reconcile Lifecycle "Retry backoff" and "Choosing the next
//! operation", Drift and Health "What runs, and when", Common health table).
//!
//! Time is always an input: nothing here reads a clock.

use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

/// The first retry delay after one failure.
pub const RETRY_BASE: Duration = Duration::from_secs(60);
/// The longest retry delay.
pub const RETRY_CAP: Duration = Duration::from_secs(600);
/// The default `failedJobsHistoryLimit`.
pub const DEFAULT_FAILED_JOBS_HISTORY_LIMIT: u32 = 3;
/// The pending-health refresh delays, one per consecutive pending reading; the last repeats.
pub const PENDING_REFRESH_STEPS: [Duration; 5] = [
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(120),
    Duration::from_secs(240),
    Duration::from_secs(300),
];
/// The fixed refresh cadence of a pool whose membership has not converged (or reads pending).
pub const POOL_CONVERGENCE_REFRESH: Duration = Duration::from_secs(30);
/// How often a wait on an approval or a blocked plan is re-checked at the latest.
pub const APPROVAL_RECHECK: Duration = Duration::from_secs(600);
/// The jitter is at most this fraction of the interval: one tenth.
pub const JITTER_DIVISOR: u32 = 10;

/// The delay before retrying an operation after `consecutive_failures` failed Jobs of it: none
/// before the first failure, then one minute doubling each time up to ten minutes; once the
/// failures reach `failed_history_limit`, straight to ten minutes.
pub fn retry_backoff(consecutive_failures: u32, failed_history_limit: u32) -> Duration {
    if consecutive_failures == 0 {
        return Duration::ZERO;
    }
    if consecutive_failures >= failed_history_limit {
        return RETRY_CAP;
    }
    // 2^(n-1) minutes; past 2^4 the cap has long been reached, so the shift never overflows.
    let exponent = (consecutive_failures - 1).min(8);
    RETRY_BASE.saturating_mul(1 << exponent).min(RETRY_CAP)
}

/// When the next attempt may start: the last failure's finish plus [`retry_backoff`].
pub fn retry_at(
    last_failure: SystemTime,
    consecutive_failures: u32,
    failed_history_limit: u32,
) -> SystemTime {
    add(
        last_failure,
        retry_backoff(consecutive_failures, failed_history_limit),
    )
}

/// The refresh delay while health reads `pending`, for a cluster or machine: 30 s after the first
/// pending reading, then 1 m, 2 m, 4 m, then every 5 m. `consecutive_pending` is
/// `status.pendingRefreshes` (0 is treated like 1). Jitter is added separately.
pub fn pending_refresh_delay(consecutive_pending: u32) -> Duration {
    let index = (consecutive_pending.max(1) - 1) as usize;
    PENDING_REFRESH_STEPS[index.min(PENDING_REFRESH_STEPS.len() - 1)]
}

/// The deterministic jitter for an object and an interval: a fraction of at most a tenth of the
/// interval, derived from `sha256(uid)`, so objects created together spread out while one object
/// always gets the same offset.
pub fn jitter(uid: &str, interval: Duration) -> Duration {
    let digest = Sha256::digest(uid.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let fraction = u128::from(u64::from_be_bytes(first));
    let tenth = interval.as_nanos() / u128::from(JITTER_DIVISOR);
    // fraction / 2^64 of a tenth; the result is below the tenth, so it fits back into a Duration.
    let nanos = (tenth * fraction) >> 64;
    duration_from_nanos(nanos)
}

/// `interval` plus the object's [`jitter`].
pub fn jittered(uid: &str, interval: Duration) -> Duration {
    interval.saturating_add(jitter(uid, interval))
}

/// When something on an interval is next due: `since` plus the jittered interval, or `None` when
/// the interval is zero (disabled, as `drift.intervalSeconds: 0` is).
pub fn due_at(since: SystemTime, interval: Duration, uid: &str) -> Option<SystemTime> {
    if interval.is_zero() {
        None
    } else {
        Some(add(since, jittered(uid, interval)))
    }
}

/// Whether a deadline has passed at `now` (a deadline equal to `now` is due).
pub fn is_due(deadline: SystemTime, now: SystemTime) -> bool {
    deadline <= now
}

/// How long from `now` until `deadline` (zero when already due): the requeue delay.
pub fn until(deadline: SystemTime, now: SystemTime) -> Duration {
    deadline.duration_since(now).unwrap_or(Duration::ZERO)
}

/// The soonest of several optional deadlines.
pub fn soonest<I>(deadlines: I) -> Option<SystemTime>
where
    I: IntoIterator<Item = Option<SystemTime>>,
{
    deadlines.into_iter().flatten().min()
}

fn add(time: SystemTime, delay: Duration) -> SystemTime {
    time.checked_add(delay).unwrap_or(time)
}

fn duration_from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    let sub = (nanos % NANOS_PER_SEC) as u32;
    Duration::new(secs, sub)
}
