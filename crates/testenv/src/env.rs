//! The shared test environment of one test binary: one control plane, started on first use and
//! torn down when the process exits, with a fresh namespace per test (ENGINEERING.md §2).

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::capi::ClusterApi;
use crate::control_plane::{self, ControlPlane, Endpoints};
use crate::docker::DockerDaemon;
use crate::kubelet::{Kubelet, KubeletConfig, KubeletInfo, scratch_dir};
use crate::podnet::PodNetwork;
use crate::registry::Registry;

/// Whether `dir` is the root of a CAPTF checkout.
fn is_repo_root(dir: &Path) -> bool {
    dir.join("hack/testbin.sh").is_file() && dir.join("config/crd/bases").is_dir()
}

/// The root of the checkout whose files the tests and tools read, found at run time, never baked
/// in at compile time (two clones on one machine must each read their own files):
/// `$CAPTF_REPO_ROOT`, else the nearest ancestor of the current directory that is a checkout
/// (cargo runs tests from their package directory, make from the root), else the nearest
/// ancestor of the running executable (a clone's own `target/`).
pub fn repo_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPTF_REPO_ROOT").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let from = |start: Option<PathBuf>| {
        start.and_then(|s| {
            s.ancestors()
                .find(|d| is_repo_root(d))
                .map(Path::to_path_buf)
        })
    };
    from(std::env::current_dir().ok())
        .or_else(|| from(std::env::current_exe().ok()))
        .unwrap_or_else(|| {
            panic!(
                "no CAPTF checkout above the current directory or the executable: run from a \
                 clone, or set CAPTF_REPO_ROOT"
            )
        })
}

/// The CRDs of every test control plane: CAPTF's own (`config/crd/bases`) and Cluster API's from
/// the pinned module in Go's module cache, labeled as `clusterctl init` labels them, without
/// conversion webhooks (no Cluster API manager runs unless [`TestEnv::with_capi`] starts them).
pub fn crds() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut crds = control_plane::read_crds(&[repo_root().join("config/crd/bases")])?;
    crate::capi::label_captf_crds(&mut crds);
    crds.extend(crate::capi::crds_without_managers()?);
    Ok(crds)
}

/// A running test environment. The control plane and the pod network start with it; the registry
/// and the process kubelet start on first use, so tests that only need the API server never pay
/// for them.
#[derive(Debug)]
pub struct TestEnv {
    // Field order is drop order: Cluster API's managers stop before the API server they talk to.
    /// The Docker daemon for real nodes (started on first use; see [`crate::docker`]).
    docker: OnceLock<Result<DockerGuard, String>>,
    capi: Option<ClusterApi>,
    control_plane: ControlPlane,
    /// The pod network (see [`crate::podnet`]); its failure fails only the kubelet.
    network: Result<Arc<PodNetwork>, String>,
    registry: OnceLock<Result<Registry, String>>,
    kubelet: OnceLock<Result<KubeletInfo, String>>,
    /// The extra nodes [`TestEnv::start_node`] started, by name.
    nodes: Mutex<HashMap<String, KubeletInfo>>,
}

/// Stops the environment's Docker daemon when the environment is dropped (the process's exit
/// stops it too: see [`crate::docker::stop_when_exiting`]).
#[derive(Debug)]
struct DockerGuard(Arc<DockerDaemon>);

impl Drop for DockerGuard {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The main kubelet's Node name.
const MAIN_NODE: &str = "captf-testenv";

/// What a new environment holds besides its control plane and pod network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Nothing: a management cluster before `clusterctl init`.
    Empty,
    /// CAPTF's and Cluster API's CRDs, CAPTF in clusterctl's inventory.
    Crds,
    /// That, with Cluster API's managers running.
    WithCapi,
}

static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();
static SHARED_WITH_CAPI: OnceLock<Result<TestEnv, String>> = OnceLock::new();

/// Runs `f` on a fresh thread with its own current-thread runtime: callers may be inside a tokio
/// runtime already (a `#[tokio::test]`), where blocking on another future would panic.
pub fn on_own_runtime<T, F, Fut>(f: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building a tokio runtime")?
            .block_on(f())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the start-up thread panicked"))?
}

impl TestEnv {
    /// The environment shared by every test of this test binary, started on first use: a control
    /// plane with CAPTF's and Cluster API's CRDs installed. Its processes die with the test
    /// process; its files live in a per-process scratch directory removed by the next run once
    /// this process is gone.
    pub fn shared() -> anyhow::Result<&'static TestEnv> {
        SHARED
            .get_or_init(|| Self::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the test environment failed to start: {e}"))
    }

    /// The environment shared by every test of this test binary that needs Cluster API's own
    /// controllers: like [`TestEnv::shared`], with Cluster API's core, kubeadm bootstrap and
    /// kubeadm control-plane managers running (see [`crate::capi`]).
    pub fn shared_with_capi() -> anyhow::Result<&'static TestEnv> {
        SHARED_WITH_CAPI
            .get_or_init(|| {
                Self::start_new("captf-testenv-capi", true).map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the test environment failed to start: {e}"))
    }

    fn start() -> anyhow::Result<TestEnv> {
        Self::start_new("captf-testenv", false)
    }

    /// Starts a new environment of its own (not shared) in the scratch directory
    /// `<tmp>/<name>-<pid>`: a control plane with CAPTF's and Cluster API's CRDs, and with
    /// Cluster API's managers when `with_capi`. It stops when dropped. Starting runs on a thread
    /// of its own: it blocks on its own runtime, and callers may be inside a tokio runtime.
    pub fn start_new(name: &str, with_capi: bool) -> anyhow::Result<TestEnv> {
        Self::start_kind(
            name,
            if with_capi {
                Kind::WithCapi
            } else {
                Kind::Crds
            },
        )
    }

    /// Starts a new, empty environment of its own (not shared), as a fresh management cluster
    /// is before `clusterctl init`: the control plane and the pod network, no CRDs, nothing in
    /// clusterctl's inventory. The registry and the kubelet start on first use, as for any
    /// environment. It stops when dropped.
    pub fn start_empty(name: &str) -> anyhow::Result<TestEnv> {
        Self::start_kind(name, Kind::Empty)
    }

    fn start_kind(name: &str, kind: Kind) -> anyhow::Result<TestEnv> {
        let name = name.to_owned();
        std::thread::Builder::new()
            .name("captf-testenv".into())
            .spawn(move || -> anyhow::Result<TestEnv> {
                let dir = scratch_dir(&name)?;
                let network = PodNetwork::create()
                    .map(Arc::new)
                    .map_err(|e| format!("the pod network failed to start: {e:#}"));
                let extra_ips: Vec<_> = network.iter().map(|n| n.gateway()).collect();
                let mut cp = ControlPlane::start_with(&dir, &extra_ips)?;
                if kind == Kind::Empty {
                    return Ok(TestEnv::new(cp, network));
                }
                let mut env = if kind == Kind::WithCapi {
                    let mut captf =
                        control_plane::read_crds(&[repo_root().join("config/crd/bases")])?;
                    crate::capi::label_captf_crds(&mut captf);
                    cp.install_crd_list(&captf)?;
                    let kubeconfig = cp.endpoints().kubeconfig.clone();
                    let capi_dir = dir.join("cluster-api");
                    let capi = on_own_runtime(move || async move {
                        ClusterApi::start(&kubeconfig, &capi_dir).await
                    })?;
                    let mut env = TestEnv::new(cp, network);
                    env.capi = Some(capi);
                    env
                } else {
                    cp.install_crd_list(&crds()?)?;
                    TestEnv::new(cp, network)
                };
                env.register_captf()?;
                Ok(env)
            })
            .context("spawning the test environment thread")?
            .join()
            .map_err(|_| anyhow::anyhow!("starting the test environment panicked"))?
    }

    /// Registers CAPTF in clusterctl's inventory, as `clusterctl init` would (the Provider
    /// `infrastructure-terraform` in `captf-system`): `clusterctl move` and `describe` need it.
    fn register_captf(&mut self) -> anyhow::Result<()> {
        let kubeconfig = self.endpoints().kubeconfig.clone();
        on_own_runtime(move || async move {
            let client = control_plane::client_for(&kubeconfig).await?;
            crate::capi::register_provider(
                &client,
                &crate::capi::CAPTF_PROVIDER,
                concat!("v", env!("CARGO_PKG_VERSION")),
            )
            .await
        })
    }

    fn new(control_plane: ControlPlane, network: Result<Arc<PodNetwork>, String>) -> Self {
        TestEnv {
            docker: OnceLock::new(),
            capi: None,
            control_plane,
            network,
            registry: OnceLock::new(),
            kubelet: OnceLock::new(),
            nodes: Mutex::default(),
        }
    }

    /// Cluster API's managers, when this environment runs them.
    pub fn cluster_api(&self) -> Option<&ClusterApi> {
        self.capi.as_ref()
    }

    /// The control plane, for a fault test that restarts its API server or pauses etcd.
    pub fn control_plane(&self) -> &ControlPlane {
        &self.control_plane
    }

    /// Files and endpoints of the control plane.
    pub fn endpoints(&self) -> &Endpoints {
        self.control_plane.endpoints()
    }

    /// A new admin client. Create one per test: a client belongs to the tokio runtime it was
    /// first used on.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        control_plane::client_for(&self.endpoints().kubeconfig).await
    }

    /// The OCI registry on loopback (started on first use), where tests push module images.
    pub fn registry(&self) -> anyhow::Result<&Registry> {
        self.registry
            .get_or_init(|| {
                let dir = self.endpoints().dir.join("registry");
                on_own_runtime(move || Registry::start(dir)).map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the test registry failed to start: {e}"))
    }

    /// The process kubelet (started on first use): it registers a Node and runs every Pod of the
    /// control plane. It needs the `captf-testenv` binary (`cargo build -p captf-testenv`), found
    /// next to the test executable or through `$CAPTF_TESTENV_BIN`.
    pub fn kubelet(&self) -> anyhow::Result<&KubeletInfo> {
        self.kubelet
            .get_or_init(|| {
                (|| {
                    let cfg =
                        self.kubelet_config(MAIN_NODE, self.endpoints().dir.join("kubelet"))?;
                    Kubelet::start_in_background(&self.endpoints().kubeconfig, cfg)
                })()
                .map_err(|e: anyhow::Error| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the process kubelet failed to start: {e}"))
    }

    /// Starts (once per name and process) an extra process kubelet for a test: a Node `name` with
    /// `labels` (besides the default ones) and `taints`, running the pods bound to it like the
    /// main kubelet, which it starts first. Both bind the pods that fit them (see
    /// [`crate::kubelet::placement`]), whichever is first; an untainted extra node also takes
    /// other tests' pods, so taint it (`NoSchedule`) to keep them on the main one. It shares the
    /// shim, the pod network and the image cache with the main kubelet; its state directory is
    /// `<endpoints dir>/kubelet-<name>`. A second call with the same name returns the first's
    /// node as it is (the `labels` and `taints` of the second are ignored).
    pub fn start_node(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
    ) -> anyhow::Result<KubeletInfo> {
        anyhow::ensure!(name != MAIN_NODE, "{MAIN_NODE} is the main kubelet's node");
        let main_state_dir = self.kubelet()?.state_dir.clone();
        // Held while starting: two tests asking for one name start it once.
        // The map only gains started nodes: one a panicking test left behind is still right.
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(info) = nodes.get(name) {
            return Ok(info.clone());
        }
        let mut cfg =
            self.kubelet_config(name, self.endpoints().dir.join(format!("kubelet-{name}")))?;
        cfg.image_dir = Some(main_state_dir.join("images"));
        cfg.labels = labels;
        cfg.taints = taints;
        let info = Kubelet::start_in_background(&self.endpoints().kubeconfig, cfg)
            .with_context(|| format!("starting the process kubelet of node {name}"))?;
        nodes.insert(name.to_owned(), info.clone());
        Ok(info)
    }

    /// The configuration of a kubelet of this environment: the `captf-testenv` shim and the pod
    /// network.
    fn kubelet_config(&self, name: &str, state_dir: PathBuf) -> anyhow::Result<KubeletConfig> {
        let mut cfg = KubeletConfig::new(name, state_dir);
        cfg.shim_binary = Some(crate::shim::binary_path()?);
        cfg.pod_network = Some(self.network.clone().map_err(anyhow::Error::msg)?);
        Ok(cfg)
    }

    /// The environment's Docker daemon (started on first use, installing Debian's `docker.io`
    /// when missing): its own directory and bridge, listening on its socket and, for the
    /// environment's pods, on the pod gateway. It stops, and its containers, networks, bridge
    /// and directory go, when the environment is dropped or the process exits.
    pub fn docker(&self) -> anyhow::Result<&DockerDaemon> {
        self.docker
            .get_or_init(|| {
                (|| {
                    let network = self.network.clone().map_err(anyhow::Error::msg)?;
                    let daemon = Arc::new(DockerDaemon::start(
                        &self.endpoints().dir.join("docker"),
                        network.index(),
                        Some(network.gateway()),
                    )?);
                    crate::docker::stop_when_exiting(daemon.clone());
                    Ok(DockerGuard(daemon))
                })()
                .map_err(|e: anyhow::Error| format!("{e:#}"))
            })
            .as_ref()
            .map(|d| d.0.as_ref())
            .map_err(|e| anyhow::anyhow!("the Docker daemon failed to start: {e}"))
    }

    /// The pod network's gateway: where pods reach the API server, and the source address of
    /// the API server's connections to pods.
    pub fn pod_gateway(&self) -> anyhow::Result<std::net::Ipv4Addr> {
        self.network
            .as_ref()
            .map(|n| n.gateway())
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Creates a fresh namespace named `<prefix>-<random>` for one test and returns its name.
    pub async fn namespace(&self, prefix: &str) -> anyhow::Result<String> {
        use k8s_openapi::api::core::v1::Namespace;
        let api: kube::Api<Namespace> = kube::Api::all(self.client().await?);
        let mut ns = Namespace::default();
        ns.metadata.generate_name = Some(format!("{prefix}-"));
        let created = api
            .create(&kube::api::PostParams::default(), &ns)
            .await
            .context("creating a test namespace")?;
        created
            .metadata
            .name
            .ok_or_else(|| anyhow::anyhow!("created namespace has no name"))
    }
}
