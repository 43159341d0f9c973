//! Running one runtime command (Runtime Environment "Commands, and their order" and "Lock
//! timeout and stop timeout"): exec'd directly (never through a shell) from the generated root
//! with the rewritten environment; stdout and stderr stream to the pod log line by line as they
//! come, except `show -json`'s stdout, which is kept in memory and written nowhere. Only what the
//! runner needs is kept: `Error:` header lines of stderr, the apply/destroy summary line, and
//! the output of the few commands whose stdout is read.
//!
//! On SIGTERM the runtime process alone gets SIGTERM (its provider plugins are its own
//! business); it has `stop_timeout` to finish, write state and release the lock, then gets
//! SIGKILL.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::output::{self, Changes};
use crate::steps::Stdout;

/// The most `Error:` header lines kept per step.
pub const MAX_ERROR_LINES: usize = 32;
/// The most stderr bytes kept per step (for recognising force-unlock's "already unlocked").
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;
/// The most stdout bytes kept for a command whose stdout is read (`show -json` of a very large
/// plan included).
pub const MAX_KEPT_STDOUT: usize = 512 * 1024 * 1024;
/// How long the output readers may outlive the process (a grandchild holding a pipe).
const READER_GRACE: Duration = Duration::from_secs(5);

/// One command to run.
#[derive(Debug)]
pub struct Invocation<'a> {
    /// The runtime command (`--bin`), then the step's arguments.
    pub program: &'a [String],
    /// The step's arguments.
    pub args: &'a [String],
    /// The working directory (the generated root).
    pub cwd: &'a Path,
    /// The complete environment.
    pub env: &'a [(OsString, OsString)],
    /// What stdout is for.
    pub stdout: Stdout,
    /// How long an interrupted command may take to stop.
    pub stop_timeout: Duration,
}

/// How a command ended.
#[derive(Debug, Default)]
pub struct Finished {
    /// The exit code, or 128 + the signal that killed it.
    pub exit: i32,
    /// Whether it exited by itself with a code (not killed by a signal).
    pub exited_normally: bool,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether it was interrupted by SIGTERM (forwarded) while running.
    pub interrupted: bool,
    /// Whether it had to be killed after the stop timeout.
    pub killed: bool,
    /// Kept stdout (for [`Stdout::StreamAndKeep`] and [`Stdout::KeepSecret`]).
    pub stdout: Vec<u8>,
    /// Whether kept stdout hit [`MAX_KEPT_STDOUT`].
    pub stdout_truncated: bool,
    /// `Error:` header lines of stderr, in order, without repeats.
    pub error_lines: Vec<String>,
    /// The last [`STDERR_TAIL_BYTES`] of stderr.
    pub stderr_tail: Vec<u8>,
    /// The last apply/destroy summary line of stdout.
    pub changes: Option<Changes>,
}

#[derive(Default)]
struct StdoutSeen {
    kept: Vec<u8>,
    truncated: bool,
    changes: Option<Changes>,
}

#[derive(Default)]
struct StderrSeen {
    error_lines: Vec<String>,
    tail: Vec<u8>,
}

async fn read_stdout<R: AsyncRead + Unpin>(pipe: R, mode: Stdout) -> StdoutSeen {
    let mut reader = BufReader::new(pipe);
    let mut out = tokio::io::stdout();
    let mut seen = StdoutSeen::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if mode != Stdout::KeepSecret {
            if let Some(c) = output::changes_line(&line) {
                seen.changes = Some(c);
            }
            let _ = out.write_all(&line).await;
            let _ = out.flush().await;
        }
        if mode != Stdout::Stream {
            if seen.kept.len() + line.len() <= MAX_KEPT_STDOUT {
                seen.kept.extend_from_slice(&line);
            } else {
                seen.truncated = true;
            }
        }
    }
    seen
}

async fn read_stderr<R: AsyncRead + Unpin>(pipe: R) -> StderrSeen {
    let mut reader = BufReader::new(pipe);
    let mut err = tokio::io::stderr();
    let mut seen = StderrSeen::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let _ = err.write_all(&line).await;
        let _ = err.flush().await;
        if seen.error_lines.len() < MAX_ERROR_LINES
            && let Some(h) = output::error_header(&line)
            && !seen.error_lines.contains(&h)
        {
            seen.error_lines
                .push(crate::summary::cap(&h, crate::summary::MAX_SUMMARY_BYTES));
        }
        seen.tail.extend_from_slice(&line);
        if seen.tail.len() > STDERR_TAIL_BYTES {
            let cut = seen.tail.len() - STDERR_TAIL_BYTES;
            seen.tail.drain(..cut);
        }
    }
    seen
}

/// Waits until the interrupt flag is set (forever when its sender is gone without setting it).
pub async fn interrupted(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs one command to its end. An error means it could not be started.
pub async fn run(
    inv: &Invocation<'_>,
    interrupt: &mut watch::Receiver<bool>,
) -> std::io::Result<Finished> {
    let Some((program, pre_args)) = inv.program.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty runtime command",
        ));
    };
    let mut cmd = Command::new(program);
    cmd.args(pre_args)
        .args(inv.args)
        .current_dir(inv.cwd)
        .env_clear()
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let stdout_task = child
        .stdout
        .take()
        .map(|p| tokio::spawn(read_stdout(p, inv.stdout)));
    let stderr_task = child.stderr.take().map(|p| tokio::spawn(read_stderr(p)));

    let mut finished = Finished::default();
    let status = tokio::select! {
        s = child.wait() => Some(s),
        () = interrupted(interrupt) => None,
    };
    let status = if let Some(s) = status {
        s?
    } else {
        finished.interrupted = true;
        if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
            info!(pid, "forwarding SIGTERM to the runtime");
            if let Err(e) = kill(Pid::from_raw(pid), Signal::SIGTERM) {
                warn!(error = %e, "could not signal the runtime");
            }
        }
        if let Ok(s) = tokio::time::timeout(inv.stop_timeout, child.wait()).await {
            s?
        } else {
            warn!(
                stop_timeout_seconds = inv.stop_timeout.as_secs(),
                "the runtime did not stop in time; killing it"
            );
            finished.killed = true;
            child.start_kill()?;
            child.wait().await?
        }
    };
    finished.elapsed = started.elapsed();
    finished.exited_normally = status.code().is_some();
    finished.exit = exit_code(status);

    if let Some(task) = stdout_task {
        let handle = task.abort_handle();
        match tokio::time::timeout(READER_GRACE, task).await {
            Ok(Ok(seen)) => {
                finished.stdout = seen.kept;
                finished.stdout_truncated = seen.truncated;
                finished.changes = seen.changes;
            }
            _ => handle.abort(),
        }
    }
    if let Some(task) = stderr_task {
        let handle = task.abort_handle();
        match tokio::time::timeout(READER_GRACE, task).await {
            Ok(Ok(seen)) => {
                finished.error_lines = seen.error_lines;
                finished.stderr_tail = seen.tail;
            }
            _ => handle.abort(),
        }
    }
    Ok(finished)
}

/// The exit code, or 128 + the terminating signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}
