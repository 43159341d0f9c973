//! Fault harness (issue 19): bring-ups and deletions of a TerraformCluster with two
//! TerraformMachines while the manager is killed at random points (its task aborted, a crash at
//! whatever await point it had reached) and restarted after a random delay; while, in every other
//! lane, two managers run under leader election and either may be killed, the leader included;
//! while runner pods are killed (SIGKILL), evicted, or deleted (the runner SIGTERMed mid-run);
//! and while the API server is restarted and etcd paused under all the lanes. The invariants
//! of The Reconcile Lifecycle checked after every cycle and reported as a table: at most one Job
//! that ran per (object, operation, attempt) (a stuck Job, deleted and made again, never ran);
//! no two Jobs of one object at once; every object Ready or the reason it is not; nothing left after deletion (finalizer, Secret, Lease, runner RBAC); a
//! state serial that never goes backwards and a state never lost before its object is deleted;
//! no planted secret value in any log line, event, condition or status field; and, where two
//! managers run, never two leading at once.
//!
//! `chaos seed: N` is printed first; `CAPTF_CHAOS_SEED=N` replays the same kill and restart
//! delays (the system's own timing still varies); `CAPTF_CHAOS_CYCLES` sets the number of cycles
//! (5 by default, `make chaos` runs 50), spread over `CAPTF_CHAOS_LANES` namespaces run side by
//! side (2 by default, 5 in `make chaos`), each with its own managers. The managers' logs are
//! kept in `<tmp>/captf-chaos-<seed>.log` after a violation, or always with
//! `CAPTF_CHAOS_KEEP_LOGS=1`.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::constants::labels;
use common::*;
use contract::names::{ObjectKind, state_secret_name, state_suffix};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, EvictParams, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// How long a cycle's bring-up, and then its deletion, may take under faults: a runner pod
/// killed, or an apply cut by an API-server restart, fails its Job, and the retry comes a minute
/// later (The Reconcile Lifecycle's retry backoff), two minutes after a second failure.
const PHASE: Duration = Duration::from_secs(420);
/// A plain manager is killed 0–4 s after it starts; a candidate under leader election 0–8 s
/// after (half the kills hit the one that does not lead); either restarts 0–2 s later.
const LIFE: Duration = Duration::from_secs(4);
const LIFE_ELECTED: Duration = Duration::from_secs(8);
const RESTART: Duration = Duration::from_secs(2);
/// Leader-election timing of the candidates: short, so takeovers happen within a cycle.
const LEASE: Duration = Duration::from_secs(3);
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);

/// The test's own API calls wait behind this while the control plane is faulted: the test plays
/// Cluster API and the user, whose retries are not under test. The managers and the runner pods,
/// which are, never wait for it.
static API_GATE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Runs one of the test's own API calls once the control plane is not being faulted.
async fn gated<T>(f: impl Future<Output = T>) -> T {
    let _open = API_GATE.read().await;
    f.await
}
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
    one_leader: Tally,
    cycles: u64,
    kills: u64,
    leader_kills: u64,
    /// From a leader's kill to the next manager leading.
    takeovers: Vec<Duration>,
    /// Candidates that lost the Lease (they could not renew in time) and exited.
    leases_lost: u64,
    pod_faults: BTreeMap<&'static str, u64>,
    /// The Jobs seen, by how they ended (`Complete`, `Failed`, or deleted unfinished), and how
    /// many were retries (attempt above 1).
    job_outcomes: BTreeMap<String, u64>,
    retries: u64,
    control_plane: ControlPlaneFaults,
}

/// The faults injected into the control plane under every lane.
#[derive(Debug, Default)]
struct ControlPlaneFaults {
    api_restarts: u64,
    /// The longest time from an API server's kill until it served again.
    api_down_max: Duration,
    etcd_pauses: u64,
    etcd_paused: Duration,
}

impl Figures {
    fn rows(&self) -> [(&'static str, &Tally); 7] {
        [
            (
                "at most one Job that ran per (object, operation, attempt)",
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
            (
                "one leader at a time (sampled every 200 ms)",
                &self.one_leader,
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
        self.one_leader.merge(other.one_leader);
        self.cycles += other.cycles;
        self.kills += other.kills;
        self.leader_kills += other.leader_kills;
        self.takeovers.extend(other.takeovers);
        self.leases_lost += other.leases_lost;
        for (fault, n) in other.pod_faults {
            *self.pod_faults.entry(fault).or_default() += n;
        }
        for (outcome, n) in other.job_outcomes {
            *self.job_outcomes.entry(outcome).or_default() += n;
        }
        self.retries += other.retries;
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
        writeln!(
            out,
            "cycles: {}, manager kills: {}, seed: {seed}, took: {} s",
            self.cycles,
            self.kills,
            took.as_secs()
        )
        .unwrap();
        let slowest = self.takeovers.iter().max().copied().unwrap_or_default();
        writeln!(
            out,
            "leader kills: {}, takeovers: {} (slowest {:.1} s), leases lost and given up: {}",
            self.leader_kills,
            self.takeovers.len(),
            slowest.as_secs_f64(),
            self.leases_lost
        )
        .unwrap();
        writeln!(out, "runner pod faults: {:?}", self.pod_faults).unwrap();
        writeln!(
            out,
            "Jobs by outcome: {:?}, retries (attempt > 1): {}",
            self.job_outcomes, self.retries
        )
        .unwrap();
        let cp = &self.control_plane;
        write!(
            out,
            "API server restarts: {} (longest outage {:.1} s), etcd pauses: {} ({:.1} s in all)",
            cp.api_restarts,
            cp.api_down_max.as_secs_f64(),
            cp.etcd_pauses,
            cp.etcd_paused.as_secs_f64()
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
    /// Whether a pod of it was ever seen ready (`status.ready`), the manager's own test of a
    /// Job that started.
    started: bool,
}

impl SeenJob {
    /// Whether it ran: a pod of it started, or it finished. A Job that did neither and was deleted
    /// was a stuck one (no per-run Secret, no pod ever, a minute old: The Reconcile Lifecycle),
    /// which the manager deletes and creates again under the same attempt.
    fn ran(&self) -> bool {
        self.started || !self.outcome.is_empty()
    }

    /// What became of the Job, in seconds since `zero`, for a violation's message.
    fn story(&self, zero: Instant) -> String {
        let at = |t: Option<Instant>| {
            t.map_or("-".to_owned(), |t| {
                format!("{:.1}s", t.saturating_duration_since(zero).as_secs_f64())
            })
        };
        format!(
            "{} seen {} finished {} ({}) gone {}{}",
            self.name,
            at(Some(self.start)),
            at(self.end.filter(|_| !self.outcome.is_empty())),
            self.outcome,
            at(self.gone),
            if self.started {
                ""
            } else {
                ", no pod ever ready"
            }
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
    manager::reconcile::bookkeeping::finished_condition(job)
        .map(|(complete, ..)| if complete { "Complete" } else { "Failed" })
        .unwrap_or_default()
        .to_owned()
}

impl Seen {
    fn job(&mut self, job: &Job, gone: bool, now: Instant) {
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
                started: false,
            });
        entry.started |= job
            .status
            .as_ref()
            .and_then(|s| s.ready)
            .is_some_and(|n| n > 0);
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

    fn secret(&mut self, secret: &Secret, gone: bool, now: Instant) {
        let name = secret.metadata.name.clone().unwrap_or_default();
        if !name.starts_with("tfstate-default-") {
            return;
        }
        if gone {
            self.state_gone.insert(name, now);
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

impl Seen {
    /// After a relist (the watch was broken, as by an API-server restart, and listed again from
    /// scratch): a Job not listed was deleted while the watch was down, before the list began.
    fn jobs_relisted(&mut self, listed: &BTreeSet<String>, at: Instant) {
        for (uid, j) in &mut self.jobs {
            if j.gone.is_none() && !listed.contains(uid) {
                j.end.get_or_insert(at);
                j.gone = Some(at);
            }
        }
    }
}

/// After a relist: a state Secret not listed is not judged (when it went is unknown).
fn secrets_relisted(_: &mut Seen, _: &BTreeSet<String>, _: Instant) {}

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
            (Seen::job, Seen::jobs_relisted),
        );
        let secrets = record(
            Api::<Secret>::namespaced(client.clone(), ns),
            seen.clone(),
            (Seen::secret, secrets_relisted),
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

/// What the recorder does with an object (seen, or gone) and after a relist.
type OnEvents<K> = (
    fn(&mut Seen, &K, bool, Instant),
    fn(&mut Seen, &BTreeSet<String>, Instant),
);

/// Everything a relist lists counts as seen when the list began: the order of a list says
/// nothing of when its objects changed.
fn record<K>(api: Api<K>, seen: Arc<Mutex<Seen>>, on: OnEvents<K>) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut relist: Option<(Instant, BTreeSet<String>)> = None;
        while let Some(e) = events.next().await {
            let mut seen = seen.lock().unwrap();
            match e {
                Ok(Event::Init) => relist = Some((Instant::now(), BTreeSet::new())),
                Ok(Event::InitApply(o)) => {
                    let at = relist.as_ref().map_or_else(Instant::now, |r| r.0);
                    if let Some((_, listed)) = relist.as_mut() {
                        listed.insert(o.meta().uid.clone().unwrap_or_default());
                    }
                    on.0(&mut seen, &o, false, at);
                }
                Ok(Event::InitDone) => {
                    if let Some((at, listed)) = relist.take() {
                        on.1(&mut seen, &listed, at);
                    }
                }
                Ok(Event::Apply(o)) => on.0(&mut seen, &o, false, Instant::now()),
                Ok(Event::Delete(o)) => on.0(&mut seen, &o, true, Instant::now()),
                Err(_) => {}
            }
        }
    })
}

/// The manager of one namespace, killed and restarted on a random schedule.
/// A manager the harness runs: plain, or a candidate under leader election. Dropping it kills it.
struct Candidate {
    task: tokio::task::JoinHandle<()>,
    /// Set once it reconciles: at once for a plain manager, once it leads for a candidate.
    leads: Arc<AtomicBool>,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One manager's place in a lane: running, or dead until `next`; or running until `next`.
struct Slot {
    manager: Option<Candidate>,
    next: Instant,
}

/// A runner pod fault.
#[derive(Debug, Clone, Copy)]
enum PodFault {
    /// Deleted with a grace period of 0: the runner is killed mid-run, its state lock left held.
    Kill,
    /// Every running runner pod of the lane evicted, as a node drain does.
    Evict,
    /// Deleted with its grace period: the runner gets SIGTERM mid-run.
    Terminate,
}

impl PodFault {
    fn name(self) -> &'static str {
        match self {
            PodFault::Kill => "pod killed",
            PodFault::Evict => "pods evicted",
            PodFault::Terminate => "runner SIGTERMed",
        }
    }
}

struct Chaos {
    /// The test's own client, for what Cluster API and users do.
    client: Client,
    /// The manager's client, with exactly its role.
    manager_client: Client,
    ns: String,
    images: Images,
    rng: Rng,
    lane: usize,
    /// Two candidates under leader election, or one plain manager.
    elected: bool,
    slots: Vec<Slot>,
    starts: u64,
    kills: u64,
    leader_kills: u64,
    leader_killed_at: Option<Instant>,
    takeovers: Vec<Duration>,
    leases_lost: u64,
    one_leader: Tally,
    /// The runner pod fault due in this phase of the cycle, and from when.
    pod_fault: Option<(Instant, PodFault)>,
    /// Phases (bring-ups and deletions) begun.
    phases: u64,
    pod_faults: BTreeMap<&'static str, u64>,
}

impl Chaos {
    fn new(clients: (Client, Client), ns: &str, images: Images, lane: usize, seed: u64) -> Self {
        let elected = lane % 2 == 1;
        let now = Instant::now();
        let slots = (0..if elected { 2 } else { 1 })
            .map(|_| Slot {
                manager: None,
                next: now,
            })
            .collect();
        let mut chaos = Self {
            client: clients.0,
            manager_client: clients.1,
            ns: ns.to_owned(),
            images,
            rng: Rng::new(seed),
            lane,
            elected,
            slots,
            starts: 0,
            kills: 0,
            leader_kills: 0,
            leader_killed_at: None,
            takeovers: Vec::new(),
            leases_lost: 0,
            one_leader: Tally::default(),
            pod_fault: None,
            phases: 0,
            pod_faults: BTreeMap::new(),
        };
        chaos.tick();
        chaos
    }

    /// Starts a manager: plain, or a candidate that reconciles only while it holds the lane's
    /// Lease (`manager::runtime::leader::Election::lead`, as the binary runs it).
    fn start(&mut self) -> Candidate {
        self.starts += 1;
        let instance = format!("chaos-{}-{}", self.lane, self.starts);
        let ctx = manager_context(
            &self.manager_client,
            &self.ns,
            &self.images,
            &instance,
            |_| {},
        );
        let leads = Arc::new(AtomicBool::new(false));
        let flag = leads.clone();
        let reconcile = move || {
            flag.store(true, Ordering::SeqCst);
            manager::controller::run(ctx, std::future::pending())
        };
        let task = if self.elected {
            let election = manager::runtime::leader::Election::new(
                self.ns.clone(),
                instance,
                manager::runtime::leader::Timing {
                    lease_duration: LEASE,
                    renew_deadline: RENEW_DEADLINE,
                    retry_period: RETRY,
                },
            );
            let client = self.manager_client.clone();
            tokio::spawn(async move {
                Box::pin(election.lead(&client, reconcile, std::future::pending())).await;
            })
        } else {
            tokio::spawn(reconcile())
        };
        Candidate { task, leads }
    }

    /// Kills each running manager once its random time has come, or starts a dead one once its
    /// random delay is over. A candidate that lost the Lease has exited, as the binary does, and
    /// restarts like a killed one.
    fn tick(&mut self) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            if self.slots[i]
                .manager
                .as_ref()
                .is_some_and(|c| c.task.is_finished())
            {
                self.slots[i].manager = None;
                self.leases_lost += 1;
                self.slots[i].next = now + self.rng.delay(RESTART);
            }
            if now < self.slots[i].next {
                continue;
            }
            if let Some(killed) = self.slots[i].manager.take() {
                self.kills += 1;
                if self.elected && killed.leads.load(Ordering::SeqCst) {
                    self.leader_kills += 1;
                    self.leader_killed_at = Some(now);
                }
                drop(killed);
                self.slots[i].next = now + self.rng.delay(RESTART);
            } else {
                let started = self.start();
                self.slots[i].manager = Some(started);
                let life = if self.elected { LIFE_ELECTED } else { LIFE };
                self.slots[i].next = now + self.rng.delay(life);
            }
        }
        if self.elected {
            self.watch_leaders(now);
        }
    }

    /// Never two live candidates leading at once; the time from a leader's kill to the next
    /// leader.
    fn watch_leaders(&mut self, now: Instant) {
        let leading = self
            .slots
            .iter()
            .filter_map(|s| s.manager.as_ref())
            .filter(|c| !c.task.is_finished() && c.leads.load(Ordering::SeqCst))
            .count();
        self.one_leader.check(leading <= 1, || {
            format!("lane {}: {leading} managers lead at once", self.lane)
        });
        if leading == 1
            && let Some(killed) = self.leader_killed_at.take()
        {
            self.takeovers.push(now - killed);
        }
    }

    /// Schedules a runner pod fault 0–4 s into the phase starting now (it hits the first runner
    /// pod running from then on): in each lane's first two phases, so that two lanes inject all
    /// three kinds; then with one chance in three.
    fn plan_pod_fault(&mut self) {
        let faults = [PodFault::Kill, PodFault::Evict, PodFault::Terminate];
        let phase = self.phases;
        self.phases += 1;
        self.pod_fault = None;
        let fault = if phase < 2 {
            faults[(2 * self.lane + usize::try_from(phase).unwrap()) % 3]
        } else if self.rng.next().is_multiple_of(3) {
            faults[usize::try_from(self.rng.next() % 3).unwrap()]
        } else {
            return;
        };
        let at = Instant::now() + self.rng.delay(Duration::from_secs(4));
        self.pod_fault = Some((at, fault));
    }

    /// Injects the due runner pod fault into the lane's running runner pods, if one runs.
    async fn pod_fault(&mut self) {
        let Some((at, fault)) = self.pod_fault else {
            return;
        };
        if Instant::now() < at {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let Ok(list) = gated(pods.list(&ListParams::default())).await else {
            return;
        };
        let running: Vec<String> = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let Some(first) = running.first() else {
            return;
        };
        let hit = match fault {
            PodFault::Kill => {
                let now = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                };
                gated(pods.delete(first, &now)).await.is_ok()
            }
            PodFault::Terminate => gated(pods.delete(first, &DeleteParams::default()))
                .await
                .is_ok(),
            PodFault::Evict => {
                let mut any = false;
                for name in &running {
                    any |= gated(pods.evict(name, &EvictParams::default()))
                        .await
                        .is_ok();
                }
                any
            }
        };
        if hit {
            *self.pod_faults.entry(fault.name()).or_default() += 1;
            self.pod_fault = None;
        }
    }

    /// Waits `d` while the schedule goes on.
    async fn sleep(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.tick();
            self.pod_fault().await;
            tokio::time::sleep(POLL.min(until.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// The lane's figures of its managers and pod faults.
    fn into_figures(self, figures: &mut Figures) {
        figures.kills = self.kills;
        figures.leader_kills = self.leader_kills;
        figures.takeovers = self.takeovers;
        figures.leases_lost = self.leases_lost;
        figures.pod_faults = self.pod_faults;
        figures.one_leader.merge(self.one_leader);
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
    chaos.plan_pod_fault();
    gated(cluster(
        &client,
        &ns,
        &cycle.cluster,
        &identity,
        &chaos.images.cluster,
    ))
    .await;
    for (i, m) in cycle.machines.iter().enumerate() {
        let value = format!("{}-{m}", cycle.bootstrap);
        gated(machine(
            &client,
            &ns,
            &cycle.cluster,
            m,
            &chaos.images.machine,
            i == 0,
            &value,
        ))
        .await;
    }
    let deadline = Instant::now() + PHASE;
    let mut provisioned = false;
    loop {
        let objects = gated(read_objects(&client, &ns, cycle)).await;
        let ready = |o: &Value| condition(o, "Ready").is_some_and(|c| c.0 == "True");
        if !provisioned && ready(&objects[0]) {
            gated(capi_cluster_provisioned(&client, &ns, &cycle.cluster)).await;
            provisioned = true;
        }
        let done = objects.iter().all(ready);
        if done || Instant::now() > deadline {
            chaos.pod_fault = None;
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
    chaos.plan_pod_fault();
    let since = Instant::now();
    let open = API_GATE.read().await;
    delete(&client, &ns, TC, "TerraformCluster", &cycle.cluster).await;
    for m in &cycle.machines {
        delete(&client, &ns, "cluster.x-k8s.io/v1beta2", "Machine", m).await;
        delete(&client, &ns, "v1", "Secret", &format!("{m}-bootstrap")).await;
        delete(&client, &ns, TC, "TerraformMachine", m).await;
    }
    drop(open);
    let deadline = since + PHASE;
    let mut left = Vec::new();
    while Instant::now() < deadline {
        left = gated(still_there(&client, &ns, cycle)).await;
        if left.is_empty() {
            left = gated(leftovers(&client, &ns)).await;
        }
        if left.is_empty() {
            break;
        }
        chaos.sleep(POLL).await;
    }
    figures.nothing_left.check(left.is_empty(), || {
        format!("cycle {}: after {PHASE:?}: {left:?}", cycle.cluster)
    });
    chaos.pod_fault = None;
    gated(delete(
        &client,
        &ns,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        &cycle.cluster,
    ))
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
        let ran = same.iter().filter(|j| j.ran()).count();
        figures.one_job_per_attempt.check(ran <= 1, || {
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
    let open = API_GATE.read().await;
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
    drop(open);
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
        gated(judge_secrets(
            &admin,
            &ns,
            &cycle,
            &ready,
            &mut figures.no_planted_secret,
        ))
        .await;
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
    for j in seen.jobs.values() {
        let outcome = if j.outcome.is_empty() {
            "deleted unfinished".to_owned()
        } else {
            j.outcome.clone()
        };
        *figures.job_outcomes.entry(outcome).or_default() += 1;
        figures.retries += u64::from(j.attempt.parse::<u64>().is_ok_and(|a| a > 1));
    }
    drop(seen);
    chaos.into_figures(&mut figures);
    figures
}

/// Restarts the API server and pauses etcd under every lane until `done`: the first fault comes
/// 15–45 s in and is a restart, the second is a pause of 2–6 s, then either, 30–90 s apart. The
/// test's own API calls wait while a fault lasts ([`API_GATE`]); the managers' and the runner
/// pods' do not.
async fn control_plane_faults(
    env: &'static testenv::TestEnv,
    seed: u64,
    mut done: tokio::sync::watch::Receiver<bool>,
) -> ControlPlaneFaults {
    let mut rng = Rng::new(seed);
    let mut faults = ControlPlaneFaults::default();
    let cp = env.control_plane();
    let mut wait = Duration::from_secs(15) + rng.delay(Duration::from_secs(30));
    for n in 0_u64.. {
        tokio::select! {
            _ = done.wait_for(|d| *d) => break,
            () = tokio::time::sleep(wait) => {}
        }
        let restart = n == 0 || (n > 1 && rng.next().is_multiple_of(2));
        let closed = API_GATE.write().await;
        if restart {
            let down = Instant::now();
            cp.restart_api_server().expect("the API server restarts");
            let took = cp
                .wait_api_ready(Duration::from_secs(120))
                .await
                .expect("the restarted API server serves");
            eprintln!("chaos: API server restarted, serving again after {took:.1?}");
            faults.api_restarts += 1;
            faults.api_down_max = faults.api_down_max.max(down.elapsed());
        } else {
            let pause = Duration::from_secs(2) + rng.delay(Duration::from_secs(4));
            cp.pause_etcd().expect("etcd pauses");
            tokio::time::sleep(pause).await;
            cp.resume_etcd().expect("etcd resumes");
            eprintln!("chaos: etcd paused for {pause:.1?}");
            faults.etcd_pauses += 1;
            faults.etcd_paused += pause;
        }
        drop(closed);
        wait = Duration::from_secs(30) + rng.delay(Duration::from_secs(60));
    }
    faults
}

/// Bring-ups and deletions, cycle after cycle, while managers crash at random points and come
/// back after a random delay (a leader among them), runner pods are killed, evicted and
/// SIGTERMed, the API server restarts and etcd pauses: no duplicate or overlapping Job, every
/// object Ready, nothing left after deletion, no state rolled back or lost, no secret shown,
/// never two leaders.
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
    let runs: Vec<_> = (0..lanes)
        .map(|l| {
            let share = cycles / lanes + u64::from(l < cycles % lanes);
            lane(usize::try_from(l).unwrap(), share, rng.next())
        })
        .collect();
    let (done, until_done) = tokio::sync::watch::channel(false);
    let faults = tokio::spawn(control_plane_faults(env, rng.next(), until_done));
    let mut figures = Figures::default();
    for f in futures::future::join_all(runs).await {
        figures.merge(f);
    }
    done.send(true).unwrap();
    figures.control_plane = faults.await.unwrap();
    println!("{}", figures.table(seed, started.elapsed()));
    let violations = figures.violations();
    if !violations.is_empty() || std::env::var_os("CAPTF_CHAOS_KEEP_LOGS").is_some() {
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
