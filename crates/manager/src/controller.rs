//! The controllers (spec: Architecture "Components"; INTERFACE-FACTS §4 "Controllers /
//! concurrency"): TerraformCluster and TerraformMachine, each watching its kind, its owned Jobs,
//! its Cluster API owners and the identities, and the TerraformClusterIdentity status.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use api::capi::{Cluster, Machine};
use api::cluster::TerraformCluster;
use api::constants::labels;
use api::identity::TerraformClusterIdentity;
use api::machine::TerraformMachine;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, warn};

use crate::context::{Context, Target};
use crate::reconcile::{Error, reconcile};

fn namespaced<K>(ctx: &Context) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match &ctx.settings.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    }
}

fn main_watch(ctx: &Context) -> watcher::Config {
    let wc = watcher::Config::default();
    match &ctx.settings.watch_filter {
        Some(v) if !v.is_empty() => wc.labels(&format!("{}={v}", labels::WATCH_FILTER)),
        _ => wc,
    }
}

fn jobs_watch(kind: &str) -> watcher::Config {
    watcher::Config::default().labels(&format!(
        "{}=true,{}={kind}",
        labels::MANAGED,
        labels::OWNER_KIND
    ))
}

fn error_policy<K>(_obj: Arc<K>, error: &Error, _ctx: Arc<Context>) -> Action {
    debug!(%error, "requeue after error");
    Action::requeue(Duration::from_secs(5))
}

/// The cluster name a TerraformCluster belongs to: its label, else its Cluster owner's name.
fn tc_cluster_name(tc: &TerraformCluster) -> Option<String> {
    tc.labels().get(labels::CLUSTER_NAME).cloned().or_else(|| {
        tc.owner_references()
            .iter()
            .find(|o| o.kind == "Cluster")
            .map(|o| o.name.clone())
    })
}

/// Identity changes that matter to the objects using them are spec changes (a new Secret, the
/// allowed namespaces), not the status the identity controller writes: this remembers the
/// generation each identity was last seen at.
#[derive(Clone, Default)]
struct SpecChanges(Arc<std::sync::Mutex<std::collections::HashMap<String, Option<i64>>>>);

impl SpecChanges {
    fn changed(&self, tci: &TerraformClusterIdentity) -> bool {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = seen.insert(tci.name_any(), tci.metadata.generation);
        previous != Some(tci.metadata.generation)
    }
}

/// The object a Cluster API owner's `spec.infrastructureRef` names, when it is of `kind`.
fn infrastructure<K>(
    ns: Option<String>,
    reference: Option<api::capi::ContractVersionedObjectReference>,
    kind: &str,
) -> Option<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
{
    let r = reference.filter(|r| r.api_group == api::GROUP && r.kind == kind)?;
    let o = ObjectRef::new(&r.name);
    Some(match ns {
        Some(ns) => o.within(&ns),
        None => o,
    })
}

/// An identity's spec change reconciles every object of the controller's store.
fn on_identity_change<K>(
    store: Store<K>,
) -> impl Fn(TerraformClusterIdentity) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let seen = SpecChanges::default();
    move |tci| {
        if !seen.changed(&tci) {
            return Vec::new();
        }
        store
            .state()
            .into_iter()
            .map(|o| ObjectRef::from_obj(o.as_ref()))
            .collect()
    }
}

/// Runs one controller's passes until `stop` resolves.
async fn drive<K>(
    controller: Controller<K>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
    ctx: Arc<Context>,
    target: fn(K) -> Target,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    controller
        .graceful_shutdown_on(stop)
        .run(
            move |obj: Arc<K>, ctx: Arc<Context>| async move {
                reconcile(target(obj.as_ref().clone()), &ctx).await
            },
            error_policy,
            ctx,
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "controller");
            }
        })
        .await;
}

/// Runs the TerraformCluster and TerraformMachine controllers until `shutdown` resolves.
pub async fn run(ctx: Context, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let ctx = Arc::new(ctx);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let stop = move || {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };

    // TerraformCluster.
    let tcs: Api<TerraformCluster> = namespaced(&ctx);
    let tc_controller = Controller::new(tcs, main_watch(&ctx))
        .with_config(ControllerConfig::default().concurrency(ctx.settings.cluster_concurrency))
        .owns(namespaced::<Job>(&ctx), jobs_watch("TerraformCluster"));
    let tc_store = tc_controller.store();
    let store = tc_store.clone();
    let tc_controller = tc_controller
        .watches(
            namespaced::<Cluster>(&ctx),
            watcher::Config::default(),
            |c: Cluster| {
                infrastructure(c.namespace(), c.spec.infrastructure_ref, "TerraformCluster")
            },
        )
        .watches(
            namespaced::<TerraformMachine>(&ctx),
            watcher::Config::default(),
            move |tm: TerraformMachine| {
                let cluster = tm.labels().get(labels::CLUSTER_NAME).cloned();
                let ns = tm.namespace();
                store
                    .state()
                    .into_iter()
                    .filter(|tc| {
                        tc.namespace() == ns && cluster.is_some() && tc_cluster_name(tc) == cluster
                    })
                    .map(|tc| ObjectRef::from_obj(tc.as_ref()))
                    .collect::<Vec<_>>()
            },
        );
    let tc_controller = tc_controller.watches(
        Api::<TerraformClusterIdentity>::all(ctx.client.clone()),
        watcher::Config::default(),
        on_identity_change(tc_store.clone()),
    );
    let tc_run = drive(tc_controller, stop(), ctx.clone(), |o| {
        Target::Cluster(Box::new(o))
    });

    // TerraformMachine.
    let tms: Api<TerraformMachine> = namespaced(&ctx);
    let tm_controller = Controller::new(tms, main_watch(&ctx))
        .with_config(ControllerConfig::default().concurrency(ctx.settings.machine_concurrency))
        .owns(namespaced::<Job>(&ctx), jobs_watch("TerraformMachine"));
    let tm_store = tm_controller.store();
    let by_cluster = |store: kube::runtime::reflector::Store<TerraformMachine>,
                      ns: Option<String>,
                      cluster: Option<String>| {
        store
            .state()
            .into_iter()
            .filter(|tm| {
                tm.namespace() == ns
                    && cluster.is_some()
                    && tm.labels().get(labels::CLUSTER_NAME) == cluster.as_ref()
            })
            .map(|tm| ObjectRef::from_obj(tm.as_ref()))
            .collect::<Vec<_>>()
    };
    let store = tm_store.clone();
    let store2 = tm_store.clone();
    let store3 = tm_store.clone();
    let tm_controller = tm_controller
        .watches(
            namespaced::<Machine>(&ctx),
            watcher::Config::default(),
            |m: Machine| {
                infrastructure(m.namespace(), m.spec.infrastructure_ref, "TerraformMachine")
            },
        )
        .watches(
            namespaced::<Cluster>(&ctx),
            watcher::Config::default(),
            move |c: Cluster| by_cluster(store.clone(), c.namespace(), c.metadata.name.clone()),
        )
        .watches(
            namespaced::<TerraformCluster>(&ctx),
            watcher::Config::default(),
            move |tc: TerraformCluster| {
                by_cluster(store2.clone(), tc.namespace(), tc_cluster_name(&tc))
            },
        )
        .watches(
            Api::<TerraformClusterIdentity>::all(ctx.client.clone()),
            watcher::Config::default(),
            on_identity_change(store3),
        );
    let tm_run = drive(tm_controller, stop(), ctx.clone(), |o| {
        Target::Machine(Box::new(o))
    });

    let identity_run = crate::identity_status::run(ctx.clone(), stop());
    let sweep_run = crate::sweep::run(
        ctx.client.clone(),
        ctx.settings.namespace.clone(),
        ctx.settings.sync_period,
        stop(),
    );

    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    let ((), (), r, ()) = tokio::join!(tc_run, tm_run, identity_run, sweep_run);
    if let Err(e) = r {
        warn!(error = %e, "TerraformClusterIdentity status loop ended");
    }
}
