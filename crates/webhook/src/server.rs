//! The listeners: the HTTPS admission server (one POST path per kind), liveness and readiness,
//! and the diagnostics (metrics) endpoint; plus the certificate reloader that swaps the serving
//! certificate in place when the mounted files rotate (cert-manager renews them in the Secret, the
//! kubelet updates the mount). TLS is rustls on ring only.
//!
//! [`serve`] returns when shutdown is requested, and fails as soon as any listener stops on its
//! own: the process exits rather than keep running without its webhook.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::PostParams;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use crate::admission;
use crate::cli::{Listen, ServeArgs, TlsVersion};
use crate::kinds::Kind;
use crate::lookups::{self, Lookups};
use crate::metrics::Metrics;

/// Largest AdmissionReview body accepted: an object and its old version, each up to the API
/// server's 1.5 MiB object limit, with room to spare.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// How long in-flight requests may finish after shutdown is requested.
pub const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(10);

/// What the listeners need besides their sockets.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The serving certificate (PEM, leaf first).
    pub cert_path: PathBuf,
    /// The serving key (PEM).
    pub key_path: PathBuf,
    /// Lowest TLS version.
    pub tls_min_version: TlsVersion,
    /// Allowed TLS 1.2 cipher suites by Go name (empty: all supported).
    pub tls_cipher_suites: Vec<String>,
    /// Allowed key-exchange groups by Go CurveID, in order of preference (empty: all supported).
    pub tls_curve_preferences: Vec<u16>,
    /// How often the certificate files are checked for rotation.
    pub reload_interval: Duration,
    /// Plain-HTTP metrics without authentication.
    pub insecure_diagnostics: bool,
}

impl Settings {
    /// The settings of the command line.
    pub fn from_args(args: &ServeArgs) -> Self {
        Self {
            cert_path: args.cert_path(),
            key_path: args.key_path(),
            tls_min_version: args.tls_min_version,
            tls_cipher_suites: args.tls_cipher_suites.clone(),
            tls_curve_preferences: args.tls_curve_preferences.clone(),
            reload_interval: args.webhook_cert_reload_interval,
            insecure_diagnostics: args.insecure_diagnostics,
        }
    }
}

/// Go's names of the TLS 1.2 suites this build (rustls with ring) supports, with Go's short
/// aliases for the ChaCha20 suites.
fn go_suite_name(suite: rustls::CipherSuite) -> Option<&'static [&'static str]> {
    use rustls::CipherSuite as C;
    Some(match suite {
        C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => &["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
        C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => &["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"],
        C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
        C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => &["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
        C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => &[
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        ],
        C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => &[
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        ],
        _ => return None,
    })
}

/// Go's names of the TLS 1.3 suites: accepted, and always enabled, as Go does.
const TLS13_SUITES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// The ring crypto provider narrowed to `--tls-cipher-suites` and `--tls-curve-preferences`.
/// A name or number this build does not support is an error naming it and what is supported.
pub fn crypto_provider(
    cipher_suites: &[String],
    curves: &[u16],
) -> anyhow::Result<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !cipher_suites.is_empty() {
        let supported: Vec<&str> = provider
            .cipher_suites
            .iter()
            .filter_map(|s| go_suite_name(s.suite()))
            .flatten()
            .copied()
            .collect();
        for name in cipher_suites {
            anyhow::ensure!(
                supported.contains(&name.as_str()) || TLS13_SUITES.contains(&name.as_str()),
                "--tls-cipher-suites: {name:?} is not supported; supported TLS 1.2 suites: {}",
                supported.join(", ")
            );
        }
        provider
            .cipher_suites
            .retain(|s| match go_suite_name(s.suite()) {
                // TLS 1.3 suites are not configurable, as in Go.
                None => s.version() == &rustls::version::TLS13,
                Some(names) => names.iter().any(|n| cipher_suites.iter().any(|c| c == n)),
            });
    }
    if !curves.is_empty() {
        let supported: Vec<u16> = provider
            .kx_groups
            .iter()
            .map(|g| u16::from(g.name()))
            .collect();
        let mut groups = Vec::new();
        for id in curves {
            let group = provider
                .kx_groups
                .iter()
                .find(|g| u16::from(g.name()) == *id)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--tls-curve-preferences: curve {id} is not supported; supported: {supported:?}"
                    )
                })?;
            groups.push(*group);
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}

/// Builds the rustls server configuration from PEM bytes (ring provider narrowed by the settings,
/// h2 and http/1.1).
pub fn tls_config_from_pem(
    cert: &[u8],
    key: &[u8],
    settings: &Settings,
) -> anyhow::Result<rustls::ServerConfig> {
    let min = settings.tls_min_version;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("reading the certificate: {e}"))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "the certificate file holds no certificate"
    );
    let key =
        PrivateKeyDer::from_pem_slice(key).map_err(|e| anyhow::anyhow!("reading the key: {e}"))?;
    let versions: &[&rustls::SupportedProtocolVersion] = match min {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(crypto_provider(
        &settings.tls_cipher_suites,
        &settings.tls_curve_preferences,
    )?))
    .with_protocol_versions(versions)
    .context("choosing TLS versions")?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .context("the certificate and key do not form a serving pair")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn read_pair(cert: &Path, key: &Path) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let c = std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?;
    let k = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
    Ok((c, k))
}

fn fingerprint(cert: &[u8], key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(cert);
    h.update([0]);
    h.update(key);
    h.finalize().into()
}

/// Shared state of the admission handlers.
pub struct AppState<L> {
    lookups: L,
    metrics: Metrics,
    ready: AtomicBool,
}

impl<L> std::fmt::Debug for AppState<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<L: Lookups> AppState<L> {
    /// State over `lookups`, recording into `metrics`.
    pub fn new(lookups: L, metrics: Metrics) -> Arc<Self> {
        Arc::new(Self {
            lookups,
            metrics,
            ready: AtomicBool::new(false),
        })
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The admission router: one POST path per kind.
pub fn webhook_router<L: Lookups>(state: Arc<AppState<L>>) -> Router {
    let mut router = Router::new();
    for kind in Kind::ALL {
        router = router.route(
            &kind.path(),
            post(move |State(state): State<Arc<AppState<L>>>, body: Bytes| {
                admit(kind, state, body)
            }),
        );
    }
    router
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn admit<L: Lookups>(kind: Kind, state: Arc<AppState<L>>, body: Bytes) -> Response {
    let started = Instant::now();
    let (review, outcome) = admission::review(kind, &body, &state.lookups).await;
    let seconds = started.elapsed().as_secs_f64();
    state
        .metrics
        .record(kind.name(), outcome.operation, &outcome.rules, seconds);
    let rules: Vec<&str> = outcome.rules.iter().map(|r| r.label()).collect();
    if outcome.allowed() {
        tracing::debug!(
            kind = kind.name(),
            operation = outcome.operation,
            namespace = outcome.namespace.as_deref().unwrap_or_default(),
            name = %outcome.name,
            uid = %outcome.uid,
            dry_run = outcome.dry_run,
            "allowed"
        );
    } else {
        tracing::info!(
            kind = kind.name(),
            operation = outcome.operation,
            namespace = outcome.namespace.as_deref().unwrap_or_default(),
            name = %outcome.name,
            uid = %outcome.uid,
            user = %outcome.user,
            dry_run = outcome.dry_run,
            rules = ?rules,
            "denied"
        );
    }
    match serde_json::to_vec(&review) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "encoding an AdmissionReview failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Liveness (`/healthz`, always ok while serving) and readiness (`/readyz`, ok once the admission
/// listener serves with a certificate).
pub fn health_router<L: Lookups>(state: Arc<AppState<L>>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(state): State<Arc<AppState<L>>>| async move {
                if state.ready.load(Ordering::Acquire) {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .with_state(state)
}

/// Who may read `/metrics`.
#[derive(Clone)]
pub enum DiagnosticsAuth {
    /// Anyone (`--insecure-diagnostics`).
    Open,
    /// A bearer token the API server authenticates (TokenReview) and authorizes to `get` the
    /// non-resource URL `/metrics` (SubjectAccessReview).
    Kubernetes(kube::Client),
}

impl std::fmt::Debug for DiagnosticsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open => f.write_str("Open"),
            Self::Kubernetes(_) => f.write_str("Kubernetes"),
        }
    }
}

/// The diagnostics router: `GET /metrics`.
pub fn diagnostics_router(metrics: Metrics, auth: DiagnosticsAuth) -> Router {
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let metrics = metrics.clone();
            let auth = auth.clone();
            async move {
                if let Err(status) = authorize(&auth, &headers).await {
                    return status.into_response();
                }
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    metrics.encode(),
                )
                    .into_response()
            }
        }),
    )
}

async fn authorize(auth: &DiagnosticsAuth, headers: &HeaderMap) -> Result<(), StatusCode> {
    let DiagnosticsAuth::Kubernetes(client) = auth else {
        return Ok(());
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(StatusCode::UNAUTHORIZED)?;
    let reviews: kube::Api<TokenReview> = kube::Api::all(client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_owned(),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "a TokenReview for /metrics failed");
            StatusCode::INTERNAL_SERVER_ERROR
        })?;
    let status = answer.status.unwrap_or_default();
    let (Some(true), Some(user)) = (status.authenticated, status.user) else {
        return Err(StatusCode::UNAUTHORIZED);
    };
    match lookups::subject_access(client, lookups::non_resource_get(&user, "/metrics")).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(StatusCode::FORBIDDEN),
        Err(e) => {
            tracing::warn!(error = %e, "a SubjectAccessReview for /metrics failed");
            Err(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

/// Bound listeners, so a caller (or a test) knows the ports before serving.
#[derive(Debug)]
pub struct Listeners {
    /// The admission listener.
    pub webhook: TcpListener,
    /// The health listener, unless turned off.
    pub health: Option<TcpListener>,
    /// The diagnostics listener, unless turned off.
    pub diagnostics: Option<TcpListener>,
}

impl Listeners {
    /// Binds the admission listener on `webhook` and the optional others.
    pub fn bind(webhook: SocketAddr, health: Listen, diagnostics: Listen) -> anyhow::Result<Self> {
        let bind = |addr: SocketAddr, what: &str| -> anyhow::Result<TcpListener> {
            let l = TcpListener::bind(addr)
                .with_context(|| format!("binding the {what} listener on {addr}"))?;
            l.set_nonblocking(true)?;
            Ok(l)
        };
        let optional = |l: Listen, what: &str| -> anyhow::Result<Option<TcpListener>> {
            match l {
                Listen::Off => Ok(None),
                Listen::At(addr) => bind(addr, what).map(Some),
            }
        };
        Ok(Self {
            webhook: bind(webhook, "webhook")?,
            health: optional(health, "health")?,
            diagnostics: optional(diagnostics, "diagnostics")?,
        })
    }

    /// The admission listener's address.
    pub fn webhook_addr(&self) -> std::io::Result<SocketAddr> {
        self.webhook.local_addr()
    }
    /// The health listener's address.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health.as_ref().and_then(|l| l.local_addr().ok())
    }
    /// The diagnostics listener's address.
    pub fn diagnostics_addr(&self) -> Option<SocketAddr> {
        self.diagnostics.as_ref().and_then(|l| l.local_addr().ok())
    }
}

/// Watches the certificate files and reloads the serving configuration when they change. A
/// broken pair (mid-rotation, or bad) keeps the previous certificate and is retried next tick.
async fn reload_loop(
    settings: Settings,
    tls: RustlsConfig,
    metrics: Metrics,
    mut current: [u8; 32],
) {
    let mut tick = tokio::time::interval(settings.reload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let pair = read_pair(&settings.cert_path, &settings.key_path);
        let (cert, key) = match pair {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot read the serving certificate; keeping the current one");
                continue;
            }
        };
        let next = fingerprint(&cert, &key);
        if next == current {
            continue;
        }
        match tls_config_from_pem(&cert, &key, &settings) {
            Ok(config) => {
                tls.reload_from_config(Arc::new(config));
                current = next;
                metrics.record_reload(true);
                tracing::info!(cert = %settings.cert_path.display(), "reloaded the serving certificate");
            }
            Err(e) => {
                metrics.record_reload(false);
                tracing::warn!(error = %format!("{e:#}"), "the rotated serving certificate is not usable yet; keeping the current one");
            }
        }
    }
}

/// Serves until `shutdown` resolves (then drains for [`GRACEFUL_SHUTDOWN`]) or a listener stops
/// on its own (an error: the caller exits).
pub async fn serve<L: Lookups>(
    listeners: Listeners,
    settings: Settings,
    lookups: L,
    diagnostics_auth: DiagnosticsAuth,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let (cert, key) = read_pair(&settings.cert_path, &settings.key_path)?;
    let tls = RustlsConfig::from_config(Arc::new(tls_config_from_pem(&cert, &key, &settings)?));
    let state = AppState::new(lookups, metrics.clone());
    let handle: Handle<SocketAddr> = Handle::new();

    let webhook = axum_server::from_tcp_rustls(listeners.webhook, tls.clone())?
        .handle(handle.clone())
        .serve(webhook_router(state.clone()).into_make_service());
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(async move { ("webhook", webhook.await) });
    if let Some(l) = listeners.health {
        let server = axum_server::from_tcp(l)?
            .handle(handle.clone())
            .serve(health_router(state.clone()).into_make_service());
        tasks.spawn(async move { ("health", server.await) });
    }
    if let Some(l) = listeners.diagnostics {
        let router = diagnostics_router(metrics.clone(), diagnostics_auth).into_make_service();
        if settings.insecure_diagnostics {
            let server = axum_server::from_tcp(l)?
                .handle(handle.clone())
                .serve(router);
            tasks.spawn(async move { ("diagnostics", server.await) });
        } else {
            let server = axum_server::from_tcp_rustls(l, tls.clone())?
                .handle(handle.clone())
                .serve(router);
            tasks.spawn(async move { ("diagnostics", server.await) });
        }
    }
    let reloader = tokio::spawn(reload_loop(
        settings.clone(),
        tls,
        metrics,
        fingerprint(&cert, &key),
    ));
    if handle.listening().await.is_some() {
        state.ready.store(true, Ordering::Release);
        tracing::info!("serving admission requests");
    }

    let result = tokio::select! {
        () = shutdown => {
            tracing::info!("shutting down");
            state.ready.store(false, Ordering::Release);
            handle.graceful_shutdown(Some(GRACEFUL_SHUTDOWN));
            while tasks.join_next().await.is_some() {}
            Ok(())
        }
        Some(done) = tasks.join_next() => {
            let what = match done {
                Ok((name, Ok(()))) => format!("the {name} server stopped"),
                Ok((name, Err(e))) => format!("the {name} server failed: {e}"),
                Err(e) => format!("a server task died: {e}"),
            };
            handle.shutdown();
            Err(anyhow::anyhow!(what))
        }
    };
    reloader.abort();
    result
}

#[cfg(test)]
mod tls_policy_tests {
    use super::crypto_provider;

    #[test]
    fn no_flags_keep_every_supported_suite_and_group() {
        let all = rustls::crypto::ring::default_provider();
        let p = crypto_provider(&[], &[]).unwrap();
        assert_eq!(p.cipher_suites.len(), all.cipher_suites.len());
        assert_eq!(p.kx_groups.len(), all.kx_groups.len());
    }

    #[test]
    fn cipher_suites_narrow_tls12_and_keep_tls13() {
        let p =
            crypto_provider(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned()], &[]).unwrap();
        let tls12: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .map(rustls::SupportedCipherSuite::suite)
            .collect();
        assert_eq!(
            tls12,
            vec![rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
        );
        assert!(
            p.cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS13)
        );
    }

    #[test]
    fn go_short_chacha_names_are_accepted() {
        let p =
            crypto_provider(&["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305".to_owned()], &[]).unwrap();
        assert!(p.cipher_suites.iter().any(
            |s| s.suite() == rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        ));
    }

    #[test]
    fn an_unsupported_cipher_suite_is_an_error_naming_it() {
        let err = crypto_provider(&["TLS_RSA_WITH_RC4_128_SHA".to_owned()], &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"TLS_RSA_WITH_RC4_128_SHA\" is not supported"),
            "{err}"
        );
    }

    #[test]
    fn curve_preferences_choose_and_order_groups() {
        let p = crypto_provider(&[], &[23, 29]).unwrap();
        let ids: Vec<u16> = p.kx_groups.iter().map(|g| u16::from(g.name())).collect();
        assert_eq!(ids, vec![23, 29]);
        let err = crypto_provider(&[], &[25]).unwrap_err();
        assert!(
            err.to_string().contains("curve 25 is not supported"),
            "{err}"
        );
    }
}
