//! `webhook`: CAPTF's validating admission webhook for the seven Terraform* kinds, in its own
//! Deployment. See the library for what it validates and `docs/src/webhook.md` for deployment.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use webhook::cli::{Cli, Command, LogFormat, ServeArgs};
use webhook::lookups::KubeLookups;
use webhook::metrics::Metrics;
use webhook::server::{self, DiagnosticsAuth, Listeners, Settings};

// jemalloc with heap sampling from start-up, for `/debug/pprof/heap`.
serving::heap_profiled!();

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Version) = cli.command {
        println!("webhook {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    // One TLS crypto provider for the whole process (kube's client and our servers): ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Err(e) = init_logging(&cli.serve) {
        eprintln!("webhook: cannot start logging: {e:#}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.serve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "the webhook stopped");
            ExitCode::FAILURE
        }
    }
}

/// The log filter of a verbosity (`-v`, and `PUT /debug/flags/v` at run time).
fn log_filter(verbosity: u8) -> EnvFilter {
    EnvFilter::new(match verbosity {
        0..=3 => "info",
        4..=5 => "debug",
        _ => "trace",
    })
}

fn init_logging(args: &ServeArgs) -> anyhow::Result<()> {
    // RUST_LOG, when set, wins at start; `PUT /debug/flags/v` replaces it.
    let initial = EnvFilter::try_from_default_env().unwrap_or_else(|_| log_filter(args.verbosity));
    let format = match args.logging_format {
        LogFormat::Json => "json",
        LogFormat::Text => "text",
    };
    serving::debug::init_logging(format, args.verbosity, initial, log_filter)
}

async fn client(args: &ServeArgs) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let client = client(&args)
        .await
        .context("building the Kubernetes client")?;
    let listeners = Listeners::bind(
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, args.webhook_port)),
        args.health_addr,
        args.diagnostics_address,
    )?;
    let auth = if args.insecure_diagnostics {
        DiagnosticsAuth::Open
    } else {
        DiagnosticsAuth::Kubernetes(client.clone())
    };
    tracing::info!(
        port = args.webhook_port,
        cert = %args.cert_path().display(),
        "starting the admission webhook"
    );
    server::serve(
        listeners,
        Settings::from_args(&args),
        KubeLookups::new(client).with_manager_username(args.manager_service_account.clone()),
        auth,
        Metrics::new(),
        shutdown_signal(),
    )
    .await
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the webhook");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
