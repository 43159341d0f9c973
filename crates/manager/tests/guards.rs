//! What keeps the manager from running the wrong Job, or too many (The Reconcile Lifecycle "Retry
//! backoff", "Run leases and the cluster operation gate", "Bookkeeping"; Identities and
//! Credentials "Revoke access"), with real Jobs in the test environment.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use common::*;
use contract::names::run_secret_name;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

fn finished_at(job: &Job) -> Option<SystemTime> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| SystemTime::from(t.0))
}

fn created_at(job: &Job) -> SystemTime {
    SystemTime::from(job.metadata.creation_timestamp.as_ref().unwrap().0)
}

fn metric(encoded: &str, name: &str, must: &[&str]) -> f64 {
    encoded
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && must.iter().all(|m| l.contains(m)))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// An identity that does not allow the namespace runs nothing: no Job, no mirror.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_not_allowing_the_namespace_runs_nothing() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("denied").await.unwrap();
    identity(
        &client,
        "id-elsewhere",
        &["some-other-namespace"],
        "planted-denied-1",
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-denied");
    cluster(&client, &ns, "denied", "id-elsewhere", &images.cluster).await;
    let tc = eventually(LONG, "IdentityAllowed=False", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "denied").await;
        (condition(&tc, "IdentityAllowed").map(|c| c.1) == Some("NamespaceNotAllowed".to_owned()))
            .then_some(tc)
    })
    .await;
    assert_eq!(
        condition(&tc, "ApplyJobSucceeded"),
        Some(("False".to_owned(), "IdentityNotAllowed".to_owned()))
    );
    assert_eq!(condition(&tc, "Ready").unwrap().0, "False");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "denied").await.is_empty());
    assert!(
        get_json_opt(&client, &ns, "v1", "Secret", "captf-creds-id-elsewhere")
            .await
            .is_none()
    );
}

/// ImagePullFailed: a cluster whose module image does not exist (a mistyped tag, say) says so as
/// soon as the kubelet reports the failed pull, naming the image, instead of "the first apply is
/// running"; and deleting it does not wait for the Job's one-hour deadline: the Job, whose module
/// container never started (its runner copy step did), is deleted (`StuckJobDeleted`), and with
/// no state to destroy the object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_is_reported_and_does_not_hold_up_a_deletion() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("pullfail").await.unwrap();
    identity(&client, "id-pullfail", &[ns.as_str()], "planted-pullfail-1").await;
    let registry = images.cluster.split('/').next().unwrap();
    let missing = format!("{registry}/captf-test/no-such-module:v1");
    let mgr = start_manager(&client, &ns, &images, "manager-pullfail");
    cluster(&client, &ns, "typo", "id-pullfail", &missing).await;
    let tc = eventually(LONG, "ApplyJobSucceeded=False/ImagePullFailed", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "typo").await;
        (condition(&tc, "ApplyJobSucceeded")
            == Some(("False".to_owned(), "ImagePullFailed".to_owned())))
        .then_some(tc)
    })
    .await;
    let message = condition_message(&tc, "ApplyJobSucceeded");
    assert!(message.contains(&missing), "{message}");
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "typo").await, "apply").len(),
        1
    );
    assert!(
        !events_json(&client, &ns)
            .await
            .contains("planted-pullfail-1")
    );

    delete(&client, &ns, TC, "TerraformCluster", "typo").await;
    eventually(LONG, "the cluster is gone", || async {
        let tc = get_json_opt(&client, &ns, TC, "TerraformCluster", "typo").await;
        tc.is_none().then_some(())
    })
    .await;
    assert!(jobs_of(&client, &ns, "typo").await.is_empty());
    assert!(events_json(&client, &ns).await.contains("StuckJobDeleted"));
    mgr.stop().await;
}

/// A failing apply is retried after the book's first backoff step (one minute), not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_apply_backs_off_one_minute() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = failing_image(env).await;
    let ns = env.namespace("backoff").await.unwrap();
    identity(&client, "id-backoff", &[ns.as_str()], "planted-backoff-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-backoff");
    cluster(&client, &ns, "fails", "id-backoff", &image).await;
    let first = eventually(LONG, "the first apply failed", || async {
        let jobs = op_jobs(&jobs_of(&client, &ns, "fails").await, "apply");
        jobs.first().and_then(finished_at)
    })
    .await;
    let tc = eventually(LONG, "ApplyFailed", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "fails").await;
        (condition(&tc, "ApplyJobSucceeded").map(|c| c.1) == Some("ApplyFailed".to_owned()))
            .then_some(tc)
    })
    .await;
    assert_eq!(tc["status"]["lastRun"]["error"]["kind"], "step", "{tc:#}");
    let second = eventually(Duration::from_secs(150), "the second attempt", || async {
        let jobs = op_jobs(&jobs_of(&client, &ns, "fails").await, "apply");
        jobs.get(1).map(created_at)
    })
    .await;
    let waited = second.duration_since(first).unwrap();
    assert!(
        waited >= Duration::from_secs(59) && waited <= Duration::from_secs(100),
        "the retry came {waited:?} after the failure"
    );
    let jobs = op_jobs(&jobs_of(&client, &ns, "fails").await, "apply");
    assert!(
        jobs[1]
            .metadata
            .name
            .as_ref()
            .unwrap()
            .contains("-apply-a2-")
    );
    let enc = mgr.metrics.encode();
    assert!(
        metric(&enc, "captf_jobs_total", &["result=\"failed\""]) >= 1.0,
        "{enc}"
    );
}

/// Whether the object's apply of `attempt` exists (or existed: history pruning may have removed
/// it since, which it only does once a newer attempt exists).
async fn attempts(client: &kube::Client, ns: &str, name: &str) -> Vec<u32> {
    let mut out: Vec<u32> = op_jobs(&jobs_of(client, ns, name).await, "apply")
        .iter()
        .filter_map(|j| {
            j.metadata.labels.as_ref()?[api::constants::labels::ATTEMPT]
                .parse()
                .ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// The Reconcile Lifecycle "Retry backoff" (book l.548), every step, with the manager's clock
/// moved instead of waited on: after the first failure the retry waits one minute, after the
/// second two, and after the third (the failed-Jobs history limit, 3) ten; just before each
/// step nothing starts, just after it the next attempt does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_backoff_steps_are_one_two_and_ten_minutes() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = failing_image(env).await;
    let ns = env.namespace("steps").await.unwrap();
    identity(&client, "id-steps", &[ns.as_str()], "planted-steps-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-steps");
    cluster(&client, &ns, "steps", "id-steps", &image).await;
    let mut offset = 0u64;
    let mut pokes = 0u32;
    for (failed, step) in [(1u32, 60u64), (2, 120), (3, 600)] {
        eventually(LONG, &format!("attempt {failed} failed"), || async {
            let jobs = op_jobs(&jobs_of(&client, &ns, "steps").await, "apply");
            let last = jobs.last()?;
            (jobs.len() as u32 >= failed.min(3) && finished_at(last).is_some()).then_some(())
        })
        .await;
        assert_eq!(attempts(&client, &ns, "steps").await.last(), Some(&failed));
        // Half a minute before the step, as the manager sees it: nothing starts.
        let before = step - 30;
        mgr.clock
            .advance(Duration::from_secs(before.saturating_sub(offset)));
        offset = offset.max(before);
        pokes += 1;
        poke(&client, &ns, "steps", &pokes.to_string()).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            attempts(&client, &ns, "steps").await.last(),
            Some(&failed),
            "attempt {} started before its {step} s backoff",
            failed + 1
        );
        // Just past the step: the next attempt starts.
        mgr.clock.advance(Duration::from_secs(step + 5 - offset));
        offset = step + 5;
        pokes += 1;
        poke(&client, &ns, "steps", &pokes.to_string()).await;
        // Within 30 s: sooner than the step itself in real time, so only the clock counts.
        eventually(
            Duration::from_secs(30),
            &format!("attempt {}", failed + 1),
            || async {
                attempts(&client, &ns, "steps")
                    .await
                    .contains(&(failed + 1))
                    .then_some(())
            },
        )
        .await;
    }
    assert!(!events_json(&client, &ns).await.contains("planted-steps-1"));
}

/// A pod killed from outside ends its Job `interrupted`: retried at once, not counted as a
/// failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pod_is_interrupted_and_retried_at_once() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("interrupt").await.unwrap();
    identity(
        &client,
        "id-interrupt",
        &[ns.as_str()],
        "planted-interrupt-1",
    )
    .await;
    let mgr = start_manager(&client, &ns, &images, "manager-interrupt");
    cluster(&client, &ns, "slow", "id-interrupt", &image).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "slow",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"sleep_seconds": 300}}})),
    )
    .await
    .unwrap();
    // Wait for the apply's `source` container to run, then delete its pod.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (job, pod) = eventually(LONG, "a running apply pod", || async {
        let jobs = op_jobs(&jobs_of(&client, &ns, "slow").await, "apply");
        let job = jobs.last()?.metadata.name.clone()?;
        let pod = pods
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
            .await
            .ok()?
            .items
            .into_iter()
            .next()?;
        let running = pod
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .iter()
            .any(|c| c.name == "source" && c.state.as_ref().is_some_and(|s| s.running.is_some()));
        running.then(|| (job, pod.metadata.name.clone().unwrap()))
    })
    .await;
    // Let the runtime reach the slow provisioner.
    tokio::time::sleep(Duration::from_secs(4)).await;
    pods.delete(&pod, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let killed_at = eventually(LONG, "the killed Job finished", || async {
        finished_at(&jobs_api.get(&job).await.ok()?)
    })
    .await;
    // Timestamps have a resolution of one second.
    let retry = eventually(Duration::from_secs(60), "the retry", || async {
        let jobs = op_jobs(&jobs_of(&client, &ns, "slow").await, "apply");
        jobs.iter()
            .find(|j| j.metadata.name.as_deref() != Some(job.as_str()))
            .map(created_at)
    })
    .await;
    assert!(
        retry + Duration::from_secs(1) >= killed_at
            && retry.duration_since(killed_at).unwrap_or_default() < Duration::from_secs(30),
        "an interrupted apply is retried without backoff"
    );
    let killed = eventually(
        Duration::from_secs(30),
        "the killed Job bookkept",
        || async {
            let j = jobs_api.get(&job).await.ok()?;
            let a = j.metadata.annotations.clone().unwrap_or_default();
            a.contains_key("captf.io/bookkept").then_some(a)
        },
    )
    .await;
    assert_eq!(
        killed.get("captf.io/interrupted").map(String::as_str),
        Some("true")
    );
    // The pass marks the Job bookkept and counts it right after: wait for the count too.
    let enc = eventually(
        Duration::from_secs(10),
        "the interrupted Job counted",
        || async {
            let enc = mgr.metrics.encode();
            (metric(&enc, "captf_jobs_total", &["result=\"interrupted\""]) >= 1.0).then_some(enc)
        },
    )
    .await;
    assert!(
        (metric(&enc, "captf_jobs_total", &["result=\"interrupted\""]) - 1.0).abs() < 1e-9,
        "{enc}"
    );
    assert!(
        metric(&enc, "captf_jobs_total", &["result=\"failed\""]).abs() < 1e-9,
        "{enc}"
    );
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "slow").await;
    assert_ne!(
        condition(&tc, "ApplyJobSucceeded").map(|c| c.1),
        Some("ApplyFailed".to_owned()),
        "{tc:#}"
    );
}

/// Two managers reconciling the same objects start one Job per operation, never two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_managers_never_run_two_jobs_for_one_object() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("twomgr").await.unwrap();
    identity(&client, "id-twomgr", &[ns.as_str()], "planted-twomgr-1").await;
    let a = start_manager(&client, &ns, &images, "manager-one");
    let b = start_manager(&client, &ns, &images, "manager-two");
    cluster(&client, &ns, "twice", "id-twomgr", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "twice", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "twice").await;
    machine(
        &client,
        &ns,
        "twice",
        "twice-m",
        &images.machine,
        false,
        "planted-bootstrap-two",
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "twice-m", "True", LONG).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(jobs_of(&client, &ns, "twice").await.len(), 1);
    assert_eq!(jobs_of(&client, &ns, "twice-m").await.len(), 1);
    // Announced once, by whichever manager created it.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let created: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("JobCreated")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("twice")
        })
        .collect();
    assert_eq!(created.len(), 1, "{created:#?}");
    let finished: f64 = [&a, &b]
        .iter()
        .map(|m| {
            metric(
                &m.metrics.encode(),
                "captf_jobs_total",
                &["result=\"succeeded\""],
            )
        })
        .sum();
    assert!(finished >= 2.0, "the two Jobs were bookkept");
}

/// A manager killed while its Job runs loses nothing: the next one picks the finished Job up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_manager_picks_up_the_finished_job() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("restart").await.unwrap();
    identity(&client, "id-restart", &[ns.as_str()], "planted-restart-1").await;
    let first = start_manager(&client, &ns, &images, "manager-first");
    cluster(&client, &ns, "again", "id-restart", &images.cluster).await;
    // Killed once the Job and its per-run Secret both exist (the Job is written first: a kill
    // between the two leaves a Job whose pod cannot start until the next manager writes the
    // Secret, which a_job_left_without_its_per_run_secret_gets_it_from_the_next_pass covers).
    let job = eventually(LONG, "the apply Job and its per-run Secret", || async {
        let job = jobs_of(&client, &ns, "again")
            .await
            .first()
            .and_then(|j| j.metadata.name.clone())?;
        get_json_opt(&client, &ns, "v1", "Secret", &run_secret_name(&job))
            .await
            .map(|_| job)
    })
    .await;
    first.kill();
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    eventually(LONG, "the Job finished with no manager", || async {
        finished_at(&jobs_api.get(&job).await.ok()?)
    })
    .await;
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "again").await;
    assert_ne!(condition(&tc, "Ready").unwrap().0, "True");
    let _second = start_manager(&client, &ns, &images, "manager-second");
    let tc = wait_ready(&client, &ns, "TerraformCluster", "again", "True", LONG).await;
    assert_eq!(tc["status"]["lastRun"]["job"], job.as_str());
    assert_eq!(tc["status"]["initialization"]["provisioned"], true);
    // The Job is marked bookkept after the status write lands (the book's write order), so
    // Ready can be seen a moment before the mark.
    let bookkept = eventually(LONG, "the Job marked bookkept", || async {
        let j = jobs_api.get(&job).await.ok()?;
        j.metadata.annotations?.get("captf.io/bookkept").cloned()
    })
    .await;
    assert_eq!(bookkept.as_str(), "true");
    assert!(
        get_json_opt(&client, &ns, "v1", "Secret", &run_secret_name(&job))
            .await
            .is_none()
    );
    assert_eq!(jobs_of(&client, &ns, "again").await.len(), 1);
}

/// An admin client that counts its Job creates in `posted` and loses a Secret create (sent to a
/// path that does not exist, as if a crash came first) whenever `lose`, given that count, says so.
async fn losing_secret_creates(
    env: &testenv::TestEnv,
    posted: Arc<AtomicUsize>,
    lose: impl Fn(usize) -> bool + Clone + Send + Sync + 'static,
) -> kube::Client {
    client_mapping(env, move |mut req: http::Request<kube::client::Body>| {
        let path = req.uri().path().to_owned();
        if req.method() == http::Method::POST && path.ends_with("/jobs") {
            posted.fetch_add(1, Ordering::SeqCst);
        } else if req.method() == http::Method::POST
            && path.ends_with("/secrets")
            && lose(posted.load(Ordering::SeqCst))
        {
            *req.uri_mut() = format!("{path}-lost").parse().unwrap();
        }
        req
    })
    .await
}

/// A pass stopped between creating a Job and its per-run Secret (here the Secret's create fails,
/// as a crash at that point would leave it) is repaired by the next pass: the Secret is written
/// late and the same Job runs, well before a never-startable Job would be deleted and replaced by
/// a second Job of the same attempt (found by the fault harness, tests/chaos.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_left_without_its_per_run_secret_gets_it_from_the_next_pass() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("late-secret").await.unwrap();
    identity(&client, "id-late-secret", &[ns.as_str()], "planted-late-1").await;
    // After the first Job create, the next Secret create (the per-run Secret's) goes nowhere.
    let (job_posted, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let fail = failed.clone();
    let failing = losing_secret_creates(env, job_posted.clone(), move |posted| {
        posted == 1 && fail.fetch_add(1, Ordering::SeqCst) == 0
    })
    .await;
    let _mgr = start_manager(&failing, &ns, &images, "manager-late-secret");
    cluster(&client, &ns, "late", "id-late-secret", &images.cluster).await;
    let job = eventually(LONG, "the apply Job", || async {
        jobs_of(&client, &ns, "late").await.first().cloned()
    })
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "late", "True", LONG).await;
    assert!(
        failed.load(Ordering::SeqCst) >= 1,
        "the per-run Secret's create was lost"
    );
    let jobs = jobs_of(&client, &ns, "late").await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].metadata.uid, job.metadata.uid, "the same Job ran");
    // A Job judged stuck (a minute without a pod) would have been replaced by a second one.
    assert_eq!(job_posted.load(Ordering::SeqCst), 1, "one Job created");
}

/// The Reconcile Lifecycle "While a Job is active" (book l.518): a Job whose per-run Secret is
/// missing and whose pod never started (here every Secret create after the Job's is lost, the
/// repair's too) is left alone while it is younger than a minute, then deleted as stuck
/// (`StuckJobDeleted`), with the manager's clock moved past the minute instead of waited on; once
/// Secrets can be written again the apply runs in a new Job and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_its_per_run_secret_or_a_pod_is_deleted_as_stuck_after_a_minute() {
    use std::sync::atomic::AtomicBool;
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("stuck").await.unwrap();
    identity(&client, "id-stuck", &[ns.as_str()], "planted-stuck-1").await;
    let (job_posted, losing) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(true)),
    );
    let lose = losing.clone();
    let failing = losing_secret_creates(env, job_posted.clone(), move |posted| {
        posted >= 1 && lose.load(Ordering::SeqCst)
    })
    .await;
    let mgr = start_manager(&failing, &ns, &images, "manager-stuck");
    cluster(&client, &ns, "stuck", "id-stuck", &images.cluster).await;
    let first = eventually(LONG, "the apply Job", || async {
        jobs_of(&client, &ns, "stuck").await.first().cloned()
    })
    .await;
    // Younger than a minute: waited for, not deleted.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let jobs = jobs_of(&client, &ns, "stuck").await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].metadata.uid, first.metadata.uid);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let running = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
    assert!(!running, "no pod started without its per-run Secret");

    // A minute later, as the manager sees it: deleted as stuck.
    mgr.clock.advance(Duration::from_secs(61));
    poke(&client, &ns, "stuck", "1").await;
    // Within 30 s: well before the Job is a minute old in real time, so only the clock counts.
    eventually(Duration::from_secs(30), "StuckJobDeleted", || async {
        let gone = !jobs_of(&client, &ns, "stuck")
            .await
            .iter()
            .any(|j| j.metadata.uid == first.metadata.uid);
        (gone && events_json(&client, &ns).await.contains("StuckJobDeleted")).then_some(())
    })
    .await;

    // Secrets can be written again: a new Job runs the apply.
    losing.store(false, Ordering::SeqCst);
    let tc = wait_ready(&client, &ns, "TerraformCluster", "stuck", "True", LONG).await;
    let jobs = op_jobs(&jobs_of(&client, &ns, "stuck").await, "apply");
    assert_eq!(
        jobs.len(),
        1,
        "{:?}",
        jobs.iter().map(|j| &j.metadata.name).collect::<Vec<_>>()
    );
    assert_ne!(jobs[0].metadata.uid, first.metadata.uid);
    assert!(job_posted.load(Ordering::SeqCst) >= 2);
    assert!(!tc.to_string().contains("planted-stuck-1"));
}

/// Under the cluster operation gate a machine's apply waits for its cluster's running apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_apply_waits_for_the_cluster_apply() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("gate").await.unwrap();
    identity(&client, "id-gate", &[ns.as_str()], "planted-gate-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-gate");
    cluster(&client, &ns, "gated", "id-gate", &image).await;
    wait_ready(&client, &ns, "TerraformCluster", "gated", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "gated").await;
    // A slow re-apply of the cluster…
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "gated",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"sleep_seconds": 20}}})),
    )
    .await
    .unwrap();
    let cluster_job = eventually(LONG, "the cluster's re-apply", || async {
        let jobs = op_jobs(&jobs_of(&client, &ns, "gated").await, "apply");
        (jobs.len() == 2).then(|| jobs[1].clone())
    })
    .await;
    // …during which a machine is created.
    machine(
        &client,
        &ns,
        "gated",
        "gated-m",
        &images.machine,
        true,
        "planted-bootstrap-gate",
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "WaitingForClusterOperation",
        || async {
            let tm = get_json(&client, &ns, TC, "TerraformMachine", "gated-m").await;
            (condition(&tm, "ApplyJobSucceeded").map(|c| c.1)
                == Some("WaitingForClusterOperation".to_owned()))
            .then_some(())
        },
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "gated-m", "True", LONG).await;
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let cluster_done = finished_at(
        &jobs_api
            .get(cluster_job.metadata.name.as_ref().unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    let machine_job = op_jobs(&jobs_of(&client, &ns, "gated-m").await, "apply")
        .into_iter()
        .next()
        .unwrap();
    assert!(
        created_at(&machine_job) >= cluster_done - Duration::from_secs(1),
        "the machine's apply started only after the cluster's finished"
    );
}

/// The cluster operation gate does not starve the cluster: while a TerraformCluster holds both
/// leases and waits for its machines' operations (its Job not created yet), a machine created
/// meanwhile does not start; it waits behind the cluster's operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_created_while_the_cluster_waits_for_the_gate_does_not_start() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let cluster_image = slow_image(env).await;
    let machine_image = slow_machine_image(env).await;
    let ns = env.namespace("starve").await.unwrap();
    identity(&client, "id-starve", &[ns.as_str()], "planted-starve-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-starve");
    cluster(&client, &ns, "cg", "id-starve", &cluster_image).await;
    wait_ready(&client, &ns, "TerraformCluster", "cg", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "cg").await;
    // A machine whose apply takes a while…
    machine_with_variables(
        &client,
        &ns,
        "cg",
        "cg-slow",
        &machine_image,
        false,
        "planted-bootstrap-starve",
        json!({"sleep_seconds": 25}),
    )
    .await;
    eventually(LONG, "the slow machine's apply", || async {
        (!op_jobs(&jobs_of(&client, &ns, "cg-slow").await, "apply").is_empty()).then_some(())
    })
    .await;
    // …while the cluster re-applies: it takes both leases and waits for the machine.
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "cg",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"sleep_seconds": 1}}})),
    )
    .await
    .unwrap();
    eventually(
        LONG,
        "the cluster waiting for machine operations",
        || async {
            let tc = get_json(&client, &ns, TC, "TerraformCluster", "cg").await;
            (condition(&tc, "ApplyJobSucceeded").map(|c| c.1)
                == Some("WaitingForMachineOperations".to_owned()))
            .then_some(())
        },
    )
    .await;
    // A machine created now waits behind the cluster's operation.
    machine(
        &client,
        &ns,
        "cg",
        "cg-late",
        &images.machine,
        false,
        "planted-bootstrap-late",
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "cg-late", "True", LONG).await;
    let cluster_reapply = eventually(LONG, "the cluster's re-apply", || async {
        let jobs = op_jobs(&jobs_of(&client, &ns, "cg").await, "apply");
        (jobs.len() == 2).then(|| created_at(&jobs[1]))
    })
    .await;
    let late = op_jobs(&jobs_of(&client, &ns, "cg-late").await, "apply")
        .into_iter()
        .next()
        .unwrap();
    assert!(
        created_at(&late) >= cluster_reapply,
        "the late machine's apply started only after the waiting cluster's"
    );
}

/// Each Job's name with how it ended, for a failure message: its conditions and CAPTF's
/// annotations on it (`captf.io/interrupted`, …).
fn job_outcomes(jobs: &[Job]) -> Vec<String> {
    jobs.iter()
        .map(|j| {
            let conditions: Vec<String> = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|c| {
                    format!(
                        "{}={} {} {}",
                        c.type_,
                        c.status,
                        c.reason.unwrap_or_default(),
                        c.message.unwrap_or_default()
                    )
                })
                .collect();
            let annotations: Vec<String> = j
                .metadata
                .annotations
                .iter()
                .flatten()
                .filter(|(k, _)| k.starts_with("captf.io/"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "{}: {conditions:?} {annotations:?}",
                j.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect()
}

/// The applies of one machine: one Job per attempt, exactly one that succeeded, and every other
/// one a failure retried under the next attempt (a run that fails under load is retried, as the
/// book says; two managers must never make a second Job of the same attempt). A failure prints
/// what its runner reported (the result document in the pod's termination message).
async fn one_apply_per_attempt_and_one_success(
    client: &kube::Client,
    ns: &str,
    name: &str,
    applies: &[Job],
) {
    let attempt = |j: &Job| {
        j.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(api::constants::labels::ATTEMPT))
            .cloned()
            .unwrap_or_default()
    };
    let attempts: std::collections::BTreeSet<String> = applies.iter().map(attempt).collect();
    assert_eq!(
        attempts.len(),
        applies.len(),
        "{name}: {:?}",
        job_outcomes(applies)
    );
    let (succeeded, failed): (Vec<&Job>, Vec<&Job>) = applies
        .iter()
        .partition(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1));
    assert_eq!(succeeded.len(), 1, "{name}: {:?}", job_outcomes(applies));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for job in failed {
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let listed = pods
            .list(&ListParams::default().labels(&format!("job-name={job_name}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let reported: Vec<String> = listed
            .iter()
            .flat_map(|p| {
                p.status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
            })
            .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
            .collect();
        eprintln!(
            "{name}: apply {job_name} failed and was retried; its runner reported {reported:?}"
        );
    }
}

/// Two managers without leader election over twenty machines: one Job per attempt of an
/// operation (one apply each, or a failed one retried under the next attempt), and no
/// condition that reverts (a `Ready` that went True stays True, `provisioned` stays true).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_managers_without_leader_election_over_twenty_machines() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("twenty").await.unwrap();
    identity(&client, "id-twenty", &[ns.as_str()], "planted-twenty-1").await;
    let _a = start_manager(&client, &ns, &images, "manager-twenty-a");
    let _b = start_manager(&client, &ns, &images, "manager-twenty-b");
    cluster(&client, &ns, "twenty", "id-twenty", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "twenty", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "twenty").await;
    // Every status the machines go through, as a watch delivers them.
    let seen: Arc<std::sync::Mutex<Vec<(String, String, bool)>>> = Arc::default();
    let record = seen.clone();
    let tms: Api<api::machine::TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let watch = tokio::spawn(async move {
        use futures::StreamExt;
        let mut events = std::pin::pin!(kube::runtime::watcher(
            tms,
            kube::runtime::watcher::Config::default()
        ));
        while let Some(Ok(event)) = events.next().await {
            if let kube::runtime::watcher::Event::Apply(tm) = event {
                let v = serde_json::to_value(&tm).unwrap();
                let ready = condition(&v, "Ready").map(|c| c.0).unwrap_or_default();
                let provisioned = v["status"]["initialization"]["provisioned"] == true;
                let name = tm.metadata.name.clone().unwrap_or_default();
                record.lock().unwrap().push((name, ready, provisioned));
            }
        }
    });
    let names: Vec<String> = (0..20).map(|i| format!("twenty-m{i:02}")).collect();
    for name in &names {
        machine(
            &client,
            &ns,
            "twenty",
            name,
            &images.machine,
            false,
            "planted-bootstrap-20",
        )
        .await;
    }
    for name in &names {
        wait_ready(
            &client,
            &ns,
            "TerraformMachine",
            name,
            "True",
            Duration::from_secs(900),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    watch.abort();
    for name in &names {
        let jobs = jobs_of(&client, &ns, name).await;
        let applies = op_jobs(&jobs, "apply");
        one_apply_per_attempt_and_one_success(&client, &ns, name, &applies).await;
        let history: Vec<(String, bool)> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, r, p)| (r.clone(), *p))
            .collect();
        let first_ready = history.iter().position(|(r, _)| r == "True");
        if let Some(i) = first_ready {
            assert!(
                history[i..].iter().all(|(r, _)| r == "True"),
                "{name}: Ready reverted: {history:?}"
            );
        }
        let first_provisioned = history.iter().position(|(_, p)| *p);
        if let Some(i) = first_provisioned {
            assert!(
                history[i..].iter().all(|(_, p)| *p),
                "{name}: provisioned reverted: {history:?}"
            );
        }
    }
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "twenty").await, "apply").len(),
        1
    );
}

/// The API requests one steady-state reconcile of a provisioned object with nothing to do makes:
/// none. Every read comes from the caches, and nothing changed, so nothing is written; the
/// object's `variablesFrom` ConfigMap and Secret are not read again either, since their
/// resourceVersions did not change. The caches' watches are long-running streams, not requests
/// a pass makes, and are not counted; neither are the requests about other tests' objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_reconcile_requests() {
    let (env, images) = setup().await;
    let admin = env.client().await.unwrap();
    install_runner_cluster_role(&admin).await;
    let ns = env.namespace("steady").await.unwrap();
    identity(&admin, "id-steady", &[ns.as_str()], "planted-steady-1").await;
    let image = slow_image(env).await;
    create(
        &admin,
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "steady-vars", "labels": {"captf.io/variables": "true"}},
               "data": {"token": "from-the-config-map"}}),
    )
    .await;
    create(
        &admin,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "steady-secret-vars", "labels": {"captf.io/variables": "true"}},
               "stringData": {"token": "planted-steady-variable"}}),
    )
    .await;
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let made: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let log = made.clone();
    // Other tests of this binary run at the same time: the identities they create are
    // cluster-wide, so this manager's identity controller keeps their status (and posts their
    // events) too. Those requests are not about this object and are not counted.
    let own_ns = format!("/namespaces/{ns}/");
    let others = move |path: &str| {
        (path.contains("/terraformclusteridentities/") && !path.contains("id-steady"))
            || (path.contains("/namespaces/")
                && !path.contains(&own_ns)
                && !path.contains("/namespaces/id-steady-creds/"))
    };
    let counting = client_mapping(env, move |req: http::Request<kube::client::Body>| {
        let watch = req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        if !watch && !others(req.uri().path()) {
            counter.fetch_add(1, Ordering::SeqCst);
            let line = format!("{} {}", req.method(), req.uri().path());
            log.lock().unwrap().push(line);
        }
        req
    })
    .await;
    let mgr = start_manager(&counting, &ns, &images, "manager-steady");
    let sources = json!({"variablesFrom": [
        {"configMapRef": {"name": "steady-vars"}},
        {"secretRef": {"name": "steady-secret-vars"}},
    ]});
    cluster_with_spec(&admin, &ns, "steady", "id-steady", &image, sources).await;
    wait_ready(&admin, &ns, "TerraformCluster", "steady", "True", LONG).await;
    // Steady: the passes that follow the apply (bookkeeping, the state adopted) are over once
    // the manager made no request for four seconds.
    let mut last = count.load(Ordering::SeqCst);
    let mut quiet = 0;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = count.load(Ordering::SeqCst);
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        if quiet >= 4 {
            break;
        }
    }
    assert!(quiet >= 4, "the manager never settled");
    let passes = |m: &manager::runtime::metrics::Metrics| {
        metric(
            &m.encode(),
            "controller_runtime_reconcile_total",
            &["controller=\"terraformcluster\""],
        )
    };
    let passes_before = passes(&mgr.metrics);
    let before = count.load(Ordering::SeqCst);
    poke(&admin, &ns, "steady", "1").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = count.load(Ordering::SeqCst) - before;
    let ran = passes(&mgr.metrics) - passes_before;
    let requests = made.lock().unwrap()[before..].to_vec();
    eprintln!(
        "STEADY-STATE: {ran} reconciles of a provisioned TerraformCluster made {used} API requests"
    );
    assert!(ran >= 1.0, "the label change reconciled the object");
    assert_eq!(used, 0, "{used} requests: {requests:#?}");
    assert_eq!(jobs_of(&admin, &ns, "steady").await.len(), 1);
}

/// Leader-election timing for the tests: a 2 s Lease, renewed every 200 ms.
fn election(ns: &str, identity: &str) -> manager::runtime::leader::Election {
    manager::runtime::leader::Election::new(
        ns.to_owned(),
        identity.to_owned(),
        manager::runtime::leader::Timing {
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(1),
            retry_period: Duration::from_millis(200),
        },
    )
}

/// Polls `e.try_acquire` every 100 ms until it holds the Lease; the time it took.
async fn poll_until_leader(
    e: &manager::runtime::leader::Election,
    client: &kube::Client,
    within: Duration,
) -> Duration {
    let started = std::time::Instant::now();
    while !e.try_acquire(client).await.unwrap() {
        assert!(started.elapsed() < within, "{} never led", e.identity);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

/// The Lease's holder and transitions.
async fn lease_holder(client: &kube::Client, ns: &str) -> (Option<String>, Option<i32>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let spec = leases
        .get(manager::runtime::leader::LEASE_NAME)
        .await
        .unwrap()
        .spec
        .unwrap();
    (spec.holder_identity, spec.lease_transitions)
}

/// Leader election: one manager holds the Lease; another takes it only once the holder stopped
/// renewing it for a lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_manager_leads_and_another_takes_over_an_expired_lease() {
    let env = testenv::TestEnv::shared().expect("test environment starts");
    let client = env.client().await.unwrap();
    let ns = env.namespace("leader").await.unwrap();
    let (a, b) = (election(&ns, "manager-a"), election(&ns, "manager-b"));
    assert!(a.try_acquire(&client).await.unwrap());
    assert!(!b.try_acquire(&client).await.unwrap(), "the Lease is held");
    assert!(a.try_acquire(&client).await.unwrap(), "the holder renews");
    // Taken before b reads the renewed Lease, so never after the moment b saw the change.
    let before_b_saw = std::time::Instant::now();
    assert!(
        !b.try_acquire(&client).await.unwrap(),
        "a renewed Lease is held"
    );
    // a stops renewing: b waits a whole lease duration from the last change it saw.
    poll_until_leader(&b, &client, Duration::from_secs(10)).await;
    let waited = before_b_saw.elapsed();
    assert!(waited >= Duration::from_secs(2), "taken after {waited:?}");
    assert!(!a.try_acquire(&client).await.unwrap());
    let (holder, transitions) = lease_holder(&client, &ns).await;
    assert_eq!(holder.as_deref(), Some("manager-b"));
    assert_eq!(transitions, Some(1));
}

/// L3: a standby asked to stop while it waits to lead stops waiting and never leads, and a leader
/// that stops gives the Lease back, so that the next manager takes it at its first try instead
/// of a lease duration later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_standby_never_leads_and_a_stopping_leader_gives_the_lease_back() {
    use manager::runtime::leader::Led;
    use std::sync::atomic::{AtomicBool, Ordering};
    let env = testenv::TestEnv::shared().expect("test environment starts");
    let client = env.client().await.unwrap();
    let ns = env.namespace("handover").await.unwrap();
    let (a, b, c) = (
        election(&ns, "manager-a"),
        election(&ns, "manager-b"),
        election(&ns, "manager-c"),
    );
    assert!(a.try_acquire(&client).await.unwrap());
    // b waits for the Lease a holds, and is asked to stop (SIGTERM) meanwhile.
    let ran = AtomicBool::new(false);
    let led = b
        .lead(
            &client,
            || async { ran.store(true, Ordering::SeqCst) },
            tokio::time::sleep(Duration::from_millis(600)),
        )
        .await;
    assert!(matches!(led, Led::Finished));
    assert!(
        !ran.load(Ordering::SeqCst),
        "a stopping standby never leads"
    );
    assert_eq!(
        lease_holder(&client, &ns).await.0.as_deref(),
        Some("manager-a")
    );
    // a leads until its reconciling finishes (it was asked to stop), then gives the Lease back.
    let led = a.lead(&client, || async {}, std::future::pending()).await;
    assert!(matches!(led, Led::Finished));
    assert_eq!(
        lease_holder(&client, &ns).await.0,
        None,
        "the Lease given back"
    );
    assert!(
        c.try_acquire(&client).await.unwrap(),
        "taken at the first try, not a lease duration later"
    );
}

/// Writes the Lease as a holder named `peer` whose clock reads `skew` away from this machine's
/// would: created if missing, renewed otherwise.
async fn renew_as_skewed_peer(client: &kube::Client, ns: &str, peer: &str, skew: i64) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let their_now = k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(skew))
        .unwrap();
    let spec = json!({"holderIdentity": peer, "leaseDurationSeconds": 2,
                      "acquireTime": MicroTime(their_now), "renewTime": MicroTime(their_now)});
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": manager::runtime::leader::LEASE_NAME}, "spec": spec});
    let params = PatchParams::apply("skewed-peer").force();
    leases
        .patch(
            manager::runtime::leader::LEASE_NAME,
            &params,
            &Patch::Apply(&lease),
        )
        .await
        .unwrap();
}

/// Leader election with clocks that disagree by minutes (issue 19): a holder whose clock runs
/// ten minutes behind keeps the Lease for as long as it renews, though every renew time it
/// writes looks long expired here; one whose clock runs ten minutes ahead loses the Lease one
/// lease duration after it stopped renewing, not ten minutes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_with_a_skewed_clock_keeps_the_lease_while_it_renews_and_loses_it_when_it_stops() {
    let env = testenv::TestEnv::shared().expect("test environment starts");
    let client = env.client().await.unwrap();

    let behind = env.namespace("leader-behind").await.unwrap();
    let b = election(&behind, "manager-b");
    let renewing = std::time::Instant::now();
    while renewing.elapsed() < Duration::from_secs(5) {
        renew_as_skewed_peer(&client, &behind, "behind-peer", -600).await;
        assert!(
            !b.try_acquire(&client).await.unwrap(),
            "took the Lease of a holder that renews with its clock behind"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let waited = poll_until_leader(&b, &client, Duration::from_secs(10)).await;
    assert!(
        waited >= Duration::from_millis(1500),
        "taken after {waited:?}"
    );
    assert_eq!(
        lease_holder(&client, &behind).await.0.as_deref(),
        Some("manager-b")
    );

    let ahead = env.namespace("leader-ahead").await.unwrap();
    renew_as_skewed_peer(&client, &ahead, "ahead-peer", 600).await;
    let b = election(&ahead, "manager-b");
    let waited = poll_until_leader(&b, &client, Duration::from_secs(10)).await;
    assert!(waited >= Duration::from_secs(2), "taken after {waited:?}");
    assert_eq!(
        lease_holder(&client, &ahead).await.0.as_deref(),
        Some("manager-b")
    );
}
