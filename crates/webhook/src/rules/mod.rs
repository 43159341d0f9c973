//! Every admission rule as a pure function of plain data. A rule that fails pushes a
//! [`Violation`]: a stable [`Rule`] label (metrics, logs) and a message for the requester that
//! names the field and the rule. A violation either denies the request or, for what is allowed
//! but likely a mistake, is returned as an admission warning. Messages may echo names the requester wrote (a key, an image
//! reference); they never carry a Secret value, and they are never logged.
//!
//! On UPDATE, a field's checks run only when the field changed ("ratcheting"), so an object that
//! was admitted under older rules can still have its other fields, finalizers and labels edited.

pub mod drift;
pub mod identity;
pub mod immutability;
pub mod jobs;
pub mod machine_delete;
pub mod placement;
pub mod requested;
pub mod variables;
pub mod workspace;

use std::fmt;

/// The rule a violation breaks; its label feeds `captf_webhook_denials_total{rule}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// `spec.source.image` is not a valid image reference (a denial), or names neither a tag nor
    /// a digest (a warning).
    ImageReference,
    /// A TerraformMachine's `source`, `identityRef`, `variables` or `variablesFrom` changed.
    MachineImmutable,
    /// A TerraformMachine's `spec.providerID` changed after it was set.
    ProviderId,
    /// A TerraformCluster's `spec.controlPlaneEndpoint` changed after it got a host.
    ControlPlaneEndpoint,
    /// A template's `spec.template.spec` changed outside a ClusterClass topology dry-run.
    TemplateImmutable,
    /// A `spec.variables` key is not a valid, unreserved name, or a value cannot be hashed.
    VariableName,
    /// `spec.variables` is empty or holds too many keys, or `spec.variablesFrom` too many entries.
    VariablesCount,
    /// A `spec.variablesFrom` entry names both a ConfigMap and a Secret, or neither.
    VariablesSource,
    /// A jobs policy's security context is privileged, escalates or adds capabilities.
    JobsSecurityContext,
    /// A jobs policy's `lockTimeoutSeconds` is not below its `activeDeadlineSeconds`.
    JobsLockTimeout,
    /// A jobs policy's `env` uses a reserved name (`TF_*`, `KUBE_*` or one the Job sets itself):
    /// a warning, the manager drops the entry.
    JobsEnv,
    /// A jobs policy's placement (`nodeSelector`, `tolerations`, node affinity,
    /// `priorityClassName`, `topologySpreadConstraints`) breaks a rule the API server applies to
    /// pods.
    JobsPlacement,
    /// A drift interval is negative, or a pool's is 0.
    DriftInterval,
    /// A `captf.io/requested-at` value is longer than `status.lastHandledRequestedAt` holds.
    RequestedAt,
    /// A TerraformClusterIdentity's `allowedNamespaces` is an empty object.
    AllowedNamespaces,
    /// The requester may not `get` the Secret an identity names.
    SecretAccess,
    /// The requester may not create tokens for the ServiceAccount a keyless identity names, in a
    /// namespace it allows.
    TokenAccess,
    /// An identity being deleted is still used by a workload object.
    IdentityInUse,
    /// An identity being deleted still has credential mirrors in namespaces.
    IdentityMirrors,
    /// A TerraformMachine delete would bypass its owning Machine's drain.
    MachineDelete,
    /// The object in the request could not be decoded as its kind.
    Decode,
    /// A check could not read what it needs from the API server.
    Lookup,
    /// The request is for another kind than the path validates, or is malformed.
    Request,
}

impl Rule {
    /// The stable label used in metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Rule::ImageReference => "image-reference",
            Rule::MachineImmutable => "machine-immutable",
            Rule::ProviderId => "provider-id",
            Rule::ControlPlaneEndpoint => "control-plane-endpoint",
            Rule::TemplateImmutable => "template-immutable",
            Rule::VariableName => "variable-name",
            Rule::VariablesCount => "variables-count",
            Rule::VariablesSource => "variables-source",
            Rule::JobsSecurityContext => "jobs-security-context",
            Rule::JobsLockTimeout => "jobs-lock-timeout",
            Rule::JobsEnv => "jobs-env",
            Rule::JobsPlacement => "jobs-placement",
            Rule::DriftInterval => "drift-interval",
            Rule::RequestedAt => "requested-at",
            Rule::AllowedNamespaces => "allowed-namespaces",
            Rule::SecretAccess => "secret-access",
            Rule::TokenAccess => "token-access",
            Rule::IdentityInUse => "identity-in-use",
            Rule::IdentityMirrors => "identity-mirrors",
            Rule::MachineDelete => "machine-delete",
            Rule::Decode => "decode",
            Rule::Lookup => "lookup",
            Rule::Request => "request",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which rule.
    pub rule: Rule,
    /// What is wrong, naming the field and the rule.
    pub message: String,
    /// Whether the request is still allowed, with `message` as an admission warning (shown by
    /// kubectl as `Warning: ...`) rather than a denial.
    pub warning: bool,
}

impl Violation {
    /// A violation of `rule` with `message` that denies the request.
    pub fn new(rule: Rule, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
            warning: false,
        }
    }

    /// A breach of `rule` that is allowed but answered with `message` as an admission warning.
    pub fn warning(rule: Rule, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
            warning: true,
        }
    }
}

/// Whether an UPDATE changed a field (or this is a CREATE, where every field is new).
pub(crate) fn changed<T: PartialEq>(new: &T, old: Option<&T>) -> bool {
    old.is_none_or(|old| old != new)
}
