//! A repository's modules (tfcapi-lint, "A repository's modules"): which module directories
//! `tfcapi-lint modules` names, all of a repository's map or those holding changed files, for the
//! pre-commit hook and for CI to lint one by one.
//!
//! With a map (a `.tfcapi-lint.hcl` with `module` blocks at the repository root), a file belongs
//! to the mapped module at or above it with the longest path, and a file in no mapped module is
//! not linted. Without one, a file belongs to the nearest directory at or above it that holds its
//! own `.tfcapi-lint.hcl`, else to its own directory. Either way, files under a `skip` folder of
//! the root file and files under `.terraform/` (what `init` downloads) belong to no module.

use std::collections::BTreeSet;
use std::path::Path;

use crate::config::{self, ConfigFile};

/// The modules of a run, and why some files were left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Modules {
    /// Module directories relative to the root, sorted, each once.
    pub dirs: Vec<String>,
    /// One line per file left out, saying why.
    pub left_out: Vec<String>,
}

/// The modules holding `files` (paths relative to `root`), or with no files every module the
/// root's map names; `file` is the root's configuration file, if it has one.
pub fn modules(
    root: &Path,
    file: Option<&ConfigFile>,
    files: &[String],
) -> Result<Modules, String> {
    if files.is_empty() {
        return match file.filter(|f| f.is_map()) {
            Some(map) => Ok(Modules {
                dirs: map.modules.keys().cloned().collect(),
                left_out: Vec::new(),
            }),
            None => Err(format!(
                "no module map: name the changed files, or map the modules with module blocks in {}",
                config::FILE_NAME
            )),
        };
    }
    let mut dirs = BTreeSet::new();
    let mut left_out = Vec::new();
    for f in files {
        match module_of(root, file, f) {
            Ok(dir) => {
                dirs.insert(dir);
            }
            Err(why) => left_out.push(format!("{f}: {why}")),
        }
    }
    Ok(Modules {
        dirs: dirs.into_iter().collect(),
        left_out,
    })
}

/// The module directory the file `f` (relative to `root`) belongs to, or why it belongs to none.
fn module_of(root: &Path, file: Option<&ConfigFile>, f: &str) -> Result<String, String> {
    let rel = config::relative(f)
        .ok()
        .filter(|r| r != ".")
        .ok_or("not a path inside the repository root")?;
    if rel.split('/').any(|part| part == ".terraform") {
        return Err("under .terraform/, which init downloads: not linted".to_owned());
    }
    if let Some(folder) = file.and_then(|c| c.skipped_by(&rel)) {
        return Err(format!(
            "in skip folder {folder:?} of {}: not linted",
            config::FILE_NAME
        ));
    }
    let dir = parent(&rel);
    if let Some(map) = file.filter(|c| c.is_map()) {
        return map.module_holding(&dir).map(str::to_owned).ok_or_else(|| {
            format!(
                "in no module of the map in {}: not linted (add a module block for it, or skip its folder)",
                config::FILE_NAME
            )
        });
    }
    // The root's own file is a module's only when it sets more than `skip`.
    let root_is_module = file.is_some_and(|c| c.settings != config::Config::default());
    let mut at = dir.clone();
    loop {
        if at == "." {
            return Ok(if root_is_module { at } else { dir });
        }
        if root.join(&at).join(config::FILE_NAME).is_file() {
            return Ok(at);
        }
        at = parent(&at);
    }
}

/// The directory holding the normalized path `p` (`.` at the top).
fn parent(p: &str) -> String {
    p.rsplit_once('/')
        .map_or_else(|| ".".to_owned(), |(dir, _)| dir.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MAP: &str = r#"
strict = true
skip   = ["examples", "modules/machine/test"]

module "modules/cluster" {
  role = "cluster"
}
module "modules/machine" {
  role = "machine"
}
module "modules/machine/pool" {
  role = "machinepool"
}
"#;

    fn files(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_map_assigns_each_file_to_the_longest_module_above_it() {
        let map = config::parse(MAP, config::FILE_NAME).unwrap();
        let got = modules(
            Path::new("/nonexistent"),
            Some(&map),
            &files(&[
                "modules/cluster/main.tf",
                "./modules/machine/outputs.tf",
                "modules/machine/modules/network/main.tf",
                "modules/machine/pool/main.tofu",
                "modules/machine/test/fixture/main.tf",
                "examples/basic/main.tf",
                "modules/cluster/.terraform/modules/vpc/main.tf",
                "tools/gen/main.tf",
                "../elsewhere/main.tf",
            ]),
        )
        .unwrap();
        assert_eq!(
            got.dirs,
            ["modules/cluster", "modules/machine", "modules/machine/pool"]
        );
        let why = got.left_out.join("\n");
        for (file, reason) in [
            (
                "modules/machine/test/fixture/main.tf",
                "skip folder \"modules/machine/test\"",
            ),
            ("examples/basic/main.tf", "skip folder \"examples\""),
            (
                "modules/cluster/.terraform/modules/vpc/main.tf",
                "under .terraform/",
            ),
            ("tools/gen/main.tf", "in no module of the map"),
            (
                "../elsewhere/main.tf",
                "not a path inside the repository root",
            ),
        ] {
            assert!(
                why.contains(&format!("{file}: ")),
                "{file} not left out: {why}"
            );
            assert!(why.contains(reason), "{reason}: {why}");
        }
        assert_eq!(got.left_out.len(), 5, "{why}");
    }

    #[test]
    fn without_files_a_map_names_every_module_and_no_map_is_an_error() {
        let map = config::parse(MAP, config::FILE_NAME).unwrap();
        let all = modules(Path::new("/nonexistent"), Some(&map), &[]).unwrap();
        assert_eq!(all.dirs.len(), 3);
        let own = config::parse("role = \"machine\"", config::FILE_NAME).unwrap();
        for file in [None, Some(&own)] {
            let err = modules(Path::new("/nonexistent"), file, &[]).unwrap_err();
            assert!(err.contains("no module map"), "{err}");
        }
    }

    #[test]
    fn without_a_map_a_file_belongs_to_the_nearest_configured_directory() {
        let root = tempfile::tempdir().unwrap();
        let configured = root.path().join("modules/machine");
        std::fs::create_dir_all(configured.join("modules/network")).unwrap();
        std::fs::write(configured.join(config::FILE_NAME), "role = \"machine\"\n").unwrap();
        let got = modules(
            root.path(),
            None,
            &files(&[
                "modules/machine/modules/network/main.tf",
                "modules/machine/main.tf",
                "modules/cluster/main.tf",
                "main.tf",
            ]),
        )
        .unwrap();
        assert_eq!(got.dirs, [".", "modules/cluster", "modules/machine"]);
        assert!(got.left_out.is_empty(), "{:?}", got.left_out);

        // A root file with only `skip` keeps its folders out, with no map, and is no module.
        let text = "skip = [\"modules/cluster\"]\n";
        std::fs::write(root.path().join(config::FILE_NAME), text).unwrap();
        let skip = config::parse(text, config::FILE_NAME).unwrap();
        let got = modules(
            root.path(),
            Some(&skip),
            &files(&["modules/cluster/main.tf", "modules/other/main.tf"]),
        )
        .unwrap();
        assert_eq!(got.dirs, ["modules/other"]);
        assert_eq!(got.left_out.len(), 1);
        // A root file with a role makes the root a module, which holds what no nearer file
        // claims.
        let own = config::parse("role = \"cluster\"\n", config::FILE_NAME).unwrap();
        let got = modules(root.path(), Some(&own), &files(&["modules/other/main.tf"])).unwrap();
        assert_eq!(got.dirs, ["."]);
    }
}
