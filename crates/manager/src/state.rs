//! Terraform state as the manager sees it (spec: Terraform State "Secret names and the suffix",
//! "Locks", "What CAPTF reads from state", "State on deletion"): reading an object's state
//! Secrets through the `contract` state reader, adopting them after a successful apply, finding
//! a stale lock, and removing state once a destroy succeeded.

use std::collections::BTreeMap;

use api::constants::{annotations, labels};
use contract::names::{state_lock_lease_name, state_secret_name};
use contract::state::{StateError, StateSecret, StateSet, StateSummary, read_state};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

use crate::kubeutil::{delete_opt, get_opt, is_not_found};

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

/// Reads the object's live state.
pub fn read(suffix: &str, secrets: &[Secret]) -> StateReading {
    if secrets.is_empty() {
        return StateReading::NotFound;
    }
    let plain: Vec<StateSecret> = secrets.iter().map(to_state_secret).collect();
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

/// After a successful apply or restore: every chunk Secret gets an owner reference to the object,
/// and the base Secret records the applied inputs hash.
pub async fn adopt(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
    owner: &OwnerReference,
    inputs_hash: &str,
) -> kube::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let base = state_secret_name(suffix);
    for secret in list_state_secrets(client, ns, suffix).await? {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let mut owners = secret.metadata.owner_references.clone().unwrap_or_default();
        let owned = owners.iter().any(|o| o.uid == owner.uid);
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
        } else if owned {
            continue;
        }
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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

/// Reads the lock Lease and decides whether it is free, stale or held. `job_prefix` is the
/// prefix every runner pod of the object carries (`captf-<kindshort>-<name>-`).
pub async fn check_lock(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
    job_prefix: &str,
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
    if !pod_name.starts_with(job_prefix) {
        return Ok(LockCheck::Held { who });
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let stale = match get_opt(&pods, pod_name).await? {
        None => true,
        Some(pod) => matches!(
            pod.status.and_then(|s| s.phase).as_deref(),
            Some("Succeeded" | "Failed")
        ),
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
