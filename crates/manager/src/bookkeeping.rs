//! Bookkeeping of finished Jobs (spec: The Reconcile Lifecycle "Bookkeeping"; Security Model
//! "Image pinning by digest"; INTERFACE-FACTS §5 "Result document", §6 Job annotations): reading
//! how each finished Job ended from its pod's termination message, recording it in
//! `status.lastRun` and the Job conditions, pinning the image digest of a succeeded apply,
//! adopting its state, deleting the per-run Secret and giving the leases back. The Job itself is
//! annotated `captf.io/bookkept` only after the pass's status patch has landed.

use std::time::SystemTime;

use api::constants::{annotations, conditions as ctype, events, labels, reasons};
use api::status::{DriftSummary, LastRun, RunError, RunStep};
use contract::health::ConditionStatus;
use contract::names::Operation;
use contract::result::{ErrorKind, ResultDocument};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::ListParams;

use crate::conditions::Conditions;
use crate::decide::{JobOutcome, JobRecord};
use crate::events::Outbox;

/// The container that runs the runner.
pub const SOURCE_CONTAINER: &str = "source";

/// What a finished Job's pod reported.
#[derive(Debug, Clone, Default)]
pub struct PodReport {
    /// The result document, when the runner wrote one.
    pub result: Option<ResultDocument>,
    /// The `imageID` of the `source` container (the digest the kubelet ran).
    pub image_id: Option<String>,
    /// When the `source` container started.
    pub started: Option<Time>,
}

/// Reads the newest pod of a Job.
pub async fn pod_report(client: &kube::Client, ns: &str, job: &str) -> kube::Result<PodReport> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    let mut list = pods.list(&lp).await?.items;
    list.sort_by_key(|p| p.metadata.creation_timestamp.clone());
    let Some(pod) = list.pop() else {
        return Ok(PodReport::default());
    };
    let status = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name == SOURCE_CONTAINER);
    let Some(status) = status else {
        return Ok(PodReport::default());
    };
    let terminated = status.state.as_ref().and_then(|s| s.terminated.as_ref());
    let result = terminated
        .and_then(|t| t.message.as_deref())
        .and_then(|m| serde_json::from_str::<ResultDocument>(m).ok());
    let started = terminated.and_then(|t| t.started_at.clone()).or_else(|| {
        status
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.clone())
    });
    Ok(PodReport {
        result,
        image_id: Some(status.image_id).filter(|i| !i.is_empty()),
        started,
    })
}

/// The digest (`sha256:…`) in a container `imageID`.
pub fn digest_of(image_id: &str) -> Option<String> {
    let (_, digest) = image_id.rsplit_once('@')?;
    (digest.starts_with("sha256:") && digest.len() == 71).then(|| digest.to_owned())
}

/// Whether a Job finished, and how its Job conditions say it did.
pub fn finished_condition(job: &Job) -> Option<(bool, Option<String>, Option<Time>)> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            (
                c.type_ == "Complete",
                c.reason.clone(),
                c.last_transition_time.clone(),
            )
        })
}

/// How a finished Job ended: from its Job condition and, for a failure, the result document.
pub fn outcome_of(job: &Job, result: Option<&ResultDocument>) -> Option<JobOutcome> {
    let (complete, reason, _) = finished_condition(job)?;
    if complete {
        return Some(JobOutcome::Succeeded);
    }
    if reason.as_deref() == Some("DeadlineExceeded") {
        return Some(JobOutcome::DeadlineExceeded);
    }
    Some(
        match result.and_then(|r| r.error.as_ref()).map(|e| e.kind) {
            // No result at all: the pod was killed or deleted from outside.
            Some(ErrorKind::Interrupted) | None => JobOutcome::Interrupted,
            Some(ErrorKind::Blocked) => JobOutcome::Blocked,
            Some(ErrorKind::PlanChanged) => JobOutcome::PlanChanged,
            Some(ErrorKind::Step | ErrorKind::ImageLayout) => JobOutcome::Failed,
        },
    )
}

/// The outcome recorded on an already bookkept Job.
pub fn recorded_outcome(job: &Job) -> Option<JobOutcome> {
    let (complete, reason, _) = finished_condition(job)?;
    if complete {
        return Some(JobOutcome::Succeeded);
    }
    let a = job.metadata.annotations.clone().unwrap_or_default();
    Some(if reason.as_deref() == Some("DeadlineExceeded") {
        JobOutcome::DeadlineExceeded
    } else if a.contains_key(annotations::INTERRUPTED) {
        JobOutcome::Interrupted
    } else if a.contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED) {
        JobOutcome::Blocked
    } else if a.contains_key(annotations::PLAN_CHANGED) {
        JobOutcome::PlanChanged
    } else {
        JobOutcome::Failed
    })
}

/// Whether a Job was already bookkept.
pub fn is_bookkept(job: &Job) -> bool {
    job.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::BOOKKEPT))
}

fn to_system(t: &Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// A Job as `decide` sees it. `outcome` overrides what the Job records (a Job bookkept in this
/// very pass).
pub fn job_record(
    job: &Job,
    outcome: Option<JobOutcome>,
    run_secret_exists: bool,
) -> Option<JobRecord> {
    let l = job.metadata.labels.clone().unwrap_or_default();
    let a = job.metadata.annotations.clone().unwrap_or_default();
    let operation = Operation::parse(l.get(labels::OP)?)?;
    let attempt = l.get(labels::ATTEMPT)?.parse().ok()?;
    let finished = finished_condition(job);
    let status = job.status.clone().unwrap_or_default();
    Some(JobRecord {
        name: job.metadata.name.clone()?,
        operation,
        attempt,
        tick: None,
        inputs_hash: a.get(annotations::INPUTS_HASH).cloned().unwrap_or_default(),
        created: job
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(SystemTime::UNIX_EPOCH, to_system),
        started: status.start_time.as_ref().map(to_system),
        finished: finished.as_ref().map(|(_, _, t)| {
            t.as_ref()
                .or(status.completion_time.as_ref())
                .map_or_else(SystemTime::now, to_system)
        }),
        outcome: if finished.is_some() {
            outcome.or_else(|| recorded_outcome(job))
        } else {
            None
        },
        drift_remediation: a.contains_key(annotations::DRIFT_REMEDIATION),
        restore_serial: a
            .get(annotations::RESTORE_SERIAL)
            .and_then(|s| s.parse().ok()),
        run_secret_exists,
        pod_ever_started: status.ready.unwrap_or(0) > 0
            || status.succeeded.unwrap_or(0) > 0
            || status.failed.unwrap_or(0) > 0,
    })
}

/// `status.lastRun` from a finished Job and its result document; steps map `{name, exit,
/// seconds}` to `{name, exitCode, durationMilliseconds}`.
pub fn last_run(
    record: &JobRecord,
    job: &Job,
    result: Option<&ResultDocument>,
    outcome: JobOutcome,
) -> LastRun {
    let steps: Vec<RunStep> = result
        .map(|r| {
            r.steps
                .iter()
                .take(16)
                .map(|s| RunStep {
                    name: s.name.clone(),
                    exit_code: s.exit,
                    duration_milliseconds: Some((s.seconds * 1000.0).round() as i64),
                })
                .collect()
        })
        .unwrap_or_default();
    let error = match (result.and_then(|r| r.error.as_ref()), outcome) {
        (Some(e), _) => Some(RunError {
            kind: e.kind,
            step: e.step.clone(),
            summary: e.summary.clone().filter(|s| !s.is_empty()),
            exit_code: e.exit_code,
        }),
        (None, JobOutcome::Interrupted) => Some(RunError {
            kind: ErrorKind::Interrupted,
            step: None,
            summary: Some(
                "The Job's pod ended without a result: it was stopped from outside".to_owned(),
            ),
            exit_code: None,
        }),
        (None, JobOutcome::DeadlineExceeded) => Some(RunError {
            kind: ErrorKind::Interrupted,
            step: None,
            summary: Some("The Job reached its activeDeadlineSeconds".to_owned()),
            exit_code: None,
        }),
        _ => None,
    };
    let drift = result.and_then(|r| r.drift.as_ref()).map(|d| DriftSummary {
        add: Some(d.add as i32),
        change: Some(d.change as i32),
        destroy: Some(d.destroy as i32),
        resources: Some(d.resources.clone()).filter(|r| !r.is_empty()),
    });
    LastRun {
        job: record.name.clone(),
        operation: record.operation,
        attempt: Some(record.attempt as i32),
        start_time: job.status.as_ref().and_then(|s| s.start_time.clone()),
        completion_time: finished_condition(job).and_then(|(_, _, t)| t),
        steps: Some(steps).filter(|s| !s.is_empty()),
        error,
        drift,
    }
}

/// The metrics `result` label of an outcome.
pub fn result_label(outcome: JobOutcome) -> &'static str {
    match outcome {
        JobOutcome::Succeeded => "succeeded",
        JobOutcome::Failed => "failed",
        JobOutcome::DeadlineExceeded => "deadline",
        JobOutcome::Interrupted => "interrupted",
        JobOutcome::Blocked => "blocked",
        JobOutcome::PlanChanged => "plan_changed",
    }
}

/// Sets the Job conditions and queues the events for one finished Job.
pub fn record_conditions(
    record: &JobRecord,
    result: Option<&ResultDocument>,
    outcome: JobOutcome,
    drift_remediate: bool,
    conds: &mut Conditions,
    outbox: &mut Outbox,
) {
    let op = record.operation;
    let job = &record.name;
    let summary = result
        .and_then(|r| r.error.as_ref())
        .and_then(|e| e.summary.clone())
        .unwrap_or_default();
    let failed_msg = |what: &str| {
        if summary.is_empty() {
            format!("{what} Job {job} failed; see its logs")
        } else {
            format!("{what} Job {job} failed: {summary}")
        }
    };
    let image_layout = result
        .and_then(|r| r.error.as_ref())
        .is_some_and(|e| e.kind == ErrorKind::ImageLayout);
    match op {
        Operation::Apply | Operation::Destroy | Operation::Plan => {
            let destroy = op == Operation::Destroy;
            let (what, ok_reason, failed_reason) = if destroy {
                (
                    "Destroy",
                    reasons::DESTROY_SUCCEEDED,
                    reasons::DESTROY_FAILED,
                )
            } else {
                ("Apply", reasons::APPLY_SUCCEEDED, reasons::APPLY_FAILED)
            };
            match outcome {
                JobOutcome::Succeeded => {
                    if op != Operation::Plan {
                        conds.set(
                            ctype::APPLY_JOB_SUCCEEDED,
                            ConditionStatus::True,
                            ok_reason,
                            &format!("{what} Job {job} succeeded"),
                        );
                    }
                    outbox.normal(events::JOB_SUCCEEDED, format!("{what} Job {job} succeeded"));
                }
                JobOutcome::Failed => {
                    let reason = if image_layout {
                        reasons::IMAGE_INVALID
                    } else {
                        failed_reason
                    };
                    conds.set(
                        ctype::APPLY_JOB_SUCCEEDED,
                        ConditionStatus::False,
                        reason,
                        &failed_msg(what),
                    );
                    outbox.warning(events::JOB_FAILED, failed_msg(what));
                }
                JobOutcome::DeadlineExceeded => {
                    let msg = format!("{what} Job {job} reached its activeDeadlineSeconds");
                    conds.set(
                        ctype::APPLY_JOB_SUCCEEDED,
                        ConditionStatus::False,
                        reasons::JOB_DEADLINE_EXCEEDED,
                        &msg,
                    );
                    outbox.warning(events::JOB_DEADLINE_EXCEEDED, msg);
                }
                JobOutcome::Interrupted => {
                    outbox.warning(
                        events::JOB_INTERRUPTED,
                        format!("{what} Job {job} was interrupted from outside; it is retried without backoff"),
                    );
                }
                JobOutcome::Blocked => {
                    let resources = result
                        .and_then(|r| r.plan.as_ref())
                        .map(|p| p.resources.join(", "))
                        .unwrap_or_default();
                    let msg = format!(
                        "Apply Job {job} stopped before a plan that deletes or replaces resources ({resources}); approve it with the {} annotation naming inputs hash {}",
                        annotations::APPROVE_DESTRUCTIVE_PLAN,
                        record.inputs_hash
                    );
                    conds.set(
                        ctype::APPLY_JOB_SUCCEEDED,
                        ConditionStatus::False,
                        reasons::DESTRUCTIVE_PLAN_BLOCKED,
                        &msg,
                    );
                    outbox.warning(events::DESTRUCTIVE_PLAN_BLOCKED, msg);
                }
                JobOutcome::PlanChanged => {
                    let msg = format!(
                        "Apply Job {job} planned differently from the approved plan and stopped"
                    );
                    conds.set(
                        ctype::APPLY_JOB_SUCCEEDED,
                        ConditionStatus::Unknown,
                        reasons::PLAN_CHANGED,
                        &msg,
                    );
                    outbox.warning(events::PLAN_CHANGED, msg);
                }
            }
        }
        Operation::Drift | Operation::Refresh => {
            let what = if op == Operation::Drift {
                "Drift"
            } else {
                "Refresh"
            };
            match outcome {
                JobOutcome::Succeeded => {
                    conds.set(
                        ctype::DRIFT_JOB_SUCCEEDED,
                        ConditionStatus::True,
                        reasons::DRIFT_CHECKED,
                        &format!("{what} Job {job} succeeded"),
                    );
                    outbox.normal(events::JOB_SUCCEEDED, format!("{what} Job {job} succeeded"));
                    if op == Operation::Drift
                        && let Some(d) = result.and_then(|r| r.drift.as_ref())
                    {
                        if d.detected {
                            let reason = if drift_remediate {
                                reasons::DRIFT_PENDING
                            } else {
                                reasons::DRIFT_REPORTED
                            };
                            conds.set(
                                ctype::DRIFT_DETECTED,
                                ConditionStatus::True,
                                reason,
                                &format!(
                                    "Drift found: {} to add, {} to change, {} to destroy",
                                    d.add, d.change, d.destroy
                                ),
                            );
                        } else {
                            conds.set(
                                ctype::DRIFT_DETECTED,
                                ConditionStatus::False,
                                reasons::NO_DRIFT,
                                "The last drift check found no drift",
                            );
                        }
                    }
                }
                JobOutcome::DeadlineExceeded => {
                    let msg = format!("{what} Job {job} reached its activeDeadlineSeconds");
                    conds.set(
                        ctype::DRIFT_JOB_SUCCEEDED,
                        ConditionStatus::False,
                        reasons::DRIFT_JOB_DEADLINE_EXCEEDED,
                        &msg,
                    );
                    outbox.warning(events::JOB_DEADLINE_EXCEEDED, msg);
                }
                JobOutcome::Interrupted => outbox.warning(
                    events::JOB_INTERRUPTED,
                    format!("{what} Job {job} was interrupted from outside"),
                ),
                _ => {
                    conds.set(
                        ctype::DRIFT_JOB_SUCCEEDED,
                        ConditionStatus::False,
                        reasons::DRIFT_JOB_FAILED,
                        &failed_msg(what),
                    );
                    outbox.warning(events::JOB_FAILED, failed_msg(what));
                }
            }
        }
        Operation::Restore => {
            if outcome == JobOutcome::Succeeded {
                conds.set(
                    ctype::RESTORE_JOB_SUCCEEDED,
                    ConditionStatus::True,
                    reasons::STATE_RESTORED,
                    &format!("Restore Job {job} pushed the backup"),
                );
                outbox.normal(
                    events::STATE_RESTORED,
                    format!("Restore Job {job} pushed the backup"),
                );
            } else {
                conds.set(
                    ctype::RESTORE_JOB_SUCCEEDED,
                    ConditionStatus::False,
                    reasons::RESTORE_FAILED,
                    &failed_msg("Restore"),
                );
                outbox.warning(events::STATE_RESTORE_FAILED, failed_msg("Restore"));
            }
        }
    }
}

/// The annotations a bookkept Job gets once the status patch landed.
pub fn bookkept_annotations(outcome: JobOutcome) -> Vec<&'static str> {
    let mut out = vec![annotations::BOOKKEPT];
    match outcome {
        JobOutcome::Interrupted => out.push(annotations::INTERRUPTED),
        JobOutcome::Blocked => out.push(annotations::DESTRUCTIVE_PLAN_BLOCKED),
        JobOutcome::PlanChanged => out.push(annotations::PLAN_CHANGED),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_from_image_ids() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            digest_of(&format!("docker-pullable://r/x@{d}")),
            Some(d.clone())
        );
        assert_eq!(digest_of(&format!("127.0.0.1:5000/x@{d}")), Some(d));
        assert_eq!(digest_of("r/x:tag"), None);
        assert_eq!(digest_of("r/x@sha256:short"), None);
    }

    #[test]
    fn bookkept_annotations_carry_the_outcome() {
        assert_eq!(
            bookkept_annotations(JobOutcome::Interrupted),
            vec![annotations::BOOKKEPT, annotations::INTERRUPTED]
        );
        assert_eq!(
            bookkept_annotations(JobOutcome::Succeeded),
            vec![annotations::BOOKKEPT]
        );
    }
}
