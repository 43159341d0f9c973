//! The upgrade check of `make test` (issue 31; book: Upgrading), the cheap half of
//! `make e2e-upgrade`: the previous release's stored objects, as its manager left them with two
//! clusters Ready (recorded by `CAPTF_UPGRADE_RECORD=1 make e2e-upgrade` into
//! `tests/fixtures/upgrade/<version>.json.gz`), are replayed under the previous release's CRDs;
//! the CRDs are replaced in place by this checkout's, as `clusterctl upgrade apply` does; then
//! this checkout's manager runs over them. After a whole pass over every object it has started
//! no Job but applies of provisioned objects of the kinds this release's upgrade notes announce,
//! it has decided nothing else, it has touched no state, backup, durable inputs Secret or lease
//! (but those announced applies'), and every condition that was True is True.
//!
//! No Cluster API controller and no kubelet run: the objects keep the status they were recorded
//! with, and a Job the manager should not have started is caught when it is created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::ListParams;
use testenv::TestEnv;
use testenv::upgrade::{self, APPLYING_KINDS, name_of, stored};

/// How long the first pass over every object may take.
const LONG: Duration = Duration::from_secs(120);

/// How long the manager runs on after its pass over every object: a Job it started would show
/// within this, and so would a second pass's decisions.
const QUIET: Duration = Duration::from_secs(15);

/// The CRDs of this checkout, as the test environment installs them.
fn head_crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    testenv::env::crds()
        .unwrap()
        .into_iter()
        .filter(|c| c.spec.group == "infrastructure.cluster.x-k8s.io")
        .collect()
}

/// Each Job in `ns` as `op owner`.
async fn jobs(client: &kube::Client, ns: &str) -> Vec<String> {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    let mut out: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|j| {
            let op = j
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("captf.infrastructure.cluster.x-k8s.io/op"))
                .cloned()
                .unwrap_or_default();
            let owner = j
                .metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.first())
                .map(|o| o.name.clone())
                .unwrap_or_default();
            format!("{op} {owner}")
        })
        .collect();
    out.sort();
    out
}

/// The manager's decisions to start a Job, as `kind op reason` lines.
fn started_decisions(encoded: &str) -> Vec<String> {
    encoded
        .lines()
        .filter(|l| l.starts_with("captf_reconcile_op_decisions_total{") && !l.ends_with(" 0"))
        .filter(|l| !l.contains("op=\"none\""))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_s_objects_start_no_job_the_upgrade_notes_do_not_announce() {
    capture_logs();
    let r = upgrade::releases().unwrap();
    let recorded = stored::StoredObjects::load(&stored::path(&r.previous)).unwrap();
    assert_eq!(
        recorded.release, r.previous,
        "a recording of another release"
    );
    let notes =
        std::fs::read_to_string(testenv::env::repo_root().join(upgrade::UPGRADING_PAGE)).unwrap();
    let kinds = upgrade::announced_reapplies(&notes, &r.next).unwrap();

    let env = TestEnv::shared().unwrap();
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    if let Err(e) = stored::replay(&client, &recorded, &head_crds()).await {
        panic!("replaying what {} stored: {e:#}", r.previous);
    }
    let ns = recorded.namespace.as_str();
    let before = upgrade::untouched(&client, ns).await.unwrap();

    // What the notes announce: one apply of each provisioned object of those kinds.
    let objects: Vec<(&str, String)> = APPLYING_KINDS
        .iter()
        .flat_map(|k| recorded.of_kind(k).map(move |o| (*k, name_of(o))))
        .collect();
    assert!(
        objects.iter().any(|(k, _)| *k == "TerraformMachinePool"),
        "the recording holds every applying kind: {objects:?}"
    );
    let mut announced: Vec<String> = Vec::new();
    let mut announced_writes: Vec<String> = Vec::new();
    for kind in &kinds {
        for o in recorded.of_kind(kind) {
            if o["status"]["initialization"]["provisioned"] == true {
                let cluster = o["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"]
                    .as_str()
                    .unwrap_or_default();
                announced.push(format!("apply {}", name_of(o)));
                announced_writes.extend(upgrade::re_apply_writes(ns, kind, &name_of(o), cluster));
            }
        }
    }
    announced.sort();

    // This checkout's manager, until it has passed over every object, and a while after.
    let started = Instant::now();
    let images = Images {
        runner: "registry.invalid/captf/runner:upgrade-check".to_owned(),
        cluster: String::new(),
        machine: String::new(),
    };
    let mgr = start_manager(&client, ns, &images, "manager-upgrade");
    eventually(LONG, "a pass over every stored object", || async {
        let m = mgr.metrics.encode();
        objects
            .iter()
            .all(|(k, n)| {
                m.contains(&format!(
                    "captf_ready{{kind=\"{k}\",namespace=\"{ns}\",name=\"{n}\"}}"
                ))
            })
            .then_some(())
    })
    .await;
    let passed = started.elapsed();
    tokio::time::sleep(QUIET).await;
    let encoded = mgr.metrics.encode();
    mgr.stop().await;

    // Without a kubelet no Job finishes, so of the applies a note announces only those that
    // need no other Job first (one write at a time per cluster) start here: each Job must be
    // announced, and each decision to start one an apply of an announced kind.
    let jobs = jobs(&client, ns).await;
    let decisions = started_decisions(&encoded);
    let unannounced: Vec<&String> = jobs.iter().filter(|j| !announced.contains(j)).collect();
    let undecided: Vec<&String> = decisions
        .iter()
        .filter(|d| {
            !d.contains("op=\"apply\"")
                || !kinds.iter().any(|k| d.contains(&format!("kind=\"{k}\"")))
        })
        .collect();
    assert!(
        unannounced.is_empty() && undecided.is_empty(),
        "the manager of {} started Jobs on the stored objects of {} that its upgrade notes do not \
         announce (they announce one apply of each provisioned {kinds:?}): {unannounced:?}\n\
         decisions: {decisions:#?}",
        r.next,
        r.previous,
    );
    if kinds.is_empty() {
        assert_eq!(
            metric_sum(&encoded, "captf_inputs_hash_changes_total", &[]),
            0
        );
    }
    let after = upgrade::untouched(&client, ns).await.unwrap();
    let touched: Vec<String> = upgrade::touched(&before, &after)
        .into_iter()
        .filter(|t| !announced_writes.iter().any(|w| t.contains(w.as_str())))
        .collect();
    assert!(touched.is_empty(), "the upgrade touched: {touched:#?}");
    println!(
        "upgrade check figures: {} -> {}: {} objects replayed ({} that apply), a pass over every one {:.1}s, {} Jobs ({} announced)",
        r.previous,
        r.next,
        recorded.objects.len(),
        objects.len(),
        passed.as_secs_f64(),
        jobs.len(),
        announced.len()
    );
}
