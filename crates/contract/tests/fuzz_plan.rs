//! Fuzzing (issue 19): plan analysis of `show -json` output (Plan Approval; INTERFACE-FACTS
//! "Plan JSON"). Random bytes, random JSON, plans built from random resource changes, the real
//! OpenTofu plans of `tests/fixtures/plans` with fields replaced or removed and with their bytes
//! mutated. A plan is analysed or refused with `PlanError`; an analysis keeps its own invariants
//! (changes sorted and never no-op, the hash's form, the caps on the resource lists).
//!
//! `CAPTF_FUZZ_CASES` sets the cases per property (default 256; `make fuzz` runs 1 000 000).

mod fuzz_support;

use contract::plan::{
    Action, MAX_DRIFT_RESOURCE_ENTRY, MAX_DRIFT_RESOURCES, MAX_PLAN_RESOURCE_ENTRY,
    MAX_PLAN_RESOURCES, PlanAnalysis, PlanError, analyze_plan,
};
use contract::result::{DriftDoc, PlanDoc};
use fuzz_support::{config, edited, edits, garbage, leaf, mutate_bytes};
use proptest::prelude::*;
use serde_json::{Value, json};

const FIXTURES: &[&[u8]] = &[
    include_bytes!("fixtures/plans/create.json"),
    include_bytes!("fixtures/plans/delete.json"),
    include_bytes!("fixtures/plans/move-and-forget.json"),
    include_bytes!("fixtures/plans/module-role.json"),
    include_bytes!("fixtures/plans/replace-create-first.json"),
    include_bytes!("fixtures/plans/deferred-read.json"),
];

/// Fields of a plan the analysis reads, and some it skips.
const PLAN_FIELDS: &[&str] = &[
    "/resource_changes",
    "/resource_changes/0",
    "/resource_changes/0/address",
    "/resource_changes/0/mode",
    "/resource_changes/0/previous_address",
    "/resource_changes/0/change",
    "/resource_changes/0/change/actions",
    "/resource_changes/0/change/importing",
    "/resource_changes/0/change/before",
    "/resource_changes/1/change/actions",
    "/resource_changes/1/address",
    "/output_changes",
    "/output_changes/id",
    "/output_changes/id/actions",
    "/resource_drift",
    "/planned_values",
    "/format_version",
];

const ACTIONS: &[&str] = &[
    "create", "delete", "update", "no-op", "read", "forget", "replace", "",
];

fn actions() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(prop::sample::select(ACTIONS), 0..3)
}

/// Addresses: short, long (past the entry caps), or with multi-byte characters at the cut.
fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_.\\[\\]\"0-9]{0,40}",
        ".{0,8}",
        (0usize..1500, "[a-zé😀]{1,2}").prop_map(|(n, tail)| format!("{}{tail}", "a".repeat(n))),
    ]
}

fn resource_change() -> impl Strategy<Value = Value> {
    (
        address(),
        prop::option::of(prop::sample::select(vec![
            "managed",
            "data",
            "ephemeral",
            "other",
        ])),
        prop::option::of(address()),
        actions(),
        prop::option::of(leaf()),
    )
        .prop_map(|(address, mode, previous, actions, importing)| {
            let mut change = json!({"actions": actions});
            if let Some(i) = importing {
                change["importing"] = i;
            }
            let mut rc = json!({"address": address, "change": change});
            if let Some(m) = mode {
                rc["mode"] = json!(m);
            }
            if let Some(p) = previous {
                rc["previous_address"] = json!(p);
            }
            rc
        })
}

fn built_plan() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(resource_change(), 0..80),
        prop::collection::btree_map("[a-z]{1,6}", actions(), 0..4),
    )
        .prop_map(|(changes, outputs)| {
            let outputs: serde_json::Map<String, Value> = outputs
                .into_iter()
                .map(|(k, a)| (k, json!({"actions": a})))
                .collect();
            serde_json::to_vec(&json!({
                "format_version": "1.2",
                "resource_changes": changes,
                "output_changes": outputs,
            }))
            .unwrap_or_default()
        })
}

fn fixture() -> impl Strategy<Value = &'static [u8]> {
    prop::sample::select(FIXTURES)
}

fn edited_fixture() -> impl Strategy<Value = Vec<u8>> {
    (fixture(), edits(PLAN_FIELDS)).prop_map(|(bytes, edits)| edited(bytes, edits))
}

fn any_plan() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        garbage(),
        built_plan(),
        edited_fixture(),
        fixture().prop_flat_map(|b| mutate_bytes(b.to_vec())),
    ]
}

/// What every analysis holds to, whatever plan it came from.
fn check_analysis(a: &PlanAnalysis) -> Result<(), TestCaseError> {
    prop_assert!(
        a.changes.windows(2).all(|w| w[0] <= w[1]),
        "changes unsorted"
    );
    prop_assert!(a.changes.iter().all(|c| c.action != Action::NoOp));
    prop_assert!(
        a.hash.starts_with("p1:") && a.hash.len() == 67,
        "{}",
        a.hash
    );
    prop_assert_eq!(a.has_changes(), !a.changes.is_empty());
    prop_assert_eq!(a.destructive, a.changes.iter().any(|c| c.action.deletes()));
    for (entries, truncated) in [a.resources(), a.destructive_resources()] {
        prop_assert!(entries.len() <= MAX_PLAN_RESOURCES);
        prop_assert!(!truncated || entries.len() == MAX_PLAN_RESOURCES);
        for e in &entries {
            prop_assert!(
                e.chars().count() <= MAX_PLAN_RESOURCE_ENTRY,
                "{} chars",
                e.chars().count()
            );
        }
    }
    let drift = a.drift_summary();
    prop_assert!(drift.resources.len() <= MAX_DRIFT_RESOURCES);
    prop_assert!(
        drift
            .resources
            .iter()
            .all(|r| r.chars().count() <= MAX_DRIFT_RESOURCE_ENTRY)
    );
    // The documents the runner builds from it.
    let plan = PlanDoc::from_analysis(a, false);
    prop_assert_eq!(&plan.hash, &a.hash);
    let _ = DriftDoc::from_analysis(a);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn plans_are_analysed_or_refused_clearly(plan in any_plan()) {
        match analyze_plan(&plan) {
            Ok(a) => check_analysis(&a)?,
            Err(e @ PlanError::Malformed { line, column }) => {
                // serde_json says column 0 for an end of input right after a newline.
                prop_assert!(line >= 1 || column == 0, "{e}");
                prop_assert!(!e.to_string().is_empty());
            }
            Err(e @ PlanError::UnknownActions { .. }) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn built_plans_count_each_change_once(plan in built_plan()) {
        if let Ok(a) = analyze_plan(&plan) {
            check_analysis(&a)?;
            let counted = a.changes.len() as u64;
            prop_assert!(a.add + a.change + a.destroy + a.forget <= 2 * counted + a.moved + a.import);
        }
    }
}
