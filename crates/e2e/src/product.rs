//! CAPTF itself as a user runs it (book: Installation; INTERFACE-FACTS §4 "Manager flags"): the
//! `manager` and `webhook` binaries of this checkout's build, each as its own ServiceAccount bound
//! to exactly the RBAC in `config/`, the webhook registered from `config/webhook/manifests.yaml`
//! URL-style, like Cluster API's webhooks in [`testenv::capi`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use testenv::TestEnv;
use testenv::capi::WebhookPki;
use testenv::net::free_loopback_port;

use crate::kube_ops::Kube;

/// CAPTF's namespace (`clusterctl init` puts the provider there).
pub const SYSTEM_NAMESPACE: &str = "captf-system";

/// A binary of this workspace's build (`manager`, `webhook`, `captf-testenv`): next to the
/// running executable or one directory up (tests run from `target/<profile>/deps/`).
pub fn workspace_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let found = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    found.ok_or_else(|| {
        anyhow::anyhow!(
            "the {name} binary is not built next to {}: run `cargo build --bins` (make test and \
             make quickstart do)",
            exe.display()
        )
    })
}

/// Applies every document of the given files under the checkout's `config/` (ServiceAccounts,
/// ClusterRoles, bindings), then writes a kubeconfig with a token of ServiceAccount
/// `captf-system/<sa>`: a binary running with it holds exactly the shipped RBAC.
pub async fn service_account_kubeconfig(
    env: &TestEnv,
    admin: &Kube,
    sa: &str,
    files: &[&str],
) -> anyhow::Result<PathBuf> {
    let root = testenv::env::repo_root();
    testenv::capi::ensure_namespace(&admin.client, SYSTEM_NAMESPACE).await?;
    for file in files {
        let text = std::fs::read_to_string(root.join("config").join(file))
            .with_context(|| format!("reading config/{file}"))?;
        admin.apply_yaml(&text, SYSTEM_NAMESPACE).await?;
    }
    let sas: Api<ServiceAccount> = Api::namespaced(admin.client.clone(), SYSTEM_NAMESPACE);
    let token = sas
        .create_token_request(
            sa,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(24 * 3600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            },
        )
        .await
        .with_context(|| format!("requesting a token for {SYSTEM_NAMESPACE}/{sa}"))?
        .status
        .map(|s| s.token)
        .ok_or_else(|| anyhow::anyhow!("the token request for {sa} returned no token"))?;
    let e = env.endpoints();
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "testenv", "cluster": {"server": e.server, "certificate-authority": e.ca_file}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": sa}}],
        "current-context": "testenv",
    });
    let path = e.dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, serde_json::to_vec_pretty(&kubeconfig)?)?;
    Ok(path)
}

/// A running CAPTF: the manager and the webhook processes. Dropping it stops both.
#[derive(Debug)]
pub struct Captf {
    manager: Child,
    webhook: Child,
    /// The manager's plain-HTTP metrics (`http://127.0.0.1:<port>/metrics`).
    pub manager_metrics_port: u16,
    /// Where the two logs are (`manager.log`, `webhook.log`).
    pub log_dir: PathBuf,
}

impl Drop for Captf {
    fn drop(&mut self) {
        testenv::control_plane::terminate(&mut self.webhook);
        testenv::control_plane::terminate(&mut self.manager);
    }
}

fn spawn_logged(binary: &Path, args: &[String], log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(binary);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // The manager reads RUST_LOG; keep its logs at info unless the caller asked for more.
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    testenv::shim::spawn_tied(cmd).with_context(|| format!("starting {}", binary.display()))
}

/// Whether `GET http://127.0.0.1:<port><path>` answers 200.
pub fn http_ok(port: u16, path: &str) -> bool {
    http_get(port, path).is_some_and(|(status, _)| status == 200)
}

/// `GET http://127.0.0.1:<port><path>`: the status code and body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

fn wait_healthy(child: &mut Child, port: u16, name: &str, log: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    while !http_ok(port, "/readyz") {
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            bail!(
                "{name} exited ({status}):\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{name} was not ready after 60s (log: {})", log.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// The webhook configuration of `config/webhook/manifests.yaml`, pointed at
/// `https://127.0.0.1:<port><path>` with `ca_pem`.
fn webhook_configuration(port: u16, ca_pem: &str) -> anyhow::Result<Vec<Value>> {
    use base64::Engine as _;
    let path = testenv::env::repo_root().join("config/webhook/manifests.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    for doc in &mut docs {
        if let Some(annotations) = doc["metadata"]["annotations"].as_object_mut() {
            annotations.remove("cert-manager.io/inject-ca-from");
        }
        for hook in doc["webhooks"].as_array_mut().into_iter().flatten() {
            let hook_path = hook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or("/")
                .to_owned();
            hook["clientConfig"] =
                json!({"url": format!("https://127.0.0.1:{port}{hook_path}"), "caBundle": ca});
        }
    }
    Ok(docs.into_iter().filter(Value::is_object).collect())
}

impl Captf {
    /// Starts the webhook, registers it, and starts the manager with `runner_image`, watching
    /// every namespace; returns once both report ready.
    pub async fn start(env: &TestEnv, admin: &Kube, runner_image: &str) -> anyhow::Result<Self> {
        Self::start_with(env, admin, runner_image, &[]).await
    }

    /// [`Captf::start`], with more flags for the manager (the scale harness shortens
    /// `--sync-period` so that its steady window holds a resync).
    pub async fn start_with(
        env: &TestEnv,
        admin: &Kube,
        runner_image: &str,
        manager_flags: &[String],
    ) -> anyhow::Result<Self> {
        let log_dir = env.endpoints().dir.join("captf");
        std::fs::create_dir_all(&log_dir)?;
        let webhook_kubeconfig = service_account_kubeconfig(
            env,
            admin,
            "captf-webhook",
            &[
                "webhook/service_account.yaml",
                "webhook/role.yaml",
                "webhook/role_binding.yaml",
            ],
        )
        .await?;
        let manager_kubeconfig = service_account_kubeconfig(
            env,
            admin,
            "captf-controller-manager",
            &[
                "rbac/service_account.yaml",
                "rbac/role.yaml",
                "rbac/role_binding.yaml",
                "rbac/runner_role.yaml",
            ],
        )
        .await?;
        let pki = WebhookPki::generate()?;
        let cert_dir = log_dir.join("webhook-certs");
        pki.write_to(&cert_dir)?;
        let (port, health, diag) = (
            free_loopback_port()?,
            free_loopback_port()?,
            free_loopback_port()?,
        );
        let webhook_log = log_dir.join("webhook.log");
        let mut webhook = spawn_logged(
            &workspace_binary("webhook")?,
            &[
                format!("--kubeconfig={}", webhook_kubeconfig.display()),
                format!("--webhook-port={port}"),
                format!("--webhook-cert-dir={}", cert_dir.display()),
                format!("--health-addr=127.0.0.1:{health}"),
                format!("--diagnostics-address=127.0.0.1:{diag}"),
                "--insecure-diagnostics=true".into(),
            ],
            &webhook_log,
        )?;
        let wait = {
            let log = webhook_log.clone();
            tokio::task::spawn_blocking(move || {
                let r = wait_healthy(&mut webhook, health, "the webhook", &log);
                (webhook, r)
            })
        };
        let (webhook, ready) = wait.await?;
        ready?;
        for doc in webhook_configuration(port, &pki.ca_pem)? {
            admin.apply(&doc, "").await?;
        }
        let (m_health, m_diag) = (free_loopback_port()?, free_loopback_port()?);
        let manager_log = log_dir.join("manager.log");
        let mut manager = spawn_logged(
            &workspace_binary("manager")?,
            &[
                format!("--kubeconfig={}", manager_kubeconfig.display()),
                format!("--runner-image={runner_image}"),
                "--leader-elect=false".into(),
                format!("--health-addr=127.0.0.1:{m_health}"),
                format!("--diagnostics-address=127.0.0.1:{m_diag}"),
                "--insecure-diagnostics=true".into(),
            ]
            .into_iter()
            .chain(manager_flags.iter().cloned())
            .collect::<Vec<_>>(),
            &manager_log,
        )?;
        let (manager, ready) = tokio::task::spawn_blocking(move || {
            let r = wait_healthy(&mut manager, m_health, "the manager", &manager_log);
            (manager, r)
        })
        .await?;
        ready?;
        Ok(Captf {
            manager,
            webhook,
            manager_metrics_port: m_diag,
            log_dir,
        })
    }

    /// The manager's process ID, for measuring its memory and CPU.
    pub fn manager_pid(&self) -> u32 {
        self.manager.id()
    }

    /// The sum of a counter family in the manager's metrics (e.g. `captf_jobs_total`).
    pub fn counter(&self, family: &str) -> f64 {
        let Some((_, body)) = http_get(self.manager_metrics_port, "/metrics") else {
            return 0.0;
        };
        body.lines()
            .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}
