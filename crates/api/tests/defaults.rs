//! Defaults resolve at reconcile time exactly where the book gives them, and never appear on a
//! serialized object.

use api::machinepool::TerraformMachinePoolSpec;
use api::shared::{JobPolicy, MachineRemediation, PullPolicy, Source};
use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Toleration,
};

#[test]
fn job_policy_defaults_follow_the_book() {
    let p = JobPolicy::default();
    assert_eq!(p.successful_jobs_history_limit_or_default(), 3);
    assert_eq!(p.failed_jobs_history_limit_or_default(), 3);
    assert_eq!(p.active_deadline_seconds_or_default(), 3600);
    assert_eq!(p.lock_timeout_seconds_or_default(), 300);
    assert_eq!(p.service_account_name_or_default(), "captf-runner");
}

#[test]
fn defaults_are_not_written_onto_objects() {
    assert_eq!(
        serde_json::to_value(JobPolicy::default()).expect("serializes"),
        serde_json::json!({})
    );
}

#[test]
fn image_pull_policy_defaults_to_if_not_present() {
    let s = Source {
        image: "x:1".into(),
        image_pull_policy: None,
    };
    assert_eq!(s.image_pull_policy_or_default(), PullPolicy::IfNotPresent);
}

#[test]
fn remediation_defaults_follow_the_book() {
    let r = MachineRemediation::default();
    assert!(!r.annotate_machine_or_default());
    assert_eq!(r.unhealthy_threshold_or_default(), 3);
    assert_eq!(r.health_check_interval_seconds_or_default(), 300);
}

#[test]
fn membership_refresh_interval_defaults_to_sixty_seconds() {
    let mut spec = TerraformMachinePoolSpec::default();
    assert_eq!(spec.membership_refresh_interval_seconds_or_default(), 60);
    spec.membership_refresh_interval_seconds = Some(0);
    assert_eq!(spec.membership_refresh_interval_seconds_or_default(), 60);
    spec.membership_refresh_interval_seconds = Some(15);
    assert_eq!(spec.membership_refresh_interval_seconds_or_default(), 15);
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn pull(name: &str) -> LocalObjectReference {
    LocalObjectReference { name: name.into() }
}

#[test]
fn job_policy_merges_field_by_field_over_cluster_defaults() {
    let defaults = JobPolicy {
        active_deadline_seconds: Some(1800),
        lock_timeout_seconds: Some(60),
        env: Some(vec![env("A", "cluster"), env("B", "cluster")]),
        image_pull_secrets: Some(vec![pull("shared"), pull("both")]),
        ..JobPolicy::default()
    };
    let own = JobPolicy {
        active_deadline_seconds: Some(900),
        env: Some(vec![env("B", "machine"), env("C", "machine")]),
        image_pull_secrets: Some(vec![pull("both"), pull("own")]),
        ..JobPolicy::default()
    };
    let merged = own.merged_over(&defaults);
    assert_eq!(merged.active_deadline_seconds, Some(900), "own field wins");
    assert_eq!(
        merged.lock_timeout_seconds,
        Some(60),
        "unset field inherits"
    );
    assert_eq!(
        merged.env,
        Some(vec![
            env("B", "machine"),
            env("C", "machine"),
            env("A", "cluster")
        ]),
        "env merges by name: the object's own entries first, then the defaults' it does not name"
    );
    assert_eq!(
        merged.image_pull_secrets,
        Some(vec![pull("both"), pull("own"), pull("shared")]),
        "pull secrets are a union, own first"
    );
}

fn tolerate(key: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }
}

/// Tuning Jobs, "Placement": each placement field is replaced whole, never merged entry by entry.
#[test]
fn placement_fields_are_replaced_whole_over_cluster_defaults() {
    let arm = Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "kubernetes.io/arch".into(),
                        operator: "In".into(),
                        values: Some(vec!["arm64".into()]),
                    }]),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    };
    let defaults = JobPolicy {
        node_selector: Some([("pool".to_owned(), "jobs".to_owned())].into()),
        tolerations: Some(vec![tolerate("dedicated"), tolerate("jobs")]),
        affinity: Some(arm.clone()),
        priority_class_name: Some("infra".into()),
        ..JobPolicy::default()
    };
    let own = JobPolicy {
        node_selector: Some([("zone".to_owned(), "a".to_owned())].into()),
        tolerations: Some(vec![tolerate("gpu")]),
        ..JobPolicy::default()
    };
    let merged = own.merged_over(&defaults);
    assert_eq!(
        merged.node_selector, own.node_selector,
        "own map, not a union"
    );
    assert_eq!(
        merged.tolerations,
        Some(vec![tolerate("gpu")]),
        "own list whole"
    );
    assert_eq!(merged.affinity, Some(arm), "unset field inherits");
    assert_eq!(merged.priority_class_name.as_deref(), Some("infra"));
    assert_eq!(merged.topology_spread_constraints, None);
}

#[test]
fn zero_active_deadline_means_default() {
    let p = JobPolicy {
        active_deadline_seconds: Some(0),
        ..JobPolicy::default()
    };
    assert_eq!(p.active_deadline_seconds_or_default(), 3600);
}
