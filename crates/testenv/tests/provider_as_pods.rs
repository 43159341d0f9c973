//! CAPTF as a user deploys it, on the test environment's pod network: the commands of
//! docs/src/installation.md's sections "1. Build and push the images", "2. Render the provider
//! repository" and "The no-op module images" run as written (bash, with the page's example
//! registry replaced by the test registry: buildah when no docker or podman; the no-op images on
//! the bases built from the test binaries), then the rendered components are applied with
//! clusterctl's variable defaults. The manager and the webhook then run as pods of their own Deployments and
//! become Ready by their probes; the API server calls the webhook through its Service; and the
//! Quick Start's cluster flow (identity, Cluster, TerraformCluster → Ready and Provisioned, then
//! delete) runs against that install, every Job's init container running the runner image.
//!
//! cert-manager's part is played by the test (a serving certificate Secret and the CA bundle in
//! the webhook configuration): the install test with cert-manager, Cluster API's managers and
//! `clusterctl init` needs the Cluster API test binaries.
//!
//! Needs root, `ip`, Go, the test binaries (`make testbin`) and a container engine or Debian's
//! buildah (installed by the make targets).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use testenv::TestEnv;
use testenv::env::repo_root;
use testenv::manifests::{
    apply, documents, install_crds, substitute_variables, third_party_crd_files,
};

const VERSION: &str = "v0.1.0";
const WAIT: Duration = Duration::from_secs(300);

/// The shell commands of the given sections of docs/src/installation.md (their ```sh blocks),
/// in page order.
fn page_commands(sections: &[&str]) -> String {
    let page = std::fs::read_to_string(repo_root().join("docs/src/installation.md")).unwrap();
    let mut out = String::new();
    let (mut section, mut in_block) = (String::new(), false);
    for line in page.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            h.clone_into(&mut section);
        } else if line == "```sh" {
            in_block = sections.contains(&section.as_str());
        } else if line == "```" {
            in_block = false;
        } else if in_block {
            out.push_str(line);
            out.push('\n');
        }
    }
    for s in sections {
        assert!(
            page.contains(&format!("## {s}\n")),
            "installation.md has no section {s:?}"
        );
    }
    out
}

/// Runs the commands of the installation page's sections as a user would (bash, from the
/// repository root), with the page's example registry and home replaced by the test registry and
/// a scratch directory, and `env` added to the environment. Fails with their output.
fn run_page(sections: &[&str], registry: &str, home: &Path, env: &[(&str, &str)]) {
    let script = page_commands(sections)
        .replace("registry.example.com/you", &format!("{registry}/you"))
        .replace("${HOME}", &home.display().to_string());
    let started = Instant::now();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(repo_root())
        .envs(env.iter().copied())
        .output()
        .expect("running bash");
    eprintln!("{sections:?} took {:?}", started.elapsed());
    assert!(
        out.status.success(),
        "{script}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn dynamic(
    client: &Client,
    ns: Option<&str>,
    api_version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn create(client: &Client, ns: Option<&str>, v: Value) -> DynamicObject {
    let api = dynamic(
        client,
        ns,
        v["apiVersion"].as_str().unwrap(),
        v["kind"].as_str().unwrap(),
    )
    .await;
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap()
}

/// The webhook's serving certificate as cert-manager would issue it: a CA, and a certificate for
/// the Service's DNS names in the Secret the Deployment mounts. Returns the CA (PEM).
async fn serving_certificate(client: &Client) -> String {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![
        "captf-webhook-service.captf-system.svc".to_owned(),
        "captf-webhook-service.captf-system.svc.cluster.local".to_owned(),
    ])
    .unwrap()
    .signed_by(&key, &issuer)
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "captf-system");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "captf-webhook-service-cert"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert.pem(), "tls.key": key.serialize_pem(), "ca.crt": ca_cert.pem()}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    ca_cert.pem()
}

/// Applies the rendered components (CRDs and the Namespace first) with clusterctl's defaults.
async fn install(client: &Client, components: &Path) {
    let text = std::fs::read_to_string(components).unwrap();
    let text = substitute_variables(&text, &BTreeMap::new()).unwrap();
    let mut objects = documents(&text).unwrap();
    objects.sort_by_key(|o| {
        !matches!(
            o["kind"].as_str(),
            Some("CustomResourceDefinition" | "Namespace")
        )
    });
    for o in &objects {
        let a = apply(client, o, "captf-install-test").await.unwrap();
        assert!(a.warnings.is_empty(), "{}: {:?}", a.object, a.warnings);
    }
}

async fn wait_available(client: &Client, name: &str) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(client.clone(), "captf-system");
    eventually(&format!("Deployment {name} to be available"), || {
        let api = api.clone();
        async move {
            let d = api.get(name).await.ok()?;
            let want = d.spec.as_ref()?.replicas?;
            let s = d.status.as_ref()?;
            (s.available_replicas == Some(want) && s.ready_replicas == Some(want)).then_some(d)
        }
    })
    .await
}

fn ready(o: &DynamicObject) -> Option<String> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_provider_runs_as_pods_and_provisions_a_cluster() {
    let env = TestEnv::shared().expect("the test environment");
    let registry = env.registry().expect("the registry").host();
    env.kubelet().expect("the kubelet");
    let client = env.client().await.unwrap();
    let bases = testenv::image::push_runtime_base_images(&registry)
        .await
        .expect("the runtime base images");
    let tmp = tempfile::tempdir().unwrap();
    let release = tmp
        .path()
        .join("local-repository/infrastructure-terraform")
        .join(VERSION);
    let noop_registry = format!("{registry}/you");
    // The images live in a scratch store, removed with the test's directory.
    let storage = tmp.path().join("images").display().to_string();

    // The installation page's own commands: the images (debug binaries, to keep the build
    // short), the provider repository, the no-op module images on the bases built from the test
    // binaries.
    run_page(
        &[
            "1. Build and push the images",
            "2. Render the provider repository",
            "The no-op module images",
        ],
        &registry,
        tmp.path(),
        &[
            ("IMAGE_PROFILE", "dev"),
            ("IMAGE_STORAGE_ROOT", &storage),
            ("TERRAFORM_IMAGE", bases.terraform.as_str()),
            ("TOFU_IMAGE", bases.tofu.as_str()),
        ],
    );
    assert!(release.join("metadata.yaml").is_file());

    install_crds(&client, &third_party_crd_files().unwrap())
        .await
        .unwrap();
    install(&client, &release.join("infrastructure-components.yaml")).await;
    let ca = serving_certificate(&client).await;
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut vwc = vwcs
        .get("captf-validating-webhook-configuration")
        .await
        .unwrap();
    for w in &mut vwc.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(k8s_openapi::ByteString(ca.clone().into_bytes()));
    }
    vwcs.replace(
        "captf-validating-webhook-configuration",
        &PostParams::default(),
        &vwc,
    )
    .await
    .unwrap();

    // Both Deployments become available, their pods on the pod network.
    wait_available(&client, "captf-webhook").await;
    wait_available(&client, "captf-controller-manager").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "captf-system");
    let gateway = env.pod_gateway().unwrap().to_string();
    let subnet = format!("{}.", gateway.strip_suffix(".1").unwrap());
    let list = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 3, "one manager and two webhook pods");
    for p in &list.items {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
        assert!(ip.starts_with(&subnet), "{:?} has {ip}", p.metadata.name);
    }

    // The API server calls the webhook through its Service: a privileged module container is
    // refused by the webhook's own rule.
    let ns = env.namespace("installed").await.unwrap();
    let tcs = dynamic(
        &client,
        Some(&ns),
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "TerraformCluster",
    )
    .await;
    let privileged: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
        "metadata": {"name": "privileged"},
        "spec": {"source": {"image": "registry.example/m:v1"}, "identityRef": {"name": "any"},
                 "jobs": {"securityContext": {"privileged": true}}}}))
    .unwrap();
    let err = tcs
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &privileged,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("admission webhook") && err.contains("privileged: true is not allowed"),
        "the webhook answered: {err}"
    );

    // The Quick Start's cluster flow against the deployed manager.
    let creds_ns = format!("{ns}-creds");
    create(
        &client,
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": creds_ns}}),
    )
    .await;
    create(
        &client,
        Some(&creds_ns),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "noop"},
               "stringData": {"CLOUD_TOKEN": "not-a-real-token"}}),
    )
    .await;
    create(
        &client,
        None,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformClusterIdentity",
               "metadata": {"name": format!("{ns}-id")},
               "spec": {"secretRef": {"name": "noop", "namespace": creds_ns},
                        "allowedNamespaces": {"list": [ns]}}}),
    )
    .await;
    let cluster = create(
        &client,
        Some(&ns),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": "my-cluster"},
               "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": "TerraformCluster", "name": "my-cluster"}}}),
    )
    .await;
    create(
        &client,
        Some(&ns),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
               "metadata": {"name": "my-cluster",
                            "labels": {"cluster.x-k8s.io/cluster-name": "my-cluster"},
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                                 "name": "my-cluster", "uid": cluster.metadata.uid}]},
               "spec": {"source": {"image": format!("{noop_registry}/noop-cluster:{VERSION}-terraform")},
                        "identityRef": {"name": format!("{ns}-id")}}}),
    )
    .await;
    let tc = eventually("TerraformCluster my-cluster to be Ready", || {
        let tcs = tcs.clone();
        async move {
            let tc = tcs.get("my-cluster").await.ok()?;
            (ready(&tc).as_deref() == Some("True")).then_some(tc)
        }
    })
    .await;
    assert_eq!(
        tc.data["status"]["initialization"]["provisioned"], true,
        "{:#}",
        tc.data["status"]
    );
    assert!(tc.data["spec"]["controlPlaneEndpoint"]["host"].is_string());
    // Its Jobs ran the runner image in their init container.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let job = jobs.list(&ListParams::default()).await.unwrap().items;
    let init_image = job[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .as_ref()
        .unwrap()[0]
        .image
        .clone()
        .unwrap();
    assert_eq!(
        init_image,
        format!("{registry}/you/cluster-api-provider-terraform-runner:{VERSION}")
    );

    // Delete: the destroy Job runs, then the object is gone.
    let clusters = dynamic(&client, Some(&ns), "cluster.x-k8s.io/v1beta2", "Cluster").await;
    clusters
        .delete("my-cluster", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    tcs.delete("my-cluster", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually("TerraformCluster my-cluster to be gone", || {
        let tcs = tcs.clone();
        async move {
            tcs.get_opt("my-cluster")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
}
