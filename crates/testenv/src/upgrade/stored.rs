//! The previous release's stored objects (book: Upgrading, "Upgrade notes"): what the previous
//! release's manager left in a namespace once its clusters were Ready — CAPTF's and Cluster
//! API's objects with their status, and the Secrets, ConfigMaps, Leases and runner RBAC beside
//! them — and the previous release's CRDs.
//!
//! `make e2e-upgrade` records them with `CAPTF_UPGRADE_RECORD=1` into
//! `crates/manager/tests/fixtures/upgrade/<version>.json.gz` ([`record`]). The manager suite
//! replays them into its own test environment as an upgrade leaves them ([`replay`]): created
//! under the previous release's CRDs, which are then replaced in place by this checkout's. Every
//! timestamp moves by the time since the recording, so that nothing falls due only because the
//! recording is old, and each owner reference and `observedGeneration` follows the new objects.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Client, Discovery};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where the recordings live, one per previous release.
pub const DIR: &str = "crates/manager/tests/fixtures/upgrade";

/// The label `clusterctl init` puts on a provider's CRDs, with CAPTF's value.
const PROVIDER_SELECTOR: &str = "cluster.x-k8s.io/provider=infrastructure-terraform";

/// The recording of [`record`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredObjects {
    /// The release that wrote them.
    pub release: String,
    /// Their namespace.
    pub namespace: String,
    /// When they were recorded (RFC 3339).
    pub recorded_at: String,
    /// CAPTF's CRDs as that release installed them.
    pub crds: Vec<Value>,
    /// The objects, sorted by API version, kind and name.
    pub objects: Vec<Value>,
}

/// The recording of the release `version` in this checkout.
pub fn path(version: &str) -> PathBuf {
    crate::env::repo_root()
        .join(DIR)
        .join(format!("{version}.json.gz"))
}

impl StoredObjects {
    /// Reads a recording; a missing one says how to make it.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::File::open(path).with_context(|| {
            format!(
                "no recording of the previous release's stored objects at {}: make one with \
                 `CAPTF_UPGRADE_RECORD=1 make e2e-upgrade`",
                path.display()
            )
        })?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Writes the recording, gzip-compressed JSON.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(serde_json::to_string_pretty(self)?.as_bytes())?;
        std::fs::write(path, gz.finish()?).with_context(|| format!("writing {}", path.display()))
    }

    /// The objects of `kind` (any API version).
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }
}

/// Whether the namespaced resource `ar` is one [`record`] keeps: Secrets, ConfigMaps,
/// ServiceAccounts, Leases, Roles and RoleBindings, and every kind of a `*cluster.x-k8s.io`
/// group (CAPTF's, Cluster API's, kubeadm's).
fn recorded(ar: &ApiResource) -> bool {
    match ar.group.as_str() {
        "" => ["Secret", "ConfigMap", "ServiceAccount"].contains(&ar.kind.as_str()),
        "coordination.k8s.io" => ar.kind == "Lease",
        "rbac.authorization.k8s.io" => ["Role", "RoleBinding"].contains(&ar.kind.as_str()),
        g => g.ends_with("cluster.x-k8s.io"),
    }
}

/// What a recording leaves out: what every namespace holds by itself, which a replay must not
/// create again, and the key material of a workload cluster CAPTF never reads (Cluster API's
/// certificates and kubeconfigs), which has no place in a file in the repository.
fn left_out(o: &Value) -> bool {
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    match o["kind"].as_str().unwrap_or_default() {
        "ServiceAccount" => name == "default",
        "ConfigMap" => name == "kube-root-ca.crt",
        "Secret" => {
            o["type"] == "kubernetes.io/service-account-token"
                || o["data"].get("tls.key").is_some()
                || (o["type"] == "cluster.x-k8s.io/secret" && name.ends_with("-kubeconfig"))
        }
        _ => false,
    }
}

/// Records what `release` stored in `ns`: the identities that allow it (cluster-scoped) and their
/// Secrets, every object of the recorded kinds in `ns`, and CAPTF's CRDs.
pub async fn record(client: &Client, ns: &str, release: &str) -> anyhow::Result<StoredObjects> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the API")?;
    let mut objects = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            let identities = ar.kind == "TerraformClusterIdentity";
            if !(identities || (caps.scope == Scope::Namespaced && recorded(&ar))) {
                continue;
            }
            let api: Api<DynamicObject> = if identities {
                Api::all_with(client.clone(), &ar)
            } else {
                Api::namespaced_with(client.clone(), ns, &ar)
            };
            for o in api.list(&kube::api::ListParams::default()).await?.items {
                let mut o = serde_json::to_value(o)?;
                o["apiVersion"] = json!(ar.api_version);
                o["kind"] = json!(ar.kind);
                if !left_out(&o) {
                    strip_server_fields(&mut o);
                    objects.push(o);
                }
            }
        }
    }
    objects.extend(identity_secrets(client, &objects).await?);
    objects.sort_by_key(|o| {
        (
            o["apiVersion"].as_str().unwrap_or_default().to_owned(),
            o["kind"].as_str().unwrap_or_default().to_owned(),
            super::name_of(o),
        )
    });
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = crds
        .list(&kube::api::ListParams::default().labels(PROVIDER_SELECTOR))
        .await?
        .items
        .into_iter()
        .map(|c| {
            let c = serde_json::to_value(c)?;
            Ok(json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {
                    "name": c["metadata"]["name"],
                    "labels": c["metadata"]["labels"],
                    "annotations": c["metadata"]["annotations"],
                },
                "spec": c["spec"],
            }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(StoredObjects {
        release: release.to_owned(),
        namespace: ns.to_owned(),
        recorded_at: Timestamp::now().to_string(),
        crds,
        objects,
    })
}

/// The Secret each recorded identity names (`spec.secretRef`), wherever it lives (by default in
/// `captf-system`): an identity whose Secret is missing is not Ready.
async fn identity_secrets(client: &Client, objects: &[Value]) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for identity in objects
        .iter()
        .filter(|o| o["kind"] == "TerraformClusterIdentity")
    {
        let r = &identity["spec"]["secretRef"];
        let (Some(name), Some(ns)) = (r["name"].as_str(), r["namespace"].as_str()) else {
            continue;
        };
        let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
        if let Some(secret) = api.get_opt(name).await? {
            let mut o = serde_json::to_value(secret)?;
            o["apiVersion"] = json!("v1");
            o["kind"] = json!("Secret");
            strip_server_fields(&mut o);
            out.push(o);
        }
    }
    Ok(out)
}

/// Drops what the API server writes and a replay cannot keep (`uid` and `generation` stay: a
/// replay maps owner references and `observedGeneration`s by them).
fn strip_server_fields(o: &mut Value) {
    if let Some(meta) = o["metadata"].as_object_mut() {
        for k in [
            "managedFields",
            "resourceVersion",
            "selfLink",
            "creationTimestamp",
        ] {
            meta.remove(k);
        }
    }
}

/// Replays `stored` into the cluster of `client` as an upgrade leaves them: CAPTF's CRDs
/// replaced by the previous release's, the namespace and every object created (owners first,
/// owner references pointing at the new owners, each status written with its timestamps moved
/// by the time since the recording, in their own namespaces, made when missing), then the CRDs
/// replaced in place by `crds`.
pub async fn replay(
    client: &Client,
    stored: &StoredObjects,
    crds: &[CustomResourceDefinition],
) -> anyhow::Result<()> {
    let previous: Vec<CustomResourceDefinition> = stored
        .crds
        .iter()
        .map(|c| serde_json::from_value(c.clone()))
        .collect::<Result<_, _>>()
        .context("the recorded CRDs")?;
    replace_crds(client, &previous).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut names: Vec<&str> = stored
        .objects
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .chain([stored.namespace.as_str()])
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        if namespaces.get_opt(name).await?.is_none() {
            let ns = serde_json::from_value(json!({"metadata": {"name": name}}))?;
            namespaces.create(&PostParams::default(), &ns).await?;
        }
    }
    let recorded: Timestamp = stored
        .recorded_at
        .parse()
        .context("the recording's recordedAt")?;
    let by = SignedDuration::from_secs(Timestamp::now().duration_since(recorded).as_secs());
    create_all(client, &stored.objects, by).await?;
    replace_crds(client, crds).await
}

/// Creates `objects` owners first; a cycle of owners is an error.
async fn create_all(client: &Client, objects: &[Value], by: SignedDuration) -> anyhow::Result<()> {
    let recorded_uids: Vec<&str> = objects
        .iter()
        .filter_map(|o| o["metadata"]["uid"].as_str())
        .collect();
    let mut uids: BTreeMap<String, String> = BTreeMap::new();
    let mut pending: Vec<&Value> = objects.iter().collect();
    let mut kinds = Kinds::default();
    while !pending.is_empty() {
        let (ready, waiting): (Vec<&Value>, Vec<&Value>) = pending.into_iter().partition(|o| {
            owner_uids(o)
                .iter()
                .all(|u| !recorded_uids.contains(u) || uids.contains_key(*u))
        });
        if ready.is_empty() {
            let names: Vec<String> = waiting.iter().map(|o| describe(o)).collect();
            bail!("the recorded objects' owners form a cycle: {names:?}");
        }
        for o in ready {
            let (old, new) = create_one(client, &mut kinds, o, &uids, by)
                .await
                .with_context(|| format!("replaying {}", describe(o)))?;
            uids.insert(old, new);
        }
        pending = waiting;
    }
    Ok(())
}

fn owner_uids(o: &Value) -> Vec<&str> {
    o["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str())
        .collect()
}

fn describe(o: &Value) -> String {
    format!(
        "{} {}",
        o["kind"].as_str().unwrap_or("?"),
        super::name_of(o)
    )
}

/// The APIs of the kinds met so far.
#[derive(Default)]
struct Kinds(BTreeMap<(String, String), (ApiResource, ApiCapabilities)>);

impl Kinds {
    async fn api(&mut self, client: &Client, o: &Value) -> anyhow::Result<Api<DynamicObject>> {
        let api_version = o["apiVersion"].as_str().unwrap_or_default();
        let kind = o["kind"].as_str().unwrap_or_default();
        let key = (api_version.to_owned(), kind.to_owned());
        if !self.0.contains_key(&key) {
            let found = super::resource(client, api_version, kind).await?;
            self.0.insert(key.clone(), found);
        }
        let ns = o["metadata"]["namespace"].as_str().unwrap_or_default();
        Ok(super::api_in(client, &self.0[&key], ns))
    }
}

/// Creates one recorded object and writes its status; returns its recorded and new uids.
async fn create_one(
    client: &Client,
    kinds: &mut Kinds,
    recorded: &Value,
    uids: &BTreeMap<String, String>,
    by: SignedDuration,
) -> anyhow::Result<(String, String)> {
    let api = kinds.api(client, recorded).await?;
    let mut o = recorded.clone();
    shift_times(&mut o, by);
    let status = o.as_object_mut().and_then(|m| m.remove("status"));
    let old_uid = recorded["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let old_generation = recorded["metadata"]["generation"].as_i64();
    if let Some(meta) = o["metadata"].as_object_mut() {
        meta.remove("uid");
        meta.remove("generation");
    }
    map_owners(&mut o, uids);
    let obj: DynamicObject = serde_json::from_value(o)?;
    let created = api.create(&PostParams::default(), &obj).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let new_uid = created.metadata.uid.clone().unwrap_or_default();
    if let Some(mut status) = status.filter(|s| s.as_object().is_some_and(|m| !m.is_empty())) {
        if let (Some(old), Some(new)) = (old_generation, created.metadata.generation) {
            map_observed_generations(&mut status, old, new);
        }
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .context("writing its status")?;
    }
    Ok((old_uid, new_uid))
}

/// Points each owner reference at the replayed owner; a reference to an owner not recorded is
/// dropped (the garbage collector would delete an object whose owner does not exist).
fn map_owners(o: &mut Value, uids: &BTreeMap<String, String>) {
    if let Some(refs) = o["metadata"]["ownerReferences"].as_array_mut() {
        refs.retain_mut(|r| match r["uid"].as_str().and_then(|u| uids.get(u)) {
            Some(new) => {
                r["uid"] = json!(new);
                true
            }
            None => false,
        });
    }
}

/// Every `observedGeneration` in `status`, recorded against generation `old`, moved to the
/// same distance from `new`, never below 1 (the lowest generation; an unset 0 stays 0).
fn map_observed_generations(status: &mut Value, old: i64, new: i64) {
    match status {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                match v.as_i64() {
                    Some(g) if k == "observedGeneration" && g > 0 => {
                        *v = json!((new - (old - g)).max(1));
                    }
                    _ => map_observed_generations(v, old, new),
                }
            }
        }
        Value::Array(a) => a
            .iter_mut()
            .for_each(|v| map_observed_generations(v, old, new)),
        _ => {}
    }
}

/// Moves every RFC 3339 UTC timestamp in `o` (metadata, spec, status; not a Secret's or
/// ConfigMap's data) by `by`, keeping its number of fractional digits.
fn shift_times(o: &mut Value, by: SignedDuration) {
    match o {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if !["data", "stringData", "binaryData"].contains(&k.as_str()) {
                    shift_times(v, by);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| shift_times(v, by)),
        Value::String(s) => {
            if let Some(moved) = shifted(s, by) {
                *s = moved;
            }
        }
        _ => {}
    }
}

/// `s` moved by `by` when it is an RFC 3339 UTC timestamp (`YYYY-MM-DDTHH:MM:SS[.f…]Z`).
fn shifted(s: &str, by: SignedDuration) -> Option<String> {
    let b = s.as_bytes();
    let shape = b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b.last() == Some(&b'Z');
    if !shape {
        return None;
    }
    let fraction = s[19..s.len() - 1].strip_prefix('.').map_or(0, str::len);
    let t: Timestamp = s.parse().ok()?;
    let t = t.checked_add(by).ok()?;
    let mut out = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    if fraction > 0 {
        let nanos = format!("{:09}", t.subsec_nanosecond());
        out.push('.');
        out.push_str(&nanos[..fraction.min(9)]);
    }
    out.push('Z');
    Some(out)
}

/// Replaces each of `crds` in place (creating those missing) and waits until each is
/// established, plus a moment for the API server to serve the new schema.
async fn replace_crds(client: &Client, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut crd = crd.clone();
        crd.metadata.resource_version = None;
        crd.metadata.uid = None;
        crd.status = None;
        match api.get_opt(&name).await? {
            Some(live) => {
                crd.metadata.resource_version = live.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &crd)
                    .await
                    .with_context(|| format!("replacing the CRD {name}"))?;
            }
            None => {
                api.create(&PostParams::default(), &crd)
                    .await
                    .with_context(|| format!("creating the CRD {name}"))?;
            }
        }
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let live = api.get(&name).await?;
            let established = live.status.and_then(|s| s.conditions).is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established {
                break;
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "the CRD {name} is not established after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The API server swaps a CRD's handler asynchronously after the update.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn timestamps_move_and_keep_their_precision_and_data_does_not() {
        let by = SignedDuration::from_secs(86_400 + 61);
        assert_eq!(
            shifted("2026-12-01T10:00:00Z", by).as_deref(),
            Some("2026-12-02T10:01:01Z")
        );
        assert_eq!(
            shifted("2026-12-01T10:00:00.123456Z", by).as_deref(),
            Some("2026-12-02T10:01:01.123456Z")
        );
        assert_eq!(shifted("h2:2026-12-01T10:00:00Z", by), None);
        assert_eq!(shifted("not a time", by), None);
        let mut o = json!({
            "metadata": {"annotations": {"a": "2026-12-01T10:00:00Z"}},
            "data": {"k": "2026-12-01T10:00:00Z"},
            "status": {"conditions": [{"lastTransitionTime": "2026-12-01T10:00:00Z"}]},
        });
        shift_times(&mut o, by);
        assert_eq!(o["metadata"]["annotations"]["a"], "2026-12-02T10:01:01Z");
        assert_eq!(o["data"]["k"], "2026-12-01T10:00:00Z");
        assert_eq!(
            o["status"]["conditions"][0]["lastTransitionTime"],
            "2026-12-02T10:01:01Z"
        );
    }

    #[test]
    fn observed_generations_keep_their_distance_from_the_generation() {
        let mut status = json!({
            "observedGeneration": 4,
            "conditions": [{"observedGeneration": 3}, {"observedGeneration": 1}],
            "unset": {"observedGeneration": 0},
            "v1beta1": {"observedGeneration": "4"},
        });
        map_observed_generations(&mut status, 4, 1);
        assert_eq!(status["observedGeneration"], 1);
        assert_eq!(status["conditions"][0]["observedGeneration"], 1);
        assert_eq!(status["conditions"][1]["observedGeneration"], 1);
        assert_eq!(status["unset"]["observedGeneration"], 0);
        assert_eq!(status["v1beta1"]["observedGeneration"], "4");
    }

    #[test]
    fn owner_references_follow_the_replayed_owners_and_others_are_dropped() {
        let mut o = json!({"metadata": {"ownerReferences": [
            {"uid": "old-1", "name": "a"}, {"uid": "elsewhere", "name": "b"}
        ]}});
        map_owners(&mut o, &[("old-1".to_owned(), "new-1".to_owned())].into());
        assert_eq!(
            o["metadata"]["ownerReferences"],
            json!([{"uid": "new-1", "name": "a"}])
        );
    }

    #[test]
    fn a_namespace_s_own_objects_key_material_and_other_kinds_are_not_recorded() {
        assert!(left_out(
            &json!({"kind": "ServiceAccount", "metadata": {"name": "default"}})
        ));
        assert!(left_out(
            &json!({"kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"}})
        ));
        assert!(!left_out(
            &json!({"kind": "ServiceAccount", "metadata": {"name": "captf-runner"}})
        ));
        assert!(left_out(
            &json!({"kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "c-ca"}, "data": {"tls.crt": "", "tls.key": ""}})
        ));
        assert!(left_out(
            &json!({"kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "c-kubeconfig"}, "data": {"value": ""}})
        ));
        assert!(!left_out(
            &json!({"kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "c-md-0-bootstrap"}, "data": {"value": "", "format": ""}})
        ));
        let ar = |group: &str, kind: &str| ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version: format!("{group}/v1"),
            kind: kind.into(),
            plural: String::new(),
        };
        assert!(recorded(&ar("", "Secret")));
        assert!(!recorded(&ar("", "Pod")));
        assert!(!recorded(&ar("batch", "Job")));
        assert!(recorded(&ar("bootstrap.cluster.x-k8s.io", "KubeadmConfig")));
        assert!(recorded(&ar(
            "infrastructure.cluster.x-k8s.io",
            "TerraformMachine"
        )));
        assert!(!recorded(&ar("events.k8s.io", "Event")));
    }
}
