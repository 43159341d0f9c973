//! The configuration file `.tfcapi-lint.hcl` (tfcapi-lint, "Configuration file"): a module's
//! role, runtime, strictness and allowed warnings written next to its code, so every run (by
//! hand, in CI, from the pre-commit hook) lints it the same way, as `.tflint.hcl` does for tflint.
//!
//! ```hcl
//! role          = "machine"
//! runtime       = "terraform"
//! strict        = true
//! allow_warning = ["input/tags-unused"]
//! ```
//!
//! A file at the repository root can instead map every module of the repository (tfcapi-lint,
//! "A repository's modules"): one `module "PATH"` block per module directory with that module's
//! settings, the top-level `runtime`, `strict` and `allow_warning` as every block's defaults, and
//! `skip`, folders that hold no module to lint (examples, test fixtures, vendored code):
//!
//! ```hcl
//! strict = true
//! skip   = ["examples", "test/fixtures"]
//!
//! module "modules/cluster" {
//!   role = "cluster"
//! }
//! module "modules/machine" {
//!   role          = "machine"
//!   runtime       = "terraform"
//!   allow_warning = ["input/tags-unused"]
//! }
//! ```
//!
//! The command line adds to it: `--role` and `--runtime` win over the file, `--strict` or
//! `strict` makes a run strict, and `--allow-warning` adds to `allow_warning`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use clap::ValueEnum;
use serde::Deserialize;

use crate::checks;
use crate::module::Runtime;
use crate::role::Role;

/// The file `tfcapi-lint module` reads from the module directory (or, for a repository's map,
/// from a directory above it) when `--config` is not given.
pub const FILE_NAME: &str = ".tfcapi-lint.hcl";

/// The settings a module is linted with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The role the module implements.
    pub role: Option<Role>,
    /// The runtime it is linted for.
    pub runtime: Option<Runtime>,
    /// Whether warnings fail a run.
    pub strict: bool,
    /// Checks whose warnings are reported as info.
    pub allow_warning: Vec<String>,
}

/// A whole configuration file: the settings at its top level, its `module` blocks (a
/// repository's map: module directory relative to the file → settings, the top level's merged
/// in) and its `skip` folders (relative to the file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigFile {
    /// The top-level settings: the module's own (a module's file), or every block's defaults.
    pub settings: Config,
    /// The modules a repository's file maps, by normalized relative path.
    pub modules: BTreeMap<String, Config>,
    /// Folders that hold no module to lint, normalized relative paths.
    pub skip: Vec<String>,
}

impl ConfigFile {
    /// Whether the file maps modules (has `module` blocks) rather than being one module's.
    pub fn is_map(&self) -> bool {
        !self.modules.is_empty()
    }

    /// The settings of the module at `rel` (normalized, relative to the file), if mapped.
    pub fn module(&self, rel: &str) -> Option<&Config> {
        self.modules.get(rel)
    }

    /// The skip folder that holds `rel` (normalized, relative to the file), if any.
    pub fn skipped_by(&self, rel: &str) -> Option<&str> {
        self.skip
            .iter()
            .find(|s| within(rel, s))
            .map(String::as_str)
    }

    /// The mapped module that holds `rel` (the longest module path at or above it).
    pub fn module_holding(&self, rel: &str) -> Option<&str> {
        self.modules
            .keys()
            .filter(|m| within(rel, m))
            .max_by_key(|m| m.len())
            .map(String::as_str)
    }
}

/// Whether the normalized relative path `path` is `dir` or inside it (`.` holds everything).
pub fn within(path: &str, dir: &str) -> bool {
    dir == "."
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The settings as written, at the top level or in a `module` block.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    role: Option<String>,
    runtime: Option<String>,
    strict: Option<bool>,
    allow_warning: Option<Vec<String>>,
}

/// The file as written: any other attribute or block is an error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    role: Option<String>,
    runtime: Option<String>,
    strict: Option<bool>,
    allow_warning: Option<Vec<String>>,
    skip: Option<Vec<String>>,
    module: Option<BTreeMap<String, Settings>>,
}

/// Reads the configuration file at `path`; `label` names it in errors. An error says which
/// attribute breaks which rule.
pub fn load(path: &Path, label: &str) -> Result<ConfigFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{label}: cannot read: {e}"))?;
    parse(&text, label)
}

/// Parses a configuration file's text.
pub fn parse(text: &str, label: &str) -> Result<ConfigFile, String> {
    let file: File = hcl::from_str(text).map_err(|e| format!("{label}: {e}"))?;
    let top = settings(
        Settings {
            role: file.role,
            runtime: file.runtime,
            strict: file.strict,
            allow_warning: file.allow_warning,
        },
        label,
    )?;
    let skip = file
        .skip
        .unwrap_or_default()
        .iter()
        .map(|s| relative(s).map_err(|why| format!("{label}: skip: {s:?} {why}")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut modules = BTreeMap::new();
    for (path, block) in file.module.unwrap_or_default() {
        let at = format!("{label}: module {path:?}");
        let rel = relative(&path).map_err(|why| format!("{at}: the path {why}"))?;
        let own = settings(block, &at)?;
        if let Some(folder) = skip.iter().find(|s| within(&rel, s)) {
            return Err(format!(
                "{at}: the module is inside skip folder {folder:?}: remove one of the two"
            ));
        }
        let merged = Config {
            role: own.role,
            runtime: own.runtime.or(top.runtime),
            strict: own.strict || top.strict,
            allow_warning: top
                .allow_warning
                .iter()
                .chain(&own.allow_warning)
                .cloned()
                .collect(),
        };
        if modules.insert(rel.clone(), merged).is_some() {
            return Err(format!("{at}: {rel:?} is mapped twice"));
        }
    }
    if !modules.is_empty()
        && let Some(role) = top.role
    {
        return Err(format!(
            "{label}: role = {:?} at the top level of a file with module blocks: set role in each module block",
            role.as_str()
        ));
    }
    Ok(ConfigFile {
        settings: top,
        modules,
        skip,
    })
}

/// Checks and reads one set of settings; `at` names where they are written.
fn settings(s: Settings, at: &str) -> Result<Config, String> {
    let role = match s.role.as_deref() {
        None => None,
        Some(r) => Some(Role::from_str(r, false).map_err(|_| {
            format!("{at}: role = {r:?} is not a role: write cluster, machine or machinepool")
        })?),
    };
    let runtime = match s.runtime.as_deref() {
        None => None,
        Some("tofu") => Some(Runtime::Tofu),
        Some("terraform") => Some(Runtime::Terraform),
        Some(r) => {
            return Err(format!(
                "{at}: runtime = {r:?} is not a runtime: write tofu or terraform"
            ));
        }
    };
    let allow_warning = s.allow_warning.unwrap_or_default();
    if let Some(id) = allow_warning.iter().find(|id| !checks::is_known(id)) {
        return Err(format!(
            "{at}: allow_warning: `{id}` is not a check ID (see tfcapi-lint's CLI reference for the list)"
        ));
    }
    Ok(Config {
        role,
        runtime,
        strict: s.strict.unwrap_or(false),
        allow_warning,
    })
}

/// A path as the file writes it, normalized (`./a/b/` → `a/b`, `` or `./` → `.`); an absolute
/// path or one that leaves the file's directory is refused (the reason completes "the path …").
pub fn relative(path: &str) -> Result<String, String> {
    let mut parts = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err("leaves the file's directory (..): write it from there".to_owned());
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err("is absolute: write it relative to the file's directory".to_owned());
            }
        }
    }
    Ok(if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    })
}

/// Where a module's settings came from, and what they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The settings.
    pub config: Config,
    /// The file, and for a map the module block, as errors name it.
    pub source: String,
}

/// The settings of the module in `dir` (`label` names it): its own `.tfcapi-lint.hcl`, else the
/// `module` block for it in the nearest file with module blocks in a directory above it, up to
/// the repository root (the nearest directory holding `.git`). `None` when neither has any.
pub fn for_module_dir(dir: &Path, label: &str) -> Result<Option<Found>, String> {
    let own = dir.join(FILE_NAME);
    if own.is_file() {
        let source = format!("{}/{FILE_NAME}", label.trim_end_matches('/'));
        let file = load(&own, &source)?;
        if !file.is_map() {
            return Ok(Some(Found {
                config: file.settings,
                source,
            }));
        }
        return Ok(file.module(".").map(|c| Found {
            config: c.clone(),
            source: format!("module \".\" of {source}"),
        }));
    }
    let Ok(abs) = std::fs::canonicalize(dir) else {
        return Ok(None);
    };
    for above in abs.ancestors().skip(1) {
        let path = above.join(FILE_NAME);
        if path.is_file() {
            let file = load(&path, &path.display().to_string())?;
            if file.is_map() {
                return Ok(in_map(&file, &path, &abs));
            }
        }
        if above.join(".git").exists() {
            break;
        }
    }
    Ok(None)
}

/// The block of `file` (read from `path`) for the module directory `abs`, if it maps it.
pub fn in_map(file: &ConfigFile, path: &Path, abs: &Path) -> Option<Found> {
    let base = path.parent()?;
    let rel = relative_to(abs, base)?;
    file.module(&rel).map(|c| Found {
        config: c.clone(),
        source: format!("module {rel:?} of {}", path.display()),
    })
}

/// `abs` relative to `base`, normalized; `None` when it is not inside it.
pub fn relative_to(abs: &Path, base: &Path) -> Option<String> {
    let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    let rest: PathBuf = abs.strip_prefix(&base).ok()?.to_path_buf();
    relative(&rest.to_string_lossy()).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_setting_is_read() {
        let c = parse(
            "# the machine module\nrole = \"machine\"\nruntime = \"terraform\"\nstrict = true\nallow_warning = [\"input/tags-unused\"]\n",
            FILE_NAME,
        )
        .unwrap();
        assert!(!c.is_map());
        assert_eq!(
            c.settings,
            Config {
                role: Some(Role::Machine),
                runtime: Some(Runtime::Terraform),
                strict: true,
                allow_warning: vec!["input/tags-unused".into()],
            }
        );
        assert_eq!(parse("", FILE_NAME).unwrap(), ConfigFile::default());
    }

    #[test]
    fn a_map_merges_the_top_level_into_each_module() {
        let c = parse(
            r#"
strict        = true
runtime       = "terraform"
allow_warning = ["input/tags-unused"]
skip          = ["./examples/", "test/fixtures"]

module "./modules/cluster/" {
  role = "cluster"
}
module "modules/machine" {
  role          = "machine"
  runtime       = "tofu"
  allow_warning = ["module/tofu-shadow"]
}
"#,
            FILE_NAME,
        )
        .unwrap();
        assert!(c.is_map());
        assert_eq!(c.skip, ["examples", "test/fixtures"]);
        assert_eq!(
            c.module("modules/cluster").unwrap(),
            &Config {
                role: Some(Role::Cluster),
                runtime: Some(Runtime::Terraform),
                strict: true,
                allow_warning: vec!["input/tags-unused".into()],
            }
        );
        let machine = c.module("modules/machine").unwrap();
        assert_eq!(machine.runtime, Some(Runtime::Tofu));
        assert_eq!(
            machine.allow_warning,
            ["input/tags-unused", "module/tofu-shadow"]
        );
        assert_eq!(c.skipped_by("examples/basic"), Some("examples"));
        assert_eq!(c.skipped_by("examplesx"), None);
        assert_eq!(
            c.module_holding("modules/machine/modules/net"),
            Some("modules/machine")
        );
        assert_eq!(c.module_holding("modules"), None);
    }

    #[test]
    fn a_wrong_setting_names_the_file_and_the_rule() {
        for (text, want) in [
            ("role = \"worker\"", "role = \"worker\" is not a role"),
            ("runtime = \"tf\"", "runtime = \"tf\" is not a runtime"),
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
            (
                "module \"m\" {\n  role = \"worker\"\n}",
                "module \"m\": role = \"worker\" is not a role",
            ),
            (
                "module \"m\" {\n  format = \"json\"\n}",
                "unknown field `format`",
            ),
            (
                "module \"../m\" {\n  role = \"machine\"\n}",
                "module \"../m\": the path leaves the file's directory",
            ),
            (
                "module \"/m\" {\n  role = \"machine\"\n}",
                "module \"/m\": the path is absolute",
            ),
            (
                "skip = [\"../x\"]",
                "skip: \"../x\" leaves the file's directory",
            ),
            (
                "skip = [\"examples\"]\nmodule \"examples/a\" {\n  role = \"machine\"\n}",
                "inside skip folder \"examples\"",
            ),
            (
                "module \"m\" {\n  role = \"machine\"\n}\nmodule \"./m/\" {\n  role = \"cluster\"\n}",
                "\"m\" is mapped twice",
            ),
            (
                "role = \"machine\"\nmodule \"m\" {\n  role = \"machine\"\n}",
                "set role in each module block",
            ),
        ] {
            let err = parse(text, FILE_NAME).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(err.starts_with(".tfcapi-lint.hcl: "), "{err}");
        }
    }

    #[test]
    fn a_module_reads_its_own_file_else_its_block_in_the_map_above_it() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join(".git")).unwrap();
        let machine = repo.path().join("modules/machine");
        let cluster = repo.path().join("modules/cluster");
        let other = repo.path().join("modules/other");
        for d in [&machine, &cluster, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(for_module_dir(&machine, "m").unwrap(), None);

        std::fs::write(
            repo.path().join(FILE_NAME),
            "module \"modules/machine\" {\n  role = \"machine\"\n}\nmodule \"modules/cluster\" {\n  role = \"cluster\"\n}\n",
        )
        .unwrap();
        let found = for_module_dir(&machine, "m").unwrap().unwrap();
        assert_eq!(found.config.role, Some(Role::Machine));
        assert!(
            found.source.starts_with("module \"modules/machine\" of "),
            "{}",
            found.source
        );
        assert_eq!(
            for_module_dir(&cluster, "c").unwrap().unwrap().config.role,
            Some(Role::Cluster)
        );
        assert_eq!(for_module_dir(&other, "o").unwrap(), None);

        // A module's own file wins over the map; a per-module file above it is not a map.
        std::fs::write(machine.join(FILE_NAME), "role = \"machinepool\"\n").unwrap();
        assert_eq!(
            for_module_dir(&machine, "m").unwrap().unwrap().config.role,
            Some(Role::Machinepool)
        );
        let nested = machine.join("modules/net");
        std::fs::create_dir_all(&nested).unwrap();
        assert_eq!(for_module_dir(&nested, "n").unwrap(), None);

        // The search stops at the repository root.
        let inner = repo.path().join("vendor/lib");
        std::fs::create_dir_all(inner.join(".git")).unwrap();
        std::fs::create_dir_all(inner.join("modules/machine")).unwrap();
        assert_eq!(
            for_module_dir(&inner.join("modules/machine"), "i").unwrap(),
            None
        );

        // A broken map is an error for every module under it.
        std::fs::write(
            repo.path().join(FILE_NAME),
            "module \"x\" {\n  role = 1\n}\n",
        )
        .unwrap();
        assert!(for_module_dir(&cluster, "c").is_err());
    }
}
