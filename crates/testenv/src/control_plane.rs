//! The local control plane: etcd, kube-apiserver and kube-controller-manager built from source
//! (ENGINEERING.md §2), on loopback, with TLS, RBAC, a service-account issuer and signing key and
//! the API server's default admission plugins — a real cluster's API, minus nodes.
//!
//! Every process is started with [`crate::shim::spawn_tied`], so nothing outlives the process that
//! started it, even when that process is killed. Logs go to `<dir>/<process>.log`.

use anyhow::{Context as _, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::net::free_loopback_port;
use crate::shim::spawn_tied;
use crate::testbin;

/// The controllers kube-controller-manager runs: what Jobs, garbage collection, namespaces and
/// service accounts need, and what Deployments and Services on the pod network need (ReplicaSets,
/// Endpoints and EndpointSlices, PodDisruptionBudget status).
pub const CONTROLLERS: &str = "namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,job-controller,deployment-controller,replicaset-controller,endpoints-controller,endpointslice-controller,disruption-controller";

/// How long the control plane may take to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Files and endpoints of a running control plane.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Endpoints {
    /// The API server's URL (`https://127.0.0.1:<port>`).
    pub server: String,
    /// The API server's port.
    pub port: u16,
    /// The admin kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    /// The CA that signed the serving and client certificates (PEM).
    pub ca_file: PathBuf,
    /// The directory holding certificates, data and logs.
    pub dir: PathBuf,
}

/// A running control plane. Dropping it stops every process.
#[derive(Debug)]
pub struct ControlPlane {
    endpoints: Endpoints,
    /// The processes by name, behind a lock: a fault test restarts the API server and pauses
    /// etcd through a shared environment (see [`ControlPlane::restart_api_server`]).
    processes: Mutex<Vec<(&'static str, Child)>>,
    /// The API server's binary and arguments, to start it again the same way.
    api_server: (PathBuf, Vec<String>),
}

fn write(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

/// Certificates and keys of one control plane, written under `<dir>/pki`.
struct Pki {
    ca: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    admin_cert_pem: String,
    admin_key_pem: String,
    sa_public: PathBuf,
    sa_private: PathBuf,
}

fn make_pki(dir: &Path, extra_ips: &[Ipv4Addr]) -> anyhow::Result<Pki> {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki)?;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "captf-testenv-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(vec![
        "localhost".to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        "kubernetes.default.svc.cluster.local".to_owned(),
    ])?;
    serving
        .subject_alt_names
        .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
    serving
        .subject_alt_names
        .push(SanType::IpAddress(Ipv4Addr::new(10, 0, 0, 1).into()));
    for ip in extra_ips {
        serving
            .subject_alt_names
            .push(SanType::IpAddress((*ip).into()));
    }
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &issuer)?;

    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin
        .distinguished_name
        .push(DnType::CommonName, "captf-testenv-admin");
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &issuer)?;

    let sa_key = KeyPair::generate()?;

    let paths = Pki {
        ca: pki.join("ca.crt"),
        serving_cert: pki.join("apiserver.crt"),
        serving_key: pki.join("apiserver.key"),
        admin_cert_pem: admin_cert.pem(),
        admin_key_pem: admin_key.serialize_pem(),
        sa_public: pki.join("sa.pub"),
        sa_private: pki.join("sa.key"),
    };
    write(&paths.ca, &ca_cert.pem())?;
    write(&paths.serving_cert, &serving_cert.pem())?;
    write(&paths.serving_key, &serving_key.serialize_pem())?;
    write(&pki.join("admin.crt"), &paths.admin_cert_pem)?;
    write(&pki.join("admin.key"), &paths.admin_key_pem)?;
    write(&paths.sa_public, &sa_key.public_key_pem())?;
    write(&paths.sa_private, &sa_key.serialize_pem())?;
    Ok(paths)
}

/// A kubeconfig with embedded credentials, for `server` as the given user.
pub fn kubeconfig_yaml(
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
    user: &str,
) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: {user}\ncurrent-context: testenv\n",
        ca = b64(ca_pem),
        cert = b64(cert_pem),
        key = b64(key_pem),
    )
}

/// Starts `binary args` with its output in `<dir>/<name>.log`, killed when this process exits.
pub(crate) fn spawn(
    dir: &Path,
    name: &'static str,
    binary: &Path,
    args: &[String],
) -> anyhow::Result<Child> {
    // Appended to: a process started again (the API server after a fault) keeps its history.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .with_context(|| format!("opening {name}.log"))?;
    let err = log.try_clone()?;
    let mut cmd = Command::new(binary);
    cmd.args(args).stdin(Stdio::null()).stdout(log).stderr(err);
    spawn_tied(cmd).with_context(|| format!("starting {name} ({})", binary.display()))
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager with their state under `dir`, and
    /// waits until the API server is ready and the controllers have published the root CA.
    ///
    /// The processes also die with the process that started them, however it exits.
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        Self::start_with(dir, &[])
    }

    /// [`ControlPlane::start`], with more IP addresses in the API server's serving certificate:
    /// the address pods reach it at (the pod network's gateway, see [`crate::podnet`]).
    ///
    /// A free port is chosen before etcd or the API server binds it, so another socket can take
    /// it in between (an outgoing connection's ephemeral port): then everything starts again on
    /// new ports, at most three times.
    pub fn start_with(dir: &Path, extra_ips: &[Ipv4Addr]) -> anyhow::Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_once(dir, extra_ips) {
                Err(e) if attempt < 3 && format!("{e:#}").contains("address already in use") => {
                    tracing::warn!(error = %format!("{e:#}"), attempt, "a port was taken before it was bound; starting again");
                    let _ = std::fs::remove_dir_all(dir.join("etcd"));
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    fn start_once(dir: &Path, extra_ips: &[Ipv4Addr]) -> anyhow::Result<Self> {
        let started = Instant::now();
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let pki = make_pki(&dir, extra_ips)?;
        let mut cp = ControlPlane {
            endpoints: Endpoints {
                server: String::new(),
                port: 0,
                kubeconfig: dir.join("kubeconfig"),
                ca_file: pki.ca.clone(),
                dir: dir.clone(),
            },
            processes: Mutex::new(Vec::new()),
            api_server: (PathBuf::new(), Vec::new()),
        };

        let etcd_client = free_loopback_port()?;
        let etcd_peer = free_loopback_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        let etcd = spawn(
            &dir,
            "etcd",
            &testbin::path("etcd")?,
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;
        cp.push("etcd", etcd);

        let port = free_loopback_port()?;
        let server = format!("https://127.0.0.1:{port}");
        cp.endpoints.server.clone_from(&server);
        cp.endpoints.port = port;
        let api_server_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!("--tls-cert-file={}", pki.serving_cert.display()),
            format!("--tls-private-key-file={}", pki.serving_key.display()),
            format!("--client-ca-file={}", pki.ca.display()),
            "--authorization-mode=RBAC".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            format!("--service-account-issuer={server}"),
            format!("--service-account-key-file={}", pki.sa_public.display()),
            format!(
                "--service-account-signing-key-file={}",
                pki.sa_private.display()
            ),
            "--enable-priority-and-fairness=false".into(),
            // Webhooks, CRD conversion and aggregated APIs by their Service's endpoints (pod
            // IPs on the pod network): there is no kube-proxy.
            "--enable-aggregator-routing=true".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        let mut api_server_args = api_server_args;
        api_server_args.extend(crate::audit::api_server_args(&dir)?);
        cp.api_server = (testbin::path("kube-apiserver")?, api_server_args);
        let apiserver = spawn(&dir, "kube-apiserver", &cp.api_server.0, &cp.api_server.1)?;
        cp.push("kube-apiserver", apiserver);

        let kubeconfig = kubeconfig_yaml(
            &server,
            &std::fs::read_to_string(&pki.ca)?,
            &pki.admin_cert_pem,
            &pki.admin_key_pem,
            "captf-testenv-admin",
        );
        write(&cp.endpoints.kubeconfig, &kubeconfig)?;

        let kcm = spawn(
            &dir,
            "kube-controller-manager",
            &testbin::path("kube-controller-manager")?,
            &[
                format!("--kubeconfig={}", cp.endpoints.kubeconfig.display()),
                format!("--controllers={CONTROLLERS}"),
                format!(
                    "--service-account-private-key-file={}",
                    pki.sa_private.display()
                ),
                format!("--root-ca-file={}", pki.ca.display()),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--v=1".into(),
            ],
        )?;
        cp.push("kube-controller-manager", kcm);
        cp.wait_ready(started)?;
        tracing::info!(
            server = %cp.endpoints.server,
            seconds = started.elapsed().as_secs_f64(),
            "control plane ready"
        );
        Ok(cp)
    }

    /// Files and endpoints of this control plane.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// Fails with the tail of a process's log when it has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child) in self.processes().iter_mut() {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(self.endpoints.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!(
                    "{name} exited ({status}); last log lines:\n{}",
                    tail.join("\n")
                );
            }
        }
        Ok(())
    }

    /// A kube client for this control plane, as the admin user.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        client_for(&self.endpoints.kubeconfig).await
    }

    fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building a tokio runtime")
    }

    /// Polls `ready` (which may fail transiently) until it returns true, a process dies or the
    /// start timeout passes.
    fn wait_until<F, Fut>(&mut self, started: Instant, what: &str, ready: F) -> anyhow::Result<()>
    where
        F: Fn(kube::Client) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<bool>>,
    {
        let rt = Self::runtime()?;
        let mut last_error = String::new();
        loop {
            self.check_alive()?;
            let outcome = rt.block_on(async {
                let client = self.client().await?;
                ready(client).await
            });
            match outcome {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => last_error = format!("{e:#}"),
            }
            if started.elapsed() > START_TIMEOUT {
                bail!(
                    "timed out after {START_TIMEOUT:?} waiting for {what} (last error: {last_error}; logs in {})",
                    self.endpoints.dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn wait_ready(&mut self, started: Instant) -> anyhow::Result<()> {
        // The root CA publisher and the service-account controller have both run once the
        // `default` namespace has its `kube-root-ca.crt` ConfigMap and `default` ServiceAccount;
        // both need a ready API server with its RBAC bootstrapped.
        self.wait_until(
            started,
            "the API server and controllers",
            |client| async move {
                use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
                let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "default");
                let sas: kube::Api<ServiceAccount> = kube::Api::namespaced(client, "default");
                Ok(cms.get_opt("kube-root-ca.crt").await?.is_some()
                    && sas.get_opt("default").await?.is_some())
            },
        )
    }

    /// Applies every CRD in the YAML files of `dirs` (server-side) and waits until each is
    /// established.
    pub fn install_crds(&mut self, dirs: &[PathBuf]) -> anyhow::Result<()> {
        self.install_crd_list(&read_crds(dirs)?)
    }

    /// Applies `crds` (server-side) and waits until each is established.
    pub fn install_crd_list(&mut self, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
        let rt = Self::runtime()?;
        rt.block_on(async { apply_crds(&self.client().await?, crds).await })
    }

    /// Stops every process (SIGTERM, then SIGKILL after five seconds).
    pub fn stop(&mut self) {
        let mut processes = self.processes();
        for (_, child) in processes.iter_mut().rev() {
            terminate(child);
        }
        processes.clear();
    }

    /// The processes, even if a panic elsewhere poisoned their lock.
    fn processes(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, Child)>> {
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, name: &'static str, child: Child) {
        self.processes().push((name, child));
    }

    /// The process id of `name`.
    fn pid_of(&self, name: &str) -> anyhow::Result<nix::unistd::Pid> {
        let processes = self.processes();
        let (_, child) = processes
            .iter()
            .find(|(n, _)| *n == name)
            .with_context(|| format!("no {name} process"))?;
        Ok(nix::unistd::Pid::from_raw(i32::try_from(child.id())?))
    }

    /// A fault (issue 19): kills the API server with SIGKILL, as a crashed or restarted node
    /// would, and starts it again at once on the same port, with the same certificates and
    /// etcd. It returns as soon as the new process runs; [`ControlPlane::wait_api_ready`] waits
    /// until it serves again. Clients see refused connections and broken watches meanwhile.
    pub fn restart_api_server(&self) -> anyhow::Result<()> {
        let mut processes = self.processes();
        let slot = processes
            .iter_mut()
            .find(|(n, _)| *n == "kube-apiserver")
            .context("no kube-apiserver process")?;
        let _ = slot.1.kill();
        let _ = slot.1.wait();
        let (binary, args) = &self.api_server;
        slot.1 = spawn(&self.endpoints.dir, "kube-apiserver", binary, args)?;
        Ok(())
    }

    /// Polls the API server's `/readyz` until it answers `ok`, for at most `timeout`.
    pub async fn wait_api_ready(&self, timeout: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut last_error = String::new();
        while started.elapsed() < timeout {
            let ready = async {
                let client = self.client().await?;
                let req = http::Request::get("/readyz").body(Vec::new())?;
                anyhow::Ok(client.request_text(req).await? == "ok")
            };
            match ready.await {
                Ok(true) => return Ok(started.elapsed()),
                Ok(false) => {}
                Err(e) => last_error = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("the API server was not ready within {timeout:?} (last error: {last_error})")
    }

    /// A fault (issue 19): stops etcd with SIGSTOP, so every API request that reaches it hangs,
    /// until [`ControlPlane::resume_etcd`].
    pub fn pause_etcd(&self) -> anyhow::Result<()> {
        nix::sys::signal::kill(self.pid_of("etcd")?, nix::sys::signal::Signal::SIGSTOP)?;
        Ok(())
    }

    /// Lets a paused etcd run again (SIGCONT).
    pub fn resume_etcd(&self) -> anyhow::Result<()> {
        nix::sys::signal::kill(self.pid_of("etcd")?, nix::sys::signal::Signal::SIGCONT)?;
        Ok(())
    }
}

/// Stops a helper process: SIGTERM, then SIGKILL after five seconds.
pub fn terminate(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Applies `crds` server-side and waits (two minutes at most) until each is established.
pub async fn apply_crds(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
) -> anyhow::Result<()> {
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let params = kube::api::PatchParams::apply("captf-testenv").force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &kube::api::Patch::Apply(crd))
            .await
            .with_context(|| format!("installing CRD {name}"))?;
    }
    let deadline = Instant::now() + START_TIMEOUT;
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            if established(&api.get(&name).await?) {
                break;
            }
            if Instant::now() > deadline {
                bail!("CRD {name} was not established after {START_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Every CRD in the YAML files of `dirs`, file by file in name order.
pub fn read_crds(dirs: &[PathBuf]) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut crds: Vec<CustomResourceDefinition> = Vec::new();
    for dir in dirs {
        for file in yaml_files(dir)? {
            let text = std::fs::read_to_string(&file)?;
            let docs: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text)
                .with_context(|| format!("parsing {}", file.display()))?;
            crds.extend(docs);
        }
    }
    Ok(crds)
}

/// The `.yaml` and `.yml` files directly in `dir`, sorted by name.
pub fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// Whether a CRD's `Established` condition is true (its kind is served).
pub fn established(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// A kube client from a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}
