//! The `/debug/` endpoints of the diagnostics listener (docs/src/reference/diagnostics.md) against
//! the real API server of the test environment: a ServiceAccount's token is authenticated by a
//! real TokenReview and each request authorized by a real SubjectAccessReview of its own path and
//! verb, granted through ordinary RBAC; the CPU and heap profiles decode as pprof protobufs; the
//! log level changes at run time. The test process runs on jemalloc with sampling on, as the
//! manager and the webhook do.

use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum_server::tls_rustls::RustlsConfig;
use pprof::protos::Message as _;
use serving::{DiagnosticsAuth, Servers, TlsPolicy};
use testenv::TestEnv;

// jemalloc with heap sampling from start-up, for `/debug/pprof/heap`.
serving::heap_profiled!();

/// The verbosity filter of this test process: `info` up to 3, `debug` above.
fn filter_for(v: u8) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::new(if v > 3 { "debug" } else { "info" })
}

/// Logging as the binaries start it, once for the test process.
fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        serving::debug::init_logging("text", 2, filter_for(2), filter_for)
            .expect("starting logging");
    });
}

/// A diagnostics listener on loopback, HTTPS with a self-signed pair, authenticating through
/// `client`; answers its base URL.
fn serve(client: kube::Client) -> anyhow::Result<(String, Servers)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.self_signed(&key)?;
    let config = serving::tls_config_from_pem(
        cert.pem().as_bytes(),
        key.serialize_pem().as_bytes(),
        &TlsPolicy::default(),
    )?;
    let listener = serving::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), "diagnostics")?;
    let addr = listener.local_addr()?;
    let router =
        serving::diagnostics_router(|| "# EOF\n".to_owned(), DiagnosticsAuth::Kubernetes(client));
    let mut servers = Servers::new();
    servers.spawn(
        "diagnostics",
        listener,
        router,
        Some(RustlsConfig::from_config(Arc::new(config))),
    )?;
    Ok((format!("https://{addr}"), servers))
}

fn https() -> reqwest::Client {
    reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .expect("an HTTPS client")
}

/// Sends `request` until it answers `want` (RBAC changes reach the authorizer within seconds),
/// then answers the body.
async fn until_status(
    request: impl Fn() -> reqwest::RequestBuilder,
    want: u16,
) -> anyhow::Result<Vec<u8>> {
    let started = Instant::now();
    loop {
        let last = match request().send().await {
            Ok(r) if r.status().as_u16() == want => return Ok(r.bytes().await?.to_vec()),
            Ok(r) => format!("status {}", r.status()),
            Err(e) => format!("{e}"),
        };
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "never answered {want}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn status(request: reqwest::RequestBuilder) -> anyhow::Result<u16> {
    Ok(request.send().await?.status().as_u16())
}

/// A gzipped pprof protobuf, decoded.
fn pprof(body: &[u8]) -> anyhow::Result<pprof::protos::Profile> {
    anyhow::ensure!(body.starts_with(&[0x1f, 0x8b]), "not gzipped");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(body).read_to_end(&mut raw)?;
    Ok(pprof::protos::Profile::decode(raw.as_slice())?)
}

/// The names of a profile's sample types (`samples`/`cpu`, `space`/`inuse_space`, ...).
fn sample_types(p: &pprof::protos::Profile) -> Vec<String> {
    p.sample_type
        .iter()
        .filter_map(|t| usize::try_from(t.ty).ok())
        .filter_map(|i| p.string_table.get(i).cloned())
        .collect()
}

#[tokio::test]
async fn each_debug_endpoint_is_authorized_for_its_own_path_and_verb() -> anyhow::Result<()> {
    init_logging();
    let env = TestEnv::shared()?;
    let client = env.client().await?;
    let ns = env.namespace("debug-authz").await?;
    let (base, servers) = serve(client.clone())?;
    let running = tokio::spawn(servers.run(std::future::pending(), Duration::from_secs(1)));
    let http = https();
    let token = testenv::rbac::service_account_token(&client, &ns, "operator").await?;
    let heap = format!("{base}/debug/pprof/heap");
    let flags = format!("{base}/debug/flags/v");

    // No token, a bad token: unauthenticated; a valid token without RBAC: forbidden.
    until_status(|| http.get(&heap), 401).await?;
    assert_eq!(
        status(http.get(&heap).bearer_auth("not-a-token")).await?,
        401
    );
    assert_eq!(status(http.get(&heap).bearer_auth(&token)).await?, 403);
    assert_eq!(
        status(http.put(&flags).bearer_auth(&token).body("4")).await?,
        403
    );
    // Reading the profiles and the level does not allow setting the level.
    testenv::rbac::grant_non_resource_urls(
        &client,
        &ns,
        "operator",
        "debug-read",
        &["/debug/pprof/*", "/debug/flags/v"],
        &["get"],
    )
    .await?;
    until_status(|| http.get(&flags).bearer_auth(&token), 200).await?;
    assert_eq!(status(http.get(&heap).bearer_auth(&token)).await?, 200);
    assert_eq!(
        status(http.put(&flags).bearer_auth(&token).body("4")).await?,
        403
    );
    // Nor does it allow /metrics, a URL of its own.
    assert_eq!(
        status(http.get(format!("{base}/metrics")).bearer_auth(&token)).await?,
        403
    );

    testenv::rbac::grant_non_resource_urls(
        &client,
        &ns,
        "operator",
        "debug-write",
        &["/debug/flags/v"],
        &["put"],
    )
    .await?;
    let body = until_status(|| http.put(&flags).bearer_auth(&token).body("4"), 200).await?;
    assert_eq!(String::from_utf8(body)?.trim(), "verbosity set to 4");
    let level = http
        .get(&flags)
        .bearer_auth(&token)
        .send()
        .await?
        .text()
        .await?;
    assert_eq!(level.trim(), "4");
    assert!(
        tracing::enabled!(tracing::Level::DEBUG),
        "verbosity 4 logs debug"
    );
    // A bad level is refused with what is wanted, and the level stays.
    let r = http
        .put(&flags)
        .bearer_auth(&token)
        .body("11")
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    assert!(r.text().await?.contains("from 0 to 10"));
    let body = http
        .put(&flags)
        .bearer_auth(&token)
        .body(" 2\n")
        .send()
        .await?
        .text()
        .await?;
    assert_eq!(body.trim(), "verbosity set to 2");
    assert!(
        !tracing::enabled!(tracing::Level::DEBUG),
        "verbosity 2 logs info"
    );
    running.abort();
    Ok(())
}

#[tokio::test]
async fn cpu_and_heap_profiles_are_gzipped_pprof() -> anyhow::Result<()> {
    init_logging();
    let env = TestEnv::shared()?;
    let client = env.client().await?;
    let ns = env.namespace("debug-profiles").await?;
    let (base, servers) = serve(client.clone())?;
    let running = tokio::spawn(servers.run(std::future::pending(), Duration::from_secs(1)));
    let http = https();
    let token = testenv::rbac::service_account_token(&client, &ns, "profiler").await?;
    testenv::rbac::grant_non_resource_urls(
        &client,
        &ns,
        "profiler",
        "pprof",
        &["/debug/pprof/*", "/debug/pprof/"],
        &["get"],
    )
    .await?;
    let index = until_status(
        || http.get(format!("{base}/debug/pprof/")).bearer_auth(&token),
        200,
    )
    .await?;
    assert!(String::from_utf8(index)?.contains("/debug/pprof/heap"));

    // Bad lengths are refused before anything is sampled.
    let r = http
        .get(format!("{base}/debug/pprof/profile?seconds=0"))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    assert!(r.text().await?.contains("from 1 to 300"));

    // A CPU profile of a busy process, with a second request refused while it runs.
    let busy = Arc::new(AtomicBool::new(true));
    let spinner = {
        let busy = busy.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while busy.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
        })
    };
    let first = {
        let request = http
            .get(format!("{base}/debug/pprof/profile?seconds=2"))
            .bearer_auth(&token);
        tokio::spawn(async move { request.send().await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = http
        .get(format!("{base}/debug/pprof/profile?seconds=1"))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(second.status(), 409, "one CPU profile at a time");
    let first = first.await??;
    busy.store(false, Ordering::Relaxed);
    spinner.join().expect("the spinner");
    assert_eq!(first.status(), 200);
    let cpu = pprof(&first.bytes().await?)?;
    assert!(
        sample_types(&cpu).iter().any(|t| t == "cpu"),
        "{:?}",
        sample_types(&cpu)
    );
    assert!(!cpu.sample.is_empty(), "a busy thread was sampled");

    // The heap: a live 64 MiB allocation is sampled (one sample per 512 KiB on average).
    let held = std::hint::black_box(vec![7u8; 64 << 20]);
    let r = http
        .get(format!("{base}/debug/pprof/heap"))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let heap = pprof(&r.bytes().await?)?;
    let types = sample_types(&heap);
    assert!(types.iter().any(|t| t.contains("space")), "{types:?}");
    let biggest = heap
        .sample
        .iter()
        .filter_map(|s| s.value.last())
        .max()
        .copied()
        .unwrap_or(0);
    assert!(
        biggest >= 32 << 20,
        "the 64 MiB vector shows up: largest sample {biggest}"
    );
    drop(held);

    // Without Kubernetes authentication there are no /debug endpoints at all.
    let open = serving::diagnostics_router(String::new, DiagnosticsAuth::Open);
    let listener = serving::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), "open")?;
    let addr = listener.local_addr()?;
    let mut plain = Servers::new();
    plain.spawn("open", listener, open, None)?;
    let plain_run = tokio::spawn(plain.run(std::future::pending(), Duration::from_secs(1)));
    let http_plain = reqwest::Client::new();
    until_status(|| http_plain.get(format!("http://{addr}/metrics")), 200).await?;
    for path in [
        "/debug/pprof/heap",
        "/debug/pprof/profile",
        "/debug/flags/v",
    ] {
        assert_eq!(
            status(http_plain.get(format!("http://{addr}{path}"))).await?,
            404,
            "{path}"
        );
    }
    plain_run.abort();
    running.abort();
    Ok(())
}
