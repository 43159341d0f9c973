//! Leader election's expiry rule (INTERFACE-FACTS §4 "Leader election"): whether another
//! manager still holds the Lease `controller-leader-election-captf`.
//!
//! The holder writes its own clock into `spec.renewTime`, and the managers' clocks need not
//! agree: a holder whose clock runs minutes behind writes renew times that look long expired to
//! everyone else, and one whose clock runs ahead writes renew times that look valid for minutes
//! after it died. So a renew time is never compared with this process's clock. As client-go's
//! leader election does, a manager measures expiry on its own monotonic clock, from the moment it
//! last saw the Lease's record change: a holder that keeps renewing changes the record every
//! retry period, whatever its clock says, and a Lease whose record has not changed for its lease
//! duration is expired.

use std::time::{Duration, Instant};

/// The parts of a Lease's spec that make up its leader-election record. Times are kept as the
/// text the API server returned: they are compared for change only, never as clock readings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `spec.holderIdentity` (empty when the Lease was released).
    pub holder: String,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration_seconds: Option<i32>,
    /// `spec.acquireTime`.
    pub acquire_time: Option<String>,
    /// `spec.renewTime`.
    pub renew_time: Option<String>,
    /// `spec.leaseTransitions`.
    pub transitions: Option<i32>,
}

impl LeaseRecord {
    /// The lease duration the record declares, or `fallback` (this manager's
    /// `--leader-elect-lease-duration`) when it declares none or a non-positive one.
    pub fn lease_duration(&self, fallback: Duration) -> Duration {
        match self.lease_duration_seconds {
            Some(s) if s > 0 => Duration::from_secs(u64::from(s.unsigned_abs())),
            _ => fallback,
        }
    }
}

/// What one manager last saw of the Lease, and when by its own monotonic clock.
#[derive(Debug, Clone, Default)]
pub struct LeaseObserver {
    last: Option<(LeaseRecord, Instant)>,
}

impl LeaseObserver {
    /// Records the Lease's current record as read at `now`, and tells whether another manager
    /// holds it: a non-empty holder other than `identity`, whose record changed less than its
    /// lease duration ago as this manager saw it. A record seen for the first time counts as
    /// changed now, so a manager that just started waits a full lease duration before it takes
    /// over a Lease nobody renews.
    pub fn held_by_another(
        &mut self,
        current: &LeaseRecord,
        identity: &str,
        fallback_duration: Duration,
        now: Instant,
    ) -> bool {
        let seen_at = match &self.last {
            Some((record, at)) if record == current => *at,
            _ => {
                self.last = Some((current.clone(), now));
                now
            }
        };
        if current.holder.is_empty() || current.holder == identity {
            return false;
        }
        now.saturating_duration_since(seen_at) < current.lease_duration(fallback_duration)
    }

    /// Records the record this manager itself wrote at `now` (after a successful create or
    /// update of the Lease).
    pub fn wrote(&mut self, record: LeaseRecord, now: Instant) {
        self.last = Some((record, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(15);

    fn record(holder: &str, renew: &str) -> LeaseRecord {
        LeaseRecord {
            holder: holder.to_owned(),
            lease_duration_seconds: Some(15),
            acquire_time: Some("2026-12-01T00:00:00.000000Z".to_owned()),
            renew_time: Some(renew.to_owned()),
            transitions: Some(0),
        }
    }

    #[test]
    fn a_holder_whose_clock_runs_minutes_behind_keeps_the_lease_while_it_renews() {
        let mut o = LeaseObserver::default();
        let t0 = Instant::now();
        // The holder's renew times are an hour old by anyone else's clock.
        for (i, renew) in ["2026-12-01T00:00:00Z", "2026-12-01T00:00:02Z"]
            .iter()
            .cycle()
            .take(40)
            .enumerate()
        {
            let now = t0 + Duration::from_secs(2 * i as u64);
            let r = record("a", &format!("{renew}-{i}"));
            assert!(o.held_by_another(&r, "b", DURATION, now), "renewal {i}");
        }
    }

    #[test]
    fn a_holder_whose_clock_runs_ahead_loses_the_lease_one_duration_after_its_last_renewal() {
        let mut o = LeaseObserver::default();
        let t0 = Instant::now();
        // Renew times ten minutes in the future; the holder renews once more, then dies.
        let r1 = record("a", "2099-01-01T00:10:00Z");
        let r2 = record("a", "2099-01-01T00:10:02Z");
        assert!(o.held_by_another(&r1, "b", DURATION, t0));
        assert!(o.held_by_another(&r2, "b", DURATION, t0 + Duration::from_secs(2)));
        let last = t0 + Duration::from_secs(2);
        assert!(o.held_by_another(&r2, "b", DURATION, last + Duration::from_secs(14)));
        assert!(!o.held_by_another(&r2, "b", DURATION, last + DURATION));
    }

    #[test]
    fn a_lease_seen_for_the_first_time_is_held_for_one_duration_whatever_its_renew_time() {
        let mut o = LeaseObserver::default();
        let t0 = Instant::now();
        let ancient = record("a", "1970-01-01T00:00:00Z");
        assert!(o.held_by_another(&ancient, "b", DURATION, t0));
        assert!(o.held_by_another(&ancient, "b", DURATION, t0 + Duration::from_secs(14)));
        assert!(!o.held_by_another(&ancient, "b", DURATION, t0 + DURATION));
    }

    #[test]
    fn the_own_lease_and_a_released_lease_are_not_held_by_another() {
        let mut o = LeaseObserver::default();
        let now = Instant::now();
        assert!(!o.held_by_another(&record("b", "x"), "b", DURATION, now));
        assert!(!o.held_by_another(&record("", "x"), "b", DURATION, now));
    }

    #[test]
    fn the_record_declares_the_duration_and_ours_is_the_fallback() {
        let mut o = LeaseObserver::default();
        let t0 = Instant::now();
        let mut r = record("a", "x");
        r.lease_duration_seconds = Some(60);
        assert!(o.held_by_another(&r, "b", DURATION, t0));
        assert!(o.held_by_another(&r, "b", DURATION, t0 + Duration::from_secs(59)));
        assert!(!o.held_by_another(&r, "b", DURATION, t0 + Duration::from_secs(60)));
        for missing in [None, Some(0), Some(-5)] {
            let r = LeaseRecord {
                lease_duration_seconds: missing,
                ..record("a", "y")
            };
            assert_eq!(r.lease_duration(DURATION), DURATION, "{missing:?}");
        }
    }

    #[test]
    fn a_record_this_manager_wrote_starts_the_clock_for_the_next_holder_check() {
        let mut o = LeaseObserver::default();
        let t0 = Instant::now();
        o.wrote(record("b", "mine"), t0);
        // Another manager takes it over; the change is seen later and held from then.
        let taken = record("a", "theirs");
        let seen = t0 + Duration::from_secs(30);
        assert!(o.held_by_another(&taken, "b", DURATION, seen));
        assert!(!o.held_by_another(&taken, "b", DURATION, seen + DURATION));
    }
}
