//! The serving code CAPTF's two binaries share, the webhook and the manager (INTERFACE-FACTS §3
//! "Component extras" and §4 "Diagnostics / TLS"): the listener addresses of `--health-addr` and
//! `--diagnostics-address`, the TLS policy of `--tls-min-version`, `--tls-cipher-suites` and
//! `--tls-curve-preferences`, serving certificates read from files and reloaded when they rotate,
//! the `/metrics` endpoint behind Kubernetes authentication (TokenReview) and authorization
//! (SubjectAccessReview of the URL path and verb), the profiling and log-level endpoints under
//! `/debug/` behind the same authentication ([`debug`]), the `/healthz` and `/readyz` endpoints,
//! and [`Servers`], which runs a set of listeners until shutdown or the first one that stops on
//! its own.
//!
//! Nothing here knows about admission or reconciling: each binary brings its own routers, metrics
//! and readiness. TLS is rustls on ring only. A library crate, so that no binary crate depends on
//! another.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

pub mod debug;

/// The lowest TLS version the HTTPS listeners accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    #[value(name = "VersionTLS12")]
    Tls12,
    /// TLS 1.3 only.
    #[value(name = "VersionTLS13")]
    Tls13,
}

/// A listener address, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// Do not listen.
    Off,
    /// Listen here.
    At(SocketAddr),
}

/// Parses `:port`, `host:port`, or `0` (off).
pub fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "0" {
        return Ok(Listen::Off);
    }
    if let Some(port) = s.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|e| format!("bad port in {s:?}: {e}"))?;
        return Ok(Listen::At(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))));
    }
    s.parse::<SocketAddr>()
        .map(Listen::At)
        .map_err(|e| format!("{s:?} is not :port, host:port or 0: {e}"))
}

/// The content type of the metrics exposition (`prometheus-client` writes OpenMetrics text).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The TLS settings of the HTTPS listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPolicy {
    /// Lowest TLS version.
    pub min_version: TlsVersion,
    /// Allowed TLS 1.2 cipher suites by Go name (empty: all supported).
    pub cipher_suites: Vec<String>,
    /// Allowed key-exchange groups by Go CurveID, in order of preference (empty: all supported).
    pub curve_preferences: Vec<u16>,
}

impl Default for TlsPolicy {
    /// TLS 1.2 and up, every suite and group this build supports.
    fn default() -> Self {
        Self {
            min_version: TlsVersion::Tls12,
            cipher_suites: Vec::new(),
            curve_preferences: Vec::new(),
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

/// Builds the rustls server configuration from PEM bytes (ring provider narrowed by `policy`,
/// h2 and http/1.1).
pub fn tls_config_from_pem(
    cert: &[u8],
    key: &[u8],
    policy: &TlsPolicy,
) -> anyhow::Result<rustls::ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("reading the certificate: {e}"))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "the certificate file holds no certificate"
    );
    let key =
        PrivateKeyDer::from_pem_slice(key).map_err(|e| anyhow::anyhow!("reading the key: {e}"))?;
    let versions: &[&rustls::SupportedProtocolVersion] = match policy.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(crypto_provider(
        &policy.cipher_suites,
        &policy.curve_preferences,
    )?))
    .with_protocol_versions(versions)
    .context("choosing TLS versions")?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .context("the certificate and key do not form a serving pair")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A serving certificate and its key as two PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    /// The certificate (PEM, leaf first).
    pub cert: PathBuf,
    /// The key (PEM).
    pub key: PathBuf,
}

impl CertificateFiles {
    /// Whether both files exist.
    pub fn exist(&self) -> bool {
        self.cert.is_file() && self.key.is_file()
    }

    /// Both files' bytes.
    pub fn read(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let c = std::fs::read(&self.cert)
            .with_context(|| format!("reading {}", self.cert.display()))?;
        let k =
            std::fs::read(&self.key).with_context(|| format!("reading {}", self.key.display()))?;
        Ok((c, k))
    }
}

/// A digest of a certificate and key pair, to notice a rotation.
pub fn fingerprint(cert: &[u8], key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(cert);
    h.update([0]);
    h.update(key);
    h.finalize().into()
}

/// Watches `files` every `interval` and swaps the serving configuration of `tls` when they
/// change; `current` is the [`fingerprint`] of the pair `tls` serves now. A broken pair
/// (mid-rotation, or bad) keeps the previous certificate and is retried next tick. `on_reload` is
/// told of every attempt (`true`: the new pair is served). Never returns: abort the task.
pub async fn watch_certificate(
    files: CertificateFiles,
    policy: TlsPolicy,
    tls: RustlsConfig,
    interval: Duration,
    mut current: [u8; 32],
    on_reload: impl Fn(bool) + Send + 'static,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let (cert, key) = match files.read() {
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
        match tls_config_from_pem(&cert, &key, &policy) {
            Ok(config) => {
                tls.reload_from_config(Arc::new(config));
                current = next;
                on_reload(true);
                tracing::info!(cert = %files.cert.display(), "reloaded the serving certificate");
            }
            Err(e) => {
                on_reload(false);
                tracing::warn!(error = %format!("{e:#}"), "the rotated serving certificate is not usable yet; keeping the current one");
            }
        }
    }
}

/// Who may read the diagnostics endpoints.
#[derive(Clone)]
pub enum DiagnosticsAuth {
    /// Anyone (`--insecure-diagnostics`).
    Open,
    /// A bearer token the API server authenticates (TokenReview) and authorizes for the
    /// non-resource URL path and verb of the request (SubjectAccessReview).
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

/// Whether the request with `headers` may `verb` the non-resource URL `path`: `Ok` when it may,
/// else the status to answer (401 without a valid token, 403 when not authorized, 500 when the
/// API server could not be asked).
pub async fn authorize(
    auth: &DiagnosticsAuth,
    headers: &HeaderMap,
    path: &str,
    verb: &str,
) -> Result<(), StatusCode> {
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
            tracing::warn!(error = %e, path, "a TokenReview for a diagnostics request failed");
            StatusCode::INTERNAL_SERVER_ERROR
        })?;
    let status = answer.status.unwrap_or_default();
    let (Some(true), Some(user)) = (status.authenticated, status.user) else {
        return Err(StatusCode::UNAUTHORIZED);
    };
    match may(client, &user, path, verb).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(StatusCode::FORBIDDEN),
        Err(e) => {
            tracing::warn!(error = %e, path, "a SubjectAccessReview for a diagnostics request failed");
            Err(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

/// Whether the API server allows `user` to `verb` the non-resource URL `path` (a
/// SubjectAccessReview).
async fn may(
    client: &kube::Client,
    user: &UserInfo,
    path: &str,
    verb: &str,
) -> Result<bool, kube::Error> {
    let reviews: kube::Api<SubjectAccessReview> = kube::Api::all(client.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some(verb.to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = reviews.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The metrics router: `GET /metrics` answers `encode()` once [`authorize`]d for `get` of
/// `/metrics`.
pub fn metrics_router<E>(encode: E, auth: DiagnosticsAuth) -> Router
where
    E: Fn() -> String + Clone + Send + Sync + 'static,
{
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let encode = encode.clone();
            let auth = auth.clone();
            async move {
                if let Err(status) = authorize(&auth, &headers, "/metrics", "get").await {
                    return status.into_response();
                }
                ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], encode()).into_response()
            }
        }),
    )
}

/// The diagnostics router of `--diagnostics-address`: `/metrics` ([`metrics_router`]), and with
/// Kubernetes authentication also the `/debug/` endpoints ([`debug::debug_router`]).
/// `--insecure-diagnostics` ([`DiagnosticsAuth::Open`]) serves metrics only: profiles and the log
/// level are never open to anyone.
pub fn diagnostics_router<E>(encode: E, auth: DiagnosticsAuth) -> Router
where
    E: Fn() -> String + Clone + Send + Sync + 'static,
{
    match auth {
        DiagnosticsAuth::Open => metrics_router(encode, auth),
        DiagnosticsAuth::Kubernetes(_) => {
            metrics_router(encode, auth.clone()).merge(debug::debug_router(&auth))
        }
    }
}

/// Liveness (`/healthz`, always ok while serving) and readiness (`/readyz`, ok while `ready` is
/// set, 503 otherwise).
pub fn health_router(ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.load(Ordering::Acquire) {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        )
}

/// Binds a non-blocking listener on `addr`; `what` names it in the error.
pub fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    let l = TcpListener::bind(addr)
        .with_context(|| format!("binding the {what} listener on {addr}"))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A set of HTTP(S) servers sharing one shutdown: started with [`Servers::spawn`], run with
/// [`Servers::run`].
#[derive(Debug)]
pub struct Servers {
    handle: Handle<SocketAddr>,
    tasks: tokio::task::JoinSet<(&'static str, std::io::Result<()>)>,
}

impl Default for Servers {
    fn default() -> Self {
        Self::new()
    }
}

impl Servers {
    /// No servers yet.
    pub fn new() -> Self {
        Self {
            handle: Handle::new(),
            tasks: tokio::task::JoinSet::new(),
        }
    }

    /// Starts serving `router` on `listener`, over TLS when `tls` is given; `name` names it in
    /// errors. Must be called within a Tokio runtime.
    pub fn spawn(
        &mut self,
        name: &'static str,
        listener: TcpListener,
        router: Router,
        tls: Option<RustlsConfig>,
    ) -> anyhow::Result<()> {
        let service = router.into_make_service();
        if let Some(tls) = tls {
            let server = axum_server::from_tcp_rustls(listener, tls)
                .with_context(|| format!("starting the {name} server"))?
                .handle(self.handle.clone())
                .serve(service);
            self.tasks.spawn(async move { (name, server.await) });
        } else {
            let server = axum_server::from_tcp(listener)
                .with_context(|| format!("starting the {name} server"))?
                .handle(self.handle.clone())
                .serve(service);
            self.tasks.spawn(async move { (name, server.await) });
        }
        Ok(())
    }

    /// Waits until a server listens; `false` if none ever will (none was spawned, or all
    /// stopped).
    pub async fn listening(&self) -> bool {
        if self.tasks.is_empty() {
            return false;
        }
        self.handle.listening().await.is_some()
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish for at most `grace`
    /// (`Ok`); or until a server stops on its own (an error naming it, the others are stopped).
    /// Without servers, waits for `shutdown`.
    pub async fn run(
        mut self,
        shutdown: impl Future<Output = ()> + Send,
        grace: Duration,
    ) -> anyhow::Result<()> {
        if self.tasks.is_empty() {
            shutdown.await;
            return Ok(());
        }
        tokio::select! {
            () = shutdown => {
                self.handle.graceful_shutdown(Some(grace));
                while self.tasks.join_next().await.is_some() {}
                Ok(())
            }
            Some(done) = self.tasks.join_next() => {
                let what = match done {
                    Ok((name, Ok(()))) => format!("the {name} server stopped"),
                    Ok((name, Err(e))) => format!("the {name} server failed: {e}"),
                    Err(e) => format!("a server task died: {e}"),
                };
                self.handle.shutdown();
                while self.tasks.join_next().await.is_some() {}
                Err(anyhow::anyhow!(what))
            }
        }
    }
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
