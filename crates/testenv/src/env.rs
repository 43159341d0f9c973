//! The shared test environment of one test binary: one control plane, started on first use and
//! torn down when the process exits, with a fresh namespace per test (ENGINEERING.md §2).

use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc;

use crate::control_plane::{self, ControlPlane, Endpoints};

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

/// A running test environment.
#[derive(Debug, Clone)]
pub struct TestEnv {
    endpoints: Endpoints,
}

static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();

impl TestEnv {
    /// The environment shared by every test of this test binary, started on first use: a control
    /// plane with CAPTF's and Cluster API's CRDs installed. Its processes live on a dedicated
    /// thread and die with the test process.
    pub fn shared() -> anyhow::Result<&'static TestEnv> {
        SHARED
            .get_or_init(|| Self::start_on_own_thread().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the test environment failed to start: {e}"))
    }

    fn start_on_own_thread() -> anyhow::Result<TestEnv> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("captf-testenv".into())
            .spawn(move || {
                let started = (|| -> anyhow::Result<(tempfile::TempDir, ControlPlane)> {
                    let dir = tempfile::Builder::new()
                        .prefix("captf-testenv-")
                        .tempdir()?;
                    let mut cp = ControlPlane::start(dir.path())?;
                    cp.install_crds(&crd_dirs())?;
                    Ok((dir, cp))
                })();
                match started {
                    Ok((dir, cp)) => {
                        let _ = tx.send(Ok(TestEnv {
                            endpoints: cp.endpoints().clone(),
                        }));
                        // Keep the processes (tied to this thread's life) and their directory
                        // until the test process exits.
                        let _keep = (dir, cp);
                        loop {
                            std::thread::park();
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .context("spawning the test environment thread")?;
        rx.recv().context("the test environment thread died")?
    }

    /// Files and endpoints of the control plane.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// A new admin client. Create one per test: a client belongs to the tokio runtime it was
    /// first used on.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        control_plane::client_for(&self.endpoints.kubeconfig).await
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
