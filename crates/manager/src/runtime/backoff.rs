//! The error backoff of the controllers (INTERFACE-FACTS §4 `--sync-period`): how long an object
//! whose pass failed waits before its next pass.

use std::sync::Arc;
use std::time::Duration;

/// The error backoff of one object: exponential from 5 s, capped at `--sync-period`, with
/// jitter from its UID, per consecutive failure (kept until a pass succeeds).
#[derive(Clone, Default)]
pub struct ErrorBackoff(Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>);

impl ErrorBackoff {
    /// The delay after one more failure of the object `uid`.
    pub fn failed(&self, uid: &str, cap: Duration) -> Duration {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(uid.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        error_delay(uid, *n, cap)
    }

    /// Forgets the failures of `uid` (its pass succeeded).
    pub fn succeeded(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(uid);
    }
}

impl std::fmt::Debug for ErrorBackoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ErrorBackoff")
    }
}

/// The delay after the `failures`-th consecutive failure: 5 s doubled per failure, capped at
/// `cap`, jittered by up to 10 % from `uid`.
pub fn error_delay(uid: &str, failures: u32, cap: Duration) -> Duration {
    let base = Duration::from_secs(5);
    let doubled = base.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    contract::schedule::jittered(uid, doubled.min(cap)).min(cap.max(base))
}
