//! Run leases and the cluster operation gate (spec: The Reconcile Lifecycle "Run leases and the
//! cluster operation gate"; INTERFACE-FACTS §7 `captf.io/lease`, §9 Leases): the object's run
//! lease `captf-run-<suffix>` and the cluster's write lease `captf-cluster-<hash>`, each held by
//! the name of the Job that took it, and given back when that Job is bookkept.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::constants::{annotations, labels, lease_kinds};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::runtime::kubeutil::{get_opt, is_conflict};

/// How long a lease is held from its acquire time before its Job exists: the Job is created
/// right after the leases are taken, and a cluster that waits for its machines' operations
/// renews its leases at every recheck (every 30 s) until its Job starts.
pub const GRACE: Duration = Duration::from_secs(90);

/// Whether a Job is still running (no Complete or Failed condition).
pub fn job_active(job: &Job) -> bool {
    crate::runtime::kubeutil::finished_condition(job).is_none()
}

/// When this manager first saw each run or cluster lease record (its holder and acquire time)
/// unchanged, on its own monotonic clock. A lease whose Job does not exist yet is held for
/// [`GRACE`] from then, as leader election judges a Lease: never by comparing the acquire time
/// another manager wrote with this machine's wall clock, which may be skewed by minutes. A
/// manager that starts sees every record for the first time, so it waits a whole grace period
/// before it takes over a lease nobody's Job holds.
#[derive(Debug, Clone, Default)]
pub struct LeaseClock(Arc<Mutex<HashMap<String, (String, Instant)>>>);

impl LeaseClock {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Instant)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long the record of `lease` has been seen unchanged, at `now`.
    pub fn age(&self, lease: &Lease, now: Instant) -> Duration {
        let (key, record) = (lease_key(lease), lease_record(lease));
        let mut map = self.map();
        if map.len() > 4096 {
            // Records not seen for long are of leases long gone or long taken.
            map.retain(|_, (_, at)| now.saturating_duration_since(*at) < GRACE * 10);
        }
        let entry = map.entry(key).or_insert_with(|| (record.clone(), now));
        if entry.0 != record {
            *entry = (record, now);
        }
        now.saturating_duration_since(entry.1)
    }

    /// Records `lease` as this manager just wrote it.
    pub fn wrote(&self, lease: &Lease, now: Instant) {
        self.map()
            .insert(lease_key(lease), (lease_record(lease), now));
    }
}

fn lease_key(lease: &Lease) -> String {
    format!(
        "{}/{}",
        lease.metadata.namespace.as_deref().unwrap_or_default(),
        lease.metadata.name.as_deref().unwrap_or_default()
    )
}

fn lease_record(lease: &Lease) -> String {
    let spec = lease.spec.as_ref();
    format!(
        "{}@{}",
        spec.and_then(|s| s.holder_identity.as_deref())
            .unwrap_or_default(),
        spec.and_then(|s| s.acquire_time.as_ref())
            .map(|t| t.0.to_string())
            .unwrap_or_default()
    )
}

/// Whether `lease` is held: by a Job that is still running, or by a Job not created yet whose
/// lease record this manager has seen unchanged for less than [`GRACE`] (`age`, from a
/// [`LeaseClock`]).
pub fn held(lease: &Lease, holder_job: Option<&Job>, age: Duration) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return false;
    };
    if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
        return false;
    }
    match holder_job {
        Some(job) => job_active(job),
        None => age < GRACE,
    }
}

async fn holder_held(jobs: &Api<Job>, clock: &LeaseClock, lease: &Lease) -> kube::Result<bool> {
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    if holder.is_empty() {
        return Ok(false);
    }
    let job = get_opt(jobs, &holder).await?;
    Ok(held(lease, job.as_ref(), clock.age(lease, Instant::now())))
}

/// What taking a lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// Held by this Job now; `created` when the lease did not exist before.
    Taken {
        /// The lease was created by this take.
        created: bool,
        /// This very Job held the lease already (the write replaced the version that showed it).
        held_already: bool,
    },
    /// Held by another live Job.
    HeldBy(String),
}

/// The labels every CAPTF lease carries.
pub fn lease_labels(
    kind: &str,
    owner_kind: &str,
    owner_name: &str,
    cluster: &str,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::LEASE.to_owned(), kind.to_owned()),
        (labels::OWNER_KIND.to_owned(), owner_kind.to_owned()),
        (
            labels::OWNER_NAME.to_owned(),
            contract::names::owner_name_label(owner_name),
        ),
        (labels::CLUSTER_NAME.to_owned(), cluster.to_owned()),
    ])
}

/// How many times a lease write is tried: the first from the cache, the others after a GET.
const TRIES: usize = 4;

/// Lease `name` of `ns` as the cache shows it.
fn cached(cache: &Store<Lease>, ns: &str, name: &str) -> Option<Lease> {
    cache
        .get(&ObjectRef::new(name).within(ns))
        .map(|l| Lease::clone(&l))
}

fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
}

/// Takes the lease `name` for Job `job`: created when missing, taken over when its holder Job is
/// gone or finished, kept when this Job already holds it.
///
/// The first try trusts the cache (`cache`) only where a write checks it: a lease it does not
/// show is created (refused with a conflict when it exists), one it shows free or held by `job`
/// is replaced under the cached resourceVersion (refused with a conflict when the lease changed).
/// A refused write, and a lease the cache shows held by another Job, are read from the API server
/// and tried again: no decision that a lease is held rests on the cache.
#[allow(clippy::too_many_arguments)]
pub async fn take(
    client: &kube::Client,
    clock: &LeaseClock,
    cache: &Store<Lease>,
    ns: &str,
    name: &str,
    job: &str,
    op: &str,
    lease_labels: BTreeMap<String, String>,
) -> kube::Result<Take> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let now = Timestamp::now();
    let annotations = BTreeMap::from([
        (annotations::LEASE_OP.to_owned(), op.to_owned()),
        (annotations::LEASE_ACQUIRED_AT.to_owned(), now.to_string()),
    ]);
    let spec = LeaseSpec {
        holder_identity: Some(job.to_owned()),
        acquire_time: Some(MicroTime(now)),
        ..LeaseSpec::default()
    };
    let mut from_cache = Some(cached(cache, ns, name));
    for _ in 0..TRIES {
        let trusted = from_cache.is_none();
        let found = match from_cache.take() {
            Some(lease) => lease,
            None => get_opt(&api, name).await?,
        };
        match found {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(ns.to_owned()),
                        labels: Some(lease_labels.clone()),
                        annotations: Some(annotations.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec.clone()),
                };
                match api.create(&PostParams::default(), &lease).await {
                    Ok(written) => {
                        clock.wrote(&written, Instant::now());
                        return Ok(Take::Taken {
                            created: true,
                            held_already: false,
                        });
                    }
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(mut lease) => {
                let holder = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default();
                // Held by this very Job (a pass that waits renews it) or free to take.
                if holder != job && holder_held(&jobs, clock, &lease).await? {
                    if !trusted {
                        continue;
                    }
                    return Ok(Take::HeldBy(holder));
                }
                lease.spec = Some(spec.clone());
                lease.metadata.annotations = Some(annotations.clone());
                lease.metadata.labels = Some(lease_labels.clone());
                match api.replace(name, &PostParams::default(), &lease).await {
                    Ok(written) => {
                        clock.wrote(&written, Instant::now());
                        return Ok(Take::Taken {
                            created: false,
                            held_already: holder == job,
                        });
                    }
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(Take::HeldBy("another reconcile".to_owned()))
}

/// Gives the lease `name` back when `job` holds it. The first try uses the cache (`cache`) when it
/// shows `job` holding the lease: the write, under the cached resourceVersion, is refused with a
/// conflict when the lease changed since. Otherwise, and after a conflict, the lease is read from
/// the API server (a lease taken in this very pass is not in the cache yet).
pub async fn give_back(
    client: &kube::Client,
    cache: &Store<Lease>,
    ns: &str,
    name: &str,
    job: &str,
) -> kube::Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut from_cache = cached(cache, ns, name)
        .filter(|l| holder_of(l) == Some(job))
        .map(Some);
    for _ in 0..TRIES {
        let found = match from_cache.take() {
            Some(lease) => lease,
            None => get_opt(&api, name).await?,
        };
        let Some(mut lease) = found else {
            return Ok(());
        };
        if holder_of(&lease) != Some(job) {
            return Ok(());
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.acquire_time = None;
        }
        match api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The live Job holding lease `name`, if any.
pub async fn live_holder(
    client: &kube::Client,
    clock: &LeaseClock,
    ns: &str,
    name: &str,
) -> kube::Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Some(lease) = get_opt(&api, name).await? else {
        return Ok(None);
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    if !holder_held(&jobs, clock, &lease).await? {
        return Ok(None);
    }
    Ok(lease.spec.and_then(|s| s.holder_identity))
}

/// Whether a Job or lease labelled `l` (annotated `a`) is a machine's or pool's apply, destroy
/// or restore: the operations the cluster operation gate orders.
fn gated(l: &BTreeMap<String, String>, op: Option<&String>) -> bool {
    l.get(labels::OWNER_KIND)
        .is_some_and(|k| k != "TerraformCluster")
        && matches!(
            op.map(String::as_str),
            Some("apply" | "destroy" | "restore")
        )
}

/// How many apply, destroy or restore operations of a cluster's machines and pools are under
/// way, given the cluster's Jobs and leases: their Jobs running, or their run leases taken for
/// one of those operations and still [`held`] while the Job is being created (`age` gives how
/// long a lease's record has been seen unchanged).
pub fn count_operating(jobs: &[&Job], leases: &[&Lease], age: impl Fn(&Lease) -> Duration) -> u32 {
    let mut operating: std::collections::BTreeSet<String> = jobs
        .iter()
        .filter(|j| {
            let l = j.metadata.labels.clone().unwrap_or_default();
            gated(&l, l.get(labels::OP)) && job_active(j)
        })
        .filter_map(|j| j.metadata.name.clone())
        .collect();
    for lease in leases {
        let l = lease.metadata.labels.clone().unwrap_or_default();
        let a = lease.metadata.annotations.clone().unwrap_or_default();
        if l.get(labels::LEASE).map(String::as_str) != Some(RUN_LEASE)
            || !gated(&l, a.get(annotations::LEASE_OP))
        {
            continue;
        }
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
        let Some(holder) = holder.filter(|h| !h.is_empty()) else {
            continue;
        };
        let job = jobs
            .iter()
            .find(|j| j.metadata.name.as_deref() == Some(holder.as_str()));
        if held(lease, job.copied(), age(lease)) {
            operating.insert(holder);
        }
    }
    operating.len() as u32
}

/// [`count_operating`] read fresh from the API server: Act's check once the cluster holds its
/// leases, which must not trust a cache that may lag a machine's lease just taken.
pub async fn machines_operating(
    client: &kube::Client,
    clock: &LeaseClock,
    ns: &str,
    cluster: &str,
) -> kube::Result<u32> {
    let lp = ListParams::default().labels(&format!(
        "{}={cluster},{}=true",
        labels::CLUSTER_NAME,
        labels::MANAGED
    ));
    let jobs = Api::<Job>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items;
    let leases = Api::<Lease>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items;
    Ok(count_operating(
        &jobs.iter().collect::<Vec<_>>(),
        &leases.iter().collect::<Vec<_>>(),
        |l| clock.age(l, Instant::now()),
    ))
}

/// The lease kinds, re-exported for callers.
pub use lease_kinds::{CLUSTER as CLUSTER_LEASE, RUN as RUN_LEASE};

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, op: &str, acquired_secs_ago: i64, now: Timestamp) -> Lease {
        let acquired = now
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(
                acquired_secs_ago,
            ))
            .unwrap();
        Lease {
            metadata: ObjectMeta {
                name: Some("captf-run-ns-m-x".into()),
                labels: Some(lease_labels(RUN_LEASE, "TerraformMachine", "x", "c")),
                annotations: Some(BTreeMap::from([(
                    annotations::LEASE_OP.to_owned(),
                    op.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.to_owned()),
                acquire_time: Some(MicroTime(acquired)),
                ..LeaseSpec::default()
            }),
        }
    }

    fn job(name: &str, finished: bool) -> Job {
        let conditions = if finished {
            serde_json::json!([{"type": "Complete", "status": "True"}])
        } else {
            serde_json::json!([])
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name,
                         "labels": {labels::OP: "apply", labels::OWNER_KIND: "TerraformMachine"}},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    const SECS: fn(u64) -> Duration = Duration::from_secs;

    /// Finding 2: a lease is held for a grace period before its Job exists. A TerraformCluster
    /// that took both leases for a Job not yet created holds them (so its machines wait: the
    /// gate's anti-starvation), and a machine's run lease taken for an apply not yet created
    /// counts as an operation under way (so two racing passes do not both create Jobs); past the
    /// grace period, or once its Job finished, the lease is free.
    #[test]
    fn a_lease_is_held_for_a_grace_period_before_its_job_exists() {
        let now = Timestamp::now();
        let holder = "captf-m-x-apply-a1-abcdef";
        let l = lease(holder, "apply", 5, now);
        assert!(held(&l, None, SECS(5)));
        assert!(held(&l, None, GRACE.checked_sub(SECS(1)).unwrap()));
        assert!(!held(&l, None, GRACE + SECS(1)));
        assert!(!held(&lease("", "apply", 5, now), None, SECS(5)));
        // Once the Job exists, the lease is held while it runs, whatever its age.
        assert!(held(&l, Some(&job(holder, false)), GRACE * 10));
        assert!(!held(&l, Some(&job(holder, true)), GRACE * 10));
        // A machine's apply about to start counts for the cluster operation gate.
        assert_eq!(count_operating(&[], &[&l], |_| SECS(5)), 1);
        assert_eq!(
            count_operating(&[], &[&lease(holder, "refresh", 5, now)], |_| SECS(5)),
            0
        );
        assert_eq!(count_operating(&[], &[&l], |_| GRACE * 10), 0);
    }

    /// L2: another manager's lease is judged on this manager's monotonic clock, from when it
    /// first saw the record, never by comparing the acquire time it wrote with the local wall
    /// clock. A lease acquired "an hour ago" by a clock running behind is held for a whole grace
    /// period from when it is first seen, and one acquired "in the future" by a clock running
    /// ahead is free once this manager has seen it unchanged for the grace period; a renewal (a
    /// new acquire time) starts the period again.
    #[test]
    fn another_managers_lease_is_judged_from_when_it_was_seen_not_its_acquire_time() {
        let wall = Timestamp::now();
        let start = Instant::now();
        let clock = LeaseClock::default();
        let behind = lease("captf-m-x-apply-a1-abcdef", "apply", 3600, wall);
        assert_eq!(clock.age(&behind, start), Duration::ZERO);
        assert!(held(&behind, None, clock.age(&behind, start + SECS(30))));
        assert!(!held(
            &behind,
            None,
            clock.age(&behind, start + GRACE + SECS(1))
        ));
        let ahead = lease("captf-m-y-apply-a1-abcdef", "apply", -3600, wall);
        assert!(held(&ahead, None, clock.age(&ahead, start)));
        assert!(!held(
            &ahead,
            None,
            clock.age(&ahead, start + GRACE + SECS(1))
        ));
        // Renewed: a new record, seen now.
        let renewed = lease("captf-m-y-apply-a1-abcdef", "apply", -3500, wall);
        assert!(held(
            &renewed,
            None,
            clock.age(&renewed, start + GRACE + SECS(2))
        ));
        // A lease this manager wrote counts from the write.
        let mine = lease("captf-m-z-apply-a1-abcdef", "apply", 0, wall);
        clock.wrote(&mine, start + SECS(100));
        assert_eq!(clock.age(&mine, start + SECS(130)), SECS(30));
    }
}
