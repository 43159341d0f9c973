//! The runtime commands, their flags and their order per operation (Runtime Environment
//! "Commands, and their order"; INTERFACE-FACTS §5 "Command sequences per op").
//!
//! Flags: init, plan, apply and destroy (including `-refresh-only`) carry `-input=false
//! -no-color -lock-timeout=<n>s`, init also one `-backend-config=` per value; validate and show
//! carry `-json -no-color`; state push carries `-force -lock-timeout=<n>s`; state list and
//! force-unlock take neither. Every command runs from the generated root, never with `-chdir`.
//!
//! Order: `version -json` first (informational, not a step), then init, force-unlock right after
//! init when asked, then per operation:
//! - apply: validate, plan `-detailed-exitcode -out`, show `-json` (only when the plan exits 2 and
//!   the apply is guarded or approved), apply of the saved plan; a plan exiting 0 ends the run;
//! - plan: validate, plan, show `-json` when the plan exits 2;
//! - with `--plan-text-secret` (a plan Job, an approved apply): show `-no-color` right after
//!   show `-json`, the plan as text for its reviewer;
//! - destroy: destroy; refresh: apply `-refresh-only`;
//! - drift: apply `-refresh-only`, plan `-refresh=false -detailed-exitcode -out`, show `-json`
//!   when the plan exits 2;
//! - restore: state push `-force`, state list.

use std::path::Path;

use crate::cli::Op;

/// The generated root's values file, auto-loaded and also named on the commands that evaluate
/// the configuration.
pub const TFVARS: &str = contract::render::TFVARS_JSON;

/// A step of a run, by its result-document name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepName {
    /// `init`.
    Init,
    /// `force-unlock -force <id>`.
    ForceUnlock,
    /// `validate -json`.
    Validate,
    /// `plan -detailed-exitcode -out`.
    Plan,
    /// `show -json <planfile>`.
    ShowJson,
    /// `show -no-color <planfile>`: the plan as text (`--plan-text-secret`).
    ShowText,
    /// `apply <planfile>`.
    Apply,
    /// `apply -refresh-only -auto-approve`.
    ApplyRefreshOnly,
    /// `destroy -auto-approve`.
    Destroy,
    /// `state push -force`.
    StatePush,
    /// `state list`.
    StateList,
}

impl StepName {
    /// The step's name in the result document and events.
    pub fn as_str(self) -> &'static str {
        match self {
            StepName::Init => "init",
            StepName::ForceUnlock => "force-unlock",
            StepName::Validate => "validate",
            StepName::Plan => "plan",
            StepName::ShowJson => "show-json",
            StepName::ShowText => "show-text",
            StepName::Apply => "apply",
            StepName::ApplyRefreshOnly => "apply-refresh-only",
            StepName::Destroy => "destroy",
            StepName::StatePush => "state-push",
            StepName::StateList => "state-list",
        }
    }

    /// Exit codes that do not fail the step (plan's 2 means "changes present").
    pub fn accepts(self, code: i32) -> bool {
        code == 0 || (self == StepName::Plan && code == 2)
    }
}

/// What a step's standard output is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdout {
    /// Streamed to the pod log.
    Stream,
    /// Streamed to the pod log and kept (validate's diagnostics, state list's addresses).
    StreamAndKeep,
    /// Kept and never written anywhere (`show -json`: a plan document carries every input).
    KeepSecret,
}

/// What the commands need from the run's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `-lock-timeout=<n>s`.
    pub lock_timeout_secs: u64,
    /// init's `-backend-config=` values.
    pub backend_config: Vec<String>,
    /// The saved plan file.
    pub plan_file: String,
    /// The state file a restore pushes.
    pub state_file: String,
    /// The stale lock to force-unlock.
    pub force_unlock: String,
}

impl Settings {
    fn common(&self) -> Vec<String> {
        vec![
            "-input=false".into(),
            "-no-color".into(),
            format!("-lock-timeout={}s", self.lock_timeout_secs),
        ]
    }
}

/// The operation's shape, as far as ordering goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// The operation.
    pub op: Op,
    /// Whether a stale lock is force-unlocked after init.
    pub force_unlock: bool,
    /// Whether an apply reads its plan back (`--guard-deletes` or `--expect-plan`).
    pub reads_plan: bool,
    /// Whether the plan is also rendered as text (`--plan-text-secret`).
    pub plan_text: bool,
}

/// The arguments of `version -json`.
pub fn version_args() -> Vec<String> {
    vec!["version".into(), "-json".into()]
}

/// A step's arguments (after the runtime command itself) and what its stdout is for.
pub fn args(step: StepName, op: Op, s: &Settings) -> (Vec<String>, Stdout) {
    let var_file = format!("-var-file={TFVARS}");
    match step {
        StepName::Init => {
            let mut a = vec!["init".to_owned()];
            a.extend(s.common());
            a.extend(
                s.backend_config
                    .iter()
                    .map(|b| format!("-backend-config={b}")),
            );
            (a, Stdout::Stream)
        }
        StepName::ForceUnlock => (
            vec![
                "force-unlock".into(),
                "-force".into(),
                s.force_unlock.clone(),
            ],
            Stdout::Stream,
        ),
        StepName::Validate => (
            vec!["validate".into(), "-json".into(), "-no-color".into()],
            Stdout::StreamAndKeep,
        ),
        StepName::Plan => {
            let mut a = vec!["plan".to_owned()];
            a.extend(s.common());
            a.push("-detailed-exitcode".into());
            if op == Op::Drift {
                a.push("-refresh=false".into());
            }
            a.push(var_file);
            a.push(format!("-out={}", s.plan_file));
            (a, Stdout::Stream)
        }
        StepName::ShowJson => (
            vec![
                "show".into(),
                "-json".into(),
                "-no-color".into(),
                s.plan_file.clone(),
            ],
            Stdout::KeepSecret,
        ),
        // Kept out of the log like show -json: whatever the runtime does not redact stays in
        // the Secret.
        StepName::ShowText => (
            vec!["show".into(), "-no-color".into(), s.plan_file.clone()],
            Stdout::KeepSecret,
        ),
        StepName::Apply => {
            let mut a = vec!["apply".to_owned()];
            a.extend(s.common());
            a.push(s.plan_file.clone());
            (a, Stdout::Stream)
        }
        StepName::ApplyRefreshOnly => {
            let mut a = vec!["apply".to_owned()];
            a.extend(s.common());
            a.extend(["-refresh-only".into(), "-auto-approve".into(), var_file]);
            (a, Stdout::Stream)
        }
        StepName::Destroy => {
            let mut a = vec!["destroy".to_owned()];
            a.extend(s.common());
            a.extend(["-auto-approve".into(), var_file]);
            (a, Stdout::Stream)
        }
        StepName::StatePush => (
            vec![
                "state".into(),
                "push".into(),
                "-force".into(),
                format!("-lock-timeout={}s", s.lock_timeout_secs),
                s.state_file.clone(),
            ],
            Stdout::Stream,
        ),
        StepName::StateList => (vec!["state".into(), "list".into()], Stdout::StreamAndKeep),
    }
}

/// The arguments as they may be logged: `-backend-config` values are reduced to their key (a
/// backend value may be a credential).
pub fn loggable(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| match a.strip_prefix("-backend-config=") {
            Some(kv) => {
                let key = kv.split_once('=').map_or("<file>", |(k, _)| k);
                format!("-backend-config={key}=…")
            }
            None => a.clone(),
        })
        .collect()
}

/// The step after init (and force-unlock).
fn after_init(op: Op) -> StepName {
    match op {
        Op::Apply | Op::Plan => StepName::Validate,
        Op::Destroy => StepName::Destroy,
        Op::Refresh | Op::Drift => StepName::ApplyRefreshOnly,
        Op::Restore => StepName::StatePush,
    }
}

/// The first step of every operation.
pub fn first(_flow: Flow) -> StepName {
    StepName::Init
}

/// The step after `done` succeeded with `exit`, or `None` when the run is complete. The guard
/// and approval decisions between show-json and apply are made by the caller.
pub fn next(flow: Flow, done: StepName, exit: i32) -> Option<StepName> {
    match done {
        StepName::Init if flow.force_unlock => Some(StepName::ForceUnlock),
        StepName::Init | StepName::ForceUnlock => Some(after_init(flow.op)),
        StepName::Validate => Some(StepName::Plan),
        StepName::ApplyRefreshOnly => (flow.op == Op::Drift).then_some(StepName::Plan),
        StepName::Plan if exit != 2 => None,
        StepName::Plan => match flow.op {
            Op::Apply if !flow.reads_plan => Some(StepName::Apply),
            _ => Some(StepName::ShowJson),
        },
        StepName::ShowJson if flow.plan_text => Some(StepName::ShowText),
        StepName::ShowJson | StepName::ShowText => {
            (flow.op == Op::Apply).then_some(StepName::Apply)
        }
        StepName::StatePush => Some(StepName::StateList),
        StepName::Apply | StepName::Destroy | StepName::StateList => None,
    }
}

/// The whole sequence for given exit codes (a test and documentation aid): every step
/// succeeds, and plan exits `plan_exit`.
pub fn sequence(flow: Flow, plan_exit: i32) -> Vec<StepName> {
    let mut out = vec![first(flow)];
    while let Some(&last) = out.last() {
        let exit = if last == StepName::Plan { plan_exit } else { 0 };
        match next(flow, last, exit) {
            Some(step) if out.len() < 16 => out.push(step),
            _ => break,
        }
    }
    out
}

/// The saved plan's path.
pub fn plan_file(workdir: &Path) -> String {
    workdir.join("plan.tfplan").display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepName::*;

    fn settings() -> Settings {
        Settings {
            lock_timeout_secs: 300,
            backend_config: vec![
                "secret_suffix=0123456789abcdef-c".into(),
                "namespace=team-a".into(),
                "in_cluster_config=true".into(),
            ],
            plan_file: "/captf/work/plan.tfplan".into(),
            state_file: "/captf/work/restore.tfstate".into(),
            force_unlock: "8c1f-lock".into(),
        }
    }

    fn line(step: StepName, op: Op) -> String {
        args(step, op, &settings()).0.join(" ")
    }

    #[test]
    fn init_carries_the_common_flags_and_every_backend_value() {
        assert_eq!(
            line(Init, Op::Apply),
            "init -input=false -no-color -lock-timeout=300s \
             -backend-config=secret_suffix=0123456789abcdef-c -backend-config=namespace=team-a \
             -backend-config=in_cluster_config=true"
        );
    }

    #[test]
    fn validate_and_show_carry_json_and_no_color_only() {
        assert_eq!(line(Validate, Op::Apply), "validate -json -no-color");
        assert_eq!(
            line(ShowJson, Op::Apply),
            "show -json -no-color /captf/work/plan.tfplan"
        );
        assert_eq!(args(ShowJson, Op::Apply, &settings()).1, Stdout::KeepSecret);
        assert_eq!(
            args(Validate, Op::Apply, &settings()).1,
            Stdout::StreamAndKeep
        );
    }

    #[test]
    fn plan_is_detailed_and_saved_and_drift_does_not_refresh_again() {
        assert_eq!(
            line(Plan, Op::Apply),
            "plan -input=false -no-color -lock-timeout=300s -detailed-exitcode \
             -var-file=terraform.tfvars.json -out=/captf/work/plan.tfplan"
        );
        assert_eq!(
            line(Plan, Op::Drift),
            "plan -input=false -no-color -lock-timeout=300s -detailed-exitcode -refresh=false \
             -var-file=terraform.tfvars.json -out=/captf/work/plan.tfplan"
        );
    }

    #[test]
    fn apply_applies_the_saved_plan() {
        assert_eq!(
            line(Apply, Op::Apply),
            "apply -input=false -no-color -lock-timeout=300s /captf/work/plan.tfplan"
        );
    }

    #[test]
    fn refresh_destroy_and_state_commands() {
        assert_eq!(
            line(ApplyRefreshOnly, Op::Refresh),
            "apply -input=false -no-color -lock-timeout=300s -refresh-only -auto-approve \
             -var-file=terraform.tfvars.json"
        );
        assert_eq!(
            line(Destroy, Op::Destroy),
            "destroy -input=false -no-color -lock-timeout=300s -auto-approve \
             -var-file=terraform.tfvars.json"
        );
        assert_eq!(
            line(StatePush, Op::Restore),
            "state push -force -lock-timeout=300s /captf/work/restore.tfstate"
        );
        assert_eq!(line(StateList, Op::Restore), "state list");
        assert_eq!(
            line(ForceUnlock, Op::Apply),
            "force-unlock -force 8c1f-lock"
        );
        assert_eq!(version_args().join(" "), "version -json");
    }

    #[test]
    fn backend_values_are_never_logged() {
        let (a, _) = args(Init, Op::Apply, &settings());
        let logged = loggable(&a).join(" ");
        assert!(logged.contains("-backend-config=secret_suffix=…"));
        assert!(!logged.contains("team-a"));
        assert!(!logged.contains("0123456789abcdef"));
    }

    fn flow(op: Op) -> Flow {
        Flow {
            op,
            force_unlock: false,
            reads_plan: false,
            plan_text: false,
        }
    }

    #[test]
    fn the_plan_text_follows_show_json_and_only_a_plan_with_changes_has_one() {
        let plan = Flow {
            plan_text: true,
            ..flow(Op::Plan)
        };
        assert_eq!(
            sequence(plan, 2),
            vec![Init, Validate, Plan, ShowJson, ShowText]
        );
        assert_eq!(sequence(plan, 0), vec![Init, Validate, Plan]);
        let approved = Flow {
            reads_plan: true,
            plan_text: true,
            ..flow(Op::Apply)
        };
        assert_eq!(
            sequence(approved, 2),
            vec![Init, Validate, Plan, ShowJson, ShowText, Apply]
        );
        assert_eq!(
            line(ShowText, Op::Plan),
            "show -no-color /captf/work/plan.tfplan"
        );
        assert_eq!(args(ShowText, Op::Plan, &settings()).1, Stdout::KeepSecret);
    }

    #[test]
    fn apply_sequences() {
        let plain = flow(Op::Apply);
        assert_eq!(sequence(plain, 2), vec![Init, Validate, Plan, Apply]);
        assert_eq!(sequence(plain, 0), vec![Init, Validate, Plan]);
        let guarded = Flow {
            reads_plan: true,
            ..plain
        };
        assert_eq!(
            sequence(guarded, 2),
            vec![Init, Validate, Plan, ShowJson, Apply]
        );
        assert_eq!(sequence(guarded, 0), vec![Init, Validate, Plan]);
    }

    #[test]
    fn other_sequences() {
        assert_eq!(
            sequence(flow(Op::Plan), 2),
            vec![Init, Validate, Plan, ShowJson]
        );
        assert_eq!(sequence(flow(Op::Plan), 0), vec![Init, Validate, Plan]);
        assert_eq!(sequence(flow(Op::Destroy), 0), vec![Init, Destroy]);
        assert_eq!(sequence(flow(Op::Refresh), 0), vec![Init, ApplyRefreshOnly]);
        assert_eq!(
            sequence(flow(Op::Drift), 2),
            vec![Init, ApplyRefreshOnly, Plan, ShowJson]
        );
        assert_eq!(
            sequence(flow(Op::Drift), 0),
            vec![Init, ApplyRefreshOnly, Plan]
        );
        assert_eq!(
            sequence(flow(Op::Restore), 0),
            vec![Init, StatePush, StateList]
        );
    }

    #[test]
    fn force_unlock_runs_right_after_init() {
        for op in [Op::Apply, Op::Destroy, Op::Restore, Op::Drift] {
            let f = Flow {
                force_unlock: true,
                ..flow(op)
            };
            let seq = sequence(f, 2);
            assert_eq!(&seq[..2], &[Init, ForceUnlock], "{op:?}");
        }
    }

    #[test]
    fn only_plan_accepts_exit_2() {
        assert!(Plan.accepts(2));
        assert!(Plan.accepts(0));
        assert!(!Plan.accepts(1));
        assert!(!Apply.accepts(2));
        assert!(!Validate.accepts(1));
    }
}
