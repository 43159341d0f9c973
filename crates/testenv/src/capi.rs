//! Cluster API in the test environment (ENGINEERING.md §2; the book's Quick Start and
//! Control-Plane Integration chapters): its core manager, kubeadm bootstrap manager and kubeadm
//! control-plane manager, built from source by `make testbin`, run against the test API server
//! the way `clusterctl init` would install them.
//!
//! - Their CRDs come from the pinned Cluster API module in Go's module cache, with the labels
//!   their kustomizations and clusterctl put on them (the `cluster.x-k8s.io/<contract>` labels
//!   the kubeadm providers read, `cluster.x-k8s.io/provider`, `clusterctl.cluster.x-k8s.io`) and,
//!   when the managers run, their conversion webhooks.
//! - Their admission webhooks are registered URL-style, as Cluster API's own envtest does: each
//!   configuration renamed after its provider (the three share names) and pointed at
//!   `https://127.0.0.1:<port><path>` with this environment's webhook CA.
//! - Each manager gets its own webhook, health and diagnostics ports, its own serving
//!   certificate, its own log (`<dir>/<binary>.log`) and a readiness wait on `/readyz`.
//! - clusterctl's inventory (the Provider CRD and one Provider per installed provider, CAPTF's
//!   included) is installed too, so `clusterctl move` and `clusterctl describe` work.

use anyhow::{Context as _, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::control_plane::{spawn, yaml_files};
use crate::net::free_loopback_port;
use crate::testbin;

/// The field manager of everything this module applies.
const FIELD_MANAGER: &str = "captf-testenv";
/// clusterctl's label on every component it installs.
pub const CLUSTERCTL_LABEL: &str = "clusterctl.cluster.x-k8s.io";
/// The label naming the provider a component belongs to.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
/// How long the managers may take to become ready and their webhooks effective.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// The feature gates the book needs: MachinePool (on by default in v1.14, named anyway) and
/// ClusterTopology for the ClusterClass flavor.
pub const FEATURE_GATES: &str = "MachinePool=true,ClusterTopology=true";

/// One Cluster API provider: where its manager, CRDs and webhooks come from, and how clusterctl
/// names it.
#[derive(Debug, Clone, Copy)]
pub struct Provider {
    /// clusterctl's name for it (`cluster-api`, `kubeadm`, `kubeadm`).
    pub name: &'static str,
    /// clusterctl's provider type.
    pub provider_type: &'static str,
    /// The `cluster.x-k8s.io/provider` label value (`cluster-api`, `bootstrap-kubeadm`, ...).
    pub label: &'static str,
    /// The namespace `clusterctl init` installs it into.
    pub namespace: &'static str,
    /// The test binary (`hack/testbin.sh`).
    pub binary: &'static str,
    /// Its directory in the Cluster API module (`core`, `bootstrap/kubeadm`, ...).
    pub module_subdir: &'static str,
}

/// The three providers, in start order.
pub const PROVIDERS: [Provider; 3] = [
    Provider {
        name: "cluster-api",
        provider_type: "CoreProvider",
        label: "cluster-api",
        namespace: "capi-system",
        binary: "capi-manager",
        module_subdir: "core",
    },
    Provider {
        name: "kubeadm",
        provider_type: "BootstrapProvider",
        label: "bootstrap-kubeadm",
        namespace: "capi-kubeadm-bootstrap-system",
        binary: "kubeadm-bootstrap-manager",
        module_subdir: "bootstrap/kubeadm",
    },
    Provider {
        name: "kubeadm",
        provider_type: "ControlPlaneProvider",
        label: "control-plane-kubeadm",
        namespace: "capi-kubeadm-control-plane-system",
        binary: "kubeadm-control-plane-manager",
        module_subdir: "controlplane/kubeadm",
    },
];

/// CAPTF as clusterctl registers it.
pub const CAPTF_PROVIDER: Provider = Provider {
    name: "terraform",
    provider_type: "InfrastructureProvider",
    label: "infrastructure-terraform",
    namespace: "captf-system",
    binary: "manager",
    module_subdir: "",
};

/// Where a provider's manager serves its webhooks, health and metrics.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub webhook: u16,
    pub health: u16,
    pub diagnostics: u16,
}

impl Ports {
    fn free() -> anyhow::Result<Self> {
        Ok(Ports {
            webhook: free_loopback_port()?,
            health: free_loopback_port()?,
            diagnostics: free_loopback_port()?,
        })
    }
}

/// The Cluster API module's source tree (from `make testbin`, in Go's module cache).
pub fn module_dir() -> anyhow::Result<PathBuf> {
    testbin::module_dir("cluster-api")
}

/// The pinned Cluster API version (`v1.14.2`).
pub fn version() -> anyhow::Result<String> {
    testbin::version("cluster-api")
}

fn read_yaml_docs(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .with_context(|| format!("parsing {}", path.display()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The labels a provider's CRD kustomization puts on every CRD (`labels[].pairs`): the contract
/// labels `cluster.x-k8s.io/v1beta1: v1beta1`, `cluster.x-k8s.io/v1beta2: v1beta2` on the kubeadm
/// providers' CRDs.
fn kustomization_labels(kustomization: &Value) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for entry in kustomization["labels"].as_array().into_iter().flatten() {
        for (k, v) in entry["pairs"].as_object().into_iter().flatten() {
            if let Some(v) = v.as_str() {
                labels.insert(k.clone(), v.to_owned());
            }
        }
    }
    labels
}

/// The CRD names whose conversion webhook the provider's kustomization enables
/// (`patches/webhook_in_<plural>.yaml`, each naming its CRD).
fn conversion_patched(crd_dir: &Path, kustomization: &Value) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for patch in kustomization["patches"].as_array().into_iter().flatten() {
        let Some(path) = patch["path"].as_str() else {
            continue;
        };
        if !path.contains("webhook_in_") {
            continue;
        }
        for doc in read_yaml_docs(&crd_dir.join(path))? {
            if let Some(name) = doc["metadata"]["name"].as_str() {
                names.push(name.to_owned());
            }
        }
    }
    Ok(names)
}

/// A conversion webhook stanza pointing at `https://127.0.0.1:<port>/convert`.
fn conversion_webhook(port: u16, ca_pem: &str) -> Value {
    use base64::Engine as _;
    json!({
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/convert"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            }
        }
    })
}

/// Adds clusterctl's labels for `provider` to an object's metadata.
fn label_as_clusterctl(obj: &mut Value, provider: &Provider) {
    let labels = &mut obj["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    labels[CLUSTERCTL_LABEL] = json!("");
    labels[PROVIDER_LABEL] = json!(provider.label);
}

/// A provider's CRDs as `clusterctl init` installs them: labeled, and with their conversion
/// webhooks pointed at `conversion` (`(port, CA)`) when its manager runs.
pub fn provider_crds(
    provider: &Provider,
    conversion: Option<(u16, &str)>,
) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let crd_dir = module_dir()?
        .join(provider.module_subdir)
        .join("config/crd");
    let kustomization = read_yaml_docs(&crd_dir.join("kustomization.yaml"))?
        .into_iter()
        .next()
        .unwrap_or(Value::Null);
    let labels = kustomization_labels(&kustomization);
    let converted = conversion_patched(&crd_dir, &kustomization)?;
    let mut crds = Vec::new();
    for file in yaml_files(&crd_dir.join("bases"))? {
        for mut doc in read_yaml_docs(&file)? {
            label_as_clusterctl(&mut doc, provider);
            for (k, v) in &labels {
                doc["metadata"]["labels"][k] = json!(v);
            }
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            if let Some((port, ca)) = conversion
                && converted.iter().any(|c| c == name)
            {
                doc["spec"]["conversion"] = conversion_webhook(port, ca);
            }
            let crd: CustomResourceDefinition = serde_json::from_value(doc)
                .with_context(|| format!("reading a CRD of {}", file.display()))?;
            crds.push(crd);
        }
    }
    Ok(crds)
}

/// Every Cluster API CRD (the three providers') with their labels, without conversion webhooks:
/// what a test environment without the managers installs.
pub fn crds_without_managers() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut all = Vec::new();
    for provider in &PROVIDERS {
        all.extend(provider_crds(provider, None)?);
    }
    all.push(clusterctl_provider_crd()?);
    Ok(all)
}

/// clusterctl's inventory CRD (`providers.clusterctl.cluster.x-k8s.io`).
pub fn clusterctl_provider_crd() -> anyhow::Result<CustomResourceDefinition> {
    let path = module_dir()?.join("cmd/clusterctl/config/manifest/clusterctl-api.yaml");
    let doc = read_yaml_docs(&path)?
        .into_iter()
        .find(|d| d["kind"] == "CustomResourceDefinition")
        .ok_or_else(|| anyhow::anyhow!("{} has no CRD", path.display()))?;
    serde_json::from_value(doc).with_context(|| format!("reading {}", path.display()))
}

/// CAPTF's CRDs as `clusterctl init` installs them (labeled as provider `infrastructure-terraform`).
pub fn label_captf_crds(crds: &mut [CustomResourceDefinition]) {
    for crd in crds {
        let labels = crd.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(CLUSTERCTL_LABEL.to_owned(), String::new());
        labels.insert(PROVIDER_LABEL.to_owned(), CAPTF_PROVIDER.label.to_owned());
    }
}

/// A provider's webhook configurations, registered URL-style: renamed after the provider and
/// pointed at `https://127.0.0.1:<port><path>` with `ca_pem`.
pub fn webhook_configurations(
    provider: &Provider,
    port: u16,
    ca_pem: &str,
) -> anyhow::Result<Vec<Value>> {
    use base64::Engine as _;
    let path = module_dir()?
        .join(provider.module_subdir)
        .join("config/webhook/manifests.yaml");
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut out = Vec::new();
    for mut doc in read_yaml_docs(&path)? {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or("webhooks")
            .to_owned();
        doc["metadata"]["name"] = json!(format!("capi-{}-{name}", provider.label));
        label_as_clusterctl(&mut doc, provider);
        for hook in doc["webhooks"].as_array_mut().into_iter().flatten() {
            let svc_path = hook["clientConfig"]["service"]["path"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("a webhook in {} has no path", path.display()))?
                .to_owned();
            hook["clientConfig"] = json!({
                "url": format!("https://127.0.0.1:{port}{svc_path}"),
                "caBundle": ca,
            });
        }
        out.push(doc);
    }
    Ok(out)
}

/// The webhook CA and the serving certificate every manager presents (SANs 127.0.0.1 and
/// localhost), written as `tls.crt`/`tls.key` into each manager's cert directory.
pub struct WebhookPki {
    pub ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for WebhookPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("WebhookPki").finish_non_exhaustive()
    }
}

impl WebhookPki {
    /// A new CA and serving certificate.
    pub fn generate() -> anyhow::Result<Self> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "captf-testenv-webhook-ca");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec!["localhost".to_owned()])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
        serving
            .distinguished_name
            .push(DnType::CommonName, "captf-testenv-webhook");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = serving.signed_by(&key, &issuer)?;
        Ok(WebhookPki {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes `tls.crt`, `tls.key` and `ca.crt` into `dir`.
    pub fn write_to(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (name, pem) in [
            ("tls.crt", &self.cert_pem),
            ("tls.key", &self.key_pem),
            ("ca.crt", &self.ca_pem),
        ] {
            std::fs::write(dir.join(name), pem)
                .with_context(|| format!("writing {}", dir.join(name).display()))?;
        }
        Ok(())
    }
}

/// A running Cluster API: the three managers. Dropping it stops them.
#[derive(Debug)]
pub struct ClusterApi {
    processes: Vec<(Provider, Ports, Child)>,
    dir: PathBuf,
}

/// Applies `obj` (any kind, cluster-scoped or namespaced) server-side.
pub async fn apply_value(client: &Client, obj: &Value) -> anyhow::Result<()> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {api_version} {kind}"))?;
    let api: Api<DynamicObject> = match (caps.scope, obj["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &ar)
        }
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .with_context(|| format!("applying {kind} {name}"))?;
    Ok(())
}

/// Creates the namespace `name` unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    apply_value(
        client,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await
}

/// clusterctl's inventory entry for `provider` at `version`, in its namespace.
pub async fn register_provider(
    client: &Client,
    provider: &Provider,
    version: &str,
) -> anyhow::Result<()> {
    ensure_namespace(client, provider.namespace).await?;
    let prefix = match provider.provider_type {
        "BootstrapProvider" => "bootstrap-",
        "ControlPlaneProvider" => "control-plane-",
        "InfrastructureProvider" => "infrastructure-",
        _ => "",
    };
    let mut obj = json!({
        "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind": "Provider",
        "metadata": {"name": format!("{prefix}{}", provider.name), "namespace": provider.namespace},
        "providerName": provider.name,
        "type": provider.provider_type,
        "version": version,
    });
    label_as_clusterctl(&mut obj, provider);
    apply_value(client, &obj).await
}

/// Whether `GET http://127.0.0.1:<port>/readyz` answers 200.
fn ready(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
}

impl ClusterApi {
    /// Installs Cluster API into the control plane behind `kubeconfig` and starts its three
    /// managers, with state, certificates and logs under `dir`: CRDs (labeled, with conversion
    /// webhooks), the managers, then the admission webhooks once the managers serve, and
    /// clusterctl's inventory. Returns once every manager is ready and the webhooks are
    /// effective.
    pub async fn start(kubeconfig: &Path, dir: &Path) -> anyhow::Result<Self> {
        let started = Instant::now();
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let client = crate::control_plane::client_for(kubeconfig).await?;
        let pki = WebhookPki::generate()?;
        let version = version()?;
        let mut capi = ClusterApi {
            processes: Vec::new(),
            dir: dir.clone(),
        };
        let mut plan = Vec::new();
        let mut crds = Vec::new();
        for provider in PROVIDERS {
            let ports = Ports::free()?;
            crds.extend(provider_crds(
                &provider,
                Some((ports.webhook, &pki.ca_pem)),
            )?);
            plan.push((provider, ports));
        }
        crds.push(clusterctl_provider_crd()?);
        crate::control_plane::apply_crds(&client, &crds).await?;
        for (provider, ports) in &plan {
            let child = start_manager(kubeconfig, &dir, provider, *ports, &pki)?;
            capi.processes.push((*provider, *ports, child));
        }
        capi.wait_ready(started)?;
        for (provider, ports) in &plan {
            for config in webhook_configurations(provider, ports.webhook, &pki.ca_pem)? {
                apply_webhook_configuration(&client, config).await?;
            }
            register_provider(&client, provider, &version).await?;
        }
        wait_webhooks_effective(&client, started).await?;
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "Cluster API {version} ready"
        );
        Ok(capi)
    }

    /// The directory holding the managers' certificates and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Each running manager with its ports.
    pub fn managers(&self) -> impl Iterator<Item = (&Provider, &Ports)> {
        self.processes.iter().map(|(p, ports, _)| (p, ports))
    }

    /// The process ID of the manager started from `binary` (`capi-manager`, ...), while it runs:
    /// for measuring its memory and CPU (issue 18's scale harness).
    pub fn pid(&self, binary: &str) -> Option<u32> {
        self.processes
            .iter()
            .find(|(p, _, _)| p.binary == binary)
            .map(|(_, _, child)| child.id())
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for (provider, _, child) in &mut self.processes {
            if let Some(status) = child.try_wait()? {
                let log = self.dir.join(format!("{}.log", provider.binary));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!(
                    "{} exited ({status}); last log lines of {}:\n{}",
                    provider.binary,
                    log.display(),
                    tail.join("\n")
                );
            }
        }
        Ok(())
    }

    fn wait_ready(&mut self, started: Instant) -> anyhow::Result<()> {
        loop {
            self.check_alive()?;
            if self
                .processes
                .iter()
                .all(|(_, ports, _)| ready(ports.health))
            {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "Cluster API's managers were not ready after {READY_TIMEOUT:?} (logs in {})",
                    self.dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops every manager (SIGTERM, then SIGKILL after five seconds).
    pub fn stop(&mut self) {
        for (_, _, child) in self.processes.iter_mut().rev() {
            crate::control_plane::terminate(child);
        }
        self.processes.clear();
    }
}

impl Drop for ClusterApi {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts one manager with its own ports, certificates and log.
fn start_manager(
    kubeconfig: &Path,
    dir: &Path,
    provider: &Provider,
    ports: Ports,
    pki: &WebhookPki,
) -> anyhow::Result<Child> {
    let cert_dir = dir.join(provider.binary).join("certs");
    pki.write_to(&cert_dir)?;
    spawn(
        dir,
        provider.binary,
        &testbin::path(provider.binary)?,
        &[
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--webhook-port={}", ports.webhook),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            format!("--health-addr=127.0.0.1:{}", ports.health),
            format!("--diagnostics-address=127.0.0.1:{}", ports.diagnostics),
            "--insecure-diagnostics=true".into(),
            format!("--feature-gates={FEATURE_GATES}"),
            "--leader-elect=false".into(),
            "--v=2".into(),
        ],
    )
}

async fn apply_webhook_configuration(client: &Client, config: Value) -> anyhow::Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let name = config["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match config["kind"].as_str() {
        Some("MutatingWebhookConfiguration") => {
            let obj: MutatingWebhookConfiguration = serde_json::from_value(config)?;
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &params, &Patch::Apply(&obj))
                .await
                .with_context(|| format!("registering {name}"))?;
        }
        Some("ValidatingWebhookConfiguration") => {
            let obj: ValidatingWebhookConfiguration = serde_json::from_value(config)?;
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &params, &Patch::Apply(&obj))
                .await
                .with_context(|| format!("registering {name}"))?;
        }
        other => bail!("unexpected webhook manifest kind {other:?} in {name}"),
    }
    Ok(())
}

/// Waits until the API server calls the managers: a server-side dry-run create of a v1beta1
/// Cluster needs both the conversion webhook (v1beta1 is not the storage version) and the core
/// manager's defaulting and validating webhooks.
async fn wait_webhooks_effective(client: &Client, started: Instant) -> anyhow::Result<()> {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"),
        "clusters",
    );
    ensure_namespace(client, "capi-system").await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "capi-system", &ar);
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "webhook-probe"},
        "spec": {"infrastructureRef": {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "TerraformCluster",
            "name": "webhook-probe"
        }}
    }))?;
    let params = kube::api::PostParams {
        dry_run: true,
        ..kube::api::PostParams::default()
    };
    let mut last = String::new();
    while started.elapsed() < READY_TIMEOUT {
        match api.create(&params, &probe).await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("Cluster API's webhooks were not effective after {READY_TIMEOUT:?}: {last}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // These read the Cluster API module `make testbin` downloads; without it they fail and say so.

    #[test]
    fn kubeadm_crds_carry_the_contract_labels_and_a_conversion_webhook() {
        let kubeadm = &PROVIDERS[1];
        let crds = provider_crds(kubeadm, Some((9443, "CA"))).unwrap();
        assert!(!crds.is_empty());
        for crd in &crds {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
                Some("v1beta2")
            );
            assert_eq!(
                labels.get("cluster.x-k8s.io/v1beta1").map(String::as_str),
                Some("v1beta1")
            );
            assert_eq!(
                labels.get(PROVIDER_LABEL).map(String::as_str),
                Some("bootstrap-kubeadm")
            );
            assert!(labels.contains_key(CLUSTERCTL_LABEL));
            let conversion = crd.spec.conversion.as_ref().expect("a conversion stanza");
            assert_eq!(conversion.strategy, "Webhook");
            let url = conversion
                .webhook
                .as_ref()
                .and_then(|w| w.client_config.as_ref())
                .and_then(|c| c.url.clone());
            assert_eq!(url.as_deref(), Some("https://127.0.0.1:9443/convert"));
        }
        for crd in provider_crds(kubeadm, None).unwrap() {
            assert!(
                crd.spec.conversion.is_none(),
                "no conversion without a manager"
            );
        }
    }

    #[test]
    fn webhook_configurations_are_renamed_and_point_at_loopback() {
        let core = &PROVIDERS[0];
        let configs = webhook_configurations(core, 9444, "CA").unwrap();
        assert_eq!(
            configs.len(),
            2,
            "a mutating and a validating configuration"
        );
        for config in &configs {
            let name = config["metadata"]["name"].as_str().unwrap();
            assert!(name.starts_with("capi-cluster-api-"), "{name}");
            for hook in config["webhooks"].as_array().unwrap() {
                let url = hook["clientConfig"]["url"].as_str().unwrap();
                assert!(url.starts_with("https://127.0.0.1:9444/"), "{url}");
                assert!(hook["clientConfig"]["service"].is_null());
                assert_eq!(hook["clientConfig"]["caBundle"], "Q0E=");
            }
        }
    }

    #[test]
    fn the_three_providers_and_clusterctls_inventory_have_crds() {
        let all = crds_without_managers().unwrap();
        let names: Vec<String> = all.iter().filter_map(|c| c.metadata.name.clone()).collect();
        for expected in [
            "clusters.cluster.x-k8s.io",
            "machinepools.cluster.x-k8s.io",
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
            "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
            "providers.clusterctl.cluster.x-k8s.io",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} missing from {names:?}"
            );
        }
    }
}
