//! `make quickstart`: the README's main job. The book's Quick Start on this machine, with Cluster
//! API's real controllers: a local control plane with Cluster API's three managers, CAPTF's
//! manager and webhook, the no-op module images, then the identity, the default flavor with one
//! control-plane machine, everything up to Provisioned, and the delete. With `KEEP=1` it stops
//! before the delete and leaves everything running until Ctrl-C, printing the kubeconfig.
//!
//! With `FLAVOR=docker`, the docker flavor on real nodes instead (docs/src/development/
//! real-nodes.md): the environment's Docker daemon, the node images, the docker modules, then a
//! cluster of one control-plane Machine and one worker whose Nodes join and are Ready, and
//! `kubectl get nodes` of the workload cluster.

use std::process::ExitCode;

use e2e::quickstart::{self, Progress};
use e2e::real_nodes;
use e2e::suite::Suite;

fn main() -> ExitCode {
    let keep = std::env::var("KEEP").is_ok_and(|v| !v.is_empty() && v != "0");
    let progress = Progress::new(true);
    progress.step("starting the local environment: etcd, kube-apiserver, kube-controller-manager, Cluster API's core, kubeadm bootstrap and kubeadm control-plane managers, a registry and a process kubelet");
    let suite = match Suite::shared() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("quickstart: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    progress.step(&format!(
        "environment up; CAPTF's manager and webhook run as their ServiceAccounts (logs in {})",
        suite.captf.log_dir.display()
    ));
    progress.block(&format!(
        "checkout: {}\nkubeconfig: {}\nimages: {}\n        {}\n        {}",
        testenv::env::repo_root().display(),
        suite.env.endpoints().kubeconfig.display(),
        suite.images.runner,
        suite.images.cluster,
        suite.images.machine
    ));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quickstart: {e}");
            return ExitCode::FAILURE;
        }
    };
    let flavor = std::env::var("FLAVOR").unwrap_or_default();
    match flavor.as_str() {
        "" | "default" => {}
        "docker" => return docker_flavor(suite, &runtime, &progress, keep),
        other => {
            eprintln!(
                "quickstart: FLAVOR={other:?} is not a flavor here: use FLAVOR=docker, or none for the default flavor"
            );
            return ExitCode::FAILURE;
        }
    }
    let result = runtime.block_on(async {
        let kube = suite.kube().await?;
        let ns = "team-a";
        testenv::capi::ensure_namespace(&kube.client, ns).await?;
        progress.step(&format!("kubectl create namespace {ns}"));
        let figures =
            quickstart::run(suite, &kube, ns, "aws-prod", "my-cluster", &progress, keep).await?;
        anyhow::Ok(figures)
    });
    match result {
        Ok(f) => {
            progress.step(&format!(
                "done: apply to Cluster Provisioned {:.1}s, to Machine Provisioned {:.1}s, {} Jobs, delete {:.1}s",
                f.apply_to_cluster_provisioned.as_secs_f64(),
                f.apply_to_machine_provisioned.as_secs_f64(),
                f.jobs_started,
                f.delete.as_secs_f64()
            ));
            if keep {
                // clusterctl is the one `make quickstart` built, in the test binaries' cache: the
                // command names it by its path so that it works as printed.
                let clusterctl = testenv::testbin::path("clusterctl")
                    .map_or_else(|_| "clusterctl".to_owned(), |p| p.display().to_string());
                println!(
                    "\nKEEP=1: everything keeps running until Ctrl-C. Look around with\n  export KUBECONFIG={}\n  kubectl get clusters,machines,terraformclusters,terraformmachines -n team-a\n  {clusterctl} describe cluster my-cluster -n team-a",
                    suite.env.endpoints().kubeconfig.display()
                );
                let _ = runtime.block_on(tokio::signal::ctrl_c());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "quickstart failed: {e:#}\n(logs: {} and {})",
                suite.captf.log_dir.display(),
                suite.env.endpoints().dir.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// `FLAVOR=docker`: the docker flavor on real nodes, one control-plane Machine and one worker.
fn docker_flavor(
    suite: &'static Suite,
    runtime: &tokio::runtime::Runtime,
    progress: &Progress,
    keep: bool,
) -> ExitCode {
    let spec = real_nodes::ClusterSpec {
        ns: "team-a".to_owned(),
        identity: "docker-local".to_owned(),
        name: "my-cluster".to_owned(),
        workers: 1,
        vars: Vec::new(),
    };
    let result = runtime.block_on(async {
        let kube = suite.kube().await?;
        let flavor = real_nodes::DockerFlavor::prepare(suite, progress).await?;
        testenv::capi::ensure_namespace(&kube.client, &spec.ns).await?;
        progress.step(&format!("kubectl create namespace {}", spec.ns));
        real_nodes::run(suite, &flavor, &kube, &spec, progress, keep).await
    });
    match result {
        Ok(f) => {
            progress.step(&format!(
                "done: apply to Cluster Provisioned {:.1}s, to Machines Running {:.1}s, to Nodes Ready {:.1}s, delete {:.1}s",
                f.to_cluster_provisioned.as_secs_f64(),
                f.to_machines_running.as_secs_f64(),
                f.to_nodes_ready.as_secs_f64(),
                f.delete.as_secs_f64()
            ));
            if keep {
                println!(
                    "\nKEEP=1: everything keeps running until Ctrl-C. Look around with\n  export KUBECONFIG={}\n  kubectl get clusters,machines,terraformclusters,terraformmachines -n {}\n  kubectl --kubeconfig {} get nodes\n  DOCKER_HOST={} docker ps",
                    suite.env.endpoints().kubeconfig.display(),
                    spec.ns,
                    real_nodes::kubeconfig_path(&real_nodes::flavor_dir(suite.env), &spec.name)
                        .display(),
                    suite
                        .env
                        .docker()
                        .map_or_else(|_| String::new(), testenv::docker::DockerDaemon::host)
                );
                let _ = runtime.block_on(tokio::signal::ctrl_c());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "quickstart (FLAVOR=docker) failed: {e:#}\n(logs: {} and {})",
                suite.captf.log_dir.display(),
                suite.env.endpoints().dir.display()
            );
            ExitCode::FAILURE
        }
    }
}
