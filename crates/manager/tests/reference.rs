//! The book's manager reference (docs/src/reference/manager.md, INTERFACE-FACTS §4 "Manager
//! flags") against the binary: its flags table names exactly the flags `manager --help` lists.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The `--flags` of a text, those in backticks only when `quoted`.
fn flags_in(text: &str, quoted: bool) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let before = text[..i].chars().next_back();
        if quoted != (before == Some('`')) || before.is_some_and(char::is_alphanumeric) {
            continue;
        }
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if !name.is_empty() && (!quoted || text[i + 2 + name.len()..].starts_with('`')) {
            flags.insert(format!("--{name}"));
        }
    }
    flags
}

#[test]
fn the_flags_table_names_exactly_the_binarys_flags() {
    let help = Command::new(env!("CARGO_BIN_EXE_manager"))
        .arg("--help")
        .output()
        .expect("running manager --help");
    assert!(help.status.success(), "manager --help failed");
    let mut binary = flags_in(&String::from_utf8_lossy(&help.stdout), false);
    assert!(binary.remove("--help") && binary.remove("--version"));
    assert!(binary.contains("--diagnostics-address"), "{binary:?}");

    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/manager.md");
    let page = std::fs::read_to_string(&path).expect("docs/src/reference/manager.md");
    // The flags table: the first column of the Flags section's rows.
    let section = page
        .split("\n## Flags\n")
        .nth(1)
        .expect("docs/src/reference/manager.md has a Flags section");
    let table: String = section
        .split("\n## ")
        .next()
        .unwrap_or(section)
        .lines()
        .filter(|l| l.starts_with("| `-"))
        .map(|l| l.split('|').nth(1).unwrap_or_default())
        .collect();
    let documented = flags_in(&table, true);
    let missing: Vec<_> = binary.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&binary).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/src/reference/manager.md's flags table differs from `manager --help`:\n\
         in the binary, not documented: {missing:?}\ndocumented, not in the binary: {unknown:?}"
    );
}
