//! `config/rbac/` and `config/manager/` agree with INTERFACE-FACTS §8 "RBAC" and §4 "Shipped
//! manifest", and with the code: every file parses as the Kubernetes objects it holds and is
//! listed by its kustomization, the runner ClusterRole is exactly the three documented rules, the
//! manager ClusterRole grants exactly the documented table and may `bind` only captf-runner, the
//! names of the ServiceAccount, roles and bindings line up, and the Deployment runs container
//! `manager` with the documented arguments, ports, probes and security settings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use manager::runtime::diagnostics::{DiagnosticsSettings, Listen, parse_listen};
use serde_json::Value;

fn config_dir(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../config")
        .join(dir)
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

fn docs_of(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every object of `dir`'s YAML files but its kustomization.
fn objects(dir: &str) -> Vec<Value> {
    yaml_files(&config_dir(dir))
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .flat_map(|p| docs_of(p))
        .collect()
}

fn named<T: serde::de::DeserializeOwned>(dir: &str, kind: &str, name: &str) -> T {
    let doc = objects(dir)
        .into_iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in config/{dir}"));
    serde_json::from_value(doc).unwrap_or_else(|e| panic!("{kind} {name}: {e}"))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// Every (apiGroup, resource, verb) a rule list grants, with the resource names of the rule.
fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut granted = BTreeSet::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    granted
}

fn table(rows: &[(&[&str], &[&str], &[&str])]) -> BTreeSet<(String, String, String)> {
    let mut want = BTreeSet::new();
    for (groups, resources, verbs) in rows {
        for g in *groups {
            for r in *resources {
                for v in *verbs {
                    want.insert(((*g).to_owned(), (*r).to_owned(), (*v).to_owned()));
                }
            }
        }
    }
    want
}

#[test]
fn every_file_parses_and_is_listed_by_its_kustomization() {
    for dir in ["rbac", "manager"] {
        let root = config_dir(dir);
        let kustomization = docs_of(&root.join("kustomization.yaml"));
        let listed: BTreeSet<String> = kustomization[0]["resources"]
            .as_array()
            .unwrap_or_else(|| panic!("config/{dir}/kustomization.yaml lists no resources"))
            .iter()
            .map(|r| r.as_str().expect("a resource path").to_owned())
            .collect();
        let mut present = BTreeSet::new();
        for path in yaml_files(&root) {
            let file = path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("a file name")
                .to_owned();
            let docs = docs_of(&path);
            assert!(!docs.is_empty(), "{} is empty", path.display());
            if file == "kustomization.yaml" {
                continue;
            }
            for doc in docs {
                let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
                let what = format!("{kind} in {}", path.display());
                let parsed = match kind.as_str() {
                    "ServiceAccount" => serde_json::from_value::<ServiceAccount>(doc).map(drop),
                    "ClusterRole" => serde_json::from_value::<ClusterRole>(doc).map(drop),
                    "ClusterRoleBinding" => {
                        serde_json::from_value::<ClusterRoleBinding>(doc).map(drop)
                    }
                    "Role" => serde_json::from_value::<Role>(doc).map(drop),
                    "RoleBinding" => serde_json::from_value::<RoleBinding>(doc).map(drop),
                    "Deployment" => serde_json::from_value::<Deployment>(doc).map(drop),
                    "Service" => serde_json::from_value::<Service>(doc).map(drop),
                    _ => panic!("unexpected {what}"),
                };
                parsed.unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            present.insert(file);
        }
        assert_eq!(listed, present, "config/{dir}/kustomization.yaml resources");
    }
}

#[test]
fn the_runner_cluster_role_is_exactly_the_three_documented_rules() {
    let role: ClusterRole = named("rbac", "ClusterRole", "captf-runner");
    let rule = |group: &str, resource: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: strings(verbs),
        ..PolicyRule::default()
    };
    let want = vec![
        rule(
            "",
            "secrets",
            &["get", "list", "create", "update", "delete"],
        ),
        rule(
            "coordination.k8s.io",
            "leases",
            &["get", "create", "update"],
        ),
        rule("events.k8s.io", "events", &["create"]),
    ];
    assert_eq!(role.rules.unwrap_or_default(), want);
    assert!(role.aggregation_rule.is_none());
}

#[test]
fn the_manager_cluster_role_grants_only_what_the_manager_uses() {
    let role: ClusterRole = named("rbac", "ClusterRole", "captf-manager-role");
    let rules = role.rules.unwrap_or_default();
    let infra: &[&str] = &["infrastructure.cluster.x-k8s.io"];
    // The verbs the code of this release uses (a subset of INTERFACE-FACTS §8's published table);
    // the lifecycle integration test runs the manager as a ServiceAccount bound to this role.
    let want = table(&[
        (
            infra,
            &[
                "terraformclusters",
                "terraformmachines",
                "terraformmachinepools",
            ],
            &["get", "list", "watch", "patch"],
        ),
        (
            infra,
            &["terraformclusteridentities"],
            &["get", "list", "watch"],
        ),
        (infra, &["terraformmachinetemplates"], &["list", "watch"]),
        (
            infra,
            &[
                "terraformclusters/status",
                "terraformmachines/status",
                "terraformmachinepools/status",
                "terraformclusteridentities/status",
                "terraformmachinetemplates/status",
            ],
            &["patch"],
        ),
        (
            infra,
            &[
                "terraformclusters/finalizers",
                "terraformmachines/finalizers",
                "terraformmachinepools/finalizers",
            ],
            &["update"],
        ),
        (
            &["cluster.x-k8s.io"],
            &["clusters"],
            &["get", "list", "watch"],
        ),
        (
            &["cluster.x-k8s.io"],
            &["machines"],
            &["get", "list", "watch", "patch"],
        ),
        (
            &["cluster.x-k8s.io"],
            &["machinepools"],
            &["get", "list", "watch", "patch"],
        ),
        (
            &[""],
            &["secrets"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        (&[""], &["namespaces"], &["list", "watch"]),
        (&[""], &["configmaps"], &["get", "list", "watch"]),
        (
            &[""],
            &["serviceaccounts"],
            &["list", "watch", "create", "delete"],
        ),
        (
            &["rbac.authorization.k8s.io"],
            &["rolebindings"],
            &["get", "list", "watch", "create", "update", "delete"],
        ),
        (&["rbac.authorization.k8s.io"], &["clusterroles"], &["bind"]),
        (
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "list", "watch", "create", "update", "delete"],
        ),
        (
            &["batch"],
            &["jobs"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        (&["batch"], &["jobs/finalizers"], &["update"]),
        (&[""], &["pods"], &["get", "list", "watch"]),
        (&["events.k8s.io"], &["events"], &["create", "patch"]),
        (&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
        (
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
            &["create"],
        ),
    ]);
    assert_eq!(grants(&rules), want);
    for rule in &rules {
        assert!(
            rule.non_resource_urls.is_none(),
            "no non-resource URLs: {rule:?}"
        );
        for list in [&rule.api_groups, &rule.resources] {
            assert!(
                !list.iter().flatten().any(|s| s.contains('*')),
                "no wildcards: {rule:?}"
            );
        }
        assert!(
            !rule.verbs.iter().any(|v| v == "*"),
            "no wildcards: {rule:?}"
        );
    }
}

#[test]
fn the_manager_may_bind_only_the_runner_cluster_role() {
    let role: ClusterRole = named("rbac", "ClusterRole", "captf-manager-role");
    let rules = role.rules.unwrap_or_default();
    let binding: Vec<&PolicyRule> = rules
        .iter()
        .filter(|r| r.verbs.iter().any(|v| v == "bind" || v == "escalate"))
        .collect();
    assert_eq!(binding.len(), 1, "{binding:?}");
    let rule = binding[0];
    assert_eq!(rule.verbs, ["bind"]);
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["rbac.authorization.k8s.io".to_owned()][..])
    );
    assert_eq!(
        rule.resources.as_deref(),
        Some(&["clusterroles".to_owned()][..])
    );
    assert_eq!(
        rule.resource_names.as_deref(),
        Some(&["captf-runner".to_owned()][..])
    );
    // No other rule is narrowed by name, and no rule touches roles or clusterroles otherwise.
    for other in rules.iter().filter(|r| !std::ptr::eq(*r, rule)) {
        assert!(other.resource_names.is_none(), "{other:?}");
        assert!(
            !other
                .resources
                .iter()
                .flatten()
                .any(|r| r == "roles" || r == "clusterroles" || r == "clusterrolebindings"),
            "{other:?}"
        );
    }
    // The role it binds exists under that name.
    let _: ClusterRole = named("rbac", "ClusterRole", "captf-runner");
}

#[test]
fn the_leader_election_role_and_the_bindings_line_up() {
    let role: Role = named("rbac", "Role", "captf-leader-election-role");
    assert_eq!(role.metadata.namespace.as_deref(), Some("captf-system"));
    assert_eq!(
        grants(&role.rules.unwrap_or_default()),
        table(&[
            (
                &["coordination.k8s.io"],
                &["leases"],
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete"
                ],
            ),
            (&[""], &["events"], &["create", "patch"]),
        ])
    );
    let sa: ServiceAccount = named("rbac", "ServiceAccount", "captf-controller-manager");
    assert_eq!(sa.metadata.namespace.as_deref(), Some("captf-system"));
    let manager_sa = |subjects: Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        let subjects = subjects.unwrap_or_default();
        assert_eq!(subjects.len(), 1, "{subjects:?}");
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, "captf-controller-manager");
        assert_eq!(subjects[0].namespace.as_deref(), Some("captf-system"));
    };
    let crb: ClusterRoleBinding = named("rbac", "ClusterRoleBinding", "captf-manager-rolebinding");
    assert_eq!(
        (crb.role_ref.kind.as_str(), crb.role_ref.name.as_str()),
        ("ClusterRole", "captf-manager-role")
    );
    manager_sa(crb.subjects);
    let rb: RoleBinding = named("rbac", "RoleBinding", "captf-leader-election-rolebinding");
    assert_eq!(rb.metadata.namespace.as_deref(), Some("captf-system"));
    assert_eq!(
        (rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()),
        ("Role", "captf-leader-election-role")
    );
    manager_sa(rb.subjects);
    // The optional metrics reader may get /metrics and nothing else.
    let reader: ClusterRole = named("rbac", "ClusterRole", "captf-metrics-reader");
    let rules = reader.rules.unwrap_or_default();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].non_resource_urls.as_deref(),
        Some(&["/metrics".to_owned()][..])
    );
    assert_eq!(rules[0].verbs, ["get"]);
    assert!(rules[0].resources.is_none());
}

fn manager_container(deployment: &Deployment) -> &Container {
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod spec");
    assert_eq!(pod.containers.len(), 1);
    let container = &pod.containers[0];
    assert_eq!(container.name, "manager");
    container
}

fn port(container: &Container, name: &str) -> i32 {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .map_or_else(|| panic!("no port {name}"), |p| p.container_port)
}

#[test]
fn the_deployment_runs_the_documented_manager() {
    let deployment: Deployment = named("manager", "Deployment", "captf-controller-manager");
    assert_eq!(
        deployment.metadata.namespace.as_deref(),
        Some("captf-system")
    );
    let spec = deployment.spec.as_ref().expect("a spec");
    assert_eq!(spec.replicas, Some(1));
    let pod_labels: BTreeMap<String, String> = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert_eq!(
        pod_labels.get("control-plane").map(String::as_str),
        Some("controller-manager")
    );
    for (k, v) in spec.selector.match_labels.iter().flatten() {
        assert_eq!(pod_labels.get(k), Some(v), "the selector selects the pods");
    }
    let pod = spec.template.spec.as_ref().expect("a pod spec");
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("captf-controller-manager")
    );
    let container = manager_container(&deployment);

    // Arguments.
    let args = container.args.clone().unwrap_or_default();
    assert_eq!(
        args,
        strings(&[
            "--leader-elect",
            "--diagnostics-address=${CAPTF_DIAGNOSTICS_ADDRESS:=:8443}",
            "--insecure-diagnostics=${CAPTF_INSECURE_DIAGNOSTICS:=false}",
            "--health-addr=:9440",
            "--drift-default-interval=${CAPTF_DRIFT_DEFAULT_INTERVAL:=30m0s}",
            "--state-backups=${CAPTF_STATE_BACKUPS:=5}",
            "--runner-events=${CAPTF_RUNNER_EVENTS:=true}",
            "--v=${CAPTF_LOG_LEVEL:=2}",
            "--logging-format=${CAPTF_LOGGING_FORMAT:=text}",
        ])
    );

    // Ports: the diagnostics address the args give, and the default health address.
    assert_eq!(port(container, "metrics"), 8443);
    assert_eq!(port(container, "healthz"), 9440);
    // As clusterctl substitutes the variables' defaults.
    let defaulted = |a: &str| {
        testenv::manifests::substitute_variables(a, &std::collections::BTreeMap::new())
            .expect("every variable has a default")
    };
    let diagnostics = args
        .iter()
        .find_map(|a| a.strip_prefix("--diagnostics-address="))
        .map(defaulted)
        .expect("a diagnostics address");
    assert!(
        matches!(parse_listen(&diagnostics), Ok(Listen::At(a)) if i32::from(a.port()) == port(container, "metrics"))
    );
    assert!(
        args.iter()
            .any(|a| defaulted(a) == "--insecure-diagnostics=false")
    );
    assert!(
        matches!(DiagnosticsSettings::default().health_listen(), Ok(Listen::At(a)) if i32::from(a.port()) == port(container, "healthz"))
    );

    // Probes on the health port.
    let probe_port = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = p
            .as_ref()
            .and_then(|p| p.http_get.clone())
            .expect("an HTTP probe");
        let port = match get.port {
            IntOrString::Int(n) => n,
            IntOrString::String(name) => port(container, &name),
        };
        (get.path.unwrap_or_default(), port)
    };
    assert_eq!(
        probe_port(&container.liveness_probe),
        ("/healthz".to_owned(), 9440)
    );
    assert_eq!(
        probe_port(&container.readiness_probe),
        ("/readyz".to_owned(), 9440)
    );

    // The runner image is its own (set in config/default), named only as the image of the init
    // container the manager reads it from (where clusterctl's image overrides reach it).
    let env = container.env.clone().unwrap_or_default();
    assert!(!env.iter().any(|e| e.name == "CAPTF_MANAGER_IMAGE"));
    assert!(!args.iter().any(|a| a.starts_with("--runner-image")));
    let pod_for_image = k8s_openapi::api::core::v1::Pod {
        spec: Some(pod.clone()),
        ..Default::default()
    };
    let runner = manager::runtime::runner_image::of_pod(&pod_for_image);
    assert_eq!(runner.as_deref(), Some("captf-runner:latest"));
    assert_ne!(runner, container.image);
    let init = pod
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == manager::runtime::runner_image::INIT_CONTAINER)
        .expect("the runner-image init container");
    assert_eq!(
        init.command.as_deref(),
        Some(&["/runner".to_owned(), "version".to_owned()][..])
    );
    let init_security = init.security_context.as_ref().expect("a securityContext");
    assert_eq!(init_security.read_only_root_filesystem, Some(true));
    assert_eq!(init_security.allow_privilege_escalation, Some(false));

    // Non-root, read-only root, no capabilities, RuntimeDefault seccomp.
    let pod_security = pod
        .security_context
        .as_ref()
        .expect("a pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(
        pod_security
            .seccomp_profile
            .as_ref()
            .map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    let security = container
        .security_context
        .as_ref()
        .expect("a container securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert!(security.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(
        security
            .capabilities
            .as_ref()
            .and_then(|c| c.drop.clone())
            .unwrap_or_default(),
        ["ALL"]
    );
    assert!(
        security
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_none_or(Vec::is_empty)
    );
}

#[test]
fn the_metrics_service_reaches_the_metrics_port() {
    let deployment: Deployment = named("manager", "Deployment", "captf-controller-manager");
    let container = manager_container(&deployment);
    let pod_labels = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let service: Service = named("manager", "Service", "captf-controller-manager-metrics");
    assert_eq!(service.metadata.namespace.as_deref(), Some("captf-system"));
    let spec = service.spec.expect("a spec");
    let selector = spec.selector.unwrap_or_default();
    assert!(!selector.is_empty());
    for (k, v) in &selector {
        assert_eq!(pod_labels.get(k), Some(v), "the Service selects the pods");
    }
    let ports = spec.ports.unwrap_or_default();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].port, 8443);
    let target = match ports[0].target_port.clone().expect("a targetPort") {
        IntOrString::Int(n) => n,
        IntOrString::String(name) => port(container, &name),
    };
    assert_eq!(target, port(container, "metrics"));
}

#[test]
fn config_default_sets_the_manager_and_runner_images() {
    let deployment: Deployment = named("manager", "Deployment", "captf-controller-manager");
    let image = manager_container(&deployment)
        .image
        .clone()
        .expect("an image");
    let kustomization = docs_of(&config_dir("default").join("kustomization.yaml"));
    let k = &kustomization[0];
    let names: Vec<&str> = k["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    let placeholder = image.split(':').next().expect("an image name");
    assert!(
        names.contains(&placeholder),
        "the images entry names {placeholder}"
    );
    assert!(
        names.contains(&"captf-runner"),
        "the images entry names captf-runner"
    );
}

/// Issue 30 item 4 (clusterctl conventions): the manager and the webhook tolerate the
/// control-plane taints (a self-hosted management cluster after `clusterctl move` may have only
/// control-plane nodes) and report a crash from their logs when they wrote no termination
/// message.
#[test]
fn both_deployments_tolerate_control_planes_and_fall_back_to_logs() {
    let manager: Deployment = named("manager", "Deployment", "captf-controller-manager");
    let webhook: Deployment = named("webhook", "Deployment", "captf-webhook");
    for deployment in [manager, webhook] {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let pod = deployment
            .spec
            .and_then(|s| s.template.spec)
            .expect("a pod spec");
        let tolerated: BTreeSet<(String, String)> = pod
            .tolerations
            .iter()
            .flatten()
            .map(|t| {
                (
                    t.key.clone().unwrap_or_default(),
                    t.effect.clone().unwrap_or_default(),
                )
            })
            .collect();
        for key in [
            "node-role.kubernetes.io/control-plane",
            "node-role.kubernetes.io/master",
        ] {
            assert!(
                tolerated.contains(&(key.to_owned(), "NoSchedule".to_owned())),
                "{name} does not tolerate {key}:NoSchedule: {tolerated:?}"
            );
        }
        for container in &pod.containers {
            assert_eq!(
                container.termination_message_policy.as_deref(),
                Some("FallbackToLogsOnError"),
                "{name}/{}",
                container.name
            );
        }
    }
}
