//! The test environment's Docker daemon (`testenv::docker`): it starts under its own directory
//! on its own bridge, answers on its socket and on the pod gateway, runs a container whose
//! published port the host reaches through Docker's userland proxy, and stopping it removes its
//! containers, bridge and directory.
//!
//! Needs root, `ip`, and Debian's `docker.io` (installed with apt-get when missing), and the
//! `captf-testenv` binary for the container's image (`cargo build -p captf-testenv`).
#![allow(clippy::unwrap_used)]

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use testenv::docker::DockerDaemon;
use testenv::image::Layer;
use testenv::podnet::PodNetwork;

/// One HTTP/1.0 GET of `path` at `addr`; the response, headers and body.
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

fn docker(daemon: &DockerDaemon, args: &[&str]) -> String {
    let out = daemon.docker().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The fixture binary (`captf-testenv`, with its shared libraries) as a root file system for
/// `docker import`.
fn fixture_rootfs(dir: &Path) -> std::path::PathBuf {
    let mut layer = Layer::new();
    layer
        .host_binary("/fixture", &testenv::shim::binary_path().unwrap())
        .unwrap();
    let path = dir.join("fixture.tar.gz");
    std::fs::write(&path, layer.build().unwrap().data).unwrap();
    path
}

#[test]
fn the_docker_daemon_runs_containers_on_its_own_bridge_and_leaves_nothing_behind() {
    let network = PodNetwork::create().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("docker");
    let index = network.index();
    let bridge = testenv::docker::bridge_name(index);
    let daemon = DockerDaemon::start(&dir, index, Some(network.gateway())).unwrap();

    // Its own bridge and data root, and the pod gateway's endpoint answers the API.
    let info = docker(&daemon, &["info", "--format", "{{.DockerRootDir}}"]);
    assert_eq!(Path::new(&info), dir.canonicalize().unwrap().join("data"));
    assert!(Path::new("/sys/class/net").join(&bridge).exists());
    let pod_host = daemon.pod_host().unwrap();
    let tcp: SocketAddr = pod_host.strip_prefix("tcp://").unwrap().parse().unwrap();
    assert_eq!(tcp.ip(), network.gateway());
    let ping = http_get(tcp, "/_ping");
    assert!(
        ping.starts_with("HTTP/1.0 200") && ping.ends_with("OK"),
        "{ping}"
    );

    // A container on the default bridge, its port published on the bridge's address.
    let rootfs = fixture_rootfs(scratch.path());
    docker(
        &daemon,
        &["import", rootfs.to_str().unwrap(), "captf-test/fixture:1"],
    );
    let published = format!("{}::8080", daemon.bridge_gateway());
    docker(
        &daemon,
        &[
            "run",
            "-d",
            "--name",
            "web",
            "--hostname",
            "web",
            "-p",
            &published,
            "captf-test/fixture:1",
            "/fixture",
            "fixture",
            "serve-http",
            "--port",
            "8080",
            "--body",
            "hello",
        ],
    );
    let port: SocketAddr = docker(&daemon, &["port", "web", "8080/tcp"])
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(port.ip(), daemon.bridge_gateway());
    let mut body = String::new();
    for _ in 0..50 {
        if let Ok(mut s) = TcpStream::connect_timeout(&port, Duration::from_secs(2)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = write!(s, "GET / HTTP/1.0\r\n\r\n");
            body.clear();
            let _ = s.read_to_string(&mut body);
            if body.contains("hello web") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(body.contains("hello web"), "{body}");

    // Stopping removes the container, the daemon, its bridge and its directory.
    let socket = daemon.socket();
    drop(daemon);
    assert!(!socket.exists());
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(!Path::new("/sys/class/net").join(&bridge).exists());
    let shims = std::process::Command::new("pgrep")
        .args(["-f", &dir.display().to_string()])
        .output()
        .unwrap();
    assert!(
        shims.stdout.is_empty(),
        "processes of the daemon left: {}",
        String::from_utf8_lossy(&shims.stdout)
    );
}
