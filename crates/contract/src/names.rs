//! Every deterministic name CAPTF gives a Kubernetes object: the state suffix and the backend's
//! Secret and Lease names, the durable and per-run inputs Secrets, credential mirrors, run and
//! cluster leases, state backups, Job names, and the hashed `owner-name` label (spec: Terraform
//! State "Secret names and the suffix", The Reconcile Lifecycle "Job names and history", Job
//! Inputs §1 and §8, Secrets inventory).
//!
//! All functions are pure: the same object always gets the same names, on any manager, after any
//! `clusterctl move`.

use sha2::{Digest, Sha256};
use std::fmt;

/// The longest name a Secret or Lease can have (a DNS subdomain).
pub const MAX_OBJECT_NAME: usize = 253;
/// The longest label value.
pub const MAX_LABEL_VALUE: usize = 63;
/// The longest Job name CAPTF creates: the Job controller appends `-xxxxx` to make pod names,
/// and the `job-name` label the pods carry must stay within 63 characters.
pub const MAX_JOB_NAME: usize = 57;
/// How many hex characters of a SHA-256 the suffix and name fallbacks keep.
pub const NAME_HASH_HEX: usize = 16;
/// How many hex characters the Job name's trailing hash keeps.
pub const JOB_HASH_HEX: usize = 6;

/// The three workload kinds CAPTF runs modules for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// `TerraformCluster`, the cluster role.
    Cluster,
    /// `TerraformMachine`, the machine role.
    Machine,
    /// `TerraformMachinePool`, the machinepool role.
    MachinePool,
}

impl ObjectKind {
    /// The Kubernetes kind.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Cluster => "TerraformCluster",
            Self::Machine => "TerraformMachine",
            Self::MachinePool => "TerraformMachinePool",
        }
    }

    /// The short kind code used in names: `c`, `m` or `mp`.
    pub fn short(self) -> &'static str {
        match self {
            Self::Cluster => "c",
            Self::Machine => "m",
            Self::MachinePool => "mp",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// An operation a Job runs: `apply`, `destroy`, `drift`, `refresh`, `restore` or `plan`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Apply the rendered inputs.
    Apply,
    /// Destroy everything the state records.
    Destroy,
    /// Refresh, then plan to find drift.
    Drift,
    /// `apply -refresh-only`.
    Refresh,
    /// Push a state backup back into the backend.
    Restore,
    /// Plan only, for approval.
    Plan,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Self; 6] = [
        Self::Apply,
        Self::Destroy,
        Self::Drift,
        Self::Refresh,
        Self::Restore,
        Self::Plan,
    ];

    /// The spelling used in status, labels and Job names.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "apply",
            Self::Destroy => "destroy",
            Self::Drift => "drift",
            Self::Refresh => "refresh",
            Self::Restore => "restore",
            Self::Plan => "plan",
        }
    }

    /// Parses the exact spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == s)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn sha256_hex(input: &str) -> String {
    hex::encode(Sha256::digest(input.as_bytes()))
}

fn short_hash(input: &str, hex_len: usize) -> String {
    let mut full = sha256_hex(input);
    full.truncate(hex_len);
    full
}

/// The namespace the provider's components run in by default.
pub const PROVIDER_NAMESPACE: &str = "captf-system";
/// The manager's ServiceAccount (its identity towards the API server).
pub const MANAGER_SERVICE_ACCOUNT: &str = "captf-controller-manager";

/// The user name a ServiceAccount authenticates as: `system:serviceaccount:<namespace>:<name>`.
/// The webhook compares a request's user against the manager's to let only the manager write a
/// TerraformMachine's `spec.providerID` the first time.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The backend's `secret_suffix` for an object: the first 16 hex characters of
/// `sha256("<namespace>/<kind>/<name>")`, a hyphen and the kind code. It ends in a letter, so it
/// never ends in `-<digits>` (which the backend would read as a chunk index); derived from
/// namespace, kind and name only, so it survives `clusterctl move`.
pub fn state_suffix(namespace: &str, kind: ObjectKind, name: &str) -> String {
    let hash = short_hash(
        &format!("{namespace}/{}/{name}", kind.kind()),
        NAME_HASH_HEX,
    );
    format!("{hash}-{}", kind.short())
}

/// The base state Secret, `tfstate-default-<suffix>`.
pub fn state_secret_name(suffix: &str) -> String {
    format!("tfstate-default-{suffix}")
}

/// A state chunk Secret: the base name for index 0, `<base>-part-<index>` after it.
pub fn chunk_secret_name(base: &str, index: usize) -> String {
    if index == 0 {
        base.to_owned()
    } else {
        format!("{base}-part-{index}")
    }
}

/// The backend's lock Lease, `lock-tfstate-default-<suffix>`.
pub fn state_lock_lease_name(suffix: &str) -> String {
    format!("lock-{}", state_secret_name(suffix))
}

/// The object's run lease, `captf-run-<suffix>`.
pub fn run_lease_name(suffix: &str) -> String {
    format!("captf-run-{suffix}")
}

/// A cluster's write lease, `captf-cluster-<hash>`, where the hash is the first 16 hex characters
/// of `sha256("<namespace>/<cluster name>")`: one Lease per Cluster, whatever its name's length.
pub fn cluster_lease_name(namespace: &str, cluster_name: &str) -> String {
    format!(
        "captf-cluster-{}",
        short_hash(&format!("{namespace}/{cluster_name}"), NAME_HASH_HEX)
    )
}

/// The base Secret of a state backup, `captf-state-backup-<suffix>-<serial>` (chunks follow with
/// [`chunk_secret_name`]).
pub fn state_backup_secret_name(suffix: &str, serial: u64) -> String {
    format!("captf-state-backup-{suffix}-{serial}")
}

/// `<prefix><name>`, or `<prefix><16 hex of sha256(name)>` when that would exceed 253 characters.
fn prefixed_or_hashed(prefix: &str, name: &str) -> String {
    if prefix.len() + name.len() <= MAX_OBJECT_NAME {
        format!("{prefix}{name}")
    } else {
        format!("{prefix}{}", short_hash(name, NAME_HASH_HEX))
    }
}

/// The durable inputs Secret, `captf-inputs-<c|m|mp>-<name>` (prefix and hash when overlong).
pub fn durable_inputs_secret_name(kind: ObjectKind, name: &str) -> String {
    prefixed_or_hashed(&format!("captf-inputs-{}-", kind.short()), name)
}

/// The plan-text Secret of a TerraformCluster under `applyPolicy: Manual`,
/// `captf-plan-<c|m|mp>-<name>` (prefix and hash when overlong): the pending plan rendered as
/// text for its reviewer (Plan Approval, "Reading the plan").
pub fn plan_text_secret_name(kind: ObjectKind, name: &str) -> String {
    prefixed_or_hashed(&format!("captf-plan-{}-", kind.short()), name)
}

/// The per-run inputs Secret of a Job, `captf-run-<job name>`.
pub fn run_secret_name(job_name: &str) -> String {
    prefixed_or_hashed("captf-run-", job_name)
}

/// A credential mirror Secret, `captf-creds-<identity>` (prefix and hash when overlong).
pub fn credential_mirror_secret_name(identity: &str) -> String {
    prefixed_or_hashed("captf-creds-", identity)
}

/// The `captf.infrastructure.cluster.x-k8s.io/owner-name` label value: the object name, or the
/// first 16 hex characters of its SHA-256 when it is longer than a label value may be.
pub fn owner_name_label(name: &str) -> String {
    if name.len() <= MAX_LABEL_VALUE {
        name.to_owned()
    } else {
        short_hash(name, NAME_HASH_HEX)
    }
}

/// What a Job's name is derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobNameParts<'a> {
    /// The object's kind.
    pub kind: ObjectKind,
    /// The object's name.
    pub name: &'a str,
    /// The operation.
    pub operation: Operation,
    /// One more than the highest attempt retained for this operation (at least 1).
    pub attempt: u32,
    /// The inputs hash the Job renders.
    pub inputs_hash: &'a str,
    /// For refresh and drift, a tick that changes each time the operation last succeeded; for a
    /// drift-remediation apply and a restore, their own tick. `None` for a plain apply, destroy
    /// or plan.
    pub tick: Option<&'a str>,
}

/// A Job's name: `captf-<kindshort>-<name>-<operation>-a<attempt>-<hash6>`, where `hash6` is the
/// first six hex characters of `sha256("<inputs hash>\n<operation>\n<attempt>\n<tick>")` (an
/// absent tick is the empty string). When that exceeds 57 characters the object name is replaced
/// by the first 16 hex characters of its SHA-256.
pub fn job_name(parts: &JobNameParts<'_>) -> String {
    let hash6 = short_hash(
        &format!(
            "{}\n{}\n{}\n{}",
            parts.inputs_hash,
            parts.operation.as_str(),
            parts.attempt,
            parts.tick.unwrap_or("")
        ),
        JOB_HASH_HEX,
    );
    let build = |name: &str| {
        format!(
            "captf-{}-{name}-{}-a{}-{hash6}",
            parts.kind.short(),
            parts.operation.as_str(),
            parts.attempt
        )
    };
    let plain = build(parts.name);
    if plain.len() <= MAX_JOB_NAME {
        plain
    } else {
        build(&short_hash(parts.name, NAME_HASH_HEX))
    }
}
