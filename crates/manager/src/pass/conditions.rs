//! The conditions a reconcile pass sets (INTERFACE-FACTS §1 "Conditions", The Reconcile
//! Lifecycle "One pass, one status patch"): setting one with its transition time, the `Ready`
//! summary per phase, and the transitions a pass made, for events and metrics.

use api::constants::{conditions as ctype, events as reason, reasons};
use contract::health::ConditionStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::runtime::events::Outbox;

/// The longest condition message the API accepts.
pub const MAX_MESSAGE: usize = 32_768;

/// One condition that changed status or reason in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The condition type.
    pub type_: String,
    /// The previous status, `None` when the condition is new.
    pub from: Option<String>,
    /// The new status.
    pub status: String,
    /// The new reason.
    pub reason: String,
    /// The new message.
    pub message: String,
}

impl Transition {
    /// Whether the new value is a bad state for the condition's polarity (False for normal
    /// polarity, True for negative, neither for a condition that reports a choice, such as
    /// `Paused`; `AutoscalingActive` is bad only with invalid autoscaler annotations).
    pub fn is_bad(&self) -> bool {
        let type_ = self.type_.as_str();
        if ctype::NO_POLARITY.contains(&type_) {
            return false;
        }
        // The infrastructure is unhealthy only for the reasons `InstanceUnhealthy` names: one
        // still provisioning or pending is on its way, not in trouble.
        if type_ == ctype::INFRASTRUCTURE_HEALTHY {
            return self.status == "False" && UNHEALTHY.contains(&self.reason.as_str());
        }
        if type_ == ctype::AUTOSCALING_ACTIVE {
            return self.reason == reasons::AUTOSCALING_ANNOTATIONS_INVALID;
        }
        if ctype::NEGATIVE_POLARITY.contains(&type_) {
            self.status == "True"
        } else {
            self.status == "False"
        }
    }

    /// Whether the status itself changed (not only the reason or message).
    pub fn status_changed(&self) -> bool {
        self.from.as_deref() != Some(self.status.as_str())
    }

    /// A routine transition, nothing a user acts on: a condition's first value, or one leaving
    /// `Unknown` (a step settling), into a state that is not bad.
    pub fn is_routine(&self) -> bool {
        !self.is_bad() && self.from.as_deref().is_none_or(|f| f == "Unknown")
    }

    /// Whether another event of the same pass (its reasons in `pass_events`) already announces
    /// this transition: a Job condition's change comes with the Job's own event (`JobCreated`,
    /// `JobSucceeded`, `JobFailed`, a wait, ...), `Deleting=True` with `DeletionStarted`, a
    /// mirror made with `MirrorCreated`.
    pub fn announced_by(&self, pass_events: &[&str]) -> bool {
        let has = |r: &str| pass_events.contains(&r);
        match self.type_.as_str() {
            ctype::APPLY_JOB_SUCCEEDED
            | ctype::DRIFT_JOB_SUCCEEDED
            | ctype::RESTORE_JOB_SUCCEEDED => JOB_EVENTS.iter().any(|r| has(r)),
            ctype::DELETING => self.status == "True" && has(reason::DELETION_STARTED),
            ctype::CREDENTIALS_MIRRORED => self.status == "True" && has(reason::MIRROR_CREATED),
            _ => false,
        }
    }
}

/// The `InfrastructureHealthy=False` reasons `InstanceUnhealthy` announces.
const UNHEALTHY: &[&str] = &[
    reasons::INSTANCE_UNHEALTHY,
    reasons::INSTANCE_DEGRADED,
    reasons::INSTANCE_STOPPED,
    reasons::INSTANCE_TERMINATED,
];

/// The events that announce a change of a Job's condition (`ApplyJobSucceeded`,
/// `DriftJobSucceeded`, `RestoreJobSucceeded`).
const JOB_EVENTS: &[&str] = &[
    reason::JOB_CREATED,
    reason::JOB_SUCCEEDED,
    reason::JOB_FAILED,
    reason::JOB_DEADLINE_EXCEEDED,
    reason::JOB_INTERRUPTED,
    reason::STUCK_JOB_DELETED,
    reason::DESTRUCTIVE_PLAN_BLOCKED,
    reason::PLAN_CHANGED,
    reason::PLAN_READY,
    reason::STATE_RESTORED,
    reason::STATE_RESTORE_FAILED,
    reason::WAITING_FOR_RUN_LEASE,
    reason::WAITING_FOR_CLUSTER_OPERATION,
    reason::WAITING_FOR_MACHINE_OPERATIONS,
];

/// The conditions of one object, as this pass leaves them. A pass may set a condition several
/// times; only the net change between the conditions it started from and the ones it leaves
/// counts: a condition that goes True, False and True again inside one pass keeps its
/// `lastTransitionTime` and makes no transition.
#[derive(Debug, Clone)]
pub struct Conditions {
    initial: Vec<Condition>,
    list: Vec<Condition>,
    generation: Option<i64>,
    now: Time,
}

impl Conditions {
    /// Starts from the object's current conditions.
    pub fn new(current: Option<Vec<Condition>>, generation: Option<i64>, now: Time) -> Self {
        let list = current.unwrap_or_default();
        Self {
            initial: list.clone(),
            list,
            generation,
            now,
        }
    }

    /// Sets a condition; its transition time is the pass's when its status differs from the one
    /// the pass started from, else the one it had.
    pub fn set(&mut self, type_: &str, status: ConditionStatus, reason: &str, message: &str) {
        let message = contract::result::cap(message, MAX_MESSAGE);
        let status = status.as_str();
        let since = match self.initial.iter().find(|c| c.type_ == type_) {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => self.now.clone(),
        };
        let condition = Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: since,
            observed_generation: self.generation,
        };
        match self.list.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => *c = condition,
            None => self.list.push(condition),
        }
    }

    /// Sets a condition only when it has no value yet.
    pub fn set_if_missing(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) {
        if self.get(type_).is_none() {
            self.set(type_, status, reason, message);
        }
    }

    /// A condition by type.
    pub fn get(&self, type_: &str) -> Option<&Condition> {
        self.list.iter().find(|c| c.type_ == type_)
    }

    /// The status of a condition, `None` when unset.
    pub fn status(&self, type_: &str) -> Option<&str> {
        self.get(type_).map(|c| c.status.as_str())
    }

    /// The reason of a condition, `None` when unset.
    pub fn reason(&self, type_: &str) -> Option<&str> {
        self.get(type_).map(|c| c.reason.as_str())
    }

    /// Sets `Ready` from the conditions that feed it in this phase (INTERFACE-FACTS §1 "Ready
    /// summarization"): any input False makes it False/NotReady, else any Unknown or missing
    /// input makes it Unknown/ReadyUnknown, else True/Ready. Negative-polarity inputs
    /// (`Deleting`) count as False when True.
    pub fn summarize_ready(&mut self, inputs: &[&str]) {
        let mut falses = Vec::new();
        let mut unknowns = Vec::new();
        for input in inputs {
            let negative = ctype::NEGATIVE_POLARITY.contains(input);
            match self.get(input) {
                None => unknowns.push(format!("{input} not yet reported")),
                Some(c) => {
                    let bad = if negative {
                        c.status == "True"
                    } else {
                        c.status == "False"
                    };
                    if bad {
                        falses.push(format!("{input}: {}", c.reason));
                    } else if c.status == "Unknown" {
                        unknowns.push(format!("{input}: {}", c.reason));
                    }
                }
            }
        }
        if !falses.is_empty() {
            let msg = falses.join("; ");
            self.set(
                ctype::READY,
                ConditionStatus::False,
                reasons::NOT_READY,
                &msg,
            );
        } else if !unknowns.is_empty() {
            let msg = unknowns.join("; ");
            self.set(
                ctype::READY,
                ConditionStatus::Unknown,
                reasons::READY_UNKNOWN,
                &msg,
            );
        } else {
            self.set(
                ctype::READY,
                ConditionStatus::True,
                reasons::READY,
                "The infrastructure is ready",
            );
        }
    }

    /// The net transitions so far: each condition whose status or reason differs from the one
    /// the pass started from, in the order the conditions are listed.
    pub fn transitions(&self) -> Vec<Transition> {
        self.list
            .iter()
            .filter_map(|c| {
                let from = self.initial.iter().find(|i| i.type_ == c.type_);
                if from.is_some_and(|f| f.status == c.status && f.reason == c.reason) {
                    return None;
                }
                Some(Transition {
                    type_: c.type_.clone(),
                    from: from.map(|f| f.status.clone()),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
            })
            .collect()
    }

    /// The conditions, sorted by type for a stable status.
    pub fn into_list(mut self) -> Vec<Condition> {
        self.list.sort_by(|a, b| a.type_.cmp(&b.type_));
        self.list
    }
}

/// One condition value a step of the pass found (Observe, bookkeeping, Act): what that step
/// saw, not yet the status. Report folds the findings, in order, onto the conditions the object
/// had ([`crate::reconcile::report::report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The condition type.
    pub type_: String,
    /// Its status.
    pub status: ConditionStatus,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// Only when the condition has no value yet (a default).
    pub if_missing: bool,
}

/// What the steps of one pass found, in the order they found it, over the conditions the object
/// had when the pass started. Nothing here is the status yet: no transition time, no `Ready`.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    before: Vec<Condition>,
    found: Vec<Finding>,
}

impl Findings {
    /// Starts from the object's conditions as the pass read them.
    pub fn new(before: Option<Vec<Condition>>) -> Self {
        Self {
            before: before.unwrap_or_default(),
            found: Vec::new(),
        }
    }

    fn push(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
        if_missing: bool,
    ) {
        self.found.push(Finding {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
            if_missing,
        });
    }

    /// Records that condition `type_` is found to be `status`, for `reason`.
    pub fn set(&mut self, type_: &str, status: ConditionStatus, reason: &str, message: &str) {
        self.push(type_, status, reason, message, false);
    }

    /// Records a default for `type_`, which holds only when it has no value otherwise.
    pub fn set_if_missing(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) {
        self.push(type_, status, reason, message, true);
    }

    /// The (status, reason) of `type_` as the pass sees it so far: the conditions it started
    /// from with the findings up to now applied.
    fn current(&self, type_: &str) -> Option<(&str, &str)> {
        let mut value = self
            .before
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.as_str(), c.reason.as_str()));
        for f in self.found.iter().filter(|f| f.type_ == type_) {
            if !f.if_missing || value.is_none() {
                value = Some((f.status.as_str(), f.reason.as_str()));
            }
        }
        value
    }

    /// The status of `type_` so far.
    pub fn status(&self, type_: &str) -> Option<&str> {
        self.current(type_).map(|(s, _)| s)
    }

    /// The reason of `type_` so far.
    pub fn reason(&self, type_: &str) -> Option<&str> {
        self.current(type_).map(|(_, r)| r)
    }

    /// The conditions the pass started from.
    pub fn before(&self) -> &[Condition] {
        &self.before
    }

    /// The findings, in order.
    pub fn found(&self) -> &[Finding] {
        &self.found
    }

    /// Applies the findings, in order, onto `conds`.
    pub fn apply_to(&self, conds: &mut Conditions) {
        for f in &self.found {
            if f.if_missing {
                conds.set_if_missing(&f.type_, f.status, &f.reason, &f.message);
            } else {
                conds.set(&f.type_, f.status, &f.reason, &f.message);
            }
        }
    }
}

/// The events for the condition transitions of the pass: a dedicated event where one is
/// documented, `ConditionChanged` otherwise (Warning when entering a bad state). The pass's
/// `ConditionChanged` transitions are one event per type, its note listing each change in
/// order: a first pass settles most conditions at once, and one event each would be most of
/// an object's API writes. `ConditionChanged` leaves out what a user does not act on: a routine
/// transition ([`Transition::is_routine`]), and one another event of the pass (its reasons in
/// `pass_events`) announces ([`Transition::announced_by`]).
pub fn transition_events(out: &mut Outbox, transitions: &[Transition], pass_events: &[&str]) {
    let mut changed = Outbox::default();
    for t in transitions {
        if t.type_ == ctype::READY {
            continue;
        }
        let msg = format!("{} is {} ({}): {}", t.type_, t.status, t.reason, t.message);
        match (t.type_.as_str(), t.status.as_str(), t.reason.as_str()) {
            (ctype::INFRASTRUCTURE_HEALTHY, "True", _) => {
                out.normal(reason::INSTANCE_HEALTHY, msg);
            }
            (ctype::INFRASTRUCTURE_HEALTHY, "False", r) if UNHEALTHY.contains(&r) => {
                out.warning(reason::INSTANCE_UNHEALTHY, msg);
            }
            (ctype::PAUSED, "True", _) => out.normal(reason::PAUSED, msg),
            (ctype::PAUSED, "False", _) if t.from.as_deref() == Some("True") => {
                out.normal(reason::RESUMED, msg);
            }
            (ctype::DRIFT_DETECTED, "True", _) if t.status_changed() => {
                out.warning(reason::DRIFT_DETECTED, msg);
            }
            (ctype::DRIFT_DETECTED, "False", _) if t.from.as_deref() == Some("True") => {
                out.normal(reason::DRIFT_RESOLVED, msg);
            }
            (ctype::STATE_READABLE, "False", reasons::STATE_LOCKED) => {
                out.warning(reason::STATE_LOCKED, msg);
            }
            (ctype::STATE_READABLE, "False", reasons::STATE_LOST) => {
                out.warning(reason::STATE_LOST, msg);
            }
            (ctype::STATE_READABLE, "False", _) => {
                out.warning(reason::STATE_UNREADABLE, msg);
            }
            (ctype::OUTPUTS_VALID, "False", _) => out.warning(reason::OUTPUTS_INVALID, msg),
            (ctype::IDENTITY_ALLOWED, "False", reasons::NAMESPACE_NOT_ALLOWED) => {
                out.warning(reason::IDENTITY_NOT_ALLOWED, msg);
            }
            _ if t.is_routine() || t.announced_by(pass_events) => {}
            _ if t.is_bad() => changed.warning(reason::CONDITION_CHANGED, msg),
            _ => changed.normal(reason::CONDITION_CHANGED, msg),
        }
    }
    for warning in [true, false] {
        let notes: Vec<String> = changed
            .events()
            .iter()
            .filter(|e| e.warning == warning)
            .map(|e| e.note.clone())
            .collect();
        if !notes.is_empty() {
            out.push(warning, reason::CONDITION_CHANGED, notes.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    /// A finding is what a step saw: a later one wins, a default only holds where nothing else
    /// set the condition, and what the pass sees so far includes the conditions it started from.
    #[test]
    fn findings_fold_in_order_and_defaults_fill_only_gaps() {
        let mut before = Conditions::new(None, None, at(1));
        before.set("A", ConditionStatus::True, "Was", "");
        let mut f = Findings::new(Some(before.into_list()));
        assert_eq!(f.status("A"), Some("True"));
        f.set_if_missing("A", ConditionStatus::Unknown, "Default", "");
        assert_eq!(f.reason("A"), Some("Was"));
        f.set("A", ConditionStatus::False, "Now", "");
        f.set_if_missing("B", ConditionStatus::Unknown, "Default", "");
        f.set("B", ConditionStatus::True, "Set", "");
        assert_eq!((f.reason("A"), f.reason("B")), (Some("Now"), Some("Set")));
        let mut c = Conditions::new(Some(f.before().to_vec()), None, at(2));
        f.apply_to(&mut c);
        assert_eq!(c.reason("A"), Some("Now"));
        assert_eq!(c.reason("B"), Some("Set"));
    }

    #[test]
    fn transition_time_moves_only_with_status() {
        let mut c = Conditions::new(None, Some(1), at(10));
        c.set("X", ConditionStatus::Unknown, "A", "m");
        let list = c.into_list();
        let mut c = Conditions::new(Some(list), Some(2), at(20));
        c.set("X", ConditionStatus::Unknown, "B", "m2");
        assert_eq!(c.get("X").unwrap().last_transition_time, at(10));
        assert_eq!(c.transitions().len(), 1);
        c.set("X", ConditionStatus::True, "B", "m2");
        assert_eq!(c.get("X").unwrap().last_transition_time, at(20));
        // One condition, one net transition (Unknown/A to True/B).
        assert_eq!(c.transitions().len(), 1);
    }

    #[test]
    fn a_condition_that_flips_and_flips_back_in_one_pass_is_no_transition() {
        let mut c = Conditions::new(None, Some(1), at(10));
        c.set("X", ConditionStatus::True, "A", "m");
        let list = c.into_list();
        let mut c = Conditions::new(Some(list), Some(1), at(20));
        c.set("X", ConditionStatus::False, "B", "other");
        c.set("X", ConditionStatus::True, "A", "m");
        assert!(c.transitions().is_empty());
        assert_eq!(c.get("X").unwrap().last_transition_time, at(10));
        // A reason that changes and changes back is no transition either.
        c.set("X", ConditionStatus::True, "C", "m");
        assert_eq!(c.transitions().len(), 1);
        c.set("X", ConditionStatus::True, "A", "m");
        assert!(c.transitions().is_empty());
    }

    #[test]
    fn same_value_is_no_transition() {
        let mut c = Conditions::new(None, None, at(1));
        c.set("X", ConditionStatus::True, "A", "m");
        let list = c.into_list();
        let mut c = Conditions::new(Some(list), None, at(2));
        c.set("X", ConditionStatus::True, "A", "m");
        assert!(c.transitions().is_empty());
    }

    #[test]
    fn ready_summary_false_wins_over_unknown() {
        let mut c = Conditions::new(None, None, at(1));
        c.set("A", ConditionStatus::Unknown, "Wait", "");
        c.set("B", ConditionStatus::False, "Bad", "");
        c.summarize_ready(&["A", "B"]);
        assert_eq!(c.status(ctype::READY), Some("False"));
        assert_eq!(c.reason(ctype::READY), Some(reasons::NOT_READY));
    }

    #[test]
    fn ready_summary_counts_deleting_true_as_bad() {
        let mut c = Conditions::new(None, None, at(1));
        c.set(
            ctype::INFRASTRUCTURE_HEALTHY,
            ConditionStatus::True,
            "Healthy",
            "",
        );
        c.set(ctype::DELETING, ConditionStatus::True, "Deleting", "");
        c.summarize_ready(ctype::READY_INPUTS_PROVISIONED);
        assert_eq!(c.status(ctype::READY), Some("False"));
        c.set(ctype::DELETING, ConditionStatus::False, "NotDeleting", "");
        c.summarize_ready(ctype::READY_INPUTS_PROVISIONED);
        assert_eq!(c.status(ctype::READY), Some("True"));
    }

    #[test]
    fn missing_input_is_unknown() {
        let mut c = Conditions::new(None, None, at(1));
        c.summarize_ready(&["A"]);
        assert_eq!(c.status(ctype::READY), Some("Unknown"));
    }

    #[test]
    fn long_messages_are_capped_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE);
        let mut c = Conditions::new(None, None, at(1));
        c.set("X", ConditionStatus::False, "Long", &long);
        assert!(c.get("X").unwrap().message.len() <= MAX_MESSAGE);
    }
}

#[cfg(test)]
mod event_tests {
    use super::*;
    use crate::runtime::events::Pending;

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
        transition_events(
            &mut out,
            &[
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
            ],
            &[],
        );
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
        transition_events(
            &mut out,
            &[
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
            ],
            &[],
        );
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
            ]
        );
        let mut out = Outbox::default();
        transition_events(
            &mut out,
            &[
                t(
                    ctype::IDENTITY_ALLOWED,
                    Some("False"),
                    "True",
                    reasons::IDENTITY_ALLOWED,
                ),
                t(
                    ctype::CREDENTIALS_MIRRORED,
                    Some("False"),
                    "True",
                    reasons::MIRRORED,
                ),
            ],
            &[],
        );
        assert_eq!(
            out.events(),
            &[Pending {
                warning: false,
                reason: reason::CONDITION_CHANGED,
                note: "IdentityAllowed is True (IdentityAllowed): ; CredentialsMirrored is True \
                       (Mirrored): "
                    .to_owned(),
            }]
        );
    }

    /// What a user does not act on makes no `ConditionChanged`: a condition's first value or
    /// one leaving `Unknown` into a state that is not bad (a machine still provisioning
    /// included), and a Job condition's change when the pass announces the Job; a first value
    /// that is bad, a recovery and a change into `Unknown` still do.
    #[test]
    fn routine_and_already_announced_transitions_make_no_condition_changed() {
        let routine = [
            t(ctype::DELETING, None, "False", reasons::NOT_DELETING),
            t(
                ctype::OUTPUTS_VALID,
                Some("Unknown"),
                "True",
                reasons::OUTPUTS_VALID,
            ),
            t(
                ctype::INFRASTRUCTURE_HEALTHY,
                None,
                "False",
                reasons::PROVISIONING,
            ),
            t(
                ctype::DRIFT_DETECTED,
                Some("Unknown"),
                "False",
                reasons::NO_DRIFT,
            ),
        ];
        let mut out = Outbox::default();
        transition_events(&mut out, &routine, &[]);
        assert_eq!(out.events(), &[]);
        let job = t(
            ctype::APPLY_JOB_SUCCEEDED,
            Some("False"),
            "True",
            reasons::APPLY_SUCCEEDED,
        );
        let mut out = Outbox::default();
        transition_events(
            &mut out,
            std::slice::from_ref(&job),
            &[reason::JOB_SUCCEEDED],
        );
        assert_eq!(out.events(), &[]);
        let kept = [
            job,
            t(
                ctype::OUTPUTS_VALID,
                None,
                "False",
                reasons::OUTPUTS_MISSING,
            ),
            t(
                ctype::INFRASTRUCTURE_HEALTHY,
                Some("True"),
                "Unknown",
                reasons::HEALTH_UNKNOWN,
            ),
        ];
        let mut out = Outbox::default();
        transition_events(&mut out, &kept, &[reason::PROVISIONED]);
        let got: Vec<_> = out.events().iter().map(|e| (e.reason, e.warning)).collect();
        assert_eq!(
            got,
            vec![
                (reason::OUTPUTS_INVALID, true),
                (reason::CONDITION_CHANGED, false),
            ]
        );
        assert!(
            out.events()[1]
                .note
                .starts_with("ApplyJobSucceeded is True")
        );
        assert!(
            out.events()[1]
                .note
                .contains("; InfrastructureHealthy is Unknown")
        );
    }

    /// `ConditionChanged` is typed by the condition's polarity: a condition that reports a
    /// choice (`Paused` going False once resumed after a first pass that never saw it True, say)
    /// or autoscaling turned off is a Normal event, never a Warning alerting treats as trouble;
    /// a normal condition going False is a Warning.
    #[test]
    fn condition_changed_is_typed_by_polarity() {
        let mut out = Outbox::default();
        transition_events(
            &mut out,
            &[
                t(ctype::PAUSED, Some("False"), "False", "SomeOtherReason"),
                t(
                    ctype::AUTOSCALING_ACTIVE,
                    Some("True"),
                    "False",
                    reasons::AUTOSCALING_DISABLED,
                ),
            ],
            &[],
        );
        assert_eq!(out.events().len(), 1, "{:?}", out.events());
        assert!(
            out.events().iter().all(|e| !e.warning),
            "{:?}",
            out.events()
        );
        let mut out = Outbox::default();
        transition_events(
            &mut out,
            &[
                t(
                    ctype::AUTOSCALING_ACTIVE,
                    None,
                    "False",
                    reasons::AUTOSCALING_ANNOTATIONS_INVALID,
                ),
                t(
                    ctype::RUNNER_RBAC_READY,
                    None,
                    "False",
                    reasons::RBAC_FAILED,
                ),
            ],
            &[],
        );
        assert!(out.events().iter().all(|e| e.warning), "{:?}", out.events());
    }
}
