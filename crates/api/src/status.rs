//! Status shared by TerraformCluster, TerraformMachine and TerraformMachinePool (the book's API
//! reference, "status.*" rows; The Reconcile Lifecycle; Plan Approval; Terraform State).
//!
//! Every field here is recomputable: `clusterctl move` does not restore status, and the manager
//! rebuilds it from state, Jobs and the durable inputs Secret.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;
use crate::shared::{HealthState, Operation, RunErrorKind};

pub use contract::outputs::AddressType as MachineAddressType;

/// Status every workload kind reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// The object's conditions. `Ready` summarises the others and is mirrored by Cluster API
    /// into the owner's `InfrastructureReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// Cluster API's provisioning signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,
    /// The module contract version the manager renders inputs for (for example `v1alpha1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub contract_version: Option<String>,
    /// The Job running now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_job: Option<ActiveJob>,
    /// How the newest finished Job went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// When the last successful drift check finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift_check: Option<Time>,
    /// When the last health reading (a refresh, a drift check or an apply's own outputs) was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh: Option<Time>,
    /// Consecutive `pending` health readings since the last other reading or apply; it sets the
    /// pending-refresh backoff (30s, 1m, 2m, 4m, then 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pending_refreshes: Option<i32>,
    /// The state serial last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_state_serial: Option<i64>,
    /// The suffix of this object's state Secrets (`tfstate-default-<suffix>`). Informational:
    /// the manager derives it from namespace, kind and name and never reads it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub state_secret_suffix: Option<String>,
    /// The image and runtime the last run used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStatus>,
    /// The last `captf.io/requested-at` value a check was started for (On-demand checks). Not
    /// rebuilt after `clusterctl move`: the first pass after a move runs the requested check
    /// once more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub last_handled_requested_at: Option<String>,
    /// The newest state backups, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub state_backups: Option<Vec<StateBackup>>,
}

/// Cluster API's provisioning signal.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Initialization {
    /// True once the infrastructure is provisioned. Latched: never reset while the object exists,
    /// and derived from state so it is rebuilt after a move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// The Job running now.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveJob {
    /// The Job's name.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The Job's operation.
    pub operation: Operation,
    /// The Job's attempt number for its operation.
    #[schemars(range(min = 1))]
    pub attempt: i32,
    /// When the Job was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// How the newest finished Job went: what the runner reported in its result document.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastRun {
    /// The Job's name.
    #[schemars(length(min = 1, max = 63))]
    pub job: String,
    /// The Job's operation.
    pub operation: Operation,
    /// The Job's attempt number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub attempt: Option<i32>,
    /// When the Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the Job finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The runtime commands the run executed, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub steps: Option<Vec<RunStep>>,
    /// Why the run did not succeed; absent on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// What a drift check found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSummary>,
}

/// One runtime command of a run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStep {
    /// The step (`init`, `validate`, `plan`, `apply`, ...).
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// The command's exit code.
    pub exit_code: i32,
    /// How long the command ran, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub duration_milliseconds: Option<i64>,
}

/// Why a run did not succeed. Never carries raw command output or an input value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunError {
    /// The kind of failure.
    pub kind: RunErrorKind,
    /// The step that failed, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub step: Option<String>,
    /// The runner's summary of the failure (diagnostics or `Error:` lines), at most 512 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub summary: Option<String>,
    /// The failing command's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// What a drift check found.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct DriftSummary {
    /// Resources the plan would create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub add: Option<i32>,
    /// Resources the plan would change in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub change: Option<i32>,
    /// Resources the plan would destroy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub destroy: Option<i32>,
    /// Resources the plan would forget (remove from state, leave in place); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub forget: Option<i32>,
    /// Up to 20 drifted resource addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20), inner(length(min = 1, max = 512)))]
    pub resources: Option<Vec<String>>,
}

/// The image and runtime of the last run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct SourceStatus {
    /// The image reference as written in `spec.source.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// The resolved digest the image ran at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_digest: Option<String>,
    /// The Terraform or OpenTofu version reported by the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub runtime_version: Option<String>,
}

/// One state backup (`captf-state-backup-<suffix>-<serial>`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateBackup {
    /// The backed-up state serial; name it in `captf.io/restore-state` to restore it.
    #[schemars(range(min = 1))]
    pub serial: i64,
    /// When the backup was taken.
    pub taken_at: Time,
    /// The backup's compressed size in bytes.
    #[schemars(range(min = 1))]
    pub bytes: i64,
}

/// A plan waiting for review (TerraformCluster under `applyPolicy: Manual`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanPreview {
    /// The inputs hash the plan was made for.
    #[schemars(length(min = 1, max = 128))]
    pub inputs_hash: String,
    /// The plan Job.
    #[schemars(length(min = 1, max = 63))]
    pub job: String,
    /// The plan hash to approve through `captf.io/approve-plan`.
    #[schemars(length(min = 1, max = 128))]
    pub plan_hash: String,
    /// Resources the plan creates (a replacement counts here and in `destroy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub add: Option<i32>,
    /// Resources the plan changes in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub change: Option<i32>,
    /// Resources the plan destroys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub destroy: Option<i32>,
    /// Resources the plan forgets (removes from state, leaves in place); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub forget: Option<i32>,
    /// Up to 50 changes as `<address> (<action>)`, action one of create, update, delete,
    /// replace, read or forget. Never a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 50), inner(length(min = 1, max = 600)))]
    pub resources: Option<Vec<String>>,
    /// True when the plan had more changes than `resources` lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// When the plan was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// The Secret (in the object's namespace, owned by it) holding the whole plan as text, key
    /// `plan.txt`, sensitive values redacted as `tofu show` redacts them, at most 512 KiB; the
    /// next plan replaces it and the apply of an approved plan deletes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub text_secret: Option<String>,
}

/// A failure domain (Cluster API v1beta2 `FailureDomain`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// The failure domain's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Whether control-plane machines may be placed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// Free-form attributes of the failure domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<std::collections::BTreeMap<String, String>>,
}

/// An address of a machine (Cluster API `MachineAddress`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    /// The address type.
    #[serde(rename = "type")]
    pub address_type: MachineAddressType,
    /// The address.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

/// One member instance of a TerraformMachinePool, as the module's `instances` output reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolInstance {
    /// The instance's provider ID (matches the Node's `spec.providerID`).
    #[serde(rename = "providerID")]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: String,
    /// The cloud's own instance ID.
    #[serde(
        rename = "instanceID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 256))]
    pub instance_id: Option<String>,
    /// The instance's addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub addresses: Option<Vec<MachineAddress>>,
    /// The failure domain the instance runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// The instance's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<HealthState>,
}
