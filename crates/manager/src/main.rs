//! The CAPTF manager binary (INTERFACE-FACTS §4 "Manager flags"): reconciles TerraformCluster,
//! TerraformMachine and TerraformClusterIdentity, serves metrics and health, and holds a leader
//! Lease while it reconciles.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::parser::ValueSource;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use manager::runtime::context::{Context, Settings};
use manager::runtime::flags::{self, VersionFlag};
use manager::runtime::leader::{Election, Led, Timing};
use manager::runtime::metrics::Metrics;

// jemalloc with heap sampling from start-up, for `/debug/pprof/heap`.
serving::heap_profiled!();

/// Parses a Go-style duration (`30m`, `10m0s`, `15s`, `1h30m`, `500ms`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err("empty duration".to_owned());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        if digits.is_empty() {
            return Err(format!("invalid duration {s:?}"));
        }
        rest = &rest[digits.len()..];
        let unit: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
        rest = &rest[unit.len()..];
        let value: f64 = digits
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        let secs = match unit.as_str() {
            "h" => value * 3600.0,
            "m" => value * 60.0,
            "s" => value,
            "ms" => value / 1000.0,
            _ => return Err(format!("invalid unit {unit:?} in duration {s:?}")),
        };
        total += Duration::from_secs_f64(secs);
    }
    Ok(total)
}

#[derive(Debug, Parser)]
#[command(
    name = "manager",
    disable_version_flag = true,
    // A flag given twice takes its last value, as Go's flag packages do: the Cluster API
    // Operator appends `--leader-elect=true` after the Deployment's own `--leader-elect`.
    args_override_self = true,
    about = "The CAPTF manager: reconciles TerraformCluster, TerraformMachine and TerraformClusterIdentity"
)]
#[allow(clippy::struct_excessive_bools)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Path to a kubeconfig (out of cluster); in-cluster config or $KUBECONFIG otherwise.
    #[arg(long, global = true)]
    kubeconfig: Option<String>,
    /// Image of the Jobs' init container holding /runner; defaults to $CAPTF_MANAGER_IMAGE, else
    /// the image of the init container `runner-image` of the manager's own pod ($POD_NAME).
    #[arg(long, env = "CAPTF_MANAGER_IMAGE", default_value = "")]
    runner_image: String,
    /// Serialize a cluster's own apply/destroy/restore with its machines' (cluster write Lease).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    cluster_operation_gate: bool,
    /// Let runners post progress events on the objects they run for.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    runner_events: bool,
    /// Drift interval when neither the object nor its cluster's defaults set one.
    #[arg(long, default_value = "30m0s", value_parser = parse_duration)]
    drift_default_interval: Duration,
    /// State backups kept per object (0 takes none).
    #[arg(long, default_value_t = 5)]
    state_backups: u32,
    /// Watch one namespace only (identities are always cluster-wide).
    #[arg(long, default_value = "")]
    namespace: String,
    /// Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value>.
    #[arg(long, default_value = "")]
    watch_filter: String,
    /// Resync period: every object is reconciled at least this often.
    #[arg(long, default_value = "10m0s", value_parser = parse_duration)]
    sync_period: Duration,
    /// Parallel TerraformCluster reconciles.
    #[arg(long, default_value_t = 10)]
    terraformcluster_concurrency: u16,
    /// Parallel TerraformMachine reconciles.
    #[arg(long, default_value_t = 10)]
    terraformmachine_concurrency: u16,
    /// Parallel TerraformMachineTemplate reconciles.
    #[arg(long, default_value_t = 10)]
    terraformmachinetemplate_concurrency: u16,
    /// Parallel TerraformMachinePool reconciles.
    #[arg(long, default_value_t = 10)]
    terraformmachinepool_concurrency: u16,
    /// Reconcile only while holding the leader Lease (the shipped Deployment turns it on).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_elect: bool,
    /// Namespace of the leader Lease; defaults to $POD_NAMESPACE, else captf-system.
    #[arg(long, env = "POD_NAMESPACE", default_value = "captf-system")]
    leader_elect_namespace: String,
    /// The Cluster API Operator's name of the Lease; CAPTF's is fixed
    /// (controller-leader-election-captf): another value is ignored with a warning.
    #[arg(long)]
    leader_election_id: Option<String>,
    /// Leader Lease duration.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// Leader Lease renew deadline.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// Leader Lease retry period.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// Metrics endpoint address.
    #[arg(long, default_value = ":8443")]
    diagnostics_address: String,
    /// Serve metrics over plain HTTP without authentication.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    insecure_diagnostics: bool,
    /// Health and readiness endpoint address.
    #[arg(long, default_value = ":9440")]
    health_addr: String,
    /// Minimum TLS version of the metrics server.
    #[arg(long, default_value = "VersionTLS12")]
    tls_min_version: String,
    /// Allowed TLS cipher suites (Go names), comma separated.
    #[arg(long, value_delimiter = ',')]
    tls_cipher_suites: Vec<String>,
    /// Allowed TLS curves (Go CurveID numbers), comma separated.
    #[arg(long, value_delimiter = ',')]
    tls_curve_preferences: Vec<u16>,
    /// Log verbosity (0-5); 2 logs every Job the manager creates.
    #[arg(short = 'v', long = "v", default_value_t = 2)]
    verbosity: u8,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    logging_format: String,
    /// Per-module verbosity: module=N entries, comma separated (reconcile=4,state::backups=5).
    #[arg(long, default_value = "", value_parser = flags::parse_vmodule_flag)]
    vmodule: flags::Vmodule,
    /// Feature gates Gate=true|false, comma separated (component-base's; unknown gates are
    /// ignored with a warning).
    #[arg(long, default_value = "", value_parser = flags::parse_feature_gates)]
    feature_gates: flags::FeatureGates,
    /// Maximum time between log flushes (accepted; every line is written at once).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    log_flush_frequency: Duration,
    /// JSON info-stream buffer size (accepted; lines are not buffered).
    #[arg(long, default_value = "0")]
    log_json_info_buffer_size: String,
    /// Split JSON errors and info onto stderr and stdout (accepted; every line goes to stderr).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    log_json_split_stream: bool,
    /// Text info-stream buffer size (accepted; lines are not buffered).
    #[arg(long, default_value = "0")]
    log_text_info_buffer_size: String,
    /// Split text errors and info onto stderr and stdout (accepted; every line goes to stderr).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    log_text_split_stream: bool,
    /// Address of a plain-HTTP, unauthenticated /debug/pprof/ endpoint; empty serves none.
    #[arg(long, default_value = "")]
    profiler_address: String,
    /// The Cluster API Operator's name of --diagnostics-address (used when that is not given).
    #[arg(long)]
    metrics_bind_addr: Option<String>,
    /// The Cluster API Operator's concurrency: the default of the four per-kind concurrency
    /// flags.
    #[arg(long)]
    max_concurrent_reconciles: Option<u16>,
    /// Passed by the Cluster API Operator; the manager serves no webhook (the webhook
    /// Deployment does): ignored with a warning.
    #[arg(long)]
    webhook_port: Option<u16>,
    /// Passed by the Cluster API Operator; ignored with a warning, as --webhook-port.
    #[arg(long)]
    webhook_cert_dir: Option<String>,
    /// Passed by the Cluster API Operator; ignored with a warning, as --webhook-port.
    #[arg(long)]
    webhook_host: Option<String>,
    /// Print the version and exit; --version=raw prints the whole version record.
    #[arg(long = "version", value_name = "raw", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = flags::parse_version_flag)]
    print_version: Option<VersionFlag>,
}

/// The lines to log once logging is set up: what the command line asked that this manager
/// ignores or maps to its own flags.
fn reconcile_operator_flags(cli: &mut Cli, matches: &clap::ArgMatches) -> Vec<String> {
    let defaulted = |id: &str| matches.value_source(id) != Some(ValueSource::CommandLine);
    let mut notes = Vec::new();
    if let Some(addr) = cli.metrics_bind_addr.clone() {
        if defaulted("diagnostics_address") {
            cli.diagnostics_address = addr;
        } else {
            notes.push(format!(
                "--metrics-bind-addr={addr} ignored: --diagnostics-address is given"
            ));
        }
    }
    if let Some(n) = cli.max_concurrent_reconciles {
        for (id, field) in [
            (
                "terraformcluster_concurrency",
                &mut cli.terraformcluster_concurrency,
            ),
            (
                "terraformmachine_concurrency",
                &mut cli.terraformmachine_concurrency,
            ),
            (
                "terraformmachinetemplate_concurrency",
                &mut cli.terraformmachinetemplate_concurrency,
            ),
            (
                "terraformmachinepool_concurrency",
                &mut cli.terraformmachinepool_concurrency,
            ),
        ] {
            if defaulted(id) {
                *field = n;
            }
        }
    }
    if let Some(id) = &cli.leader_election_id
        && id != manager::runtime::leader::LEASE_NAME
    {
        notes.push(format!(
            "--leader-election-id={id} ignored: the leader Lease is always {}",
            manager::runtime::leader::LEASE_NAME
        ));
    }
    let webhook_flags = [
        ("webhook-port", cli.webhook_port.map(|p| p.to_string())),
        ("webhook-cert-dir", cli.webhook_cert_dir.clone()),
        ("webhook-host", cli.webhook_host.clone()),
    ];
    for (flag, value) in webhook_flags {
        if let Some(value) = value {
            notes.push(format!(
                "--{flag}={value} ignored: the manager serves no webhook (the webhook Deployment does)"
            ));
        }
    }
    if !cli.feature_gates.unknown.is_empty() {
        notes.push(format!(
            "--feature-gates: {} ignored: not a gate of this manager (it knows {})",
            cli.feature_gates.unknown.join(", "),
            flags::KNOWN_GATES.join(", ")
        ));
    }
    notes
}

/// Parses the command line (flag names with underscores too) and maps the Cluster API
/// Operator's flags onto ours; the notes are logged once logging is set up.
fn parse_cli<I: IntoIterator<Item = std::ffi::OsString>>(
    args: I,
) -> Result<(Cli, Vec<String>), clap::Error> {
    let matches = Cli::command().try_get_matches_from(flags::dashes_for_underscores(args))?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    let notes = reconcile_operator_flags(&mut cli, &matches);
    Ok((cli, notes))
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the version and exit.
    Version,
}

/// `--vmodule`'s directives, set once at start-up: every filter [`log_filter`] makes ends with
/// them, at start and after `PUT /debug/flags/v`.
static VMODULE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The log filter of a verbosity (`-v`, and `PUT /debug/flags/v` at run time), then `--vmodule`.
fn log_filter(verbosity: u8) -> tracing_subscriber::EnvFilter {
    let base = verbosity_directives(verbosity);
    match VMODULE.get().filter(|d| !d.is_empty()) {
        Some(modules) => tracing_subscriber::EnvFilter::new(format!("{base},{modules}")),
        None => tracing_subscriber::EnvFilter::new(base),
    }
}

/// The filter directives of a verbosity.
fn verbosity_directives(verbosity: u8) -> &'static str {
    match verbosity {
        0 => "warn",
        1 => "info,manager=info",
        2 => "info",
        // The log of each planned write (`captf::writes`) starts at 4.
        3 => "debug,captf::writes=info",
        4 => "debug",
        _ => "trace",
    }
}

fn init_logging(cli: &Cli) -> anyhow::Result<()> {
    let _ = VMODULE.set(flags::vmodule_directives(&cli.vmodule.0));
    serving::debug::init_logging(
        &cli.logging_format,
        cli.verbosity,
        log_filter(cli.verbosity),
        log_filter,
    )
}

async fn client(kubeconfig: Option<&str>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {path}"))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (cli, notes) = parse_cli(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match (cli.print_version, &cli.command) {
        (Some(VersionFlag::Raw), _) => {
            print!("{}", flags::version_record(env!("CARGO_PKG_VERSION")));
            return Ok(());
        }
        (Some(VersionFlag::Short), _) | (_, Some(Command::Version)) => {
            println!("{}", flags::version_line(env!("CARGO_PKG_VERSION")));
            return Ok(());
        }
        _ => {}
    }
    init_logging(&cli)?;
    for note in notes {
        tracing::warn!("{note}");
    }
    let client = client(cli.kubeconfig.as_deref()).await?;
    let pod_name = std::env::var("POD_NAME").ok();
    let pod_namespace =
        std::env::var("POD_NAMESPACE").unwrap_or_else(|_| cli.leader_elect_namespace.clone());
    let runner_image = manager::runtime::runner_image::resolve(
        &client,
        &cli.runner_image,
        &pod_namespace,
        pod_name.as_deref(),
    )
    .await?;
    tracing::info!(image = %runner_image, "runner image of the Jobs' init container");
    let instance = pod_name.unwrap_or_else(|| format!("captf-manager-{}", std::process::id()));
    let settings = Settings {
        runner_image,
        cluster_operation_gate: cli.cluster_operation_gate,
        runner_events: cli.runner_events,
        drift_default_interval: cli.drift_default_interval,
        state_backups: cli.state_backups,
        namespace: Some(cli.namespace.clone()).filter(|n| !n.is_empty()),
        watch_filter: Some(cli.watch_filter.clone()).filter(|n| !n.is_empty()),
        sync_period: cli.sync_period,
        cluster_concurrency: cli.terraformcluster_concurrency,
        machine_concurrency: cli.terraformmachine_concurrency,
        template_concurrency: cli.terraformmachinetemplate_concurrency,
        pool_concurrency: cli.terraformmachinepool_concurrency,
        instance: instance.clone(),
    };
    let metrics = Metrics::new();
    let ready = manager::runtime::diagnostics::Readiness::default();
    let diag = manager::runtime::diagnostics::DiagnosticsSettings {
        health_addr: cli.health_addr.clone(),
        diagnostics_addr: cli.diagnostics_address.clone(),
        insecure: cli.insecure_diagnostics,
        tls_min_version: cli.tls_min_version.clone(),
        cipher_suites: cli.tls_cipher_suites.clone(),
        curve_preferences: cli.tls_curve_preferences.clone(),
        profiler_addr: cli.profiler_address.clone(),
    };
    let servers = manager::runtime::diagnostics::serve(
        diag,
        metrics.clone(),
        ready.clone(),
        client.clone(),
        shutdown_signal(),
    );
    let servers = tokio::spawn(servers);

    // Ready as soon as the servers run, leader or not: a rolling update waits for the new pod's
    // readiness while the old one still holds the Lease.
    ready.set_ready();
    if cli.leader_elect {
        let timing = Timing {
            lease_duration: cli.leader_elect_lease_duration,
            renew_deadline: cli.leader_elect_renew_deadline,
            retry_period: cli.leader_elect_retry_period,
        };
        timing.validate().map_err(anyhow::Error::msg)?;
        let election = Election::new(cli.leader_elect_namespace.clone(), instance, timing);
        let reconcile = || {
            let ctx = Context::new(client.clone(), settings, metrics);
            manager::controller::run(ctx, shutdown_signal())
        };
        let led = Box::pin(election.lead(&client, reconcile, shutdown_signal())).await;
        if led == Led::Lost {
            bail!("lost the leader Lease; exiting so another manager takes over");
        }
    } else {
        let ctx = Context::new(client, settings, metrics);
        manager::controller::run(ctx, shutdown_signal()).await;
    }
    servers.abort();
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        let _ = ctrl_c.await;
        return;
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("30m0s").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn flags_parse_with_defaults() {
        let cli = Cli::try_parse_from(["manager", "--runner-image=r:1"]).unwrap();
        // Off unless asked, as the reference says; the shipped Deployment asks.
        assert!(!cli.leader_elect);
        assert!(cli.cluster_operation_gate);
        assert_eq!(cli.sync_period, Duration::from_secs(600));
        let cli = Cli::try_parse_from(["manager", "--leader-elect=false"]).unwrap();
        assert!(!cli.leader_elect);
        // The shipped Deployment passes the bare flag.
        let cli =
            Cli::try_parse_from(["manager", "--leader-elect", "--insecure-diagnostics"]).unwrap();
        assert!(cli.leader_elect && cli.insecure_diagnostics);
    }

    fn parsed(args: &[&str]) -> (Cli, Vec<String>) {
        parse_cli(args.iter().map(std::ffi::OsString::from)).unwrap()
    }

    /// The flags the Cluster API Operator passes to every provider's manager start it: mapped
    /// onto ours where they mean the same, else ignored with a note naming the flag.
    #[test]
    fn the_operators_flags_are_mapped_or_ignored_with_a_note() {
        let (cli, notes) = parsed(&[
            "manager",
            "--metrics-bind-addr=:8080",
            "--leader-election-id=captf-operator",
            "--max-concurrent-reconciles=3",
            "--terraformmachine-concurrency=7",
            "--webhook-port=9443",
            "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
            "--webhook-host=0.0.0.0",
            "--profiler-address=localhost:6060",
            "--feature-gates=MachinePool=true,ClusterTopology=true,ContextualLogging=false",
        ]);
        assert_eq!(cli.diagnostics_address, ":8080");
        assert_eq!(cli.terraformcluster_concurrency, 3);
        assert_eq!(cli.terraformmachine_concurrency, 7, "given itself, it wins");
        assert_eq!(cli.terraformmachinetemplate_concurrency, 3);
        assert_eq!(cli.terraformmachinepool_concurrency, 3);
        assert_eq!(cli.profiler_address, "localhost:6060");
        let notes = notes.join("\n");
        for flag in [
            "--leader-election-id=captf-operator",
            "--webhook-port=9443",
            "--webhook-cert-dir=",
            "--webhook-host=0.0.0.0",
            "MachinePool, ClusterTopology",
        ] {
            assert!(notes.contains(flag), "no note on {flag}: {notes}");
        }
        assert!(!notes.contains("ContextualLogging ignored"), "{notes}");

        // --diagnostics-address given itself wins over the Operator's name for it.
        let (cli, notes) = parsed(&[
            "manager",
            "--diagnostics-address=:9000",
            "--metrics_bind_addr=:8080",
        ]);
        assert_eq!(cli.diagnostics_address, ":9000");
        assert!(
            notes[0].contains("--diagnostics-address is given"),
            "{notes:?}"
        );
        // The Lease name itself is no note.
        let (_, notes) = parsed(&[
            "manager",
            "--leader-election-id=controller-leader-election-captf",
        ]);
        assert!(notes.is_empty(), "{notes:?}");
    }

    /// A flag given twice takes its last value, as with Go's flag packages: the Operator
    /// appends its `--leader-elect=…` and `--v=…` after the Deployment's own.
    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let (cli, _) = parsed(&[
            "manager",
            "--leader-elect",
            "--v=2",
            "--leader-elect=false",
            "--v=4",
        ]);
        assert!(!cli.leader_elect);
        assert_eq!(cli.verbosity, 4);
    }

    /// component-base's flag forms: underscores in names, logging flags, `--version=raw`.
    #[test]
    fn component_base_flags_are_accepted() {
        let (cli, _) = parsed(&[
            "manager",
            "--leader_elect",
            "--log_flush_frequency=10s",
            "--log-json-info-buffer-size=1Mi",
            "--log-json-split-stream",
            "--log-text-info-buffer-size=0",
            "--log-text-split-stream=false",
            "--vmodule=reconcile=4",
            "--version=raw",
        ]);
        assert!(cli.leader_elect);
        assert_eq!(cli.log_flush_frequency, Duration::from_secs(10));
        assert!(cli.log_json_split_stream && !cli.log_text_split_stream);
        assert_eq!(cli.vmodule.0.len(), 1);
        assert_eq!(cli.print_version, Some(VersionFlag::Raw));
        let (cli, _) = parsed(&["manager", "--version"]);
        assert_eq!(cli.print_version, Some(VersionFlag::Short));
        for bad in [
            &["manager", "--vmodule=recon*=4"][..],
            &["manager", "--feature-gates=MachinePool"],
            &["manager", "--version=json"],
        ] {
            let err = parse_cli(bad.iter().map(std::ffi::OsString::from)).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad:?}: {err}"
            );
        }
    }

    /// `--vmodule` raises one module's verbosity and keeps it over a run-time `-v` change.
    #[test]
    fn vmodule_raises_one_module() {
        use tracing_subscriber::prelude::*;
        let _ = VMODULE.set("manager::state=trace".to_owned());
        let subscriber = tracing_subscriber::registry().with(log_filter(2));
        tracing::subscriber::with_default(subscriber, || {
            assert!(tracing::enabled!(target: "manager::state::backups", tracing::Level::TRACE));
            assert!(!tracing::enabled!(target: "manager::reconcile", tracing::Level::DEBUG));
        });
    }

    /// Whether a debug line of the planned-writes log passes the filter of verbosity `v`.
    fn writes_logged(v: u8) -> bool {
        use tracing_subscriber::prelude::*;
        let subscriber = tracing_subscriber::registry().with(log_filter(v));
        tracing::subscriber::with_default(
            subscriber,
            || tracing::enabled!(target: "captf::writes", tracing::Level::DEBUG),
        )
    }

    /// Each planned write of a pass is logged from `-v=4`, not below (`-v=3` is debug without
    /// it).
    #[test]
    fn the_planned_writes_are_logged_from_verbosity_four() {
        assert_eq!(manager::reconcile::act::WRITES_TARGET, "captf::writes");
        assert!(!writes_logged(2));
        assert!(!writes_logged(3));
        assert!(writes_logged(4));
        assert!(writes_logged(6));
    }
}
