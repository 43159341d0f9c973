//! The events a pass emits (INTERFACE-FACTS §2 "Manager events"): collected during the pass and
//! published once its status patch has landed, so a transition is announced once.

use kube::runtime::events::{Event, EventType};
use tracing::warn;

use crate::runtime::context::Context;
use k8s_openapi::api::core::v1::ObjectReference;

/// The most bytes of an event note.
const MAX_NOTE: usize = 1024;

/// One event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Normal or Warning.
    pub warning: bool,
    /// The documented reason.
    pub reason: &'static str,
    /// The note (never a secret value).
    pub note: String,
}

/// The events of one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outbox {
    events: Vec<Pending>,
}

impl Outbox {
    /// A Normal event.
    pub fn normal(&mut self, reason: &'static str, note: impl Into<String>) {
        self.events.push(Pending {
            warning: false,
            reason,
            note: note.into(),
        });
    }

    /// A Warning event.
    pub fn warning(&mut self, reason: &'static str, note: impl Into<String>) {
        self.events.push(Pending {
            warning: true,
            reason,
            note: note.into(),
        });
    }

    /// An event of either type.
    pub fn push(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.events.push(Pending {
            warning,
            reason,
            note: note.into(),
        });
    }

    /// Queues `other`'s events after these.
    pub fn extend(&mut self, other: Outbox) {
        self.events.extend(other.events);
    }

    /// The queued events.
    pub fn events(&self) -> &[Pending] {
        &self.events
    }

    /// Publishes every event on the object `reference` names; a failed publish is logged, never
    /// retried.
    pub async fn publish(self, ctx: &Context, reference: &ObjectReference) {
        for e in self.events {
            let event = Event {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.to_owned(),
                note: Some(contract::result::cap(&e.note, MAX_NOTE)),
                action: "Reconcile".to_owned(),
                secondary: None,
            };
            if let Err(err) = ctx.recorder.publish(&event, reference).await {
                warn!(reason = e.reason, error = %err, "could not publish an event");
            }
        }
    }
}
