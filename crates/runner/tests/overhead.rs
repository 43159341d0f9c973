//! The runner's own overhead: the wall time of `runner run --op apply` (events on, as in a Job)
//! against the same five commands it runs, done by hand on the same module and backend
//! (`tofu version`, `init`, `validate`, `plan -out`, `apply` of the plan), each on a fresh state
//! and work directory, over 10 interleaved runs (the order of the two flips every run). Reported:
//! the median of the per-run ratios (goal ≤ 1.05) and the medians of each side, then where the
//! difference goes: each command's median on both sides (the runner's from its result document)
//! and the runner's time outside its commands (start-up, the generated root, events, the result).
//!
//! A measurement, not a check (no timed assertion): `make bench` runs it, or
//! `cargo test -p runner --test overhead -- --ignored --nocapture`. It prints one `BENCH` line
//! that `hack/bench.sh` gathers into its table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, MODULE, tfvars};

const RUNS: usize = 10;
const GOAL: f64 = 1.05;
/// The five commands, by their result-document step names.
const STEPS: [&str; 5] = ["version", "init", "validate", "plan", "apply"];

/// One side's run: its wall time and each command's.
struct Timed {
    total: Duration,
    steps: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn secs(d: &[Duration]) -> Vec<f64> {
    d.iter().map(Duration::as_secs_f64).collect()
}

/// One first apply by the runner, on a fresh state and a fresh work directory.
async fn runner_apply(fx: &Fixture, i: usize) -> Timed {
    let suffix = format!("overhead{i:02}runner-c");
    let (mut args, result) = fx.args("apply", &[]);
    for a in &mut args {
        if a.starts_with("--backend-config=secret_suffix=") {
            *a = format!("--backend-config=secret_suffix={suffix}");
        }
    }
    let t = Instant::now();
    let out = fx.command(&args).output().await.unwrap();
    let elapsed = t.elapsed();
    let run = common::finish(&out, &result);
    run.assert_ok();
    let recorded = run.result["steps"].as_array().cloned().unwrap_or_default();
    let steps = STEPS
        .iter()
        .map(|name| {
            recorded
                .iter()
                .find(|s| s["name"] == *name)
                .and_then(|s| s["seconds"].as_f64())
                .unwrap_or_else(|| panic!("the runner ran no {name}: {}", run.result))
        })
        .collect();
    Timed {
        total: elapsed,
        steps,
    }
}

/// The runner's five commands by hand, on the same root, a fresh state and a fresh data
/// directory: what is left between the two is the runner's own cost.
async fn by_hand(fx: &Fixture, i: usize) -> Timed {
    let root = fx.captf.join(format!("hand-{i}/root"));
    std::fs::create_dir_all(&root).unwrap();
    for f in ["main.tf.json", "terraform.tfvars.json"] {
        std::fs::copy(fx.captf.join("config").join(f), root.join(f)).unwrap();
    }
    let data_dir = fx.captf.join(format!("hand-{i}/.terraform"));
    let plan_file = fx
        .captf
        .join(format!("hand-{i}/plan.tfplan"))
        .display()
        .to_string();
    let sequence: Vec<Vec<String>> = vec![
        vec!["version".into(), "-json".into()],
        vec![
            "init".into(),
            "-input=false".into(),
            "-no-color".into(),
            format!("-backend-config=secret_suffix=overhead{i:02}byhand-c"),
            format!("-backend-config=namespace={}", fx.ns),
            format!("-backend-config=config_path={}", fx.kubeconfig.display()),
        ],
        vec!["validate".into(), "-json".into(), "-no-color".into()],
        vec![
            "plan".into(),
            "-input=false".into(),
            "-no-color".into(),
            "-detailed-exitcode".into(),
            format!("-out={plan_file}"),
        ],
        vec![
            "apply".into(),
            "-input=false".into(),
            "-no-color".into(),
            plan_file.clone(),
        ],
    ];
    let t = Instant::now();
    let mut steps = Vec::new();
    for args in sequence {
        let step = Instant::now();
        let out = tokio::process::Command::new(&fx.tofu)
            .args(&args)
            .current_dir(&root)
            .env_remove("TF_CLI_CONFIG_FILE")
            .env("TF_DATA_DIR", &data_dir)
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            .output()
            .await
            .unwrap();
        assert!(
            matches!(out.status.code(), Some(0 | 2)),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        steps.push(step.elapsed().as_secs_f64());
    }
    Timed {
        total: t.elapsed(),
        steps,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run explicitly (make bench)"]
async fn runner_overhead_against_the_same_commands_by_hand() {
    let Some(fx) = Fixture::new("overhead", MODULE, &tfvars("alpha", "1", true), true).await else {
        return;
    };
    // One unmeasured round of each first: page cache, the backend's first connections.
    runner_apply(&fx, 99).await;
    by_hand(&fx, 99).await;
    let mut runner_runs = Vec::new();
    let mut hand_runs = Vec::new();
    for i in 0..RUNS {
        if i % 2 == 0 {
            runner_runs.push(runner_apply(&fx, i).await);
            hand_runs.push(by_hand(&fx, i).await);
        } else {
            hand_runs.push(by_hand(&fx, i).await);
            runner_runs.push(runner_apply(&fx, i).await);
        }
    }
    let runner_times: Vec<Duration> = runner_runs.iter().map(|r| r.total).collect();
    let hand_times: Vec<Duration> = hand_runs.iter().map(|r| r.total).collect();
    let ratios: Vec<f64> = runner_times
        .iter()
        .zip(&hand_times)
        .map(|(r, h)| r.as_secs_f64() / h.as_secs_f64())
        .collect();
    let ratio = median(ratios.clone());
    let (runner_median, hand_median) = (median(secs(&runner_times)), median(secs(&hand_times)));
    eprintln!("runner apply: {runner_times:?}");
    eprintln!("five commands by hand: {hand_times:?}");
    eprintln!("per-run ratios: {ratios:.3?}");
    let step_median =
        |runs: &[Timed], k: usize| median(runs.iter().map(|r| r.steps[k]).collect()) * 1e3;
    for (k, name) in STEPS.iter().enumerate() {
        eprintln!(
            "PHASE {name:<9} runner {:7.1} ms  by hand {:7.1} ms",
            step_median(&runner_runs, k),
            step_median(&hand_runs, k)
        );
    }
    let outside = |runs: &[Timed]| {
        median(
            runs.iter()
                .map(|r| r.total.as_secs_f64() - r.steps.iter().sum::<f64>())
                .collect(),
        ) * 1e3
    };
    eprintln!(
        "PHASE outside   runner {:7.1} ms  by hand {:7.1} ms (wall time not in a command)",
        outside(&runner_runs),
        outside(&hand_runs)
    );
    eprintln!(
        "OVERHEAD over {RUNS} interleaved runs: runner median {runner_median:.3}s, by hand median \
         {hand_median:.3}s, median ratio {ratio:.3} (goal ≤ {GOAL})"
    );
    println!(
        "BENCH\trunner apply vs the five commands by hand (median of {RUNS} paired ratios)\t\
         {:.0} ms\tby hand {:.0} ms\t{ratio:.3}\t≤ {GOAL}\t{}",
        runner_median * 1e3,
        hand_median * 1e3,
        if ratio <= GOAL { "met" } else { "MISS" }
    );
}
