//! The listeners: the HTTPS admission server (one POST path per kind), liveness and readiness,
//! and the diagnostics (metrics) endpoint; plus the certificate reloader that swaps the serving
//! certificate in place when the mounted files rotate (cert-manager renews them in the Secret, the
//! kubelet updates the mount). TLS is rustls on ring only; the pieces that are not about admission
//! live in [`crate::diagnostics`], shared with the manager.
//!
//! [`serve`] returns when shutdown is requested, and fails as soon as any listener stops on its
//! own: the process exits rather than keep running without its webhook.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;

use crate::admission;
use crate::cli::{Listen, ServeArgs, TlsVersion};
use crate::diagnostics::{self, CertificateFiles, Servers, TlsPolicy};
pub use crate::diagnostics::{DiagnosticsAuth, crypto_provider};
use crate::kinds::Kind;
use crate::lookups::Lookups;
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

    /// The TLS policy of the HTTPS listeners.
    pub fn tls_policy(&self) -> TlsPolicy {
        TlsPolicy {
            min_version: self.tls_min_version,
            cipher_suites: self.tls_cipher_suites.clone(),
            curve_preferences: self.tls_curve_preferences.clone(),
        }
    }

    /// The serving certificate's files.
    pub fn certificate_files(&self) -> CertificateFiles {
        CertificateFiles {
            cert: self.cert_path.clone(),
            key: self.key_path.clone(),
        }
    }
}

/// Shared state of the admission handlers.
pub struct AppState<L> {
    lookups: L,
    metrics: Metrics,
    ready: Arc<AtomicBool>,
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
            ready: Arc::new(AtomicBool::new(false)),
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
    let warnings: Vec<&str> = outcome.warnings.iter().map(|r| r.label()).collect();
    if outcome.allowed() {
        tracing::debug!(
            kind = kind.name(),
            operation = outcome.operation,
            namespace = outcome.namespace.as_deref().unwrap_or_default(),
            name = %outcome.name,
            uid = %outcome.uid,
            dry_run = outcome.dry_run,
            warnings = ?warnings,
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
            warnings = ?warnings,
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
pub fn health_router<L: Lookups>(state: &AppState<L>) -> Router {
    diagnostics::health_router(state.ready.clone())
}

/// The diagnostics router: `GET /metrics`, and behind Kubernetes authentication the profiling and
/// log-level endpoints under `/debug/` (see [`diagnostics::debug`]).
pub fn diagnostics_router(metrics: Metrics, auth: DiagnosticsAuth) -> Router {
    diagnostics::diagnostics_router(move || metrics.encode(), auth)
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
        let optional = |l: Listen, what: &str| -> anyhow::Result<Option<TcpListener>> {
            match l {
                Listen::Off => Ok(None),
                Listen::At(addr) => diagnostics::bind(addr, what).map(Some),
            }
        };
        Ok(Self {
            webhook: diagnostics::bind(webhook, "webhook")?,
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
    let files = settings.certificate_files();
    let policy = settings.tls_policy();
    let (cert, key) = files.read()?;
    let tls = RustlsConfig::from_config(Arc::new(diagnostics::tls_config_from_pem(
        &cert, &key, &policy,
    )?));
    let state = AppState::new(lookups, metrics.clone());

    let mut servers = Servers::new();
    servers.spawn(
        "webhook",
        listeners.webhook,
        webhook_router(state.clone()),
        Some(tls.clone()),
    )?;
    if let Some(l) = listeners.health {
        servers.spawn("health", l, health_router(&state), None)?;
    }
    if let Some(l) = listeners.diagnostics {
        let router = diagnostics_router(metrics.clone(), diagnostics_auth);
        let tls = (!settings.insecure_diagnostics).then(|| tls.clone());
        servers.spawn("diagnostics", l, router, tls)?;
    }
    let reloader = tokio::spawn(diagnostics::watch_certificate(
        files,
        policy,
        tls,
        settings.reload_interval,
        diagnostics::fingerprint(&cert, &key),
        move |ok| metrics.record_reload(ok),
    ));
    if servers.listening().await {
        state.ready.store(true, Ordering::Release);
        tracing::info!("serving admission requests");
    }
    let ready = state.ready.clone();
    let result = servers
        .run(
            async move {
                shutdown.await;
                tracing::info!("shutting down");
                ready.store(false, Ordering::Release);
            },
            GRACEFUL_SHUTDOWN,
        )
        .await;
    reloader.abort();
    result
}
