//! One reconcile pass of a TerraformCluster, TerraformMachine or TerraformMachinePool (spec: The Reconcile Lifecycle,
//! "One pass, one status patch", "One pass, visually"; ENGINEERING.md §4), in four steps:
//!
//! 1. Observe ([`crate::reconcile::observe`], with [`crate::reconcile::bookkeeping`]): the preamble, the finished
//!    Jobs, credentials, state and inputs, read from the caches into one [`Observation`] and the
//!    plain [`decide::Observed`] value;
//! 2. Decide ([`crate::reconcile::decide::decide`]): pure and clock-free;
//! 3. Act ([`crate::reconcile::act`]): the decision carried out idempotently (a crash between two steps is
//!    repaired by the next pass);
//! 4. Report ([`crate::reconcile::report`], with [`crate::pass::status`]): the whole new status from what
//!    Observe recorded (findings for the conditions, [`crate::pass::status::Fact`]s for the other
//!    fields), what was decided and what Act did, written once under a precondition,
//!    then the Jobs marked bookkept, the finalizer dropped, the events of the net transitions.
//!
//! What differs between the kinds is [`crate::kinds::workload`]'s.

pub mod act;
pub mod bookkeeping;
pub mod decide;
pub mod observe;
pub mod plan;
pub mod report;

use std::time::Instant;

use contract::names::ObjectKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use tracing::{debug, warn};

use crate::pass::{Error, Pass};
use crate::runtime::context::{Context, Target};
use observe::Observation;

/// Reconciles one object.
pub async fn reconcile(target: Target, ctx: &Context) -> Result<Action, Error> {
    let started = Instant::now();
    let controller = match target.kind() {
        ObjectKind::Cluster => "terraformcluster",
        ObjectKind::Machine => "terraformmachine",
        ObjectKind::MachinePool => "terraformmachinepool",
    };
    let result = match Box::pin(pass(&target, ctx)).await {
        // The object changed since the cache showed it (its newer version is reconciled next),
        // or a cache was behind where the pass must not act on it: looked at again shortly.
        Err(e) if e.is_behind() => {
            debug!(kind = target.kind().kind(), namespace = %target.namespace(), name = %target.name(), error = %e, "requeued");
            Ok(Action::requeue(std::time::Duration::from_secs(1)))
        }
        other => other,
    };
    let outcome = match &result {
        Ok(_) => "success",
        Err(_) => "error",
    };
    ctx.metrics
        .reconcile(controller, outcome, started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        ctx.metrics.reconcile_error(controller);
        warn!(kind = target.kind().kind(), namespace = %target.namespace(), name = %target.name(), error = %e, "reconcile failed");
    }
    result
}

async fn pass(target: &Target, ctx: &Context) -> Result<Action, Error> {
    let mut p = Pass::new(ctx, target);
    let mut o: Observation = Box::pin(observe::observe(&mut p)).await?;
    let observed = observe::observed(&p, &o);
    let config = observe::config(&p, &o);
    let decision = decide::decide(&observed, &config);
    debug!(kind = p.kind_name(), namespace = %p.ns, name = %p.name, ?decision, "decided");
    // Externally managed: decide does nothing, and nothing is written, for every kind.
    if observed.externally_managed {
        return Ok(Action::await_change());
    }
    let acted = match Box::pin(act::act(&mut p, &mut o, decision)).await {
        Ok(acted) => acted,
        Err(e) => {
            // The writes already made are announced: no later pass repeats them.
            let reference = p.target.reference();
            let announced = std::mem::take(&mut p.announced);
            announced.publish(ctx, &reference).await;
            return Err(e);
        }
    };
    let pass_events: Vec<&'static str> = (p.announced.events().iter())
        .chain(p.outbox.events())
        .map(|e| e.reason)
        .collect();
    let facts = report::Facts {
        pass_events: &pass_events,
        status: &p.facts,
        findings: &p.findings,
        generation: p.generation,
        now: Time(p.now_ts),
        ready_inputs: crate::kinds::workload::ready_inputs(p.target, observed.provisioned),
        active: o.active.as_ref(),
    };
    let reported = report::report(&observed, &acted, &facts);
    report::gauges(&p, &reported.status);
    if let Some(metric) = reported.lease_wait {
        ctx.metrics.lease_wait(p.kind_name(), metric);
    }
    Box::pin(act::finish(p, o, acted, reported)).await
}

/// Observe, Decide and the plan of one pass over `target`, and nothing else: what the pass would
/// write, in order, without writing anything (Observe only reads; the test that proves it runs
/// this against the API server's audit log).
pub async fn observe_only(
    target: &Target,
    ctx: &Context,
) -> Result<(decide::Decision, Vec<plan::Write>), Error> {
    let mut p = Pass::new(ctx, target);
    let o = Box::pin(observe::observe(&mut p)).await?;
    let observed = observe::observed(&p, &o);
    let config = observe::config(&p, &o);
    let decision = decide::decide(&observed, &config);
    let writes = plan::plan(&o, &decision);
    Ok((decision, writes))
}
