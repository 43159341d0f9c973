//! The kube API as the book's `kubectl` commands use it: apply a rendered YAML stream, get, list,
//! delete and wait, on any kind by `apiVersion` and `kind` (no kubectl binary is needed).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Api, Client};
use serde_json::Value;

/// Cluster API's core group version, as every object here is written.
pub const CAPI: &str = "cluster.x-k8s.io/v1beta2";
/// CAPTF's group version.
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// The kubeadm control plane's group version.
pub const KCP: &str = "controlplane.cluster.x-k8s.io/v1beta2";
/// The kubeadm bootstrap provider's group version.
pub const KUBEADM: &str = "bootstrap.cluster.x-k8s.io/v1beta2";

/// Discovered kinds by `(apiVersion, kind)`.
type KindCache = HashMap<(String, String), (ApiResource, ApiCapabilities)>;

/// A kube client that finds any kind by discovery (cached per kind).
#[derive(Clone)]
pub struct Kube {
    pub client: Client,
    kinds: std::sync::Arc<Mutex<KindCache>>,
}

impl std::fmt::Debug for Kube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kube").finish_non_exhaustive()
    }
}

/// A condition's `(status, reason)`, when the object has it.
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

/// Whether the object's condition `type_` has status `True`.
pub fn is_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|(s, _)| s == "True")
}

/// The object's name.
pub fn name_of(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Polls `check` every half second until it returns `Some`, or fails after `timeout` naming
/// `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let started = Instant::now();
    let mut last_error = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = format!(" (last error: {e:#})"),
        }
        if started.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}{last_error}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl Kube {
    /// A client for the kubeconfig at `path`.
    pub async fn from_kubeconfig(path: &std::path::Path) -> anyhow::Result<Self> {
        Ok(Self::new(testenv::control_plane::client_for(path).await?))
    }

    pub fn new(client: Client) -> Self {
        Kube {
            client,
            kinds: std::sync::Arc::default(),
        }
    }

    async fn resource(
        &self,
        api_version: &str,
        kind: &str,
    ) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(found) = self
            .kinds
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .get(&key)
        {
            return Ok(found.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let found = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .with_context(|| format!("discovering {api_version} {kind}"))?;
        self.kinds
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .insert(key, found.clone());
        Ok(found)
    }

    /// The API of a kind, in `ns` when it is namespaced (all namespaces when `ns` is empty).
    pub async fn api(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
    ) -> anyhow::Result<Api<DynamicObject>> {
        let (ar, caps) = self.resource(api_version, kind).await?;
        Ok(match caps.scope {
            Scope::Namespaced if !ns.is_empty() => {
                Api::namespaced_with(self.client.clone(), ns, &ar)
            }
            _ => Api::all_with(self.client.clone(), &ar),
        })
    }

    /// The object as JSON, or `None` when it does not exist.
    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> anyhow::Result<Option<Value>> {
        let api = self.api(api_version, kind, ns).await?;
        Ok(api
            .get_opt(name)
            .await
            .with_context(|| format!("getting {kind} {ns}/{name}"))?
            .map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    /// Every object of a kind in `ns` (all namespaces when empty), optionally by label selector.
    pub async fn list(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
        selector: &str,
    ) -> anyhow::Result<Vec<Value>> {
        let api = self.api(api_version, kind, ns).await?;
        let mut params = ListParams::default();
        if !selector.is_empty() {
            params = params.labels(selector);
        }
        Ok(api
            .list(&params)
            .await
            .with_context(|| format!("listing {kind} in {ns:?}"))?
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap_or_default())
            .collect())
    }

    /// Applies one object (server-side, as `kubectl apply --server-side` would).
    pub async fn apply(&self, obj: &Value, default_ns: &str) -> anyhow::Result<()> {
        self.apply_with(obj, default_ns, false).await
    }

    /// Applies one object, or only asks the API server (and its admission webhooks) whether it
    /// would (`--dry-run=server`).
    pub async fn apply_with(
        &self,
        obj: &Value,
        default_ns: &str,
        dry_run: bool,
    ) -> anyhow::Result<()> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let kind = obj["kind"].as_str().unwrap_or_default();
        let name = name_of(obj);
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or(default_ns);
        let api = self.api(api_version, kind, ns).await?;
        let mut params = PatchParams::apply("kubectl").force();
        params.dry_run = dry_run;
        api.patch(&name, &params, &Patch::Apply(obj))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
        Ok(())
    }

    /// Applies every document of a YAML stream, in order (`kubectl apply -f -`); returns the
    /// `(kind, name)` of each.
    pub async fn apply_yaml(
        &self,
        yaml: &str,
        default_ns: &str,
    ) -> anyhow::Result<Vec<(String, String)>> {
        self.apply_yaml_with(yaml, default_ns, false).await
    }

    /// [`Kube::apply_yaml`], or its server-side dry run.
    pub async fn apply_yaml_with(
        &self,
        yaml: &str,
        default_ns: &str,
        dry_run: bool,
    ) -> anyhow::Result<Vec<(String, String)>> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(yaml).context("parsing the YAML stream")?;
        let mut applied = Vec::new();
        for doc in docs.into_iter().filter(Value::is_object) {
            self.apply_with(&doc, default_ns, dry_run).await?;
            applied.push((
                doc["kind"].as_str().unwrap_or_default().to_owned(),
                name_of(&doc),
            ));
        }
        Ok(applied)
    }

    /// Merge-patches an object's spec or metadata.
    pub async fn merge(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> anyhow::Result<()> {
        let api = self.api(api_version, kind, ns).await?;
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .with_context(|| format!("patching {kind} {ns}/{name}"))?;
        Ok(())
    }

    /// Deletes an object (background propagation, as kubectl); a missing one is fine.
    pub async fn delete(
        &self,
        api_version: &str,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let api = self.api(api_version, kind, ns).await?;
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting {kind} {ns}/{name}")),
        }
    }

    /// Waits until the object exists and `ready` holds for it; returns it. On a timeout the error
    /// carries the object's last conditions.
    pub async fn wait_for(
        &self,
        (api_version, kind): (&str, &str),
        ns: &str,
        name: &str,
        timeout: Duration,
        what: &str,
        ready: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let waited = eventually(timeout, &format!("{kind} {ns}/{name}: {what}"), || async {
            Ok(self
                .get(api_version, kind, ns, name)
                .await?
                .filter(|o| ready(o)))
        })
        .await;
        match waited {
            Ok(v) => Ok(v),
            Err(e) => {
                let last = self.get(api_version, kind, ns, name).await.ok().flatten();
                let status = last.map_or_else(
                    || "it does not exist".to_owned(),
                    |o| format!("its status: {}", o["status"]),
                );
                Err(e.context(status))
            }
        }
    }

    /// Waits until the object is gone.
    pub async fn wait_gone(
        &self,
        (api_version, kind): (&str, &str),
        ns: &str,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        eventually(
            timeout,
            &format!("{kind} {ns}/{name} to be gone"),
            || async {
                Ok(self
                    .get(api_version, kind, ns, name)
                    .await?
                    .is_none()
                    .then_some(()))
            },
        )
        .await
    }
}
