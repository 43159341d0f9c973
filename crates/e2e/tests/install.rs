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

use std::time::Instant;

use anyhow::ensure;
use e2e::install::{InstallEnv, mirror_images, run_page, write_local_repositories};
use e2e::installed::{
    check_captf_pods, check_runner_image, check_uninstalled, check_webhook_called,
    delete_quickstart_cluster, wait_webhooks_trusted,
};
use e2e::quickstart::{self, Progress};
use e2e::suite::{Images, JobLog};

const VERSION: &str = "v0.1.0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_init_installs_captf_with_cluster_api_and_cert_manager_as_pods()
-> anyhow::Result<()> {
    let started = Instant::now();
    let InstallEnv {
        env,
        registry,
        kube,
        tmp,
        vars,
    } = InstallEnv::start("captf-install").await?;

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
    check_runner_image(
        &kube,
        &ns,
        &format!("{registry}/you/cluster-api-provider-terraform-runner:{VERSION}"),
    )
    .await?;
    let delete = delete_quickstart_cluster(&kube, &ns, "my-cluster", &jobs).await?;

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
