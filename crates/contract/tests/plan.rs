//! Plan analysis against plans a real OpenTofu produced (`hack/gen-plan-fixtures.sh`), one test per
//! rule (Plan Approval, Drift "Read the results", the runner's result document).

use contract::plan::{
    Action, PlanError, analyze_plan, empty_plan_hash, plan_hash, plan_hash_has_changes,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

const FIXTURES: &[&str] = &[
    "create",
    "update",
    "replace-delete-first",
    "replace-create-first",
    "delete",
    "output-only",
    "no-changes",
    "move-and-forget",
    "deferred-read",
    "module-role",
];

fn fixture_path(name: &str, ext: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plans")
        .join(format!("{name}.{ext}"))
}

fn fixture(name: &str) -> contract::plan::PlanAnalysis {
    let bytes = std::fs::read(fixture_path(name, "json")).expect("fixture");
    analyze_plan(&bytes).expect("analysable")
}

fn empty_hash() -> String {
    format!("p1:{}", hex::encode(Sha256::digest(b"")))
}

/// Parses the runtime's "Plan: N to add, M to change, K to destroy[, F to forget]." line.
fn runtime_summary(name: &str) -> [u64; 4] {
    let line = std::fs::read_to_string(fixture_path(name, "summary")).expect("summary");
    let mut counts = [0u64; 4];
    for part in line
        .trim()
        .trim_start_matches("Plan: ")
        .trim_end_matches('.')
        .split(", ")
    {
        let mut words = part.split(' ');
        let (Some(n), Some("to"), Some(what)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let n: u64 = n.parse().expect("a count");
        match what {
            "add" => counts[0] = n,
            "change" => counts[1] = n,
            "destroy" => counts[2] = n,
            "forget" => counts[3] = n,
            _ => {}
        }
    }
    counts
}

#[test]
fn counts_agree_with_the_runtimes_own_summary_for_every_fixture() {
    for name in FIXTURES {
        let a = fixture(name);
        assert_eq!(
            [a.add, a.change, a.destroy, a.forget],
            runtime_summary(name),
            "{name}"
        );
    }
}

#[test]
fn create_counts_one_add_per_instance() {
    let a = fixture("create");
    assert_eq!((a.add, a.change, a.destroy, a.outputs), (3, 0, 0, 1));
    assert!(!a.destructive);
    let (resources, truncated) = a.resources();
    assert_eq!(
        resources,
        vec![
            "terraform_data.a (create)",
            "terraform_data.b[0] (create)",
            "terraform_data.b[1] (create)"
        ]
    );
    assert!(!truncated);
}

#[test]
fn in_place_update_is_one_change_and_no_ops_are_left_out() {
    let a = fixture("update");
    assert_eq!((a.add, a.change, a.destroy), (0, 1, 0));
    assert!(!a.destructive);
    assert_eq!(a.resources().0, vec!["terraform_data.a (update)"]);
}

#[test]
fn replacement_is_one_add_and_one_destroy_in_either_order() {
    for name in ["replace-delete-first", "replace-create-first"] {
        let a = fixture(name);
        assert_eq!((a.add, a.change, a.destroy), (1, 0, 1), "{name}");
        assert!(a.destructive, "{name}");
        assert_eq!(a.resources().0, vec!["terraform_data.a (replace)"]);
        assert_eq!(
            a.destructive_resources().0,
            vec!["terraform_data.a (replace)"]
        );
    }
    assert_eq!(
        fixture("replace-delete-first").changes[0].action,
        Action::DeleteThenCreate
    );
    assert_eq!(
        fixture("replace-create-first").changes[0].action,
        Action::CreateThenDelete
    );
}

#[test]
fn removal_is_destructive() {
    let a = fixture("delete");
    assert_eq!((a.add, a.change, a.destroy), (0, 0, 2));
    assert!(a.destructive);
    assert_eq!(
        a.destructive_resources().0,
        vec![
            "terraform_data.gone[\"x\"] (delete)",
            "terraform_data.gone[\"y\"] (delete)"
        ]
    );
}

#[test]
fn output_only_change_counts_outputs_and_no_resources() {
    let a = fixture("output-only");
    assert_eq!((a.add, a.change, a.destroy), (0, 0, 0));
    assert_eq!(a.outputs, 2, "added and note change; same does not");
    assert!(a.changes.is_empty());
    assert_eq!(a.hash, empty_hash());
    assert!(!a.drift_summary().detected);
}

#[test]
fn a_plan_without_changes_hashes_the_empty_change_list() {
    let a = fixture("no-changes");
    assert_eq!(a.hash, empty_hash());
    assert_eq!(a.resources(), (vec![], false));
    assert!(!a.has_resource_changes());
}

#[test]
fn moves_and_forgets_are_counted_and_forget_is_not_destructive() {
    let a = fixture("move-and-forget");
    assert_eq!((a.moved, a.forget, a.destroy), (1, 1, 0));
    assert!(!a.destructive);
    assert_eq!(a.resources().0, vec!["terraform_data.dropped (forget)"]);
}

#[test]
fn a_replacement_that_forgets_is_one_add_and_one_forget_in_either_order() {
    // OpenTofu writes `forget, create` for a replacement under `lifecycle { destroy = false }`;
    // newer Terraform releases write `create, forget` (CreateThenForget).
    for (actions, action) in [
        (["forget", "create"], Action::ForgetThenCreate),
        (["create", "forget"], Action::CreateThenForget),
    ] {
        let a = analyze_plan(&synthetic(&[("t.kept", "managed", &actions)])).expect("readable");
        assert_eq!(
            (a.add, a.change, a.destroy, a.forget),
            (1, 0, 0, 1),
            "{actions:?}"
        );
        assert!(!a.destructive, "{actions:?}");
        assert_eq!(a.changes[0].action, action);
        assert_eq!(a.resources().0, vec!["t.kept (replace)"]);
        assert_eq!(
            a.hash,
            plan_hash(&[contract::plan::PlannedChange {
                address: "t.kept".into(),
                action
            }])
        );
        assert_eq!(action.actions_str(), actions.join(","));
    }
}

#[test]
fn no_changes_means_the_plan_hash_is_the_empty_list_hash() {
    assert_eq!(empty_plan_hash(), empty_hash());
    assert!(!plan_hash_has_changes(&empty_hash()));
    // A plan that only forgets resources adds, changes and destroys nothing, yet it has changes:
    // under applyPolicy Manual it waits for an approval.
    let forget = analyze_plan(&synthetic(&[("t.dropped", "managed", &["forget"])])).expect("ok");
    assert_eq!((forget.add, forget.change, forget.destroy), (0, 0, 0));
    assert!(forget.has_changes());
    assert!(plan_hash_has_changes(&forget.hash));
    // Moves and imports without an action are not hashed: alone, they are no changes.
    let plan = json!({"resource_changes": [
        {"address": "t.new", "previous_address": "t.old", "mode": "managed", "change": {"actions": ["no-op"]}},
        {"address": "t.adopted", "mode": "managed", "change": {"actions": ["no-op"], "importing": {"id": "i-1"}}}
    ]});
    let a = analyze_plan(plan.to_string().as_bytes()).expect("ok");
    assert_eq!((a.moved, a.import), (1, 1));
    assert!(!a.has_changes());
    assert!(!plan_hash_has_changes(&a.hash));
    // An import that also updates is hashed by its action.
    let plan = json!({"resource_changes": [
        {"address": "t.adopted", "mode": "managed", "change": {"actions": ["update"], "importing": {"id": "i-1"}}}
    ]});
    assert!(
        analyze_plan(plan.to_string().as_bytes())
            .expect("ok")
            .has_changes()
    );
    // Output changes alone are no changes either.
    assert!(!fixture("output-only").has_changes());
    assert!(fixture("move-and-forget").has_changes());
}

#[test]
fn a_deferred_read_is_listed_and_hashed_but_not_counted() {
    let a = fixture("deferred-read");
    assert_eq!((a.add, a.change, a.destroy), (1, 0, 0));
    assert_eq!(
        a.resources().0,
        vec![
            "data.terraform_remote_state.later (read)",
            "terraform_data.a (create)"
        ]
    );
    let drift = a.drift_summary();
    assert_eq!(drift.resources, vec!["terraform_data.a"]);
}

#[test]
fn changes_inside_module_role_carry_their_module_address() {
    let a = fixture("module-role");
    assert_eq!((a.add, a.change, a.destroy), (3, 1, 1));
    assert!(a.destructive);
    assert_eq!(
        a.resources().0,
        vec![
            "module.role.terraform_data.disk[2] (create)",
            "module.role.terraform_data.extra (create)",
            "module.role.terraform_data.instance (update)",
            "module.role.terraform_data.nic (replace)"
        ]
    );
    assert_eq!(a.outputs, 0);
}

#[test]
fn plan_hash_is_p1_sha256_of_the_sorted_address_actions_lines() {
    let a = fixture("module-role");
    let lines = "module.role.terraform_data.disk[2]|create\n\
                 module.role.terraform_data.extra|create\n\
                 module.role.terraform_data.instance|update\n\
                 module.role.terraform_data.nic|delete,create\n";
    assert_eq!(
        a.hash,
        format!("p1:{}", hex::encode(Sha256::digest(lines.as_bytes())))
    );
    assert_eq!(
        plan_hash(a.changes.iter().rev()),
        a.hash,
        "order does not matter"
    );
    assert_ne!(
        fixture("replace-delete-first").hash,
        fixture("replace-create-first").hash
    );
}

#[test]
fn plan_hash_ignores_values() {
    let plan = |after: &str| {
        json!({"resource_changes": [{"address": "x.a", "mode": "managed",
            "change": {"actions": ["update"], "before": {"v": "old"}, "after": {"v": after}}}]})
    };
    let one = analyze_plan(plan("one").to_string().as_bytes()).expect("ok");
    let two = analyze_plan(plan("two").to_string().as_bytes()).expect("ok");
    assert_eq!(one.hash, two.hash);
}

fn synthetic(changes: &[(&str, &str, &[&str])]) -> Vec<u8> {
    let rc: Vec<Value> = changes
        .iter()
        .map(|(address, mode, actions)| {
            json!({"address": address, "mode": mode,
                   "change": {"actions": actions, "before": {"password": "hunter2"}, "after": null}})
        })
        .collect();
    json!({"format_version": "1.2", "resource_changes": rc})
        .to_string()
        .into_bytes()
}

#[test]
fn at_most_50_resource_entries_with_a_truncated_flag() {
    let addresses: Vec<String> = (0..60).map(|i| format!("t.r[{i:02}]")).collect();
    let changes: Vec<(&str, &str, &[&str])> = addresses
        .iter()
        .map(|a| (a.as_str(), "managed", &["create"][..]))
        .collect();
    let a = analyze_plan(&synthetic(&changes)).expect("ok");
    let (resources, truncated) = a.resources();
    assert_eq!(resources.len(), 50);
    assert!(truncated);
    assert_eq!(a.add, 60);
    let (exactly, truncated) = {
        let a = analyze_plan(&synthetic(&changes[..50])).expect("ok");
        a.resources()
    };
    assert_eq!(exactly.len(), 50);
    assert!(!truncated);
}

#[test]
fn resource_entries_fit_the_status_field() {
    let long = format!("t.r[\"{}\"]", "k".repeat(700));
    let a = analyze_plan(&synthetic(&[(&long, "managed", &["delete", "create"])])).expect("ok");
    let entry = &a.resources().0[0];
    assert!(entry.chars().count() <= 600);
    assert!(entry.ends_with("… (replace)"), "{entry}");
}

#[test]
fn drift_summary_keeps_at_most_20_addresses() {
    let addresses: Vec<String> = (0..25).map(|i| format!("t.r[{i:02}]")).collect();
    let changes: Vec<(&str, &str, &[&str])> = addresses
        .iter()
        .map(|a| (a.as_str(), "managed", &["update"][..]))
        .collect();
    let drift = analyze_plan(&synthetic(&changes))
        .expect("ok")
        .drift_summary();
    assert!(drift.detected);
    assert_eq!(drift.change, 25);
    assert_eq!(drift.resources.len(), 20);
    assert_eq!(drift.resources[0], "t.r[00]");
}

#[test]
fn a_data_source_leaving_state_and_ephemeral_resources_are_not_counted() {
    let a = analyze_plan(&synthetic(&[
        ("data.x.gone", "data", &["delete"]),
        ("ephemeral.x.e", "ephemeral", &["create"]),
    ]))
    .expect("ok");
    assert_eq!((a.add, a.destroy), (0, 0));
    assert!(!a.destructive);
    assert!(a.changes.is_empty());
}

#[test]
fn imports_are_counted() {
    let plan = json!({"resource_changes": [
        {"address": "t.a", "mode": "managed", "change": {"actions": ["no-op"], "importing": {"id": "i-1"}}},
        {"address": "t.b", "mode": "managed", "change": {"actions": ["update"], "importing": {"id": "i-2"}}},
        {"address": "t.c", "mode": "managed", "change": {"actions": ["update"], "importing": null}}
    ]});
    let a = analyze_plan(plan.to_string().as_bytes()).expect("ok");
    assert_eq!((a.import, a.change), (2, 2));
    assert_eq!(
        a.changes.len(),
        2,
        "the no-op import is counted, not listed"
    );
}

#[test]
fn values_are_never_copied_out_of_a_plan() {
    let a = analyze_plan(&synthetic(&[("t.a", "managed", &["delete"])])).expect("ok");
    assert!(!format!("{a:?}").contains("hunter2"));
    assert!(!format!("{:?}", a.drift_summary()).contains("hunter2"));
}

#[test]
fn an_unknown_actions_list_is_an_error() {
    let err = analyze_plan(&synthetic(&[("t.a", "managed", &["explode"])])).expect_err("unknown");
    assert_eq!(err, PlanError::UnknownActions { index: 0 });
}

#[test]
fn malformed_json_is_an_error_that_echoes_nothing() {
    let err = analyze_plan(br#"{"resource_changes": [{"address": 1, "change": "hunter2"}]}"#)
        .expect_err("malformed");
    assert!(matches!(err, PlanError::Malformed { .. }));
    assert!(!err.to_string().contains("hunter2"));
    assert!(analyze_plan(b"[]").is_err());
}

#[test]
fn a_document_without_changes_is_an_empty_plan() {
    let a = analyze_plan(b"{}").expect("ok");
    assert_eq!(a.hash, empty_hash());
}

// ---- never panics -------------------------------------------------------------------------------

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just("create".to_owned()),
            Just("delete".to_owned()),
            Just("no-op".to_owned()),
            Just("managed".to_owned()),
            ".{0,8}"
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("resource_changes".to_owned()),
                    Just("output_changes".to_owned()),
                    Just("address".to_owned()),
                    Just("change".to_owned()),
                    Just("actions".to_owned()),
                    Just("mode".to_owned()),
                    Just("importing".to_owned()),
                    Just("previous_address".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_actions() -> impl Strategy<Value = Vec<&'static str>> {
    prop_oneof![
        Just(vec!["no-op"]),
        Just(vec!["create"]),
        Just(vec!["read"]),
        Just(vec!["update"]),
        Just(vec!["delete"]),
        Just(vec!["delete", "create"]),
        Just(vec!["create", "delete"]),
        Just(vec!["forget"]),
        Just(vec!["forget", "create"]),
        Just(vec!["create", "forget"]),
    ]
}

fn arb_plan() -> impl Strategy<Value = Vec<(String, Vec<&'static str>)>> {
    prop::collection::vec(
        ("[a-z]{1,3}\\.[a-z]{1,3}(\\[[0-9]\\])?", arb_actions()),
        0..30,
    )
}

proptest! {
    #[test]
    fn analysis_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = analyze_plan(&bytes);
    }

    #[test]
    fn analysis_never_panics_on_arbitrary_json(doc in arb_json()) {
        let _ = analyze_plan(doc.to_string().as_bytes());
        let _ = analyze_plan(json!({"resource_changes": [doc]}).to_string().as_bytes());
    }

    #[test]
    fn counts_hash_and_guard_hold_for_any_plan(changes in arb_plan()) {
        let rc: Vec<Value> = changes.iter().map(|(address, actions)| {
            json!({"address": address, "mode": "managed", "change": {"actions": actions}})
        }).collect();
        let a = analyze_plan(json!({"resource_changes": rc}).to_string().as_bytes()).expect("valid");
        let mut reversed = rc.clone();
        reversed.reverse();
        let b = analyze_plan(json!({"resource_changes": reversed}).to_string().as_bytes()).expect("valid");
        prop_assert_eq!(&a.hash, &b.hash);
        let deletes = changes.iter().any(|(_, acts)| acts.contains(&"delete"));
        prop_assert_eq!(a.destructive, deletes);
        let replaced = changes.iter().filter(|(_, acts)| acts.len() == 2 && acts.contains(&"delete")).count() as u64;
        let created = changes.iter().filter(|(_, acts)| acts.contains(&"create")).count() as u64;
        prop_assert_eq!(a.add, created);
        let removed = changes.iter().filter(|(_, acts)| acts == &vec!["delete"]).count() as u64;
        prop_assert_eq!(a.destroy, removed + replaced);
        prop_assert!(a.resources().0.len() <= 50);
        prop_assert!(a.drift_summary().resources.len() <= 20);
    }
}
