//! The end-to-end suite on real nodes (issue 32, stage 4; docs/src/development/real-nodes.md,
//! "The end-to-end suite on real nodes"): the docker flavor through Cluster API's real core,
//! kubeadm bootstrap and kubeadm control-plane managers and CAPTF's manager, with node containers
//! that boot, run Cluster API's bootstrap data and register as Nodes. One cluster, in order:
//!
//! 1. KubeadmControlPlane initializes from the real control plane (no stand-in workload cluster):
//!    its Machine's Node is Ready with the providerID CAPTF set;
//! 2. the MachineDeployment's worker joins, its Node carrying the providerID CAPTF set, and a pod
//!    on it reaches a pod on the control-plane node (the nodes' pod routes);
//! 3. a MachinePool of two members on the docker machinepool module reaches Running with its
//!    Nodes;
//! 4. the worker's node container is stopped: its Node goes Unknown, the MachineHealthCheck
//!    remediates the Machine, its container is destroyed and a new worker joins;
//! 5. deleting the Cluster removes every container, network and volume.
//!
//! It prints `e2e figures:` lines: the time from `kubectl apply` to the control plane and the
//! worker Ready (goal: 15 minutes) and the peak of the machine's memory in use above what it was
//! before the test started anything (goal: 6 GiB). Not in `make test`: `make e2e-docker` builds
//! the node images and the Docker provider first (from source the first time).

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use e2e::kube_ops::{CAPI, INFRA, Kube, eventually, is_true, name_of};
use e2e::quickstart::{Progress, WAIT};
use e2e::real_nodes::{self, Applied, ClusterSpec, DockerFlavor, MemoryPeak, NODE_WAIT};
use e2e::suite::Suite;
use serde_json::Value;

const CLUSTER: &str = "real";
/// The workers' MachineHealthCheck: how long a Node may be Unknown before remediation.
const UNHEALTHY_TIMEOUT_SECONDS: &str = "30";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make e2e-docker: builds the node images and the Docker provider from source the first time"]
async fn a_cluster_of_real_nodes_initializes_joins_remediates_and_goes() -> anyhow::Result<()> {
    let memory = MemoryPeak::start()?;
    let progress = Progress::new(true);
    let suite = Suite::shared()?;
    let kube = suite.kube().await?;
    let flavor = DockerFlavor::prepare(suite, &progress).await?;
    let ns = suite.namespace("real-nodes").await?;
    let spec = ClusterSpec {
        ns: ns.clone(),
        identity: ns.clone(),
        name: CLUSTER.to_owned(),
        workers: 1,
        vars: vec![(
            "WORKER_NODE_UNHEALTHY_TIMEOUT_SECONDS".to_owned(),
            UNHEALTHY_TIMEOUT_SECONDS.to_owned(),
        )],
    };
    let applied = real_nodes::apply(suite, &flavor, &kube, &spec, &progress).await?;
    let figures = real_nodes::bring_up(&kube, &flavor, &applied, &progress).await?;
    println!(
        "e2e figures: real nodes: from kubectl apply, Cluster Provisioned {:.0}s, control plane and worker Machines Running {:.0}s, their Nodes Ready {:.0}s (goal 900s)",
        figures.to_cluster_provisioned.as_secs_f64(),
        figures.to_machines_running.as_secs_f64(),
        figures.to_nodes_ready.as_secs_f64()
    );
    let workload = workload(&kube, &applied).await?;
    control_plane_initialized(&kube, &workload, &ns).await?;
    let worker = worker_joined(&kube, &workload, &ns).await?;
    pods_reach_across_nodes(&workload, &worker).await?;
    machine_pool_running(&kube, &workload, &flavor, &ns, &progress).await?;
    worker_remediated(suite, &kube, &workload, &ns, &worker, &progress).await?;
    real_nodes::delete_and_check(suite, &kube, &ns, CLUSTER, &applied.jobs, &progress).await?;
    println!(
        "e2e figures: real nodes: peak memory in use above the machine's before the test started {:.2} GiB (goal 6 GiB)",
        memory.above_baseline() as f64 / f64::from(1u32 << 30)
    );
    Ok(())
}

/// A client of the workload cluster, with the kubeconfig Cluster API wrote.
async fn workload(kube: &Kube, applied: &Applied) -> anyhow::Result<Kube> {
    let path = real_nodes::kubeconfig_path(&applied.dir, &applied.name);
    let path = if path.is_file() {
        path
    } else {
        real_nodes::workload_kubeconfig(kube, &applied.ns, &applied.name, &applied.dir).await?
    };
    Kube::from_kubeconfig(&path).await
}

/// The Node whose providerID is `provider_id`, once it is Ready.
async fn ready_node(workload: &Kube, provider_id: &str) -> anyhow::Result<Value> {
    eventually(
        NODE_WAIT,
        &format!("a Ready Node with providerID {provider_id}"),
        || async {
            Ok(workload
                .list("v1", "Node", "", "")
                .await?
                .into_iter()
                .find(|n| n["spec"]["providerID"] == provider_id && is_true(n, "Ready")))
        },
    )
    .await
}

/// A Machine's providerID, checked against its TerraformMachine's (what CAPTF set).
async fn provider_id_captf_set(kube: &Kube, ns: &str, machine: &Value) -> anyhow::Result<String> {
    let id = machine["spec"]["providerID"]
        .as_str()
        .with_context(|| format!("Machine {} has no providerID", name_of(machine)))?;
    let tm_name = machine["spec"]["infrastructureRef"]["name"]
        .as_str()
        .unwrap_or_default();
    let tm = kube
        .get(INFRA, "TerraformMachine", ns, tm_name)
        .await?
        .with_context(|| format!("TerraformMachine {tm_name} is missing"))?;
    ensure!(
        tm["spec"]["providerID"] == id,
        "Machine {} has providerID {id}, its TerraformMachine {}",
        name_of(machine),
        tm["spec"]["providerID"]
    );
    Ok(id.to_owned())
}

/// The first Machine `selector` selects, its providerID (checked against what CAPTF set) and its
/// Ready Node.
async fn machine_and_node(
    kube: &Kube,
    workload: &Kube,
    ns: &str,
    selector: &str,
) -> anyhow::Result<(Value, String, Value)> {
    let machine = kube
        .list(CAPI, "Machine", ns, selector)
        .await?
        .into_iter()
        .next()
        .with_context(|| format!("no Machine with labels {selector}"))?;
    let id = provider_id_captf_set(kube, ns, &machine).await?;
    let node = ready_node(workload, &id).await?;
    Ok((machine, id, node))
}

/// Step 1: KubeadmControlPlane reports its control plane initialized, from the real API server
/// (no stand-in serves this cluster), and its Machine's Node is Ready.
async fn control_plane_initialized(kube: &Kube, workload: &Kube, ns: &str) -> anyhow::Result<()> {
    let kcp = kube
        .wait_for(
            (
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlane",
            ),
            ns,
            &format!("{CLUSTER}-control-plane"),
            WAIT,
            "control plane initialized with one ready replica",
            |o| {
                o["status"]["initialization"]["controlPlaneInitialized"] == true
                    && o["status"]["readyReplicas"] == 1
            },
        )
        .await?;
    let selector =
        format!("cluster.x-k8s.io/cluster-name={CLUSTER},cluster.x-k8s.io/control-plane");
    let (_, id, node) = machine_and_node(kube, workload, ns, &selector).await?;
    // kubeadm's init wrote its configuration into the workload cluster, which KCP reads.
    let cm = workload
        .get("v1", "ConfigMap", "kube-system", "kubeadm-config")
        .await?;
    ensure!(cm.is_some(), "the workload cluster has no kubeadm-config");
    // What `clusterctl describe cluster` shows a user first: the Cluster Available.
    kube.wait_for(
        (CAPI, "Cluster"),
        ns,
        CLUSTER,
        WAIT,
        "Available=True",
        |o| is_true(o, "Available"),
    )
    .await?;
    println!(
        "e2e figures: real nodes: KubeadmControlPlane initialized ({} ready replica, version {}); Node {} Ready with providerID {id}; Cluster Available",
        kcp["status"]["readyReplicas"],
        kcp["status"]["version"],
        name_of(&node)
    );
    Ok(())
}

/// Step 2: the MachineDeployment's worker joined; returns its Machine.
async fn worker_joined(kube: &Kube, workload: &Kube, ns: &str) -> anyhow::Result<Value> {
    let selector = format!("cluster.x-k8s.io/deployment-name={CLUSTER}-md-0");
    let (machine, id, node) = machine_and_node(kube, workload, ns, &selector).await?;
    ensure!(
        machine["status"]["nodeRef"]["name"] == name_of(&node).as_str(),
        "Machine {} names Node {}, the providerID's Node is {}",
        name_of(&machine),
        machine["status"]["nodeRef"],
        name_of(&node)
    );
    println!(
        "e2e figures: real nodes: worker Machine {} joined as Node {} with providerID {id}",
        name_of(&machine),
        name_of(&node)
    );
    Ok(machine)
}

/// Step 2, the pod network: a pod on the worker resolves a name through a CoreDNS pod on
/// another node, by that pod's own address (not a Service), so the query crosses the nodes' pod
/// routes (`captf-pod-routes`).
async fn pods_reach_across_nodes(workload: &Kube, worker: &Value) -> anyhow::Result<()> {
    let node = worker["status"]["nodeRef"]["name"]
        .as_str()
        .context("the worker has no nodeRef")?
        .to_owned();
    let dns = eventually(WAIT, "a Ready CoreDNS pod on another node", || async {
        Ok(workload
            .list("v1", "Pod", "kube-system", "k8s-app=kube-dns")
            .await?
            .into_iter()
            .find(|p| p["spec"]["nodeName"] != node.as_str() && is_true(p, "Ready")))
    })
    .await?;
    let dns_ip = dns["status"]["podIP"]
        .as_str()
        .context("the CoreDNS pod has no podIP")?;
    let image = format!(
        "registry.k8s.io/kube-proxy:{}",
        e2e::clusterctl::KUBERNETES_VERSION
    );
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cross-node-lookup", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": [dns_ip], "searches": ["svc.cluster.local"]},
            "containers": [{
                "name": "lookup",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["getent", "hosts", "kubernetes.default.svc.cluster.local"]
            }]
        }
    });
    workload.apply(&pod, "default").await?;
    let done = workload
        .wait_for(
            ("v1", "Pod"),
            "default",
            "cross-node-lookup",
            WAIT,
            "phase Succeeded or Failed",
            |p| p["status"]["phase"] == "Succeeded" || p["status"]["phase"] == "Failed",
        )
        .await?;
    // The flavor's default POD_CIDR: the node's pod subnet comes from the cluster.
    ensure!(
        done["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("192.168.")),
        "the pod on {node} got {} outside the cluster's pod subnet 192.168.0.0/16",
        done["status"]["podIP"]
    );
    ensure!(
        done["status"]["phase"] == "Succeeded",
        "a pod on {node} could not resolve through CoreDNS at {dns_ip} on {}: {}",
        dns["spec"]["nodeName"],
        done["status"]
    );
    println!(
        "e2e figures: real nodes: a pod on {node} (podIP {}) resolved a name through CoreDNS at {dns_ip} on {}",
        done["status"]["podIP"], dns["spec"]["nodeName"]
    );
    Ok(())
}

/// Step 3: a MachinePool of two members reaches Running, each member a Ready Node with one of
/// the pool's providerIDs.
async fn machine_pool_running(
    kube: &Kube,
    workload: &Kube,
    flavor: &DockerFlavor,
    ns: &str,
    progress: &Progress,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let yaml = real_nodes::machine_pool_yaml(CLUSTER, ns, &flavor.images.machinepool, 2);
    kube.apply_yaml(&yaml, ns).await?;
    progress.step("applied MachinePool real-mp-0 (2 replicas) on the docker machinepool module");
    let pool = format!("{CLUSTER}-mp-0");
    let mp = real_nodes::wait_machine_pool_running(kube, ns, &pool, 2).await?;
    let ids: Vec<String> = mp["spec"]["providerIDList"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    ensure!(ids.len() == 2, "MachinePool providerIDList {ids:?}");
    for id in &ids {
        ready_node(workload, id).await?;
    }
    println!(
        "e2e figures: real nodes: MachinePool {pool} Running with 2 Ready Nodes ({}) {:.0}s after its apply",
        ids.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Step 4: the worker's node container is stopped; the MachineHealthCheck remediates its
/// Machine, the container goes with it, and a new worker joins.
async fn worker_remediated(
    suite: &Suite,
    kube: &Kube,
    workload: &Kube,
    ns: &str,
    worker: &Value,
    progress: &Progress,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let old_machine = name_of(worker);
    let old_id = worker["spec"]["providerID"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let container = real_nodes::container_of(&old_id)?.to_owned();
    real_nodes::stop_container(suite.env, &container)?;
    progress.step(&format!(
        "stopped node container {container} of Machine {old_machine}"
    ));
    kube.wait_gone((CAPI, "Machine"), ns, &old_machine, NODE_WAIT)
        .await
        .context("the MachineHealthCheck did not remediate the stopped worker")?;
    let remediated = started.elapsed();
    let env = suite.env;
    let c = container.clone();
    let gone = tokio::task::spawn_blocking(move || real_nodes::container_exists(env, &c)).await??;
    ensure!(
        !gone,
        "container {container} outlived its Machine {old_machine}"
    );
    let replacement = replacement_worker(kube, ns, &old_machine).await?;
    let id = provider_id_captf_set(kube, ns, &replacement).await?;
    ready_node(workload, &id).await?;
    println!(
        "e2e figures: real nodes: stopped worker {old_machine} remediated (Machine deleted, container {container} destroyed) {:.0}s after the stop; {} joined with providerID {id} {:.0}s after the stop",
        remediated.as_secs_f64(),
        name_of(&replacement),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The MachineDeployment's Machine that replaced `old`, once Running with a providerID.
async fn replacement_worker(kube: &Kube, ns: &str, old: &str) -> anyhow::Result<Value> {
    let selector = format!("cluster.x-k8s.io/deployment-name={CLUSTER}-md-0");
    eventually(
        NODE_WAIT + Duration::from_secs(60),
        "a Running replacement worker",
        || async {
            Ok(kube
                .list(CAPI, "Machine", ns, &selector)
                .await?
                .into_iter()
                .find(|m| {
                    name_of(m) != old
                        && m["status"]["phase"] == "Running"
                        && m["spec"]["providerID"].is_string()
                }))
        },
    )
    .await
}
