//! A private registry for tests: a loopback proxy in front of the test [`crate::registry`] that
//! answers every request without the right HTTP Basic credentials with `401` and a `Basic`
//! challenge, as a private registry does, and forwards the others. It records the method and
//! path of every request it sees, so a test can tell what a client fetched (a manifest, a config
//! blob, never a layer). Images are pushed to the registry itself and pulled through the proxy,
//! under the same repository names.

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use base64::Engine as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;

/// A running proxy. Dropping it stops it.
#[derive(Debug)]
pub struct AuthProxy {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl AuthProxy {
    /// Starts a proxy on a free loopback port in front of `backend` (`host:port`), accepting
    /// `username` and `password`.
    pub fn start(backend: &str, username: &str, password: &str) -> anyhow::Result<Self> {
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
        );
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding the auth proxy")?;
        std_listener.set_nonblocking(true)?;
        let port = std_listener.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let backend = backend.to_owned();
        let log = requests.clone();
        std::thread::Builder::new()
            .name("registry-auth-proxy".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(std_listener) else {
                        return;
                    };
                    let serve = async {
                        while let Ok((conn, _)) = listener.accept().await {
                            let (backend, expected, log) =
                                (backend.clone(), expected.clone(), log.clone());
                            tokio::spawn(async move {
                                let _ = handle(conn, &backend, &expected, &log).await;
                            });
                        }
                    };
                    tokio::select! {
                        () = serve => {}
                        _ = rx => {}
                    }
                });
            })
            .context("starting the auth proxy thread")?;
        Ok(Self {
            port,
            requests,
            stop: Some(tx),
        })
    }

    /// `127.0.0.1:<port>`: the registry part of image references pulled through the proxy.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `METHOD PATH` of every request so far, in order, authenticated or not.
    pub fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for AuthProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

async fn handle(
    mut conn: TcpStream,
    backend: &str,
    expected: &str,
    log: &Mutex<Vec<String>>,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        anyhow::ensure!(buf.len() < MAX_HEAD, "request head too long");
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut method_path = request_line.split(' ');
    let entry = format!(
        "{} {}",
        method_path.next().unwrap_or_default(),
        method_path.next().unwrap_or_default()
    );
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(entry);
    let mut authorized = false;
    let mut forwarded = format!("{request_line}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        if name.eq_ignore_ascii_case("authorization") {
            authorized = value.trim() == expected;
            continue;
        }
        if name.eq_ignore_ascii_case("connection") {
            continue;
        }
        forwarded.push_str(line);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    if !authorized {
        conn.write_all(
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"captf-test\"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await?;
        conn.shutdown().await?;
        return Ok(());
    }
    let mut upstream = TcpStream::connect(backend).await?;
    upstream.write_all(forwarded.as_bytes()).await?;
    upstream.write_all(&buf[head_end..]).await?;
    tokio::io::copy_bidirectional(&mut conn, &mut upstream).await?;
    Ok(())
}
