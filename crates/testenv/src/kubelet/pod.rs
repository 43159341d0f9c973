//! The life of one pod on the process kubelet's node: volumes, init containers in order, main
//! containers, status, termination on deletion or `activeDeadlineSeconds`, and the final delete.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use tokio::sync::{Mutex, mpsc, watch};
use tokio::time::Instant;
use tracing::{Instrument as _, debug, info, warn};

use crate::image::Image;
use crate::podnet::PodNet;
use crate::shim::{MountSpec, ShimArgs};

use super::Ctx;
use super::container::{self, Exit, RunFiles, Running};
use super::env;
use super::probe;
use super::status::{
    Conditions, POD_IP, exit_code, initial_status, is_running, is_terminated, now, running,
    terminated, waiting, with_ips,
};
use super::volumes::PodVolumes;

/// How long a pod status write is retried while the API server cannot take it.
const STATUS_RETRY: Duration = Duration::from_secs(120);

/// Why a pod's containers are being stopped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop {
    /// `metadata.deletionTimestamp` is set.
    deleting: bool,
    /// The pod object is gone from the API.
    api_deleted: bool,
    /// `activeDeadlineSeconds` passed.
    deadline: bool,
    /// The kubelet is shutting down.
    shutdown: bool,
    /// When remaining containers get SIGKILL.
    kill_by: Option<Instant>,
}

impl Stop {
    fn any(&self) -> bool {
        self.deleting || self.api_deleted || self.deadline || self.shutdown
    }

    fn kill_no_later_than(&mut self, at: Instant) {
        self.kill_by = Some(self.kill_by.map_or(at, |k| k.min(at)));
    }
}

/// The stop channel fired while waiting.
#[derive(Debug)]
struct Interrupted;

async fn stopped(stop: &mut watch::Receiver<Stop>) {
    loop {
        if stop.borrow_and_update().any() {
            return;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn interruptible<F: Future>(
    stop: &mut watch::Receiver<Stop>,
    f: F,
) -> Result<F::Output, Interrupted> {
    if stop.borrow().any() {
        return Err(Interrupted);
    }
    tokio::select! {
        biased;
        () = stopped(stop) => Err(Interrupted),
        r = f => Ok(r),
    }
}

async fn sleep_interruptible(
    stop: &mut watch::Receiver<Stop>,
    d: Duration,
) -> Result<(), Interrupted> {
    interruptible(stop, tokio::time::sleep(d)).await
}

/// Retry delays of the process kubelet (shorter than a kubelet's 10 s → 5 min, for tests).
#[derive(Debug)]
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(Duration::from_millis(500))
    }
    fn next(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(10));
        d
    }
}

/// Watches the pod for deletion and its deadline, and the kubelet for shutdown.
async fn monitor(
    mut pod_rx: watch::Receiver<Option<Arc<Pod>>>,
    stop_tx: watch::Sender<Stop>,
    deadline: Option<Instant>,
    deadline_grace: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut deadline_fired = false;
    loop {
        let current = pod_rx.borrow_and_update().clone();
        match current {
            None => {
                stop_tx.send_modify(|s| {
                    s.api_deleted = true;
                    s.kill_no_later_than(Instant::now());
                });
                return;
            }
            Some(p) if p.metadata.deletion_timestamp.is_some() => {
                let grace = p
                    .metadata
                    .deletion_grace_period_seconds
                    .and_then(|g| u64::try_from(g).ok())
                    .unwrap_or(30);
                let at = Instant::now() + Duration::from_secs(grace);
                stop_tx.send_if_modified(|s| {
                    let before = (s.deleting, s.kill_by);
                    s.deleting = true;
                    s.kill_no_later_than(at);
                    before != (s.deleting, s.kill_by)
                });
            }
            Some(_) => {}
        }
        if *shutdown.borrow() {
            stop_tx.send_modify(|s| {
                s.shutdown = true;
                s.kill_no_later_than(Instant::now());
            });
            return;
        }
        tokio::select! {
            r = pod_rx.changed() => {
                if r.is_err() {
                    stop_tx.send_modify(|s| {
                        s.api_deleted = true;
                        s.kill_no_later_than(Instant::now());
                    });
                    return;
                }
            }
            () = async {
                match deadline {
                    Some(d) if !deadline_fired => tokio::time::sleep_until(d).await,
                    _ => std::future::pending().await,
                }
            } => {
                deadline_fired = true;
                stop_tx.send_modify(|s| {
                    s.deadline = true;
                    s.kill_no_later_than(Instant::now() + deadline_grace);
                });
            }
            _ = shutdown.changed() => {}
        }
    }
}

enum StartFailure {
    Pull(String),
    Config(String),
    Internal(String),
}

struct RunningContainer {
    process: Running,
    files: RunFiles,
    log_offset: u64,
    policy: Option<String>,
    container_id: String,
    /// The readiness probe's task, stopped with the container.
    probe: Option<tokio::task::JoinHandle<()>>,
}

/// A container's run as it starts: its files and the ids its status will carry.
struct Start {
    files: RunFiles,
    log_offset: u64,
    container_id: String,
    image_id: String,
}

impl Drop for RunningContainer {
    fn drop(&mut self) {
        if let Some(p) = self.probe.take() {
            p.abort();
        }
    }
}

/// What the main-container loop waits for.
enum Event {
    Exit(Exit),
    Readiness(probe::Readiness),
}

struct Worker {
    ctx: Arc<Ctx>,
    pod: Arc<Pod>,
    pod_rx: watch::Receiver<Option<Arc<Pod>>>,
    stop: watch::Receiver<Stop>,
    ns: String,
    name: String,
    uid: String,
    dir: PathBuf,
    log_dir: PathBuf,
    init_specs: Vec<Container>,
    main_specs: Vec<Container>,
    init: Vec<ContainerStatus>,
    main: Vec<ContainerStatus>,
    conditions: Conditions,
    phase: &'static str,
    reason: Option<String>,
    message: Option<String>,
    start_time: Time,
    volumes_ready: bool,
    volumes: Option<Arc<Mutex<PodVolumes>>>,
    running: HashMap<String, RunningContainer>,
    exits_tx: mpsc::UnboundedSender<Exit>,
    exits_rx: mpsc::UnboundedReceiver<Exit>,
    readiness_tx: mpsc::UnboundedSender<probe::Readiness>,
    readiness_rx: mpsc::UnboundedReceiver<probe::Readiness>,
    /// The pod's network namespace and address, once given (never for `hostNetwork` pods).
    net: Option<PodNet>,
}

/// Runs one pod from its first sight on this node until its object is gone.
pub(crate) async fn run_pod(ctx: Arc<Ctx>, pod_rx: watch::Receiver<Option<Arc<Pod>>>) {
    let Some(pod) = pod_rx.borrow().clone() else {
        return;
    };
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let span = tracing::info_span!("pod", namespace = %ns, pod = %name);
    run_pod_inner(ctx, pod, pod_rx, ns, name, uid)
        .instrument(span)
        .await;
}

async fn run_pod_inner(
    ctx: Arc<Ctx>,
    pod: Arc<Pod>,
    pod_rx: watch::Receiver<Option<Arc<Pod>>>,
    ns: String,
    name: String,
    uid: String,
) {
    let spec = pod.spec.clone().unwrap_or_default();
    let start_time = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .unwrap_or_else(now);
    let (stop_tx, stop_rx) = watch::channel(Stop::default());
    let deadline = spec.active_deadline_seconds.and_then(|s| {
        let started = start_time.0.as_second();
        let elapsed = k8s_openapi::jiff::Timestamp::now().as_second() - started;
        let left = s - elapsed;
        Some(Instant::now() + Duration::from_secs(u64::try_from(left.max(0)).ok()?))
    });
    let grace = Duration::from_secs(
        spec.termination_grace_period_seconds
            .and_then(|g| u64::try_from(g).ok())
            .unwrap_or(30),
    );
    let monitor = tokio::spawn(monitor(
        pod_rx.clone(),
        stop_tx,
        deadline,
        grace,
        ctx.shutdown.clone(),
    ));

    let (exits_tx, exits_rx) = mpsc::unbounded_channel();
    let (readiness_tx, readiness_rx) = mpsc::unbounded_channel();
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let main_specs = spec.containers.clone();
    let main_reason = if init_specs.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let mut w = Worker {
        dir: ctx.state_dir.join("pods").join(&uid),
        log_dir: ctx
            .state_dir
            .join("logs")
            .join(format!("{ns}_{name}_{uid}")),
        init: init_specs
            .iter()
            .map(|c| {
                initial_status(
                    &c.name,
                    c.image.as_deref().unwrap_or_default(),
                    "PodInitializing",
                )
            })
            .collect(),
        main: main_specs
            .iter()
            .map(|c| initial_status(&c.name, c.image.as_deref().unwrap_or_default(), main_reason))
            .collect(),
        init_specs,
        main_specs,
        ctx,
        pod: pod.clone(),
        pod_rx,
        stop: stop_rx,
        ns,
        name,
        uid,
        conditions: Conditions::default(),
        phase: "Pending",
        reason: None,
        message: None,
        start_time,
        volumes_ready: false,
        volumes: None,
        running: HashMap::new(),
        exits_tx,
        exits_rx,
        readiness_tx,
        readiness_rx,
        net: None,
    };

    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
    let already_started = pod.status.as_ref().is_some_and(|s| {
        s.container_statuses
            .iter()
            .chain(s.init_container_statuses.iter())
            .flatten()
            .any(|c| {
                c.state
                    .as_ref()
                    .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
            })
    });
    let mut refresher = None;
    if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
        debug!("pod already terminal");
    } else if already_started {
        // A previous process kubelet ran this pod; its processes are gone.
        warn!("pod was started by a previous kubelet; marking it failed");
        w.lost();
        w.write_status().await;
    } else {
        info!("starting pod");
        let outcome = w.lifecycle(&mut refresher).await;
        if outcome.is_err() {
            w.terminate_all().await;
            w.finish_stopped();
            let s = w.stop.borrow().clone();
            if !s.api_deleted && !s.shutdown {
                w.write_status().await;
            }
        }
        info!(phase = w.phase, "pod finished");
    }
    if let Some(r) = refresher {
        r.abort();
    }
    w.cleanup().await;
    w.await_deletion().await;
    monitor.abort();
}

impl Worker {
    fn api(&self) -> Api<Pod> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    /// The latest pod object, with the address this kubelet gave it in its status (what
    /// `status.podIP` field references read).
    fn latest_pod(&self) -> Arc<Pod> {
        let pod = self
            .pod_rx
            .borrow()
            .clone()
            .unwrap_or_else(|| self.pod.clone());
        let ip = self.pod_ip();
        if pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(ip.as_str()) {
            return pod;
        }
        let mut pod = (*pod).clone();
        pod.status.get_or_insert_with(PodStatus::default).pod_ip = Some(ip);
        Arc::new(pod)
    }

    /// The pod's address: its own on the pod network, else the host's.
    fn pod_ip(&self) -> String {
        self.net
            .as_ref()
            .map_or_else(|| POD_IP.to_owned(), |n| n.ip.to_string())
    }

    /// Where the pod's containers reach the API server.
    fn api_endpoint(&self) -> (String, u16) {
        match (&self.net, &self.ctx.network) {
            (Some(_), Some((_, gateway))) => (gateway.clone(), self.ctx.api_port),
            _ => (self.ctx.api_host.clone(), self.ctx.api_port),
        }
    }

    /// Gives the pod its network namespace on the pod network, unless it asks for the host's
    /// network (or there is no pod network). Retried with back-off, like a real kubelet's
    /// `FailedCreatePodSandBox`.
    async fn attach_network(&mut self) -> Result<(), Interrupted> {
        let host_network = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let Some((network, _)) = self.ctx.network.clone() else {
            return Ok(());
        };
        if host_network {
            return Ok(());
        }
        let mut backoff = Backoff::new();
        loop {
            let n = network.clone();
            let r = interruptible(&mut self.stop, async move {
                tokio::task::spawn_blocking(move || n.attach())
                    .await
                    .map_err(|e| anyhow::anyhow!("pod network task: {e}"))
                    .and_then(|r| r)
            })
            .await?;
            match r {
                Ok(net) => {
                    debug!(ip = %net.ip, netns = %net.name, "pod network attached");
                    self.net = Some(net);
                    return Ok(());
                }
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "FailedCreatePodSandBox");
                    let d = backoff.next();
                    sleep_interruptible(&mut self.stop, d).await?;
                }
            }
        }
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".to_owned())
    }

    fn status_mut(&mut self, name: &str) -> Option<&mut ContainerStatus> {
        self.init
            .iter_mut()
            .chain(self.main.iter_mut())
            .find(|s| s.name == name)
    }

    fn update_conditions(&mut self) {
        let terminal = matches!(self.phase, "Succeeded" | "Failed");
        self.conditions.set(
            "PodReadyToStartContainers",
            self.volumes_ready && !terminal,
            None,
            None,
        );
        let pending_init: Vec<&str> = self
            .init
            .iter()
            .filter(|s| exit_code(s) != Some(0))
            .map(|s| s.name.as_str())
            .collect();
        if pending_init.is_empty() {
            self.conditions.set("Initialized", true, None, None);
        } else {
            let msg = format!(
                "containers with incomplete status: [{}]",
                pending_init.join(" ")
            );
            self.conditions.set(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(msg),
            );
        }
        let unready: Vec<&str> = self
            .main
            .iter()
            .filter(|s| !s.ready)
            .map(|s| s.name.as_str())
            .collect();
        for cond in ["ContainersReady", "Ready"] {
            if unready.is_empty() {
                self.conditions.set(cond, true, None, None);
            } else if self.phase == "Succeeded" {
                self.conditions.set(cond, false, Some("PodCompleted"), None);
            } else {
                let msg = format!("containers with unready status: [{}]", unready.join(" "));
                self.conditions
                    .set(cond, false, Some("ContainersNotReady"), Some(msg));
            }
        }
    }

    async fn write_status(&mut self) {
        self.update_conditions();
        let pod_ip = self.pod_ip();
        let status = with_ips(
            PodStatus {
                phase: Some(self.phase.to_owned()),
                conditions: Some(self.conditions.to_vec()),
                init_container_statuses: Some(self.init.clone()),
                container_statuses: Some(self.main.clone()),
                start_time: Some(self.start_time.clone()),
                reason: self.reason.clone(),
                message: self.message.clone(),
                ..Default::default()
            },
            &pod_ip,
        );
        let patch = serde_json::json!({ "status": status });
        // Retried while the API server cannot take it (restarting, etcd paused), as a kubelet's
        // status manager retries: a terminal status never written would leave the Job running.
        let started = Instant::now();
        loop {
            match self
                .api()
                .patch_status(
                    &self.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                Ok(_) => return debug!(phase = self.phase, "status written"),
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return debug!("pod gone; status not written");
                }
                Err(e) if started.elapsed() < STATUS_RETRY => {
                    warn!(error = %e, "writing pod status; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return warn!(error = %e, "writing pod status; giving up"),
            }
        }
    }

    /// Runs the pod until it is terminal (`Ok`) or stopped (`Err`).
    async fn lifecycle(
        &mut self,
        refresher: &mut Option<tokio::task::JoinHandle<()>>,
    ) -> Result<(), Interrupted> {
        self.attach_network().await?;
        self.write_status().await;

        let mut backoff = Backoff::new();
        let vol_dir = self.dir.join("volumes");
        loop {
            let pod = self.latest_pod();
            let client = self.ctx.client.clone();
            let dir = vol_dir.clone();
            let r = interruptible(&mut self.stop, async move {
                PodVolumes::prepare(&client, &pod, &dir).await
            })
            .await?;
            match r {
                Ok(v) => {
                    self.volumes = Some(Arc::new(Mutex::new(v)));
                    break;
                }
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "FailedMount");
                    let d = backoff.next();
                    sleep_interruptible(&mut self.stop, d).await?;
                }
            }
        }
        self.volumes_ready = true;
        *refresher = Some(self.spawn_refresher());

        let policy = self.restart_policy();
        for i in 0..self.init_specs.len() {
            let mut backoff = Backoff::new();
            loop {
                let spec = self.init_specs[i].clone();
                self.start_container(&spec).await?;
                self.write_status().await;
                let exit = self.next_exit().await?;
                let code = self.record_exit(exit).await;
                if code == 0 {
                    break;
                }
                if policy == "Never" {
                    self.phase = "Failed";
                    self.write_status().await;
                    return Ok(());
                }
                self.write_status().await;
                let d = backoff.next();
                self.back_off(&spec.name, d).await?;
            }
        }

        let specs = self.main_specs.clone();
        for spec in &specs {
            self.start_container(spec).await?;
        }
        self.phase = "Running";
        self.write_status().await;

        let mut backoffs: HashMap<String, Backoff> = HashMap::new();
        loop {
            if self.running.is_empty() && self.main.iter().all(is_terminated) {
                let ok = self.main.iter().all(|s| exit_code(s) == Some(0));
                self.phase = if ok { "Succeeded" } else { "Failed" };
                self.write_status().await;
                return Ok(());
            }
            let exit = match self.next_event().await? {
                Event::Exit(exit) => exit,
                Event::Readiness(r) => {
                    self.set_ready(&r);
                    self.write_status().await;
                    continue;
                }
            };
            let name = exit.name.clone();
            let code = self.record_exit(exit).await;
            let restart = match policy.as_str() {
                "Always" => true,
                "OnFailure" => code != 0,
                _ => false,
            };
            self.write_status().await;
            if restart {
                let d = backoffs
                    .entry(name.clone())
                    .or_insert_with(Backoff::new)
                    .next();
                self.back_off(&name, d).await?;
                if let Some(spec) = specs.iter().find(|s| s.name == name) {
                    self.start_container(spec).await?;
                    self.write_status().await;
                }
            }
        }
    }

    /// Waits out a restart back-off (`CrashLoopBackOff`) and counts the restart.
    async fn back_off(&mut self, name: &str, d: Duration) -> Result<(), Interrupted> {
        if let Some(s) = self.status_mut(name) {
            s.last_state = s.state.take();
            s.restart_count += 1;
            s.state = Some(waiting(
                "CrashLoopBackOff",
                Some(format!(
                    "back-off {}ms restarting failed container={name}",
                    d.as_millis()
                )),
            ));
        }
        self.write_status().await;
        sleep_interruptible(&mut self.stop, d).await
    }

    fn spawn_refresher(&self) -> tokio::task::JoinHandle<()> {
        let volumes = self.volumes.clone();
        let client = self.ctx.client.clone();
        let pod_rx = self.pod_rx.clone();
        let period = self.ctx.sync_period;
        tokio::spawn(
            async move {
                let Some(volumes) = volumes else { return };
                loop {
                    tokio::time::sleep(period).await;
                    let Some(pod) = pod_rx.borrow().clone() else {
                        return;
                    };
                    if let Err(e) = volumes.lock().await.refresh(&client, &pod).await {
                        debug!(error = %format!("{e:#}"), "volume refresh");
                    }
                }
            }
            .in_current_span(),
        )
    }

    async fn next_exit(&mut self) -> Result<Exit, Interrupted> {
        let rx = &mut self.exits_rx;
        let stop = &mut self.stop;
        if stop.borrow().any() {
            return Err(Interrupted);
        }
        tokio::select! {
            biased;
            () = stopped(stop) => Err(Interrupted),
            e = rx.recv() => e.ok_or(Interrupted),
        }
    }

    /// The next exit of a container or change of a readiness probe's verdict.
    async fn next_event(&mut self) -> Result<Event, Interrupted> {
        if self.stop.borrow().any() {
            return Err(Interrupted);
        }
        tokio::select! {
            biased;
            () = stopped(&mut self.stop) => Err(Interrupted),
            e = self.exits_rx.recv() => e.map(Event::Exit).ok_or(Interrupted),
            r = self.readiness_rx.recv() => r.map(Event::Readiness).ok_or(Interrupted),
        }
    }

    /// Records a readiness probe's verdict on the container it ran against.
    fn set_ready(&mut self, r: &probe::Readiness) {
        if let Some(s) = self.status_mut(&r.name)
            && s.container_id.as_deref() == Some(r.container_id.as_str())
            && is_running(s)
        {
            debug!(container = %r.name, ready = r.ready, "readiness changed");
            s.ready = r.ready;
        }
    }

    /// Starts a container, retrying image pulls and configuration errors with back-off; a
    /// container that cannot run is reported on the exit channel as a `StartError`.
    async fn start_container(&mut self, spec: &Container) -> Result<(), Interrupted> {
        let mut backoff = Backoff::new();
        loop {
            let attempt = {
                let fut = self.try_start(spec);
                // try_start borrows self; interruption is checked around it.
                fut.await
            };
            if self.stop.borrow().any() {
                if let Ok(()) = attempt {
                    return Ok(());
                }
                return Err(Interrupted);
            }
            let (reason, msg, next) = match attempt {
                Ok(()) => return Ok(()),
                Err(StartFailure::Pull(m)) => ("ErrImagePull", m, Some("ImagePullBackOff")),
                Err(StartFailure::Config(m)) => ("CreateContainerConfigError", m, None),
                Err(StartFailure::Internal(m)) => ("CreateContainerError", m, None),
            };
            warn!(container = %spec.name, reason, error = %msg, "container not started");
            if let Some(s) = self.status_mut(&spec.name) {
                s.state = Some(waiting(reason, Some(msg.clone())));
            }
            self.write_status().await;
            let d = backoff.next();
            if let Some(next) = next {
                // As a kubelet: the failed pull shows for a moment, then the back-off.
                sleep_interruptible(&mut self.stop, Duration::from_secs(1)).await?;
                let image = spec.image.clone().unwrap_or_default();
                if let Some(s) = self.status_mut(&spec.name) {
                    s.state = Some(waiting(
                        next,
                        Some(format!("Back-off pulling image \"{image}\": {msg}")),
                    ));
                }
                self.write_status().await;
            }
            sleep_interruptible(&mut self.stop, d).await?;
        }
    }

    /// The container's volume mounts, with `subPath`/`subPathExpr` resolved, then its
    /// termination message file.
    async fn mounts(
        &self,
        c: &Container,
        kenv: &env::EnvList,
        files: &RunFiles,
    ) -> Result<Vec<MountSpec>, StartFailure> {
        let internal = |e: std::io::Error| StartFailure::Internal(e.to_string());
        let mut mounts = Vec::new();
        let paths = match &self.volumes {
            Some(v) => v.lock().await.paths.clone(),
            None => HashMap::new(),
        };
        for vm in c.volume_mounts.iter().flatten() {
            let base = paths.get(&vm.name).ok_or_else(|| {
                StartFailure::Config(format!("unable to find volume {:?} for mount", vm.name))
            })?;
            let sub = match (&vm.sub_path, &vm.sub_path_expr) {
                (Some(s), _) if !s.is_empty() => s.clone(),
                (_, Some(e)) if !e.is_empty() => env::expand(e, |n| kenv.get(n).map(str::to_owned)),
                _ => String::new(),
            };
            let source = if sub.is_empty() {
                base.clone()
            } else {
                if sub.starts_with('/') || sub.split('/').any(|p| p == "..") {
                    return Err(StartFailure::Config(format!(
                        "invalid subPath {sub:?} of volume {}",
                        vm.name
                    )));
                }
                let p = crate::shim::secure_join(base, &sub)
                    .map_err(|e| StartFailure::Config(format!("{e:#}")))?;
                if std::fs::symlink_metadata(&p).is_err() {
                    std::fs::create_dir_all(&p).map_err(internal)?;
                }
                p
            };
            mounts.push(MountSpec {
                source,
                destination: vm.mount_path.clone(),
                read_only: vm.read_only.unwrap_or(false),
            });
        }
        mounts.push(MountSpec {
            source: files.termination_log(),
            destination: c
                .termination_message_path
                .clone()
                .unwrap_or_else(|| "/dev/termination-log".to_owned()),
            read_only: false,
        });
        Ok(mounts)
    }

    /// Starts container `c`: pulls its image, prepares its run (environment, files, mounts) and
    /// starts it under the shim, then records the start or the start error in its status.
    async fn try_start(&mut self, c: &Container) -> Result<(), StartFailure> {
        let image = self.pull(c).await?;
        let (args, files, restart) = self.prepare(c, &image).await?;
        let start = Start {
            log_offset: std::fs::metadata(&files.log).map_or(0, |m| m.len()),
            container_id: format!("captf://{}-{}-{restart}", self.uid, c.name),
            image_id: image.image_id(),
            files,
        };
        let ctx = self.ctx.clone();
        match container::start(
            &ctx.shim_binary,
            &c.name,
            &args,
            &start.files,
            self.exits_tx.clone(),
        )
        .await
        {
            Err(e) => Err(StartFailure::Internal(format!("{e:#}"))),
            Ok(Err(msg)) => {
                self.start_failed(c, start, msg);
                Ok(())
            }
            Ok(Ok(process)) => {
                self.started(c, start, process, args.uid);
                Ok(())
            }
        }
    }

    /// The pod-start step "pull": container `c`'s image, as its pull policy says.
    async fn pull(&mut self, c: &Container) -> Result<Image, StartFailure> {
        let ctx = self.ctx.clone();
        let image_ref = c.image.clone().unwrap_or_default();
        tokio::select! {
            biased;
            () = stopped(&mut self.stop) => Err(StartFailure::Internal("stopped".into())),
            r = ctx.images.ensure(&image_ref, c.image_pull_policy.as_deref()) => {
                r.map_err(|e| StartFailure::Pull(format!("{e:#}")))
            }
        }
    }

    /// The pod-start step "prepare": the user, environment and command line of container `c`,
    /// its fresh run directory and termination log, and its mounts, as the shim's arguments.
    /// Answers the arguments, the run's files and the restart count.
    async fn prepare(
        &mut self,
        c: &Container,
        image: &Image,
    ) -> Result<(ShimArgs, RunFiles, i32), StartFailure> {
        let ctx = self.ctx.clone();
        let pod = self.latest_pod();
        let run_as =
            env::run_as(&pod, c, &image.config, &image.rootfs).map_err(StartFailure::Config)?;
        let mut sources = env::Sources::new(&ctx.client, &self.ns);
        let (api_host, api_port) = self.api_endpoint();
        let kenv = env::kubelet_env(&mut sources, &pod, c, &api_host, api_port)
            .await
            .map_err(StartFailure::Config)?;
        let argv = env::command_line(c, &image.config, &kenv).map_err(StartFailure::Config)?;
        let spec = pod.spec.clone().unwrap_or_default();
        let mut hostname = spec.hostname.clone().unwrap_or_else(|| self.name.clone());
        hostname.truncate(63);
        let envv = env::final_env(&image.config, &kenv, &hostname, &run_as.home);

        let restart = self.status_mut(&c.name).map_or(0, |s| s.restart_count);
        let files = RunFiles {
            dir: self
                .dir
                .join("containers")
                .join(format!("{}-{restart}", c.name)),
            log: self.log_dir.join(format!("{}.log", c.name)),
        };
        let internal = |e: std::io::Error| StartFailure::Internal(e.to_string());
        let _ = std::fs::remove_dir_all(&files.dir);
        std::fs::create_dir_all(&files.dir).map_err(internal)?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::write(files.termination_log(), b"").map_err(internal)?;
            std::fs::set_permissions(
                files.termination_log(),
                std::fs::Permissions::from_mode(0o666),
            )
            .map_err(internal)?;
        }

        let mounts = self.mounts(c, &kenv, &files).await?;
        let sc = c.security_context.as_ref();
        let args = ShimArgs {
            rootfs: image.rootfs.clone(),
            overlay: Some(files.overlay()),
            readonly_rootfs: sc
                .and_then(|s| s.read_only_root_filesystem)
                .unwrap_or(false),
            mounts,
            uid: run_as.uid,
            gid: run_as.gid,
            groups: run_as.groups.clone(),
            workdir: c
                .working_dir
                .clone()
                .filter(|w| !w.is_empty())
                .or_else(|| image.config.working_dir.clone().filter(|w| !w.is_empty())),
            env: envv,
            hostname: Some(hostname),
            netns: self.net.as_ref().map(|n| n.path.clone()),
            no_new_privileges: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
            pid_file: Some(files.pid_file()),
            error_file: Some(files.error_file()),
            command: argv,
        };
        Ok((args, files, restart))
    }

    /// Records that container `c` failed to start (`msg`, the shim's start error): an exit with
    /// the shim's start error code, as a runtime reports one.
    fn start_failed(&mut self, c: &Container, start: Start, msg: String) {
        info!(container = %c.name, error = %msg, "container failed to start");
        self.record_ids(c, &start);
        let t = now();
        let _ = self.exits_tx.send(Exit {
            name: c.name.clone(),
            code: crate::shim::START_ERROR_EXIT_CODE,
            started_at: t.clone(),
            finished_at: t,
            start_error: Some(msg),
        });
        let process = container::exited_placeholder();
        self.keep_running(c, start, process, String::new(), None);
    }

    /// Records that container `c` runs (`process`), and starts its readiness probe if it is a
    /// main container with one.
    fn started(&mut self, c: &Container, start: Start, process: Running, uid: u32) {
        info!(container = %c.name, uid = uid, "container started");
        let is_main = self.main.iter().any(|s| s.name == c.name);
        let probed = is_main && probe::has_readiness_probe(c);
        let started_at = process.started_at.clone();
        self.record_ids(c, &start);
        if let Some(s) = self.status_mut(&c.name) {
            s.state = Some(running(started_at));
            s.started = Some(true);
            s.ready = is_main && !probed;
        }
        let probe = probed.then(|| {
            let ip = self
                .pod_ip()
                .parse()
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST);
            tokio::spawn(
                probe::run(
                    c.clone(),
                    start.container_id.clone(),
                    std::net::IpAddr::V4(ip),
                    self.readiness_tx.clone(),
                )
                .in_current_span(),
            )
        });
        let id = start.container_id.clone();
        self.keep_running(c, start, process, id, probe);
    }

    /// Container `c`'s image and container ids in its status.
    fn record_ids(&mut self, c: &Container, start: &Start) {
        if let Some(s) = self.status_mut(&c.name) {
            s.image_id.clone_from(&start.image_id);
            s.container_id = Some(start.container_id.clone());
        }
    }

    /// Keeps container `c`'s run (its process, files and log offset) until its exit is recorded.
    fn keep_running(
        &mut self,
        c: &Container,
        start: Start,
        process: Running,
        container_id: String,
        probe: Option<tokio::task::JoinHandle<()>>,
    ) {
        self.running.insert(
            c.name.clone(),
            RunningContainer {
                process,
                files: start.files,
                log_offset: start.log_offset,
                policy: c.termination_message_policy.clone(),
                container_id,
                probe,
            },
        );
    }

    /// Records a container's exit in its status; returns the exit code.
    async fn record_exit(&mut self, exit: Exit) -> i32 {
        let Some(rc) = self.running.remove(&exit.name) else {
            return exit.code;
        };
        let message = exit.start_error.clone().or_else(|| {
            container::termination_message(
                &rc.files,
                rc.policy.as_deref(),
                exit.code,
                rc.log_offset,
            )
        });
        let reason = if exit.start_error.is_some() {
            "StartError"
        } else if exit.code == 0 {
            "Completed"
        } else {
            "Error"
        };
        info!(container = %exit.name, exit_code = exit.code, reason, "container exited");
        let cid = (!rc.container_id.is_empty()).then(|| rc.container_id.clone());
        if let Some(s) = self.status_mut(&exit.name) {
            s.state = Some(terminated(
                exit.code,
                reason,
                message,
                Some(exit.started_at.clone()),
                exit.finished_at.clone(),
                cid.or_else(|| s.container_id.clone()),
            ));
            s.ready = false;
            s.started = Some(false);
        }
        let overlay = rc.files.overlay();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(overlay)).await;
        exit.code
    }

    /// SIGTERM to every running container, SIGKILL at the stop's deadline, until all exited.
    async fn terminate_all(&mut self) {
        if self.running.is_empty() {
            return;
        }
        info!(containers = self.running.len(), "stopping containers");
        for rc in self.running.values() {
            rc.process.signal(Signal::SIGTERM);
        }
        let mut killed = false;
        while !self.running.is_empty() {
            let kill_by = self.stop.borrow().kill_by;
            tokio::select! {
                e = self.exits_rx.recv() => match e {
                    Some(e) => { self.record_exit(e).await; }
                    None => break,
                },
                () = async {
                    match kill_by {
                        Some(k) if !killed => tokio::time::sleep_until(k).await,
                        _ => std::future::pending().await,
                    }
                } => {
                    info!("grace period over: SIGKILL");
                    for rc in self.running.values() {
                        rc.process.signal(Signal::SIGKILL);
                    }
                    killed = true;
                }
                r = self.stop.changed() => {
                    if r.is_err() {
                        for rc in self.running.values() {
                            rc.process.signal(Signal::SIGKILL);
                        }
                        killed = true;
                    }
                }
            }
        }
    }

    /// The phase and reason after the pod was stopped before finishing by itself.
    fn finish_stopped(&mut self) {
        let s = self.stop.borrow().clone();
        if s.deadline {
            self.phase = "Failed";
            self.reason = Some("DeadlineExceeded".to_owned());
            self.message =
                Some("Pod was active on the node longer than the specified deadline".to_owned());
        } else {
            let ok = !self.main.is_empty() && self.main.iter().all(|c| exit_code(c) == Some(0));
            self.phase = if ok { "Succeeded" } else { "Failed" };
        }
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            c.ready = false;
            if is_running(c) {
                c.started = Some(false);
            }
        }
    }

    /// Marks a pod whose processes a previous kubelet ran as failed.
    fn lost(&mut self) {
        let statuses = self.pod.status.clone().unwrap_or_default();
        self.init = statuses.init_container_statuses.unwrap_or_default();
        self.main = statuses.container_statuses.unwrap_or_default();
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            if !is_terminated(c) {
                c.state = Some(terminated(
                    137,
                    "ContainerStatusUnknown",
                    Some("The container could not be located when the pod was terminated".into()),
                    None,
                    now(),
                    c.container_id.clone(),
                ));
                c.ready = false;
                c.started = Some(false);
            }
        }
        self.phase = "Failed";
    }

    async fn cleanup(&mut self) {
        let dir = self.dir.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        if let (Some(net), Some((network, _))) = (self.net.take(), self.ctx.network.clone()) {
            let _ = tokio::task::spawn_blocking(move || network.detach(&net)).await;
        }
    }

    /// Waits until the pod object is gone; deletes it with grace period 0 once it is being
    /// deleted (what tells the API server the kubelet has stopped everything).
    async fn await_deletion(&mut self) {
        let mut deleted = false;
        loop {
            let s = self.stop.borrow_and_update().clone();
            if s.api_deleted || s.shutdown {
                return;
            }
            if s.deleting && !deleted {
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(self.uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match self.api().delete(&self.name, &dp).await {
                    Ok(_) => {
                        info!("pod deleted");
                        deleted = true;
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => deleted = true,
                    Err(e) => {
                        warn!(error = %e, "deleting pod");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                }
            }
            if self.stop.changed().await.is_err() {
                return;
            }
        }
    }
}
