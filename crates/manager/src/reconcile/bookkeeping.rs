//! Bookkeeping of finished Jobs (spec: The Reconcile Lifecycle "Bookkeeping"; Security Model
//! "Image pinning by digest"; INTERFACE-FACTS §5 "Result document", §6 Job annotations): reading
//! how each finished Job ended from its pod's termination message, recording it (with its result
//! document, as a [`crate::pass::status::Fact`] Report turns into `status.lastRun` and `status.plan`)
//! and the findings for the Job conditions, pinning the image digest of a succeeded apply,
//! adopting its state, deleting the per-run Secret and giving the leases back. The Job itself is
//! annotated `captf.io/bookkept` only after the pass's status patch has landed.

use std::time::SystemTime;

use api::constants::{annotations, conditions as ctype, events, labels, reasons};
use contract::health::ConditionStatus;
use contract::names::Operation;
use contract::result::{ErrorKind, ResultDocument};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::ListParams;

use api::shared::DriftAction;
use contract::names::{ObjectKind, cluster_lease_name, run_secret_name};
use kube::api::{Patch, PatchParams};

use crate::pass::conditions::Findings;
use crate::pass::observed::{Books, JobOutcome, JobRecord, Kept, PodReport, PullFailure};
use crate::pass::status::{Fact, FinishedRun, plan_preview};
use crate::pass::{Error, Pass};
use crate::reconcile::observe::Observation;
use crate::reconcile::plan::Consumed;
use crate::runtime::caches::{Caches, is_bookkept};
use crate::runtime::events::Outbox;
use crate::runtime::metrics::Metrics;
use crate::state::durable::Durable;

/// The container that runs the runner.
pub const SOURCE_CONTAINER: &str = "source";

/// Reads the newest pod of a Job: from the cache when it already shows the `source` container
/// terminated, else from the API server (the pod's last update may not have reached the cache
/// when the Job's did).
pub async fn pod_report(
    client: &kube::Client,
    caches: &Caches,
    ns: &str,
    job: &str,
) -> kube::Result<PodReport> {
    let newest = |pods: Vec<Pod>| {
        pods.into_iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("batch.kubernetes.io/job-name"))
                    .is_some_and(|n| n == job)
            })
            .max_by_key(|p| p.metadata.creation_timestamp.clone())
    };
    let cached = newest(
        caches
            .pods
            .state_filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .into_iter()
            .map(|p| p.as_ref().clone())
            .collect(),
    );
    if let Some(report) = cached.as_ref().and_then(|p| report_of(p, true)) {
        return Ok(report);
    }
    Ok(newest(list_job_pods(client, ns, job).await?)
        .and_then(|p| report_of(&p, false))
        .unwrap_or_default())
}

/// The pods of `job`, listed from the API server.
async fn list_job_pods(client: &kube::Client, ns: &str, job: &str) -> kube::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    Ok(pods.list(&lp).await?.items)
}

/// Whether the module's container of a pod of `job` ever started, read from the API server: a
/// deletion deletes an active Job whose module never started only once the API server agrees
/// (the pod cache may lag the kubelet, and a module that runs may be writing state).
pub async fn module_ever_started(client: &kube::Client, ns: &str, job: &str) -> kube::Result<bool> {
    let pods = list_job_pods(client, ns, job).await?;
    Ok(pods.iter().any(|p| !pod_progress(p).0))
}

/// What one pod reports; `None` when `terminated_only` and its `source` container has not
/// terminated.
fn report_of(pod: &Pod, terminated_only: bool) -> Option<PodReport> {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == SOURCE_CONTAINER));
    let Some(status) = status else {
        return (!terminated_only).then(|| PodReport {
            disrupted: disrupted(pod),
            found: true,
            ..PodReport::default()
        });
    };
    let terminated = status.state.as_ref().and_then(|s| s.terminated.as_ref());
    if terminated.is_none() && terminated_only {
        return None;
    }
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
    Some(PodReport {
        result,
        image_id: Some(status.image_id.clone()).filter(|i| !i.is_empty()),
        started,
        disrupted: disrupted(pod),
        found: true,
    })
}

/// The Job a pod belongs to (its `batch.kubernetes.io/job-name` label).
fn job_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get("batch.kubernetes.io/job-name")
        .map(String::as_str)
}

/// How far a running Job's pod got: whether the module's container (the pod's containers, not
/// the runner's copy step, its init container) never started, so that nothing of the module ran
/// and no state was touched; and the image pull failure the kubelet reports for any container.
pub fn pod_progress(pod: &Pod) -> (bool, Option<PullFailure>) {
    let Some(status) = pod.status.as_ref() else {
        return (false, None);
    };
    let all: Vec<&k8s_openapi::api::core::v1::ContainerStatus> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect();
    let main: Vec<&k8s_openapi::api::core::v1::ContainerStatus> =
        status.container_statuses.iter().flatten().collect();
    let started = |c: &&k8s_openapi::api::core::v1::ContainerStatus| {
        let state = c.state.as_ref();
        state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || c.last_state
                .as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || c.started == Some(true)
    };
    let never_started = !main.iter().any(started);
    let failure = all.iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        crate::runtime::kubeutil::IMAGE_PULL_FAILURES
            .contains(&reason)
            .then(|| PullFailure {
                container: c.name.clone(),
                image: c.image.clone(),
                reason: reason.to_owned(),
                message: waiting
                    .message
                    .as_deref()
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            })
    });
    (never_started, failure)
}

/// Whether the pod carries evidence that it was stopped from outside: a `DisruptionTarget`
/// condition (eviction, preemption, node shutdown, deletion by the garbage collector), a
/// deletion, or an `Evicted` status.
fn disrupted(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    pod.metadata.deletion_timestamp.is_some()
        || status.and_then(|s| s.reason.as_deref()) == Some("Evicted")
        || status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        })
}

/// The digest (`sha256:…`) in a container `imageID`.
pub fn digest_of(image_id: &str) -> Option<String> {
    let (_, digest) = image_id.rsplit_once('@')?;
    (digest.starts_with("sha256:") && digest.len() == 71).then(|| digest.to_owned())
}

pub use crate::runtime::kubeutil::finished_condition;

/// How a finished Job ended: from its Job condition and, for a failure, the result document and
/// its pod. A failure is an interruption only with evidence: the runner's own `interrupted`
/// result, or no result from a pod that is gone or shows a disruption (see [`PodReport`]). A
/// failure without a result and without such evidence (an init container that failed, an exec
/// format error, a runner killed before it wrote its result) is a failure like any other, under
/// the retry backoff.
pub fn outcome_of(job: &Job, report: &PodReport) -> Option<JobOutcome> {
    let (complete, reason, _) = finished_condition(job)?;
    if complete {
        return Some(JobOutcome::Succeeded);
    }
    if reason.as_deref() == Some("DeadlineExceeded") {
        return Some(JobOutcome::DeadlineExceeded);
    }
    Some(
        match report
            .result
            .as_ref()
            .and_then(|r| r.error.as_ref())
            .map(|e| e.kind)
        {
            Some(ErrorKind::Interrupted) => JobOutcome::Interrupted,
            None if report.disrupted || !report.found => JobOutcome::Interrupted,
            Some(ErrorKind::Blocked) => JobOutcome::Blocked,
            Some(ErrorKind::PlanChanged) => JobOutcome::PlanChanged,
            None | Some(ErrorKind::Step | ErrorKind::ImageLayout) => JobOutcome::Failed,
        },
    )
}

/// The `error_kind` metrics label of a finished Job that did not succeed.
pub fn error_kind_label(outcome: JobOutcome, result: Option<&ResultDocument>) -> &'static str {
    match (outcome, result.and_then(|r| r.error.as_ref())) {
        (JobOutcome::DeadlineExceeded, _) => "deadline",
        (_, Some(e)) => e.kind.as_str(),
        (JobOutcome::Interrupted, None) => "interrupted",
        (_, None) => "unknown",
    }
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
        // A restore's tick is the serial it restores.
        tick: a.get(annotations::RESTORE_SERIAL).cloned(),
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
        requested: a.get(annotations::REQUESTED_AT).cloned(),
        run_secret_exists,
        pod_ever_started: status.ready.unwrap_or(0) > 0
            || status.succeeded.unwrap_or(0) > 0
            || status.failed.unwrap_or(0) > 0,
        module_never_started: false,
        pull_failure: None,
    })
}

/// A drift-remediation apply that did not succeed leaves the drift found and pending, with a note
/// of what happened (Drift and Health "Report or remediate"); a succeeded one is cleared after
/// bookkeeping, with the state adopted.
fn remediation_ended(job: &str, outcome: JobOutcome, conds: &mut Findings) {
    let what = match outcome {
        JobOutcome::Succeeded => return,
        JobOutcome::Failed | JobOutcome::DeadlineExceeded => "failed",
        JobOutcome::Interrupted => "was interrupted",
        JobOutcome::Blocked => "stopped before a destructive plan that needs approval",
        JobOutcome::PlanChanged => "planned differently from the approved plan",
    };
    conds.set(
        ctype::DRIFT_DETECTED,
        ConditionStatus::True,
        reasons::DRIFT_PENDING,
        &format!("Drift remains: remediation apply {job} {what}"),
    );
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
    conds: &mut Findings,
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
        Operation::Apply | Operation::Destroy | Operation::Plan => apply_job_conditions(
            record,
            result,
            outcome,
            image_layout,
            &failed_msg,
            conds,
            outbox,
        ),
        Operation::Drift | Operation::Refresh => drift_job_conditions(
            record,
            result,
            outcome,
            drift_remediate,
            &failed_msg,
            conds,
            outbox,
        ),
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

/// The Job conditions and events of a finished apply, destroy or plan.
#[allow(clippy::too_many_arguments)]
fn apply_job_conditions(
    record: &JobRecord,
    result: Option<&ResultDocument>,
    outcome: JobOutcome,
    image_layout: bool,
    failed_msg: &dyn Fn(&str) -> String,
    conds: &mut Findings,
    outbox: &mut Outbox,
) {
    let op = record.operation;
    let job = &record.name;
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
            let reason = if pulls_failed(conds, ctype::APPLY_JOB_SUCCEEDED, job) {
                reasons::IMAGE_PULL_FAILED
            } else {
                reasons::JOB_DEADLINE_EXCEEDED
            };
            let msg = if reason == reasons::IMAGE_PULL_FAILED {
                format!("{msg}: its pod never pulled its image; see the Job's pod events")
            } else {
                msg
            };
            conds.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::False,
                reason,
                &msg,
            );
            outbox.warning(events::JOB_DEADLINE_EXCEEDED, msg);
        }
        JobOutcome::Interrupted => {
            outbox.warning(
                events::JOB_INTERRUPTED,
                format!(
                    "{what} Job {job} was interrupted from outside; it is retried without backoff"
                ),
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
            let msg =
                format!("Apply Job {job} planned differently from the approved plan and stopped");
            conds.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::Unknown,
                reasons::PLAN_CHANGED,
                &msg,
            );
            outbox.warning(events::PLAN_CHANGED, msg);
        }
    }
    if record.drift_remediation && op == Operation::Apply {
        remediation_ended(job, outcome, conds);
    }
}

/// The Job conditions and events of a finished drift check or refresh.
#[allow(clippy::too_many_arguments)]
fn drift_job_conditions(
    record: &JobRecord,
    result: Option<&ResultDocument>,
    outcome: JobOutcome,
    drift_remediate: bool,
    failed_msg: &dyn Fn(&str) -> String,
    conds: &mut Findings,
    outbox: &mut Outbox,
) {
    let op = record.operation;
    let job = &record.name;
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
                            "Drift Job {job} found drift: {}",
                            contract::plan::counts_phrase(d.add, d.change, d.destroy, d.forget)
                        ),
                    );
                } else {
                    conds.set(
                        ctype::DRIFT_DETECTED,
                        ConditionStatus::False,
                        reasons::NO_DRIFT,
                        &format!("Drift Job {job} found no drift"),
                    );
                }
            }
        }
        JobOutcome::DeadlineExceeded => {
            let msg = format!("{what} Job {job} reached its activeDeadlineSeconds");
            let reason = if pulls_failed(conds, ctype::DRIFT_JOB_SUCCEEDED, job) {
                reasons::IMAGE_PULL_FAILED
            } else {
                reasons::DRIFT_JOB_DEADLINE_EXCEEDED
            };
            conds.set(
                ctype::DRIFT_JOB_SUCCEEDED,
                ConditionStatus::False,
                reason,
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

/// Whether the Job `job` was reported unable to pull its image (`condition` read
/// `ImagePullFailed` naming it) before it ended: its pod, deleted at the deadline, no longer
/// tells.
fn pulls_failed(conds: &Findings, condition: &str, job: &str) -> bool {
    conds.before().iter().any(|c| {
        c.type_ == condition && c.reason == reasons::IMAGE_PULL_FAILED && c.message.contains(job)
    })
}

/// The condition an operation's Job reports on.
pub fn condition_of(op: Operation) -> &'static str {
    match op {
        Operation::Apply | Operation::Destroy | Operation::Plan => ctype::APPLY_JOB_SUCCEEDED,
        Operation::Drift | Operation::Refresh => ctype::DRIFT_JOB_SUCCEEDED,
        Operation::Restore => ctype::RESTORE_JOB_SUCCEEDED,
    }
}

/// `ImagePullFailed` on the condition of a running Job whose pod cannot pull an image, as soon
/// as the kubelet says so: which image, which container, the kubelet's reason and message, and
/// what to check. The Job keeps trying until its deadline, which ends it with the same reason.
pub fn pull_failure_condition(record: &JobRecord, failure: &PullFailure, conds: &mut Findings) {
    let what = if failure.container == crate::job::RUNNER_CONTAINER {
        "the runner image (the manager's --runner-image) and spec.jobs.imagePullSecrets"
    } else {
        "spec.source.image and spec.jobs.imagePullSecrets"
    };
    let detail = if failure.message.is_empty() {
        String::new()
    } else {
        format!(": {}", failure.message)
    };
    let message = format!(
        "Job {}'s pod cannot pull image {} for its {} container ({}{detail}); it keeps trying \
         until its activeDeadlineSeconds. Check {what}",
        record.name, failure.image, failure.container, failure.reason
    );
    conds.set(
        condition_of(record.operation),
        ConditionStatus::False,
        reasons::IMAGE_PULL_FAILED,
        &contract::result::cap(&message, 1024),
    );
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

/// Bookkeeping (The Reconcile Lifecycle "Bookkeeping"): every Job of the object from the cache;
/// each one finished since the last pass gets its `lastRun`, Job conditions and events (its
/// per-run Secret and leases are released by Act: [`releases`]). Reads only.
pub async fn keep_books(p: &mut Pass<'_>) -> Result<Books, Error> {
    let jobs = p.ctx.caches.jobs_of(&p.ns, &p.uid);
    let mut books = Books::default();
    for j in &jobs {
        let finished = finished_condition(j).is_some();
        if finished && !is_bookkept(j) {
            if let Some(kept) = keep_one(p, j).await? {
                books.records.push(kept.record.clone());
                books.kept.push(kept);
            }
        } else {
            let name = j.metadata.name.clone().unwrap_or_default();
            let run_secret_exists = !finished
                && p.ctx
                    .caches
                    .secret(&p.ns, &run_secret_name(&name))
                    .is_some();
            if let Some(mut r) = job_record(j, None, run_secret_exists) {
                if !finished {
                    let name = r.name.clone();
                    let pods = p.ctx.caches.pods.state_filter(|pod| {
                        pod.metadata.namespace.as_deref() == Some(p.ns.as_str())
                    });
                    let newest = pods
                        .iter()
                        .filter(|pod| job_of(pod) == Some(name.as_str()))
                        .max_by_key(|pod| pod.metadata.creation_timestamp.clone());
                    if let Some(pod) = newest {
                        (r.module_never_started, r.pull_failure) = pod_progress(pod);
                    }
                }
                books.records.push(r);
            }
        }
    }
    Ok(books)
}

/// The per-run Secrets and leases the Jobs bookkept this pass release: each Job's run lease, and
/// a TerraformCluster's cluster write lease too.
pub fn releases(p: &Pass<'_>, books: &Books, cluster_name: &str) -> Vec<(String, Option<String>)> {
    let cluster_lease = (p.kind == ObjectKind::Cluster && !cluster_name.is_empty())
        .then(|| cluster_lease_name(&p.ns, cluster_name));
    books
        .kept
        .iter()
        .map(|k| {
            // Only an apply, destroy or restore takes the cluster's write lease (the cluster
            // operation gate): a drift check, refresh or plan has none to give back.
            let gated = matches!(
                k.record.operation,
                Operation::Apply | Operation::Destroy | Operation::Restore
            );
            (
                k.record.name.clone(),
                cluster_lease.clone().filter(|_| gated),
            )
        })
        .collect()
}

async fn keep_one(p: &mut Pass<'_>, job: &Job) -> Result<Option<Kept>, Error> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let report = pod_report(&p.ctx.client, &p.ctx.caches, &p.ns, &name).await?;
    let Some(outcome) = outcome_of(job, &report) else {
        return Ok(None);
    };
    let Some(record) = job_record(job, Some(outcome), false) else {
        return Ok(None);
    };
    let result = report.result.as_ref();
    let remediate = crate::kinds::workload::drift_action(p.target) == DriftAction::Remediate;
    record_conditions(
        &record,
        result,
        outcome,
        remediate,
        &mut p.findings,
        &mut p.outbox,
    );
    p.facts.record(Fact::Finished(Box::new(FinishedRun {
        record: record.clone(),
        outcome,
        result: result.cloned(),
        start_time: job.status.as_ref().and_then(|s| s.start_time.clone()),
        completion_time: finished_condition(job).and_then(|(_, _, t)| t),
    })));
    if let Some(plan) = result.and_then(|r| r.plan.as_ref()) {
        plan_to_status(p, &record, outcome, plan);
    }
    let plan_unreadable = plan_unreadable(&record, outcome, result);
    if plan_unreadable && result.and_then(|r| r.plan.as_ref()).is_none() {
        p.findings.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::Unknown,
            reasons::PLAN_AWAITING_APPROVAL,
            &format!(
                "Job {} reported no plan that could be read; the plan cannot be approved. \
                 Its log has the plan; it is planned again once the inputs change",
                record.name
            ),
        );
    }
    Ok(Some(Kept {
        record,
        outcome,
        report,
        created: job.metadata.creation_timestamp.clone(),
        plan_unreadable,
    }))
}

/// A drift check's finding, once per Job: `captf_drift_resources_total` by plan action.
fn count_drift(metrics: &Metrics, kind: &str, result: Option<&ResultDocument>) {
    let Some(d) = result.and_then(|r| r.drift.as_ref()).filter(|d| d.detected) else {
        return;
    };
    for (action, n) in [
        ("add", d.add),
        ("change", d.change),
        ("destroy", d.destroy),
        ("forget", d.forget),
    ] {
        if n > 0 {
            metrics.drift_resources(kind, action, n);
        }
    }
}

/// Whether a Job that should have reported a plan (a plan Job that succeeded, an approved apply
/// whose plan changed) reported none that can be read: none at all, or one no approval could
/// name (its plan hash empty or too long). Its Job is annotated `captf.io/plan-unreadable`.
pub fn plan_unreadable(
    record: &JobRecord,
    outcome: JobOutcome,
    result: Option<&ResultDocument>,
) -> bool {
    let planned = (record.operation == Operation::Plan && outcome == JobOutcome::Succeeded)
        || outcome == JobOutcome::PlanChanged;
    planned
        && result
            .and_then(|r| r.plan.as_ref())
            .is_none_or(|plan| plan_preview(record, plan).is_none())
}

/// Plan Approval: a plan (or a changed plan) becomes `status.plan`.
fn plan_to_status(
    p: &mut Pass<'_>,
    record: &JobRecord,
    outcome: JobOutcome,
    plan: &contract::result::PlanDoc,
) {
    let planned = record.operation == Operation::Plan && outcome == JobOutcome::Succeeded;
    if !(planned || outcome == JobOutcome::PlanChanged) {
        return;
    }
    let (ns, name) = (p.ns.clone(), p.name.clone());
    if p.kind != ObjectKind::Cluster {
        return;
    }
    let changes = plan
        .add
        .saturating_add(plan.change)
        .saturating_add(plan.destroy)
        .saturating_add(plan.forget);
    if plan_preview(record, plan).is_none() {
        // No approval could name it (the annotation carries the hash): nothing to show.
        p.findings.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::Unknown,
            reasons::PLAN_AWAITING_APPROVAL,
            &format!(
                "The result of Job {} carries no usable plan hash (empty or over {} characters); \
                 the plan cannot be approved",
                record.name,
                crate::pass::status::bounds::PLAN_HASH
            ),
        );
        return;
    }
    let command = format!(
        "kubectl annotate terraformcluster {name} -n {ns} {}={} --overwrite",
        annotations::APPROVE_PLAN,
        plan.hash
    );
    if outcome == JobOutcome::PlanChanged {
        p.findings.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::Unknown,
            reasons::PLAN_CHANGED,
            &format!("The plan changed since it was approved; review status.plan and approve it: {command}"),
        );
    } else if changes > 0 {
        p.findings.set(
            ctype::APPLY_JOB_SUCCEEDED,
            ConditionStatus::Unknown,
            reasons::PLAN_AWAITING_APPROVAL,
            &format!("Plan {} waits for approval: {command}", plan.hash),
        );
        p.outbox.normal(
            events::PLAN_READY,
            format!(
                "Plan of Job {}: {}; approve with: {command}",
                record.name,
                contract::plan::counts_phrase(plan.add, plan.change, plan.destroy, plan.forget)
            ),
        );
    }
    p.facts.record(Fact::Plan {
        record: Box::new(record.clone()),
        plan: plan.clone(),
    });
}

/// After an apply or restore that succeeded this pass (planned for Act): its state adopted, the
/// digest pinned, the approvals that covered it consumed, a succeeded restore's annotation
/// removed; a drift the apply remediated, or that any succeeded apply of the current inputs
/// reconciled, cleared.
pub fn after_apply(p: &mut Pass<'_>, o: &mut Observation) {
    let restored = o
        .books
        .kept
        .iter()
        .filter(|k| k.record.operation == Operation::Restore && k.outcome == JobOutcome::Succeeded)
        .max_by_key(|k| k.record.finished);
    if let Some(r) = restored
        && crate::state::restore::annotation_to_remove(p, true)
    {
        o.writes.restore_done = Some(r.record.name.clone());
    }
    let Some(kept) = o.books.applied().cloned() else {
        return;
    };
    let record = &kept.record;
    o.writes.adopt = Some((record.name.clone(), record.inputs_hash.clone()));
    if record.operation != Operation::Apply {
        return;
    }
    match digest_to_pin(&o.durable, &kept.report) {
        DigestPin::Pinned => {}
        DigestPin::Pin(digest) => o.writes.pin_digest = Some(digest),
        DigestPin::Unknown => p.outbox.warning(
            events::DIGEST_UNKNOWN,
            "The apply's pod reported no image digest; later Jobs run the spec's image reference",
        ),
    }
    o.writes.approvals = consumed(p, record);
    if p.findings.status(ctype::DRIFT_DETECTED) == Some("True") {
        let message = if record.drift_remediation {
            "The remediation apply succeeded".to_owned()
        } else {
            format!(
                "Apply Job {} succeeded: the infrastructure matches the applied inputs",
                record.name
            )
        };
        p.findings.set(
            ctype::DRIFT_DETECTED,
            ConditionStatus::False,
            reasons::NO_DRIFT,
            &message,
        );
    }
}

/// What the digest pin of a succeeded apply needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestPin {
    /// Nothing: no durable inputs, or this digest is pinned already.
    Pinned,
    /// This digest (`sha256:…`) pinned on the durable inputs.
    Pin(String),
    /// The pod reported no digest: later Jobs run the spec's image reference.
    Unknown,
}

/// The digest to pin on the durable inputs after a succeeded apply: the `imageID` digest its pod
/// ran, when it differs from the pinned one.
pub fn digest_to_pin(durable: &Durable, report: &PodReport) -> DigestPin {
    if !durable.exists() {
        return DigestPin::Pinned;
    }
    let Some(digest) = report.image_id.as_deref().and_then(digest_of) else {
        return DigestPin::Unknown;
    };
    if durable.annotation(annotations::IMAGE_DIGEST) == Some(digest.as_str()) {
        DigestPin::Pinned
    } else {
        DigestPin::Pin(digest)
    }
}

/// The approvals a succeeded cluster apply consumed (Plan Approval "Done", "Approving a
/// destructive plan"): `status.plan` of its inputs is cleared, and the annotations that
/// approved it are planned for removal.
fn consumed(p: &mut Pass<'_>, record: &JobRecord) -> Option<Consumed> {
    if p.kind != ObjectKind::Cluster {
        return None;
    }
    let planned = p
        .facts
        .plan()
        .is_some_and(|pl| pl.inputs_hash == record.inputs_hash);
    if planned {
        p.facts.record(Fact::PlanCleared);
    }
    let c = Consumed {
        job: record.name.clone(),
        inputs_hash: record.inputs_hash.clone(),
        plan: planned && p.target.annotation(annotations::APPROVE_PLAN).is_some(),
        destructive: p.target.annotation(annotations::APPROVE_DESTRUCTIVE_PLAN)
            == Some(record.inputs_hash.as_str()),
    };
    (c.plan || c.destructive).then_some(c)
}

/// Counts a Job bookkept this pass in the Job metrics (once: after it was marked bookkept).
pub fn count(metrics: &Metrics, p: &Pass<'_>, kept: &Kept, records: &[JobRecord]) {
    let kind = p.kind_name();
    let record = &kept.record;
    let op = record.operation.as_str();
    let result = kept.report.result.as_ref();
    let duration = match (record.started, record.finished) {
        (Some(s), Some(f)) => f.duration_since(s).unwrap_or_default().as_secs_f64(),
        _ => 0.0,
    };
    metrics.job_finished(kind, op, result_label(kept.outcome), duration);
    if record.operation == Operation::Restore {
        let result = if kept.outcome == JobOutcome::Succeeded {
            "succeeded"
        } else {
            "failed"
        };
        metrics.state_restore(kind, result);
    }
    if record.operation == Operation::Drift && kept.outcome == JobOutcome::Succeeded {
        count_drift(metrics, kind, kept.report.result.as_ref());
    }
    if kept.outcome != JobOutcome::Succeeded {
        let step = result
            .and_then(|r| r.error.as_ref())
            .and_then(|e| e.step.clone())
            .unwrap_or_else(|| "none".to_owned());
        metrics.job_error(kind, op, error_kind_label(kept.outcome, result), &step);
    }
    if kept.outcome == JobOutcome::PlanChanged && p.kind == ObjectKind::Cluster {
        metrics.plan_approval(kind, "changed");
    }
    if let Some(r) = result {
        for s in &r.steps {
            metrics.job_step_duration(kind, op, &s.name, s.seconds);
        }
        if let Some(c) = &r.changes {
            metrics.resources_changed(kind, op, "add", c.add);
            metrics.resources_changed(kind, op, "change", c.change);
            metrics.resources_changed(kind, op, "destroy", c.destroy);
            if c.forget > 0 {
                metrics.resources_changed(kind, op, "forget", c.forget);
            }
        }
    }
    if let (Some(s), Some(created)) = (&kept.report.started, &kept.created) {
        let q = SystemTime::from(s.0)
            .duration_since(SystemTime::from(created.0))
            .unwrap_or_default();
        metrics.job_queue(kind, op, q.as_secs_f64());
    }
    if kept.outcome == JobOutcome::Succeeded {
        if let Some(f) = record.finished
            && let Ok(d) = f.duration_since(SystemTime::UNIX_EPOCH)
        {
            metrics.set_last_success(kind, &p.ns, &p.name, op, d.as_secs() as i64);
        }
        // captf_job_attempts: 1 + the failed Jobs of the operation since its previous success.
        let earlier = || {
            records
                .iter()
                .filter(|r| r.operation == record.operation && r.finished < record.finished)
        };
        let previous_success = earlier()
            .filter(|r| r.outcome == Some(JobOutcome::Succeeded))
            .filter_map(|r| r.finished)
            .max();
        let failures = earlier()
            .filter(|r| {
                r.outcome.is_some_and(JobOutcome::counts_as_failure)
                    && previous_success.is_none_or(|ps| r.finished.is_some_and(|f| f > ps))
            })
            .count();
        metrics.job_attempts(kind, op, 1 + failures as u64);
    }
}

/// Marks a Job bookkept, with the annotations of its outcome (after the status patch landed): a
/// write the pass accounted for, which wakes no one.
pub async fn mark_bookkept(jobs: &Api<Job>, kept: &Kept, caches: &Caches) -> Result<(), Error> {
    let name = kept.record.name.as_str();
    let mut marks = bookkept_annotations(kept.outcome);
    if kept.plan_unreadable {
        marks.push(annotations::PLAN_UNREADABLE);
    }
    let annotations: serde_json::Map<String, serde_json::Value> = marks
        .into_iter()
        .map(|a| (a.to_owned(), serde_json::Value::String("true".to_owned())))
        .collect();
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    let ns = jobs.namespace().unwrap_or_default().to_owned();
    let (pp, merge) = (PatchParams::default(), Patch::Merge(&patch));
    let write = jobs.patch(name, &pp, &merge);
    match caches.own_writes.write("Job", &ns, name, write).await {
        Ok(marked) => {
            caches.written_jobs.add(marked);
            Ok(())
        }
        Err(e) if crate::runtime::kubeutil::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module never started while its container waits (on a failed pull, say), even once
    /// the runner's copy step ran; a module container that ran, or runs, started. The failed
    /// pull names the container and the image, with the kubelet's message trimmed.
    #[test]
    fn the_module_never_started_while_its_container_waits() {
        let pod = |init: serde_json::Value, main: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "status": {"initContainerStatuses": [init], "containerStatuses": [main]}
            }))
            .unwrap_or_default()
        };
        let status = |name: &str, state: serde_json::Value| {
            serde_json::json!({"name": name, "image": format!("r/{name}:v1"), "imageID": "",
                "ready": false, "restartCount": 0, "state": state})
        };
        let copied = status("runner", serde_json::json!({"terminated": {"exitCode": 0}}));
        let pulling = status(
            "source",
            serde_json::json!({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off\n"}}),
        );
        let (never, failure) = pod_progress(&pod(copied.clone(), pulling));
        assert!(never);
        let failure = failure.unwrap_or_else(|| panic!("a failed pull"));
        assert_eq!(
            (failure.container.as_str(), failure.image.as_str()),
            ("source", "r/source:v1")
        );
        assert_eq!(
            (failure.reason.as_str(), failure.message.as_str()),
            ("ImagePullBackOff", "Back-off")
        );
        let running = status("source", serde_json::json!({"running": {}}));
        assert_eq!(pod_progress(&pod(copied, running)), (false, None));
    }

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

    fn finished_job(failed: bool) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "captf-c-x-apply-a1-abcdef",
                         "labels": {"captf.infrastructure.cluster.x-k8s.io/op": "apply",
                                    "captf.infrastructure.cluster.x-k8s.io/attempt": "1"}},
            "status": {"conditions": [{"type": if failed { "Failed" } else { "Complete" },
                                       "status": "True", "reason": "BackoffLimitExceeded"}]}
        }))
        .unwrap()
    }

    /// A Failed Job without a result document is interrupted only with evidence (a pod that is
    /// gone, deleted, evicted or disrupted, or the runner's own `interrupted` result); otherwise
    /// it is failed, under the normal backoff, with the error kind `unknown`.
    #[test]
    fn a_failed_job_without_a_result_is_interrupted_only_with_evidence() {
        let job = finished_job(true);
        let found = PodReport {
            found: true,
            ..PodReport::default()
        };
        assert_eq!(outcome_of(&job, &found), Some(JobOutcome::Failed));
        assert_eq!(error_kind_label(JobOutcome::Failed, None), "unknown");
        let disrupted = PodReport {
            found: true,
            disrupted: true,
            ..PodReport::default()
        };
        assert_eq!(outcome_of(&job, &disrupted), Some(JobOutcome::Interrupted));
        assert_eq!(
            outcome_of(&job, &PodReport::default()),
            Some(JobOutcome::Interrupted),
            "a pod that is gone"
        );
        let interrupted = ResultDocument {
            version: contract::result::RESULT_VERSION,
            op: "apply".to_owned(),
            image: contract::result::ImageInfo::default(),
            runtime: contract::result::RuntimeInfo::default(),
            steps: Vec::new(),
            drift: None,
            error: Some(contract::result::ErrorDoc {
                kind: ErrorKind::Interrupted,
                step: None,
                summary: None,
                exit_code: None,
            }),
            changes: None,
            plan: None,
        };
        let own = PodReport {
            found: true,
            result: Some(interrupted),
            ..PodReport::default()
        };
        assert_eq!(outcome_of(&job, &own), Some(JobOutcome::Interrupted));
        assert_eq!(
            outcome_of(&finished_job(false), &found),
            Some(JobOutcome::Succeeded)
        );
    }

    /// A failed, blocked or plan-changed drift-remediation apply leaves `DriftDetected=True`
    /// with the reason `DriftPending` and a note of what happened.
    #[test]
    fn a_remediation_apply_that_did_not_succeed_leaves_the_drift_pending() {
        for outcome in [
            JobOutcome::Failed,
            JobOutcome::Blocked,
            JobOutcome::PlanChanged,
        ] {
            let mut record = job_record(&finished_job(true), Some(outcome), false).unwrap();
            record.drift_remediation = true;
            let mut conds = Findings::new(None);
            conds.set(
                ctype::DRIFT_DETECTED,
                ConditionStatus::True,
                reasons::DRIFT_REMEDIATING,
                "Remediation apply is running",
            );
            let mut outbox = Outbox::default();
            record_conditions(&record, None, outcome, true, &mut conds, &mut outbox);
            assert_eq!(
                conds.status(ctype::DRIFT_DETECTED),
                Some("True"),
                "{outcome:?}"
            );
            assert_eq!(
                conds.reason(ctype::DRIFT_DETECTED),
                Some(reasons::DRIFT_PENDING),
                "{outcome:?}"
            );
            assert!(
                conds
                    .found()
                    .iter()
                    .rev()
                    .find(|f| f.type_ == ctype::DRIFT_DETECTED)
                    .unwrap()
                    .message
                    .contains("remediation apply"),
                "{outcome:?}"
            );
        }
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

    /// A context whose client is never used (nothing here makes a request).
    fn offline_context() -> crate::runtime::context::Context {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        crate::runtime::context::Context::new(
            kube::Client::try_from(config).unwrap(),
            crate::runtime::context::Settings::default(),
            crate::runtime::metrics::Metrics::new(),
        )
    }

    fn kept_apply(drift_remediation: bool) -> Kept {
        let mut record =
            job_record(&finished_job(false), Some(JobOutcome::Succeeded), false).unwrap();
        record.drift_remediation = drift_remediation;
        record.inputs_hash = "h2:abc".into();
        Kept {
            record,
            outcome: JobOutcome::Succeeded,
            report: PodReport::default(),
            created: None,
            plan_unreadable: false,
        }
    }

    /// L4: any apply of the current inputs that succeeded clears a pending drift (it made the
    /// infrastructure match the inputs), not only a remediation apply: no redundant remediation
    /// apply follows. The state it wrote is planned for adoption.
    #[tokio::test]
    async fn a_succeeded_apply_clears_pending_drift_whatever_started_it() {
        let ctx = offline_context();
        let target = crate::runtime::context::Target::Cluster(Box::new(
            api::cluster::TerraformCluster::new("c", api::cluster::TerraformClusterSpec::default()),
        ));
        for remediation in [false, true] {
            let mut p = Pass::new(&ctx, &target);
            p.findings.set(
                ctype::DRIFT_DETECTED,
                ConditionStatus::True,
                reasons::DRIFT_PENDING,
                "Drift Job found drift",
            );
            let mut o = Observation::empty();
            o.books.kept.push(kept_apply(remediation));
            after_apply(&mut p, &mut o);
            assert_eq!(p.findings.status(ctype::DRIFT_DETECTED), Some("False"));
            assert_eq!(
                p.findings.reason(ctype::DRIFT_DETECTED),
                Some(reasons::NO_DRIFT)
            );
            assert_eq!(
                o.writes.adopt.as_ref().map(|(_, h)| h.as_str()),
                Some("h2:abc")
            );
        }
    }

    /// Plan Approval: a plan that only forgets resources has changes; it waits for approval and
    /// its PlanReady event carries the forget count (it showed 0/0/0 and no waiting before).
    #[tokio::test]
    async fn a_plan_that_only_forgets_waits_for_approval_with_its_forget_count() {
        let ctx = offline_context();
        let target = crate::runtime::context::Target::Cluster(Box::new(
            api::cluster::TerraformCluster::new("c", api::cluster::TerraformClusterSpec::default()),
        ));
        let mut p = Pass::new(&ctx, &target);
        let mut record =
            job_record(&finished_job(false), Some(JobOutcome::Succeeded), false).unwrap();
        record.operation = Operation::Plan;
        record.inputs_hash = "h2:abc".into();
        let plan = contract::result::PlanDoc {
            hash: format!("p1:{}", "b".repeat(64)),
            forget: 2,
            resources: vec!["module.role.terraform_data.a (forget)".into()],
            ..contract::result::PlanDoc::default()
        };
        plan_to_status(&mut p, &record, JobOutcome::Succeeded, &plan);
        assert_eq!(
            p.findings.reason(ctype::APPLY_JOB_SUCCEEDED),
            Some(reasons::PLAN_AWAITING_APPROVAL)
        );
        let ready = p
            .outbox
            .events()
            .iter()
            .find(|e| e.reason == events::PLAN_READY)
            .unwrap_or_else(|| panic!("no PlanReady: {:?}", p.outbox.events()));
        assert!(
            ready
                .note
                .contains(": 0 to add, 0 to change, 0 to destroy, 2 to forget;"),
            "{}",
            ready.note
        );
        let preview = plan_preview(&record, &plan).unwrap_or_else(|| panic!("a preview"));
        assert_eq!(preview.forget, Some(2));
    }

    /// A plan Job that succeeded without a plan an approval could name is marked
    /// `captf.io/plan-unreadable`; an apply that reported no plan is not.
    #[test]
    fn a_plan_nobody_can_read_is_marked_unreadable() {
        let mut plan_job =
            job_record(&finished_job(false), Some(JobOutcome::Succeeded), false).unwrap();
        plan_job.operation = Operation::Plan;
        assert!(plan_unreadable(&plan_job, JobOutcome::Succeeded, None));
        let apply = job_record(&finished_job(false), Some(JobOutcome::Succeeded), false).unwrap();
        assert!(!plan_unreadable(&apply, JobOutcome::Succeeded, None));
        assert!(plan_unreadable(&apply, JobOutcome::PlanChanged, None));
    }
}
