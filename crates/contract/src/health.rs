//! The `health` output every role declares, and how a reading maps to the `InfrastructureHealthy`
//! condition (spec: Common "Outputs", Drift and Health "From module health to
//! InfrastructureHealthy", Machine Role "Out-of-band termination").
//!
//! This module owns the mapping only; decoding the output from state is
//! [`crate::outputs`]'s job, and deciding when a reading counts as a sample is the manager's.

use std::fmt;

/// A condition status, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl ConditionStatus {
    /// The string Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of an instance or group as a module's `health` output reports it: `pending`,
/// `running`, `degraded`, `stopped`, `terminated` or `unknown`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Provisioning is still in progress.
    Pending,
    /// The infrastructure runs.
    Running,
    /// It runs, but not fully.
    Degraded,
    /// It is stopped.
    Stopped,
    /// It is gone.
    Terminated,
    /// The module cannot tell.
    Unknown,
}

impl HealthState {
    /// Every state, in the order the contract lists them.
    pub const ALL: [Self; 6] = [
        Self::Pending,
        Self::Running,
        Self::Degraded,
        Self::Stopped,
        Self::Terminated,
        Self::Unknown,
    ];

    /// Parses the exact lower-case spelling; anything else is not a state.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// The spelling modules write and status carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Degraded => "degraded",
            Self::Stopped => "stopped",
            Self::Terminated => "terminated",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded `health` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `health.state`.
    pub state: HealthState,
    /// `health.healthy`.
    pub healthy: bool,
    /// `health.message`, when the module set one (an empty string counts as none).
    pub message: Option<String>,
    /// `health.reasons`, machine-readable words from the module (may be empty).
    pub reasons: Vec<String>,
}

impl Health {
    /// Whether this reading makes the object `Ready` as far as health goes (`running` and healthy).
    pub fn is_healthy_running(&self) -> bool {
        self.state == HealthState::Running && self.healthy
    }

    /// The `InfrastructureHealthy` condition this reading maps to.
    pub fn condition(&self) -> HealthCondition {
        let reason = match (self.state, self.healthy) {
            (HealthState::Running, true) => HealthReason::Healthy,
            (HealthState::Running, false) => HealthReason::InstanceUnhealthy,
            (HealthState::Pending, _) => HealthReason::InstancePending,
            (HealthState::Degraded, _) => HealthReason::InstanceDegraded,
            (HealthState::Stopped, _) => HealthReason::InstanceStopped,
            (HealthState::Terminated, _) => HealthReason::InstanceTerminated,
            (HealthState::Unknown, _) => HealthReason::HealthUnknown,
        };
        let mut message = reason.default_message().to_owned();
        if let Some(detail) = self.message.as_deref().filter(|m| !m.is_empty()) {
            message.push_str(": ");
            message.push_str(detail);
        }
        let reasons: Vec<&str> = self
            .reasons
            .iter()
            .map(String::as_str)
            .filter(|r| !r.is_empty())
            .collect();
        if !reasons.is_empty() {
            message.push_str(" (reasons: ");
            message.push_str(&reasons.join(", "));
            message.push(')');
        }
        HealthCondition {
            status: reason.status(),
            reason,
            message: truncate_message(message),
        }
    }
}

/// The longest condition message Kubernetes accepts (`metav1.Condition.message`), in bytes.
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 32_768;

fn truncate_message(mut message: String) -> String {
    if message.len() > MAX_CONDITION_MESSAGE_BYTES {
        const ELLIPSIS: &str = "…";
        let mut cut = MAX_CONDITION_MESSAGE_BYTES - ELLIPSIS.len();
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str(ELLIPSIS);
    }
    message
}

/// The `InfrastructureHealthy` reasons a health reading can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthReason {
    /// `running` and healthy.
    Healthy,
    /// `degraded`.
    InstanceDegraded,
    /// `pending`.
    InstancePending,
    /// `stopped`.
    InstanceStopped,
    /// `terminated`, or the instance vanished from state after provisioning.
    InstanceTerminated,
    /// `running` but not healthy.
    InstanceUnhealthy,
    /// `unknown`.
    HealthUnknown,
}

impl HealthReason {
    /// Every reason.
    pub const ALL: [Self; 7] = [
        Self::Healthy,
        Self::InstanceDegraded,
        Self::InstancePending,
        Self::InstanceStopped,
        Self::InstanceTerminated,
        Self::InstanceUnhealthy,
        Self::HealthUnknown,
    ];

    /// The reason of a condition reason string; `None` for any other reason (for example
    /// `Provisioning`, before a reading).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The reason string on the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "Healthy",
            Self::InstanceDegraded => "InstanceDegraded",
            Self::InstancePending => "InstancePending",
            Self::InstanceStopped => "InstanceStopped",
            Self::InstanceTerminated => "InstanceTerminated",
            Self::InstanceUnhealthy => "InstanceUnhealthy",
            Self::HealthUnknown => "HealthUnknown",
        }
    }

    /// The condition status this reason carries.
    pub fn status(self) -> ConditionStatus {
        match self {
            Self::Healthy => ConditionStatus::True,
            Self::HealthUnknown => ConditionStatus::Unknown,
            Self::InstanceDegraded
            | Self::InstancePending
            | Self::InstanceStopped
            | Self::InstanceTerminated
            | Self::InstanceUnhealthy => ConditionStatus::False,
        }
    }

    fn default_message(self) -> &'static str {
        match self {
            Self::Healthy => "The module reports the infrastructure running and healthy",
            Self::InstanceDegraded => "The module reports the infrastructure degraded",
            Self::InstancePending => "The module reports the infrastructure still pending",
            Self::InstanceStopped => "The module reports the infrastructure stopped",
            Self::InstanceTerminated => "The module reports the infrastructure terminated",
            Self::InstanceUnhealthy => {
                "The module reports the infrastructure running but unhealthy"
            }
            Self::HealthUnknown => "The module cannot tell the infrastructure's health",
        }
    }

    /// Whether a reading with this reason is one more unhealthy sample for machine remediation
    /// (Drift and Health "Unhealthy samples"): `Some(true)` adds one, `Some(false)` resets the
    /// count, `None` leaves it as it is.
    pub fn counts_as_unhealthy_sample(self) -> Option<bool> {
        match self {
            Self::Healthy => Some(false),
            Self::InstanceUnhealthy | Self::InstanceDegraded | Self::InstanceStopped => Some(true),
            Self::InstancePending | Self::HealthUnknown | Self::InstanceTerminated => None,
        }
    }
}

impl fmt::Display for HealthReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `InfrastructureHealthy` should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCondition {
    /// The condition status.
    pub status: ConditionStatus,
    /// The reason.
    pub reason: HealthReason,
    /// The message: a fixed sentence for the reason, then the module's `message` and `reasons`.
    pub message: String,
}

impl HealthCondition {
    /// A machine whose `provider_id` came back null after provisioning: the instance is gone,
    /// whatever its `health` output says (Drift and Health, Machine Role "Out-of-band
    /// termination").
    pub fn instance_vanished() -> Self {
        Self {
            status: ConditionStatus::False,
            reason: HealthReason::InstanceTerminated,
            message: "The instance is gone: provider_id is null after provisioning".to_owned(),
        }
    }
}

/// The beginning of the `InfrastructureHealthy` message of a refresh that failed because the
/// instance is gone; the rest is the runner's failure summary.
pub const REFRESH_GONE_MESSAGE: &str = "The instance is gone: its refresh failed";

/// The step that reads every resource of the state again (`apply -refresh-only`), as the result
/// document names it.
pub const REFRESH_STEP: &str = "apply-refresh-only";

/// The phrasings, lower-case, with which providers and the runtime say that the object a read
/// asked for does not exist (for example AWS `InvalidInstanceID.NotFound ... does not exist`,
/// Google `Error 404 ... was not found, notFound`, Azure `ResourceNotFound`, a read's
/// `couldn't find resource`, the runtime's `Unable to find remote state`).
pub const GONE_PHRASES: [&str; 6] = [
    "not found",
    "notfound",
    "does not exist",
    "no longer exists",
    "couldn't find",
    "unable to find",
];

/// Whether a failed refresh or drift run failed because the instance it reads is gone (Common
/// "Out-of-band termination", Machine Remediation "Terminated instances"): the run stopped in
/// its refresh step ([`REFRESH_STEP`], the step that reads every resource) and the runner's
/// summary of that step's `Error:` lines carries one of [`GONE_PHRASES`], in any case. Any
/// other failure (an earlier step, a plan that cannot be made after a good refresh, credentials,
/// throttling, a network error, a run without a summary) is an ordinary failed check.
pub fn refresh_failed_because_gone(error: &crate::result::ErrorDoc) -> bool {
    if error.kind != crate::result::ErrorKind::Step || error.step.as_deref() != Some(REFRESH_STEP) {
        return false;
    }
    let Some(summary) = error.summary.as_deref() else {
        return false;
    };
    let summary = summary.to_lowercase();
    GONE_PHRASES.iter().any(|phrase| summary.contains(phrase))
}

impl HealthCondition {
    /// `False/InstanceTerminated` for a refresh that failed because the instance is gone, with
    /// the runner's `summary` when there is one.
    pub fn refresh_gone(summary: Option<&str>) -> Self {
        let mut message = REFRESH_GONE_MESSAGE.to_owned();
        if let Some(s) = summary.filter(|s| !s.is_empty()) {
            message.push_str(": ");
            message.push_str(s);
        }
        Self {
            status: ConditionStatus::False,
            reason: HealthReason::InstanceTerminated,
            message: truncate_message(message),
        }
    }

    /// Whether a condition reading `reason` with `message` is [`Self::refresh_gone`]'s: such a
    /// reading stands, since the state still holds the instance's last outputs, until a new
    /// sample replaces it.
    pub fn is_refresh_gone(reason: &str, message: &str) -> bool {
        reason == HealthReason::InstanceTerminated.as_str()
            && message.starts_with(REFRESH_GONE_MESSAGE)
    }
}

#[cfg(test)]
mod gone_tests {
    use super::*;
    use crate::result::{ErrorDoc, ErrorKind};

    fn failed(kind: ErrorKind, step: Option<&str>, summary: Option<&str>) -> ErrorDoc {
        ErrorDoc {
            kind,
            step: step.map(str::to_owned),
            summary: summary.map(str::to_owned),
            exit_code: Some(1),
        }
    }

    #[test]
    fn a_refresh_that_cannot_find_the_instance_reads_gone() {
        for summary in [
            "Error: reading EC2 Instance (i-0abc): InvalidInstanceID.NotFound: The instance ID 'i-0abc' does not exist",
            "Error: Error reading Instance: googleapi: Error 404: The resource 'projects/p/zones/z/instances/m' was not found, notFound",
            "Error: retrieving Virtual Machine: ResourceNotFound",
            "Error: reading Droplet (123): couldn't find resource",
            "Error: Unable to find remote state",
            "Error: server 42 no longer exists",
        ] {
            let e = failed(ErrorKind::Step, Some(REFRESH_STEP), Some(summary));
            assert!(refresh_failed_because_gone(&e), "{summary}");
        }
    }

    #[test]
    fn any_other_failure_is_an_ordinary_failed_check() {
        let gone = Some("Error: InvalidInstanceID.NotFound");
        // Another step: a provider that is not found at init, a plan after a good refresh.
        for step in [Some("init"), Some("plan"), Some("show-json"), None] {
            assert!(!refresh_failed_because_gone(&failed(
                ErrorKind::Step,
                step,
                gone
            )));
        }
        // Not a step failure.
        for kind in [ErrorKind::Interrupted, ErrorKind::ImageLayout] {
            assert!(!refresh_failed_because_gone(&failed(
                kind,
                Some(REFRESH_STEP),
                gone
            )));
        }
        // The refresh step, for any other reason, or without a summary.
        for summary in [
            Some("Error: UnauthorizedOperation: You are not authorized to perform this operation"),
            Some("Error: RequestLimitExceeded: Request limit exceeded"),
            Some("Error: dial tcp: lookup ec2.example: no such host"),
            Some("step apply-refresh-only exited 1; see the Job's logs"),
            None,
        ] {
            let e = failed(ErrorKind::Step, Some(REFRESH_STEP), summary);
            assert!(!refresh_failed_because_gone(&e), "{summary:?}");
        }
    }

    #[test]
    fn the_gone_reading_is_terminated_and_recognised_as_its_own() {
        let c = HealthCondition::refresh_gone(Some("Error: Unable to find remote state"));
        assert_eq!(c.status, ConditionStatus::False);
        assert_eq!(c.reason, HealthReason::InstanceTerminated);
        assert_eq!(
            c.message,
            "The instance is gone: its refresh failed: Error: Unable to find remote state"
        );
        assert!(HealthCondition::is_refresh_gone(
            c.reason.as_str(),
            &c.message
        ));
        assert_eq!(
            HealthCondition::refresh_gone(None).message,
            REFRESH_GONE_MESSAGE
        );
        // A module's own terminated reading, or the vanished provider_id, is not this one.
        let vanished = HealthCondition::instance_vanished();
        assert!(!HealthCondition::is_refresh_gone(
            vanished.reason.as_str(),
            &vanished.message
        ));
        assert!(!HealthCondition::is_refresh_gone(
            HealthReason::HealthUnknown.as_str(),
            REFRESH_GONE_MESSAGE
        ));
    }
}

#[cfg(test)]
mod reason_tests {
    use super::HealthReason;

    #[test]
    fn every_reason_parses_back_from_its_spelling_and_nothing_else_does() {
        for reason in HealthReason::ALL {
            assert_eq!(HealthReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(HealthReason::parse("Provisioning"), None);
        assert_eq!(HealthReason::parse("healthy"), None);
    }
}
