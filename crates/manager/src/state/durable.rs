//! The durable inputs Secret as a pass sees it (spec: Job Inputs "The durable inputs Secret";
//! Security Model "Image pinning by digest"): its annotations come from the cached metadata, the
//! few rendered values every pass reads are decoded once per resourceVersion and kept, and the
//! whole Secret (the rendered root and variables) is read only when a Job renders from it.

use std::sync::Arc;

use contract::names::ObjectKind;
use contract::render::{MAIN_TF_JSON, RenderedInputs, TFVARS_JSON};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use serde_json::Value;

use crate::runtime::caches::Caches;
use crate::runtime::kubeutil::get_opt;

/// The rendered variables a pass reads every time (the `control_plane_initialized` latch, the
/// endpoint the apply rendered, the failure domain a machine asked for); nothing else of the
/// Secret's data is kept.
pub const KEPT_VARIABLES: [&str; 3] = [
    "control_plane_initialized",
    "control_plane_endpoint",
    "failure_domain",
];

/// The durable inputs Secret of one object.
#[derive(Debug, Clone, Default)]
pub struct Durable {
    namespace: String,
    name: String,
    meta: Option<ObjectMeta>,
    kept: Arc<Value>,
    full: Option<Secret>,
}

/// [`KEPT_VARIABLES`] out of a durable inputs Secret's `terraform.tfvars.json`.
pub fn kept_variables(secret: &Secret) -> Value {
    let all: Value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(TFVARS_JSON))
        .and_then(|b| serde_json::from_slice(&b.0).ok())
        .unwrap_or(Value::Null);
    let kept: serde_json::Map<String, Value> = KEPT_VARIABLES
        .iter()
        .filter_map(|k| all.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    Value::Object(kept)
}

impl Durable {
    /// The Secret `name` in `ns` of the object with `uid`: read from the cache, its data decoded
    /// again only when its resourceVersion changed.
    pub async fn observe(
        client: &kube::Client,
        caches: &Caches,
        ns: &str,
        name: &str,
        uid: &str,
    ) -> kube::Result<Self> {
        let mut durable = Self {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            meta: None,
            kept: Arc::new(Value::Null),
            full: None,
        };
        let Some(meta) = caches.secret(ns, name) else {
            return Ok(durable);
        };
        let key = format!("{uid}/durable");
        let rv = meta.metadata.resource_version.clone().unwrap_or_default();
        if let Some(kept) = caches.decoded.get::<Value>(&key, &rv) {
            durable.meta = Some(meta.metadata.clone());
            durable.kept = kept;
            return Ok(durable);
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), ns);
        if let Some(secret) = get_opt(&api, name).await? {
            durable.written(secret);
            let rv = durable.resource_version().unwrap_or_default();
            caches.decoded.put(&key, &rv, durable.kept.clone());
        }
        Ok(durable)
    }

    /// Whether the Secret exists.
    pub fn exists(&self) -> bool {
        self.meta.is_some()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its resourceVersion, when it exists.
    pub fn resource_version(&self) -> Option<String> {
        self.meta.as_ref()?.resource_version.clone()
    }

    /// A non-empty annotation.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.meta
            .as_ref()?
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// [`KEPT_VARIABLES`] as rendered (`Null` without the Secret).
    pub fn kept_variables(&self) -> &Value {
        &self.kept
    }

    /// The rendered `control_plane_initialized`, for the latch.
    pub fn control_plane_initialized(&self) -> Option<bool> {
        self.kept.get("control_plane_initialized")?.as_bool()
    }

    /// The Secret as just written (or read whole).
    pub fn written(&mut self, secret: Secret) {
        self.kept = Arc::new(kept_variables(&secret));
        self.meta = Some(secret.metadata.clone());
        self.full = Some(secret);
    }

    /// Keeps what was decoded under the Secret's current resourceVersion (after this pass wrote
    /// it), so the next pass does not read it again.
    pub fn remember(&self, caches: &Caches, uid: &str) {
        if let Some(rv) = self.resource_version() {
            caches
                .decoded
                .put(&format!("{uid}/durable"), &rv, self.kept.clone());
        }
    }

    /// The rendered root and variables it holds for inputs hash `hash`, read whole once.
    pub async fn rendered(
        &mut self,
        client: &kube::Client,
        kind: ObjectKind,
        hash: &str,
    ) -> kube::Result<Option<RenderedInputs>> {
        if !self.exists() {
            return Ok(None);
        }
        if self.full.is_none() {
            let api: Api<Secret> = Api::namespaced(client.clone(), &self.namespace);
            match get_opt(&api, &self.name).await? {
                Some(s) => self.written(s),
                None => return Ok(None),
            }
        }
        let data = |key: &str| {
            let bytes = self.full.as_ref()?.data.as_ref()?.get(key)?;
            String::from_utf8(bytes.0.clone()).ok()
        };
        Ok(Some(RenderedInputs {
            kind,
            main_tf_json: match data(MAIN_TF_JSON) {
                Some(d) => d,
                None => return Ok(None),
            },
            tfvars_json: match data(TFVARS_JSON) {
                Some(d) => d,
                None => return Ok(None),
            },
            inputs_hash: hash.to_owned(),
        }))
    }
}
