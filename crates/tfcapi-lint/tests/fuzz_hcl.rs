//! Fuzzing (issue 19): module HCL as `tfcapi-lint module` reads it (Module Contract; the
//! `module/*` checks). The noop modules of every role, mutated line by line, token by token and
//! byte by byte; random HCL-shaped text; deep nesting; random JSON text as `.tf.json`. Every input
//! is linted for every role and gives findings, never a panic; a file that does not parse is
//! reported as `module/parse` naming the file.
//!
//! `CAPTF_FUZZ_CASES` sets the cases per property (default 256; `make fuzz` runs 1 000 000).

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

#[path = "../../contract/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use fuzz_support::{any_json, config, mutate_bytes};
use proptest::prelude::*;
use tfcapi_lint::module::{SourceFile, json, lint_sources};
use tfcapi_lint::role::Role;

/// Every file of the three noop modules.
const SEEDS: &[&str] = &[
    include_str!("../../../modules/noop/cluster/main.tf"),
    include_str!("../../../modules/noop/cluster/outputs.tf"),
    include_str!("../../../modules/noop/cluster/variables.tf"),
    include_str!("../../../modules/noop/cluster/versions.tf"),
    include_str!("../../../modules/noop/machine/main.tf"),
    include_str!("../../../modules/noop/machine/outputs.tf"),
    include_str!("../../../modules/noop/machine/variables.tf"),
    include_str!("../../../modules/noop/machine/versions.tf"),
    include_str!("../../../modules/noop/machinepool/main.tf"),
    include_str!("../../../modules/noop/machinepool/outputs.tf"),
    include_str!("../../../modules/noop/machinepool/variables.tf"),
    include_str!("../../../modules/noop/machinepool/versions.tf"),
];

/// Tokens that change HCL's structure when dropped in.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "=",
    "\"",
    "${",
    "%{",
    "}",
    "<<EOT\n",
    "\nEOT\n",
    "<<-EOT\n",
    "?",
    ":",
    ",",
    ".",
    "*",
    "...",
    "=>",
    "#",
    "//",
    "/*",
    "*/",
    "\n",
    "\\",
    "null",
    "true",
    "-1",
    "1e999",
    "variable",
    "output",
    "resource",
    "locals",
    "module",
    "moved",
    "import",
    "removed",
    "check",
    "terraform",
    "provider",
    "sensitive",
    "nullable",
    "default",
    "type",
    "validation",
    "value",
    "for",
    "in",
    "if",
    "endif",
    "endfor",
    "var.",
    "local.",
    "each.key",
    "count.index",
    "object({",
    "map(",
    "list(",
    "optional(",
    "any",
    "string",
    "number",
    "bool",
    "try(",
    "jsonencode(",
    "é",
    "😀",
    "\u{0}",
    "\r",
];

fn source(name: &str, text: String) -> SourceFile {
    SourceFile {
        name: name.to_owned(),
        display: name.to_owned(),
        text,
    }
}

/// Lints `files` for every role; every finding names a check and says something.
fn lint_all(files: &[SourceFile]) -> Result<(), TestCaseError> {
    for role in Role::ALL {
        let (_, findings) = lint_sources(files.to_vec(), role, "m");
        for f in &findings {
            prop_assert!(!f.id.is_empty() && !f.message.is_empty(), "{f:?}");
        }
    }
    Ok(())
}

fn seed() -> impl Strategy<Value = &'static str> {
    prop::sample::select(SEEDS)
}

/// A seed with lines dropped, duplicated or swapped.
fn line_mutation() -> impl Strategy<Value = String> {
    (
        seed(),
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                any::<prop::sample::Index>(),
                0u8..3,
            ),
            1..6,
        ),
    )
        .prop_map(|(text, edits)| {
            let mut lines: Vec<&str> = text.lines().collect();
            for (a, b, op) in edits {
                if lines.is_empty() {
                    break;
                }
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                match op {
                    0 => {
                        lines.remove(a);
                    }
                    1 => lines.insert(b, lines[a]),
                    _ => lines.swap(a, b),
                }
            }
            lines.join("\n")
        })
}

/// A seed with HCL tokens inserted and stretches cut out at random places (on character
/// boundaries).
fn token_mutation() -> impl Strategy<Value = String> {
    (
        seed(),
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop::sample::select(TOKENS),
                0usize..12,
            ),
            1..6,
        ),
    )
        .prop_map(|(text, edits)| {
            let mut text = text.to_owned();
            for (at, token, cut) in edits {
                let bounds: Vec<usize> = text
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain([text.len()])
                    .collect();
                let start = bounds[at.index(bounds.len())];
                let end = bounds
                    .iter()
                    .copied()
                    .find(|&i| i >= start + cut)
                    .unwrap_or(text.len());
                text.replace_range(start..end, token);
            }
            text
        })
}

/// Random text made of HCL tokens and names.
fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(TOKENS).prop_map(str::to_owned),
            1 => "[a-z_]{1,8}",
            1 => " {1,3}",
        ],
        0..80,
    )
    .prop_map(|parts| parts.concat())
}

fn any_hcl() -> impl Strategy<Value = String> {
    prop_oneof![
        line_mutation(),
        token_mutation(),
        token_soup(),
        seed()
            .prop_flat_map(|s| mutate_bytes(s.as_bytes().to_vec()))
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ".{0,120}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_modules_give_findings_not_panics(
        main in any_hcl(),
        others in prop::collection::vec(seed(), 0..3),
    ) {
        let mut files = vec![source("main.tf", main)];
        files.extend(others.into_iter().enumerate().map(|(i, t)| source(&format!("f{i}.tf"), t.to_owned())));
        lint_all(&files)?;
    }

    #[test]
    fn random_json_as_tf_json_gives_findings_not_panics(
        doc in prop_oneof![
            any_json().prop_map(|v| v.to_string()),
            any_json().prop_flat_map(|v| mutate_bytes(v.to_string().into_bytes()))
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ],
    ) {
        let _ = json::parse(&doc);
        lint_all(&[source("main.tf.json", doc)])?;
    }
}

/// Nesting far deeper than any module: reported, not a stack overflow.
#[test]
fn deep_nesting_is_a_finding_not_a_crash() {
    for depth in [1_000, 100_000] {
        for (open, close) in [("[", "]"), ("{", "}"), ("(", ")"), ("\"${", "}\"")] {
            let text = format!(
                "locals {{\n  x = {}1{}\n}}\n",
                open.repeat(depth),
                close.repeat(depth)
            );
            let (_, findings) = lint_sources(vec![source("main.tf", text)], Role::Cluster, "m");
            assert!(!findings.is_empty(), "{open}: depth {depth}");
        }
        let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        assert!(json::parse(&text).is_err(), "JSON depth {depth}");
    }
}
