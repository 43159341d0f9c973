//! The runner's behaviours, one test each, with the real runner, real OpenTofu and the real
//! `kubernetes` backend on the test environment's API server (Runtime Environment, Plan
//! Approval, Drift, Terraform State). Skipped with a message when the `tofu` test binary is
//! missing (`make testbin`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use common::{Fixture, MODULE, tfvars};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use serde_json::json;

const ADDR: &str = "module.role.terraform_data.this";

fn reasons(events: &[(String, String, String)]) -> Vec<&str> {
    events.iter().map(|(r, _, _)| r.as_str()).collect()
}

/// A first apply: init, validate, plan, apply of the saved plan; the state lands in the default
/// workspace's Secret with the backend labels; planted `TF_*`/`KUBE_*` variables never reach the
/// runtime and are logged by name only; events report every stage, posted over HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_apply_creates_the_state_and_reports_every_stage() {
    let Some(fx) = Fixture::new("first-apply", MODULE, &tfvars("alpha", "1", false), true).await
    else {
        return;
    };
    let run = fx.run("apply", &[]).await;
    run.assert_ok();
    assert_eq!(run.step_names(), ["init", "validate", "plan", "apply"]);
    let r = &run.result;
    assert_eq!(r["version"], 1);
    assert_eq!(r["op"], "apply");
    assert_eq!(
        r["image"],
        json!({"ref": "registry.test/captf/module:v1", "providersMirror": true})
    );
    assert_eq!(r["runtime"]["version"], "1.12.6");
    assert_eq!(r["changes"], json!({"add": 1, "change": 0, "destroy": 0}));
    assert_eq!(r["steps"][3]["exit"], 2, "plan exits 2: changes present");
    assert!(r["drift"].is_null());
    assert!(
        r.get("plan").is_none(),
        "an unguarded apply does not read its plan back"
    );

    // State in the default workspace (TF_WORKSPACE was dropped), with the labels given through
    // -backend-config, holding the tfvars value (TF_VAR_name was dropped) — and not a destroy
    // plan (TF_CLI_ARGS_plan was dropped).
    let secret = fx
        .secrets()
        .get(&format!("tfstate-default-{}", fx.suffix))
        .await
        .unwrap();
    let labels = secret.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("captf.io/managed").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("tfstateWorkspace").map(String::as_str),
        Some("default")
    );
    let state = fx.state().await.unwrap();
    assert_eq!(state["outputs"]["name"]["value"], "alpha");
    assert_eq!(fx.state_addresses().await, [ADDR]);
    assert!(
        !run.stderr.contains("[TRACE]"),
        "TF_LOG reached the runtime"
    );
    assert!(!run.stdout.contains("planted-from-the-environment"));
    let dropped = run
        .runner_log_lines()
        .into_iter()
        .find(|l| l.contains("dropped TF_*/KUBE_*"))
        .expect("the dropped names are logged")
        .to_owned();
    for name in [
        "TF_LOG",
        "TF_WORKSPACE",
        "TF_CLI_ARGS_plan",
        "TF_VAR_name",
        "KUBE_CONFIG_PATH",
    ] {
        assert!(dropped.contains(name), "{name} not in {dropped}");
    }
    assert!(
        !dropped.contains("TRACE")
            && !dropped.contains("elsewhere")
            && !dropped.contains("planted")
    );
    for kept in ["TF_IN_AUTOMATION", "TF_INPUT", "KUBE_NAMESPACE"] {
        assert!(
            !dropped.contains(&format!("\"{kept}\"")),
            "{kept} must be kept: {dropped}"
        );
    }
    // The mirror-only CLI configuration was written.
    let tfrc = std::fs::read_to_string(
        std::fs::read_dir(&fx.captf)
            .unwrap()
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with("work-"))
            .unwrap()
            .path()
            .join("cli.tfrc"),
    )
    .unwrap();
    assert!(tfrc.contains("filesystem_mirror") && tfrc.contains("exclude = [\"*/*/*\"]"));

    let events = fx.events().await;
    let reasons = reasons(&events);
    assert_eq!(reasons.first(), Some(&"RunStarted"), "{events:?}");
    assert_eq!(reasons.last(), Some(&"RunFinished"), "{events:?}");
    assert_eq!(reasons.iter().filter(|r| **r == "StepStarted").count(), 4);
    assert_eq!(reasons.iter().filter(|r| **r == "StepSucceeded").count(), 4);
    let changed = events
        .iter()
        .find(|e| e.0 == "ResourcesChanged")
        .expect("ResourcesChanged");
    assert_eq!(changed.2, "apply: 1 added, 0 changed, 0 destroyed");
    assert!(events.iter().all(|e| e.1 == "Normal"), "{events:?}");
    // They went over HTTP/2, which the API server offers: posted at once on one connection.
    assert!(
        run.runner_log_lines()
            .iter()
            .any(|l| l.contains("API server answered") && l.contains("HTTP/2.0")),
        "{}",
        run.stderr
    );
}

/// An apply whose plan exits 0 stops after the plan: no apply step, zero changes, success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_change_apply_skips_the_apply_step() {
    let Some(fx) = Fixture::new("no-change", MODULE, &tfvars("alpha", "1", false), false).await
    else {
        return;
    };
    fx.run("apply", &[]).await.assert_ok();
    let serial = fx.state().await.unwrap()["serial"].clone();
    fx.clear_events().await;
    let run = fx.run("apply", &[]).await;
    run.assert_ok();
    assert_eq!(run.step_names(), ["init", "validate", "plan"]);
    assert_eq!(run.result["steps"][3]["exit"], 0);
    assert_eq!(
        run.result["changes"],
        json!({"add": 0, "change": 0, "destroy": 0})
    );
    assert_eq!(run.result["image"]["providersMirror"], false);
    assert_eq!(
        fx.state().await.unwrap()["serial"],
        serial,
        "nothing was written"
    );
    let events = fx.events().await;
    assert!(
        !reasons(&events).contains(&"ResourcesChanged"),
        "{events:?}"
    );
}

/// A guarded apply whose plan replaces a resource stops before applying (`blocked`, the
/// destructive addresses in the result, the state untouched); approving its inputs hash lets the
/// same plan apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_plan_is_blocked_then_applied_with_the_approved_hash() {
    let Some(fx) = Fixture::new("guard", MODULE, &tfvars("alpha", "1", true), false).await else {
        return;
    };
    let first = fx
        .run("apply", &["--guard-deletes", "--inputs-hash=h2:first"])
        .await;
    first.assert_ok();
    assert_eq!(
        first.step_names(),
        ["init", "validate", "plan", "show-json", "apply"]
    );
    assert_eq!(first.result["plan"]["add"], 2);
    let serial = fx.state().await.unwrap()["serial"].clone();

    // A new generation replaces `this`; dropping `extra` deletes it.
    fx.set_tfvars(&tfvars("alpha", "2", false));
    fx.clear_events().await;
    let blocked = fx
        .run(
            "apply",
            &[
                "--guard-deletes",
                "--inputs-hash=h2:second",
                "--allow-deletes-hash=h2:first",
            ],
        )
        .await;
    assert_eq!(blocked.code, 1, "{}", blocked.stderr);
    assert_eq!(
        blocked.step_names(),
        ["init", "validate", "plan", "show-json"]
    );
    let error = &blocked.result["error"];
    assert_eq!(error["kind"], "blocked");
    assert!(error["step"].is_null());
    assert!(
        error["summary"].as_str().unwrap().contains("h2:second"),
        "{error}"
    );
    let plan = &blocked.result["plan"];
    assert_eq!(
        (plan["add"].clone(), plan["destroy"].clone()),
        (json!(1), json!(2))
    );
    assert!(plan["hash"].as_str().unwrap().starts_with("p1:"));
    assert_eq!(
        plan["resources"],
        json!([
            "module.role.terraform_data.extra[0] (delete)",
            format!("{ADDR} (replace)")
        ])
    );
    assert_eq!(
        fx.state().await.unwrap()["serial"],
        serial,
        "a blocked apply changes nothing"
    );
    assert_eq!(fx.lock_holder().await, None);
    let events = fx.events().await;
    assert!(reasons(&events).contains(&"PlanSummary"), "{events:?}");
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("Warning"));

    let approved = fx
        .run(
            "apply",
            &[
                "--guard-deletes",
                "--inputs-hash=h2:second",
                "--allow-deletes-hash=h2:second",
            ],
        )
        .await;
    approved.assert_ok();
    assert_eq!(
        approved.step_names(),
        ["init", "validate", "plan", "show-json", "apply"]
    );
    assert_eq!(
        approved.result["changes"],
        json!({"add": 1, "change": 0, "destroy": 2})
    );
    assert_eq!(fx.state_addresses().await, [ADDR]);
}

/// An approved apply (`--expect-plan`) applies only the identical plan: a changed plan stops
/// with `plan-changed` and the new plan's summary; approving the new hash applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_apply_with_a_changed_plan_stops_with_plan_changed() {
    let Some(fx) = Fixture::new("expect", MODULE, &tfvars("alpha", "1", false), false).await else {
        return;
    };
    let preview = fx.run("plan", &[]).await;
    preview.assert_ok();
    let approved_hash = preview.result["plan"]["hash"].as_str().unwrap().to_owned();

    // The module changes after the review: the new plan creates two resources.
    fx.set_tfvars(&tfvars("alpha", "1", true));
    let changed = fx
        .run("apply", &[&format!("--expect-plan={approved_hash}")])
        .await;
    assert_eq!(changed.code, 1);
    assert_eq!(changed.error_kind(), Some("plan-changed"));
    assert_eq!(
        changed.step_names(),
        ["init", "validate", "plan", "show-json"]
    );
    let plan = &changed.result["plan"];
    assert_eq!(plan["add"], 2);
    let new_hash = plan["hash"].as_str().unwrap().to_owned();
    assert_ne!(new_hash, approved_hash);
    assert_eq!(
        plan["resources"],
        json!([
            "module.role.terraform_data.extra[0] (create)",
            format!("{ADDR} (create)")
        ])
    );
    assert!(fx.state_addresses().await.is_empty(), "nothing was applied");

    let applied = fx
        .run("apply", &[&format!("--expect-plan={new_hash}")])
        .await;
    applied.assert_ok();
    assert_eq!(applied.result["changes"]["add"], 2);
    assert_eq!(applied.result["plan"]["hash"], new_hash);
}

/// The plan operation: init, validate, plan, show -json; counts, entries and hash in the result;
/// nothing applied; the plan document (which carries input values) never reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_operation_reports_the_plan_and_applies_nothing() {
    let secret_value = "value-only-in-the-plan-document-7c1e";
    let vars = json!({"name": secret_value, "generation": "1", "extra": true, "password": ""});
    let Some(fx) = Fixture::new("plan-op", MODULE, &vars.to_string(), false).await else {
        return;
    };
    let run = fx.run("plan", &[]).await;
    run.assert_ok();
    assert_eq!(run.step_names(), ["init", "validate", "plan", "show-json"]);
    let plan = &run.result["plan"];
    assert_eq!(plan["add"], 2);
    assert_eq!(plan["change"], 0);
    assert_eq!(plan["destroy"], 0);
    assert_eq!(plan["outputs"], 1);
    assert_eq!(
        plan["resources"],
        json!([
            "module.role.terraform_data.extra[0] (create)",
            format!("{ADDR} (create)")
        ])
    );
    let expected = contract::plan::plan_hash(&[
        contract::plan::PlannedChange {
            address: "module.role.terraform_data.extra[0]".into(),
            action: contract::plan::Action::Create,
        },
        contract::plan::PlannedChange {
            address: ADDR.into(),
            action: contract::plan::Action::Create,
        },
    ]);
    assert_eq!(plan["hash"], expected);
    assert!(run.result.get("changes").is_none());
    assert!(fx.state_addresses().await.is_empty());
    // The human-readable plan is logged (tofu redacts nothing here: the value is not sensitive),
    // but never the JSON plan document.
    assert!(
        !run.stdout.contains("\"resource_changes\""),
        "show -json output was logged"
    );
    assert!(!run.stdout.contains("\"format_version\":\"1.2\""));
    let events = fx.events().await;
    let summary = events
        .iter()
        .find(|e| e.0 == "PlanSummary")
        .expect("PlanSummary");
    assert_eq!(summary.2, "plan: 2 to add, 0 to change, 0 to destroy");
    assert!(events.iter().all(|e| !e.2.contains(secret_value)));
    assert!(!run.result.to_string().contains(secret_value));
}

/// Drift: refresh, then plan without refreshing again; exit 0 is no drift, exit 2 is drift,
/// counted from the plan with the drifted addresses. The check itself changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_found_and_not_found() {
    let Some(fx) = Fixture::new("drift", MODULE, &tfvars("alpha", "1", false), true).await else {
        return;
    };
    fx.run("apply", &[]).await.assert_ok();

    let clean = fx.run("drift", &[]).await;
    clean.assert_ok();
    assert_eq!(clean.step_names(), ["init", "apply-refresh-only", "plan"]);
    assert_eq!(
        clean.result["drift"],
        json!({"detected": false, "add": 0, "change": 0, "destroy": 0, "resources": []})
    );

    fx.set_tfvars(&tfvars("beta", "1", false));
    let serial = fx.state().await.unwrap()["serial"].clone();
    fx.clear_events().await;
    let drifted = fx.run("drift", &[]).await;
    drifted.assert_ok();
    assert_eq!(
        drifted.step_names(),
        ["init", "apply-refresh-only", "plan", "show-json"]
    );
    assert_eq!(
        drifted.result["drift"],
        json!({"detected": true, "add": 0, "change": 1, "destroy": 0, "resources": [ADDR]})
    );
    assert!(drifted.result.get("plan").is_none());
    assert_eq!(fx.state().await.unwrap()["serial"], serial);
    assert_eq!(
        fx.state().await.unwrap()["outputs"]["name"]["value"],
        "alpha"
    );
    let events = fx.events().await;
    let summary = events
        .iter()
        .find(|e| e.0 == "PlanSummary")
        .expect("PlanSummary");
    assert_eq!(summary.2, "drift: 0 to add, 1 to change, 0 to destroy");
}

/// [`MODULE`] with `terraform_data.this` removed from the configuration but not destroyed: a
/// `removed` block with `lifecycle { destroy = false }` (OpenTofu's forget).
fn forgetting_module() -> String {
    let resource = "resource \"terraform_data\" \"this\" {\n  input            = var.name\n  triggers_replace = [var.generation]\n}\n";
    let removed =
        "removed {\n  from = terraform_data.this\n  lifecycle {\n    destroy = false\n  }\n}\n";
    assert!(MODULE.contains(resource));
    MODULE
        .replace(resource, removed)
        .replace("terraform_data.this.output", "var.name")
}

/// Plan Approval and Drift list the counts to add, change and destroy; a plan that only forgets
/// resources carries its forget count too, in the plan, drift and changes documents and in the
/// PlanSummary and ResourcesChanged events, with real OpenTofu (not 0/0/0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_only_forgets_reports_its_forget_count() {
    let Some(fx) = Fixture::new("forget", MODULE, &tfvars("alpha", "1", false), false).await else {
        return;
    };
    fx.run("apply", &[]).await.assert_ok();
    fx.set_module(&forgetting_module());

    let plan = fx.run("plan", &[]).await;
    plan.assert_ok();
    let doc = &plan.result["plan"];
    assert_eq!(
        (&doc["add"], &doc["change"], &doc["destroy"], &doc["forget"]),
        (&json!(0), &json!(0), &json!(0), &json!(1)),
        "{doc}"
    );
    assert_eq!(doc["resources"], json!([format!("{ADDR} (forget)")]));
    let drift = fx.run("drift", &[]).await;
    drift.assert_ok();
    assert_eq!(
        drift.result["drift"],
        json!({"detected": true, "add": 0, "change": 0, "destroy": 0, "forget": 1,
               "resources": [ADDR]})
    );
    let summaries: Vec<String> = fx
        .events()
        .await
        .into_iter()
        .filter(|e| e.0 == "PlanSummary")
        .map(|e| e.2)
        .collect();
    assert!(
        summaries.contains(&"plan: 0 to add, 0 to change, 0 to destroy, 1 to forget".to_owned()),
        "{summaries:?}"
    );
    fx.clear_events().await;

    let apply = fx.run("apply", &[]).await;
    apply.assert_ok();
    assert_eq!(apply.result["changes"]["forget"], 1, "{}", apply.result);
    assert!(fx.state_addresses().await.is_empty());
    let changed = fx.event_note("ResourcesChanged").await;
    assert!(changed.ends_with(", 1 forgotten"), "{changed}");
}

/// Module Contract "Null semantics": a module that does not declare an output the generated root
/// re-exports still plans and applies with real OpenTofu; the state lists the output in
/// `captf_undeclared_outputs` for the manager (`OutputsMissing`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_output_is_left_out_of_the_root_and_listed_in_the_state() {
    let module = MODULE.replace(
        "output \"name\" {\n  value = terraform_data.this.output\n}\n",
        "",
    );
    assert_ne!(module, MODULE);
    let Some(fx) = Fixture::new("undeclared", &module, &tfvars("alpha", "1", false), false).await
    else {
        return;
    };
    let run = fx.run("apply", &[]).await;
    run.assert_ok();
    let state = fx.state().await.unwrap();
    assert_eq!(
        state["outputs"]["captf_undeclared_outputs"]["value"],
        json!(["name"]),
        "{}",
        state["outputs"]
    );
    assert!(state["outputs"].get("name").is_none());
    assert!(
        run.stderr.contains("does not declare") || run.stdout.contains("does not declare"),
        "the run log names the undeclared outputs"
    );
}

/// Refresh is `apply -refresh-only`: it succeeds and never applies changed inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_updates_state_from_reality_only() {
    let Some(fx) = Fixture::new("refresh", MODULE, &tfvars("alpha", "1", false), false).await
    else {
        return;
    };
    fx.run("apply", &[]).await.assert_ok();
    fx.set_tfvars(&tfvars("beta", "1", false));
    let run = fx.run("refresh", &[]).await;
    run.assert_ok();
    assert_eq!(run.step_names(), ["init", "apply-refresh-only"]);
    assert!(run.result.get("changes").is_none());
    assert_eq!(
        fx.state().await.unwrap()["outputs"]["name"]["value"],
        "alpha"
    );
    assert_eq!(fx.lock_holder().await, None);
}

/// Destroy: init, destroy; the state keeps no resource; the counts come from the summary line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_empties_the_state() {
    let Some(fx) = Fixture::new("destroy", MODULE, &tfvars("alpha", "1", true), false).await else {
        return;
    };
    fx.run("apply", &[]).await.assert_ok();
    assert_eq!(fx.state_addresses().await.len(), 2);
    fx.clear_events().await;
    let run = fx.run("destroy", &[]).await;
    run.assert_ok();
    assert_eq!(run.step_names(), ["init", "destroy"]);
    assert_eq!(
        run.result["changes"],
        json!({"add": 0, "change": 0, "destroy": 2})
    );
    assert!(fx.state_addresses().await.is_empty());
    assert_eq!(
        fx.event_note("ResourcesChanged").await,
        "destroy: 0 added, 0 changed, 2 destroyed"
    );
}

/// Restore: a saved state (copied verbatim from its Secret, split in two chunks as a backup set
/// may be) is pushed back over a later state with `state push -force`, and `state list` shows
/// its resources; a backup that should hold resources but lists none fails at state-list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_state_is_restored() {
    let Some(fx) = Fixture::new("restore", MODULE, &tfvars("alpha", "1", false), false).await
    else {
        return;
    };
    fx.run("apply", &[]).await.assert_ok();
    let saved = fx
        .secrets()
        .get(&format!("tfstate-default-{}", fx.suffix))
        .await
        .unwrap()
        .data
        .unwrap()
        .remove("tfstate")
        .unwrap()
        .0;
    let saved_serial = fx.state().await.unwrap()["serial"].as_u64().unwrap();
    fx.run("destroy", &[]).await.assert_ok();
    assert!(fx.state_addresses().await.is_empty());

    // The per-run Secret of a restore Job: no tfvars, the backup's chunks under restore/<i>.
    let restore = fx.captf.join("config/restore");
    std::fs::create_dir_all(&restore).unwrap();
    let (a, b) = saved.split_at(saved.len() / 2);
    std::fs::write(restore.join("0"), a).unwrap();
    std::fs::write(restore.join("1"), b).unwrap();
    std::fs::remove_file(fx.captf.join("config/terraform.tfvars.json")).unwrap();

    let run = fx
        .run("restore", &["--restore-chunks=2", "--restore-resources=1"])
        .await;
    run.assert_ok();
    assert_eq!(run.step_names(), ["init", "state-push", "state-list"]);
    assert!(
        run.stdout.lines().any(|l| l.trim() == ADDR),
        "state list is logged"
    );
    assert_eq!(fx.state_addresses().await, [ADDR]);
    let state = fx.state().await.unwrap();
    assert!(state["serial"].as_u64().unwrap() >= saved_serial);
    assert_eq!(state["outputs"]["name"]["value"], "alpha");

    // An empty state, claimed to hold one resource: the push succeeds, state list fails it.
    let empty = json!({"version": 4, "terraform_version": "1.12.6", "serial": 99,
                       "lineage": state["lineage"], "outputs": {}, "resources": []});
    std::fs::write(restore.join("0"), empty.to_string()).unwrap();
    let wrong = fx
        .run("restore", &["--restore-chunks=1", "--restore-resources=1"])
        .await;
    assert_eq!(wrong.code, 1);
    assert_eq!(wrong.error_kind(), Some("step"));
    assert_eq!(wrong.result["error"]["step"], "state-list");
}

/// A module directory without configuration, or a missing runtime, fails `image-layout` before
/// any command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_the_fixed_paths_fails_image_layout() {
    let Some(fx) = Fixture::new("layout", MODULE, &tfvars("alpha", "1", false), false).await else {
        return;
    };
    std::fs::rename(
        fx.captf.join("module/main.tf"),
        fx.captf.join("module/main.tf.txt"),
    )
    .unwrap();
    let run = fx.run("apply", &[]).await;
    assert_eq!(run.code, 1);
    assert_eq!(run.error_kind(), Some("image-layout"));
    assert!(run.result["error"]["step"].is_null());
    assert!(run.step_names().is_empty());
    assert_eq!(
        run.result["runtime"]["version"], "",
        "no command ran, not even version"
    );
    assert!(
        run.result["error"]["summary"]
            .as_str()
            .unwrap()
            .contains(".tf")
    );

    std::fs::rename(
        fx.captf.join("module/main.tf.txt"),
        fx.captf.join("module/main.tf"),
    )
    .unwrap();
    std::fs::remove_file(fx.captf.join("runtime")).unwrap();
    let run = fx.run("apply", &[]).await;
    assert_eq!(run.error_kind(), Some("image-layout"));
    assert!(
        run.result["error"]["summary"]
            .as_str()
            .unwrap()
            .contains("runtime")
    );
    let events = fx.events().await;
    assert_eq!(reasons(&events).last(), Some(&"RunFinished"));
    assert!(!reasons(&events).contains(&"RunStarted"));
}

/// A failing module: the summary names the error from the `Error:` header alone; a planted value
/// that OpenTofu prints in the diagnostic's detail (so it is in the pod log) appears in neither
/// the result, the events nor the runner's own log lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_module_is_summarised_without_its_values() {
    const PLANTED: &str = "s3cr3t-planted-4b9d";
    let failing = format!(
        "{MODULE}\nresource \"terraform_data\" \"checked\" {{\n  input = \"x\"\n  lifecycle {{\n    precondition {{\n      condition     = length(var.password) < 3\n      error_message = \"The password is too long.\"\n    }}\n  }}\n}}\n"
    );
    let vars = json!({"name": "alpha", "generation": "1", "extra": false, "password": PLANTED});
    let Some(fx) = Fixture::new("failing", &failing, &vars.to_string(), false).await else {
        return;
    };
    let run = fx.run("apply", &[]).await;
    assert_eq!(run.code, 1);
    assert_eq!(run.step_names(), ["init", "validate", "plan"]);
    let error = &run.result["error"];
    assert_eq!(error["kind"], "step");
    assert_eq!(error["step"], "plan");
    assert_eq!(error["exitCode"], 1);
    assert_eq!(error["summary"], "Error: Resource precondition failed");
    assert!(
        run.stderr.contains(PLANTED),
        "the plant reached the pod log (the test is meaningful)"
    );
    assert!(!run.result.to_string().contains(PLANTED));
    for line in run.runner_log_lines() {
        assert!(
            !line.contains(PLANTED),
            "runner log line carries the value: {line}"
        );
    }
    let events = fx.events().await;
    assert!(!events.is_empty());
    for e in &events {
        assert!(!e.2.contains(PLANTED), "event carries the value: {e:?}");
    }
    let failed = events
        .iter()
        .find(|e| e.0 == "StepFailed")
        .expect("StepFailed");
    assert_eq!(failed.1, "Warning");
    assert_eq!(failed.2, "Error: Resource precondition failed");
}

/// An invalid module fails at validate, summarised from validate's JSON diagnostics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_module_fails_at_validate_with_its_diagnostics() {
    let invalid =
        format!("{MODULE}\nresource \"terraform_data\" \"bad\" {{\n  no_such_argument = 1\n}}\n");
    let Some(fx) = Fixture::new("invalid", &invalid, &tfvars("alpha", "1", false), false).await
    else {
        return;
    };
    let run = fx.run("apply", &[]).await;
    assert_eq!(run.code, 1);
    assert_eq!(run.step_names(), ["init", "validate"]);
    assert_eq!(run.result["error"]["step"], "validate");
    let summary = run.result["error"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Error: Unsupported argument ("),
        "{summary}"
    );
    assert!(summary.contains("main.tf:"), "{summary}");
    assert!(
        run.stdout.contains("\"diagnostics\""),
        "validate's JSON still reaches the log"
    );
}

/// SIGTERM during a slow apply goes to the runtime, which stops its provisioner, writes state and
/// releases the lock: the run ends `interrupted`, not as a module failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_slow_apply_ends_interrupted_with_the_lock_released() {
    let slow = format!(
        "{MODULE}\nresource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"sleep 120\"\n  }}\n}}\n"
    );
    let Some(fx) = Fixture::new("sigterm", &slow, &tfvars("alpha", "1", false), false).await else {
        return;
    };
    let (args, result) = fx.args("apply", &[]);
    let mut child = fx
        .command(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut buf).await;
        buf
    });
    // Wait until the provisioner runs (the apply holds the lock).
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(
            deadline,
            tokio::io::AsyncReadExt::read(&mut stdout, &mut chunk),
        )
        .await
        .expect("the apply reaches the provisioner")
        .unwrap();
        assert!(
            n > 0,
            "stdout closed early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&chunk[..n]);
        if String::from_utf8_lossy(&seen).contains("Executing: [\"/bin/sh\"") {
            break;
        }
    }
    assert!(fx.lock_holder().await.is_some(), "the apply holds the lock");
    tokio::time::sleep(Duration::from_millis(500)).await;
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut rest = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut rest)
        .await
        .unwrap();
    seen.extend(rest);
    let status = tokio::time::timeout(Duration::from_secs(90), child.wait())
        .await
        .expect("the runner stops")
        .unwrap();
    let out = std::process::Output {
        status,
        stdout: seen,
        stderr: err_task.await.unwrap(),
    };
    let run = common::finish(&out, &result);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let error = &run.result["error"];
    assert_eq!(error["kind"], "interrupted", "{}", run.result);
    assert_eq!(error["step"], "apply");
    assert_eq!(run.step_names(), ["init", "validate", "plan", "apply"]);
    assert!(
        run.runner_log_lines()
            .iter()
            .any(|l| l.contains("forwarding SIGTERM")),
        "{}",
        run.stderr
    );
    assert_eq!(
        fx.lock_holder().await,
        None,
        "the runtime released the lock"
    );
    let state = fx.state().await.expect("the runtime wrote its state");
    assert!(state["resources"].as_array().is_some());
}

/// A stale lock is force-unlocked right after init and the run proceeds; a lock already gone is
/// success too. Without the flag the same lock fails the plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lock_is_force_unlocked() {
    let Some(fx) = Fixture::new("stale-lock", MODULE, &tfvars("alpha", "1", false), false).await
    else {
        return;
    };
    // The lock a pod that died mid-apply left behind, on an existing state.
    fx.run("apply", &[]).await.assert_ok();
    fx.set_tfvars(&tfvars("beta", "1", false));
    let lock_id = "4a7c8b1e-0000-4000-8000-stale0lock00";
    let info = json!({"ID": lock_id, "Operation": "OperationTypeApply", "Info": "",
                      "Who": "root@captf-c-x-apply-a1-000000-zzzzz", "Version": "1.12.6",
                      "Created": "2026-01-01T00:00:00Z", "Path": ""});
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": format!("lock-tfstate-default-{}", fx.suffix),
                     "annotations": {"app.terraform.io/lock-info": info.to_string()}},
        "spec": {"holderIdentity": lock_id},
    }))
    .unwrap();
    let leases = fx.leases();
    let name = format!("lock-tfstate-default-{}", fx.suffix);
    let mut current = leases.get(&name).await.unwrap();
    current.metadata.annotations = lease.metadata.annotations;
    current.spec = lease.spec;
    leases
        .replace(&name, &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(fx.lock_holder().await.as_deref(), Some(lock_id));

    let locked = fx.run("apply", &["--lock-timeout=1s"]).await;
    assert_eq!(locked.code, 1);
    assert_eq!(locked.result["error"]["step"], "plan", "{}", locked.stderr);
    let summary = locked.result["error"]["summary"].as_str().unwrap();
    assert!(summary.contains("state lock"), "{summary}");

    let run = fx
        .run("apply", &[&format!("--force-unlock={lock_id}")])
        .await;
    run.assert_ok();
    assert_eq!(
        run.step_names(),
        ["init", "force-unlock", "validate", "plan", "apply"]
    );
    assert_eq!(run.result["steps"][2]["exit"], 0);
    assert_eq!(fx.lock_holder().await, None);
    assert_eq!(
        fx.state().await.unwrap()["outputs"]["name"]["value"],
        "beta"
    );

    // A retried pod finds the lock already cleared: still success.
    let again = fx
        .run("apply", &[&format!("--force-unlock={lock_id}")])
        .await;
    again.assert_ok();
    assert_eq!(
        again.step_names(),
        ["init", "force-unlock", "validate", "plan"]
    );
    assert_eq!(
        again.result["steps"][2]["exit"], 1,
        "force-unlock failed, accepted"
    );
}

/// An invalid `--event-object` is a usage error (exit 2), and the run still writes a minimal
/// result document before it exits, so the manager reads why the Job failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_event_object_writes_a_minimal_result_before_exiting() {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("result.json");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["run", "--op=apply", "--event-object=v1/ConfigMap/ns"])
        .arg(format!("--result={}", result.display()))
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&result).expect("a result document")).unwrap();
    assert_eq!(doc["op"], "apply");
    assert_eq!(doc["error"]["kind"], "step");
    assert_eq!(doc["error"]["step"], "prepare");
    let summary = doc["error"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("the runner could not start: invalid value for '--event-object'"),
        "{summary}"
    );
}

/// Every stage of a run with no `--event-object` still writes its result; usage errors exit 2
/// without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2() {
    for args in [
        &["run"][..],
        &["run", "--op=bogus"],
        &["run", "--op=apply", "extra"],
        &["--logging-format=yaml", "version"],
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(args)
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("version")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("runner "));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("bin/runner");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("copy")
        .arg(&dest)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let meta = std::fs::metadata(&dest).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o755);
}
