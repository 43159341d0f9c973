//! Every name CAPTF reads or writes on Kubernetes objects, once: annotations, labels, finalizers,
//! condition types, condition reasons and event reasons (the book's Conditions, Events and
//! Annotations/Labels/Finalizers reference pages).
//!
//! Code elsewhere refers to these constants instead of spelling a key again, so a name has exactly
//! one definition and a reader can find every use of it.

/// Annotations CAPTF reads or writes.
pub mod annotations {
    // --- Set by an operator on Terraform* objects -------------------------------------------

    /// On a TerraformCluster, TerraformMachine or TerraformMachinePool: the inputs hash whose
    /// plan may delete or replace resources. Removed after the approved apply succeeds.
    pub const APPROVE_DESTRUCTIVE_PLAN: &str = "captf.io/approve-destructive-plan";
    /// On a TerraformCluster with `applyPolicy: Manual`: the `status.plan.planHash` approved for
    /// the next apply. Removed after the approved apply succeeds.
    pub const APPROVE_PLAN: &str = "captf.io/approve-plan";
    /// On a Terraform* object: the serial of a state backup to restore. Removed after success.
    pub const RESTORE_STATE: &str = "captf.io/restore-state";
    /// On a Terraform* object: any new value asks for the object's check now (a drift check; a
    /// refresh for a TerraformMachinePool), once per value (`status.lastHandledRequestedAt`). On
    /// the Job started for it: the value it answers.
    pub const REQUESTED_AT: &str = "captf.io/requested-at";

    // --- Written by CAPTF ------------------------------------------------------------------

    /// The inputs hash: on the base state Secret (adopted state), backup chunk 0 and every Job.
    pub const INPUTS_HASH: &str = "captf.io/inputs-hash";
    /// On a TerraformCluster: where `spec.controlPlaneEndpoint` came from (`user` or `module`).
    pub const ENDPOINT_SOURCE: &str = "captf.io/endpoint-source";
    /// On a durable inputs Secret and a credential mirror: the TerraformClusterIdentity name.
    pub const IDENTITY: &str = "captf.io/identity";
    /// On a durable inputs Secret: `spec.source.image` as it was last written.
    pub const IMAGE: &str = "captf.io/image";
    /// On a durable inputs Secret: the resolved image digest pinned after an apply.
    pub const IMAGE_DIGEST: &str = "captf.io/image-digest";
    /// On a credential mirror: hash of the source Secret's data, to detect a change.
    pub const SOURCE_HASH: &str = "captf.io/source-hash";
    /// On a CAPI Machine: CAPTF set `cluster.x-k8s.io/remediate-machine`, so it may clear it.
    pub const REMEDIATION_REQUESTED: &str = "captf.io/remediation-requested";
    /// On a CAPTF Lease: the holder's operation.
    pub const LEASE_OP: &str = "captf.io/lease-op";
    /// On a CAPTF Lease: when the holder acquired it.
    pub const LEASE_ACQUIRED_AT: &str = "captf.io/lease-acquired-at";

    // --- On run Jobs ------------------------------------------------------------------------

    /// A finished Job whose result is already recorded in status.
    pub const BOOKKEPT: &str = "captf.io/bookkept";
    /// A Job that ended without a clean result (its pod was stopped from outside).
    pub const INTERRUPTED: &str = "captf.io/interrupted";
    /// An apply Job that remediates drift.
    pub const DRIFT_REMEDIATION: &str = "captf.io/drift-remediation";
    /// An apply Job stopped before an unapproved destructive plan.
    pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "captf.io/destructive-plan-blocked";
    /// A Manual apply Job whose new plan no longer matched the approved one.
    pub const PLAN_CHANGED: &str = "captf.io/plan-changed";
    /// A plan Job whose result could not be read.
    pub const PLAN_UNREADABLE: &str = "captf.io/plan-unreadable";
    /// The plan hash an apply Job was created for.
    pub const APPROVED_PLAN: &str = "captf.io/approved-plan";
    /// On a plan-text Secret: the plan hash of the text it holds.
    pub const PLAN_HASH: &str = "captf.io/plan-hash";
    /// On a restore Job: the backup serial being restored.
    pub const RESTORE_SERIAL: &str = "captf.io/restore-serial";

    // --- On state backup chunk Secrets ------------------------------------------------------

    /// The backed-up state serial.
    pub const STATE_BACKUP_SERIAL: &str = "captf.io/state-backup-serial";
    /// The state lineage at backup time.
    pub const STATE_BACKUP_LINEAGE: &str = "captf.io/state-backup-lineage";
    /// When the backup was taken.
    pub const STATE_BACKUP_TAKEN_AT: &str = "captf.io/state-backup-taken-at";
    /// The Job that produced the backed-up state.
    pub const STATE_BACKUP_SOURCE_JOB: &str = "captf.io/state-backup-source-job";
    /// Digest of the backed-up content, for conflict detection.
    pub const STATE_BACKUP_DIGEST: &str = "captf.io/state-backup-digest";
    /// Managed-resource count of the backed-up state.
    pub const STATE_BACKUP_RESOURCES: &str = "captf.io/state-backup-resources";
    /// Groups the chunks of one backup.
    pub const STATE_BACKUP_SET: &str = "captf.io/state-backup-set";
    /// Index of this chunk within its backup.
    pub const STATE_BACKUP_CHUNK: &str = "captf.io/state-backup-chunk";
    /// Number of chunks of the backup.
    pub const STATE_BACKUP_CHUNKS: &str = "captf.io/state-backup-chunks";

    // --- Cluster API and clusterctl ----------------------------------------------------------

    /// Set by CAPTF while a Job is active, so `clusterctl move` waits.
    pub const BLOCK_MOVE: &str = "clusterctl.cluster.x-k8s.io/block-move";
    /// Set by clusterctl right before it deletes a moved object.
    pub const DELETE_FOR_MOVE: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
    /// Marks an externally managed TerraformCluster: CAPTF leaves it alone.
    pub const MANAGED_BY: &str = "cluster.x-k8s.io/managed-by";
    /// Pauses reconciliation of the object carrying it.
    pub const PAUSED: &str = "cluster.x-k8s.io/paused";
    /// The template an object was cloned from (feeds the `captf.io/template` tag).
    pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
    /// The group-kind of the template an object was cloned from.
    pub const CLONED_FROM_GROUPKIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";
    /// On a Machine: asks its owner to remediate (replace) it.
    pub const REMEDIATE_MACHINE: &str = "cluster.x-k8s.io/remediate-machine";
    /// On a MachinePool: who manages replicas (`captf` when CAPTF writes them back).
    pub const REPLICAS_MANAGED_BY: &str = "cluster.x-k8s.io/replicas-managed-by";
    /// The value CAPTF writes into `cluster.x-k8s.io/replicas-managed-by`.
    pub const REPLICAS_MANAGED_BY_CAPTF: &str = "captf";
    /// Cluster Autoscaler lower bound on a MachinePool.
    pub const AUTOSCALER_MIN_SIZE: &str =
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
    /// Cluster Autoscaler upper bound on a MachinePool.
    pub const AUTOSCALER_MAX_SIZE: &str =
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
    /// Set by the ClusterClass topology controller on server-side-apply dry-run requests.
    pub const TOPOLOGY_DRY_RUN: &str = "topology.cluster.x-k8s.io/dry-run";
    /// On a Job's pod template: keeps Cluster Autoscaler from evicting a running module.
    pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
    /// On the backend's lock Lease: the runtime's lock info JSON.
    pub const TERRAFORM_LOCK_INFO: &str = "app.terraform.io/lock-info";
    /// On the webhook configuration: cert-manager injects the CA bundle from this Certificate.
    pub const CERT_MANAGER_INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";
}

/// Labels CAPTF reads or writes.
pub mod labels {
    /// On everything CAPTF owns (state Secrets, Leases, mirrors, Jobs, runner SA/RoleBinding).
    pub const MANAGED: &str = "captf.io/managed";
    /// On a ConfigMap or Secret an object may read variables from (`true`).
    pub const VARIABLES: &str = "captf.io/variables";
    /// On a custom runner ServiceAccount that opts in (`true`).
    pub const RUNNER: &str = "captf.io/runner";
    /// On a credential mirror Secret.
    pub const MIRRORED: &str = "captf.io/mirrored";
    /// On a CAPTF Lease: `run` or `cluster`.
    pub const LEASE: &str = "captf.io/lease";
    /// On a state backup chunk Secret.
    pub const STATE_BACKUP: &str = "captf.io/state-backup";
    /// On a state backup chunk Secret: the suffix of the state it copies.
    pub const STATE_BACKUP_SUFFIX: &str = "captf.io/state-backup-suffix";
    /// The owning Terraform* kind (state Secrets, Leases, Jobs and their pods).
    pub const OWNER_KIND: &str = "captf.infrastructure.cluster.x-k8s.io/owner-kind";
    /// The owning Terraform* object's name, hashed to 16 hex characters when longer than 63.
    pub const OWNER_NAME: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";
    /// A Job's operation.
    pub const OP: &str = "captf.infrastructure.cluster.x-k8s.io/op";
    /// A Job's attempt number.
    pub const ATTEMPT: &str = "captf.infrastructure.cluster.x-k8s.io/attempt";

    /// The Cluster an object belongs to.
    pub const CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
    /// On a control-plane Machine.
    pub const CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
    /// Selects the objects a manager started with `--watch-filter` reconciles.
    pub const WATCH_FILTER: &str = "cluster.x-k8s.io/watch-filter";
    /// On every component and CRD of the provider.
    pub const PROVIDER: &str = "cluster.x-k8s.io/provider";
    /// The value of [`PROVIDER`] for CAPTF.
    pub const PROVIDER_NAME: &str = "infrastructure-terraform";
    /// On a CRD: the Cluster API contract version it implements, mapped to the served versions.
    pub const CONTRACT_V1BETA2: &str = "cluster.x-k8s.io/v1beta2";
    /// Makes `clusterctl move` take an object with no owner chain to a Cluster (value `""`).
    pub const MOVE: &str = "clusterctl.cluster.x-k8s.io/move";
    /// Makes `clusterctl move` take an object and everything it owns.
    pub const MOVE_HIERARCHY: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";
    /// Marks components installed by clusterctl.
    pub const CLUSTERCTL: &str = "clusterctl.cluster.x-k8s.io";

    /// Set by the `kubernetes` state backend on its state Secrets.
    pub const TFSTATE: &str = "tfstate";
    /// Set by the `kubernetes` state backend: the backend's `secret_suffix`.
    pub const TFSTATE_SECRET_SUFFIX: &str = "tfstateSecretSuffix";
    /// Set by the `kubernetes` state backend: the workspace (always `default` for CAPTF).
    pub const TFSTATE_WORKSPACE: &str = "tfstateWorkspace";
}

/// Finalizers; TerraformClusterIdentity has none.
pub mod finalizers {
    use contract::names::ObjectKind;

    /// The finalizer a workload kind holds.
    pub fn of(kind: ObjectKind) -> &'static str {
        match kind {
            ObjectKind::Cluster => TERRAFORM_CLUSTER,
            ObjectKind::Machine => TERRAFORM_MACHINE,
            ObjectKind::MachinePool => TERRAFORM_MACHINE_POOL,
        }
    }

    /// Held on a TerraformCluster until its Terraform-managed resources are destroyed.
    pub const TERRAFORM_CLUSTER: &str = "terraformcluster.infrastructure.cluster.x-k8s.io";
    /// Held on a TerraformMachine until its Terraform-managed resources are destroyed.
    pub const TERRAFORM_MACHINE: &str = "terraformmachine.infrastructure.cluster.x-k8s.io";
    /// Held on a TerraformMachinePool until its Terraform-managed resources are destroyed.
    pub const TERRAFORM_MACHINE_POOL: &str = "terraformmachinepool.infrastructure.cluster.x-k8s.io";
}

/// Condition types.
pub mod conditions {
    /// The summary Cluster API mirrors into `InfrastructureReady`.
    pub const READY: &str = "Ready";
    /// Owner, inputs and variable sources resolved.
    pub const DEPENDENCIES_READY: &str = "DependenciesReady";
    /// The identity exists, allows the namespace and its Secret exists.
    pub const IDENTITY_ALLOWED: &str = "IdentityAllowed";
    /// The namespace's credential mirror is up to date.
    pub const CREDENTIALS_MIRRORED: &str = "CredentialsMirrored";
    /// The runner ServiceAccount and RoleBinding are in place.
    pub const RUNNER_RBAC_READY: &str = "RunnerRBACReady";
    /// The last apply or destroy Job's outcome.
    pub const APPLY_JOB_SUCCEEDED: &str = "ApplyJobSucceeded";
    /// Whether the state could be read.
    pub const STATE_READABLE: &str = "StateReadable";
    /// The last restore Job's outcome.
    pub const RESTORE_JOB_SUCCEEDED: &str = "RestoreJobSucceeded";
    /// Whether the module's outputs satisfy the contract.
    pub const OUTPUTS_VALID: &str = "OutputsValid";
    /// The module's `health` output.
    pub const INFRASTRUCTURE_HEALTHY: &str = "InfrastructureHealthy";
    /// The last drift or refresh Job's outcome.
    pub const DRIFT_JOB_SUCCEEDED: &str = "DriftJobSucceeded";
    /// Drift found (negative polarity: True is the problem).
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    /// A TerraformCluster's deletion waits for dependents (negative polarity).
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// A TerraformCluster knows a valid control-plane endpoint.
    pub const ENDPOINT_AVAILABLE: &str = "EndpointAvailable";
    /// A TerraformMachinePool writes its observed replicas back.
    pub const AUTOSCALING_ACTIVE: &str = "AutoscalingActive";
    /// A TerraformMachineTemplate resolved capacity from its image's labels.
    pub const CAPACITY_RESOLVED: &str = "CapacityResolved";
    /// The object or its Cluster is paused.
    pub const PAUSED: &str = "Paused";
    /// The object is being deleted (negative polarity).
    pub const DELETING: &str = "Deleting";

    /// The conditions that feed `Ready` before `status.initialization.provisioned` latches
    /// (every workload kind).
    pub const READY_INPUTS_BEFORE_PROVISIONED: &[&str] = &[
        DEPENDENCIES_READY,
        IDENTITY_ALLOWED,
        CREDENTIALS_MIRRORED,
        RUNNER_RBAC_READY,
        APPLY_JOB_SUCCEEDED,
        STATE_READABLE,
        OUTPUTS_VALID,
        INFRASTRUCTURE_HEALTHY,
        DELETING,
    ];
    /// The conditions that feed a provisioned TerraformCluster's or TerraformMachine's `Ready`.
    pub const READY_INPUTS_PROVISIONED: &[&str] = &[INFRASTRUCTURE_HEALTHY, DELETING];
    /// The conditions that feed a provisioned TerraformMachinePool's `Ready` (a pool re-applies,
    /// so its apply failures must show).
    pub const READY_INPUTS_PROVISIONED_POOL: &[&str] =
        &[INFRASTRUCTURE_HEALTHY, APPLY_JOB_SUCCEEDED, DELETING];
    /// Conditions whose `True` status is the problem.
    pub const NEGATIVE_POLARITY: &[&str] = &[DRIFT_DETECTED, DELETION_BLOCKED, DELETING];
    /// Conditions that report a state the user chose rather than a good or a bad one: neither
    /// status is trouble (`Paused`: the object or its Cluster is paused, or not).
    pub const NO_POLARITY: &[&str] = &[PAUSED];
}

/// Condition reasons, grouped by the condition that uses them. A reason shared by several
/// conditions (for example `WaitingForRunLease`) is defined once, in the first group using it.
pub mod reasons {
    // Ready
    pub const READY: &str = "Ready";
    pub const NOT_READY: &str = "NotReady";
    pub const READY_UNKNOWN: &str = "ReadyUnknown";
    pub const SECRET_FOUND: &str = "SecretFound";
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";

    // DependenciesReady
    pub const DEPENDENCIES_READY: &str = "DependenciesReady";
    pub const CLUSTER_NOT_TERRAFORM: &str = "ClusterNotTerraform";
    pub const OWNER_MISMATCH: &str = "OwnerMismatch";
    pub const OWNER_NOT_FOUND: &str = "OwnerNotFound";
    pub const VARIABLES_INVALID: &str = "VariablesInvalid";
    pub const VARIABLES_SOURCE_NOT_FOUND: &str = "VariablesSourceNotFound";
    pub const WAITING_FOR_OWNER_MACHINE: &str = "WaitingForOwnerMachine";
    pub const WAITING_FOR_OWNER_MACHINE_POOL: &str = "WaitingForOwnerMachinePool";
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    pub const WAITING_FOR_CLUSTER_EXPORTS: &str = "WaitingForClusterExports";
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    pub const WAITING_FOR_OWNER: &str = "WaitingForOwner";

    // IdentityAllowed
    pub const IDENTITY_ALLOWED: &str = "IdentityAllowed";
    pub const IDENTITY_NOT_FOUND: &str = "IdentityNotFound";
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    pub const IDENTITY_CHECK_FAILED: &str = "IdentityCheckFailed";
    pub const SERVICE_ACCOUNT_CONFLICT: &str = "ServiceAccountConflict";

    // CredentialsMirrored
    pub const MIRRORED: &str = "Mirrored";
    pub const MIRROR_FAILED: &str = "MirrorFailed";
    pub const MIRROR_PENDING: &str = "MirrorPending";
    /// Also the identity's own `Ready` reason when it is keyless.
    pub const WORKLOAD_IDENTITY: &str = "WorkloadIdentity";

    // RunnerRBACReady
    pub const RBAC_READY: &str = "RBACReady";
    pub const RBAC_FAILED: &str = "RBACFailed";
    pub const SERVICE_ACCOUNT_NOT_OPTED_IN: &str = "ServiceAccountNotOptedIn";

    // ApplyJobSucceeded
    pub const APPLY_SUCCEEDED: &str = "ApplySucceeded";
    pub const DESTROY_SUCCEEDED: &str = "DestroySucceeded";
    pub const APPLY_FAILED: &str = "ApplyFailed";
    pub const DESTROY_FAILED: &str = "DestroyFailed";
    pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "DestructivePlanBlocked";
    pub const IDENTITY_NOT_ALLOWED: &str = "IdentityNotAllowed";
    pub const IMAGE_INVALID: &str = "ImageInvalid";
    pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";
    pub const INPUTS_TOO_LARGE: &str = "InputsTooLarge";
    pub const JOB_DEADLINE_EXCEEDED: &str = "JobDeadlineExceeded";
    pub const NO_APPLY_YET: &str = "NoApplyYet";
    pub const PLAN_AWAITING_APPROVAL: &str = "PlanAwaitingApproval";
    pub const PLAN_CHANGED: &str = "PlanChanged";
    pub const WAITING_FOR_CLUSTER_OPERATION: &str = "WaitingForClusterOperation";
    pub const WAITING_FOR_MACHINE_OPERATIONS: &str = "WaitingForMachineOperations";
    pub const WAITING_FOR_RUN_LEASE: &str = "WaitingForRunLease";

    // StateReadable
    pub const STATE_READ: &str = "StateRead";
    pub const STATE_CORRUPT: &str = "StateCorrupt";
    pub const STATE_ENCRYPTED: &str = "StateEncrypted";
    pub const STATE_INCONSISTENT: &str = "StateInconsistent";
    pub const STATE_LOCKED: &str = "StateLocked";
    pub const STATE_LOST: &str = "StateLost";
    pub const STATE_NOT_FOUND: &str = "StateNotFound";

    // RestoreJobSucceeded
    pub const STATE_RESTORED: &str = "StateRestored";
    pub const RESTORE_BACKUP_NOT_FOUND: &str = "RestoreBackupNotFound";
    pub const RESTORE_FAILED: &str = "RestoreFailed";

    // OutputsValid
    pub const OUTPUTS_VALID: &str = "OutputsValid";
    pub const INSTANCES_TRUNCATED: &str = "InstancesTruncated";
    pub const FAILURE_DOMAIN_MISMATCH: &str = "FailureDomainMismatch";
    pub const OUTPUTS_INVALID: &str = "OutputsInvalid";
    pub const OUTPUTS_MISSING: &str = "OutputsMissing";
    pub const PROVIDER_ID_CHANGED: &str = "ProviderIDChanged";
    pub const OUTPUTS_PENDING: &str = "OutputsPending";

    // InfrastructureHealthy
    pub const HEALTHY: &str = "Healthy";
    pub const INSTANCE_DEGRADED: &str = "InstanceDegraded";
    pub const INSTANCE_PENDING: &str = "InstancePending";
    pub const INSTANCE_STOPPED: &str = "InstanceStopped";
    pub const INSTANCE_TERMINATED: &str = "InstanceTerminated";
    pub const INSTANCE_UNHEALTHY: &str = "InstanceUnhealthy";
    pub const PROVISIONING: &str = "Provisioning";
    pub const HEALTH_UNKNOWN: &str = "HealthUnknown";
    pub const WAITING_FOR_PROVISIONING: &str = "WaitingForProvisioning";

    // DriftJobSucceeded
    pub const DRIFT_CHECKED: &str = "DriftChecked";
    pub const DRIFT_JOB_DEADLINE_EXCEEDED: &str = "DriftJobDeadlineExceeded";
    pub const DRIFT_JOB_FAILED: &str = "DriftJobFailed";
    pub const DRIFT_JOB_RUNNING: &str = "DriftJobRunning";
    pub const DRIFT_NOT_CHECKED: &str = "DriftNotChecked";

    // DriftDetected
    pub const DRIFT_PENDING: &str = "DriftPending";
    pub const DRIFT_REMEDIATING: &str = "DriftRemediating";
    pub const DRIFT_REPORTED: &str = "DriftReported";
    pub const NO_DRIFT: &str = "NoDrift";

    // DeletionBlocked
    pub const DEPENDENTS_EXIST: &str = "DependentsExist";
    pub const NOT_BLOCKED: &str = "NotBlocked";

    // EndpointAvailable
    pub const ENDPOINT_AVAILABLE: &str = "EndpointAvailable";
    pub const WAITING_FOR_ENDPOINT: &str = "WaitingForEndpoint";

    // AutoscalingActive
    pub const REPLICAS_MANAGED_BY_MODULE: &str = "ReplicasManagedByModule";
    pub const AUTOSCALING_ANNOTATIONS_INVALID: &str = "AutoscalingAnnotationsInvalid";
    pub const AUTOSCALING_DISABLED: &str = "AutoscalingDisabled";

    // CapacityResolved
    pub const CAPACITY_NOT_DECLARED: &str = "CapacityNotDeclared";
    pub const CAPACITY_RESOLVED: &str = "CapacityResolved";
    pub const CAPACITY_LABEL_INVALID: &str = "CapacityLabelInvalid";
    pub const IMAGE_INSPECT_FAILED: &str = "ImageInspectFailed";

    // Paused
    pub const PAUSED: &str = "Paused";
    pub const NOT_PAUSED: &str = "NotPaused";

    // Deleting
    pub const DELETING: &str = "Deleting";
    pub const DELETION_COMPLETED: &str = "DeletionCompleted";
    pub const NOT_DELETING: &str = "NotDeleting";
}

/// Event reasons: the manager's (on Terraform* objects) and the runner's (from inside a Job).
pub mod events {
    pub const CAPACITY_RESOLVED: &str = "CapacityResolved";
    pub const CONDITION_CHANGED: &str = "ConditionChanged";
    pub const CONTROL_PLANE_ENDPOINT_SET: &str = "ControlPlaneEndpointSet";
    pub const DELETION_STARTED: &str = "DeletionStarted";
    pub const DESTROYED: &str = "Destroyed";
    pub const DESTRUCTIVE_PLAN_APPROVAL_CONSUMED: &str = "DestructivePlanApprovalConsumed";
    pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "DestructivePlanBlocked";
    pub const DIGEST_PINNED: &str = "DigestPinned";
    pub const DIGEST_UNKNOWN: &str = "DigestUnknown";
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    pub const DRIFT_REMEDIATION_STARTED: &str = "DriftRemediationStarted";
    pub const DRIFT_RESOLVED: &str = "DriftResolved";
    pub const FAILURE_DOMAINS_CHANGED: &str = "FailureDomainsChanged";
    pub const FINALIZER_REMOVED: &str = "FinalizerRemoved";
    pub const FORCE_UNLOCKED: &str = "ForceUnlocked";
    pub const IDENTITY_NOT_ALLOWED: &str = "IdentityNotAllowed";
    pub const IDENTITY_SECRET_FOUND: &str = "IdentitySecretFound";
    pub const IDENTITY_SECRET_NOT_FOUND: &str = "IdentitySecretNotFound";
    pub const IMAGE_INSPECT_FAILED: &str = "ImageInspectFailed";
    pub const INPUTS_CHANGED: &str = "InputsChanged";
    pub const INSTANCE_HEALTHY: &str = "InstanceHealthy";
    pub const INSTANCE_UNHEALTHY: &str = "InstanceUnhealthy";
    pub const JOB_CREATED: &str = "JobCreated";
    pub const JOB_DEADLINE_EXCEEDED: &str = "JobDeadlineExceeded";
    pub const JOB_FAILED: &str = "JobFailed";
    pub const JOB_INTERRUPTED: &str = "JobInterrupted";
    pub const JOB_SUCCEEDED: &str = "JobSucceeded";
    pub const MIRROR_CREATED: &str = "MirrorCreated";
    pub const MIRROR_REMOVED: &str = "MirrorRemoved";
    pub const OUTPUTS_INVALID: &str = "OutputsInvalid";
    pub const PAUSED: &str = "Paused";
    pub const PLAN_APPLIED: &str = "PlanApplied";
    pub const PLAN_APPROVED: &str = "PlanApproved";
    pub const PLAN_CHANGED: &str = "PlanChanged";
    pub const PLAN_READY: &str = "PlanReady";
    pub const PROVIDER_ID_SET: &str = "ProviderIDSet";
    pub const PROVISIONED: &str = "Provisioned";
    pub const REMEDIATION_REQUESTED: &str = "RemediationRequested";
    pub const REMEDIATION_WITHDRAWN: &str = "RemediationWithdrawn";
    pub const REPLICAS_WRITTEN_BACK: &str = "ReplicasWrittenBack";
    pub const RESUMED: &str = "Resumed";
    pub const STATE_ADOPTED: &str = "StateAdopted";
    pub const STATE_BACKED_UP: &str = "StateBackedUp";
    pub const STATE_LOCKED: &str = "StateLocked";
    pub const STATE_LOST: &str = "StateLost";
    pub const STATE_RESTORE_FAILED: &str = "StateRestoreFailed";
    pub const STATE_RESTORED: &str = "StateRestored";
    pub const STATE_UNREADABLE: &str = "StateUnreadable";
    pub const STUCK_JOB_DELETED: &str = "StuckJobDeleted";
    pub const WAITING_FOR_CLUSTER_OPERATION: &str = "WaitingForClusterOperation";
    pub const WAITING_FOR_MACHINE_OPERATIONS: &str = "WaitingForMachineOperations";
    pub const WAITING_FOR_RUN_LEASE: &str = "WaitingForRunLease";
    /// A `spec.jobs.env` entry named `TF_*` or `KUBE_*` was left out of a Job (Warning). The
    /// published reference documents the event without naming its reason; this is CAPTF's name.
    pub const JOB_ENV_DROPPED: &str = "JobEnvDropped";

    /// Events the runner posts from inside a Job (reporting controller [`RUNNER_CONTROLLER`]).
    pub mod runner {
        pub const RUN_STARTED: &str = "RunStarted";
        pub const STEP_STARTED: &str = "StepStarted";
        pub const STEP_SUCCEEDED: &str = "StepSucceeded";
        pub const STEP_FAILED: &str = "StepFailed";
        pub const PLAN_SUMMARY: &str = "PlanSummary";
        pub const RESOURCES_CHANGED: &str = "ResourcesChanged";
        pub const RUN_FINISHED: &str = "RunFinished";
        /// The `reportingController` of runner events.
        pub const RUNNER_CONTROLLER: &str = "captf.io/runner";
    }

    /// The time of the next event seen: `now`, or a microsecond after the last one when `now` is
    /// not later. Events posted at once (a manager's pass, a runner's queue) keep their order in
    /// `eventTime` (a microsecond field), and a name made from this time is unique.
    pub fn next_event_time(
        last: k8s_openapi::jiff::Timestamp,
        now: k8s_openapi::jiff::Timestamp,
    ) -> k8s_openapi::jiff::Timestamp {
        let next = last + k8s_openapi::jiff::SignedDuration::from_micros(1);
        if now >= next { now } else { next }
    }

    #[cfg(test)]
    mod tests {
        use super::next_event_time;
        use k8s_openapi::jiff::{SignedDuration, Timestamp};

        /// Events seen within the same microsecond (or with a clock that stepped back) still get
        /// strictly increasing microseconds, so their `eventTime` order is the order they were seen;
        /// a later clock is taken as it is.
        #[test]
        fn event_times_increase_by_the_microsecond() {
            let t = Timestamp::from_nanosecond(1_700_000_000_000_000_500).unwrap();
            let micros = |t: Timestamp| t.as_nanosecond() / 1_000;
            let mut last = next_event_time(Timestamp::UNIX_EPOCH, t);
            assert_eq!(last, t);
            for now in [
                t,
                t + SignedDuration::from_nanos(300),
                t - SignedDuration::from_secs(1),
            ] {
                let next = next_event_time(last, now);
                assert!(micros(next) > micros(last), "{last} then {next}");
                last = next;
            }
            let later = t + SignedDuration::from_secs(5);
            assert_eq!(next_event_time(last, later), later);
        }
    }
}

/// Values of the [`labels::LEASE`] label.
pub mod lease_kinds {
    /// An object's run lease (`captf-run-<suffix>`).
    pub const RUN: &str = "run";
    /// A cluster's write lease (`captf-cluster-<hash>`).
    pub const CLUSTER: &str = "cluster";
}

/// The fixed keys of the `captf_tags` module input.
pub use contract::inputs::tag_keys as tags;
