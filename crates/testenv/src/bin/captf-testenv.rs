//! `captf-testenv`: the test environment's command line (ENGINEERING.md §2).
//!
//! - `up --dir D [--with-capi]` runs a whole environment in the foreground (pod network, control
//!   plane with CAPTF's and Cluster API's CRDs, registry with the runtime base images, process
//!   kubelet, and with `--with-capi` Cluster API's three managers) until SIGTERM or Ctrl-C;
//!   `down --dir D` stops the one running in `D`;
//! - `shim ... -- CMD ARGS...` runs one container process (see `testenv::shim`);
//! - `kubelet --kubeconfig K --node-name N --state-dir D [--node-label k=v]...
//!   [--register-with-taints k=v:Effect]...` runs the process kubelet;
//! - `fixture ...` (hidden) are the behaviours of the test fixture image.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Taint;

#[derive(Debug, Parser)]
#[command(
    name = "captf-testenv",
    about = "CAPTF's local test environment",
    version
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a whole test environment in the foreground until SIGTERM or Ctrl-C; writes `<dir>/env`
    /// (KUBECONFIG and CAPTF_REGISTRY, for `source`) and `<dir>/pid`.
    Up(UpArgs),
    /// Stop the environment `up` runs in `<dir>`.
    Down(DownArgs),
    /// Run a command in its own mount and PID namespace on an image root (a container).
    Shim(testenv::shim::ShimArgs),
    /// Run the process kubelet: register a Node and run the pods bound to it.
    Kubelet(KubeletArgs),
    /// Test fixture behaviours (the fixture image's entrypoint).
    #[command(subcommand, hide = true)]
    Fixture(testenv::fixture::FixtureCommand),
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// Directory for certificates, data, logs and the env file.
    #[arg(long)]
    dir: PathBuf,
    /// Also run Cluster API's core, kubeadm bootstrap and kubeadm control-plane managers (built
    /// by `make testbin`), installed as `clusterctl init` would: CRDs with conversion webhooks,
    /// URL-style admission webhooks, clusterctl's inventory.
    #[arg(long)]
    with_capi: bool,
}

#[derive(Debug, clap::Args)]
struct DownArgs {
    /// The directory given to `up`.
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Debug, clap::Args)]
struct KubeletArgs {
    /// Admin kubeconfig of the API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The Node's name.
    #[arg(long, default_value = "captf-testenv")]
    node_name: String,
    /// Images, volumes, scratch and logs.
    #[arg(long)]
    state_dir: PathBuf,
    /// The image cache (default: <state-dir>/images).
    #[arg(long)]
    image_dir: Option<PathBuf>,
    /// A label of the Node besides the default ones, `key=value` (repeatable).
    #[arg(long = "node-label", value_name = "KEY=VALUE", value_parser = parse_label)]
    node_labels: Vec<(String, String)>,
    /// A taint of the Node, `key=value:Effect` or `key:Effect` (repeatable; comma-separated
    /// lists too, as the kubelet's flag takes them).
    #[arg(
        long = "register-with-taints",
        value_name = "KEY[=VALUE]:EFFECT",
        value_delimiter = ',',
        value_parser = parse_taint
    )]
    taints: Vec<Taint>,
}

/// A `--node-label`: `key=value`.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not key=value"))?;
    if k.is_empty() {
        return Err(format!("{s:?} has an empty key"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// A `--register-with-taints` entry: `key=value:Effect` or `key:Effect`, the effect one of
/// `NoSchedule`, `PreferNoSchedule`, `NoExecute`.
fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not key[=value]:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "{s:?}: the effect must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (kv, None),
    };
    if key.is_empty() {
        return Err(format!("{s:?} has an empty key"));
    }
    Ok(Taint {
        key: key.to_owned(),
        value,
        effect: effect.to_owned(),
        time_added: None,
    })
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        // Both run before any thread exists: the shim forks.
        Command::Shim(args) => exit(testenv::shim::run(&args)),
        Command::Fixture(cmd) => exit(testenv::fixture::run(&cmd)),
        Command::Kubelet(args) => run_kubelet(args),
        Command::Up(args) => report(up(&args.dir, args.with_capi)),
        Command::Down(args) => report(down(&args.dir)),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("captf-testenv: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
}

/// Starts the control plane (on this, the main thread: its processes die with it), the registry
/// and the kubelet, then waits for SIGTERM or Ctrl-C and stops them in reverse order.
fn up(dir: &std::path::Path, with_capi: bool) -> anyhow::Result<()> {
    use anyhow::Context as _;
    init_logging();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let pid_file = dir.join("pid");
    if let Ok(pid) = std::fs::read_to_string(&pid_file)
        && std::path::Path::new("/proc").join(pid.trim()).exists()
    {
        anyhow::bail!(
            "an environment already runs in {} (pid {})",
            dir.display(),
            pid.trim()
        );
    }
    let started = std::time::Instant::now();
    let network = std::sync::Arc::new(testenv::podnet::PodNetwork::create()?);
    let mut cp = testenv::control_plane::ControlPlane::start_with(
        &dir.join("control-plane"),
        &[network.gateway()],
    )?;
    let kubeconfig = cp.endpoints().kubeconfig.clone();
    let rt = tokio::runtime::Runtime::new()?;
    let mut capi = None;
    if with_capi {
        let mut captf = testenv::control_plane::read_crds(&[
            testenv::env::repo_root().join("config/crd/bases")
        ])?;
        testenv::capi::label_captf_crds(&mut captf);
        cp.install_crd_list(&captf)?;
        capi = Some(rt.block_on(testenv::capi::ClusterApi::start(
            &kubeconfig,
            &dir.join("cluster-api"),
        ))?);
    } else {
        cp.install_crd_list(&testenv::env::crds()?)?;
    }
    let result = rt.block_on(async {
        let client = testenv::control_plane::client_for(&kubeconfig).await?;
        testenv::capi::register_provider(&client, &testenv::capi::CAPTF_PROVIDER, concat!("v", env!("CARGO_PKG_VERSION"))).await?;
        let registry = testenv::registry::Registry::start(dir.join("registry")).await?;
        let mut cfg = testenv::kubelet::KubeletConfig::new("captf-testenv", dir.join("kubelet"));
        cfg.shim_binary = Some(testenv::shim::binary_path()?);
        cfg.pod_network = Some(network.clone());
        let kubelet = testenv::kubelet::Kubelet::start_with_kubeconfig(&kubeconfig, cfg).await?;
        let mut env = format!(
            "export KUBECONFIG={}\nexport CAPTF_REGISTRY={}\n",
            kubeconfig.display(),
            registry.host()
        );
        // The runtime bases of the no-op module images (`make noop-images` reads both).
        match testenv::image::push_runtime_base_images(&registry.host()).await {
            Ok(b) => {
                use std::fmt::Write as _;
                let _ = write!(
                    env,
                    "export TOFU_IMAGE={}\nexport TERRAFORM_IMAGE={}\n",
                    b.tofu, b.terraform
                );
            }
            Err(e) => eprintln!("captf-testenv: no runtime base images in the registry: {e:#}"),
        }
        std::fs::write(dir.join("env"), env)?;
        std::fs::write(&pid_file, std::process::id().to_string())?;
        println!(
            "test environment up in {:.1}s: API server {}, registry {}{}\n  kubeconfig: {}\n  source {}/env   # sets KUBECONFIG, CAPTF_REGISTRY, TOFU_IMAGE and TERRAFORM_IMAGE\n  captf-testenv down --dir {}",
            started.elapsed().as_secs_f64(),
            cp.endpoints().server,
            registry.host(),
            if capi.is_some() { ", Cluster API's managers (logs in <dir>/cluster-api)" } else { "" },
            kubeconfig.display(),
            dir.display(),
            dir.display()
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        kubelet.shutdown().await;
        drop(registry);
        anyhow::Ok(())
    });
    drop(capi);
    cp.stop();
    let _ = std::fs::remove_file(&pid_file);
    result
}

/// Sends SIGTERM to the `up` running in `dir` and waits for it to exit.
fn down(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let pid_file = dir.join("pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("no environment runs in {} (no pid file)", dir.display()))?
        .trim()
        .parse()
        .context("the pid file does not hold a process id")?;
    let pid = nix::unistd::Pid::from_raw(pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
        .with_context(|| format!("signalling process {pid}"))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::path::Path::new("/proc").join(pid.to_string()).exists() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "process {pid} did not stop within 60 seconds"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    println!("test environment in {} stopped", dir.display());
    Ok(())
}

fn run_kubelet(args: KubeletArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("captf-testenv: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let mut cfg = testenv::kubelet::KubeletConfig::new(&args.node_name, &args.state_dir);
        cfg.image_dir = args.image_dir;
        cfg.labels = args.node_labels.into_iter().collect();
        cfg.taints = args.taints;
        let kubelet =
            match testenv::kubelet::Kubelet::start_with_kubeconfig(&args.kubeconfig, cfg).await {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("captf-testenv kubelet: {e:#}");
                    return ExitCode::FAILURE;
                }
            };
        let _ = tokio::signal::ctrl_c().await;
        kubelet.shutdown().await;
        ExitCode::SUCCESS
    })
}
