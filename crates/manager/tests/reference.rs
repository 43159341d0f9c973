//! The book's manager reference (docs/src/reference/manager.md, INTERFACE-FACTS §4 "Manager
//! flags") against the binary: its flags table names exactly the flags `manager --help` lists, and
//! the binary started with the flags the Cluster API Operator passes serves, maps and warns.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The `--flags` of a text, those in backticks only when `quoted`.
fn flags_in(text: &str, quoted: bool) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let before = text[..i].chars().next_back();
        if quoted != (before == Some('`')) || before.is_some_and(char::is_alphanumeric) {
            continue;
        }
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if !name.is_empty() && (!quoted || text[i + 2 + name.len()..].starts_with('`')) {
            flags.insert(format!("--{name}"));
        }
    }
    flags
}

#[test]
fn the_flags_table_names_exactly_the_binarys_flags() {
    let help = Command::new(env!("CARGO_BIN_EXE_manager"))
        .arg("--help")
        .output()
        .expect("running manager --help");
    assert!(help.status.success(), "manager --help failed");
    let mut binary = flags_in(&String::from_utf8_lossy(&help.stdout), false);
    assert!(binary.remove("--help") && binary.remove("--version"));
    assert!(binary.contains("--diagnostics-address"), "{binary:?}");

    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/manager.md");
    let page = std::fs::read_to_string(&path).expect("docs/src/reference/manager.md");
    // The flags table: the first column of the Flags section's rows.
    let section = page
        .split("\n## Flags\n")
        .nth(1)
        .expect("docs/src/reference/manager.md has a Flags section");
    let table: String = section
        .split("\n## ")
        .next()
        .unwrap_or(section)
        .lines()
        .filter(|l| l.starts_with("| `-"))
        .map(|l| l.split('|').nth(1).unwrap_or_default())
        .collect();
    let documented = flags_in(&table, true);
    let missing: Vec<_> = binary.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&binary).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/src/reference/manager.md's flags table differs from `manager --help`:\n\
         in the binary, not documented: {missing:?}\ndocumented, not in the binary: {unknown:?}"
    );
}

/// An HTTP GET on a loopback port: the status line's code and the body, or `None` while
/// nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    Some((code, body.to_owned()))
}

/// Manager reference "Flags" (issue 29 item 1): the flags the Cluster API Operator passes to every
/// provider's manager start the real binary against a real API server: `--metrics-bind-addr`
/// serves the metrics, `--profiler-address` the profiler, `--max-concurrent-reconciles` is taken
/// (its mapping onto the four concurrency flags is `main.rs`'s unit test), and the flags this
/// manager has no use for are each named in one warning; the process stays up and ready (no
/// crash loop).
#[test]
fn the_operators_flags_start_the_manager_and_are_mapped_or_warned_about() {
    use std::time::{Duration, Instant};
    let env = testenv::TestEnv::shared().expect("test environment starts");
    let port = || testenv::net::free_loopback_port().unwrap();
    let (health, metrics, profiler) = (port(), port(), port());
    let dir = env.endpoints().dir.join("operator-flags");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("manager.log");
    let mut manager = Command::new(env!("CARGO_BIN_EXE_manager"))
        .args([
            format!("--kubeconfig={}", env.endpoints().kubeconfig.display()),
            "--runner-image=registry.invalid/captf/runner:v0".into(),
            format!("--health-addr=127.0.0.1:{health}"),
            "--insecure-diagnostics=true".into(),
            "--leader-elect=false".into(),
            // What the Operator adds to every provider's manager.
            format!("--metrics-bind-addr=127.0.0.1:{metrics}"),
            "--leader-election-id=captf-operator".into(),
            "--max-concurrent-reconciles=3".into(),
            "--webhook-port=9443".into(),
            "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs".into(),
            format!("--profiler-address=127.0.0.1:{profiler}"),
            "--feature-gates=MachinePool=true,ClusterTopology=true".into(),
        ])
        .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting the manager");
    let deadline = Instant::now() + Duration::from_secs(60);
    let outcome = loop {
        if let Some(status) = manager.try_wait().unwrap() {
            break Err(format!("the manager exited: {status}"));
        }
        if http_get(health, "/readyz").is_some_and(|(code, _)| code == 200) {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err("the manager was not ready within 60 s".to_owned());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    if let Err(e) = outcome {
        let _ = manager.kill();
        panic!("{e}\n{}", text());
    }
    let served = http_get(metrics, "/metrics");
    let profiled = http_get(profiler, "/debug/pprof/");
    std::thread::sleep(Duration::from_secs(2));
    let still_running = manager.try_wait().unwrap().is_none();
    let _ = manager.kill();
    let _ = manager.wait();
    let logged = text();
    assert!(still_running, "the manager exited:\n{logged}");
    let (code, body) = served.expect("metrics on --metrics-bind-addr");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("captf_"), "{body}");
    assert!(
        profiled.is_some_and(|(code, _)| code == 200),
        "no profiler on --profiler-address:\n{logged}"
    );
    for flag in [
        "--leader-election-id=captf-operator ignored",
        "--webhook-port=9443 ignored",
        "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs ignored",
        "MachinePool, ClusterTopology ignored",
    ] {
        let lines: Vec<_> = logged.lines().filter(|l| l.contains(flag)).collect();
        assert_eq!(lines.len(), 1, "one warning on {flag}:\n{logged}");
        assert!(lines[0].contains("WARN"), "{}", lines[0]);
    }
}
