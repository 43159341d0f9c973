//! Workload clusters with real nodes: the docker flavor (`templates/cluster-template-docker.yaml`
//! on `modules/docker`; docs/src/development/real-nodes.md, "The docker flavor"), for
//! `make quickstart FLAVOR=docker`.
//!
//! Where the test environment puts things:
//! - the node containers, their networks and the load balancer live in the environment's own
//!   Docker daemon ([`testenv::TestEnv::docker`]), which holds the node and load balancer images
//!   (`hack/node-image.sh build`, loaded with `docker load`);
//! - module Jobs reach that daemon on the pod gateway (`DOCKER_HOST`, the docker identity's
//!   Secret), and the module images carry the Docker provider as their provider mirror;
//! - the control-plane endpoint is published on the pod gateway too: an address of this host
//!   that Cluster API's controllers, the environment's pods and the nodes all reach.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use testenv::TestEnv;
use testenv::image::{ModuleImage, push_module_image};

use crate::clusterctl::Clusterctl;
use crate::kube_ops::{CAPI, Kube, eventually, is_true, name_of};
use crate::quickstart::{Progress, WAIT, apply_identity_from, objects_table};
use crate::suite::{Images, JobLog, Suite};

/// How long a real node may take from its Machine's creation to a Ready Node: a node container
/// boots systemd, imports the control-plane images and runs kubeadm on 2 shared cores.
pub const NODE_WAIT: Duration = Duration::from_secs(900);

/// What the docker flavor needs besides the suite: its module images, the daemon as the Jobs
/// reach it, and where the endpoint and the cluster network go.
#[derive(Debug, Clone)]
pub struct DockerFlavor {
    /// The docker modules' images (`docker-cluster`, `docker-machine`, `docker-machinepool`).
    pub images: Images,
    /// `DOCKER_HOST` for the module Jobs: the daemon on the pod gateway.
    pub docker_host: String,
    /// `DOCKER_LOAD_BALANCER_HOST_IP`: the pod gateway.
    pub load_balancer_host_ip: Ipv4Addr,
    /// `DOCKER_NETWORK_CIDR`: the environment's [`testenv::docker::cluster_network`], so two
    /// environments' clusters never share a subnet on this host.
    pub network_cidr: String,
}

/// The node and load balancer archives (`node.tar`, `haproxy.tar`), built unless cached:
/// `hack/node-image.sh build` prints the node archive's path.
pub fn node_archives() -> anyhow::Result<(PathBuf, PathBuf)> {
    let script = testenv::env::repo_root().join("hack/node-image.sh");
    let out = Command::new(&script)
        .arg("build")
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {} build", script.display()))?;
    ensure!(
        out.status.success(),
        "{} build failed ({})",
        script.display(),
        out.status
    );
    let node = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let haproxy = node.with_file_name("haproxy.tar");
    for archive in [&node, &haproxy] {
        ensure!(
            archive.is_file(),
            "hack/node-image.sh build named {}, which is not a file",
            archive.display()
        );
    }
    Ok((node, haproxy))
}

/// A provider mirror in the unpacked layout OpenTofu and Terraform read (`/captf/providers`):
/// the Docker test provider under both registries' host names.
pub fn docker_provider_mirror(dir: &Path) -> anyhow::Result<PathBuf> {
    let provider = testenv::testbin::path("terraform-provider-docker")?;
    let version = testenv::testbin::DOCKER_PROVIDER_VERSION;
    let mirror = dir.join("providers");
    for host in ["registry.opentofu.org", "registry.terraform.io"] {
        let target = mirror.join(format!("{host}/kreuzwerker/docker/{version}/linux_amd64"));
        std::fs::create_dir_all(&target)
            .with_context(|| format!("creating {}", target.display()))?;
        let binary = target.join(format!("terraform-provider-docker_v{version}"));
        std::fs::copy(&provider, &binary)
            .with_context(|| format!("copying the Docker provider to {}", binary.display()))?;
    }
    Ok(mirror)
}

/// Pushes the docker modules' images, each with the Docker provider as its mirror.
pub async fn push_docker_module_images(env: &TestEnv, runner: &str) -> anyhow::Result<Images> {
    let host = env.registry()?.host();
    let mirror = docker_provider_mirror(&env.endpoints().dir.join("docker-modules"))?;
    let root = testenv::env::repo_root();
    let mut pushed = Vec::new();
    for role in ["cluster", "machine", "machinepool"] {
        let mut image = ModuleImage::new(root.join("modules/docker").join(role), role);
        image.providers_dir = Some(mirror.clone());
        let repository = format!("captf/docker-{role}");
        push_module_image(&host, &repository, "v0.1.0", &image)
            .await
            .with_context(|| format!("pushing the docker {role} module image"))?;
        pushed.push(format!("{host}/{repository}:v0.1.0"));
    }
    let [cluster, machine, machinepool] = <[String; 3]>::try_from(pushed)
        .map_err(|_| anyhow::anyhow!("three module images were expected"))?;
    Ok(Images {
        runner: runner.to_owned(),
        cluster,
        machine,
        machinepool,
    })
}

impl DockerFlavor {
    /// Starts the environment's Docker daemon, loads the node and load balancer images into it,
    /// and pushes the docker modules' images.
    pub async fn prepare(suite: &Suite, progress: &Progress) -> anyhow::Result<DockerFlavor> {
        let env = suite.env;
        progress.step("node images: hack/node-image.sh build (cached in ~/.cache/captf/node-images once built)");
        let (node, haproxy) = tokio::task::spawn_blocking(node_archives).await??;
        let daemon = env.docker()?;
        progress.step(&format!(
            "the environment's Docker daemon is up ({}); loading {} and {}",
            daemon.host(),
            node.display(),
            haproxy.display()
        ));
        for archive in [node, haproxy] {
            tokio::task::spawn_blocking(move || env.docker()?.load(&archive)).await??;
        }
        let images = push_docker_module_images(env, &suite.images.runner).await?;
        progress.step(&format!(
            "pushed the docker module images with the Docker provider as their mirror: {}, {}",
            images.cluster, images.machine
        ));
        let docker_host = daemon
            .pod_host()
            .context("the environment's Docker daemon does not listen on the pod gateway")?;
        let gateway = env.pod_gateway()?;
        Ok(DockerFlavor {
            images,
            docker_host,
            load_balancer_host_ip: gateway,
            network_cidr: testenv::docker::cluster_network(gateway.octets()[2]),
        })
    }

    /// clusterctl with the docker flavor's variables and the identity set.
    pub fn clusterctl(&self, dir: &Path, identity: &str) -> anyhow::Result<Clusterctl> {
        Ok(Clusterctl::new(dir)?
            .var("TERRAFORM_CLUSTER_IMAGE", &self.images.cluster)
            .var("TERRAFORM_MACHINE_IMAGE", &self.images.machine)
            .var("TERRAFORM_MACHINEPOOL_IMAGE", &self.images.machinepool)
            .var("TERRAFORM_IDENTITY_NAME", identity)
            .var("DOCKER_HOST", &self.docker_host)
            .var("DOCKER_NETWORK_CIDR", &self.network_cidr)
            .var(
                "DOCKER_LOAD_BALANCER_HOST_IP",
                &self.load_balancer_host_ip.to_string(),
            ))
    }
}

/// Waits until the Cluster is Provisioned with the endpoint on `host`, and returns it.
pub async fn wait_cluster_endpoint(
    kube: &Kube,
    ns: &str,
    name: &str,
    host: &str,
) -> anyhow::Result<Value> {
    kube.wait_for(
        (CAPI, "Cluster"),
        ns,
        name,
        WAIT,
        &format!("phase Provisioned with its endpoint on {host}"),
        |o| {
            o["status"]["phase"] == "Provisioned"
                && o["spec"]["controlPlaneEndpoint"]["host"] == host
        },
    )
    .await
}

/// The cluster's Machines once `want` of them are Running with a nodeRef and a providerID.
pub async fn wait_machines_running(
    kube: &Kube,
    ns: &str,
    cluster: &str,
    want: usize,
) -> anyhow::Result<Vec<Value>> {
    let selector = format!("cluster.x-k8s.io/cluster-name={cluster}");
    let waited = eventually(
        NODE_WAIT,
        &format!("{want} Machines of {cluster} Running with a Node"),
        || async {
            let machines = kube.list(CAPI, "Machine", ns, &selector).await?;
            let running = machines
                .iter()
                .filter(|m| {
                    m["status"]["phase"] == "Running"
                        && m["status"]["nodeRef"]["name"].is_string()
                        && m["spec"]["providerID"].is_string()
                })
                .count();
            Ok((running >= want).then_some(machines))
        },
    )
    .await;
    match waited {
        Ok(m) => Ok(m),
        Err(e) => Err(e.context(format!(
            "the Machines: {}",
            machine_summary(&kube.list(CAPI, "Machine", ns, &selector).await?)
        ))),
    }
}

fn machine_summary(machines: &[Value]) -> String {
    machines
        .iter()
        .map(|m| {
            format!(
                "{} phase {} providerID {} nodeRef {} conditions {}",
                name_of(m),
                m["status"]["phase"],
                m["spec"]["providerID"],
                m["status"]["nodeRef"],
                m["status"]["conditions"]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Writes the workload cluster's kubeconfig (Secret `<cluster>-kubeconfig`, which Cluster API
/// writes once the control plane initialized) to `dir`; returns its path.
pub async fn workload_kubeconfig(
    kube: &Kube,
    ns: &str,
    cluster: &str,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    use base64::Engine as _;
    let name = format!("{cluster}-kubeconfig");
    let secret = eventually(WAIT, &format!("Secret {ns}/{name}"), || async {
        kube.get("v1", "Secret", ns, &name).await
    })
    .await?;
    let value = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["value"].as_str().unwrap_or_default())
        .with_context(|| format!("decoding Secret {ns}/{name}"))?;
    std::fs::create_dir_all(dir)?;
    let path = kubeconfig_path(dir, cluster);
    std::fs::write(&path, value).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Where [`workload_kubeconfig`] writes a cluster's kubeconfig in `dir`.
pub fn kubeconfig_path(dir: &Path, cluster: &str) -> PathBuf {
    dir.join(format!("{cluster}.kubeconfig"))
}

/// The directory of the docker flavor's files (clusterctl's config, workload kubeconfigs).
pub fn flavor_dir(env: &TestEnv) -> PathBuf {
    env.endpoints().dir.join("docker-flavor")
}

/// `kubectl get nodes -o wide` against `kubeconfig`: the table kubectl prints.
pub fn kubectl_get_nodes(kubeconfig: &Path) -> anyhow::Result<String> {
    let kubectl = testenv::testbin::path("kubectl")?;
    let out = Command::new(&kubectl)
        .args(["get", "nodes", "-o", "wide", "--request-timeout=20s"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .with_context(|| format!("running {}", kubectl.display()))?;
    if !out.status.success() {
        bail!(
            "kubectl get nodes failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The workload cluster's Nodes once each Machine's providerID is a Ready Node's: `(node name,
/// providerID)` per Node.
pub async fn wait_nodes_ready(
    workload: &Kube,
    machines: &[Value],
) -> anyhow::Result<Vec<(String, String)>> {
    let want: Vec<String> = machines
        .iter()
        .filter_map(|m| m["spec"]["providerID"].as_str().map(str::to_owned))
        .collect();
    eventually(
        NODE_WAIT,
        &format!("Ready Nodes with providerIDs {want:?}"),
        || async {
            let nodes = workload.list("v1", "Node", "", "").await?;
            let ready: Vec<(String, String)> = nodes
                .iter()
                .filter(|n| is_true(n, "Ready"))
                .filter_map(|n| {
                    let id = n["spec"]["providerID"].as_str()?;
                    want.iter()
                        .any(|w| w == id)
                        .then(|| (name_of(n), id.to_owned()))
                })
                .collect();
            Ok((ready.len() == want.len()).then_some(ready))
        },
    )
    .await
}

/// What the docker flavor's run measured.
#[derive(Debug, Clone)]
pub struct Figures {
    /// From apply to the Cluster Provisioned with its endpoint.
    pub to_cluster_provisioned: Duration,
    /// From apply to every Machine Running with its Node.
    pub to_machines_running: Duration,
    /// From apply to every Node Ready.
    pub to_nodes_ready: Duration,
    /// From `kubectl delete cluster` until the Cluster is gone (zero when kept).
    pub delete: Duration,
}

/// Where the docker flavor's cluster goes and what it asks for.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub ns: String,
    pub identity: String,
    pub name: String,
    /// Worker Machines of the MachineDeployment (the control plane has one).
    pub workers: u32,
    /// More clusterctl variables (a shorter MachineHealthCheck timeout, say).
    pub vars: Vec<(String, String)>,
}

/// The docker flavor: identity, a cluster of one control-plane Machine and `spec.workers`
/// workers, every Node Ready with its Machine's providerID, `kubectl get nodes` printed; then,
/// unless `keep`, the delete, with nothing left in the namespace or the Docker daemon.
pub async fn run(
    suite: &Suite,
    flavor: &DockerFlavor,
    kube: &Kube,
    spec: &ClusterSpec,
    progress: &Progress,
    keep: bool,
) -> anyhow::Result<Figures> {
    let applied = apply(suite, flavor, kube, spec, progress).await?;
    let mut figures = bring_up(kube, flavor, &applied, progress).await?;
    if keep {
        return Ok(figures);
    }
    figures.delete =
        delete_and_check(suite, kube, &spec.ns, &spec.name, &applied.jobs, progress).await?;
    Ok(figures)
}

/// A cluster of the docker flavor just applied.
#[derive(Debug)]
pub struct Applied {
    pub ns: String,
    pub name: String,
    /// Machines it asks for: the control plane's and the workers.
    pub machines: usize,
    pub applied_at: Instant,
    /// The namespace's Jobs from before the apply on.
    pub jobs: JobLog,
    /// Where the workload kubeconfig goes.
    pub dir: PathBuf,
}

/// Applies `identity-docker.yaml` and the docker flavor as `spec` says.
pub async fn apply(
    suite: &Suite,
    flavor: &DockerFlavor,
    kube: &Kube,
    spec: &ClusterSpec,
    progress: &Progress,
) -> anyhow::Result<Applied> {
    let (ns, identity, name) = (spec.ns.as_str(), spec.identity.as_str(), spec.name.as_str());
    let dir = flavor_dir(suite.env);
    let mut clusterctl = flavor.clusterctl(&dir, identity)?;
    for (k, v) in &spec.vars {
        clusterctl = clusterctl.var(k, v);
    }
    progress.step(&format!(
        "applying identity {identity} (templates/identity-docker.yaml, DOCKER_HOST={})",
        flavor.docker_host
    ));
    apply_identity_from(kube, &clusterctl, "identity-docker.yaml", identity, ns).await?;
    let yaml = clusterctl.generate_cluster(
        name,
        &clusterctl.template("cluster-template-docker.yaml"),
        ns,
        1,
        spec.workers,
    )?;
    let jobs = JobLog::watch(kube, ns);
    let applied_at = Instant::now();
    kube.apply_yaml(&yaml, ns).await?;
    progress.step(&format!(
        "applied the docker flavor (1 control-plane machine, {} worker(s); network {}, endpoint {}:6443)",
        spec.workers, flavor.network_cidr, flavor.load_balancer_host_ip
    ));
    Ok(Applied {
        ns: ns.to_owned(),
        name: name.to_owned(),
        machines: 1 + spec.workers as usize,
        applied_at,
        jobs,
        dir,
    })
}

/// From the applied cluster to Ready Nodes; returns the figures, measured from the apply.
pub async fn bring_up(
    kube: &Kube,
    flavor: &DockerFlavor,
    up: &Applied,
    progress: &Progress,
) -> anyhow::Result<Figures> {
    let (ns, name, machines, started) =
        (up.ns.as_str(), up.name.as_str(), up.machines, up.applied_at);
    let host = flavor.load_balancer_host_ip.to_string();
    wait_cluster_endpoint(kube, ns, name, &host).await?;
    let to_cluster_provisioned = started.elapsed();
    progress.step(&format!(
        "Cluster {name} Provisioned: the cluster module made its network and load balancer, endpoint {host}:6443"
    ));
    progress.block(&objects_table(kube, ns).await?);
    let running = wait_machines_running(kube, ns, name, machines).await?;
    let to_machines_running = started.elapsed();
    progress.step(&format!(
        "{machines} Machines Running, each with the Node its providerID names"
    ));
    progress.block(&objects_table(kube, ns).await?);
    let kubeconfig = workload_kubeconfig(kube, ns, name, &up.dir).await?;
    let workload = Kube::from_kubeconfig(&kubeconfig).await?;
    let nodes = wait_nodes_ready(&workload, &running).await?;
    let to_nodes_ready = started.elapsed();
    progress.step(&format!(
        "every Node Ready ({}); kubectl --kubeconfig {} get nodes -o wide:",
        nodes
            .iter()
            .map(|(n, id)| format!("{n} {id}"))
            .collect::<Vec<_>>()
            .join(", "),
        kubeconfig.display()
    ));
    let table = tokio::task::spawn_blocking(move || kubectl_get_nodes(&kubeconfig)).await??;
    progress.block(&table);
    Ok(Figures {
        to_cluster_provisioned,
        to_machines_running,
        to_nodes_ready,
        delete: Duration::ZERO,
    })
}

/// `kubectl delete cluster`, then: every destroy Job ran, nothing of CAPTF's is left in `ns`,
/// and nothing the modules made is left in the Docker daemon. Returns how long the delete took.
pub async fn delete_and_check(
    suite: &Suite,
    kube: &Kube,
    ns: &str,
    name: &str,
    jobs: &JobLog,
    progress: &Progress,
) -> anyhow::Result<Duration> {
    progress.step(&format!(
        "kubectl delete cluster {name}; waiting for it to be gone"
    ));
    let started = Instant::now();
    kube.delete(CAPI, "Cluster", ns, name).await?;
    kube.wait_gone((CAPI, "Cluster"), ns, name, NODE_WAIT)
        .await?;
    let delete = started.elapsed();
    crate::quickstart::wait_no_leftovers(kube, ns).await?;
    let destroyed = jobs.of_op("destroy").iter().filter(|j| j.succeeded).count();
    ensure!(
        destroyed >= 2,
        "only {destroyed} successful destroy Jobs were seen: {:?}",
        jobs.jobs()
    );
    let daemon = suite.env.docker()?;
    let env = suite.env;
    let left = tokio::task::spawn_blocking(move || env.docker()?.leftovers()).await??;
    ensure!(
        left.is_empty(),
        "the modules' destroy left in the Docker daemon ({}): {left:?}",
        daemon.host()
    );
    progress.step(&format!(
        "Cluster {name} gone in {:.1}s: {destroyed} destroy Jobs, no container, volume or network left in the Docker daemon, nothing of CAPTF's in {ns}",
        delete.as_secs_f64()
    ));
    Ok(delete)
}

/// A MachinePool of the docker flavor's cluster `cluster`, `<cluster>-mp-0` with `replicas`
/// members on the docker machinepool module: the MachinePool, its KubeadmConfig (each member
/// registers as its NoCloud instance, as the flavor's machines do) and its TerraformMachinePool.
pub fn machine_pool_yaml(cluster: &str, ns: &str, image: &str, replicas: u32) -> String {
    let version = crate::clusterctl::KUBERNETES_VERSION;
    format!(
        r"apiVersion: cluster.x-k8s.io/v1beta2
kind: MachinePool
metadata:
  name: {cluster}-mp-0
  namespace: {ns}
spec:
  clusterName: {cluster}
  replicas: {replicas}
  template:
    spec:
      clusterName: {cluster}
      version: {version}
      bootstrap:
        configRef:
          apiGroup: bootstrap.cluster.x-k8s.io
          kind: KubeadmConfig
          name: {cluster}-mp-0
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: TerraformMachinePool
        name: {cluster}-mp-0
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfig
metadata:
  name: {cluster}-mp-0
  namespace: {ns}
spec:
  joinConfiguration:
    nodeRegistration:
      name: '{{{{ ds.meta_data.local_hostname }}}}'
      imagePullPolicy: IfNotPresent
      ignorePreflightErrors:
      - SystemVerification
      kubeletExtraArgs:
      - name: provider-id
        value: docker:///{{{{ ds.meta_data.instance_id }}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachinePool
metadata:
  name: {cluster}-mp-0
  namespace: {ns}
  labels:
    cluster.x-k8s.io/cluster-name: {cluster}
spec:
  source:
    image: {image}
"
    )
}

/// Waits until the MachinePool is Running with `replicas` ready members, each a Node; returns
/// it.
pub async fn wait_machine_pool_running(
    kube: &Kube,
    ns: &str,
    name: &str,
    replicas: u32,
) -> anyhow::Result<Value> {
    kube.wait_for(
        (CAPI, "MachinePool"),
        ns,
        name,
        NODE_WAIT,
        &format!("phase Running with {replicas} ready replicas and their Nodes"),
        |o| {
            o["status"]["phase"] == "Running"
                && o["status"]["readyReplicas"] == replicas
                && o["status"]["nodeRefs"]
                    .as_array()
                    .is_some_and(|r| r.len() == replicas as usize)
        },
    )
    .await
}

/// The node container of a `docker:///<name>` providerID.
pub fn container_of(provider_id: &str) -> anyhow::Result<&str> {
    provider_id
        .strip_prefix("docker:///")
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .with_context(|| format!("{provider_id:?} is not a docker:///<container> providerID"))
}

/// Whether the daemon has a container named `name` (running or not).
pub fn container_exists(env: &TestEnv, name: &str) -> anyhow::Result<bool> {
    let filter = format!("name=^{name}$");
    let ids = env
        .docker()?
        .run_docker(&["ps", "-a", "--filter", &filter, "-q"])?;
    Ok(!ids.trim().is_empty())
}

/// `docker stop <name>`: the node's machine goes away as a cloud's stopped instance does.
pub fn stop_container(env: &TestEnv, name: &str) -> anyhow::Result<()> {
    env.docker()?.run_docker(&["stop", "--time", "5", name])?;
    Ok(())
}

/// The machine's memory in use (`MemTotal - MemAvailable` of /proc/meminfo), in bytes.
pub fn memory_in_use() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let field = |key: &str| -> anyhow::Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .with_context(|| format!("/proc/meminfo has no {key}"))
    };
    Ok(field("MemTotal:")?.saturating_sub(field("MemAvailable:")?))
}

/// The peak of the machine's memory in use above what it was when sampling started, sampled
/// every second on a thread of its own until dropped: what a test and everything it started
/// used at most (page cache aside), on a machine where nothing else runs.
#[derive(Debug)]
pub struct MemoryPeak {
    baseline: u64,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl MemoryPeak {
    pub fn start() -> anyhow::Result<MemoryPeak> {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let baseline = memory_in_use()?;
        let peak = std::sync::Arc::new(AtomicU64::new(baseline));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(now) = memory_in_use() {
                    p.fetch_max(now, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        Ok(MemoryPeak {
            baseline,
            peak,
            stop,
        })
    }

    /// The peak so far above the baseline, in bytes.
    pub fn above_baseline(&self) -> u64 {
        self.peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(self.baseline)
    }
}

impl Drop for MemoryPeak {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
