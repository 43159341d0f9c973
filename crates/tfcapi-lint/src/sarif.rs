//! SARIF 2.1.0 output (`--format sarif`), so a CI system can show findings inline: one run, every
//! check as a rule with its help text, every finding as a result with its physical location.
//! A module's files are located relative to the repository that holds them (`%SRCROOT%`), as code
//! scanning resolves them, wherever tfcapi-lint ran from.

use crate::checks::{self, CHECKS};
use crate::report::{Report, Severity};
use contract::path::normalize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The base id of the repository root in the log's `originalUriBaseIds`.
const SRCROOT: &str = "%SRCROOT%";

/// Where a module's files are: the repository root its locations are relative to, and the
/// directory the finding paths are relative to (the working directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRoot {
    /// The repository root: the nearest directory above the module holding `.git`, else the
    /// working directory. Absolute.
    pub root: PathBuf,
    /// The working directory the paths of the findings are relative to. Absolute.
    pub cwd: PathBuf,
}

impl SourceRoot {
    /// The source root of a module linted as `dir` from the working directory `cwd`.
    pub fn for_module(cwd: &Path, dir: &str) -> Self {
        let cwd = normalize(cwd);
        let module = normalize(&cwd.join(dir));
        let root = module
            .ancestors()
            .find(|a| a.join(".git").exists())
            .map_or_else(|| cwd.clone(), Path::to_path_buf);
        Self { root, cwd }
    }

    /// A finding's file as a SARIF artifact location: relative to [`SRCROOT`] when it is inside
    /// the repository, else an absolute `file://` URI.
    fn location(&self, file: &str) -> Value {
        let path = normalize(&self.cwd.join(file));
        match path.strip_prefix(&self.root) {
            Ok(relative) => {
                let uri = encode(&relative.to_string_lossy());
                json!({ "uri": if uri.is_empty() { ".".to_owned() } else { uri }, "uriBaseId": SRCROOT })
            }
            Err(_) => json!({ "uri": file_uri(&path) }),
        }
    }
}

/// Percent-encodes what a URI path may not hold as is; `/` separates segments.
fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
    out
}

/// A `file://` URI of an absolute path.
fn file_uri(path: &Path) -> String {
    format!("file://{}", encode(&path.to_string_lossy()))
}

const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The book's pages at this release's tag: where a SARIF viewer links the tool and each rule.
fn book(page: &str) -> String {
    format!(
        "https://github.com/captf-io/cluster-api-provider-terraform/blob/v{}/docs/src/{page}",
        env!("CARGO_PKG_VERSION")
    )
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

fn rule(check: &checks::Check) -> Value {
    let default_level = check.severities.first().copied().unwrap_or(Severity::Error);
    let roles: Vec<&str> = check.roles.iter().map(|r| r.as_str()).collect();
    json!({
        "id": check.id,
        "name": check.id.replace(['/', '-'], "_"),
        "shortDescription": { "text": check.summary },
        "fullDescription": { "text": check.summary },
        "help": {
            "text": format!("{}\nExample:\n{}\nFix: {}", check.summary, check.example, check.fix),
            "markdown": format!(
                "{}\n\nExample that triggers it:\n\n```hcl\n{}\n```\n\nFix: {}",
                check.summary, check.example, check.fix
            ),
        },
        "helpUri": book("reference/tfcapi-lint-cli.md"),
        "defaultConfiguration": { "level": level(default_level) },
        "properties": { "roles": roles },
    })
}

/// Renders a report as a SARIF 2.1.0 log. With a `source` root (a module's lint), locations are
/// relative to the repository; without one (an image's lint) they are the paths in the image.
pub fn render(report: &Report, source: Option<&SourceRoot>) -> String {
    let rules: Vec<Value> = CHECKS.iter().map(rule).collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .chain(&report.ignored)
        .map(|f| {
            let artifact = match source {
                Some(s) => s.location(&f.file),
                None => json!({ "uri": f.file }),
            };
            let mut physical = json!({ "artifactLocation": artifact });
            if let Some(line) = f.line {
                physical["region"] = json!({ "startLine": line.max(1) });
            }
            let mut result = json!({
                "ruleId": f.id,
                "level": level(f.severity),
                "message": { "text": f.message },
                "locations": [{ "physicalLocation": physical }],
            });
            if let Some(index) = CHECKS.iter().position(|c| c.id == f.id) {
                result["ruleIndex"] = json!(index);
            }
            if let Some(platform) = &f.platform {
                result["properties"] = json!({ "platform": platform });
            }
            // An inline ignore is a suppression in source, with its reason as the justification.
            if let Some(reason) = &f.ignored {
                result["suppressions"] = json!([{ "kind": "inSource", "justification": reason }]);
            }
            result
        })
        .collect();
    let mut run = json!({
        "tool": {
            "driver": {
                "name": "tfcapi-lint",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": book("tfcapi-lint.md"),
                "rules": rules,
            }
        },
        "results": results,
    });
    if let Some(s) = source {
        let root = file_uri(&s.root);
        let root = if root.ends_with('/') {
            root
        } else {
            root + "/"
        };
        run["originalUriBaseIds"] = json!({ SRCROOT: { "uri": root } });
    }
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [run],
    });
    serde_json::to_string_pretty(&log).unwrap_or_else(|_| String::from("{}")) + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(root: &str, cwd: &str) -> SourceRoot {
        SourceRoot {
            root: PathBuf::from(root),
            cwd: PathBuf::from(cwd),
        }
    }

    #[test]
    fn locations_are_relative_to_the_repository_from_any_working_directory() {
        let r = root("/src/repo", "/src/repo/modules");
        assert_eq!(
            r.location("machine/main.tf"),
            json!({"uri": "modules/machine/main.tf", "uriBaseId": SRCROOT})
        );
        assert_eq!(
            r.location("./machine/../cluster/main.tf"),
            json!({"uri": "modules/cluster/main.tf", "uriBaseId": SRCROOT})
        );
        assert_eq!(
            r.location("/src/repo/a b/#1.tf"),
            json!({"uri": "a%20b/%231.tf", "uriBaseId": SRCROOT})
        );
        assert_eq!(r.location(".."), json!({"uri": ".", "uriBaseId": SRCROOT}));
        // Outside the repository: an absolute URI, no base.
        assert_eq!(
            r.location("../../other/main.tf"),
            json!({"uri": "file:///src/other/main.tf"})
        );
    }

    #[test]
    fn the_root_is_the_nearest_directory_holding_git() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("modules/m")).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        let cwd = repo.join("modules");
        let s = SourceRoot::for_module(&cwd, "m");
        assert_eq!(s.root, repo);
        // A worktree's `.git` is a file.
        let worktree = tmp.path().join("wt");
        std::fs::create_dir_all(worktree.join("m")).unwrap();
        std::fs::write(worktree.join(".git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(
            SourceRoot::for_module(&worktree.join("m"), ".").root,
            worktree
        );
        // No repository: the working directory.
        let bare = tmp.path().join("bare");
        std::fs::create_dir_all(bare.join("m")).unwrap();
        if !tmp.path().ancestors().any(|a| a.join(".git").exists()) {
            assert_eq!(SourceRoot::for_module(&bare, "m").root, bare);
        }
    }
}
