//! The CLI reference page lists exactly the checks of `checks::CHECKS`: its table is generated
//! from them. `UPDATE_DOCS=1 cargo test -p tfcapi-lint --test docs` rewrites it.

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

use std::path::Path;
use tfcapi_lint::checks::{CHECKS, markdown_table};

const BEGIN: &str = "<!-- checks:begin";
const END: &str = "<!-- checks:end -->";

#[test]
fn cli_reference_lists_every_check() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/tfcapi-lint-cli.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let begin = page.find(BEGIN).expect("begin marker");
    let body_start = begin + page[begin..].find('\n').unwrap() + 1;
    let end = page.find(END).expect("end marker");
    let expected = markdown_table();
    if page[body_start..end] != expected {
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let updated = format!("{}{}{}", &page[..body_start], expected, &page[end..]);
            std::fs::write(&path, &updated).unwrap();
            return;
        }
        panic!(
            "{} is out of date: run UPDATE_DOCS=1 cargo test -p tfcapi-lint --test docs",
            path.display()
        );
    }
    for check in CHECKS {
        assert!(
            page.contains(&format!("`{}`", check.id)),
            "{} missing",
            check.id
        );
    }
}
