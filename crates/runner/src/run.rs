//! `runner run`: one operation from the image-layout check to the result document (Runtime
//! Environment; Plan Approval; Drift; Terraform State "Restore").
//!
//! Layout check → generated root, `cli.tfrc` and environment → `version -json` → the
//! operation's steps one at a time (see [`crate::steps`]) → result document, events, exit code.
//! The destructive-plan guard and the approved-plan check sit between `show -json` and the apply
//! (see [`decide`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use api::constants::events::runner as reasons;
use contract::plan::{PlanAnalysis, analyze_plan, plan_hash};
use contract::web_identity::{GCP_CREDENTIALS_FILE, WebIdentity};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::cli::{EXIT_FAILURE, EXIT_OK, EventObject, Op, RunArgs};
use crate::events::{EventSink, EventType};
use crate::exec::{self, Finished, Invocation};
use crate::result::{
    ChangesDoc, DriftDoc, ErrorDoc, ErrorKind, ImageInfo, PlanDoc, ResultDocument, RuntimeInfo,
    StepRecord,
};
use crate::steps::{self, Flow, Settings, StepName};
use crate::summary::{self, Redactor};
use crate::{env, layout, output, plan_text, root, tfrc};

/// How long queued events may take to post at the end of a run (shorter when interrupted: the
/// pod's grace period is nearly spent).
const EVENTS_GRACE: Duration = Duration::from_secs(10);
const EVENTS_GRACE_INTERRUPTED: Duration = Duration::from_secs(3);

/// What an apply does with the plan it read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyDecision {
    /// Apply the saved plan.
    Apply,
    /// Stop: the plan deletes or replaces a resource and its inputs hash is not approved.
    Blocked,
    /// Stop: the plan's hash is not the approved one.
    PlanChanged,
}

/// The guard and approval rules (Plan Approval): an approved plan hash (`--expect-plan`) decides
/// alone — an identical plan applies, deletes included, anything else is `plan-changed`;
/// otherwise a guarded apply (`--guard-deletes`) stops before any delete or replacement unless
/// the approved inputs hash (`--allow-deletes-hash`) is the one this Job renders.
pub fn decide(
    analysis: &PlanAnalysis,
    guard_deletes: bool,
    inputs_hash: &str,
    allow_deletes_hash: &str,
    expect_plan: &str,
) -> ApplyDecision {
    if !expect_plan.is_empty() {
        return if analysis.hash == expect_plan {
            ApplyDecision::Apply
        } else {
            ApplyDecision::PlanChanged
        };
    }
    let approved = !allow_deletes_hash.is_empty() && allow_deletes_hash == inputs_hash;
    if guard_deletes && analysis.destructive && !approved {
        ApplyDecision::Blocked
    } else {
        ApplyDecision::Apply
    }
}

/// The analysis of a plan that exited 0: no change, the hash of the empty change list.
pub fn empty_plan() -> PlanAnalysis {
    PlanAnalysis {
        hash: plan_hash(std::iter::empty()),
        ..PlanAnalysis::default()
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    kind: ErrorKind,
    step: Option<String>,
    summary: String,
    step_exit: Option<i32>,
    exit: i32,
}

impl Failure {
    fn new(kind: ErrorKind, step: Option<&str>, summary: String) -> Self {
        Self {
            kind,
            step: step.map(str::to_owned),
            summary,
            step_exit: None,
            exit: EXIT_FAILURE,
        }
    }
}

/// The process exit code for a failing step: its own code when it exited with one, else 1.
fn failing_exit(f: &Finished) -> i32 {
    if f.exited_normally && f.exit > 0 {
        f.exit
    } else {
        EXIT_FAILURE
    }
}

struct Runner {
    args: RunArgs,
    command: Vec<String>,
    doc: ResultDocument,
    events: EventSink,
    interrupt: watch::Receiver<bool>,
    env: Vec<(OsString, OsString)>,
    root: PathBuf,
    settings: Settings,
    redactor: Redactor,
    /// The identity's credential values alone (what `redactor` starts from): all the plan text
    /// hides besides what the runtime does.
    credentials: Redactor,
    /// The client of the plan-text Secret, made on first use.
    plan_text_client: Option<kube::Client>,
    /// The plan-text Secret this run stored (`--plan-text-secret`).
    plan_text_stored: Option<String>,
}

/// Runs one operation; returns the process exit code. Never panics on any input and always
/// writes a result document.
pub async fn run(args: RunArgs, event_object: Option<EventObject>) -> i32 {
    let started = Instant::now();
    let interrupt = watch_signals();
    let events = match event_object {
        Some(object) => {
            EventSink::start(object, &args.job_name, args.events_kubeconfig.clone()).await
        }
        None => EventSink::disabled(),
    };
    let command = args.command();
    let doc = ResultDocument::new(
        args.op.as_str(),
        ImageInfo {
            reference: args.image.clone(),
            providers_mirror: false,
        },
        RuntimeInfo {
            command: command.clone(),
            version: String::new(),
        },
    );
    let settings = Settings {
        lock_timeout_secs: crate::duration::whole_seconds(args.lock_timeout),
        backend_config: args.backend_config.clone(),
        plan_file: steps::plan_file(&args.workdir),
        state_file: root::state_file(&args.workdir).display().to_string(),
        force_unlock: args.force_unlock.clone(),
    };
    let mut runner = Runner {
        root: root::root_dir(&args.workdir),
        args,
        command,
        doc,
        events,
        interrupt,
        env: Vec::new(),
        settings,
        redactor: Redactor::default(),
        credentials: Redactor::default(),
        plan_text_client: None,
        plan_text_stored: None,
    };
    runner
        .credentials
        .add_credential_files(&runner.args.credentials);
    // A keyless identity's token is a credential too.
    add_token(&mut runner.credentials, &runner.args.web_identity_token);
    runner.redactor = runner.credentials.clone();
    let outcome = runner.execute().await;
    runner.finish(outcome, started).await
}

/// A keyless identity (Identities and Credentials, "Keyless identity"): its web-identity variables
/// into the runtime's environment, over the container's, and Google's credential file into the
/// work directory. Names are logged, never values.
fn export_web_identity(
    identity: &WebIdentity,
    vars: &mut BTreeMap<OsString, OsString>,
    workdir: &Path,
) -> Result<(), root::PrepareError> {
    if !Path::new(&identity.token_file).is_file() {
        warn!(path = %identity.token_file, "the keyless identity's token file is missing; the cloud SDKs will report it");
    }
    let gcp_path = workdir.join(GCP_CREDENTIALS_FILE);
    if let Some(config) = identity.gcp_credential_config() {
        root::write_private(&gcp_path, config.as_bytes())?;
    }
    let exported = identity.environment(&gcp_path.display().to_string());
    let names = env::apply_web_identity(vars, &exported);
    info!(names = ?names, "keyless identity: exported web-identity variables");
    Ok(())
}

/// Also redacts the content of a keyless identity's token file (`--web-identity-token`), read as
/// a credential file is. An empty flag, or a missing or unreadable file, adds nothing: prepare
/// warns about a missing one, and the cloud SDK reports it.
fn add_token(redactor: &mut Redactor, token_file: &str) {
    if !token_file.is_empty() {
        redactor.add_credential_file(Path::new(token_file));
    }
}

/// Sets the returned flag on SIGTERM or SIGINT.
fn watch_signals() -> watch::Receiver<bool> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = watch::channel(false);
    if let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        tokio::spawn(async move {
            let which = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            warn!(signal = which, "stop requested");
            let _ = tx.send(true);
            // Keep the handlers installed (a second signal must not kill the runner).
            loop {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
        });
    } else {
        warn!("cannot install the SIGTERM handler; a stop will kill the run");
    }
    rx
}

impl Runner {
    fn op(&self) -> Op {
        self.args.op
    }

    fn interrupted(&self) -> bool {
        *self.interrupt.borrow()
    }

    fn interrupted_before(what: &str) -> Failure {
        Failure::new(
            ErrorKind::Interrupted,
            None,
            format!("the run was stopped (SIGTERM) before {what}"),
        )
    }

    async fn execute(&mut self) -> Result<(), Failure> {
        let runtime = PathBuf::from(self.command.first().map_or("", String::as_str));
        let mirror =
            layout::check(&self.args.module, &runtime, &self.args.providers).map_err(|e| {
                error!(error = %e, "the image does not follow the image contract");
                Failure::new(
                    ErrorKind::ImageLayout,
                    None,
                    summary::cap(&e.to_string(), 512),
                )
            })?;
        self.doc.image.providers_mirror = mirror;
        // Checked before the run starts too (cli::main); a bad pairing is the same failure.
        let identity = self.args.web_identity().map_err(|msg| {
            error!(error = %msg, "invalid keyless-identity flags");
            Failure::new(
                ErrorKind::Step,
                Some("prepare"),
                summary::cap(&format!("invalid keyless-identity flags: {msg}"), 512),
            )
        })?;
        self.prepare(mirror, identity.as_ref()).map_err(|e| {
            error!(error = %e, "cannot prepare the generated root");
            Failure::new(
                ErrorKind::Step,
                Some("prepare"),
                summary::cap(&e.to_string(), 512),
            )
        })?;
        if self.interrupted() {
            return Err(Self::interrupted_before("the first command"));
        }
        self.version().await?;
        self.events.emit(
            EventType::Normal,
            reasons::RUN_STARTED,
            "Run",
            format!(
                "{} started: image {}, runtime {}",
                self.op().as_str(),
                if self.args.image.is_empty() {
                    "(unnamed)"
                } else {
                    &self.args.image
                },
                if self.doc.runtime.version.is_empty() {
                    "unknown"
                } else {
                    &self.doc.runtime.version
                },
            ),
        );
        self.steps().await
    }

    fn prepare(
        &mut self,
        mirror: bool,
        identity: Option<&WebIdentity>,
    ) -> Result<(), root::PrepareError> {
        let workdir = self.args.workdir.clone();
        let cli_config = mirror.then(|| env::cli_config_path(&workdir));
        let rewritten = env::rewrite(std::env::vars_os(), &workdir, cli_config.as_deref());
        if !rewritten.dropped.is_empty() {
            info!(names = ?rewritten.dropped, "dropped TF_*/KUBE_* variables from the runtime's environment");
        }
        self.root = root::make_dirs(&workdir, &rewritten.tmpdir)?;
        if let Some(path) = &cli_config {
            let text =
                tfrc::cli_tfrc(&self.args.providers).ok_or_else(|| root::PrepareError::Write {
                    path: path.display().to_string(),
                    reason: "the provider mirror path is not UTF-8".into(),
                })?;
            root::write_cli_config(path, &text)?;
            info!(path = %path.display(), mirror = %self.args.providers.display(), "providers come from the image's mirror only");
        } else {
            info!(mirror = %self.args.providers.display(), "no provider mirror; init installs providers directly");
        }
        if self.op() == Op::Restore {
            root::write_restore_root(
                &self.args.config,
                &self.root,
                &root::state_file(&workdir),
                self.args.restore_chunks,
            )?;
        } else {
            let written =
                root::write_module_root(&self.args.config, &self.root, &self.args.module)?;
            if !written.undeclared.is_empty() {
                warn!(outputs = ?written.undeclared, "the module does not declare these contract outputs of its role; the manager reports them as OutputsMissing");
            }
            self.redactor.add_tfvars(&written.tfvars);
        }
        let mut vars = rewritten.vars;
        if let Some(identity) = identity {
            export_web_identity(identity, &mut vars, &workdir)?;
        }
        self.env = vars.into_iter().collect();
        info!(root = %self.root.display(), "generated root ready");
        Ok(())
    }

    fn invocation<'a>(&'a self, args: &'a [String], stdout: steps::Stdout) -> Invocation<'a> {
        Invocation {
            program: &self.command,
            args,
            cwd: &self.root,
            env: &self.env,
            stdout,
            stop_timeout: self.args.stop_timeout,
        }
    }

    /// `version -json`: informational, never fails the run (except by a stop request); its time
    /// is the result document's first step, `version`.
    async fn version(&mut self) -> Result<(), Failure> {
        let args = steps::version_args();
        let inv = self.invocation(&args, steps::Stdout::StreamAndKeep);
        let mut interrupt = self.interrupt.clone();
        match exec::run(&inv, &mut interrupt).await {
            Ok(f) if f.interrupted => Err(Self::interrupted_before("the first step")),
            Ok(f) => {
                // Reported like a step (the manager's per-step histogram), though it fails none.
                self.doc
                    .steps
                    .push(StepRecord::new("version", f.exit, f.elapsed));
                if let Some(v) = output::runtime_version(&f.stdout) {
                    info!(version = %v, "runtime version");
                    self.doc.runtime.version = v;
                } else {
                    warn!(exit = f.exit, "the runtime did not report its version");
                }
                Ok(())
            }
            Err(e) => {
                warn!(error = %e, "version -json could not run");
                Ok(())
            }
        }
    }

    async fn steps(&mut self) -> Result<(), Failure> {
        let flow = Flow {
            op: self.op(),
            force_unlock: !self.args.force_unlock.is_empty(),
            reads_plan: self.args.guard_deletes || !self.args.expect_plan.is_empty(),
            plan_text: !self.args.plan_text_secret.is_empty(),
        };
        let mut step = steps::first(flow);
        let mut analysis: Option<PlanAnalysis> = None;
        loop {
            if step == StepName::Apply && flow.reads_plan {
                self.check_plan(analysis.as_ref().unwrap_or(&empty_plan()))?;
            }
            let f = self.run_step(step).await?;
            match step {
                StepName::Plan if f.exit == 0 => self.no_changes(flow)?,
                StepName::ShowJson => analysis = Some(self.read_plan(&f)?),
                StepName::ShowText => self.store_plan_text(&f, analysis.as_ref()).await?,
                StepName::Apply | StepName::Destroy => self.record_changes(step, &f),
                StepName::StateList => self.check_restored(&f)?,
                _ => {}
            }
            match steps::next(flow, step, f.exit) {
                Some(next) => step = next,
                None => return Ok(()),
            }
        }
    }

    async fn run_step(&mut self, step: StepName) -> Result<Finished, Failure> {
        let name = step.as_str();
        if self.interrupted() {
            return Err(Self::interrupted_before(&format!("step {name}")));
        }
        let (args, stdout) = steps::args(step, self.op(), &self.settings);
        info!(step = name, args = ?steps::loggable(&args), "step started");
        self.events.emit(
            EventType::Normal,
            reasons::STEP_STARTED,
            name,
            format!("step {name} started"),
        );
        let mut interrupt = self.interrupt.clone();
        let result = {
            let inv = self.invocation(&args, stdout);
            exec::run(&inv, &mut interrupt).await
        };
        let f = match result {
            Ok(f) => f,
            Err(e) => {
                let summary = summary::cap(
                    &self
                        .redactor
                        .redact(&format!("step {name} could not start: {e}")),
                    summary::MAX_SUMMARY_BYTES,
                );
                error!(step = name, error = %e, "step could not start");
                self.events.emit(
                    EventType::Warning,
                    reasons::STEP_FAILED,
                    name,
                    summary.clone(),
                );
                return Err(Failure::new(ErrorKind::Step, Some(name), summary));
            }
        };
        self.doc
            .steps
            .push(StepRecord::new(name, f.exit, f.elapsed));
        let seconds = f.elapsed.as_secs_f64();
        if f.interrupted {
            let how = if f.killed {
                format!(
                    "it was killed after the {}s stop timeout",
                    self.args.stop_timeout.as_secs()
                )
            } else {
                format!("the runtime exited {}", f.exit)
            };
            let summary = format!("the run was stopped (SIGTERM) during step {name}; {how}");
            warn!(
                step = name,
                exit = f.exit,
                seconds,
                killed = f.killed,
                "step interrupted"
            );
            self.events.emit(
                EventType::Warning,
                reasons::STEP_FAILED,
                name,
                summary.clone(),
            );
            return Err(Failure {
                kind: ErrorKind::Interrupted,
                step: Some(name.to_owned()),
                summary,
                step_exit: Some(f.exit),
                exit: failing_exit(&f),
            });
        }
        let unlocked_already = step == StepName::ForceUnlock
            && f.exit != 0
            && output::already_unlocked(&f.stderr_tail);
        if !step.accepts(f.exit) && !unlocked_already {
            let lines = if step == StepName::Validate {
                let v = output::validate_errors(&f.stdout);
                if v.is_empty() {
                    f.error_lines.clone()
                } else {
                    v
                }
            } else {
                f.error_lines.clone()
            };
            let summary = summary::summarize(name, f.exit, &lines, &self.redactor);
            error!(step = name, exit = f.exit, seconds, summary = %summary, "step failed");
            self.events.emit(
                EventType::Warning,
                reasons::STEP_FAILED,
                name,
                summary.clone(),
            );
            return Err(Failure {
                kind: ErrorKind::Step,
                step: Some(name.to_owned()),
                summary,
                step_exit: Some(f.exit),
                exit: failing_exit(&f),
            });
        }
        if unlocked_already {
            info!(step = name, "the state was already unlocked");
        }
        info!(step = name, exit = f.exit, seconds, "step succeeded");
        self.events.emit(
            EventType::Normal,
            reasons::STEP_SUCCEEDED,
            name,
            format!("step {name} exited {} after {seconds:.1}s", f.exit),
        );
        Ok(f)
    }

    /// A plan that exited 0: nothing to apply, no drift, an empty plan.
    fn no_changes(&mut self, flow: Flow) -> Result<(), Failure> {
        let empty = empty_plan();
        match flow.op {
            Op::Drift => {
                self.doc.drift = Some(DriftDoc::default());
                self.plan_summary_event(&empty);
            }
            Op::Plan => {
                self.doc.plan = Some(PlanDoc::from_analysis(&empty, false));
                self.plan_summary_event(&empty);
            }
            Op::Apply => {
                info!("the plan has no changes; the apply step is skipped");
                if flow.reads_plan {
                    self.check_plan(&empty)?;
                }
                self.doc.changes = Some(ChangesDoc::default());
            }
            _ => {}
        }
        Ok(())
    }

    fn read_plan(&mut self, f: &Finished) -> Result<PlanAnalysis, Failure> {
        let unreadable = |reason: String| {
            error!(reason = %reason, "the saved plan could not be read");
            Failure::new(
                ErrorKind::Step,
                Some(StepName::ShowJson.as_str()),
                format!("the saved plan could not be read: {reason}"),
            )
        };
        if f.stdout_truncated {
            return Err(unreadable("show -json output is too large".into()));
        }
        let analysis = analyze_plan(&f.stdout).map_err(|e| unreadable(e.to_string()))?;
        info!(
            add = analysis.add,
            change = analysis.change,
            destroy = analysis.destroy,
            forget = analysis.forget,
            destructive = analysis.destructive,
            hash = %analysis.hash,
            "plan read"
        );
        match self.op() {
            Op::Drift => self.doc.drift = Some(DriftDoc::from_analysis(&analysis)),
            _ => self.doc.plan = Some(PlanDoc::from_analysis(&analysis, false)),
        }
        self.plan_summary_event(&analysis);
        Ok(analysis)
    }

    /// Where `--plan-text-secret` goes, owned by `--plan-text-owner`, and the client to write
    /// it with (one per run, whether it stores, deletes or both).
    async fn plan_text_target(&mut self) -> Result<(plan_text::Target, kube::Client), String> {
        let owner = crate::cli::parse_event_object(&self.args.plan_text_owner)
            .map_err(|e| format!("--plan-text-owner: {e}"))?;
        let client = match &self.plan_text_client {
            Some(client) => client.clone(),
            None => crate::events::client(self.args.events_kubeconfig.clone()).await?,
        };
        self.plan_text_client = Some(client.clone());
        let target = plan_text::Target {
            secret: self.args.plan_text_secret.clone(),
            owner,
        };
        Ok((target, client))
    }

    /// Stores the text `show -no-color` printed (capped, credential values redacted) for the
    /// plan just read; a plan that cannot be stored fails the run, as a reviewer would approve
    /// what they cannot read.
    async fn store_plan_text(
        &mut self,
        f: &Finished,
        analysis: Option<&PlanAnalysis>,
    ) -> Result<(), Failure> {
        let fail = |why: String| {
            error!(reason = %why, "the plan's text could not be stored");
            Failure::new(
                ErrorKind::Step,
                Some(StepName::ShowText.as_str()),
                summary::cap(
                    &format!("the plan's text could not be stored: {why}"),
                    summary::MAX_SUMMARY_BYTES,
                ),
            )
        };
        let (target, client) = self.plan_text_target().await.map_err(&fail)?;
        let text = String::from_utf8_lossy(&f.stdout);
        // Only the identity's credential values: the runtime already shows sensitive values as
        // `(sensitive value)`, and the module's other inputs are what a reviewer must see.
        let text = contract::plan::plan_text(&self.credentials.redact(&text));
        let hash = analysis.map_or("", |a| a.hash.as_str());
        let want = plan_text::secret(&target, hash, &self.args.inputs_hash, &text);
        plan_text::store(client, want).await.map_err(&fail)?;
        info!(secret = %target.secret, bytes = text.len(), "the plan's text is stored");
        self.plan_text_stored = Some(target.secret);
        Ok(())
    }

    /// After the run: a succeeded apply consumed the plan, and a plan without changes has no
    /// text, so an earlier plan's text is deleted; a failure to delete is only logged.
    async fn settle_plan_text(&mut self, succeeded: bool) {
        let consumed = succeeded && (self.op() == Op::Apply || self.plan_text_stored.is_none());
        if !consumed {
            if let (Some(plan), Some(name)) = (self.doc.plan.as_mut(), &self.plan_text_stored) {
                plan.text_secret = Some(name.clone());
            }
            return;
        }
        if self.args.plan_text_secret.is_empty() {
            return;
        }
        let deleted = match self.plan_text_target().await {
            Ok((target, client)) => plan_text::delete(client, &target).await,
            Err(e) => Err(e),
        };
        match deleted {
            Ok(()) => info!(secret = %self.args.plan_text_secret, "the plan's text is deleted"),
            Err(e) => warn!(error = %e, "the plan's text could not be deleted"),
        }
    }

    fn plan_summary_event(&self, a: &PlanAnalysis) {
        let mut note = format!(
            "{}: {}",
            self.op().as_str(),
            contract::plan::counts_phrase(a.add, a.change, a.destroy, a.forget)
        );
        if a.destructive {
            note.push_str("; deletes or replaces resources");
        }
        self.events
            .emit(EventType::Normal, reasons::PLAN_SUMMARY, "Plan", note);
    }

    /// The guard and approval check before an apply.
    fn check_plan(&mut self, a: &PlanAnalysis) -> Result<(), Failure> {
        let args = &self.args;
        match decide(
            a,
            args.guard_deletes,
            &args.inputs_hash,
            &args.allow_deletes_hash,
            &args.expect_plan,
        ) {
            ApplyDecision::Apply => Ok(()),
            ApplyDecision::Blocked => {
                let plan = PlanDoc::from_analysis(a, true);
                let count = a.changes.iter().filter(|c| c.action.deletes()).count();
                let mut s = format!(
                    "the plan deletes or replaces {count} resource(s) and inputs hash {} is not approved: {}",
                    if args.inputs_hash.is_empty() {
                        "(none)"
                    } else {
                        &args.inputs_hash
                    },
                    plan.resources.join(", ")
                );
                if plan.truncated {
                    s.push_str(", …");
                }
                warn!(destroy = a.destroy, "destructive plan blocked");
                self.doc.plan = Some(plan);
                Err(Failure::new(
                    ErrorKind::Blocked,
                    None,
                    summary::cap(&s, summary::MAX_SUMMARY_BYTES),
                ))
            }
            ApplyDecision::PlanChanged => {
                warn!(approved = %args.expect_plan, planned = %a.hash, "the plan changed since it was approved");
                let s = format!(
                    "the new plan {} is not the approved plan {}",
                    a.hash, args.expect_plan
                );
                self.doc.plan = Some(PlanDoc::from_analysis(a, false));
                Err(Failure::new(
                    ErrorKind::PlanChanged,
                    None,
                    summary::cap(&s, summary::MAX_SUMMARY_BYTES),
                ))
            }
        }
    }

    fn record_changes(&mut self, step: StepName, f: &Finished) {
        let Some(c) = f.changes else {
            warn!(step = step.as_str(), "no summary line with resource counts");
            return;
        };
        self.doc.changes = Some(ChangesDoc {
            add: c.add,
            change: c.change,
            destroy: c.destroy,
            forget: c.forget,
            import: c.import,
        });
        let mut note = format!(
            "{}: {} added, {} changed, {} destroyed",
            step.as_str(),
            c.add,
            c.change,
            c.destroy
        );
        for (n, what) in [(c.import, "imported"), (c.forget, "forgotten")] {
            if n > 0 {
                use std::fmt::Write as _;
                let _ = write!(note, ", {n} {what}");
            }
        }
        self.events.emit(
            EventType::Normal,
            reasons::RESOURCES_CHANGED,
            step.as_str(),
            note,
        );
    }

    /// A restore whose backup recorded resources must list some after the push.
    fn check_restored(&self, f: &Finished) -> Result<(), Failure> {
        let listed = f
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .count();
        info!(
            listed,
            expected = self.args.restore_resources,
            "state list after the push"
        );
        if self.args.restore_resources > 0 && listed == 0 {
            let s = format!(
                "state list shows no resource after the push, but the backup records {}",
                self.args.restore_resources
            );
            error!("{s}");
            return Err(Failure::new(
                ErrorKind::Step,
                Some(StepName::StateList.as_str()),
                s,
            ));
        }
        Ok(())
    }

    async fn finish(mut self, outcome: Result<(), Failure>, started: Instant) -> i32 {
        let seconds = started.elapsed().as_secs_f64();
        let op = self.op().as_str();
        let (exit, interrupted) = match &outcome {
            Ok(()) => (EXIT_OK, false),
            Err(f) => (f.exit, f.kind == ErrorKind::Interrupted),
        };
        match outcome {
            Ok(()) => {
                info!(op, seconds, "run succeeded");
                self.events.emit(
                    EventType::Normal,
                    reasons::RUN_FINISHED,
                    "Run",
                    format!("{op} succeeded in {seconds:.1}s"),
                );
            }
            Err(f) => {
                let kind = f.kind.as_str();
                error!(
                    op,
                    kind,
                    step = f.step.as_deref().unwrap_or(""),
                    seconds,
                    "run failed"
                );
                self.events.emit(
                    EventType::Warning,
                    reasons::RUN_FINISHED,
                    "Run",
                    format!(
                        "{op} ended {kind}{} after {seconds:.1}s: {}",
                        f.step
                            .as_deref()
                            .map(|s| format!(" at step {s}"))
                            .unwrap_or_default(),
                        f.summary
                    ),
                );
                self.doc.error = Some(ErrorDoc {
                    kind: f.kind,
                    step: f.step,
                    summary: Some(f.summary).filter(|s| !s.is_empty()),
                    exit_code: f.step_exit,
                });
            }
        }
        self.settle_plan_text(exit == EXIT_OK).await;
        let json = self.doc.to_json_capped();
        if let Err(e) = std::fs::write(&self.args.result, &json) {
            warn!(path = %self.args.result.display(), error = %e, "cannot write the result document");
        }
        let grace = if interrupted {
            EVENTS_GRACE_INTERRUPTED
        } else {
            EVENTS_GRACE
        };
        self.events.finish(grace).await;
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{json}");
            let _ = out.flush();
        }
        exit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contract::plan::{Action, PlannedChange};

    fn analysis(changes: &[(&str, Action)]) -> PlanAnalysis {
        let changes: Vec<PlannedChange> = changes
            .iter()
            .map(|(a, action)| PlannedChange {
                address: (*a).to_owned(),
                action: *action,
            })
            .collect();
        PlanAnalysis {
            destructive: changes.iter().any(|c| c.action.deletes()),
            hash: plan_hash(&changes),
            changes,
            ..PlanAnalysis::default()
        }
    }

    #[test]
    fn a_guarded_plan_that_deletes_is_blocked_unless_its_inputs_are_approved() {
        let a = analysis(&[("module.role.terraform_data.x", Action::DeleteThenCreate)]);
        assert_eq!(decide(&a, true, "h2:new", "", ""), ApplyDecision::Blocked);
        assert_eq!(
            decide(&a, true, "h2:new", "h2:old", ""),
            ApplyDecision::Blocked
        );
        assert_eq!(decide(&a, true, "", "", ""), ApplyDecision::Blocked);
        assert_eq!(
            decide(&a, true, "h2:new", "h2:new", ""),
            ApplyDecision::Apply
        );
        assert_eq!(decide(&a, false, "h2:new", "", ""), ApplyDecision::Apply);
    }

    #[test]
    fn creates_and_updates_are_never_blocked() {
        let a = analysis(&[
            ("module.role.terraform_data.a", Action::Create),
            ("module.role.terraform_data.b", Action::Update),
            ("module.role.terraform_data.c", Action::Forget),
        ]);
        assert_eq!(decide(&a, true, "h2:x", "", ""), ApplyDecision::Apply);
        let replace_cbd = analysis(&[("module.role.terraform_data.a", Action::CreateThenDelete)]);
        assert_eq!(
            decide(&replace_cbd, true, "h2:x", "", ""),
            ApplyDecision::Blocked
        );
    }

    #[test]
    fn an_approved_plan_hash_decides_alone_and_covers_its_deletes() {
        let a = analysis(&[("module.role.terraform_data.x", Action::Delete)]);
        assert_eq!(decide(&a, true, "h2:x", "", &a.hash), ApplyDecision::Apply);
        assert_eq!(
            decide(&a, true, "h2:x", "h2:x", "p1:other"),
            ApplyDecision::PlanChanged
        );
        let empty = empty_plan();
        assert_eq!(
            decide(&empty, false, "", "", &empty.hash),
            ApplyDecision::Apply
        );
        assert_eq!(
            decide(&empty, false, "", "", &a.hash),
            ApplyDecision::PlanChanged
        );
    }

    #[test]
    fn the_empty_plan_hashes_the_empty_string() {
        assert_eq!(
            empty_plan().hash,
            "p1:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_keyless_identity_token_is_redacted_like_a_credential() {
        let dir = tempfile::tempdir().expect("dir");
        let token = dir.path().join("token");
        std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.payload.signature\n").expect("token");
        let mut redactor = Redactor::default();
        add_token(&mut redactor, &token.display().to_string());
        assert_eq!(
            redactor.redact("Error: bad token eyJhbGciOiJSUzI1NiJ9.payload.signature here"),
            "Error: bad token <redacted> here"
        );
        // No flag, or no file yet: nothing to redact, no error.
        let mut empty = Redactor::default();
        add_token(&mut empty, "");
        add_token(
            &mut empty,
            &dir.path().join("missing").display().to_string(),
        );
        assert_eq!(empty.redact("eyJhbGciOiJSUzI1NiJ9"), "eyJhbGciOiJSUzI1NiJ9");
    }

    #[test]
    fn a_keyless_identity_exports_its_variables_and_writes_the_google_file_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let identity = WebIdentity {
            token_file: contract::web_identity::TOKEN_FILE.into(),
            gcp: Some(contract::web_identity::Gcp {
                workload_identity_provider:
                    "projects/42/locations/global/workloadIdentityPools/pool/providers/k8s".into(),
                service_account_email: None,
            }),
            ..WebIdentity::default()
        };
        let mut vars = BTreeMap::from([(
            OsString::from("GOOGLE_APPLICATION_CREDENTIALS"),
            OsString::from("/from/the/container.json"),
        )]);
        export_web_identity(&identity, &mut vars, dir.path()).expect("exported");
        let path = dir.path().join(GCP_CREDENTIALS_FILE);
        assert_eq!(
            vars.get(&OsString::from("GOOGLE_APPLICATION_CREDENTIALS")),
            Some(&path.clone().into_os_string())
        );
        let written = std::fs::read_to_string(&path).expect("written");
        assert_eq!(Some(written), identity.gcp_credential_config());
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_keyless_identity_without_google_writes_no_file() {
        let dir = tempfile::tempdir().expect("dir");
        let identity = WebIdentity {
            token_file: contract::web_identity::TOKEN_FILE.into(),
            ..WebIdentity::default()
        };
        let mut vars = BTreeMap::new();
        export_web_identity(&identity, &mut vars, dir.path()).expect("exported");
        assert!(vars.is_empty());
        assert!(!dir.path().join(GCP_CREDENTIALS_FILE).exists());
    }
}
