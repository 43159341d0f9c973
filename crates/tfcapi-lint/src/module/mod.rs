//! `tfcapi-lint module`: reads a module's top-level configuration files and checks them against
//! the role's contract (spec: tfcapi-lint "Lint a module"; Module Contract; Common; the role
//! chapters). Parsing only: no runtime, no network.

pub mod expr;
pub mod ignore;
pub mod json;
pub mod load;
pub mod null_check;
pub mod rules;
pub mod split;
pub mod types;

use crate::checks;
use crate::report::Finding;
use crate::role::Role;
pub use load::{Module, Runtime, SourceFile, files_for_runtime, is_config_file, load};
use std::path::Path;

/// Joins a directory as the user wrote it and a file name, the way findings show files.
pub fn display_path(dir: &str, name: &str) -> String {
    if dir.is_empty() || dir == "." {
        name.to_owned()
    } else if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Lints already-read files for OpenTofu: loads them and runs every check of `role`.
pub fn lint_sources(files: Vec<SourceFile>, role: Role, dir: &str) -> (Module, Vec<Finding>) {
    lint_sources_for(files, role, dir, Runtime::Tofu)
}

/// Lints already-read files for `runtime`: keeps the files it reads, loads them and runs every
/// check of `role`.
pub fn lint_sources_for(
    files: Vec<SourceFile>,
    role: Role,
    dir: &str,
    runtime: Runtime,
) -> (Module, Vec<Finding>) {
    let (files, mut findings) = files_for_runtime(files, runtime);
    if files.is_empty() {
        let message = match runtime {
            Runtime::Tofu => {
                "no .tf, .tf.json, .tofu or .tofu.json file at the top level of the module"
            }
            Runtime::Terraform => {
                "no .tf or .tf.json file at the top level of the module (Terraform ignores .tofu files)"
            }
        };
        findings.push(Finding::error(
            checks::MODULE_NO_CONFIGURATION,
            dir,
            None,
            message,
        ));
        return (Module::default(), findings);
    }
    let (directives, malformed) = ignore::directives(&files);
    let (module, loaded) = load(files);
    findings.extend(loaded);
    // A module that does not parse is not checked further: its declarations are incomplete, and
    // every contract finding would be a guess.
    if !findings
        .iter()
        .any(|f| checks::get(f.id).is_some_and(|c| c.unreadable))
    {
        findings.extend(rules::check(&module, role, dir, runtime));
    }
    findings.extend(malformed);
    ignore::apply(&mut findings, &directives);
    (module, findings)
}

/// Reads the configuration files at the top level of `dir` (sorted by name); files that cannot
/// be read come back as findings.
pub fn read_dir(dir: &Path, display: &str) -> (Vec<SourceFile>, Vec<Finding>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            return (
                Vec::new(),
                vec![Finding::error(
                    checks::MODULE_NO_CONFIGURATION,
                    display,
                    None,
                    format!("cannot read the module directory: {e}"),
                )],
            );
        }
    };
    // A symbolic link is kept even when it leads nowhere (dangling, or a loop): the runtime fails
    // to load such a directory, so reading it below reports `module/parse` naming the file.
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file() || e.file_type().is_ok_and(|t| t.is_symlink()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_config_file(n))
        .collect();
    names.sort();
    let mut files = Vec::with_capacity(names.len());
    let mut findings = Vec::new();
    for name in names {
        let shown = display_path(display, &name);
        match std::fs::read(dir.join(&name)).map(String::from_utf8) {
            Ok(Ok(text)) => files.push(SourceFile {
                name,
                display: shown,
                text,
            }),
            Ok(Err(_)) => findings.push(Finding::error(
                checks::MODULE_PARSE,
                &shown,
                Some(1),
                "the file is not UTF-8",
            )),
            Err(e) => {
                let link = std::fs::symlink_metadata(dir.join(&name))
                    .is_ok_and(|m| m.file_type().is_symlink());
                let message = if link {
                    format!(
                        "a symbolic link that cannot be read ({e}): it leads nowhere, loops or names a directory, and the runtime fails to load the module"
                    )
                } else {
                    format!("cannot read: {e}")
                };
                findings.push(Finding::error(checks::MODULE_PARSE, &shown, None, message));
            }
        }
    }
    (files, findings)
}

/// Lints the module in `dir` for `role` and OpenTofu; `display` is how findings name the
/// directory.
pub fn lint_dir(dir: &Path, display: &str, role: Role) -> Vec<Finding> {
    lint_dir_for(dir, display, role, Runtime::Tofu)
}

/// Lints the module in `dir` for `role` and `runtime`.
pub fn lint_dir_for(dir: &Path, display: &str, role: Role, runtime: Runtime) -> Vec<Finding> {
    let (files, mut findings) = read_dir(dir, display);
    if files.is_empty() && !findings.is_empty() {
        return findings;
    }
    findings.extend(lint_sources_for(files, role, display, runtime).1);
    findings
}
