//! Contract outputs the module does not declare (Module Contract "Null semantics": an absent
//! output is `OutputsValid=False/OutputsMissing`, with no retry until the module changes).
//!
//! The generated root re-exports every contract output of its role as `module.role.<name>`. A
//! reference to an output the module does not declare fails the plan, and a declared output left
//! null is dropped from the state just like an absent one, so the state alone cannot tell the two
//! apart. Before the runtime runs, the runner therefore reads the names of the `output` blocks in
//! the module's top-level configuration files (`.tf`, `.tofu`, `.tf.json`, `.tofu.json`), drops
//! from the root the re-exports of the others and lists their names in the root output
//! [`UNDECLARED_OUTPUTS`], which the manager reads back from the state. When a file cannot be
//! read or parsed, the root stays as rendered and the runtime reports the module's own error.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use contract::outputs::UNDECLARED_OUTPUTS;
use contract::render::MODULE_NAME;
use hcl::edit::structure::{BlockLabel, Structure};
use serde_json::{Value, json};

/// The names of the `output` blocks the module at `module` declares; `None` when its directory
/// or one of its configuration files cannot be read or parsed.
pub fn declared_outputs(module: &Path) -> Option<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for entry in fs::read_dir(module).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_configuration_file(&name) || !entry.file_type().ok()?.is_file() {
            continue;
        }
        let text = fs::read_to_string(entry.path()).ok()?;
        if Path::new(&name)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            json_outputs(&text, &mut names)?;
        } else {
            hcl_outputs(&text, &mut names)?;
        }
    }
    Some(names)
}

/// Whether the runtime loads a file of this name from a module directory: the four suffixes, and
/// not the names it ignores (leading `.` or `#`, trailing `~`).
fn is_configuration_file(name: &str) -> bool {
    let suffix = [".tf", ".tofu", ".tf.json", ".tofu.json"]
        .iter()
        .any(|s| name.ends_with(s));
    suffix && !name.starts_with('.') && !name.starts_with('#') && !name.ends_with('~')
}

fn hcl_outputs(text: &str, names: &mut BTreeSet<String>) -> Option<()> {
    // The parser has panicked on some malformed input; a panic is one more unreadable file.
    let body = std::panic::catch_unwind(|| hcl::edit::parser::parse_body(text))
        .ok()?
        .ok()?;
    for structure in &body {
        if let Structure::Block(block) = structure
            && block.ident.as_str() == "output"
            && let Some(label) = block.labels.first()
        {
            names.insert(BlockLabel::as_str(label).to_owned());
        }
    }
    Some(())
}

/// The JSON syntax writes `"output": {"name": {...}}`, or a list of such objects.
fn json_outputs(text: &str, names: &mut BTreeSet<String>) -> Option<()> {
    let doc: Value = serde_json::from_str(text).ok()?;
    let blocks = match doc.as_object()?.get("output") {
        None => return Some(()),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one) => vec![one],
    };
    for block in blocks {
        names.extend(block.as_object()?.keys().cloned());
    }
    Some(())
}

/// Drops from the root document `main` each re-export of a module output that `declared` does
/// not hold, lists the dropped names in [`UNDECLARED_OUTPUTS`], and returns them in order.
pub fn drop_undeclared(main: &mut Value, declared: &BTreeSet<String>) -> Vec<String> {
    let Some(outputs) = main.get_mut("output").and_then(Value::as_object_mut) else {
        return Vec::new();
    };
    let prefix = format!("${{module.{MODULE_NAME}.");
    let undeclared: Vec<String> = outputs
        .iter()
        .filter_map(|(name, body)| {
            let value = body.get("value").and_then(Value::as_str)?;
            let referenced = value.strip_prefix(&prefix)?.strip_suffix('}')?;
            (referenced == name && !declared.contains(name)).then(|| name.clone())
        })
        .collect();
    if undeclared.is_empty() {
        return undeclared;
    }
    for name in &undeclared {
        outputs.remove(name);
    }
    outputs.insert(
        UNDECLARED_OUTPUTS.to_owned(),
        json!({ "value": undeclared }),
    );
    undeclared
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_configuration_file_of_the_module_directory_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
        write(
            "outputs.tf",
            "output \"provider_id\" {\n  value = \"x\" # output \"not_this\" {\n}\n\
             locals {\n  text = <<EOT\noutput \"nor_this\" {\nEOT\n}\n",
        );
        write("more.tofu", "output \"health\" {\n  value = null\n}\n");
        write(
            "extra.tf.json",
            r#"{"output": {"addresses": {"value": []}}}"#,
        );
        write(
            "listed.tofu.json",
            r#"{"output": [{"failure_domain": {"value": null}}]}"#,
        );
        write(".hidden.tf", "output \"hidden\" {\n  value = 1\n}\n");
        write("backup.tf~", "output \"backup\" {\n  value = 1\n}\n");
        write("README.md", "output \"readme\" {");
        fs::create_dir(dir.path().join("modules")).unwrap();
        write(
            "modules/inner.tf",
            "output \"interruptible\" {\n  value = 1\n}\n",
        );
        assert_eq!(
            declared_outputs(dir.path()),
            Some(names(&[
                "addresses",
                "failure_domain",
                "health",
                "provider_id"
            ]))
        );
    }

    #[test]
    fn a_file_that_cannot_be_parsed_leaves_the_answer_open() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("main.tf"), "output \"x\" {\n").unwrap();
        assert_eq!(declared_outputs(dir.path()), None);
        fs::write(dir.path().join("main.tf"), "").unwrap();
        fs::write(dir.path().join("x.tf.json"), "[1]").unwrap();
        assert_eq!(declared_outputs(dir.path()), None);
        assert_eq!(declared_outputs(&dir.path().join("absent")), None);
    }

    fn root() -> Value {
        json!({
            "module": {"role": {"source": "../../module"}},
            "output": {
                "provider_id": {"value": "${module.role.provider_id}", "sensitive": true},
                "health": {"value": "${module.role.health}", "sensitive": true},
            }
        })
    }

    #[test]
    fn the_re_exports_of_undeclared_outputs_are_dropped_and_listed() {
        let mut main = root();
        let dropped = drop_undeclared(&mut main, &names(&["health", "other"]));
        assert_eq!(dropped, vec!["provider_id".to_owned()]);
        assert_eq!(
            main["output"],
            json!({
                "health": {"value": "${module.role.health}", "sensitive": true},
                UNDECLARED_OUTPUTS: {"value": ["provider_id"]},
            })
        );
    }

    #[test]
    fn a_module_declaring_every_output_keeps_the_rendered_root() {
        let mut main = root();
        assert!(drop_undeclared(&mut main, &names(&["health", "provider_id"])).is_empty());
        assert_eq!(main, root());
        let mut restore = json!({"terraform": {"backend": {"kubernetes": {}}}});
        assert!(drop_undeclared(&mut restore, &BTreeSet::new()).is_empty());
    }
}
