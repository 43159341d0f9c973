//! The `webhook` command line (INTERFACE-FACTS §4 "Webhooks" and "Diagnostics", on this binary).
//! Addresses are written the Go way (`:9440` listens on every interface; `0` turns a listener
//! off); durations as `10s`, `2m` or plain seconds.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
pub use serving::{Listen, TlsVersion, parse_listen};

/// The webhook binary.
#[derive(Debug, Parser)]
#[command(
    name = "webhook",
    version,
    // A flag given twice takes its last value, as Go's flag packages do (the Cluster API
    // Operator appends flags after a Deployment's own).
    args_override_self = true,
    about = "The CAPTF validating admission webhook for the seven Terraform* kinds"
)]
pub struct Cli {
    /// A subcommand; without one the webhook serves.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The serving flags.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version and exit.
    Version,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Flags of the serving webhook.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Directory holding the serving certificate and key (the cert-manager Secret's mount).
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs/")]
    pub webhook_cert_dir: PathBuf,
    /// Certificate file name inside --webhook-cert-dir.
    #[arg(long, default_value = "tls.crt")]
    pub webhook_cert_name: String,
    /// Key file name inside --webhook-cert-dir.
    #[arg(long, default_value = "tls.key")]
    pub webhook_key_name: String,
    /// Port the HTTPS admission server listens on, on every interface.
    #[arg(long, default_value_t = 9443)]
    pub webhook_port: u16,
    /// How often the certificate and key files are checked for rotation.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub webhook_cert_reload_interval: Duration,
    /// Address of the liveness (/healthz) and readiness (/readyz) endpoints; 0 turns them off.
    #[arg(long, default_value = ":9440", value_parser = parse_listen)]
    pub health_addr: Listen,
    /// Address of the metrics endpoint (/metrics); HTTPS with the serving certificate and
    /// Kubernetes authentication and authorization unless --insecure-diagnostics; 0 turns it off.
    #[arg(long, default_value = ":8443", value_parser = parse_listen)]
    pub diagnostics_address: Listen,
    /// Serve metrics over plain HTTP without authentication or authorization.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub insecure_diagnostics: bool,
    /// Lowest TLS version of the HTTPS listeners.
    #[arg(long, value_enum, default_value = "VersionTLS12")]
    pub tls_min_version: TlsVersion,
    /// TLS 1.2 cipher suites the HTTPS listeners allow, by their Go names, comma separated
    /// (empty: every suite this build supports). TLS 1.3 suites are always allowed, as in Go.
    #[arg(long, value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Key-exchange groups the HTTPS listeners allow, by Go CurveID number, in order of
    /// preference, comma separated (empty: every group this build supports).
    #[arg(long, value_delimiter = ',')]
    pub tls_curve_preferences: Vec<u16>,
    /// The manager's ServiceAccount, `<namespace>/<name>`: the only user that may write a
    /// TerraformMachine's `spec.providerID` the first time.
    #[arg(long, default_value = "captf-system/captf-controller-manager", value_parser = parse_service_account)]
    pub manager_service_account: String,
    /// Kubeconfig to reach the API server from outside a cluster (else in-cluster or $KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub logging_format: LogFormat,
    /// Log verbosity: 0-3 info, 4-5 debug, 6 and up trace (RUST_LOG overrides).
    #[arg(short = 'v', long = "v", default_value_t = 2)]
    pub verbosity: u8,
}

impl ServeArgs {
    /// The certificate file.
    pub fn cert_path(&self) -> PathBuf {
        self.webhook_cert_dir.join(&self.webhook_cert_name)
    }
    /// The key file.
    pub fn key_path(&self) -> PathBuf {
        self.webhook_cert_dir.join(&self.webhook_key_name)
    }
}

/// `<namespace>/<name>` of a ServiceAccount, as the user name it authenticates as.
pub fn parse_service_account(s: &str) -> Result<String, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(contract::names::service_account_username(ns, name))
        }
        _ => Err(format!(
            "{s:?} is not <namespace>/<name> of a ServiceAccount"
        )),
    }
}

/// Parses `10s`, `2m`, `1h`, `500ms` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration like 10s, 2m or 1h");
    let (number, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = number.parse().map_err(|_| bad())?;
    let d = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(bad()),
    };
    if d.is_zero() {
        return Err(format!("{s:?} must be more than zero"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_have_the_documented_defaults() {
        let cli = Cli::try_parse_from(["webhook"]).unwrap();
        let a = cli.serve;
        assert_eq!(
            a.cert_path(),
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs/tls.crt")
        );
        assert_eq!(
            a.key_path(),
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs/tls.key")
        );
        assert_eq!(a.webhook_port, 9443);
        assert_eq!(a.health_addr, Listen::At("0.0.0.0:9440".parse().unwrap()));
        assert_eq!(
            a.diagnostics_address,
            Listen::At("0.0.0.0:8443".parse().unwrap())
        );
        assert!(!a.insecure_diagnostics);
        assert_eq!(a.tls_min_version, TlsVersion::Tls12);
        assert_eq!(a.webhook_cert_reload_interval, Duration::from_secs(10));
    }

    /// A flag given twice takes its last value, as with Go's flag packages.
    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let cli =
            Cli::try_parse_from(["webhook", "--v=2", "--webhook-port=9443", "--v=4"]).unwrap();
        assert_eq!(cli.serve.verbosity, 4);
        assert_eq!(cli.serve.webhook_port, 9443);
    }

    #[test]
    fn flags_parse_the_go_spellings() {
        let cli = Cli::try_parse_from([
            "webhook",
            "--webhook-port=10443",
            "--diagnostics-address=127.0.0.1:8080",
            "--insecure-diagnostics=true",
            "--health-addr=0",
            "--tls-min-version=VersionTLS13",
            "--webhook-cert-reload-interval=2m",
            "--v=5",
        ])
        .unwrap();
        let a = cli.serve;
        assert_eq!(a.webhook_port, 10443);
        assert_eq!(
            a.diagnostics_address,
            Listen::At("127.0.0.1:8080".parse().unwrap())
        );
        assert!(a.insecure_diagnostics);
        assert_eq!(a.health_addr, Listen::Off);
        assert_eq!(a.tls_min_version, TlsVersion::Tls13);
        assert_eq!(a.webhook_cert_reload_interval, Duration::from_secs(120));
        assert_eq!(a.verbosity, 5);
        assert!(
            Cli::try_parse_from(["webhook", "--insecure-diagnostics"])
                .unwrap()
                .serve
                .insecure_diagnostics
        );
        assert!(matches!(
            Cli::try_parse_from(["webhook", "version"]).unwrap().command,
            Some(Command::Version)
        ));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5x").is_err());
    }
}
