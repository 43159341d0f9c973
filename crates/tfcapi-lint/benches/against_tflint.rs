//! tfcapi-lint against its peer, tflint, on the same modules in the same run: the three no-op
//! modules, the generated 200-file module and a module with one 10 MB file (the generators of
//! `lint_module` and `lint_large_file`, in `generated`).
//!
//! Each linter runs as a process of its own, the way module authors run them, over several
//! interleaved runs (the order of the two flips every run, after one unmeasured warm-up run of
//! each). Each process is started by a small wrapper, this bench re-run with `CHILD` set, that
//! times it from spawn to exit and reads its peak resident set from `getrusage(RUSAGE_CHILDREN)`
//! (the wrapper's only child, and tflint's bundled-plugin process under it). Reported: the median
//! wall time and the largest peak memory of each linter, and their ratios. A linter process that
//! runs past `CAPTF_BENCH_LINT_CAP_SECS` (120 s by default) is stopped; if tflint's first run on a
//! module is stopped, that run is its only sample and its figures are lower bounds (the ratios
//! upper bounds): on this machine tflint had not finished the 10 MB module after 5 minutes.
//!
//! tflint runs offline: an empty `--config`, an empty plugin directory (only its bundled
//! Terraform ruleset runs, in process), and its version check disabled. It is built from the Go
//! module proxy by `hack/testbin.sh tflint` (`make bench` does it; `make testbin` does not).
//!
//! Prints one `BENCH` line per figure (`hack/bench.sh` gathers them into the table).
//! Run: `make bench`, or `cargo bench -p tfcapi-lint --bench against_tflint` after
//! `hack/testbin.sh tflint` (`CAPTF_BENCH_LINT_RUNS` sets the runs, 7 by default).

mod generated;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "CAPTF_LINT_PEER_CHILD";
/// The longest one linter process may run before it is stopped (seconds).
const CAP: &str = "CAPTF_BENCH_LINT_CAP_SECS";
const LARGE_MB: usize = 10;

/// One timed process: wall time, peak resident set and exit code.
#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: Duration,
    peak_kib: i64,
    /// Stopped at the cap: `wall` and `peak_kib` are lower bounds.
    stopped: bool,
}

/// Wrapper mode: runs the command given as arguments (in a process group of its own, killed
/// whole after `CAP` seconds), then prints its wall time (ns), its peak resident set (KiB), its
/// exit code and whether it was stopped at the cap.
fn child() {
    use std::os::unix::process::CommandExt as _;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (program, rest) = args.split_first().expect("a command to run");
    let cap: u64 = std::env::var(CAP)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let started = Instant::now();
    let mut process = Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("the linter starts");
    let group = nix::unistd::Pid::from_raw(-(process.id() as i32));
    let stopped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stopped.clone();
    // The watchdog: this wrapper exits as soon as the linter does, so it fires only at the cap.
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(cap));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
    });
    let status = process.wait().expect("the linter runs");
    let wall = started.elapsed();
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    println!(
        "{} {} {} {}",
        wall.as_nanos(),
        usage.max_rss(),
        status.code().unwrap_or(-1),
        i32::from(stopped.load(std::sync::atomic::Ordering::SeqCst))
    );
}

/// Runs `cmd` under the wrapper; `ok` says which exit codes mean the linter finished its work.
/// tflint's plugin directory is `plugins` (empty) and its version check is off.
fn measure(cmd: &[String], plugins: &Path, ok: &[i32]) -> Sample {
    let out = Command::new(std::env::current_exe().expect("this bench"))
        .env(CHILD, "1")
        .env("TFLINT_DISABLE_VERSION_CHECK", "1")
        .env("TFLINT_PLUGIN_DIR", plugins)
        .args(cmd)
        .output()
        .expect("the wrapper runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<i64> = text
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    let [nanos, peak_kib, code, stopped] = fields[..] else {
        panic!(
            "the wrapper printed {text:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let stopped = stopped == 1;
    assert!(
        stopped || ok.contains(&(code as i32)),
        "{cmd:?} exited with {code}"
    );
    Sample {
        wall: Duration::from_nanos(nanos as u64),
        peak_kib,
        stopped,
    }
}

fn median(samples: &[Sample]) -> Duration {
    let mut v: Vec<Duration> = samples.iter().map(|s| s.wall).collect();
    v.sort_unstable();
    v[v.len() / 2]
}

fn peak_mib(samples: &[Sample]) -> f64 {
    samples.iter().map(|s| s.peak_kib).max().unwrap_or(0) as f64 / 1024.0
}

/// A module both linters check: a name, its directory and the CAPTF role it plays.
struct Case {
    name: String,
    dir: PathBuf,
    role: &'static str,
}

fn cases(scratch: &Path) -> Vec<Case> {
    let noop = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../modules/noop");
    let mut cases: Vec<Case> = ["cluster", "machine", "machinepool"]
        .into_iter()
        .map(|role| Case {
            name: format!("no-op {role} module"),
            dir: noop.join(role).canonicalize().expect("the no-op module"),
            role,
        })
        .collect();
    let many = scratch.join("many");
    std::fs::create_dir(&many).expect("mkdir");
    generated::write_many_file_module(&many);
    cases.push(Case {
        name: format!("{}-file module", generated::FILES),
        dir: many,
        role: "machine",
    });
    let large = scratch.join("large");
    std::fs::create_dir(&large).expect("mkdir");
    generated::write_large_file_module(&large, LARGE_MB);
    cases.push(Case {
        name: format!("{LARGE_MB} MB module"),
        dir: large,
        role: "machine",
    });
    cases
}

fn bench_line(figure: &str, ours: &str, peer: &str, ratio: &str, goal: &str, verdict: &str) {
    println!("BENCH\t{figure}\t{ours}\t{peer}\t{ratio}\t{goal}\t{verdict}");
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let runs: usize = std::env::var("CAPTF_BENCH_LINT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
        .max(1);
    let tflint = match testenv::testbin::path("tflint") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED against_tflint: {e:#} (`hack/testbin.sh tflint` builds it)");
            bench_line(
                "tfcapi-lint vs tflint",
                "-",
                "not built",
                "-",
                "≤ 0.5",
                "not measured",
            );
            return;
        }
    };
    let ours = env!("CARGO_BIN_EXE_tfcapi-lint");
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let config = scratch.path().join("empty.tflint.hcl");
    std::fs::write(&config, "").expect("write");
    let plugins = scratch.path().join("plugins");
    std::fs::create_dir(&plugins).expect("mkdir");
    let cases = cases(scratch.path());
    for case in &cases {
        let ours_cmd: Vec<String> = [ours, "module", "--role", case.role]
            .into_iter()
            .map(str::to_owned)
            .chain([case.dir.display().to_string()])
            .collect();
        let peer_cmd: Vec<String> = vec![
            tflint.display().to_string(),
            format!("--chdir={}", case.dir.display()),
            format!("--config={}", config.display()),
            "--no-color".into(),
        ];
        let (a, b) = interleaved(runs, &ours_cmd, &peer_cmd, &plugins);
        report(&case.name, &a, &b);
    }
}

/// The runs of both linters on one module, interleaved. When tflint's unmeasured first run
/// already hits the cap, it is not run again: that one stopped run is its sample.
fn interleaved(
    runs: usize,
    ours: &[String],
    peer: &[String],
    plugins: &Path,
) -> (Vec<Sample>, Vec<Sample>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // Warm-up (page cache, the binaries' own pages), not measured.
    measure(ours, plugins, &[0]);
    let first = measure(peer, plugins, &[0, 2]);
    if first.stopped {
        b.push(first);
    }
    for run in 0..runs {
        if run % 2 == 0 || first.stopped {
            a.push(measure(ours, plugins, &[0]));
        }
        if !first.stopped {
            b.push(measure(peer, plugins, &[0, 2]));
        }
        if run % 2 == 1 && !first.stopped {
            a.push(measure(ours, plugins, &[0]));
        }
    }
    (a, b)
}

fn report(name: &str, ours: &[Sample], peer: &[Sample]) {
    let (t_ours, t_peer) = (median(ours), median(peer));
    let ratio = t_ours.as_secs_f64() / t_peer.as_secs_f64();
    let (m_ours, m_peer) = (peak_mib(ours), peak_mib(peer));
    // A stopped tflint ran at least this long and this large: the ratios are upper bounds.
    let (bound, stop_note) = if peer.iter().any(|s| s.stopped) {
        ("< ", " (stopped at the cap, not finished)")
    } else {
        ("", "")
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at_least = if bound.is_empty() { "" } else { "> " };
    println!(
        "{name}: tfcapi-lint median {:.1} ms of {} runs, peak {m_ours:.1} MiB; tflint median \
         {at_least}{:.1} ms of {} runs{stop_note}, peak {at_least}{m_peer:.1} MiB; time ratio \
         {bound}{ratio:.3}",
        ms(t_ours),
        ours.len(),
        ms(t_peer),
        peer.len(),
    );
    bench_line(
        &format!(
            "lint time, {name} (median of {} / {} interleaved runs)",
            ours.len(),
            peer.len()
        ),
        &format!("{:.1} ms", ms(t_ours)),
        &format!("tflint {at_least}{:.1} ms{stop_note}", ms(t_peer)),
        &format!("{bound}{ratio:.3}"),
        "≤ 0.5",
        if ratio <= 0.5 { "met" } else { "MISS" },
    );
    bench_line(
        &format!("lint peak memory, {name} (largest process)"),
        &format!("{m_ours:.1} MiB"),
        &format!("tflint {at_least}{m_peer:.1} MiB{stop_note}"),
        &format!("{bound}{:.3}", m_ours / m_peer),
        "recorded (no goal)",
        "-",
    );
}
