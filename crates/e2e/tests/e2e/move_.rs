//! Test 4: `clusterctl move` between two test environments after the Quick Start's cluster is
//! provisioned (book: the `clusterctl move` runbook).
//!
//! - clusterctl's preconditions need a Node per Machine and an initialized control plane: a
//!   stand-in workload cluster provides both (see `e2e::workload`). The Cluster then carries
//!   `status.initialization.controlPlaneInitialized` from KubeadmControlPlane, and the cluster
//!   module re-applies (fix 1, the shape with a control-plane provider).
//! - A move attempted while a Job runs waits on the block-move annotation: nothing reaches the
//!   target until the Job is done.
//! - The state Secrets, the durable inputs and every CAPTF object arrive; the identity arrives
//!   without its Secret (another namespace), recovers as soon as the Secret is copied (fix 2);
//!   the target's manager starts no Job at all and rebuilds `provisioned` from state.
//! - The source is left empty, CAPTF's leases and runner RBAC included (fix 3).

use std::path::Path;
use std::time::Duration;

use e2e::clusterctl::template;
use e2e::kube_ops::{CAPI, INFRA, Kube, condition, eventually, is_true, name_of};
use e2e::product::Captf;
use e2e::quickstart::{self, WAIT};
use e2e::suite::JobLog;
use e2e::workload::Workload;
use serde_json::json;
use testenv::TestEnv;
use testenv::image::{ImageBuilder, Layer, tofu_base_layer};

const CLUSTER: &str = "moving";
const BLOCK_MOVE: &str = "clusterctl.cluster.x-k8s.io/block-move";

/// The no-op cluster module plus a resource that sleeps `seconds` on every apply (with `/bin/sh`
/// and `/bin/sleep` for its `local-exec`): a Job that is still running when the move starts.
async fn slow_cluster_image(env: &TestEnv, seconds: u32) -> anyhow::Result<String> {
    let host = env.registry()?.host();
    let dir = tempfile::tempdir()?;
    let noop = testenv::env::repo_root().join("modules/noop/cluster");
    for f in std::fs::read_dir(&noop)? {
        let f = f?;
        std::fs::copy(f.path(), dir.path().join(f.file_name()))?;
    }
    std::fs::write(
        dir.path().join("slow.tf"),
        format!(
            "resource \"terraform_data\" \"slow\" {{\n  triggers_replace = [timestamp()]\n  provisioner \"local-exec\" {{\n    command = \"sleep {seconds}\"\n  }}\n}}\n"
        ),
    )?;
    let tofu = testenv::testbin::path("tofu")?;
    let base = tokio::task::spawn_blocking(move || tofu_base_layer(&tofu)).await??;
    let mut module = Layer::new();
    module.owner(65532, 65532);
    module.host_dir("/captf/module", dir.path())?;
    let mut tools = Layer::new();
    tools.host_binary("/bin/sh", Path::new("/bin/sh"))?;
    tools.host_binary("/bin/sleep", Path::new("/bin/sleep"))?;
    ImageBuilder::new()
        .layer_blob(base)
        .layer(module)
        .layer(tools)
        .user("65532:65532")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .label("io.captf.contract", "v1alpha1")
        .label("io.captf.role", "cluster")
        .label("io.captf.runtime", "tofu")
        .push(&host, "captf/slow-cluster", "v1")
        .await?;
    Ok(format!("{host}/captf/slow-cluster:v1"))
}

/// Brings the Quick Start's cluster up in `ns` and gives it a Node and an initialized control
/// plane from `workload`; returns the control-plane TerraformMachine's name.
async fn provisioned_with_a_node(
    suite: &e2e::suite::Suite,
    kube: &Kube,
    ns: &str,
    jobs: &JobLog,
    workload: &Workload,
) -> anyhow::Result<String> {
    let clusterctl = quickstart::flavor_clusterctl(suite, ns)?;
    quickstart::apply_identity(kube, &clusterctl, ns, ns).await?;
    let yaml =
        clusterctl.generate_cluster(CLUSTER, &template("cluster-template.yaml"), ns, 1, 0)?;
    kube.apply_yaml(&yaml, ns).await?;
    quickstart::wait_cluster_provisioned(kube, ns, CLUSTER).await?;
    let machine = name_of(&quickstart::control_plane_machine(kube, ns, CLUSTER).await?);
    let (_, tm) = quickstart::wait_machine_provisioned(kube, ns, &machine).await?;

    workload.serve_cluster(kube, ns, CLUSTER).await?;
    workload
        .join(
            &machine,
            tm["spec"]["providerID"].as_str().unwrap_or_default(),
            true,
        )
        .await?;
    workload.kubeadm_initialized().await?;
    kube.wait_for((CAPI, "Machine"), ns, &machine, WAIT, "a nodeRef", |o| {
        o["status"]["nodeRef"]["name"] == machine.as_str()
    })
    .await?;
    kube.wait_for(
        (CAPI, "Cluster"),
        ns,
        CLUSTER,
        WAIT,
        "an initialized control plane",
        |o| {
            is_true(o, "ControlPlaneInitialized")
                && o["status"]["initialization"]["controlPlaneInitialized"] == true
        },
    )
    .await?;
    // The cluster module re-applies once the control plane is initialized (fix 1).
    quickstart::wait_applies(jobs, CLUSTER, 2).await?;
    Ok(name_of(&tm))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_carries_everything_and_the_target_starts_no_job() -> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("move").await?;
    let jobs = JobLog::watch(&kube, &ns);
    let workload = Workload::start("captf-e2e-workload-move").await?;
    let tm = provisioned_with_a_node(suite, &kube, &ns, &jobs, &workload).await?;

    let target =
        tokio::task::spawn_blocking(|| TestEnv::start_new("captf-testenv-target", true)).await??;
    let target_kube = Kube::new(target.client().await?);
    let target_captf = Captf::start(&target, &target_kube, &suite.images.runner).await?;
    let target_jobs = JobLog::watch(&target_kube, &ns);

    // A slow apply is running when the move starts.
    let slow = slow_cluster_image(suite.env, 45).await?;
    let applies_before = jobs.of_op("apply").len();
    kube.merge(
        INFRA,
        "TerraformCluster",
        &ns,
        CLUSTER,
        json!({"spec": {"source": {"image": slow}}}),
    )
    .await?;
    kube.wait_for(
        (INFRA, "TerraformCluster"),
        &ns,
        CLUSTER,
        WAIT,
        "the block-move annotation",
        |o| o["metadata"]["annotations"][BLOCK_MOVE].is_string(),
    )
    .await?;
    eventually(WAIT, "the slow apply Job", || async {
        Ok((jobs.of_op("apply").len() > applies_before).then_some(()))
    })
    .await?;

    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    let (from, to) = (
        suite.env.endpoints().kubeconfig.clone(),
        target.endpoints().kubeconfig.clone(),
    );
    let move_ns = ns.clone();
    let mv = tokio::task::spawn_blocking(move || {
        clusterctl.run_with_log(&[
            "move",
            "--namespace",
            &move_ns,
            "--kubeconfig",
            &from.to_string_lossy(),
            "--to-kubeconfig",
            &to.to_string_lossy(),
            "-v",
            "1",
        ])
    });
    // While the slow Job runs, the move waits and nothing reaches the target.
    let mut blocked_checks = 0;
    while jobs
        .of_op("apply")
        .iter()
        .filter(|j| j.owner == CLUSTER && !j.succeeded)
        .count()
        > 0
    {
        assert!(
            target_kube
                .get(INFRA, "TerraformCluster", &ns, CLUSTER)
                .await?
                .is_none(),
            "the move went on while a Job ran"
        );
        blocked_checks += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (out, log) = mv.await??;
    assert!(
        blocked_checks > 0,
        "the slow Job was over before the move started"
    );
    assert!(
        format!("{out}{log}").contains("block-move"),
        "clusterctl never waited on the block-move annotation:\n{out}\n{log}"
    );

    // Everything arrived.
    for (av, kind, name) in [
        (CAPI, "Cluster", CLUSTER.to_owned()),
        (INFRA, "TerraformCluster", CLUSTER.to_owned()),
        (INFRA, "TerraformMachine", tm.clone()),
        (
            "v1",
            "Secret",
            format!(
                "tfstate-default-{}",
                contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, CLUSTER)
            ),
        ),
        (
            "v1",
            "Secret",
            format!(
                "tfstate-default-{}",
                contract::names::state_suffix(&ns, contract::names::ObjectKind::Machine, &tm)
            ),
        ),
        ("v1", "Secret", format!("captf-inputs-c-{CLUSTER}")),
        ("v1", "Secret", format!("captf-inputs-m-{tm}")),
    ] {
        assert!(
            target_kube.get(av, kind, &ns, &name).await?.is_some(),
            "{kind} {name} did not arrive"
        );
    }
    let identity = target_kube
        .wait_for(
            (INFRA, "TerraformClusterIdentity"),
            "",
            &ns,
            WAIT,
            "SecretNotFound",
            |o| condition(o, "Ready").is_some_and(|(_, r)| r == "SecretNotFound"),
        )
        .await?;
    assert_eq!(name_of(&identity), ns);

    // The move docs tell users to copy the identity's Secret; the identity recovers at once.
    let mut secret = kube
        .get("v1", "Secret", "captf-system", &ns)
        .await?
        .expect("the identity's Secret");
    for k in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
    ] {
        secret["metadata"].as_object_mut().unwrap().remove(k);
    }
    testenv::capi::ensure_namespace(&target_kube.client, "captf-system").await?;
    target_kube.apply(&secret, "captf-system").await?;
    target_kube
        .wait_for(
            (INFRA, "TerraformClusterIdentity"),
            "",
            &ns,
            Duration::from_secs(60),
            "Ready=True within a minute of the Secret",
            |o| is_true(o, "Ready"),
        )
        .await?;

    // The target rebuilds provisioned from state and starts no Job at all; the state's record of
    // the apply stands for the apply Job the target never ran.
    for (kind, name) in [
        ("TerraformCluster", CLUSTER),
        ("TerraformMachine", tm.as_str()),
    ] {
        target_kube
            .wait_for(
                (INFRA, kind),
                &ns,
                name,
                WAIT,
                "Ready=True, provisioned and ApplyJobSucceeded=True/ApplySucceeded",
                |o| {
                    is_true(o, "Ready")
                        && o["status"]["initialization"]["provisioned"] == true
                        && condition(o, "ApplyJobSucceeded")
                            .is_some_and(|(s, r)| s == "True" && r == "ApplySucceeded")
                },
            )
            .await?;
    }
    target_kube
        .wait_for(
            (CAPI, "Cluster"),
            &ns,
            CLUSTER,
            WAIT,
            "unpaused and Provisioned",
            |o| o["spec"]["paused"] != true && o["status"]["phase"] == "Provisioned",
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        target_jobs.jobs().is_empty(),
        "the target started Jobs: {:?}",
        target_jobs.jobs()
    );
    println!(
        "e2e figures: move: {} Jobs on the source, {} on the target; the move waited {blocked_checks}s on block-move",
        jobs.jobs().len(),
        target_jobs.jobs().len()
    );

    // The source is left empty.
    for (av, kind) in [
        (CAPI, "Cluster"),
        (CAPI, "Machine"),
        (INFRA, "TerraformCluster"),
        (INFRA, "TerraformMachine"),
    ] {
        assert!(
            kube.list(av, kind, &ns, "").await?.is_empty(),
            "{kind} left in the source"
        );
    }
    quickstart::wait_no_leftovers(&kube, &ns).await?;
    drop(target_captf);
    tokio::task::spawn_blocking(move || drop(target)).await?;
    Ok(())
}
