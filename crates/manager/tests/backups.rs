//! State backups and restore with real Jobs (spec: Terraform State "State backups" and
//! "Restore"; docs/src/runbooks/state-restore.md, followed step by step by the restore test).
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::io::Read;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn suffix(ns: &str, name: &str) -> String {
    contract::names::state_suffix(ns, contract::names::ObjectKind::Cluster, name)
}

/// The compressed payload of a chunked set, chunk 0 first (`tfstate` of each Secret).
fn payload(secrets: &[Secret], base: &str) -> Vec<u8> {
    let mut chunks: Vec<(usize, Vec<u8>)> = secrets
        .iter()
        .filter_map(|s| {
            let index = contract::state::chunk_index(base, s.metadata.name.as_deref()?)?;
            Some((index, s.data.as_ref()?.get("tfstate")?.0.clone()))
        })
        .collect();
    chunks.sort_by_key(|(i, _)| *i);
    chunks.into_iter().flat_map(|(_, d)| d).collect()
}

/// The live state's compressed payload.
async fn live_state(client: &kube::Client, ns: &str, name: &str) -> Vec<u8> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("tfstateSecretSuffix={}", suffix(ns, name)));
    let secrets = api.list(&lp).await.unwrap().items;
    payload(&secrets, &format!("tfstate-default-{}", suffix(ns, name)))
}

/// The object's backup Secrets, by serial.
async fn backups(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> std::collections::BTreeMap<u64, Vec<Secret>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "captf.io/state-backup=true,captf.io/state-backup-suffix={}",
        suffix(ns, name)
    ));
    let mut out = std::collections::BTreeMap::<u64, Vec<Secret>>::new();
    for s in api.list(&lp).await.unwrap().items {
        let serial = s.metadata.annotations.as_ref().unwrap()["captf.io/state-backup-serial"]
            .parse()
            .unwrap();
        out.entry(serial).or_default().push(s);
    }
    out
}

fn serial_of(state_gz: &[u8]) -> u64 {
    let doc: Value = serde_json::from_slice(&gunzip(state_gz)).unwrap();
    doc["serial"].as_u64().unwrap()
}

/// The `token` the state's `terraform_data.token` recorded (its sha256, as the module keeps it);
/// `None` before the resource is in the state.
fn token_hash_of(state_gz: &[u8]) -> Option<String> {
    let doc: Value = serde_json::from_slice(&gunzip(state_gz)).ok()?;
    let resource = doc["resources"]
        .as_array()?
        .iter()
        .find(|r| r["type"] == "terraform_data" && r["name"] == "token")?
        .clone();
    let input = &resource["instances"][0]["attributes"]["input"];
    input["value"]
        .as_str()
        .or(input.as_str())
        .map(str::to_owned)
}

async fn set_token(client: &kube::Client, ns: &str, name: &str, token: &str) {
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), ns);
    tcs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"token": token}}})),
    )
    .await
    .unwrap();
}

/// Waits until the live state records `token` and a backup of its serial exists; returns the
/// live payload.
async fn applied_and_backed_up(
    client: &kube::Client,
    ns: &str,
    name: &str,
    token: &str,
) -> Vec<u8> {
    let want = sha256_hex(token);
    eventually(
        LONG,
        &format!("token {token} applied and backed up"),
        || async {
            let live = live_state(client, ns, name).await;
            if live.is_empty() || token_hash_of(&live).as_deref() != Some(want.as_str()) {
                return None;
            }
            backups(client, ns, name)
                .await
                .contains_key(&serial_of(&live))
                .then_some(live)
        },
    )
    .await
}

/// Asks for a restore: the TerraformCluster `name`'s `captf.io/restore-state` set to `value`.
async fn restore_state(client: &kube::Client, ns: &str, name: &str, value: &str) {
    annotate(client, ns, name, "captf.io/restore-state", value).await;
}

/// Three applies under `--state-backups=2`: each new serial is copied verbatim (the backup
/// decompresses to exactly the state it copied), the oldest set is pruned, and
/// `status.stateBackups` lists the two kept, newest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_applies_keep_the_newest_backups_byte_identical_to_their_state() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("backups").await.unwrap();
    identity(&client, "id-backups", &[ns.as_str()], "planted-backups-1").await;
    let mgr = start_manager_with(&client, &ns, &images, "manager-backups", |s| {
        s.state_backups = 2;
    });
    let spec = json!({"variables": {"token": "one"}});
    cluster_with_spec(&client, &ns, "kept", "id-backups", &image, spec).await;
    let mut serials = Vec::new();
    for token in ["one", "two", "three"] {
        if token != "one" {
            set_token(&client, &ns, "kept", token).await;
        }
        let live = applied_and_backed_up(&client, &ns, "kept", token).await;
        let serial = serial_of(&live);
        let sets = backups(&client, &ns, "kept").await;
        let base = format!("captf-state-backup-{}-{serial}", suffix(&ns, "kept"));
        let copy = payload(&sets[&serial], &base);
        // Verbatim: the same compressed bytes, and so the same document.
        assert_eq!(copy, live, "backup of serial {serial} is not verbatim");
        assert_eq!(gunzip(&copy), gunzip(&live));
        let chunk0 = sets[&serial]
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(base.as_str()))
            .unwrap();
        let labels = chunk0.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["clusterctl.cluster.x-k8s.io/move"], "");
        let owner = &chunk0.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("TerraformCluster", "kept")
        );
        serials.push(serial);
    }
    assert!(serials.windows(2).all(|w| w[0] < w[1]), "{serials:?}");
    // The newest two kept, the first pruned; the status lists them newest first.
    let tc = eventually(LONG, "two backups kept", || async {
        let sets = backups(&client, &ns, "kept").await;
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "kept").await;
        let listed: Vec<u64> = tc["status"]["stateBackups"]
            .as_array()
            .map(|l| l.iter().map(|b| b["serial"].as_u64().unwrap()).collect())
            .unwrap_or_default();
        (sets.keys().copied().collect::<Vec<_>>() == serials[1..]
            && listed == [serials[2], serials[1]])
        .then_some(tc)
    })
    .await;
    for b in tc["status"]["stateBackups"].as_array().unwrap() {
        assert!(b["bytes"].as_u64().unwrap() > 0, "{b}");
        assert!(b["takenAt"].is_string(), "{b}");
    }
    // At least one copy per applied serial and one pruning. Under load (.ci/run, both lanes)
    // the counter once read 4 copies for the 3 serials: a serial read by a pass before its
    // backup reached the cache, or the empty state the backend's init writes before the first
    // apply's; the sets kept, checked above, were right either way.
    let enc = mgr.metrics.encode();
    assert!(metric_sum(&enc, "captf_state_backups_total", &["result=\"taken\""]) >= 3);
    assert!(metric_sum(&enc, "captf_state_backups_total", &["result=\"pruned\""]) >= 1);
}

/// A copy cut short before its chunk 0 leaves parts behind (chunk 0 is written last, so such a
/// set is no backup yet): when that serial is backed up, in fewer chunks, the parts left over
/// go, and the set is the copy alone. Parts 1 and 2 of every serial a first apply can write are
/// planted before the object exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_left_by_a_cut_short_copy_go_when_their_serial_is_backed_up() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("leftover").await.unwrap();
    identity(&client, "id-leftover", &[ns.as_str()], "planted-leftover-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-leftover");
    let sfx = suffix(&ns, "left");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for serial in 0..=12u64 {
        for part in 1..=2 {
            let planted: Secret = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("captf-state-backup-{sfx}-{serial}-part-{part}"),
                    "labels": {
                        "captf.io/state-backup": "true",
                        "captf.io/state-backup-suffix": sfx,
                    },
                    "annotations": {"captf.io/state-backup-serial": serial.to_string()},
                },
                "data": {"tfstate": "bGVmdCBvdmVy"},
            }))
            .unwrap();
            secrets
                .create(&kube::api::PostParams::default(), &planted)
                .await
                .unwrap();
        }
    }
    cluster(&client, &ns, "left", "id-leftover", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "left", "True", LONG).await;
    let serial = serial_of(&live_state(&client, &ns, "left").await);
    let base = format!("captf-state-backup-{sfx}-{serial}");
    eventually(LONG, "the backup set of the live serial alone", || async {
        let sets = backups(&client, &ns, "left").await;
        let mut names: Vec<String> = sets
            .get(&serial)?
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        names.sort();
        (names == [base.clone()]).then_some(())
    })
    .await;
    // The copy is the live state, verbatim.
    let sets = backups(&client, &ns, "left").await;
    assert_eq!(
        payload(&sets[&serial], &base),
        live_state(&client, &ns, "left").await
    );
}

/// The state restore runbook, step by step: pick a serial from `status.stateBackups`, annotate
/// the object, wait for `RestoreJobSucceeded=True/StateRestored` and the annotation to go, check
/// `StateReadable`; the state then holds the backup's content, and the next apply (the current
/// inputs differ from the restored state's) proceeds from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_puts_back_the_backup_and_the_next_apply_proceeds_from_it() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("restore").await.unwrap();
    identity(&client, "id-restore", &[ns.as_str()], "planted-restore-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-restore");
    let spec = json!({"variables": {"token": "first"}});
    cluster_with_spec(&client, &ns, "restored", "id-restore", &image, spec).await;
    let first = applied_and_backed_up(&client, &ns, "restored", "first").await;
    set_token(&client, &ns, "restored", "second").await;
    let second = applied_and_backed_up(&client, &ns, "restored", "second").await;
    let wanted = serial_of(&first);

    // Runbook step 1: the backups, from the status, newest first (a serial the passes read
    // after the second apply may be listed before it).
    let deadline = tokio::time::Instant::now() + LONG;
    let listed = loop {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "restored").await;
        let listed: Vec<u64> = tc["status"]["stateBackups"]
            .as_array()
            .map(|l| l.iter().filter_map(|b| b["serial"].as_u64()).collect())
            .unwrap_or_default();
        if listed.contains(&serial_of(&second)) && listed.contains(&wanted) {
            break listed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "both backups never listed; backup Secrets {:?}, status {:#}",
            backups(&client, &ns, "restored")
                .await
                .keys()
                .collect::<Vec<_>>(),
            tc["status"]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(listed.windows(2).all(|w| w[0] > w[1]), "{listed:?}");

    // Step 2: annotate. Step 3: wait for the restore and the annotation's removal.
    restore_state(&client, &ns, "restored", &wanted.to_string()).await;
    let tc = eventually(LONG, "the restore", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "restored").await;
        let restored = condition(&tc, "RestoreJobSucceeded")
            == Some(("True".to_owned(), "StateRestored".to_owned()));
        let gone = tc["metadata"]["annotations"]["captf.io/restore-state"].is_null();
        (restored && gone).then_some(tc)
    })
    .await;
    let restores = op_jobs(&jobs_of(&client, &ns, "restored").await, "restore");
    assert_eq!(restores.len(), 1);
    let restore_job = &restores[0];
    assert_eq!(
        restore_job.metadata.annotations.as_ref().unwrap()["captf.io/restore-serial"],
        wanted.to_string()
    );
    // Step 4: the state reads.
    assert_eq!(condition(&tc, "StateReadable").unwrap().0, "True");

    // The next apply proceeds from the restored state: the current inputs ("second") differ
    // from the backup's, so the cluster re-applies them over it.
    let applies_after = eventually(LONG, "the apply after the restore", || async {
        let jobs = jobs_of(&client, &ns, "restored").await;
        let restored_at = restore_job.metadata.creation_timestamp.clone().unwrap().0;
        let after: Vec<_> = op_jobs(&jobs, "apply")
            .into_iter()
            .filter(|j| j.metadata.creation_timestamp.as_ref().unwrap().0 > restored_at)
            .collect();
        let succeeded = after
            .iter()
            .any(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1));
        succeeded.then_some(after)
    })
    .await;
    assert!(!applies_after.is_empty());
    let live = live_state(&client, &ns, "restored").await;
    assert_eq!(token_hash_of(&live), Some(sha256_hex("second")));
    let enc = mgr.metrics.encode();
    assert_eq!(
        metric_sum(
            &enc,
            "captf_state_restores_total",
            &["result=\"succeeded\""]
        ),
        1
    );
}

/// A restore request naming no backup of the object (an unknown serial, or no serial at all) is
/// refused with `RestoreBackupNotFound`: no Job, the state untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_of_a_missing_serial_is_refused() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("restore-missing").await.unwrap();
    identity(
        &client,
        "id-restore-missing",
        &[ns.as_str()],
        "planted-rm-1",
    )
    .await;
    let mgr = start_manager(&client, &ns, &images, "manager-restore-missing");
    cluster(
        &client,
        &ns,
        "nobackup",
        "id-restore-missing",
        &images.cluster,
    )
    .await;
    let before = eventually(LONG, "the first apply backed up", || async {
        let live = live_state(&client, &ns, "nobackup").await;
        (!live.is_empty()
            && backups(&client, &ns, "nobackup")
                .await
                .contains_key(&serial_of(&live)))
        .then_some(live)
    })
    .await;
    for (value, says) in [("999", "serial 999"), ("latest", "must be a state serial")] {
        restore_state(&client, &ns, "nobackup", value).await;
        let tc = eventually(LONG, "the refusal", || async {
            let tc = get_json(&client, &ns, TC, "TerraformCluster", "nobackup").await;
            let c = tc["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "RestoreJobSucceeded")?
                .clone();
            (c["reason"] == "RestoreBackupNotFound"
                && c["message"].as_str().unwrap_or("").contains(says))
            .then_some(tc)
        })
        .await;
        assert_eq!(condition(&tc, "RestoreJobSucceeded").unwrap().0, "False");
        // The annotation stays for the user to correct; no Job ran; the state is as it was.
        assert_eq!(
            tc["metadata"]["annotations"]["captf.io/restore-state"],
            value
        );
    }
    assert!(op_jobs(&jobs_of(&client, &ns, "nobackup").await, "restore").is_empty());
    assert_eq!(live_state(&client, &ns, "nobackup").await, before);
    assert_eq!(
        metric_sum(
            &mgr.metrics.encode(),
            "captf_state_restores_total",
            &["result=\"not_found\""]
        ),
        2
    );
}

/// A state Secret replaced by a state of another lineage (issue 19: someone pushed the wrong
/// state): the object reports `StateReadable=False/StateInconsistent` naming both lineages, no Job
/// runs over it though a re-apply is due, it is not backed up, and a restore of the object's own
/// backup puts its lineage back, after which the due apply runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_of_a_foreign_lineage_is_reported_never_applied_over_and_restored() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("lineage").await.unwrap();
    identity(&client, "id-lineage", &[ns.as_str()], "planted-lineage-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-lineage");
    let spec = json!({"variables": {"token": "first"}});
    cluster_with_spec(&client, &ns, "lineage", "id-lineage", &image, spec).await;
    let first = applied_and_backed_up(&client, &ns, "lineage", "first").await;
    let mut doc: Value = serde_json::from_slice(&gunzip(&first)).unwrap();
    let ours = doc["lineage"].as_str().unwrap().to_owned();
    let foreign = "0f0f0f0f-1111-4222-8333-444455556666";
    doc["lineage"] = json!(foreign);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &serde_json::to_vec(&doc).unwrap()).unwrap();
    let foreign_gz = k8s_openapi::ByteString(gz.finish().unwrap());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let base = format!("tfstate-default-{}", suffix(&ns, "lineage"));
    secrets
        .patch(
            &base,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"tfstate": foreign_gz}})),
        )
        .await
        .unwrap();
    let applies_before = op_jobs(&jobs_of(&client, &ns, "lineage").await, "apply").len();
    set_token(&client, &ns, "lineage", "second").await;

    let tc = eventually(LONG, "the foreign lineage reported", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "lineage").await;
        (condition(&tc, "StateReadable")
            == Some(("False".to_owned(), "StateInconsistent".to_owned())))
        .then_some(tc)
    })
    .await;
    let message = condition_message(&tc, "StateReadable");
    assert!(
        message.contains(foreign) && message.contains(&ours),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let applies = op_jobs(&jobs_of(&client, &ns, "lineage").await, "apply").len();
    assert_eq!(applies, applies_before, "an apply ran over a foreign state");
    let backed_up = backups(&client, &ns, "lineage").await;
    assert_eq!(backed_up.len(), 1, "the foreign state was backed up");

    // The runbook's way back: restore the object's own newest backup.
    restore_state(&client, &ns, "lineage", &serial_of(&first).to_string()).await;
    applied_and_backed_up(&client, &ns, "lineage", "second").await;
    let live: Value =
        serde_json::from_slice(&gunzip(&live_state(&client, &ns, "lineage").await)).unwrap();
    assert_eq!(live["lineage"], json!(ours));
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "lineage").await;
    assert_eq!(condition(&tc, "StateReadable").unwrap().0, "True");
}

async fn set_paused(client: &kube::Client, ns: &str, name: &str, paused: bool) {
    let value = paused.then_some("true");
    annotate(client, ns, name, "cluster.x-k8s.io/paused", value).await;
}

/// While paused: the token set and a restore of `serial` asked for; then unpaused, so the
/// restore runs first and the apply of the token (if it differs from the backup's) after it.
async fn restore_then_apply(client: &kube::Client, ns: &str, name: &str, serial: u64, token: &str) {
    set_paused(client, ns, name, true).await;
    eventually(LONG, "paused", || async {
        let tc = get_json(client, ns, TC, "TerraformCluster", name).await;
        (condition(&tc, "Paused").map(|c| c.0) == Some("True".to_owned())).then_some(())
    })
    .await;
    set_token(client, ns, name, token).await;
    restore_state(client, ns, name, &serial.to_string()).await;
    set_paused(client, ns, name, false).await;
    eventually(LONG, &format!("the restore of serial {serial}"), || async {
        let jobs = op_jobs(&jobs_of(client, ns, name).await, "restore");
        jobs.iter()
            .any(|j| {
                j.metadata.annotations.as_ref().unwrap()["captf.io/restore-serial"]
                    == serial.to_string()
                    && j.status.as_ref().and_then(|s| s.succeeded) == Some(1)
            })
            .then_some(())
    })
    .await;
}

/// H2: a backup is its serial and its content. A restore rewinds the state, so the applies after
/// it write serials the abandoned history already used, with other content: each is backed up
/// again (over the abandoned set of its serial), and a second restore of such a serial pushes the
/// restored timeline's state — which carries the current inputs, so no apply follows it — not the
/// state the first restore undid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_is_its_serial_and_its_content_across_restores() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("timeline").await.unwrap();
    identity(&client, "id-timeline", &[ns.as_str()], "planted-timeline-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-timeline");
    let spec = json!({"variables": {"token": "t1"}});
    cluster_with_spec(&client, &ns, "tl", "id-timeline", &image, spec).await;
    let first = applied_and_backed_up(&client, &ns, "tl", "t1").await;
    for t in ["t2", "t3"] {
        set_token(&client, &ns, "tl", t).await;
        applied_and_backed_up(&client, &ns, "tl", t).await;
    }

    // Back to t1's state, then two applies on the restored timeline.
    restore_then_apply(&client, &ns, "tl", serial_of(&first), "t4").await;
    let t4 = applied_and_backed_up(&client, &ns, "tl", "t4").await;
    set_token(&client, &ns, "tl", "t5").await;
    let t5 = applied_and_backed_up(&client, &ns, "tl", "t5").await;
    let sets = backups(&client, &ns, "tl").await;
    for (what, live) in [("t4", &t4), ("t5", &t5)] {
        let serial = serial_of(live);
        let set = &sets[&serial];
        let base = format!("captf-state-backup-{}-{serial}", suffix(&ns, "tl"));
        assert_eq!(
            &payload(set, &base),
            live,
            "the backup of serial {serial} is the restored timeline's ({what}), not the abandoned one"
        );
    }

    // The second restore pushes the restored timeline's serial of t4.
    let applies_before = op_jobs(&jobs_of(&client, &ns, "tl").await, "apply").len();
    restore_then_apply(&client, &ns, "tl", serial_of(&t4), "t4").await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let live = live_state(&client, &ns, "tl").await;
    assert_eq!(token_hash_of(&live), Some(sha256_hex("t4")));
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "tl").await, "apply").len(),
        applies_before,
        "the restored state carries the current inputs: no apply follows"
    );
    mgr.stop().await;
}

/// `--state-backups=0` takes no new backups but leaves the existing ones in place and restorable
/// (book: Terraform State, "--state-backups=0 takes no new backups but leaves existing ones in
/// place and restorable"). A backup taken under the default count stays through a new apply
/// under 0, which backs nothing up, and a restore of it still puts its state back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_backups_takes_none_and_keeps_the_existing_ones_restorable() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("nobackups").await.unwrap();
    identity(
        &client,
        "id-nobackups",
        &[ns.as_str()],
        "planted-nobackups-1",
    )
    .await;
    let mgr = start_manager(&client, &ns, &images, "manager-nobackups");
    let spec = json!({"variables": {"token": "one"}});
    cluster_with_spec(&client, &ns, "zero", "id-nobackups", &image, spec).await;
    let first = serial_of(&applied_and_backed_up(&client, &ns, "zero", "one").await);
    wait_ready(&client, &ns, "TerraformCluster", "zero", "True", LONG).await;
    mgr.stop().await;

    let mgr = start_manager_with(&client, &ns, &images, "manager-nobackups-0", |s| {
        s.state_backups = 0;
    });
    set_token(&client, &ns, "zero", "two").await;
    let two = sha256_hex("two");
    let live = eventually(LONG, "token two applied", || async {
        let live = live_state(&client, &ns, "zero").await;
        (token_hash_of(&live).as_deref() == Some(two.as_str())).then_some(live)
    })
    .await;
    assert!(serial_of(&live) > first);
    // The passes after the apply read the new serial (observedStateSerial) and back nothing up.
    eventually(LONG, "the new serial read", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "zero").await;
        (tc["status"]["observedStateSerial"].as_u64() == Some(serial_of(&live))).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let sets = backups(&client, &ns, "zero").await;
    assert_eq!(sets.keys().copied().collect::<Vec<_>>(), [first]);
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "zero").await;
    let listed: Vec<u64> = tc["status"]["stateBackups"]
        .as_array()
        .map(|l| l.iter().map(|b| b["serial"].as_u64().unwrap()).collect())
        .unwrap_or_default();
    assert_eq!(listed, [first], "{tc}");
    let enc = mgr.metrics.encode();
    assert_eq!(
        metric_sum(&enc, "captf_state_backups_total", &["result=\"taken\""]),
        0
    );

    // Still restorable: the restore puts the backup's state (token one) back.
    restore_then_apply(&client, &ns, "zero", first, "one").await;
    let one = sha256_hex("one");
    eventually(LONG, "the backup's state back", || async {
        let live = live_state(&client, &ns, "zero").await;
        (token_hash_of(&live).as_deref() == Some(one.as_str())).then_some(())
    })
    .await;
    assert_eq!(
        backups(&client, &ns, "zero")
            .await
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [first]
    );
}

/// Terraform State "Restore" and the restore runbook: a restore whose Job fails (here the
/// backup's content was damaged after it was taken, so `state push` has nothing it can read) is
/// `RestoreJobSucceeded=False/RestoreFailed`, keeps the annotation for the user, leaves the live
/// state as it was, and is not retried for the same serial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_restore_is_not_retried_for_the_same_serial() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("restore-failed").await.unwrap();
    identity(&client, "id-restore-failed", &[ns.as_str()], "planted-rf-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-restore-failed");
    cluster(
        &client,
        &ns,
        "damaged",
        "id-restore-failed",
        &images.cluster,
    )
    .await;
    let (before, serial) = eventually(LONG, "the first apply backed up", || async {
        let live = live_state(&client, &ns, "damaged").await;
        if live.is_empty() {
            return None;
        }
        let serial = serial_of(&live);
        backups(&client, &ns, "damaged")
            .await
            .contains_key(&serial)
            .then_some((live, serial))
    })
    .await;
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for secret in &backups(&client, &ns, "damaged").await[&serial] {
        let name = secret.metadata.name.as_deref().unwrap();
        let junk = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            b"not a gzip stream",
        );
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"tfstate": junk}})),
        )
        .await
        .unwrap();
    }

    let value = serial.to_string();
    restore_state(&client, &ns, "damaged", &value).await;
    let tc = eventually(LONG, "RestoreJobSucceeded=False/RestoreFailed", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "damaged").await;
        (condition(&tc, "RestoreJobSucceeded")
            == Some(("False".to_owned(), "RestoreFailed".to_owned())))
        .then_some(tc)
    })
    .await;
    assert_eq!(
        tc["metadata"]["annotations"]["captf.io/restore-state"],
        value
    );
    // Three more passes' worth of time: still the one restore Job, the state as it was.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "damaged").await, "restore").len(),
        1
    );
    assert_eq!(live_state(&client, &ns, "damaged").await, before);
    assert_eq!(
        metric_sum(
            &mgr.metrics.encode(),
            "captf_state_restores_total",
            &["result=\"failed\""]
        ),
        1
    );
    assert!(!events_json(&client, &ns).await.contains("planted-rf-1"));
}

/// Terraform State "Backups": the serial a destroy writes is not backed up (the object is being
/// deleted); the backups taken before go with the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_backup_is_taken_while_deleting() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("backup-deleting").await.unwrap();
    identity(
        &client,
        "id-backup-deleting",
        &[ns.as_str()],
        "planted-bd-1",
    )
    .await;
    let mgr = start_manager(&client, &ns, &images, "manager-backup-deleting");
    cluster(&client, &ns, "going", "id-backup-deleting", &images.cluster).await;
    let serial = eventually(LONG, "the first apply backed up", || async {
        let live = live_state(&client, &ns, "going").await;
        if live.is_empty() {
            return None;
        }
        let serial = serial_of(&live);
        backups(&client, &ns, "going")
            .await
            .contains_key(&serial)
            .then_some(serial)
    })
    .await;
    let taken = || {
        metric_sum(
            &mgr.metrics.encode(),
            "captf_state_backups_total",
            &["result=\"taken\""],
        )
    };
    // The pass counts the backup once its last chunk is written: the Secret can be seen first.
    let before = eventually(LONG, "the backup counted", || async {
        let t = taken();
        (t >= 1).then_some(t)
    })
    .await;
    delete(&client, &ns, TC, "TerraformCluster", "going").await;
    eventually(LONG, "the cluster is gone", || async {
        get_json_opt(&client, &ns, TC, "TerraformCluster", "going")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let destroyed = metric_sum(
        &mgr.metrics.encode(),
        "captf_jobs_total",
        &["op=\"destroy\"", "result=\"succeeded\""],
    );
    assert_eq!(destroyed, 1, "a destroy ran and wrote its serial");
    assert_eq!(
        taken(),
        before,
        "the destroy's serial after {serial} was not backed up"
    );
}

/// The strings `terraform_data.big` holds in a decompressed state document.
fn big_rows(doc: &Value) -> usize {
    doc["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["type"] == "terraform_data" && r["name"] == "big")
        .and_then(|r| r["instances"][0]["attributes"]["input"]["value"].as_array())
        .map_or(0, Vec::len)
}

async fn set_blocks(client: &kube::Client, ns: &str, name: &str, blocks: u32, dense: bool) {
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), ns);
    tcs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"blocks": blocks, "dense": dense}}})),
    )
    .await
    .unwrap();
}

/// The live state once it holds `blocks` × 100 rows and its serial is backed up: its Secrets,
/// its payload and its serial.
async fn big_state_applied(
    client: &kube::Client,
    ns: &str,
    name: &str,
    blocks: usize,
) -> (usize, Vec<u8>, u64) {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("tfstateSecretSuffix={}", suffix(ns, name)));
    eventually(
        LONG,
        &format!("{blocks} blocks applied and backed up"),
        || async {
            let live = live_state(client, ns, name).await;
            if live.is_empty() {
                return None;
            }
            // Terraform writes the chunks one by one: between two writes the set is not one
            // gzip stream yet.
            let mut raw = Vec::new();
            flate2::read::MultiGzDecoder::new(&live[..])
                .read_to_end(&mut raw)
                .ok()?;
            let doc: Value = serde_json::from_slice(&raw).ok()?;
            let serial = doc["serial"].as_u64()?;
            if big_rows(&doc) != blocks * 100 {
                return None;
            }
            let backed_up = backups(client, ns, name).await.remove(&serial)?;
            let base = format!("captf-state-backup-{}-{serial}", suffix(ns, name));
            (payload(&backed_up, &base) == live).then_some(())?;
            let secrets = api.list(&lp).await.unwrap().items.len();
            Some((secrets, live, serial))
        },
    )
    .await
}

/// Terraform State "Chunking and size caps" and "State backups", item 4 of issue 29: a state
/// the real `runtime` writes through the `kubernetes` backend, over 1 MiB, is read by the
/// manager (the object is Ready on its outputs), backed up byte for byte in as many chunks as the
/// backend wrote, and restored. Terraform splits a state over 1 MiB compressed into `-part-N`
/// Secrets; OpenTofu always writes one Secret, so its state is over 1 MiB decompressed (and
/// compresses under the Secret limit).
async fn a_state_over_one_mebibyte_is_read_backed_up_and_restored(runtime: &str, dense: bool) {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = big_state_image(env, runtime).await;
    let ns = env.namespace(&format!("big-{runtime}")).await.unwrap();
    let id = format!("id-big-{runtime}");
    identity(&client, &id, &[ns.as_str()], "planted-big-1").await;
    let mgr = start_manager(&client, &ns, &images, &format!("manager-big-{runtime}"));
    cluster_with_spec(
        &client,
        &ns,
        "big",
        &id,
        &image,
        json!({"variables": {"blocks": 100, "dense": dense}}),
    )
    .await;
    let tc = wait_ready(&client, &ns, "TerraformCluster", "big", "True", LONG).await;
    assert_eq!(condition(&tc, "StateReadable").unwrap().0, "True", "{tc:#}");
    let (secrets, first, first_serial) = big_state_applied(&client, &ns, "big", 100).await;
    let decompressed = gunzip(&first).len();
    assert!(decompressed > 1 << 20, "{decompressed} bytes decompressed");
    if runtime == "terraform" {
        assert!(first.len() > 1 << 20, "{} bytes compressed", first.len());
        assert!(
            secrets >= 2,
            "Terraform chunked its state: {secrets} Secrets"
        );
    } else {
        assert_eq!(secrets, 1, "OpenTofu writes one Secret");
    }
    println!(
        "{runtime}: state of {decompressed} bytes, {} compressed, in {secrets} Secrets",
        first.len()
    );

    set_blocks(&client, &ns, "big", 50, dense).await;
    let (_, _, second_serial) = big_state_applied(&client, &ns, "big", 50).await;
    assert!(second_serial > first_serial);

    // Paused, the variables put back and the first serial asked for; unpaused, the restore runs
    // and no apply follows (the restored state carries the current inputs).
    set_paused(&client, &ns, "big", true).await;
    eventually(LONG, "paused", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "big").await;
        (condition(&tc, "Paused").map(|c| c.0) == Some("True".to_owned())).then_some(())
    })
    .await;
    set_blocks(&client, &ns, "big", 100, dense).await;
    restore_state(&client, &ns, "big", &first_serial.to_string()).await;
    set_paused(&client, &ns, "big", false).await;
    let tc = until(
        &client,
        &ns,
        TC,
        "TerraformCluster",
        "big",
        "RestoreJobSucceeded=True",
        LONG,
        |tc| condition(tc, "RestoreJobSucceeded").map(|c| c.0) == Some("True".to_owned()),
    )
    .await;
    let live: Value =
        serde_json::from_slice(&gunzip(&live_state(&client, &ns, "big").await)).unwrap();
    let restored: Value = serde_json::from_slice(&gunzip(&first)).unwrap();
    assert_eq!(live["resources"], restored["resources"]);
    assert_eq!(live["lineage"], restored["lineage"]);
    assert_eq!(condition(&tc, "StateReadable").unwrap().0, "True", "{tc:#}");
    assert_eq!(
        metric_sum(
            &mgr.metrics.encode(),
            "captf_state_restores_total",
            &["result=\"succeeded\""]
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terraform_state_over_one_mebibyte_compressed_is_chunked_read_backed_up_and_restored() {
    a_state_over_one_mebibyte_is_read_backed_up_and_restored("terraform", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opentofu_state_over_one_mebibyte_is_read_backed_up_and_restored() {
    a_state_over_one_mebibyte_is_read_backed_up_and_restored("tofu", false).await;
}
