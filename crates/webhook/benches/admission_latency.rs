//! Admission latency at a fixed offered load: the real HTTPS server on loopback (rustls, ring)
//! with in-memory lookups, driven open-loop at a fixed rate (200 requests per second by default:
//! one request every 5 ms, each on its own task, so a slow answer never delays the next send)
//! over a keep-alive client, the way the API server calls a webhook. Prints p50/p90/p99/max of the
//! round trip.
//!
//! `cargo bench -p webhook --bench admission_latency` (15 s by default;
//! `CAPTF_BENCH_SECONDS` and `CAPTF_BENCH_RPS` change the run). `make bench` runs it at 500 and
//! 2,000 requests per second and puts its `BENCH` line in its table.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::pki::TestCa;
use serde_json::json;
use webhook::cli::{Listen, TlsVersion};
use webhook::fake::{StaticLookups, World};
use webhook::kinds::Kind;
use webhook::metrics::Metrics;
use webhook::server::{self, DiagnosticsAuth, Listeners, Settings};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The request mix: a valid create, an immutable-field update (denied), an identity create with
/// its SubjectAccessReview (in memory here), a template metadata update, a pool with a jobs policy.
fn bodies() -> Vec<(String, Vec<u8>)> {
    let tm = common::machine("m1", "ns");
    let tm_changed = common::with(
        tm.clone(),
        "/spec/source/image",
        json!("ghcr.io/example/module:v2"),
    );
    let tmt = common::template(Kind::MachineTemplate, "t1", "ns");
    let tmt_meta = common::with(
        tmt.clone(),
        "/spec/template/metadata",
        json!({"labels": {"a": "b"}}),
    );
    let pool = common::with(
        common::pool("p1", "ns"),
        "/spec/jobs",
        json!({"env": [{"name": "HTTPS_PROXY", "value": "http://proxy"}], "lockTimeoutSeconds": 60,
               "activeDeadlineSeconds": 600, "securityContext": {"capabilities": {"drop": ["ALL"]}}}),
    );
    let body = |kind: Kind, op: &str, new: &serde_json::Value, old: Option<&serde_json::Value>| {
        (
            kind.path(),
            common::review(kind, op, Some(new), old, "alice", false),
        )
    };
    vec![
        body(Kind::Cluster, "CREATE", &common::cluster("c1", "ns"), None),
        body(Kind::Machine, "UPDATE", &tm_changed, Some(&tm)),
        body(
            Kind::ClusterIdentity,
            "CREATE",
            &common::identity("aws", "creds", "aws"),
            None,
        ),
        body(Kind::MachineTemplate, "UPDATE", &tmt_meta, Some(&tmt)),
        body(Kind::MachinePool, "CREATE", &pool, None),
    ]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `BENCH` line `hack/bench.sh` gathers into its table. The goal (p99 < 2 ms) is set at
/// 2,000 requests/s; Cluster API's core webhook, the peer, is not measured here.
fn bench_line(rps: u64, total: usize, sorted: &[Duration], errors: usize) {
    let p99 = ms(percentile(sorted, 99.0));
    let (goal, verdict) = if rps >= 2000 {
        (
            "p99 < 2 ms",
            if p99 < 2.0 && errors == 0 {
                "met"
            } else {
                "MISS"
            },
        )
    } else {
        ("recorded (goal at 2,000/s)", "-")
    };
    println!(
        "BENCH\twebhook admission round trip at {rps}/s ({total} requests, HTTPS on loopback)\t\
         p50 {:.3} ms, p99 {p99:.3} ms{}\tCluster API core webhook: not measured\t-\t{goal}\t{verdict}",
        ms(percentile(sorted, 50.0)),
        if errors == 0 {
            String::new()
        } else {
            format!(", {errors} errors")
        },
    );
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let seconds = env_number("CAPTF_BENCH_SECONDS", 15);
    let rps = env_number("CAPTF_BENCH_RPS", 200).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let dir = tempfile::tempdir()?;
        let ca = TestCa::new("bench-ca");
        ca.write_serving_pair(dir.path());
        let listeners = Listeners::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), Listen::Off, Listen::Off)?;
        let base = format!("https://127.0.0.1:{}", listeners.webhook_addr()?.port());
        let mut world = World::default();
        world.secret_readers.insert(("alice".into(), "creds".into(), "aws".into()));
        let metrics = Metrics::new();
        let settings = Settings {
            cert_path: dir.path().join("tls.crt"),
            key_path: dir.path().join("tls.key"),
            tls_min_version: TlsVersion::Tls12,
            tls_cipher_suites: Vec::new(),
            tls_curve_preferences: Vec::new(),
            reload_interval: Duration::from_secs(10),
            insecure_diagnostics: true,
        };
        tokio::spawn(server::serve(
            listeners,
            settings,
            StaticLookups::new(world),
            DiagnosticsAuth::Open,
            metrics.clone(),
            std::future::pending(),
        ));
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca.pem.as_bytes())?])
            .build()?;
        let bodies = bodies();
        // Warm up: connections, TLS sessions, allocator.
        let started = Instant::now();
        let mut warm = 0;
        while warm < 200 {
            let (path, body) = &bodies[warm % bodies.len()];
            match client.post(format!("{base}{path}")).body(body.clone()).send().await {
                Ok(r) if r.status() == 200 => warm += 1,
                _ if started.elapsed() < Duration::from_secs(10) => tokio::time::sleep(Duration::from_millis(20)).await,
                other => anyhow::bail!("the server does not answer: {other:?}"),
            }
        }

        let total = (seconds * rps) as usize;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<Duration, String>>();
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rps as f64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let run_started = Instant::now();
        for i in 0..total {
            tick.tick().await;
            let (path, body) = bodies[i % bodies.len()].clone();
            let (client, tx, url) = (client.clone(), tx.clone(), format!("{base}{path}"));
            tokio::spawn(async move {
                let sent = Instant::now();
                let outcome = match client.post(url).body(body).send().await {
                    Ok(r) if r.status() == 200 => match r.bytes().await {
                        Ok(_) => Ok(sent.elapsed()),
                        Err(e) => Err(e.to_string()),
                    },
                    Ok(r) => Err(format!("HTTP {}", r.status())),
                    Err(e) => Err(e.to_string()),
                };
                let _ = tx.send(outcome);
            });
        }
        drop(tx);
        let mut latencies = Vec::with_capacity(total);
        let mut errors = Vec::new();
        while let Some(outcome) = rx.recv().await {
            match outcome {
                Ok(d) => latencies.push(d),
                Err(e) => errors.push(e),
            }
        }
        let elapsed = run_started.elapsed();
        latencies.sort_unstable();
        println!(
            "admission latency, HTTPS on loopback, {} requests offered at {rps}/s over {:.1} s ({:.1}/s achieved), {} errors",
            total,
            elapsed.as_secs_f64(),
            latencies.len() as f64 / elapsed.as_secs_f64(),
            errors.len()
        );
        println!(
            "round trip: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 90.0)),
            ms(percentile(&latencies, 99.0)),
            ms(latencies.last().copied().unwrap_or_default()),
        );
        if let Some(e) = errors.first() {
            println!("first error: {e}");
        }
        bench_line(rps, total, &latencies, errors.len());
        anyhow::ensure!(errors.is_empty(), "{} requests failed", errors.len());
        let _ = metrics;
        Ok(())
    })
}
