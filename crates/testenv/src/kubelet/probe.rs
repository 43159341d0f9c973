//! Readiness probes of the process kubelet: `httpGet` (HTTP; an `HTTPS` probe is a TCP connect,
//! since a real kubelet does not verify the certificate either) and `tcpSocket`, against the
//! pod's address, with the probe's delay, period, timeout and thresholds. A container with a
//! readiness probe is Ready only once the probe passes, which is what Deployments, EndpointSlices
//! and PodDisruptionBudgets read. `exec` and `grpc` probes are not run: such a container is Ready
//! when it runs (a warning says so). Liveness and startup probes are not run.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// A change of a container's readiness.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    /// The container's name.
    pub name: String,
    /// The container ID the probe ran against (a restarted container has another).
    pub container_id: String,
    /// Whether it is ready now.
    pub ready: bool,
}

/// What one probe attempt checks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    Http { port: u16, path: String },
    Tcp { port: u16 },
}

/// Resolves a probe port: a number, or the name of one of the container's ports.
fn port(c: &Container, p: &IntOrString) -> Result<u16, String> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("probe port {n} is invalid")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
            .and_then(|cp| u16::try_from(cp.container_port).ok())
            .ok_or_else(|| format!("probe port {name:?} names no port of container {}", c.name)),
    }
}

/// What the readiness probe of `c` checks; `None` when it has none, or one this kubelet does not
/// run.
fn check(c: &Container) -> Result<Option<Check>, String> {
    let Some(p) = &c.readiness_probe else {
        return Ok(None);
    };
    if let Some(h) = &p.http_get {
        let port = port(c, &h.port)?;
        if h.scheme.as_deref() == Some("HTTPS") {
            return Ok(Some(Check::Tcp { port }));
        }
        let path = h
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into());
        return Ok(Some(Check::Http { port, path }));
    }
    if let Some(t) = &p.tcp_socket {
        return Ok(Some(Check::Tcp {
            port: port(c, &t.port)?,
        }));
    }
    warn!(container = %c.name, "exec and grpc readiness probes are not run; the container is Ready when it runs");
    Ok(None)
}

/// Whether the container needs its probe to pass before it is Ready.
pub(crate) fn has_readiness_probe(c: &Container) -> bool {
    matches!(check(c), Ok(Some(_)) | Err(_))
}

fn secs(v: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(v.and_then(|v| u64::try_from(v).ok()).unwrap_or(default))
}

/// One attempt: an HTTP status from 200 to 399, or an accepted TCP connection.
async fn attempt(ip: IpAddr, check: &Check, timeout: Duration) -> Result<(), String> {
    let run = async {
        match check {
            Check::Tcp { port } => TcpStream::connect((ip, *port))
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            Check::Http { port, path } => {
                let mut s = TcpStream::connect((ip, *port))
                    .await
                    .map_err(|e| e.to_string())?;
                let req = format!(
                    "GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/captf-testenv\r\nAccept: */*\r\nConnection: close\r\n\r\n"
                );
                s.write_all(req.as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                let mut head = [0u8; 64];
                let n = s.read(&mut head).await.map_err(|e| e.to_string())?;
                let line = String::from_utf8_lossy(&head[..n]);
                let code: u16 = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .ok_or_else(|| format!("not an HTTP response: {line:?}"))?;
                if (200..400).contains(&code) {
                    Ok(())
                } else {
                    Err(format!("HTTP probe failed with statuscode: {code}"))
                }
            }
        }
    };
    tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| "probe timed out".to_owned())?
}

/// Runs the readiness probe of a started container until aborted, reporting each change of its
/// readiness (it starts unready). A probe that cannot be run (a port that names nothing) keeps
/// the container unready and says why.
pub(crate) async fn run(
    c: Container,
    container_id: String,
    ip: IpAddr,
    tx: mpsc::UnboundedSender<Readiness>,
) {
    let check = match check(&c) {
        Ok(Some(check)) => check,
        Ok(None) => return,
        Err(e) => return warn!(container = %c.name, error = %e, "readiness probe"),
    };
    let p: Probe = c.readiness_probe.clone().unwrap_or_default();
    let period = secs(p.period_seconds, 10);
    let timeout = secs(p.timeout_seconds, 1);
    let success = u32::try_from(p.success_threshold.unwrap_or(1).max(1)).unwrap_or(1);
    let failure = u32::try_from(p.failure_threshold.unwrap_or(3).max(1)).unwrap_or(3);
    tokio::time::sleep(secs(p.initial_delay_seconds, 0)).await;
    let (mut ready, mut passes, mut fails) = (false, 0u32, 0u32);
    loop {
        match attempt(ip, &check, timeout).await {
            Ok(()) => {
                passes += 1;
                fails = 0;
            }
            Err(e) => {
                debug!(container = %c.name, error = %e, "readiness probe failed");
                fails += 1;
                passes = 0;
            }
        }
        let now = if ready {
            fails < failure
        } else {
            passes >= success
        };
        if now != ready {
            ready = now;
            let change = Readiness {
                name: c.name.clone(),
                container_id: container_id.clone(),
                ready,
            };
            if tx.send(change).is_err() {
                return;
            }
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};

    fn container(probe: Probe) -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("healthz".into()),
                container_port: 9440,
                ..Default::default()
            }]),
            readiness_probe: Some(probe),
            ..Default::default()
        }
    }

    #[test]
    fn a_named_probe_port_resolves_to_the_container_port() {
        let c = container(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/readyz".into()),
                port: IntOrString::String("healthz".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            check(&c).unwrap(),
            Some(Check::Http {
                port: 9440,
                path: "/readyz".into()
            })
        );
    }

    #[test]
    fn an_unknown_port_name_is_an_error_and_keeps_the_container_unready() {
        let c = container(Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::String("nope".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(check(&c).unwrap_err().contains("nope"));
        assert!(has_readiness_probe(&c));
    }
}
