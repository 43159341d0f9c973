//! Admission latency against the peer, Cluster API's core webhook, in the same run (issue 18):
//! p50/p90/p99/max of the round trip of two validating webhooks driven by the same client code at
//! the same fixed rate for the same time, over HTTPS on loopback.
//!
//! - **Ours**: the real HTTPS server (rustls, ring) with in-memory lookups, on a tokio runtime of
//!   its own (two worker threads) in this process; a mix of five AdmissionReviews of CAPTF's
//!   kinds (a valid create, an immutable-field update that is denied, an identity create with its
//!   SubjectAccessReview, a template metadata update, a pool with a jobs policy).
//! - **The peer**: Cluster API's core manager (`capi-manager` from `make testbin`), started by the
//!   test environment with its webhooks registered URL-style on the test API server; a mix of five
//!   AdmissionReviews of Cluster API v1beta2 objects on its validating paths (a Cluster create, a
//!   Machine update changing the immutable `spec.clusterName` that is denied, a Machine create, a
//!   MachineSet template metadata update, a MachinePool create). Its client trusts only the CA
//!   the test environment generated for the managers' serving certificate.
//!
//! Both are called directly by this process, not through the API server. The client is open-loop
//! (one request per tick, each on its own task, so a slow answer never delays the next send) over
//! a keep-alive connection pool, the way the API server calls a webhook, on its own tokio runtime.
//! The two targets take turns in one-second slices (ours first in even slices, the peer first in
//! odd ones), so background load on a shared machine falls on both alike. A request counts only
//! when its answer is a real admission decision: HTTP 200, an AdmissionReview echoing the
//! request's uid, and the decision expected for it (a denial must name the field it is about).
//! Anything else is an error; errors fail the bench after its figures are printed.
//!
//! `cargo bench -p webhook --bench admission_latency` (10 s per rate and target by default;
//! `CAPTF_BENCH_SECONDS` and `CAPTF_BENCH_RPS`, a comma-separated list of rates defaulting to
//! `500,2000`, change the run). It needs the test binaries (`make testbin`). `make bench` runs it
//! and puts its `BENCH` lines in its table.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use common::pki::TestCa;
use serde_json::{Value, json};
use testenv::TestEnv;
use webhook::cli::{Listen, TlsVersion};
use webhook::fake::{StaticLookups, World};
use webhook::kinds::Kind;
use webhook::metrics::Metrics;
use webhook::server::{self, DiagnosticsAuth, Listeners, Settings};

/// Cluster API's group and the version its core webhooks validate.
const CAPI_GROUP: &str = "cluster.x-k8s.io";
const CAPI_VERSION: &str = "v1beta2";
/// The length of one turn of a target.
const SLICE: Duration = Duration::from_secs(1);

/// The decision a real answer to a review carries.
#[derive(Debug, Clone, Copy)]
enum Decision {
    Allowed,
    /// Denied, with a message naming this field.
    Denied {
        naming: &'static str,
    },
}

/// One AdmissionReview the bench sends.
struct Review {
    path: String,
    uid: String,
    body: Vec<u8>,
    expect: Decision,
}

impl Review {
    /// `body` (an AdmissionReview) with the request uid `<label>-<index>`.
    fn new(index: usize, label: &str, path: String, body: &[u8], expect: Decision) -> Self {
        let uid = format!("{label}-{index}");
        let mut review: Value = serde_json::from_slice(body).expect("a review is JSON");
        review["request"]["uid"] = json!(uid);
        Review {
            path,
            uid,
            body: serde_json::to_vec(&review).expect("a JSON value serializes"),
            expect,
        }
    }
}

/// A webhook server to drive: where it listens, a client trusting its CA, what to send it.
struct Target {
    name: &'static str,
    base: String,
    client: reqwest::Client,
    reviews: Arc<[Review]>,
}

impl Target {
    fn new(
        name: &'static str,
        base: String,
        ca_pem: &str,
        reviews: Vec<Review>,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes())?])
            .build()?;
        Ok(Target {
            name,
            base,
            client,
            reviews: reviews.into(),
        })
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The rates of `CAPTF_BENCH_RPS` (`500,2000` by default).
fn rates() -> anyhow::Result<Vec<u64>> {
    let text = std::env::var("CAPTF_BENCH_RPS").unwrap_or_else(|_| "500,2000".into());
    text.split(',')
        .map(|r| match r.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => anyhow::bail!("CAPTF_BENCH_RPS: {r:?} is not a positive number of requests/s"),
        })
        .collect()
}

/// Ours: five reviews of CAPTF's kinds, with the decision each must get.
fn our_reviews() -> Vec<Review> {
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
    let identity = common::identity("aws", "creds", "aws");
    let review = |i, kind: Kind, op, new: &Value, old: Option<&Value>, expect| {
        let body = common::review(kind, op, Some(new), old, "alice", false);
        Review::new(i, "captf", kind.path(), &body, expect)
    };
    let denied = Decision::Denied {
        naming: "spec.source",
    };
    let cluster = common::cluster("c1", "ns");
    vec![
        review(
            0,
            Kind::Cluster,
            "CREATE",
            &cluster,
            None,
            Decision::Allowed,
        ),
        review(1, Kind::Machine, "UPDATE", &tm_changed, Some(&tm), denied),
        review(
            2,
            Kind::ClusterIdentity,
            "CREATE",
            &identity,
            None,
            Decision::Allowed,
        ),
        review(
            3,
            Kind::MachineTemplate,
            "UPDATE",
            &tmt_meta,
            Some(&tmt),
            Decision::Allowed,
        ),
        review(
            4,
            Kind::MachinePool,
            "CREATE",
            &pool,
            None,
            Decision::Allowed,
        ),
    ]
}

/// A Cluster API v1beta2 object in namespace `ns`.
fn capi_object(kind: &str, name: &str, spec: &Value) -> Value {
    json!({
        "apiVersion": format!("{CAPI_GROUP}/{CAPI_VERSION}"),
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
    })
}

/// An infrastructure reference to a CAPTF object, as Cluster API v1beta2 writes it.
fn infra_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": common::GROUP, "kind": kind, "name": name})
}

/// A Machine spec of cluster `cluster` bootstrapped from a data Secret.
fn machine_spec(cluster: &str, infra: &Value) -> Value {
    json!({
        "clusterName": cluster,
        "bootstrap": {"dataSecretName": "bootstrap-data"},
        "infrastructureRef": infra,
        "version": "v1.34.1",
    })
}

/// An AdmissionReview v1 for Cluster API's `kind` (`plural`), as the API server sends it.
fn capi_review(kind: &str, plural: &str, op: &str, new: &Value, old: Option<&Value>) -> Vec<u8> {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "",
            "kind": {"group": CAPI_GROUP, "version": CAPI_VERSION, "kind": kind},
            "resource": {"group": CAPI_GROUP, "version": CAPI_VERSION, "resource": plural},
            "name": new["metadata"]["name"],
            "namespace": new["metadata"]["namespace"],
            "operation": op,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": false,
        }
    });
    serde_json::to_vec(&body).expect("a JSON value serializes")
}

/// The peer: five reviews of Cluster API v1beta2 objects on its core manager's validating
/// paths, with the decision each must get.
fn capi_reviews() -> Vec<Review> {
    let cluster = capi_object(
        "Cluster",
        "c1",
        &json!({
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]},
                               "services": {"cidrBlocks": ["10.128.0.0/12"]}},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                                "kind": "KubeadmControlPlane", "name": "c1-control-plane"},
            "infrastructureRef": infra_ref("TerraformCluster", "c1"),
        }),
    );
    let machine = capi_object(
        "Machine",
        "m1",
        &machine_spec("c1", &infra_ref("TerraformMachine", "m1")),
    );
    let moved = common::with(machine.clone(), "/spec/clusterName", json!("c2"));
    let template = json!({
        "metadata": {"labels": {"pool": "a"}},
        "spec": machine_spec("c1", &infra_ref("TerraformMachineTemplate", "t1")),
    });
    let set = capi_object(
        "MachineSet",
        "s1",
        &json!({"clusterName": "c1", "replicas": 2, "selector": {"matchLabels": {"pool": "a"}},
               "template": template}),
    );
    let set_meta = common::with(
        set.clone(),
        "/spec/template/metadata/annotations",
        json!({"a": "b"}),
    );
    let pool = capi_object(
        "MachinePool",
        "p1",
        &json!({"clusterName": "c1", "replicas": 2, "template": {
            "spec": machine_spec("c1", &infra_ref("TerraformMachinePool", "p1"))}}),
    );
    let review = |i, kind: &str, plural, op, new: &Value, old: Option<&Value>, expect| {
        let path = format!(
            "/validate-{}-{CAPI_VERSION}-{}",
            CAPI_GROUP.replace('.', "-"),
            kind.to_ascii_lowercase()
        );
        let body = capi_review(kind, plural, op, new, old);
        Review::new(i, "capi", path, &body, expect)
    };
    let denied = Decision::Denied {
        naming: "spec.clusterName",
    };
    let allowed = Decision::Allowed;
    vec![
        review(0, "Cluster", "clusters", "CREATE", &cluster, None, allowed),
        review(
            1,
            "Machine",
            "machines",
            "UPDATE",
            &moved,
            Some(&machine),
            denied,
        ),
        review(2, "Machine", "machines", "CREATE", &machine, None, allowed),
        review(
            3,
            "MachineSet",
            "machinesets",
            "UPDATE",
            &set_meta,
            Some(&set),
            allowed,
        ),
        review(
            4,
            "MachinePool",
            "machinepools",
            "CREATE",
            &pool,
            None,
            allowed,
        ),
    ]
}

/// Whether `body` is a real answer to `review`: an AdmissionReview echoing its uid with the
/// decision expected for it. Returns whether it was allowed.
fn decision(body: &[u8], review: &Review) -> Result<bool, String> {
    let answer: Value = serde_json::from_slice(body)
        .map_err(|e| format!("{}: the answer is not JSON: {e}", review.path))?;
    let response = &answer["response"];
    if response["uid"] != review.uid.as_str() {
        return Err(format!(
            "{}: the answer's uid {} is not the request's {}",
            review.path, response["uid"], review.uid
        ));
    }
    let allowed = response["allowed"]
        .as_bool()
        .ok_or_else(|| format!("{}: the answer has no `allowed`", review.path))?;
    let message = response["status"]["message"].as_str().unwrap_or_default();
    match (review.expect, allowed) {
        (Decision::Allowed, true) => Ok(true),
        (Decision::Denied { naming }, false) if message.contains(naming) => Ok(false),
        (expect, _) => Err(format!(
            "{}: allowed={allowed} ({message:?}) where {expect:?} was expected",
            review.path
        )),
    }
}

/// One round trip: the time until the whole answer is read, and whether it allowed the request.
async fn call(
    client: &reqwest::Client,
    url: &str,
    review: &Review,
) -> Result<(Duration, bool), String> {
    let sent = Instant::now();
    let answer = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(review.body.clone())
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if answer.status() != http::StatusCode::OK {
        return Err(format!("{url}: HTTP {}", answer.status()));
    }
    let body = answer.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    let took = sent.elapsed();
    Ok((took, decision(&body, review)?))
}

/// Opens the client's connections and warms both sides up with 200 requests answered as
/// expected; the server gets 10 s to start answering.
async fn warm_up(target: &Target) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut answered = 0;
    while answered < 200 {
        let review = &target.reviews[answered % target.reviews.len()];
        let url = format!("{}{}", target.base, review.path);
        match call(&target.client, &url, review).await {
            Ok(_) => answered += 1,
            Err(_) if answered == 0 && started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => anyhow::bail!("{} does not answer as expected: {e}", target.name),
        }
    }
    let probe = target
        .client
        .post(format!("{}{}", target.base, target.reviews[0].path))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(target.reviews[0].body.clone())
        .send()
        .await?;
    println!("{}: {:?} at {}", target.name, probe.version(), target.base);
    Ok(())
}

/// What one target's slices added up to at one rate.
#[derive(Default)]
struct Run {
    latencies: Vec<Duration>,
    errors: Vec<String>,
    allowed: usize,
    denied: usize,
    elapsed: Duration,
}

/// Sends `count` requests to `target` open-loop at `rps`, cycling through its reviews, and adds
/// the outcomes to `run` once every answer is in.
async fn drive(target: &Target, rps: u64, count: usize, run: &mut Run) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rps as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    for i in 0..count {
        tick.tick().await;
        let (client, reviews, tx) = (target.client.clone(), target.reviews.clone(), tx.clone());
        let review_index = i % reviews.len();
        let url = format!("{}{}", target.base, reviews[review_index].path);
        tokio::spawn(async move {
            let _ = tx.send(call(&client, &url, &reviews[review_index]).await);
        });
    }
    drop(tx);
    while let Some(outcome) = rx.recv().await {
        match outcome {
            Ok((took, allowed)) => {
                run.latencies.push(took);
                if allowed {
                    run.allowed += 1;
                } else {
                    run.denied += 1;
                }
            }
            Err(e) => run.errors.push(e),
        }
    }
    run.elapsed += started.elapsed();
}

/// Both targets at `rps` for `seconds` each, taking turns in slices of [`SLICE`].
async fn measure(targets: &[Target; 2], rps: u64, seconds: u64) -> [Run; 2] {
    let mut runs = [Run::default(), Run::default()];
    let per_slice = (rps as f64 * SLICE.as_secs_f64()).round() as usize;
    let slices = (seconds as f64 / SLICE.as_secs_f64()).ceil() as u64;
    for slice in 0..slices {
        let order = if slice % 2 == 0 { [0, 1] } else { [1, 0] };
        for t in order {
            drive(&targets[t], rps, per_slice, &mut runs[t]).await;
        }
    }
    for run in &mut runs {
        run.latencies.sort_unstable();
    }
    runs
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

/// The human-readable lines of one target at one rate.
fn print_run(target: &Target, run: &Run) {
    let l = &run.latencies;
    println!(
        "  {:<26} p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms  ({:.0}/s achieved; {} allowed, {} denied, {} errors)",
        target.name,
        ms(percentile(l, 50.0)),
        ms(percentile(l, 90.0)),
        ms(percentile(l, 99.0)),
        ms(l.last().copied().unwrap_or_default()),
        (l.len() + run.errors.len()) as f64 / run.elapsed.as_secs_f64().max(f64::EPSILON),
        run.allowed,
        run.denied,
        run.errors.len(),
    );
    if let Some(e) = run.errors.first() {
        println!("  {:<26} first error: {e}", "");
    }
}

/// `p50 …, p99 …` of a run, with its errors if any.
fn summary(run: &Run) -> String {
    let errors = match run.errors.len() {
        0 => String::new(),
        n => format!(", {n} errors"),
    };
    format!(
        "p50 {:.3} ms, p99 {:.3} ms{errors}",
        ms(percentile(&run.latencies, 50.0)),
        ms(percentile(&run.latencies, 99.0)),
    )
}

/// The `BENCH` line `hack/bench.sh` gathers into its table. The goal is set at 2,000 requests/s:
/// our p99 under 2 ms and no higher than Cluster API's in the same run, with no errors on
/// either side; at lower rates the figures are recorded.
fn bench_line(rps: u64, ours: &Run, peer: &Run) {
    let (our_p99, peer_p99) = (
        ms(percentile(&ours.latencies, 99.0)),
        ms(percentile(&peer.latencies, 99.0)),
    );
    let ratio = our_p99 / peer_p99;
    let clean = ours.errors.is_empty() && peer.errors.is_empty();
    let (goal, verdict) = if rps >= 2000 {
        let met = clean && our_p99 < 2.0 && our_p99 <= peer_p99;
        (
            "p99 < 2 ms and ≤ Cluster API's",
            if met { "met" } else { "MISS" },
        )
    } else {
        ("recorded (goal at 2,000/s)", "-")
    };
    println!(
        "BENCH\twebhook admission round trip at {rps}/s ({} requests each, HTTPS on loopback, \
         interleaved 1 s slices)\t{}\tCluster API core webhook {}\t{ratio:.2} (p99)\t{goal}\t{verdict}",
        ours.latencies.len() + ours.errors.len(),
        summary(ours),
        summary(peer),
    );
}

/// Starts our webhook server on `runtime` with in-memory lookups, its serving pair in `dir`
/// signed by `ca`. Returns its base URL.
fn start_ours(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    ca: &TestCa,
) -> anyhow::Result<String> {
    let _in_runtime = runtime.enter();
    ca.write_serving_pair(dir);
    let listeners = Listeners::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Listen::Off,
        Listen::Off,
    )?;
    let base = format!("https://127.0.0.1:{}", listeners.webhook_addr()?.port());
    let mut world = World::default();
    world
        .secret_readers
        .insert(("alice".into(), "creds".into(), "aws".into()));
    let settings = Settings {
        cert_path: dir.join("tls.crt"),
        key_path: dir.join("tls.key"),
        tls_min_version: TlsVersion::Tls12,
        tls_cipher_suites: Vec::new(),
        tls_curve_preferences: Vec::new(),
        reload_interval: Duration::from_secs(10),
        insecure_diagnostics: true,
    };
    runtime.spawn(server::serve(
        listeners,
        settings,
        StaticLookups::new(world),
        DiagnosticsAuth::Open,
        Metrics::new(),
        std::future::pending(),
    ));
    Ok(base)
}

/// Cluster API's core manager in `env`: its webhook's base URL and the CA of its serving
/// certificate.
fn peer(env: &TestEnv) -> anyhow::Result<(String, String)> {
    let capi = env
        .cluster_api()
        .context("the test environment runs no Cluster API")?;
    let (core, ports) = capi
        .managers()
        .find(|(p, _)| p.provider_type == "CoreProvider")
        .context("Cluster API's core manager is not running")?;
    let ca_path = capi.dir().join(core.binary).join("certs/ca.crt");
    let ca = std::fs::read_to_string(&ca_path)
        .with_context(|| format!("reading {}", ca_path.display()))?;
    Ok((format!("https://127.0.0.1:{}", ports.webhook), ca))
}

fn runtime(name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()?)
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let seconds = env_number("CAPTF_BENCH_SECONDS", 10).max(1);
    let rates = rates()?;
    let started = Instant::now();
    let env = TestEnv::start_new("captf-bench-webhook", true)
        .context("starting the test environment with Cluster API (needs `make testbin`)")?;
    let (peer_base, peer_ca) = peer(&env)?;
    println!(
        "test environment with Cluster API ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new("bench-ca");
    let server_runtime = runtime("captf-webhook")?;
    let our_base = start_ours(&server_runtime, dir.path(), &ca)?;
    let mut failed = 0;
    runtime("bench-client")?.block_on(async {
        let targets = [
            Target::new("CAPTF webhook", our_base, &ca.pem, our_reviews())?,
            Target::new("Cluster API core webhook", peer_base, &peer_ca, capi_reviews())?,
        ];
        for target in &targets {
            warm_up(target).await?;
        }
        for &rps in &rates {
            let runs = measure(&targets, rps, seconds).await;
            println!(
                "admission latency at {rps}/s offered, HTTPS on loopback, {seconds} s per webhook in interleaved {} s slices:",
                SLICE.as_secs()
            );
            for (target, run) in targets.iter().zip(&runs) {
                print_run(target, run);
                failed += run.errors.len();
            }
            bench_line(rps, &runs[0], &runs[1]);
        }
        anyhow::Ok(())
    })?;
    anyhow::ensure!(
        failed == 0,
        "{failed} requests were not answered as expected"
    );
    Ok(())
}
