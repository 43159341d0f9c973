//! Findings, the summary and the exit code (spec: tfcapi-lint "Strict mode and allowed warnings",
//! "Exit codes").

use crate::checks;
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;
use std::fmt::Write as _;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The module or image breaks the contract.
    Error,
    /// Probably a mistake; fails the run only under `--strict`.
    Warning,
    /// A warning the user allowed with `--allow-warning`; never fails the run.
    Info,
}

impl Severity {
    /// The spelling used in text output and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing wrong, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The stable check ID, for example `input/type`.
    pub id: &'static str,
    /// Its severity after `--allow-warning`.
    pub severity: Severity,
    /// The file (or image path, or image reference) it is about.
    pub file: String,
    /// The 1-based line, when the finding has one.
    pub line: Option<u32>,
    /// What is wrong and what to write instead.
    pub message: String,
    /// The image platform it was found on (image checks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The reason of the inline `tfcapi-lint-ignore` comment that ignores it
    /// (`crate::module::ignore`): reported, never counted.
    #[serde(rename = "reason", skip_serializing_if = "Option::is_none")]
    pub ignored: Option<String>,
}

impl Finding {
    /// A finding at the given severity.
    pub fn new(
        id: &'static str,
        severity: Severity,
        file: impl Into<String>,
        line: Option<u32>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            id,
            severity,
            file: file.into(),
            line,
            message: message.into(),
            platform: None,
            ignored: None,
        }
    }

    /// An error finding.
    pub fn error(
        id: &'static str,
        file: impl Into<String>,
        line: Option<u32>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(id, Severity::Error, file, line, message)
    }

    /// A warning finding.
    pub fn warning(
        id: &'static str,
        file: impl Into<String>,
        line: Option<u32>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(id, Severity::Warning, file, line, message)
    }

    /// The same finding, tagged with an image platform.
    #[must_use]
    pub fn on_platform(mut self, platform: &str) -> Self {
        self.platform = Some(platform.to_owned());
        self
    }
}

/// `file:line: <label> id: message [platform]`, without the line end.
fn text_line(out: &mut String, f: &Finding, label: &str) {
    out.push_str(&f.file);
    if let Some(line) = f.line {
        out.push(':');
        out.push_str(&line.to_string());
    }
    out.push_str(": ");
    out.push_str(label);
    out.push(' ');
    out.push_str(f.id);
    out.push_str(": ");
    out.push_str(&f.message);
    if let Some(platform) = &f.platform {
        out.push_str(" [");
        out.push_str(platform);
        out.push(']');
    }
}

/// How many findings of each severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Error findings.
    pub errors: usize,
    /// Warning findings.
    pub warnings: usize,
    /// Allowed warnings.
    pub info: usize,
    /// Findings an inline comment ignores (left out of the output when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub ignored: usize,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference.
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Every finding of one run, sorted, with its summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The findings, sorted by file, line and ID.
    pub findings: Vec<Finding>,
    /// The findings an inline comment ignores, with its reason, sorted the same way (left out
    /// of the output when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<Finding>,
    /// The counts.
    pub summary: Summary,
}

/// The process exit codes (spec: tfcapi-lint "Exit codes").
pub mod exit {
    /// Clean (or only warnings without `--strict`).
    pub const CLEAN: i32 = 0;
    /// At least one error, or a warning under `--strict`.
    pub const FINDINGS: i32 = 1;
    /// The module could not be parsed, or the image could not be pulled.
    pub const UNREADABLE: i32 = 2;
    /// A usage error.
    pub const USAGE: i32 = 3;
}

impl Report {
    /// Builds a report: downgrades allowed warnings to info, de-duplicates and sorts.
    pub fn new(mut findings: Vec<Finding>, allowed: &BTreeSet<String>) -> Self {
        for f in &mut findings {
            if f.severity == Severity::Warning && allowed.contains(f.id) {
                f.severity = Severity::Info;
            }
        }
        findings.sort_by(|a, b| {
            (&a.platform, &a.file, a.line, a.id, &a.message).cmp(&(
                &b.platform,
                &b.file,
                b.line,
                b.id,
                &b.message,
            ))
        });
        findings.dedup();
        let (ignored, findings): (Vec<Finding>, Vec<Finding>) =
            findings.into_iter().partition(|f| f.ignored.is_some());
        let mut summary = Summary {
            ignored: ignored.len(),
            ..Summary::default()
        };
        for f in &findings {
            match f.severity {
                Severity::Error => summary.errors += 1,
                Severity::Warning => summary.warnings += 1,
                Severity::Info => summary.info += 1,
            }
        }
        Self {
            findings,
            ignored,
            summary,
        }
    }

    /// The exit code: 2 when something could not be read, else 1 for errors (or warnings under
    /// `strict`), else 0.
    pub fn exit_code(&self, strict: bool) -> i32 {
        if self
            .findings
            .iter()
            .any(|f| checks::get(f.id).is_some_and(|c| c.unreadable))
        {
            exit::UNREADABLE
        } else if self.summary.errors > 0 || (strict && self.summary.warnings > 0) {
            exit::FINDINGS
        } else {
            exit::CLEAN
        }
    }

    /// One `file:line: severity id: message` line per finding, one
    /// `file:line: ignored id: message (reason)` line per ignored finding, then the summary line
    /// (`, N ignored` only when some were).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            text_line(&mut out, f, f.severity.as_str());
            out.push('\n');
        }
        for f in &self.ignored {
            text_line(&mut out, f, "ignored");
            let _ = writeln!(
                out,
                " (ignored: {})",
                f.ignored.as_deref().unwrap_or_default()
            );
        }
        let _ = write!(
            out,
            "summary: {} errors, {} warnings, {} info",
            self.summary.errors, self.summary.warnings, self.summary.info
        );
        if self.summary.ignored > 0 {
            let _ = write!(out, ", {} ignored", self.summary.ignored);
        }
        out.push('\n');
        out
    }

    /// `{findings: [{id, severity, file, line, message}], summary}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| String::from("{}")) + "\n"
    }

    /// A SARIF 2.1.0 log with one run: every check as a rule, every finding as a result.
    pub fn to_sarif(&self, source: Option<&crate::sarif::SourceRoot>) -> String {
        crate::sarif::render(self, source)
    }
}
