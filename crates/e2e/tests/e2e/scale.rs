//! The short scale run of `make test` (issue 18): 100 machines adopted as after `clusterctl
//! move`, under the suite's manager, then a steady minute. It asserts only what noise cannot
//! change: the adopted machines ran no Job, and at steady state the manager wrote nothing and
//! GET no single object in their namespace (it reads from its caches). `make scale` measures the
//! rest (see the book's Performance page).

use std::time::Duration;

use e2e::scale::Mode;
use e2e::scale::run::{self, Plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_fleet_of_100_is_ready_without_jobs_and_quiet_at_steady_state()
-> anyhow::Result<()> {
    let suite = e2e::suite::Suite::shared()?;
    let plan = Plan {
        mode: Mode::Adopted,
        n: 100,
        settle: Duration::from_secs(20),
        steady: Duration::from_secs(60),
    };
    let row = run::run(suite.env, &suite.captf, &suite.images, plan).await?;
    println!("e2e figures: {}", run::detail(&row));
    println!("{}", run::table(std::slice::from_ref(&row)));
    run::check_steady(&row)
}
