//! The pod network of the test environment (ENGINEERING.md §2; docs/src/development/test-environment.md,
//! "Pod network"): what makes real Deployments, Services and webhooks work on the process kubelet.
//!
//! - Each environment takes one `/24` of `10.244.0.0/16` for itself: `10.244.N.0/24`, with the
//!   Linux bridge `captfbrN` holding the gateway `10.244.N.1` in the host's network namespace.
//!   `N` is held by an exclusive lock on `/run/captf-testenv/net/N.lock` for as long as the
//!   process lives, so concurrent environments (test binaries, clones) never share a subnet.
//!   The bridge and the pods' network namespaces go when the network is dropped or the process
//!   exits; whatever a killed process left behind under an unlocked `N` is removed by the next
//!   environment that takes it.
//! - Each pod that does not ask for the host network gets its own network namespace
//!   (`ip netns`, named `captf-N-H`), a veth pair whose host end joins the bridge, and the address
//!   `10.244.N.H/24`. It has no default route: a pod reaches the other pods of its environment and
//!   the gateway, and nothing else — traffic never leaves this machine.
//! - The API server listens on loopback only; a forwarder on `10.244.N.1:<api port>` relays to it,
//!   and pods get that address as `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` (the
//!   serving certificate names the gateway: see [`crate::control_plane::ControlPlane::start_with`]).
//! - The API server reaches pods directly at their IPs: webhooks and Services by their endpoints
//!   (`--enable-aggregator-routing`), over the bridge.
//!
//! Needs root and `ip` from iproute2 (`make testenv-deps` installs it).

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context as _, bail};
use nix::fcntl::{Flock, FlockArg};
use tracing::{debug, info, warn};

/// Where the per-subnet locks live.
const LOCK_DIR: &str = "/run/captf-testenv/net";
/// Where `ip netns` keeps named network namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Prefix of the bridges.
const BRIDGE_PREFIX: &str = "captfbr";
/// Prefix of the pods' network namespaces.
const NETNS_PREFIX: &str = "captf-";

/// The subnet `10.244.N.0/24` of environment `N`.
pub fn subnet_address(index: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, index, host)
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!(
                "the pod network needs `ip` from iproute2: run `make testenv-deps` (or apt-get install iproute2)"
            )
        } else {
            anyhow::Error::from(e).context("running ip")
        }
    })?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The bridge's own, locally administered MAC address: `02:63:61:70:74:NN` ("capt", then `N`).
fn bridge_mac(index: u8) -> String {
    format!("02:63:61:70:74:{index:02x}")
}

/// Takes the lock of subnet `index` when nobody holds it.
fn try_lock(index: u8) -> anyhow::Result<Option<Flock<File>>> {
    let path = Path::new(LOCK_DIR).join(format!("{index}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Subnets whose bridge and namespaces this process removes when it exits (an environment shared
/// by a test binary lives in a static, which is never dropped).
static AT_EXIT: Mutex<BTreeSet<u8>> = Mutex::new(BTreeSet::new());

extern "C" fn remove_at_exit() {
    let indexes = std::mem::take(
        &mut *AT_EXIT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for index in indexes {
        remove_leftovers(index);
    }
}

/// Removes subnet `index`'s bridge and namespaces when the process exits.
#[allow(unsafe_code)]
fn remove_when_exiting(index: u8) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `remove_at_exit` is a plain `extern "C" fn()` that neither unwinds nor
        // depends on thread-local state.
        let _ = unsafe { nix::libc::atexit(remove_at_exit) };
    });
    AT_EXIT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(index);
}

/// The bridge of subnet `index`.
fn bridge_name(index: u8) -> String {
    format!("{BRIDGE_PREFIX}{index}")
}

/// Removes what a dead environment left under subnet `index` (its lock is held by the caller).
fn remove_leftovers(index: u8) {
    let prefix = format!("{NETNS_PREFIX}{index}-");
    if let Ok(entries) = std::fs::read_dir(NETNS_DIR) {
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                debug!(netns = %name, "removing a leftover pod network namespace");
                let _ = ip(&["netns", "delete", &name]);
            }
        }
    }
    delete_bridge(&bridge_name(index));
}

/// Creates the bridge `name` with the MAC address `mac` and the address `cidr`, and brings it
/// up. A bridge without an address of its own takes the lowest address among its ports and
/// changes it when that port leaves: whoever cached the bridge's old address (a pod's ARP entry
/// for its gateway) then loses it until the entry expires. An address set by hand never changes.
pub(crate) fn create_bridge(name: &str, mac: &str, cidr: &str) -> anyhow::Result<()> {
    ip(&["link", "add", name, "type", "bridge"])?;
    ip(&["link", "set", name, "address", mac])?;
    ip(&["addr", "add", cidr, "dev", name])?;
    ip(&["link", "set", name, "up"])?;
    Ok(())
}

/// Deletes the bridge `name` when it exists.
pub(crate) fn delete_bridge(name: &str) {
    if Path::new("/sys/class/net").join(name).exists() {
        debug!(bridge = %name, "removing a bridge");
        let _ = ip(&["link", "delete", name]);
    }
}

/// The bridges of this host with an IPv4 address inside `subnet` (`a.b.c.d/len`).
pub(crate) fn bridges_in(subnet: &str) -> anyhow::Result<Vec<String>> {
    let listing = ip(&["-o", "-4", "addr", "show"])?;
    Ok(interfaces_in(&listing, subnet)?
        .into_iter()
        .filter(|name| {
            Path::new("/sys/class/net")
                .join(name)
                .join("bridge")
                .is_dir()
        })
        .collect())
}

/// The interfaces of an `ip -o -4 addr show` listing with an address inside `subnet`.
fn interfaces_in(listing: &str, subnet: &str) -> anyhow::Result<Vec<String>> {
    let net = parse_cidr(subnet).with_context(|| format!("{subnet:?} is not an IPv4 CIDR"))?;
    let mut found: Vec<String> = listing
        .lines()
        .filter_map(|line| {
            // "5: br-1234    inet 172.31.0.1/24 brd 172.31.0.255 scope global br-1234 ..."
            let mut words = line.split_whitespace();
            let name = words.nth(1)?;
            let addr = words.skip_while(|w| *w != "inet").nth(1)?;
            let (a, _) = parse_cidr(addr)?;
            overlaps((a, 32), net).then(|| name.to_owned())
        })
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

/// Parses `a.b.c.d[/len]` into its network and prefix length.
fn parse_cidr(s: &str) -> Option<(u32, u32)> {
    let (addr, len) = s.split_once('/').unwrap_or((s, "32"));
    let addr: Ipv4Addr = addr.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((u32::from(addr), len))
}

/// Whether two IPv4 prefixes overlap.
fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    let len = a.1.min(b.1);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a.0 & mask == b.0 & mask
}

/// Whether any route of the host (other than the default route) covers `10.244.N.0/24`: a subnet
/// the machine already uses is never taken.
fn subnet_in_use(index: u8, routes: &str) -> bool {
    let ours = (u32::from(subnet_address(index, 0)), 24);
    routes
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|dst| *dst != "default")
        .filter_map(parse_cidr)
        .any(|r| overlaps(r, ours))
}

/// A pod's place on the network: its namespace and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNet {
    /// The `ip netns` name.
    pub name: String,
    /// The namespace file a container joins (`/run/netns/<name>`).
    pub path: PathBuf,
    /// The pod's IP.
    pub ip: Ipv4Addr,
    host: u8,
}

/// One environment's pod network. Dropping it removes the bridge and releases the subnet.
#[derive(Debug)]
pub struct PodNetwork {
    index: u8,
    free: Mutex<BTreeSet<u8>>,
    /// The ports already relayed to loopback: every kubelet on this network shares one relay.
    forwarded: Mutex<BTreeSet<u16>>,
    _lock: Flock<File>,
}

impl PodNetwork {
    /// Takes a free subnet, removes what dead environments left behind, and creates the bridge.
    pub fn create() -> anyhow::Result<Self> {
        if !nix::unistd::geteuid().is_root() {
            bail!("the pod network needs root (network namespaces, veth pairs and a bridge)");
        }
        std::fs::create_dir_all(LOCK_DIR).with_context(|| format!("creating {LOCK_DIR}"))?;
        let mut chosen = None;
        for index in 0..=u8::MAX {
            let Some(lock) = try_lock(index)? else {
                continue;
            };
            remove_leftovers(index);
            let routes = ip(&["-o", "-4", "route", "show", "table", "all"])?;
            if subnet_in_use(index, &routes) {
                debug!(index, "subnet already routed on this machine; skipping");
                continue;
            }
            chosen = Some((index, lock));
            break;
        }
        let Some((index, lock)) = chosen else {
            bail!("no free pod subnet in 10.244.0.0/16 (all 256 are taken or routed)");
        };
        let bridge = bridge_name(index);
        remove_when_exiting(index);
        // Built first: a failure below drops it, which removes what was made.
        let net = PodNetwork {
            index,
            free: Mutex::new((2..=254).collect()),
            forwarded: Mutex::new(BTreeSet::new()),
            _lock: lock,
        };
        let gateway = format!("{}/24", subnet_address(index, 1));
        create_bridge(&bridge, &bridge_mac(index), &gateway)?;
        info!(%bridge, subnet = %format!("{}/24", subnet_address(index, 0)), "pod network ready");
        Ok(net)
    }

    /// The subnet's number `N` (`10.244.N.0/24`): this environment's, for as long as it lives.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The gateway: the host's address on the bridge, where pods reach the API server.
    pub fn gateway(&self) -> Ipv4Addr {
        subnet_address(self.index, 1)
    }

    /// Relays `<gateway>:<port>` to `127.0.0.1:<port>` on a thread of its own, for as long as the
    /// process lives: the API server (bound to loopback) as pods see it. A port already relayed
    /// (a second kubelet on the same network) keeps its relay.
    pub fn forward_to_loopback(&self, port: u16) -> anyhow::Result<SocketAddr> {
        let addr = SocketAddr::from((self.gateway(), port));
        let mut forwarded = self
            .forwarded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if forwarded.contains(&port) {
            return Ok(addr);
        }
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("listening on {addr} for pods"))?;
        listener.set_nonblocking(true)?;
        std::thread::Builder::new()
            .name(format!("captf-podnet-{port}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return warn!(error = %e, "pod network forwarder runtime"),
                };
                rt.block_on(relay(listener, port));
            })
            .context("spawning the pod network forwarder")?;
        forwarded.insert(port);
        Ok(addr)
    }

    /// Gives a pod its own network namespace and address on the bridge.
    pub fn attach(&self) -> anyhow::Result<PodNet> {
        let host = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_first()
            .context("the pod subnet is full (253 pods)")?;
        let net = PodNet {
            name: format!("{NETNS_PREFIX}{}-{host}", self.index),
            path: Path::new(NETNS_DIR).join(format!("{NETNS_PREFIX}{}-{host}", self.index)),
            ip: subnet_address(self.index, host),
            host,
        };
        if let Err(e) = self.plumb(&net) {
            self.detach(&net);
            return Err(e);
        }
        Ok(net)
    }

    fn plumb(&self, net: &PodNet) -> anyhow::Result<()> {
        let veth = format!("captf{}v{}", self.index, net.host);
        // A namespace left by an earlier pod with this address (its removal failed) goes first.
        if net.path.exists() {
            let _ = ip(&["netns", "delete", &net.name]);
        }
        ip(&["netns", "add", &net.name])?;
        ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &net.name,
        ])?;
        ip(&[
            "link",
            "set",
            &veth,
            "master",
            &bridge_name(self.index),
            "up",
        ])?;
        let addr = format!("{}/24", net.ip);
        ip(&["-n", &net.name, "link", "set", "lo", "up"])?;
        ip(&["-n", &net.name, "addr", "add", &addr, "dev", "eth0"])?;
        ip(&["-n", &net.name, "link", "set", "eth0", "up"])?;
        Ok(())
    }

    /// Removes a pod's network namespace (its veth pair goes with it) and frees its address.
    pub fn detach(&self, net: &PodNet) {
        if net.path.exists()
            && let Err(e) = ip(&["netns", "delete", &net.name])
        {
            warn!(netns = %net.name, error = %format!("{e:#}"), "removing a pod network namespace");
        }
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(net.host);
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        remove_leftovers(self.index);
        AT_EXIT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.index);
    }
}

/// Accepts pod connections and copies each to and from `127.0.0.1:<port>`.
async fn relay(listener: std::net::TcpListener, port: u16) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return warn!(error = %e, "pod network forwarder"),
    };
    loop {
        let (mut inbound, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "pod network forwarder: accept");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            match tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await {
                Ok(mut outbound) => {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                Err(e) => debug!(%from, error = %e, "pod network forwarder: connect"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_in_a_subnet_are_read_from_an_ip_listing() {
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n\
4000: br-9b65906eb443    inet 172.31.0.1/24 brd 172.31.0.255 scope global br-9b65906eb443\\       valid_lft forever\n\
4010: captfbr0    inet 10.244.0.1/24 scope global captfbr0\\       valid_lft forever\n\
4013: br-28318c30d57e    inet 172.31.1.1/24 brd 172.31.1.255 scope global br-28318c30d57e\\       valid_lft forever\n";
        assert_eq!(
            interfaces_in(listing, "172.31.0.0/24").unwrap(),
            vec!["br-9b65906eb443".to_owned()]
        );
        assert_eq!(
            interfaces_in(listing, "172.31.0.0/16").unwrap(),
            vec!["br-28318c30d57e".to_owned(), "br-9b65906eb443".to_owned()]
        );
        assert!(interfaces_in(listing, "172.28.0.0/24").unwrap().is_empty());
        assert!(interfaces_in(listing, "not a cidr").is_err());
    }

    #[test]
    fn each_bridge_has_a_locally_administered_address_of_its_own() {
        assert_eq!(bridge_mac(0), "02:63:61:70:74:00");
        assert_eq!(bridge_mac(255), "02:63:61:70:74:ff");
    }

    #[test]
    fn a_subnet_covered_by_a_host_route_is_in_use() {
        let routes = "default via 192.0.2.1 dev eth0\n192.0.2.0/24 dev eth0 proto kernel\n10.0.0.0/8 dev tun0\n";
        assert!(subnet_in_use(3, routes));
        let routes = "default via 192.0.2.1 dev eth0\n10.244.7.0/24 dev captfbr7 proto kernel\nlocal 127.0.0.1 dev lo\n";
        assert!(subnet_in_use(7, routes));
        assert!(!subnet_in_use(8, routes));
    }

    #[test]
    fn prefixes_overlap_by_their_shorter_mask() {
        let a = parse_cidr("10.244.0.0/16").unwrap();
        assert!(overlaps(a, parse_cidr("10.244.9.0/24").unwrap()));
        assert!(!overlaps(a, parse_cidr("10.245.0.0/24").unwrap()));
        assert!(overlaps(
            parse_cidr("10.244.9.77").unwrap(),
            parse_cidr("10.244.9.0/24").unwrap()
        ));
    }
}
