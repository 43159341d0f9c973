//! The install test (issue 16; the book's Installation page): CAPTF installed as a user installs
//! it, into an empty management cluster (the test environment's control plane, whose process
//! kubelet runs every pod on a pod network of its own).
//!
//! 1. The page's "1. Build and push the images", "2. Render the provider repository" and "The
//!    no-op module images" run as written (bash; the page's example registry replaced by the test
//!    registry, `IMAGE_PROFILE=dev`, the no-op images on bases built from the test binaries).
//! 2. Cluster API's and cert-manager's local repositories and images are laid out as the page
//!    says a machine without internet access needs them (see [`e2e::install`]).
//! 3. The page's "3. Install with clusterctl" runs as written: `clusterctl init` installs
//!    cert-manager, Cluster API's core, kubeadm bootstrap and control-plane providers and CAPTF,
//!    every manager running as pods of its own Deployments.
//! 4. CAPTF's manager and webhook Deployments are available on the pod network, cert-manager's
//!    cainjector put the CA into the webhook configuration, and the API server calls the webhook
//!    through its Service.
//! 5. The Quick Start flow passes against that install: identity, generated cluster (one
//!    control-plane machine), Cluster and Machine Provisioned, Jobs whose init container runs the
//!    runner image, then the delete.
//! 6. The page's "Uninstall" runs as written: `clusterctl delete --infrastructure terraform`
//!    removes the provider.
//!
//! Needs root, `ip`, Go, the test binaries (`make testbin`), the static runner
//! (`make runner-static-dev`) and a container engine or Debian's buildah (the make targets
//! install buildah).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use e2e::install::{mirror_images, run_page, write_local_repositories};
use e2e::kube_ops::{INFRA, Kube, name_of};
use e2e::quickstart::{self, Progress};
use e2e::suite::{Images, JobLog};
use serde_json::{Value, json};
use testenv::TestEnv;

const VERSION: &str = "v0.1.0";
const WAIT: Duration = Duration::from_secs(300);

/// The bash environment of the page's commands: the test registry's images, a scratch image
/// store, the environment's kubeconfig and the test binaries' clusterctl first on `PATH`.
fn page_env(
    env: &TestEnv,
    storage: &str,
    bases: &testenv::image::RuntimeBaseImages,
) -> Vec<(String, String)> {
    let clusterctl = testenv::testbin::path("clusterctl").unwrap();
    let path = format!(
        "{}:{}",
        clusterctl.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    vec![
        ("IMAGE_PROFILE".into(), "dev".into()),
        ("IMAGE_STORAGE_ROOT".into(), storage.into()),
        ("TERRAFORM_IMAGE".into(), bases.terraform.clone()),
        ("TOFU_IMAGE".into(), bases.tofu.clone()),
        (
            "KUBECONFIG".into(),
            env.endpoints().kubeconfig.display().to_string(),
        ),
        ("CLUSTERCTL_DISABLE_VERSIONCHECK".into(), "true".into()),
        ("PATH".into(), path),
    ]
}

/// Waits until `ns/name` has all its replicas available and ready.
async fn wait_available(kube: &Kube, ns: &str, name: &str) -> anyhow::Result<Value> {
    kube.wait_for(
        ("apps/v1", "Deployment"),
        ns,
        name,
        WAIT,
        "available",
        |d| {
            let want = &d["spec"]["replicas"];
            d["status"]["availableReplicas"] == *want && d["status"]["readyReplicas"] == *want
        },
    )
    .await
}

/// CAPTF's two Deployments are available with their pods on the pod network, and cert-manager's
/// cainjector wrote the CA into the webhook configuration.
async fn check_captf_pods(env: &TestEnv, kube: &Kube) -> anyhow::Result<()> {
    wait_available(kube, "captf-system", "captf-webhook").await?;
    wait_available(kube, "captf-system", "captf-controller-manager").await?;
    let gateway = env.pod_gateway()?.to_string();
    let subnet = format!("{}.", gateway.strip_suffix(".1").context("gateway")?);
    let pods = kube.list("v1", "Pod", "captf-system", "").await?;
    ensure!(
        pods.len() == 3,
        "one manager and two webhook pods: {pods:#?}"
    );
    for p in &pods {
        let ip = p["status"]["podIP"].as_str().unwrap_or_default();
        ensure!(ip.starts_with(&subnet), "{} has {ip}", name_of(p));
    }
    for ns in [
        "capi-system",
        "capi-kubeadm-bootstrap-system",
        "capi-kubeadm-control-plane-system",
        "cert-manager",
    ] {
        let pods = kube.list("v1", "Pod", ns, "").await?;
        ensure!(!pods.is_empty(), "no pod runs in {ns}");
    }
    let vwc = kube
        .get(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "",
            "captf-validating-webhook-configuration",
        )
        .await?
        .context("the webhook configuration")?;
    ensure!(
        vwc["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .is_some_and(|b| !b.is_empty()),
        "cert-manager's cainjector set no CA bundle: {vwc:#}"
    );
    Ok(())
}

/// The API server calls CAPTF's webhook through its Service: a privileged module container is
/// refused by the webhook's own rule.
async fn check_webhook_called(kube: &Kube, ns: &str) -> anyhow::Result<()> {
    let api = kube.api(INFRA, "TerraformCluster", ns).await?;
    let privileged: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": INFRA, "kind": "TerraformCluster",
        "metadata": {"name": "privileged"},
        "spec": {"source": {"image": "registry.example/m:v1"}, "identityRef": {"name": "any"},
                 "jobs": {"securityContext": {"privileged": true}}}}))?;
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..kube::api::PostParams::default()
    };
    let err = api
        .create(&dry_run, &privileged)
        .await
        .err()
        .context("a privileged module container was accepted")?
        .to_string();
    ensure!(
        err.contains("admission webhook") && err.contains("privileged: true is not allowed"),
        "the webhook answered: {err}"
    );
    Ok(())
}

/// The objects whose CA cert-manager's cainjector writes (`cert-manager.io/inject-ca-from`), and
/// which of them still lack it: webhook configurations without a `caBundle` on every webhook,
/// and custom resource definitions whose conversion webhook has none.
async fn ca_not_injected(kube: &Kube) -> anyhow::Result<Vec<String>> {
    const INJECT: &str = "cert-manager.io/inject-ca-from";
    let has_bundle = |c: &Value| c["caBundle"].as_str().is_some_and(|b| !b.is_empty());
    let mut missing = Vec::new();
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let configs = kube
            .list("admissionregistration.k8s.io/v1", kind, "", "")
            .await?;
        for c in configs
            .iter()
            .filter(|c| !c["metadata"]["annotations"][INJECT].is_null())
        {
            let hooks = c["webhooks"].as_array().cloned().unwrap_or_default();
            if !hooks.iter().all(|h| has_bundle(&h["clientConfig"])) {
                missing.push(format!("{kind} {}", name_of(c)));
            }
        }
    }
    let crds = kube
        .list(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "",
        )
        .await?;
    for crd in crds
        .iter()
        .filter(|c| !c["metadata"]["annotations"][INJECT].is_null())
    {
        let conversion = &crd["spec"]["conversion"];
        if conversion["strategy"] == "Webhook"
            && !has_bundle(&conversion["webhook"]["clientConfig"])
        {
            missing.push(format!("CustomResourceDefinition {}", name_of(crd)));
        }
    }
    Ok(missing)
}

/// Waits until cert-manager's cainjector has written the CA into every webhook configuration
/// and conversion webhook that asks for it (Cluster API's as well as CAPTF's), and Cluster
/// API's own webhook admits a Cluster (a server-side dry run). `clusterctl init
/// --wait-providers` returns once the Deployments are available, which can be before the
/// injection: until then the API server refuses Clusters with "certificate signed by unknown
/// authority".
async fn wait_webhooks_trusted(kube: &Kube, ns: &str) -> anyhow::Result<()> {
    let probe = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "webhook-probe", "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "TerraformCluster", "name": "webhook-probe"}}});
    let deadline = Instant::now() + WAIT;
    loop {
        let missing = ca_not_injected(kube).await?;
        let admitted = if missing.is_empty() {
            kube.apply_with(&probe, ns, true)
                .await
                .map_err(|e| format!("{e:#}"))
        } else {
            Err(format!("no CA yet in {missing:?}"))
        };
        match admitted {
            Ok(()) => return Ok(()),
            Err(e) if e.contains("failed calling webhook") || !missing.is_empty() => {
                ensure!(
                    Instant::now() < deadline,
                    "webhooks not trusted after {WAIT:?}: {e}"
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => anyhow::bail!("Cluster API's webhook refused the probe Cluster: {e}"),
        }
    }
}

/// Every Job of the Quick Start ran the runner image of the install in its init container: the
/// image of the manager pod's `runner-image` init container, which the manager read from its pod.
async fn check_runner_image(kube: &Kube, ns: &str, registry: &str) -> anyhow::Result<()> {
    let want = format!("{registry}/you/cluster-api-provider-terraform-runner:{VERSION}");
    let jobs = kube.list("batch/v1", "Job", ns, "").await?;
    ensure!(!jobs.is_empty(), "no Job is left in {ns} to look at");
    for job in jobs {
        let init = &job["spec"]["template"]["spec"]["initContainers"][0]["image"];
        ensure!(*init == want, "Job {} runs {init} first", name_of(&job));
    }
    Ok(())
}

/// After `clusterctl delete --infrastructure terraform`: CAPTF's Deployments and its entry in
/// clusterctl's inventory are gone; Cluster API's providers stay.
async fn check_uninstalled(kube: &Kube) -> anyhow::Result<()> {
    for name in ["captf-controller-manager", "captf-webhook"] {
        kube.wait_gone(("apps/v1", "Deployment"), "captf-system", name, WAIT)
            .await?;
    }
    let providers = kube
        .list("clusterctl.cluster.x-k8s.io/v1alpha3", "Provider", "", "")
        .await?;
    let names: Vec<String> = providers.iter().map(name_of).collect();
    ensure!(
        !names.iter().any(|n| n == "infrastructure-terraform"),
        "still in the inventory: {names:?}"
    );
    ensure!(names.iter().any(|n| n == "cluster-api"), "{names:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_init_installs_captf_with_cluster_api_and_cert_manager_as_pods()
-> anyhow::Result<()> {
    let started = Instant::now();
    let env = TestEnv::start_empty("captf-install")?;
    let registry = env.registry()?.host();
    env.kubelet()?;
    let kube = Kube::new(env.client().await?);
    let tmp = tempfile::tempdir()?;
    let storage = tmp.path().join("images").display().to_string();
    let bases = testenv::image::push_runtime_base_images(&registry).await?;
    let vars = page_env(&env, &storage, &bases);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();

    // 1-2: the page's images and repository, and what an offline machine needs beside them.
    let root = testenv::env::repo_root();
    run_page(
        &[
            "1. Build and push the images",
            "2. Render the provider repository",
            "The no-op module images",
        ],
        &registry,
        tmp.path(),
        &root,
        &vars,
    )?;
    write_local_repositories(&tmp.path().join("local-repository"))?;
    mirror_images(&registry).await?;

    // 3: clusterctl init, as the page runs it.
    let init = Instant::now();
    let listed = run_page(
        &["3. Install with clusterctl"],
        &registry,
        tmp.path(),
        tmp.path(),
        &vars,
    )?;
    let init = init.elapsed();
    // `clusterctl init list-images` sees CAPTF's three images, the runner's included.
    for image in ["", "-webhook", "-runner"] {
        let want = format!("{registry}/you/cluster-api-provider-terraform{image}:{VERSION}");
        ensure!(
            listed.lines().any(|l| l.trim() == want),
            "clusterctl init list-images does not list {want}:\n{listed}"
        );
    }
    // The CA first: cert-manager's cainjector writes it after `clusterctl init` returns.
    let ns = env.namespace("installed").await?;
    wait_webhooks_trusted(&kube, &ns).await?;
    check_captf_pods(&env, &kube).await?;

    // 5: the Quick Start against that install.
    check_webhook_called(&kube, &ns).await?;
    let images = Images {
        runner: format!("{registry}/you/cluster-api-provider-terraform-runner:{VERSION}"),
        cluster: format!("{registry}/you/noop-cluster:{VERSION}-terraform"),
        machine: format!("{registry}/you/noop-machine:{VERSION}-terraform"),
        machinepool: format!("{registry}/you/noop-machine:{VERSION}-terraform"),
    };
    let clusterctl = quickstart::flavor_clusterctl_in(&tmp.path().join("flavors"), &images, &ns)?;
    let jobs = JobLog::watch(&kube, &ns);
    let progress = Progress::new(true);
    let f =
        quickstart::run_with(&clusterctl, &kube, &ns, &ns, "my-cluster", &progress, true).await?;
    check_runner_image(&kube, &ns, &registry).await?;
    let mut owners: Vec<String> = kube
        .list(INFRA, "TerraformMachine", &ns, "")
        .await?
        .iter()
        .map(name_of)
        .collect();
    owners.push("my-cluster".to_owned());
    let delete = quickstart::delete_cluster(&kube, &ns, "my-cluster").await?;
    quickstart::check_deleted(&kube, &ns, &jobs, &owners).await?;

    // 6: clusterctl delete, as the page runs it.
    run_page(&["Uninstall"], &registry, tmp.path(), tmp.path(), &vars)?;
    check_uninstalled(&kube).await?;
    println!(
        "e2e figures: install: clusterctl init {:.1}s, apply to Cluster Provisioned {:.1}s, to Machine Provisioned {:.1}s, delete {:.1}s, whole test {:.1}s",
        init.as_secs_f64(),
        f.apply_to_cluster_provisioned.as_secs_f64(),
        f.apply_to_machine_provisioned.as_secs_f64(),
        delete.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
