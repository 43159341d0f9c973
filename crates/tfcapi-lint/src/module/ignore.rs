//! Inline ignores: a comment `# tfcapi-lint-ignore: <check> [<check>…] -- <reason>` (or `//`)
//! in a module file keeps the named checks' findings at that line (a trailing comment) or at the
//! next line (a comment on its own line above) out of the run's result. The findings are still
//! reported, as ignored with the reason, so a reviewer sees every exception and why.
//!
//! Only module checks with a line can be ignored; a file that does not parse
//! (`module/parse`, `module/one-line-block`) cannot, and neither can a malformed ignore comment
//! (`module/ignore`, which reports an unknown check ID or a missing reason).

use crate::checks::{self, Scope};
use crate::report::Finding;

use super::SourceFile;

/// What the comment starts with, after `#` or `//`.
pub const MARKER: &str = "tfcapi-lint-ignore:";

/// One well-formed ignore comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The file, as findings name it.
    pub file: String,
    /// The 1-based line of the comment.
    pub line: u32,
    /// The check IDs it ignores.
    pub ids: Vec<String>,
    /// Why, as written after `--`.
    pub reason: String,
}

/// Reads every ignore comment of `files`: the well-formed ones, and a `module/ignore` finding for
/// each malformed one.
pub fn directives(files: &[SourceFile]) -> (Vec<Directive>, Vec<Finding>) {
    let mut found = Vec::new();
    let mut bad = Vec::new();
    for file in files {
        for (index, text) in file.text.lines().enumerate() {
            let line = u32::try_from(index + 1).unwrap_or(u32::MAX);
            let Some(body) = comment_body(text) else {
                continue;
            };
            match parse(body) {
                Ok((ids, reason)) => found.push(Directive {
                    file: file.display.clone(),
                    line,
                    ids,
                    reason,
                }),
                Err(why) => bad.push(Finding::error(
                    checks::MODULE_IGNORE,
                    &file.display,
                    Some(line),
                    why,
                )),
            }
        }
    }
    (found, bad)
}

/// The text after the marker, when `line` holds an ignore comment (`#` or `//`, then the marker).
fn comment_body(line: &str) -> Option<&str> {
    let at = line.find(MARKER)?;
    let before = line[..at].trim_end();
    (before.ends_with('#') || before.ends_with("//")).then(|| &line[at + MARKER.len()..])
}

/// `<check> [<check>…] -- <reason>`: the IDs (spaces or commas between them) must name module
/// checks that can be ignored, and the reason must not be empty.
fn parse(body: &str) -> Result<(Vec<String>, String), String> {
    let Some((ids, reason)) = body.split_once("--") else {
        return Err(format!(
            "the ignore comment gives no reason: write `# {MARKER} <check> -- <why it does not apply>`"
        ));
    };
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(
            "the ignore comment's reason after `--` is empty: say why the check does not apply"
                .into(),
        );
    }
    let ids: Vec<String> = ids
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if ids.is_empty() {
        return Err("the ignore comment names no check ID".into());
    }
    for id in &ids {
        match checks::get(id) {
            None => return Err(format!("`{id}` is not a check ID")),
            Some(c) if !ignorable(c) => {
                return Err(format!("`{id}` cannot be ignored inline"));
            }
            Some(_) => {}
        }
    }
    Ok((ids, reason.to_owned()))
}

/// A module check that is about the module's contract, not about whether it could be read.
fn ignorable(check: &checks::Check) -> bool {
    check.scope == Scope::Module && !check.unreadable && check.id != checks::MODULE_IGNORE
}

/// Marks each finding a directive names, at the directive's line or the next one, as ignored
/// with the directive's reason.
pub fn apply(findings: &mut [Finding], directives: &[Directive]) {
    for f in findings.iter_mut() {
        let Some(line) = f.line else { continue };
        let hit = directives.iter().find(|d| {
            d.file == f.file
                && (d.line == line || d.line.checked_add(1) == Some(line))
                && d.ids.iter().any(|id| id == f.id)
        });
        if let Some(d) = hit {
            f.ignored = Some(d.reason.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> SourceFile {
        SourceFile {
            name: "main.tf".into(),
            display: "m/main.tf".into(),
            text: text.into(),
        }
    }

    #[test]
    fn well_formed_comments_are_read_with_their_ids_and_reason() {
        let (found, bad) = directives(&[file(
            "# tfcapi-lint-ignore: input/tags-unused -- tags are set by the org's module\n\
             variable \"x\" {} // tfcapi-lint-ignore: input/type, output/health-shape -- legacy\n\
             # an ordinary comment naming tfcapi-lint-ignore without the colon\n",
        )]);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(
            found,
            [
                Directive {
                    file: "m/main.tf".into(),
                    line: 1,
                    ids: vec!["input/tags-unused".into()],
                    reason: "tags are set by the org's module".into(),
                },
                Directive {
                    file: "m/main.tf".into(),
                    line: 2,
                    ids: vec!["input/type".into(), "output/health-shape".into()],
                    reason: "legacy".into(),
                },
            ]
        );
    }

    #[test]
    fn a_malformed_comment_is_a_finding_naming_what_is_wrong() {
        let (found, bad) = directives(&[file(
            "# tfcapi-lint-ignore: input/type\n\
             # tfcapi-lint-ignore: input/type --   \n\
             # tfcapi-lint-ignore: input/tpye -- typo\n\
             # tfcapi-lint-ignore: module/parse -- cannot be\n\
             # tfcapi-lint-ignore: -- nothing named\n",
        )]);
        assert!(found.is_empty());
        let got: Vec<(Option<u32>, &str)> =
            bad.iter().map(|f| (f.line, f.message.as_str())).collect();
        assert!(bad.iter().all(|f| f.id == checks::MODULE_IGNORE));
        assert_eq!(got.len(), 5, "{got:?}");
        assert!(got[0].1.contains("gives no reason"), "{got:?}");
        assert!(got[1].1.contains("reason after `--` is empty"), "{got:?}");
        assert_eq!(got[2], (Some(3), "`input/tpye` is not a check ID"));
        assert_eq!(got[3], (Some(4), "`module/parse` cannot be ignored inline"));
        assert_eq!(got[4], (Some(5), "the ignore comment names no check ID"));
    }

    #[test]
    fn a_directive_covers_its_own_line_and_the_next_for_the_checks_it_names() {
        let directives = [Directive {
            file: "m/main.tf".into(),
            line: 4,
            ids: vec!["input/type".into()],
            reason: "why".into(),
        }];
        let at = |line, id| Finding::error(id, "m/main.tf", Some(line), "x");
        let mut findings = vec![
            at(4, "input/type"),
            at(5, "input/type"),
            at(6, "input/type"),
            at(5, "input/missing"),
            Finding::error("input/type", "m/other.tf", Some(5), "x"),
            Finding::error("input/type", "m/main.tf", None, "x"),
        ];
        apply(&mut findings, &directives);
        let ignored: Vec<bool> = findings.iter().map(|f| f.ignored.is_some()).collect();
        assert_eq!(ignored, [true, true, false, false, false, false]);
        assert_eq!(findings[0].ignored.as_deref(), Some("why"));
    }
}
