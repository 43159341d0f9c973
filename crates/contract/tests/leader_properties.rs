//! Properties of leader election's expiry rule (`contract::leader`): whatever clock the holder
//! writes into its renew times, another manager judges the Lease held exactly while its record
//! changed less than one lease duration ago by its own clock.

use std::time::{Duration, Instant};

use contract::leader::{LeaseObserver, LeaseRecord};
use proptest::prelude::*;

proptest! {
    #[test]
    fn held_exactly_while_the_record_changed_within_one_duration(
        // Each step: seconds since the previous read, and whether the holder renewed in
        // between (with a renew time that may be any instant, skewed either way).
        steps in prop::collection::vec((0u64..40, any::<bool>(), any::<i64>()), 1..60),
        duration in 1i32..60,
    ) {
        let mut o = LeaseObserver::default();
        let t0 = Instant::now();
        let mut now = t0;
        let mut record = LeaseRecord {
            holder: "a".to_owned(),
            lease_duration_seconds: Some(duration),
            renew_time: Some("start".to_owned()),
            ..LeaseRecord::default()
        };
        let mut changed_at = t0;
        for (i, (gap, renewed, skew)) in steps.into_iter().enumerate() {
            now += Duration::from_secs(gap);
            if renewed || i == 0 {
                record.renew_time = Some(format!("{skew}-{i}"));
                changed_at = now;
            }
            let held = o.held_by_another(&record, "b", Duration::from_secs(15), now);
            let want = now - changed_at < Duration::from_secs(u64::from(duration.unsigned_abs()));
            prop_assert_eq!(held, want);
        }
    }
}
