//! One container process: the shim started with a container's arguments, its output appended to
//! the container's log file, its exit reported on a channel.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};

use crate::shim::{START_ERROR_EXIT_CODE, ShimArgs};

use super::status::now;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How a container process ended.
#[derive(Debug, Clone)]
pub(crate) struct Exit {
    pub name: String,
    pub code: i32,
    pub started_at: Time,
    pub finished_at: Time,
    /// Set when the command never ran (`StartError`).
    pub start_error: Option<String>,
}

/// A running container.
#[derive(Debug)]
pub(crate) struct Running {
    pub shim_pid: Pid,
    pub container_pid: Option<Pid>,
    pub started_at: Time,
    exited: tokio::sync::watch::Receiver<bool>,
}

impl Running {
    /// Sends `sig` to the container: through the shim (which forwards it to the container's PID
    /// 1), or for SIGKILL straight to the container's PID 1 and the shim.
    pub fn signal(&self, sig: Signal) {
        if *self.exited.borrow() {
            return;
        }
        if sig == Signal::SIGKILL {
            if let Some(pid) = self.container_pid {
                let _ = kill(pid, Signal::SIGKILL);
            }
            let _ = kill(self.shim_pid, Signal::SIGKILL);
        } else {
            let _ = kill(self.shim_pid, sig);
        }
    }
}

/// The files of one container run.
#[derive(Debug, Clone)]
pub(crate) struct RunFiles {
    pub dir: PathBuf,
    pub log: PathBuf,
}

impl RunFiles {
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("pid")
    }
    pub fn error_file(&self) -> PathBuf {
        self.dir.join("start-error")
    }
    pub fn termination_log(&self) -> PathBuf {
        self.dir.join("termination-log")
    }
    pub fn overlay(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
}

/// Starts the shim for `name`. Returns the running container, or the reason it could not start
/// (a start error is also sent as an [`Exit`]). The exit of a running container is sent on
/// `exits` when it happens.
pub(crate) async fn start(
    shim_binary: &Path,
    name: &str,
    args: &ShimArgs,
    files: &RunFiles,
    exits: mpsc::UnboundedSender<Exit>,
) -> anyhow::Result<Result<Running, String>> {
    if let Some(parent) = files.log.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&files.log)
        .with_context(|| format!("opening {}", files.log.display()))?;
    let mut cmd = Command::new(shim_binary);
    cmd.arg("shim")
        .args(args.to_args())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .env_clear();
    let mut child = crate::shim::spawn_tied(cmd)
        .with_context(|| format!("starting the shim {}", shim_binary.display()))?;
    let shim_pid = Pid::from_raw(child.id() as i32);
    let started_at = now();
    let (status_tx, mut status_rx) = oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let _ = status_tx.send(child.wait());
    });

    // Wait until the shim reports the command running (PID file) or exits.
    let pid_file = files.pid_file();
    let early_exit = loop {
        if std::fs::read_to_string(&pid_file).is_ok_and(|s| s.trim().parse::<i32>().is_ok()) {
            break None;
        }
        match status_rx.try_recv() {
            Ok(st) => break Some(st),
            Err(oneshot::error::TryRecvError::Empty) => {}
            Err(oneshot::error::TryRecvError::Closed) => {
                break Some(Err(std::io::Error::other("shim wait task failed")));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let code_of = |st: std::io::Result<std::process::ExitStatus>| -> i32 {
        use std::os::unix::process::ExitStatusExt as _;
        match st {
            Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)),
            Err(_) => START_ERROR_EXIT_CODE,
        }
    };
    if let Some(st) = early_exit {
        let code = code_of(st);
        let err = std::fs::read_to_string(files.error_file()).unwrap_or_default();
        if !err.is_empty() || !pid_file.exists() {
            let msg = if err.is_empty() {
                format!("the shim exited with {code} before starting the command")
            } else {
                err
            };
            return Ok(Err(msg));
        }
        // The command ran and finished before we saw its PID file.
        let exit = Exit {
            name: name.to_owned(),
            code,
            started_at: started_at.clone(),
            finished_at: now(),
            start_error: None,
        };
        let _ = exits.send(exit);
        let (_tx, exited) = tokio::sync::watch::channel(true);
        return Ok(Ok(Running {
            shim_pid,
            container_pid: None,
            started_at,
            exited,
        }));
    }
    let container_pid = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .map(Pid::from_raw);
    let (exited_tx, exited) = tokio::sync::watch::channel(false);
    let name = name.to_owned();
    let started = started_at.clone();
    tokio::spawn(async move {
        let st = status_rx
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("shim wait task failed")));
        let _ = exited_tx.send(true);
        let _ = exits.send(Exit {
            name,
            code: code_of(st),
            started_at: started,
            finished_at: now(),
            start_error: None,
        });
    });
    Ok(Ok(Running {
        shim_pid,
        container_pid,
        started_at,
        exited,
    }))
}

/// A [`Running`] for a container that never ran (its start error is already on the exit
/// channel): signals are no-ops.
pub(crate) fn exited_placeholder() -> Running {
    let (_tx, exited) = tokio::sync::watch::channel(true);
    Running {
        shim_pid: Pid::from_raw(0),
        container_pid: None,
        started_at: now(),
        exited,
    }
}

/// Kubelet limits: a termination message file is read up to 4096 bytes; the log fallback takes
/// the last 80 lines, up to 2048 bytes.
const MAX_MESSAGE: usize = 4096;
const MAX_LOG_LINES: usize = 80;
const MAX_LOG_BYTES: usize = 2048;

/// The termination message of an exited container, per `terminationMessagePolicy`.
pub(crate) fn termination_message(
    files: &RunFiles,
    policy: Option<&str>,
    exit_code: i32,
    log_offset: u64,
) -> Option<String> {
    let mut msg = std::fs::read(files.termination_log()).unwrap_or_default();
    msg.truncate(MAX_MESSAGE);
    if msg.is_empty() && policy == Some("FallbackToLogsOnError") && exit_code != 0 {
        let log = std::fs::read(&files.log).unwrap_or_default();
        let log = &log[(log_offset as usize).min(log.len())..];
        let text = String::from_utf8_lossy(log);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(MAX_LOG_LINES)..].join("\n");
        let bytes = tail.as_bytes();
        let start = bytes.len().saturating_sub(MAX_LOG_BYTES);
        msg = bytes[start..].to_vec();
    }
    if msg.is_empty() {
        None
    } else {
        Some(String::from_utf8_lossy(&msg).into_owned())
    }
}
