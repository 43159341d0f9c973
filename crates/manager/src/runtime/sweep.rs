//! The orphan sweep (INTERFACE-FACTS §8 "Per-namespace behaviour"; The Reconcile Lifecycle
//! "Deletion order"): in a namespace with no TerraformCluster, TerraformMachine or
//! TerraformMachinePool left, the runner ServiceAccount, its RoleBinding and the run and cluster
//! leases CAPTF created there (`captf.io/managed=true`) are deleted: right after the last object's
//! finalizer is removed or the last object is seen leaving (also when `clusterctl move` removed
//! the finalizer and deleted it), and by the periodic sweep at start and every `--sync-period`
//! once they are at least a minute old. Its reads are uncached and ignore `--watch-filter`.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, SystemTime};

use api::cluster::TerraformCluster;
use api::constants::labels;
use api::machine::TerraformMachine;
use api::machinepool::TerraformMachinePool;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::ListParams;
use tracing::{info, warn};

use crate::runtime::kubeutil::delete_opt;

/// How old a ServiceAccount, RoleBinding or lease must be before the periodic sweep deletes it.
pub const MIN_AGE: Duration = Duration::from_secs(60);

fn managed() -> ListParams {
    ListParams::default().labels(&format!("{}=true", labels::MANAGED))
}

/// Whether `ns` still holds a Terraform* object other than `ignoring` (a UID).
async fn in_use(client: &kube::Client, ns: &str, ignoring: Option<&str>) -> kube::Result<bool> {
    Ok(holds::<TerraformCluster>(client, ns, ignoring).await?
        || holds::<TerraformMachine>(client, ns, ignoring).await?
        || holds::<TerraformMachinePool>(client, ns, ignoring).await?)
}

/// Whether `ns` holds an object of kind `K` other than `ignoring` (a UID).
async fn holds<K>(client: &kube::Client, ns: &str, ignoring: Option<&str>) -> kube::Result<bool>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let listed = api.list_metadata(&ListParams::default()).await?.items;
    Ok(listed.iter().any(|o| o.metadata.uid.as_deref() != ignoring))
}

/// Sweeps one namespace unless a Terraform* object (other than `ignoring`) is still there;
/// returns how many objects it deleted.
pub async fn sweep_namespace(
    client: &kube::Client,
    ns: &str,
    ignoring: Option<&str>,
    min_age: Duration,
) -> kube::Result<usize> {
    if in_use(client, ns, ignoring).await? {
        return Ok(0);
    }
    // Only what is older than `min_age`: an object created while the periodic sweep looks has
    // its runner RBAC created seconds later, and keeps it.
    let cutoff = SystemTime::now()
        .checked_sub(min_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let old = |meta: &ObjectMeta| {
        meta.creation_timestamp
            .as_ref()
            .is_some_and(|t| SystemTime::from(t.0) <= cutoff)
    };
    let mut deleted = 0;
    deleted += delete_old::<ServiceAccount>(client, ns, &old).await?;
    deleted += delete_old::<RoleBinding>(client, ns, &old).await?;
    deleted += delete_old::<Lease>(client, ns, &old).await?;
    if deleted > 0 {
        info!(
            namespace = ns,
            deleted,
            "swept CAPTF's runner RBAC and leases from a namespace with no Terraform* object"
        );
    }
    Ok(deleted)
}

/// Deletes the CAPTF-managed objects of kind `K` in `ns` that `old` accepts; how many it deleted.
async fn delete_old<K>(
    client: &kube::Client,
    ns: &str,
    old: &impl Fn(&ObjectMeta) -> bool,
) -> kube::Result<usize>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let mut deleted = 0;
    for meta in api.list_metadata(&managed()).await?.items {
        if let Some(name) = meta
            .metadata
            .name
            .as_deref()
            .filter(|_| old(&meta.metadata))
        {
            deleted += usize::from(delete_opt(&api, name).await?);
        }
    }
    Ok(deleted)
}

/// The namespaces holding CAPTF-managed objects of kind `K`.
async fn namespaces_of<K>(client: &kube::Client, into: &mut BTreeSet<String>) -> kube::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    for meta in api.list_metadata(&managed()).await?.items {
        into.extend(meta.metadata.namespace);
    }
    Ok(())
}

/// Sweeps every namespace holding CAPTF-managed ServiceAccounts, RoleBindings or leases (or
/// only `namespace`).
pub async fn sweep(client: &kube::Client, namespace: Option<&str>) -> kube::Result<usize> {
    let mut namespaces = BTreeSet::new();
    if let Some(ns) = namespace {
        namespaces.insert(ns.to_owned());
    } else {
        namespaces_of::<ServiceAccount>(client, &mut namespaces).await?;
        namespaces_of::<RoleBinding>(client, &mut namespaces).await?;
        namespaces_of::<Lease>(client, &mut namespaces).await?;
    }
    let mut deleted = 0;
    for ns in namespaces {
        deleted += sweep_namespace(client, &ns, None, MIN_AGE).await?;
    }
    Ok(deleted)
}

/// Sweeps at start and every `period`, and a namespace as soon as a Terraform* object leaves it
/// (when it was the last, its runner RBAC and leases go at once), until `stop` resolves.
pub async fn run(
    client: kube::Client,
    namespace: Option<String>,
    period: Duration,
    departures: impl futures::Stream<Item = String> + Send,
    stop: impl Future<Output = ()> + Send,
) {
    let periodic = async {
        loop {
            if let Err(e) = sweep(&client, namespace.as_deref()).await {
                warn!(error = %e, "orphan sweep");
            }
            tokio::time::sleep(period).await;
        }
    };
    let on_departure = departures.for_each(|ns| {
        let client = client.clone();
        async move {
            if let Err(e) = sweep_namespace(&client, &ns, None, Duration::ZERO).await {
                warn!(namespace = %ns, error = %e, "orphan sweep after an object left");
            }
        }
    });
    tokio::select! {
        () = periodic => {}
        () = on_departure => {}
        () = stop => {}
    }
}
