//! Installing with the Cluster API Operator (issue 30 item 3; the book's Installation page,
//! "Install with the Cluster API Operator"): the Operator itself as its release renders it, and
//! each provider as the Operator's objects — Cluster API's core, kubeadm bootstrap and kubeadm
//! control-plane providers and CAPTF's `terraform` InfrastructureProvider — with their
//! components and `metadata.yaml` in ConfigMaps, as on a machine without internet access.
//!
//! - The Operator's manifest is `kustomize build` of `config/default` in its pinned module (built
//!   by `hack/testbin.sh cluster-api-operator`), with its image in the test registry: the
//!   binary on an empty base, as [`crate::install::mirror_images`] makes Cluster API's.
//! - A provider's ConfigMap holds `metadata` and, gzip-compressed in `binaryData`, `components`
//!   (CAPTF's and Cluster API's components are larger than a ConfigMap holds uncompressed),
//!   labelled with the provider's name, type and version, as the Operator's air-gapped page
//!   describes.

use anyhow::{Context as _, ensure};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::install::{capi_components, capi_releases, push_binary_image};
use crate::installed::{WAIT, wait_available};
use crate::kube_ops::{Kube, eventually, is_true, name_of};

/// The Operator's API.
pub const API: &str = "operator.cluster.x-k8s.io/v1alpha2";
/// The Operator's namespace and Deployment, as its `config/default` names them.
pub const NAMESPACE: &str = "capi-operator-system";
/// See [`NAMESPACE`].
pub const DEPLOYMENT: &str = "capi-operator-controller-manager";
/// The image `config/default` names, replaced by the mirror's.
const STAGING_IMAGE: &str = "gcr.io/k8s-staging-capi-operator/cluster-api-operator:dev";

/// The label keys a provider's ConfigMap carries (the Operator reads the version label).
pub const NAME_LABEL: &str = "provider.cluster.x-k8s.io/name";
/// See [`NAME_LABEL`].
pub const TYPE_LABEL: &str = "provider.cluster.x-k8s.io/type";
/// See [`NAME_LABEL`].
pub const VERSION_LABEL: &str = "provider.cluster.x-k8s.io/version";
/// The annotation saying `components` is gzip-compressed in `binaryData`.
pub const COMPRESSED: &str = "provider.cluster.x-k8s.io/compressed";

/// The Operator's repository in the test registry's mirror.
const REPOSITORY: &str = "you/capi-operator/cluster-api-operator";

/// The Operator's image in `registry`'s mirror.
pub fn image(registry: &str) -> anyhow::Result<String> {
    let version = testenv::testbin::version("cluster-api-operator")?;
    Ok(format!("{registry}/{REPOSITORY}:{version}"))
}

/// The Operator's install manifest with `image`: `kustomize build` of its `config/default`.
pub fn components(image: &str) -> anyhow::Result<String> {
    let dir = testenv::testbin::module_dir("cluster-api-operator")?.join("config/default");
    let text = testenv::manifests::kustomize_build(&dir)?;
    ensure!(
        text.contains(STAGING_IMAGE),
        "{} renders no image {STAGING_IMAGE}",
        dir.display()
    );
    Ok(text.replace(STAGING_IMAGE, image))
}

/// Pushes the Operator's image to `registry`, applies its manifest and waits until its
/// Deployment is available. cert-manager must be installed (it issues the Operator's webhook
/// certificate).
pub async fn install(kube: &Kube, registry: &str) -> anyhow::Result<()> {
    let version = testenv::testbin::version("cluster-api-operator")?;
    push_binary_image(
        registry,
        REPOSITORY,
        &version,
        "cluster-api-operator",
        "/manager",
    )
    .await?;
    kube.apply_yaml(&components(&image(registry)?)?, NAMESPACE)
        .await
        .context("applying the Operator's manifest")?;
    wait_available(kube, NAMESPACE, DEPLOYMENT).await?;
    Ok(())
}

/// A provider's ConfigMap in `namespace`, named `<name>-<version>`: `metadata` as text,
/// `components` gzip-compressed in `binaryData` with the [`COMPRESSED`] annotation, and the
/// provider's name, type (`core`, `bootstrap`, `control-plane`, `infrastructure`) and version as
/// labels.
pub fn components_configmap(
    namespace: &str,
    (name, type_, version): (&str, &str, &str),
    metadata: &str,
    components: &str,
) -> anyhow::Result<Value> {
    let compressed = crate::scale::gzip(components.as_bytes())?;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("{name}-{version}"),
            "namespace": namespace,
            "labels": {NAME_LABEL: name, TYPE_LABEL: type_, VERSION_LABEL: version},
            "annotations": {COMPRESSED: "true"},
        },
        "data": {"metadata": metadata},
        "binaryData": {
            "components": base64::engine::general_purpose::STANDARD.encode(compressed),
        },
    }))
}

/// The type a provider's ConfigMap is labelled with, from clusterctl's provider type (the
/// Operator's kind of the same name).
fn type_label(provider_type: &str) -> anyhow::Result<&'static str> {
    Ok(match provider_type {
        "CoreProvider" => "core",
        "BootstrapProvider" => "bootstrap",
        "ControlPlaneProvider" => "control-plane",
        "InfrastructureProvider" => "infrastructure",
        other => anyhow::bail!("no Operator kind known for provider type {other}"),
    })
}

/// Installs Cluster API's three providers through the Operator: their namespaces, their
/// components (as Cluster API's release renders them) in ConfigMaps, and a provider object each
/// whose manager image is the one in `registry`'s mirror. Returns `(kind, namespace, name)` of
/// each, to wait for.
pub async fn install_capi(
    kube: &Kube,
    registry: &str,
) -> anyhow::Result<Vec<(&'static str, String, String)>> {
    let version = testenv::testbin::version("cluster-api")?;
    let metadata_path = testenv::capi::module_dir()?.join("metadata.yaml");
    let metadata = std::fs::read_to_string(&metadata_path)
        .with_context(|| format!("reading {}", metadata_path.display()))?;
    let mut installed = Vec::new();
    for release in capi_releases()? {
        let (kind, name) = (release.provider.provider_type, release.provider.name);
        let type_ = type_label(kind)?;
        let ns = release.provider.namespace;
        testenv::capi::ensure_namespace(&kube.client, ns).await?;
        let components = capi_components(&release, &version)?;
        let cm = components_configmap(ns, (name, type_, &version), &metadata, &components)?;
        kube.apply(&cm, ns).await?;
        let provider = json!({
            "apiVersion": API,
            "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "version": version,
                "fetchConfig": {"selector": {"matchLabels": {NAME_LABEL: name, TYPE_LABEL: type_}}},
                "deployment": {"containers": [{
                    "name": "manager",
                    "imageUrl": format!("{registry}/you/cluster-api/{}:{version}", release.image),
                }]},
            },
        });
        apply_provider(kube, &provider).await?;
        installed.push((kind, ns.to_owned(), name.to_owned()));
    }
    Ok(installed)
}

/// Applies a provider object, retrying while the Operator's own webhook is not trusted yet
/// (cert-manager's cainjector writes its CA a moment after the Deployment is available).
pub async fn apply_provider(kube: &Kube, provider: &Value) -> anyhow::Result<()> {
    let ns = provider["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let what = format!(
        "{} {ns}/{} to be accepted",
        provider["kind"].as_str().unwrap_or_default(),
        name_of(provider)
    );
    eventually(WAIT, &what, || async {
        kube.apply(provider, ns).await.map(Some)
    })
    .await
}

/// Waits until the Operator reports the provider `kind` `ns/name` Ready with `version`
/// installed; returns it.
pub async fn wait_ready(
    kube: &Kube,
    kind: &str,
    ns: &str,
    name: &str,
    version: &str,
) -> anyhow::Result<Value> {
    kube.wait_for((API, kind), ns, name, WAIT, "Ready", |p| {
        is_true(p, "Ready") && p["status"]["installedVersion"] == version
    })
    .await
}

/// The installation page's section this install follows.
pub const SECTION: &str = "Install with the Cluster API Operator";

/// Installs CAPTF's release in `release` (a clusterctl repository folder:
/// `infrastructure-components.yaml` and `metadata.yaml`) through the Operator, as the
/// installation page's [`SECTION`] does: its namespace, the ConfigMap of its `sh` block, then its
/// `yaml` blocks as written, with `manager` merged into the provider's `spec.manager`. Returns the
/// provider's version.
pub async fn install_captf(
    kube: &Kube,
    release: &std::path::Path,
    manager: &Value,
) -> anyhow::Result<String> {
    let ns = "captf-system";
    let read = |file: &str| {
        let path = release.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let version = release
        .file_name()
        .and_then(|v| v.to_str())
        .context("the release folder is named after its version")?
        .to_owned();
    testenv::capi::ensure_namespace(&kube.client, ns).await?;
    let cm = components_configmap(
        ns,
        ("terraform", "infrastructure", &version),
        &read("metadata.yaml")?,
        &read("infrastructure-components.yaml")?,
    )?;
    kube.apply(&cm, ns).await?;
    let page = crate::install::page_yaml(&[SECTION])?;
    let docs = testenv::manifests::documents(&page)?;
    ensure!(
        docs.iter().any(|d| d["kind"] == "InfrastructureProvider"),
        "{SECTION} has no InfrastructureProvider: {page}"
    );
    for mut doc in docs {
        if doc["kind"] == "InfrastructureProvider" {
            ensure!(
                doc["spec"]["version"] == version.as_str(),
                "the page installs {} and the release is {version}",
                doc["spec"]["version"]
            );
            let spec_manager = &mut doc["spec"]["manager"];
            for (k, v) in manager.as_object().context("manager is an object")? {
                spec_manager[k] = v.clone();
            }
            apply_provider(kube, &doc).await?;
        } else {
            kube.apply(&doc, ns).await?;
        }
    }
    Ok(version)
}

/// The manager's container args in the Deployment the Operator installed.
pub async fn manager_args(kube: &Kube) -> anyhow::Result<Vec<String>> {
    let d = kube
        .get(
            "apps/v1",
            "Deployment",
            "captf-system",
            "captf-controller-manager",
        )
        .await?
        .context("the manager Deployment")?;
    let containers = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .context("containers")?;
    let manager = containers
        .iter()
        .find(|c| c["name"] == "manager")
        .context("no container named manager")?;
    Ok(manager["args"]
        .as_array()
        .context("args")?
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect())
}

/// The manager pod is Ready and never restarted: it took every flag it was given.
pub async fn check_manager_running(kube: &Kube) -> anyhow::Result<()> {
    let pods = kube
        .list(
            "v1",
            "Pod",
            "captf-system",
            "control-plane=controller-manager",
        )
        .await?;
    ensure!(pods.len() == 1, "one manager pod: {pods:#?}");
    let status = &pods[0]["status"]["containerStatuses"][0];
    ensure!(
        status["ready"] == true && status["restartCount"] == 0,
        "the manager is not running as started: {status:#}"
    );
    Ok(())
}
