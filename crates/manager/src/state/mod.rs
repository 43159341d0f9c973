//! Terraform state as the manager sees it (spec: Terraform State "Secret names and the suffix",
//! "Locks", "What CAPTF reads from state", "State on deletion"): reading an object's state
//! Secrets through the `contract` state reader, adopting them after a successful apply, finding
//! a stale lock, and removing state once a destroy succeeded.

pub mod backups;
pub mod durable;
pub mod history;
pub mod restore;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use api::constants::{annotations, labels};
use contract::names::{
    JobNameParts, ObjectKind, Operation, job_name, owner_name_label, state_lock_lease_name,
    state_secret_name,
};
use contract::state::{StateError, StateSecret, StateSet, StateSummary, read_state};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

use crate::runtime::caches::Caches;
use crate::runtime::kubeutil::{delete_opt, get_opt, is_not_found};

/// What reading an object's state found.
#[derive(Debug, Clone)]
pub enum StateReading {
    /// A readable state.
    Read(Box<StateSummary>),
    /// No state Secret.
    NotFound,
    /// State that cannot be read, with its reason.
    Unreadable(StateError),
}

/// The object's state Secrets (the backend's labels for the suffix).
pub async fn list_state_secrets(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
) -> kube::Result<Vec<Secret>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{}={suffix}", labels::TFSTATE_SECRET_SUFFIX));
    Ok(api.list(&lp).await?.items)
}

/// The object's state as a pass reads it: what the state reader made of the state Secrets, and
/// when the base Secret was created (after a `clusterctl move` the drift clock starts there).
#[derive(Debug, Clone)]
pub struct StateView {
    /// The reading.
    pub reading: StateReading,
    /// When the base state Secret was created.
    pub base_created: Option<SystemTime>,
    /// The names and resourceVersions of the state Secrets it was read from.
    pub version: String,
    /// The digest of their content, as a backup records it.
    pub digest: String,
}

/// The version of a set of Secrets: their names and resourceVersions, sorted.
fn version_of<'a>(metas: impl Iterator<Item = &'a ObjectMeta>) -> String {
    let mut parts: Vec<String> = metas
        .map(|m| {
            format!(
                "{}@{}",
                m.name.as_deref().unwrap_or_default(),
                m.resource_version.as_deref().unwrap_or_default()
            )
        })
        .collect();
    parts.sort();
    parts.join(",")
}

/// Reads the state of the object with `uid` and state suffix `suffix`: from what was decoded
/// before while the cached state Secrets keep their resourceVersions, else listed and decoded
/// again (the decoded summary is kept, not the Secrets' data). With `fresh` (a Job of the object
/// finished since the last pass: the Secret cache may not show the state it wrote yet) the
/// state is listed from the API server whatever the cache shows. A pass that adopted the state
/// keeps what it decoded of the Secrets its adoption wrote ([`remember_adopted`]), valid once the
/// cache shows those very resourceVersions; until then the read lists the state again. Returns
/// the listed Secrets too when it listed them (the pass's adoption writes onto those, under
/// their resourceVersions, without listing them again).
pub async fn observe(
    client: &kube::Client,
    caches: &Caches,
    ns: &str,
    suffix: &str,
    uid: &str,
    fresh: bool,
) -> kube::Result<(Arc<StateView>, Option<Vec<Secret>>)> {
    let key = decoded_key(uid);
    let cached = caches.secrets_labelled(ns, labels::TFSTATE_SECRET_SUFFIX, suffix);
    if !fresh
        && let Some(view) = caches
            .decoded
            .get::<StateView>(&key, &version_of(cached.iter().map(|s| &s.metadata)))
    {
        return Ok((view, None));
    }
    let secrets = list_state_secrets(client, ns, suffix).await?;
    let view = Arc::new(view_of(suffix, &secrets));
    caches.decoded.put(&key, &view.version, view.clone());
    Ok((view, Some(secrets)))
}

/// What a pass reads of the state Secrets `secrets`.
pub fn view_of(suffix: &str, secrets: &[Secret]) -> StateView {
    let base = state_secret_name(suffix);
    StateView {
        reading: read(suffix, secrets),
        base_created: secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(base.as_str()))
            .and_then(|s| s.metadata.creation_timestamp.as_ref())
            .map(|t| SystemTime::from(t.0)),
        version: version_of(secrets.iter().map(|s| &s.metadata)),
        digest: backups::live_digest(suffix, secrets),
    }
}

/// Keeps, for the object with `uid`, what [`observe`] would decode of the state Secrets its
/// adoption just listed and wrote (`secrets`, as the API server returned them), so that the next
/// pass does not list them again once the cache shows them. Returns what it keeps.
pub fn remember_adopted(
    caches: &Caches,
    uid: &str,
    suffix: &str,
    secrets: &[Secret],
) -> Arc<StateView> {
    let view = Arc::new(view_of(suffix, secrets));
    caches
        .decoded
        .put(&decoded_key(uid), &view.version, view.clone());
    view
}

/// Whether the object's state Secrets on the API server are still those its state was read from
/// (`version`, a [`StateView`]'s). A pass that is about to start a Job asks this once it holds the
/// run lease: the Secret cache may lag the Job cache, and a Job that finished may have written a
/// state the pass has not seen. When they differ, what was decoded is forgotten, so that the next
/// pass reads the state from the API server.
pub async fn still_current(
    client: &kube::Client,
    caches: &Caches,
    ns: &str,
    suffix: &str,
    uid: &str,
    version: &str,
) -> kube::Result<bool> {
    let secrets = list_state_secrets(client, ns, suffix).await?;
    let current = version_of(secrets.iter().map(|s| &s.metadata)) == version;
    if !current {
        forget_decoded(caches, uid);
    }
    Ok(current)
}

/// Where [`observe`] keeps what it decoded of the state of the object with `uid`.
fn decoded_key(uid: &str) -> String {
    format!("{uid}/state")
}

/// Forgets what was decoded of the state of the object with `uid`: its next read lists the
/// state from the API server.
pub fn forget_decoded(caches: &Caches, uid: &str) {
    caches.decoded.forget(&decoded_key(uid));
}

/// Reads the object's live state.
pub fn read(suffix: &str, secrets: &[Secret]) -> StateReading {
    if secrets.is_empty() {
        return StateReading::NotFound;
    }
    let plain: Vec<StateSecret> = secrets.iter().map(to_state_secret).collect();
    if contract::state::first_write_cut_short(StateSet::Live { suffix }, &plain) {
        return StateReading::NotFound;
    }
    match read_state(StateSet::Live { suffix }, &plain) {
        Ok(summary) => StateReading::Read(Box::new(summary)),
        Err(StateError::NotFound) => StateReading::NotFound,
        Err(e) => StateReading::Unreadable(e),
    }
}

fn to_state_secret(s: &Secret) -> StateSecret {
    StateSecret {
        name: s.metadata.name.clone().unwrap_or_default(),
        labels: s.metadata.labels.clone().unwrap_or_default(),
        annotations: s.metadata.annotations.clone().unwrap_or_default(),
        data: s
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
    }
}

/// What adopting the state did.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    /// Whether anything was written (a pass that adopted already, and whose status write did not
    /// land, finds nothing to write).
    pub changed: bool,
    /// The state Secrets after the adoption: as listed, or as the adoption's patch returned them.
    pub secrets: Vec<Secret>,
}

/// After a successful apply or restore: every chunk Secret gets an owner reference to the object,
/// and the base Secret records the applied inputs hash. The adopting pass knows what it wrote,
/// so these writes wake no one (see [`crate::runtime::caches::OwnWrites`]). It writes onto
/// `listed` (the state Secrets this pass listed from the API server) when given, else lists
/// them: every write carries the Secret's resourceVersion, so a Secret changed since is refused,
/// never overwritten.
pub async fn adopt(
    client: &kube::Client,
    (ns, suffix): (&str, &str),
    owner: &OwnerReference,
    inputs_hash: &str,
    own_writes: &crate::runtime::caches::OwnWrites,
    listed: Option<Vec<Secret>>,
) -> kube::Result<Adopted> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let base = state_secret_name(suffix);
    let mut after: Vec<Secret> = Vec::new();
    let mut changed = false;
    let secrets = match listed {
        Some(secrets) => secrets,
        None => list_state_secrets(client, ns, suffix).await?,
    };
    for secret in secrets {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let mut owners = secret.metadata.owner_references.clone().unwrap_or_default();
        let owned = owners.iter().any(|o| o.uid == owner.uid);
        let recorded = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::INPUTS_HASH))
            .is_some_and(|h| h == inputs_hash);
        if owned && (name != base || recorded) {
            after.push(secret);
            continue;
        }
        if !owned {
            owners.push(owner.clone());
        }
        let mut patch = serde_json::json!({"metadata": {
            "ownerReferences": owners,
            "resourceVersion": secret.metadata.resource_version,
        }});
        if name == base {
            patch["metadata"]["annotations"] =
                serde_json::json!({ annotations::INPUTS_HASH: inputs_hash });
        }
        let (pp, merge) = (PatchParams::default(), Patch::Merge(&patch));
        let write = api.patch(&name, &pp, &merge);
        match own_writes.write("Secret", ns, &name, write).await {
            Ok(written) => {
                changed = true;
                after.push(written);
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Adopted {
        changed,
        secrets: after,
    })
}

/// The backend lock as seen before a Job starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCheck {
    /// Not held.
    Free,
    /// Held by one of the object's own runner pods that is gone or finished: the next Job
    /// force-unlocks this lock ID.
    Stale {
        /// The lock ID.
        id: String,
    },
    /// Held by something else (or a live runner): reported as `StateLocked`.
    Held {
        /// Who holds it, as the lock info says.
        who: String,
    },
}

/// Whether labels name the object `kind`/`name` as their owner (the owner labels every runner
/// Job and pod of the object carries). Names are not matched: a Job name hashes the object's
/// name when it would be too long, for some operations and not others.
pub fn owned_by(labels: Option<&BTreeMap<String, String>>, kind: ObjectKind, name: &str) -> bool {
    labels.is_some_and(|l| {
        l.get(labels::OWNER_KIND).map(String::as_str) == Some(kind.kind())
            && l.get(labels::OWNER_NAME) == Some(&owner_name_label(name))
    })
}

/// Whether `pod` is named as a runner pod of one of the object's Jobs, of any operation and
/// attempt: `captf-<kindshort>-<name>-<op>-a…`, or with the object name hashed as Job names do
/// when they would be too long (which depends on the operation and the attempt, so both forms
/// are tried). Used only once neither the pod nor its Job is left to carry labels.
pub fn named_as_own_pod(pod: &str, kind: ObjectKind, name: &str) -> bool {
    Operation::ALL.iter().any(|op| {
        let hashed = job_name(&JobNameParts {
            kind,
            name,
            operation: *op,
            attempt: u32::MAX,
            inputs_hash: "",
            tick: None,
        });
        let marker = format!("-{}-a", op.as_str());
        let plain = format!("captf-{}-{name}{marker}", kind.short());
        let hashed = hashed
            .rfind(&marker)
            .map(|i| format!("{}{marker}", &hashed[..i]));
        pod.starts_with(&plain) || hashed.is_some_and(|h| pod.starts_with(&h))
    })
}

/// Whether the object has a state: any state Secret but the empty base Secret of the backend's
/// first write cut short ([`contract::state::first_write_cut_short`]).
pub async fn exists(client: &kube::Client, ns: &str, suffix: &str) -> kube::Result<bool> {
    let secrets = list_state_secrets(client, ns, suffix).await?;
    Ok(!matches!(read(suffix, &secrets), StateReading::NotFound))
}

/// Releases the stale lock `id` the way the backend's own unlock does (the Lease's holder
/// cleared and its lock info removed), only while `id` still holds it: the update carries the
/// Lease's resourceVersion, so a lock taken meanwhile is never released. `true` when released.
pub async fn release_stale_lock(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
    id: &str,
) -> kube::Result<bool> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let name = state_lock_lease_name(suffix);
    let Some(mut lease) = get_opt(&leases, &name).await? else {
        return Ok(false);
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(id) {
        return Ok(false);
    }
    spec.holder_identity = None;
    if let Some(a) = lease.metadata.annotations.as_mut() {
        a.remove(annotations::TERRAFORM_LOCK_INFO);
    }
    match leases
        .replace(&name, &kube::api::PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if crate::runtime::kubeutil::is_conflict(&e) || is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads the lock Lease and decides whether it is free, stale or held. A lock is stale when its
/// holder (`Who` is `user@pod`) is one of the object's own runner pods that is gone or finished:
/// by the owner labels of the pod, or once the pod is gone of its Job, or once both are gone by
/// the pod's name ([`named_as_own_pod`]).
pub async fn check_lock(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
    kind: ObjectKind,
    name: &str,
) -> kube::Result<LockCheck> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Some(lease) = get_opt(&leases, &state_lock_lease_name(suffix)).await? else {
        return Ok(LockCheck::Free);
    };
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    if holder.is_empty() {
        return Ok(LockCheck::Free);
    }
    let info: BTreeMap<String, serde_json::Value> = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::TERRAFORM_LOCK_INFO))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let who = info
        .get("Who")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned();
    let id = info
        .get("ID")
        .and_then(|v| v.as_str())
        .map_or_else(|| holder.clone(), str::to_owned);
    let Some((_, pod_name)) = who.rsplit_once('@') else {
        return Ok(LockCheck::Held { who });
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let stale = match get_opt(&pods, pod_name).await? {
        Some(pod) => {
            owned_by(pod.metadata.labels.as_ref(), kind, name)
                && matches!(
                    pod.status.and_then(|s| s.phase).as_deref(),
                    Some("Succeeded" | "Failed")
                )
        }
        // A Job's pod is named `<job>-<suffix>`: the pod is gone, its Job tells whose it was.
        None => match pod_name.rsplit_once('-') {
            Some((job, _)) => {
                let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
                match get_opt(&jobs, job).await? {
                    Some(j) => owned_by(j.metadata.labels.as_ref(), kind, name),
                    None => named_as_own_pod(pod_name, kind, name),
                }
            }
            None => false,
        },
    };
    Ok(if stale {
        LockCheck::Stale { id }
    } else {
        LockCheck::Held { who }
    })
}

/// Deletes the state Secrets and the lock Lease (after a destroy succeeded, or when there never
/// was state).
pub async fn remove(client: &kube::Client, ns: &str, suffix: &str) -> kube::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    for secret in list_state_secrets(client, ns, suffix).await? {
        if let Some(name) = secret.metadata.name {
            delete_opt(&api, &name).await?;
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    delete_opt(&leases, &state_lock_lease_name(suffix)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stale-lock ownership is by the owner labels, not a name prefix: with a 32-character name a
    /// cluster's apply Job keeps the name while its refresh Job hashes it, so no prefix taken
    /// from one operation's name matches the other's pods.
    #[test]
    fn stale_lock_ownership_goes_by_the_owner_labels() {
        let name = "a-cluster-name-of-32-characters!".replace('!', "x");
        assert_eq!(name.len(), 32);
        let job = |operation| {
            job_name(&JobNameParts {
                kind: ObjectKind::Cluster,
                name: &name,
                operation,
                attempt: 1,
                inputs_hash: "",
                tick: None,
            })
        };
        let apply = job(Operation::Apply);
        let refresh = job(Operation::Refresh);
        assert!(
            apply.contains(&name) && !refresh.contains(&name),
            "{apply} {refresh}"
        );
        let labels = BTreeMap::from([
            (labels::OWNER_KIND.to_owned(), "TerraformCluster".to_owned()),
            (labels::OWNER_NAME.to_owned(), owner_name_label(&name)),
        ]);
        assert!(owned_by(Some(&labels), ObjectKind::Cluster, &name));
        assert!(!owned_by(Some(&labels), ObjectKind::Machine, &name));
        assert!(!owned_by(Some(&labels), ObjectKind::Cluster, "another"));
        assert!(!owned_by(None, ObjectKind::Cluster, &name));
        // Once pod and Job are both gone, the name still tells, for every operation.
        assert!(named_as_own_pod(
            &format!("{refresh}-zzzzz"),
            ObjectKind::Cluster,
            &name
        ));
        assert!(named_as_own_pod(
            &format!("{apply}-zzzzz"),
            ObjectKind::Cluster,
            &name
        ));
        assert!(!named_as_own_pod(
            &format!("{apply}-zzzzz"),
            ObjectKind::Machine,
            &name
        ));
        assert!(!named_as_own_pod(
            "captf-c-other-apply-a1-000000-zzzzz",
            ObjectKind::Cluster,
            &name
        ));
    }
}
