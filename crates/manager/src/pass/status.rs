//! Report's status fields (spec: The Reconcile Lifecycle "One pass, one status patch",
//! "Bookkeeping"; Plan Approval "status.plan"; Cluster Role and Machine Role "Outputs";
//! ENGINEERING.md §4 "Report"): Observe records what it found as plain [`Fact`]s — a finished
//! Job with its result document, the state read, the outputs decoded, the source the durable
//! inputs name — and [`fold`], a pure function, turns them, over the status the object had, into
//! every status field but the conditions, `activeJob` and `observedGeneration` (which
//! [`crate::reconcile::report`] adds). Every field copied from a result document is clamped here to the
//! CRD's bounds, so no runner (or module image that replaced it) can make the status write fail.

use std::time::SystemTime;

use api::status::{
    DriftSummary, FailureDomain, Initialization, LastRun, MachineAddress, PlanPreview, RunError,
    RunStep, SourceStatus,
};
use contract::names::Operation;
use contract::result::{ErrorKind, PlanDoc, ResultDocument};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::pass::observed::{JobOutcome, JobRecord};
use crate::runtime::context::StatusDraft;

/// A time as the API writes it.
pub fn to_time(t: SystemTime) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .ok()
        .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
}

/// A finished Job as bookkeeping found it: its record, outcome, result document and times.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRun {
    /// The Job as `decide` sees it.
    pub record: JobRecord,
    /// How it ended.
    pub outcome: JobOutcome,
    /// The runner's result document, when it wrote one.
    pub result: Option<ResultDocument>,
    /// The Job's `status.startTime`.
    pub start_time: Option<Time>,
    /// When its finishing condition was set.
    pub completion_time: Option<Time>,
}

/// One thing Observe found that the status shows, in the order found.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// A finished Job was bookkept (`lastRun`; `lastDriftCheck`, `lastRefresh` when it
    /// succeeded).
    Finished(Box<FinishedRun>),
    /// A plan Job's (or plan-changed apply's) plan, to show in `status.plan` (Plan Approval).
    Plan {
        /// The Job that made it.
        record: Box<JobRecord>,
        /// Its plan, as the result document carries it.
        plan: PlanDoc,
    },
    /// `status.plan` is no longer shown (consumed, or the policy is Automatic).
    PlanCleared,
    /// The state was read at this serial.
    StateSerial(u64),
    /// The state Secret's suffix.
    StateSuffix(String),
    /// The newest state backups, newest first (`status.stateBackups`; none shows nothing).
    StateBackups(Vec<api::status::StateBackup>),
    /// The provisioned latch closed.
    Provisioned,
    /// A cluster's failure domains, as its outputs list them.
    FailureDomains(Option<Vec<FailureDomain>>),
    /// A machine's valid outputs.
    MachineOutputs {
        /// Its addresses, when the outputs list them.
        addresses: Option<Vec<MachineAddress>>,
        /// Its failure domain.
        failure_domain: Option<String>,
        /// Whether it is interruptible.
        interruptible: bool,
    },
    /// A TerraformMachine's consecutive unhealthy samples (`status.unhealthySamples`).
    UnhealthySamples(i32),
    /// A pool's valid outputs (MachinePool Role "Outputs").
    PoolOutputs {
        /// `status.replicas`, when the outputs give it (an explicit 0 included).
        replicas: Option<i32>,
        /// `status.instances`, capped; `None` when the outputs list none.
        instances: Option<Vec<api::status::MachinePoolInstance>>,
    },
    /// A refresh or drift check sampled a pending health reading.
    HealthPending,
    /// A health reading that is not pending.
    HealthSettled,
    /// The image and digest the durable inputs record, the runtime the state reports.
    Source {
        /// The image.
        image: Option<String>,
        /// Its digest.
        digest: Option<String>,
        /// The runtime version, as the state reports it.
        runtime_version: Option<String>,
    },
}

/// What Observe recorded for the status, over the status the object had.
#[derive(Debug, Clone)]
pub struct StatusFacts {
    /// The status the object had when the pass began.
    pub before: StatusDraft,
    /// What the pass found, in order.
    pub recorded: Vec<Fact>,
}

impl StatusFacts {
    /// No facts yet over `before`.
    pub fn new(before: StatusDraft) -> Self {
        Self {
            before,
            recorded: Vec::new(),
        }
    }

    /// Records a fact.
    pub fn record(&mut self, fact: Fact) {
        self.recorded.push(fact);
    }

    /// The status the facts recorded so far make (what a later step of the pass reads).
    pub fn status(&self) -> StatusDraft {
        fold(&self.before, &self.recorded)
    }

    /// Whether the object is provisioned, with the facts recorded so far.
    pub fn provisioned(&self) -> bool {
        self.before.provisioned() || self.recorded.contains(&Fact::Provisioned)
    }

    /// The `status.plan` shown, with the facts recorded so far.
    pub fn plan(&self) -> Option<PlanPreview> {
        match self.status() {
            StatusDraft::Cluster(cs) => cs.plan,
            StatusDraft::Machine(_) | StatusDraft::Pool(_) => None,
        }
    }
}

/// The status fields the facts make over the status the object had; the conditions,
/// `activeJob` and `observedGeneration` are left as they were.
pub fn fold(before: &StatusDraft, facts: &[Fact]) -> StatusDraft {
    let mut status = before.clone();
    for fact in facts {
        apply(&mut status, fact);
    }
    status
}

fn apply(status: &mut StatusDraft, fact: &Fact) {
    match (fact, &mut *status) {
        (Fact::Finished(run), s) => {
            let w = s.workload_mut();
            w.last_run = Some(last_run(run));
            if run.outcome == JobOutcome::Succeeded {
                let at = run.record.finished.and_then(crate::pass::status::to_time);
                match run.record.operation {
                    Operation::Drift => w.last_drift_check = at,
                    Operation::Refresh => w.last_refresh = at,
                    _ => {}
                }
            }
        }
        (Fact::Plan { record, plan }, StatusDraft::Cluster(cs)) => {
            if let Some(preview) = plan_preview(record, plan) {
                cs.plan = Some(preview);
            }
        }
        (Fact::PlanCleared, StatusDraft::Cluster(cs)) => cs.plan = None,
        (Fact::StateSerial(serial), s) => {
            s.workload_mut().observed_state_serial =
                i64::try_from(*serial).ok().filter(|s| *s >= 1);
        }
        (Fact::StateSuffix(suffix), s) => {
            s.workload_mut().state_secret_suffix = Some(suffix.clone());
        }
        (Fact::StateBackups(list), s) => {
            let list: Vec<_> = list.iter().take(bounds::STATE_BACKUPS).cloned().collect();
            s.workload_mut().state_backups = Some(list).filter(|l| !l.is_empty());
        }
        (Fact::Provisioned, s) => {
            s.workload_mut().initialization = Some(Initialization {
                provisioned: Some(true),
            });
            // Cluster API v1.14 still reads a pool's `status.ready`, latched with it.
            if let StatusDraft::Pool(ps) = s {
                ps.ready = true;
            }
        }
        (
            Fact::PoolOutputs {
                replicas,
                instances,
            },
            StatusDraft::Pool(ps),
        ) => {
            if replicas.is_some() {
                ps.replicas = *replicas;
            }
            ps.instances = instances.clone().filter(|l| !l.is_empty());
        }
        (Fact::FailureDomains(fds), StatusDraft::Cluster(cs)) => {
            cs.failure_domains.clone_from(fds);
        }
        (
            Fact::MachineOutputs {
                addresses,
                failure_domain,
                interruptible,
            },
            StatusDraft::Machine(ms),
        ) => {
            if let Some(list) = addresses {
                ms.addresses = Some(list.clone()).filter(|l| !l.is_empty());
            }
            ms.failure_domain.clone_from(failure_domain);
            ms.interruptible = Some(*interruptible);
        }
        (Fact::HealthPending, s) => {
            let w = s.workload_mut();
            w.pending_refreshes = Some(w.pending_refreshes.unwrap_or(0).saturating_add(1));
        }
        (Fact::HealthSettled, s) => s.workload_mut().pending_refreshes = None,
        (Fact::UnhealthySamples(n), StatusDraft::Machine(ms)) => {
            // The CRD's minimum is 1: no unhealthy sample is no field.
            ms.unhealthy_samples = Some(*n).filter(|n| *n >= 1);
        }
        (
            Fact::Source {
                image,
                digest,
                runtime_version,
            },
            s,
        ) => {
            s.workload_mut().source = Some(SourceStatus {
                image: image.clone(),
                image_digest: digest.clone(),
                runtime_version: runtime_version
                    .as_deref()
                    .and_then(|v| bounded(v, bounds::RUNTIME_VERSION)),
            });
        }
        // A cluster's fact on a machine (or the reverse) shows nothing.
        _ => {}
    }
}

/// The CRD's bounds of the status fields filled from a result document or the state (crates/api
/// `status`).
pub mod bounds {
    /// `lastRun.steps`: items.
    pub const STEPS: usize = 16;
    /// `lastRun.steps[].name`, `lastRun.error.step`.
    pub const STEP_NAME: usize = 64;
    /// `lastRun.error.summary`.
    pub const SUMMARY: usize = 512;
    /// `lastRun.drift.resources`: items, and each.
    pub const DRIFT_RESOURCES: (usize, usize) = (20, 512);
    /// `plan.resources`: items, and each.
    pub const PLAN_RESOURCES: (usize, usize) = (50, 600);
    /// `plan.planHash`.
    pub const PLAN_HASH: usize = 128;
    /// `status.plan.textSecret` (a Secret name).
    pub const TEXT_SECRET: usize = 253;
    /// `source.runtimeVersion`.
    pub const RUNTIME_VERSION: usize = 64;
    /// `stateBackups`: items.
    pub const STATE_BACKUPS: usize = 16;
}

/// A result-document string within the CRD's bounds for its status field: at most `max` bytes
/// (cut on a character boundary), and absent when empty (every such field has `minLength: 1`).
fn bounded(text: &str, max: usize) -> Option<String> {
    Some(contract::result::cap(text, max)).filter(|s| !s.is_empty())
}

/// A result-document count within the CRD's bounds (`minimum: 0`, an int32).
fn bounded_count(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A list of result-document strings within the CRD's bounds: at most `items` entries of at most
/// `max` bytes each, no empty one; absent when none is left.
fn bounded_list(list: &[String], items: usize, max: usize) -> Option<Vec<String>> {
    let kept: Vec<String> = list
        .iter()
        .filter_map(|s| bounded(s, max))
        .take(items)
        .collect();
    Some(kept).filter(|k| !k.is_empty())
}

/// `status.lastRun` from a finished Job and its result document; steps map `{name, exit,
/// seconds}` to `{name, exitCode, durationMilliseconds}`, clamped to the CRD's bounds.
pub fn last_run(run: &FinishedRun) -> LastRun {
    let (record, result, outcome) = (&run.record, run.result.as_ref(), run.outcome);
    let steps: Vec<RunStep> = result
        .map(|r| {
            r.steps
                .iter()
                .take(bounds::STEPS)
                .map(|s| RunStep {
                    name: bounded(&s.name, bounds::STEP_NAME).unwrap_or_else(|| "unknown".into()),
                    exit_code: s.exit,
                    // NaN becomes 0, a negative duration 0, an overlong one the largest.
                    duration_milliseconds: Some((s.seconds * 1000.0).round().max(0.0) as i64),
                })
                .collect()
        })
        .unwrap_or_default();
    let error = match (result.and_then(|r| r.error.as_ref()), outcome) {
        (Some(e), _) => Some(RunError {
            kind: e.kind,
            step: e
                .step
                .as_deref()
                .and_then(|s| bounded(s, bounds::STEP_NAME)),
            summary: e
                .summary
                .as_deref()
                .and_then(|s| bounded(s, bounds::SUMMARY)),
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
        (None, JobOutcome::Failed) => Some(RunError {
            kind: ErrorKind::Step,
            step: None,
            summary: Some(
                "The Job's pod failed without a result (an init container failed, the runner could not start, or it was killed before it wrote one); see the pod's logs".to_owned(),
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
    let (items, each) = bounds::DRIFT_RESOURCES;
    let drift = result.and_then(|r| r.drift.as_ref()).map(|d| DriftSummary {
        add: Some(bounded_count(d.add)),
        change: Some(bounded_count(d.change)),
        destroy: Some(bounded_count(d.destroy)),
        forget: (d.forget > 0).then(|| bounded_count(d.forget)),
        resources: bounded_list(&d.resources, items, each),
    });
    LastRun {
        job: record.name.clone(),
        operation: record.operation,
        attempt: Some(record.attempt as i32),
        start_time: run.start_time.clone(),
        completion_time: run.completion_time.clone(),
        steps: Some(steps).filter(|s| !s.is_empty()),
        error,
        drift,
    }
}

/// `status.plan` from a plan (or plan-changed apply) Job's result; `None` when its plan hash is
/// empty or longer than the CRD allows (a hash cut short could not be approved).
pub fn plan_preview(record: &JobRecord, plan: &PlanDoc) -> Option<PlanPreview> {
    if plan.hash.is_empty() || plan.hash.len() > bounds::PLAN_HASH {
        return None;
    }
    let (items, each) = bounds::PLAN_RESOURCES;
    Some(PlanPreview {
        inputs_hash: record.inputs_hash.clone(),
        job: record.name.clone(),
        plan_hash: plan.hash.clone(),
        add: Some(bounded_count(plan.add)),
        change: Some(bounded_count(plan.change)),
        destroy: Some(bounded_count(plan.destroy)),
        forget: (plan.forget > 0).then(|| bounded_count(plan.forget)),
        resources: bounded_list(&plan.resources, items, each),
        truncated: (plan.truncated || plan.resources.len() > items).then_some(true),
        created_at: record.finished.and_then(crate::pass::status::to_time),
        text_secret: plan
            .text_secret
            .clone()
            .filter(|s| !s.is_empty() && s.len() <= bounds::TEXT_SECRET),
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use api::cluster::TerraformClusterStatus as ClusterStatus;
    use api::machine::TerraformMachineStatus as MachineStatus;

    use super::*;

    fn record(operation: Operation) -> JobRecord {
        JobRecord {
            name: "captf-c-x-op-a1-abcdef".to_owned(),
            operation,
            attempt: 1,
            tick: None,
            inputs_hash: "h1".to_owned(),
            created: SystemTime::UNIX_EPOCH,
            started: None,
            finished: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(100)),
            outcome: None,
            drift_remediation: false,
            requested: None,
            run_secret_exists: false,
            pod_ever_started: true,
            module_never_started: false,
            pull_failure: None,
        }
    }

    fn finished(operation: Operation, outcome: JobOutcome) -> Fact {
        Fact::Finished(Box::new(FinishedRun {
            record: record(operation),
            outcome,
            result: None,
            start_time: None,
            completion_time: None,
        }))
    }

    fn cluster() -> StatusDraft {
        StatusDraft::Cluster(ClusterStatus::default())
    }

    fn machine() -> StatusDraft {
        StatusDraft::Machine(MachineStatus::default())
    }

    fn plan(hash: &str) -> Fact {
        Fact::Plan {
            record: Box::new(record(Operation::Plan)),
            plan: PlanDoc {
                hash: hash.to_owned(),
                add: 1,
                ..PlanDoc::default()
            },
        }
    }

    /// No fact leaves the status the object had, conditions and all.
    #[test]
    fn no_fact_keeps_the_status_the_object_had() {
        let mut before = cluster();
        before.workload_mut().observed_state_serial = Some(4);
        before.workload_mut().observed_generation = Some(7);
        assert_eq!(fold(&before, &[]).to_value(), before.to_value());
    }

    /// `lastRun` is the last finished Job bookkept; `lastDriftCheck` and `lastRefresh` move only
    /// on a succeeded drift check or refresh, to its finish time.
    #[test]
    fn last_run_and_the_last_check_times_come_from_the_finished_jobs() {
        let s = fold(
            &cluster(),
            &[
                finished(Operation::Drift, JobOutcome::Succeeded),
                finished(Operation::Refresh, JobOutcome::Failed),
            ],
        );
        let w = s.workload();
        let run = w.last_run.as_ref().unwrap();
        assert_eq!(run.operation, Operation::Refresh);
        assert_eq!(run.error.as_ref().unwrap().kind, ErrorKind::Step);
        assert_eq!(
            w.last_drift_check,
            crate::pass::status::to_time(SystemTime::UNIX_EPOCH + Duration::from_secs(100))
        );
        assert_eq!(w.last_refresh, None);
        let s = fold(&s, &[finished(Operation::Refresh, JobOutcome::Succeeded)]);
        assert_eq!(s.workload().last_refresh, s.workload().last_drift_check);
    }

    /// A usable plan is shown in `status.plan`, one whose hash does not fit is not; a cleared
    /// plan is gone; a machine shows none.
    #[test]
    fn the_plan_is_shown_only_when_usable_and_cleared_when_consumed() {
        let shown = fold(&cluster(), &[plan("p1:abc")]);
        let StatusDraft::Cluster(cs) = &shown else {
            unreachable!()
        };
        let p = cs.plan.as_ref().unwrap();
        assert_eq!(
            (p.plan_hash.as_str(), p.inputs_hash.as_str()),
            ("p1:abc", "h1")
        );
        assert_eq!(p.add, Some(1));
        let StatusDraft::Cluster(cs) = fold(&shown, &[plan("")]) else {
            unreachable!()
        };
        assert_eq!(cs.plan.unwrap().plan_hash, "p1:abc");
        let StatusDraft::Cluster(cs) = fold(&shown, &[Fact::PlanCleared]) else {
            unreachable!()
        };
        assert!(cs.plan.is_none());
        assert_eq!(
            fold(&machine(), &[plan("p1:abc")]).to_value(),
            machine().to_value()
        );
    }

    /// The state read gives `observedStateSerial` (absent below 1) and the state Secret suffix.
    #[test]
    fn the_state_read_gives_the_serial_and_the_suffix() {
        let s = fold(
            &cluster(),
            &[Fact::StateSerial(9), Fact::StateSuffix("ns-c-x".into())],
        );
        assert_eq!(s.workload().observed_state_serial, Some(9));
        assert_eq!(s.workload().state_secret_suffix.as_deref(), Some("ns-c-x"));
        let s = fold(&s, &[Fact::StateSerial(0)]);
        assert_eq!(s.workload().observed_state_serial, None);
        let s = fold(&s, &[Fact::StateSerial(u64::MAX)]);
        assert_eq!(s.workload().observed_state_serial, None);
    }

    /// The provisioned latch closes and stays closed; facts recorded so far say so to the rest
    /// of the pass.
    #[test]
    fn the_provisioned_latch_closes() {
        let mut facts = StatusFacts::new(machine());
        assert!(!facts.provisioned());
        facts.record(Fact::Provisioned);
        assert!(facts.provisioned());
        assert!(facts.status().provisioned());
        assert!(fold(&facts.status(), &[]).provisioned());
    }

    /// The outputs: a cluster's failure domains, a machine's addresses, failure domain and
    /// interruptible flag (an empty address list shows none; no list keeps the old one).
    #[test]
    fn the_outputs_fill_the_role_fields() {
        let fd = FailureDomain {
            name: "a".into(),
            control_plane: Some(true),
            attributes: None,
        };
        let StatusDraft::Cluster(cs) =
            fold(&cluster(), &[Fact::FailureDomains(Some(vec![fd.clone()]))])
        else {
            unreachable!()
        };
        assert_eq!(cs.failure_domains, Some(vec![fd]));
        let address = MachineAddress {
            address_type: api::status::MachineAddressType::InternalIp,
            address: "10.0.0.1".into(),
        };
        let outputs = |addresses| Fact::MachineOutputs {
            addresses,
            failure_domain: Some("a".into()),
            interruptible: true,
        };
        let s = fold(&machine(), &[outputs(Some(vec![address.clone()]))]);
        let s = fold(&s, &[outputs(None)]);
        let StatusDraft::Machine(ms) = &s else {
            unreachable!()
        };
        assert_eq!(ms.addresses, Some(vec![address]));
        assert_eq!(ms.failure_domain.as_deref(), Some("a"));
        assert_eq!(ms.interruptible, Some(true));
        let StatusDraft::Machine(ms) = fold(&s, &[outputs(Some(vec![]))]) else {
            unreachable!()
        };
        assert_eq!(ms.addresses, None);
    }

    /// `pendingRefreshes` counts the sampled pending readings and resets on a settled one.
    #[test]
    fn pending_refreshes_count_pending_samples_and_reset() {
        let s = fold(&cluster(), &[Fact::HealthPending, Fact::HealthPending]);
        assert_eq!(s.workload().pending_refreshes, Some(2));
        let s = fold(&s, &[Fact::HealthSettled]);
        assert_eq!(s.workload().pending_refreshes, None);
    }

    /// `source` names the image and digest, and the runtime version clamped to 64 bytes.
    #[test]
    fn the_source_is_clamped_to_the_crd_bounds() {
        let s = fold(
            &cluster(),
            &[Fact::Source {
                image: Some("r/m:1".into()),
                digest: None,
                runtime_version: Some("v".repeat(100)),
            }],
        );
        let source = s.workload().source.clone().unwrap();
        assert_eq!(source.image.as_deref(), Some("r/m:1"));
        assert_eq!(
            source.runtime_version.unwrap().len(),
            bounds::RUNTIME_VERSION
        );
        let s = fold(
            &s,
            &[Fact::Source {
                image: None,
                digest: None,
                runtime_version: Some(String::new()),
            }],
        );
        assert_eq!(s.workload().source.clone().unwrap().runtime_version, None);
    }

    /// Finding 12: result-document fields copied into status are clamped to the CRD's bounds.
    /// A result document with overlong, empty, negative and oversized values still gives a
    /// `status.lastRun` and a `status.plan` the generated CRD's status schema accepts.
    #[test]
    fn result_document_fields_are_clamped_to_the_crd_bounds() {
        let long = "é".repeat(400);
        let result = ResultDocument {
            version: contract::result::RESULT_VERSION,
            op: "drift".to_owned(),
            image: contract::result::ImageInfo::default(),
            runtime: contract::result::RuntimeInfo::default(),
            steps: (0..40)
                .map(|i| contract::result::StepRecord {
                    name: if i == 0 { String::new() } else { long.clone() },
                    exit: 1,
                    seconds: if i == 1 { -3.0 } else { f64::NAN },
                })
                .collect(),
            drift: Some(contract::result::DriftDoc {
                detected: true,
                add: u64::MAX,
                change: 1 << 40,
                destroy: 0,
                forget: 7,
                resources: (0..90)
                    .map(|_| long.clone())
                    .chain([String::new()])
                    .collect(),
            }),
            error: Some(contract::result::ErrorDoc {
                kind: ErrorKind::Step,
                step: Some(long.clone()),
                summary: Some(long.repeat(4)),
                exit_code: Some(1),
            }),
            changes: None,
            plan: None,
        };
        let plan = contract::result::PlanDoc {
            hash: format!("p1:{}", "a".repeat(64)),
            add: u64::MAX,
            resources: (0..90).map(|_| long.clone()).collect(),
            ..contract::result::PlanDoc::default()
        };
        let record = record(Operation::Drift);
        let run = FinishedRun {
            record: record.clone(),
            outcome: JobOutcome::Failed,
            result: Some(result),
            start_time: None,
            completion_time: None,
        };
        let status = serde_json::json!({
            "lastRun": last_run(&run),
            "plan": plan_preview(&record, &plan),
        });
        let crd = api::crd::all()
            .into_iter()
            .find(|c| c.spec.names.kind == "TerraformCluster")
            .unwrap();
        let schema = serde_json::to_value(api::crd::schema_of(&crd).unwrap()).unwrap();
        let validator = jsonschema::validator_for(&schema["properties"]["status"]).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&status)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        assert_eq!(status["plan"]["truncated"], true);
        // A plan hash that does not fit is not cut short: no approval could name it.
        for hash in [String::new(), "p".repeat(bounds::PLAN_HASH + 1)] {
            let unusable = contract::result::PlanDoc {
                hash,
                ..plan.clone()
            };
            assert!(plan_preview(&record, &unusable).is_none());
        }
    }

    /// `unhealthySamples` has a minimum of 1 in the CRD: a count of 0 is no field.
    #[test]
    fn unhealthy_samples_of_zero_leave_no_field() {
        let StatusDraft::Machine(m) = fold(&machine(), &[Fact::UnhealthySamples(2)]) else {
            unreachable!()
        };
        assert_eq!(m.unhealthy_samples, Some(2));
        let StatusDraft::Machine(m) = fold(&StatusDraft::Machine(m), &[Fact::UnhealthySamples(0)])
        else {
            unreachable!()
        };
        assert_eq!(m.unhealthy_samples, None);
    }
}
