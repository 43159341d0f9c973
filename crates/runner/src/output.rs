//! Reading the runtime's output without keeping it: ANSI escape codes, `Error:` diagnostic
//! headers, validate's JSON diagnostics, `version -json`, and the apply/destroy summary line
//! (Runtime Environment "What a failed step reports"; Observability "ResourcesChanged").

use std::sync::LazyLock;

use regex::Regex;
use serde::Deserialize;

/// CSI sequences (`ESC [ ... final`), OSC sequences (`ESC ] ... BEL|ESC \`), and two-byte
/// escapes (`ESC x`).
static ANSI: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]").ok()
});

/// `Apply complete! Resources: ...` / `Destroy complete! Resources: ...`.
static SUMMARY_LINE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(?:Apply|Destroy) complete! Resources: (.*?)\.?\s*$").ok());

/// `<n> <word>` items of a summary line.
static COUNT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(\d+) (imported|added|changed|destroyed|forgotten)").ok());

/// Removes ANSI escape codes (a provider or a local-exec child is not bound by `-no-color`).
pub fn strip_ansi(text: &str) -> String {
    match ANSI.as_ref() {
        Some(re) => re.replace_all(text, "").into_owned(),
        None => text.replace('\x1b', ""),
    }
}

/// The `Error: ...` header of a diagnostic line, with ANSI codes, the diagnostic box drawing
/// (`│ ╷ ╵`) and surrounding whitespace removed; `None` for any other line.
pub fn error_header(line: &[u8]) -> Option<String> {
    let text = strip_ansi(&String::from_utf8_lossy(line));
    let trimmed = text
        .trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '│' | '╷' | '╵' | '|'))
        .trim_end();
    trimmed
        .starts_with("Error: ")
        .then(|| trimmed.to_owned())
        .filter(|t| t.len() > "Error: ".len())
}

/// Every `Error:` header of a stderr text, in order, without repeats.
pub fn error_headers(stderr: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in stderr.split(|&b| b == b'\n') {
        if let Some(h) = error_header(line)
            && !out.contains(&h)
        {
            out.push(h);
        }
    }
    out
}

#[derive(Deserialize)]
struct ValidateDoc {
    #[serde(default)]
    diagnostics: Vec<Diagnostic>,
}

#[derive(Deserialize)]
struct Diagnostic {
    #[serde(default)]
    severity: String,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    range: Option<Range>,
}

#[derive(Deserialize)]
struct Range {
    #[serde(default)]
    filename: String,
    #[serde(default)]
    start: Option<Pos>,
}

#[derive(Deserialize)]
struct Pos {
    #[serde(default)]
    line: u64,
}

/// The error diagnostics of `validate -json` output as `Error: <summary> (<file>:<line>)`
/// lines; empty when the output is not validate JSON or has no error.
pub fn validate_errors(json: &[u8]) -> Vec<String> {
    let Ok(doc) = serde_json::from_slice::<ValidateDoc>(json) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for d in doc.diagnostics {
        if d.severity != "error" || d.summary.trim().is_empty() {
            continue;
        }
        let mut line = format!("Error: {}", strip_ansi(d.summary.trim()));
        if let Some(r) = d.range.filter(|r| !r.filename.is_empty()) {
            let location = match r.start {
                Some(p) if p.line > 0 => format!(" ({}:{})", r.filename, p.line),
                _ => format!(" ({})", r.filename),
            };
            line.push_str(&location);
        }
        if !out.contains(&line) {
            out.push(line);
        }
    }
    out
}

#[derive(Deserialize)]
struct VersionDoc {
    #[serde(default)]
    terraform_version: String,
}

/// The runtime version from `version -json` (`terraform_version`, which OpenTofu prints too).
pub fn runtime_version(json: &[u8]) -> Option<String> {
    let doc: VersionDoc = serde_json::from_slice(json).ok()?;
    let v = doc.terraform_version.trim();
    (!v.is_empty() && v.len() <= 64).then(|| v.to_owned())
}

/// Resource counts from an apply or destroy summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Resources imported.
    pub import: u64,
    /// Resources added.
    pub add: u64,
    /// Resources changed.
    pub change: u64,
    /// Resources destroyed.
    pub destroy: u64,
    /// Resources forgotten (removed from state, left in place).
    pub forget: u64,
}

/// Parses `Apply complete! Resources: 1 imported, 2 added, 0 changed, 1 destroyed.` (with `, 1
/// forgotten.` when resources were forgotten) or `Destroy complete! Resources: 3 destroyed.`.
pub fn changes_line(line: &[u8]) -> Option<Changes> {
    let text = strip_ansi(&String::from_utf8_lossy(line));
    let caps = SUMMARY_LINE.as_ref()?.captures(text.trim())?;
    let items = caps.get(1)?.as_str();
    let mut changes = Changes::default();
    for c in COUNT.as_ref()?.captures_iter(items) {
        let n: u64 = c.get(1)?.as_str().parse().ok()?;
        match c.get(2)?.as_str() {
            "imported" => changes.import = n,
            "added" => changes.add = n,
            "changed" => changes.change = n,
            "destroyed" => changes.destroy = n,
            "forgotten" => changes.forget = n,
            _ => {}
        }
    }
    Some(changes)
}

/// Whether force-unlock's stderr says the lock was already gone: the state is unlocked, its
/// Lease does not exist, or another holder has taken the lock since (the stale one is gone).
pub fn already_unlocked(stderr: &[u8]) -> bool {
    let text = strip_ansi(&String::from_utf8_lossy(stderr)).to_ascii_lowercase();
    text.contains("already unlocked")
        || text.contains("not locked")
        || text.contains("does not match existing lock")
        || (text.contains("failed to unlock state") && text.contains("not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_codes_are_stripped() {
        assert_eq!(strip_ansi("\x1b[31mError:\x1b[0m bad"), "Error: bad");
        assert_eq!(strip_ansi("\x1b[1;4;38;5;160mx\x1b[m"), "x");
        assert_eq!(strip_ansi("\x1b]0;title\x07text"), "text");
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn error_headers_are_found_in_boxed_plain_and_coloured_output() {
        let stderr = "\u{2577}\n\u{2502} \x1b[1m\x1b[31mError: \x1b[0m\x1b[0m\x1b[1mInvalid thing\x1b[0m\n\
                      \u{2502} \n\u{2502}   on main.tf line 3:\n\u{2502}    3: x = \"hunter2\"\n\u{2575}\n\
                      \nError: Resource precondition failed\n\n  var.password is \"s3cr3t\"\n\
                      Error: Resource precondition failed\nnot an Error: line\nError: \n";
        assert_eq!(
            error_headers(stderr.as_bytes()),
            vec![
                "Error: Invalid thing",
                "Error: Resource precondition failed"
            ]
        );
    }

    #[test]
    fn validate_errors_use_summary_and_location_only() {
        let json = br#"{"format_version":"1.0","valid":false,"error_count":2,"warning_count":1,
          "diagnostics":[
            {"severity":"warning","summary":"Deprecated","detail":"x"},
            {"severity":"error","summary":"Unsupported argument","detail":"An argument named \"y\" is not expected here.",
             "range":{"filename":"../../module/main.tf","start":{"line":4,"column":3,"byte":40},"end":{"line":4,"column":4,"byte":41}}},
            {"severity":"error","summary":"Missing required argument","detail":"d"}
          ]}"#;
        assert_eq!(
            validate_errors(json),
            vec![
                "Error: Unsupported argument (../../module/main.tf:4)",
                "Error: Missing required argument",
            ]
        );
        assert!(validate_errors(b"not json").is_empty());
        assert!(validate_errors(br#"{"valid":true,"diagnostics":[]}"#).is_empty());
    }

    #[test]
    fn runtime_version_comes_from_version_json() {
        let json =
            br#"{"terraform_version":"1.12.6","platform":"linux_amd64","provider_selections":{}}"#;
        assert_eq!(runtime_version(json).as_deref(), Some("1.12.6"));
        assert_eq!(runtime_version(b"OpenTofu v1.12.6"), None);
    }

    #[test]
    fn summary_lines_give_the_change_counts() {
        assert_eq!(
            changes_line(b"Apply complete! Resources: 1 added, 2 changed, 3 destroyed."),
            Some(Changes {
                import: 0,
                add: 1,
                change: 2,
                destroy: 3,
                forget: 0,
            })
        );
        assert_eq!(
            changes_line(
                b"Apply complete! Resources: 0 added, 0 changed, 0 destroyed, 2 forgotten."
            ),
            Some(Changes {
                forget: 2,
                ..Changes::default()
            })
        );
        assert_eq!(
            changes_line(b"\x1b[1mApply complete! Resources: 4 imported, 0 added, 0 changed, 0 destroyed.\x1b[0m\n"),
            Some(Changes { import: 4, ..Changes::default() })
        );
        assert_eq!(
            changes_line(b"Destroy complete! Resources: 2 destroyed."),
            Some(Changes {
                destroy: 2,
                ..Changes::default()
            })
        );
        assert_eq!(
            changes_line(b"Plan: 1 to add, 0 to change, 0 to destroy."),
            None
        );
    }

    #[test]
    fn already_unlocked_is_recognised() {
        assert!(already_unlocked(
            b"Error: Failed to unlock state: state is already unlocked\n"
        ));
        assert!(already_unlocked(
            b"Failed to unlock state: leases.coordination.k8s.io \"lock-tfstate-default-x\" not found"
        ));
        assert!(already_unlocked(
            b"Error: Failed to unlock state: lock id \"a\" does not match existing lock"
        ));
        assert!(!already_unlocked(
            b"Error: Failed to unlock state: connection refused"
        ));
    }
}
