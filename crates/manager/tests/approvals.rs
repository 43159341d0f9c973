//! The destructive-plan guard and plan preview of a TerraformCluster (spec: Plan Approval), with
//! real Jobs: a replacing apply is blocked until its inputs hash is approved, and under
//! `applyPolicy: Manual` a change is planned, waits for its plan hash, then applies.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use common::*;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

/// Waits until `ApplyJobSucceeded` has reason `want`; on timeout fails with the object.
async fn reason(client: &kube::Client, ns: &str, name: &str, want: &str) -> serde_json::Value {
    apply_reason(client, ns, name, want, LONG).await
}

fn annotations(tc: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    tc["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// A re-apply that would replace a resource stops before applying until the
/// `captf.io/approve-destructive-plan` annotation names its inputs hash; the approval is consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_plan_waits_for_its_inputs_hash_to_be_approved() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("destructive").await.unwrap();
    identity(
        &client,
        "id-destructive",
        &[ns.as_str()],
        "planted-destructive-1",
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-destructive");
    cluster(&client, &ns, "guarded", "id-destructive", &image).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"sleep_seconds": 1}}})),
    )
    .await
    .unwrap();
    eventually(LONG, "sleep_seconds=1 applied", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "guarded").await;
        let jobs = jobs_of(&client, &ns, "guarded").await;
        (condition(&tc, "Ready").map(|c| c.0) == Some("True".to_owned())
            && tc["status"]["activeJob"].is_null()
            && jobs.iter().all(|j| {
                j.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("captf.io/bookkept"))
            })
            && state_has_slow(&client, &ns).await)
            .then_some(())
    })
    .await;
    // triggers_replace: a new value replaces the resource.
    tcs.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"sleep_seconds": 2}}})),
    )
    .await
    .unwrap();
    let tc = reason(&client, &ns, "guarded", "DestructivePlanBlocked").await;
    assert_eq!(
        tc["status"]["lastRun"]["error"]["kind"], "blocked",
        "{tc:#}"
    );
    let message = condition_message(&tc, "ApplyJobSucceeded");
    assert!(message.contains("terraform_data.slow"), "{message}");
    let hash = message
        .split_whitespace()
        .find(|w| w.starts_with("h2:"))
        .unwrap()
        .trim_end_matches(|c: char| !c.is_ascii_hexdigit())
        .to_owned();
    // Ready stays True after provisioning: a blocked re-apply never makes the cluster un-Ready.
    assert_eq!(condition(&tc, "Ready").unwrap().0, "True");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let blocked_jobs = jobs_of(&client, &ns, "guarded").await.len();
    assert_eq!(
        reason(&client, &ns, "guarded", "DestructivePlanBlocked").await["status"]["lastRun"]["job"],
        tc["status"]["lastRun"]["job"],
        "no apply of the blocked hash starts again"
    );
    annotate(
        &client,
        &ns,
        "guarded",
        "captf.io/approve-destructive-plan",
        hash,
    )
    .await;
    let tc = reason(&client, &ns, "guarded", "ApplySucceeded").await;
    assert!(
        !annotations(&tc).contains_key("captf.io/approve-destructive-plan"),
        "the approval is consumed"
    );
    // M3: announced with its write.
    eventually(
        LONG,
        "DestructivePlanApprovalConsumed announced",
        || async {
            events_json(&client, &ns)
                .await
                .contains("\"DestructivePlanApprovalConsumed\"")
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        jobs_of(&client, &ns, "guarded").await.len(),
        blocked_jobs + 1
    );
}

async fn state_has_slow(client: &kube::Client, ns: &str) -> bool {
    let state = state_document(client, ns, contract::names::ObjectKind::Cluster, "guarded").await;
    state["resources"]
        .as_array()
        .is_some_and(|r| r.iter().any(|r| r["name"] == "slow"))
}

/// Under `applyPolicy: Manual` a change is planned, waits for `captf.io/approve-plan` naming
/// the plan hash in `status.plan`, then applies exactly that plan; the approval is consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_cluster_applies_only_an_approved_plan() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("manual").await.unwrap();
    identity(&client, "id-manual", &[ns.as_str()], "planted-manual-1").await;
    let planted = "planted-variable-5e1f0c";
    create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "module-vars", "labels": {"captf.io/variables": "true"}},
               "stringData": {"token": planted}}),
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-manual");
    cluster(&client, &ns, "manual", "id-manual", &image).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "manual",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "applyPolicy": "Manual",
            "variablesFrom": [{"secretRef": {"name": "module-vars"}}],
        }})),
    )
    .await
    .unwrap();
    // The first apply is never gated.
    wait_ready(&client, &ns, "TerraformCluster", "manual", "True", LONG).await;
    tcs.patch(
        "manual",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"sleep_seconds": 1}}})),
    )
    .await
    .unwrap();
    let tc = reason(&client, &ns, "manual", "PlanAwaitingApproval").await;
    let plan = tc["status"]["plan"].clone();
    assert_eq!(plan["add"], 1, "{tc:#}");
    assert!(plan["planHash"].as_str().unwrap().starts_with("p1:"));
    assert!(
        plan["resources"].as_array().unwrap().iter().any(|r| r
            .as_str()
            .unwrap()
            .starts_with("module.role.terraform_data.slow")),
        "{plan:#}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let jobs = jobs_of(&client, &ns, "manual").await;
    let ops: Vec<String> = jobs
        .iter()
        .map(|j| {
            j.metadata.labels.as_ref().unwrap()["captf.infrastructure.cluster.x-k8s.io/op"].clone()
        })
        .collect();
    assert_eq!(ops.iter().filter(|o| *o == "apply").count(), 1, "{ops:?}");
    assert_eq!(ops.iter().filter(|o| *o == "plan").count(), 1, "{ops:?}");
    approve(&client, &ns, "manual", &plan["planHash"]).await;
    reason(&client, &ns, "manual", "ApplySucceeded").await;
    let tc = eventually(LONG, "status.plan cleared", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "manual").await;
        tc["status"]["plan"].is_null().then_some(tc)
    })
    .await;
    assert!(!annotations(&tc).contains_key("captf.io/approve-plan"));
    // M3: the approval's consumption is a write of the pass whose status write then lands:
    // its events are published.
    eventually(LONG, "PlanApplied and DigestPinned announced", || async {
        let events = events_json(&client, &ns).await;
        (events.contains("\"PlanApplied\"") && events.contains("\"DigestPinned\"")).then_some(())
    })
    .await;
    let applied = jobs_of(&client, &ns, "manual")
        .await
        .into_iter()
        .filter(|j| {
            j.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("captf.io/approved-plan"))
                == plan["planHash"].as_str().map(str::to_owned).as_ref()
        })
        .count();
    assert_eq!(applied, 1, "one apply ran the approved plan");

    // The Secret-sourced variable reached the module (its hash is in state) and nowhere else.
    let state = state_document(&client, &ns, contract::names::ObjectKind::Cluster, "manual").await;
    let digest = sha256_hex(planted);
    assert!(
        state.to_string().contains(&digest),
        "the module saw the variable"
    );
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "manual").await;
    assert!(!tc.to_string().contains(planted), "{tc:#}");
    assert!(!events_json(&client, &ns).await.contains(planted));
    assert!(!logs().contains(planted));
}

/// Plan Approval "Reading the plan": a plan Job stores the plan as `tofu show` prints it in the
/// Secret `status.plan.textSecret` names, owned by the cluster: it names every changed address
/// and shows a plain value, but a sensitive variable's value (from a variables Secret) appears
/// nowhere, not in the text, the object, events or logs. The approved apply deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_stored_as_text_without_its_sensitive_values_until_applied() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("plantext").await;
    let image = sensitive_image(env).await;
    let planted = "planted-password-4c9e1d";
    create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "module-vars", "labels": {"captf.io/variables": "true"}},
               "stringData": {"password": planted}}),
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-plantext");
    cluster_with_spec(
        &client,
        &ns,
        "reviewed",
        "id-plantext",
        &image,
        json!({"applyPolicy": "Manual",
               "variablesFrom": [{"secretRef": {"name": "module-vars"}}]}),
    )
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "reviewed", "True", LONG).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "reviewed",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"size": 2}}})),
    )
    .await
    .unwrap();
    let tc = reason(&client, &ns, "reviewed", "PlanAwaitingApproval").await;
    let plan = tc["status"]["plan"].clone();
    assert_eq!(plan["textSecret"], "captf-plan-c-reviewed", "{tc:#}");

    let (stored, text) = plan_text(&client, &ns, "captf-plan-c-reviewed").await;
    let owner = &stored.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "TerraformCluster");
    assert_eq!(Some(owner.uid.as_str()), tc["metadata"]["uid"].as_str());
    assert_eq!(
        stored.metadata.annotations.as_ref().unwrap()["captf.io/plan-hash"],
        plan["planHash"].as_str().unwrap()
    );
    for entry in plan["resources"].as_array().unwrap() {
        let address = entry.as_str().unwrap().split(" (").next().unwrap();
        assert!(text.contains(address), "{address} missing from:\n{text}");
    }
    assert!(
        text.contains("module.role.terraform_data.credentials[0]"),
        "{text}"
    );
    assert!(
        text.contains("\"size-2\""),
        "a plain value is shown:\n{text}"
    );
    assert!(text.contains("(sensitive value)"), "{text}");
    assert!(
        !text.contains(planted),
        "the sensitive value is in the text:\n{text}"
    );
    assert!(!tc.to_string().contains(planted), "{tc:#}");
    assert!(!events_json(&client, &ns).await.contains(planted));
    assert!(!logs().contains(planted));

    approve(&client, &ns, "reviewed", &plan["planHash"]).await;
    reason(&client, &ns, "reviewed", "ApplySucceeded").await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    eventually(LONG, "the consumed plan's text deleted", || async {
        let gone = secrets
            .get_opt("captf-plan-c-reviewed")
            .await
            .unwrap()
            .is_none();
        gone.then_some(())
    })
    .await;
    let tc = eventually(LONG, "status.plan cleared", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "reviewed").await;
        tc["status"]["plan"].is_null().then_some(tc)
    })
    .await;
    assert!(!tc.to_string().contains(planted));
}

/// The plan-text Secret `name` and its `plan.txt`.
async fn plan_text(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> (k8s_openapi::api::core::v1::Secret, String) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let stored = secrets.get(name).await.unwrap();
    let text = String::from_utf8(stored.data.as_ref().unwrap()["plan.txt"].0.clone()).unwrap();
    (stored, text)
}

/// Approves the plan `plan_hash` of the TerraformCluster `name` (`captf.io/approve-plan`).
async fn approve(client: &kube::Client, ns: &str, name: &str, plan_hash: &serde_json::Value) {
    annotate(client, ns, name, "captf.io/approve-plan", plan_hash).await;
}

/// Plan Approval "PlanChanged" (book l.1619): the plan changes between its approval and the
/// apply (here the module's external knob moves after the plan was shown, adding a resource to
/// the plan), so the approved apply re-plans, finds another plan hash and stops without
/// applying: `ApplyJobSucceeded` reads `Unknown/PlanChanged` and `status.plan` shows the new
/// plan, with the added address, for approval. Nothing of either plan reaches the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_plan_that_changed_before_its_apply_is_plan_changed() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = drifting_image(env).await;
    let ns = env.namespace("planchanged").await.unwrap();
    identity(&client, "id-planchanged", &[ns.as_str()], "planted-pc-1").await;
    set_drift_knob(&client, &ns, "steady").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-planchanged");
    cluster_with_spec(
        &client,
        &ns,
        "moving",
        "id-planchanged",
        &image,
        json!({"applyPolicy": "Manual"}),
    )
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "moving", "True", LONG).await;

    // A change is due (a Cluster field the cluster role renders) while the knob reads "first":
    // the plan creates `terraform_data.knob[0]`.
    set_drift_knob(&client, &ns, "first").await;
    set_service_domain(&client, &ns, "moving", "example.internal").await;
    let tc = reason(&client, &ns, "moving", "PlanAwaitingApproval").await;
    let shown = tc["status"]["plan"]["planHash"].clone();
    assert!(shown.as_str().unwrap().starts_with("p1:"), "{tc:#}");
    assert_eq!(tc["status"]["plan"]["add"], 1, "{tc:#}");

    // The knob moves before the approval is acted on: the plan now also creates
    // `terraform_data.knob_number[0]`, so the approved plan is no longer the plan.
    set_drift_knob(&client, &ns, "broken").await;
    approve(&client, &ns, "moving", &shown).await;
    let tc = reason(&client, &ns, "moving", "PlanChanged").await;
    assert_eq!(condition(&tc, "ApplyJobSucceeded").unwrap().0, "Unknown");
    let tc = eventually(LONG, "the new plan shown", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "moving").await;
        let hash = &tc["status"]["plan"]["planHash"];
        (hash.is_string() && *hash != shown).then_some(tc)
    })
    .await;
    let resources = tc["status"]["plan"]["resources"].to_string();
    assert!(resources.contains("knob_number"), "{tc:#}");
    // The new plan's text replaced the approved one's, for the next review.
    let (stored, text) = plan_text(&client, &ns, "captf-plan-c-moving").await;
    assert_eq!(tc["status"]["plan"]["textSecret"], "captf-plan-c-moving");
    assert_eq!(
        stored.metadata.annotations.as_ref().unwrap()["captf.io/plan-hash"],
        tc["status"]["plan"]["planHash"].as_str().unwrap()
    );
    assert!(text.contains("knob_number"), "{text}");
    let state = state_document(&client, &ns, contract::names::ObjectKind::Cluster, "moving").await;
    let applied = state["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["mode"] == "managed" && r["name"].as_str().unwrap().starts_with("knob"));
    assert!(!applied, "nothing of either plan was applied: {state:#}");
    assert!(!events_json(&client, &ns).await.contains("planted-pc-1"));
}
