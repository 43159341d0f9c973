#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use k8s_openapi::api::core::v1::SELinuxOptions;

const NS: &str = "team-a";
const UID: &str = "0b7e1d2c-uid";

fn cluster_apply(policy: &JobPolicy) -> JobRequest<'_> {
    JobRequest {
        kind: ObjectKind::Cluster,
        namespace: NS,
        name: "prod",
        uid: UID,
        cluster_name: "prod",
        operation: Operation::Apply,
        attempt: 1,
        tick: None,
        inputs_hash: "h1:0123abcd",
        image: "registry.example/acme/cluster@sha256:aaaa",
        image_ref: "registry.example/acme/cluster:v1.0.0",
        pull_policy: None,
        policy,
        identity: "aws-prod",
        service_account: policy.service_account_name_or_default(),
        keyless: None,
        runner_image: "registry.example/captf/runner:v0.1.0",
        state_suffix: "0123456789abcdef-c",
        guard_deletes: true,
        allow_deletes_hash: None,
        expect_plan: None,
        force_unlock: None,
        runner_events: true,
        drift_remediation: false,
        requested: None,
        approved_plan: None,
        restore: None,
    }
}

fn pod(job: &Job) -> &PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn main_container(job: &Job) -> &Container {
    let pod = pod(job);
    assert_eq!(pod.containers.len(), 1);
    &pod.containers[0]
}

fn init_container(job: &Job) -> &Container {
    let init = pod(job).init_containers.as_ref().unwrap();
    assert_eq!(init.len(), 1);
    &init[0]
}

fn args(job: &Job) -> Vec<&str> {
    main_container(job)
        .args
        .as_ref()
        .unwrap()
        .iter()
        .map(String::as_str)
        .collect()
}

fn env_names(c: &Container) -> Vec<&str> {
    c.env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect()
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_owned())
}

#[test]
fn job_name_is_the_contract_name() {
    let policy = JobPolicy::default();
    let req = cluster_apply(&policy);
    let name = job_name(&req);
    assert!(name.starts_with("captf-c-prod-apply-a1-"), "{name}");
    assert_eq!(
        name,
        names::job_name(&JobNameParts {
            kind: ObjectKind::Cluster,
            name: "prod",
            operation: Operation::Apply,
            attempt: 1,
            inputs_hash: "h1:0123abcd",
            tick: None,
        })
    );
    let ticked = JobRequest {
        tick: Some("1700000000"),
        ..req
    };
    assert_ne!(job_name(&ticked), name);
}

#[test]
fn metadata_labels_annotations_and_owner() {
    let policy = JobPolicy::default();
    let req = cluster_apply(&policy);
    let job = build_job(&req).job;
    let meta = &job.metadata;
    assert_eq!(meta.name.as_deref(), Some(job_name(&req).as_str()));
    assert_eq!(meta.namespace.as_deref(), Some(NS));
    let expected_labels = BTreeMap::from([
        (labels::ATTEMPT.to_owned(), "1".to_owned()),
        (labels::OP.to_owned(), "apply".to_owned()),
        (labels::OWNER_KIND.to_owned(), "TerraformCluster".to_owned()),
        (labels::OWNER_NAME.to_owned(), "prod".to_owned()),
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::CLUSTER_NAME.to_owned(), "prod".to_owned()),
    ]);
    assert_eq!(meta.labels.as_ref(), Some(&expected_labels));
    let template = job
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap();
    assert_eq!(template.labels.as_ref(), Some(&expected_labels));
    assert_eq!(
        template.annotations.as_ref(),
        Some(&BTreeMap::from([(
            annotations::SAFE_TO_EVICT.to_owned(),
            "false".to_owned()
        )]))
    );
    assert_eq!(
        meta.annotations.as_ref(),
        Some(&BTreeMap::from([(
            annotations::INPUTS_HASH.to_owned(),
            "h1:0123abcd".to_owned()
        )]))
    );
    assert_eq!(
        meta.owner_references.as_ref(),
        Some(&vec![OwnerReference {
            api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".to_owned(),
            kind: "TerraformCluster".to_owned(),
            name: "prod".to_owned(),
            uid: UID.to_owned(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }])
    );
}

#[test]
fn a_long_owner_name_is_hashed_in_labels() {
    let policy = JobPolicy::default();
    let long = "m".repeat(70);
    let req = JobRequest {
        kind: ObjectKind::Machine,
        name: &long,
        ..cluster_apply(&policy)
    };
    let job = build_job(&req).job;
    let owner_name = &job.metadata.labels.as_ref().unwrap()[labels::OWNER_NAME];
    assert_eq!(owner_name, &names::owner_name_label(&long));
    assert_eq!(owner_name.len(), 16);
    assert!(
        args(&job)
            .iter()
            .any(|a| a.contains(&format!("\"{}\"=\"{owner_name}\"", labels::OWNER_NAME)))
    );
}

#[test]
fn optional_annotations() {
    let policy = JobPolicy::default();
    let req = JobRequest {
        drift_remediation: true,
        approved_plan: Some("p1:feed"),
        restore: Some(RestoreBackup {
            serial: 42,
            chunks: 1,
            resources: 3,
        }),
        ..cluster_apply(&policy)
    };
    let job = build_job(&req).job;
    let a = job.metadata.annotations.unwrap();
    assert_eq!(a[annotations::INPUTS_HASH], "h1:0123abcd");
    assert_eq!(a[annotations::DRIFT_REMEDIATION], "true");
    assert_eq!(a[annotations::APPROVED_PLAN], "p1:feed");
    assert_eq!(a[annotations::RESTORE_SERIAL], "42");
    assert_eq!(a.len(), 4);
}

#[test]
fn fixed_job_and_pod_fields() {
    let policy = JobPolicy::default();
    let job = build_job(&cluster_apply(&policy)).job;
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(3600));
    assert_eq!(spec.ttl_seconds_after_finished, None);
    let pod = pod(&job);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.termination_grace_period_seconds, Some(600));
    assert_eq!(pod.service_account_name.as_deref(), Some("captf-runner"));
    assert_eq!(pod.image_pull_secrets, None);
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.fs_group, Some(65532));
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    assert_eq!(psc.run_as_non_root, None);
    // No placement unless the policy asks for one.
    assert_eq!(pod.node_selector, None);
    assert_eq!(pod.tolerations, None);
    assert_eq!(pod.affinity, None);
    assert_eq!(pod.priority_class_name, None);
    assert_eq!(pod.topology_spread_constraints, None);
}

#[test]
fn placement_reaches_the_pod_as_given() {
    use k8s_openapi::api::core::v1::{
        Affinity, PodAntiAffinity, Toleration, TopologySpreadConstraint,
    };
    let policy = JobPolicy {
        node_selector: Some([("kubernetes.io/arch".to_owned(), "arm64".to_owned())].into()),
        tolerations: Some(vec![Toleration {
            key: Some("node-role.kubernetes.io/control-plane".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }]),
        affinity: Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity::default()),
            ..Affinity::default()
        }),
        priority_class_name: Some("infra-jobs".into()),
        topology_spread_constraints: Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            ..TopologySpreadConstraint::default()
        }]),
        ..JobPolicy::default()
    };
    let job = build_job(&cluster_apply(&policy)).job;
    let pod = pod(&job);
    assert_eq!(pod.node_selector, policy.node_selector);
    assert_eq!(pod.tolerations, policy.tolerations);
    assert_eq!(pod.affinity, policy.affinity);
    assert_eq!(pod.priority_class_name.as_deref(), Some("infra-jobs"));
    assert_eq!(
        pod.topology_spread_constraints,
        policy.topology_spread_constraints
    );
}

#[test]
fn policy_deadline_service_account_and_pull_secrets() {
    let policy = JobPolicy {
        active_deadline_seconds: Some(7200),
        service_account_name: Some("custom-runner".into()),
        lock_timeout_seconds: Some(60),
        image_pull_secrets: Some(vec![
            LocalObjectReference {
                name: "regcred".into(),
            },
            LocalObjectReference {
                name: "runner-cred".into(),
            },
        ]),
        ..JobPolicy::default()
    };
    let job = build_job(&cluster_apply(&policy)).job;
    assert_eq!(
        job.spec.as_ref().unwrap().active_deadline_seconds,
        Some(7200)
    );
    let spec = pod(&job);
    assert_eq!(spec.service_account_name.as_deref(), Some("custom-runner"));
    let secrets: Vec<&str> = spec
        .image_pull_secrets
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(secrets, ["regcred", "runner-cred"]);
    assert!(args(&job).contains(&"--lock-timeout=60s"));

    // An empty list sets nothing; a zero deadline falls back to the default.
    let policy = JobPolicy {
        active_deadline_seconds: Some(0),
        image_pull_secrets: Some(vec![]),
        ..JobPolicy::default()
    };
    let job = build_job(&cluster_apply(&policy)).job;
    assert_eq!(
        job.spec.as_ref().unwrap().active_deadline_seconds,
        Some(3600)
    );
    assert_eq!(pod(&job).image_pull_secrets, None);
}

#[test]
fn init_container_is_fixed() {
    let policy = JobPolicy {
        resources: Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("cpu".into(), q("4"))])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            run_as_user: Some(0),
            ..SecurityContext::default()
        }),
        ..JobPolicy::default()
    };
    let job = build_job(&cluster_apply(&policy)).job;
    let init = init_container(&job);
    assert_eq!(init.name, "runner");
    assert_eq!(
        init.image.as_deref(),
        Some("registry.example/captf/runner:v0.1.0")
    );
    assert_eq!(
        init.command.as_deref(),
        Some(
            &[
                "/runner".to_owned(),
                "copy".into(),
                "/captf/bin/runner".into()
            ][..]
        )
    );
    assert_eq!(init.args, None);
    let resources = init.resources.as_ref().unwrap();
    assert_eq!(
        resources.requests,
        Some(BTreeMap::from([
            ("cpu".into(), q("10m")),
            ("memory".into(), q("32Mi"))
        ]))
    );
    assert_eq!(
        resources.limits,
        Some(BTreeMap::from([
            ("cpu".into(), q("100m")),
            ("memory".into(), q("64Mi"))
        ]))
    );
    assert_eq!(
        init.security_context,
        Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            run_as_non_root: Some(true),
            run_as_user: Some(65532),
            read_only_root_filesystem: Some(true),
            ..SecurityContext::default()
        })
    );
    assert_eq!(
        init.volume_mounts,
        Some(vec![VolumeMount {
            name: "runner".into(),
            mount_path: "/captf/bin".into(),
            ..VolumeMount::default()
        }])
    );
}

#[test]
fn main_container_fixed_fields() {
    let policy = JobPolicy::default();
    let job = build_job(&cluster_apply(&policy)).job;
    let main = main_container(&job);
    assert_eq!(main.name, "source");
    assert_eq!(
        main.image.as_deref(),
        Some("registry.example/acme/cluster@sha256:aaaa")
    );
    assert_eq!(main.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(
        main.command.as_deref(),
        Some(&["/captf/bin/runner".to_owned()][..])
    );
    assert_eq!(main.termination_message_policy.as_deref(), Some("File"));
    assert_eq!(
        main.env_from,
        Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: "captf-creds-aws-prod".into(),
                optional: None,
            }),
            ..EnvFromSource::default()
        }])
    );
    let mounts: Vec<(&str, &str, Option<bool>)> = main
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(
        mounts,
        [
            ("runner", "/captf/bin", Some(true)),
            ("work", "/captf/work", None),
            ("tmp", "/tmp", None),
            ("config", "/captf/config", Some(true)),
            ("creds", "/var/run/captf/credentials", Some(true)),
        ]
    );

    let always = JobRequest {
        pull_policy: Some(PullPolicy::Always),
        ..cluster_apply(&policy)
    };
    let job = build_job(&always).job;
    assert_eq!(
        main_container(&job).image_pull_policy.as_deref(),
        Some("Always")
    );
}

#[test]
fn volumes() {
    let policy = JobPolicy::default();
    let req = cluster_apply(&policy);
    let job = build_job(&req).job;
    let volumes = pod(&job).volumes.as_ref().unwrap();
    let names: Vec<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["runner", "work", "tmp", "config", "creds"]);
    for v in &volumes[..3] {
        assert_eq!(v.empty_dir, Some(EmptyDirVolumeSource::default()));
    }
    assert_eq!(
        volumes[3].secret,
        Some(SecretVolumeSource {
            secret_name: Some(format!("captf-run-{}", job_name(&req))),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        })
    );
    assert_eq!(volumes[3].secret.as_ref().unwrap().default_mode, Some(288));
    assert_eq!(
        volumes[4].secret,
        Some(SecretVolumeSource {
            secret_name: Some("captf-creds-aws-prod".into()),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        })
    );
}

#[test]
fn a_restore_projects_the_backup_chunks() {
    let policy = JobPolicy::default();
    let req = JobRequest {
        operation: Operation::Restore,
        tick: Some("7"),
        guard_deletes: false,
        restore: Some(RestoreBackup {
            serial: 12,
            chunks: 2,
            resources: 5,
        }),
        ..cluster_apply(&policy)
    };
    let job = build_job(&req).job;
    let config = &pod(&job).volumes.as_ref().unwrap()[3];
    assert_eq!(config.name, "config");
    assert_eq!(config.secret, None);
    let projected = config.projected.as_ref().unwrap();
    assert_eq!(projected.default_mode, Some(0o440));
    let sources: Vec<&SecretProjection> = projected
        .sources
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| s.secret.as_ref().unwrap())
        .collect();
    assert_eq!(sources.len(), 3);
    assert_eq!(sources[0].name, format!("captf-run-{}", job_name(&req)));
    assert_eq!(sources[0].items, None);
    let chunk = |i: usize| {
        (
            sources[i + 1].name.as_str(),
            sources[i + 1].items.as_ref().unwrap()[0].key.as_str(),
            sources[i + 1].items.as_ref().unwrap()[0].path.as_str(),
        )
    };
    assert_eq!(
        chunk(0),
        (
            "captf-state-backup-0123456789abcdef-c-12",
            "tfstate",
            "restore/0"
        )
    );
    assert_eq!(
        chunk(1),
        (
            "captf-state-backup-0123456789abcdef-c-12-part-1",
            "tfstate",
            "restore/1"
        )
    );
    let a = args(&job);
    assert!(a.contains(&"--op=restore"));
    assert!(a.contains(&"--restore-chunks=2"));
    assert!(a.contains(&"--restore-resources=5"));
    assert!(!a.contains(&"--guard-deletes"));
    assert_eq!(
        job.metadata.annotations.as_ref().unwrap()[annotations::RESTORE_SERIAL],
        "12"
    );
}

#[test]
fn args_in_documented_order_with_every_option() {
    let policy = JobPolicy::default();
    let req = JobRequest {
        force_unlock: Some("lock-1"),
        allow_deletes_hash: Some("h1:0123abcd"),
        expect_plan: Some("p1:beef"),
        restore: Some(RestoreBackup {
            serial: 3,
            chunks: 1,
            resources: 0,
        }),
        ..cluster_apply(&policy)
    };
    let job = build_job(&req).job;
    let name = job_name(&req);
    let labels_hcl = concat!(
        r#"--backend-config=labels={"captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformCluster","#,
        r#""captf.infrastructure.cluster.x-k8s.io/owner-name"="prod","#,
        r#""captf.io/managed"="true","#,
        r#""cluster.x-k8s.io/cluster-name"="prod","#,
        r#""clusterctl.cluster.x-k8s.io/move"=""}"#,
    );
    let event_object = format!(
        "--event-object=infrastructure.cluster.x-k8s.io/v1alpha1/TerraformCluster/{NS}/prod/{UID}"
    );
    let job_flag = format!("--job-name={name}");
    let plan_owner = format!(
        "--plan-text-owner=infrastructure.cluster.x-k8s.io/v1alpha1/TerraformCluster/{NS}/prod/{UID}"
    );
    assert_eq!(
        args(&job),
        [
            "run",
            "--op=apply",
            "--bin=/captf/runtime",
            "--image=registry.example/acme/cluster:v1.0.0",
            "--module=/captf/module",
            "--providers=/captf/providers",
            "--workdir=/captf/work",
            "--config=/captf/config",
            "--lock-timeout=300s",
            "--stop-timeout=570s",
            "--backend-config=secret_suffix=0123456789abcdef-c",
            "--backend-config=namespace=team-a",
            "--backend-config=in_cluster_config=true",
            labels_hcl,
            "--force-unlock=lock-1",
            "--guard-deletes",
            "--inputs-hash=h1:0123abcd",
            "--allow-deletes-hash=h1:0123abcd",
            "--expect-plan=p1:beef",
            "--plan-text-secret=captf-plan-c-prod",
            plan_owner.as_str(),
            "--restore-chunks=1",
            "--restore-resources=0",
            event_object.as_str(),
            job_flag.as_str(),
        ]
    );
}

/// Plan Approval "Reading the plan": a TerraformCluster's plan Job and its approved apply store
/// the plan's text; any other Job does not.
#[test]
fn only_a_clusters_plan_and_approved_apply_store_the_plan_text() {
    let policy = JobPolicy::default();
    let has = |req: &JobRequest<'_>| {
        args(&build_job(req).job).contains(&"--plan-text-secret=captf-plan-c-prod")
    };
    let plan = JobRequest {
        operation: Operation::Plan,
        guard_deletes: false,
        ..cluster_apply(&policy)
    };
    assert!(has(&plan));
    let approved = JobRequest {
        expect_plan: Some("p1:beef"),
        ..cluster_apply(&policy)
    };
    assert!(has(&approved));
    assert!(!has(&cluster_apply(&policy)), "an apply nobody approved");
    let drift = JobRequest {
        operation: Operation::Drift,
        ..cluster_apply(&policy)
    };
    assert!(!has(&drift));
}

#[test]
fn args_without_options() {
    let policy = JobPolicy::default();
    let req = JobRequest {
        kind: ObjectKind::Machine,
        operation: Operation::Destroy,
        guard_deletes: false,
        runner_events: false,
        force_unlock: Some(""),
        expect_plan: Some(""),
        ..cluster_apply(&policy)
    };
    let job = build_job(&req).job;
    let a = args(&job);
    assert_eq!(a.len(), 14, "{a:?}");
    assert_eq!(a[1], "--op=destroy");
    assert!(a[13].starts_with("--backend-config=labels={"));
    assert!(
        a[13].contains(r#""captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformMachine""#)
    );
    assert!(!a.iter().any(|x| x.starts_with("--inputs-hash")));
    assert!(!a.iter().any(|x| x.starts_with("--event-object")));
}

#[test]
fn fixed_env_then_filtered_policy_env() {
    let policy = JobPolicy {
        env: Some(vec![
            EnvVar {
                name: "AWS_REGION".into(),
                value: Some("eu-west-1".into()),
                ..EnvVar::default()
            },
            EnvVar {
                name: "TF_LOG".into(),
                value: Some("TRACE".into()),
                ..EnvVar::default()
            },
            EnvVar {
                name: "KUBE_CONFIG_PATH".into(),
                value: Some("/x".into()),
                ..EnvVar::default()
            },
            EnvVar {
                name: "TF_VAR_x".into(),
                value: Some("y".into()),
                ..EnvVar::default()
            },
            EnvVar {
                name: "HTTPS_PROXY".into(),
                value: Some("http://proxy:3128".into()),
                ..EnvVar::default()
            },
            // Only the exact prefixes are reserved.
            EnvVar {
                name: "TFX".into(),
                value: Some("1".into()),
                ..EnvVar::default()
            },
        ]),
        ..JobPolicy::default()
    };
    let built = build_job(&cluster_apply(&policy));
    assert_eq!(
        built.dropped_env,
        ["TF_LOG", "KUBE_CONFIG_PATH", "TF_VAR_x"]
    );
    let main = main_container(&built.job);
    assert_eq!(
        env_names(main),
        [
            "TF_IN_AUTOMATION",
            "TF_INPUT",
            "HOME",
            "TMPDIR",
            "KUBE_NAMESPACE",
            "CHECKPOINT_DISABLE",
            "AWS_REGION",
            "HTTPS_PROXY",
            "TFX",
        ]
    );
    let value = |n: &str| {
        main.env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value.clone())
            .unwrap()
    };
    assert_eq!(value("TF_IN_AUTOMATION"), "1");
    assert_eq!(value("TF_INPUT"), "0");
    assert_eq!(value("HOME"), "/captf/work");
    assert_eq!(value("TMPDIR"), "/tmp");
    assert_eq!(value("KUBE_NAMESPACE"), NS);
    assert_eq!(value("CHECKPOINT_DISABLE"), "1");
    assert_eq!(value("AWS_REGION"), "eu-west-1");

    let none = JobPolicy::default();
    let built = build_job(&cluster_apply(&none));
    assert!(built.dropped_env.is_empty());
    assert_eq!(env_names(main_container(&built.job)).len(), 6);
}

#[test]
fn reserved_env_names() {
    assert!(is_reserved_env_name("TF_LOG"));
    assert!(is_reserved_env_name("TF_"));
    assert!(is_reserved_env_name("KUBE_NAMESPACE"));
    assert!(!is_reserved_env_name("tf_log"));
    assert!(!is_reserved_env_name("KUBECONFIG"));
    assert!(!is_reserved_env_name("ATF_X"));
}

#[test]
fn resources_default_and_policy() {
    let policy = JobPolicy::default();
    let job = build_job(&cluster_apply(&policy)).job;
    assert_eq!(
        main_container(&job).resources,
        Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), q("250m")),
                ("memory".into(), q("512Mi"))
            ])),
            limits: Some(BTreeMap::from([("memory".into(), q("2Gi"))])),
            claims: None,
        })
    );

    // Set as a whole: nothing of the default survives.
    let own = ResourceRequirements {
        requests: Some(BTreeMap::from([("memory".into(), q("4Gi"))])),
        ..ResourceRequirements::default()
    };
    let policy = JobPolicy {
        resources: Some(own.clone()),
        ..JobPolicy::default()
    };
    let job = build_job(&cluster_apply(&policy)).job;
    assert_eq!(main_container(&job).resources, Some(own));
}

#[test]
fn main_security_context_defaults() {
    assert_eq!(
        main_security_context(None),
        SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            read_only_root_filesystem: Some(true),
            ..SecurityContext::default()
        }
    );
    let policy = JobPolicy::default();
    let job = build_job(&cluster_apply(&policy)).job;
    assert_eq!(
        main_container(&job).security_context,
        Some(main_security_context(None))
    );
}

#[test]
fn main_security_context_merges_field_by_field() {
    let own = SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(1000),
        read_only_root_filesystem: Some(false),
        se_linux_options: Some(SELinuxOptions {
            level: Some("s0:c1".into()),
            ..SELinuxOptions::default()
        }),
        ..SecurityContext::default()
    };
    let merged = main_security_context(Some(&own));
    assert_eq!(merged.allow_privilege_escalation, Some(false));
    assert_eq!(
        merged.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    assert_eq!(merged.read_only_root_filesystem, Some(false));
    assert_eq!(merged.run_as_non_root, Some(true));
    assert_eq!(merged.run_as_user, Some(1000));
    assert_eq!(merged.se_linux_options, own.se_linux_options);
    assert_eq!(merged.privileged, None);

    // Capabilities replace the default drop list whole.
    let own = SecurityContext {
        capabilities: Some(Capabilities {
            drop: Some(vec!["NET_RAW".into()]),
            add: None,
        }),
        ..SecurityContext::default()
    };
    let merged = main_security_context(Some(&own));
    assert_eq!(merged.capabilities, own.capabilities);
    let own = SecurityContext {
        capabilities: Some(Capabilities::default()),
        ..SecurityContext::default()
    };
    assert_eq!(
        main_security_context(Some(&own)).capabilities,
        Some(Capabilities::default())
    );

    // Through the policy.
    let policy = JobPolicy {
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            ..SecurityContext::default()
        }),
        ..JobPolicy::default()
    };
    let job = build_job(&cluster_apply(&policy)).job;
    let sc = main_container(&job).security_context.clone().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
}

#[test]
fn pod_security_context_merges_field_by_field() {
    let own = PodSecurityContext {
        fs_group: Some(1000),
        run_as_non_root: Some(true),
        run_as_user: Some(1000),
        ..PodSecurityContext::default()
    };
    let merged = pod_security_context(Some(&own));
    assert_eq!(merged.fs_group, Some(1000));
    assert_eq!(merged.run_as_non_root, Some(true));
    assert_eq!(merged.run_as_user, Some(1000));
    assert_eq!(
        merged.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );

    let own = PodSecurityContext {
        seccomp_profile: Some(SeccompProfile {
            type_: "Localhost".into(),
            localhost_profile: Some("profiles/tf.json".into()),
        }),
        ..PodSecurityContext::default()
    };
    let merged = pod_security_context(Some(&own));
    assert_eq!(merged.seccomp_profile, own.seccomp_profile);
    assert_eq!(merged.fs_group, Some(65532));

    let policy = JobPolicy {
        pod_security_context: Some(PodSecurityContext {
            supplemental_groups: Some(vec![5]),
            ..PodSecurityContext::default()
        }),
        ..JobPolicy::default()
    };
    let job = build_job(&cluster_apply(&policy)).job;
    let psc = pod(&job).security_context.clone().unwrap();
    assert_eq!(psc.supplemental_groups, Some(vec![5]));
    assert_eq!(psc.fs_group, Some(65532));
}

fn created(job: &mut Job) {
    job.metadata.uid = Some("job-uid-1".into());
}

#[test]
fn run_secret_is_owned_by_the_job() {
    let policy = JobPolicy::default();
    let req = cluster_apply(&policy);
    let mut job = build_job(&req).job;
    created(&mut job);
    let s = run_secret(&job, r#"{"terraform":{}}"#, r#"{"a":1}"#);
    let name = job_name(&req);
    assert_eq!(s.metadata.name, Some(format!("captf-run-{name}")));
    assert_eq!(s.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        s.metadata.labels,
        Some(BTreeMap::from([
            (labels::MANAGED.to_owned(), "true".to_owned()),
            (labels::OWNER_KIND.to_owned(), "TerraformCluster".to_owned()),
            (labels::OWNER_NAME.to_owned(), "prod".to_owned()),
            (labels::CLUSTER_NAME.to_owned(), "prod".to_owned()),
        ]))
    );
    assert_eq!(
        s.metadata.owner_references,
        Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name,
            uid: "job-uid-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }])
    );
    let data = s.data.unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data["main.tf.json"].0, br#"{"terraform":{}}"#);
    assert_eq!(data["terraform.tfvars.json"].0, br#"{"a":1}"#);
}

#[test]
fn durable_inputs_secret_is_owned_by_the_object() {
    let policy = JobPolicy::default();
    let req = JobRequest {
        kind: ObjectKind::MachinePool,
        name: "pool-a",
        ..cluster_apply(&policy)
    };
    let s = durable_inputs_secret(&req.durable_inputs(Some("sha256:abc")), "{}", "{\"x\":1}");
    assert_eq!(s.metadata.name.as_deref(), Some("captf-inputs-mp-pool-a"));
    assert_eq!(s.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        s.metadata.labels,
        Some(BTreeMap::from([
            (labels::MANAGED.to_owned(), "true".to_owned()),
            (
                labels::OWNER_KIND.to_owned(),
                "TerraformMachinePool".to_owned()
            ),
            (labels::OWNER_NAME.to_owned(), "pool-a".to_owned()),
            (labels::CLUSTER_NAME.to_owned(), "prod".to_owned()),
            (labels::MOVE.to_owned(), String::new()),
        ]))
    );
    assert_eq!(
        s.metadata.annotations,
        Some(BTreeMap::from([
            (
                annotations::IMAGE.to_owned(),
                "registry.example/acme/cluster:v1.0.0".to_owned()
            ),
            (
                annotations::IMAGE_DIGEST.to_owned(),
                "sha256:abc".to_owned()
            ),
            (annotations::IDENTITY.to_owned(), "aws-prod".to_owned()),
        ]))
    );
    assert_eq!(
        s.metadata.owner_references,
        Some(vec![OwnerReference {
            api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
            kind: "TerraformMachinePool".into(),
            name: "pool-a".into(),
            uid: UID.into(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        }])
    );
    let data = s.data.unwrap();
    assert_eq!(data["main.tf.json"].0, b"{}");
    assert_eq!(data["terraform.tfvars.json"].0, b"{\"x\":1}");

    let unpinned = durable_inputs_secret(&req.durable_inputs(None), "{}", "{}");
    assert!(
        !unpinned
            .metadata
            .annotations
            .unwrap()
            .contains_key(annotations::IMAGE_DIGEST)
    );
}

#[test]
fn building_is_deterministic() {
    let policy = JobPolicy::default();
    let req = cluster_apply(&policy);
    assert_eq!(build_job(&req), build_job(&req));
}

#[test]
fn the_job_round_trips_through_json() {
    let policy = JobPolicy::default();
    let job = build_job(&cluster_apply(&policy)).job;
    let value = serde_json::to_value(&job).unwrap();
    assert_eq!(value["apiVersion"], "batch/v1");
    assert_eq!(value["kind"], "Job");
    assert_eq!(
        value["spec"]["template"]["spec"]["volumes"][3]["secret"]["defaultMode"],
        288
    );
    let back: Job = serde_json::from_value(value).unwrap();
    assert_eq!(back, job);
}

#[test]
fn snapshot_cluster_apply_job() {
    let policy = JobPolicy {
        image_pull_secrets: Some(vec![LocalObjectReference {
            name: "regcred".into(),
        }]),
        env: Some(vec![EnvVar {
            name: "AWS_REGION".into(),
            value: Some("eu-west-1".into()),
            ..EnvVar::default()
        }]),
        ..JobPolicy::default()
    };
    let built = build_job(&cluster_apply(&policy));
    insta::assert_json_snapshot!("cluster_apply_job", built.job);
}

fn keyless() -> WorkloadIdentity {
    WorkloadIdentity {
        service_account_name: "cloud-runner".into(),
        audience: "sts.amazonaws.com".into(),
        expiration_seconds: None,
        aws: Some(api::identity::AwsWebIdentity {
            role_arn: "arn:aws:iam::123456789012:role/captf".into(),
            role_session_name: None,
        }),
        azure: Some(api::identity::AzureWorkloadIdentity {
            client_id: "00000000-0000-0000-0000-000000000001".into(),
            tenant_id: "00000000-0000-0000-0000-000000000002".into(),
            authority_host: Some("https://login.microsoftonline.us/".into()),
        }),
        gcp: Some(api::identity::GcpWorkloadIdentity {
            workload_identity_provider:
                "projects/42/locations/global/workloadIdentityPools/p/providers/k".into(),
            service_account_email: None,
        }),
    }
}

/// Keyless identity: the pod runs as the identity's ServiceAccount with a projected token for
/// its audience at the fixed path, mounts no mirror, and passes each set cloud field to the
/// runner; nothing else of the Job changes.
#[test]
fn a_keyless_identity_mounts_a_projected_token_instead_of_the_mirror() {
    let policy = JobPolicy::default();
    let k = keyless();
    let mut req = cluster_apply(&policy);
    let with_mirror = build_job(&req).job;
    req.service_account = "cloud-runner";
    req.keyless = Some(&k);
    let job = build_job(&req).job;
    let spec = pod(&job);
    assert_eq!(spec.service_account_name.as_deref(), Some("cloud-runner"));
    let main = &spec.containers[0];
    assert!(main.env_from.is_none(), "no mirror envFrom");
    let mounts: Vec<(&str, &str)> = main
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert!(mounts.contains(&("identity", "/var/run/captf/identity")));
    assert!(!mounts.iter().any(|(n, _)| *n == "creds"));
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "identity")
        .unwrap();
    let token = volume.projected.as_ref().unwrap().sources.as_ref().unwrap()[0]
        .service_account_token
        .as_ref()
        .unwrap();
    assert_eq!(token.audience.as_deref(), Some("sts.amazonaws.com"));
    assert_eq!(token.expiration_seconds, Some(3600));
    assert_eq!(token.path, "token");
    let args = main.args.as_ref().unwrap();
    for want in [
        "--web-identity-token=/var/run/captf/identity/token",
        "--aws-role-arn=arn:aws:iam::123456789012:role/captf",
        "--azure-client-id=00000000-0000-0000-0000-000000000001",
        "--azure-tenant-id=00000000-0000-0000-0000-000000000002",
        "--azure-authority-host=https://login.microsoftonline.us/",
        "--gcp-workload-identity-provider=projects/42/locations/global/workloadIdentityPools/p/providers/k",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    assert!(!args.iter().any(
        |a| a.starts_with("--aws-role-session-name") || a.starts_with("--gcp-service-account")
    ));
    // The name, labels and the rest of the arguments are those of the same Job with a mirror.
    assert_eq!(job.metadata.name, with_mirror.metadata.name);
    let plain = pod(&with_mirror).containers[0].args.clone().unwrap();
    let without_keyless: Vec<&String> = args
        .iter()
        .filter(|a| {
            !a.starts_with("--web-identity-token")
                && !a.starts_with("--aws-")
                && !a.starts_with("--azure-")
                && !a.starts_with("--gcp-")
        })
        .collect();
    assert_eq!(without_keyless, plain.iter().collect::<Vec<_>>());
}
