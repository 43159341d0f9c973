//! Identities and the credential mirror (spec: Identities and Credentials "How credentials reach
//! a Job", "Revoke access"; INTERFACE-FACTS §1 `IdentityAllowed`, `CredentialsMirrored`, §9
//! `captf-creds-<identity>`): which TerraformClusterIdentity an object resolves to, whether it
//! allows the namespace, and the namespace's mirror of its Secret, owned by every object using it.

pub mod runner_rbac;
pub mod status;

use std::collections::BTreeMap;

use api::cluster::TerraformCluster;
use api::constants::{annotations, conditions as ctype, events, labels, reasons};
use api::identity::{TerraformClusterIdentity, WorkloadIdentity};
use api::shared::JobPolicy;
use contract::health::ConditionStatus;
use contract::names::credential_mirror_secret_name;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};
use std::sync::Arc;

use crate::pass::conditions::Findings;
use crate::pass::observed::GateBlock;
use crate::runtime::caches::{Caches, Meta};
use crate::runtime::events::Outbox;
use crate::runtime::kubeutil::{get_opt, is_not_found};

/// The identity an object resolves to: its own `identityRef`, else the cluster's
/// `spec.defaults.identityRef`, else the cluster's own `spec.identityRef`.
pub fn resolve_identity_name(
    own: Option<&str>,
    cluster: Option<&TerraformCluster>,
) -> Option<String> {
    if let Some(own) = own.filter(|n| !n.is_empty()) {
        return Some(own.to_owned());
    }
    let cluster = cluster?;
    cluster
        .spec
        .defaults
        .as_ref()
        .and_then(|d| d.identity_ref.as_ref())
        .or(cluster.spec.workspace.identity_ref.as_ref())
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
}

/// The hash recorded as `captf.io/source-hash` on a mirror: SHA-256 over the sorted keys and
/// values of the source Secret's data.
pub fn source_hash(data: &BTreeMap<String, ByteString>) -> String {
    let mut h = Sha256::new();
    for (k, v) in data {
        h.update((k.len() as u64).to_be_bytes());
        h.update(k.as_bytes());
        h.update((v.0.len() as u64).to_be_bytes());
        h.update(&v.0);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// Whether `selector` matches a namespace's labels (matchLabels and matchExpressions).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// Whether a Secret is a credential mirror (`captf.io/mirrored=true`).
fn is_mirror(secret: &Secret) -> bool {
    is_mirror_meta(&secret.metadata)
}

pub use crate::runtime::caches::is_mirror_meta;

/// The outcome of the identity step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityOutcome {
    /// Allowed, and mirrored once the planned [`MirrorWrite`] (if any) lands: the identity's
    /// name.
    Ready {
        /// The identity.
        identity: String,
        /// A keyless identity's ServiceAccount, audience and cloud fields (no mirror).
        keyless: Option<Box<WorkloadIdentity>>,
    },
    /// No Job may run.
    Blocked(GateBlock),
}

/// A write to the namespace's credential mirror, chosen by [`check`] and made by Act
/// ([`write_mirror`], [`remove_mirror`]).
#[derive(Debug, Clone, PartialEq)]
pub enum MirrorWrite {
    /// The cached mirror is up to date: only this owner is added to it.
    AddOwner {
        /// The mirror's name.
        name: String,
        /// The cached mirror's UID (a Secret recreated under the name refuses the patch).
        uid: Option<String>,
        /// The owner to add.
        owner: OwnerReference,
        /// The identity.
        identity: String,
        /// Where its Secret is.
        source: (String, String),
    },
    /// The mirror is missing or out of date: created or refreshed from the source Secret, with
    /// this owner among its owners.
    Refresh {
        /// The mirror's name.
        name: String,
        /// The owner to add.
        owner: OwnerReference,
        /// The identity.
        identity: String,
        /// Where its Secret is (namespace, name).
        source: (String, String),
    },
    /// The identity no longer allows the namespace: its mirror goes.
    Remove {
        /// The mirror's name.
        name: String,
    },
}

impl MirrorWrite {
    /// The mirror's name.
    pub fn name(&self) -> &str {
        match self {
            Self::AddOwner { name, .. } | Self::Refresh { name, .. } | Self::Remove { name } => {
                name
            }
        }
    }
}

/// What the identity step found: its outcome, and the mirror write it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityCheck {
    /// Allowed (and mirrored once the write lands), or the gate.
    pub outcome: IdentityOutcome,
    /// The mirror write, when one is needed.
    pub mirror: Option<MirrorWrite>,
}

/// Resolves and checks the identity for an object in `ns` from the caches, setting
/// `IdentityAllowed` and `CredentialsMirrored` as they will be once the planned mirror write
/// lands; nothing is written here (reads only: the source Secret's data is read when its hash is
/// not known for the cached resourceVersion).
pub async fn check(
    client: &kube::Client,
    caches: &Caches,
    ns: &str,
    identity: Option<String>,
    owner: &OwnerReference,
    conds: &mut Findings,
    metrics: &crate::runtime::metrics::Metrics,
) -> kube::Result<IdentityCheck> {
    // Counted when the denial starts, not at every pass it lasts.
    let already_denied = conds.status(ctype::IDENTITY_ALLOWED) == Some("False");
    let denied = |metrics: &crate::runtime::metrics::Metrics, reason: &str| {
        if !already_denied {
            metrics.identity_denied(reason);
        }
    };
    let pending = |conds: &mut Findings| {
        conds.set(
            ctype::CREDENTIALS_MIRRORED,
            ConditionStatus::Unknown,
            reasons::MIRROR_PENDING,
            "The credentials are mirrored once the identity allows this namespace",
        );
    };
    let blocked = |reason: &'static str, mirror: Option<MirrorWrite>| IdentityCheck {
        outcome: IdentityOutcome::Blocked(GateBlock {
            condition: ctype::IDENTITY_ALLOWED,
            reason,
        }),
        mirror,
    };
    let Some(name) = identity else {
        conds.set(
            ctype::IDENTITY_ALLOWED,
            ConditionStatus::False,
            reasons::IDENTITY_NOT_FOUND,
            "No identityRef resolves: set spec.identityRef or the cluster's",
        );
        pending(conds);
        denied(metrics, "notfound");
        return Ok(blocked(reasons::IDENTITY_NOT_FOUND, None));
    };
    let Some(tci) = caches.identities.get(&ObjectRef::new(&name)) else {
        conds.set(
            ctype::IDENTITY_ALLOWED,
            ConditionStatus::False,
            reasons::IDENTITY_NOT_FOUND,
            &format!("TerraformClusterIdentity {name} does not exist"),
        );
        pending(conds);
        denied(metrics, "notfound");
        return Ok(blocked(reasons::IDENTITY_NOT_FOUND, None));
    };
    let mirror_name = credential_mirror_secret_name(&name);
    if !allows(caches, &tci, ns) {
        conds.set(
            ctype::IDENTITY_ALLOWED,
            ConditionStatus::False,
            reasons::NAMESPACE_NOT_ALLOWED,
            &format!("TerraformClusterIdentity {name} does not allow namespace {ns}"),
        );
        pending(conds);
        denied(metrics, "namespace");
        return Ok(blocked(
            reasons::NAMESPACE_NOT_ALLOWED,
            stale_mirror(caches, ns, mirror_name),
        ));
    }
    if let Some(keyless) = tci.spec.keyless() {
        return Ok(keyless_check(caches, ns, &name, keyless, conds));
    }
    let Some(source_ref) = tci.spec.secret_ref.as_ref() else {
        // The CRD requires one of the two; an object written around it reads as missing.
        conds.set(
            ctype::IDENTITY_ALLOWED,
            ConditionStatus::False,
            reasons::SECRET_NOT_FOUND,
            &format!("TerraformClusterIdentity {name} sets neither secretRef nor workloadIdentity"),
        );
        pending(conds);
        return Ok(blocked(reasons::SECRET_NOT_FOUND, None));
    };
    let Some(source) = caches.secret(&source_ref.namespace, &source_ref.name) else {
        conds.set(
            ctype::IDENTITY_ALLOWED,
            ConditionStatus::False,
            reasons::SECRET_NOT_FOUND,
            &format!(
                "The credentials Secret {}/{} of TerraformClusterIdentity {name} does not exist",
                source_ref.namespace, source_ref.name
            ),
        );
        pending(conds);
        return Ok(blocked(reasons::SECRET_NOT_FOUND, None));
    };
    identity_allowed(conds, &name, ns);
    let cached = caches.secret(ns, &mirror_name);
    if let Some(c) = cached.as_ref().filter(|c| !is_mirror_meta(&c.metadata)) {
        let message = format!(
            "Secret {} exists and is not a CAPTF credential mirror; rename or remove it",
            c.name_any()
        );
        conds.set(
            ctype::CREDENTIALS_MIRRORED,
            ConditionStatus::False,
            reasons::MIRROR_FAILED,
            &message,
        );
        return Ok(IdentityCheck {
            outcome: IdentityOutcome::Blocked(GateBlock {
                condition: ctype::CREDENTIALS_MIRRORED,
                reason: reasons::MIRROR_FAILED,
            }),
            mirror: None,
        });
    }
    let hash = cached_source_hash(client, caches, &source).await?;
    let source = (source_ref.namespace.clone(), source_ref.name.clone());
    let mirror = mirror_write(cached.as_deref(), hash.as_deref(), owner, &name, source);
    conds.set(
        ctype::CREDENTIALS_MIRRORED,
        ConditionStatus::True,
        reasons::MIRRORED,
        &format!("Secret {mirror_name} is up to date"),
    );
    Ok(IdentityCheck {
        outcome: IdentityOutcome::Ready {
            identity: name,
            keyless: None,
        },
        mirror,
    })
}

/// A keyless identity that allows `ns`: allowed, with nothing to mirror (`CredentialsMirrored`
/// reads `WorkloadIdentity`); a mirror left from when it named a Secret goes.
fn keyless_check(
    caches: &Caches,
    ns: &str,
    name: &str,
    keyless: &WorkloadIdentity,
    conds: &mut Findings,
) -> IdentityCheck {
    identity_allowed(conds, name, ns);
    conds.set(
        ctype::CREDENTIALS_MIRRORED,
        ConditionStatus::True,
        reasons::WORKLOAD_IDENTITY,
        &format!(
            "Keyless: Jobs run as ServiceAccount {} with a token for audience {}; no Secret is mirrored",
            keyless.service_account_name, keyless.audience
        ),
    );
    let mirror = stale_mirror(caches, ns, credential_mirror_secret_name(name));
    IdentityCheck {
        outcome: IdentityOutcome::Ready {
            identity: name.to_owned(),
            keyless: Some(Box::new(keyless.clone())),
        },
        mirror,
    }
}

/// `IdentityAllowed=True`: identity `name` allows namespace `ns`.
fn identity_allowed(conds: &mut Findings, name: &str, ns: &str) {
    conds.set(
        ctype::IDENTITY_ALLOWED,
        ConditionStatus::True,
        reasons::IDENTITY_ALLOWED,
        &format!("TerraformClusterIdentity {name} allows namespace {ns}"),
    );
}

/// The removal of the namespace's mirror `mirror_name`, when one is cached that the namespace
/// must no longer hold (the identity stopped allowing it, or became keyless).
fn stale_mirror(caches: &Caches, ns: &str, mirror_name: String) -> Option<MirrorWrite> {
    caches
        .secret(ns, &mirror_name)
        .filter(|m| is_mirror_meta(&m.metadata))
        .map(|_| MirrorWrite::Remove { name: mirror_name })
}

/// The ServiceAccount an object's Jobs run as: `spec.jobs.serviceAccountName`, else a keyless
/// identity's, else `captf-runner`. An error (the message for `IdentityAllowed`) when the Job
/// policy and a keyless identity name different ones: the token is the pod's own, so the Job
/// cannot run as one and carry the other's token.
pub fn job_service_account(
    policy: &JobPolicy,
    identity: &str,
    keyless: Option<&WorkloadIdentity>,
) -> Result<String, String> {
    match (policy.service_account_name.as_deref(), keyless) {
        (Some(own), Some(k)) if !own.is_empty() && own != k.service_account_name => Err(format!(
            "spec.jobs.serviceAccountName is {own}, but keyless TerraformClusterIdentity {identity} runs Jobs as ServiceAccount {}: unset it or name the same one",
            k.service_account_name
        )),
        (_, Some(k)) => Ok(k.service_account_name.clone()),
        (_, None) => Ok(policy.service_account_name_or_default().to_owned()),
    }
}

/// `IdentityAllowed=False/ServiceAccountConflict` with `message` ([`job_service_account`]), and
/// the gate it sets.
pub fn service_account_conflict(conds: &mut Findings, message: &str) -> GateBlock {
    conds.set(
        ctype::IDENTITY_ALLOWED,
        ConditionStatus::False,
        reasons::SERVICE_ACCOUNT_CONFLICT,
        message,
    );
    GateBlock {
        condition: ctype::IDENTITY_ALLOWED,
        reason: reasons::SERVICE_ACCOUNT_CONFLICT,
    }
}

/// `CredentialsMirrored=False/MirrorFailed` with `message` (a mirror write that failed in a way
/// the user must see), and the gate it sets.
pub fn mirror_failed(conds: &mut Findings, message: &str) -> GateBlock {
    conds.set(
        ctype::CREDENTIALS_MIRRORED,
        ConditionStatus::False,
        reasons::MIRROR_FAILED,
        message,
    );
    GateBlock {
        condition: ctype::CREDENTIALS_MIRRORED,
        reason: reasons::MIRROR_FAILED,
    }
}

/// The write the cached mirror `cached` needs for `owner` to use it: none when it is up to date
/// (its recorded source hash is the source's, `hash`) and `owner` already owns it; the owner
/// added when only that is missing; else a refresh from the source.
pub fn mirror_write(
    cached: Option<&Meta<Secret>>,
    hash: Option<&str>,
    owner: &OwnerReference,
    identity: &str,
    source: (String, String),
) -> Option<MirrorWrite> {
    let name = credential_mirror_secret_name(identity);
    let current = cached.filter(|c| {
        hash.is_some()
            && c.annotations()
                .get(annotations::SOURCE_HASH)
                .map(String::as_str)
                == hash
    });
    match current {
        Some(c) if c.owner_references().iter().any(|o| o.uid == owner.uid) => None,
        Some(c) => Some(MirrorWrite::AddOwner {
            name,
            uid: c.metadata.uid.clone(),
            owner: owner.clone(),
            identity: identity.to_owned(),
            source,
        }),
        None => Some(MirrorWrite::Refresh {
            name,
            owner: owner.clone(),
            identity: identity.to_owned(),
            source,
        }),
    }
}

/// Whether the identity allows namespace `ns`: listed, or matched by the selector.
fn allows(caches: &Caches, tci: &TerraformClusterIdentity, ns: &str) -> bool {
    let Some(allowed) = &tci.spec.allowed_namespaces else {
        return false;
    };
    if allowed.list.iter().flatten().any(|n| n == ns) {
        return true;
    }
    let Some(selector) = &allowed.selector else {
        return false;
    };
    let labels = caches
        .namespaces
        .get(&ObjectRef::new(ns))
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    selector_matches(selector, &labels)
}

/// The hash of the source Secret's data: decoded once per resourceVersion of the cached
/// metadata and kept (never the data itself), else read.
async fn cached_source_hash(
    client: &kube::Client,
    caches: &Caches,
    source: &Meta<Secret>,
) -> kube::Result<Option<String>> {
    let ns = source.metadata.namespace.clone().unwrap_or_default();
    let name = source.metadata.name.clone().unwrap_or_default();
    let key = format!("source/{ns}/{name}");
    let rv = source.metadata.resource_version.clone().unwrap_or_default();
    if let Some(hash) = caches.decoded.get::<String>(&key, &rv) {
        return Ok(Some(hash.as_ref().clone()));
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let Some(full) = get_opt(&api, &name).await? else {
        return Ok(None);
    };
    let hash = source_hash(&full.data.clone().unwrap_or_default());
    let rv = full.metadata.resource_version.clone().unwrap_or_default();
    caches.decoded.put(&key, &rv, Arc::new(hash.clone()));
    Ok(Some(hash))
}

/// Makes a planned [`MirrorWrite`] (Act): the owner added, or the mirror created or refreshed
/// from the source Secret, or removed. `Ok(Err(message))` when the mirror could not be written
/// for a reason the user must see (`CredentialsMirrored=False/MirrorFailed`); the events of
/// what was written go to `announced`.
pub async fn write_mirror(
    client: &kube::Client,
    ns: &str,
    write: &MirrorWrite,
    announced: &mut Outbox,
) -> kube::Result<Result<(), String>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let (name, owner, identity, source) = match write {
        MirrorWrite::Remove { name } => {
            remove_mirror(&api, name, announced).await?;
            return Ok(Ok(()));
        }
        MirrorWrite::AddOwner {
            name,
            uid,
            owner,
            identity,
            source,
        } => {
            match add_mirror_owner(&api, name, uid.as_deref(), owner).await {
                Ok(()) => return Ok(Ok(())),
                // Gone, or another Secret, since the cache saw it: read and written again below.
                Err(e)
                    if is_not_found(&e)
                        || crate::runtime::kubeutil::is_conflict(&e)
                        || crate::runtime::kubeutil::is_invalid(&e) => {}
                Err(e) => return Err(e),
            }
            (name, owner, identity, source)
        }
        MirrorWrite::Refresh {
            name,
            owner,
            identity,
            source,
        } => (name, owner, identity, source),
    };
    refresh_mirror(&api, name, owner, identity, source, announced).await
}

/// Creates or refreshes the mirror `name` from the source Secret and makes `owner` one of its
/// owners. `Ok(Err(message))` when a Secret of that name exists that is not a mirror, the source
/// is gone, or the mirror kept changing.
async fn refresh_mirror(
    api: &Api<Secret>,
    name: &str,
    owner: &OwnerReference,
    identity: &str,
    source: &(String, String),
    announced: &mut Outbox,
) -> kube::Result<Result<(), String>> {
    let ns = api.namespace().unwrap_or_default().to_owned();
    let sources: Api<Secret> = Api::namespaced(api.clone().into_client(), &source.0);
    let Some(source) = get_opt(&sources, &source.1).await? else {
        return Ok(Err(format!(
            "The credentials Secret of TerraformClusterIdentity {identity} went while it was mirrored"
        )));
    };
    let data = source.data.clone().unwrap_or_default();
    let hash = source_hash(&data);
    // Several objects of a namespace share one mirror: a conflicting write is read again.
    for _ in 0..5 {
        match get_opt(api, name).await? {
            None => {
                let secret = new_mirror(&ns, name, identity, &hash, owner, data.clone());
                match api.create(&PostParams::default(), &secret).await {
                    Ok(_) => {
                        announced.normal(
                            events::MIRROR_CREATED,
                            format!(
                                "Credential mirror {name} created from TerraformClusterIdentity {identity}"
                            ),
                        );
                        return Ok(Ok(()));
                    }
                    Err(e) if crate::runtime::kubeutil::is_conflict(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(mut existing) => {
                if !is_mirror(&existing) {
                    return Ok(Err(format!(
                        "Secret {name} exists and is not a CAPTF credential mirror; rename or remove it"
                    )));
                }
                if !refreshed(&mut existing, &hash, &data, owner) {
                    return Ok(Ok(()));
                }
                match api.replace(name, &PostParams::default(), &existing).await {
                    Ok(_) => return Ok(Ok(())),
                    Err(e) if crate::runtime::kubeutil::is_conflict(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(Err(format!(
        "Secret {name} kept changing while it was written; the next reconcile tries again"
    )))
}

/// A new mirror of `identity`'s Secret, `data` with its `hash`, owned by `owner`.
fn new_mirror(
    ns: &str,
    name: &str,
    identity: &str,
    hash: &str,
    owner: &OwnerReference,
    data: BTreeMap<String, ByteString>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                (labels::MANAGED.to_owned(), "true".to_owned()),
                (labels::MIRRORED.to_owned(), "true".to_owned()),
                (labels::MOVE.to_owned(), String::new()),
            ])),
            annotations: Some(BTreeMap::from([
                (annotations::IDENTITY.to_owned(), identity.to_owned()),
                (annotations::SOURCE_HASH.to_owned(), hash.to_owned()),
            ])),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// Brings `existing` up to the source's `hash` and `data` with `owner` among its owners;
/// whether anything changed.
fn refreshed(
    existing: &mut Secret,
    hash: &str,
    data: &BTreeMap<String, ByteString>,
    owner: &OwnerReference,
) -> bool {
    let annotations_map = existing.metadata.annotations.get_or_insert_default();
    let mut changed = false;
    if annotations_map
        .get(annotations::SOURCE_HASH)
        .map(String::as_str)
        != Some(hash)
    {
        annotations_map.insert(annotations::SOURCE_HASH.to_owned(), hash.to_owned());
        existing.data = Some(data.clone());
        changed = true;
    }
    let owners = existing.metadata.owner_references.get_or_insert_default();
    if !owners.iter().any(|o| o.uid == owner.uid) {
        owners.push(owner.clone());
        changed = true;
    }
    changed
}

/// Adds `owner` to the cached mirror's owners with a strategic merge patch, which merges owner
/// references by uid: the objects sharing the mirror add themselves without conflicting, and each
/// write carries one owner reference, not all of them. The mirror's uid rides along, so a Secret
/// recreated under the name since the cache saw it refuses the patch (uid is immutable).
async fn add_mirror_owner(
    api: &Api<Secret>,
    name: &str,
    uid: Option<&str>,
    owner: &OwnerReference,
) -> kube::Result<()> {
    let patch = serde_json::json!({
        "metadata": { "uid": uid, "ownerReferences": [owner] }
    });
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(drop)
}

/// Deletes the namespace's mirror `name` (access revoked), when it is still a mirror.
async fn remove_mirror(api: &Api<Secret>, name: &str, announced: &mut Outbox) -> kube::Result<()> {
    let Some(existing) = get_opt(api, name).await? else {
        return Ok(());
    };
    if !is_mirror(&existing) {
        return Ok(());
    }
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: existing.metadata.resource_version.clone(),
            uid: existing.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => {
            announced.normal(
                events::MIRROR_REMOVED,
                format!(
                    "Credential mirror {name} removed: the identity no longer allows this namespace"
                ),
            );
            Ok(())
        }
        Err(e) if is_not_found(&e) || crate::runtime::kubeutil::is_conflict(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Drops `owner_uid` from every mirror in `ns` it owns; a mirror left without owners is deleted
/// (Deletion order: "drops it from its credential mirror's owners").
pub async fn release_mirrors(
    client: &kube::Client,
    ns: &str,
    owner_uid: &str,
    outbox: &mut Outbox,
) -> kube::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&format!("{}=true", labels::MIRRORED));
    for listed in api.list(&lp).await? {
        let name = listed.metadata.name.clone().unwrap_or_default();
        // Other objects of the namespace write the same mirror: a conflict is read again.
        let mut secret = listed;
        for _ in 0..5 {
            let Some(owners) = secret.metadata.owner_references.as_mut() else {
                break;
            };
            if !owners.iter().any(|o| o.uid == owner_uid) {
                break;
            }
            owners.retain(|o| o.uid != owner_uid);
            let result = if owners.is_empty() {
                let dp = DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        resource_version: secret.metadata.resource_version.clone(),
                        uid: None,
                    }),
                    ..DeleteParams::default()
                };
                api.delete(&name, &dp).await.map(|_| {
                    outbox.normal(
                        events::MIRROR_REMOVED,
                        format!("Credential mirror {name} removed: its last user is gone"),
                    );
                })
            } else {
                api.replace(&name, &PostParams::default(), &secret)
                    .await
                    .map(drop)
            };
            match result {
                Ok(()) => break,
                Err(e) if is_not_found(&e) => break,
                Err(e) if crate::runtime::kubeutil::is_conflict(&e) => {
                    match get_opt(&api, &name).await? {
                        Some(fresh) => secret = fresh,
                        None => break,
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::cluster::{ClusterDefaults, TerraformClusterSpec};
    use api::shared::IdentityReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn cluster(own: Option<&str>, default: Option<&str>) -> TerraformCluster {
        let mut spec = TerraformClusterSpec::default();
        spec.workspace.identity_ref = own.map(|n| IdentityReference { name: n.to_owned() });
        spec.defaults = Some(ClusterDefaults {
            identity_ref: default.map(|n| IdentityReference { name: n.to_owned() }),
            ..ClusterDefaults::default()
        });
        TerraformCluster::new("c", spec)
    }

    #[test]
    fn a_keyless_identity_chooses_the_service_account_unless_the_policy_names_another() {
        let keyless = WorkloadIdentity {
            service_account_name: "cloud".into(),
            audience: "sts.amazonaws.com".into(),
            ..WorkloadIdentity::default()
        };
        let none = JobPolicy::default();
        let same = JobPolicy {
            service_account_name: Some("cloud".into()),
            ..JobPolicy::default()
        };
        let other = JobPolicy {
            service_account_name: Some("mine".into()),
            ..JobPolicy::default()
        };
        assert_eq!(
            job_service_account(&none, "id", None).unwrap(),
            "captf-runner"
        );
        assert_eq!(job_service_account(&other, "id", None).unwrap(), "mine");
        assert_eq!(
            job_service_account(&none, "id", Some(&keyless)).unwrap(),
            "cloud"
        );
        assert_eq!(
            job_service_account(&same, "id", Some(&keyless)).unwrap(),
            "cloud"
        );
        let conflict = job_service_account(&other, "id", Some(&keyless)).unwrap_err();
        assert!(
            conflict.contains("spec.jobs.serviceAccountName is mine"),
            "{conflict}"
        );
        assert!(conflict.contains("ServiceAccount cloud"), "{conflict}");
    }

    #[test]
    fn own_then_defaults_then_cluster() {
        let c = cluster(Some("cluster-id"), Some("default-id"));
        assert_eq!(resolve_identity_name(Some("own"), Some(&c)).unwrap(), "own");
        assert_eq!(resolve_identity_name(None, Some(&c)).unwrap(), "default-id");
        let c = cluster(Some("cluster-id"), None);
        assert_eq!(resolve_identity_name(None, Some(&c)).unwrap(), "cluster-id");
        assert_eq!(resolve_identity_name(None, None), None);
    }

    #[test]
    fn source_hash_changes_with_data_not_order() {
        let a = BTreeMap::from([
            ("A".to_owned(), ByteString(b"1".to_vec())),
            ("B".to_owned(), ByteString(b"2".to_vec())),
        ]);
        let mut b = a.clone();
        assert_eq!(source_hash(&a), source_hash(&b));
        b.insert("B".to_owned(), ByteString(b"3".to_vec()));
        assert_ne!(source_hash(&a), source_hash(&b));
        // Key/value boundaries are part of the hash.
        let c = BTreeMap::from([("AB".to_owned(), ByteString(b"".to_vec()))]);
        let d = BTreeMap::from([("A".to_owned(), ByteString(b"B".to_vec()))]);
        assert_ne!(source_hash(&c), source_hash(&d));
    }

    #[test]
    fn selectors() {
        let labels = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
        assert!(selector_matches(&LabelSelector::default(), &labels));
        let sel = LabelSelector {
            match_labels: Some(BTreeMap::from([("team".to_owned(), "b".to_owned())])),
            ..LabelSelector::default()
        };
        assert!(!selector_matches(&sel, &labels));
        let sel = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".to_owned(),
                operator: "In".to_owned(),
                values: Some(vec!["a".to_owned(), "c".to_owned()]),
            }]),
            ..LabelSelector::default()
        };
        assert!(selector_matches(&sel, &labels));
    }
}
