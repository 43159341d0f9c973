//! `make scale` (issue 18; book: Performance, "The scale harness"): for each fleet size, a fresh
//! test environment with Cluster API's managers and CAPTF's manager and webhook binaries, a fleet
//! brought up adopted or applied, a steady window, and at the end one table of every run.
//!
//! - `CAPTF_SCALE_ADOPTED` (default `100,300,1000`) and `CAPTF_SCALE_APPLIED` (default
//!   `100,300`): the fleet sizes of each mode; empty runs none.
//! - `CAPTF_SCALE_SYNC_PERIOD` (default `60s`): the manager's `--sync-period`, shortened so that
//!   the steady window holds resyncs.
//! - `CAPTF_SCALE_STEADY_SECS` (default 150) and `CAPTF_SCALE_SETTLE_SECS` (default 30).

use std::process::ExitCode;
use std::time::Duration;

use e2e::kube_ops::Kube;
use e2e::product::Captf;
use e2e::scale::Mode;
use e2e::scale::run::{self, Plan, Row};
use testenv::TestEnv;

fn sizes(var: &str, default: &str) -> anyhow::Result<Vec<usize>> {
    let text = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|e| anyhow::anyhow!("{var}: {s:?} is not a fleet size: {e}"))
        })
        .collect()
}

fn secs(var: &str, default: u64) -> anyhow::Result<Duration> {
    match std::env::var(var) {
        Ok(v) => Ok(Duration::from_secs(v.trim().parse().map_err(|e| {
            anyhow::anyhow!("{var}: {v:?} is not a number of seconds: {e}")
        })?)),
        Err(_) => Ok(Duration::from_secs(default)),
    }
}

/// One run in an environment of its own, dropped (stopped) afterwards.
fn one(plan: Plan, sync_period: &str) -> anyhow::Result<Row> {
    let name = format!("scale-{}-{}", plan.mode.name(), plan.n);
    let env = TestEnv::start_new(&name, true)?;
    env.registry()?;
    env.kubelet()?;
    let flags = vec![format!("--sync-period={sync_period}")];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let images = e2e::suite::push_images(&env).await?;
        let admin = Kube::new(env.client().await?);
        let captf = Captf::start_with(&env, &admin, &images.runner, &flags).await?;
        let row = run::run(&env, &captf, &images, plan).await?;
        println!("{}", run::detail(&row));
        anyhow::Ok(row)
    })
}

fn main() -> ExitCode {
    let result = (|| -> anyhow::Result<Vec<Row>> {
        let sync_period =
            std::env::var("CAPTF_SCALE_SYNC_PERIOD").unwrap_or_else(|_| "60s".to_owned());
        let (settle, steady) = (
            secs("CAPTF_SCALE_SETTLE_SECS", 30)?,
            secs("CAPTF_SCALE_STEADY_SECS", 150)?,
        );
        let mut plans = Vec::new();
        for (mode, var, default) in [
            (Mode::Adopted, "CAPTF_SCALE_ADOPTED", "100,300,1000"),
            (Mode::Applied, "CAPTF_SCALE_APPLIED", "100,300"),
        ] {
            for n in sizes(var, default)? {
                plans.push(Plan {
                    mode,
                    n,
                    settle,
                    steady,
                });
            }
        }
        let mut rows = Vec::new();
        for plan in plans {
            println!("scale: {} N={} ...", plan.mode.name(), plan.n);
            let row = one(plan, &sync_period)?;
            println!("{}", run::table(std::slice::from_ref(&row)));
            rows.push(row);
        }
        Ok(rows)
    })();
    match result {
        Ok(rows) => {
            println!(
                "\nscale table (manager --sync-period {}):\n{}",
                std::env::var("CAPTF_SCALE_SYNC_PERIOD").unwrap_or_else(|_| "60s".to_owned()),
                run::table(&rows)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("scale: {e:#}");
            ExitCode::FAILURE
        }
    }
}
