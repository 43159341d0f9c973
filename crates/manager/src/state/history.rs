//! Job history pruning (spec: The Reconcile Lifecycle "Job names and history"; Tuning Jobs
//! "History limits").
//!
//! Each operation of an object (apply, destroy, drift, refresh, restore, plan) keeps its own
//! history: at most `successfulJobsHistoryLimit` finished successes and `failedJobsHistoryLimit`
//! finished failures, the oldest pruned first. Whatever the limits (even 0), an operation's newest
//! success is kept, and so is its newest failure while no success is newer: retry backoff and
//! drift remediation's failure cap read exactly those. A failure here is any finished Job that did
//! not succeed (failed, deadline exceeded, interrupted, blocked, plan changed). Active Jobs are
//! never pruned.
//!
//! "Newest" orders finished Jobs by finish time, then attempt, then name, the same order the
//! decision reads them in. Prune only Jobs whose result has already been recorded.

use std::cmp::Ordering;

use contract::names::Operation;

use crate::pass::observed::{JobOutcome, JobRecord};

/// The names of the finished Jobs to delete so each operation's history stays within the
/// limits, oldest first.
pub fn jobs_to_prune(jobs: &[JobRecord], successful_limit: u32, failed_limit: u32) -> Vec<String> {
    let mut pruned: Vec<&JobRecord> = Vec::new();
    for operation in Operation::ALL {
        let mut finished: Vec<&JobRecord> = jobs
            .iter()
            .filter(|job| job.operation == operation && !job.is_active())
            .collect();
        finished.sort_by(|a, b| newest_first(a, b));

        let mut successes = 0u32;
        let mut failures = 0u32;
        for job in finished {
            let keep = if job.outcome == Some(JobOutcome::Succeeded) {
                successes += 1;
                // The newest success is always kept.
                successes == 1 || successes <= successful_limit
            } else {
                failures += 1;
                // The newest failure is kept while no success is newer.
                (failures == 1 && successes == 0) || failures <= failed_limit
            };
            if !keep {
                pruned.push(job);
            }
        }
    }
    pruned.sort_by(|a, b| newest_first(b, a));
    pruned.into_iter().map(|job| job.name.clone()).collect()
}

/// Newest first: by finish time, then attempt, then name, each descending.
fn newest_first(a: &JobRecord, b: &JobRecord) -> Ordering {
    (b.finished, b.attempt, &b.name).cmp(&(a.finished, a.attempt, &a.name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashSet;
    use std::time::{Duration, SystemTime};

    use proptest::prelude::*;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn record(
        name: &str,
        operation: Operation,
        attempt: u32,
        finished: Option<u64>,
        outcome: Option<JobOutcome>,
    ) -> JobRecord {
        JobRecord {
            name: name.to_owned(),
            operation,
            attempt,
            tick: None,
            inputs_hash: "h1:x".to_owned(),
            created: at(u64::from(attempt)),
            started: None,
            finished: finished.map(at),
            outcome,
            drift_remediation: false,
            requested: None,
            run_secret_exists: false,
            pod_ever_started: true,
            module_never_started: false,
            pull_failure: None,
        }
    }

    fn done(name: &str, op: Operation, attempt: u32, outcome: JobOutcome) -> JobRecord {
        record(
            name,
            op,
            attempt,
            Some(100 + u64::from(attempt)),
            Some(outcome),
        )
    }

    use JobOutcome::{Blocked, DeadlineExceeded, Failed, Interrupted, PlanChanged, Succeeded};
    use Operation::{Apply, Destroy, Drift, Refresh};

    #[test]
    fn nothing_to_prune_within_limits() {
        let jobs = vec![
            done("a1", Apply, 1, Succeeded),
            done("a2", Apply, 2, Failed),
            done("a3", Apply, 3, Succeeded),
        ];
        assert!(jobs_to_prune(&jobs, 3, 3).is_empty());
        assert!(jobs_to_prune(&[], 0, 0).is_empty());
    }

    #[test]
    fn oldest_successes_go_first() {
        let jobs: Vec<JobRecord> = (1..=5)
            .map(|i| done(&format!("a{i}"), Apply, i, Succeeded))
            .collect();
        assert_eq!(jobs_to_prune(&jobs, 3, 3), ["a1", "a2"]);
        assert_eq!(jobs_to_prune(&jobs, 1, 3), ["a1", "a2", "a3", "a4"]);
    }

    #[test]
    fn newest_success_survives_a_zero_limit() {
        let jobs = vec![
            done("a1", Apply, 1, Succeeded),
            done("a2", Apply, 2, Succeeded),
            done("a3", Apply, 3, Failed),
        ];
        // a3 failed after a2 succeeded: both newest are kept.
        assert_eq!(jobs_to_prune(&jobs, 0, 0), ["a1"]);
    }

    #[test]
    fn a_failure_older_than_a_success_is_not_protected() {
        let jobs = vec![
            done("a1", Apply, 1, Failed),
            done("a2", Apply, 2, Succeeded),
        ];
        assert_eq!(jobs_to_prune(&jobs, 0, 0), ["a1"]);
        assert!(jobs_to_prune(&jobs, 0, 1).is_empty());
    }

    #[test]
    fn failures_are_pruned_beyond_their_limit_and_keep_the_newest() {
        let jobs = vec![
            done("a1", Apply, 1, Failed),
            done("a2", Apply, 2, DeadlineExceeded),
            done("a3", Apply, 3, Interrupted),
            done("a4", Apply, 4, Blocked),
            done("a5", Apply, 5, PlanChanged),
        ];
        assert_eq!(jobs_to_prune(&jobs, 3, 3), ["a1", "a2"]);
        assert_eq!(jobs_to_prune(&jobs, 3, 0), ["a1", "a2", "a3", "a4"]);
    }

    #[test]
    fn limits_apply_per_operation() {
        let jobs = vec![
            done("a1", Apply, 1, Succeeded),
            done("a2", Apply, 2, Succeeded),
            done("d1", Drift, 1, Succeeded),
            done("d2", Drift, 2, Succeeded),
            done("r1", Refresh, 1, Failed),
            done("r2", Refresh, 2, Failed),
            done("x1", Destroy, 1, Succeeded),
        ];
        assert_eq!(jobs_to_prune(&jobs, 1, 1), ["a1", "d1", "r1"]);
    }

    #[test]
    fn active_jobs_are_never_pruned_nor_counted() {
        let jobs = vec![
            done("a1", Apply, 1, Succeeded),
            done("a2", Apply, 2, Succeeded),
            record("a3", Apply, 3, None, None),
            // Finished time but no outcome yet: still active.
            record("a4", Apply, 4, Some(200), None),
        ];
        assert_eq!(jobs_to_prune(&jobs, 1, 0), ["a1"]);
    }

    #[test]
    fn ties_on_finish_time_fall_back_to_attempt() {
        let jobs = vec![
            record("b", Apply, 2, Some(100), Some(Succeeded)),
            record("a", Apply, 1, Some(100), Some(Succeeded)),
            record("c", Apply, 3, Some(100), Some(Succeeded)),
        ];
        assert_eq!(jobs_to_prune(&jobs, 1, 1), ["a", "b"]);
    }

    #[test]
    fn pruned_names_are_oldest_first_across_operations() {
        let jobs = vec![
            record("apply-old", Apply, 1, Some(10), Some(Succeeded)),
            record("apply-new", Apply, 2, Some(40), Some(Succeeded)),
            record("drift-old", Drift, 1, Some(5), Some(Succeeded)),
            record("drift-mid", Drift, 2, Some(20), Some(Succeeded)),
            record("drift-new", Drift, 3, Some(30), Some(Succeeded)),
        ];
        assert_eq!(
            jobs_to_prune(&jobs, 1, 1),
            ["drift-old", "apply-old", "drift-mid"]
        );
    }

    fn arb_outcome() -> impl Strategy<Value = Option<JobOutcome>> {
        prop_oneof![
            2 => Just(None),
            6 => Just(Some(Succeeded)),
            4 => Just(Some(Failed)),
            1 => Just(Some(DeadlineExceeded)),
            1 => Just(Some(Interrupted)),
            1 => Just(Some(Blocked)),
            1 => Just(Some(PlanChanged)),
        ]
    }

    fn arb_jobs() -> impl Strategy<Value = Vec<JobRecord>> {
        prop::collection::vec((0usize..3, 1u32..8, 0u64..50, arb_outcome()), 0..30).prop_map(
            |items| {
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, (op, attempt, finished, outcome))| {
                        let op = [Apply, Drift, Destroy][op];
                        record(
                            &format!("job-{i}"),
                            op,
                            attempt,
                            outcome.map(|_| finished),
                            outcome,
                        )
                    })
                    .collect()
            },
        )
    }

    fn newest(
        jobs: &[JobRecord],
        op: Operation,
        pred: impl Fn(&JobRecord) -> bool,
    ) -> Option<&JobRecord> {
        jobs.iter()
            .filter(|j| j.operation == op && !j.is_active() && pred(j))
            .min_by(|a, b| newest_first(a, b))
    }

    proptest! {
        #[test]
        fn pruning_invariants(jobs in arb_jobs(), s_limit in 0u32..4, f_limit in 0u32..4) {
            let pruned = jobs_to_prune(&jobs, s_limit, f_limit);
            let pruned_set: HashSet<&str> = pruned.iter().map(String::as_str).collect();
            prop_assert_eq!(pruned_set.len(), pruned.len(), "no duplicates");

            // Never an active Job; only known names.
            for name in &pruned {
                let job = jobs.iter().find(|j| &j.name == name).expect("a known Job");
                prop_assert!(!job.is_active());
            }

            // Oldest first.
            let order: Vec<&JobRecord> = pruned
                .iter()
                .map(|n| jobs.iter().find(|j| &j.name == n).unwrap())
                .collect();
            for pair in order.windows(2) {
                prop_assert_ne!(newest_first(pair[1], pair[0]), Ordering::Greater);
            }

            for op in [Apply, Drift, Destroy] {
                let success = |j: &JobRecord| j.outcome == Some(Succeeded);
                let newest_success = newest(&jobs, op, success);
                // The newest success is always kept.
                if let Some(s) = newest_success {
                    prop_assert!(!pruned_set.contains(s.name.as_str()));
                }
                // The newest failure is kept while no success is newer.
                if let Some(f) = newest(&jobs, op, |j| !success(j)) {
                    let superseded = newest_success
                        .is_some_and(|s| newest_first(s, f) == Ordering::Less);
                    if !superseded {
                        prop_assert!(!pruned_set.contains(f.name.as_str()));
                    }
                }
                // Kept counts are bounded, and limits are filled before anything is pruned.
                let kept = |pred: &dyn Fn(&JobRecord) -> bool| {
                    jobs.iter()
                        .filter(|j| j.operation == op && !j.is_active() && pred(j))
                        .filter(|j| !pruned_set.contains(j.name.as_str()))
                        .count()
                };
                let total = |pred: &dyn Fn(&JobRecord) -> bool| {
                    jobs.iter()
                        .filter(|j| j.operation == op && !j.is_active() && pred(j))
                        .count()
                };
                let kept_s = kept(&success);
                let kept_f = kept(&|j: &JobRecord| !success(j));
                prop_assert!(kept_s <= s_limit.max(1) as usize);
                prop_assert!(kept_f <= f_limit.max(1) as usize);
                prop_assert!(kept_s >= total(&success).min(s_limit as usize));
                prop_assert!(kept_f >= total(&|j: &JobRecord| !success(j)).min(f_limit as usize));
            }
        }
    }
}
