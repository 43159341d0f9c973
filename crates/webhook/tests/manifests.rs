//! `config/webhook/` agrees with the code: one webhook per kind on the path the server serves,
//! DELETE exactly where it is validated, the Deployment's arguments parse with the binary's own
//! flags, the names of the Service, Certificate, Secret and ServiceAccount line up, and the
//! ClusterRole grants exactly the reads the checks make.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Parser as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde_json::Value;
use webhook::cli::{Cli, Listen};
use webhook::kinds::Kind;

fn docs(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/webhook")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn one<T: serde::de::DeserializeOwned>(file: &str, kind: &str) -> T {
    let doc = docs(file)
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {file}"));
    serde_json::from_value(doc).unwrap_or_else(|e| panic!("{kind} in {file}: {e}"))
}

#[test]
fn one_webhook_per_kind_on_the_served_path_with_delete_where_validated() {
    let config: ValidatingWebhookConfiguration =
        one("manifests.yaml", "ValidatingWebhookConfiguration");
    assert_eq!(
        config.metadata.name.as_deref(),
        Some("captf-validating-webhook-configuration")
    );
    assert_eq!(
        config
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("cert-manager.io/inject-ca-from"))
            .map(String::as_str),
        Some("captf-system/captf-serving-cert")
    );
    let hooks = config.webhooks.unwrap_or_default();
    assert_eq!(hooks.len(), Kind::ALL.len());
    for kind in Kind::ALL {
        let hook = hooks
            .iter()
            .find(|h| {
                h.client_config
                    .service
                    .as_ref()
                    .and_then(|s| s.path.clone())
                    == Some(kind.path())
            })
            .unwrap_or_else(|| panic!("no webhook for {}", kind.path()));
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(hook.side_effects, "None");
        assert_eq!(hook.admission_review_versions, ["v1"]);
        let service = hook.client_config.service.as_ref().expect("a service");
        assert_eq!(
            (service.name.as_str(), service.namespace.as_str()),
            ("captf-webhook-service", "captf-system")
        );
        let rules = hook.rules.clone().unwrap_or_default();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resources.clone().unwrap_or_default(),
            [kind.plural()]
        );
        let ops: BTreeSet<String> = rules[0]
            .operations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut want: BTreeSet<String> = ["CREATE", "UPDATE"].map(String::from).into();
        if kind.validates_delete() {
            want.insert("DELETE".into());
        }
        assert_eq!(ops, want, "{kind:?}");
    }
}

#[test]
fn the_deployment_arguments_parse_and_the_names_line_up() {
    let deployment: Deployment = one("deployment.yaml", "Deployment");
    let labels = deployment.spec_template_labels();
    let pod = deployment
        .spec
        .expect("a spec")
        .template
        .spec
        .expect("a pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("captf-webhook"));
    let container = &pod.containers[0];
    let mut argv = vec!["webhook".to_owned()];
    // As clusterctl substitutes the variables' defaults.
    argv.extend(container.args.iter().flatten().map(|a| {
        testenv::manifests::substitute_variables(a, &std::collections::BTreeMap::new())
            .expect("every variable has a default")
    }));
    assert!(
        container
            .args
            .iter()
            .flatten()
            .any(|a| a == "--diagnostics-address=${CAPTF_DIAGNOSTICS_ADDRESS:=:8443}"),
        "the diagnostics address is a clusterctl variable"
    );
    let args = Cli::try_parse_from(argv)
        .expect("the Deployment's args parse")
        .serve;
    let port = |name: &str| {
        container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .map_or_else(|| panic!("no port {name}"), |p| p.container_port)
    };
    assert_eq!(i32::from(args.webhook_port), port("webhook-server"));
    assert!(
        matches!(args.diagnostics_address, Listen::At(a) if i32::from(a.port()) == port("metrics"))
    );
    assert!(matches!(args.health_addr, Listen::At(a) if i32::from(a.port()) == port("healthz")));
    assert!(!args.insecure_diagnostics);
    // The cert Secret is mounted where the flags read it.
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "cert")
        .expect("a cert mount");
    assert_eq!(
        args.webhook_cert_dir
            .to_string_lossy()
            .trim_end_matches('/'),
        mount.mount_path.trim_end_matches('/')
    );
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "cert")
        .expect("a cert volume");
    let secret = volume.secret.as_ref().and_then(|s| s.secret_name.clone());
    let certificate = docs("certificate.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Certificate")
        .expect("a Certificate");
    assert_eq!(
        secret.as_deref(),
        certificate["spec"]["secretName"].as_str()
    );
    assert_eq!(certificate["metadata"]["name"], "captf-serving-cert");
    let dns: Vec<&str> = certificate["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(dns.contains(&"captf-webhook-service.captf-system.svc"));
    // The Service selects the pods and targets the webhook port.
    let service: Service = one("service.yaml", "Service");
    let spec = service.spec.expect("a spec");
    assert_eq!(
        service.metadata.name.as_deref(),
        Some("captf-webhook-service")
    );
    for (k, v) in spec.selector.clone().unwrap_or_default() {
        assert_eq!(labels.get(&k), Some(&v));
    }
}

trait TemplateLabels {
    fn spec_template_labels(&self) -> std::collections::BTreeMap<String, String>;
}

impl TemplateLabels for Deployment {
    fn spec_template_labels(&self) -> std::collections::BTreeMap<String, String> {
        self.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }
}

#[test]
fn the_cluster_role_grants_only_the_reads_the_checks_make() {
    let role: ClusterRole = one("role.yaml", "ClusterRole");
    let mut granted: BTreeSet<(String, String, String)> = BTreeSet::new();
    for rule in role.rules.unwrap_or_default() {
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    let want: BTreeSet<(String, String, String)> = [
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("cluster.x-k8s.io", "machines", "get"),
        ("cluster.x-k8s.io", "clusters", "get"),
        ("cluster.x-k8s.io", "clusters", "list"),
        (
            "infrastructure.cluster.x-k8s.io",
            "terraformclusters",
            "list",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "terraformmachines",
            "list",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "terraformmachinepools",
            "list",
        ),
    ]
    .into_iter()
    .map(|(g, r, v)| (g.to_owned(), r.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(granted, want);
    let binding: ClusterRoleBinding = one("role_binding.yaml", "ClusterRoleBinding");
    assert_eq!(
        binding.role_ref.name,
        role.metadata.name.unwrap_or_default()
    );
    let subject = &binding.subjects.unwrap_or_default()[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        ("captf-webhook", Some("captf-system"))
    );
}
