//! The scale harness (issue 18; book: Performance, "The scale harness"): one TerraformCluster
//! and N TerraformMachines with their Machines and bootstrap Secrets, on one manager, under
//! Cluster API's real managers, measured from outside: the processes' memory and CPU from
//! `/proc`, every API request from the API server's audit log ([`testenv::audit`]), readiness
//! and Job pod starts from the API.
//!
//! Two ways to bring a fleet up:
//! - **adopted**: as after `clusterctl move`. The Cluster is paused; each machine's state Secret
//!   and durable inputs Secret are created with it, as the move copies them; then the Cluster is
//!   unpaused and every machine is provisioned from its state, with no Job.
//! - **applied**: the machines are created at once, unpaused, and each runs a real apply Job of
//!   the no-op machine module.
//!
//! The adopted Secrets are derived from a seed machine that went through a real apply in the same
//! namespace: its state Secret and durable inputs Secret give the format (labels, annotations,
//! keys), and each machine's inputs are rendered with the contract's own renderer. The seed's own
//! inputs are rendered the same way first and must hash to what its real apply recorded, so the
//! adopted Secrets are what the manager itself would have written.
//!
//! A third measurement, [`unrelated`], puts Secrets and ConfigMaps that have nothing to do with
//! CAPTF next to a small adopted fleet: the cost of the manager's cluster-wide watches.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use contract::inputs::{BootstrapSource, ClusterHandoff, MachineInputsSource, ObjectSource};
use contract::names::{ObjectKind, durable_inputs_secret_name, state_secret_name, state_suffix};
use contract::render::{MAIN_TF_JSON, TFVARS_JSON, render_machine};
use contract::variables::UserVariables;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::kube_ops::{CAPI, INFRA, Kube, is_true};

pub mod run;
pub mod unrelated;

/// The manager's user, as the audit log names it (the shipped ServiceAccount).
pub const MANAGER_USER: &str = "system:serviceaccount:captf-system:captf-controller-manager";
/// The user agent Cluster API's core manager sends (its binary's name first).
pub const CAPI_CORE_AGENT: &str = "capi-manager";
/// The bootstrap payload of every machine (what a bootstrap provider would write).
const BOOTSTRAP_VALUE: &str = "#cloud-config\nruncmd: [echo scale]\n";
/// The Kubernetes version of every Machine.
const VERSION: &str = "v1.36.3";
/// How many creates run at once.
pub(crate) const CREATE_CONCURRENCY: usize = 16;

/// How a fleet is brought up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Adopted,
    Applied,
    /// Applied, on a manager whose `--drift-default-interval` is shorter than the steady window,
    /// so that the window holds each machine's drift check.
    Drift,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Adopted => "adopted",
            Mode::Applied => "applied",
            Mode::Drift => "drift",
        }
    }
}

/// The namespace, Cluster and images one fleet lives in.
#[derive(Debug, Clone)]
pub struct Fleet {
    pub kube: Kube,
    pub ns: String,
    pub cluster: String,
    pub machine_image: String,
}

/// What the seed machine's real apply left: the templates of the adopted Secrets.
#[derive(Debug, Clone)]
pub struct Seed {
    /// The cluster's `exports` as the seed's inputs carried them.
    exports: Value,
    state: Value,
    /// The state document `state` holds, decoded once for every adopted machine.
    document: Value,
    durable: Value,
}

/// Now, in microseconds since the Unix epoch (the audit log's clock).
pub fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Creates an object and returns it as the API server stored it (with its uid).
pub async fn create(kube: &Kube, obj: &Value, ns: &str) -> anyhow::Result<Value> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let api = kube.api(api_version, kind, ns).await?;
    let dynamic: DynamicObject = serde_json::from_value(obj.clone())?;
    let created = api
        .create(&PostParams::default(), &dynamic)
        .await
        .with_context(|| format!("creating {kind} {}", crate::kube_ops::name_of(obj)))?;
    Ok(serde_json::to_value(created)?)
}

/// A TerraformClusterIdentity allowed in `ns`, with its credentials Secret.
pub async fn identity(kube: &Kube, ns: &str) -> anyhow::Result<String> {
    let name = format!("{ns}-identity");
    let creds_ns = format!("{ns}-creds");
    testenv::capi::ensure_namespace(&kube.client, &creds_ns).await?;
    kube.apply(
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": creds_ns},
                "stringData": {"CLOUD_TOKEN": "scale-harness-token"}}),
        &creds_ns,
    )
    .await?;
    kube.apply(
        &json!({"apiVersion": INFRA, "kind": "TerraformClusterIdentity",
                "metadata": {"name": name},
                "spec": {"secretRef": {"name": name, "namespace": creds_ns},
                         "allowedNamespaces": {"list": [ns]}}}),
        "",
    )
    .await?;
    kube.wait_for(
        (INFRA, "TerraformClusterIdentity"),
        "",
        &name,
        Duration::from_secs(120),
        "Ready=True",
        |o| is_true(o, "Ready"),
    )
    .await?;
    Ok(name)
}

/// A Cluster and its TerraformCluster through a real apply, until Cluster API marks the
/// Cluster's infrastructure provisioned.
pub async fn cluster(
    kube: &Kube,
    ns: &str,
    name: &str,
    identity: &str,
    image: &str,
) -> anyhow::Result<()> {
    kube.apply(
        &json!({"apiVersion": CAPI, "kind": "Cluster",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "TerraformCluster", "name": name}}}),
        ns,
    )
    .await?;
    kube.apply(
        &json!({"apiVersion": INFRA, "kind": "TerraformCluster",
                "metadata": {"name": name, "namespace": ns,
                             "labels": {"cluster.x-k8s.io/cluster-name": name}},
                "spec": {"source": {"image": image}, "identityRef": {"name": identity}}}),
        ns,
    )
    .await?;
    kube.wait_for(
        (CAPI, "Cluster"),
        ns,
        name,
        Duration::from_secs(600),
        "infrastructure provisioned",
        |o| o["status"]["initialization"]["infrastructureProvisioned"] == json!(true),
    )
    .await?;
    Ok(())
}

/// Pauses or unpauses the Cluster (`spec.paused`), as `clusterctl move` does around a move.
pub async fn set_paused(fleet: &Fleet, paused: bool) -> anyhow::Result<()> {
    fleet
        .kube
        .merge(
            CAPI,
            "Cluster",
            &fleet.ns,
            &fleet.cluster,
            json!({"spec": {"paused": paused}}),
        )
        .await
}

/// Creates one machine as a MachineSet would: its bootstrap Secret, its Machine, and its
/// TerraformMachine owned by the Machine. Returns the TerraformMachine as stored.
pub async fn create_machine(fleet: &Fleet, name: &str) -> anyhow::Result<Value> {
    let (kube, ns, cluster) = (&fleet.kube, fleet.ns.as_str(), fleet.cluster.as_str());
    create(
        kube,
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-bootstrap"), "namespace": ns},
                "stringData": {"value": BOOTSTRAP_VALUE, "format": "cloud-config"}}),
        ns,
    )
    .await?;
    let machine = create(
        kube,
        &json!({"apiVersion": CAPI, "kind": "Machine",
                "metadata": {"name": name, "namespace": ns,
                             "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "spec": {"clusterName": cluster, "version": VERSION,
                         "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                               "kind": "TerraformMachine", "name": name}}}),
        ns,
    )
    .await?;
    create(
        kube,
        &json!({"apiVersion": INFRA, "kind": "TerraformMachine",
                "metadata": {"name": name, "namespace": ns,
                             "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                             "ownerReferences": [{"apiVersion": CAPI, "kind": "Machine",
                                                  "name": name, "uid": machine["metadata"]["uid"],
                                                  "controller": true}]},
                "spec": {"source": {"image": fleet.machine_image}}}),
        ns,
    )
    .await
}

/// The inputs the manager renders for machine `name` of the fleet, with the cluster's
/// `exports`.
fn rendered(
    fleet: &Fleet,
    name: &str,
    exports: &Value,
) -> anyhow::Result<contract::render::RenderedInputs> {
    let source = MachineInputsSource {
        object: ObjectSource {
            cluster_name: fleet.cluster.clone(),
            namespace: fleet.ns.clone(),
            object_name: name.to_owned(),
            cloned_from_name: None,
        },
        machine_name: name.to_owned(),
        bootstrap: BootstrapSource {
            value: BOOTSTRAP_VALUE.as_bytes().to_vec(),
            format: Some(b"cloud-config".to_vec()),
        },
        failure_domain: None,
        version: Some(VERSION.to_owned()),
        control_plane: false,
        cluster: ClusterHandoff::State {
            exports: exports.clone(),
            failure_domains: Vec::new(),
        },
    };
    render_machine(&source, &UserVariables::none(), &fleet.machine_image)
        .map_err(|e| anyhow::anyhow!("rendering machine {name}'s inputs: {e}"))
}

fn secret_data(secret: &Value, key: &str) -> anyhow::Result<Vec<u8>> {
    let text = secret["data"][key]
        .as_str()
        .with_context(|| format!("Secret {} has no {key}", crate::kube_ops::name_of(secret)))?;
    Ok(base64::engine::general_purpose::STANDARD.decode(text)?)
}

/// Runs the seed machine through a real apply and keeps its Secrets as templates; checks that
/// the contract's renderer, fed what the harness knows, gives the hash the seed's apply recorded.
pub async fn seed(fleet: &Fleet) -> anyhow::Result<Seed> {
    let name = "seed";
    create_machine(fleet, name).await?;
    fleet
        .kube
        .wait_for(
            (INFRA, "TerraformMachine"),
            &fleet.ns,
            name,
            Duration::from_secs(600),
            "Ready=True",
            |o| is_true(o, "Ready"),
        )
        .await?;
    let get_secret = |n: String| async move {
        fleet
            .kube
            .get("v1", "Secret", &fleet.ns, &n)
            .await?
            .with_context(|| format!("the seed's Secret {n} is missing"))
    };
    let suffix = state_suffix(&fleet.ns, ObjectKind::Machine, name);
    let state = get_secret(state_secret_name(&suffix)).await?;
    let durable = get_secret(durable_inputs_secret_name(ObjectKind::Machine, name)).await?;
    let tfvars: Value = serde_json::from_slice(&secret_data(&durable, TFVARS_JSON)?)?;
    let exports = tfvars["captf_cluster_outputs"].clone();
    let recorded = state["metadata"]["annotations"][contract::state::INPUTS_HASH_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ours = rendered(fleet, name, &exports)?;
    if ours.inputs_hash != recorded {
        bail!(
            "the harness renders the seed's inputs to hash {}, but its apply recorded {recorded}: \
             the adopted Secrets would not be what the manager writes",
            ours.inputs_hash
        );
    }
    Ok(Seed {
        exports,
        document: crate::quickstart::state_of_secret(&state)?,
        state,
        durable,
    })
}

/// `bytes` gzip-compressed.
pub(crate) fn gzip(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// A fresh Secret from a template: server-set metadata dropped, `name` and owner set.
fn from_template(template: &Value, name: &str, owner: &Value) -> Value {
    let mut s = template.clone();
    let meta = &mut s["metadata"];
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        if let Some(m) = meta.as_object_mut() {
            m.remove(field);
        }
    }
    meta["name"] = json!(name);
    meta["ownerReferences"] = json!([{
        "apiVersion": INFRA, "kind": "TerraformMachine",
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
    }]);
    s
}

/// The state Secret and durable inputs Secret machine `tm` would have after an apply, as
/// `clusterctl move` brings them: its own state (the seed's, with this machine's `provider_id`
/// and a lineage of its own) and its own rendered inputs, both owned by `tm`.
pub fn adopted_secrets(fleet: &Fleet, seed: &Seed, tm: &Value) -> anyhow::Result<[Value; 2]> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let name = crate::kube_ops::name_of(tm);
    let inputs = rendered(fleet, &name, &seed.exports)?;
    let suffix = state_suffix(&fleet.ns, ObjectKind::Machine, &name);
    let mut state = from_template(&seed.state, &state_secret_name(&suffix), tm);
    state["metadata"]["labels"]["tfstateSecretSuffix"] = json!(suffix);
    state["metadata"]["annotations"][contract::state::INPUTS_HASH_ANNOTATION] =
        json!(inputs.inputs_hash);
    let mut document = seed.document.clone();
    document["outputs"]["provider_id"]["value"] = json!(format!("noop:///{}/{name}", fleet.ns));
    document["lineage"] = json!(format!("scale-{}-{name}", fleet.ns));
    state["data"] = json!({"tfstate": b64(&gzip(&serde_json::to_vec(&document)?)?)});
    let mut durable = from_template(
        &seed.durable,
        &durable_inputs_secret_name(ObjectKind::Machine, &name),
        tm,
    );
    durable["metadata"]["labels"][api::constants::labels::OWNER_NAME] =
        json!(contract::names::owner_name_label(&name));
    durable["data"] = json!({
        MAIN_TF_JSON: b64(inputs.main_tf_json.as_bytes()),
        TFVARS_JSON: b64(inputs.tfvars_json.as_bytes()),
    });
    Ok([state, durable])
}

/// Creates machines `names` at once (a bounded number of creates in flight), each with its
/// adopted Secrets when `seed` is given. Returns, once every create has returned, when each
/// TerraformMachine's create returned.
pub async fn create_fleet(
    fleet: &Fleet,
    names: &[String],
    seed: Option<&Seed>,
) -> anyhow::Result<BTreeMap<String, Instant>> {
    let created = futures::stream::iter(names.iter().map(|name| async move {
        let tm = create_machine(fleet, name).await?;
        let at = Instant::now();
        if let Some(seed) = seed {
            for secret in adopted_secrets(fleet, seed, &tm)? {
                create(&fleet.kube, &secret, &fleet.ns).await?;
            }
        }
        anyhow::Ok((name.clone(), at))
    }))
    .buffer_unordered(CREATE_CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(created.into_iter().collect())
}

/// When each TerraformMachine of the namespace was first seen Ready, polled every second until
/// `n` are (or `timeout` passes: an error naming how many were).
pub async fn wait_ready(
    fleet: &Fleet,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<String, Instant>> {
    let started = Instant::now();
    let mut ready = BTreeMap::new();
    loop {
        for tm in fleet
            .kube
            .list(INFRA, "TerraformMachine", &fleet.ns, "")
            .await?
        {
            if is_true(&tm, "Ready") {
                ready
                    .entry(crate::kube_ops::name_of(&tm))
                    .or_insert_with(Instant::now);
            }
        }
        if ready.len() >= n {
            return Ok(ready);
        }
        if started.elapsed() > timeout {
            bail!(
                "only {} of {n} TerraformMachines were Ready after {timeout:?}",
                ready.len()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A step of a machine's bring-up, seen from outside by a watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Milestone {
    /// Its first Job exists (the manager's share ends here).
    JobCreated,
    /// Its first Job pod has `status.startTime` (the last table's queue latency ends here).
    PodStarted,
    /// Its first Job pod is `Running` (the kubelet's share ends here).
    PodRunning,
}

/// The first moment each machine reached each [`Milestone`], from watches of the namespace's
/// Jobs and runner pods, by the owner-name label the manager puts on both.
#[derive(Debug, Clone, Default)]
pub struct Milestones {
    seen: Seen,
}

impl Milestones {
    /// Starts watching the namespace's Jobs and runner pods.
    pub fn watch(fleet: &Fleet) -> (Milestones, [tokio::task::JoinHandle<()>; 2]) {
        use k8s_openapi::api::batch::v1::Job;
        use k8s_openapi::api::core::v1::Pod;
        let milestones = Milestones::default();
        let jobs = milestones.watch_kind::<Job>(fleet, |_| vec![Milestone::JobCreated]);
        let pods = milestones.watch_kind::<Pod>(fleet, |pod| {
            let status = pod.status.as_ref();
            let mut reached = Vec::new();
            if status.is_some_and(|s| s.start_time.is_some()) {
                reached.push(Milestone::PodStarted);
            }
            if status.and_then(|s| s.phase.as_deref()) == Some("Running") {
                reached.push(Milestone::PodRunning);
            }
            reached
        });
        (milestones, [jobs, pods])
    }

    /// A watch of `K` in the fleet's namespace recording, per owner, the milestones `reached`
    /// says an object shows, the first time each is seen.
    fn watch_kind<K>(
        &self,
        fleet: &Fleet,
        reached: fn(&K) -> Vec<Milestone>,
    ) -> tokio::task::JoinHandle<()>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
        K::DynamicType: Default,
    {
        let seen = self.seen.clone();
        let api: kube::Api<K> = kube::Api::namespaced(fleet.kube.client.clone(), &fleet.ns);
        tokio::spawn(async move {
            let config = kube::runtime::watcher::Config::default()
                .labels(api::constants::labels::OWNER_NAME);
            let stream = kube::runtime::watcher(api, config);
            let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(stream));
            while let Some(event) = stream.next().await {
                let Ok(object) = event else { continue };
                let Some(owner) = object
                    .meta()
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(api::constants::labels::OWNER_NAME))
                    .cloned()
                else {
                    continue;
                };
                let now = Instant::now();
                for milestone in reached(&object) {
                    record(&seen, &owner, milestone, now);
                }
            }
        })
    }

    /// Records that machine `name` reached `milestone` at `at`, unless it did earlier.
    pub fn reached(&self, name: &str, milestone: Milestone, at: Instant) {
        record(&self.seen, name, milestone, at);
    }

    /// When machine `name` first reached `milestone`.
    pub fn of(&self, name: &str, milestone: Milestone) -> Option<Instant> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(name.to_owned(), milestone))
            .copied()
    }
}

type Seen = Arc<Mutex<HashMap<(String, Milestone), Instant>>>;

fn record(seen: &Seen, name: &str, milestone: Milestone, at: Instant) {
    seen.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry((name.to_owned(), milestone))
        .or_insert(at);
}

/// A process's memory and CPU, from `/proc/<pid>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcStats {
    /// Resident set now, in bytes (`VmRSS`).
    pub rss: u64,
    /// The largest resident set so far, in bytes (`VmHWM`).
    pub peak_rss: u64,
    /// User and system CPU time so far, in seconds.
    pub cpu_seconds: f64,
}

impl ProcStats {
    pub fn read(pid: u32) -> anyhow::Result<ProcStats> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map_or(0, |k| k * 1024)
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        // Fields after the command name (which may hold spaces, inside parentheses): utime is the
        // 14th field of the line, stime the 15th, in clock ticks.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok(ProcStats {
            rss: kib("VmRSS:"),
            peak_rss: kib("VmHWM:"),
            cpu_seconds: (ticks(11) + ticks(12)) / clock_ticks(),
        })
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux when it cannot be asked).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Requests of one caller in one window, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    /// By verb.
    pub by_verb: BTreeMap<String, u64>,
    /// By `verb resource[/subresource]`.
    pub by_resource: BTreeMap<String, u64>,
    pub total: u64,
    pub writes: u64,
    /// GETs of one named object in the fleet's namespace.
    pub object_gets: u64,
}

impl Traffic {
    /// The requests in `[from, to)` (microseconds) that `caller` made; with `ns`, only those in
    /// that namespace and those on the fleet's own cluster-scoped objects (its identity, named
    /// after the namespace).
    pub fn of(
        requests: &[testenv::audit::Request],
        from: i64,
        to: i64,
        ns: Option<&str>,
        caller: impl Fn(&testenv::audit::Request) -> bool,
    ) -> Traffic {
        let mut t = Traffic::default();
        for r in requests
            .iter()
            .filter(|r| r.received_micros >= from && r.received_micros < to && caller(r))
        {
            if ns.is_some_and(|ns| !in_namespace(r, ns)) {
                continue;
            }
            t.total += 1;
            *t.by_verb.entry(r.verb.clone()).or_default() += 1;
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            *t.by_resource
                .entry(format!("{} {resource}", r.verb))
                .or_default() += 1;
            if r.is_write() {
                t.writes += 1;
            }
            if r.verb == "get" && !r.name.is_empty() && ns.is_none_or(|ns| r.namespace == ns) {
                t.object_gets += 1;
            }
        }
        t
    }

    /// `verb count, ...`, largest first.
    pub fn verbs(&self) -> String {
        let mut v: Vec<_> = self.by_verb.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1));
        v.iter()
            .map(|(verb, n)| format!("{verb} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The `k` largest `verb resource` counts.
    pub fn top_resources(&self, k: usize) -> String {
        let mut v: Vec<_> = self.by_resource.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1));
        v.iter()
            .take(k)
            .map(|(what, n)| format!("{what} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Whether the request is about namespace `ns`: an object in it, or a cluster-scoped object named
/// after it (the fleet's identity, `<ns>-identity`).
fn in_namespace(r: &testenv::audit::Request, ns: &str) -> bool {
    if r.namespace.is_empty() {
        r.resource != "namespaces" && r.name.starts_with(&format!("{ns}-"))
    } else {
        r.namespace == ns
    }
}

/// Whether the request is the manager's.
pub fn is_manager(r: &testenv::audit::Request) -> bool {
    r.user == MANAGER_USER
}

/// Whether the request is Cluster API's core manager's.
pub fn is_capi_core(r: &testenv::audit::Request) -> bool {
    r.user_agent.starts_with(CAPI_CORE_AGENT)
}

/// The `q` quantile (0..=1) of `values`, nearest rank; `None` when empty.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.to_vec();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    // Nearest rank: the smallest value with at least q of the values at or below it.
    let rank = (q * v.len() as f64).ceil().max(1.0) as usize;
    v.get(rank - 1).copied()
}

/// The sum of `controller_runtime_reconcile_total` for `controller` in a metrics text.
pub fn reconcile_passes(metrics: &str, controller: &str) -> f64 {
    let label = format!("controller=\"{controller}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(verb: &str, ns: &str, name: &str, user: &str, at: i64) -> testenv::audit::Request {
        testenv::audit::Request {
            received_micros: at,
            user: user.to_owned(),
            user_agent: String::new(),
            verb: verb.to_owned(),
            resource: "secrets".to_owned(),
            subresource: String::new(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
            code: 200,
        }
    }

    #[test]
    fn traffic_counts_one_callers_requests_in_the_window_and_namespace() {
        let mut rs = vec![
            request("get", "fleet", "a", MANAGER_USER, 10),
            request("get", "other", "b", MANAGER_USER, 11),
            request("list", "", "", MANAGER_USER, 12),
            request("patch", "fleet", "a", MANAGER_USER, 13),
            request("get", "fleet", "a", "admin", 14),
            request("get", "fleet", "a", MANAGER_USER, 99),
        ];
        let mut identity = request("patch", "", "fleet-identity", MANAGER_USER, 15);
        identity.resource = "terraformclusteridentities".to_owned();
        rs.push(identity);
        let t = Traffic::of(&rs, 10, 99, Some("fleet"), is_manager);
        assert_eq!(
            t.total, 3,
            "the cluster-wide list and the other namespace are not the fleet's"
        );
        assert_eq!(t.writes, 2);
        assert_eq!(t.object_gets, 1);
        assert_eq!(t.verbs(), "patch 2, get 1");
        let everywhere = Traffic::of(&rs, 10, 99, None, is_manager);
        assert_eq!(everywhere.total, 5);
        assert_eq!(everywhere.object_gets, 2);
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&[3.0], 0.99), Some(3.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn reconcile_passes_sum_one_controllers_results() {
        let text = "controller_runtime_reconcile_total{controller=\"terraformmachine\",result=\"success\"} 7\n\
                    controller_runtime_reconcile_total{controller=\"terraformmachine\",result=\"error\"} 1\n\
                    controller_runtime_reconcile_total{controller=\"terraformcluster\",result=\"success\"} 5\n";
        assert!((reconcile_passes(text, "terraformmachine") - 8.0).abs() < 1e-9);
    }
}
