//! Loopback networking helpers shared by the test environment's servers and tests.

use anyhow::Context as _;
use std::hash::{Hash, Hasher};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where [`free_loopback_port`] looks: below Linux's default ephemeral range (32768–60999), so
/// the local port of some process's outgoing connection cannot take a port between the moment
/// it is picked and the moment its server binds it (seen in `.ci/run`: a Cluster API manager
/// failed with "address already in use" while the other test lane made many connections).
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback TCP port that was free a moment ago (bind to it soon: another process may take it).
/// Tried at random in [`PORTS`]; the kernel's choice when none of the tries is free.
pub fn free_loopback_port() -> anyhow::Result<u16> {
    static TRIES: AtomicU64 = AtomicU64::new(0);
    for _ in 0..64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            std::process::id(),
            TRIES.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now(),
        )
            .hash(&mut h);
        let span = u64::from(PORTS.end - PORTS.start);
        let port = PORTS.start + u16::try_from(h.finish() % span).unwrap_or(0);
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_is_bindable_and_outside_the_ephemeral_range() {
        let port = free_loopback_port().expect("a port");
        assert!(PORTS.contains(&port), "{port}");
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("still free");
    }
}
