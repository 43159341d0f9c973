//! Analysis of a saved plan as `show -json` prints it (spec: Plan Approval, Drift "Read the
//! results", Contract Changelog "Plan preview and approval" and "Destructive-plan guard"; the
//! runner's result document `plan` and `drift` objects).
//!
//! Only addresses, modes and actions are deserialized: `before`/`after` values and everything else
//! in the document are skipped unread, so no value can leak from a plan into status or logs.
//!
//! Counting follows the runtime's own summary line ("Plan: N to add, M to change, K to destroy"):
//! a replacement in either order is one add and one destroy, `forget, create` (OpenTofu) and
//! `create, forget` (Terraform's CreateThenForget) are one add and one forget, a read or no-op is not counted, ephemeral resources are ignored, and the deletion of a
//! data source from state is not shown or counted. Imports and moves are counted over the same
//! changes, as the runtime does when it renders them.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// The most `"<address> (<action>)"` entries kept.
pub const MAX_PLAN_RESOURCES: usize = 50;
/// The longest entry kept, in characters (`status.plan.resources[]` allows 600).
pub const MAX_PLAN_RESOURCE_ENTRY: usize = 600;
/// The most drifted addresses kept.
pub const MAX_DRIFT_RESOURCES: usize = 20;
/// The longest drifted address kept, in characters (`status.lastRun.drift.resources[]`).
pub const MAX_DRIFT_RESOURCE_ENTRY: usize = 512;
/// The counts as the runtime's plan summary line says them: `N to add, M to change, K to
/// destroy`, then `, F to forget` when the plan forgets resources (only then, as the runtime
/// prints it).
pub fn counts_phrase(add: u64, change: u64, destroy: u64, forget: u64) -> String {
    let mut s = format!("{add} to add, {change} to change, {destroy} to destroy");
    if forget > 0 {
        use std::fmt::Write as _;
        let _ = write!(s, ", {forget} to forget");
    }
    s
}

/// The plan hash scheme prefix.
pub const PLAN_HASH_PREFIX: &str = "p1:";

/// The key of the plan-text Secret's data (Plan Approval, "Reading the plan").
pub const PLAN_TEXT_KEY: &str = "plan.txt";
/// The most bytes of plan text stored: half of a Secret's 1 MiB, so the Secret stays far from
/// the limit once base64-encoded.
pub const PLAN_TEXT_MAX_BYTES: usize = 512 * 1024;

/// The plan text as stored: `text` whole when it fits [`PLAN_TEXT_MAX_BYTES`], else its first
/// whole lines and a last line saying how much was left out.
pub fn plan_text(text: &str) -> String {
    if text.len() <= PLAN_TEXT_MAX_BYTES {
        return text.to_owned();
    }
    let note = format!(
        "\n… truncated: the plan's text is {} bytes and at most {} are stored; \
         the plan Job's log has all of it while the Job is kept.\n",
        text.len(),
        PLAN_TEXT_MAX_BYTES
    );
    let room = PLAN_TEXT_MAX_BYTES.saturating_sub(note.len());
    let mut cut = room.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let kept = match text[..cut].rfind('\n') {
        Some(end) => &text[..=end],
        None => &text[..cut],
    };
    format!("{}{}", kept.trim_end_matches('\n'), note)
}

/// A resource change's action, as the runtime decodes the `actions` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// `["no-op"]`.
    NoOp,
    /// `["create"]`.
    Create,
    /// `["read"]`.
    Read,
    /// `["update"]`.
    Update,
    /// `["delete"]`.
    Delete,
    /// `["delete", "create"]`: the default replacement.
    DeleteThenCreate,
    /// `["create", "delete"]`: `create_before_destroy`.
    CreateThenDelete,
    /// `["forget"]`: removed from state, left in place.
    Forget,
    /// `["forget", "create"]`: OpenTofu's replacement under `lifecycle { destroy = false }`.
    ForgetThenCreate,
    /// `["create", "forget"]`: Terraform's replacement under `lifecycle { destroy = false }`
    /// (CreateThenForget, newer Terraform releases).
    CreateThenForget,
}

impl Action {
    /// Decodes an `actions` list; `None` for a combination the runtime does not produce.
    pub fn from_actions<S: AsRef<str>>(actions: &[S]) -> Option<Self> {
        let words: Vec<&str> = actions.iter().map(AsRef::as_ref).collect();
        Some(match words.as_slice() {
            ["no-op"] => Self::NoOp,
            ["create"] => Self::Create,
            ["read"] => Self::Read,
            ["update"] => Self::Update,
            ["delete"] => Self::Delete,
            ["delete", "create"] => Self::DeleteThenCreate,
            ["create", "delete"] => Self::CreateThenDelete,
            ["forget"] => Self::Forget,
            ["forget", "create"] => Self::ForgetThenCreate,
            ["create", "forget"] => Self::CreateThenForget,
            _ => return None,
        })
    }

    /// The `actions` list as the plan spells it, joined with commas (the form hashed).
    pub fn actions_str(self) -> &'static str {
        match self {
            Self::NoOp => "no-op",
            Self::Create => "create",
            Self::Read => "read",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::DeleteThenCreate => "delete,create",
            Self::CreateThenDelete => "create,delete",
            Self::Forget => "forget",
            Self::ForgetThenCreate => "forget,create",
            Self::CreateThenForget => "create,forget",
        }
    }

    /// The one-word label of a `"<address> (<action>)"` entry: create, update, delete, replace,
    /// read or forget (`forget, create` and `create, forget` are replacements that delete nothing).
    pub fn label(self) -> &'static str {
        match self {
            Self::NoOp => "no-op",
            Self::Create => "create",
            Self::Read => "read",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::DeleteThenCreate
            | Self::CreateThenDelete
            | Self::ForgetThenCreate
            | Self::CreateThenForget => "replace",
            Self::Forget => "forget",
        }
    }

    /// Whether the action deletes a real object: a removal, or a replacement in either order.
    pub fn deletes(self) -> bool {
        matches!(
            self,
            Self::Delete | Self::DeleteThenCreate | Self::CreateThenDelete
        )
    }
}

/// One counted change: an address and what happens to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlannedChange {
    /// The resource instance address (`module.role.terraform_data.x["a"]`).
    pub address: String,
    /// The action.
    pub action: Action,
}

/// What a plan does, without any value from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlanAnalysis {
    /// Resources to add (creates and replacements).
    pub add: u64,
    /// Resources to update in place.
    pub change: u64,
    /// Resources to destroy (deletes and replacements).
    pub destroy: u64,
    /// Resources to forget.
    pub forget: u64,
    /// Resources being imported.
    pub import: u64,
    /// Resources whose address moves.
    pub moved: u64,
    /// Root outputs whose value changes.
    pub outputs: u64,
    /// Whether any change deletes a real object (the destructive-plan guard's test).
    pub destructive: bool,
    /// Every non-no-op change, sorted by address.
    pub changes: Vec<PlannedChange>,
    /// The plan hash, `p1:<sha256 hex>` of the sorted `address|actions` lines.
    pub hash: String,
}

impl PlanAnalysis {
    /// Whether the plan has changes in Plan Approval's sense: its hash is not the empty list's
    /// (see [`plan_hash_has_changes`]).
    pub fn has_changes(&self) -> bool {
        plan_hash_has_changes(&self.hash)
    }

    /// Whether the plan changes any resource (outputs alone do not count).
    pub fn has_resource_changes(&self) -> bool {
        self.changes.iter().any(|c| c.action != Action::Read)
    }

    /// Up to 50 `"<address> (<action>)"` entries and whether more were left out.
    pub fn resources(&self) -> (Vec<String>, bool) {
        entries(
            self.changes.iter(),
            MAX_PLAN_RESOURCES,
            MAX_PLAN_RESOURCE_ENTRY,
        )
    }

    /// Up to 50 entries for the changes that delete something (for `DestructivePlanBlocked`).
    pub fn destructive_resources(&self) -> (Vec<String>, bool) {
        entries(
            self.changes.iter().filter(|c| c.action.deletes()),
            MAX_PLAN_RESOURCES,
            MAX_PLAN_RESOURCE_ENTRY,
        )
    }

    /// The drift a drift Job reports from this plan: the counts and up to 20 addresses of the
    /// resources that differ (reads are not drift).
    pub fn drift_summary(&self) -> DriftSummary {
        let mut resources = Vec::new();
        for change in self.changes.iter().filter(|c| c.action != Action::Read) {
            if resources.len() == MAX_DRIFT_RESOURCES {
                break;
            }
            resources.push(truncate_chars(&change.address, MAX_DRIFT_RESOURCE_ENTRY));
        }
        DriftSummary {
            detected: self.has_resource_changes(),
            add: self.add,
            change: self.change,
            destroy: self.destroy,
            forget: self.forget,
            resources,
        }
    }
}

/// The drift found by a drift Job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DriftSummary {
    /// Whether the plan changes any resource.
    pub detected: bool,
    /// Resources to add.
    pub add: u64,
    /// Resources to change.
    pub change: u64,
    /// Resources to destroy.
    pub destroy: u64,
    /// Resources to forget (removed from state, left in place).
    pub forget: u64,
    /// Up to 20 affected addresses, sorted.
    pub resources: Vec<String>,
}

/// Why a document is not a plan this analysis can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Not JSON, or not the shape of `show -json` output.
    #[error("the plan is not valid plan JSON (line {line}, column {column})")]
    Malformed {
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
    },
    /// A resource change with an `actions` list the runtime never produces.
    #[error("resource change {index} has an unknown actions list")]
    UnknownActions {
        /// Its position in `resource_changes`.
        index: usize,
    },
}

/// The plan hash of a set of changes: `p1:` and the SHA-256 hex of the lines
/// `<address>|<actions joined by ",">`, each ending in a newline, sorted bytewise. A plan without
/// changes hashes the empty string.
pub fn plan_hash<'a, I>(changes: I) -> String
where
    I: IntoIterator<Item = &'a PlannedChange>,
{
    let mut lines: Vec<String> = changes
        .into_iter()
        .filter(|c| c.action != Action::NoOp)
        .map(|c| format!("{}|{}\n", c.address, c.action.actions_str()))
        .collect();
    lines.sort_unstable();
    let mut hasher = Sha256::new();
    for line in &lines {
        hasher.update(line.as_bytes());
    }
    format!("{PLAN_HASH_PREFIX}{}", hex::encode(hasher.finalize()))
}

/// The plan hash of the empty change list: what a plan without changes hashes to.
pub fn empty_plan_hash() -> String {
    plan_hash(std::iter::empty())
}

/// Whether a plan with this hash has changes, in the sense Plan Approval gives "no changes": a
/// plan has none exactly when its hash equals the hash of the empty change list. Nothing else
/// decides it, not the add/change/destroy counts: a plan that only forgets resources (drops them
/// from state) has changes and needs an approval under `applyPolicy: Manual`. A move or an import
/// whose action is `no-op`, and a change of outputs alone, are not hashed (the hash covers the
/// non-no-op changes), so a plan made only of those has no changes.
pub fn plan_hash_has_changes(plan_hash: &str) -> bool {
    plan_hash != empty_plan_hash()
}

/// Analyses `show -json` output.
pub fn analyze_plan(json: &[u8]) -> Result<PlanAnalysis, PlanError> {
    if !is_json_object(json) {
        return Err(PlanError::Malformed { line: 1, column: 1 });
    }
    let plan: RawPlan = serde_json::from_slice(json).map_err(|e| PlanError::Malformed {
        line: e.line(),
        column: e.column(),
    })?;
    let mut analysis = PlanAnalysis::default();
    for (index, rc) in plan
        .resource_changes
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let action =
            Action::from_actions(&rc.change.actions).ok_or(PlanError::UnknownActions { index })?;
        let mode = rc.mode.unwrap_or(Mode::Managed);
        if mode == Mode::Ephemeral || (mode == Mode::Data && action == Action::Delete) {
            continue;
        }
        let moved = rc
            .previous_address
            .as_deref()
            .is_some_and(|p| !p.is_empty() && p != rc.address);
        let importing = rc.change.importing.is_some();
        if action == Action::NoOp && !moved && !importing {
            continue;
        }
        analysis.import += u64::from(importing);
        analysis.moved += u64::from(moved);
        match action {
            Action::Create => analysis.add += 1,
            Action::Update => analysis.change += 1,
            Action::Delete => analysis.destroy += 1,
            Action::DeleteThenCreate | Action::CreateThenDelete => {
                analysis.add += 1;
                analysis.destroy += 1;
            }
            Action::ForgetThenCreate | Action::CreateThenForget => {
                analysis.add += 1;
                analysis.forget += 1;
            }
            Action::Forget => analysis.forget += 1,
            Action::Read | Action::NoOp => {}
        }
        analysis.destructive |= action.deletes();
        if action != Action::NoOp {
            analysis.changes.push(PlannedChange {
                address: rc.address,
                action,
            });
        }
    }
    analysis.outputs = plan
        .output_changes
        .unwrap_or_default()
        .values()
        .filter(|o| !matches!(Action::from_actions(&o.actions), Some(Action::NoOp)))
        .count() as u64;
    analysis.changes.sort();
    analysis.hash = plan_hash(&analysis.changes);
    Ok(analysis)
}

/// Whether the document's first significant byte opens an object (the derive would otherwise
/// also accept an array, field by field in order).
pub(crate) fn is_json_object(json: &[u8]) -> bool {
    json.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{')
}

fn entries<'a, I>(changes: I, max: usize, max_chars: usize) -> (Vec<String>, bool)
where
    I: Iterator<Item = &'a PlannedChange>,
{
    let mut out = Vec::new();
    let mut truncated = false;
    for change in changes {
        if out.len() == max {
            truncated = true;
            break;
        }
        let label = change.action.label();
        // Room for " (" + label + ")".
        let room = max_chars.saturating_sub(label.len() + 3);
        out.push(format!(
            "{} ({label})",
            truncate_chars(&change.address, room)
        ));
    }
    (out, truncated)
}

/// Cuts `s` to at most `max` characters, marking a cut with a trailing ellipsis.
fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[derive(Deserialize)]
struct RawPlan {
    #[serde(default)]
    resource_changes: Option<Vec<RawResourceChange>>,
    #[serde(default)]
    output_changes: Option<BTreeMap<String, RawChange>>,
}

#[derive(Deserialize)]
struct RawResourceChange {
    address: String,
    #[serde(default)]
    mode: Option<Mode>,
    #[serde(default)]
    previous_address: Option<String>,
    change: RawChange,
}

/// `change`: only `actions` and whether `importing` is set; `before`, `after` and every other
/// field are skipped unread.
#[derive(Deserialize)]
struct RawChange {
    actions: Vec<String>,
    #[serde(default)]
    importing: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Managed,
    Data,
    Ephemeral,
    #[serde(other)]
    Other,
}

impl fmt::Display for PlannedChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.address, self.action.label())
    }
}

#[cfg(test)]
mod plan_text_tests {
    use super::*;

    #[test]
    fn a_plan_text_that_fits_is_stored_whole() {
        let text =
            "  # terraform_data.a will be created\n  + resource \"terraform_data\" \"a\" {}\n";
        assert_eq!(plan_text(text), text);
        let exact = "x".repeat(PLAN_TEXT_MAX_BYTES);
        assert_eq!(plan_text(&exact), exact);
    }

    #[test]
    fn a_long_plan_text_keeps_whole_lines_and_says_how_long_it_was() {
        let line = "  ~ attribute = \"é\" -> \"ü\"\n";
        let text = line.repeat(PLAN_TEXT_MAX_BYTES / line.len() + 100);
        let stored = plan_text(&text);
        assert!(stored.len() <= PLAN_TEXT_MAX_BYTES, "{}", stored.len());
        let (kept, note) = stored.rsplit_once("\n… truncated: ").unwrap();
        assert!(text.starts_with(kept), "a prefix of the text");
        assert!(kept.ends_with('"'), "whole lines only");
        assert!(note.starts_with(&format!("the plan's text is {} bytes", text.len())));
        assert!(note.ends_with("while the Job is kept.\n"));
    }
}
