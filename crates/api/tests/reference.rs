//! The book's Conditions and Events reference pages (docs/src/reference/conditions.md and
//! events.md) against `crate::constants` (INTERFACE-FACTS §1 "Conditions", §2 "Events"), both
//! ways: every condition type, condition reason and event reason the code defines is on its page,
//! and every one a page names is defined in the code.
//!
//! The code's names are read from the source of `constants.rs`, so a constant added there
//! without its page fails here.

use std::collections::BTreeSet;
use std::path::PathBuf;

const CONSTANTS: &str = include_str!("../src/constants.rs");

/// The body of `pub mod <name> {` in `text`, up to its closing brace at the same indentation.
fn module<'a>(text: &'a str, name: &str, indent: &str) -> &'a str {
    let open = format!("{indent}pub mod {name} {{\n");
    let start = text
        .find(&open)
        .unwrap_or_else(|| panic!("constants.rs has no `pub mod {name}`"))
        + open.len();
    let close = format!("\n{indent}}}");
    let end = text[start..]
        .find(&close)
        .unwrap_or_else(|| panic!("`pub mod {name}` is not closed"));
    &text[start..start + end]
}

/// The values of the `pub const NAME: &str = "Value";` items of a module body (nested modules
/// excluded), except `skip`.
fn str_consts(body: &str, skip: &[&str]) -> BTreeSet<String> {
    let own = body.split("    pub mod ").next().unwrap_or(body);
    own.lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(": &str = \"")?;
            let value = rest.strip_suffix("\";")?;
            (!skip.contains(&name)).then(|| value.to_owned())
        })
        .collect()
}

fn page(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/src/reference")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `## ` sections of a page: (heading, body).
fn sections(page: &str) -> Vec<(&str, &str)> {
    page.split("\n## ")
        .skip(1)
        .map(|s| s.split_once('\n').unwrap_or((s, "")))
        .collect()
}

/// The cells of a table row (`| a | b |`), trimmed.
fn cells(row: &str) -> Vec<&str> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// Every `Name` in backticks in `text`.
fn quoted(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_owned)
        .collect()
}

fn assert_same(what: &str, code: &BTreeSet<String>, book: &BTreeSet<String>) {
    let missing: Vec<_> = code.difference(book).collect();
    let unknown: Vec<_> = book.difference(code).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{what}:\nin the code, not in the book: {missing:?}\nin the book, not in the code: {unknown:?}"
    );
}

const NOT_SET: &str = "Defined, not set yet";
const NOT_EMITTED: &str = "Defined, not emitted yet";

#[test]
fn the_conditions_page_names_exactly_the_codes_condition_types_and_reasons() {
    let types = str_consts(module(CONSTANTS, "conditions", ""), &[]);
    let reasons = str_consts(module(CONSTANTS, "reasons", ""), &[]);
    assert!(
        types.len() >= 18 && reasons.len() >= 90,
        "{types:?} {reasons:?}"
    );

    let page = page("conditions.md");
    let (mut book_types, mut set, mut not_set) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (heading, body) in sections(&page) {
        let rows = body.lines().filter(|l| l.starts_with("| "));
        if heading == NOT_SET {
            for row in rows.skip(2) {
                let c = cells(row);
                book_types.extend(quoted(c[0]));
                not_set.extend(quoted(c[1]));
            }
            continue;
        }
        book_types.insert(heading.to_owned());
        for row in rows {
            let c = cells(row);
            if ["True", "False", "Unknown"].contains(&c[0]) {
                let reason = quoted(c[1]);
                assert_eq!(reason.len(), 1, "one reason per row: {row}");
                set.extend(reason);
            }
        }
    }
    assert_same("condition types", &types, &book_types);
    let both: Vec<_> = set.intersection(&not_set).collect();
    assert!(both.is_empty(), "listed as set and as not set: {both:?}");
    assert_same(
        "condition reasons",
        &reasons,
        &set.union(&not_set).cloned().collect(),
    );
}

#[test]
fn the_events_page_names_exactly_the_codes_event_reasons() {
    let events = module(CONSTANTS, "events", "");
    let manager = str_consts(events, &[]);
    let runner = str_consts(module(events, "runner", "    "), &["RUNNER_CONTROLLER"]);
    assert!(
        manager.len() >= 50 && runner.len() == 7,
        "{manager:?} {runner:?}"
    );

    let page = page("events.md");
    let (mut book_manager, mut book_runner, mut not_emitted) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (heading, body) in sections(&page) {
        let first_cells = body
            .lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|row| quoted(cells(row)[0]));
        match heading {
            "Manager events" => book_manager.extend(first_cells),
            "Runner events" => book_runner.extend(first_cells),
            NOT_EMITTED => not_emitted.extend(quoted(body)),
            other => panic!("events.md: unexpected section {other:?}"),
        }
    }
    let both: Vec<_> = book_manager.intersection(&not_emitted).collect();
    assert!(both.is_empty(), "listed as emitted and as not: {both:?}");
    assert_same(
        "manager event reasons",
        &manager,
        &book_manager.union(&not_emitted).cloned().collect(),
    );
    assert_same("runner event reasons", &runner, &book_runner);
}
