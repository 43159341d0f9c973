//! Run leases and the cluster operation gate (spec: The Reconcile Lifecycle "Run leases and the
//! cluster operation gate"; INTERFACE-FACTS §7 `captf.io/lease`, §9 Leases): the object's run
//! lease `captf-run-<suffix>` and the cluster's write lease `captf-cluster-<hash>`, each held by
//! the name of the Job that took it, and given back when that Job is bookkept.

use std::collections::BTreeMap;

use api::constants::{annotations, labels, lease_kinds};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, PostParams};

use crate::kubeutil::{get_opt, is_conflict};

/// Whether a Job is still running (no Complete or Failed condition).
pub fn job_active(job: &Job) -> bool {
    crate::bookkeeping::finished_condition(job).is_none()
}

/// What taking a lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// Held by this Job now.
    Taken,
    /// Held by another live Job.
    HeldBy(String),
}

/// The labels every CAPTF lease carries.
pub fn lease_labels(
    kind: &str,
    owner_kind: &str,
    owner_name: &str,
    cluster: &str,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::LEASE.to_owned(), kind.to_owned()),
        (labels::OWNER_KIND.to_owned(), owner_kind.to_owned()),
        (
            labels::OWNER_NAME.to_owned(),
            contract::names::owner_name_label(owner_name),
        ),
        (labels::CLUSTER_NAME.to_owned(), cluster.to_owned()),
    ])
}

/// Takes the lease `name` for Job `job`: created when missing, taken over when its holder Job is
/// gone or finished, kept when this Job already holds it.
pub async fn take(
    client: &kube::Client,
    ns: &str,
    name: &str,
    job: &str,
    op: &str,
    lease_labels: BTreeMap<String, String>,
) -> kube::Result<Take> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let now = Timestamp::now();
    let annotations = BTreeMap::from([
        (annotations::LEASE_OP.to_owned(), op.to_owned()),
        (annotations::LEASE_ACQUIRED_AT.to_owned(), now.to_string()),
    ]);
    let spec = LeaseSpec {
        holder_identity: Some(job.to_owned()),
        acquire_time: Some(MicroTime(now)),
        ..LeaseSpec::default()
    };
    for _ in 0..3 {
        match get_opt(&api, name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(ns.to_owned()),
                        labels: Some(lease_labels.clone()),
                        annotations: Some(annotations.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec.clone()),
                };
                match api.create(&PostParams::default(), &lease).await {
                    Ok(_) => return Ok(Take::Taken),
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(mut lease) => {
                let holder = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default();
                if holder == job {
                    return Ok(Take::Taken);
                }
                if !holder.is_empty()
                    && let Some(j) = get_opt(&jobs, &holder).await?
                    && job_active(&j)
                {
                    return Ok(Take::HeldBy(holder));
                }
                lease.spec = Some(spec.clone());
                lease.metadata.annotations = Some(annotations.clone());
                lease.metadata.labels = Some(lease_labels.clone());
                match api.replace(name, &PostParams::default(), &lease).await {
                    Ok(_) => return Ok(Take::Taken),
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(Take::HeldBy("another reconcile".to_owned()))
}

/// Gives the lease `name` back when `job` holds it.
pub async fn give_back(client: &kube::Client, ns: &str, name: &str, job: &str) -> kube::Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    for _ in 0..3 {
        let Some(mut lease) = get_opt(&api, name).await? else {
            return Ok(());
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if holder != Some(job) {
            return Ok(());
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.acquire_time = None;
        }
        match api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The live Job holding lease `name`, if any.
pub async fn live_holder(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> kube::Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Some(lease) = get_opt(&api, name).await? else {
        return Ok(None);
    };
    let Some(holder) = lease
        .spec
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
    else {
        return Ok(None);
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    Ok(match get_opt(&jobs, &holder).await? {
        Some(j) if job_active(&j) => Some(holder),
        _ => None,
    })
}

/// How many apply, destroy or restore Jobs of the cluster's machines and pools are running.
pub async fn machines_operating(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
) -> kube::Result<u32> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "{}={cluster},{}=true",
        labels::CLUSTER_NAME,
        labels::MANAGED
    ));
    let mut n = 0u32;
    for j in jobs.list(&lp).await? {
        let l = j.metadata.labels.clone().unwrap_or_default();
        let kind = l.get(labels::OWNER_KIND).map(String::as_str);
        let op = l.get(labels::OP).map(String::as_str);
        if kind != Some("TerraformCluster")
            && matches!(op, Some("apply" | "destroy" | "restore"))
            && job_active(&j)
        {
            n += 1;
        }
    }
    Ok(n)
}

/// The lease kinds, re-exported for callers.
pub use lease_kinds::{CLUSTER as CLUSTER_LEASE, RUN as RUN_LEASE};
