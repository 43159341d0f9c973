//! One reconcile pass of a TerraformCluster, TerraformMachine or TerraformMachinePool (spec: The Reconcile Lifecycle,
//! "One pass, one status patch", "One pass, visually"; ENGINEERING.md §4), in four steps:
//!
//! 1. Observe ([`crate::observe`], with [`crate::bookkeeping`]): the preamble, the finished
//!    Jobs, credentials, state and inputs, read from the caches into one [`Observation`] and the
//!    plain [`decide::Observed`] value;
//! 2. Decide ([`crate::decide::decide`]): pure and clock-free;
//! 3. Act ([`crate::act`]): the decision carried out idempotently (a crash between two steps is
//!    repaired by the next pass);
//! 4. Report ([`crate::report`], with [`crate::status`]): the whole new status from what
//!    Observe recorded (findings for the conditions, [`crate::status::Fact`]s for the other
//!    fields), what was decided and what Act did, written once under a precondition,
//!    then the Jobs marked bookkept, the finalizer dropped, the events of the net transitions.
//!
//! What differs between the kinds is [`crate::workload`]'s.

use std::time::{Instant, SystemTime};

use contract::names::{ObjectKind, state_suffix};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use tracing::{debug, warn};

use crate::conditions::Findings;
use crate::context::{Context, Target};
use crate::decide;
use crate::events::Outbox;
use crate::observe::{self, Observation};
use crate::status::StatusFacts;
use crate::{act, report};

/// Why a pass failed (it is retried with the controller's error backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A value could not be serialised.
    #[error("serialisation: {0}")]
    Json(#[from] serde_json::Error),
    /// A cache was behind the API server where the pass must not act on what it showed: nothing
    /// was written, and the object is reconciled again shortly.
    #[error("cache behind the API server: {0}")]
    Stale(&'static str),
}

impl Error {
    /// A conflict on a write, or a cache found behind: nothing to report, only to look again.
    fn is_behind(&self) -> bool {
        match self {
            Self::Kube(e) => crate::kubeutil::is_conflict(e),
            Self::Stale(_) => true,
            Self::Json(_) => false,
        }
    }
}

/// What one pass carries from step to step: the object, the status it is building and the
/// events it will publish.
#[derive(Debug)]
pub struct Pass<'a> {
    /// The manager.
    pub ctx: &'a Context,
    /// The object, as the cache holds it.
    pub target: &'a Target,
    /// Its kind.
    pub kind: ObjectKind,
    /// Its namespace.
    pub ns: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Its state Secret suffix.
    pub suffix: String,
    /// The time of this pass.
    pub now: SystemTime,
    /// The time of this pass, as a timestamp.
    pub now_ts: Timestamp,
    /// What the pass found for the status, over the status the object had (Report folds it
    /// into the new status).
    pub facts: StatusFacts,
    /// The status the pass started from, as JSON.
    pub before: serde_json::Value,
    /// What Observe and Act found about the conditions, for Report.
    pub findings: Findings,
    /// The events to publish with the status (bookkeeping, transitions): dropped when the status
    /// write does not land, since the next pass reports them again.
    pub outbox: Outbox,
    /// The events of writes Act already made (a Job created, a stuck Job deleted): published
    /// whether or not the status write lands, since no later pass repeats them.
    pub announced: Outbox,
    /// The object's resourceVersion as this pass last saw or wrote it: the precondition of its
    /// writes to the object.
    pub rv: Option<String>,
    /// The object's generation as this pass last saw or wrote it: the status it reports observed
    /// this one (a spec this pass wrote, such as `providerID`, included).
    pub generation: Option<i64>,
}

impl<'a> Pass<'a> {
    fn new(ctx: &'a Context, target: &'a Target) -> Self {
        let kind = target.kind();
        let ns = target.namespace();
        let name = target.name();
        let now_ts = Timestamp::now();
        let status = target.status();
        let before = status.to_value();
        let findings = Findings::new(status.workload().conditions.clone());
        Self {
            ctx,
            target,
            kind,
            suffix: state_suffix(&ns, kind, &name),
            uid: target.uid(),
            ns,
            name,
            now: SystemTime::now(),
            now_ts,
            facts: StatusFacts::new(status),
            before,
            findings,
            outbox: Outbox::default(),
            announced: Outbox::default(),
            rv: target.meta().resource_version.clone(),
            generation: target.meta().generation,
        }
    }

    /// Merge-patches the object itself (metadata or spec) under the resourceVersion this pass
    /// last saw, and keeps the one it gets back. A conflict is an error the pass ends on (and
    /// requeues, see [`reconcile`]); a gone object is no error.
    pub async fn patch_object(&mut self, patch: &serde_json::Value) -> Result<(), Error> {
        let mut body = patch.clone();
        if let Some(meta) = body
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| serde_json::json!({})))
            .and_then(serde_json::Value::as_object_mut)
        {
            meta.insert("resourceVersion".to_owned(), serde_json::json!(self.rv));
        }
        if let Some(meta) = self
            .target
            .merge_patch(&self.ctx.client, &body, false)
            .await?
        {
            self.rv = meta.resource_version;
            self.generation = meta.generation;
        }
        Ok(())
    }

    /// [`Self::patch_object`], for a write the rest of this pass accounts for: its own watch
    /// event does not wake the object again (see [`crate::caches::OwnWrites`]).
    pub async fn patch_object_accounted(&mut self, patch: &serde_json::Value) -> Result<(), Error> {
        let own = self.ctx.caches.own_writes.clone();
        let key = crate::caches::own_write_key(self.kind_name(), Some(&self.ns), Some(&self.name));
        own.expect(&key);
        let written = self.patch_object(patch).await;
        own.settle(&key, written.as_ref().ok().and(self.rv.clone()));
        written
    }

    /// The kind's name (`TerraformCluster`, ...).
    pub fn kind_name(&self) -> &'static str {
        self.kind.kind()
    }
}

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
    let acted = Box::pin(act::act(&mut p, &mut o, decision)).await?;
    let facts = report::Facts {
        status: &p.facts,
        findings: &p.findings,
        generation: p.generation,
        now: Time(p.now_ts),
        ready_inputs: crate::workload::ready_inputs(p.target, observed.provisioned),
        active: o.active.as_ref(),
    };
    let reported = report::report(&observed, &acted, &facts);
    report::gauges(&p, &reported.status);
    if let Some(metric) = reported.lease_wait {
        ctx.metrics.lease_wait(p.kind_name(), metric);
    }
    Box::pin(act::finish(p, o, acted, reported)).await
}
