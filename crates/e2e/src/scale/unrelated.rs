//! The cost of the manager's watches on a busy management cluster (issue 29, the cluster-wide
//! watch of every Secret's metadata; issue 34 item 5; book: Performance, "The scale harness").
//!
//! One environment, one manager, a small adopted fleet brought to Ready; then Secrets (4 KiB of
//! data each) and ConfigMaps (one for five Secrets, 4 KiB of text each) that have nothing to do
//! with CAPTF, in namespaces of their own, created in two halves: first without, then with the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation holding the object as
//! `kubectl apply` writes it (a real cluster's Secrets mostly carry it). After each step, once
//! the manager is steady again (a quiet minute, then its resident set stable across two samples
//! 10 s apart), its memory and CPU are read from `/proc`, and its CPU again over a steady window.
//!
//! Of the manager's watches only the Secret metadata watch sees these objects (its ConfigMap
//! watch is filtered by label on the server), so the step's difference in resident set is that
//! watch's cost for them.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::{StreamExt as _, TryStreamExt as _};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use testenv::TestEnv;

use super::run::{Plan, ProcFigures, bring_up, mib, new_fleet, procs};
use super::{CREATE_CONCURRENCY, Mode, ProcStats, Traffic, create, is_manager, now_micros};
use crate::kube_ops::Kube;
use crate::product::Captf;
use crate::suite::Images;

/// The annotation `kubectl apply` writes: the applied object, as JSON.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The data of each unrelated object, in bytes (a Secret's decoded value, a ConfigMap's text).
const PAYLOAD_BYTES: usize = 4096;
/// Unrelated Secrets per namespace (ConfigMaps follow the same spread).
const PER_NAMESPACE: usize = 1000;
/// How long the harness waits after a step's last create before sampling.
const QUIET: Duration = Duration::from_secs(60);
/// Between two samples of the resident set.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Two samples this close are stable.
const STABLE_BYTES: u64 = 1 << 20;
/// Samples before the harness goes on without a stable resident set (and says so).
const MAX_SAMPLES: usize = 18;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct UnrelatedPlan {
    /// Unrelated Secrets in all; ConfigMaps are a fifth of them.
    pub secrets: usize,
    /// Adopted machines of the fleet (the seed not counted).
    pub fleet: usize,
    /// The window over which steady CPU is read after each step.
    pub steady: Duration,
}

impl UnrelatedPlan {
    pub fn config_maps(&self) -> usize {
        self.secrets / 5
    }
}

/// The two kinds of unrelated objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Secret,
    ConfigMap,
}

/// One step: the objects it created, and the manager once steady after it.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: &'static str,
    /// Unrelated Secrets and ConfigMaps in the cluster after the step.
    pub secrets: usize,
    pub config_maps: usize,
    /// Secrets the step created.
    pub created_secrets: usize,
    pub create_time: Duration,
    /// The manager's CPU seconds while the step's objects were created, and in the quiet
    /// minute and the sampling after them.
    pub create_cpu: f64,
    pub quiet_cpu: f64,
    /// The resident set samples, until two were stable (or [`MAX_SAMPLES`]).
    pub samples: Vec<u64>,
    pub stable: bool,
    /// RSS at the end of the steady window, the peak so far, CPU per minute over the window.
    pub manager: ProcFigures,
    pub capi: Option<ProcFigures>,
    /// The manager's requests from the step's start to the end of its steady window.
    pub requests: Traffic,
    pub window: Duration,
    from: i64,
    to: i64,
}

/// The figures of one run.
#[derive(Debug, Clone)]
pub struct UnrelatedRow {
    pub plan: UnrelatedPlan,
    pub fleet_ns: String,
    pub namespaces: Vec<String>,
    pub steps: Vec<Step>,
}

/// `n` pseudo-random bytes, the same for the same `(kind, i)`.
fn payload(kind: Kind, i: usize, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 32);
    let mut block = 0u64;
    while out.len() < n {
        let mut h = Sha256::new();
        h.update([u8::from(kind == Kind::Secret)]);
        h.update(i.to_le_bytes());
        h.update(block.to_le_bytes());
        out.extend_from_slice(&h.finalize());
        block += 1;
    }
    out.truncate(n);
    out
}

/// Unrelated object `i` of `kind` in `ns`, with 4 KiB of data; when `annotated`, with the
/// last-applied-configuration annotation `kubectl apply` writes (the object as applied, keys
/// sorted, `annotations` empty, a newline at the end).
pub fn unrelated_object(kind: Kind, ns: &str, i: usize, annotated: bool) -> Value {
    let b64 = &base64::engine::general_purpose::STANDARD;
    let (kind_name, name, data) = match kind {
        Kind::Secret => (
            "Secret",
            format!("unrelated-secret-{i:05}"),
            b64.encode(payload(kind, i, PAYLOAD_BYTES)),
        ),
        // 3 KiB of bytes are 4 KiB of base64 text.
        Kind::ConfigMap => (
            "ConfigMap",
            format!("unrelated-config-{i:05}"),
            b64.encode(payload(kind, i, PAYLOAD_BYTES / 4 * 3)),
        ),
    };
    let build = |annotations: Value| {
        let mut obj = json!({"apiVersion": "v1", "data": {"payload": data}, "kind": kind_name,
                             "metadata": {"annotations": annotations, "name": name,
                                          "namespace": ns}});
        if kind == Kind::Secret {
            obj["type"] = json!("Opaque");
        }
        obj
    };
    let applied = build(json!({}));
    if annotated {
        build(json!({ LAST_APPLIED: format!("{applied}\n") }))
    } else {
        let mut obj = applied;
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("annotations");
        }
        obj
    }
}

/// The Secrets `secrets` and ConfigMaps `config_maps` (by index), spread over `namespaces`.
fn objects(
    namespaces: &[String],
    secrets: std::ops::Range<usize>,
    config_maps: std::ops::Range<usize>,
    annotated: bool,
) -> impl Iterator<Item = Value> + '_ {
    let ns = move |i: usize| namespaces[i / PER_NAMESPACE % namespaces.len()].as_str();
    let secrets = secrets.map(move |i| unrelated_object(Kind::Secret, ns(i), i, annotated));
    let config_maps =
        config_maps.map(move |i| unrelated_object(Kind::ConfigMap, ns(i * 5), i, annotated));
    secrets.chain(config_maps)
}

/// Creates every object, a bounded number at once; returns how many.
async fn create_all(kube: &Kube, objects: impl Iterator<Item = Value>) -> anyhow::Result<usize> {
    futures::stream::iter(objects.map(|obj| async move {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        create(kube, &obj, &ns).await.map(|_| ())
    }))
    .buffer_unordered(CREATE_CONCURRENCY)
    .try_fold(0, |n, ()| async move { Ok(n + 1) })
    .await
}

/// Samples the manager's resident set every [`SAMPLE_EVERY`] until two samples in a row are
/// within [`STABLE_BYTES`] (true) or [`MAX_SAMPLES`] were taken (false).
async fn wait_stable(captf: &Captf) -> anyhow::Result<(Vec<u64>, bool)> {
    let mut samples = vec![ProcStats::read(captf.manager_pid())?.rss];
    while samples.len() < MAX_SAMPLES {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let rss = ProcStats::read(captf.manager_pid())?.rss;
        let last = samples.last().copied().unwrap_or(rss);
        samples.push(rss);
        if rss.abs_diff(last) <= STABLE_BYTES {
            return Ok((samples, true));
        }
    }
    Ok((samples, false))
}

/// Counts of objects in the cluster after a step, and what it creates.
struct StepObjects<I> {
    name: &'static str,
    secrets: usize,
    config_maps: usize,
    created_secrets: usize,
    objects: I,
}

/// Creates the step's objects, waits until the manager is steady, reads it over `steady`.
async fn step(
    env: &TestEnv,
    captf: &Captf,
    kube: &Kube,
    what: StepObjects<impl Iterator<Item = Value>>,
    steady: Duration,
) -> anyhow::Result<Step> {
    let from = now_micros();
    let m0 = ProcStats::read(captf.manager_pid())?;
    let started = Instant::now();
    create_all(kube, what.objects).await?;
    let create_time = started.elapsed();
    let m1 = ProcStats::read(captf.manager_pid())?;
    println!(
        "scale: unrelated: {}: created {} Secrets in {:.1} s; waiting for the manager to settle",
        what.name,
        what.created_secrets,
        create_time.as_secs_f64()
    );
    tokio::time::sleep(QUIET).await;
    let (samples, stable) = wait_stable(captf).await?;
    let (s0, c0) = procs(captf, env)?;
    let steady_from = Instant::now();
    tokio::time::sleep(steady).await;
    let (s1, c1) = procs(captf, env)?;
    let window = steady_from.elapsed();
    let per_min = |a: f64, b: f64| (b - a) * 60.0 / window.as_secs_f64().max(1.0);
    let figures = |a: &ProcStats, b: &ProcStats| ProcFigures {
        peak_rss: b.peak_rss,
        steady_rss: b.rss,
        steady_cpu_per_min: per_min(a.cpu_seconds, b.cpu_seconds),
    };
    Ok(Step {
        name: what.name,
        secrets: what.secrets,
        config_maps: what.config_maps,
        created_secrets: what.created_secrets,
        create_time,
        create_cpu: m1.cpu_seconds - m0.cpu_seconds,
        quiet_cpu: s0.cpu_seconds - m1.cpu_seconds,
        samples,
        stable,
        manager: figures(&s0, &s1),
        capi: c0.zip(c1).map(|(a, b)| figures(&a, &b)),
        requests: Traffic::default(),
        window,
        from,
        to: now_micros(),
    })
}

/// Runs `plan` against the running `captf`: the fleet, then the three steps (before, the plain
/// half, the annotated half).
pub async fn run(
    env: &TestEnv,
    captf: &Captf,
    images: &Images,
    plan: UnrelatedPlan,
) -> anyhow::Result<UnrelatedRow> {
    let fleet = new_fleet(env, images).await?;
    let names: Vec<String> = (0..plan.fleet).map(|i| format!("m-{i:04}")).collect();
    let fleet_plan = Plan {
        mode: Mode::Adopted,
        n: plan.fleet,
        settle: Duration::ZERO,
        steady: plan.steady,
    };
    bring_up(&fleet, &fleet_plan, &names).await?;
    println!(
        "scale: unrelated: {} adopted machines Ready in {}",
        plan.fleet, fleet.ns
    );
    let mut namespaces = Vec::new();
    for _ in 0..plan.secrets.div_ceil(PER_NAMESPACE).max(1) {
        namespaces.push(env.namespace("unrelated").await?);
    }
    let (secrets, config_maps) = (plan.secrets, plan.config_maps());
    let (s_half, c_half) = (secrets / 2, config_maps / 2);
    let kube = &fleet.kube;
    let steps = [
        StepObjects {
            name: "before",
            secrets: 0,
            config_maps: 0,
            created_secrets: 0,
            objects: objects(&namespaces, 0..0, 0..0, false),
        },
        StepObjects {
            name: "plain half",
            secrets: s_half,
            config_maps: c_half,
            created_secrets: s_half,
            objects: objects(&namespaces, 0..s_half, 0..c_half, false),
        },
        StepObjects {
            name: "annotated half",
            secrets,
            config_maps,
            created_secrets: secrets - s_half,
            objects: objects(&namespaces, s_half..secrets, c_half..config_maps, true),
        },
    ];
    let mut done = Vec::new();
    for what in steps {
        done.push(step(env, captf, kube, what, plan.steady).await?);
    }
    let audit = testenv::audit::read(&env.endpoints().dir)?;
    for s in &mut done {
        s.requests = Traffic::of(&audit, s.from, s.to, None, is_manager);
    }
    Ok(UnrelatedRow {
        plan,
        fleet_ns: fleet.ns.clone(),
        namespaces,
        steps: done,
    })
}

fn diff_mib(a: u64, b: u64) -> String {
    format!("{:+.1}", (b as f64 - a as f64) / (1024.0 * 1024.0))
}

/// The table of one run's steps, as Markdown.
pub fn table(row: &UnrelatedRow) -> String {
    let header = [
        "step",
        "unrelated Secrets / ConfigMaps",
        "created in (s)",
        "manager CPU while creating (s)",
        "manager CPU, quiet minute after (s)",
        "manager RSS (MiB)",
        "Δ RSS from before (MiB)",
        "Δ RSS this step (MiB)",
        "KiB / Secret this step",
        "peak RSS (MiB)",
        "CPU s/min steady",
        "manager requests",
        "Cluster API core RSS (MiB)",
        "RSS samples to stable",
    ];
    let mut out = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        " --- |".repeat(header.len())
    );
    let Some(first) = row.steps.first() else {
        return out;
    };
    let mut previous = first;
    for s in &row.steps {
        let step_delta = s.manager.steady_rss as f64 - previous.manager.steady_rss as f64;
        let per_secret = if s.created_secrets == 0 {
            "-".to_owned()
        } else {
            format!("{:.2}", step_delta / 1024.0 / s.created_secrets as f64)
        };
        let cells = [
            s.name.to_owned(),
            format!("{} / {}", s.secrets, s.config_maps),
            format!("{:.1}", s.create_time.as_secs_f64()),
            format!("{:.2}", s.create_cpu),
            format!("{:.2}", s.quiet_cpu),
            mib(s.manager.steady_rss),
            diff_mib(first.manager.steady_rss, s.manager.steady_rss),
            diff_mib(previous.manager.steady_rss, s.manager.steady_rss),
            per_secret,
            mib(s.manager.peak_rss),
            format!("{:.2}", s.manager.steady_cpu_per_min),
            s.requests.total.to_string(),
            s.capi.map_or("-".to_owned(), |c| mib(c.steady_rss)),
            format!(
                "{}{}",
                s.samples.len(),
                if s.stable { "" } else { " (not stable)" }
            ),
        ];
        out.push_str("| ");
        out.push_str(&cells.join(" | "));
        out.push_str(" |\n");
        previous = s;
    }
    out
}

/// The run in a few lines: the figures the issues ask for, and each step's requests.
pub fn summary(row: &UnrelatedRow) -> String {
    let (Some(before), Some(after)) = (row.steps.first(), row.steps.last()) else {
        return String::new();
    };
    let create_cpu: f64 = row.steps.iter().map(|s| s.create_cpu).sum();
    let create_time: f64 = row.steps.iter().map(|s| s.create_time.as_secs_f64()).sum();
    let mut out = format!(
        "unrelated objects: {} Secrets ({} B of data each, {} of them with {LAST_APPLIED}) and {} ConfigMaps in {} namespaces, next to {} adopted machines (fleet in {}):\n  manager RSS before {} MiB, after {} MiB, delta {} MiB; CPU {:.2} s while creating ({:.1} s of creates), steady {:.2} s/min before and {:.2} s/min after",
        row.plan.secrets,
        PAYLOAD_BYTES,
        row.plan.secrets - row.plan.secrets / 2,
        row.plan.config_maps(),
        row.namespaces.len(),
        row.plan.fleet,
        row.fleet_ns,
        mib(before.manager.steady_rss),
        mib(after.manager.steady_rss),
        diff_mib(before.manager.steady_rss, after.manager.steady_rss),
        create_cpu,
        create_time,
        before.manager.steady_cpu_per_min,
        after.manager.steady_cpu_per_min,
    );
    if let (Some(b), Some(a)) = (before.capi, after.capi) {
        let _ = write!(
            out,
            "\n  Cluster API core RSS before {} MiB, after {} MiB, delta {} MiB",
            mib(b.steady_rss),
            mib(a.steady_rss),
            diff_mib(b.steady_rss, a.steady_rss)
        );
    }
    for s in &row.steps {
        let _ = write!(
            out,
            "\n  {} ({:.0} s from its first create to the end of its steady window): manager {} requests ({}); top: {}; RSS samples (MiB): {}",
            s.name,
            (s.to - s.from) as f64 / 1e6,
            s.requests.total,
            s.requests.verbs(),
            s.requests.top_resources(8),
            s.samples
                .iter()
                .map(|b| mib(*b))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unrelated_secret_holds_4_kib_and_its_last_applied_configuration() {
        let plain = unrelated_object(Kind::Secret, "ns", 7, false);
        let data = base64::engine::general_purpose::STANDARD
            .decode(plain["data"]["payload"].as_str().unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(data.len(), PAYLOAD_BYTES);
        assert!(plain["metadata"].get("annotations").is_none());
        let annotated = unrelated_object(Kind::Secret, "ns", 7, true);
        let applied = annotated["metadata"]["annotations"][LAST_APPLIED]
            .as_str()
            .unwrap_or_default();
        assert!(applied.ends_with("}\n"));
        assert!(applied.starts_with("{\"apiVersion\":\"v1\",\"data\":{\"payload\":\""));
        assert!(applied.contains(
            "\"kind\":\"Secret\",\"metadata\":{\"annotations\":{},\"name\":\"unrelated-secret-00007\",\"namespace\":\"ns\"},\"type\":\"Opaque\"}"
        ));
        assert_eq!(annotated["data"], plain["data"]);
    }

    #[test]
    fn an_unrelated_config_map_holds_4_kib_of_text() {
        let cm = unrelated_object(Kind::ConfigMap, "ns", 1, true);
        assert_eq!(
            cm["data"]["payload"].as_str().map(str::len),
            Some(PAYLOAD_BYTES)
        );
        assert!(cm.get("type").is_none());
        assert_ne!(
            payload(Kind::Secret, 1, 64),
            payload(Kind::ConfigMap, 1, 64)
        );
    }
}
