//! The shared test environment of one test binary: one control plane, started on first use and
//! torn down when the process exits, with a fresh namespace per test (ENGINEERING.md §2).

use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::control_plane::{self, ControlPlane, Endpoints};
use crate::kubelet::{Kubelet, KubeletConfig, KubeletInfo, scratch_dir};
use crate::podnet::PodNetwork;
use crate::registry::Registry;

/// The repository root (this crate lives at `crates/testenv`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding the copy of `shared/` beside the clone (`$CAPTF_SHARED`, else
/// `<repo>/../shared`).
pub fn shared_dir() -> PathBuf {
    std::env::var_os("CAPTF_SHARED")
        .filter(|d| !d.is_empty())
        .map_or_else(|| repo_root().join("../shared"), PathBuf::from)
}

/// CRD directories installed into every test control plane: CAPTF's own and Cluster API's.
pub fn crd_dirs() -> Vec<PathBuf> {
    vec![
        repo_root().join("config/crd/bases"),
        shared_dir().join("reference/capi-v1.14.0/crds"),
    ]
}

/// A running test environment. The control plane and the pod network start with it; the registry
/// and the process kubelet start on first use, so tests that only need the API server never pay
/// for them.
#[derive(Debug)]
pub struct TestEnv {
    control_plane: ControlPlane,
    /// The pod network (see [`crate::podnet`]); its failure fails only the kubelet.
    network: Result<Arc<PodNetwork>, String>,
    registry: OnceLock<Result<Registry, String>>,
    kubelet: OnceLock<Result<KubeletInfo, String>>,
}

static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();

/// Runs `f` on a fresh thread with its own current-thread runtime: callers may be inside a tokio
/// runtime already (a `#[tokio::test]`), where blocking on another future would panic.
fn on_own_runtime<T, F, Fut>(f: F) -> anyhow::Result<T>
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

    /// Starts the control plane on a thread of its own: starting blocks on its own runtime, and
    /// callers may be inside a tokio runtime already (a `#[tokio::test]`).
    fn start() -> anyhow::Result<TestEnv> {
        std::thread::Builder::new()
            .name("captf-testenv".into())
            .spawn(|| -> anyhow::Result<TestEnv> {
                let network = PodNetwork::create()
                    .map(Arc::new)
                    .map_err(|e| format!("the pod network failed to start: {e:#}"));
                let extra_ips: Vec<_> = network.iter().map(|n| n.gateway()).collect();
                let mut cp = ControlPlane::start_with(&scratch_dir("captf-testenv")?, &extra_ips)?;
                cp.install_crds(&crd_dirs())?;
                Ok(TestEnv::new(cp, network))
            })
            .context("spawning the test environment thread")?
            .join()
            .map_err(|_| anyhow::anyhow!("starting the test environment panicked"))?
    }

    fn new(control_plane: ControlPlane, network: Result<Arc<PodNetwork>, String>) -> Self {
        TestEnv {
            control_plane,
            network,
            registry: OnceLock::new(),
            kubelet: OnceLock::new(),
        }
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
                    let mut cfg =
                        KubeletConfig::new("captf-testenv", self.endpoints().dir.join("kubelet"));
                    cfg.shim_binary = Some(crate::shim::binary_path()?);
                    cfg.pod_network = Some(self.network.clone().map_err(anyhow::Error::msg)?);
                    Kubelet::start_in_background(&self.endpoints().kubeconfig, cfg)
                })()
                .map_err(|e: anyhow::Error| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the process kubelet failed to start: {e}"))
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
