//! The book's Conditions and Events reference pages (docs/src/reference/conditions.md and
//! events.md) against `crate::constants` (INTERFACE-FACTS §1 "Conditions", §2 "Events"), both
//! ways: every condition type, condition reason and event reason the code defines is on its page,
//! and every one a page names is defined in the code.
//!
//! The code's names are read from the source of `constants.rs`, so a constant added there
//! without its page fails here.

use std::collections::{BTreeMap, BTreeSet};
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

/// Every text in backticks in `text`, as written.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// One rule grant: (API group, resource or non-resource URL, verb).
type Grant = (String, String, String);

/// The rules of every Role and ClusterRole the manifests define, by name. A resource limited to
/// `resourceNames` is spelled `resource[name]`; a non-resource URL has the group `(non-resource)`.
fn manifest_roles() -> BTreeMap<String, BTreeSet<Grant>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("rbac"))
        .expect("config/rbac")
        .map(|e| e.expect("config/rbac entry").path())
        .collect();
    files.push(root.join("webhook/role.yaml"));
    let mut roles = BTreeMap::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(file).expect("manifest");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
        {
            let strings = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|s| s.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let mut grants = BTreeSet::new();
            for rule in doc["rules"].as_array().expect("rules") {
                let names = strings(&rule["resourceNames"]);
                let targets: Vec<(String, String)> = if rule["nonResourceURLs"].is_array() {
                    strings(&rule["nonResourceURLs"])
                        .into_iter()
                        .map(|u| ("(non-resource)".to_owned(), u))
                        .collect()
                } else {
                    let mut t = Vec::new();
                    for g in strings(&rule["apiGroups"]) {
                        for r in strings(&rule["resources"]) {
                            let r = if names.is_empty() {
                                r
                            } else {
                                format!("{r}[{}]", names.join(","))
                            };
                            t.push((g.clone(), r));
                        }
                    }
                    t
                };
                for (g, r) in targets {
                    for v in strings(&rule["verbs"]) {
                        grants.insert((g.clone(), r.clone(), v));
                    }
                }
            }
            let name = doc["metadata"]["name"].as_str().expect("name").to_owned();
            roles.insert(name, grants);
        }
    }
    roles
}

/// The rules the RBAC page's tables give each role (the last name in backticks of a section's
/// heading), read as `manifest_roles` spells them.
fn page_roles(page: &str) -> BTreeMap<String, BTreeSet<Grant>> {
    let mut roles = BTreeMap::new();
    for (heading, body) in sections(page) {
        let Some(name) = backticked(heading).last().map(|s| (*s).to_owned()) else {
            continue;
        };
        let mut grants = BTreeSet::new();
        for row in body
            .lines()
            .filter(|l| l.starts_with("| `") || l.starts_with("| ("))
        {
            let c = cells(row);
            let group = match c[0] {
                "(core)" => String::new(),
                "(non-resource)" => "(non-resource)".to_owned(),
                g => g.trim_matches('`').to_owned(),
            };
            let resources: Vec<String> = match c[1].split_once(" (") {
                Some((r, only)) => vec![format!(
                    "{}[{}]",
                    r.trim_matches('`'),
                    backticked(only).join(",")
                )],
                None => backticked(c[1]).into_iter().map(str::to_owned).collect(),
            };
            for r in &resources {
                for v in backticked(c[2]) {
                    grants.insert((group.clone(), r.clone(), v.to_owned()));
                }
            }
        }
        assert!(
            !grants.is_empty(),
            "rbac.md: section {heading:?} has no rules"
        );
        roles.insert(name, grants);
    }
    roles
}

#[test]
fn the_rbac_page_gives_each_role_exactly_its_manifests_rules() {
    let manifests = manifest_roles();
    assert!(manifests.len() >= 5, "{:?}", manifests.keys());
    let book = page_roles(&page("rbac.md"));
    assert_eq!(
        manifests.keys().collect::<Vec<_>>(),
        book.keys().collect::<Vec<_>>(),
        "the roles of config/rbac and config/webhook/role.yaml, and the sections of rbac.md"
    );
    for (name, grants) in &manifests {
        let fmt = |s: &BTreeSet<Grant>| s.iter().map(|(g, r, v)| format!("{g}/{r}:{v}")).collect();
        assert_same(
            &format!("the rules of {name}"),
            &fmt(grants),
            &fmt(&book[name]),
        );
    }
}
