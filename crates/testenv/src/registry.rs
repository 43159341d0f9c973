//! An OCI registry on loopback: `crane registry serve` (go-containerregistry, built from source
//! by `hack/testbin.sh`) with its blobs on disk, plain HTTP, no authentication; put a
//! [`crate::registry_auth::AuthProxy`] in front of it for a private one.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::image::http_get_status;

/// A running registry. Dropping it stops the process; the process also dies with the process
/// that started it.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    port: u16,
    dir: PathBuf,
    tmp_dir: Option<tempfile::TempDir>,
}

impl Registry {
    /// Starts a registry storing blobs under `dir`, on a free loopback port, and waits until
    /// `/v2/` answers.
    pub async fn start(dir: impl Into<PathBuf>) -> anyhow::Result<Self> {
        Self::start_inner(dir.into(), None).await
    }

    /// Starts a registry storing blobs in a temporary directory removed when it stops.
    pub async fn start_temp() -> anyhow::Result<Self> {
        let tmp = tempfile::Builder::new()
            .prefix("captf-registry-")
            .tempdir()
            .context("creating the registry directory")?;
        Self::start_inner(tmp.path().to_path_buf(), Some(tmp)).await
    }

    async fn start_inner(dir: PathBuf, tmp: Option<tempfile::TempDir>) -> anyhow::Result<Self> {
        let crane = crate::testbin::path("crane")?;
        std::fs::create_dir_all(dir.join("blobs"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let mut last_err = None;
        // A free port can be taken between probing and binding: retry a few times.
        for _ in 0..3 {
            let port = crate::net::free_loopback_port()?;
            let log = std::fs::File::create(dir.join("registry.log"))?;
            let mut cmd = Command::new(&crane);
            cmd.args(["registry", "serve", "--address"])
                .arg(format!("127.0.0.1:{port}"))
                .arg("--disk")
                .arg(dir.join("blobs"))
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            let child = crate::shim::spawn_tied(cmd)
                .with_context(|| format!("starting {}", crane.display()))?;
            let mut reg = Registry {
                child,
                port,
                dir: dir.clone(),
                tmp_dir: None,
            };
            match reg.wait_ready().await {
                Ok(()) => {
                    reg.tmp_dir = tmp;
                    tracing::info!(host = %reg.host(), "registry ready");
                    return Ok(reg);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("registry did not start")))
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let url = format!("http://{}/v2/", self.host());
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log =
                    std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
                bail!("crane registry exited ({status}): {log}");
            }
            if let Ok(200) = http_get_status(&url).await {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(20) {
                bail!("crane registry did not answer {url} within 20s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `127.0.0.1:<port>`: the registry part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The registry's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding blobs and the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the registry.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.kill();
    }
}
