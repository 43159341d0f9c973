//! What one reconcile pass saw, as plain data: the input of [`crate::reconcile::decide`] (spec: The Reconcile
//! Lifecycle). Filled by the Observe step; nothing here reads a clock or a client.

use std::time::{Duration, SystemTime};

use api::shared::{ApplyPolicy, DriftAction};
use contract::names::{ObjectKind, Operation};

/// The manager-wide and per-object settings `decide` reads besides the observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `--drift-default-interval` (30 m): used when the object resolves no interval of its own.
    pub drift_default_interval: Duration,
    /// The merged `JobPolicy.failedJobsHistoryLimit` (3): caps the retry backoff and the
    /// remediation failure count.
    pub failed_jobs_history_limit: u32,
    /// The merged `JobPolicy.successfulJobsHistoryLimit` (3); pruning is Act's, kept for it.
    pub successful_jobs_history_limit: u32,
    /// `--cluster-operation-gate` (true).
    pub cluster_operation_gate: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            drift_default_interval: Duration::from_secs(30 * 60),
            failed_jobs_history_limit: contract::schedule::DEFAULT_FAILED_JOBS_HISTORY_LIMIT,
            successful_jobs_history_limit: 3,
            cluster_operation_gate: true,
        }
    }
}

/// The owner lookup's outcome (preamble step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerCheck {
    /// The owner exists and references this object back.
    Ok,
    /// No owner reference of the expected kind yet (`WaitingForOwner` and kin).
    NotYet {
        /// The documented `DependenciesReady` reason.
        reason: &'static str,
    },
    /// The owner reference names an object that is gone.
    Gone,
    /// The owner does not reference this object back (`OwnerMismatch`).
    Mismatch,
    /// An owner gate failed, such as `ClusterNotTerraform`.
    Gated {
        /// The documented `DependenciesReady` reason.
        reason: &'static str,
    },
}

/// A gate that keeps a new Job from starting, after the preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateBlock {
    /// The condition the gate reports on (`DependenciesReady`, `IdentityAllowed`, ...).
    pub condition: &'static str,
    /// Its documented reason.
    pub reason: &'static str,
}

/// The gates between the preamble and a new Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gates {
    /// Dependencies (owner Machine, cluster provisioned, exports, bootstrap data, variables):
    /// they block applies, never a destroy, which runs from the durable inputs.
    pub dependencies: Option<GateBlock>,
    /// Identity, credential mirror and runner RBAC: no Job of any kind can run without them.
    pub credentials: Option<GateBlock>,
}

/// How a finished Job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// It succeeded.
    Succeeded,
    /// It failed: counts toward retry backoff.
    Failed,
    /// It reached `activeDeadlineSeconds`: a failure like any other.
    DeadlineExceeded,
    /// Its pod was interrupted from outside: does not count toward backoff.
    Interrupted,
    /// An apply stopped before a destructive plan: does not count.
    Blocked,
    /// An approved apply's plan changed since approval: does not count.
    PlanChanged,
}

impl JobOutcome {
    /// Whether this outcome counts toward retry backoff (and the remediation failure cap).
    pub fn counts_as_failure(self) -> bool {
        matches!(self, Self::Failed | Self::DeadlineExceeded)
    }
}

/// One of the object's Jobs, finished or active.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// The Job's name.
    pub name: String,
    /// Its operation.
    pub operation: Operation,
    /// Its attempt number.
    pub attempt: u32,
    /// Its tick, when it carries one.
    pub tick: Option<String>,
    /// The inputs hash it rendered.
    pub inputs_hash: String,
    /// When the Job object was created.
    pub created: SystemTime,
    /// When its pod started, if it did.
    pub started: Option<SystemTime>,
    /// When it finished; `None` while active.
    pub finished: Option<SystemTime>,
    /// How it ended; `None` while active.
    pub outcome: Option<JobOutcome>,
    /// Whether it is a drift-remediation apply.
    pub drift_remediation: bool,
    /// The `captf.io/requested-at` value it was started for (On-demand checks).
    pub requested: Option<String>,
    /// Whether its per-run Secret exists.
    pub run_secret_exists: bool,
    /// Whether a pod of it ever started.
    pub pod_ever_started: bool,
    /// Whether its pod exists and the module's container never started (its image cannot be
    /// pulled, say; the runner's copy step may have run, which touches no state): an active
    /// Job a deletion may delete without waiting for it.
    pub module_never_started: bool,
    /// Its pod's image pull failure, while it lasts.
    pub pull_failure: Option<PullFailure>,
}

/// A container of a Job's pod that cannot pull its image (`ErrImagePull`, `ImagePullBackOff`,
/// `InvalidImageName`), as the kubelet reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullFailure {
    /// The container (`source`, or the runner's init container).
    pub container: String,
    /// The image it pulls.
    pub image: String,
    /// The kubelet's reason.
    pub reason: String,
    /// The kubelet's message.
    pub message: String,
}

impl JobRecord {
    /// Whether the Job is still active.
    pub fn is_active(&self) -> bool {
        self.outcome.is_none()
    }
}

/// The state read's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRead {
    /// No state yet.
    None,
    /// State read.
    Read {
        /// Its serial.
        serial: u64,
        /// The inputs hash recorded after a successful apply, if any.
        inputs_hash: Option<String>,
    },
    /// State exists but cannot be read (`StateLocked`, `StateCorrupt`, `StateEncrypted`, ...).
    Unreadable {
        /// The documented `StateReadable` reason.
        reason: &'static str,
    },
    /// State the object once had is gone (`StateLost`).
    Lost,
}

/// The current inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inputs {
    /// Built; their hash.
    Built {
        /// The inputs hash.
        hash: String,
    },
    /// Not built, by design: an immutable kind already provisioned.
    NotBuilt,
    /// Could not be built (`InputsTooLarge`, `VariablesInvalid`, ...).
    Failed {
        /// The documented reason.
        reason: &'static str,
    },
}

/// What the drift checks found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drift {
    /// The object's effective drift interval, resolved from its spec and the cluster's
    /// defaults; `None` means the manager default, zero means off.
    pub interval: Option<Duration>,
    /// The object's drift action.
    pub action: DriftAction,
    /// Whether the newest successful drift check found drift not yet cleared by an apply.
    pub found: bool,
    /// Failed remediation applies since the last successful drift check.
    pub remediation_failures: u32,
}

/// The health reading in status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthReading {
    /// No reading yet.
    Unknown,
    /// Pending (`InstancePending`).
    Pending,
    /// A definite reading.
    Definite,
}

/// When things last happened (successful runs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LastTimes {
    /// The last successful apply.
    pub apply: Option<SystemTime>,
    /// The last successful refresh.
    pub refresh: Option<SystemTime>,
    /// The last successful drift check.
    pub drift_check: Option<SystemTime>,
    /// Whether the last successful apply's own outputs gave a definite health reading, so no
    /// post-apply refresh is needed.
    pub apply_health_definite: bool,
}

/// The plan in `status.plan` and the approval annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approvals {
    /// `spec.applyPolicy` (Automatic for machines and pools).
    pub policy: ApplyPolicy,
    /// `status.plan`: (inputs hash, plan hash, whether it has changes).
    pub plan: Option<PlanStatus>,
    /// `captf.io/approve-plan`.
    pub approved_plan_hash: Option<String>,
    /// `captf.io/approve-destructive-plan`.
    pub approved_destructive_hash: Option<String>,
}

/// `status.plan`, reduced to what the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanStatus {
    /// The inputs hash it was planned for.
    pub inputs_hash: String,
    /// Its plan hash.
    pub plan_hash: String,
    /// Whether it changes anything (an empty plan needs no approval).
    pub has_changes: bool,
}

/// The cluster write lease, as the object sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterLease {
    /// Free, or held by this object.
    #[default]
    Free,
    /// Held by the cluster's own operation.
    HeldByCluster,
}

/// The leases, as the lease and Job caches show them (a lease counts as held by a running Job,
/// or from its acquire time for a grace period before its Job exists).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leases {
    /// The Job holding the object's run lease, when it is held.
    pub run_lease_holder: Option<String>,
    /// The cluster write lease (machines and pools).
    pub cluster: ClusterLease,
    /// For a cluster: how many machines and pools are applying or destroying now.
    pub machines_operating: u32,
}

/// The state backup a restore Job pushes back into the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreBackup {
    /// The backed-up state serial (`captf.io/restore-serial`; names the backup's Secrets).
    pub serial: u64,
    /// How many chunk Secrets the backup has (`captf.io/state-backup-chunks`), at least 1.
    pub chunks: u32,
    /// The backup's managed-resource count (`captf.io/state-backup-resources`); non-zero makes
    /// the runner insist on a non-empty `state list` after the push.
    pub resources: u64,
}

/// A check asked for by `captf.io/requested-at` (On-demand checks): the value, and whether a
/// Job of the object already carries it (started by an earlier pass whose status write did not
/// land): then it is only recorded, never run twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest {
    /// The annotation's value.
    pub value: String,
    /// A Job was started for it already.
    pub answered: bool,
}

/// A restore to run (Terraform State "Restore"): the backup, and the inputs hash the state is
/// adopted with afterwards (the backup's; `None` when the backed-up state had none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreAsk {
    /// The backup to push.
    pub backup: RestoreBackup,
    /// The inputs hash the backup's state was adopted with.
    pub inputs_hash: Option<String>,
}

/// Everything one pass observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The object's kind.
    pub kind: ObjectKind,
    /// Its name (the Job names' seed).
    pub name: String,
    /// Its UID (the jitter seed).
    pub uid: String,
    /// Whether its inputs follow its spec (cluster, pool) or are fixed at first apply (machine).
    pub mutable: bool,
    /// `status.initialization.provisioned`.
    pub provisioned: bool,
    /// Whether the object names a cluster (the cluster operation gate applies).
    pub names_cluster: bool,
    /// CAPI's externally-managed annotation.
    pub externally_managed: bool,
    /// `deletionTimestamp` set.
    pub deleting: bool,
    /// Our finalizer present.
    pub finalizer: bool,
    /// The object or its Cluster is paused.
    pub paused: bool,
    /// The owner lookup.
    pub owner: OwnerCheck,
    /// The gates after the preamble.
    pub gates: Gates,
    /// The object's Jobs, finished and active.
    pub jobs: Vec<JobRecord>,
    /// The state read.
    pub state: StateRead,
    /// The current inputs.
    pub inputs: Inputs,
    /// Whether the durable inputs Secret exists.
    pub durable_inputs: bool,
    /// Drift findings and policy.
    pub drift: Drift,
    /// The health reading.
    pub health: HealthReading,
    /// `status.pendingRefreshes`.
    pub pending_refreshes: u32,
    /// Last successful runs.
    pub last: LastTimes,
    /// Apply policy and approvals.
    pub approvals: Approvals,
    /// Leases.
    pub leases: Leases,
    /// For a cluster being deleted: machines and pools of it that still exist.
    pub dependents: u32,
    /// A restore the `captf.io/restore-state` annotation asks for (a backup of this object that
    /// was not restored, or failed to restore, before).
    pub restore: Option<RestoreAsk>,
    /// A `captf.io/requested-at` value `status.lastHandledRequestedAt` does not hold yet.
    pub requested: Option<CheckRequest>,
    /// A TerraformMachine with `spec.remediation.annotateMachine`: its
    /// `healthCheckIntervalSeconds`, a refresh cadence of its own (Machine Remediation).
    pub health_check_interval: Option<Duration>,
    /// A pool's next membership refresh interval (MachinePool Role "Membership refresh"): 30 s
    /// while unconverged or pending, else `spec.membershipRefreshIntervalSeconds`; `None` for
    /// the other kinds.
    pub membership_refresh: Option<Duration>,
    /// The time of this pass.
    pub now: SystemTime,
}

/// What a finished Job's pod reported.
#[derive(Debug, Clone, Default)]
pub struct PodReport {
    /// The result document, when the runner wrote one.
    pub result: Option<contract::result::ResultDocument>,
    /// The `imageID` of the `source` container (the digest the kubelet ran).
    pub image_id: Option<String>,
    /// When the `source` container started.
    pub started: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Whether the pod carries evidence of an interruption from outside (see `disrupted`).
    pub disrupted: bool,
    /// Whether a pod of the Job was found at all (none: it was deleted).
    pub found: bool,
}

/// A finished Job bookkept in this pass. It is marked bookkept, and counted in the Job metrics,
/// only once the pass's status patch has landed.
#[derive(Debug, Clone)]
pub struct Kept {
    /// The Job as `decide` sees it.
    pub record: JobRecord,
    /// How it ended.
    pub outcome: JobOutcome,
    /// What its pod reported.
    pub report: PodReport,
    /// When the Job was created.
    pub created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// A plan it should have reported could not be read (`captf.io/plan-unreadable`).
    pub plan_unreadable: bool,
}

/// The object's Jobs after bookkeeping.
#[derive(Debug, Clone, Default)]
pub struct Books {
    /// Every Job, finished and active.
    pub records: Vec<JobRecord>,
    /// The Jobs bookkept in this pass.
    pub kept: Vec<Kept>,
}

impl Books {
    /// The newest apply or restore that succeeded in this pass.
    pub fn applied(&self) -> Option<&Kept> {
        self.kept
            .iter()
            .filter(|k| {
                k.outcome == JobOutcome::Succeeded
                    && matches!(k.record.operation, Operation::Apply | Operation::Restore)
            })
            .max_by_key(|k| k.record.finished)
    }
}

#[cfg(test)]
impl Observed {
    /// The tests' starting point (decide's and report's): a provisioned TerraformCluster `name`
    /// with our finalizer, its owner found, nothing run or read yet (no Jobs, no state, inputs not
    /// built), automatic apply, no drift interval, a definite health reading, at `now`.
    pub(crate) fn provisioned_cluster(name: &str, uid: &str, now: SystemTime) -> Self {
        Self {
            kind: ObjectKind::Cluster,
            name: name.into(),
            uid: uid.into(),
            mutable: true,
            provisioned: true,
            names_cluster: true,
            externally_managed: false,
            deleting: false,
            finalizer: true,
            paused: false,
            owner: OwnerCheck::Ok,
            gates: Gates::default(),
            jobs: Vec::new(),
            state: StateRead::None,
            inputs: Inputs::NotBuilt,
            durable_inputs: true,
            drift: Drift {
                interval: None,
                action: DriftAction::Report,
                found: false,
                remediation_failures: 0,
            },
            health: HealthReading::Definite,
            pending_refreshes: 0,
            last: LastTimes::default(),
            approvals: Approvals {
                policy: ApplyPolicy::Automatic,
                plan: None,
                approved_plan_hash: None,
                approved_destructive_hash: None,
            },
            leases: Leases::default(),
            dependents: 0,
            restore: None,
            requested: None,
            health_check_interval: None,
            membership_refresh: None,
            now,
        }
    }
}
