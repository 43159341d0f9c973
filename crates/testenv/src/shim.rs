//! The container shim: runs one command in its own mount and PID namespace, on an image's root
//! filesystem, with volumes bind-mounted in, as a given user — what a container runtime does for
//! the process kubelet, with no cgroups, no network namespace (the host's loopback reaches the
//! test API server) and no seccomp.
//!
//! `captf-testenv shim --rootfs DIR [--overlay DIR] [--readonly-rootfs] --mount SRC:DST[:ro] ...
//! --uid U --gid G [--groups G1,G2] [--workdir W] [--env K=V ...] -- CMD ARGS...`
//!
//! The shim unshares a PID namespace and forks. The child is PID 1 of the new PID namespace; it
//! unshares a mount namespace (and a UTS namespace with `--hostname`), builds the root (an
//! overlay of the image's root with a per-container upper directory, or a bind mount of the root
//! itself), mounts a fresh `/proc`, a minimal `/dev`, the volumes, makes the root read-only when
//! asked, pivots into it, drops to the user and execs the command with exactly the given
//! environment (no shell). The parent forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 to
//! the child, reaps it and exits with its exit code (128+signal when it was killed). As for any
//! PID 1, a signal reaches the command only when it handles it (SIGKILL always does). A failure
//! before the command runs is written to `--error-file` and the shim exits 128; once the command
//! runs, its host PID is written to `--pid-file`.
//!
//! This module also holds [`spawn_tied`], which starts a helper process that is killed when the
//! process that started it exits, however it exits.
#![allow(unsafe_code)]

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock, mpsc};

use anyhow::{Context, bail};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, chdir, execve, fork, pipe2, pivot_root};

/// Signals the shim forwards to the container's PID 1.
const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The exit code of the shim when the command could not be started (a container runtime's
/// `StartError` reports 128 as well).
pub const START_ERROR_EXIT_CODE: i32 = 128;

/// The `PATH` used to find a command without a slash when the environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A volume to bind-mount into the container: `SRC:DST[:ro]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// Host path (file or directory).
    pub source: PathBuf,
    /// Absolute path inside the container.
    pub destination: String,
    /// Remount read-only after binding.
    pub read_only: bool,
}

impl FromStr for MountSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (rest, read_only) = if let Some(rest) = s.strip_suffix(":ro") {
            (rest, true)
        } else {
            (s.strip_suffix(":rw").unwrap_or(s), false)
        };
        let (source, destination) = rest
            .split_once(':')
            .ok_or_else(|| format!("mount {s:?}: expected SRC:DST[:ro]"))?;
        if source.is_empty() || !destination.starts_with('/') {
            return Err(format!(
                "mount {s:?}: SRC must be set and DST must be absolute"
            ));
        }
        Ok(Self {
            source: PathBuf::from(source),
            destination: destination.to_owned(),
            read_only,
        })
    }
}

impl std::fmt::Display for MountSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.source.display(), self.destination)?;
        if self.read_only {
            f.write_str(":ro")?;
        }
        Ok(())
    }
}

/// Arguments of `captf-testenv shim`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShimArgs {
    /// The image's root filesystem (never written when `--overlay` is given).
    #[arg(long)]
    pub rootfs: PathBuf,
    /// A per-container scratch directory: the root becomes an overlay of `--rootfs` (lower)
    /// with `DIR/upper` (so containers never see each other's writes).
    #[arg(long)]
    pub overlay: Option<PathBuf>,
    /// Make the container's root read-only (volumes keep their own mode).
    #[arg(long)]
    pub readonly_rootfs: bool,
    /// `SRC:DST[:ro]`, in mount order.
    #[arg(long = "mount", value_name = "SRC:DST[:ro]")]
    pub mounts: Vec<MountSpec>,
    /// User ID the command runs as.
    #[arg(long, default_value_t = 0)]
    pub uid: u32,
    /// Primary group ID the command runs as.
    #[arg(long, default_value_t = 0)]
    pub gid: u32,
    /// Supplementary group IDs.
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<u32>,
    /// Working directory inside the container (created when missing).
    #[arg(long)]
    pub workdir: Option<String>,
    /// `K=V`: the command's complete environment.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Hostname inside the container (a new UTS namespace).
    #[arg(long)]
    pub hostname: Option<String>,
    /// A network namespace to join (`/run/netns/<name>`, see [`crate::podnet`]); without it the
    /// container shares the host's network.
    #[arg(long)]
    pub netns: Option<PathBuf>,
    /// Set `no_new_privs` (`allowPrivilegeEscalation: false`).
    #[arg(long)]
    pub no_new_privileges: bool,
    /// Written with the command's host PID once it runs.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Written with the reason when the command could not be started.
    #[arg(long)]
    pub error_file: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl ShimArgs {
    /// A shim invocation of `command` on `rootfs` with the defaults (root user, no volumes).
    pub fn new(rootfs: impl Into<PathBuf>, command: Vec<String>) -> Self {
        Self {
            rootfs: rootfs.into(),
            overlay: None,
            readonly_rootfs: false,
            mounts: Vec::new(),
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            workdir: None,
            env: Vec::new(),
            hostname: None,
            netns: None,
            no_new_privileges: false,
            pid_file: None,
            error_file: None,
            command,
        }
    }

    /// The command line (after `captf-testenv shim`) that parses back into `self`.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["--rootfs".into(), self.rootfs.clone().into()];
        if let Some(o) = &self.overlay {
            a.extend(["--overlay".into(), o.clone().into()]);
        }
        if self.readonly_rootfs {
            a.push("--readonly-rootfs".into());
        }
        for m in &self.mounts {
            a.extend(["--mount".into(), m.to_string().into()]);
        }
        a.extend([
            "--uid".into(),
            self.uid.to_string().into(),
            "--gid".into(),
            self.gid.to_string().into(),
        ]);
        if !self.groups.is_empty() {
            let g: Vec<String> = self.groups.iter().map(u32::to_string).collect();
            a.extend(["--groups".into(), g.join(",").into()]);
        }
        if let Some(w) = &self.workdir {
            a.extend(["--workdir".into(), w.into()]);
        }
        for e in &self.env {
            a.extend(["--env".into(), e.into()]);
        }
        if let Some(h) = &self.hostname {
            a.extend(["--hostname".into(), h.into()]);
        }
        if let Some(n) = &self.netns {
            a.extend(["--netns".into(), n.clone().into()]);
        }
        if self.no_new_privileges {
            a.push("--no-new-privileges".into());
        }
        if let Some(p) = &self.pid_file {
            a.extend(["--pid-file".into(), p.clone().into()]);
        }
        if let Some(p) = &self.error_file {
            a.extend(["--error-file".into(), p.clone().into()]);
        }
        a.push("--".into());
        a.extend(self.command.iter().map(Into::into));
        a
    }
}

/// Runs the shim and returns the exit code to exit with. Must be called while the process is
/// single-threaded (before any async runtime starts): it forks.
pub fn run(args: &ShimArgs) -> i32 {
    match run_parent(args) {
        Ok(code) => code,
        Err(e) => {
            let msg = format!("{e:#}");
            report_start_error(args, &msg);
            START_ERROR_EXIT_CODE
        }
    }
}

fn report_start_error(args: &ShimArgs, msg: &str) {
    eprintln!("captf-testenv shim: {msg}");
    if let Some(p) = &args.error_file {
        let _ = write_atomically(p, msg.as_bytes());
    }
}

fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents)?;
    fs::rename(&tmp, path)
}

fn run_parent(args: &ShimArgs) -> anyhow::Result<i32> {
    if args.command.is_empty() {
        bail!("no command given");
    }
    let mut blocked = SigSet::empty();
    for s in FORWARDED {
        blocked.add(s);
    }
    blocked.add(Signal::SIGCHLD);
    let old_mask = blocked
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .context("blocking signals")?;

    // The PID namespace applies to the next child; the mount (and UTS) namespace is the
    // child's own, so the shim itself keeps the host's root (a pivot_root moves the root of every
    // process of the mount namespace).
    unshare(CloneFlags::CLONE_NEWPID).context("unshare(pid namespace)")?;

    let (read_end, write_end) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe")?;
    // SAFETY: the shim is single-threaded here (`run` is called before any runtime or thread
    // starts), so the child may do anything the parent could.
    match unsafe { fork() }.context("fork")? {
        ForkResult::Child => {
            drop(read_end);
            let Err(e) = setup_and_exec(args, &old_mask);
            let mut w = fs::File::from(write_end);
            let _ = w.write_all(format!("{e:#}").as_bytes());
            drop(w);
            std::process::exit(START_ERROR_EXIT_CODE);
        }
        ForkResult::Parent { child } => {
            drop(write_end);
            let mut msg = String::new();
            let _ = fs::File::from(read_end).read_to_string(&mut msg);
            if !msg.is_empty() {
                let _ = waitpid(child, None);
                report_start_error(args, &msg);
                return Ok(START_ERROR_EXIT_CODE);
            }
            if let Some(p) = &args.pid_file {
                let _ = write_atomically(p, child.as_raw().to_string().as_bytes());
            }
            supervise(child, &blocked)
        }
    }
}

/// Forwards signals to `child` until it exits; returns its exit code.
fn supervise(child: Pid, blocked: &SigSet) -> anyhow::Result<i32> {
    loop {
        // Reap first: SIGCHLD may have been delivered (and coalesced) before we waited.
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
            Ok(_) => {}
            Err(nix::errno::Errno::ECHILD) => return Ok(START_ERROR_EXIT_CODE),
            Err(e) => return Err(e).context("waitpid"),
        }
        let sig = blocked.wait().context("sigwait")?;
        if sig != Signal::SIGCHLD {
            let _ = kill(child, sig);
        }
    }
}

/// The child: PID 1 of the new PID namespace. Returns only on failure.
fn setup_and_exec(args: &ShimArgs, old_mask: &SigSet) -> anyhow::Result<Infallible> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).context("PR_SET_PDEATHSIG")?;
    if let Some(path) = &args.netns {
        // Joined while the host's /run/netns is still visible (before the new mount namespace).
        let ns = fs::File::open(path)
            .with_context(|| format!("opening network namespace {}", path.display()))?;
        nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("joining network namespace {}", path.display()))?;
    }
    let mut flags = CloneFlags::CLONE_NEWNS;
    if args.hostname.is_some() {
        flags |= CloneFlags::CLONE_NEWUTS;
    }
    unshare(flags).context("unshare(mount namespace)")?;
    // Nothing mounted from here on propagates back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making / private")?;
    if let Some(h) = &args.hostname {
        nix::unistd::sethostname(h).context("sethostname")?;
    }
    let root = prepare_root(args)?;
    mount_pseudo_filesystems(&root)?;
    ensure_etc_files(&root, args.hostname.as_deref())?;
    for m in &args.mounts {
        bind_volume(&root, m).with_context(|| format!("mounting {m}"))?;
    }
    let workdir = args.workdir.as_deref().unwrap_or("/");
    let host_workdir = secure_join(&root, workdir)?;
    if !host_workdir.exists() {
        fs::create_dir_all(&host_workdir)
            .with_context(|| format!("creating working directory {workdir}"))?;
    }
    if args.readonly_rootfs {
        mount(
            None::<&str>,
            &root,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .context("remounting the root read-only")?;
    }

    // pivot_root(".", ".") stacks the old root under the new one; detaching it leaves only the
    // new root (the trick runc uses; no temporary directory needed in a read-only root).
    chdir(&root).context("chdir to the new root")?;
    pivot_root(".", ".").context("pivot_root")?;
    umount2(".", MntFlags::MNT_DETACH).context("detaching the old root")?;
    chdir("/").context("chdir /")?;

    let groups: Vec<Gid> = args.groups.iter().copied().map(Gid::from_raw).collect();
    nix::unistd::setgroups(&groups).context("setgroups")?;
    let gid = Gid::from_raw(args.gid);
    nix::unistd::setresgid(gid, gid, gid).context("setresgid")?;
    let uid = Uid::from_raw(args.uid);
    nix::unistd::setresuid(uid, uid, uid).context("setresuid")?;
    // A change of effective user or group clears the parent-death signal: set it again, so the
    // container still dies with the shim (exec keeps it).
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).context("PR_SET_PDEATHSIG")?;
    if args.no_new_privileges {
        nix::sys::prctl::set_no_new_privs().context("PR_SET_NO_NEW_PRIVS")?;
    }
    chdir(workdir).with_context(|| format!("chdir {workdir}"))?;

    let env: Vec<CString> = args
        .env
        .iter()
        .map(|e| CString::new(e.as_bytes()))
        .collect::<Result<_, _>>()
        .context("environment contains a NUL byte")?;
    let argv: Vec<CString> = args
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("command contains a NUL byte")?;
    let path = resolve_command(&args.command[0], &args.env)?;
    let program = CString::new(path.as_bytes()).context("command contains a NUL byte")?;
    old_mask
        .thread_set_mask()
        .context("restoring the signal mask")?;
    let err = execve(&program, &argv, &env).unwrap_err();
    bail!("exec {path}: {err}")
}

/// Mounts the container's root and returns its host path (inside this mount namespace).
fn prepare_root(args: &ShimArgs) -> anyhow::Result<PathBuf> {
    let rootfs = fs::canonicalize(&args.rootfs)
        .with_context(|| format!("rootfs {}", args.rootfs.display()))?;
    if let Some(scratch) = &args.overlay {
        let upper = scratch.join("upper");
        let work = scratch.join("work");
        let merged = scratch.join("merged");
        for d in [&upper, &work, &merged] {
            fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            rootfs.display(),
            upper.display(),
            work.display()
        );
        mount(
            Some("overlay"),
            &merged,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .context("mounting the overlay root")?;
        Ok(merged)
    } else {
        mount(
            Some(&rootfs),
            &rootfs,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .context("bind-mounting the root onto itself")?;
        Ok(rootfs)
    }
}

fn mount_pseudo_filesystems(root: &Path) -> anyhow::Result<()> {
    let proc_dir = secure_join(root, "/proc")?;
    fs::create_dir_all(&proc_dir).context("creating /proc")?;
    mount(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .context("mounting /proc")?;

    let dev = secure_join(root, "/dev")?;
    fs::create_dir_all(&dev).context("creating /dev")?;
    mount(
        Some("tmpfs"),
        &dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME,
        Some("mode=755,size=65536k"),
    )
    .context("mounting /dev")?;
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let target = dev.join(name);
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o666)
            .open(&target)
            .with_context(|| format!("creating /dev/{name}"))?;
        let host = Path::new("/dev").join(name);
        mount(
            Some(&host),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .with_context(|| format!("binding /dev/{name}"))?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link))
            .with_context(|| format!("creating /dev/{link}"))?;
    }
    fs::create_dir(dev.join("pts")).context("creating /dev/pts")?;
    let shm = dev.join("shm");
    fs::create_dir(&shm).context("creating /dev/shm")?;
    mount(
        Some("shm"),
        &shm,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=1777,size=65536k"),
    )
    .context("mounting /dev/shm")?;

    // A read-only sysfs, as runtimes give; best effort (nothing here needs it).
    if let Ok(sys) = secure_join(root, "/sys")
        && fs::create_dir_all(&sys).is_ok()
    {
        let _ = mount(
            Some("sysfs"),
            &sys,
            Some("sysfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        );
    }
    Ok(())
}

/// Gives the container `/etc/hosts` and `/etc/resolv.conf` when the image has none (written into
/// the container's writable layer, before the root becomes read-only).
fn ensure_etc_files(root: &Path, hostname: Option<&str>) -> anyhow::Result<()> {
    let hosts = secure_join(root, "/etc/hosts")?;
    let resolv = secure_join(root, "/etc/resolv.conf")?;
    if hosts.symlink_metadata().is_ok() && resolv.symlink_metadata().is_ok() {
        return Ok(());
    }
    let etc = secure_join(root, "/etc")?;
    fs::create_dir_all(&etc).context("creating /etc")?;
    if hosts.symlink_metadata().is_err() {
        let mut s =
            String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
        if let Some(h) = hostname {
            s.push_str("127.0.0.1\t");
            s.push_str(h);
            s.push('\n');
        }
        fs::write(&hosts, s).context("writing /etc/hosts")?;
    }
    if resolv.symlink_metadata().is_err() {
        let host = fs::read("/etc/resolv.conf").unwrap_or_default();
        fs::write(&resolv, host).context("writing /etc/resolv.conf")?;
    }
    Ok(())
}

fn bind_volume(root: &Path, m: &MountSpec) -> anyhow::Result<()> {
    let meta =
        fs::metadata(&m.source).with_context(|| format!("volume source {}", m.source.display()))?;
    let target = secure_join(root, &m.destination)?;
    if meta.is_dir() {
        fs::create_dir_all(&target).context("creating the mount point")?;
    } else {
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).context("creating the mount point's directory")?;
        }
        if target.symlink_metadata().is_err() {
            fs::write(&target, b"").context("creating the mount point file")?;
        }
    }
    mount(
        Some(&m.source),
        &target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .context("bind mount")?;
    if m.read_only {
        mount(
            None::<&str>,
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .context("read-only remount")?;
    }
    Ok(())
}

/// Joins `path` (an absolute path inside the container) onto `root`, resolving symbolic links
/// inside `root` the way the container will see them, so that no link in an image can make a
/// mount or a write land outside its root.
pub fn secure_join(root: &Path, path: &str) -> anyhow::Result<PathBuf> {
    let mut resolved = PathBuf::new();
    let mut pending: std::collections::VecDeque<OsString> = Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&c);
        match fs::symlink_metadata(root.join(&candidate)) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    bail!("too many levels of symbolic links in {path}");
                }
                let target = fs::read_link(root.join(&candidate))?;
                if target.is_absolute() {
                    resolved = PathBuf::new();
                }
                let mut parts: Vec<OsString> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(n.to_owned()),
                        Component::ParentDir => Some("..".into()),
                        _ => None,
                    })
                    .collect();
                parts.reverse();
                for p in parts {
                    pending.push_front(p);
                }
            }
            _ => resolved = candidate,
        }
    }
    Ok(root.join(resolved))
}

/// Finds `command` the way a container runtime does: as given when it contains a slash, else in
/// the container environment's `PATH` (already inside the new root).
fn resolve_command(command: &str, env: &[String]) -> anyhow::Result<String> {
    if command.contains('/') {
        return Ok(command.to_owned());
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH);
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(command);
        if let Ok(m) = fs::metadata(&candidate)
            && m.is_file()
            && m.permissions().mode() & 0o111 != 0
        {
            return Ok(candidate.to_string_lossy().into_owned());
        }
    }
    bail!("exec: {command:?}: executable file not found in $PATH")
}

type SpawnRequest = (Command, Signal, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `cmd` so that it receives SIGKILL when this process exits, however it exits (also on a
/// panic or a SIGKILL), so tests never leave stray helpers behind.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, so every tied child is
/// forked by one dedicated thread that lives as long as the process.
pub fn spawn_tied(cmd: Command) -> std::io::Result<Child> {
    spawn_tied_with(cmd, Signal::SIGKILL)
}

/// [`spawn_tied`] with another signal than SIGKILL: SIGTERM for a daemon that must stop what it
/// started before it exits (the Docker daemon stops its containers).
pub fn spawn_tied_with(cmd: Command, signal: Signal) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("captf-spawner".into())
            .spawn(move || {
                for (mut cmd, signal, reply) in rx {
                    // SAFETY: the closure runs between fork and exec and only makes the
                    // async-signal-safe prctl(2) system call.
                    unsafe {
                        cmd.pre_exec(move || {
                            nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from)
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the captf-spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .lock()
        .map_err(|_| std::io::Error::other("spawner lock poisoned"))?
        .send((cmd, signal, reply_tx))
        .map_err(|_| std::io::Error::other("spawner thread gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("spawner thread gone"))?
}

/// The `captf-testenv` binary: `$CAPTF_TESTENV_BIN`, else this process when it is
/// `captf-testenv`, else `captf-testenv` next to the running executable or one directory up (a
/// test binary lives in `target/<profile>/deps/`, the binary in `target/<profile>/`).
/// `cargo test --workspace` builds it; otherwise run `cargo build -p captf-testenv` first.
pub fn binary_path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("CAPTF_TESTENV_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("locating the current executable")?;
    if exe.file_name().is_some_and(|n| n == "captf-testenv") {
        return Ok(exe);
    }
    let mut dir = exe.parent();
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join("captf-testenv");
        if candidate.is_file() {
            return Ok(candidate);
        }
        dir = d.parent();
    }
    bail!(
        "the captf-testenv binary was not found next to {} (run `cargo build -p captf-testenv` \
         or set CAPTF_TESTENV_BIN)",
        exe.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_spec_round_trips() {
        let m: MountSpec = "/a/b:/c:ro".parse().unwrap();
        assert_eq!(m.source, PathBuf::from("/a/b"));
        assert_eq!(m.destination, "/c");
        assert!(m.read_only);
        assert_eq!(m.to_string(), "/a/b:/c:ro");
        let m: MountSpec = "/a:/dev/termination-log".parse().unwrap();
        assert!(!m.read_only);
        assert!("/a:relative".parse::<MountSpec>().is_err());
        assert!("nodest".parse::<MountSpec>().is_err());
    }

    #[test]
    fn secure_join_stays_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("usr/lib", root.join("lib")).unwrap();
        std::os::unix::fs::symlink("/", root.join("escape")).unwrap();
        std::os::unix::fs::symlink("../../..", root.join("usr/up")).unwrap();
        assert_eq!(secure_join(root, "/lib/x").unwrap(), root.join("usr/lib/x"));
        assert_eq!(secure_join(root, "/escape/etc").unwrap(), root.join("etc"));
        assert_eq!(secure_join(root, "/usr/up/etc").unwrap(), root.join("etc"));
        assert_eq!(secure_join(root, "/../../etc").unwrap(), root.join("etc"));
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        assert!(secure_join(root, "/loop/x").is_err());
    }
}
