//! Jobs policies, wherever one appears (`spec.jobs`, `spec.defaults.jobs`, and the same fields
//! under `spec.template.spec` of the three templates) (spec: Tuning Jobs, Security Model "Pod
//! security").
//!
//! The module container holds the identity's cloud credentials, so its security context may not
//! be privileged, escalate privileges or add capabilities. A lock wait may not be able to fill the
//! whole Job deadline. `TF_*` and `KUBE_*` names, and the names the Job sets itself, belong to the
//! runner and the Job: an entry using one is admitted with a warning, and the manager drops it
//! (`contract::job_env`). Placement follows the pod rules (`super::placement`). Each check looks at one policy alone, never at its merge with a
//! cluster's `spec.defaults.jobs`.

use api::shared::JobPolicy;

use super::{Rule, Violation};

pub use contract::job_env::RESERVED_ENV_PREFIXES;
use contract::job_env::reserved_env_name;

/// Checks one jobs policy found at `path` (for example `spec.jobs`).
pub fn check_job_policy(path: &str, policy: &JobPolicy, out: &mut Vec<Violation>) {
    if let Some(sc) = &policy.security_context {
        if sc.privileged == Some(true) {
            out.push(Violation::new(
                Rule::JobsSecurityContext,
                format!(
                    "{path}.securityContext.privileged: true is not allowed: the module container holds the identity's cloud credentials"
                ),
            ));
        }
        if sc.allow_privilege_escalation == Some(true) {
            out.push(Violation::new(
                Rule::JobsSecurityContext,
                format!(
                    "{path}.securityContext.allowPrivilegeEscalation: true is not allowed: the module container holds the identity's cloud credentials"
                ),
            ));
        }
        if let Some(add) = sc.capabilities.as_ref().and_then(|c| c.add.as_ref())
            && !add.is_empty()
        {
            out.push(Violation::new(
                Rule::JobsSecurityContext,
                format!(
                    "{path}.securityContext.capabilities.add: adding capabilities ({}) is not allowed: the module container holds the identity's cloud credentials",
                    add.join(", ")
                ),
            ));
        }
    }
    if let (Some(lock), Some(deadline)) =
        (policy.lock_timeout_seconds, policy.active_deadline_seconds)
        && lock >= deadline
    {
        out.push(Violation::new(
            Rule::JobsLockTimeout,
            format!(
                "{path}.lockTimeoutSeconds ({lock}) must be less than {path}.activeDeadlineSeconds ({deadline}): a state-lock wait alone could use up the whole Job deadline"
            ),
        ));
    }
    super::placement::check_placement(path, policy, out);
    for (i, var) in policy.env.iter().flatten().enumerate() {
        if let Some(why) = reserved_env_name(&var.name) {
            out.push(Violation::warning(
                Rule::JobsEnv,
                format!(
                    "{path}.env[{i}].name {:?}: {why}; the manager drops this entry from the Job (event JobEnvDropped)",
                    var.name
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Capabilities, EnvVar, SecurityContext};

    fn check(policy: &JobPolicy) -> Vec<Violation> {
        let mut out = Vec::new();
        check_job_policy("spec.jobs", policy, &mut out);
        out
    }

    fn messages(policy: &JobPolicy) -> Vec<String> {
        check(policy).into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn privileged_is_rejected_and_unprivileged_allowed() {
        let mut p = JobPolicy {
            security_context: Some(SecurityContext {
                privileged: Some(true),
                ..SecurityContext::default()
            }),
            ..JobPolicy::default()
        };
        assert_eq!(
            messages(&p),
            [
                "spec.jobs.securityContext.privileged: true is not allowed: the module container holds the identity's cloud credentials"
            ]
        );
        p.security_context = Some(SecurityContext {
            privileged: Some(false),
            run_as_non_root: Some(true),
            ..SecurityContext::default()
        });
        assert!(check(&p).is_empty());
    }

    #[test]
    fn privilege_escalation_is_rejected_and_false_allowed() {
        let mut p = JobPolicy {
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(true),
                ..SecurityContext::default()
            }),
            ..JobPolicy::default()
        };
        assert_eq!(
            messages(&p),
            [
                "spec.jobs.securityContext.allowPrivilegeEscalation: true is not allowed: the module container holds the identity's cloud credentials"
            ]
        );
        p.security_context = Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            ..SecurityContext::default()
        });
        assert!(check(&p).is_empty());
    }

    #[test]
    fn capabilities_add_is_rejected_and_drop_allowed() {
        let mut p = JobPolicy {
            security_context: Some(SecurityContext {
                capabilities: Some(Capabilities {
                    add: Some(vec!["NET_ADMIN".into(), "SYS_TIME".into()]),
                    drop: Some(vec!["ALL".into()]),
                }),
                ..SecurityContext::default()
            }),
            ..JobPolicy::default()
        };
        assert_eq!(
            messages(&p),
            [
                "spec.jobs.securityContext.capabilities.add: adding capabilities (NET_ADMIN, SYS_TIME) is not allowed: the module container holds the identity's cloud credentials"
            ]
        );
        p.security_context = Some(SecurityContext {
            capabilities: Some(Capabilities {
                add: None,
                drop: Some(vec!["ALL".into()]),
            }),
            ..SecurityContext::default()
        });
        assert!(check(&p).is_empty());
    }

    #[test]
    fn lock_timeout_must_be_below_the_deadline_when_both_are_set() {
        let mut p = JobPolicy {
            lock_timeout_seconds: Some(600),
            active_deadline_seconds: Some(600),
            ..JobPolicy::default()
        };
        assert_eq!(
            messages(&p),
            [
                "spec.jobs.lockTimeoutSeconds (600) must be less than spec.jobs.activeDeadlineSeconds (600): a state-lock wait alone could use up the whole Job deadline"
            ]
        );
        p.lock_timeout_seconds = Some(599);
        assert!(check(&p).is_empty());
        // One side alone is not compared with a default.
        p.active_deadline_seconds = None;
        p.lock_timeout_seconds = Some(3600);
        assert!(check(&p).is_empty());
    }

    #[test]
    fn reserved_env_names_are_admitted_with_a_warning_the_manager_drops_them() {
        let var = |name: &str| EnvVar {
            name: name.into(),
            value: Some("x".into()),
            value_from: None,
        };
        let p = JobPolicy {
            env: Some(vec![
                var("HTTPS_PROXY"),
                var("TF_LOG"),
                var("KUBE_NAMESPACE"),
                var("HOME"),
                var("TMPDIR"),
                var("CHECKPOINT_DISABLE"),
            ]),
            ..JobPolicy::default()
        };
        let found = check(&p);
        assert!(found.iter().all(|v| v.warning && v.rule == Rule::JobsEnv));
        assert_eq!(
            found.into_iter().map(|v| v.message).collect::<Vec<_>>(),
            [
                "spec.jobs.env[1].name \"TF_LOG\": names starting with TF_ are reserved for the runner and the Job's own environment; the manager drops this entry from the Job (event JobEnvDropped)",
                "spec.jobs.env[2].name \"KUBE_NAMESPACE\": names starting with KUBE_ are reserved for the runner and the Job's own environment; the manager drops this entry from the Job (event JobEnvDropped)",
                "spec.jobs.env[3].name \"HOME\": the Job itself sets this name; the manager drops this entry from the Job (event JobEnvDropped)",
                "spec.jobs.env[4].name \"TMPDIR\": the Job itself sets this name; the manager drops this entry from the Job (event JobEnvDropped)",
                "spec.jobs.env[5].name \"CHECKPOINT_DISABLE\": the Job itself sets this name; the manager drops this entry from the Job (event JobEnvDropped)",
            ]
        );
        let ok = JobPolicy {
            env: Some(vec![var("HTTPS_PROXY"), var("tf_log"), var("MY_TF_X")]),
            ..JobPolicy::default()
        };
        assert!(check(&ok).is_empty());
    }

    #[test]
    fn an_env_value_never_reaches_a_message() {
        let p = JobPolicy {
            env: Some(vec![EnvVar {
                name: "TF_TOKEN".into(),
                value: Some("s3cr3t-value".into()),
                value_from: None,
            }]),
            ..JobPolicy::default()
        };
        assert!(messages(&p).iter().all(|m| !m.contains("s3cr3t")));
    }
}
