//! Which `spec.jobs.env` names a Job may not take from the user (spec: Tuning Jobs
//! "spec.jobs.env", Runtime Environment "Environment set and dropped", Job Environment).
//!
//! Every `TF_*` and `KUBE_*` name belongs to the runner and the Job's own environment, and so does
//! every name the Job itself sets in its main container ([`JOB_SET_ENV`]): a user entry under
//! one of these names would override a step's flags, a rendered input, the state's namespace, or
//! the Job's working and temporary directories. The book says both that such an entry is dropped
//! with an event (Tuning Jobs) and that it is rejected outright (Runtime Environment); CAPTF does
//! both of the Kubernetes-native halves: the webhook answers with an admission warning, and the
//! manager drops the entry from the Job and emits `JobEnvDropped`.

/// The prefixes reserved for the runner and the Job's own environment.
pub const RESERVED_ENV_PREFIXES: [&str; 2] = ["TF_", "KUBE_"];

/// The names the Job sets in its main container, in the order it sets them.
pub const JOB_SET_ENV: [&str; 6] = [
    "TF_IN_AUTOMATION",
    "TF_INPUT",
    "HOME",
    "TMPDIR",
    "KUBE_NAMESPACE",
    "CHECKPOINT_DISABLE",
];

/// Why a `spec.jobs.env` name is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvReservation {
    /// It starts with a reserved prefix (`TF_` or `KUBE_`).
    Prefix(&'static str),
    /// The Job itself sets it ([`JOB_SET_ENV`]).
    SetByJob,
}

impl std::fmt::Display for EnvReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Prefix(prefix) => write!(
                f,
                "names starting with {prefix} are reserved for the runner and the Job's own environment"
            ),
            Self::SetByJob => f.write_str("the Job itself sets this name"),
        }
    }
}

/// Whether `spec.jobs.env` may not set `name`, and why. Names are case-sensitive, as the process
/// environment is.
pub fn reserved_env_name(name: &str) -> Option<EnvReservation> {
    if let Some(prefix) = RESERVED_ENV_PREFIXES.iter().find(|p| name.starts_with(**p)) {
        return Some(EnvReservation::Prefix(prefix));
    }
    JOB_SET_ENV
        .contains(&name)
        .then_some(EnvReservation::SetByJob)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf_and_kube_prefixes_are_reserved() {
        assert_eq!(
            reserved_env_name("TF_LOG"),
            Some(EnvReservation::Prefix("TF_"))
        );
        assert_eq!(
            reserved_env_name("TF_"),
            Some(EnvReservation::Prefix("TF_"))
        );
        assert_eq!(
            reserved_env_name("KUBE_CONFIG_PATH"),
            Some(EnvReservation::Prefix("KUBE_"))
        );
        assert_eq!(reserved_env_name("tf_log"), None);
        assert_eq!(reserved_env_name("KUBECONFIG"), None);
        assert_eq!(reserved_env_name("ATF_X"), None);
        assert_eq!(reserved_env_name("TFX"), None);
    }

    #[test]
    fn names_the_job_sets_itself_are_reserved() {
        for name in ["HOME", "TMPDIR", "CHECKPOINT_DISABLE"] {
            assert_eq!(
                reserved_env_name(name),
                Some(EnvReservation::SetByJob),
                "{name}"
            );
        }
        for name in JOB_SET_ENV {
            assert!(reserved_env_name(name).is_some(), "{name}");
        }
        assert_eq!(reserved_env_name("home"), None);
        assert_eq!(reserved_env_name("HTTPS_PROXY"), None);
        assert_eq!(reserved_env_name("AWS_REGION"), None);
    }
}
