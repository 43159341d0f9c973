//! What every end-to-end test shares: a test environment with Cluster API's managers, the runner
//! and no-op module images in its registry, and CAPTF (manager and webhook binaries) running
//! against it. One suite per process; each test works in a namespace of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context as _;
use serde_json::Value;
use testenv::TestEnv;
use testenv::image::{ModuleImage, push_module_image, push_runner_image};

use crate::kube_ops::Kube;
use crate::product::Captf;

/// The images the flavors are rendered with.
#[derive(Debug, Clone)]
pub struct Images {
    pub runner: String,
    pub cluster: String,
    pub machine: String,
    pub machinepool: String,
}

/// A test environment with Cluster API and CAPTF running.
#[derive(Debug)]
pub struct Suite {
    pub env: &'static TestEnv,
    pub images: Images,
    pub captf: Captf,
}

static SHARED: OnceLock<Result<Suite, String>> = OnceLock::new();

/// Pushes the runner and the three no-op module images into `env`'s registry.
pub async fn push_images(env: &TestEnv) -> anyhow::Result<Images> {
    let runner = testenv::testbin::static_runner().ok_or_else(|| {
        anyhow::anyhow!("no static runner: `make runner-static-dev` builds it (make test does)")
    })?;
    let host = env.registry()?.host();
    let runner = push_runner_image(&host, "captf/runner", "e2e", &runner)
        .await?
        .to_string();
    let root = testenv::env::repo_root();
    for role in ["cluster", "machine", "machinepool"] {
        push_module_image(
            &host,
            &format!("captf/noop-{role}"),
            "v0.1.0",
            &ModuleImage::new(root.join("modules/noop").join(role), role),
        )
        .await
        .with_context(|| format!("pushing the no-op {role} module image"))?;
    }
    Ok(Images {
        runner,
        cluster: format!("{host}/captf/noop-cluster:v0.1.0"),
        machine: format!("{host}/captf/noop-machine:v0.1.0"),
        machinepool: format!("{host}/captf/noop-machinepool:v0.1.0"),
    })
}

impl Suite {
    /// The suite of this process, started on first use.
    pub fn shared() -> anyhow::Result<&'static Suite> {
        SHARED
            .get_or_init(|| {
                TestEnv::shared_with_capi()
                    .and_then(|env| {
                        env.registry()?;
                        env.kubelet()?;
                        testenv::env::on_own_runtime(move || Suite::start(env))
                    })
                    .map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the end-to-end suite failed to start: {e}"))
    }

    /// Pushes the images into `env`'s registry and starts CAPTF against it.
    pub async fn start(env: &'static TestEnv) -> anyhow::Result<Suite> {
        let images = push_images(env).await?;
        let admin = Kube::new(env.client().await?);
        let captf = Captf::start(env, &admin, &images.runner).await?;
        Ok(Suite { env, images, captf })
    }

    /// An admin client of this environment, for the calling test's runtime.
    pub async fn kube(&self) -> anyhow::Result<Kube> {
        Ok(Kube::new(self.env.client().await?))
    }

    /// A fresh namespace for one test.
    pub async fn namespace(&self, prefix: &str) -> anyhow::Result<String> {
        self.env.namespace(prefix).await
    }
}

/// A Job as the [`JobLog`] last saw it.
#[derive(Debug, Clone)]
pub struct SeenJob {
    pub name: String,
    /// The CAPTF operation (`apply`, `destroy`, `refresh`, ...).
    pub op: String,
    /// The owning object's name.
    pub owner: String,
    pub succeeded: bool,
    pub volumes_secrets: Vec<String>,
    /// For a destroy Job: whether its per-run inputs Secret (`captf-run-<job>`) held exactly the
    /// owner's durable inputs (`captf-inputs-<c|m|mp>-<owner>`), read while the Job ran:
    /// `Ok(true)`, `Ok(false)`, or why that could not be told.
    pub destroyed_from_durable_inputs: Option<Result<bool, String>>,
}

/// Every Job started in a namespace while it runs: Jobs are garbage collected with their owners,
/// so a delete's destroy Jobs are only visible while they exist.
#[derive(Debug, Clone, Default)]
pub struct JobLog {
    seen: Arc<Mutex<BTreeMap<String, SeenJob>>>,
}

fn seen_job(job: &Value) -> SeenJob {
    let labels = &job["metadata"]["labels"];
    let label = |k: &str| labels[k].as_str().unwrap_or_default().to_owned();
    let volumes_secrets = job["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["secret"]["secretName"].as_str().map(str::to_owned))
        .collect();
    SeenJob {
        name: crate::kube_ops::name_of(job),
        op: label("captf.infrastructure.cluster.x-k8s.io/op"),
        owner: label("captf.infrastructure.cluster.x-k8s.io/owner-name"),
        succeeded: job["status"]["succeeded"].as_i64().unwrap_or(0) > 0,
        volumes_secrets,
        destroyed_from_durable_inputs: None,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether the destroy Job `job` got its owner's durable inputs (see
/// [`SeenJob::destroyed_from_durable_inputs`]).
async fn from_durable_inputs(
    kube: &Kube,
    ns: &str,
    job: &Value,
    seen: &SeenJob,
) -> Result<bool, String> {
    let kind = job["metadata"]["labels"]["captf.infrastructure.cluster.x-k8s.io/owner-kind"]
        .as_str()
        .unwrap_or_default();
    let kind = match kind {
        "TerraformCluster" => contract::names::ObjectKind::Cluster,
        "TerraformMachine" => contract::names::ObjectKind::Machine,
        "TerraformMachinePool" => contract::names::ObjectKind::MachinePool,
        other => return Err(format!("owner kind {other:?}")),
    };
    let run_name = contract::names::run_secret_name(&seen.name);
    let durable_name = contract::names::durable_inputs_secret_name(kind, &seen.owner);
    let get = |name: String| async move {
        kube.get("v1", "Secret", ns, &name)
            .await
            .map_err(|e| format!("{e:#}"))?
            .ok_or_else(|| format!("Secret {name} is gone"))
    };
    let run = get(run_name).await?;
    let durable = get(durable_name).await?;
    Ok(["main.tf.json", "terraform.tfvars.json"]
        .iter()
        .all(|k| run["data"][k].is_string() && run["data"][k] == durable["data"][k]))
}

impl JobLog {
    /// Starts recording the Jobs of `ns` (from a watch, so a Job's last state is seen even when
    /// it is deleted right after it finished) until every holder dropped the returned log.
    pub fn watch(kube: &Kube, ns: &str) -> JobLog {
        use futures::StreamExt as _;
        use kube::runtime::watcher::{self, Event};
        let log = JobLog::default();
        let weak = Arc::downgrade(&log.seen);
        let kube = kube.clone();
        let ns = ns.to_owned();
        tokio::spawn(async move {
            let api: kube::Api<k8s_openapi::api::batch::v1::Job> =
                kube::Api::namespaced(kube.client.clone(), &ns);
            let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let Some(seen) = weak.upgrade() else { break };
                let jobs = match event {
                    Ok(Event::Apply(job) | Event::InitApply(job)) => vec![job],
                    _ => continue,
                };
                for job in jobs {
                    let job = serde_json::to_value(job).unwrap_or_default();
                    let mut j = seen_job(&job);
                    let earlier = lock(&seen)
                        .get(&j.name)
                        .map(|e| e.destroyed_from_durable_inputs.clone());
                    // The per-run Secret may be written just after the Job: tell again on
                    // the Job's next events until both Secrets were read once.
                    j.destroyed_from_durable_inputs = match earlier.flatten() {
                        Some(Ok(known)) => Some(Ok(known)),
                        _ if j.op == "destroy" => {
                            Some(from_durable_inputs(&kube, &ns, &job, &j).await)
                        }
                        _ => None,
                    };
                    lock(&seen).insert(j.name.clone(), j);
                }
            }
        });
        log
    }

    /// Every Job seen so far.
    pub fn jobs(&self) -> Vec<SeenJob> {
        lock(&self.seen).values().cloned().collect()
    }

    /// The Jobs of one operation (`apply`, `destroy`, ...) seen so far.
    pub fn of_op(&self, op: &str) -> Vec<SeenJob> {
        self.jobs().into_iter().filter(|j| j.op == op).collect()
    }
}
