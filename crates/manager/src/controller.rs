//! The controllers (spec: Architecture "Components"; INTERFACE-FACTS §4 "Controllers /
//! concurrency"): TerraformCluster, TerraformMachine, TerraformMachinePool and the
//! TerraformClusterIdentity status, each
//! reading the shared [`crate::runtime::caches`] (and the TerraformMachineTemplate capacity controller,
//! [`crate::kinds::template`], with its own watch) and woken by the triggers those caches' watches compute
//! (who wakes whom, and which changes do not, is there), plus the orphan sweep.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::Store;
use tracing::{debug, warn};

use crate::pass::Error;
use crate::reconcile::reconcile;
use crate::runtime::context::{Context, Target};

pub use crate::runtime::backoff::{ErrorBackoff, error_delay};

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
    let backoff = ErrorBackoff::default();
    let on_error = backoff.clone();
    controller
        .graceful_shutdown_on(stop)
        .run(
            move |obj: Arc<K>, ctx: Arc<Context>| {
                let backoff = backoff.clone();
                async move {
                    let uid = obj.meta().uid.clone().unwrap_or_default();
                    let result = reconcile(target(obj.as_ref().clone()), &ctx).await;
                    if result.is_ok() {
                        backoff.succeeded(&uid);
                    }
                    result
                }
            },
            move |obj: Arc<K>, error: &Error, ctx: Arc<Context>| {
                let uid = obj.meta().uid.clone().unwrap_or_default();
                let delay = on_error.failed(&uid, ctx.settings.sync_period);
                debug!(%error, ?delay, "requeue after error");
                Action::requeue(delay)
            },
            ctx,
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "controller");
            }
        })
        .await;
}

fn controller<K>(
    store: Store<K>,
    triggers: futures::channel::mpsc::UnboundedReceiver<kube::runtime::reflector::ObjectRef<K>>,
    concurrency: u16,
) -> Controller<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    Controller::for_stream(futures::stream::pending(), store)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .reconcile_on(triggers)
}

/// Runs the caches, the TerraformCluster, TerraformMachine and identity status controllers and
/// the orphan sweep until `shutdown` resolves.
pub async fn run(ctx: Context, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (caches, triggers, watches) = crate::runtime::caches::start(&ctx.client, &ctx.settings);
    // Aborted with this future too: a manager dropped at any await point (a crash, in tests) takes
    // its watches with it instead of leaving them streaming into caches nobody reads.
    let watches = AbortOnDrop(tokio::spawn(watches));
    let counted = caches.clone();
    ctx.metrics
        .count_jobs_active_with(move || counted.jobs_active());
    let ctx = Arc::new(Context {
        caches: caches.clone(),
        ..ctx
    });
    let (tx, rx) = tokio::sync::watch::channel(false);
    let stop = move || {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    tokio::select! {
        r = caches.ready() => {
            if let Err(e) = r {
                warn!(error = %e, "a cache stopped before it was filled");
                return;
            }
        }
        () = stop() => {
            return;
        }
    }

    let tc_run = drive(
        controller(
            caches.terraform_clusters.clone(),
            triggers.clusters,
            ctx.settings.cluster_concurrency,
        ),
        stop(),
        ctx.clone(),
        |o| Target::Cluster(Box::new(o)),
    );
    let tm_run = drive(
        controller(
            caches.terraform_machines.clone(),
            triggers.machines,
            ctx.settings.machine_concurrency,
        ),
        stop(),
        ctx.clone(),
        |o| Target::Machine(Box::new(o)),
    );
    // Boxed, like the template controller: the pass's future is large.
    let pool_run = Box::pin(drive(
        controller(
            caches.terraform_machine_pools.clone(),
            triggers.pools,
            ctx.settings.pool_concurrency,
        ),
        stop(),
        ctx.clone(),
        |o| Target::Pool(Box::new(o)),
    ));
    let identity_run = crate::kinds::identity::status::run(
        ctx.clone(),
        controller(caches.identities.clone(), triggers.identities, 1),
        stop(),
    );
    // Boxed: its Controller is a large future of its own.
    let template_run = Box::pin(crate::kinds::template::run(ctx.clone(), stop()));
    let sweep_run = crate::runtime::sweep::run(
        ctx.client.clone(),
        ctx.settings.namespace.clone(),
        ctx.settings.sync_period,
        triggers.departures,
        stop(),
    );
    let ((), (), (), (), (), ()) = tokio::join!(
        tc_run,
        tm_run,
        pool_run,
        identity_run,
        template_run,
        sweep_run
    );
    drop(watches);
}

/// A spawned task aborted when this handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A failing pass backs off per object, exponentially from 5 s, capped at `--sync-period`,
    /// with the object's jitter; a success forgets the failures.
    #[test]
    fn error_policy_backs_off_per_object_with_jitter() {
        let cap = Duration::from_secs(600);
        let within = |d: Duration, base: u64| {
            d >= Duration::from_secs(base) && d <= Duration::from_secs(base) * 11 / 10
        };
        assert!(within(error_delay("a", 1, cap), 5));
        assert!(within(error_delay("a", 2, cap), 10));
        assert!(within(error_delay("a", 4, cap), 40));
        assert_eq!(error_delay("a", 30, cap), cap);
        assert_ne!(error_delay("a", 3, cap), error_delay("b", 3, cap));
        let backoff = ErrorBackoff::default();
        let first = backoff.failed("x", cap);
        let second = backoff.failed("x", cap);
        assert!(second > first);
        assert!(within(backoff.failed("y", cap), 5), "per object");
        backoff.succeeded("x");
        assert_eq!(backoff.failed("x", cap), first);
    }
}
