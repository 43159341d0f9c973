//! The manager's Prometheus metrics (INTERFACE-FACTS §3 "Metrics and alerts"), served on
//! `--diagnostics-address` at `/metrics` by [`crate::runtime::diagnostics`].
//!
//! Every metric of §3 is registered with its documented name, type and label set, plus the
//! controller-runtime reconcile metrics the `CAPTFReconcileErrors` alert reads
//! (`controller_runtime_reconcile_total{controller,result}`,
//! `controller_runtime_reconcile_errors_total{controller}`,
//! `controller_runtime_reconcile_time_seconds{controller}`).
//!
//! Label values are the caller's: kinds as `TerraformCluster`, `TerraformMachine`,
//! `TerraformMachinePool` ([`ObjectKind::kind`]), operations as [`Operation::as_str`], results,
//! actions and reasons as §3 spells them (each method names its documented values). The runner's
//! step and error kind come from outside the manager, so a value outside the documented set is
//! recorded as `other` or `unknown` ([`step_label`], [`error_kind_label`]) and cannot grow a
//! family without bound.
//!
//! Failure counters count transitions: the caller records a state read error, invalid outputs or
//! an identity refusal once when it newly happens, not on every reconcile that still sees it.

use std::sync::Arc;

use contract::names::{ObjectKind, Operation};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The runner steps `captf_job_step_duration_seconds` and `captf_job_errors_total` name; any
/// other step is recorded as `other`.
pub const STEPS: [&str; 14] = [
    "version",
    "init",
    "force-unlock",
    "validate",
    "plan",
    "show-json",
    "show-text",
    "apply",
    "apply-refresh-only",
    "destroy",
    "state-push",
    "state-list",
    "prepare",
    "other",
];

/// The error kinds of `captf_job_errors_total`; any other is recorded as `unknown`.
pub const ERROR_KINDS: [&str; 7] = [
    "step",
    "image-layout",
    "interrupted",
    "blocked",
    "plan-changed",
    "deadline",
    "unknown",
];

/// The `result` values of `controller_runtime_reconcile_total`.
pub const RECONCILE_RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// The documented step label for `step`: itself when §3 lists it (or `none`, no step), else
/// `other`.
pub fn step_label(step: &str) -> &'static str {
    if step == "none" {
        return "none";
    }
    STEPS
        .iter()
        .find(|s| **s == step)
        .copied()
        .unwrap_or("other")
}

/// The documented error-kind label for `error_kind`: itself when §3 lists it, else `unknown`.
pub fn error_kind_label(error_kind: &str) -> &'static str {
    ERROR_KINDS
        .iter()
        .find(|s| **s == error_kind)
        .copied()
        .unwrap_or("unknown")
}

/// Labels `kind, op, result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOpResultLabels {
    /// The object kind.
    pub kind: String,
    /// The operation.
    pub op: String,
    /// The result.
    pub result: String,
}

/// Labels `kind, op, step`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOpStepLabels {
    /// The object kind.
    pub kind: String,
    /// The operation.
    pub op: String,
    /// The runner step.
    pub step: String,
}

/// Labels `kind, op`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOpLabels {
    /// The object kind.
    pub kind: String,
    /// The operation.
    pub op: String,
}

/// Labels of `captf_job_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobErrorLabels {
    /// The object kind.
    pub kind: String,
    /// The operation.
    pub op: String,
    /// What kind of error.
    pub error_kind: String,
    /// The failed step, `none` without one.
    pub step: String,
}

/// Labels `kind, op, action`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOpActionLabels {
    /// The object kind.
    pub kind: String,
    /// The operation.
    pub op: String,
    /// The resource action.
    pub action: String,
}

/// Labels `kind, action`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindActionLabels {
    /// The object kind.
    pub kind: String,
    /// The resource action.
    pub action: String,
}

/// Labels of `captf_reconcile_op_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The object kind.
    pub kind: String,
    /// The chosen operation, `none` for nothing.
    pub op: String,
    /// Why.
    pub reason: String,
}

/// Labels `kind, reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindReasonLabels {
    /// The object kind.
    pub kind: String,
    /// The reason.
    pub reason: String,
}

/// Labels `kind, result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindResultLabels {
    /// The object kind.
    pub kind: String,
    /// The result.
    pub result: String,
}

/// Labels `kind`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The object kind.
    pub kind: String,
}

/// Labels `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The reason.
    pub reason: String,
}

/// Labels `action`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// The action.
    pub action: String,
}

/// Labels of a per-object gauge: `kind, namespace, name`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    /// The object kind.
    pub kind: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

/// Labels of `captf_last_success_timestamp_seconds`: `kind, namespace, name, op`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectOpLabels {
    /// The object kind.
    pub kind: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The operation.
    pub op: String,
}

/// Labels of `captf_unhealthy_samples` (TerraformMachine only): `namespace, name`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MachineLabels {
    /// The machine's namespace.
    pub namespace: String,
    /// The machine's name.
    pub name: String,
}

/// Labels of `captf_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: &'static str,
    /// The commit, when the build knew it (`CAPTF_COMMIT` at build time), else `unknown`.
    pub commit: &'static str,
    /// The module contract version.
    pub contract: &'static str,
}

/// Labels `controller`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller's name.
    pub controller: String,
}

/// Labels `controller, result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerResultLabels {
    /// The controller's name.
    pub controller: String,
    /// How the reconcile ended.
    pub result: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Job wall time: 10 s to 4 h, with bounds at the `CAPTFJobSlow` threshold (1800 s).
fn job_duration_histogram() -> Histogram {
    Histogram::new([
        10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0, 5400.0,
        7200.0, 14400.0,
    ])
}

/// One runner step: half a second to 2 h.
fn step_duration_histogram() -> Histogram {
    Histogram::new([
        0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
    ])
}

/// Job creation to start: 1 s to 1 h, with a bound at the `CAPTFJobQueueSlow` threshold (300 s).
fn queue_histogram() -> Histogram {
    Histogram::new([
        1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
    ])
}

/// Attempts to success: whole numbers.
fn attempts_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0])
}

/// One reconcile: 5 ms to 60 s.
fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

/// Counts the active Jobs per (kind, operation) when the metrics are scraped.
type JobsActiveCount = Box<dyn Fn() -> Vec<(String, String, i64)> + Send + Sync>;

/// Where `captf_jobs_active` comes from at scrape time: the Job cache, once it runs.
#[derive(Default)]
struct JobsActiveSource(std::sync::OnceLock<JobsActiveCount>);

impl std::fmt::Debug for JobsActiveSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobsActiveSource")
    }
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    jobs_active_source: JobsActiveSource,
    jobs: Family<KindOpResultLabels, Counter>,
    job_duration: Histograms<KindOpResultLabels>,
    step_duration: Histograms<KindOpStepLabels>,
    queue: Histograms<KindOpLabels>,
    create_delay: Histograms<KindOpLabels>,
    job_errors: Family<JobErrorLabels, Counter>,
    jobs_active: Family<KindOpLabels, Gauge>,
    attempts: Histograms<KindOpLabels>,
    resources_changed: Family<KindOpActionLabels, Counter>,
    drift_resources: Family<KindActionLabels, Counter>,
    decisions: Family<DecisionLabels, Counter>,
    state_read_errors: Family<KindReasonLabels, Counter>,
    outputs_invalid: Family<KindReasonLabels, Counter>,
    drift_detected: Family<ObjectLabels, Gauge>,
    ready: Family<ObjectLabels, Gauge>,
    infrastructure_healthy: Family<ObjectLabels, Gauge>,
    state_resources: Family<ObjectLabels, Gauge>,
    state_bytes: Family<ObjectLabels, Gauge>,
    inputs_bytes: Family<ObjectLabels, Gauge>,
    last_success: Family<ObjectOpLabels, Gauge>,
    unhealthy_samples: Family<MachineLabels, Gauge>,
    force_unlocks: Family<KindLabels, Counter>,
    identity_denied: Family<ReasonLabels, Counter>,
    image_inspect_errors: Family<ReasonLabels, Counter>,
    inputs_hash_changes: Family<KindLabels, Counter>,
    remediation_requests: Family<ActionLabels, Counter>,
    approvals_consumed: Family<KindLabels, Counter>,
    lease_waits: Family<KindReasonLabels, Counter>,
    state_backups: Family<KindResultLabels, Counter>,
    state_restores: Family<KindResultLabels, Counter>,
    plan_approvals: Family<KindResultLabels, Counter>,
    reconciles: Family<ControllerResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Histograms<ControllerLabels>,
}

/// Every metric of the manager and the registry that encodes them. Cloning is one reference
/// count: every clone records into the same registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn object(kind: &str, namespace: &str, name: &str) -> ObjectLabels {
    ObjectLabels {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

fn kind_reason(kind: &str, reason: &str) -> KindReasonLabels {
    KindReasonLabels {
        kind: kind.to_owned(),
        reason: reason.to_owned(),
    }
}

fn kind_result(kind: &str, result: &str) -> KindResultLabels {
    KindResultLabels {
        kind: kind.to_owned(),
        result: result.to_owned(),
    }
}

fn object_op(kind: &str, namespace: &str, name: &str, op: &str) -> ObjectOpLabels {
    ObjectOpLabels {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        op: op.to_owned(),
    }
}

fn kind_op(kind: &str, op: &str) -> KindOpLabels {
    KindOpLabels {
        kind: kind.to_owned(),
        op: op.to_owned(),
    }
}

/// Registers the Job and decision metrics. Counters are registered without `_total`: the
/// encoder appends it.
fn register_job_metrics(inner: &mut Inner) {
    let r = &mut inner.registry;
    r.register(
        "captf_jobs",
        "Completed Jobs by kind, operation and result",
        inner.jobs.clone(),
    );
    r.register(
        "captf_job_duration_seconds",
        "Job wall time from start to finish",
        inner.job_duration.clone(),
    );
    r.register(
        "captf_job_step_duration_seconds",
        "Time of one runner step",
        inner.step_duration.clone(),
    );
    r.register(
        "captf_job_queue_seconds",
        "Time from Job creation to its source container starting",
        inner.queue.clone(),
    );
    r.register(
        "captf_job_create_delay_seconds",
        "Time from the object change that made an operation due to its Job's creation",
        inner.create_delay.clone(),
    );
    r.register(
        "captf_job_errors",
        "Jobs that did not succeed, by error kind and failed step",
        inner.job_errors.clone(),
    );
    r.register(
        "captf_jobs_active",
        "Jobs running now",
        inner.jobs_active.clone(),
    );
    r.register(
        "captf_job_attempts",
        "Jobs an operation took to succeed: 1 plus the failures since its previous success",
        inner.attempts.clone(),
    );
    r.register(
        "captf_resources_changed",
        "Resources changed by applies and destroys",
        inner.resources_changed.clone(),
    );
    r.register(
        "captf_drift_resources",
        "Drifted resources found",
        inner.drift_resources.clone(),
    );
    r.register(
        "captf_reconcile_op_decisions",
        "Operations reconciles chose (none for nothing) and why",
        inner.decisions.clone(),
    );
    r.register(
        "captf_state_read_errors",
        "Times state newly became unreadable",
        inner.state_read_errors.clone(),
    );
    r.register(
        "captf_outputs_invalid",
        "Times module outputs newly became invalid",
        inner.outputs_invalid.clone(),
    );
}

/// Registers the per-object, per-event and controller-runtime metrics.
fn register_object_metrics(inner: &mut Inner) {
    let r = &mut inner.registry;
    r.register(
        "captf_drift_detected",
        "1 while DriftDetected is True, else 0",
        inner.drift_detected.clone(),
    );
    r.register(
        "captf_ready",
        "Ready condition: 1 True, 0 False, -1 Unknown",
        inner.ready.clone(),
    );
    r.register(
        "captf_infrastructure_healthy",
        "InfrastructureHealthy condition: 1 True, 0 False, -1 Unknown",
        inner.infrastructure_healthy.clone(),
    );
    r.register(
        "captf_state_resources",
        "Managed resources in the last state read",
        inner.state_resources.clone(),
    );
    r.register(
        "captf_state_bytes",
        "Compressed state size summed over its Secrets",
        inner.state_bytes.clone(),
    );
    r.register(
        "captf_inputs_bytes",
        "Size of the rendered main.tf.json and terraform.tfvars.json",
        inner.inputs_bytes.clone(),
    );
    r.register(
        "captf_last_success_timestamp_seconds",
        "Unix time of the newest successful Job per operation",
        inner.last_success.clone(),
    );
    r.register(
        "captf_unhealthy_samples",
        "Consecutive unhealthy health samples of a TerraformMachine",
        inner.unhealthy_samples.clone(),
    );
    r.register(
        "captf_lock_force_unlocks",
        "Stale state locks force-unlocked",
        inner.force_unlocks.clone(),
    );
    r.register(
        "captf_identity_denied",
        "Identity refusals",
        inner.identity_denied.clone(),
    );
    r.register(
        "captf_image_inspect_errors",
        "Failures reading a module image to resolve template capacity",
        inner.image_inspect_errors.clone(),
    );
    r.register(
        "captf_inputs_hash_changes",
        "Applies started because a mutable object's inputs changed",
        inner.inputs_hash_changes.clone(),
    );
    r.register(
        "captf_remediation_requests",
        "remediate-machine annotations set or withdrawn",
        inner.remediation_requests.clone(),
    );
    r.register(
        "captf_destructive_plan_approvals_consumed",
        "Destructive plan approvals removed after a successful apply",
        inner.approvals_consumed.clone(),
    );
    r.register(
        "captf_lease_waits",
        "Waits started for a lease",
        inner.lease_waits.clone(),
    );
    r.register(
        "captf_state_backups",
        "State backups taken, pruned or skipped",
        inner.state_backups.clone(),
    );
    r.register(
        "captf_state_restores",
        "State restores by result",
        inner.state_restores.clone(),
    );
    r.register(
        "captf_plan_approvals",
        "Approved plans applied, or changed since approval",
        inner.plan_approvals.clone(),
    );
    let build = Family::<BuildLabels, Gauge>::default();
    r.register(
        "captf_build_info",
        "Build information, always 1",
        build.clone(),
    );
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            commit: option_env!("CAPTF_COMMIT").unwrap_or("unknown"),
            contract: contract::inputs::CONTRACT_VERSION,
        })
        .set(1);
    r.register(
        "controller_runtime_reconcile",
        "Reconciles per controller and result",
        inner.reconciles.clone(),
    );
    r.register(
        "controller_runtime_reconcile_errors",
        "Reconcile errors per controller",
        inner.reconcile_errors.clone(),
    );
    r.register(
        "controller_runtime_reconcile_time_seconds",
        "Time of one reconcile per controller",
        inner.reconcile_time.clone(),
    );
}

impl Metrics {
    /// A fresh registry with every metric registered and `captf_build_info` set.
    pub fn new() -> Self {
        let mut inner = Inner {
            registry: Registry::default(),
            jobs: Family::default(),
            job_duration: Family::new_with_constructor(job_duration_histogram),
            step_duration: Family::new_with_constructor(step_duration_histogram),
            queue: Family::new_with_constructor(queue_histogram),
            create_delay: Family::new_with_constructor(queue_histogram),
            job_errors: Family::default(),
            jobs_active: Family::default(),
            jobs_active_source: JobsActiveSource::default(),
            attempts: Family::new_with_constructor(attempts_histogram),
            resources_changed: Family::default(),
            drift_resources: Family::default(),
            decisions: Family::default(),
            state_read_errors: Family::default(),
            outputs_invalid: Family::default(),
            drift_detected: Family::default(),
            ready: Family::default(),
            infrastructure_healthy: Family::default(),
            state_resources: Family::default(),
            state_bytes: Family::default(),
            inputs_bytes: Family::default(),
            last_success: Family::default(),
            unhealthy_samples: Family::default(),
            force_unlocks: Family::default(),
            identity_denied: Family::default(),
            image_inspect_errors: Family::default(),
            inputs_hash_changes: Family::default(),
            remediation_requests: Family::default(),
            approvals_consumed: Family::default(),
            lease_waits: Family::default(),
            state_backups: Family::default(),
            state_restores: Family::default(),
            plan_approvals: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_histogram),
        };
        register_job_metrics(&mut inner);
        register_object_metrics(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        if let Some(count) = self.inner.jobs_active_source.0.get() {
            self.inner.jobs_active.clear();
            for (kind, op, n) in count() {
                self.set_jobs_active(&kind, &op, n);
            }
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }

    /// A Job finished with `result` (succeeded, failed, deadline, interrupted, blocked,
    /// plan_changed) after `duration_secs` from start to finish: `captf_jobs_total` and
    /// `captf_job_duration_seconds`.
    pub fn job_finished(&self, kind: &str, op: &str, result: &str, duration_secs: f64) {
        let labels = KindOpResultLabels {
            kind: kind.to_owned(),
            op: op.to_owned(),
            result: result.to_owned(),
        };
        self.inner.jobs.get_or_create(&labels).inc();
        self.inner
            .job_duration
            .get_or_create(&labels)
            .observe(duration_secs);
    }

    /// A Job did not succeed: `captf_job_errors_total`. `error_kind` and `step` are the
    /// runner's, `step` is `none` when no step failed; values outside the documented sets are
    /// recorded as `unknown` and `other` ([`error_kind_label`], [`step_label`]).
    pub fn job_error(&self, kind: &str, op: &str, error_kind: &str, step: &str) {
        self.inner
            .job_errors
            .get_or_create(&JobErrorLabels {
                kind: kind.to_owned(),
                op: op.to_owned(),
                error_kind: error_kind_label(error_kind).to_owned(),
                step: step_label(step).to_owned(),
            })
            .inc();
    }

    /// An operation succeeded after `attempts` Jobs (1 plus the failed ones since its previous
    /// success, interrupted ones excluded): `captf_job_attempts`.
    pub fn job_attempts(&self, kind: &str, op: &str, attempts: u64) {
        self.inner
            .attempts
            .get_or_create(&kind_op(kind, op))
            .observe(attempts as f64);
    }

    /// One runner step took `secs`: `captf_job_step_duration_seconds` (a step outside the
    /// documented set is `other`).
    pub fn job_step_duration(&self, kind: &str, op: &str, step: &str, secs: f64) {
        self.inner
            .step_duration
            .get_or_create(&KindOpStepLabels {
                kind: kind.to_owned(),
                op: op.to_owned(),
                step: step_label(step).to_owned(),
            })
            .observe(secs);
    }

    /// A Job's source container started `secs` after the Job was created:
    /// `captf_job_queue_seconds`. Not called when no start was reported.
    pub fn job_queue(&self, kind: &str, op: &str, secs: f64) {
        self.inner
            .queue
            .get_or_create(&kind_op(kind, op))
            .observe(secs);
    }

    /// A Job was created `secs` after the object change that made its operation due:
    /// `captf_job_create_delay_seconds` ([`crate::reconcile::act`] says which changes count).
    pub fn job_create_delay(&self, kind: &str, op: &str, secs: f64) {
        self.inner
            .create_delay
            .get_or_create(&kind_op(kind, op))
            .observe(secs);
    }

    /// Counts `captf_jobs_active` with `count` at every scrape (from the Job cache), instead of
    /// from what passes last saw. Set once; later calls are ignored.
    pub fn count_jobs_active_with(
        &self,
        count: impl Fn() -> Vec<(String, String, i64)> + Send + Sync + 'static,
    ) {
        let _ = self.inner.jobs_active_source.0.set(Box::new(count));
    }

    /// `n` Jobs of `kind` and `op` are running: `captf_jobs_active`.
    pub fn set_jobs_active(&self, kind: &str, op: &str, n: i64) {
        self.inner
            .jobs_active
            .get_or_create(&kind_op(kind, op))
            .set(n);
    }

    /// An apply or destroy changed `n` resources with `action` (add, change, destroy, import):
    /// `captf_resources_changed_total`.
    pub fn resources_changed(&self, kind: &str, op: &str, action: &str, n: u64) {
        self.inner
            .resources_changed
            .get_or_create(&KindOpActionLabels {
                kind: kind.to_owned(),
                op: op.to_owned(),
                action: action.to_owned(),
            })
            .inc_by(n);
    }

    /// A drift check found `n` drifted resources with `action` (add, change, destroy):
    /// `captf_drift_resources_total`.
    pub fn drift_resources(&self, kind: &str, action: &str, n: u64) {
        self.inner
            .drift_resources
            .get_or_create(&KindActionLabels {
                kind: kind.to_owned(),
                action: action.to_owned(),
            })
            .inc_by(n);
    }

    /// A reconcile chose `op` (`none`: nothing) because of `reason`:
    /// `captf_reconcile_op_decisions_total`.
    pub fn op_decision(&self, kind: &str, op: &str, reason: &str) {
        self.inner
            .decisions
            .get_or_create(&DecisionLabels {
                kind: kind.to_owned(),
                op: op.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// State newly became unreadable for `reason` (inconsistent, encrypted, corrupt, lost,
    /// locked): `captf_state_read_errors_total`.
    pub fn state_read_error(&self, kind: &str, reason: &str) {
        self.inner
            .state_read_errors
            .get_or_create(&kind_reason(kind, reason))
            .inc();
    }

    /// Outputs newly became invalid for `reason`: `captf_outputs_invalid_total`.
    pub fn outputs_invalid(&self, kind: &str, reason: &str) {
        self.inner
            .outputs_invalid
            .get_or_create(&kind_reason(kind, reason))
            .inc();
    }

    /// A wait for a lease started (`reason`: run_lease, cluster_operation, machine_operations):
    /// `captf_lease_waits_total`.
    pub fn lease_wait(&self, kind: &str, reason: &str) {
        self.inner
            .lease_waits
            .get_or_create(&kind_reason(kind, reason))
            .inc();
    }

    /// An identity was newly refused (`reason`: notfound, namespace):
    /// `captf_identity_denied_total`.
    pub fn identity_denied(&self, reason: &str) {
        self.inner
            .identity_denied
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Reading a module image (registry or labels) failed while resolving template capacity:
    /// `captf_image_inspect_errors_total`.
    pub fn image_inspect_error(&self, reason: &str) {
        self.inner
            .image_inspect_errors
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// An apply started because a mutable object's inputs changed:
    /// `captf_inputs_hash_changes_total`.
    pub fn inputs_hash_change(&self, kind: &str) {
        self.inner
            .inputs_hash_changes
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// A stale state lock was force-unlocked: `captf_lock_force_unlocks_total`.
    pub fn lock_force_unlock(&self, kind: &str) {
        self.inner
            .force_unlocks
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// A remediate-machine annotation was `requested` (set) or `withdrawn` (removed):
    /// `captf_remediation_requests_total`.
    pub fn remediation_request(&self, action: &str) {
        self.inner
            .remediation_requests
            .get_or_create(&ActionLabels {
                action: action.to_owned(),
            })
            .inc();
    }

    /// A destructive plan approval was removed after its apply succeeded:
    /// `captf_destructive_plan_approvals_consumed_total`.
    pub fn destructive_approval_consumed(&self, kind: &str) {
        self.inner
            .approvals_consumed
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// `n` state backups were `taken`, `pruned` or `skipped`: `captf_state_backups_total`.
    pub fn state_backups(&self, kind: &str, result: &str, n: u64) {
        self.inner
            .state_backups
            .get_or_create(&kind_result(kind, result))
            .inc_by(n);
    }

    /// A restore ended (`result`: succeeded, failed, not_found): `captf_state_restores_total`.
    pub fn state_restore(&self, kind: &str, result: &str) {
        self.inner
            .state_restores
            .get_or_create(&kind_result(kind, result))
            .inc();
    }

    /// An approved plan was `approved` (applied) or `changed` since approval:
    /// `captf_plan_approvals_total`.
    pub fn plan_approval(&self, kind: &str, result: &str) {
        self.inner
            .plan_approvals
            .get_or_create(&kind_result(kind, result))
            .inc();
    }

    /// The object's Ready condition, 1 True, 0 False, -1 Unknown: `captf_ready`.
    pub fn set_ready(&self, kind: &str, namespace: &str, name: &str, v: i64) {
        self.inner
            .ready
            .get_or_create(&object(kind, namespace, name))
            .set(v);
    }

    /// The object's InfrastructureHealthy condition, 1 True, 0 False, -1 Unknown:
    /// `captf_infrastructure_healthy`.
    pub fn set_infrastructure_healthy(&self, kind: &str, namespace: &str, name: &str, v: i64) {
        self.inner
            .infrastructure_healthy
            .get_or_create(&object(kind, namespace, name))
            .set(v);
    }

    /// 1 while the object's DriftDetected condition is True, else 0: `captf_drift_detected`.
    pub fn set_drift_detected(&self, kind: &str, namespace: &str, name: &str, v: i64) {
        self.inner
            .drift_detected
            .get_or_create(&object(kind, namespace, name))
            .set(v);
    }

    /// Managed resources in the object's last state read: `captf_state_resources`.
    pub fn set_state_resources(&self, kind: &str, namespace: &str, name: &str, n: i64) {
        self.inner
            .state_resources
            .get_or_create(&object(kind, namespace, name))
            .set(n);
    }

    /// The object's compressed state size summed over its Secrets: `captf_state_bytes`.
    pub fn set_state_bytes(&self, kind: &str, namespace: &str, name: &str, bytes: i64) {
        self.inner
            .state_bytes
            .get_or_create(&object(kind, namespace, name))
            .set(bytes);
    }

    /// The object's rendered inputs size, also when too large to run: `captf_inputs_bytes`.
    pub fn set_inputs_bytes(&self, kind: &str, namespace: &str, name: &str, bytes: i64) {
        self.inner
            .inputs_bytes
            .get_or_create(&object(kind, namespace, name))
            .set(bytes);
    }

    /// The Unix time (seconds) the object's newest successful `op` Job finished:
    /// `captf_last_success_timestamp_seconds`. For drift and refresh only while they are
    /// scheduled: [`Metrics::clear_last_success`] removes it.
    pub fn set_last_success(&self, kind: &str, namespace: &str, name: &str, op: &str, ts: i64) {
        self.inner
            .last_success
            .get_or_create(&object_op(kind, namespace, name, op))
            .set(ts);
    }

    /// Removes the object's `captf_last_success_timestamp_seconds` for `op` (a drift or refresh
    /// no longer scheduled).
    pub fn clear_last_success(&self, kind: &str, namespace: &str, name: &str, op: &str) {
        self.inner
            .last_success
            .remove(&object_op(kind, namespace, name, op));
    }

    /// A TerraformMachine's consecutive unhealthy samples: `captf_unhealthy_samples`.
    pub fn set_unhealthy_samples(&self, namespace: &str, name: &str, v: i64) {
        self.inner
            .unhealthy_samples
            .get_or_create(&MachineLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
            .set(v);
    }

    /// Removes every per-object series of a deleted object: the condition, state and inputs
    /// gauges, its last-success time of every operation and, for a TerraformMachine, its
    /// unhealthy samples.
    pub fn forget_object(&self, kind: &str, namespace: &str, name: &str) {
        let labels = object(kind, namespace, name);
        let i = &self.inner;
        for family in [
            &i.ready,
            &i.infrastructure_healthy,
            &i.drift_detected,
            &i.state_resources,
            &i.state_bytes,
            &i.inputs_bytes,
        ] {
            family.remove(&labels);
        }
        for op in Operation::ALL {
            self.clear_last_success(kind, namespace, name, op.as_str());
        }
        if kind == ObjectKind::Machine.kind() {
            i.unhealthy_samples.remove(&MachineLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        }
    }

    /// Creates `controller`'s reconcile series at zero, so rates exist before the first error.
    pub fn init_controller(&self, controller: &str) {
        for result in RECONCILE_RESULTS {
            drop(
                self.inner
                    .reconciles
                    .get_or_create(&ControllerResultLabels {
                        controller: controller.to_owned(),
                        result: result.to_owned(),
                    }),
            );
        }
        drop(
            self.inner
                .reconcile_errors
                .get_or_create(&ControllerLabels {
                    controller: controller.to_owned(),
                }),
        );
    }

    /// A reconcile of `controller` ended with `result` (success, error, requeue, requeue_after)
    /// after `secs`: `controller_runtime_reconcile_total` and
    /// `controller_runtime_reconcile_time_seconds`. An error is also counted by
    /// [`Metrics::reconcile_error`], which the caller calls as well.
    pub fn reconcile(&self, controller: &str, result: &str, secs: f64) {
        self.inner
            .reconciles
            .get_or_create(&ControllerResultLabels {
                controller: controller.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        self.inner
            .reconcile_time
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .observe(secs);
    }

    /// A reconcile of `controller` returned an error: `controller_runtime_reconcile_errors_total`
    /// (what the `CAPTFReconcileErrors` alert reads).
    pub fn reconcile_error(&self, controller: &str) {
        self.inner
            .reconcile_errors
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// INTERFACE-FACTS §3, name and type, plus the reconcile metrics.
    const DOCUMENTED: [(&str, &str); 34] = [
        ("captf_jobs_total", "counter"),
        ("captf_job_duration_seconds", "histogram"),
        ("captf_job_step_duration_seconds", "histogram"),
        ("captf_job_queue_seconds", "histogram"),
        ("captf_job_errors_total", "counter"),
        ("captf_jobs_active", "gauge"),
        ("captf_job_attempts", "histogram"),
        ("captf_resources_changed_total", "counter"),
        ("captf_drift_resources_total", "counter"),
        ("captf_reconcile_op_decisions_total", "counter"),
        ("captf_state_read_errors_total", "counter"),
        ("captf_outputs_invalid_total", "counter"),
        ("captf_drift_detected", "gauge"),
        ("captf_ready", "gauge"),
        ("captf_infrastructure_healthy", "gauge"),
        ("captf_state_resources", "gauge"),
        ("captf_state_bytes", "gauge"),
        ("captf_inputs_bytes", "gauge"),
        ("captf_last_success_timestamp_seconds", "gauge"),
        ("captf_unhealthy_samples", "gauge"),
        ("captf_lock_force_unlocks_total", "counter"),
        ("captf_identity_denied_total", "counter"),
        ("captf_image_inspect_errors_total", "counter"),
        ("captf_inputs_hash_changes_total", "counter"),
        ("captf_remediation_requests_total", "counter"),
        ("captf_destructive_plan_approvals_consumed_total", "counter"),
        ("captf_lease_waits_total", "counter"),
        ("captf_state_backups_total", "counter"),
        ("captf_state_restores_total", "counter"),
        ("captf_plan_approvals_total", "counter"),
        ("captf_build_info", "gauge"),
        ("controller_runtime_reconcile_total", "counter"),
        ("controller_runtime_reconcile_errors_total", "counter"),
        ("controller_runtime_reconcile_time_seconds", "histogram"),
    ];

    /// The documented label names of each metric, in order.
    const LABELS: [(&str, &str); 34] = [
        ("captf_jobs_total", "kind,op,result"),
        ("captf_job_duration_seconds_count", "kind,op,result"),
        ("captf_job_step_duration_seconds_count", "kind,op,step"),
        ("captf_job_queue_seconds_count", "kind,op"),
        ("captf_job_errors_total", "kind,op,error_kind,step"),
        ("captf_jobs_active", "kind,op"),
        ("captf_job_attempts_count", "kind,op"),
        ("captf_resources_changed_total", "kind,op,action"),
        ("captf_drift_resources_total", "kind,action"),
        ("captf_reconcile_op_decisions_total", "kind,op,reason"),
        ("captf_state_read_errors_total", "kind,reason"),
        ("captf_outputs_invalid_total", "kind,reason"),
        ("captf_drift_detected", "kind,namespace,name"),
        ("captf_ready", "kind,namespace,name"),
        ("captf_infrastructure_healthy", "kind,namespace,name"),
        ("captf_state_resources", "kind,namespace,name"),
        ("captf_state_bytes", "kind,namespace,name"),
        ("captf_inputs_bytes", "kind,namespace,name"),
        (
            "captf_last_success_timestamp_seconds",
            "kind,namespace,name,op",
        ),
        ("captf_unhealthy_samples", "namespace,name"),
        ("captf_lock_force_unlocks_total", "kind"),
        ("captf_identity_denied_total", "reason"),
        ("captf_image_inspect_errors_total", "reason"),
        ("captf_inputs_hash_changes_total", "kind"),
        ("captf_remediation_requests_total", "action"),
        ("captf_destructive_plan_approvals_consumed_total", "kind"),
        ("captf_lease_waits_total", "kind,reason"),
        ("captf_state_backups_total", "kind,result"),
        ("captf_state_restores_total", "kind,result"),
        ("captf_plan_approvals_total", "kind,result"),
        ("captf_build_info", "version,commit,contract"),
        ("controller_runtime_reconcile_total", "controller,result"),
        ("controller_runtime_reconcile_errors_total", "controller"),
        (
            "controller_runtime_reconcile_time_seconds_count",
            "controller",
        ),
    ];

    /// The manager reference page lists every metric.
    #[test]
    fn the_reference_page_lists_every_metric() {
        let page = include_str!("../../../../docs/src/reference/manager.md");
        for (name, kind) in DOCUMENTED {
            assert!(
                page.contains(&format!("| `{name}` | {kind} |")),
                "docs/src/reference/manager.md does not list {name} as a {kind}"
            );
        }
    }

    /// The family name of a sample name (the `# TYPE` line drops a counter's `_total`).
    fn family(name: &str, kind: &str) -> String {
        if kind == "counter" {
            name.strip_suffix("_total").unwrap_or(name).to_owned()
        } else {
            name.to_owned()
        }
    }

    /// Records one sample into every family.
    fn record_everything(m: &Metrics) {
        let (tc, tm) = ("TerraformCluster", "TerraformMachine");
        m.job_finished(tc, "apply", "succeeded", 42.0);
        m.job_error(tc, "apply", "step", "plan");
        m.job_attempts(tc, "apply", 2);
        m.job_step_duration(tc, "apply", "init", 3.0);
        m.job_queue(tc, "apply", 4.0);
        m.set_jobs_active(tc, "apply", 1);
        m.resources_changed(tc, "apply", "add", 3);
        m.drift_resources(tc, "change", 1);
        m.op_decision(tc, "none", "nothing_due");
        m.state_read_error(tc, "locked");
        m.outputs_invalid(tc, "OutputsMissing");
        m.lease_wait(tm, "cluster_operation");
        m.identity_denied("namespace");
        m.image_inspect_error("registry");
        m.inputs_hash_change(tc);
        m.lock_force_unlock(tc);
        m.remediation_request("requested");
        m.destructive_approval_consumed(tc);
        m.state_backups(tc, "taken", 1);
        m.state_restore(tc, "not_found");
        m.plan_approval(tc, "approved");
        m.set_ready(tc, "ns", "c", 1);
        m.set_infrastructure_healthy(tc, "ns", "c", -1);
        m.set_drift_detected(tc, "ns", "c", 0);
        m.set_state_resources(tc, "ns", "c", 7);
        m.set_state_bytes(tc, "ns", "c", 1024);
        m.set_inputs_bytes(tc, "ns", "c", 2048);
        m.set_last_success(tc, "ns", "c", "drift", 1_700_000_000);
        m.set_unhealthy_samples("ns", "m", 2);
        m.reconcile("terraformcluster", "error", 0.01);
        m.reconcile_error("terraformcluster");
    }

    /// The label names of the first sample of `name` in `text`.
    fn label_names(text: &str, name: &str) -> Option<String> {
        let line = text.lines().find(|l| l.starts_with(&format!("{name}{{")))?;
        let inside = &line[name.len() + 1..line.find('}')?];
        Some(
            inside
                .split("\",")
                .map(|pair| pair.split('=').next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    /// `captf_jobs_active` is what the source counts at each scrape: a Job that finished since
    /// the previous scrape is gone from the gauge without any pass running.
    #[test]
    fn jobs_active_is_counted_at_scrape_time() {
        let m = Metrics::new();
        let running = Arc::new(std::sync::atomic::AtomicI64::new(2));
        let source = running.clone();
        m.count_jobs_active_with(move || {
            vec![(
                "TerraformCluster".to_owned(),
                "apply".to_owned(),
                source.load(std::sync::atomic::Ordering::SeqCst),
            )]
        });
        let line =
            |n: i64| format!(r#"captf_jobs_active{{kind="TerraformCluster",op="apply"}} {n}"#);
        assert!(m.encode().contains(&line(2)));
        running.store(0, std::sync::atomic::Ordering::SeqCst);
        assert!(m.encode().contains(&line(0)));
    }

    /// prometheus-client leaves a family without series out of the exposition, so each gets one
    /// sample first.
    #[test]
    fn every_documented_metric_is_registered_with_its_type() {
        let m = Metrics::new();
        record_everything(&m);
        let text = m.encode();
        for (name, kind) in DOCUMENTED {
            let line = format!("# TYPE {} {kind}\n", family(name, kind));
            assert!(text.contains(&line), "missing {line:?} in\n{text}");
        }
        let families = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(families, DOCUMENTED.len(), "{text}");
    }

    #[test]
    fn every_documented_metric_carries_its_documented_labels() {
        let m = Metrics::new();
        record_everything(&m);
        let text = m.encode();
        for (name, labels) in LABELS {
            assert_eq!(
                label_names(&text, name).as_deref(),
                Some(labels),
                "{name} in\n{text}"
            );
        }
    }

    #[test]
    fn build_info_names_the_version_commit_and_contract() {
        let text = Metrics::new().encode();
        let line = format!(
            r#"captf_build_info{{version="{}",commit="{}",contract="{}"}} 1"#,
            env!("CARGO_PKG_VERSION"),
            option_env!("CAPTF_COMMIT").unwrap_or("unknown"),
            contract::inputs::CONTRACT_VERSION
        );
        assert!(text.contains(&line), "{text}");
    }

    #[test]
    fn a_recorded_counter_shows_its_labels() {
        let m = Metrics::new();
        m.job_finished("TerraformMachine", "destroy", "deadline", 120.0);
        m.job_finished("TerraformMachine", "destroy", "deadline", 60.0);
        m.job_error(
            "TerraformMachinePool",
            "apply",
            "something-new",
            "terraform-fmt",
        );
        m.job_error("TerraformCluster", "plan", "blocked", "none");
        m.resources_changed("TerraformCluster", "apply", "import", 5);
        m.op_decision("TerraformCluster", "drift", "drift_interval");
        let text = m.encode();
        for line in [
            r#"captf_jobs_total{kind="TerraformMachine",op="destroy",result="deadline"} 2"#,
            r#"captf_job_duration_seconds_sum{kind="TerraformMachine",op="destroy",result="deadline"} 180.0"#,
            r#"captf_job_duration_seconds_count{kind="TerraformMachine",op="destroy",result="deadline"} 2"#,
            r#"captf_job_duration_seconds_bucket{le="1800.0",kind="TerraformMachine",op="destroy",result="deadline"} 2"#,
            r#"captf_job_errors_total{kind="TerraformMachinePool",op="apply",error_kind="unknown",step="other"} 1"#,
            r#"captf_job_errors_total{kind="TerraformCluster",op="plan",error_kind="blocked",step="none"} 1"#,
            r#"captf_resources_changed_total{kind="TerraformCluster",op="apply",action="import"} 5"#,
            r#"captf_reconcile_op_decisions_total{kind="TerraformCluster",op="drift",reason="drift_interval"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn gauges_hold_the_last_value_set() {
        let m = Metrics::new();
        m.set_ready("TerraformCluster", "ns", "a", 1);
        m.set_ready("TerraformCluster", "ns", "b", 0);
        m.set_ready("TerraformCluster", "ns", "c", -1);
        m.set_drift_detected("TerraformCluster", "ns", "a", 1);
        m.set_jobs_active("TerraformCluster", "apply", 2);
        m.set_jobs_active("TerraformCluster", "apply", 0);
        m.set_last_success("TerraformMachine", "ns", "m", "refresh", 1_700_000_000);
        let text = m.encode();
        for line in [
            r#"captf_ready{kind="TerraformCluster",namespace="ns",name="a"} 1"#,
            r#"captf_ready{kind="TerraformCluster",namespace="ns",name="b"} 0"#,
            r#"captf_ready{kind="TerraformCluster",namespace="ns",name="c"} -1"#,
            r#"captf_drift_detected{kind="TerraformCluster",namespace="ns",name="a"} 1"#,
            r#"captf_jobs_active{kind="TerraformCluster",op="apply"} 0"#,
            r#"captf_last_success_timestamp_seconds{kind="TerraformMachine",namespace="ns",name="m",op="refresh"} 1700000000"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        m.clear_last_success("TerraformMachine", "ns", "m", "refresh");
        assert!(!m.encode().contains("captf_last_success_timestamp_seconds{"));
    }

    #[test]
    fn forget_object_removes_every_series_of_that_object_only() {
        let m = Metrics::new();
        let tm = "TerraformMachine";
        for name in ["gone", "kept"] {
            m.set_ready(tm, "ns", name, 1);
            m.set_infrastructure_healthy(tm, "ns", name, 0);
            m.set_drift_detected(tm, "ns", name, 1);
            m.set_state_resources(tm, "ns", name, 3);
            m.set_state_bytes(tm, "ns", name, 300);
            m.set_inputs_bytes(tm, "ns", name, 30);
            m.set_unhealthy_samples("ns", name, 1);
            for op in ["apply", "drift", "refresh"] {
                m.set_last_success(tm, "ns", name, op, 1_700_000_000);
            }
        }
        // A cluster of the same name keeps its series.
        m.set_ready("TerraformCluster", "ns", "gone", 1);
        m.forget_object(tm, "ns", "gone");
        let text = m.encode();
        let gone: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(r#"name="gone""#))
            .collect();
        assert_eq!(
            gone,
            [r#"captf_ready{kind="TerraformCluster",namespace="ns",name="gone"} 1"#],
            "{text}"
        );
        let kept = text
            .lines()
            .filter(|l| l.contains(r#"name="kept""#))
            .count();
        assert_eq!(kept, 10, "{text}");
    }

    #[test]
    fn reconcile_results_and_errors() {
        let m = Metrics::new();
        m.init_controller("terraformmachine");
        let text = m.encode();
        assert!(text.contains(
            r#"controller_runtime_reconcile_errors_total{controller="terraformmachine"} 0"#
        ));
        assert!(text.contains(
            r#"controller_runtime_reconcile_total{controller="terraformmachine",result="requeue_after"} 0"#
        ));
        m.reconcile("terraformmachine", "error", 0.2);
        m.reconcile_error("terraformmachine");
        m.reconcile("terraformmachine", "success", 0.1);
        let text = m.encode();
        for line in [
            r#"controller_runtime_reconcile_errors_total{controller="terraformmachine"} 1"#,
            r#"controller_runtime_reconcile_total{controller="terraformmachine",result="error"} 1"#,
            r#"controller_runtime_reconcile_total{controller="terraformmachine",result="success"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="terraformmachine"} 2"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn runner_vocabularies_are_bounded() {
        assert_eq!(step_label("show-json"), "show-json");
        assert_eq!(step_label("none"), "none");
        assert_eq!(step_label("terraform-fmt"), "other");
        assert_eq!(error_kind_label("image-layout"), "image-layout");
        assert_eq!(error_kind_label("oom"), "unknown");
    }

    #[test]
    fn clones_share_one_registry() {
        let m = Metrics::new();
        m.clone().lock_force_unlock("TerraformCluster");
        assert!(
            m.encode()
                .contains(r#"captf_lock_force_unlocks_total{kind="TerraformCluster"} 1"#)
        );
    }
}
