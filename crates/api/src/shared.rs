//! The spec pieces the three workload kinds share (the book's API reference, "Shared spec
//! pieces" and "JobPolicy"; Tuning Jobs; Module Variables; Drift; Machine Remediation).
//!
//! Defaults are never written onto objects: CAPTF resolves them at reconcile time (there is no
//! mutating webhook). Each field's comment names its default, and the `*_or_default` methods here
//! are the one place the built-in values live.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SecurityContext, Toleration, TopologySpreadConstraint,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

pub use contract::health::HealthState;
pub use contract::names::{ObjectKind as WorkloadKind, Operation};
pub use contract::result::ErrorKind as RunErrorKind;
pub use contract::variables::VariablesFormat;

/// Default `jobs.activeDeadlineSeconds`: one hour.
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 3600;
/// Largest `jobs.activeDeadlineSeconds`: one day.
pub const MAX_ACTIVE_DEADLINE_SECONDS: i64 = 86_400;
/// Default `jobs.lockTimeoutSeconds`: five minutes.
pub const DEFAULT_LOCK_TIMEOUT_SECONDS: i64 = 300;
/// Default successful and failed Job history limits.
pub const DEFAULT_JOBS_HISTORY_LIMIT: i32 = 3;
/// The runner ServiceAccount CAPTF creates in each namespace that needs one.
pub const DEFAULT_RUNNER_SERVICE_ACCOUNT: &str = "captf-runner";
/// Default `remediation.unhealthyThreshold`.
pub const DEFAULT_UNHEALTHY_THRESHOLD: i32 = 3;
/// Default `remediation.healthCheckIntervalSeconds`: five minutes.
pub const DEFAULT_HEALTH_CHECK_INTERVAL_SECONDS: i32 = 300;
/// Default `membershipRefreshIntervalSeconds` of a TerraformMachinePool.
pub const DEFAULT_MEMBERSHIP_REFRESH_INTERVAL_SECONDS: i32 = 60;
/// Most inline `spec.variables` keys.
pub const MAX_INLINE_VARIABLES: usize = 256;
/// Most `spec.variablesFrom` entries.
pub const MAX_VARIABLES_SOURCES: usize = 16;

/// Where the module comes from: the OCI image that bundles the module, its runtime and, optionally,
/// a provider mirror.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// The module image, by tag (`registry/repo:tag`) or digest (`registry/repo@sha256:...`).
    /// The image tag is the module version. It is executed as a Job with the identity's
    /// credentials, so referencing an image grants its publisher that access.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// When the kubelet pulls the module image. Defaults to `IfNotPresent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
}

impl Source {
    /// The pull policy in effect: the one set, else `IfNotPresent`.
    pub fn image_pull_policy_or_default(&self) -> PullPolicy {
        self.image_pull_policy.unwrap_or_default()
    }
}

/// When the kubelet pulls the module image. Defaults to `IfNotPresent`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum PullPolicy {
    /// Pull only when the image is not on the node yet.
    #[default]
    IfNotPresent,
    /// Pull every time a Job's pod starts.
    Always,
    /// Never pull; the image must already be on the node.
    Never,
}

impl PullPolicy {
    /// The Kubernetes spelling of the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Always => "Always",
            PullPolicy::Never => "Never",
        }
    }
}

/// Names the cluster-scoped TerraformClusterIdentity whose credentials the module runs with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityReference {
    /// Name of the TerraformClusterIdentity.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// How the Jobs of one object run: resources, deadlines, history, the runner ServiceAccount,
/// extra environment, pull Secrets, security contexts and placement (the book's Tuning Jobs).
///
/// On a TerraformMachine or TerraformMachinePool this is merged field by field over the
/// TerraformCluster's `spec.defaults.jobs`: a field the object sets wins; `env` merges by name and
/// `imagePullSecrets` is the union (the object's first); `resources`, `securityContext`,
/// `podSecurityContext` and each placement field (`nodeSelector`, `tolerations`, `affinity`,
/// `priorityClassName`, `topologySpreadConstraints`) are replaced whole. None of it is a module
/// input: a change applies to the next Job and re-applies nothing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.lockTimeoutSeconds) || !has(self.activeDeadlineSeconds) || self.lockTimeoutSeconds < self.activeDeadlineSeconds",
    "message": "lockTimeoutSeconds must be less than activeDeadlineSeconds"
}]))]
pub struct JobPolicy {
    /// Finished successful Jobs kept per operation (the newest success is always kept).
    /// Defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub successful_jobs_history_limit: Option<i32>,
    /// Finished failed Jobs kept per operation. It also caps retry backoff: once this many
    /// attempts of an operation failed in a row, retries wait the full ten minutes. Defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub failed_jobs_history_limit: Option<i32>,
    /// How long one Job may run before Kubernetes stops it, in seconds. Defaults to 3600; at most
    /// 86400. Must exceed `lockTimeoutSeconds` when both are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub active_deadline_seconds: Option<i64>,
    /// The ServiceAccount the Job's pod runs as. Defaults to `captf-runner`, which CAPTF creates
    /// and binds to the static `captf-runner` ClusterRole. Another ServiceAccount must exist and
    /// carry the label `captf.io/runner=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// How long the runtime waits for a held state lock, in seconds. Defaults to 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub lock_timeout_seconds: Option<i64>,
    /// Pull Secrets for the module image and the runner image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10))]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Resources of the module container. Defaults to requests of 250m CPU and 512Mi memory and a
    /// 2Gi memory limit, with no CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra environment of the module container. Names starting with `TF_` or `KUBE_`, and the
    /// names the Job sets itself (`HOME`, `TMPDIR`, `CHECKPOINT_DISABLE`), are admitted with a
    /// warning and left out of the Job (event `JobEnvDropped`): the runner owns the runtime's
    /// environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub env: Option<Vec<EnvVar>>,
    /// Security context of the module container. Defaults to no privilege escalation, all
    /// capabilities dropped and a read-only root filesystem. `privileged`,
    /// `allowPrivilegeEscalation: true` and `capabilities.add` are rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Security context of the Job's pod. Defaults to the `RuntimeDefault` seccomp profile and
    /// `fsGroup: 65532`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    /// Node labels the Job's pod must match to be scheduled (the pod's `nodeSelector`). Unset:
    /// any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints the Job's pod tolerates (the pod's `tolerations`), for example to run Jobs on
    /// dedicated or control-plane nodes. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub tolerations: Option<Vec<Toleration>>,
    /// Node and pod (anti-)affinity of the Job's pod (the pod's `affinity`). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// The PriorityClass of the Job's pod (the pod's `priorityClassName`); it must exist when
    /// the Job is created. Unset: the cluster's default priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// How the Job pods spread across topology domains (the pod's
    /// `topologySpreadConstraints`). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8))]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
}

impl JobPolicy {
    /// Successful Jobs kept per operation.
    pub fn successful_jobs_history_limit_or_default(&self) -> i32 {
        self.successful_jobs_history_limit
            .unwrap_or(DEFAULT_JOBS_HISTORY_LIMIT)
    }
    /// Failed Jobs kept per operation (and the retry backoff's cap point).
    pub fn failed_jobs_history_limit_or_default(&self) -> i32 {
        self.failed_jobs_history_limit
            .unwrap_or(DEFAULT_JOBS_HISTORY_LIMIT)
    }
    /// The Job deadline in seconds.
    pub fn active_deadline_seconds_or_default(&self) -> i64 {
        match self.active_deadline_seconds {
            Some(s) if s > 0 => s,
            _ => DEFAULT_ACTIVE_DEADLINE_SECONDS,
        }
    }
    /// The state-lock wait in seconds.
    pub fn lock_timeout_seconds_or_default(&self) -> i64 {
        self.lock_timeout_seconds
            .unwrap_or(DEFAULT_LOCK_TIMEOUT_SECONDS)
    }
    /// The runner ServiceAccount.
    pub fn service_account_name_or_default(&self) -> &str {
        self.service_account_name
            .as_deref()
            .unwrap_or(DEFAULT_RUNNER_SERVICE_ACCOUNT)
    }

    /// Merges `self` (the object's own policy) over `defaults` (the TerraformCluster's
    /// `spec.defaults.jobs`), field by field, as the book's Tuning Jobs describes.
    #[must_use]
    pub fn merged_over(&self, defaults: &JobPolicy) -> JobPolicy {
        let env = match (&self.env, &defaults.env) {
            (None, None) => None,
            // Tuning Jobs: the object's own entries first, then the defaults' entries whose
            // name they do not already use.
            (own, inherited) => {
                let mut merged: Vec<EnvVar> = own.clone().unwrap_or_default();
                for var in inherited.iter().flatten() {
                    if !merged.iter().any(|v| v.name == var.name) {
                        merged.push(var.clone());
                    }
                }
                Some(merged)
            }
        };
        let image_pull_secrets = match (&self.image_pull_secrets, &defaults.image_pull_secrets) {
            (None, None) => None,
            (own, inherited) => {
                let mut union: Vec<LocalObjectReference> = own.clone().unwrap_or_default();
                for s in inherited.iter().flatten() {
                    if !union.iter().any(|u| u.name == s.name) {
                        union.push(s.clone());
                    }
                }
                Some(union)
            }
        };
        JobPolicy {
            successful_jobs_history_limit: self
                .successful_jobs_history_limit
                .or(defaults.successful_jobs_history_limit),
            failed_jobs_history_limit: self
                .failed_jobs_history_limit
                .or(defaults.failed_jobs_history_limit),
            active_deadline_seconds: self
                .active_deadline_seconds
                .or(defaults.active_deadline_seconds),
            service_account_name: self
                .service_account_name
                .clone()
                .or_else(|| defaults.service_account_name.clone()),
            lock_timeout_seconds: self.lock_timeout_seconds.or(defaults.lock_timeout_seconds),
            image_pull_secrets,
            resources: self
                .resources
                .clone()
                .or_else(|| defaults.resources.clone()),
            env,
            security_context: self
                .security_context
                .clone()
                .or_else(|| defaults.security_context.clone()),
            pod_security_context: self
                .pod_security_context
                .clone()
                .or_else(|| defaults.pod_security_context.clone()),
            node_selector: self
                .node_selector
                .clone()
                .or_else(|| defaults.node_selector.clone()),
            tolerations: self
                .tolerations
                .clone()
                .or_else(|| defaults.tolerations.clone()),
            affinity: self.affinity.clone().or_else(|| defaults.affinity.clone()),
            priority_class_name: self
                .priority_class_name
                .clone()
                .or_else(|| defaults.priority_class_name.clone()),
            topology_spread_constraints: self
                .topology_spread_constraints
                .clone()
                .or_else(|| defaults.topology_spread_constraints.clone()),
        }
    }
}

/// What a drift check does with drift it finds: `Report` (the default) only records it,
/// `Remediate` re-applies the current inputs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DriftAction {
    /// Only record the drift (`DriftDetected=True/DriftReported`).
    #[default]
    Report,
    /// Re-apply the current inputs to remove the drift.
    Remediate,
}

/// Drift checking of a TerraformCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftPolicy {
    /// Seconds between drift checks, counted from the last successful apply. Defaults to the
    /// manager's `--drift-default-interval` (30 minutes); 0 turns drift checks and scheduled
    /// health sampling off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub interval_seconds: Option<i32>,
    /// What to do with drift found. Defaults to `Report`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<DriftAction>,
}

/// Drift checking of a TerraformMachinePool, which can never be turned off: its periodic drift
/// Job is what carries the refreshed instance count into a plan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolDriftPolicy {
    /// Seconds between drift checks; at least 1. Unset, it is inherited from the
    /// TerraformCluster's `spec.defaults.drift.intervalSeconds` unless that is 0, else the
    /// manager's `--drift-default-interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub interval_seconds: Option<i32>,
    /// What to do with drift found. Defaults to `Report`; never inherited from the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<DriftAction>,
}

/// Drift checking of a TerraformMachine (always report-only: a machine is replaced by a rollout,
/// not re-applied in place), and the drift defaults a TerraformCluster hands its machines and pools.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDriftPolicy {
    /// Seconds between drift checks. Unset, it is inherited from the TerraformCluster's
    /// `spec.defaults.drift.intervalSeconds`, else the manager's `--drift-default-interval`; 0
    /// turns drift checks off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub interval_seconds: Option<i32>,
}

/// How a TerraformMachine asks Cluster API to replace an unhealthy instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineRemediation {
    /// Annotate the owning Machine with `cluster.x-k8s.io/remediate-machine` once the instance
    /// has been unhealthy for `unhealthyThreshold` consecutive samples. Defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotate_machine: Option<bool>,
    /// Consecutive unhealthy samples before remediation is requested. Defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub unhealthy_threshold: Option<i32>,
    /// Seconds between health refreshes while `annotateMachine` is set, independent of drift.
    /// Defaults to 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 86400))]
    pub health_check_interval_seconds: Option<i32>,
}

impl MachineRemediation {
    /// Whether CAPTF annotates the owning Machine.
    pub fn annotate_machine_or_default(&self) -> bool {
        self.annotate_machine.unwrap_or(false)
    }
    /// Unhealthy samples before remediation.
    pub fn unhealthy_threshold_or_default(&self) -> i32 {
        match self.unhealthy_threshold {
            Some(t) if t > 0 => t,
            _ => DEFAULT_UNHEALTHY_THRESHOLD,
        }
    }
    /// Seconds between health refreshes.
    pub fn health_check_interval_seconds_or_default(&self) -> i32 {
        self.health_check_interval_seconds
            .unwrap_or(DEFAULT_HEALTH_CHECK_INTERVAL_SECONDS)
    }
}

/// A ConfigMap or Secret in the object's namespace whose keys become module variables. It must
/// carry the label `captf.io/variables=true`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.configMapRef) != has(self.secretRef)",
    "message": "exactly one of configMapRef or secretRef must be set"
}]))]
pub struct VariablesSource {
    /// A ConfigMap to read variables from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<VariablesObjectReference>,
    /// A Secret to read variables from; its values are passed to the module as sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<VariablesObjectReference>,
    /// When true, a missing source is skipped instead of blocking the object. Defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// How values are read. Defaults to `String`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<VariablesFormat>,
}

/// The name of a ConfigMap or Secret in the object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct VariablesObjectReference {
    /// Name of the ConfigMap or Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = schema::DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
}

/// Whether a TerraformCluster applies changes on its own (`Automatic`, the default) or only
/// after a reviewed plan is approved (`Manual`; the first apply is never gated).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ApplyPolicy {
    /// Apply every change (deletes and replacements still need the destructive-plan approval).
    #[default]
    Automatic,
    /// Run a plan first and apply only once `captf.io/approve-plan` names its hash. The first
    /// apply (no state yet) is never gated.
    Manual,
}

/// A host and port where a Kubernetes API server is reachable (Cluster API's `APIEndpoint`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ApiEndpoint {
    /// The hostname or IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub host: Option<String>,
    /// The port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

impl ApiEndpoint {
    /// Cluster API's validity rule: a non-empty host and a non-zero port.
    pub fn is_valid(&self) -> bool {
        self.host.as_deref().is_some_and(|h| !h.is_empty()) && self.port.is_some_and(|p| p != 0)
    }
    /// Whether a host has been set (after which `controlPlaneEndpoint` is immutable).
    pub fn has_host(&self) -> bool {
        self.host.as_deref().is_some_and(|h| !h.is_empty())
    }
}

/// A CPU architecture, for Cluster Autoscaler scale-from-zero.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// x86-64.
    Amd64,
    /// 64-bit ARM.
    Arm64,
    /// IBM Z.
    S390x,
    /// 64-bit POWER, little endian.
    Ppc64le,
}
