//! Loopback networking helpers shared by the test environment's servers and tests.

use anyhow::Context as _;
use std::net::{Ipv4Addr, TcpListener};

/// A loopback TCP port that was free a moment ago (bind to it soon: another process may take it).
pub fn free_loopback_port() -> anyhow::Result<u16> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}
