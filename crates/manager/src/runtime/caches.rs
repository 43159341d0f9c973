//! The manager's caches and who each change wakes (spec: Architecture "Components", The
//! Reconcile Lifecycle "One pass, one status patch"; ENGINEERING.md §4 "Observe"): every read a
//! pass makes comes from one of these stores, each filled by one watch, so that a steady-state
//! pass over an object with nothing to do makes no API request at all.
//!
//! - Full objects: TerraformClusters, TerraformMachines, TerraformMachinePools, Clusters,
//!   Machines, MachinePools, identities, Jobs, runner pods (label-selected), the runner
//!   RoleBindings, CAPTF's leases.
//! - Metadata only: Secrets (state, durable inputs, mirrors, per-run, identity sources,
//!   bootstrap data: their data is read again only when their resourceVersion changed, and a pass
//!   keeps what it decoded, see [`Decoded`]), ServiceAccounts, namespaces (for the identities'
//!   `allowedNamespaces` selectors), and the ConfigMaps labelled
//!   `captf.io/variables=true`.
//!
//! Each watch applies an event to its store first and then wakes the objects it concerns, so a
//! pass never runs on a store older than the event that woke it. The predicates keep status-only
//! changes from waking others: a TerraformMachine's status does not wake its TerraformCluster, a
//! TerraformCluster's status wakes its machines and pools only when `provisioned` changes, a
//! Cluster's, Machine's or MachinePool's status wakes only for the fields CAPTF reads (a
//! MachinePool's, for none).

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use api::capi::{Cluster, Machine, MachinePool};
use api::cluster::TerraformCluster;
use api::constants::{conditions as ctype, labels};
use api::identity::TerraformClusterIdentity;
use api::machine::TerraformMachine;
use api::machinepool::TerraformMachinePool;
use contract::names::ObjectKind;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tracing::warn;

use crate::runtime::context::Settings;
use api::shared::DEFAULT_RUNNER_SERVICE_ACCOUNT as RUNNER;

/// Object metadata without spec, status or data.
pub type Meta<K> = PartialObjectMeta<K>;

/// What the passes read.
#[derive(Clone)]
pub struct Caches {
    /// TerraformClusters (the watched namespace, the watch filter).
    pub terraform_clusters: Store<TerraformCluster>,
    /// TerraformMachines (the watched namespace, the watch filter).
    pub terraform_machines: Store<TerraformMachine>,
    /// TerraformMachinePools (the watched namespace, the watch filter).
    pub terraform_machine_pools: Store<TerraformMachinePool>,
    /// Cluster API Clusters.
    pub clusters: Store<Cluster>,
    /// Cluster API Machines.
    pub machines: Store<Machine>,
    /// Cluster API MachinePools.
    pub machine_pools: Store<MachinePool>,
    /// TerraformClusterIdentities (cluster-wide).
    pub identities: Store<TerraformClusterIdentity>,
    /// CAPTF's Jobs (`captf.io/managed=true`).
    pub jobs: Store<Job>,
    /// Their pods (`captf.io/managed=true`).
    pub pods: Store<Pod>,
    /// Every Secret's metadata (cluster-wide: identity sources live anywhere).
    pub secrets: Store<Meta<Secret>>,
    /// ServiceAccounts' metadata (the runner's, or a custom one and its opt-in label).
    pub service_accounts: Store<Meta<ServiceAccount>>,
    /// The `captf-runner` RoleBindings.
    pub role_bindings: Store<RoleBinding>,
    /// CAPTF's leases (`captf.io/managed=true`).
    pub leases: Store<Lease>,
    /// Namespaces' metadata (labels, for `allowedNamespaces.selector`).
    pub namespaces: Store<Meta<Namespace>>,
    /// ConfigMaps labelled `captf.io/variables=true`, by metadata.
    pub variable_config_maps: Store<Meta<ConfigMap>>,
    /// What passes decoded from Secrets, by resourceVersion.
    pub decoded: Decoded,
    /// The Jobs this manager created or marked bookkept that the Job cache may not show so yet.
    pub written_jobs: WrittenJobs,
    /// Writes a pass made and already accounted for, which wake no one.
    pub own_writes: OwnWrites,
    /// When this manager first saw each run and cluster lease record.
    pub lease_clock: crate::runtime::leases::LeaseClock,
}

/// Writes a pass made and already accounted for in the same pass or the status it wrote: the
/// Jobs it created and marked bookkept, the durable inputs it wrote, the state it adopted, the
/// backups it copied (Terraform State "Backups") and its own clusterctl move block. The watch event
/// of such a write wakes no one, since a pass over it would find nothing new. The finalizer a
/// first pass adds is not among them: that pass stops for it to be seen (The Reconcile Lifecycle,
/// step 3), unless the object is paused (that pass wrote what the paused branch writes).
///
/// A write is expected, by kind, namespace and name, before it is sent: its event may reach the
/// watch before its response reaches the pass. The first event of the object while the write is
/// in flight, or the event of exactly the version it returned, is taken as the write's own; a
/// failed write is expected no longer. A foreign change that lands first makes a write under a
/// resourceVersion precondition conflict, and the pass runs again; any later change has another
/// version and wakes as usual. An expectation unmet for [`EXPECTED_FOR`] lapses.
#[derive(Clone, Default)]
pub struct OwnWrites(Arc<Mutex<HashMap<String, Expected>>>);

/// How long a write in flight is expected.
pub const EXPECTED_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// A write expected: in flight since, or landed at a resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expected {
    InFlight(std::time::Instant),
    At(String),
}

impl std::fmt::Debug for OwnWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnWrites")
    }
}

pub fn own_write_key(kind: &str, ns: Option<&str>, name: Option<&str>) -> String {
    format!(
        "{kind}/{}/{}",
        ns.unwrap_or_default(),
        name.unwrap_or_default()
    )
}

impl OwnWrites {
    /// Sends `write` (of the `kind` object `ns`/`name`) as a write this pass accounts for.
    pub async fn write<K: Resource>(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        write: impl std::future::Future<Output = kube::Result<K>>,
    ) -> kube::Result<K> {
        let key = own_write_key(kind, Some(ns), Some(name));
        self.expect(&key);
        let written = write.await;
        let rv = written
            .as_ref()
            .ok()
            .and_then(|o| o.meta().resource_version.clone());
        self.settle(&key, rv);
        written
    }

    /// A write about to be sent.
    pub fn expect(&self, key: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                key.to_owned(),
                Expected::InFlight(std::time::Instant::now()),
            );
    }

    /// A write's outcome: the version it left, or `None` when it failed.
    pub fn settle(&self, key: &str, rv: Option<String>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match rv {
            // Its event came first and was taken: nothing left to expect.
            Some(rv) if map.contains_key(key) => {
                map.insert(key.to_owned(), Expected::At(rv));
            }
            Some(_) => {}
            None => {
                map.remove(key);
            }
        }
    }

    /// Whether the event of the `kind` object `meta` is an expected write's own; the expectation
    /// is met (or missed) either way.
    fn seen(&self, kind: &str, meta: &ObjectMeta) -> bool {
        let key = own_write_key(kind, meta.namespace.as_deref(), meta.name.as_deref());
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.remove(&key) {
            Some(Expected::InFlight(since)) => since.elapsed() < EXPECTED_FOR,
            Some(Expected::At(rv)) => meta.resource_version.as_deref() == Some(rv.as_str()),
            None => false,
        }
    }
}

/// The Jobs this manager created or marked bookkept, kept until the Job cache shows that write:
/// a pass right after the one that created a Job sees it, and one right after the one that
/// bookkept a Job sees it bookkept (read your own writes), even before the watch event arrives.
/// Without the second, a pass woken before the mark's event would bookkeep the Job again (its
/// metrics counted twice).
#[derive(Clone, Default)]
pub struct WrittenJobs(Arc<Mutex<HashMap<String, WrittenJob>>>);

/// A Job as a write returned it, and when.
type WrittenJob = (Arc<Job>, std::time::Instant);

impl std::fmt::Debug for WrittenJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WrittenJobs")
    }
}

/// How long a written Job the cache does not show is remembered (then it was deleted meanwhile).
const WRITTEN_JOB_FOR: std::time::Duration = std::time::Duration::from_secs(300);

impl WrittenJobs {
    /// Remembers a Job just created (or found created), or just marked bookkept, as the API
    /// server returned it.
    pub fn add(&self, job: Job) {
        let key = format!(
            "{}/{}",
            job.metadata.namespace.as_deref().unwrap_or_default(),
            job.metadata.name.as_deref().unwrap_or_default()
        );
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (Arc::new(job), std::time::Instant::now()));
    }
}

/// Whether a Job was already bookkept (it carries `captf.io/bookkept`).
pub fn is_bookkept(job: &Job) -> bool {
    job.annotations()
        .contains_key(api::constants::annotations::BOOKKEPT)
}

/// Whether the cache shows a write remembered in [`WrittenJobs`]: the Job at all, and, when the write
/// marked it bookkept, the mark.
fn shows(cached: Option<&Job>, written: &Job) -> bool {
    cached.is_some_and(|c| is_bookkept(c) || !is_bookkept(written))
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

/// What passes decoded from Secret data, each entry valid for one version of its sources (their
/// resourceVersions): state summaries, durable inputs facts, identity source hashes. Never raw
/// Secret data.
#[derive(Clone, Default)]
pub struct Decoded(Arc<Mutex<HashMap<String, DecodedEntry>>>);

/// One decoded value and the version of its sources it is valid for.
type DecodedEntry = (String, Arc<dyn Any + Send + Sync>);

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Decoded({} entries)", self.len())
    }
}

impl Decoded {
    /// The value decoded for `key` at `version`, if that is the version cached.
    pub fn get<T: Any + Send + Sync>(&self, key: &str, version: &str) -> Option<Arc<T>> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (v, value) = map.get(key)?;
        if v != version {
            return None;
        }
        value.clone().downcast::<T>().ok()
    }

    /// Keeps `value` for `key` at `version`.
    pub fn put<T: Any + Send + Sync>(&self, key: &str, version: &str, value: Arc<T>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(key.to_owned(), (version.to_owned(), value));
    }

    /// Forgets every entry whose key starts with `prefix` (an object that is gone).
    pub fn forget(&self, prefix: &str) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|k, _| !k.starts_with(prefix));
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The reconcile triggers of the three controllers, fed by the caches' watches.
#[derive(Debug)]
pub struct Triggers {
    /// TerraformClusters to reconcile.
    pub clusters: UnboundedReceiver<ObjectRef<TerraformCluster>>,
    /// TerraformMachines to reconcile.
    pub machines: UnboundedReceiver<ObjectRef<TerraformMachine>>,
    /// TerraformMachinePools to reconcile.
    pub pools: UnboundedReceiver<ObjectRef<TerraformMachinePool>>,
    /// TerraformClusterIdentities whose status to refresh.
    pub identities: UnboundedReceiver<ObjectRef<TerraformClusterIdentity>>,
    /// The namespaces a TerraformCluster, TerraformMachine or TerraformMachinePool just left
    /// (for the orphan sweep; also when `clusterctl move` removed its finalizer and deleted it).
    pub departures: UnboundedReceiver<String>,
}

/// The senders behind [`Triggers`], and what the mappers need to find whom to wake.
#[derive(Clone)]
struct Wake {
    clusters: UnboundedSender<ObjectRef<TerraformCluster>>,
    machines: UnboundedSender<ObjectRef<TerraformMachine>>,
    pools: UnboundedSender<ObjectRef<TerraformMachinePool>>,
    identities: UnboundedSender<ObjectRef<TerraformClusterIdentity>>,
    departures: UnboundedSender<String>,
    stores: WakeStores,
    decoded: Decoded,
    own_writes: OwnWrites,
}

/// The stores a [`Wake`] reads to find whom to wake.
#[derive(Clone)]
struct WakeStores {
    tcs: Store<TerraformCluster>,
    tms: Store<TerraformMachine>,
    tmps: Store<TerraformMachinePool>,
    pool_owners: Store<MachinePool>,
    tcis: Store<TerraformClusterIdentity>,
    machine_owners: Store<Machine>,
    cluster_owners: Store<Cluster>,
}

impl Wake {
    /// A Wake over `stores`, and the triggers it feeds.
    fn new(stores: WakeStores, decoded: Decoded, own_writes: OwnWrites) -> (Self, Triggers) {
        let (clusters, clusters_rx) = unbounded();
        let (machines, machines_rx) = unbounded();
        let (pools, pools_rx) = unbounded();
        let (identities, identities_rx) = unbounded();
        let (departures, departures_rx) = unbounded();
        let wake = Self {
            clusters,
            machines,
            pools,
            identities,
            departures,
            stores,
            decoded,
            own_writes,
        };
        let triggers = Triggers {
            clusters: clusters_rx,
            machines: machines_rx,
            pools: pools_rx,
            identities: identities_rx,
            departures: departures_rx,
        };
        (wake, triggers)
    }

    fn cluster(&self, r: ObjectRef<TerraformCluster>) {
        let _ = self.clusters.unbounded_send(r);
    }

    fn machine(&self, r: ObjectRef<TerraformMachine>) {
        let _ = self.machines.unbounded_send(r);
    }

    fn pool(&self, r: ObjectRef<TerraformMachinePool>) {
        let _ = self.pools.unbounded_send(r);
    }

    fn identity(&self, r: ObjectRef<TerraformClusterIdentity>) {
        let _ = self.identities.unbounded_send(r);
    }

    fn departed(&self, ns: Option<String>) {
        if let Some(ns) = ns {
            let _ = self.departures.unbounded_send(ns);
        }
    }

    /// The TerraformClusters of cluster `cluster` in `ns`.
    fn clusters_of(&self, ns: Option<&str>, cluster: &str) {
        for tc in self.stores.tcs.state() {
            if tc.namespace().as_deref() == ns && tc_cluster_name(&tc).as_deref() == Some(cluster) {
                self.cluster(ObjectRef::from_obj(tc.as_ref()));
            }
        }
    }

    /// Every TerraformCluster, TerraformMachine and TerraformMachinePool in `ns` (everywhere when
    /// `None`) whose kind, metadata and workspace `keep` accepts.
    fn workloads(
        &self,
        ns: Option<&str>,
        keep: impl Fn(ObjectKind, &ObjectMeta, &api::workload::WorkspaceSpec) -> bool,
    ) {
        let in_ns = |m: &ObjectMeta| ns.is_none() || m.namespace.as_deref() == ns;
        for tc in self.stores.tcs.state() {
            if in_ns(&tc.metadata) && keep(ObjectKind::Cluster, &tc.metadata, &tc.spec.workspace) {
                self.cluster(ObjectRef::from_obj(tc.as_ref()));
            }
        }
        for tm in self.stores.tms.state() {
            if in_ns(&tm.metadata) && keep(ObjectKind::Machine, &tm.metadata, &tm.spec.workspace) {
                self.machine(ObjectRef::from_obj(tm.as_ref()));
            }
        }
        for tmp in self.stores.tmps.state() {
            let kind = ObjectKind::MachinePool;
            if in_ns(&tmp.metadata) && keep(kind, &tmp.metadata, &tmp.spec.workspace) {
                self.pool(ObjectRef::from_obj(tmp.as_ref()));
            }
        }
    }

    /// The TerraformMachines and TerraformMachinePools of cluster `cluster` in `ns`.
    fn machines_of(&self, ns: Option<&str>, cluster: &str) {
        let labelled = |m: &ObjectMeta| {
            m.labels
                .as_ref()
                .and_then(|l| l.get(labels::CLUSTER_NAME))
                .map(String::as_str)
                == Some(cluster)
        };
        self.workloads(ns, |kind, m, _| kind != ObjectKind::Cluster && labelled(m));
    }

    /// Every TerraformCluster, TerraformMachine and TerraformMachinePool (in `ns`, or
    /// everywhere).
    fn everyone(&self, ns: Option<&str>) {
        self.workloads(ns, |_, _, _| true);
    }

    /// The object an owner reference names, when it is one of ours.
    fn owner(&self, ns: Option<&str>, kind: &str, name: &str) {
        match kind {
            "TerraformCluster" => self.cluster(within(ObjectRef::new(name), ns)),
            "TerraformMachine" => self.machine(within(ObjectRef::new(name), ns)),
            "TerraformMachinePool" => self.pool(within(ObjectRef::new(name), ns)),
            _ => {}
        }
    }

    /// Whether the caches show the object an owner reference names (one of ours) paused: by its
    /// own `cluster.x-k8s.io/paused` annotation, or by its Cluster's (named by the object's
    /// cluster). Unknown (an object or Cluster the caches do not show yet) is not paused.
    fn paused(&self, ns: Option<&str>, kind: &str, name: &str) -> bool {
        use crate::kinds::inputs::{annotated_paused, cluster_paused};
        let member = |meta: &ObjectMeta| {
            let cluster = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::CLUSTER_NAME));
            (annotated_paused(meta), cluster.cloned())
        };
        let found = match kind {
            "TerraformCluster" => (self.stores.tcs.get(&within(ObjectRef::new(name), ns)))
                .map(|tc| (annotated_paused(&tc.metadata), tc_cluster_name(&tc))),
            "TerraformMachine" => (self.stores.tms.get(&within(ObjectRef::new(name), ns)))
                .map(|tm| member(&tm.metadata)),
            "TerraformMachinePool" => (self.stores.tmps.get(&within(ObjectRef::new(name), ns)))
                .map(|tmp| member(&tmp.metadata)),
            _ => None,
        };
        let Some((annotated, cluster)) = found else {
            return false;
        };
        annotated
            || cluster.is_some_and(|c| {
                (self
                    .stores
                    .cluster_owners
                    .get(&within(ObjectRef::new(&c), ns)))
                .is_some_and(|c| cluster_paused(&c))
            })
    }
}

fn within<K: Resource<DynamicType = ()>>(r: ObjectRef<K>, ns: Option<&str>) -> ObjectRef<K> {
    match ns {
        Some(ns) => r.within(ns),
        None => r,
    }
}

/// The cluster name a TerraformCluster belongs to: its label, else its Cluster owner's name.
pub fn tc_cluster_name(tc: &TerraformCluster) -> Option<String> {
    tc.labels().get(labels::CLUSTER_NAME).cloned().or_else(|| {
        tc.owner_references()
            .iter()
            .find(|o| o.kind == "Cluster")
            .map(|o| o.name.clone())
    })
}

/// A hash of what a predicate compares.
fn fingerprint(parts: &impl serde::Serialize) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(parts).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// Remembers a fingerprint per object: `changed` is true the first time an object is seen and
/// whenever its fingerprint differs from the last one.
#[derive(Default)]
struct Seen(HashMap<String, u64>);

impl Seen {
    fn changed(&mut self, key: String, print: u64) -> bool {
        self.0.insert(key, print) != Some(print)
    }

    /// Whether the object `key` changed (its `print` is new) or went (`deleted`, which forgets
    /// it).
    fn changed_or_gone(&mut self, key: String, deleted: bool, print: impl FnOnce() -> u64) -> bool {
        if deleted {
            self.forget(&key);
            return true;
        }
        self.changed(key, print())
    }

    fn forget(&mut self, key: &str) {
        self.0.remove(key);
    }
}

fn key_of<K: Resource>(o: &K) -> String {
    meta_key(o.meta())
}

/// An object's key in the wake bookkeeping: its uid, else its namespace and name.
fn meta_key(m: &ObjectMeta) -> String {
    m.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        )
    })
}

/// What of an object's metadata wakes the object itself: all but status, resourceVersion and
/// managed fields.
fn own_print<K: Resource + serde::Serialize>(o: &K, spec: &impl serde::Serialize) -> u64 {
    meta_print(o.meta(), spec)
}

/// [`own_print`] of metadata `m` and `spec`.
fn meta_print(m: &ObjectMeta, spec: &impl serde::Serialize) -> u64 {
    fingerprint(&(
        m.generation,
        &m.labels,
        &m.annotations,
        &m.finalizers,
        &m.owner_references,
        m.deletion_timestamp.is_some(),
        spec,
    ))
}

/// What of a TerraformMachine wakes it: [`own_print`] but `spec.providerID` (and the generation
/// its write bumps). Only CAPTF writes it, once, in a pass that reports what it means (Machine Role
/// "provider_id"); a pass woken by that write would find nothing new.
fn terraform_machine_print(tm: &TerraformMachine) -> u64 {
    let mut spec = tm.spec.clone();
    spec.provider_id = None;
    let mut meta = tm.metadata.clone();
    meta.generation = None;
    meta_print(&meta, &spec)
}

/// What of a Machine wakes its TerraformMachine: what its passes read (its labels, annotations,
/// deletion and spec), but `spec.providerID`, which Cluster API copies from the TerraformMachine
/// (Machine Role "provider_id") and CAPTF never reads back, and the generation that copy bumps.
/// Not its finalizers or owner references, which Cluster API sets and CAPTF does not read.
fn machine_print(m: &Machine) -> u64 {
    let mut spec = m.spec.clone();
    spec.provider_id = None;
    let meta = &m.metadata;
    fingerprint(&(
        &meta.labels,
        &meta.annotations,
        meta.deletion_timestamp.is_some(),
        &spec,
    ))
}

fn provisioned_of(status: Option<&api::status::WorkloadStatus>) -> bool {
    status
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}

/// Applies a watch's events to its store, calling `on_event` after each, until the watch ends.
async fn inform<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    mut writer: Writer<K>,
    what: &'static str,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send,
) where
    K: kube::runtime::reflector::Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                writer.apply_watcher_event(&event);
                on_event(&event);
            }
            Err(e) => warn!(watch = what, error = %e, "watch error; retrying with backoff"),
        }
    }
}

/// The objects an event touched, and whether they were deleted.
fn touched<K>(event: &watcher::Event<K>) -> Option<(&K, bool)> {
    match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => Some((o, false)),
        watcher::Event::Delete(o) => Some((o, true)),
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

fn api_for<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!("{}=true", labels::MANAGED))
}

/// The watches of the caches, as they are started.
type Watches = Vec<futures::future::BoxFuture<'static, ()>>;

/// Starts a watch of `api` that fills `writer`'s store and calls `on_event` after each event;
/// managed fields are dropped (never read, and large).
fn inform_into<K>(
    watches: &mut Watches,
    writer: Writer<K>,
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let events = watcher(api, config)
        .default_backoff()
        .modify(|o| trim_meta(o.meta_mut()));
    watches.push(inform(events, writer, what, on_event).boxed());
}

/// `kubectl apply`'s record of the last applied object: on a Secret, a copy of its data.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a cached object keeps of its metadata: everything but its managed fields and `kubectl
/// apply`'s last-applied copy, which CAPTF never reads. The copy is most of what the cluster-wide
/// Secret metadata watch would hold for a Secret applied by `kubectl` (measured by the scale
/// harness: 10,000 unrelated 4 KiB Secrets, half of them applied, cost 41.6 MiB with it and
/// 8.3 MiB without; Performance, "A busy management cluster").
pub fn trim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// [`inform_into`] a new store, returned.
fn informed<K>(
    watches: &mut Watches,
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    inform_into(watches, writer, api, config, what, on_event);
    store
}

/// The caches, the triggers they feed, and the future that runs their watches (it never ends;
/// drop it to stop them).
pub fn start(
    client: &kube::Client,
    settings: &Settings,
) -> (Caches, Triggers, futures::future::BoxFuture<'static, ()>) {
    let (tc_store, tc_writer) = reflector::store();
    let (tm_store, tm_writer) = reflector::store();
    let (tmp_store, tmp_writer) = reflector::store();
    let (mp_store, mp_writer) = reflector::store();
    let (machine_store, machine_writer) = reflector::store();
    let (tci_store, tci_writer) = reflector::store();
    let (cluster_store, cluster_writer) = reflector::store();
    let decoded = Decoded::default();
    let own_writes = OwnWrites::default();
    let stores = WakeStores {
        tcs: tc_store.clone(),
        tms: tm_store.clone(),
        tmps: tmp_store.clone(),
        pool_owners: mp_store.clone(),
        tcis: tci_store.clone(),
        machine_owners: machine_store.clone(),
        cluster_owners: cluster_store.clone(),
    };
    let (wake, triggers) = Wake::new(stores, decoded.clone(), own_writes.clone());
    let ns = settings.namespace.as_deref();
    let main = match &settings.watch_filter {
        Some(v) if !v.is_empty() => {
            watcher::Config::default().labels(&format!("{}={v}", labels::WATCH_FILTER))
        }
        _ => watcher::Config::default(),
    };
    let all = watcher::Config::default;
    let c = client;
    let w = &mut Watches::new();
    let tcs = api_for::<TerraformCluster>(c, ns);
    inform_into(
        w,
        tc_writer,
        tcs,
        main.clone(),
        "terraformclusters",
        on_terraform_cluster(wake.clone()),
    );
    let tms = api_for::<TerraformMachine>(c, ns);
    inform_into(
        w,
        tm_writer,
        tms,
        main.clone(),
        "terraformmachines",
        on_terraform_machine(wake.clone()),
    );
    let tmps = api_for::<TerraformMachinePool>(c, ns);
    inform_into(w, tmp_writer, tmps, main, "pools", on_pool(wake.clone()));
    let mps = api_for::<MachinePool>(c, ns);
    let on_mp = on_machine_pool(wake.clone());
    inform_into(w, mp_writer, mps, all(), "machinepools", on_mp);
    let machines = api_for::<Machine>(c, ns);
    inform_into(
        w,
        machine_writer,
        machines,
        all(),
        "machines",
        on_machine(wake.clone()),
    );
    let tcis = Api::<TerraformClusterIdentity>::all(c.clone());
    inform_into(
        w,
        tci_writer,
        tcis,
        all(),
        "identities",
        on_identity(wake.clone()),
    );
    inform_into(
        w,
        cluster_writer,
        api_for(c, ns),
        all(),
        "clusters",
        on_cluster(wake.clone()),
    );
    let jobs = informed(w, api_for(c, ns), managed(), "jobs", on_job(wake.clone()));
    let on_pod = on_pod(wake.clone(), jobs.clone());
    let pods = informed(w, api_for::<Pod>(c, ns), managed(), "pods", on_pod);
    let secrets = Api::<Meta<Secret>>::all(c.clone());
    let secrets = informed(w, secrets, all(), "secrets", on_secret(wake.clone()));
    let sas = api_for::<Meta<ServiceAccount>>(c, ns);
    let on_sa = on_service_account(wake.clone());
    let service_accounts = informed(w, sas, all(), "serviceaccounts", on_sa);
    let runner = all().fields(&format!("metadata.name={RUNNER}"));
    let rbs = api_for::<RoleBinding>(c, ns);
    let on_rb = on_role_binding(wake.clone());
    let role_bindings = informed(w, rbs, runner, "rolebindings", on_rb);
    let leases = informed(
        w,
        api_for(c, ns),
        managed(),
        "leases",
        on_lease(wake.clone()),
    );
    let nss = Api::<Meta<Namespace>>::all(c.clone());
    let namespaces = informed(w, nss, all(), "namespaces", on_namespace(wake.clone()));
    let variables = all().labels(&format!("{}=true", labels::VARIABLES));
    let cms = api_for::<Meta<ConfigMap>>(c, ns);
    let on_cm = on_variables_source::<ConfigMap>(wake, "ConfigMap");
    let variable_config_maps = informed(w, cms, variables, "configmaps", on_cm);
    let caches = Caches {
        terraform_clusters: tc_store,
        terraform_machines: tm_store,
        terraform_machine_pools: tmp_store,
        clusters: cluster_store,
        machines: machine_store,
        machine_pools: mp_store,
        identities: tci_store,
        jobs,
        pods,
        secrets,
        service_accounts,
        role_bindings,
        leases,
        namespaces,
        variable_config_maps,
        decoded,
        written_jobs: WrittenJobs::default(),
        own_writes,
        lease_clock: crate::runtime::leases::LeaseClock::default(),
    };
    let run = futures::future::join_all(std::mem::take(w))
        .map(drop)
        .boxed();
    (caches, triggers, run)
}

impl Caches {
    /// Stores that hold nothing and never fill (no watch feeds them): what a [`crate::Context`]
    /// holds until [`crate::controller::run`] starts the real ones.
    pub fn unstarted() -> Self {
        Self {
            terraform_clusters: reflector::store().0,
            terraform_machines: reflector::store().0,
            terraform_machine_pools: reflector::store().0,
            clusters: reflector::store().0,
            machines: reflector::store().0,
            machine_pools: reflector::store().0,
            identities: reflector::store().0,
            jobs: reflector::store().0,
            pods: reflector::store().0,
            secrets: reflector::store().0,
            service_accounts: reflector::store().0,
            role_bindings: reflector::store().0,
            leases: reflector::store().0,
            namespaces: reflector::store().0,
            variable_config_maps: reflector::store().0,
            decoded: Decoded::default(),
            written_jobs: WrittenJobs::default(),
            own_writes: OwnWrites::default(),
            lease_clock: crate::runtime::leases::LeaseClock::default(),
        }
    }

    /// Waits until every store holds its first complete list.
    pub async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.terraform_clusters.wait_until_ready().await?;
        self.terraform_machines.wait_until_ready().await?;
        self.terraform_machine_pools.wait_until_ready().await?;
        self.clusters.wait_until_ready().await?;
        self.machines.wait_until_ready().await?;
        self.machine_pools.wait_until_ready().await?;
        self.identities.wait_until_ready().await?;
        self.jobs.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.secrets.wait_until_ready().await?;
        self.service_accounts.wait_until_ready().await?;
        self.role_bindings.wait_until_ready().await?;
        self.leases.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        self.variable_config_maps.wait_until_ready().await
    }

    /// A Secret's metadata.
    pub fn secret(&self, ns: &str, name: &str) -> Option<Arc<Meta<Secret>>> {
        self.secrets.get(&ObjectRef::new(name).within(ns))
    }

    /// The Secrets of `ns` carrying label `key=value`.
    pub fn secrets_labelled(&self, ns: &str, key: &str, value: &str) -> Vec<Arc<Meta<Secret>>> {
        self.secrets.state_filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .map(String::as_str)
                    == Some(value)
        })
    }

    /// The running Jobs per (owner kind, operation), every pair of the reconciled kinds and the
    /// operations listed (zero when none runs): `captf_jobs_active` at scrape time.
    pub fn jobs_active(&self) -> Vec<(String, String, i64)> {
        let mut counts = jobs_active_zero_series();
        for job in self.jobs.state() {
            if !crate::runtime::leases::job_active(&job) {
                continue;
            }
            let labels = job.metadata.labels.clone().unwrap_or_default();
            if let (Some(kind), Some(op)) = (
                labels.get(api::constants::labels::OWNER_KIND),
                labels.get(api::constants::labels::OP),
            ) {
                *counts.entry((kind.clone(), op.clone())).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .map(|((kind, op), n)| (kind, op, n))
            .collect()
    }

    /// The Jobs of `ns` owned by the object with `uid`: the cached ones, and those this manager
    /// created that the cache does not show yet (forgotten once it does).
    pub fn jobs_of(&self, ns: &str, uid: &str) -> Vec<Arc<Job>> {
        self.jobs_where(ns, |j| j.owner_references().iter().any(|o| o.uid == uid))
    }

    /// The Jobs of `ns` that `keep` accepts, the cached ones and those this manager created that
    /// the cache does not show yet.
    pub fn jobs_where(&self, ns: &str, keep: impl Fn(&Job) -> bool) -> Vec<Arc<Job>> {
        let owned = |j: &Job| j.metadata.namespace.as_deref() == Some(ns) && keep(j);
        let mut jobs = self.jobs.state_filter(|j| owned(j));
        let mut written = self
            .written_jobs
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        written.retain(|_, (j, since)| {
            let cached = self.jobs.get(&ObjectRef::from_obj(j.as_ref()));
            !shows(cached.as_deref(), j) && since.elapsed() < WRITTEN_JOB_FOR
        });
        for (j, _) in written.values().filter(|(j, _)| owned(j)) {
            match jobs.iter_mut().find(|c| c.metadata.name == j.metadata.name) {
                Some(cached) => *cached = j.clone(),
                None => jobs.push(j.clone()),
            }
        }
        jobs
    }
}

/// A TerraformCluster wakes itself on any change but its status, and its machines when its spec,
/// metadata or `provisioned` changed (never for the rest of its status).
fn on_terraform_cluster(wake: Wake) -> impl FnMut(&watcher::Event<TerraformCluster>) + Send {
    let mut own = Seen::default();
    let mut for_machines = Seen::default();
    move |event| {
        let Some((tc, deleted)) = touched(event) else {
            return;
        };
        let key = key_of(tc);
        let ns = tc.namespace();
        let cluster = tc_cluster_name(tc);
        if deleted {
            own.forget(&key);
            for_machines.forget(&key);
            wake.decoded.forget(&key);
            wake.departed(ns.clone());
        } else if own.changed(key.clone(), own_print(tc, &tc.spec))
            && !wake.own_writes.seen("TerraformCluster", &tc.metadata)
        {
            wake.cluster(ObjectRef::from_obj(tc));
        }
        // Machines never read the clusterctl move block the cluster's own Jobs toggle.
        let mut for_them = tc.metadata.clone();
        if let Some(a) = for_them.annotations.as_mut() {
            a.remove(api::constants::annotations::BLOCK_MOVE);
        }
        let print = meta_print(
            &for_them,
            &(
                &tc.spec,
                provisioned_of(tc.status.as_ref().map(|s| &s.workload)),
            ),
        );
        if (deleted || for_machines.changed(key, print))
            && let Some(cluster) = cluster
        {
            wake.machines_of(ns.as_deref(), &cluster);
        }
    }
}

/// A member of a cluster (a TerraformMachine, a TerraformMachinePool) wakes itself on any change
/// its `print` sees (not its status) but its pass's own writes, and its cluster's TerraformCluster
/// only when it appears or goes (a deleting cluster waits for its machines and pools).
fn on_member<K>(
    wake: Wake,
    kind: &'static str,
    print: fn(&K) -> u64,
    wake_it: fn(&Wake, ObjectRef<K>),
) -> impl FnMut(&watcher::Event<K>) + Send
where
    K: Resource<DynamicType = ()> + Send,
{
    let mut own = Seen::default();
    let mut present = HashSet::new();
    move |event| {
        let Some((member, deleted)) = touched(event) else {
            return;
        };
        let key = key_of(member);
        let ns = member.namespace();
        let cluster = member.labels().get(labels::CLUSTER_NAME).cloned();
        let arrived_or_left = if deleted {
            own.forget(&key);
            wake.decoded.forget(&key);
            wake.departed(ns.clone());
            present.remove(&key)
        } else {
            if own.changed(key.clone(), print(member)) && !wake.own_writes.seen(kind, member.meta())
            {
                wake_it(&wake, ObjectRef::from_obj(member));
            }
            present.insert(key)
        };
        if arrived_or_left && let Some(cluster) = cluster {
            wake.clusters_of(ns.as_deref(), &cluster);
        }
    }
}

/// A TerraformMachine wakes itself on any change but its status and the `spec.providerID` CAPTF
/// writes (see [`terraform_machine_print`]); its TerraformCluster as [`on_member`] says.
fn on_terraform_machine(wake: Wake) -> impl FnMut(&watcher::Event<TerraformMachine>) + Send {
    on_member(
        wake,
        "TerraformMachine",
        terraform_machine_print,
        Wake::machine,
    )
}

/// A TerraformMachinePool wakes itself on any change but its status; its TerraformCluster as
/// [`on_member`] says.
fn on_pool(wake: Wake) -> impl FnMut(&watcher::Event<TerraformMachinePool>) + Send {
    on_member(
        wake,
        "TerraformMachinePool",
        |pool: &TerraformMachinePool| own_print(pool, &pool.spec),
        Wake::pool,
    )
}

/// A Cluster wakes the TerraformCluster it names when its spec, metadata, provisioning or
/// control-plane initialization changed, and its machines when its spec, metadata or
/// `infrastructureProvisioned` changed.
fn on_cluster(wake: Wake) -> impl FnMut(&watcher::Event<Cluster>) + Send {
    let mut for_tc = Seen::default();
    let mut for_machines = Seen::default();
    move |event| {
        let Some((c, deleted)) = touched(event) else {
            return;
        };
        let key = key_of(c);
        let ns = c.namespace();
        let status = c.status.as_ref();
        let infra = status
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.infrastructure_provisioned);
        let cp = status.and_then(api::capi::ClusterStatus::control_plane_initialized);
        let fds = status.and_then(|s| s.failure_domains.as_ref());
        let tc_print = own_print(c, &(&c.spec, infra, cp, fds));
        let machines_print = own_print(c, &(&c.spec, infra));
        if (deleted || for_tc.changed(key.clone(), tc_print))
            && let Some(r) = &c.spec.infrastructure_ref
            && r.api_group == api::GROUP
            && r.kind == "TerraformCluster"
        {
            wake.cluster(within(ObjectRef::new(&r.name), ns.as_deref()));
        }
        if (deleted || for_machines.changed(key.clone(), machines_print))
            && let Some(name) = &c.metadata.name
        {
            wake.machines_of(ns.as_deref(), name);
        }
        if deleted {
            for_tc.forget(&key);
            for_machines.forget(&key);
        }
    }
}

/// A Cluster API owner (a Machine, a MachinePool) wakes the object its `infrastructureRef`
/// names, of the kind `infra_kind`, when its `print` changed or it went.
fn on_infrastructure_owner<K, T>(
    infra_kind: &'static str,
    print: fn(&K) -> u64,
    infrastructure_ref: fn(&K) -> Option<&api::capi::ContractVersionedObjectReference>,
    wake_it: impl Fn(ObjectRef<T>) + Send,
) -> impl FnMut(&watcher::Event<K>) + Send
where
    K: Resource + Send,
    T: Resource<DynamicType = ()>,
{
    let mut seen = Seen::default();
    move |event| {
        let Some((owner, deleted)) = touched(event) else {
            return;
        };
        let changed = seen.changed_or_gone(key_of(owner), deleted, || print(owner));
        if changed
            && let Some(r) = infrastructure_ref(owner)
            && r.api_group == api::GROUP
            && r.kind == infra_kind
        {
            wake_it(within(
                ObjectRef::new(&r.name),
                owner.meta().namespace.as_deref(),
            ));
        }
    }
}

/// A Machine wakes the TerraformMachine it names when what its passes read of it changed (see
/// [`machine_print`]; not for its status).
fn on_machine(wake: Wake) -> impl FnMut(&watcher::Event<Machine>) + Send {
    on_infrastructure_owner(
        "TerraformMachine",
        machine_print,
        |m: &Machine| m.spec.infrastructure_ref.as_ref(),
        move |r| wake.machine(r),
    )
}

/// A MachinePool wakes the TerraformMachinePool it names when its spec or metadata changed (its
/// replicas, annotations, template labels, bootstrap Secret), not for its status.
fn on_machine_pool(wake: Wake) -> impl FnMut(&watcher::Event<MachinePool>) + Send {
    on_infrastructure_owner(
        "TerraformMachinePool",
        |mp: &MachinePool| own_print(mp, &mp.spec),
        |mp: &MachinePool| mp.spec.template.spec.infrastructure_ref.as_ref(),
        move |r| wake.pool(r),
    )
}

/// An identity wakes its own status controller on any change, and every object when its spec or
/// its `Ready` status changed (its Secret appeared or went).
fn on_identity(wake: Wake) -> impl FnMut(&watcher::Event<TerraformClusterIdentity>) + Send {
    let mut seen = Seen::default();
    move |event| {
        let Some((tci, deleted)) = touched(event) else {
            return;
        };
        let key = key_of(tci);
        if !deleted {
            wake.identity(ObjectRef::from_obj(tci));
        }
        let ready = tci
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == ctype::READY))
            .map(|c| c.status.clone());
        let changed = seen.changed_or_gone(key, deleted, || {
            fingerprint(&(tci.metadata.generation, ready))
        });
        if changed {
            wake.everyone(None);
        }
    }
}

/// A Job wakes the object owning it when it appears or goes, or when what bookkeeping reads of it
/// changed (see [`job_print`]): not for each count its controller updates while it runs, nor for
/// its creation and bookkeeping by a pass (see [`OwnWrites`]).
fn on_job(wake: Wake) -> impl FnMut(&watcher::Event<Job>) + Send {
    let mut seen = Seen::default();
    move |event| {
        let Some((job, deleted)) = touched(event) else {
            return;
        };
        let key = key_of(job);
        let changed = seen.changed_or_gone(key, deleted, || job_print(job))
            && (deleted || !wake.own_writes.seen("Job", &job.metadata));
        if changed {
            for o in job.owner_references() {
                wake.owner(job.namespace().as_deref(), &o.kind, &o.name);
            }
        }
    }
}

/// A runner pod wakes its Job's owner when the set of its containers whose image cannot be
/// pulled changes (the kubelet's `ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`):
/// `ApplyJobSucceeded` (or the drift or restore condition) says `ImagePullFailed` as soon as the kubelet does, and a deletion waiting
/// on such a Job deletes it. Nothing else of a pod wakes a pass: its Job says when it ends.
fn on_pod(wake: Wake, jobs: Store<Job>) -> impl FnMut(&watcher::Event<Pod>) + Send {
    let mut seen = Seen::default();
    move |event| {
        let Some((pod, deleted)) = touched(event) else {
            return;
        };
        let key = key_of(pod);
        if deleted {
            seen.forget(&key);
            return;
        }
        let print = pull_failures_print(pod);
        // A pod seen first with no failed pull changes nothing a pass shows.
        let before = seen.0.insert(key, print);
        if before == Some(print) || (before.is_none() && print == 0) {
            return;
        }
        let ns = pod.namespace();
        for owner in pod.owner_references().iter().filter(|o| o.kind == "Job") {
            let job = ObjectRef::<Job>::new(&owner.name);
            let Some(job) = jobs.get(&within(job, ns.as_deref())) else {
                continue;
            };
            for o in job.owner_references() {
                wake.owner(ns.as_deref(), &o.kind, &o.name);
            }
        }
    }
}

/// The containers of a pod that cannot pull their image (0: none). Not the reason: the kubelet
/// alternates `ErrImagePull` and `ImagePullBackOff` for as long as the pull fails.
fn pull_failures_print(pod: &Pod) -> u64 {
    let Some(status) = pod.status.as_ref() else {
        return 0;
    };
    let failing: Vec<&str> = (status.init_container_statuses.iter().flatten())
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| {
            let reason = c.state.as_ref()?.waiting.as_ref()?.reason.as_deref()?;
            crate::runtime::kubeutil::IMAGE_PULL_FAILURES
                .contains(&reason)
                .then_some(c.name.as_str())
        })
        .collect();
    if failing.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    failing.hash(&mut h);
    h.finish().max(1)
}

/// What of a Job wakes its owner's pass (The Reconcile Lifecycle "Bookkeeping"): its labels and
/// annotations (operation, attempt, inputs hash, bookkept outcome), its deletion, when it started,
/// and its `Complete` or `Failed` condition. Not its active, ready or terminating counts as they
/// move, nor `SuccessCriteriaMet` or `FailureTarget` ahead of the final condition: the stuck-Job
/// check that reads whether a pod ever ran is timed, not woken.
fn job_print(job: &Job) -> u64 {
    let status = job.status.as_ref();
    let finished = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| (&c.type_, &c.reason))
        .collect::<Vec<_>>();
    let m = &job.metadata;
    fingerprint(&(
        &m.labels,
        &m.annotations,
        m.deletion_timestamp.is_some(),
        status.and_then(|s| s.start_time.as_ref()),
        finished,
    ))
}

/// A Secret wakes: the objects owning it (state, durable inputs; a mirror's owners as
/// [`MirrorsSeen`] says); the identities whose credentials it holds, and the identity a mirror
/// belongs to (as [`MirrorsSeen`] says); the TerraformMachine whose
/// Machine's bootstrap data it is; and, labelled `captf.io/variables=true`, the objects whose
/// `variablesFrom` name it. Its cached decodings go when it changes.
fn on_secret(wake: Wake) -> impl FnMut(&watcher::Event<Meta<Secret>>) + Send {
    let mut variables = on_variables_source::<Secret>(wake.clone(), "Secret");
    let mut mirrors = MirrorsSeen::default();
    move |event| {
        let Some((s, deleted)) = touched(event) else {
            return;
        };
        let ns = s.namespace();
        let name = s.name_any();
        if is_mirror_meta(&s.metadata) {
            let wakes = mirrors.wakes(&s.metadata, deleted);
            for o in &wakes.owners {
                wake.owner(ns.as_deref(), &o.kind, &o.name);
            }
            if wakes.identity
                && let Some(identity) = s.annotations().get(api::constants::annotations::IDENTITY)
            {
                wake.identity(ObjectRef::new(identity));
            }
        } else if !wake.own_writes.seen("Secret", &s.metadata) || deleted {
            // Nothing a paused object's Secret changes is the paused branch's to do (it bookkeeps
            // the object's Jobs, which wake it themselves); the unpause wakes the object, and
            // that pass reads its Secrets.
            for o in s.owner_references() {
                if !wake.paused(ns.as_deref(), &o.kind, &o.name) {
                    wake.owner(ns.as_deref(), &o.kind, &o.name);
                }
            }
        }
        for tci in wake.stores.tcis.state() {
            if let Some(r) = &tci.spec.secret_ref
                && Some(r.namespace.as_str()) == ns.as_deref()
                && r.name == name
            {
                wake.identity(ObjectRef::from_obj(tci.as_ref()));
            }
        }
        for m in wake.stores.machine_owners.state() {
            let bootstrap = m
                .spec
                .bootstrap
                .as_ref()
                .and_then(|b| b.data_secret_name.as_deref());
            if m.namespace() == ns
                && bootstrap == Some(name.as_str())
                && let Some(r) = &m.spec.infrastructure_ref
                && r.api_group == api::GROUP
                && r.kind == "TerraformMachine"
            {
                wake.machine(within(ObjectRef::new(&r.name), ns.as_deref()));
            }
        }
        for mp in wake.stores.pool_owners.state() {
            let bootstrap = mp.spec.template.spec.bootstrap.as_ref();
            if mp.namespace() == ns
                && bootstrap.and_then(|b| b.data_secret_name.as_deref()) == Some(name.as_str())
                && let Some(r) = &mp.spec.template.spec.infrastructure_ref
                && r.api_group == api::GROUP
                && r.kind == "TerraformMachinePool"
            {
                wake.pool(within(ObjectRef::new(&r.name), ns.as_deref()));
            }
        }
        if s.labels()
            .get(labels::VARIABLES)
            .is_some_and(|v| v == "true")
        {
            variables(event);
        }
    }
}

/// What a credential mirror's change wakes (spec: Identities and credentials, "the mirror keeps
/// each user as an owner"). Every object using an identity in a namespace owns its one mirror and
/// adds itself when it first runs: waking every owner at each addition would make N users cost
/// N² passes. So a mirror wakes all its owners, and its identity, only when it appears, goes, or
/// its labels or annotations (its identity, its source's hash) change; an update that changed
/// only the owners wakes just the owners it dropped, which must add themselves again.
#[derive(Default)]
struct MirrorsSeen(HashMap<String, (u64, Vec<MirrorOwner>)>);

/// One owner of a mirror, as far as waking it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MirrorOwner {
    uid: String,
    kind: String,
    name: String,
}

/// The wakes of one mirror event.
#[derive(Debug, Default, PartialEq, Eq)]
struct MirrorWakes {
    owners: Vec<MirrorOwner>,
    identity: bool,
}

impl MirrorsSeen {
    fn wakes(&mut self, meta: &ObjectMeta, deleted: bool) -> MirrorWakes {
        let key = meta_key(meta);
        let owners: Vec<MirrorOwner> = meta
            .owner_references
            .iter()
            .flatten()
            .map(|o| MirrorOwner {
                uid: o.uid.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            })
            .collect();
        if deleted {
            self.0.remove(&key);
            return MirrorWakes {
                owners,
                identity: true,
            };
        }
        let print = fingerprint(&(&meta.labels, &meta.annotations));
        let before = self.0.insert(key, (print, owners.clone()));
        match before {
            Some((was, old)) if was == print => MirrorWakes {
                owners: old
                    .into_iter()
                    .filter(|o| !owners.iter().any(|n| n.uid == o.uid))
                    .collect(),
                identity: false,
            },
            _ => MirrorWakes {
                owners,
                identity: true,
            },
        }
    }
}

/// A `variablesFrom` source (a ConfigMap or Secret labelled `captf.io/variables=true`) wakes the
/// objects of its namespace whose `variablesFrom` names it.
fn on_variables_source<K>(
    wake: Wake,
    kind: &'static str,
) -> impl FnMut(&watcher::Event<Meta<K>>) + Send
where
    K: Resource,
{
    move |event| {
        let Some((source, _)) = touched(event) else {
            return;
        };
        let ns = source.metadata.namespace.as_deref();
        let name = source.metadata.name.as_deref().unwrap_or_default();
        let names_it = |w: &api::workload::WorkspaceSpec| {
            w.variables_from.iter().flatten().any(|v| {
                let r = if kind == "Secret" {
                    v.secret_ref.as_ref()
                } else {
                    v.config_map_ref.as_ref()
                };
                r.is_some_and(|r| r.name == name)
            })
        };
        wake.workloads(ns, |_, _, w| names_it(w));
    }
}

/// A cluster write lease wakes the machines of its cluster (one may wait for it).
fn on_lease(wake: Wake) -> impl FnMut(&watcher::Event<Lease>) + Send {
    move |event| {
        let Some((lease, _)) = touched(event) else {
            return;
        };
        let l = lease.labels();
        if l.get(labels::LEASE).map(String::as_str) == Some(api::constants::lease_kinds::CLUSTER)
            && let Some(cluster) = l.get(labels::CLUSTER_NAME).filter(|c| !c.is_empty())
        {
            wake.machines_of(lease.namespace().as_deref(), cluster);
        }
    }
}

/// A namespace's labels wake its objects (an identity's selector may now match, or no longer).
fn on_namespace(wake: Wake) -> impl FnMut(&watcher::Event<Meta<Namespace>>) + Send {
    let mut seen = Seen::default();
    move |event| {
        let Some((n, deleted)) = touched(event) else {
            return;
        };
        let key = key_of(n);
        if deleted {
            seen.forget(&key);
            return;
        }
        let first = !seen.0.contains_key(&key);
        if seen.changed(key, fingerprint(&n.metadata.labels)) && !first {
            wake.everyone(n.metadata.name.as_deref());
        }
    }
}

/// A ServiceAccount wakes the objects of its namespace when it appears after the initial list
/// or its `captf.io/runner` opt-in label changes: an object held at
/// `RunnerRBACReady=False/ServiceAccountNotOptedIn` goes on as soon as its override is created or
/// labelled (RBAC "Opting in a ServiceAccount"). CAPTF's own `captf-runner` wakes no one.
fn on_service_account(wake: Wake) -> impl FnMut(&watcher::Event<Meta<ServiceAccount>>) + Send {
    let mut seen = Seen::default();
    move |event| {
        let Some((sa, deleted)) = touched(event) else {
            return;
        };
        if sa.metadata.name.as_deref() == Some(RUNNER) {
            return;
        }
        let key = key_of(sa);
        let opt_in = || {
            let labels = sa.metadata.labels.as_ref();
            fingerprint(&labels.and_then(|l| l.get(labels::RUNNER)))
        };
        let changed = seen.changed_or_gone(key, deleted, opt_in);
        if changed && matches!(event, watcher::Event::Apply(_)) {
            wake.everyone(sa.metadata.namespace.as_deref());
        }
    }
}

/// The `captf-runner` RoleBinding wakes the objects of its namespace when it goes, or when one
/// CAPTF does not manage (no `captf.io/managed=true` label) appears or changes: the first makes
/// the next pass create it again, the second is `RunnerRBACReady=False/RBACFailed` at once
/// (RBAC "The runner RoleBinding"). CAPTF's own writes of its binding wake no one.
fn on_role_binding(wake: Wake) -> impl FnMut(&watcher::Event<RoleBinding>) + Send {
    move |event| {
        let Some((rb, deleted)) = touched(event) else {
            return;
        };
        let ours = rb
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::MANAGED))
            .is_some_and(|v| v == "true");
        if deleted || (!ours && matches!(event, watcher::Event::Apply(_))) {
            wake.everyone(rb.metadata.namespace.as_deref());
        }
    }
}

/// `captf_jobs_active`'s series before any Job is counted: zero for every reconciled kind (the
/// cluster, the machine and the machine pool) and every operation, so a dashboard sees 0 rather
/// than no data.
pub fn jobs_active_zero_series() -> std::collections::BTreeMap<(String, String), i64> {
    use contract::names::{ObjectKind, Operation};
    [
        ObjectKind::Cluster,
        ObjectKind::Machine,
        ObjectKind::MachinePool,
    ]
    .into_iter()
    .flat_map(|k| {
        Operation::ALL
            .iter()
            .map(move |op| ((k.kind().to_owned(), op.as_str().to_owned()), 0))
    })
    .collect()
}

/// Whether Secret metadata is a credential mirror's (`captf.io/mirrored=true`).
pub fn is_mirror_meta(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(api::constants::labels::MIRRORED))
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {

    /// A [`super::Wake`] over stores the test fills, and the receiver of its machine triggers.
    fn wake_for_test() -> (
        super::Wake,
        super::Writer<super::TerraformMachine>,
        super::Writer<super::Cluster>,
        super::UnboundedReceiver<super::ObjectRef<super::TerraformMachine>>,
    ) {
        use kube::runtime::reflector::store;
        let (tms, tm_writer) = store();
        let (cluster_owners, cluster_writer) = store();
        let stores = super::WakeStores {
            tcs: store().0,
            tms,
            tmps: store().0,
            pool_owners: store().0,
            tcis: store().0,
            machine_owners: store().0,
            cluster_owners,
        };
        let (wake, triggers) = super::Wake::new(
            stores,
            super::Decoded::default(),
            super::OwnWrites::default(),
        );
        let tm_rx = triggers.machines;
        (wake, tm_writer, cluster_writer, tm_rx)
    }

    /// A Secret owned by a TerraformMachine wakes it, unless the caches show the machine or its
    /// Cluster paused: the unpause wakes it instead (the Secrets `clusterctl move` creates next
    /// to a paused object cost it no pass).
    #[test]
    fn an_owned_secret_does_not_wake_a_paused_object() {
        use kube::runtime::watcher::Event;
        let (wake, mut tms, mut clusters, mut woken) = wake_for_test();
        let tm = |name: &str, annotations: serde_json::Value| -> super::TerraformMachine {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                "kind": "TerraformMachine",
                "metadata": {"name": name, "namespace": "ns", "annotations": annotations,
                    "labels": {"cluster.x-k8s.io/cluster-name": "c"}},
                "spec": {"source": {"image": "registry.example/m:1"}}
            }))
            .expect("a TerraformMachine")
        };
        let cluster = |paused: bool| -> super::Cluster {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "c", "namespace": "ns"},
                "spec": {"paused": paused}
            }))
            .expect("a Cluster")
        };
        let secret = |owner: &str| -> super::Meta<super::Secret> {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("state-{owner}"), "namespace": "ns",
                    "resourceVersion": "1",
                    "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                        "kind": "TerraformMachine", "name": owner, "uid": "u"}]}
            }))
            .expect("Secret metadata")
        };
        tms.apply_watcher_event(&Event::Apply(tm("running", serde_json::json!({}))));
        tms.apply_watcher_event(&Event::Apply(tm(
            "annotated",
            serde_json::json!({"cluster.x-k8s.io/paused": ""}),
        )));
        let mut on_secret = super::on_secret(wake);
        let names = |woken: &mut super::UnboundedReceiver<_>| {
            let mut out = Vec::new();
            while let Ok(r) = woken.try_recv() {
                let r: super::ObjectRef<super::TerraformMachine> = r;
                out.push(r.name);
            }
            out
        };
        for name in ["running", "annotated", "unknown"] {
            on_secret(&Event::Apply(secret(name)));
        }
        assert_eq!(
            names(&mut woken),
            ["running", "unknown"],
            "the annotated machine is paused; one the cache does not show yet is woken"
        );
        clusters.apply_watcher_event(&Event::Apply(cluster(true)));
        on_secret(&Event::Apply(secret("running")));
        on_secret(&Event::Delete(secret("running")));
        assert!(names(&mut woken).is_empty(), "its Cluster is paused");
        clusters.apply_watcher_event(&Event::Apply(cluster(false)));
        on_secret(&Event::Apply(secret("running")));
        assert_eq!(names(&mut woken), ["running"]);
    }

    fn job(name: &str, rv: &str, bookkept: bool) -> super::Job {
        let annotations = if bookkept {
            serde_json::json!({"captf.io/bookkept": "true"})
        } else {
            serde_json::json!({})
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                "annotations": annotations,
                "creationTimestamp": "2026-01-01T00:00:00Z"}
        }))
        .expect("job")
    }

    /// A Job this manager created is seen before the cache shows it; one it marked bookkept is
    /// seen bookkept until the cache shows the mark (not the cached version without it, which a
    /// pass would bookkeep again); each is forgotten once the cache shows the write.
    #[test]
    fn jobs_written_are_seen_until_the_cache_shows_the_write() {
        use kube::runtime::watcher::Event;
        let (store, mut writer) = kube::runtime::reflector::store();
        let mut caches = super::Caches::unstarted();
        caches.jobs = store;
        let bookkept = |caches: &super::Caches, name: &str| {
            caches
                .jobs_where("ns", |_| true)
                .iter()
                .find(|j| j.metadata.name.as_deref() == Some(name))
                .map(|j| super::is_bookkept(j))
        };
        caches.written_jobs.add(job("new", "5", false));
        assert_eq!(bookkept(&caches, "new"), Some(false));
        writer.apply_watcher_event(&Event::Apply(job("done", "7", false)));
        caches.written_jobs.add(job("done", "8", true));
        assert_eq!(
            bookkept(&caches, "done"),
            Some(true),
            "the mark, not the cache"
        );
        assert_eq!(caches.jobs_where("ns", |_| true).len(), 2);
        writer.apply_watcher_event(&Event::Apply(job("new", "5", false)));
        writer.apply_watcher_event(&Event::Apply(job("done", "8", true)));
        assert_eq!(bookkept(&caches, "done"), Some(true));
        assert_eq!(bookkept(&caches, "new"), Some(false));
        let remembered = caches.written_jobs.0.lock().map_or(9, |m| m.len());
        assert_eq!(remembered, 0, "both writes shown: nothing left to remember");
    }

    /// A cached object keeps every annotation but `kubectl apply`'s last-applied copy, and no
    /// managed fields.
    #[test]
    fn cached_metadata_drops_the_last_applied_copy_and_managed_fields() {
        use super::{LAST_APPLIED, ObjectMeta, trim_meta};
        let mut meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "s",
            "annotations": {LAST_APPLIED: "{\"data\":{}}", "captf.io/source-hash": "h"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
        }))
        .unwrap_or_default();
        trim_meta(&mut meta);
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.len(), 1);
        assert_eq!(
            annotations.get("captf.io/source-hash").map(String::as_str),
            Some("h")
        );
        assert!(meta.managed_fields.is_none());
        let mut only: ObjectMeta = serde_json::from_value(serde_json::json!({
            "annotations": {LAST_APPLIED: "{}"}
        }))
        .unwrap_or_default();
        trim_meta(&mut only);
        assert!(only.annotations.is_none());
    }

    /// A pod's print changes when a container starts or stops failing to pull its image, not
    /// when the kubelet alternates `ErrImagePull` and `ImagePullBackOff`.
    #[test]
    fn a_pod_wakes_its_owner_only_when_its_failing_pulls_change() {
        use super::{Pod, pull_failures_print};
        let pod = |waiting: &[(&str, &str)]| -> Pod {
            let statuses: Vec<serde_json::Value> = waiting
                .iter()
                .map(|(name, reason)| {
                    serde_json::json!({"name": name, "image": "x", "imageID": "", "ready": false,
                        "restartCount": 0, "state": {"waiting": {"reason": reason}}})
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "status": {"initContainerStatuses": statuses}
            }))
            .unwrap_or_default()
        };
        let none = pull_failures_print(&pod(&[("runner", "PodInitializing")]));
        let failing = pull_failures_print(&pod(&[("runner", "ErrImagePull")]));
        let backing_off = pull_failures_print(&pod(&[("runner", "ImagePullBackOff")]));
        let both = pull_failures_print(&pod(&[
            ("runner", "ErrImagePull"),
            ("module", "InvalidImageName"),
        ]));
        assert_eq!(none, 0);
        assert_ne!(failing, 0);
        assert_eq!(failing, backing_off);
        assert_ne!(failing, both);
    }

    /// L9: `captf_jobs_active` has a zero series for every reconciled kind, the machine pool
    /// included, and every operation.
    #[test]
    fn jobs_active_has_a_zero_series_for_every_kind() {
        let series = jobs_active_zero_series();
        for kind in [
            "TerraformCluster",
            "TerraformMachine",
            "TerraformMachinePool",
        ] {
            for op in contract::names::Operation::ALL {
                assert_eq!(
                    series.get(&(kind.to_owned(), op.as_str().to_owned())),
                    Some(&0),
                    "{kind} {op:?}"
                );
            }
        }
    }

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn mirror(hash: &str, owners: &[&str]) -> ObjectMeta {
        ObjectMeta {
            name: Some("captf-credentials-cloud".into()),
            namespace: Some("team".into()),
            uid: Some("mirror-uid".into()),
            labels: Some(BTreeMap::from([(labels::MIRRORED.into(), "true".into())])),
            annotations: Some(BTreeMap::from([(
                api::constants::annotations::SOURCE_HASH.into(),
                hash.into(),
            )])),
            owner_references: Some(
                owners
                    .iter()
                    .map(|o| OwnerReference {
                        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
                        kind: "TerraformMachine".into(),
                        name: (*o).into(),
                        uid: format!("uid-{o}"),
                        ..OwnerReference::default()
                    })
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    fn names(w: &MirrorWakes) -> Vec<&str> {
        w.owners.iter().map(|o| o.name.as_str()).collect()
    }

    #[test]
    fn a_mirror_gaining_owners_wakes_no_one() {
        let mut seen = MirrorsSeen::default();
        let first = seen.wakes(&mirror("h1", &["a"]), false);
        assert_eq!(names(&first), ["a"]);
        assert!(first.identity);
        // Each new user adds itself: the earlier ones are not woken again, so N users cost N
        // passes, not N².
        for n in 2..=50 {
            let owners: Vec<String> = (1..=n).map(|i| format!("m{i}")).collect();
            let refs: Vec<&str> = owners.iter().map(String::as_str).collect();
            let w = seen.wakes(&mirror("h1", &refs), false);
            if n == 2 {
                // "a" is gone from this list: it must add itself again.
                assert_eq!(names(&w), ["a"]);
            } else {
                assert_eq!(w, MirrorWakes::default(), "at {n} owners");
            }
        }
    }

    #[test]
    fn a_dropped_owner_is_woken_to_add_itself_again() {
        let mut seen = MirrorsSeen::default();
        seen.wakes(&mirror("h1", &["a", "b", "c"]), false);
        let w = seen.wakes(&mirror("h1", &["a", "c"]), false);
        assert_eq!(names(&w), ["b"]);
        assert!(!w.identity);
    }

    #[test]
    fn a_changed_source_or_a_deleted_mirror_wakes_every_owner_and_the_identity() {
        let mut seen = MirrorsSeen::default();
        seen.wakes(&mirror("h1", &["a", "b"]), false);
        let refreshed = seen.wakes(&mirror("h2", &["a", "b"]), false);
        assert_eq!(names(&refreshed), ["a", "b"]);
        assert!(refreshed.identity);
        let gone = seen.wakes(&mirror("h2", &["a", "b"]), true);
        assert_eq!(names(&gone), ["a", "b"]);
        assert!(gone.identity);
        // Seen afresh after its deletion: a new mirror wakes its owners.
        let again = seen.wakes(&mirror("h2", &["a"]), false);
        assert_eq!(names(&again), ["a"]);
    }

    fn named(name: &str, rv: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("team".into()),
            name: Some(name.into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn an_own_write_is_silent_once_whichever_comes_first() {
        let own = OwnWrites::default();
        let key = own_write_key("Secret", Some("team"), Some("a"));
        // The response first: only the event of that version is the write's own.
        own.expect(&key);
        own.settle(&key, Some("41".into()));
        assert!(own.seen("Secret", &named("a", "41")));
        assert!(!own.seen("Secret", &named("a", "41")), "once");
        // The event first: taken while in flight; the response after it expects nothing more.
        own.expect(&key);
        assert!(own.seen("Secret", &named("a", "42")));
        own.settle(&key, Some("42".into()));
        assert!(!own.seen("Secret", &named("a", "43")));
        // Another version than the one written wakes, and ends the expectation.
        own.expect(&key);
        own.settle(&key, Some("50".into()));
        assert!(!own.seen("Secret", &named("a", "49")));
        assert!(!own.seen("Secret", &named("a", "50")));
        // A failed write is expected no longer.
        own.expect(&key);
        own.settle(&key, None);
        assert!(!own.seen("Secret", &named("a", "60")));
        // Kinds and names do not mix.
        own.expect(&key);
        assert!(!own.seen("Job", &named("a", "61")));
        assert!(!own.seen("Secret", &named("b", "61")));
    }

    #[test]
    fn an_expectation_unmet_for_long_lapses() {
        let own = OwnWrites::default();
        let key = own_write_key("Job", Some("team"), Some("j"));
        own.0.lock().unwrap().insert(
            key,
            Expected::InFlight(
                std::time::Instant::now()
                    .checked_sub(EXPECTED_FOR)
                    .expect("the clock is past 30 s"),
            ),
        );
        assert!(!own.seen("Job", &named("j", "1")));
    }

    #[test]
    fn a_machine_wakes_its_terraform_machine_for_what_its_passes_read() {
        let machine = |provider_id: Option<&str>, version: &str| {
            let mut m: Machine = serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine",
                "metadata": {"name": "m", "namespace": "team", "uid": "u"},
                "spec": {"clusterName": "c", "version": version, "bootstrap": {}}
            }))
            .unwrap();
            m.spec.provider_id = provider_id.map(str::to_owned);
            m
        };
        let base = machine_print(&machine(None, "v1.31.0"));
        let mut copied = machine(Some("noop:///a"), "v1.31.0");
        copied.metadata.generation = Some(2);
        copied.metadata.finalizers = Some(vec!["machine.cluster.x-k8s.io".into()]);
        assert_eq!(base, machine_print(&copied));
        assert_ne!(base, machine_print(&machine(None, "v1.32.0")));
        let mut remediate = machine(None, "v1.31.0");
        remediate.metadata.annotations = Some(std::collections::BTreeMap::from([(
            api::constants::annotations::REMEDIATE_MACHINE.into(),
            String::new(),
        )]));
        assert_ne!(base, machine_print(&remediate));
    }

    #[test]
    fn a_terraform_machine_wakes_itself_for_all_but_the_provider_id_captf_writes() {
        let tm: TerraformMachine = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "TerraformMachine",
            "metadata": {"name": "m", "namespace": "team", "uid": "u", "generation": 1},
            "spec": {"source": {"image": "registry.example/noop:v1"}}
        }))
        .unwrap();
        let base = terraform_machine_print(&tm);
        let mut written = tm.clone();
        written.spec.provider_id = Some("noop:///team/m".into());
        written.metadata.generation = Some(2);
        assert_eq!(base, terraform_machine_print(&written));
        let mut annotated = tm.clone();
        annotated.metadata.annotations =
            Some(std::collections::BTreeMap::from([("a".into(), "b".into())]));
        assert_ne!(base, terraform_machine_print(&annotated));
        let mut other = tm.clone();
        other.spec.workspace.source.image = "registry.example/noop:v2".into();
        assert_ne!(base, terraform_machine_print(&other));
    }

    #[test]
    fn an_unchanged_mirror_wakes_no_one() {
        let mut seen = MirrorsSeen::default();
        seen.wakes(&mirror("h1", &["a", "b"]), false);
        assert_eq!(
            seen.wakes(&mirror("h1", &["a", "b"]), false),
            MirrorWakes::default()
        );
    }
}
