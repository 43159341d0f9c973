//! The Quick Start on the embedded local environment (README "Quick Start"): a real control plane,
//! registry and process kubelet on this machine, the manager running as its ServiceAccount with the
//! shipped RBAC, and one cluster with a control-plane and a worker machine brought up from the
//! no-op modules, then deleted. Every Job is a real Job running the runner and OpenTofu.
//!
//! Run with `make quickstart` (it builds the test binaries and the static runner first); needs
//! root.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::wildcard_imports
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const WAIT: Duration = Duration::from_secs(300);

fn step(started: Instant, what: &str) {
    println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
}

fn cond(o: &Value, t: &str) -> String {
    condition(o, t).map_or_else(|| "-".to_owned(), |(s, r)| format!("{s}/{r}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let started = Instant::now();
    step(
        started,
        "starting the local environment (etcd, kube-apiserver, kube-controller-manager, registry, process kubelet)",
    );
    let Some((env, images)) = setup().await else {
        eprintln!("no static runner: run `make quickstart`, which builds it");
        std::process::exit(1);
    };
    println!(
        "           kubeconfig: {}",
        env.endpoints().kubeconfig.display()
    );
    println!(
        "           images: {}, {}, {}",
        images.runner, images.cluster, images.machine
    );
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("quickstart").await.unwrap();
    identity(
        &client,
        "quickstart",
        &[ns.as_str()],
        "not-a-real-cloud-token",
    )
    .await;
    step(
        started,
        &format!("namespace {ns}, identity quickstart; starting the manager as its ServiceAccount"),
    );
    let manager = start_manager(
        &manager_client(env, &client).await,
        &ns,
        &images,
        "quickstart",
    );

    cluster(&client, &ns, "demo", "quickstart", &images.cluster).await;
    step(
        started,
        "created Cluster demo and TerraformCluster demo; waiting for Ready",
    );
    let tc = wait_ready(&client, &ns, "TerraformCluster", "demo", "True", WAIT).await;
    step(
        started,
        &format!(
            "TerraformCluster demo Ready; endpoint {}:{} written by the module",
            tc["spec"]["controlPlaneEndpoint"]["host"]
                .as_str()
                .unwrap_or("?"),
            tc["spec"]["controlPlaneEndpoint"]["port"]
        ),
    );

    capi_cluster_provisioned(&client, &ns, "demo").await;
    machine(
        &client,
        &ns,
        "demo",
        "demo-cp-0",
        &images.machine,
        true,
        "#cloud-config\n",
    )
    .await;
    machine(
        &client,
        &ns,
        "demo",
        "demo-md-0",
        &images.machine,
        false,
        "#cloud-config\n",
    )
    .await;
    step(
        started,
        "Cluster API marked the infrastructure provisioned; created a control-plane and a worker Machine",
    );
    for name in ["demo-cp-0", "demo-md-0"] {
        let tm = wait_ready(&client, &ns, "TerraformMachine", name, "True", WAIT).await;
        step(
            started,
            &format!(
                "TerraformMachine {name} Ready: providerID {}, addresses {}",
                tm["spec"]["providerID"].as_str().unwrap_or("?"),
                tm["status"]["addresses"]
            ),
        );
    }
    capi_control_plane_initialized(&client, &ns, "demo").await;
    step(
        started,
        "the control plane is initialized: the cluster re-applies once",
    );
    eventually(WAIT, "the cluster's re-apply", || async {
        let jobs = jobs_of(&client, &ns, "demo").await;
        (jobs.len() == 2
            && jobs
                .iter()
                .all(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1)))
        .then_some(())
    })
    .await;

    println!();
    println!(
        "{:<20} {:<18} {:<28} {:<22} JOBS",
        "OBJECT", "READY", "APPLYJOBSUCCEEDED", "INFRASTRUCTUREHEALTHY"
    );
    for (kind, name) in [
        ("TerraformCluster", "demo"),
        ("TerraformMachine", "demo-cp-0"),
        ("TerraformMachine", "demo-md-0"),
    ] {
        let o = get_json(&client, &ns, TC, kind, name).await;
        println!(
            "{:<20} {:<18} {:<28} {:<22} {}",
            name,
            cond(&o, "Ready"),
            cond(&o, "ApplyJobSucceeded"),
            cond(&o, "InfrastructureHealthy"),
            jobs_of(&client, &ns, name).await.len()
        );
    }
    println!();

    step(
        started,
        "deleting: the machines (Machine and bootstrap Secret first, as Cluster API does), then the cluster",
    );
    for name in ["demo-cp-0", "demo-md-0"] {
        delete(&client, &ns, "cluster.x-k8s.io/v1beta2", "Machine", name).await;
        delete(&client, &ns, "v1", "Secret", &format!("{name}-bootstrap")).await;
        delete(&client, &ns, TC, "TerraformMachine", name).await;
    }
    delete(&client, &ns, TC, "TerraformCluster", "demo").await;
    for (kind, name) in [
        ("TerraformMachine", "demo-cp-0"),
        ("TerraformMachine", "demo-md-0"),
        ("TerraformCluster", "demo"),
    ] {
        eventually(WAIT, &format!("{kind} {name} destroyed"), || async {
            get_json_opt(&client, &ns, TC, kind, name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
        step(started, &format!("{kind} {name} destroyed and gone"));
    }
    let jobs: u64 = manager
        .metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("captf_jobs_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    manager.stop().await;
    step(
        started,
        &format!(
            "done: {jobs} Jobs in all (sum of captf_jobs_total); the environment stops with this process"
        ),
    );
}
