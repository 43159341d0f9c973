//! The API server's audit log (ENGINEERING.md §2; issue 18's scale harness): every request the
//! test API server serves, at the `Metadata` level, one JSON line per stage, under
//! `<dir>/audit/`. A test reads it back to count requests by caller, verb and resource without
//! instrumenting the caller: the manager under test, Cluster API's managers and the test itself
//! are told apart by user name and user agent.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

/// The policy: every request at `Metadata` (who, what, on which object, the answer's code; never
/// a body), without the `RequestReceived` stage.
const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [\"RequestReceived\"]
rules:
- level: Metadata
";

/// The directory of the audit files under a control plane's directory.
pub fn dir(control_plane_dir: &Path) -> PathBuf {
    control_plane_dir.join("audit")
}

/// Writes the policy and returns the API server's audit flags. The log rotates at 200 MB and
/// keeps five old files, which [`read`] reads too.
pub fn api_server_args(control_plane_dir: &Path) -> anyhow::Result<Vec<String>> {
    let dir = dir(control_plane_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).with_context(|| format!("writing {}", policy.display()))?;
    Ok(vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", dir.join("audit.log").display()),
        "--audit-log-format=json".into(),
        "--audit-log-maxsize=200".into(),
        "--audit-log-maxbackup=5".into(),
    ])
}

/// One request, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// When the API server received it, in microseconds since the Unix epoch.
    pub received_micros: i64,
    pub user: String,
    pub user_agent: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The resource (`secrets`, `terraformmachines`, ...); empty for a non-resource URL.
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    /// The object's name; empty for a list, a watch or a create without one in the URL.
    pub name: String,
    /// The answer's HTTP code (0 when the log has none).
    pub code: u16,
}

impl Request {
    /// Whether it changes something: create, update, patch, delete, deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(rename = "auditID")]
    audit_id: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: User,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
    #[serde(default)]
    request_received_timestamp: String,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(default)]
    code: u16,
}

/// `2026-12-02T10:16:54.123456Z` as microseconds since the Unix epoch.
fn micros(timestamp: &str) -> Option<i64> {
    timestamp
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(k8s_openapi::jiff::Timestamp::as_microsecond)
}

/// Every request in the audit files under a control plane's directory, once each (a watch logs
/// two stages), in the order received. Lines cut short by a rotation or a write in progress are
/// skipped.
pub fn read(control_plane_dir: &Path) -> anyhow::Result<Vec<Request>> {
    let dir = dir(control_plane_dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit"))
                && p.extension().is_some_and(|e| e == "log")
        })
        .collect();
    files.sort();
    let mut seen = BTreeSet::new();
    let mut requests = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<Event>(line) else {
                continue;
            };
            if !seen.insert(event.audit_id) {
                continue;
            }
            let object = event.object_ref.unwrap_or_default();
            requests.push(Request {
                received_micros: micros(&event.request_received_timestamp).unwrap_or(0),
                user: event.user.username,
                user_agent: event.user_agent,
                verb: event.verb,
                resource: object.resource,
                subresource: object.subresource,
                namespace: object.namespace,
                name: object.name,
                code: event.response_status.map_or(0, |s| s.code),
            });
        }
    }
    requests.sort_by_key(|r| r.received_micros);
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_become_microseconds_since_the_epoch() {
        assert_eq!(micros("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(micros("1970-01-02T00:00:01.5Z"), Some(86_401_500_000));
        // 2026-12-02T10:16:54.123456Z: 1_796_206_614 seconds after the epoch.
        assert_eq!(
            micros("2026-12-02T10:16:54.123456Z"),
            Some(1_796_206_614_123_456)
        );
        assert_eq!(micros("not a time"), None);
    }

    #[test]
    fn a_watch_logged_at_two_stages_counts_once_and_a_cut_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(super::dir(dir.path())).unwrap();
        let line = |id: &str, stage: &str, verb: &str| {
            format!(
                r#"{{"kind":"Event","level":"Metadata","auditID":"{id}","stage":"{stage}","verb":"{verb}","user":{{"username":"system:serviceaccount:captf-system:captf-controller-manager"}},"userAgent":"manager","objectRef":{{"resource":"secrets","namespace":"n","name":"s"}},"responseStatus":{{"code":200}},"requestReceivedTimestamp":"2026-12-02T10:16:54.000001Z"}}"#
            )
        };
        let text = [
            line("a", "ResponseStarted", "watch"),
            line("b", "ResponseComplete", "get"),
            line("a", "ResponseComplete", "watch"),
            r#"{"kind":"Event","auditID":"c","#.to_owned(),
        ]
        .join("\n");
        std::fs::write(super::dir(dir.path()).join("audit.log"), text).unwrap();
        let requests = read(dir.path()).unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].verb, "watch");
        assert_eq!(requests[1].name, "s");
        assert!(!requests[1].is_write());
        assert_eq!(requests[1].received_micros, 1_796_206_614_000_001);
    }
}
