//! The events a pass emits (INTERFACE-FACTS §2 "Manager events"): collected during the pass and
//! published once its status patch has landed, so a transition is announced once.

use api::constants::{conditions as ctype, events as reason, reasons};
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use crate::conditions::Transition;
use crate::context::Context;
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
#[derive(Debug, Default, Clone)]
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

    /// The events for the condition transitions of the pass: a dedicated event where one is
    /// documented, `ConditionChanged` otherwise (Warning when entering a bad state). The pass's
    /// `ConditionChanged` transitions are one event per type, its note listing each change in
    /// order: a first pass settles most conditions at once, and one event each would be most of
    /// an object's API writes.
    pub fn for_transitions(&mut self, transitions: &[Transition]) {
        let mut changed = Outbox::default();
        for t in transitions {
            if t.type_ == ctype::READY {
                continue;
            }
            let msg = format!("{} is {} ({}): {}", t.type_, t.status, t.reason, t.message);
            match (t.type_.as_str(), t.status.as_str(), t.reason.as_str()) {
                (ctype::INFRASTRUCTURE_HEALTHY, "True", _) => {
                    self.normal(reason::INSTANCE_HEALTHY, msg);
                }
                (
                    ctype::INFRASTRUCTURE_HEALTHY,
                    "False",
                    reasons::INSTANCE_UNHEALTHY
                    | reasons::INSTANCE_DEGRADED
                    | reasons::INSTANCE_STOPPED
                    | reasons::INSTANCE_TERMINATED,
                ) => self.warning(reason::INSTANCE_UNHEALTHY, msg),
                (ctype::PAUSED, "True", _) => self.normal(reason::PAUSED, msg),
                (ctype::PAUSED, "False", _) if t.from.as_deref() == Some("True") => {
                    self.normal(reason::RESUMED, msg);
                }
                (ctype::DRIFT_DETECTED, "True", _) if t.status_changed() => {
                    self.warning(reason::DRIFT_DETECTED, msg);
                }
                (ctype::DRIFT_DETECTED, "False", _) if t.from.as_deref() == Some("True") => {
                    self.normal(reason::DRIFT_RESOLVED, msg);
                }
                (ctype::STATE_READABLE, "False", reasons::STATE_LOCKED) => {
                    self.warning(reason::STATE_LOCKED, msg);
                }
                (ctype::STATE_READABLE, "False", reasons::STATE_LOST) => {
                    self.warning(reason::STATE_LOST, msg);
                }
                (ctype::STATE_READABLE, "False", _) => {
                    self.warning(reason::STATE_UNREADABLE, msg);
                }
                (ctype::OUTPUTS_VALID, "False", _) => self.warning(reason::OUTPUTS_INVALID, msg),
                (ctype::IDENTITY_ALLOWED, "False", reasons::NAMESPACE_NOT_ALLOWED) => {
                    self.warning(reason::IDENTITY_NOT_ALLOWED, msg);
                }
                _ if t.is_bad() => changed.warning(reason::CONDITION_CHANGED, msg),
                _ => changed.normal(reason::CONDITION_CHANGED, msg),
            }
        }
        for warning in [true, false] {
            let notes: Vec<String> = changed
                .events
                .iter()
                .filter(|e| e.warning == warning)
                .map(|e| e.note.clone())
                .collect();
            if !notes.is_empty() {
                self.events.push(Pending {
                    warning,
                    reason: reason::CONDITION_CHANGED,
                    note: notes.join("; "),
                });
            }
        }
    }

    /// The queued events.
    /// Queues `other`'s events after these.
    pub fn extend(&mut self, other: Outbox) {
        self.events.extend(other.events);
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn t(type_: &str, from: Option<&str>, status: &str, reason: &str) -> Transition {
        Transition {
            type_: type_.to_owned(),
            from: from.map(str::to_owned),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: String::new(),
        }
    }

    #[test]
    fn dedicated_events_for_documented_transitions() {
        let mut out = Outbox::default();
        out.for_transitions(&[
            t(
                ctype::INFRASTRUCTURE_HEALTHY,
                Some("False"),
                "True",
                reasons::HEALTHY,
            ),
            t(ctype::PAUSED, Some("True"), "False", reasons::NOT_PAUSED),
            t(ctype::READY, Some("False"), "True", reasons::READY),
            t(
                ctype::DEPENDENCIES_READY,
                None,
                "False",
                reasons::OWNER_MISMATCH,
            ),
        ]);
        let got: Vec<_> = out.events().iter().map(|e| (e.reason, e.warning)).collect();
        assert_eq!(
            out.events()[2].note,
            "DependenciesReady is False (OwnerMismatch): "
        );
        assert_eq!(
            got,
            vec![
                (reason::INSTANCE_HEALTHY, false),
                (reason::RESUMED, false),
                (reason::CONDITION_CHANGED, true),
            ]
        );
    }

    #[test]
    fn one_condition_changed_per_type_in_a_pass_naming_every_change() {
        let mut out = Outbox::default();
        out.for_transitions(&[
            t(
                ctype::IDENTITY_ALLOWED,
                None,
                "True",
                reasons::IDENTITY_ALLOWED,
            ),
            t(
                ctype::DEPENDENCIES_READY,
                None,
                "False",
                reasons::OWNER_MISMATCH,
            ),
            t(ctype::CREDENTIALS_MIRRORED, None, "True", reasons::MIRRORED),
            t(ctype::PAUSED, Some("False"), "True", reasons::PAUSED),
            t(ctype::STATE_READABLE, None, "False", reasons::STATE_CORRUPT),
        ]);
        let got: Vec<_> = out
            .events()
            .iter()
            .map(|e| (e.reason, e.warning, e.note.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (reason::PAUSED, false, "Paused is True (Paused): "),
                (
                    reason::STATE_UNREADABLE,
                    true,
                    "StateReadable is False (StateCorrupt): "
                ),
                (
                    reason::CONDITION_CHANGED,
                    true,
                    "DependenciesReady is False (OwnerMismatch): "
                ),
                (
                    reason::CONDITION_CHANGED,
                    false,
                    "IdentityAllowed is True (IdentityAllowed): ; CredentialsMirrored is True (Mirrored): "
                ),
            ]
        );
    }
}
