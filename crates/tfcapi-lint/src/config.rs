//! The configuration file `.tfcapi-lint.hcl` (tfcapi-lint, "Configuration file"): a module's
//! role, strictness and allowed warnings written next to its code, so every run (by hand, in CI,
//! from the pre-commit hook) lints it the same way, as `.tflint.hcl` does for tflint.
//!
//! ```hcl
//! role          = "machine"
//! strict        = true
//! allow_warning = ["input/tags-unused"]
//! ```
//!
//! The command line adds to it: `--role` wins over `role`, `--strict` or `strict` makes a run
//! strict, and `--allow-warning` adds to `allow_warning`.

use std::path::Path;

use clap::ValueEnum;
use serde::Deserialize;

use crate::checks;
use crate::role::Role;

/// The file `tfcapi-lint module` reads from the module directory when `--config` is not given.
pub const FILE_NAME: &str = ".tfcapi-lint.hcl";

/// A configuration file's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The role the module implements.
    pub role: Option<Role>,
    /// Whether warnings fail a run.
    pub strict: bool,
    /// Checks whose warnings are reported as info.
    pub allow_warning: Vec<String>,
}

/// The file as written: any other attribute or block is an error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    role: Option<String>,
    strict: Option<bool>,
    allow_warning: Option<Vec<String>>,
}

/// Reads the configuration file at `path`; `label` names it in errors. An error says which
/// attribute breaks which rule.
pub fn load(path: &Path, label: &str) -> Result<Config, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{label}: cannot read: {e}"))?;
    parse(&text, label)
}

/// The configuration a module directory's own `.tfcapi-lint.hcl` holds, or `None` when it has
/// none.
pub fn for_module_dir(dir: &Path, label: &str) -> Result<Option<Config>, String> {
    let path = dir.join(FILE_NAME);
    if !path.is_file() {
        return Ok(None);
    }
    load(&path, &format!("{label}/{FILE_NAME}")).map(Some)
}

/// Parses a configuration file's text.
pub fn parse(text: &str, label: &str) -> Result<Config, String> {
    let file: File = hcl::from_str(text).map_err(|e| format!("{label}: {e}"))?;
    let role = match file.role.as_deref() {
        None => None,
        Some(r) => Some(Role::from_str(r, false).map_err(|_| {
            format!("{label}: role = {r:?} is not a role: write cluster, machine or machinepool")
        })?),
    };
    let allow_warning = file.allow_warning.unwrap_or_default();
    if let Some(id) = allow_warning.iter().find(|id| !checks::is_known(id)) {
        return Err(format!(
            "{label}: allow_warning: `{id}` is not a check ID (see tfcapi-lint's CLI reference for the list)"
        ));
    }
    Ok(Config {
        role,
        strict: file.strict.unwrap_or(false),
        allow_warning,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_setting_is_read() {
        let c = parse(
            "# the machine module\nrole = \"machine\"\nstrict = true\nallow_warning = [\"input/tags-unused\"]\n",
            FILE_NAME,
        )
        .unwrap();
        assert_eq!(
            c,
            Config {
                role: Some(Role::Machine),
                strict: true,
                allow_warning: vec!["input/tags-unused".into()],
            }
        );
        assert_eq!(parse("", FILE_NAME).unwrap(), Config::default());
    }

    #[test]
    fn a_wrong_setting_names_the_file_and_the_rule() {
        for (text, want) in [
            ("role = \"worker\"", "role = \"worker\" is not a role"),
            (
                "allow_warning = [\"input/nope\"]",
                "allow_warning: `input/nope` is not a check ID",
            ),
            ("strict = \"yes\"", ".tfcapi-lint.hcl: "),
            ("format = \"sarif\"", "unknown field `format`"),
            (
                "rule \"input/type\" {\n  enabled = false\n}",
                "unknown field `rule`",
            ),
            ("role = ", ".tfcapi-lint.hcl: "),
        ] {
            let err = parse(text, FILE_NAME).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(err.starts_with(".tfcapi-lint.hcl: "), "{err}");
        }
    }

    #[test]
    fn a_directory_without_the_file_has_no_configuration() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(for_module_dir(dir.path(), "m").unwrap(), None);
        std::fs::write(dir.path().join(FILE_NAME), "role = \"cluster\"\n").unwrap();
        assert_eq!(
            for_module_dir(dir.path(), "m").unwrap().unwrap().role,
            Some(Role::Cluster)
        );
    }
}
