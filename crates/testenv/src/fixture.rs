//! `captf-testenv fixture ...`: small behaviours test containers need and that no shell-less
//! image has (report who and where it runs, wait for SIGTERM, exit with a code and a termination
//! message). The fixture image (see [`crate::image::fixture_image`]) ships this binary as
//! `/fixture` with the shared libraries it needs.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// `captf-testenv fixture` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum FixtureCommand {
    /// Print (and write to `--out`) a JSON report of the process: PID, user, groups, working
    /// directory, environment, hostname, whether `/` and `--check-writable` paths are writable,
    /// and the contents of `--read` files.
    Probe {
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long = "check-writable")]
        check_writable: Vec<PathBuf>,
        #[arg(long = "read")]
        read: Vec<PathBuf>,
    },
    /// Wait for SIGTERM (or SIGINT); then write `--marker`, a termination message, and exit with
    /// `--exit-code`. With `--ignore-sigterm` it keeps waiting (to be SIGKILLed).
    WaitSignal {
        #[arg(long)]
        marker: Option<PathBuf>,
        #[arg(long, default_value_t = 42)]
        exit_code: i32,
        #[arg(long)]
        ignore_sigterm: bool,
    },
    /// Write `--message` to the termination message file and stdout, then exit with `--code`.
    Exit {
        #[arg(long, default_value_t = 0)]
        code: i32,
        #[arg(long, default_value = "")]
        message: String,
        #[arg(long, default_value = "/dev/termination-log")]
        termination_log: PathBuf,
    },
    /// Wait until the file `--path` holds `--content` (exit 0), or `--timeout` seconds pass
    /// (exit 1).
    WaitFile {
        #[arg(long)]
        path: PathBuf,
        #[arg(long)]
        content: String,
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Exit 1 and create `--marker` when it does not exist; exit 0 when it does (a container
    /// that fails once, then succeeds on restart).
    FailOnce {
        #[arg(long)]
        marker: PathBuf,
    },
    /// Sleep for `--seconds`.
    Sleep {
        #[arg(long)]
        seconds: u64,
    },
    /// Serve HTTP on `0.0.0.0:--port` until killed: every request gets `200 OK` and the body
    /// `<--body> <hostname>` (a pod on the pod network, behind a Service).
    ServeHttp {
        #[arg(long, default_value_t = 8080)]
        port: u16,
        #[arg(long, default_value = "hello")]
        body: String,
    },
    /// Ask the API server for its version the way in-cluster clients do (`KUBERNETES_SERVICE_HOST`
    /// and `_PORT`, the service-account token and CA), print it, and exit 0; exit 1 on failure.
    ApiVersion,
}

#[derive(Debug, Serialize)]
struct Probe {
    pid: u32,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    cwd: String,
    hostname: String,
    env: std::collections::BTreeMap<String, String>,
    root_writable: bool,
    writable: std::collections::BTreeMap<String, bool>,
    files: std::collections::BTreeMap<String, Option<String>>,
}

fn writable(dir: &Path) -> bool {
    let p = dir.join(format!(".captf-probe-{}", std::process::id()));
    let ok = std::fs::write(&p, b"x").is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

/// Runs a fixture command and returns the process exit code.
pub fn run(cmd: &FixtureCommand) -> i32 {
    match cmd {
        FixtureCommand::Probe {
            out,
            check_writable,
            read,
        } => {
            let probe = Probe {
                pid: std::process::id(),
                uid: nix::unistd::getuid().as_raw(),
                gid: nix::unistd::getgid().as_raw(),
                groups: nix::unistd::getgroups()
                    .unwrap_or_default()
                    .into_iter()
                    .map(nix::unistd::Gid::as_raw)
                    .collect(),
                cwd: std::env::current_dir()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                hostname: nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                env: std::env::vars().collect(),
                root_writable: writable(Path::new("/")),
                writable: check_writable
                    .iter()
                    .map(|p| (p.display().to_string(), writable(p)))
                    .collect(),
                files: read
                    .iter()
                    .map(|p| (p.display().to_string(), std::fs::read_to_string(p).ok()))
                    .collect(),
            };
            let json = serde_json::to_string_pretty(&probe).unwrap_or_default();
            println!("{json}");
            if let Some(out) = out
                && let Err(e) = std::fs::write(out, &json)
            {
                eprintln!("writing {}: {e}", out.display());
                return 1;
            }
            0
        }
        FixtureCommand::WaitSignal {
            marker,
            exit_code,
            ignore_sigterm,
        } => wait_signal(marker.as_deref(), *exit_code, *ignore_sigterm),
        FixtureCommand::Exit {
            code,
            message,
            termination_log,
        } => {
            println!("{message}");
            let _ = std::fs::write(termination_log, message);
            *code
        }
        FixtureCommand::WaitFile {
            path,
            content,
            timeout,
        } => {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(*timeout);
            loop {
                let now = std::fs::read_to_string(path).unwrap_or_default();
                if now == *content {
                    println!("{} holds {content:?}", path.display());
                    return 0;
                }
                if std::time::Instant::now() > deadline {
                    println!("{} still holds {now:?}", path.display());
                    return 1;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        FixtureCommand::FailOnce { marker } => {
            if marker.exists() {
                println!("second run: success");
                0
            } else {
                println!("first run: failing");
                let _ = std::fs::write(marker, b"failed once");
                1
            }
        }
        FixtureCommand::Sleep { seconds } => {
            std::thread::sleep(std::time::Duration::from_secs(*seconds));
            0
        }
        FixtureCommand::ServeHttp { port, body } => serve_http(*port, body),
        FixtureCommand::ApiVersion => api_version(),
    }
}

fn serve_http(port: u16, body: &str) -> i32 {
    use std::io::Read as _;
    let listener = match std::net::TcpListener::bind(("0.0.0.0", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("listening on port {port}: {e}");
            return 1;
        }
    };
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let reply = format!("{body} {host}");
    println!("serving HTTP on port {port}");
    let _ = std::io::stdout().flush();
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf);
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
            reply.len()
        );
    }
    0
}

fn api_version() -> i32 {
    let Some(rt) = runtime() else { return 1 };
    let _ = rustls::crypto::ring::default_provider().install_default();
    rt.block_on(async {
        let result = async {
            let config = kube::Config::incluster()?;
            let client = kube::Client::try_from(config)?;
            anyhow::Ok(client.apiserver_version().await?)
        }
        .await;
        match result {
            Ok(v) => {
                println!("API server {}", v.git_version);
                0
            }
            Err(e) => {
                println!("API server unreachable: {e:#}");
                1
            }
        }
    })
}

/// A current-thread tokio runtime, or `None` after saying why there is none.
fn runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| eprintln!("runtime: {e}"))
        .ok()
}

fn wait_signal(marker: Option<&Path>, exit_code: i32, ignore_sigterm: bool) -> i32 {
    let Some(rt) = runtime() else { return 1 };
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            eprintln!("installing signal handlers failed");
            return 1;
        };
        println!("waiting for SIGTERM (pid {})", std::process::id());
        let _ = std::io::stdout().flush();
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            println!("received {name}");
            let _ = std::io::stdout().flush();
            if ignore_sigterm {
                continue;
            }
            if let Some(m) = marker {
                let _ = std::fs::write(m, name);
            }
            let _ = std::fs::write("/dev/termination-log", format!("received {name}"));
            return exit_code;
        }
    })
}
