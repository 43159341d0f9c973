//! `make scale` (issue 18; book: Performance, "The scale harness"): for each fleet size, a fresh
//! test environment with Cluster API's managers and CAPTF's manager and webhook binaries, a fleet
//! brought up adopted or applied, a steady window, and at the end one table of every run.
//!
//! - `CAPTF_SCALE_ADOPTED` (default `100,300,1000`) and `CAPTF_SCALE_APPLIED` (default
//!   `100,300`): the fleet sizes of each mode; empty runs none.
//! - `CAPTF_SCALE_DRIFT` (default `100`): fleet sizes applied on a manager whose
//!   `--drift-default-interval` is `CAPTF_SCALE_DRIFT_INTERVAL` (default `120s`), inside the
//!   steady window, so that the window holds the machines' drift checks; empty runs none.
//! - `CAPTF_SCALE_SYNC_PERIOD` (default `60s`): the manager's `--sync-period`, shortened so that
//!   the steady window holds resyncs.
//! - `CAPTF_SCALE_STEADY_SECS` (default 150) and `CAPTF_SCALE_SETTLE_SECS` (default 30).
//! - `CAPTF_SCALE_UNRELATED` (default empty: none): unrelated Secrets (and a fifth as many
//!   ConfigMaps) put next to a small adopted fleet, in an environment of their own, after the
//!   fleets above ([`e2e::scale::unrelated`]); `CAPTF_SCALE_UNRELATED_FLEET` (default 20) is that
//!   fleet's size. Its steady windows are `CAPTF_SCALE_STEADY_SECS` long.

use std::process::ExitCode;
use std::time::Duration;

use e2e::kube_ops::Kube;
use e2e::product::Captf;
use e2e::scale::Mode;
use e2e::scale::run::{self, Plan, Row};
use e2e::scale::unrelated::{self, UnrelatedPlan};
use e2e::suite::Images;
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

/// `body` in an environment of its own (`name`), with the manager and webhook running; the
/// environment is dropped (stopped) afterwards.
fn in_env<T>(
    name: &str,
    flags: &[String],
    body: impl AsyncFnOnce(&TestEnv, &Captf, &Images) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let env = TestEnv::start_new(name, true)?;
    env.registry()?;
    env.kubelet()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let images = e2e::suite::push_images(&env).await?;
        let admin = Kube::new(env.client().await?);
        let captf = Captf::start_with(&env, &admin, &images.runner, flags).await?;
        body(&env, &captf, &images).await
    })
}

/// The manager's flags: `--sync-period`, and for a drift run `--drift-default-interval`.
fn flags(mode: Mode, sync_period: &str, drift_interval: &str) -> Vec<String> {
    let mut flags = vec![format!("--sync-period={sync_period}")];
    if mode == Mode::Drift {
        flags.push(format!("--drift-default-interval={drift_interval}"));
    }
    flags
}

/// One run in an environment of its own.
fn one(plan: Plan, flags: &[String]) -> anyhow::Result<Row> {
    let name = format!("scale-{}-{}", plan.mode.name(), plan.n);
    in_env(&name, flags, async |env, captf, images| {
        let row = run::run(env, captf, images, plan).await?;
        println!("{}", run::detail(&row));
        Ok(row)
    })
}

/// The unrelated objects' run, when `CAPTF_SCALE_UNRELATED` asks for one: its table and summary.
fn unrelated_run(sync_period: &str, steady: Duration) -> anyhow::Result<Option<String>> {
    let secrets = sizes("CAPTF_SCALE_UNRELATED", "")?
        .into_iter()
        .sum::<usize>();
    if secrets == 0 {
        return Ok(None);
    }
    let fleet = sizes("CAPTF_SCALE_UNRELATED_FLEET", "20")?
        .into_iter()
        .sum::<usize>();
    let plan = UnrelatedPlan {
        secrets,
        fleet,
        steady,
    };
    println!(
        "scale: unrelated objects: {secrets} Secrets, {} ConfigMaps, {fleet} adopted machines ...",
        plan.config_maps()
    );
    let name = format!("scale-unrelated-{secrets}");
    let flags = flags(Mode::Adopted, sync_period, "");
    let row = in_env(&name, &flags, async |env, captf, images| {
        unrelated::run(env, captf, images, plan).await
    })?;
    Ok(Some(format!(
        "{}\n{}",
        unrelated::table(&row),
        unrelated::summary(&row)
    )))
}

fn main() -> ExitCode {
    let sync_period = std::env::var("CAPTF_SCALE_SYNC_PERIOD").unwrap_or_else(|_| "60s".to_owned());
    let drift_interval =
        std::env::var("CAPTF_SCALE_DRIFT_INTERVAL").unwrap_or_else(|_| "120s".to_owned());
    let result = (|| -> anyhow::Result<(Vec<Row>, Option<String>)> {
        let (settle, steady) = (
            secs("CAPTF_SCALE_SETTLE_SECS", 30)?,
            secs("CAPTF_SCALE_STEADY_SECS", 150)?,
        );
        let mut plans = Vec::new();
        for (mode, var, default) in [
            (Mode::Adopted, "CAPTF_SCALE_ADOPTED", "100,300,1000"),
            (Mode::Applied, "CAPTF_SCALE_APPLIED", "100,300"),
            (Mode::Drift, "CAPTF_SCALE_DRIFT", "100"),
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
            let row = one(plan, &flags(plan.mode, &sync_period, &drift_interval))?;
            println!("{}", run::table(std::slice::from_ref(&row)));
            rows.push(row);
        }
        let unrelated = unrelated_run(&sync_period, steady)?;
        Ok((rows, unrelated))
    })();
    match result {
        Ok((rows, unrelated)) => {
            if !rows.is_empty() {
                println!(
                    "\nscale table (manager --sync-period {sync_period}; drift runs \
                     --drift-default-interval {drift_interval}):\n{}",
                    run::table(&rows)
                );
            }
            if let Some(unrelated) = unrelated {
                println!("\nunrelated objects (manager --sync-period {sync_period}):\n{unrelated}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("scale: {e:#}");
            ExitCode::FAILURE
        }
    }
}
