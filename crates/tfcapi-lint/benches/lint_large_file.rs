//! Time and peak memory of linting one large `.tf` file of 1, 10 and 50 MB (a generated machine
//! module: the no-op module's files plus one file of user variables, locals, resources and
//! outputs), against a baseline measured in the same run: parsing the same file whole with
//! `hcl::edit`, which is what the loader did for every file before it parsed large files a run
//! of blocks at a time.
//!
//! Time comes from criterion (`lint/<size>` and `parse_whole/<size>`). Peak memory is measured in
//! a child process per size and mode (the bench re-runs itself with `LINT_BENCH_CHILD` set), read
//! from the kernel's high-water mark of its resident set (`VmHWM`), and printed with its ratio to
//! the input size:
//!
//! ```text
//! peak-memory lint 50MB: 123.4 MiB (2.5x input); parse_whole: 1456.7 MiB (29.1x input)
//! ```
//!
//! Run: `cargo bench -p tfcapi-lint --bench lint_large_file`.

mod generated;

use criterion::{BenchmarkId, Criterion, SamplingMode};
use generated::large_file_module as module;
use std::hint::black_box;
use std::time::Duration;
use tfcapi_lint::module::{SourceFile, lint_sources};
use tfcapi_lint::role::Role;

const SIZES_MB: [usize; 3] = [1, 10, 50];
const CHILD: &str = "LINT_BENCH_CHILD";

fn lint(files: Vec<SourceFile>) -> usize {
    let (_, findings) = lint_sources(files, Role::Machine, "bench");
    assert!(findings.is_empty(), "{findings:#?}");
    findings.len()
}

fn parse_whole(files: &[SourceFile]) -> usize {
    let big = files.last().expect("big.tf");
    hcl::edit::parser::parse_body(&big.text)
        .expect("parses")
        .len()
}

/// The peak resident set of this process, in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Child mode: builds the module, runs one mode once, prints the peak resident set.
fn child(spec: &str) {
    let (mode, mb) = spec.split_once(':').expect("mode:mb");
    let mb: usize = mb.parse().expect("a size");
    let files = module(mb);
    match mode {
        "lint" => black_box(lint(files)),
        _ => black_box(parse_whole(&files)),
    };
    println!("{}", peak_rss());
}

fn child_peak(mode: &str, mb: usize) -> f64 {
    let out = std::process::Command::new(std::env::current_exe().expect("this bench"))
        .env(CHILD, format!("{mode}:{mb}"))
        .output()
        .expect("the child runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<f64>()
        .expect("a byte count")
        / f64::from(1 << 20)
}

fn bench(c: &mut Criterion) {
    for mb in SIZES_MB {
        let (lint_peak, whole_peak) = (child_peak("lint", mb), child_peak("parse_whole", mb));
        println!(
            "peak-memory lint {mb}MB: {lint_peak:.1} MiB ({:.1}x input); parse_whole: {whole_peak:.1} MiB ({:.1}x input); ratio {:.2}",
            lint_peak / mb as f64,
            whole_peak / mb as f64,
            lint_peak / whole_peak
        );
    }
    let mut group = c.benchmark_group("large_file");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100));
    for mb in SIZES_MB {
        let files = module(mb);
        group.bench_with_input(
            BenchmarkId::new("lint", format!("{mb}MB")),
            &files,
            |b, f| {
                b.iter_batched(
                    || f.clone(),
                    |f| black_box(lint(f)),
                    criterion::BatchSize::PerIteration,
                );
            },
        );
        group.bench_with_input(
            BenchmarkId::new("parse_whole", format!("{mb}MB")),
            &files,
            |b, f| b.iter(|| black_box(parse_whole(f))),
        );
    }
    group.finish();
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
