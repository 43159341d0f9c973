//! The process kubelet: a Node whose pods run as real processes (ENGINEERING.md §2).
//!
//! It registers a Ready `linux/amd64` Node (with the configured labels and taints) and keeps it
//! Ready, binds every pending unscheduled pod that [fits](placement::fits) it (there is no
//! scheduler: it applies the scheduler's NodeAffinity and TaintToleration filters itself, so
//! several kubelets can share one API server), and runs each pod on it: images pulled from the
//! loopback registry and unpacked once per digest, volumes under the state directory, init
//! containers in order then the main containers, each through the [shim](crate::shim) in its own
//! mount and PID namespace on an overlay of the image (read-only when `readOnlyRootFilesystem`).
//! It writes the pod status as a kubelet does, and on deletion sends SIGTERM, waits the grace
//! period, sends SIGKILL, records the exits and deletes the pod with grace period 0.
//!
//! State directory layout: `images/` (the image cache, see [`ImageStore`]), `pods/<uid>/`
//! (volumes and per-container scratch, removed when the pod finishes) and
//! `logs/<namespace>_<pod>_<uid>/<container>.log` (kept; see [`find_log`]).
//!
//! Supported: `restartPolicy` `Never` (what Jobs use), `OnFailure` and `Always` (restart with a
//! short back-off, init containers included); volumes `emptyDir`, `hostPath`, `secret`,
//! `configMap`, `downwardAPI` (`fieldRef`) and `projected` (those plus `serviceAccountToken`);
//! `env`/`envFrom` with `secretKeyRef`, `configMapKeyRef`, `fieldRef`; `$(VAR)` expansion.
//! With a [pod network](crate::podnet), each pod without `hostNetwork` has its own network
//! namespace and address (written to its status, so EndpointSlices fill in) and reaches the API
//! server at `KUBERNETES_SERVICE_HOST`/`PORT`; readiness probes (`httpGet`, `tcpSocket`) decide
//! when a container is Ready.
//!
//! Not supported: liveness, startup, `exec` and `grpc` probes, lifecycle hooks, resource limits
//! (no cgroups), `resourceFieldRef`, capabilities (a root container keeps the host's), seccomp,
//! ClusterIP Services from inside pods (no kube-proxy: pods reach the API server only), ephemeral
//! containers, sidecars (`restartPolicy: Always` on init containers), image pull secrets (the
//! registry needs none).

mod container;
mod env;
pub mod placement;
mod pod;
mod probe;
mod status;
mod volumes;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Binding, Node, NodeSpec, ObjectReference, Pod, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::image::ImageStore;
use crate::podnet::PodNetwork;

pub use status::POD_IP;

/// Configuration of a [`Kubelet`].
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// The Node's name.
    pub node_name: String,
    /// Where images, volumes, scratch and logs live.
    pub state_dir: PathBuf,
    /// The image cache (default `<state_dir>/images`). Point several kubelets (or test runs) at
    /// one directory to unpack each image digest once.
    pub image_dir: Option<PathBuf>,
    /// The `captf-testenv` binary whose `shim` subcommand runs containers (default:
    /// [`crate::shim::binary_path`]).
    pub shim_binary: Option<PathBuf>,
    /// How often secret, configMap and projected volumes are re-synced while a pod runs.
    pub sync_period: Duration,
    /// The pod network: each pod without `hostNetwork` gets its own network namespace and
    /// address on it, and reaches the API server through its gateway (see [`crate::podnet`]).
    /// Without one, every pod shares the host's network namespace and address (`127.0.0.1`).
    pub pod_network: Option<Arc<PodNetwork>>,
    /// Labels of the Node besides the default ones (`kubernetes.io/os`, `kubernetes.io/arch`,
    /// `kubernetes.io/hostname`, ...), which they override. Pods are bound here only when their
    /// `nodeSelector` and required node affinity match the whole set.
    pub labels: BTreeMap<String, String>,
    /// The Node's `spec.taints`: pods are bound here only when they tolerate every `NoSchedule`
    /// and `NoExecute` one.
    pub taints: Vec<Taint>,
}

impl KubeletConfig {
    /// A configuration with the defaults.
    pub fn new(node_name: &str, state_dir: impl Into<PathBuf>) -> Self {
        Self {
            node_name: node_name.to_owned(),
            state_dir: state_dir.into(),
            image_dir: None,
            shim_binary: None,
            sync_period: Duration::from_secs(2),
            pod_network: None,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }
}

/// What every pod worker shares.
pub(crate) struct Ctx {
    client: kube::Client,
    state_dir: PathBuf,
    shim_binary: PathBuf,
    images: ImageStore,
    api_host: String,
    api_port: u16,
    /// The pod network and the gateway address pods reach the API server at.
    network: Option<(Arc<PodNetwork>, String)>,
    sync_period: Duration,
    shutdown: watch::Receiver<bool>,
    /// Every label the Node was registered with, default ones included: what
    /// [`placement::fits`] matches pods against.
    labels: BTreeMap<String, String>,
    /// The Node's taints.
    taints: Vec<Taint>,
}

/// A running process kubelet. Dropping it stops it (containers are killed).
#[derive(Debug)]
pub struct Kubelet {
    node_name: String,
    state_dir: PathBuf,
    shutdown: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Kubelet {
    /// Registers the Node and starts serving pods on the current tokio runtime. `config` is the
    /// admin client configuration; its cluster URL is what containers get as
    /// `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT`.
    pub async fn start(config: kube::Config, kcfg: KubeletConfig) -> anyhow::Result<Self> {
        let url = config.cluster_url.clone();
        let api_host = url.host().unwrap_or("127.0.0.1").to_owned();
        let api_port = url.port_u16().unwrap_or(443);
        let client = kube::Client::try_from(config).context("building the kube client")?;
        let shim_binary = match kcfg.shim_binary.clone() {
            Some(p) => p,
            None => crate::shim::binary_path()?,
        };
        std::fs::create_dir_all(kcfg.state_dir.join("logs"))
            .with_context(|| format!("creating {}", kcfg.state_dir.display()))?;
        let images = ImageStore::new(
            kcfg.image_dir
                .clone()
                .unwrap_or_else(|| kcfg.state_dir.join("images")),
        )?;
        let network = match &kcfg.pod_network {
            Some(net) => {
                if !matches!(api_host.as_str(), "127.0.0.1" | "localhost") {
                    anyhow::bail!(
                        "the pod network relays pods to an API server on loopback, not {api_host}"
                    );
                }
                let relay = net.forward_to_loopback(api_port)?;
                Some((net.clone(), relay.ip().to_string()))
            }
            None => None,
        };
        let labels = node_labels(&kcfg.node_name, &kcfg.labels);
        register_node(&client, &kcfg.node_name, &labels, &kcfg.taints).await?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let ctx = Arc::new(Ctx {
            client,
            state_dir: kcfg.state_dir.clone(),
            shim_binary,
            images,
            api_host,
            api_port,
            network,
            sync_period: kcfg.sync_period,
            shutdown: shutdown_rx,
            labels,
            taints: kcfg.taints.clone(),
        });
        let node = kcfg.node_name.clone();
        let task = tokio::spawn(main_loop(ctx, node));
        info!(node = %kcfg.node_name, state_dir = %kcfg.state_dir.display(), "process kubelet started");
        Ok(Kubelet {
            node_name: kcfg.node_name,
            state_dir: kcfg.state_dir,
            shutdown,
            task: Some(task),
        })
    }

    /// Starts a kubelet from a kubeconfig file.
    pub async fn start_with_kubeconfig(
        kubeconfig: &Path,
        kcfg: KubeletConfig,
    ) -> anyhow::Result<Self> {
        let file = kube::config::Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await?;
        Self::start(config, kcfg).await
    }

    /// Starts a kubelet on a dedicated thread with its own runtime, for as long as the process
    /// lives (what a test binary sharing one kubelet between tests needs: a `#[tokio::test]`
    /// runtime ends with its test). Its containers die with the process.
    pub fn start_in_background(
        kubeconfig: &Path,
        kcfg: KubeletConfig,
    ) -> anyhow::Result<KubeletInfo> {
        let (tx, rx) = std::sync::mpsc::channel();
        let kubeconfig = kubeconfig.to_path_buf();
        std::thread::Builder::new()
            .name("captf-kubelet".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(anyhow::Error::from(e)));
                        return;
                    }
                };
                rt.block_on(async move {
                    match Kubelet::start_with_kubeconfig(&kubeconfig, kcfg).await {
                        Ok(k) => {
                            let _ = tx.send(Ok(k.info()));
                            let _keep = k;
                            std::future::pending::<()>().await;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                });
            })
            .context("spawning the kubelet thread")?;
        rx.recv().context("the kubelet thread died")?
    }

    /// Name and state directory.
    pub fn info(&self) -> KubeletInfo {
        KubeletInfo {
            node_name: self.node_name.clone(),
            state_dir: self.state_dir.clone(),
        }
    }

    /// Stops serving pods: containers are killed (no grace period), statuses are not written.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// Where a kubelet runs: its Node name and state directory.
#[derive(Debug, Clone)]
pub struct KubeletInfo {
    /// The Node's name.
    pub node_name: String,
    /// The state directory.
    pub state_dir: PathBuf,
}

impl KubeletInfo {
    /// The log of `container` in the most recent pod `namespace/pod` (see [`find_log`]).
    pub fn log_path(&self, namespace: &str, pod: &str, container: &str) -> Option<PathBuf> {
        find_log(&self.state_dir, namespace, pod, container)
    }

    /// The log text of `container` in pod `namespace/pod` (empty when there is none).
    pub fn logs(&self, namespace: &str, pod: &str, container: &str) -> String {
        self.log_path(namespace, pod, container)
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

impl Kubelet {
    /// See [`KubeletInfo::log_path`].
    pub fn log_path(&self, namespace: &str, pod: &str, container: &str) -> Option<PathBuf> {
        find_log(&self.state_dir, namespace, pod, container)
    }
}

/// The log file of `container` of the most recently started pod named `namespace/pod` under a
/// kubelet state directory: `logs/<namespace>_<pod>_<uid>/<container>.log` (stdout and stderr,
/// appended across restarts).
pub fn find_log(state_dir: &Path, namespace: &str, pod: &str, container: &str) -> Option<PathBuf> {
    let prefix = format!("{namespace}_{pod}_");
    std::fs::read_dir(state_dir.join("logs"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix(&prefix)
                .is_some_and(|uid| !uid.contains('_'))
        })
        .map(|e| e.path().join(format!("{container}.log")))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// A scratch directory `<tmp>/<prefix>-<pid>` for this process (a kubelet's state directory,
/// say), after removing the ones earlier processes with the same prefix left behind (their PID is
/// no longer alive): a process that is killed cannot clean up after itself.
pub fn scratch_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            if !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = tmp.join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn node_status(name: &str) -> serde_json::Value {
    let now = status::now();
    let capacity: BTreeMap<&str, Quantity> = [
        ("cpu", "32"),
        ("memory", "128Gi"),
        ("pods", "250"),
        ("ephemeral-storage", "500Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k, Quantity(v.to_owned())))
    .collect();
    let kernel = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({
            "type": t, "status": s, "reason": reason, "message": msg,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    json!({
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "captf-testenv process kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": POD_IP},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kernelVersion": kernel,
            "osImage": "captf-testenv",
            "containerRuntimeVersion": "captf-testenv://0.1.0",
            "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    })
}

/// The Node's labels: the ones a kubelet sets on its Node (OS, architecture, hostname), then
/// `extra`, which win over them.
fn node_labels(name: &str, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", name),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .chain(extra.clone())
    .collect()
}

/// Creates the Node with `labels` and `taints`, or, when it exists already (an earlier kubelet
/// of the same name), merge-patches them in: the configured labels get their values (labels
/// someone else set stay) and `spec.taints` becomes `taints`. Then posts its status.
async fn register_node(
    client: &kube::Client,
    name: &str,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: (!taints.is_empty()).then(|| NodeSpec {
            taints: Some(taints.to_vec()),
            ..Default::default()
        }),
        status: None,
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // A merge patch replaces a list whole; `null` removes the field.
            let taints = if taints.is_empty() {
                serde_json::Value::Null
            } else {
                json!(taints)
            };
            let patch = json!({ "metadata": { "labels": labels }, "spec": { "taints": taints } });
            nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .with_context(|| format!("updating the labels and taints of node {name}"))?;
        }
        Err(e) => return Err(e).with_context(|| format!("registering node {name}")),
    }
    heartbeat(client, name).await
}

async fn heartbeat(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": node_status(name) })),
        )
        .await
        .with_context(|| format!("updating the status of node {name}"))?;
    Ok(())
}

/// Binds `pod` to `node` through `pods/binding`. A conflict (the pod is bound already: another
/// kubelet that it fits was first, or its uid changed) or a 404 (it is gone) ends the attempt
/// quietly; other errors are retried for [`BIND_RETRY`].
async fn bind(client: kube::Client, pod: Arc<Pod>, node: String) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(node.clone()),
            ..Default::default()
        },
    };
    let api: Api<Pod> = Api::namespaced(client, &ns);
    // Retried while the API server cannot take it (restarting, etcd paused), as a scheduler
    // retries: a pod never bound would never run.
    let started = std::time::Instant::now();
    loop {
        match api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => return debug!(namespace = %ns, pod = %name, %node, "pod bound"),
            Err(kube::Error::Api(e)) if is_bound_elsewhere(&e) => {
                let reason = &e.message;
                return debug!(namespace = %ns, pod = %name, %reason, "pod bound elsewhere");
            }
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(e) if started.elapsed() < BIND_RETRY => {
                warn!(namespace = %ns, pod = %name, error = %e, "binding pod; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return warn!(namespace = %ns, pod = %name, error = %e, "binding pod"),
        }
    }
}

/// Whether a binding's answer says the pod is bound already (to another node, by another
/// kubelet): the API server answers 409 Conflict with "pod ... is already assigned to node ...".
fn is_bound_elsewhere(e: &kube::core::Status) -> bool {
    e.code == 409 || e.message.contains("is already assigned to node")
}

/// How long binding a pod is retried while the API server cannot take it.
const BIND_RETRY: Duration = Duration::from_secs(120);

/// How often the kubelet lists its pods besides watching them, as a kubelet's periodic sync does:
/// an event a watch lost (across an API-server restart) delays a pod by this much at most.
const RESYNC: Duration = Duration::from_secs(10);

/// Lists the pods bound to `node` and brings the workers in line with the list, as a relist of the
/// watch does: a pod without a worker gets one (unless it is finished or being deleted), a worker
/// whose pod changed gets the new version, a worker whose pod is gone is stopped.
async fn resync(
    ctx: &Arc<Ctx>,
    node: &str,
    workers: &mut HashMap<String, WorkerHandle>,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    let listed = match tokio::time::timeout(Duration::from_secs(5), pods.list(&lp)).await {
        Ok(Ok(list)) => list.items,
        Ok(Err(e)) => return warn!(error = %e, "resyncing pods"),
        Err(_) => return warn!("resyncing pods: no answer within 5 s"),
    };
    let mut seen = HashSet::new();
    for p in listed {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        seen.insert(uid.clone());
        let rv = p.metadata.resource_version.clone();
        if let Some(w) = workers.get(&uid) {
            let known =
                w.tx.borrow()
                    .as_ref()
                    .and_then(|k| k.metadata.resource_version.clone());
            if known != rv {
                let _ = w.tx.send(Some(Arc::new(p)));
            }
            continue;
        }
        let terminal = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
        if terminal || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        warn!(pod = ?p.metadata.name, "a pod bound here that the watch did not deliver; starting it");
        let (tx, rx) = watch::channel(Some(Arc::new(p)));
        workers.insert(uid, WorkerHandle { tx });
        tasks.spawn(pod::run_pod(ctx.clone(), rx));
    }
    stop_unlisted(workers, &seen);
}

/// Stops the workers whose pod a full list did not show (it is gone), as a relist does.
fn stop_unlisted(workers: &mut HashMap<String, WorkerHandle>, listed: &HashSet<String>) {
    workers.retain(|uid, w| {
        let keep = listed.contains(uid);
        if !keep {
            let _ = w.tx.send(None);
        }
        keep
    });
}

/// Whether `pod` may be bound to this kubelet's node (see [`placement::fits`]); when not, it is
/// left for another kubelet.
fn fits_here(ctx: &Ctx, node: &str, pod: &Pod) -> bool {
    let fits = pod.spec.as_ref().map_or(Ok(()), |spec| {
        placement::fits(spec, node, &ctx.labels, &ctx.taints)
    });
    match fits {
        Ok(()) => true,
        Err(reason) => {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            debug!(namespace = %ns, pod = %name, %node, %reason, "pod left for another node");
            false
        }
    }
}

struct WorkerHandle {
    tx: watch::Sender<Option<Arc<Pod>>>,
}

async fn main_loop(ctx: Arc<Ctx>, node: String) {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let stream = watcher(pods, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut workers: HashMap<String, WorkerHandle> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut binding: HashSet<String> = HashSet::new();
    let mut relisted: Option<HashSet<String>> = None;
    let mut shutdown = ctx.shutdown.clone();
    let mut heartbeat_tick = tokio::time::interval(Duration::from_secs(10));
    heartbeat_tick.tick().await;
    let mut resync_tick = tokio::time::interval(RESYNC);
    resync_tick.tick().await;

    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = resync_tick.tick() => {
                resync(&ctx, &node, &mut workers, &mut tasks).await;
            }
            _ = heartbeat_tick.tick() => {
                let client = ctx.client.clone();
                let node = node.clone();
                tokio::spawn(async move {
                    if let Err(e) = heartbeat(&client, &node).await {
                        warn!(error = %format!("{e:#}"), "node heartbeat");
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            ev = stream.next() => {
                let Some(ev) = ev else { break };
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        warn!(error = %e, "watching pods");
                        continue;
                    }
                };
                match ev {
                    watcher::Event::Init => relisted = Some(HashSet::new()),
                    watcher::Event::InitDone => {
                        if let Some(seen) = relisted.take() {
                            stop_unlisted(&mut workers, &seen);
                        }
                    }
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        if let Some(seen) = relisted.as_mut() {
                            seen.insert(uid.clone());
                        }
                        let p = Arc::new(p);
                        let spec = p.spec.as_ref();
                        let node_name = spec.and_then(|s| s.node_name.as_deref());
                        match node_name {
                            None | Some("") => {
                                let scheduler = spec.and_then(|s| s.scheduler_name.as_deref());
                                let terminal = p.status.as_ref().and_then(|s| s.phase.as_deref())
                                    .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
                                if matches!(scheduler, None | Some("default-scheduler"))
                                    && !terminal
                                    && p.metadata.deletion_timestamp.is_none()
                                    && fits_here(&ctx, &node, &p)
                                    && binding.insert(uid)
                                {
                                    tokio::spawn(bind(ctx.client.clone(), p, node.clone()));
                                }
                            }
                            Some(n) if n == node => {
                                binding.remove(&uid);
                                if let Some(w) = workers.get(&uid) {
                                    let _ = w.tx.send(Some(p));
                                } else {
                                    let (tx, rx) = watch::channel(Some(p));
                                    workers.insert(uid, WorkerHandle { tx });
                                    tasks.spawn(pod::run_pod(ctx.clone(), rx));
                                }
                            }
                            Some(_) => {
                                binding.remove(&uid);
                            }
                        }
                    }
                    watcher::Event::Delete(p) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        binding.remove(&uid);
                        if let Some(w) = workers.remove(&uid) {
                            let _ = w.tx.send(None);
                        }
                    }
                }
            }
        }
    }
    info!("process kubelet stopping");
    drop(workers);
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_labels_join_and_override_the_default_ones() {
        let extra = BTreeMap::from([
            ("zone".to_owned(), "b".to_owned()),
            ("kubernetes.io/arch".to_owned(), "arm64".to_owned()),
        ]);
        let labels = node_labels("n2", &extra);
        assert_eq!(labels["kubernetes.io/hostname"], "n2");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "arm64");
        assert_eq!(labels["zone"], "b");
        assert_eq!(node_labels("n2", &BTreeMap::new()).len(), 5);
    }

    #[test]
    fn an_already_assigned_answer_is_bound_elsewhere() {
        let status = |code: u16, message: &str| kube::core::Status {
            code,
            message: message.to_owned(),
            ..Default::default()
        };
        let conflict = concat!(
            r#"Operation cannot be fulfilled on pods/binding "p": "#,
            r#"pod p is already assigned to node "n""#
        );
        assert!(is_bound_elsewhere(&status(409, conflict)));
        assert!(is_bound_elsewhere(&status(500, conflict)));
        assert!(!is_bound_elsewhere(&status(
            500,
            "etcdserver: request timed out"
        )));
        assert!(!is_bound_elsewhere(&status(404, "pods \"p\" not found")));
    }
}
