//! One run of the scale harness: a fleet brought up (adopted or applied) under a running manager,
//! then a steady window, each measured (see [`super`]); and the table of runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use testenv::TestEnv;

use super::{
    Fleet, Milestone, Milestones, Mode, ProcStats, Traffic, create_fleet, identity, is_capi_core,
    is_manager, now_micros, quantile, reconcile_passes, seed, set_paused, wait_ready,
};
use crate::kube_ops::{INFRA, Kube, condition};
use crate::product::{Captf, http_get};
use crate::suite::Images;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub mode: Mode,
    /// Machines in the fleet (the seed of an adopted fleet not counted).
    pub n: usize,
    /// From every machine Ready to the steady window: the bring-up's stragglers settle.
    pub settle: Duration,
    /// The steady window: long enough to hold the manager's resync (`--sync-period`).
    pub steady: Duration,
}

/// One process's figures over a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcFigures {
    pub peak_rss: u64,
    pub steady_rss: u64,
    /// CPU seconds per minute over the steady window.
    pub steady_cpu_per_min: f64,
}

/// The figures of one run.
#[derive(Debug, Clone)]
pub struct Row {
    pub plan: Plan,
    pub ns: String,
    /// From the start of the bring-up (the unpause of an adopted fleet, the first create of an
    /// applied one) until every machine was Ready.
    pub ready: Duration,
    /// The manager's requests from the first create until every machine was Ready, everywhere.
    pub bringup: Traffic,
    /// The manager's TerraformMachine reconcile passes over the same window.
    pub bringup_passes: f64,
    /// The manager's requests over the steady window, everywhere, and in the fleet's namespace.
    pub steady: Traffic,
    pub steady_ns: Traffic,
    pub steady_window: Duration,
    pub capi_bringup: Traffic,
    pub capi_steady: Traffic,
    pub manager: ProcFigures,
    pub capi: Option<ProcFigures>,
    /// Each machine's bring-up, split at the steps a watch sees.
    pub latencies: Latencies,
    /// Jobs in the fleet's namespace at the end (the cluster's and the seed's included).
    pub jobs: usize,
    /// The events of the fleet's namespace at the end, by `kind reason`, counting repeats.
    pub events: BTreeMap<String, u64>,
}

/// Per machine that ran a Job, in seconds: the spans of its bring-up.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    /// Created (the create's answer) to its first Job pod's `status.startTime`: the queue latency
    /// of the last table, measured the same way.
    pub queue: Vec<f64>,
    /// Created to its first Job seen: the manager's share.
    pub manager: Vec<f64>,
    /// Its first Job seen to the Job's pod `Running`: the kubelet's share (scheduling, the
    /// process kubelet, the image).
    pub kubelet: Vec<f64>,
    /// The pod `Running` to the TerraformMachine `Ready=True` (polled every second): OpenTofu's
    /// run and the manager's passes after it.
    pub to_ready: Vec<f64>,
}

impl Latencies {
    /// The spans of every machine in `created` that reached each end of a span.
    pub fn of(
        created: &BTreeMap<String, Instant>,
        seen: &Milestones,
        ready: &BTreeMap<String, Instant>,
    ) -> Latencies {
        let span = |from: Option<Instant>, to: Option<Instant>| {
            Some(to?.saturating_duration_since(from?).as_secs_f64())
        };
        let mut out = Latencies::default();
        for (name, at) in created {
            let at = Some(*at);
            let job = seen.of(name, Milestone::JobCreated);
            let running = seen.of(name, Milestone::PodRunning);
            out.queue
                .extend(span(at, seen.of(name, Milestone::PodStarted)));
            out.manager.extend(span(at, job));
            out.kubelet.extend(span(job, running));
            out.to_ready.extend(span(running, ready.get(name).copied()));
        }
        out
    }
}

/// The manager's and Cluster API's core manager's figures now.
pub(super) fn procs(
    captf: &Captf,
    env: &TestEnv,
) -> anyhow::Result<(ProcStats, Option<ProcStats>)> {
    let capi = env
        .cluster_api()
        .and_then(|c| c.pid("capi-manager"))
        .map(ProcStats::read)
        .transpose()?;
    Ok((ProcStats::read(captf.manager_pid())?, capi))
}

fn passes(captf: &Captf) -> f64 {
    http_get(captf.manager_metrics_port, "/metrics")
        .map_or(0.0, |(_, body)| reconcile_passes(&body, "terraformmachine"))
}

/// Waits until the manager has seen the pause: the TerraformCluster's `Paused` is True.
async fn wait_paused(fleet: &Fleet) -> anyhow::Result<()> {
    fleet
        .kube
        .wait_for(
            (INFRA, "TerraformCluster"),
            &fleet.ns,
            &fleet.cluster,
            Duration::from_secs(120),
            "Paused=True",
            |o| condition(o, "Paused").is_some_and(|(s, _)| s == "True"),
        )
        .await
        .map(|_| ())
}

/// When a fleet's bring-up happened.
pub(super) struct BroughtUp {
    /// The bring-up's start (for the Ready time).
    pub started: Instant,
    /// The fleet's first create (for the traffic window: an adopted fleet's seed and cluster are
    /// before it).
    pub first_create: i64,
    /// Each machine's creation.
    pub created: BTreeMap<String, Instant>,
    /// When each machine was first seen Ready.
    pub ready: BTreeMap<String, Instant>,
}

/// The fleet brought up: returns when every machine is Ready.
pub(super) async fn bring_up(
    fleet: &Fleet,
    plan: &Plan,
    names: &[String],
) -> anyhow::Result<BroughtUp> {
    let (started, first_create, created) = match plan.mode {
        Mode::Adopted => {
            let seed = seed(fleet).await?;
            set_paused(fleet, true).await?;
            wait_paused(fleet).await?;
            let first_create = now_micros();
            let created = create_fleet(fleet, names, Some(&seed)).await?;
            set_paused(fleet, false).await?;
            (Instant::now(), first_create, created)
        }
        Mode::Applied | Mode::Drift => {
            let (started, first_create) = (Instant::now(), now_micros());
            (
                started,
                first_create,
                create_fleet(fleet, names, None).await?,
            )
        }
    };
    let total = names.len() + usize::from(plan.mode == Mode::Adopted);
    let ready = wait_ready(fleet, total, Duration::from_secs(1800)).await?;
    Ok(BroughtUp {
        started,
        first_create,
        created,
        ready,
    })
}

/// A fresh namespace of `env` with its identity and its Cluster and TerraformCluster (a real
/// apply), ready for a fleet.
pub(super) async fn new_fleet(env: &TestEnv, images: &Images) -> anyhow::Result<Fleet> {
    let kube = Kube::new(env.client().await?);
    let ns = env.namespace("scale").await?;
    let identity = identity(&kube, &ns).await?;
    let fleet = Fleet {
        kube,
        ns: ns.clone(),
        cluster: "fleet".to_owned(),
        machine_image: images.machine.clone(),
    };
    super::cluster(&fleet.kube, &ns, &fleet.cluster, &identity, &images.cluster).await?;
    Ok(fleet)
}

/// Runs `plan` in a fresh namespace of `env`, against the running `captf`.
pub async fn run(env: &TestEnv, captf: &Captf, images: &Images, plan: Plan) -> anyhow::Result<Row> {
    let fleet = new_fleet(env, images).await?;
    let ns = fleet.ns.clone();
    let names: Vec<String> = (0..plan.n).map(|i| format!("m-{i:04}")).collect();
    let (seen, watches) = Milestones::watch(&fleet);
    let passes_before = passes(captf);
    let up = bring_up(&fleet, &plan, &names).await?;
    let ready = up.started.elapsed();
    let first_create = up.first_create;
    let bringup_end = now_micros();
    let bringup_passes = passes(captf) - passes_before;
    watches.iter().for_each(tokio::task::JoinHandle::abort);
    let latencies = Latencies::of(&up.created, &seen, &up.ready);

    tokio::time::sleep(plan.settle).await;
    let (m0, c0) = procs(captf, env)?;
    let steady_from = now_micros();
    tokio::time::sleep(plan.steady).await;
    let steady_to = now_micros();
    let (m1, c1) = procs(captf, env)?;
    let window = Duration::from_micros(u64::try_from(steady_to - steady_from).unwrap_or(0));
    let cpu_per_min = |a: f64, b: f64| (b - a) * 60.0 / window.as_secs_f64().max(1.0);

    let audit = testenv::audit::read(&env.endpoints().dir)?;
    let jobs = fleet.kube.list("batch/v1", "Job", &ns, "").await?.len();
    let mut events = BTreeMap::new();
    for e in fleet
        .kube
        .list("events.k8s.io/v1", "Event", &ns, "")
        .await?
    {
        let what = format!(
            "{} {}",
            e["regarding"]["kind"].as_str().unwrap_or_default(),
            e["reason"].as_str().unwrap_or_default()
        );
        let count = e["series"]["count"]
            .as_u64()
            .or_else(|| e["deprecatedCount"].as_u64())
            .unwrap_or(1);
        *events.entry(what).or_default() += count;
    }
    Ok(Row {
        plan,
        ns: ns.clone(),
        ready,
        bringup: Traffic::of(&audit, first_create, bringup_end, None, is_manager),
        bringup_passes,
        steady: Traffic::of(&audit, steady_from, steady_to, None, is_manager),
        steady_ns: Traffic::of(&audit, steady_from, steady_to, Some(&ns), is_manager),
        steady_window: window,
        capi_bringup: Traffic::of(&audit, first_create, bringup_end, None, is_capi_core),
        capi_steady: Traffic::of(&audit, steady_from, steady_to, None, is_capi_core),
        manager: ProcFigures {
            peak_rss: m1.peak_rss,
            steady_rss: m1.rss,
            steady_cpu_per_min: cpu_per_min(m0.cpu_seconds, m1.cpu_seconds),
        },
        capi: c0.zip(c1).map(|(c0, c1)| ProcFigures {
            peak_rss: c1.peak_rss,
            steady_rss: c1.rss,
            steady_cpu_per_min: cpu_per_min(c0.cpu_seconds, c1.cpu_seconds),
        }),
        latencies,
        jobs,
        events,
    })
}

impl Row {
    /// The Jobs the manager created in the fleet's namespace over the steady window: drift
    /// checks, when the run's drift interval is inside the window.
    pub fn steady_jobs(&self) -> u64 {
        self.steady_ns
            .by_resource
            .get("create jobs")
            .copied()
            .unwrap_or(0)
    }
}

/// Checks what a run cannot get wrong by noise: an adopted fleet started no Job of its own, and
/// the steady window had no write and no GET of a single object in the fleet's namespace.
pub fn check_steady(row: &Row) -> anyhow::Result<()> {
    // The cluster's apply and the seed's apply (and its refresh, when it takes one) ran for real.
    if row.plan.mode == Mode::Adopted && row.jobs > 3 {
        bail!(
            "the adopted fleet in {} ran Jobs: {} in the namespace (the cluster and the seed account for at most 3)",
            row.ns,
            row.jobs
        );
    }
    if row.steady_ns.writes > 0 || row.steady_ns.object_gets > 0 {
        bail!(
            "the manager was not quiet at steady state in {} over {:.0} s: {} writes, {} GETs of single objects ({})",
            row.ns,
            row.steady_window.as_secs_f64(),
            row.steady_ns.writes,
            row.steady_ns.object_gets,
            row.steady_ns.top_resources(12)
        );
    }
    Ok(())
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

fn per_min(count: u64, window: Duration) -> String {
    format!("{:.1}", count as f64 * 60.0 / window.as_secs_f64().max(1.0))
}

/// The table of runs, one row per run, as Markdown.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "run",
        "Ready in (s)",
        "bring-up requests / machine",
        "passes / machine",
        "queue p50 / p99 (s)",
        "create → Job p50 / p99 (s)",
        "Job → pod running p50 / p99 (s)",
        "pod running → Ready p50 / p99 (s)",
        "peak RSS (MiB)",
        "steady RSS (MiB)",
        "Cluster API core RSS (MiB)",
        "RSS ratio",
        "CPU s/min",
        "steady requests/min",
        "steady writes/min",
        "object GETs",
        "Cluster API core steady requests/min",
        "steady Jobs (drift checks)",
        "steady requests / drift check",
    ];
    let mut out = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        " --- |".repeat(header.len())
    );
    for r in rows {
        let n = r.plan.n.max(1) as f64;
        let q = |v: &[f64]| {
            let at = |p| quantile(v, p).map_or("-".to_owned(), |x| format!("{x:.1}"));
            format!("{} / {}", at(0.5), at(0.99))
        };
        let capi_rss = r.capi.map_or("-".to_owned(), |c| mib(c.steady_rss));
        let ratio = r.capi.map_or("-".to_owned(), |c| {
            format!(
                "{:.2}",
                r.manager.steady_rss as f64 / c.steady_rss.max(1) as f64
            )
        });
        let cells = [
            format!("{} N={}", r.plan.mode.name(), r.plan.n),
            format!("{:.1}", r.ready.as_secs_f64()),
            format!("{:.1}", r.bringup.total as f64 / n),
            format!("{:.2}", r.bringup_passes / n),
            q(&r.latencies.queue),
            q(&r.latencies.manager),
            q(&r.latencies.kubelet),
            q(&r.latencies.to_ready),
            mib(r.manager.peak_rss),
            mib(r.manager.steady_rss),
            capi_rss,
            ratio,
            format!("{:.2}", r.manager.steady_cpu_per_min),
            per_min(r.steady.total, r.steady_window),
            per_min(r.steady.writes, r.steady_window),
            r.steady_ns.object_gets.to_string(),
            per_min(r.capi_steady.total, r.steady_window),
            r.steady_jobs().to_string(),
            match r.steady_jobs() {
                0 => "-".to_owned(),
                jobs => format!("{:.1}", r.steady_ns.total as f64 / jobs as f64),
            },
        ];
        out.push_str("| ");
        out.push_str(&cells.join(" | "));
        out.push_str(" |\n");
    }
    out
}

/// The detail of one run: requests by verb and the largest `verb resource` counts.
pub fn detail(r: &Row) -> String {
    format!(
        "{} N={} ({}): bring-up: manager {} requests ({}); top: {}\n  Cluster API core {} ({})\n  steady {:.0} s: manager {} ({}); top: {}\n  Cluster API core {} ({}); Jobs in the namespace: {}\n  events: {}",
        r.plan.mode.name(),
        r.plan.n,
        r.ns,
        r.bringup.total,
        r.bringup.verbs(),
        r.bringup.top_resources(10),
        r.capi_bringup.total,
        r.capi_bringup.verbs(),
        r.steady_window.as_secs_f64(),
        r.steady.total,
        r.steady.verbs(),
        r.steady.top_resources(10),
        r.capi_steady.total,
        r.capi_steady.verbs(),
        r.jobs,
        r.events
            .iter()
            .map(|(what, n)| format!("{what} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_split_each_machine_at_the_steps_it_reached() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let created = BTreeMap::from([
            ("a".to_owned(), at(0)),
            ("b".to_owned(), at(100)),
            ("c".to_owned(), at(200)),
        ]);
        let seen = Milestones::default();
        seen.reached("a", Milestone::JobCreated, at(500));
        seen.reached("a", Milestone::JobCreated, at(900)); // a later sighting changes nothing
        seen.reached("a", Milestone::PodStarted, at(1_500));
        seen.reached("a", Milestone::PodRunning, at(2_000));
        seen.reached("b", Milestone::JobCreated, at(1_100));
        let ready = BTreeMap::from([("a".to_owned(), at(6_000)), ("b".to_owned(), at(9_000))]);

        let l = Latencies::of(&created, &seen, &ready);
        assert_eq!(l.queue, vec![1.5]);
        assert_eq!(l.manager, vec![0.5, 1.0]);
        assert_eq!(l.kubelet, vec![1.5]);
        assert_eq!(l.to_ready, vec![4.0]);
    }
}
