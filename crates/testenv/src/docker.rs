//! A Docker daemon of the test environment's own, for real workload nodes (docs/src/development/
//! real-nodes.md, "The test environment's Docker daemon"): the daemon the docker modules
//! (`modules/docker`) create node containers, networks and load balancers with.
//!
//! - Debian's `docker.io`, installed with `apt-get` when `dockerd` is missing (root on Debian),
//!   as the image builder installs buildah (`make testenv-deps` installs it before the tests).
//! - Data, state, socket and pid file under one directory of the environment; its own bridge
//!   `captfdkN` with `172.29.N.1/24` and a fixed MAC address (N the environment's pod subnet,
//!   see [`crate::podnet`], so concurrent environments never share either), and its own pool
//!   for networks created without a subnet, `172.28.N.0/24` in /28s.
//! - No iptables rules, no masquerading, no forwarding: containers reach each other and the host
//!   over their bridges and nothing beyond. Published ports are served by Docker's userland
//!   proxy, a process listening on the host.
//! - Besides its socket, it listens on `<pod gateway>:<port>` (plain HTTP) when asked, so module
//!   Jobs, which run in the pod network, reach it as `DOCKER_HOST=tcp://…`; only the
//!   environment's own pods and the host reach that address.
//! - Stopping it (drop, or the process's exit for a daemon in a static) removes its containers
//!   and their volumes, stops it, and removes its bridge and directory. A test process that is
//!   killed sends the daemon SIGTERM (parent-death signal), which stops its containers; the next
//!   environment on the same subnet removes the bridges that are left: its own, and those with an
//!   address in its pool or its cluster network ([`remove_stale_bridges`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;
use tracing::{info, warn};

use crate::podnet::{create_bridge, delete_bridge};

/// Debian's daemon and client (the client speaks the daemon's own API version), and apt-get.
const DOCKERD: &str = "/usr/sbin/dockerd";
const DOCKER: &str = "/usr/bin/docker";
const APT_GET: &str = "/usr/bin/apt-get";
/// Prefix of the daemons' bridges.
const BRIDGE_PREFIX: &str = "captfdk";
/// How long the daemon may take to answer on its socket.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the daemon may take to stop after SIGTERM (it stops its containers first).
const STOP_TIMEOUT: Duration = Duration::from_secs(40);

/// The bridge of subnet `index`.
pub fn bridge_name(index: u8) -> String {
    format!("{BRIDGE_PREFIX}{index}")
}

/// The bridge's address: `172.29.N.1`.
pub fn bridge_gateway(index: u8) -> Ipv4Addr {
    Ipv4Addr::new(172, 29, index, 1)
}

/// The daemon's pool for networks created without a subnet: `172.28.N.0/24` (in /28s).
pub fn address_pool(index: u8) -> String {
    format!("172.28.{index}.0/24")
}

/// The subnet the environment's workload clusters take for their own network (the docker
/// cluster module's `network_cidr`): `172.31.N.0/24`. One cluster at a time per environment.
pub fn cluster_network(index: u8) -> String {
    format!("172.31.{index}.0/24")
}

/// The bridge's fixed, locally administered MAC address (see [`crate::podnet`] on why a bridge
/// needs one): `02:63:61:70:75:NN`.
fn bridge_mac(index: u8) -> String {
    format!("02:63:61:70:75:{index:02x}")
}

/// The daemon's arguments for subnet `index` with everything under `dir`.
fn daemon_args(dir: &Path, index: u8, tcp: Option<SocketAddr>) -> Vec<String> {
    let mut args = vec![
        format!("--data-root={}", dir.join("data").display()),
        format!("--exec-root={}", dir.join("exec").display()),
        format!("--pidfile={}", dir.join("docker.pid").display()),
        format!("--host=unix://{}", dir.join("docker.sock").display()),
        format!("--bridge={}", bridge_name(index)),
        format!(
            "--default-address-pool=base={},size=28",
            address_pool(index)
        ),
        "--iptables=false".into(),
        "--ip-masq=false".into(),
        "--ip-forward=false".into(),
        "--userland-proxy=true".into(),
        "--userland-proxy-path=/usr/sbin/docker-proxy".into(),
        "--storage-driver=overlay2".into(),
    ];
    if let Some(tcp) = tcp {
        args.push(format!("--host=tcp://{tcp}"));
    }
    args
}

/// Installs Debian's `docker.io` when `dockerd` or the client is missing.
fn ensure_installed() -> anyhow::Result<()> {
    if Path::new(DOCKERD).is_file() && Path::new(DOCKER).is_file() {
        return Ok(());
    }
    if !nix::unistd::geteuid().is_root() || !Path::new(APT_GET).is_file() {
        bail!("dockerd is not installed: install Debian's docker.io (apt-get install docker.io)");
    }
    info!("installing Debian's docker.io");
    // Another process may hold dpkg's lock (a first image build installing buildah): wait.
    let lock_wait = "DPkg::Lock::Timeout=300";
    run(Command::new(APT_GET).args(["-o", lock_wait, "update", "-qq"]))?;
    run(Command::new(APT_GET)
        .args([
            "-o",
            lock_wait,
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
        ])
        .arg("docker.io")
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Runs a command to completion, failing with its stderr.
fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// A port free on `ip` a moment ago, from the range [`crate::net::free_loopback_port`] picks in.
fn free_port_on(ip: Ipv4Addr) -> anyhow::Result<SocketAddr> {
    for _ in 0..16 {
        let addr = SocketAddr::from((ip, crate::net::free_loopback_port()?));
        if std::net::TcpListener::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    bail!("no free port on {ip}")
}

/// Removes the bridges with an address in `subnet`, a subnet that belongs to one environment
/// (its index): before anything of this environment's uses it, every such bridge is what a dead
/// environment's daemon left (a daemon killed with its test process stops its containers but
/// leaves its networks' bridges, whose routes would shadow a new network's). Returns their names.
pub fn remove_stale_bridges(subnet: &str) -> anyhow::Result<Vec<String>> {
    let stale = crate::podnet::bridges_in(subnet)?;
    for bridge in &stale {
        warn!(%bridge, %subnet, "removing a bridge a dead environment left");
        delete_bridge(bridge);
    }
    Ok(stale)
}

/// Creates the daemon's bridge, replacing one a dead environment left.
fn make_bridge(index: u8) -> anyhow::Result<()> {
    let bridge = bridge_name(index);
    delete_bridge(&bridge);
    create_bridge(
        &bridge,
        &bridge_mac(index),
        &format!("{}/24", bridge_gateway(index)),
    )
}

/// A running daemon. Dropping it stops it and removes everything it made.
#[derive(Debug)]
pub struct DockerDaemon {
    dir: PathBuf,
    index: u8,
    tcp: Option<SocketAddr>,
    child: Mutex<Option<Child>>,
}

impl DockerDaemon {
    /// Starts a daemon with everything under `dir`, on the bridge of subnet `index`; with
    /// `listen_on`, also on a free port of that address (plain HTTP).
    pub fn start(dir: &Path, index: u8, listen_on: Option<Ipv4Addr>) -> anyhow::Result<Self> {
        ensure_installed()?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = dir.canonicalize()?;
        let tcp = match listen_on {
            Some(ip) => Some(free_port_on(ip)?),
            None => None,
        };
        make_bridge(index)?;
        for subnet in [address_pool(index), cluster_network(index)] {
            remove_stale_bridges(&subnet)?;
        }
        let log = std::fs::File::create(dir.join("dockerd.log"))?;
        let mut cmd = Command::new(DOCKERD);
        cmd.args(daemon_args(&dir, index, tcp))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child =
            crate::shim::spawn_tied_with(cmd, Signal::SIGTERM).context("starting dockerd")?;
        let daemon = DockerDaemon {
            dir,
            index,
            tcp,
            child: Mutex::new(Some(child)),
        };
        daemon.wait_ready()?;
        info!(socket = %daemon.socket().display(), ?tcp, bridge = %bridge_name(index), "dockerd ready");
        Ok(daemon)
    }

    fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ok = self
                .docker()
                .args(["version", "--format", "{{.Server.Version}}"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            if let Some(child) = self
                .child
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!("dockerd exited ({status}): {}", self.log_tail());
            }
            if Instant::now() > deadline {
                bail!(
                    "dockerd did not answer on {} within {START_TIMEOUT:?}: {}",
                    self.socket().display(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// The daemon's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    /// `DOCKER_HOST` for a process on this machine: `unix://<socket>`.
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// `DOCKER_HOST` for the environment's pods, `tcp://<pod gateway>:<port>`, when the daemon
    /// listens there.
    pub fn pod_host(&self) -> Option<String> {
        self.tcp.map(|a| format!("tcp://{a}"))
    }

    /// The default bridge's address on the host.
    pub fn bridge_gateway(&self) -> Ipv4Addr {
        bridge_gateway(self.index)
    }

    /// The Docker client, talking to this daemon.
    pub fn docker(&self) -> Command {
        let mut cmd = Command::new(DOCKER);
        cmd.env("DOCKER_HOST", self.host()).stdin(Stdio::null());
        cmd
    }

    /// Runs `docker ARGS...` against this daemon; returns its standard output, or fails with its
    /// error output.
    pub fn run_docker(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .docker()
            .args(args)
            .output()
            .with_context(|| format!("running docker {}", args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "docker {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Loads a docker archive (`docker load -i`): the node and load balancer images of real
    /// nodes (`hack/node-image.sh build`).
    pub fn load(&self, archive: &Path) -> anyhow::Result<()> {
        let path = archive
            .to_str()
            .with_context(|| format!("{} is not UTF-8", archive.display()))?;
        let loaded = self.run_docker(&["load", "-i", path])?;
        info!(archive = %archive.display(), loaded = %loaded.trim(), "loaded images");
        Ok(())
    }

    /// Everything that lives in the daemon besides its images and its own networks (`bridge`,
    /// `host`, `none`): containers, volumes and networks, each as `kind name`. Empty once
    /// whoever made them removed them all.
    pub fn leftovers(&self) -> anyhow::Result<Vec<String>> {
        let list = |args: &[&str]| -> anyhow::Result<Vec<String>> {
            Ok(self
                .run_docker(args)?
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect())
        };
        let mut left = Vec::new();
        for name in list(&["ps", "-a", "--format", "{{.Names}}"])? {
            left.push(format!("container {name}"));
        }
        for name in list(&["volume", "ls", "-q"])? {
            left.push(format!("volume {name}"));
        }
        for name in list(&["network", "ls", "--format", "{{.Name}}"])? {
            if !["bridge", "host", "none"].contains(&name.as_str()) {
                left.push(format!("network {name}"));
            }
        }
        Ok(left)
    }

    /// Removes every container (and its volumes), stops the daemon, and removes its bridge and
    /// directory. Safe to call twice.
    pub fn stop(&self) {
        let Some(mut child) = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        else {
            return;
        };
        self.remove_containers();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !matches!(child.try_wait(), Ok(Some(_))) {
            warn!("dockerd did not stop within {STOP_TIMEOUT:?}; killing it");
            let _ = child.kill();
            let _ = child.wait();
        }
        unmount_below(&self.dir);
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            warn!(dir = %self.dir.display(), error = %e, "removing the Docker daemon's directory");
        }
        delete_bridge(&bridge_name(self.index));
    }

    fn remove_containers(&self) {
        let Ok(out) = self.docker().args(["ps", "-aq"]).output() else {
            return;
        };
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if !ids.is_empty() {
            let _ = self
                .docker()
                .args(["rm", "-f", "-v"])
                .args(&ids)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self
            .docker()
            .args(["network", "prune", "-f"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Daemons this process stops when it exits (an environment shared by a test binary lives in a
/// static, which is never dropped).
static AT_EXIT: Mutex<Vec<std::sync::Arc<DockerDaemon>>> = Mutex::new(Vec::new());

extern "C" fn stop_at_exit() {
    let daemons = std::mem::take(
        &mut *AT_EXIT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for daemon in daemons {
        daemon.stop();
    }
}

/// Stops `daemon` when the process exits, if nothing stopped it before.
#[allow(unsafe_code)]
pub fn stop_when_exiting(daemon: std::sync::Arc<DockerDaemon>) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `stop_at_exit` is a plain `extern "C" fn()` that neither unwinds nor depends
        // on thread-local state.
        let _ = unsafe { nix::libc::atexit(stop_at_exit) };
    });
    AT_EXIT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(daemon);
}

impl Drop for DockerDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Unmounts whatever is still mounted below `dir` (containers that did not stop cleanly), deepest
/// first, so the directory can be removed.
fn unmount_below(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let mut points: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_subnet_has_its_own_bridge_addresses_and_pool() {
        assert_eq!(bridge_name(3), "captfdk3");
        assert_eq!(bridge_gateway(3), Ipv4Addr::new(172, 29, 3, 1));
        assert_eq!(bridge_mac(255), "02:63:61:70:75:ff");
        let args = daemon_args(Path::new("/d"), 3, None);
        assert!(args.contains(&"--bridge=captfdk3".to_owned()));
        assert!(args.contains(&"--default-address-pool=base=172.28.3.0/24,size=28".to_owned()));
        assert!(args.contains(&"--host=unix:///d/docker.sock".to_owned()));
        assert!(args.contains(&"--iptables=false".to_owned()));
        assert!(!args.iter().any(|a| a.starts_with("--host=tcp")));
        let tcp = SocketAddr::from((Ipv4Addr::new(10, 244, 3, 1), 2375));
        assert!(
            daemon_args(Path::new("/d"), 3, Some(tcp))
                .contains(&"--host=tcp://10.244.3.1:2375".to_owned())
        );
    }
}
