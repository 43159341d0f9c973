//! The failure summary (Runtime Environment "What a failed step reports"; Security Model "What
//! CAPTF keeps out of status, events and logs"): for validate, its JSON diagnostics; for every
//! other step, the `Error:` header lines of its stderr with ANSI codes stripped; when neither
//! yields a line, `step <name> exited <code>; see the Job's logs`. At most 512 bytes, never raw
//! stderr. As a last guard, any string value of the run's `terraform.tfvars.json`, and any value
//! of the identity's credentials (the files of the credential mount, which hold the same values
//! as the environment the identity injects), long enough to be recognisable is replaced by
//! `<redacted>` before the summary leaves the runner.

/// The most bytes a summary holds.
pub const MAX_SUMMARY_BYTES: usize = 512;
/// The shortest tfvars string value the redactor looks for (shorter ones would mangle ordinary
/// words and are left to the header-only rule).
pub const MIN_REDACTED_LEN: usize = 6;

/// The fallback sentence.
pub fn fallback(step: &str, code: i32) -> String {
    format!("step {step} exited {code}; see the Job's logs")
}

/// Joins diagnostic header lines into a summary, or the fallback when there are none, capped.
pub fn summarize(step: &str, code: i32, lines: &[String], redactor: &Redactor) -> String {
    let text = if lines.is_empty() {
        fallback(step, code)
    } else {
        lines.join("; ")
    };
    cap(&redactor.redact(&text), MAX_SUMMARY_BYTES)
}

pub use contract::result::cap;

/// Replaces the run's tfvars string values in text that leaves the runner.
#[derive(Default, Clone)]
pub struct Redactor {
    values: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("values", &self.values.len())
            .finish()
    }
}

/// The most bytes of one credential file the redactor reads (credentials are keys, tokens and
/// certificates; a larger file is read up to this much).
pub const MAX_CREDENTIAL_FILE_BYTES: u64 = 1 << 20;

impl Redactor {
    /// A redactor for the string values (at any depth) of a tfvars JSON document.
    pub fn from_tfvars(json: &[u8]) -> Self {
        let mut r = Self::default();
        r.add_tfvars(json);
        r
    }

    /// Also redacts the string values (at any depth) of a tfvars JSON document.
    pub fn add_tfvars(&mut self, json: &[u8]) {
        if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(json) {
            collect(&doc, &mut self.values);
        }
        self.settle();
    }

    /// Also redacts the contents of every file directly in `dir`, the identity's credential
    /// mount (one file per key). A missing directory (no identity) adds nothing; unreadable
    /// entries and Kubernetes' own `..data` links are skipped.
    pub fn add_credential_files(&mut self, dir: &std::path::Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("..") {
                continue;
            }
            self.push_file(&entry.path());
        }
        self.settle();
    }

    /// Also redacts the content of one credential file (a keyless identity's token); a missing
    /// or unreadable file adds nothing.
    pub fn add_credential_file(&mut self, path: &std::path::Path) {
        self.push_file(path);
        self.settle();
    }

    /// Records a regular file's content (up to [`MAX_CREDENTIAL_FILE_BYTES`]), whole and trimmed.
    fn push_file(&mut self, path: &std::path::Path) {
        if !path.is_file() {
            return;
        }
        let Ok(file) = std::fs::File::open(path) else {
            return;
        };
        let mut bytes = Vec::new();
        if std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MAX_CREDENTIAL_FILE_BYTES),
            &mut bytes,
        )
        .is_ok()
        {
            let text = String::from_utf8_lossy(&bytes);
            push_value(&text, &mut self.values);
            push_value(text.trim(), &mut self.values);
        }
    }

    /// Longest first, so a value containing another is replaced whole.
    fn settle(&mut self) {
        self.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        self.values.dedup();
    }

    /// `text` with every known value replaced by `<redacted>`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), "<redacted>");
            }
        }
        out
    }
}

/// Records a value, and each of its lines when it has several (certificates, scripts), when long
/// enough to be recognisable.
fn push_value(s: &str, out: &mut Vec<String>) {
    if s.chars().count() >= MIN_REDACTED_LEN {
        out.push(s.to_owned());
    }
    if s.contains('\n') {
        for line in s.lines().map(str::trim) {
            if line.chars().count() >= MIN_REDACTED_LEN {
                out.push(line.to_owned());
            }
        }
    }
}

fn collect(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => push_value(s, out),
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| collect(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{error_headers, validate_errors};

    #[test]
    fn stderr_error_headers_make_the_summary_without_detail_lines() {
        let stderr = b"\x1b[31m\xe2\x94\x82 Error: \x1b[0mResource precondition failed\n\
                       \xe2\x94\x82   var.password is \"s3cr3t-planted\"\n\
                       \xe2\x94\x82 The password is too long.\n";
        let lines = error_headers(stderr);
        let s = summarize("plan", 1, &lines, &Redactor::default());
        assert_eq!(s, "Error: Resource precondition failed");
        assert!(!s.contains("s3cr3t"));
    }

    #[test]
    fn validate_json_makes_the_summary() {
        let json = br#"{"valid":false,"diagnostics":[{"severity":"error","summary":"Unsupported block type","range":{"filename":"main.tf","start":{"line":2}}},{"severity":"error","summary":"Missing name"}]}"#;
        let s = summarize("validate", 1, &validate_errors(json), &Redactor::default());
        assert_eq!(
            s,
            "Error: Unsupported block type (main.tf:2); Error: Missing name"
        );
    }

    #[test]
    fn nothing_recognisable_falls_back_to_the_sentence() {
        let lines = error_headers(b"panic: runtime error\ngoroutine 1 [running]:\n");
        assert_eq!(
            summarize("apply", 2, &lines, &Redactor::default()),
            "step apply exited 2; see the Job's logs"
        );
    }

    #[test]
    fn the_summary_is_capped_at_512_bytes_on_a_char_boundary() {
        let lines: Vec<String> = (0..40)
            .map(|i| format!("Error: failure number {i} — with a dash"))
            .collect();
        let s = summarize("plan", 1, &lines, &Redactor::default());
        assert!(s.len() <= MAX_SUMMARY_BYTES, "{}", s.len());
        assert!(s.ends_with('…'));
        let multibyte = "é".repeat(400);
        let c = cap(&multibyte, MAX_SUMMARY_BYTES);
        assert!(c.len() <= MAX_SUMMARY_BYTES);
        assert!(cap("short", 512) == "short");
    }

    #[test]
    fn tfvars_values_are_redacted() {
        let tfvars = br#"{"captf_tags":{"k":"tiny"},"password":"s3cr3t-planted","nested":[{"ca":"-----BEGIN-----\nMIIBxyzabc\n-----END-----"}],"n":12345678}"#;
        let r = Redactor::from_tfvars(tfvars);
        let lines =
            vec!["Error: password s3cr3t-planted rejected; tiny MIIBxyzabc 12345678".to_owned()];
        let s = summarize("apply", 1, &lines, &r);
        assert_eq!(
            s,
            "Error: password <redacted> rejected; tiny <redacted> 12345678"
        );
        assert!(!format!("{r:?}").contains("s3cr3t"));
    }

    #[test]
    fn identity_credential_values_are_redacted() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("AWS_SECRET_ACCESS_KEY"),
            "wJalrXUtnFEMI-planted\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("key.pem"),
            "-----BEGIN KEY-----\nMIIEplantedLine\n-----END KEY-----\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("REGION"), "eu").expect("write");
        std::fs::create_dir(dir.path().join("..2024_01_01")).expect("mkdir");
        let mut r = Redactor::from_tfvars(br#"{"password":"s3cr3t-planted"}"#);
        r.add_credential_files(dir.path());
        let lines = vec![
            "Error: signature for wJalrXUtnFEMI-planted invalid; key MIIEplantedLine; s3cr3t-planted; eu-west-1".to_owned(),
        ];
        assert_eq!(
            summarize("apply", 1, &lines, &r),
            "Error: signature for <redacted> invalid; key <redacted>; <redacted>; eu-west-1"
        );
        let mut none = Redactor::default();
        none.add_credential_files(&dir.path().join("missing"));
        assert_eq!(
            none.redact("wJalrXUtnFEMI-planted"),
            "wJalrXUtnFEMI-planted"
        );
    }
}
