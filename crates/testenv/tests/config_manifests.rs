//! Every manifest of `config/` applies server-side to a real API server without a warning
//! (docs/src/installation.md): what `clusterctl init` installs (`kustomize build config`, which is
//! config/default), and the opt-in overlays `config/network-policy` and `config/prometheus`, with
//! the CRDs of cert-manager and the Prometheus Operator installed first, as a user has them.
//! Rendering also shows the images are set in one place and the runner's is its own.

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

use std::collections::BTreeSet;

use serde_json::Value;
use testenv::TestEnv;
use testenv::env::repo_root;
use testenv::manifests::{apply, documents, install_crds, kustomize_build, third_party_crd_files};

fn render(dir: &str) -> Vec<Value> {
    let text = kustomize_build(&repo_root().join("config").join(dir))
        .unwrap_or_else(|e| panic!("rendering config/{dir}: {e:#}"));
    documents(&text).unwrap_or_else(|e| panic!("config/{dir}: {e:#}"))
}

fn kinds(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn every_manifest_applies_server_side_without_warnings() {
    let env = TestEnv::shared().expect("the test environment");
    let client = env.client().await.expect("a client");
    let crds = third_party_crd_files().expect("the third-party CRDs");
    install_crds(&client, &crds)
        .await
        .expect("installing the third-party CRDs");

    let mut applied = 0;
    // CRDs and the Namespace first, as kubectl and clusterctl order them.
    for dir in ["", "network-policy", "prometheus"] {
        let mut objects = render(dir);
        objects.sort_by_key(|o| {
            !matches!(
                o["kind"].as_str(),
                Some("CustomResourceDefinition" | "Namespace")
            )
        });
        for object in &objects {
            let a = apply(&client, object, "captf-manifest-test")
                .await
                .unwrap_or_else(|e| panic!("config/{dir}: {e:#}"));
            assert!(
                a.warnings.is_empty(),
                "config/{dir}: applying {} warned: {:?}",
                a.object,
                a.warnings
            );
            applied += 1;
        }
    }
    assert!(applied > 30, "only {applied} objects applied");
    the_scraper_token_may_get_metrics_and_nothing_else(&client).await;
}

/// config/prometheus's scraper: the real token controller fills its token Secret; the real API
/// server authenticates that token as the scraper ServiceAccount (TokenReview, as CAPTF's secure
/// metrics endpoints do) and authorizes it for `get /metrics` and not for `/debug/pprof/`
/// (SubjectAccessReview).
async fn the_scraper_token_may_get_metrics_and_nothing_else(client: &kube::Client) {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    use k8s_openapi::api::authorization::v1::{
        NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, PostParams};

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "captf-system");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let token = loop {
        let secret = secrets.get("captf-metrics-scraper-token").await.unwrap();
        if let Some(t) = secret.data.as_ref().and_then(|d| d.get("token")) {
            break String::from_utf8(t.0.clone()).unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the token controller never filled captf-metrics-scraper-token"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token,
            ..TokenReviewSpec::default()
        },
        ..TokenReview::default()
    };
    let status = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.authenticated, Some(true), "{status:?}");
    let user = status.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:captf-system:captf-metrics-scraper")
    );
    let sars: Api<SubjectAccessReview> = Api::all(client.clone());
    let may = |path: &str| {
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let sars = sars.clone();
        async move {
            sars.create(&PostParams::default(), &sar)
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.allowed)
        }
    };
    let started = std::time::Instant::now();
    while !may("/metrics").await {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the scraper may never get /metrics"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        !may("/debug/pprof/").await,
        "the scraper may only read metrics"
    );
}

#[test]
fn the_default_config_installs_everything_clusterctl_expects() {
    let objects = render("");
    let expected: BTreeSet<String> = [
        "Certificate",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "Issuer",
        "Namespace",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingWebhookConfiguration",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(kinds(&objects), expected);
    for o in &objects {
        assert_eq!(
            o["metadata"]["labels"]["cluster.x-k8s.io/provider"], "infrastructure-terraform",
            "{} {} carries the provider label clusterctl inventories by",
            o["kind"], o["metadata"]["name"]
        );
        if let Some(ns) = o["metadata"]["namespace"].as_str() {
            assert_eq!(
                ns, "captf-system",
                "{} {} is in {ns}",
                o["kind"], o["metadata"]["name"]
            );
        }
        // Nothing is bound to an identity outside CAPTF's own (the scraper binding is opt-in).
        for subject in o["subjects"].as_array().into_iter().flatten() {
            assert_eq!(
                subject["namespace"], "captf-system",
                "{} {} binds {subject}",
                o["kind"], o["metadata"]["name"]
            );
        }
    }
    let deployments: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(deployments, ["captf-controller-manager", "captf-webhook"]);
}

fn manager(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "captf-controller-manager")
        .expect("the manager Deployment")
}

#[test]
fn the_runner_image_is_its_own_and_named_where_clusterctl_sees_images() {
    let objects = render("");
    let spec = &manager(&objects)["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "captf-manager:latest");
    let init = &spec["initContainers"][0];
    assert_eq!(init["name"], "runner-image");
    assert_eq!(init["image"], "captf-runner:latest");
    assert!(
        !container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["name"] == "CAPTF_MANAGER_IMAGE" || e["name"] == "CAPTF_RUNNER_IMAGE"),
        "the runner image is named once, as an image"
    );
    assert!(
        !container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a.as_str().is_some_and(|a| a.starts_with("--runner-image"))),
        "the manager reads the runner image from its pod"
    );
}

#[test]
fn the_webhook_has_a_disruption_budget_and_both_deployments_are_locked_down() {
    let objects = render("");
    let pdb = objects
        .iter()
        .find(|o| o["kind"] == "PodDisruptionBudget")
        .expect("a PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"]["control-plane"],
        "captf-webhook"
    );
    for d in objects.iter().filter(|o| o["kind"] == "Deployment") {
        let name = &d["metadata"]["name"];
        for c in d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers")
        {
            let sc = &c["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
            assert!(
                c["readinessProbe"]["httpGet"].is_object(),
                "{name} has a readiness probe"
            );
            assert!(
                c["livenessProbe"]["httpGet"].is_object(),
                "{name} has a liveness probe"
            );
            assert!(c["resources"]["requests"]["memory"].is_string(), "{name}");
            assert!(c["resources"]["limits"]["memory"].is_string(), "{name}");
        }
    }
}

/// `make ARGS` in the repository: (success, stdout and stderr).
fn make(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("make")
        .arg("--no-print-directory")
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("running make");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn manifests_release_writes_a_clusterctl_repository_with_the_release_images() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("infrastructure-terraform/v0.1.0");
    let (ok, text) = make(&[
        "manifests-release",
        &format!("RELEASE_DIR={}", dir.display()),
        "RELEASE_IMG=registry.example.com/you/cluster-api-provider-terraform:v0.1.0",
        "VERSION=v0.1.0",
    ]);
    assert!(ok, "{text}");
    let components = std::fs::read_to_string(dir.join("infrastructure-components.yaml")).unwrap();
    let objects = documents(&components).unwrap();
    let container = |name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
            .map(|d| d["spec"]["template"]["spec"]["containers"][0].clone())
            .unwrap()
    };
    let manager = container("captf-controller-manager");
    assert_eq!(
        manager["image"],
        "registry.example.com/you/cluster-api-provider-terraform:v0.1.0"
    );
    let runner = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "captf-controller-manager")
        .map(|d| d["spec"]["template"]["spec"]["initContainers"][0]["image"].clone())
        .unwrap();
    assert_eq!(
        runner,
        "registry.example.com/you/cluster-api-provider-terraform-runner:v0.1.0"
    );
    assert_eq!(
        container("captf-webhook")["image"],
        "registry.example.com/you/cluster-api-provider-terraform-webhook:v0.1.0"
    );
    // clusterctl variables with defaults, for `clusterctl init` to substitute.
    assert!(components.contains("--state-backups=${CAPTF_STATE_BACKUPS:=5}"));
    // The diagnostics address of both Deployments, as Cluster API's providers have it.
    assert_eq!(
        components
            .matches("--diagnostics-address=${CAPTF_DIAGNOSTICS_ADDRESS:=:8443}")
            .count(),
        2
    );
    // One logging-format variable for both Deployments, each keeping its own default.
    let substituted = |vars: &[(&str, &str)]| {
        let values = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        testenv::manifests::substitute_variables(&components, &values).unwrap()
    };
    let defaults = substituted(&[]);
    assert_eq!(defaults.matches("--logging-format=text").count(), 1);
    assert_eq!(defaults.matches("--logging-format=json").count(), 1);
    let json = substituted(&[("CAPTF_LOGGING_FORMAT", "json")]);
    assert_eq!(json.matches("--logging-format=json").count(), 2);
    // The opt-in overlays and the identity templates are assets of their own, usable without a
    // clone.
    let prometheus =
        documents(&std::fs::read_to_string(dir.join("prometheus.yaml")).unwrap()).unwrap();
    assert_eq!(
        kinds(&prometheus),
        [
            "ClusterRoleBinding",
            "PrometheusRule",
            "Secret",
            "ServiceAccount",
            "ServiceMonitor"
        ]
        .into_iter()
        .map(str::to_owned)
        .collect()
    );
    let policies =
        documents(&std::fs::read_to_string(dir.join("network-policy.yaml")).unwrap()).unwrap();
    assert_eq!(
        kinds(&policies),
        BTreeSet::from(["NetworkPolicy".to_owned()])
    );
    for f in [
        "identity.yaml",
        "identity-keyless.yaml",
        "grafana-dashboard.json",
    ] {
        assert!(dir.join(f).is_file(), "{f} is a release asset");
    }
    let metadata = std::fs::read_to_string(dir.join("metadata.yaml")).unwrap();
    let metadata = &documents(&metadata).unwrap()[0];
    assert_eq!(metadata["kind"], "Metadata");
    assert_eq!(metadata["releaseSeries"][0]["contract"], "v1beta2");
}

#[test]
fn manifests_release_refuses_placeholders_and_unknown_series_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("release");
    let release_dir = format!("RELEASE_DIR={}", dir.display());
    for (args, needle) in [
        (vec!["VERSION=v0.1.0"], "set RELEASE_IMG"),
        (
            vec!["RELEASE_IMG=captf-manager:latest", "VERSION=v0.1.0"],
            "placeholder image",
        ),
        (
            vec![
                "RELEASE_IMG=cluster-api-provider-terraform:v0.1.0",
                "VERSION=v0.1.0",
            ],
            "names no registry",
        ),
        (
            vec![
                "RELEASE_IMG=example.invalid/captf/manager:v0.1.0",
                "VERSION=v0.1.0",
            ],
            "placeholder (.invalid) host",
        ),
        (
            vec![
                "RELEASE_IMG=registry.example.com/you/m:v0.9.0",
                "VERSION=v0.9.0",
            ],
            "no release series 0.9",
        ),
        (
            vec!["RELEASE_IMG=registry.example.com/you/m:dev", "VERSION=dev"],
            "not a semantic version",
        ),
    ] {
        let mut all = vec!["manifests-release", release_dir.as_str()];
        all.extend(args.iter().copied());
        let (ok, text) = make(&all);
        assert!(!ok, "{args:?} was accepted:\n{text}");
        assert!(text.contains(needle), "{args:?}: {text}");
        assert!(!dir.exists(), "{args:?} wrote {}", dir.display());
    }
}

#[test]
fn pushing_without_a_registry_or_with_an_unknown_engine_says_what_to_set() {
    let (ok, text) = make(&["docker-push"]);
    assert!(!ok);
    assert!(
        text.contains("set IMG=<registry>/cluster-api-provider-terraform:<tag>"),
        "{text}"
    );
    let (ok, text) = make(&["noop-images-push", "NOOP=cluster"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("set NOOP_REGISTRY=<registry>/<path>"),
        "{text}"
    );
    let out = std::process::Command::new(repo_root().join("hack/image.sh"))
        .arg("engine")
        .env("CONTAINER_ENGINE", "rocket")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected docker, podman or buildah"), "{err}");
}

/// Cluster API's local-repository script reads `clusterctl-settings.json` at the repository root
/// (the provider's name, its components file, the version to build as) and `metadata.yaml` beside
/// it: the name is the provider label every object carries, and the version's series is one
/// `metadata.yaml` lists, as clusterctl requires.
#[test]
fn clusterctl_settings_name_the_provider_and_a_listed_release_series() {
    let root = repo_root();
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("clusterctl-settings.json")).unwrap(),
    )
    .unwrap();
    let provider_label = render("default")
        .iter()
        .find_map(|o| {
            o["metadata"]["labels"]["cluster.x-k8s.io/provider"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap();
    assert_eq!(settings["name"], provider_label.as_str());
    assert_eq!(
        settings["config"]["componentsFile"],
        "infrastructure-components.yaml"
    );
    let next = settings["config"]["nextVersion"].as_str().unwrap();
    let parts: Vec<u64> = next
        .strip_prefix('v')
        .unwrap()
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(parts.len(), 3, "{next}");
    let metadata = std::fs::read_to_string(root.join("metadata.yaml")).unwrap();
    let metadata = &documents(&metadata).unwrap()[0];
    assert_eq!(metadata["kind"], "Metadata");
    let series = metadata["releaseSeries"].as_array().unwrap();
    assert!(
        series
            .iter()
            .any(|s| s["major"] == parts[0] && s["minor"] == parts[1]),
        "{next} is in no release series of metadata.yaml: {series:?}"
    );
}

/// The release workflow and the tfcapi-lint action pin every action they use by commit (a moved
/// tag cannot change what a release runs), and the workflow is read-only unless a job asks for
/// more; no job runs on a retired runner image.
#[test]
fn the_release_workflow_pins_its_actions_and_asks_for_least_permissions() {
    let root = repo_root();
    for file in [
        ".github/workflows/release.yaml",
        ".github/actions/tfcapi-lint/action.yml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let uses: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("uses: "))
            .collect();
        assert!(!uses.is_empty(), "{file} uses no action");
        for u in uses {
            let reference = u.split_whitespace().next().unwrap();
            let (_, rev) = reference.rsplit_once('@').unwrap();
            assert!(
                rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit()),
                "{file}: {reference} is not pinned by commit"
            );
        }
    }
    let workflow = std::fs::read_to_string(root.join(".github/workflows/release.yaml")).unwrap();
    let doc: Value = serde_saphyr::from_str(&workflow).unwrap();
    assert_eq!(doc["permissions"], serde_json::json!({}));
    for (name, job) in doc["jobs"].as_object().unwrap() {
        assert!(
            job["permissions"].is_object(),
            "job {name} sets its own permissions"
        );
    }
    let runners: Vec<&Value> = doc["jobs"]["tfcapi-lint"]["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["os"])
        .collect();
    assert!(
        !runners.iter().any(|os| *os == "macos-13"),
        "macos-13 is retired: {runners:?}"
    );
    assert!(
        doc["jobs"]["release"]["needs"]
            .as_array()
            .is_some_and(|n| n.iter().any(|j| j == "upgrade"))
            && doc["jobs"]["upgrade"]["steps"]
                .as_array()
                .is_some_and(|s| s.iter().any(|st| st["run"]
                    .as_str()
                    .is_some_and(|r| r.contains("make e2e-upgrade")))),
        "a release waits for the upgrade test (make e2e-upgrade)"
    );
    assert_eq!(
        doc["jobs"]["release"]["permissions"]["contents"], "write",
        "only the release job writes the release"
    );
    // The release is cut by the make target the project's own machines run, for both platforms,
    // signed keyless: only that job may ask for an OIDC token.
    let cut = doc["jobs"]["snapshot"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|s| {
            s["run"]
                .as_str()
                .filter(|r| r.contains("make release-snapshot"))
        })
        .expect("a step runs make release-snapshot");
    for setting in [
        "SNAPSHOT_PLATFORMS=linux/amd64,linux/arm64",
        "COSIGN_KEYLESS=true",
        "SNAPSHOT_ASSETS=",
    ] {
        assert!(
            cut.contains(setting),
            "make release-snapshot without {setting}: {cut}"
        );
    }
    for (name, job) in doc["jobs"].as_object().unwrap() {
        assert_eq!(
            job["permissions"].get("id-token").is_some(),
            name == "snapshot",
            "job {name}: id-token"
        );
    }
    assert_eq!(doc["jobs"]["snapshot"]["permissions"]["id-token"], "write");
}
