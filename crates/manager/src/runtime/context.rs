//! What every reconcile pass shares (spec: Architecture "Components"; INTERFACE-FACTS §4 "Manager
//! flags"): the client, the manager-wide settings, the metrics and the event recorder, and the
//! object a pass works on.

use std::sync::Arc;
use std::time::Duration;

use api::cluster::{TerraformCluster, TerraformClusterStatus};
use api::machine::{TerraformMachine, TerraformMachineStatus};
use api::machinepool::{TerraformMachinePool, TerraformMachinePoolStatus};
use api::status::WorkloadStatus;
use api::workload::WorkspaceSpec;
use contract::names::ObjectKind;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::runtime::caches::Caches;
use crate::runtime::metrics::Metrics;

/// The event reporter name (`reportingController`).
pub const CONTROLLER_NAME: &str = "captf-manager";

/// The manager-wide settings a pass reads (the CAPTF-specific manager flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--runner-image`: the init container's image holding `/runner`.
    pub runner_image: String,
    /// `--cluster-operation-gate`.
    pub cluster_operation_gate: bool,
    /// `--runner-events`.
    pub runner_events: bool,
    /// `--drift-default-interval`.
    pub drift_default_interval: Duration,
    /// `--state-backups`: backups kept per object (0 takes none and keeps those there are).
    pub state_backups: u32,
    /// `--namespace`: the one namespace watched, `None` for all.
    pub namespace: Option<String>,
    /// `--watch-filter`: only objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// `--sync-period`.
    pub sync_period: Duration,
    /// `--terraformcluster-concurrency`.
    pub cluster_concurrency: u16,
    /// `--terraformmachine-concurrency`.
    pub machine_concurrency: u16,
    /// `--terraformmachinetemplate-concurrency`.
    pub template_concurrency: u16,
    /// `--terraformmachinepool-concurrency`.
    pub pool_concurrency: u16,
    /// This manager's name in leases and events (its pod name in a cluster).
    pub instance: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            runner_image: String::new(),
            cluster_operation_gate: true,
            runner_events: true,
            drift_default_interval: Duration::from_secs(30 * 60),
            state_backups: 5,
            namespace: None,
            watch_filter: None,
            sync_period: Duration::from_secs(600),
            cluster_concurrency: 10,
            machine_concurrency: 10,
            template_concurrency: 10,
            pool_concurrency: 10,
            instance: "captf-manager".to_owned(),
        }
    }
}

/// What a pass shares with every other pass.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The settings.
    pub settings: Arc<Settings>,
    /// The metrics.
    pub metrics: Metrics,
    /// The event recorder.
    pub recorder: crate::runtime::events::Recorder,
    /// What passes read: filled by [`crate::controller::run`], empty until then.
    pub caches: Caches,
    /// The clock Decide's schedule reads ([`Clock`]).
    pub clock: Clock,
}

/// The time Decide reads (`Observed::now`: retry backoff, drift and health schedules, the
/// stuck-Job check): the system's, plus an offset that only a test ever moves, to prove a
/// schedule's steps without waiting for them (The Reconcile Lifecycle "Retry backoff").
/// Everything else (conditions, leases, events) keeps the system time.
#[derive(Clone, Debug, Default)]
pub struct Clock(Arc<std::sync::atomic::AtomicU64>);

impl Clock {
    /// The system time plus the offset.
    pub fn now(&self) -> std::time::SystemTime {
        let offset = self.0.load(std::sync::atomic::Ordering::SeqCst);
        std::time::SystemTime::now() + std::time::Duration::from_secs(offset)
    }

    /// Moves the clock `by` forward (whole seconds).
    pub fn advance(&self, by: std::time::Duration) {
        self.0
            .fetch_add(by.as_secs(), std::sync::atomic::Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for `client`.
    pub fn new(client: Client, settings: Settings, metrics: Metrics) -> Self {
        let recorder = crate::runtime::events::Recorder::new(
            client.clone(),
            CONTROLLER_NAME,
            &settings.instance,
        );
        Self {
            client,
            settings: Arc::new(settings),
            metrics,
            recorder,
            caches: Caches::unstarted(),
            clock: Clock::default(),
        }
    }
}

/// The object a pass reconciles.
#[derive(Debug, Clone)]
pub enum Target {
    /// A TerraformCluster.
    Cluster(Box<TerraformCluster>),
    /// A TerraformMachine.
    Machine(Box<TerraformMachine>),
    /// A TerraformMachinePool.
    Pool(Box<TerraformMachinePool>),
}

impl Target {
    /// Its kind.
    pub fn kind(&self) -> ObjectKind {
        match self {
            Self::Cluster(_) => ObjectKind::Cluster,
            Self::Machine(_) => ObjectKind::Machine,
            Self::Pool(_) => ObjectKind::MachinePool,
        }
    }

    /// Its metadata.
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Cluster(o) => o.meta(),
            Self::Machine(o) => o.meta(),
            Self::Pool(o) => o.meta(),
        }
    }

    /// Its name.
    pub fn name(&self) -> String {
        self.meta().name.clone().unwrap_or_default()
    }

    /// Its namespace.
    pub fn namespace(&self) -> String {
        self.meta().namespace.clone().unwrap_or_default()
    }

    /// Its UID.
    pub fn uid(&self) -> String {
        self.meta().uid.clone().unwrap_or_default()
    }

    /// Its workspace spec (image, identity, jobs, variables).
    pub fn workspace(&self) -> &WorkspaceSpec {
        match self {
            Self::Cluster(o) => &o.spec.workspace,
            Self::Machine(o) => &o.spec.workspace,
            Self::Pool(o) => &o.spec.workspace,
        }
    }

    /// Its finalizer.
    pub fn finalizer(&self) -> &'static str {
        match self {
            Self::Cluster(_) => api::constants::finalizers::TERRAFORM_CLUSTER,
            Self::Machine(_) => api::constants::finalizers::TERRAFORM_MACHINE,
            Self::Pool(_) => api::constants::finalizers::TERRAFORM_MACHINE_POOL,
        }
    }

    /// `apiVersion` of the kind.
    pub fn api_version(&self) -> String {
        match self {
            Self::Cluster(_) => TerraformCluster::api_version(&()).into_owned(),
            Self::Machine(_) => TerraformMachine::api_version(&()).into_owned(),
            Self::Pool(_) => TerraformMachinePool::api_version(&()).into_owned(),
        }
    }

    /// The status as the pass starts from it.
    pub fn status(&self) -> StatusDraft {
        match self {
            Self::Cluster(o) => StatusDraft::Cluster(o.status.clone().unwrap_or_default()),
            Self::Machine(o) => StatusDraft::Machine(o.status.clone().unwrap_or_default()),
            Self::Pool(o) => StatusDraft::Pool(o.status.clone().unwrap_or_default()),
        }
    }

    /// A reference to the object, for events.
    pub fn reference(&self) -> ObjectReference {
        match self {
            Self::Cluster(o) => o.object_ref(&()),
            Self::Machine(o) => o.object_ref(&()),
            Self::Pool(o) => o.object_ref(&()),
        }
    }

    /// A non-controller owner reference to the object (durable inputs, state, mirrors).
    pub fn owner_reference(&self, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version(),
            kind: self.kind().kind().to_owned(),
            name: self.name(),
            uid: self.uid(),
            controller: Some(controller),
            block_owner_deletion: Some(controller),
        }
    }

    /// Whether the object is being deleted.
    pub fn deleting(&self) -> bool {
        self.meta().deletion_timestamp.is_some()
    }

    /// The object's `cluster.x-k8s.io/cluster-name` label.
    pub fn cluster_label(&self) -> Option<String> {
        self.labels()
            .get(api::constants::labels::CLUSTER_NAME)
            .filter(|v| !v.is_empty())
            .cloned()
    }

    fn labels(&self) -> &std::collections::BTreeMap<String, String> {
        match self {
            Self::Cluster(o) => o.labels(),
            Self::Machine(o) => o.labels(),
            Self::Pool(o) => o.labels(),
        }
    }

    /// Whether it carries Cluster API's externally-managed annotation (every kind).
    pub fn externally_managed(&self) -> bool {
        self.annotation(api::constants::annotations::MANAGED_BY)
            .is_some()
    }

    /// Merge-patches the object, or its status subresource when `status`; the metadata written
    /// (its resourceVersion, its generation), `Ok(None)` when the object is gone.
    pub async fn merge_patch(
        &self,
        client: &Client,
        patch: &serde_json::Value,
        status: bool,
    ) -> kube::Result<Option<ObjectMeta>> {
        let ns = self.namespace();
        let name = self.name();
        let pp = PatchParams::default();
        let patch = Patch::Merge(patch);
        let result = match (self, status) {
            (Self::Cluster(_), false) => Api::<TerraformCluster>::namespaced(client.clone(), &ns)
                .patch(&name, &pp, &patch)
                .await
                .map(|o| o.metadata),
            (Self::Cluster(_), true) => Api::<TerraformCluster>::namespaced(client.clone(), &ns)
                .patch_status(&name, &pp, &patch)
                .await
                .map(|o| o.metadata),
            (Self::Machine(_), false) => Api::<TerraformMachine>::namespaced(client.clone(), &ns)
                .patch(&name, &pp, &patch)
                .await
                .map(|o| o.metadata),
            (Self::Machine(_), true) => Api::<TerraformMachine>::namespaced(client.clone(), &ns)
                .patch_status(&name, &pp, &patch)
                .await
                .map(|o| o.metadata),
            (Self::Pool(_), false) => Api::<TerraformMachinePool>::namespaced(client.clone(), &ns)
                .patch(&name, &pp, &patch)
                .await
                .map(|o| o.metadata),
            (Self::Pool(_), true) => Api::<TerraformMachinePool>::namespaced(client.clone(), &ns)
                .patch_status(&name, &pp, &patch)
                .await
                .map(|o| o.metadata),
        };
        match result {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if crate::runtime::kubeutil::is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// An annotation of the object.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        let annotations = match self {
            Self::Cluster(o) => o.annotations(),
            Self::Machine(o) => o.annotations(),
            Self::Pool(o) => o.annotations(),
        };
        annotations.get(key).map(String::as_str)
    }
}

/// The status a pass writes, per kind.
#[derive(Debug, Clone, PartialEq)]
pub enum StatusDraft {
    /// A TerraformCluster's status.
    Cluster(TerraformClusterStatus),
    /// A TerraformMachine's status.
    Machine(TerraformMachineStatus),
    /// A TerraformMachinePool's status.
    Pool(TerraformMachinePoolStatus),
}

impl StatusDraft {
    /// The status every workload kind shares.
    pub fn workload(&self) -> &WorkloadStatus {
        match self {
            Self::Cluster(s) => &s.workload,
            Self::Machine(s) => &s.workload,
            Self::Pool(s) => &s.workload,
        }
    }

    /// The status every workload kind shares, to change.
    pub fn workload_mut(&mut self) -> &mut WorkloadStatus {
        match self {
            Self::Cluster(s) => &mut s.workload,
            Self::Machine(s) => &mut s.workload,
            Self::Pool(s) => &mut s.workload,
        }
    }

    /// As JSON, for the merge patch.
    pub fn to_value(&self) -> serde_json::Value {
        let value = match self {
            Self::Cluster(s) => serde_json::to_value(s),
            Self::Machine(s) => serde_json::to_value(s),
            Self::Pool(s) => serde_json::to_value(s),
        };
        value.unwrap_or(serde_json::Value::Null)
    }

    /// Whether `status.initialization.provisioned` is latched.
    pub fn provisioned(&self) -> bool {
        self.workload()
            .initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    }
}
