//! Fault harness (issue 19): bring-ups and deletions of a TerraformCluster with two
//! TerraformMachines while the manager is killed at random points (its task aborted, a crash at
//! whatever await point it had reached) and restarted after a random delay, with the invariants
//! of The Reconcile Lifecycle checked after every cycle and reported as a table: at most one Job
//! per (object, operation, attempt); no two Jobs of one object at once; every object Ready or
//! the reason it is not; nothing left after deletion (finalizer, Secret, Lease, runner RBAC); a
//! state serial that never goes backwards and a state never lost before its object is deleted;
//! no planted secret value in any log line, event, condition or status field.
//!
//! `chaos seed: N` is printed first; `CAPTF_CHAOS_SEED=N` replays the same kill and restart
//! delays (the system's own timing still varies); `CAPTF_CHAOS_CYCLES` sets the number of cycles
//! (5 by default, `make chaos` runs 50), spread over `CAPTF_CHAOS_LANES` namespaces run side by
//! side (2 by default, 5 in `make chaos`), each with its own manager.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::constants::labels;
use common::*;
use contract::names::{ObjectKind, state_secret_name, state_suffix};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// How long a cycle's bring-up, and then its deletion, may take under crashes.
const PHASE: Duration = Duration::from_secs(180);
/// How often a cycle looks at its objects (and plays Cluster API).
const POLL: Duration = Duration::from_millis(200);

/// A seeded xorshift64*: the kill schedule of a run, replayed from its seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A delay between zero and `max`, in whole milliseconds.
    fn delay(&mut self, max: Duration) -> Duration {
        let max = u64::try_from(max.as_millis()).unwrap();
        Duration::from_millis(self.next() % (max + 1))
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap())
}

/// One invariant's figures over a run: how many times it was checked, and what broke it.
#[derive(Debug, Default)]
struct Tally {
    checked: u64,
    violations: Vec<String>,
}

impl Tally {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.violations.push(what());
        }
    }

    fn merge(&mut self, other: Tally) {
        self.checked += other.checked;
        self.violations.extend(other.violations);
    }
}

/// The invariants, in the order the table prints them.
#[derive(Debug, Default)]
struct Figures {
    one_job_per_attempt: Tally,
    jobs_one_at_a_time: Tally,
    ready_or_why: Tally,
    nothing_left: Tally,
    state_kept: Tally,
    no_planted_secret: Tally,
    cycles: u64,
    kills: u64,
}

impl Figures {
    fn rows(&self) -> [(&'static str, &Tally); 6] {
        [
            (
                "at most one Job per (object, operation, attempt)",
                &self.one_job_per_attempt,
            ),
            (
                "no two Jobs of one object at once",
                &self.jobs_one_at_a_time,
            ),
            ("every object Ready or reports why", &self.ready_or_why),
            (
                "nothing left after deletion (finalizer, Secret, Lease, RBAC)",
                &self.nothing_left,
            ),
            (
                "state serial never backwards, state never lost",
                &self.state_kept,
            ),
            (
                "no planted secret in logs, events, conditions, status",
                &self.no_planted_secret,
            ),
        ]
    }

    fn merge(&mut self, other: Figures) {
        self.one_job_per_attempt.merge(other.one_job_per_attempt);
        self.jobs_one_at_a_time.merge(other.jobs_one_at_a_time);
        self.ready_or_why.merge(other.ready_or_why);
        self.nothing_left.merge(other.nothing_left);
        self.state_kept.merge(other.state_kept);
        self.no_planted_secret.merge(other.no_planted_secret);
        self.cycles += other.cycles;
        self.kills += other.kills;
    }

    fn table(&self, seed: u64, took: Duration) -> String {
        let mut out = String::new();
        writeln!(
            out,
            "{:<62} {:>8} {:>10}",
            "invariant", "checked", "violations"
        )
        .unwrap();
        for (name, t) in self.rows() {
            writeln!(
                out,
                "{name:<62} {:>8} {:>10}",
                t.checked,
                t.violations.len()
            )
            .unwrap();
        }
        write!(
            out,
            "cycles: {}, manager kills: {}, seed: {seed}, took: {} s",
            self.cycles,
            self.kills,
            took.as_secs()
        )
        .unwrap();
        out
    }

    fn violations(&self) -> Vec<String> {
        self.rows()
            .iter()
            .flat_map(|(name, t)| t.violations.iter().map(move |v| format!("{name}: {v}")))
            .collect()
    }
}

/// A Job as the recorder saw it: whose, which operation and attempt, and when it was active
/// (from when it was first seen until it was first seen finished or gone).
#[derive(Debug, Clone)]
struct SeenJob {
    name: String,
    owner: String,
    op: String,
    attempt: String,
    start: Instant,
    end: Option<Instant>,
    /// `Complete` or `Failed` once finished.
    outcome: String,
    gone: Option<Instant>,
}

impl SeenJob {
    /// What became of the Job, in seconds since `zero`, for a violation's message.
    fn story(&self, zero: Instant) -> String {
        let at = |t: Option<Instant>| {
            t.map_or("-".to_owned(), |t| {
                format!("{:.1}s", t.saturating_duration_since(zero).as_secs_f64())
            })
        };
        format!(
            "{} seen {} finished {} ({}) gone {}",
            self.name,
            at(Some(self.start)),
            at(self.end.filter(|_| !self.outcome.is_empty())),
            self.outcome,
            at(self.gone)
        )
    }
}

/// Everything the recorder saw in a namespace.
#[derive(Debug, Default)]
struct Seen {
    jobs: BTreeMap<String, SeenJob>,
    /// The highest serial each state Secret has shown.
    serials: BTreeMap<String, u64>,
    serial_reads: u64,
    rollbacks: Vec<String>,
    /// When each state Secret was seen deleted.
    state_gone: BTreeMap<String, Instant>,
}

fn label(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> String {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .cloned()
        .unwrap_or_default()
}

/// `Complete` or `Failed` once the Job finished, else empty.
fn finished(job: &Job) -> String {
    manager::bookkeeping::finished_condition(job)
        .map(|(complete, ..)| if complete { "Complete" } else { "Failed" })
        .unwrap_or_default()
        .to_owned()
}

impl Seen {
    fn job(&mut self, job: &Job, gone: bool) {
        let now = Instant::now();
        let meta = &job.metadata;
        let entry = self
            .jobs
            .entry(meta.uid.clone().unwrap_or_default())
            .or_insert_with(|| SeenJob {
                name: meta.name.clone().unwrap_or_default(),
                owner: format!(
                    "{}/{}",
                    label(meta, labels::OWNER_KIND),
                    label(meta, labels::OWNER_NAME)
                ),
                op: label(meta, labels::OP),
                attempt: label(meta, labels::ATTEMPT),
                start: now,
                end: None,
                outcome: String::new(),
                gone: None,
            });
        let outcome = finished(job);
        if entry.end.is_none() && (gone || !outcome.is_empty()) {
            entry.end = Some(now);
        }
        if entry.outcome.is_empty() {
            entry.outcome = outcome;
        }
        if gone {
            entry.gone = Some(now);
        }
    }

    fn secret(&mut self, secret: &Secret, gone: bool) {
        let name = secret.metadata.name.clone().unwrap_or_default();
        if !name.starts_with("tfstate-default-") {
            return;
        }
        if gone {
            self.state_gone.insert(name, Instant::now());
            return;
        }
        let Some(serial) = state_of(secret).and_then(|d| d["serial"].as_u64()) else {
            return;
        };
        self.serial_reads += 1;
        let highest = self.serials.entry(name.clone()).or_insert(serial);
        if serial < *highest {
            self.rollbacks
                .push(format!("{name}: serial {serial} after {highest}"));
        }
        *highest = serial.max(*highest);
    }
}

/// Watches every Job and Secret of a namespace into a [`Seen`], as they appear: the manager
/// deletes Jobs once bookkept, so a later list would miss them.
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    async fn start(client: &Client, ns: &str) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let jobs = record(
            Api::<Job>::namespaced(client.clone(), ns),
            seen.clone(),
            Seen::job,
        );
        let secrets = record(
            Api::<Secret>::namespaced(client.clone(), ns),
            seen.clone(),
            Seen::secret,
        );
        // Let both watches start before anything is created.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Self {
            seen,
            tasks: vec![jobs, secrets],
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn record<K>(
    api: Api<K>,
    seen: Arc<Mutex<Seen>>,
    on: fn(&mut Seen, &K, bool),
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(e) = events.next().await {
            let mut seen = seen.lock().unwrap();
            match e {
                Ok(Event::Apply(o) | Event::InitApply(o)) => on(&mut seen, &o, false),
                Ok(Event::Delete(o)) => on(&mut seen, &o, true),
                _ => {}
            }
        }
    })
}

/// The manager of one namespace, killed and restarted on a random schedule.
struct Chaos {
    /// The test's own client, for what Cluster API and users do.
    client: Client,
    /// The manager's client, with exactly its role.
    manager_client: Client,
    ns: String,
    images: Images,
    rng: Rng,
    lane: usize,
    manager: Option<RunningManager>,
    next: Instant,
    starts: u64,
    kills: u64,
}

impl Chaos {
    fn new(clients: (Client, Client), ns: &str, images: Images, lane: usize, seed: u64) -> Self {
        let mut chaos = Self {
            client: clients.0,
            manager_client: clients.1,
            ns: ns.to_owned(),
            images,
            rng: Rng::new(seed),
            lane,
            manager: None,
            next: Instant::now(),
            starts: 0,
            kills: 0,
        };
        chaos.tick();
        chaos
    }

    /// Kills the running manager once its random time has come (after 0–4 s), or starts a new
    /// one once its random delay is over (0–2 s).
    fn tick(&mut self) {
        if Instant::now() < self.next {
            return;
        }
        if let Some(m) = self.manager.take() {
            m.kill();
            self.kills += 1;
            self.next = Instant::now() + self.rng.delay(Duration::from_secs(2));
        } else {
            self.starts += 1;
            let instance = format!("chaos-{}-{}", self.lane, self.starts);
            self.manager = Some(start_manager(
                &self.manager_client,
                &self.ns,
                &self.images,
                &instance,
            ));
            self.next = Instant::now() + self.rng.delay(Duration::from_secs(4));
        }
    }

    /// Waits `d` while the schedule goes on.
    async fn sleep(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.tick();
            tokio::time::sleep(POLL.min(until - Instant::now())).await;
        }
    }
}

/// One cycle's objects: a TerraformCluster and two TerraformMachines (a control-plane one and a
/// worker), named after the lane and cycle.
struct Cycle {
    cluster: String,
    machines: [String; 2],
    credential: String,
    bootstrap: String,
}

impl Cycle {
    fn new(lane: usize, n: u64, credential: &str) -> Self {
        let cluster = format!("k{lane}x{n}");
        Self {
            machines: [format!("{cluster}-cp"), format!("{cluster}-md")],
            cluster,
            credential: credential.to_owned(),
            bootstrap: format!("planted-chaos-bootstrap-{lane}-{n}-e1b0c4"),
        }
    }

    fn objects(&self) -> Vec<(&'static str, &str)> {
        std::iter::once(("TerraformCluster", self.cluster.as_str()))
            .chain(
                self.machines
                    .iter()
                    .map(|m| ("TerraformMachine", m.as_str())),
            )
            .collect()
    }

    fn owners(&self) -> Vec<String> {
        self.objects()
            .into_iter()
            .map(|(kind, name)| format!("{kind}/{name}"))
            .collect()
    }

    fn state_secrets(&self, ns: &str) -> Vec<String> {
        self.objects()
            .into_iter()
            .map(|(kind, name)| {
                let kind = if kind == "TerraformCluster" {
                    ObjectKind::Cluster
                } else {
                    ObjectKind::Machine
                };
                state_secret_name(&state_suffix(ns, kind, name))
            })
            .collect()
    }
}

/// Creates the cycle's objects with their Cluster API owners, then plays Cluster API (the
/// Cluster's infrastructure provisioned once its TerraformCluster is Ready) until every object is
/// Ready, under crashes. Returns the objects as last read, and records any not Ready.
async fn bring_up(chaos: &mut Chaos, cycle: &Cycle, figures: &mut Figures) -> Vec<Value> {
    let (client, ns) = (chaos.client.clone(), chaos.ns.clone());
    let identity = format!("id-chaos-{}", chaos.lane);
    cluster(
        &client,
        &ns,
        &cycle.cluster,
        &identity,
        &chaos.images.cluster,
    )
    .await;
    for (i, m) in cycle.machines.iter().enumerate() {
        let value = format!("{}-{m}", cycle.bootstrap);
        machine(
            &client,
            &ns,
            &cycle.cluster,
            m,
            &chaos.images.machine,
            i == 0,
            &value,
        )
        .await;
    }
    let deadline = Instant::now() + PHASE;
    let mut provisioned = false;
    loop {
        let objects = read_objects(&client, &ns, cycle).await;
        let ready = |o: &Value| condition(o, "Ready").is_some_and(|c| c.0 == "True");
        if !provisioned && ready(&objects[0]) {
            capi_cluster_provisioned(&client, &ns, &cycle.cluster).await;
            provisioned = true;
        }
        let done = objects.iter().all(ready);
        if done || Instant::now() > deadline {
            for o in &objects {
                figures.ready_or_why.check(ready(o), || {
                    format!(
                        "{} not Ready after {PHASE:?}: {}",
                        who(o),
                        o["status"]["conditions"]
                    )
                });
            }
            return objects;
        }
        chaos.sleep(POLL).await;
    }
}

fn who(o: &Value) -> String {
    format!(
        "{} {}",
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

async fn read_objects(client: &Client, ns: &str, cycle: &Cycle) -> Vec<Value> {
    let mut out = Vec::new();
    for (kind, name) in cycle.objects() {
        out.push(get_json(client, ns, TC, kind, name).await);
    }
    out
}

/// Deletes the cycle's objects the way Cluster API does (the Machines and their bootstrap
/// Secrets, then the TerraformMachines; the TerraformCluster at once, which waits for them) and
/// waits, under crashes, until they are gone and nothing of theirs is left.
async fn tear_down(chaos: &mut Chaos, cycle: &Cycle, figures: &mut Figures) -> Instant {
    let (client, ns) = (chaos.client.clone(), chaos.ns.clone());
    let since = Instant::now();
    delete(&client, &ns, TC, "TerraformCluster", &cycle.cluster).await;
    for m in &cycle.machines {
        delete(&client, &ns, "cluster.x-k8s.io/v1beta2", "Machine", m).await;
        delete(&client, &ns, "v1", "Secret", &format!("{m}-bootstrap")).await;
        delete(&client, &ns, TC, "TerraformMachine", m).await;
    }
    let deadline = since + PHASE;
    let mut left = Vec::new();
    while Instant::now() < deadline {
        left = still_there(&client, &ns, cycle).await;
        if left.is_empty() {
            left = leftovers(&client, &ns).await;
        }
        if left.is_empty() {
            break;
        }
        chaos.sleep(POLL).await;
    }
    figures.nothing_left.check(left.is_empty(), || {
        format!("cycle {}: after {PHASE:?}: {left:?}", cycle.cluster)
    });
    delete(
        &client,
        &ns,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        &cycle.cluster,
    )
    .await;
    since
}

/// The cycle's objects still there, with their finalizers and conditions.
async fn still_there(client: &Client, ns: &str, cycle: &Cycle) -> Vec<String> {
    let mut left = Vec::new();
    for (kind, name) in cycle.objects() {
        if let Some(o) = get_json_opt(client, ns, TC, kind, name).await {
            left.push(format!(
                "{kind} {name} finalizers {} conditions {}",
                o["metadata"]["finalizers"], o["status"]["conditions"]
            ));
        }
    }
    left
}

/// Checks the Jobs and states the recorder saw for one cycle.
fn judge_recorded(seen: &Seen, cycle: &Cycle, ns: &str, deleting: Instant, figures: &mut Figures) {
    let owners = cycle.owners();
    let jobs: Vec<&SeenJob> = seen
        .jobs
        .values()
        .filter(|j| owners.contains(&j.owner))
        .collect();
    let mut per_attempt: BTreeMap<(&str, &str, &str), Vec<&SeenJob>> = BTreeMap::new();
    for j in &jobs {
        per_attempt
            .entry((&j.owner, &j.op, &j.attempt))
            .or_default()
            .push(j);
    }
    let zero = jobs
        .iter()
        .map(|j| j.start)
        .min()
        .unwrap_or_else(Instant::now);
    for (key, same) in per_attempt {
        figures.one_job_per_attempt.check(same.len() == 1, || {
            let stories: Vec<String> = same.iter().map(|j| j.story(zero)).collect();
            format!(
                "{key:?}: {stories:?} (deletion asked at {:.1}s)",
                deleting.saturating_duration_since(zero).as_secs_f64()
            )
        });
    }
    for (i, a) in jobs.iter().enumerate() {
        for b in jobs.iter().skip(i + 1).filter(|b| b.owner == a.owner) {
            let overlap = a.start < b.end.unwrap_or_else(Instant::now)
                && b.start < a.end.unwrap_or_else(Instant::now);
            figures.jobs_one_at_a_time.check(!overlap, || {
                format!("{} and {} ran at once", a.name, b.name)
            });
        }
    }
    for state in cycle.state_secrets(ns) {
        let serial = seen.serials.get(&state);
        figures.state_kept.check(serial.is_some(), || {
            format!("{state}: never seen with a state")
        });
        let gone = seen.state_gone.get(&state);
        figures
            .state_kept
            .check(gone.is_none_or(|t| *t >= deleting), || {
                format!("{state}: deleted before its object was")
            });
    }
}

/// Looks for the planted values in the objects as they were Ready, the namespace's events and
/// every log line.
async fn judge_secrets(client: &Client, ns: &str, cycle: &Cycle, ready: &[Value], t: &mut Tally) {
    let events = events_json(client, ns).await;
    let log = logs();
    let places = [
        (
            "status",
            json!(ready.iter().map(|o| &o["status"]).collect::<Vec<_>>()).to_string(),
        ),
        ("events", events),
        ("logs", log),
    ];
    let b64 = |v: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v);
    for planted in [cycle.credential.as_str(), cycle.bootstrap.as_str()] {
        let encoded = b64(planted);
        for (place, text) in &places {
            t.check(
                !text.contains(planted) && !text.contains(&encoded[..12]),
                || format!("{planted} found in {place}"),
            );
        }
    }
}

/// Runs `cycles` cycles one after the other in a namespace of its own, with its own identity and
/// manager.
async fn lane(lane: usize, cycles: u64, seed: u64) -> Figures {
    let (env, images) = setup().await;
    let admin = env.client().await.unwrap();
    let ns = env.namespace(&format!("chaos-{lane}")).await.unwrap();
    let credential = format!("planted-chaos-credential-{lane}-9b2e71");
    identity(
        &admin,
        &format!("id-chaos-{lane}"),
        &[ns.as_str()],
        &credential,
    )
    .await;
    let clients = (admin.clone(), manager_client(env, &admin).await);
    let recorder = Recorder::start(&admin, &ns).await;
    let mut chaos = Chaos::new(clients, &ns, images, lane, seed);
    let mut figures = Figures::default();
    for n in 0..cycles {
        let cycle = Cycle::new(lane, n, &credential);
        let ready = bring_up(&mut chaos, &cycle, &mut figures).await;
        let deleting = tear_down(&mut chaos, &cycle, &mut figures).await;
        // Whatever the last Jobs did is in the recorder by now.
        tokio::time::sleep(Duration::from_millis(500)).await;
        judge_recorded(
            &recorder.seen.lock().unwrap(),
            &cycle,
            &ns,
            deleting,
            &mut figures,
        );
        judge_secrets(&admin, &ns, &cycle, &ready, &mut figures.no_planted_secret).await;
        figures.cycles += 1;
        eprintln!(
            "chaos lane {lane}: cycle {n} done, {} kills so far",
            chaos.kills
        );
    }
    let seen = recorder.seen.lock().unwrap();
    figures.state_kept.checked += seen.serial_reads;
    figures
        .state_kept
        .violations
        .extend(seen.rollbacks.iter().cloned());
    figures.kills = chaos.kills;
    figures
}

/// Bring-ups and deletions, cycle after cycle, while the manager crashes at random points and
/// comes back after a random delay: no duplicate or overlapping Job, every object Ready, nothing
/// left after deletion, no state rolled back or lost, no secret shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bring_ups_and_deletions_survive_random_manager_crashes() {
    let seed = env_u64("CAPTF_CHAOS_SEED").unwrap_or_else(|| {
        u64::from(std::process::id()) ^ std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64
    });
    let cycles = env_u64("CAPTF_CHAOS_CYCLES").unwrap_or(5);
    let lanes = env_u64("CAPTF_CHAOS_LANES")
        .unwrap_or(2)
        .clamp(1, cycles.max(1));
    println!("chaos seed: {seed}");
    let started = Instant::now();
    let (env, _) = setup().await;
    install_runner_cluster_role(&env.client().await.unwrap()).await;
    let mut rng = Rng::new(seed);
    let runs = (0..lanes).map(|l| {
        let share = cycles / lanes + u64::from(l < cycles % lanes);
        lane(usize::try_from(l).unwrap(), share, rng.next())
    });
    let mut figures = Figures::default();
    for f in futures::future::join_all(runs).await {
        figures.merge(f);
    }
    println!("{}", figures.table(seed, started.elapsed()));
    let violations = figures.violations();
    if !violations.is_empty() {
        let path = std::env::temp_dir().join(format!("captf-chaos-{seed}.log"));
        std::fs::write(&path, logs()).unwrap();
        println!("the managers' logs: {}", path.display());
    }
    assert!(
        violations.is_empty(),
        "chaos seed {seed}: {} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}
