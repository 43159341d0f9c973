//! What the manager's integration tests share: the test environment with its registry and process
//! kubelet, the runner and no-op module images, Cluster API objects created the way Cluster API
//! would create them, a manager running in the test process scoped to the test's namespace, and
//! the log buffer the secret-hygiene checks read.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use manager::runtime::context::{Context, Settings};
use manager::runtime::metrics::Metrics;
use serde_json::{Value, json};
use testenv::TestEnv;
use testenv::image::{
    ImageBuilder, Layer, ModuleImage, push_module_image, push_runner_image, tofu_base_layer,
};
use tokio::sync::OnceCell;

/// Every log line any manager of this test binary wrote.
pub static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        // With CAPTF_TEST_LOG set, also to stderr, to watch what the managers do.
        if std::env::var_os("CAPTF_TEST_LOG").is_some() {
            let _ = std::io::stderr().write_all(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the log capture once (trace level for the manager, so any value a log line could
/// carry is in the buffer).
pub fn capture_logs() {
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(buf.clone());
        let _ = tracing_subscriber::fmt()
            .with_env_filter("manager=trace,kube=info,warn")
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .try_init();
        buf
    });
}

/// The captured logs as text.
pub fn logs() -> String {
    String::from_utf8_lossy(&LOGS.get().unwrap().lock().unwrap()).into_owned()
}

/// The images every test uses.
#[derive(Debug, Clone)]
pub struct Images {
    pub runner: String,
    pub cluster: String,
    pub machine: String,
}

static IMAGES: OnceCell<Images> = OnceCell::const_new();

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shared environment, with its registry and kubelet, and the images. Panics without a
/// static runner (`make runner-static-dev` builds it): a test that cannot run fails, it does not
/// pass.
pub async fn setup() -> (&'static TestEnv, Images) {
    capture_logs();
    let env = TestEnv::shared().expect("test environment starts");
    env.registry().expect("registry starts");
    env.kubelet().expect("kubelet starts");
    let images = IMAGES
        .get_or_init(|| async {
            let runner = testenv::testbin::static_runner().expect(
                "no static runner: build it with `make runner-static-dev` (or set CAPTF_RUNNER_BIN)",
            );
            let host = env.registry().unwrap().host();
            let runner = push_runner_image(&host, "captf/runner", "test", &runner)
                .await
                .unwrap()
                .to_string();
            let root = repo_root();
            push_module_image(
                &host,
                "captf/noop-cluster",
                "v1",
                &ModuleImage::new(root.join("modules/noop/cluster"), "cluster"),
            )
            .await
            .unwrap();
            push_module_image(
                &host,
                "captf/noop-machine",
                "v1",
                &ModuleImage::new(root.join("modules/noop/machine"), "machine"),
            )
            .await
            .unwrap();
            // Tags, as users write them: the manager pins the digest itself.
            Images {
                runner,
                cluster: format!("{host}/captf/noop-cluster:v1"),
                machine: format!("{host}/captf/noop-machine:v1"),
            }
        })
        .await
        .clone();
    (env, images)
}

/// The static `captf-runner` ClusterRole from `config/rbac/runner_role.yaml`, installed once.
pub async fn install_runner_cluster_role(client: &Client) {
    let text = std::fs::read_to_string(repo_root().join("config/rbac/runner_role.yaml")).unwrap();
    let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_saphyr::from_str(&text).unwrap();
    let api: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    match api.create(&PostParams::default(), &role).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating the runner ClusterRole: {e}"),
    }
}

/// A manager running in this process, watching one namespace.
pub struct RunningManager {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub metrics: Metrics,
    /// The clock its Decide step reads: a test moves it to prove a schedule without waiting.
    pub clock: manager::runtime::context::Clock,
}

impl RunningManager {
    /// Stops the manager and waits for it.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(mut t) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(20), &mut t)
                .await
                .is_err()
        {
            // A JoinHandle dropped on a timeout detaches its task: a manager still finishing its
            // passes would then go on reconciling beside the next one the test starts.
            eprintln!("the manager did not stop within 20 s: aborted");
            t.abort();
            let _ = t.await;
        }
    }

    /// Kills the manager at once (a crash).
    pub fn kill(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for RunningManager {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Starts a manager for `ns` with `client`.
pub fn start_manager(client: &Client, ns: &str, images: &Images, instance: &str) -> RunningManager {
    start_manager_with(client, ns, images, instance, |_| {})
}

/// [`start_manager`], with its settings changed by `tune` (a manager flag a test sets).
pub fn start_manager_with(
    client: &Client,
    ns: &str,
    images: &Images,
    instance: &str,
    tune: impl FnOnce(&mut Settings),
) -> RunningManager {
    let ctx = manager_context(client, ns, images, instance, tune);
    let metrics = ctx.metrics.clone();
    let clock = ctx.clock.clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        manager::controller::run(ctx, async move {
            let _ = rx.await;
        })
        .await;
    });
    RunningManager {
        stop: Some(tx),
        task: Some(task),
        metrics,
        clock,
    }
}

/// The context of a manager for `ns` with `client`, its settings changed by `tune`.
pub fn manager_context(
    client: &Client,
    ns: &str,
    images: &Images,
    instance: &str,
    tune: impl FnOnce(&mut Settings),
) -> Context {
    let mut settings = Settings {
        runner_image: images.runner.clone(),
        namespace: Some(ns.to_owned()),
        instance: instance.to_owned(),
        ..Settings::default()
    };
    tune(&mut settings);
    Context::new(client.clone(), settings, Metrics::new())
}

/// Creates any object from JSON in `ns`; returns it.
pub async fn create(client: &Client, ns: &str, v: Value) -> DynamicObject {
    let api = dynamic(client, ns, &v).await;
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap()
}

async fn dynamic(client: &Client, ns: &str, v: &Value) -> Api<DynamicObject> {
    let api_version = v["apiVersion"].as_str().unwrap().to_owned();
    let kind = v["kind"].as_str().unwrap().to_owned();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    if caps.scope == kube::discovery::Scope::Cluster {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), ns, &ar)
    }
}

/// The identity `name` with a credentials Secret holding `secret_value`, allowing `allowed`.
pub async fn identity(client: &Client, name: &str, allowed: &[&str], secret_value: &str) {
    let creds_ns = format!("{name}-creds");
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": creds_ns}})).unwrap(),
        )
        .await;
    create(
        client,
        &creds_ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name},
               "stringData": {"CLOUD_TOKEN": secret_value}}),
    )
    .await;
    create(
        client,
        "",
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
               "kind": "TerraformClusterIdentity",
               "metadata": {"name": name},
               "spec": {"secretRef": {"name": name, "namespace": creds_ns},
                        "allowedNamespaces": {"list": allowed}}}),
    )
    .await;
}

/// A Cluster and its TerraformCluster, owned the way Cluster API's Cluster controller owns it.
pub async fn cluster(client: &Client, ns: &str, name: &str, identity: &str, image: &str) {
    cluster_with_spec(client, ns, name, identity, image, json!({})).await;
}

/// [`cluster`], with more fields of the TerraformCluster's spec from the start.
pub async fn cluster_with_spec(
    client: &Client,
    ns: &str,
    name: &str,
    identity: &str,
    image: &str,
    extra: Value,
) {
    let cluster = create(
        client,
        ns,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": name},
               "spec": {
                   "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "apiServerPort": 6443},
                   "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                         "kind": "TerraformCluster", "name": name}}}),
    )
    .await;
    let uid = cluster.metadata.uid.unwrap();
    let mut spec = json!({"source": {"image": image}, "identityRef": {"name": identity}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    create(
        client,
        ns,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
               "metadata": {"name": name,
                            "labels": {"cluster.x-k8s.io/cluster-name": name},
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                                 "name": name, "uid": uid}]},
               "spec": spec}),
    )
    .await;
}

/// What Cluster API does once the TerraformCluster is provisioned: copy its endpoint to the
/// Cluster and mark the infrastructure provisioned.
pub async fn capi_cluster_provisioned(client: &Client, ns: &str, name: &str) {
    let tc = get_json(
        client,
        ns,
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "TerraformCluster",
        name,
    )
    .await;
    let ep = tc["spec"]["controlPlaneEndpoint"].clone();
    let clusters = dynamic(
        client,
        ns,
        &json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster"}),
    )
    .await;
    clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"controlPlaneEndpoint": ep}})),
        )
        .await
        .unwrap();
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
            ),
        )
        .await
        .unwrap();
}

/// Sets `Cluster.status.initialization.controlPlaneInitialized`.
pub async fn capi_control_plane_initialized(client: &Client, ns: &str, name: &str) {
    let clusters = dynamic(
        client,
        ns,
        &json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster"}),
    )
    .await;
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"initialization": {"controlPlaneInitialized": true}}})),
        )
        .await
        .unwrap();
}

/// A Machine with its bootstrap Secret and TerraformMachine, as a MachineSet or control plane
/// creates them.
pub async fn machine(
    client: &Client,
    ns: &str,
    cluster: &str,
    name: &str,
    image: &str,
    control_plane: bool,
    bootstrap_value: &str,
) {
    machine_with_variables(
        client,
        ns,
        cluster,
        name,
        image,
        control_plane,
        bootstrap_value,
        Value::Null,
    )
    .await;
}

/// [`machine`], with `spec.variables` (unless null).
#[allow(clippy::too_many_arguments)]
pub async fn machine_with_variables(
    client: &Client,
    ns: &str,
    cluster: &str,
    name: &str,
    image: &str,
    control_plane: bool,
    bootstrap_value: &str,
    variables: Value,
) {
    create(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": format!("{name}-bootstrap")},
               "stringData": {"value": bootstrap_value, "format": "cloud-config"}}),
    )
    .await;
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    let m = create(
        client,
        ns,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": name, "labels": labels},
               "spec": {"clusterName": cluster, "version": "v1.36.2",
                        "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": "TerraformMachine", "name": name}}}),
    )
    .await;
    let uid = m.metadata.uid.unwrap();
    let mut spec = json!({"source": {"image": image}});
    if !variables.is_null() {
        spec["variables"] = variables;
    }
    create(
        client,
        ns,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformMachine",
               "metadata": {"name": name,
                            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                                                 "name": name, "uid": uid, "controller": true}]},
               "spec": spec}),
    )
    .await;
}

/// Any object as JSON.
pub async fn get_json(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Value {
    let api = dynamic(
        client,
        ns,
        &json!({"apiVersion": api_version, "kind": kind}),
    )
    .await;
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

/// Any object as JSON, `None` when it is gone.
pub async fn get_json_opt(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Option<Value> {
    let api = dynamic(
        client,
        ns,
        &json!({"apiVersion": api_version, "kind": kind}),
    )
    .await;
    api.get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Deletes any object.
pub async fn delete(client: &Client, ns: &str, api_version: &str, kind: &str, name: &str) {
    let api = dynamic(
        client,
        ns,
        &json!({"apiVersion": api_version, "kind": kind}),
    )
    .await;
    let _ = api.delete(name, &kube::api::DeleteParams::default()).await;
}

/// A condition of an object as (status, reason).
pub fn condition(obj: &Value, type_: &str) -> Option<(String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// The message of `obj`'s condition `type_` (empty when it has none); panics when there is no
/// such condition.
pub fn condition_message(obj: &Value, type_: &str) -> String {
    let conditions = obj["status"]["conditions"].as_array();
    let found = conditions.and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    let found = found.unwrap_or_else(|| panic!("no {type_} condition: {obj:#}"));
    found["message"].as_str().unwrap_or_default().to_owned()
}

/// Polls `check` every 250 ms until it returns `Some`, failing after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the object's `Ready` condition is `status`.
pub async fn wait_ready(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    status: &str,
    timeout: Duration,
) -> Value {
    eventually(
        timeout,
        &format!("{kind} {name} Ready={status}"),
        || async {
            let o = get_json(
                client,
                ns,
                "infrastructure.cluster.x-k8s.io/v1alpha1",
                kind,
                name,
            )
            .await;
            (condition(&o, "Ready").map(|c| c.0) == Some(status.to_owned())).then_some(o)
        },
    )
    .await
}

/// Polls the object every 250 ms until `check` holds, and returns it; after `timeout` fails
/// naming `what`, with the whole object.
#[allow(clippy::too_many_arguments)]
pub async fn until(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let o = get_json(client, ns, api_version, kind, name).await;
        if check(&o) {
            return o;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {o:#}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The TerraformCluster `name`, once its `ApplyJobSucceeded` reason is `want` (see [`until`]).
pub async fn apply_reason(
    client: &Client,
    ns: &str,
    name: &str,
    want: &str,
    timeout: Duration,
) -> Value {
    until(
        client,
        ns,
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "TerraformCluster",
        name,
        &format!("ApplyJobSucceeded reason {want}"),
        timeout,
        |tc| condition(tc, "ApplyJobSucceeded").map(|c| c.1) == Some(want.to_owned()),
    )
    .await
}

/// Merge-patches the annotation `key` of the TerraformCluster `name` to `value` (null removes it).
pub async fn annotate(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
    value: impl serde::Serialize,
) {
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), ns);
    tcs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
    )
    .await
    .unwrap();
}

/// Wakes the TerraformCluster `name` with a change that is no input: its label `poke` set to
/// `value`.
pub async fn poke(client: &Client, ns: &str, name: &str, value: &str) {
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), ns);
    tcs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"poke": value}}})),
    )
    .await
    .unwrap();
}

/// Sets the Cluster `name`'s `spec.clusterNetwork.serviceDomain`: a Cluster field the cluster
/// role renders, so a re-apply of its TerraformCluster is due.
pub async fn set_service_domain(client: &Client, ns: &str, name: &str, domain: &str) {
    let clusters: Api<api::capi::Cluster> = Api::namespaced(client.clone(), ns);
    clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterNetwork": {"serviceDomain": domain}}})),
        )
        .await
        .unwrap();
}

/// The lowercase hex sha256 of `s`.
pub fn sha256_hex(s: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

/// What a test starts from: the shared environment and images, an admin client, the static
/// `captf-runner` ClusterRole and a fresh namespace named after `prefix`.
pub struct Fx {
    pub env: &'static TestEnv,
    pub images: Images,
    pub client: Client,
    pub ns: String,
}

/// A fresh [`Fx`] for `prefix`.
pub async fn fixture(prefix: &str) -> Fx {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace(prefix).await.unwrap();
    Fx {
        env,
        images,
        client,
        ns,
    }
}

/// [`fixture`] with an identity `id-<prefix>` allowed in the namespace, its Secret holding the
/// planted value `planted-<prefix>-1`.
pub async fn fixture_with_identity(prefix: &str) -> Fx {
    let f = fixture(prefix).await;
    identity(
        &f.client,
        &format!("id-{prefix}"),
        &[f.ns.as_str()],
        &format!("planted-{prefix}-1"),
    )
    .await;
    f
}

/// The Jobs in `ns` whose owner-name label is `owner`, by name.
pub async fn jobs_of(client: &Client, ns: &str, owner: &str) -> Vec<Job> {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "captf.infrastructure.cluster.x-k8s.io/owner-name={owner}"
    )))
    .await
    .unwrap()
    .items
}

/// Every Secret in `ns`.
pub async fn secrets(client: &Client, ns: &str) -> Vec<Secret> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default()).await.unwrap().items
}

/// The gunzipped state document of an object.
pub async fn state_document(
    client: &Client,
    ns: &str,
    kind: contract::names::ObjectKind,
    name: &str,
) -> Value {
    state_document_now(client, ns, kind, name)
        .await
        .expect("a state Secret holding a state")
}

/// The object's state document as it is now, `None` while its state Secret is missing or holds
/// no readable state (between the backend's writes): for a poll.
pub async fn state_document_now(
    client: &Client,
    ns: &str,
    kind: contract::names::ObjectKind,
    name: &str,
) -> Option<Value> {
    let suffix = contract::names::state_suffix(ns, kind, name);
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let s = api
        .get_opt(&format!("tfstate-default-{suffix}"))
        .await
        .unwrap()?;
    state_of(&s)
}

/// The gunzipped state document a state Secret holds, `None` when it holds none.
pub fn state_of(secret: &Secret) -> Option<Value> {
    let gz = &secret.data.as_ref()?.get("tfstate")?.0;
    let mut d = flate2::read::GzDecoder::new(&gz[..]);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut d, &mut out).ok()?;
    serde_json::from_str(&out).ok()
}

/// The no-op cluster module plus extra Terraform, with `/bin/sh` and `/bin/sleep` for
/// `local-exec`: pushed as `<repo>:v1`.
async fn variant_image(env: &testenv::TestEnv, repo: &str, extra_tf: &str) -> String {
    role_variant_image(env, "cluster", repo, extra_tf).await
}

/// The no-op module of `role` plus `extra_tf`, pushed as `repo:v1`.
async fn role_variant_image(
    env: &testenv::TestEnv,
    role: &str,
    repo: &str,
    extra_tf: &str,
) -> String {
    runtime_variant_image(env, role, repo, extra_tf, "tofu").await
}

/// [`role_variant_image`] on the `runtime` of the test binaries (`tofu` or `terraform`) at
/// `/captf/runtime`, labelled for it.
async fn runtime_variant_image(
    env: &testenv::TestEnv,
    role: &str,
    repo: &str,
    extra_tf: &str,
    runtime: &str,
) -> String {
    let host = env.registry().unwrap().host();
    let dir = tempfile::tempdir().unwrap();
    let noop = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../modules/noop")
        .join(role);
    for f in std::fs::read_dir(&noop).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
    }
    std::fs::write(dir.path().join("extra.tf"), extra_tf).unwrap();
    // A variant may stand in for outputs of the module: its `extra.tf` declares them, and the
    // originals are dropped here. A comment `# undeclared output NAME` drops one for good.
    for output in ["health", "provider_id", "exports"] {
        let block = format!("output \"{output}\"");
        let undeclared = format!("# undeclared output {output}\n");
        if !extra_tf.contains(&block) && !extra_tf.contains(&undeclared) {
            continue;
        }
        let outputs = dir.path().join("outputs.tf");
        let text = std::fs::read_to_string(&outputs).unwrap();
        let start = text.find(&block).unwrap();
        let end = start + text[start..].find("\n}\n").unwrap() + 3;
        std::fs::write(&outputs, format!("{}{}", &text[..start], &text[end..])).unwrap();
    }
    let binary = testenv::testbin::path(runtime).unwrap();
    let base = tokio::task::spawn_blocking(move || tofu_base_layer(&binary))
        .await
        .unwrap()
        .unwrap();
    let mut module = Layer::new();
    module.owner(65532, 65532);
    module.host_dir("/captf/module", dir.path()).unwrap();
    let mut tools = Layer::new();
    tools
        .host_binary("/bin/sh", std::path::Path::new("/bin/sh"))
        .unwrap();
    tools
        .host_binary("/bin/sleep", std::path::Path::new("/bin/sleep"))
        .unwrap();
    ImageBuilder::new()
        .layer_blob(base)
        .layer(module)
        .layer(tools)
        .user("65532:65532")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .label("io.captf.contract", "v1alpha1")
        .label("io.captf.role", role)
        .label("io.captf.runtime", runtime)
        .push(&host, repo, "v1")
        .await
        .unwrap();
    format!("{host}/{repo}:v1")
}

static BIG_STATE_TOFU: OnceCell<String> = OnceCell::const_new();
static BIG_STATE_TERRAFORM: OnceCell<String> = OnceCell::const_new();

/// A cluster module on `runtime` whose state grows with `var.blocks`: one `terraform_data`
/// holding `blocks` × 100 strings of 128 characters, twice (its input and its output). `dense`
/// strings are sha512 digests, which gzip only halves; otherwise they are zero-padded numbers,
/// which gzip to almost nothing.
pub async fn big_state_image(env: &testenv::TestEnv, runtime: &str) -> String {
    let cell = if runtime == "terraform" {
        &BIG_STATE_TERRAFORM
    } else {
        &BIG_STATE_TOFU
    };
    cell.get_or_init(|| async {
        runtime_variant_image(
            env,
            "cluster",
            &format!("captf/big-state-{runtime}"),
            r#"
variable "blocks" {
  type    = number
  default = 0
}

variable "dense" {
  type    = bool
  default = true
}

resource "terraform_data" "big" {
  count = var.blocks > 0 ? 1 : 0
  input = flatten([
    for i in range(var.blocks) : [
      for j in range(100) : var.dense ? sha512("${i}-${j}") : format("%0128d", i * 100 + j)
    ]
  ])
}
"#,
            runtime,
        )
        .await
    })
    .await
    .clone()
}

static UNDECLARING: OnceCell<String> = OnceCell::const_new();

/// A machine module that does not declare the contract output `provider_id`.
pub async fn undeclaring_machine_image(env: &testenv::TestEnv) -> String {
    UNDECLARING
        .get_or_init(|| async {
            role_variant_image(
                env,
                "machine",
                "captf/undeclaring-machine",
                "# undeclared output provider_id\n",
            )
            .await
        })
        .await
        .clone()
}

static SLOW: OnceCell<String> = OnceCell::const_new();
static SLOW_MACHINE: OnceCell<String> = OnceCell::const_new();

/// A machine module that sleeps `var.sleep_seconds` during apply.
pub async fn slow_machine_image(env: &testenv::TestEnv) -> String {
    SLOW_MACHINE
        .get_or_init(|| async {
            role_variant_image(
                env,
                "machine",
                "captf/slow-machine",
                testenv::image::SLEEP_DURING_APPLY_TF,
            )
            .await
        })
        .await
        .clone()
}

static KEYLESS: OnceCell<String> = OnceCell::const_new();

/// The role ARN and Google provider the keyless test's identity names, which [`keyless_image`]'s
/// module expects in its environment.
pub const KEYLESS_ROLE_ARN: &str = "arn:aws:iam::123456789012:role/captf-keyless";
/// See [`KEYLESS_ROLE_ARN`].
pub const KEYLESS_GCP_PROVIDER: &str =
    "projects/123456/locations/global/workloadIdentityPools/captf/providers/test";

/// A cluster module that reads a keyless identity's projected token the way a cloud SDK would:
/// `terraform_data.token_claims` holds the token's `aud` and `sub` claims (decoded in HCL from
/// the JWT's payload), and `terraform_data.sdk_environment`'s `local-exec` fails the apply unless
/// the AWS, Azure and Google variables the runner exports point at the token and carry
/// [`KEYLESS_ROLE_ARN`].
pub async fn keyless_image(env: &testenv::TestEnv) -> String {
    KEYLESS
        .get_or_init(|| async {
            let tf = r#"
variable "token_file" {
  type    = string
  default = "/var/run/captf/identity/token"
}

locals {
  payload = split(".", file(var.token_file))[1]
  b64     = replace(replace(local.payload, "-", "+"), "_", "/")
  padded  = "${local.b64}${substr("===", 0, (4 - length(local.b64) % 4) % 4)}"
  claims  = jsondecode(base64decode(local.padded))
}

resource "terraform_data" "token_claims" {
  input = {
    audience = local.claims.aud
    subject  = local.claims.sub
  }
}

resource "terraform_data" "sdk_environment" {
  provisioner "local-exec" {
    command = <<-EOT
      test "$AWS_WEB_IDENTITY_TOKEN_FILE" = "${var.token_file}" || { echo "AWS_WEB_IDENTITY_TOKEN_FILE is '$AWS_WEB_IDENTITY_TOKEN_FILE'"; exit 1; }
      test -s "$AWS_WEB_IDENTITY_TOKEN_FILE" || { echo "the token file is empty or unreadable"; exit 1; }
      test "$AWS_ROLE_ARN" = "@ROLE@" || { echo "AWS_ROLE_ARN is '$AWS_ROLE_ARN'"; exit 1; }
      test "$GOOGLE_APPLICATION_CREDENTIALS" != "" && test -s "$GOOGLE_APPLICATION_CREDENTIALS" || { echo "no Google credential file"; exit 1; }
      test -z "$AZURE_FEDERATED_TOKEN_FILE" || { echo "Azure is not configured, yet AZURE_FEDERATED_TOKEN_FILE is set"; exit 1; }
    EOT
  }
}
"#
            .replace("@ROLE@", KEYLESS_ROLE_ARN);
            variant_image(env, "captf/keyless-cluster", &tf).await
        })
        .await
        .clone()
}

static SENSITIVE: OnceCell<String> = OnceCell::const_new();

/// A cluster module with a sensitive variable `password` that a resource holds, and a plain
/// `size`: `size > 0` plans `terraform_data.credentials[0]` (its input the password) and
/// `terraform_data.sized[0]` (input `"size-<size>"`). What a plan's text shows and hides.
pub async fn sensitive_image(env: &testenv::TestEnv) -> String {
    SENSITIVE
        .get_or_init(|| async {
            variant_image(
                env,
                "captf/sensitive-cluster",
                r#"
variable "password" {
  type      = string
  sensitive = true
  default   = ""
}

variable "size" {
  type    = number
  default = 0
}

resource "terraform_data" "credentials" {
  count = var.size > 0 ? 1 : 0
  input = var.password
}

resource "terraform_data" "sized" {
  count = var.size > 0 ? 1 : 0
  input = "size-${var.size}"
}
"#,
            )
            .await
        })
        .await
        .clone()
}

static FAILING: OnceCell<String> = OnceCell::const_new();

/// A cluster module that sleeps `var.sleep_seconds` during apply.
pub async fn slow_image(env: &testenv::TestEnv) -> String {
    SLOW.get_or_init(|| async {
        variant_image(
            env,
            "captf/slow-cluster",
            &format!(
                r#"{}
# Set from a Secret by some tests: a sensitive value that must never show outside Secrets.
variable "token" {{
  type    = string
  default = ""
}}

resource "terraform_data" "token" {{
  input = sha256(var.token)
}}
"#,
                testenv::image::SLEEP_DURING_APPLY_TF
            ),
        )
        .await
    })
    .await
    .clone()
}

/// A cluster module whose apply always fails.
pub async fn failing_image(env: &testenv::TestEnv) -> String {
    FAILING
        .get_or_init(|| async {
            variant_image(
                env,
                "captf/failing-cluster",
                r#"
resource "terraform_data" "fails" {
  lifecycle {
    precondition {
      condition     = false
      error_message = "This module fails on purpose."
    }
  }
}
"#,
            )
            .await
        })
        .await
        .clone()
}

static UNDESTROYABLE: OnceCell<String> = OnceCell::const_new();

/// A cluster module whose destroy fails while `var.protected` was true at the last apply, the
/// way a resource under deletion protection fails (its destroy-time provisioner prints
/// `deletion protection is on` and exits 1).
pub async fn undestroyable_image(env: &testenv::TestEnv) -> String {
    UNDESTROYABLE
        .get_or_init(|| async {
            variant_image(
                env,
                "captf/undestroyable-cluster",
                r#"
variable "protected" {
  type    = bool
  default = false
}

resource "terraform_data" "protected" {
  input = var.protected
  provisioner "local-exec" {
    when    = destroy
    command = "if [ ${self.input} = true ]; then echo 'deletion protection is on' >&2; exit 1; fi"
  }
}
"#,
            )
            .await
        })
        .await
        .clone()
}

static EXPORTING: OnceCell<String> = OnceCell::const_new();

/// A cluster module whose `exports` output carries `var.exports_value` next to the cluster's
/// name, except that `fraction` makes it export the number 0.5 instead: a malformed exports value
/// (a fractional number cannot be canonicalized for hashing, and user variables cannot carry one).
pub async fn exporting_image(env: &testenv::TestEnv) -> String {
    EXPORTING
        .get_or_init(|| async {
            variant_image(
                env,
                "captf/exporting-cluster",
                r#"
variable "exports_value" {
  type    = string
  default = "one"
}

output "exports" {
  value = merge(
    { cluster = "${var.captf_cluster.namespace}/${var.captf_cluster.name}" },
    jsondecode(var.exports_value == "fraction" ? "{\"ratio\": 0.5}" : jsonencode({ value = var.exports_value })),
  )
}
"#,
            )
            .await
        })
        .await
        .clone()
}

/// The no-op module of `role` plus `extra_tf`, pushed (again) as `repo:v1`: a different
/// `extra_tf` moves the tag to another digest.
pub async fn retagged_variant_image(
    env: &testenv::TestEnv,
    role: &str,
    repo: &str,
    extra_tf: &str,
) -> String {
    role_variant_image(env, role, repo, extra_tf).await
}

static MODULELESS: OnceCell<String> = OnceCell::const_new();

/// An image that breaks the image contract: the runtime is there, `/captf/module` is not (a
/// user who pushed the base image instead of the module image).
pub async fn moduleless_image(env: &testenv::TestEnv) -> String {
    MODULELESS
        .get_or_init(|| async {
            let host = env.registry().unwrap().host();
            let tofu = testenv::testbin::path("tofu").unwrap();
            let base = tokio::task::spawn_blocking(move || tofu_base_layer(&tofu))
                .await
                .unwrap()
                .unwrap();
            ImageBuilder::new()
                .layer_blob(base)
                .user("65532:65532")
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .label("io.captf.contract", "v1alpha1")
                .label("io.captf.role", "cluster")
                .label("io.captf.runtime", "tofu")
                .push(&host, "captf/moduleless", "v1")
                .await
                .unwrap();
            format!("{host}/captf/moduleless:v1")
        })
        .await
        .clone()
}

/// A client authenticated as the manager's ServiceAccount, bound to exactly the ClusterRole of
/// `config/rbac/role.yaml`: a manager running with it proves the role grants what it needs.
pub async fn manager_client(env: &TestEnv, admin: &Client) -> Client {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let ok = |r: Result<(), kube::Error>| match r {
        Ok(()) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("{e}"),
    };
    let nss: Api<Namespace> = Api::all(admin.clone());
    ok(nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "captf-system"}})).unwrap(),
        )
        .await
        .map(drop));
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "captf-system");
    ok(sas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "captf-controller-manager"}}))
                .unwrap(),
        )
        .await
        .map(drop));
    let text = std::fs::read_to_string(repo_root().join("config/rbac/role.yaml")).unwrap();
    let role: ClusterRole = serde_saphyr::from_str(&text).unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    ok(roles.create(&PostParams::default(), &role).await.map(drop));
    let text = std::fs::read_to_string(repo_root().join("config/rbac/role_binding.yaml")).unwrap();
    let binding: ClusterRoleBinding = serde_saphyr::from_str(&text).unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    ok(bindings
        .create(&PostParams::default(), &binding)
        .await
        .map(drop));
    let token = sas
        .create_token_request(
            "captf-controller-manager",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            },
        )
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let e = env.endpoints();
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": e.server, "certificate-authority": e.ca_file}}],
        "users": [{"name": "manager", "user": {"token": token}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "manager"}}],
        "current-context": "t",
    });
    let kc: kube::config::Kubeconfig = serde_json::from_value(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    Client::try_from(config).unwrap()
}

/// The Jobs of `op` among `jobs`, oldest first.
pub fn op_jobs(jobs: &[Job], op: &str) -> Vec<Job> {
    let mut v: Vec<Job> = jobs
        .iter()
        .filter(|j| {
            j.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("captf.infrastructure.cluster.x-k8s.io/op"))
                .map(String::as_str)
                == Some(op)
        })
        .cloned()
        .collect();
    v.sort_by_key(|j| j.metadata.creation_timestamp.clone());
    v
}

/// What Cluster API v1.14 sets without a control-plane provider: only the Cluster's
/// `ControlPlaneInitialized` condition (v1beta2 `status.conditions`), not
/// `status.initialization.controlPlaneInitialized`.
pub async fn capi_control_plane_initialized_condition(client: &Client, ns: &str, name: &str) {
    let clusters = dynamic(
        client,
        ns,
        &json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster"}),
    )
    .await;
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "ControlPlaneInitialized", "status": "True", "reason": "Initialized",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1}]}})),
        )
        .await
        .unwrap();
}

/// What `clusterctl move` does to a source object once its copy exists in the target: the
/// Cluster is paused, then the object is deleted and its finalizers removed, so it goes without
/// a pass of the manager dropping its finalizer.
pub async fn delete_as_clusterctl_move(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    cluster: &str,
) {
    let clusters = dynamic(
        client,
        ns,
        &json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster"}),
    )
    .await;
    clusters
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let api_version = "infrastructure.cluster.x-k8s.io/v1alpha1";
    eventually(Duration::from_secs(60), "the object paused", || async {
        let o = get_json(client, ns, api_version, kind, name).await;
        (condition(&o, "Paused").map(|c| c.0) == Some("True".to_owned())).then_some(())
    })
    .await;
    delete(client, ns, api_version, kind, name).await;
    let api = dynamic(
        client,
        ns,
        &json!({"apiVersion": api_version, "kind": kind}),
    )
    .await;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// The manager's caches for one namespace, started without any controller: a test runs single
/// passes over objects it chooses (a stale copy, say) with [`Passes::pass`], and nothing else
/// reconciles meanwhile.
pub struct Passes {
    pub ctx: Context,
    watches: tokio::task::JoinHandle<()>,
    _triggers: manager::runtime::caches::Triggers,
}

impl Passes {
    /// Starts the caches for `ns` and waits until they are filled.
    pub async fn start(client: &Client, ns: &str, images: &Images, instance: &str) -> Self {
        let settings = Settings {
            runner_image: images.runner.clone(),
            namespace: Some(ns.to_owned()),
            instance: instance.to_owned(),
            ..Settings::default()
        };
        let (caches, triggers, watches) = manager::runtime::caches::start(client, &settings);
        let watches = tokio::spawn(watches);
        caches.ready().await.unwrap();
        let ctx = Context {
            caches,
            ..Context::new(client.clone(), settings, Metrics::new())
        };
        Self {
            ctx,
            watches,
            _triggers: triggers,
        }
    }

    /// Stops the caches' watches: from now on the caches keep what they show, as a watch that
    /// lags the API server does.
    pub fn freeze(&self) {
        self.watches.abort();
    }

    /// One reconcile pass over `target` exactly as given.
    pub async fn pass(&self, target: manager::runtime::context::Target) {
        manager::reconcile::reconcile(target, &self.ctx)
            .await
            .unwrap();
    }

    /// Waits until the caches show the TerraformCluster or TerraformMachine `name` at the
    /// resourceVersion the API server has now.
    pub async fn caught_up(&self, client: &Client, ns: &str, kind: &str, name: &str) {
        let want = get_json(
            client,
            ns,
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            kind,
            name,
        )
        .await["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned);
        let caches = &self.ctx.caches;
        eventually(Duration::from_secs(20), "the caches caught up", || async {
            let rv = match kind {
                "TerraformCluster" => caches
                    .terraform_clusters
                    .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
                    .and_then(|o| o.metadata.resource_version.clone()),
                _ => caches
                    .terraform_machines
                    .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
                    .and_then(|o| o.metadata.resource_version.clone()),
            };
            (rv == want).then_some(())
        })
        .await;
    }
}

impl Drop for Passes {
    fn drop(&mut self) {
        self.watches.abort();
    }
}

/// A TerraformCluster, TerraformMachine or TerraformMachinePool as a pass's target, read from
/// the API server.
pub async fn target(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
) -> manager::runtime::context::Target {
    use manager::runtime::context::Target;
    match kind {
        "TerraformCluster" => Target::Cluster(Box::new(
            Api::<api::cluster::TerraformCluster>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .unwrap(),
        )),
        "TerraformMachinePool" => Target::Pool(Box::new(
            Api::<api::machinepool::TerraformMachinePool>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .unwrap(),
        )),
        _ => Target::Machine(Box::new(
            Api::<api::machine::TerraformMachine>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .unwrap(),
        )),
    }
}

/// The sum of the samples of counter `name` in an encoded exposition whose labels contain every
/// `must`.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn metric_sum(encoded: &str, name: &str, must: &[&str]) -> u64 {
    encoded
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && must.iter().all(|m| l.contains(m)))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

static DRIFTING: OnceCell<String> = OnceCell::const_new();

// What the knob variants read from outside their inputs (see `testenv::knob`).
use testenv::knob::KNOB_TF;

/// The name of the state whose output `knob` stands for reality in [`drifting_image`].
pub use testenv::knob::KNOB_SECRET as DRIFT_KNOB_SECRET;

/// A cluster module whose infrastructure drifts on demand: it reads the output `knob` of the
/// state `tfstate-default-drift-knob` in the object's namespace (through the `kubernetes`
/// backend's `terraform_remote_state`, as a module reads anything outside its inputs) and keeps
/// a `terraform_data.knob` for any value but `steady` (the default, also when there is no such
/// state). Changing the knob after an apply is drift a drift check finds (one to add); a knob of
/// `broken` also adds `terraform_data.knob_number`, whose apply fails (the knob is no number).
pub async fn drifting_image(env: &testenv::TestEnv) -> String {
    DRIFTING
        .get_or_init(|| async {
            let extra = format!(
                "{KNOB_TF}{}",
                r#"

resource "terraform_data" "knob" {
  count = local.knob == "steady" ? 0 : 1
  input = local.knob
}

resource "terraform_data" "knob_number" {
  count = local.knob == "broken" ? 1 : 0
  input = tonumber(terraform_data.knob[0].output)
}
"#
            );
            variant_image(env, "captf/drifting-cluster", &extra).await
        })
        .await
        .clone()
}

/// Sets the knob of [`drifting_image`] in `ns`: a state whose output `knob` is `value`.
pub async fn set_drift_knob(client: &Client, ns: &str, value: &str) {
    let data = testenv::knob::knob_state(value).unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": DRIFT_KNOB_SECRET},
        "data": {"tfstate": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, data)}
    }))
    .unwrap();
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    api.patch(
        DRIFT_KNOB_SECRET,
        &PatchParams::apply("drift-test").force(),
        &Patch::Apply(&secret),
    )
    .await
    .unwrap();
}

static AILING: OnceCell<String> = OnceCell::const_new();

/// A machine module whose `health` output follows the knob of [`set_drift_knob`] (read like
/// [`drifting_image`] does, from outside its inputs): `unhealthy` reads running but unhealthy,
/// `terminated`, `degraded`, `stopped`, `pending` and `unknown` read that state (not healthy),
/// anything else running and healthy; `vanished` also turns its
/// `provider_id` null, as when the instance disappeared from the state; `gone` makes the refresh
/// itself fail the way a provider's read of a deleted instance does (a lookup that finds
/// nothing: `Error: Unable to find remote state`), leaving the state's outputs as they were.
pub async fn ailing_machine_image(env: &testenv::TestEnv) -> String {
    AILING
        .get_or_init(|| async {
            let extra = format!(
                "{KNOB_TF}{}",
                r#"
locals {
  states = ["terminated", "degraded", "stopped", "pending", "unknown"]
  ails   = local.knob == "unhealthy" || contains(local.states, local.knob)
}

data "terraform_remote_state" "instance" {
  count   = local.knob == "gone" ? 1 : 0
  backend = "local"
  config  = { path = "${path.module}/no-such-instance.tfstate" }
}

output "provider_id" {
  value = local.knob == "vanished" ? null : "noop:///${var.captf_object.namespace}/${var.captf_object.name}"
}

output "health" {
  value = {
    state   = contains(local.states, local.knob) ? local.knob : "running"
    healthy = !local.ails
    message = local.ails ? "the test says so" : null
    reasons = []
  }
}
"#
            );
            role_variant_image(env, "machine", "captf/ailing-machine", &extra).await
        })
        .await
        .clone()
}

/// What CAPTF left in `ns`: its Secrets (state, inputs, run, credential mirror), its leases
/// (run, cluster, state lock) and the runner's ServiceAccount, Role and RoleBinding.
pub async fn leftovers(client: &Client, ns: &str) -> Vec<String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let mut left: Vec<String> = secrets(client, ns)
        .await
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .filter(|n| n.starts_with("tfstate-") || n.starts_with("captf-"))
        .map(|n| format!("Secret {n}"))
        .collect();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    left.extend(
        leases
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|l| l.metadata.name)
            .filter(|n| n.starts_with("captf-") || n.starts_with("lock-tfstate-"))
            .map(|n| format!("Lease {n}")),
    );
    for (api_version, kind) in [
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ] {
        if get_json_opt(client, ns, api_version, kind, "captf-runner")
            .await
            .is_some()
        {
            left.push(format!("{kind} captf-runner"));
        }
    }
    left
}

/// Every event in `ns`, as one JSON text (for the secret-hygiene checks).
pub async fn events_json(client: &Client, ns: &str) -> String {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap()
}

/// An admin client whose every request first goes through `map` (to count requests, or to make
/// one fail the way a crash at that point would).
pub async fn client_mapping(
    env: &TestEnv,
    map: impl Fn(http::Request<kube::client::Body>) -> http::Request<kube::client::Body>
    + Clone
    + Send
    + Sync
    + 'static,
) -> Client {
    let kc = kube::config::Kubeconfig::read_from(&env.endpoints().kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&tower::util::MapRequestLayer::new(map))
        .build()
}

/// The no-op machinepool module, pushed to the test registry under `tag`.
pub async fn pool_image(env: &TestEnv, tag: &str) -> String {
    let host = env.registry().unwrap().host();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    push_module_image(
        &host,
        "captf/noop-machinepool",
        tag,
        &ModuleImage::new(root.join("modules/noop/machinepool"), "machinepool"),
    )
    .await
    .unwrap();
    format!("{host}/captf/noop-machinepool:{tag}")
}

/// A MachinePool with its bootstrap Secret and TerraformMachinePool, as Cluster API's
/// MachinePool controller and a bootstrap provider leave them.
pub async fn pool(
    client: &Client,
    ns: &str,
    cluster: &str,
    name: &str,
    image: &str,
    replicas: i32,
) {
    create(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": format!("{name}-bootstrap")},
               "stringData": {"value": "pool-bootstrap-token", "format": "cloud-config"}}),
    )
    .await;
    let mp = create(
        client,
        ns,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
               "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
               "spec": {"clusterName": cluster, "replicas": replicas,
                        "template": {"metadata": {"labels": {"pool": name}},
                                     "spec": {"clusterName": cluster, "version": "v1.36.2",
                                              "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                                              "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                                    "kind": "TerraformMachinePool", "name": name}}}}}),
    )
    .await;
    let uid = mp.metadata.uid.unwrap();
    create(
        client,
        ns,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformMachinePool",
               "metadata": {"name": name,
                            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
                                                 "name": name, "uid": uid, "controller": true}]},
               "spec": {"source": {"image": image}, "membershipRefreshIntervalSeconds": 15}}),
    )
    .await;
}

/// One line per Job: name, operation, attempt, inputs hash (first 12), `captf.io/requested-at`,
/// and how it ended — what an assertion about Jobs prints when it fails.
pub fn job_summary(jobs: &[Job]) -> String {
    let mut lines: Vec<String> = jobs
        .iter()
        .map(|j| {
            let label = |k: &str| {
                j.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(k))
                    .cloned()
                    .unwrap_or_default()
            };
            let ann = |k: &str| {
                j.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(k))
                    .cloned()
                    .unwrap_or_default()
            };
            let status = j.status.clone().unwrap_or_default();
            let ended: Vec<String> = status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c.status == "True")
                .map(|c| format!("{}({})", c.type_, c.reason.unwrap_or_default()))
                .collect();
            let hash = ann("captf.io/inputs-hash");
            format!(
                "{} op={} attempt={} hash={} requested={} created={:?} ended={}",
                j.metadata.name.clone().unwrap_or_default(),
                label("captf.infrastructure.cluster.x-k8s.io/op"),
                label("captf.infrastructure.cluster.x-k8s.io/attempt"),
                &hash[..hash.len().min(12)],
                ann("captf.io/requested-at"),
                j.metadata.creation_timestamp.as_ref().map(|t| t.0),
                ended.join(","),
            )
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// The inputs hashes the Jobs of `op` among `jobs` were started for, distinct. A Job retried
/// after a failure (or after its pod was stopped) carries the same hash as the one it retries.
pub fn op_hashes(jobs: &[Job], op: &str) -> std::collections::BTreeSet<String> {
    op_jobs(jobs, op)
        .iter()
        .filter_map(|j| {
            j.metadata
                .annotations
                .as_ref()?
                .get("captf.io/inputs-hash")
                .cloned()
        })
        .collect()
}

/// Whether the Job has finished (a `Complete` or `Failed` condition that is `True`).
pub fn job_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}
