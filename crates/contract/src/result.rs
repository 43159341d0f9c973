//! The result document (Runtime Environment "What a failed step reports"; INTERFACE-FACTS §5
//! "Result document"): how a run ended, written as the container's termination message and as
//! the last line of stdout. One JSON object of at most [`MAX_RESULT_BYTES`]; when larger, parts
//! are shed in a fixed order — `changes`, then the error summary, then the plan and drift
//! resource lists (from their ends), then the steps (oldest first) — so the plan hash and counts
//! always survive.
//!
//! It never carries raw process output or an input value: step names, exit codes, durations,
//! counts, resource addresses with actions, hashes, and the curated summary.

use serde::{Deserialize, Serialize};

/// The kubelet reads at most this many bytes of a termination message.
pub const MAX_RESULT_BYTES: usize = 4096;
/// The document's `version`.
pub const RESULT_VERSION: u32 = 1;

/// Cuts `text` to at most `max` bytes on a character boundary, marking a cut with `…`.
pub fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = "…";
    let mut end = max.saturating_sub(ellipsis.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultDocument {
    /// Always [`RESULT_VERSION`].
    pub version: u32,
    /// The operation.
    pub op: String,
    /// The image the run executed.
    pub image: ImageInfo,
    /// The runtime command and version.
    pub runtime: RuntimeInfo,
    /// The runtime commands run, in order.
    pub steps: Vec<StepRecord>,
    /// What a drift run found (`null` for other operations).
    pub drift: Option<DriftDoc>,
    /// Why the run failed (`null` on success).
    pub error: Option<ErrorDoc>,
    /// Resource counts from the apply or destroy summary line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangesDoc>,
    /// The plan an apply or plan run read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanDoc>,
}

/// The image of the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageInfo {
    /// `--image`, as given.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Whether the image ships a provider mirror.
    pub providers_mirror: bool,
}

/// The runtime of the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeInfo {
    /// The runtime command (`--bin`).
    pub command: Vec<String>,
    /// The version `version -json` reported; empty when it could not say.
    pub version: String,
}

/// One runtime command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// The step name (`init`, `plan`, `show-json`, ...).
    pub name: String,
    /// The exit code (128 + signal when it was killed by one).
    pub exit: i32,
    /// Wall time, in seconds, to the millisecond.
    pub seconds: f64,
}

impl StepRecord {
    /// A record with the duration rounded to milliseconds.
    pub fn new(name: &str, exit: i32, elapsed: std::time::Duration) -> Self {
        Self {
            name: name.to_owned(),
            exit,
            seconds: (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        }
    }
}

/// What a drift check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftDoc {
    /// Whether any resource differs.
    pub detected: bool,
    /// Resources to add.
    pub add: u64,
    /// Resources to change.
    pub change: u64,
    /// Resources to destroy.
    pub destroy: u64,
    /// Resources to forget (absent from documents of runners that did not count them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forget: u64,
    /// Up to 20 drifted addresses.
    pub resources: Vec<String>,
}

/// How a run ended when it did not succeed: `image-layout`, `step`, `interrupted`, `blocked` or
/// `plan-changed` (the result document's `error.kind` and `status.lastRun.error.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum ErrorKind {
    /// The image breaks the image contract.
    #[serde(rename = "image-layout")]
    ImageLayout,
    /// A step failed (or the runner could not prepare one).
    #[serde(rename = "step")]
    Step,
    /// The run was stopped by SIGTERM.
    #[serde(rename = "interrupted")]
    Interrupted,
    /// A guarded apply stopped before a destructive plan.
    #[serde(rename = "blocked")]
    Blocked,
    /// An approved apply planned differently.
    #[serde(rename = "plan-changed")]
    PlanChanged,
}

impl ErrorKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ImageLayout => "image-layout",
            ErrorKind::Step => "step",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Blocked => "blocked",
            ErrorKind::PlanChanged => "plan-changed",
        }
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDoc {
    /// The kind.
    pub kind: ErrorKind,
    /// The failing step, when there is one (`null` otherwise).
    pub step: Option<String>,
    /// The curated summary (at most 512 bytes); shed first when the document is too large.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The failing step's exit code, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Resource counts from the runtime's apply or destroy summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangesDoc {
    /// Added.
    pub add: u64,
    /// Changed.
    pub change: u64,
    /// Destroyed.
    pub destroy: u64,
    /// Forgotten (removed from state, left in place).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forget: u64,
    /// Imported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub import: u64,
}

/// A plan read back with `show -json`, without any value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanDoc {
    /// `p1:<sha256>` of the sorted `address|actions` lines.
    pub hash: String,
    /// Resources to add.
    pub add: u64,
    /// Resources to change.
    pub change: u64,
    /// Resources to destroy.
    pub destroy: u64,
    /// Resources to forget (removed from state, left in place).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forget: u64,
    /// Root outputs that change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outputs: u64,
    /// Resources imported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub import: u64,
    /// Resources moved.
    #[serde(default, skip_serializing_if = "is_zero", rename = "move")]
    pub moved: u64,
    /// Up to 50 `"<address> (<action>)"` entries (for a blocked apply: the destructive ones).
    pub resources: Vec<String>,
    /// Whether entries were left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The Secret holding this plan rendered as text (`--plan-text-secret`), once stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_secret: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl PlanDoc {
    /// The plan document of an analysis; `destructive_only` lists only the changes that delete.
    pub fn from_analysis(a: &crate::plan::PlanAnalysis, destructive_only: bool) -> Self {
        let (resources, truncated) = if destructive_only {
            a.destructive_resources()
        } else {
            a.resources()
        };
        Self {
            hash: a.hash.clone(),
            add: a.add,
            change: a.change,
            destroy: a.destroy,
            forget: a.forget,
            outputs: a.outputs,
            import: a.import,
            moved: a.moved,
            resources,
            truncated,
            text_secret: None,
        }
    }
}

impl DriftDoc {
    /// The drift document of an analysis.
    pub fn from_analysis(a: &crate::plan::PlanAnalysis) -> Self {
        let d = a.drift_summary();
        Self {
            detected: d.detected,
            add: d.add,
            change: d.change,
            destroy: d.destroy,
            forget: d.forget,
            resources: d.resources,
        }
    }
}

impl ResultDocument {
    /// An empty document for an operation.
    pub fn new(op: &str, image: ImageInfo, runtime: RuntimeInfo) -> Self {
        Self {
            version: RESULT_VERSION,
            op: op.to_owned(),
            image,
            runtime,
            steps: Vec::new(),
            drift: None,
            error: None,
            changes: None,
            plan: None,
        }
    }

    fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                r#"{{"version":{RESULT_VERSION},"op":{:?},"error":{{"kind":"step","step":null}}}}"#,
                self.op
            )
        })
    }

    /// The document as one JSON line of at most [`MAX_RESULT_BYTES`], shed in the documented
    /// order when larger.
    pub fn to_json_capped(&self) -> String {
        let mut doc = self.clone();
        let fits = |d: &ResultDocument| {
            let j = d.json();
            (j.len() <= MAX_RESULT_BYTES).then_some(j)
        };
        if let Some(j) = fits(&doc) {
            return j;
        }
        doc.changes = None;
        if let Some(j) = fits(&doc) {
            return j;
        }
        if let Some(e) = doc.error.as_mut() {
            e.summary = None;
        }
        if let Some(j) = fits(&doc) {
            return j;
        }
        loop {
            let plan_len = doc.plan.as_ref().map_or(0, |p| p.resources.len());
            let drift_len = doc.drift.as_ref().map_or(0, |d| d.resources.len());
            if plan_len == 0 && drift_len == 0 {
                break;
            }
            if plan_len >= drift_len {
                if let Some(p) = doc.plan.as_mut() {
                    p.resources.pop();
                    p.truncated = true;
                }
            } else if let Some(d) = doc.drift.as_mut() {
                d.resources.pop();
            }
            if let Some(j) = fits(&doc) {
                return j;
            }
        }
        while !doc.steps.is_empty() {
            doc.steps.remove(0);
            if let Some(j) = fits(&doc) {
                return j;
            }
        }
        // Only oversized flag values are left: cut them.
        doc.image.reference = cap(&doc.image.reference, 256);
        doc.runtime.version = cap(&doc.runtime.version, 64);
        doc.runtime.command.truncate(1);
        for c in &mut doc.runtime.command {
            *c = cap(c, 256);
        }
        if let Some(e) = doc.error.as_mut() {
            e.step = e.step.as_deref().map(|s| cap(s, 64));
        }
        fits(&doc).unwrap_or_else(|| {
            doc.image.reference.clear();
            doc.runtime.command.clear();
            doc.json()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn doc() -> ResultDocument {
        let mut d = ResultDocument::new(
            "apply",
            ImageInfo {
                reference: "registry.example/cluster:1.0".into(),
                providers_mirror: true,
            },
            RuntimeInfo {
                command: vec!["/captf/runtime".into()],
                version: "1.12.6".into(),
            },
        );
        d.steps
            .push(StepRecord::new("init", 0, Duration::from_millis(1234)));
        d
    }

    #[test]
    fn a_successful_apply_has_the_documented_shape() {
        let mut d = doc();
        d.changes = Some(ChangesDoc {
            add: 1,
            ..ChangesDoc::default()
        });
        let v: serde_json::Value = serde_json::from_str(&d.to_json_capped()).expect("json");
        assert_eq!(
            v,
            serde_json::json!({
                "version": 1,
                "op": "apply",
                "image": {"ref": "registry.example/cluster:1.0", "providersMirror": true},
                "runtime": {"command": ["/captf/runtime"], "version": "1.12.6"},
                "steps": [{"name": "init", "exit": 0, "seconds": 1.234}],
                "drift": null,
                "error": null,
                "changes": {"add": 1, "change": 0, "destroy": 0}
            })
        );
    }

    #[test]
    fn a_failure_names_kind_step_summary_and_exit_code() {
        let mut d = doc();
        d.error = Some(ErrorDoc {
            kind: ErrorKind::PlanChanged,
            step: None,
            summary: Some("the plan changed".into()),
            exit_code: None,
        });
        d.plan = Some(PlanDoc {
            hash: "p1:00".into(),
            add: 1,
            resources: vec!["module.role.terraform_data.x (create)".into()],
            ..PlanDoc::default()
        });
        let v: serde_json::Value = serde_json::from_str(&d.to_json_capped()).expect("json");
        assert_eq!(
            v["error"],
            serde_json::json!({"kind": "plan-changed", "step": null, "summary": "the plan changed"})
        );
        assert_eq!(
            v["plan"],
            serde_json::json!({"hash": "p1:00", "add": 1, "change": 0, "destroy": 0,
                               "resources": ["module.role.terraform_data.x (create)"]})
        );
        let back: ResultDocument = serde_json::from_value(v).expect("round trip");
        assert_eq!(back.error.map(|e| e.kind), Some(ErrorKind::PlanChanged));
    }

    fn oversized() -> ResultDocument {
        let mut d = doc();
        for i in 0..12 {
            d.steps
                .push(StepRecord::new(&format!("step-{i}"), 0, Duration::ZERO));
        }
        d.changes = Some(ChangesDoc::default());
        d.error = Some(ErrorDoc {
            kind: ErrorKind::Blocked,
            step: Some("plan".into()),
            summary: Some("x".repeat(500)),
            exit_code: Some(2),
        });
        d.plan = Some(PlanDoc {
            hash: format!("p1:{}", "a".repeat(64)),
            add: 60,
            destroy: 60,
            resources: (0..50)
                .map(|i| {
                    format!(
                        "module.role.terraform_data.item[\"{i:03}-{}\"] (replace)",
                        "k".repeat(40)
                    )
                })
                .collect(),
            ..PlanDoc::default()
        });
        d
    }

    #[test]
    fn shrinking_sheds_changes_then_summary_then_resources_and_keeps_hash_and_counts() {
        let doc = oversized();
        let json = doc.to_json_capped();
        assert!(json.len() <= MAX_RESULT_BYTES, "{}", json.len());
        let v: ResultDocument = serde_json::from_str(&json).expect("json");
        assert!(v.changes.is_none());
        let e = v.error.expect("error kept");
        assert_eq!(e.summary, None);
        assert_eq!(e.kind, ErrorKind::Blocked);
        assert_eq!(e.step.as_deref(), Some("plan"));
        let plan = v.plan.expect("plan kept");
        assert_eq!(
            plan.hash,
            doc.plan
                .as_ref()
                .map(|p| p.hash.clone())
                .unwrap_or_default()
        );
        assert_eq!((plan.add, plan.destroy), (60, 60));
        assert!(plan.truncated);
        assert!(!plan.resources.is_empty() && plan.resources.len() < 50);
        // The resource list is cut before any step is dropped.
        assert_eq!(v.steps.len(), doc.steps.len());
    }

    #[test]
    fn a_document_that_fits_keeps_everything() {
        let mut d = oversized();
        d.plan = None;
        let j = d.to_json_capped();
        let v: ResultDocument = serde_json::from_str(&j).expect("json");
        assert_eq!(v, d);
    }

    #[test]
    fn steps_go_last_oldest_first_and_absurd_flags_are_cut() {
        let mut d = oversized();
        d.image.reference = "r".repeat(5000);
        d.runtime.command = vec!["c".repeat(3000), "d".repeat(3000)];
        let j = d.to_json_capped();
        assert!(j.len() <= MAX_RESULT_BYTES, "{}", j.len());
        let v: ResultDocument = serde_json::from_str(&j).expect("json");
        assert!(
            v.plan
                .as_ref()
                .is_some_and(|p| p.resources.is_empty() && p.truncated)
        );
        assert_eq!(v.plan.map(|p| p.add), Some(60));
        assert_eq!(v.error.map(|e| e.kind), Some(ErrorKind::Blocked));
    }

    #[test]
    fn drift_lists_shrink_too() {
        let mut d = doc();
        d.op = "drift".into();
        d.drift = Some(DriftDoc {
            detected: true,
            add: 0,
            change: 20,
            destroy: 0,
            forget: 0,
            resources: (0..20)
                .map(|i| format!("module.role.x{i}.{}", "y".repeat(300)))
                .collect(),
        });
        let j = d.to_json_capped();
        assert!(j.len() <= MAX_RESULT_BYTES);
        let v: ResultDocument = serde_json::from_str(&j).expect("json");
        let drift = v.drift.expect("drift");
        assert!(drift.detected);
        assert_eq!(drift.change, 20);
        assert!(drift.resources.len() < 20);
    }
}
