//! What one reconcile pass carries from step to step (spec: The Reconcile Lifecycle "One pass, one
//! status patch"; ENGINEERING.md §4): the object, the status it is building, the events it will
//! publish, and the resourceVersion its writes to the object are preconditioned on; its error;
//! and the plain values its steps exchange — what Observe found ([`observed`], the input of
//! Decide), the conditions it found ([`conditions`]) and the status facts Report folds
//! ([`status`]). Everything here is data or a write to the object itself; the steps that fill it
//! are in [`crate::reconcile`], the kinds that add their part in [`crate::kinds`].

pub mod conditions;
pub mod error;
pub mod observed;
pub mod status;

use std::time::SystemTime;

use contract::names::{ObjectKind, state_suffix};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

pub use error::Error;

use crate::pass::conditions::Findings;
use crate::pass::status::StatusFacts;
use crate::runtime::context::{Context, Target};
use crate::runtime::events::Outbox;

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
    /// The clusterctl move block was cleared by an earlier write of this pass (with the spec).
    pub move_block_cleared: bool,
    /// The state Secrets as this pass's adoption listed and wrote them, with what was read of
    /// them: the backup after it copies these instead of listing and reading them again.
    pub state_adopted: Option<(
        Vec<k8s_openapi::api::core::v1::Secret>,
        std::sync::Arc<crate::state::StateView>,
    )>,
}

impl<'a> Pass<'a> {
    pub fn new(ctx: &'a Context, target: &'a Target) -> Self {
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
            now: ctx.clock.now(),
            now_ts,
            facts: StatusFacts::new(status),
            before,
            findings,
            outbox: Outbox::default(),
            announced: Outbox::default(),
            rv: target.meta().resource_version.clone(),
            generation: target.meta().generation,
            move_block_cleared: false,
            state_adopted: None,
        }
    }

    /// Merge-patches the object itself (metadata or spec) under the resourceVersion this pass
    /// last saw, and keeps the one it gets back. A conflict is an error the pass ends on (and
    /// requeues, see [`reconcile`]); a gone object is no error.
    pub async fn patch_object(&mut self, patch: &serde_json::Value) -> Result<(), Error> {
        let meta = self.send_object_patch(patch).await?;
        self.patched(meta);
        Ok(())
    }

    /// [`Self::patch_object`], for a write the rest of this pass accounts for: its own watch
    /// event does not wake the object again (see [`crate::runtime::caches::OwnWrites`]).
    pub async fn patch_object_accounted(&mut self, patch: &serde_json::Value) -> Result<(), Error> {
        let meta = self.send_object_patch_accounted(patch).await?;
        self.patched(meta);
        Ok(())
    }

    /// Sends [`Self::patch_object`]'s patch without keeping what it gets back, so that it can go
    /// out beside another write of the pass; [`Self::patched`] keeps it.
    pub async fn send_object_patch(
        &self,
        patch: &serde_json::Value,
    ) -> Result<Option<ObjectMeta>, Error> {
        let mut body = patch.clone();
        if let Some(meta) = body
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| serde_json::json!({})))
            .and_then(serde_json::Value::as_object_mut)
        {
            meta.insert("resourceVersion".to_owned(), serde_json::json!(self.rv));
        }
        Ok(self
            .target
            .merge_patch(&self.ctx.client, &body, false)
            .await?)
    }

    /// [`Self::send_object_patch`] for a write the rest of this pass accounts for.
    pub async fn send_object_patch_accounted(
        &self,
        patch: &serde_json::Value,
    ) -> Result<Option<ObjectMeta>, Error> {
        let own = &self.ctx.caches.own_writes;
        let key = crate::runtime::caches::own_write_key(
            self.kind_name(),
            Some(&self.ns),
            Some(&self.name),
        );
        own.expect(&key);
        let written = self.send_object_patch(patch).await;
        // What it wrote, or (the object gone) the version the pass last saw, as before.
        let rv = written.as_ref().ok().and_then(|m| {
            m.as_ref()
                .and_then(|m| m.resource_version.clone())
                .or_else(|| self.rv.clone())
        });
        own.settle(&key, rv);
        written
    }

    /// Keeps the resourceVersion and generation a patch of the object got back.
    pub fn patched(&mut self, meta: Option<ObjectMeta>) {
        if let Some(meta) = meta {
            self.rv = meta.resource_version;
            self.generation = meta.generation;
        }
    }

    /// The kind's name (`TerraformCluster`, ...).
    pub fn kind_name(&self) -> &'static str {
        self.kind.kind()
    }
}
