//! The command line: `runner copy <dest>`, `runner run ...`, `runner version`, and the global
//! logging flags (Runner CLI reference; INTERFACE-FACTS §5). Usage errors exit 2 (clap's own
//! exit code for a bad flag, an unknown operation or an extra argument).

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use contract::web_identity::{Aws, Azure, Gcp, WebIdentity};

use crate::duration;
use crate::result::{ErrorDoc, ErrorKind, ImageInfo, ResultDocument, RuntimeInfo};

/// The exit code of a run whose steps all succeeded (or whose apply had nothing to do).
pub const EXIT_OK: i32 = 0;
/// The exit code of a failed, interrupted, blocked or plan-changed run (or the failing step's own
/// code when that is higher).
pub const EXIT_FAILURE: i32 = 1;
/// The exit code of a usage error.
pub const EXIT_USAGE: i32 = 2;

/// The CAPTF runner.
#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version,
    about = "The CAPTF runner: the Job entrypoint that runs a module image's runtime",
    // A repeated single-valued flag takes its last value, as Go flags do.
    args_override_self = true
)]
pub struct Cli {
    /// Logging flags, accepted by every subcommand.
    #[command(flatten)]
    pub logging: LoggingFlags,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Copy this binary to DEST with mode 0755 (the Job's init container).
    Copy {
        /// Where to write the copy.
        dest: PathBuf,
    },
    /// Run one operation of a module image's runtime (the Job's main container).
    Run(Box<RunArgs>),
    /// Print the version and exit.
    Version,
}

/// The output format of the runner's own log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `key=value` text lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The logging flags the manager also takes. The runner writes its own lines to stderr,
/// unbuffered; the buffering and stream-splitting flags are accepted and have no effect.
#[derive(Debug, Args)]
pub struct LoggingFlags {
    /// Log format: text or json.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub logging_format: LogFormat,
    /// Log verbosity: 0 logs progress, 1-3 add detail, 4 and above trace.
    #[arg(short = 'v', long = "v", global = true, default_value_t = 0)]
    pub verbosity: u8,
    /// Per-module verbosity (accepted; the runner has one verbosity).
    #[arg(long, global = true, default_value = "")]
    pub vmodule: String,
    /// Feature gates (accepted; the runner has none).
    #[arg(long, global = true, default_value = "")]
    pub feature_gates: String,
    /// Maximum time between log flushes (accepted; every line is written at once).
    #[arg(long, global = true, default_value = "5s", value_parser = duration::parse)]
    pub log_flush_frequency: Duration,
    /// JSON info-stream buffer size (accepted; no effect).
    #[arg(long, global = true, default_value = "0")]
    pub log_json_info_buffer_size: String,
    /// Split JSON errors and info onto stderr and stdout (accepted; no effect).
    #[arg(long, global = true, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = ArgAction::Set)]
    pub log_json_split_stream: bool,
    /// Text info-stream buffer size (accepted; no effect).
    #[arg(long, global = true, default_value = "0")]
    pub log_text_info_buffer_size: String,
    /// Split text errors and info onto stderr and stdout (accepted; no effect).
    #[arg(long, global = true, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = ArgAction::Set)]
    pub log_text_split_stream: bool,
}

/// An operation of `runner run --op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Op {
    /// init, validate, plan, [show -json], apply of the saved plan.
    Apply,
    /// init, destroy.
    Destroy,
    /// init, apply -refresh-only.
    Refresh,
    /// init, apply -refresh-only, plan -refresh=false, [show -json].
    Drift,
    /// init, state push -force, state list.
    Restore,
    /// init, validate, plan, [show -json]; applies nothing.
    Plan,
}

impl Op {
    /// The operation's name (Job label, result document `op`).
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Apply => "apply",
            Op::Destroy => "destroy",
            Op::Refresh => "refresh",
            Op::Drift => "drift",
            Op::Restore => "restore",
            Op::Plan => "plan",
        }
    }
}

/// The object the runner posts events on: `<apiVersion>/<kind>/<namespace>/<name>/<uid>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventObject {
    /// `infrastructure.cluster.x-k8s.io/v1alpha1` (or `v1` for a core kind).
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The UID.
    pub uid: String,
}

/// Parses `--event-object`.
pub fn parse_event_object(value: &str) -> Result<EventObject, String> {
    let parts: Vec<&str> = value.split('/').collect();
    let usage = || format!("{value:?} is not <apiVersion>/<kind>/<namespace>/<name>/<uid>");
    if parts.len() < 5 || parts.len() > 6 || parts.iter().any(|p| p.is_empty()) {
        return Err(usage());
    }
    let n = parts.len();
    Ok(EventObject {
        api_version: parts[..n - 4].join("/"),
        kind: parts[n - 4].to_owned(),
        namespace: parts[n - 3].to_owned(),
        name: parts[n - 2].to_owned(),
        uid: parts[n - 1].to_owned(),
    })
}

/// The flags of `runner run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The operation: apply, destroy, refresh, drift, restore or plan.
    #[arg(long, value_enum)]
    pub op: Op,
    /// The runtime command, one element per flag (default: /captf/runtime).
    #[arg(long = "bin", action = ArgAction::Append)]
    pub bin: Vec<String>,
    /// The per-run Secret mount: main.tf.json, terraform.tfvars.json, restore/<i>.
    #[arg(long, default_value = "/captf/config")]
    pub config: PathBuf,
    /// The writable work directory; the generated root is <workdir>/root.
    #[arg(long, default_value = "/captf/work")]
    pub workdir: PathBuf,
    /// The module directory of the image.
    #[arg(long, default_value = "/captf/module")]
    pub module: PathBuf,
    /// The image's provider mirror, used when it exists.
    #[arg(long, default_value = "/captf/providers")]
    pub providers: PathBuf,
    /// The identity's credential mount (one file per key); its values are redacted from failure
    /// summaries. Missing when the object has no identity.
    #[arg(long, default_value = "/var/run/captf/credentials")]
    pub credentials: PathBuf,
    /// A `key=value` for init's -backend-config; repeatable.
    #[arg(long = "backend-config", action = ArgAction::Append)]
    pub backend_config: Vec<String>,
    /// The inputs hash this Job renders.
    #[arg(long, default_value = "")]
    pub inputs_hash: String,
    /// How long init, plan, apply, destroy and state push wait for the state lock.
    #[arg(long, default_value = "5m0s", value_parser = duration::parse)]
    pub lock_timeout: Duration,
    /// How long an interrupted step may take to stop before it is killed.
    #[arg(long, default_value = "1m0s", value_parser = duration::parse)]
    pub stop_timeout: Duration,
    /// A stale lock ID to force-unlock right after init.
    #[arg(long, default_value = "")]
    pub force_unlock: String,
    /// Stop an apply whose plan deletes or replaces a resource, unless --allow-deletes-hash
    /// equals --inputs-hash.
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = ArgAction::Set)]
    pub guard_deletes: bool,
    /// The inputs hash approved for a destructive plan.
    #[arg(long, default_value = "")]
    pub allow_deletes_hash: String,
    /// Apply only if the new plan's hash equals this approved plan hash.
    #[arg(long, default_value = "")]
    pub expect_plan: String,
    /// Store the plan this run makes, rendered as text (`show -no-color`, sensitive values
    /// redacted as the runtime redacts them), in this Secret; an apply that succeeds deletes it
    /// (Plan Approval, "Reading the plan").
    #[arg(long, default_value = "")]
    pub plan_text_secret: String,
    /// The object the plan-text Secret belongs to: <apiVersion>/<kind>/<namespace>/<name>/<uid>.
    #[arg(long, default_value = "")]
    pub plan_text_owner: String,
    /// Keyless identity: the projected ServiceAccount token file; the cloud flags below need it.
    /// Its content is redacted like a credential's.
    #[arg(long, default_value = "")]
    pub web_identity_token: String,
    /// Keyless identity, AWS: the role to assume (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE).
    #[arg(long, default_value = "")]
    pub aws_role_arn: String,
    /// Keyless identity, AWS: the session name (AWS_ROLE_SESSION_NAME).
    #[arg(long, default_value = "")]
    pub aws_role_session_name: String,
    /// Keyless identity, Azure: the application (client) ID; needs --azure-tenant-id.
    #[arg(long, default_value = "")]
    pub azure_client_id: String,
    /// Keyless identity, Azure: the directory (tenant) ID; needs --azure-client-id.
    #[arg(long, default_value = "")]
    pub azure_tenant_id: String,
    /// Keyless identity, Azure: the Microsoft Entra authority (AZURE_AUTHORITY_HOST).
    #[arg(long, default_value = "")]
    pub azure_authority_host: String,
    /// Keyless identity, Google Cloud: the workload identity pool provider's resource name.
    #[arg(long, default_value = "")]
    pub gcp_workload_identity_provider: String,
    /// Keyless identity, Google Cloud: a service account to impersonate after the exchange.
    #[arg(long, default_value = "")]
    pub gcp_service_account: String,
    /// Restore: the number of backup chunks under <config>/restore.
    #[arg(long, default_value_t = 0)]
    pub restore_chunks: u32,
    /// Restore: the backup's managed-resource count; non-zero requires a non-empty state list.
    #[arg(long, default_value_t = 0)]
    pub restore_resources: u64,
    /// The source image reference, echoed into the result.
    #[arg(long, default_value = "")]
    pub image: String,
    /// The object to post events on: <apiVersion>/<kind>/<namespace>/<name>/<uid>.
    #[arg(long, default_value = "")]
    pub event_object: String,
    /// The Job the events relate to.
    #[arg(long, default_value = "")]
    pub job_name: String,
    /// Where the result document is written (the termination message).
    #[arg(long, default_value = "/dev/termination-log")]
    pub result: PathBuf,
    /// Post events with this kubeconfig instead of the in-cluster service account (for running
    /// the runner outside a pod).
    #[arg(long, hide = true)]
    pub events_kubeconfig: Option<PathBuf>,
}

impl RunArgs {
    /// The runtime command: `--bin` values, or `/captf/runtime`.
    pub fn command(&self) -> Vec<String> {
        if self.bin.is_empty() {
            vec!["/captf/runtime".to_owned()]
        } else {
            self.bin.clone()
        }
    }

    /// The keyless identity the flags describe, `None` without `--web-identity-token`. An error
    /// names the flag that breaks a rule: a cloud flag needs `--web-identity-token`;
    /// `--azure-client-id` and `--azure-tenant-id` go together; `--aws-role-session-name`,
    /// `--azure-authority-host` and `--gcp-service-account` need their cloud's main flag.
    pub fn web_identity(&self) -> Result<Option<WebIdentity>, String> {
        let given = |v: &str| !v.is_empty();
        let needs = |flag: &str, other: &str| format!("--{flag} needs --{other}");
        let cloud_flags = [
            ("aws-role-arn", &self.aws_role_arn),
            ("aws-role-session-name", &self.aws_role_session_name),
            ("azure-client-id", &self.azure_client_id),
            ("azure-tenant-id", &self.azure_tenant_id),
            ("azure-authority-host", &self.azure_authority_host),
            (
                "gcp-workload-identity-provider",
                &self.gcp_workload_identity_provider,
            ),
            ("gcp-service-account", &self.gcp_service_account),
        ];
        if !given(&self.web_identity_token) {
            return match cloud_flags.iter().find(|(_, value)| given(value)) {
                Some((flag, _)) => Err(needs(flag, "web-identity-token")),
                None => Ok(None),
            };
        }
        if given(&self.aws_role_session_name) && !given(&self.aws_role_arn) {
            return Err(needs("aws-role-session-name", "aws-role-arn"));
        }
        if given(&self.azure_client_id) != given(&self.azure_tenant_id) {
            return Err(
                "--azure-client-id and --azure-tenant-id go together: set both or neither"
                    .to_owned(),
            );
        }
        if given(&self.azure_authority_host) && !given(&self.azure_client_id) {
            return Err(needs("azure-authority-host", "azure-client-id"));
        }
        if given(&self.gcp_service_account) && !given(&self.gcp_workload_identity_provider) {
            return Err(needs(
                "gcp-service-account",
                "gcp-workload-identity-provider",
            ));
        }
        let optional = |v: &str| Some(v.to_owned()).filter(|v| given(v));
        Ok(Some(WebIdentity {
            token_file: self.web_identity_token.clone(),
            aws: given(&self.aws_role_arn).then(|| Aws {
                role_arn: self.aws_role_arn.clone(),
                role_session_name: optional(&self.aws_role_session_name),
            }),
            azure: given(&self.azure_client_id).then(|| Azure {
                client_id: self.azure_client_id.clone(),
                tenant_id: self.azure_tenant_id.clone(),
                authority_host: optional(&self.azure_authority_host),
            }),
            gcp: given(&self.gcp_workload_identity_provider).then(|| Gcp {
                workload_identity_provider: self.gcp_workload_identity_provider.clone(),
                service_account_email: optional(&self.gcp_service_account),
            }),
        }))
    }

    /// The event object, when one was given (an empty flag value means none).
    pub fn event_object(&self) -> Result<Option<EventObject>, String> {
        if self.event_object.is_empty() {
            Ok(None)
        } else {
            parse_event_object(&self.event_object).map(Some)
        }
    }
}

/// Parses the command line and runs it; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version exit 0, usage errors 2.
            let code = e.exit_code();
            let _ = e.print();
            return code;
        }
    };
    crate::logging::init(&cli.logging);
    match cli.command {
        Command::Version => {
            println!("runner {}", env!("CARGO_PKG_VERSION"));
            EXIT_OK
        }
        Command::Copy { dest } => match crate::copy::copy_self(&dest) {
            Ok(()) => {
                tracing::info!(dest = %dest.display(), "copied the runner");
                EXIT_OK
            }
            Err(e) => {
                tracing::error!(dest = %dest.display(), error = %e, "cannot copy the runner");
                EXIT_FAILURE
            }
        },
        Command::Run(args) => {
            let object = match args.event_object() {
                Ok(o) => o,
                Err(msg) => {
                    let reason = format!("invalid value for '--event-object': {msg}");
                    eprintln!("error: {reason}");
                    startup_failure(&args, &reason);
                    return EXIT_USAGE;
                }
            };
            if let Err(msg) = args.web_identity() {
                let reason = format!("invalid keyless-identity flags: {msg}");
                eprintln!("error: {reason}");
                startup_failure(&args, &reason);
                return EXIT_USAGE;
            }
            // One TLS crypto provider (ring); the event client gets explicit roots.
            let _ = rustls::crypto::ring::default_provider().install_default();
            match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let code = rt.block_on(crate::run::run(*args, object));
                    rt.shutdown_timeout(std::time::Duration::from_secs(1));
                    code
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the async runtime");
                    startup_failure(&args, &e.to_string());
                    EXIT_FAILURE
                }
            }
        }
    }
}

/// Writes a minimal result document when the runner cannot even start: an invalid flag value
/// found after parsing, or no async runtime.
fn startup_failure(args: &RunArgs, reason: &str) {
    let mut doc = ResultDocument::new(
        args.op.as_str(),
        ImageInfo {
            reference: args.image.clone(),
            providers_mirror: false,
        },
        RuntimeInfo {
            command: args.command(),
            version: String::new(),
        },
    );
    doc.error = Some(ErrorDoc {
        kind: ErrorKind::Step,
        step: Some("prepare".into()),
        summary: Some(crate::summary::cap(
            &format!("the runner could not start: {reason}"),
            crate::summary::MAX_SUMMARY_BYTES,
        )),
        exit_code: None,
    });
    let json = doc.to_json_capped();
    let _ = std::fs::write(&args.result, &json);
    println!("{json}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("runner").chain(args.iter().copied()))
    }

    fn run_args(args: &[&str]) -> RunArgs {
        match parse(args).map(|c| c.command) {
            Ok(Command::Run(run)) => *run,
            other => panic!("not a run: {other:?}"),
        }
    }

    #[test]
    fn run_defaults_are_the_documented_ones() {
        let run = run_args(&["run", "--op", "apply"]);
        assert_eq!(run.command(), vec!["/captf/runtime"]);
        assert_eq!(run.config, PathBuf::from("/captf/config"));
        assert_eq!(run.workdir, PathBuf::from("/captf/work"));
        assert_eq!(run.module, PathBuf::from("/captf/module"));
        assert_eq!(run.providers, PathBuf::from("/captf/providers"));
        assert_eq!(run.result, PathBuf::from("/dev/termination-log"));
        assert_eq!(run.lock_timeout, Duration::from_secs(300));
        assert_eq!(run.stop_timeout, Duration::from_secs(60));
        assert!(!run.guard_deletes);
        assert_eq!(run.restore_chunks, 0);
        assert_eq!(run.event_object(), Ok(None));
    }

    #[test]
    fn keyless_identity_flags_are_parsed_and_checked() {
        assert_eq!(run_args(&["run", "--op=apply"]).web_identity(), Ok(None));
        let token = "--web-identity-token=/var/run/captf/identity/token";
        let only_token = run_args(&["run", "--op=apply", token]).web_identity();
        assert_eq!(
            only_token,
            Ok(Some(WebIdentity {
                token_file: "/var/run/captf/identity/token".into(),
                ..WebIdentity::default()
            }))
        );
        let every = run_args(&[
            "run",
            "--op=apply",
            token,
            "--aws-role-arn=arn:aws:iam::123456789012:role/captf",
            "--azure-client-id=c",
            "--azure-tenant-id=t",
            "--gcp-workload-identity-provider=projects/1/locations/global/workloadIdentityPools/p/providers/k",
            "--gcp-service-account=sa@p.iam.gserviceaccount.com",
        ])
        .web_identity()
        .unwrap()
        .unwrap();
        assert_eq!(
            every.aws,
            Some(Aws {
                role_arn: "arn:aws:iam::123456789012:role/captf".into(),
                role_session_name: None,
            })
        );
        assert_eq!(
            every.azure.as_ref().map(|a| a.tenant_id.as_str()),
            Some("t")
        );
        assert_eq!(
            every.gcp.and_then(|g| g.service_account_email),
            Some("sa@p.iam.gserviceaccount.com".into())
        );
        for (flags, error) in [
            (
                vec!["--aws-role-arn=arn:aws:iam::123456789012:role/captf"],
                "--aws-role-arn needs --web-identity-token",
            ),
            (
                vec!["--azure-client-id=c", "--azure-tenant-id=t"],
                "--azure-client-id needs --web-identity-token",
            ),
            (
                vec!["--gcp-service-account=sa@p"],
                "--gcp-service-account needs --web-identity-token",
            ),
            (
                vec![token, "--aws-role-session-name=s"],
                "--aws-role-session-name needs --aws-role-arn",
            ),
            (
                vec![token, "--azure-client-id=c"],
                "--azure-client-id and --azure-tenant-id go together: set both or neither",
            ),
            (
                vec![token, "--azure-tenant-id=t"],
                "--azure-client-id and --azure-tenant-id go together: set both or neither",
            ),
            (
                vec![token, "--azure-authority-host=https://login.example/"],
                "--azure-authority-host needs --azure-client-id",
            ),
            (
                vec![token, "--gcp-service-account=sa@p"],
                "--gcp-service-account needs --gcp-workload-identity-provider",
            ),
        ] {
            let mut args = vec!["run", "--op=apply"];
            args.extend(flags);
            assert_eq!(run_args(&args).web_identity(), Err(error.to_owned()));
        }
    }

    #[test]
    fn run_takes_the_job_args_in_order() {
        let run = run_args(&[
            "run",
            "--op=apply",
            "--bin=/captf/runtime",
            "--image=registry.example/m:1",
            "--module=/captf/module",
            "--providers=/captf/providers",
            "--workdir=/captf/work",
            "--config=/captf/config",
            "--lock-timeout=300s",
            "--stop-timeout=570s",
            "--backend-config=secret_suffix=0123456789abcdef-c",
            "--backend-config=namespace=ns",
            "--backend-config=in_cluster_config=true",
            "--guard-deletes",
            "--inputs-hash=h2:abc",
            "--allow-deletes-hash=h2:abc",
            "--event-object=infrastructure.cluster.x-k8s.io/v1alpha1/TerraformCluster/ns/c1/uid-1",
            "--job-name=captf-c-c1-apply-a1-abcdef",
        ]);
        assert_eq!(run.op, Op::Apply);
        assert_eq!(run.stop_timeout, Duration::from_secs(570));
        assert_eq!(run.backend_config.len(), 3);
        assert!(run.guard_deletes);
        let obj = run.event_object().ok().flatten().map(|o| o.api_version);
        assert_eq!(
            obj.as_deref(),
            Some("infrastructure.cluster.x-k8s.io/v1alpha1")
        );
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let run = run_args(&[
            "run",
            "--op=apply",
            "--lock-timeout=300s",
            "--lock-timeout=1s",
        ]);
        assert_eq!(run.lock_timeout, Duration::from_secs(1));
        let run = run_args(&["run", "--op=apply", "--bin=a", "--bin=b"]);
        assert_eq!(run.command(), vec!["a", "b"]);
    }

    #[test]
    fn guard_deletes_takes_an_explicit_value() {
        assert!(!run_args(&["run", "--op=apply", "--guard-deletes=false"]).guard_deletes);
        assert!(run_args(&["run", "--op=apply", "--guard-deletes=true"]).guard_deletes);
    }

    #[test]
    fn usage_errors_exit_2() {
        for args in [
            &["run"][..],
            &["run", "--op", "bogus"],
            &["run", "--op", "apply", "extra"],
            &["run", "--op", "apply", "--no-such-flag"],
            &["run", "--op", "apply", "--lock-timeout", "5"],
            &["--logging-format", "xml", "version"],
            &["copy"],
        ] {
            let err = parse(args).expect_err("must be a usage error");
            assert_eq!(err.exit_code(), EXIT_USAGE, "{args:?}");
        }
    }

    #[test]
    fn event_object_core_and_grouped() {
        let core = parse_event_object("v1/ConfigMap/ns/n/u").expect("core");
        assert_eq!(core.api_version, "v1");
        assert_eq!(core.kind, "ConfigMap");
        let grouped =
            parse_event_object("infrastructure.cluster.x-k8s.io/v1alpha1/TerraformMachine/ns/m/u")
                .expect("grouped");
        assert_eq!(grouped.kind, "TerraformMachine");
        assert_eq!(grouped.namespace, "ns");
        assert_eq!(grouped.name, "m");
        assert_eq!(grouped.uid, "u");
        assert!(parse_event_object("a/b/c/d/e/f/g").is_err());
        assert!(parse_event_object("v1//ns/n/u").is_err());
    }

    #[test]
    fn logging_flags_are_global() {
        let cli = parse(&["run", "--op=plan", "-v", "4", "--logging-format=json"]).expect("ok");
        assert_eq!(cli.logging.verbosity, 4);
        assert_eq!(cli.logging.logging_format, LogFormat::Json);
        let cli = parse(&["--v=2", "version"]).expect("ok");
        assert_eq!(cli.logging.verbosity, 2);
    }
}
