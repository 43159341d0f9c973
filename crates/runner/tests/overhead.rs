//! The runner's own overhead: the wall time of `runner run --op apply` (events on, as in a Job)
//! against the same first apply done by hand with `tofu init && tofu apply -auto-approve`, on the
//! same module and backend, interleaved over several runs. A measurement, not a check: run it with
//! `cargo test -p runner --test overhead -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, MODULE, tfvars};

const RUNS: usize = 5;

fn mean(d: &[Duration]) -> f64 {
    d.iter().map(Duration::as_secs_f64).sum::<f64>() / d.len() as f64
}

fn median(d: &[Duration]) -> f64 {
    let mut v: Vec<f64> = d.iter().map(Duration::as_secs_f64).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run explicitly"]
async fn runner_overhead_against_tofu_by_hand() {
    let Some(fx) = Fixture::new("overhead", MODULE, &tfvars("alpha", "1", true), true).await else {
        return;
    };
    let mut runner_times = Vec::new();
    let mut hand_times = Vec::new();
    let mut same_steps_times = Vec::new();
    for i in 0..RUNS {
        // The runner: a first apply on a fresh state and a fresh work directory.
        let suffix = format!("overhead{i:02}runner-c");
        let (mut args, result) = fx.args("apply", &[]);
        for a in &mut args {
            if a.starts_with("--backend-config=secret_suffix=") {
                *a = format!("--backend-config=secret_suffix={suffix}");
            }
        }
        let t = Instant::now();
        let out = fx.command(&args).output().await.unwrap();
        runner_times.push(t.elapsed());
        common::finish(&out, &result).assert_ok();

        // By hand: the same root, init and apply, nothing else.
        let root = fx.captf.join(format!("hand-{i}/root"));
        std::fs::create_dir_all(&root).unwrap();
        for f in ["main.tf.json", "terraform.tfvars.json"] {
            std::fs::copy(fx.captf.join("config").join(f), root.join(f)).unwrap();
        }
        let data_dir = fx.captf.join(format!("hand-{i}/.terraform"));
        let tofu = |args: Vec<String>| {
            let mut c = tokio::process::Command::new(&fx.tofu);
            c.args(args)
                .current_dir(&root)
                .env_remove("TF_CLI_CONFIG_FILE")
                .env("TF_DATA_DIR", &data_dir)
                .env("TF_IN_AUTOMATION", "1")
                .env("CHECKPOINT_DISABLE", "1");
            c
        };
        let t = Instant::now();
        let init = tofu(vec![
            "init".into(),
            "-input=false".into(),
            "-no-color".into(),
            format!("-backend-config=secret_suffix=overhead{i:02}byhand-c"),
            format!("-backend-config=namespace={}", fx.ns),
            format!("-backend-config=config_path={}", fx.kubeconfig.display()),
        ])
        .output()
        .await
        .unwrap();
        assert!(
            init.status.success(),
            "{}",
            String::from_utf8_lossy(&init.stderr)
        );
        let apply = tofu(vec![
            "apply".into(),
            "-auto-approve".into(),
            "-input=false".into(),
            "-no-color".into(),
        ])
        .output()
        .await
        .unwrap();
        hand_times.push(t.elapsed());
        assert!(
            apply.status.success(),
            "{}",
            String::from_utf8_lossy(&apply.stderr)
        );

        // The runner's own sequence by hand (version, init, validate, plan -out, apply of the
        // plan): what is left is the runner's own cost.
        let root = fx.captf.join(format!("same-{i}/root"));
        std::fs::create_dir_all(&root).unwrap();
        for f in ["main.tf.json", "terraform.tfvars.json"] {
            std::fs::copy(fx.captf.join("config").join(f), root.join(f)).unwrap();
        }
        let data_dir = fx.captf.join(format!("same-{i}/.terraform"));
        let plan_file = fx
            .captf
            .join(format!("same-{i}/plan.tfplan"))
            .display()
            .to_string();
        let sequence: Vec<Vec<String>> = vec![
            vec!["version".into(), "-json".into()],
            vec![
                "init".into(),
                "-input=false".into(),
                "-no-color".into(),
                format!("-backend-config=secret_suffix=overhead{i:02}samesteps-c"),
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
        for args in sequence {
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
        }
        same_steps_times.push(t.elapsed());
    }
    eprintln!("runner apply: {runner_times:?}");
    eprintln!("tofu by hand: {hand_times:?}");
    eprintln!("same steps by hand: {same_steps_times:?}");
    eprintln!(
        "SAME STEPS: by hand mean {:.3}s; runner / same steps ratio {:.2}",
        mean(&same_steps_times),
        mean(&runner_times) / mean(&same_steps_times)
    );
    eprintln!(
        "OVERHEAD over {RUNS} runs: runner mean {:.3}s, by hand mean {:.3}s, ratio {:.2} \
         (medians {:.3}s / {:.3}s, ratio {:.2})",
        mean(&runner_times),
        mean(&hand_times),
        mean(&runner_times) / mean(&hand_times),
        median(&runner_times),
        median(&hand_times),
        median(&runner_times) / median(&hand_times),
    );
}
