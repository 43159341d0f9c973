//! The manager's health and diagnostics servers (INTERFACE-FACTS §4 "Diagnostics / TLS" and
//! "Other", §3 "Component extras"): liveness and readiness on `--health-addr` (default `:9440`),
//! and `/metrics` on `--diagnostics-address` (default `:8443`).
//!
//! - `/healthz` answers ok while the process serves; `/readyz` answers ok once the caller marks
//!   the manager [`Readiness::set_ready`], 503 before (and again once shutdown starts).
//! - `/metrics` is HTTPS by default, and a scraper must present a bearer token the API server
//!   authenticates (TokenReview) and authorizes to `get` the non-resource URL `/metrics`
//!   (SubjectAccessReview): 401 without a valid token, 403 when not allowed.
//!   `--insecure-diagnostics` serves it over plain HTTP to anyone.
//! - The metrics certificate is `tls.crt` and `tls.key` in [`METRICS_CERT_DIR`] when mounted
//!   there (reloaded when the files rotate), else a self-signed one made at start.
//! - `--tls-min-version`, `--tls-cipher-suites` and `--tls-curve-preferences` shape the HTTPS
//!   listener.
//!
//! The implementation is the shared `serving` library crate's: one TLS policy, one
//! authenticated metrics handler, one health router for both binaries. Addresses are written the
//! Go way: `:8443` listens on every interface, `host:port` on one, `0` turns a listener off.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use serving::{self as shared, CertificateFiles, DiagnosticsAuth, Servers, TlsPolicy};
pub use serving::{Listen, TlsVersion, parse_listen};

use crate::runtime::metrics::Metrics;

/// Where a serving certificate for the metrics endpoint is looked for (no flag, as in Cluster
/// API providers): `tls.crt` and `tls.key`.
pub const METRICS_CERT_DIR: &str = "/tmp/k8s-metrics-server/serving-certs/";

/// How often a mounted metrics certificate is checked for rotation.
pub const CERT_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// How long in-flight requests may finish after shutdown is requested.
pub const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(10);

/// The host names and addresses of the self-signed metrics certificate.
const SELF_SIGNED_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The diagnostics flags, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosticsSettings {
    /// `--health-addr`: `/healthz` and `/readyz` (`:9440`; `0` turns it off).
    pub health_addr: String,
    /// `--diagnostics-address`: `/metrics` (`:8443`; `0` turns it off).
    pub diagnostics_addr: String,
    /// `--insecure-diagnostics`: plain HTTP without authentication or authorization.
    pub insecure: bool,
    /// `--tls-min-version`: `VersionTLS10` to `VersionTLS13` (this build speaks TLS 1.2 and 1.3,
    /// so `VersionTLS10` and `VersionTLS11` mean 1.2).
    pub tls_min_version: String,
    /// `--tls-cipher-suites`: allowed TLS 1.2 cipher suites by Go name (empty: all supported).
    pub cipher_suites: Vec<String>,
    /// `--tls-curve-preferences`: allowed key-exchange groups by Go CurveID (empty: all).
    pub curve_preferences: Vec<u16>,
    /// `--profiler-address`: `/debug/pprof/` over plain HTTP without authentication (empty or
    /// `0`: none).
    pub profiler_addr: String,
}

impl Default for DiagnosticsSettings {
    /// The documented defaults: `:9440`, `:8443`, secure, `VersionTLS12`, every suite and curve.
    fn default() -> Self {
        Self {
            health_addr: ":9440".to_owned(),
            diagnostics_addr: ":8443".to_owned(),
            insecure: false,
            profiler_addr: String::new(),
            tls_min_version: "VersionTLS12".to_owned(),
            cipher_suites: Vec::new(),
            curve_preferences: Vec::new(),
        }
    }
}

impl DiagnosticsSettings {
    /// The health listener's address, or off.
    pub fn health_listen(&self) -> anyhow::Result<Listen> {
        parse_listen(&self.health_addr).map_err(|e| anyhow::anyhow!("--health-addr: {e}"))
    }

    /// The diagnostics listener's address, or off.
    pub fn diagnostics_listen(&self) -> anyhow::Result<Listen> {
        parse_listen(&self.diagnostics_addr)
            .map_err(|e| anyhow::anyhow!("--diagnostics-address: {e}"))
    }

    /// The profiler listener's address, or off (`localhost:PORT` is the loopback address).
    pub fn profiler_listen(&self) -> anyhow::Result<Listen> {
        let addr = self.profiler_addr.trim();
        if addr.is_empty() {
            return Ok(Listen::Off);
        }
        let addr = match addr.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => addr.to_owned(),
        };
        parse_listen(&addr).map_err(|e| anyhow::anyhow!("--profiler-address: {e}"))
    }

    /// The TLS policy of the HTTPS listener; an unknown version, cipher suite or curve is an
    /// error naming it.
    pub fn tls_policy(&self) -> anyhow::Result<TlsPolicy> {
        let min_version = match self.tls_min_version.as_str() {
            "VersionTLS10" | "VersionTLS11" => {
                tracing::info!(
                    requested = %self.tls_min_version,
                    "TLS 1.0 and 1.1 are not supported; the lowest version served is TLS 1.2"
                );
                TlsVersion::Tls12
            }
            "VersionTLS12" => TlsVersion::Tls12,
            "VersionTLS13" => TlsVersion::Tls13,
            other => anyhow::bail!(
                "--tls-min-version: {other:?} is not one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13"
            ),
        };
        shared::crypto_provider(&self.cipher_suites, &self.curve_preferences)?;
        Ok(TlsPolicy {
            min_version,
            cipher_suites: self.cipher_suites.clone(),
            curve_preferences: self.curve_preferences.clone(),
        })
    }
}

/// Whether the manager is ready (`/readyz`). Clones share one flag; it starts unready.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// `/readyz` answers ok from now on.
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// `/readyz` answers 503 from now on.
    pub fn set_not_ready(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether `/readyz` answers ok.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// The shared flag itself.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

/// The bound health and diagnostics listeners, so a caller (or a test) knows the ports before
/// serving.
#[derive(Debug)]
pub struct DiagnosticsListeners {
    /// The health listener, unless turned off.
    pub health: Option<TcpListener>,
    /// The diagnostics listener, unless turned off.
    pub diagnostics: Option<TcpListener>,
    /// The profiler listener, when asked for.
    pub profiler: Option<TcpListener>,
}

impl DiagnosticsListeners {
    /// Binds the listeners `settings` ask for.
    pub fn bind(settings: &DiagnosticsSettings) -> anyhow::Result<Self> {
        let optional = |l: Listen, what: &str| -> anyhow::Result<Option<TcpListener>> {
            match l {
                Listen::Off => Ok(None),
                Listen::At(addr) => shared::bind(addr, what).map(Some),
            }
        };
        Ok(Self {
            health: optional(settings.health_listen()?, "health")?,
            diagnostics: optional(settings.diagnostics_listen()?, "diagnostics")?,
            profiler: optional(settings.profiler_listen()?, "profiler")?,
        })
    }

    /// The health listener's address.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The diagnostics listener's address.
    pub fn diagnostics_addr(&self) -> Option<SocketAddr> {
        self.diagnostics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The profiler listener's address.
    pub fn profiler_addr(&self) -> Option<SocketAddr> {
        self.profiler.as_ref().and_then(|l| l.local_addr().ok())
    }
}

/// A self-signed serving certificate and key (PEM) for localhost and the loopback addresses.
pub fn self_signed_pair() -> anyhow::Result<(String, String)> {
    let names: Vec<String> = SELF_SIGNED_NAMES.iter().map(|n| (*n).to_owned()).collect();
    let mut params =
        rcgen::CertificateParams::new(names).context("the self-signed certificate's names")?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "captf-controller-manager-metrics",
    );
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate().context("generating a key")?;
    let cert = params
        .self_signed(&key)
        .context("signing the self-signed certificate")?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The HTTPS configuration of the metrics listener: the pair in `cert_dir` when both files are
/// there (and a task that reloads it when they rotate), else a self-signed pair.
fn metrics_tls(
    cert_dir: &Path,
    policy: &TlsPolicy,
) -> anyhow::Result<(RustlsConfig, Option<tokio::task::JoinHandle<()>>)> {
    let files = CertificateFiles {
        cert: cert_dir.join("tls.crt"),
        key: cert_dir.join("tls.key"),
    };
    if files.exist() {
        let (cert, key) = files.read()?;
        let config = shared::tls_config_from_pem(&cert, &key, policy)
            .with_context(|| format!("the metrics certificate in {}", cert_dir.display()))?;
        let tls = RustlsConfig::from_config(Arc::new(config));
        tracing::info!(cert = %files.cert.display(), "serving metrics with the mounted certificate");
        let watcher = tokio::spawn(shared::watch_certificate(
            files,
            policy.clone(),
            tls.clone(),
            CERT_RELOAD_INTERVAL,
            shared::fingerprint(&cert, &key),
            |_| {},
        ));
        return Ok((tls, Some(watcher)));
    }
    anyhow::ensure!(
        !files.cert.exists() && !files.key.exists(),
        "{} holds only one of tls.crt and tls.key",
        cert_dir.display()
    );
    let (cert, key) = self_signed_pair()?;
    let config = shared::tls_config_from_pem(cert.as_bytes(), key.as_bytes(), policy)?;
    tracing::info!(
        dir = %cert_dir.display(),
        "no metrics certificate mounted; serving metrics with a self-signed certificate"
    );
    Ok((RustlsConfig::from_config(Arc::new(config)), None))
}

/// Binds the listeners of `settings` and serves them until `shutdown` resolves (`Ok`, after
/// in-flight requests finish) or a listener stops on its own (an error: the caller exits). The
/// metrics certificate is looked for in [`METRICS_CERT_DIR`]; `client` authenticates and
/// authorizes scrapers unless `settings.insecure`.
pub async fn serve(
    settings: DiagnosticsSettings,
    metrics: Metrics,
    ready: Readiness,
    client: kube::Client,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let listeners = DiagnosticsListeners::bind(&settings)?;
    serve_on(
        listeners,
        settings,
        PathBuf::from(METRICS_CERT_DIR),
        metrics,
        ready,
        Some(client),
        shutdown,
    )
    .await
}

/// [`serve`] on already bound `listeners`, with the metrics certificate looked for in
/// `cert_dir`. Secure diagnostics need `client`; insecure ones use none.
pub async fn serve_on(
    listeners: DiagnosticsListeners,
    settings: DiagnosticsSettings,
    cert_dir: PathBuf,
    metrics: Metrics,
    ready: Readiness,
    client: Option<kube::Client>,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let policy = settings.tls_policy()?;
    let mut servers = Servers::new();
    let mut watcher = None;
    if let Some(l) = listeners.health {
        servers.spawn("health", l, shared::health_router(ready.flag()), None)?;
    }
    if let Some(l) = listeners.diagnostics {
        let encode = move || metrics.encode();
        if settings.insecure {
            tracing::warn!(
                "serving metrics over plain HTTP without authentication (--insecure-diagnostics)"
            );
            let router = shared::metrics_router(encode, DiagnosticsAuth::Open);
            servers.spawn("diagnostics", l, router, None)?;
        } else {
            let client = client.context(
                "secure diagnostics authenticate scrapers through the API server and need a client",
            )?;
            let (tls, reload) = metrics_tls(&cert_dir, &policy)?;
            watcher = reload;
            let router = shared::diagnostics_router(encode, DiagnosticsAuth::Kubernetes(client));
            servers.spawn("diagnostics", l, router, Some(tls))?;
        }
    }
    if let Some(l) = listeners.profiler {
        tracing::warn!(
            "serving /debug/pprof/ over plain HTTP without authentication (--profiler-address)"
        );
        servers.spawn(
            "profiler",
            l,
            shared::debug::pprof_router(&DiagnosticsAuth::Open),
            None,
        )?;
    }
    let result = servers
        .run(
            async move {
                shutdown.await;
                ready.set_not_ready();
            },
            GRACEFUL_SHUTDOWN,
        )
        .await;
    if let Some(w) = watcher {
        w.abort();
    }
    result
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Instant;

    use super::*;

    fn install_ring() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }

    fn loopback_settings(insecure: bool) -> DiagnosticsSettings {
        DiagnosticsSettings {
            health_addr: "127.0.0.1:0".to_owned(),
            diagnostics_addr: "127.0.0.1:0".to_owned(),
            insecure,
            ..DiagnosticsSettings::default()
        }
    }

    /// A client for an API server that is not there: enough for requests refused before any
    /// review is asked for.
    fn unreachable_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    struct Running {
        health: SocketAddr,
        diagnostics: SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<anyhow::Result<()>>,
    }

    fn start(
        settings: DiagnosticsSettings,
        cert_dir: PathBuf,
        metrics: Metrics,
        ready: Readiness,
        client: Option<kube::Client>,
    ) -> Running {
        let listeners = DiagnosticsListeners::bind(&settings).unwrap();
        let health = listeners.health_addr().unwrap();
        let diagnostics = listeners.diagnostics_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_on(
            listeners,
            settings,
            cert_dir,
            metrics,
            ready,
            client,
            async move {
                let _ = stopped.await;
            },
        ));
        Running {
            health,
            diagnostics,
            stop,
            task,
        }
    }

    /// GETs `url` until the server answers (at most ten seconds).
    async fn get(client: &reqwest::Client, url: &str) -> reqwest::Response {
        let started = Instant::now();
        loop {
            match client.get(url).send().await {
                Ok(r) => return r,
                Err(e) => {
                    assert!(
                        started.elapsed() < Duration::from_secs(10),
                        "{url}: no answer: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let d = DiagnosticsSettings::default();
        assert_eq!(
            d.health_listen().unwrap(),
            Listen::At(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9440)))
        );
        assert_eq!(
            d.diagnostics_listen().unwrap(),
            Listen::At(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 8443)))
        );
        assert!(!d.insecure);
        assert_eq!(d.tls_policy().unwrap().min_version, TlsVersion::Tls12);
    }

    #[test]
    fn flags_are_checked() {
        let with = |f: fn(&mut DiagnosticsSettings)| {
            let mut s = DiagnosticsSettings::default();
            f(&mut s);
            s
        };
        assert_eq!(
            with(|s| s.diagnostics_addr = "0".into())
                .diagnostics_listen()
                .unwrap(),
            Listen::Off
        );
        assert!(
            with(|s| s.health_addr = "9440".into())
                .health_listen()
                .is_err()
        );
        assert_eq!(
            with(|s| s.tls_min_version = "VersionTLS13".into())
                .tls_policy()
                .unwrap()
                .min_version,
            TlsVersion::Tls13
        );
        assert_eq!(
            with(|s| s.tls_min_version = "VersionTLS10".into())
                .tls_policy()
                .unwrap()
                .min_version,
            TlsVersion::Tls12
        );
        let err = with(|s| s.tls_min_version = "TLS1.2".into())
            .tls_policy()
            .unwrap_err();
        assert!(err.to_string().contains("--tls-min-version"), "{err}");
        let err = with(|s| s.cipher_suites = vec!["TLS_RSA_WITH_RC4_128_SHA".into()])
            .tls_policy()
            .unwrap_err();
        assert!(err.to_string().contains("--tls-cipher-suites"), "{err}");
        let err = with(|s| s.curve_preferences = vec![25])
            .tls_policy()
            .unwrap_err();
        assert!(err.to_string().contains("--tls-curve-preferences"), "{err}");
    }

    fn assert_spawnable<F: Future + Send + 'static>(_: &F) {}

    #[tokio::test]
    async fn serve_can_be_spawned() {
        install_ring();
        let serving = serve(
            DiagnosticsSettings::default(),
            Metrics::new(),
            Readiness::default(),
            unreachable_client(),
            async {},
        );
        assert_spawnable(&serving);
    }

    #[test]
    fn readiness_is_shared_by_clones() {
        let ready = Readiness::default();
        assert!(!ready.is_ready());
        ready.clone().set_ready();
        assert!(ready.is_ready() && ready.flag().load(Ordering::Acquire));
        ready.set_not_ready();
        assert!(!ready.is_ready());
    }

    #[test]
    fn the_self_signed_pair_serves() {
        install_ring();
        let (cert, key) = self_signed_pair().unwrap();
        shared::tls_config_from_pem(cert.as_bytes(), key.as_bytes(), &TlsPolicy::default())
            .unwrap();
    }

    #[tokio::test]
    async fn insecure_health_readiness_and_metrics_over_loopback() {
        install_ring();
        let metrics = Metrics::new();
        metrics.lock_force_unlock("TerraformCluster");
        let ready = Readiness::default();
        let dir = tempfile::tempdir().unwrap();
        let running = start(
            loopback_settings(true),
            dir.path().to_owned(),
            metrics.clone(),
            ready.clone(),
            None,
        );
        let http = reqwest::Client::new();
        let health = format!("http://{}", running.health);
        let r = get(&http, &format!("{health}/healthz")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "ok");
        assert_eq!(get(&http, &format!("{health}/readyz")).await.status(), 503);
        ready.set_ready();
        assert_eq!(get(&http, &format!("{health}/readyz")).await.status(), 200);

        let r = get(&http, &format!("http://{}/metrics", running.diagnostics)).await;
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/openmetrics-text")
        );
        let text = r.text().await.unwrap();
        assert!(text.contains("captf_build_info{"), "{text}");
        assert!(
            text.contains(r#"captf_lock_force_unlocks_total{kind="TerraformCluster"} 1"#),
            "{text}"
        );
        // A recording after start shows up at the next scrape.
        metrics.lock_force_unlock("TerraformCluster");
        let text = get(&http, &format!("http://{}/metrics", running.diagnostics))
            .await
            .text()
            .await
            .unwrap();
        assert!(text.contains(r#"captf_lock_force_unlocks_total{kind="TerraformCluster"} 2"#));

        running.stop.send(()).unwrap();
        running.task.await.unwrap().unwrap();
        assert!(!ready.is_ready(), "shutdown marks the manager unready");
    }

    #[tokio::test]
    async fn secure_metrics_use_a_self_signed_certificate_and_want_a_token() {
        install_ring();
        let dir = tempfile::tempdir().unwrap();
        let running = start(
            loopback_settings(false),
            dir.path().join("absent"),
            Metrics::new(),
            Readiness::default(),
            Some(unreachable_client()),
        );
        let https = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .unwrap();
        let url = format!("https://{}/metrics", running.diagnostics);
        assert_eq!(get(&https, &url).await.status(), 401);
        // Plain HTTP is not served on the secure port.
        assert!(
            reqwest::get(format!("http://{}/metrics", running.diagnostics))
                .await
                .map_or(true, |r| r.status() != 200)
        );
        // Health stays plain HTTP.
        let health = format!("http://{}/healthz", running.health);
        assert_eq!(get(&reqwest::Client::new(), &health).await.status(), 200);
        running.stop.send(()).unwrap();
        running.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn secure_metrics_serve_the_mounted_certificate() {
        install_ring();
        let dir = tempfile::tempdir().unwrap();
        // A CA and a serving certificate it signs, as cert-manager would mount.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "metrics-test-ca");
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        std::fs::write(dir.path().join("tls.crt"), leaf.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();

        let running = start(
            loopback_settings(false),
            dir.path().to_owned(),
            Metrics::new(),
            Readiness::default(),
            Some(unreachable_client()),
        );
        let trusting = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
            .build()
            .unwrap();
        let url = format!("https://{}/metrics", running.diagnostics);
        assert_eq!(get(&trusting, &url).await.status(), 401);
        running.stop.send(()).unwrap();
        running.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn secure_diagnostics_without_a_client_or_with_half_a_pair_fail() {
        install_ring();
        let dir = tempfile::tempdir().unwrap();
        let settings = loopback_settings(false);
        let listeners = DiagnosticsListeners::bind(&settings).unwrap();
        let err = serve_on(
            listeners,
            settings.clone(),
            dir.path().to_owned(),
            Metrics::new(),
            Readiness::default(),
            None,
            std::future::pending(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("need a client"), "{err}");

        std::fs::write(dir.path().join("tls.crt"), "not a certificate").unwrap();
        let listeners = DiagnosticsListeners::bind(&settings).unwrap();
        let err = serve_on(
            listeners,
            settings,
            dir.path().to_owned(),
            Metrics::new(),
            Readiness::default(),
            Some(unreachable_client()),
            std::future::pending(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("only one of"), "{err}");
    }

    /// `--profiler-address` serves the profiles to anyone, and nothing else.
    #[tokio::test]
    async fn the_profiler_address_serves_the_profiles_without_authentication() {
        let settings = DiagnosticsSettings {
            health_addr: "0".to_owned(),
            diagnostics_addr: "0".to_owned(),
            profiler_addr: "localhost:0".to_owned(),
            ..DiagnosticsSettings::default()
        };
        let listeners = DiagnosticsListeners::bind(&settings).unwrap();
        let addr = listeners.profiler_addr().unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_without_client(listeners, settings, async move {
            let _ = stopped.await;
        }));
        let get = |path: &str| {
            let path = path.to_owned();
            async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                let request =
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                stream.write_all(request.as_bytes()).await.unwrap();
                let mut answer = String::new();
                stream.read_to_string(&mut answer).await.unwrap();
                answer
            }
        };
        let index = get("/debug/pprof/").await;
        assert!(index.starts_with("HTTP/1.1 200"), "{index}");
        assert!(index.contains("/debug/pprof/profile"), "{index}");
        let flags = get("/debug/flags/v").await;
        assert!(flags.starts_with("HTTP/1.1 404"), "{flags}");
        let metrics = get("/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 404"), "{metrics}");
        let _ = stop.send(());
        server.await.unwrap().unwrap();
        let bad = DiagnosticsSettings {
            profiler_addr: "nowhere".to_owned(),
            ..DiagnosticsSettings::default()
        };
        let err = bad.profiler_listen().unwrap_err().to_string();
        assert!(err.starts_with("--profiler-address:"), "{err}");
    }

    #[tokio::test]
    async fn turned_off_listeners_are_not_bound() {
        let settings = DiagnosticsSettings {
            health_addr: "0".to_owned(),
            diagnostics_addr: "0".to_owned(),
            ..DiagnosticsSettings::default()
        };
        let listeners = DiagnosticsListeners::bind(&settings).unwrap();
        assert!(listeners.health_addr().is_none() && listeners.diagnostics_addr().is_none());
        serve_without_client(listeners, settings, async {})
            .await
            .unwrap();
    }

    /// [`serve_on`] with fresh metrics and readiness and no API server client.
    async fn serve_without_client(
        listeners: DiagnosticsListeners,
        settings: DiagnosticsSettings,
        shutdown: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        serve_on(
            listeners,
            settings,
            PathBuf::from(METRICS_CERT_DIR),
            Metrics::new(),
            Readiness::default(),
            None,
            shutdown,
        )
        .await
    }
}
