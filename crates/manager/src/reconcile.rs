//! One reconcile pass of a TerraformCluster or TerraformMachine (spec: The Reconcile Lifecycle,
//! "One pass, visually"): Observe (owner, Jobs, credentials, state, inputs), bookkeeping of
//! finished Jobs, [`crate::decide::decide`], Act on the decision, then one status patch and the
//! pass's events. Everything the spec orders is in [`reconcile`], in that order.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use api::capi::Cluster;
use api::cluster::TerraformCluster;
use api::constants::{annotations, conditions as ctype, events, labels, reasons};
use api::machine::TerraformMachine;
use api::shared::{ApplyPolicy, DriftAction, JobPolicy};
use api::status::{ActiveJob, SourceStatus};
use contract::health::ConditionStatus;
use contract::names::{
    ObjectKind, Operation, cluster_lease_name, durable_inputs_secret_name, run_lease_name,
    run_secret_name, state_suffix,
};
use contract::render::{MAIN_TF_JSON, RenderedInputs, TFVARS_JSON};
use contract::state::StateSummary;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use crate::bookkeeping::{self, PodReport};
use crate::conditions::Conditions;
use crate::context::{Context, StatusDraft, Target};
use crate::decide::{
    self, Approvals, Config, Decision, Drift, Gates, HealthReading, Inputs, JobOutcome, JobRecord,
    LastTimes, Leases, Observed, OwnerCheck, StartJob, StateRead, WaitReason,
};
use crate::events::Outbox;
use crate::inputs::{self, NotBuilt, Owner};
use crate::kubeutil::{delete_opt, get_opt, is_conflict, is_not_found};
use crate::leases::{self, Take};
use crate::outputs;
use crate::state::{self, LockCheck, StateReading};
use crate::{history, identity, job, runner_rbac};

/// Why a pass failed (it is retried with the controller's error backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A value could not be serialised.
    #[error("serialisation: {0}")]
    Json(#[from] serde_json::Error),
}

/// A finished Job read this pass, to be marked bookkept once the status patch landed.
struct Kept {
    name: String,
    outcome: JobOutcome,
}

/// The durable inputs Secret, as read.
#[derive(Default)]
struct Durable {
    secret: Option<Secret>,
}

impl Durable {
    fn data(&self, key: &str) -> Option<&[u8]> {
        self.secret
            .as_ref()?
            .data
            .as_ref()?
            .get(key)
            .map(|b| b.0.as_slice())
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.secret
            .as_ref()?
            .metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn rendered(&self, kind: ObjectKind, hash: &str) -> Option<RenderedInputs> {
        Some(RenderedInputs {
            kind,
            main_tf_json: String::from_utf8(self.data(MAIN_TF_JSON)?.to_vec()).ok()?,
            tfvars_json: String::from_utf8(self.data(TFVARS_JSON)?.to_vec()).ok()?,
            inputs_hash: hash.to_owned(),
        })
    }
}

/// Reconciles one object.
pub async fn reconcile(target: Target, ctx: &Context) -> Result<Action, Error> {
    let started = Instant::now();
    let controller = match target.kind() {
        ObjectKind::Cluster => "terraformcluster",
        _ => "terraformmachine",
    };
    let result = Box::pin(pass(&target, ctx)).await;
    let outcome = match &result {
        Ok(_) => "success",
        Err(_) => "error",
    };
    ctx.metrics
        .reconcile(controller, outcome, started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        ctx.metrics.reconcile_error(controller);
        warn!(kind = target.kind().kind(), namespace = %target.namespace(), name = %target.name(), error = %e, "reconcile failed");
    }
    result
}

#[allow(clippy::too_many_lines)]
async fn pass(target: &Target, ctx: &Context) -> Result<Action, Error> {
    let client = &ctx.client;
    let kind = target.kind();
    let ns = target.namespace();
    let name = target.name();
    let uid = target.uid();
    let kind_name = kind.kind();

    // 1. Externally managed: nothing at all.
    if kind == ObjectKind::Cluster && target.annotation(annotations::MANAGED_BY).is_some() {
        return Ok(Action::await_change());
    }

    let now_ts = Timestamp::now();
    let now = SystemTime::now();
    let mut draft = target.status();
    let before = draft.to_value();
    let mut conds = Conditions::new(
        draft.workload().conditions.clone(),
        target.meta().generation,
        Time(now_ts),
    );
    let mut outbox = Outbox::default();
    let deleting = target.deleting();
    let suffix = state_suffix(&ns, kind, &name);
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // 2. Owner lookup.
    let owner = match target {
        Target::Cluster(tc) => inputs::cluster_owner(client, tc).await?,
        Target::Machine(tm) => inputs::machine_owner(client, tm).await?,
    };
    let cluster_name = owner
        .cluster
        .as_ref()
        .and_then(|c| c.metadata.name.clone())
        .or_else(|| owner.machine.as_ref().map(|m| m.spec.cluster_name.clone()))
        .or_else(|| target.cluster_label())
        .unwrap_or_default();
    match owner.check {
        OwnerCheck::Ok => {}
        OwnerCheck::NotYet { reason } => conds.set(
            ctype::DEPENDENCIES_READY,
            if reason == reasons::WAITING_FOR_OWNER_MACHINE {
                ConditionStatus::False
            } else {
                ConditionStatus::Unknown
            },
            reason,
            &owner.message,
        ),
        OwnerCheck::Gone => conds.set(
            ctype::DEPENDENCIES_READY,
            ConditionStatus::False,
            reasons::OWNER_NOT_FOUND,
            &owner.message,
        ),
        OwnerCheck::Mismatch => conds.set(
            ctype::DEPENDENCIES_READY,
            ConditionStatus::False,
            reasons::OWNER_MISMATCH,
            &owner.message,
        ),
        OwnerCheck::Gated { reason } => conds.set(
            ctype::DEPENDENCIES_READY,
            ConditionStatus::False,
            reason,
            &owner.message,
        ),
    }
    if deleting {
        if conds.status(ctype::DELETING) != Some("True") {
            outbox.normal(
                events::DELETION_STARTED,
                format!("{kind_name} {name} is being deleted"),
            );
        }
        conds.set(
            ctype::DELETING,
            ConditionStatus::True,
            reasons::DELETING,
            "The object is being deleted",
        );
    } else {
        conds.set(
            ctype::DELETING,
            ConditionStatus::False,
            reasons::NOT_DELETING,
            "The object is not being deleted",
        );
    }
    if owner.paused {
        conds.set(
            ctype::PAUSED,
            ConditionStatus::True,
            reasons::PAUSED,
            "The object or its Cluster is paused",
        );
    } else {
        conds.set(
            ctype::PAUSED,
            ConditionStatus::False,
            reasons::NOT_PAUSED,
            "Not paused",
        );
    }

    let finalizer = target
        .meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == target.finalizer());
    let owner_stops = !matches!(owner.check, OwnerCheck::Ok) && !deleting;

    // The TerraformCluster a machine inherits defaults from.
    let tc_for_defaults: Option<TerraformCluster> = match target {
        Target::Cluster(tc) => Some(tc.as_ref().clone()),
        Target::Machine(_) => owner.terraform_cluster.clone(),
    };
    let policy = merged_policy(target, tc_for_defaults.as_ref());

    // Jobs and bookkeeping.
    let lp = ListParams::default().labels(&format!(
        "{}={},{}={}",
        labels::OWNER_KIND,
        kind_name,
        labels::OWNER_NAME,
        contract::names::owner_name_label(&name)
    ));
    let jobs: Vec<Job> = jobs_api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    let mut kept: Vec<Kept> = Vec::new();
    let mut records: Vec<JobRecord> = Vec::new();
    let mut applied_this_pass: Option<(JobRecord, PodReport)> = None;
    let drift_remediate = drift_action(target) == DriftAction::Remediate;
    for j in &jobs {
        let job_name = j.name_any();
        let finished = bookkeeping::finished_condition(j).is_some();
        if finished && !bookkeeping::is_bookkept(j) {
            let report = bookkeeping::pod_report(client, &ns, &job_name).await?;
            let Some(outcome) = bookkeeping::outcome_of(j, report.result.as_ref()) else {
                continue;
            };
            let Some(record) = bookkeeping::job_record(j, Some(outcome), false) else {
                continue;
            };
            bookkeeping::record_conditions(
                &record,
                report.result.as_ref(),
                outcome,
                drift_remediate,
                &mut conds,
                &mut outbox,
            );
            draft.workload_mut().last_run = Some(bookkeeping::last_run(
                &record,
                j,
                report.result.as_ref(),
                outcome,
            ));
            let op = record.operation.as_str();
            let duration = match (record.started, record.finished) {
                (Some(s), Some(f)) => f.duration_since(s).unwrap_or_default().as_secs_f64(),
                _ => 0.0,
            };
            ctx.metrics
                .job_finished(kind_name, op, bookkeeping::result_label(outcome), duration);
            if outcome != JobOutcome::Succeeded {
                let error_kind = match outcome {
                    JobOutcome::DeadlineExceeded => "deadline".to_owned(),
                    _ => report
                        .result
                        .as_ref()
                        .and_then(|r| r.error.as_ref())
                        .map_or_else(|| "interrupted".to_owned(), |e| e.kind.as_str().to_owned()),
                };
                let step = report
                    .result
                    .as_ref()
                    .and_then(|r| r.error.as_ref())
                    .and_then(|e| e.step.clone())
                    .unwrap_or_else(|| "none".to_owned());
                ctx.metrics.job_error(kind_name, op, &error_kind, &step);
            }
            if let Some(r) = &report.result {
                for s in &r.steps {
                    ctx.metrics
                        .job_step_duration(kind_name, op, &s.name, s.seconds);
                }
                if let Some(c) = &r.changes {
                    ctx.metrics.resources_changed(kind_name, op, "add", c.add);
                    ctx.metrics
                        .resources_changed(kind_name, op, "change", c.change);
                    ctx.metrics
                        .resources_changed(kind_name, op, "destroy", c.destroy);
                }
            }
            if let (Some(s), Some(created)) = (&report.started, &j.metadata.creation_timestamp) {
                let q = SystemTime::from(s.0)
                    .duration_since(SystemTime::from(created.0))
                    .unwrap_or_default();
                ctx.metrics.job_queue(kind_name, op, q.as_secs_f64());
            }
            // Drift and refresh times.
            if outcome == JobOutcome::Succeeded {
                let at = record.finished.and_then(to_time);
                match record.operation {
                    Operation::Drift => draft.workload_mut().last_drift_check = at,
                    Operation::Refresh => draft.workload_mut().last_refresh = at,
                    _ => {}
                }
                if let Some(f) = record.finished
                    && let Ok(d) = f.duration_since(SystemTime::UNIX_EPOCH)
                {
                    ctx.metrics
                        .set_last_success(kind_name, &ns, &name, op, d.as_secs() as i64);
                }
            }
            // Plan Approval: a plan (or a changed plan) becomes status.plan.
            if let (StatusDraft::Cluster(cs), Some(plan)) = (
                &mut draft,
                report.result.as_ref().and_then(|r| r.plan.as_ref()),
            ) && (record.operation == Operation::Plan && outcome == JobOutcome::Succeeded
                || outcome == JobOutcome::PlanChanged)
            {
                let preview = plan_preview(&record, plan);
                let changes = plan.add + plan.change + plan.destroy;
                let command = format!(
                    "kubectl annotate terraformcluster {name} -n {ns} {}={} --overwrite",
                    annotations::APPROVE_PLAN,
                    plan.hash
                );
                if outcome == JobOutcome::PlanChanged {
                    ctx.metrics.plan_approval(kind_name, "changed");
                    conds.set(
                        ctype::APPLY_JOB_SUCCEEDED,
                        ConditionStatus::Unknown,
                        reasons::PLAN_CHANGED,
                        &format!("The plan changed since it was approved; review status.plan and approve it: {command}"),
                    );
                } else if changes > 0 {
                    conds.set(
                        ctype::APPLY_JOB_SUCCEEDED,
                        ConditionStatus::Unknown,
                        reasons::PLAN_AWAITING_APPROVAL,
                        &format!("Plan {} waits for approval: {command}", plan.hash),
                    );
                    outbox.normal(
                        events::PLAN_READY,
                        format!(
                            "Plan of Job {job_name}: {} to add, {} to change, {} to destroy; approve with: {command}",
                            plan.add, plan.change, plan.destroy
                        ),
                    );
                }
                cs.plan = Some(preview);
            }
            if outcome == JobOutcome::Succeeded
                && matches!(record.operation, Operation::Apply | Operation::Restore)
            {
                applied_this_pass = Some((record.clone(), report));
            }
            // The per-run Secret goes, and with it the leases.
            delete_opt(&secrets, &run_secret_name(&job_name)).await?;
            leases::give_back(client, &ns, &run_lease_name(&suffix), &job_name).await?;
            if kind == ObjectKind::Cluster && !cluster_name.is_empty() {
                leases::give_back(
                    client,
                    &ns,
                    &cluster_lease_name(&ns, &cluster_name),
                    &job_name,
                )
                .await?;
            }
            kept.push(Kept {
                name: job_name,
                outcome,
            });
            records.push(record);
        } else {
            let run_secret_exists = if finished {
                false
            } else {
                get_opt(&secrets, &run_secret_name(&job_name))
                    .await?
                    .is_some()
            };
            if let Some(r) = bookkeeping::job_record(j, None, run_secret_exists) {
                records.push(r);
            }
        }
    }

    // captf_job_attempts: 1 + the failed Jobs of the operation since its previous success.
    for k in kept.iter().filter(|k| k.outcome == JobOutcome::Succeeded) {
        let Some(done) = records.iter().find(|r| r.name == k.name) else {
            continue;
        };
        let earlier = || {
            records
                .iter()
                .filter(|r| r.operation == done.operation && r.finished < done.finished)
        };
        let previous_success = earlier()
            .filter(|r| r.outcome == Some(JobOutcome::Succeeded))
            .filter_map(|r| r.finished)
            .max();
        let failures = earlier()
            .filter(|r| {
                r.outcome.is_some_and(JobOutcome::counts_as_failure)
                    && previous_success.is_none_or(|p| r.finished.is_some_and(|f| f > p))
            })
            .count();
        ctx.metrics
            .job_attempts(kind_name, done.operation.as_str(), 1 + failures as u64);
    }

    // Durable inputs Secret.
    let durable_name = durable_inputs_secret_name(kind, &name);
    let mut durable = Durable {
        secret: get_opt(&secrets, &durable_name).await?,
    };

    // A succeeded apply: adopt state, pin the digest.
    if let Some((record, report)) = &applied_this_pass {
        state::adopt(
            client,
            &ns,
            &suffix,
            &target.owner_reference(false),
            &record.inputs_hash,
        )
        .await?;
        outbox.normal(
            events::STATE_ADOPTED,
            format!("State adopted with inputs hash {}", record.inputs_hash),
        );
        if record.operation == Operation::Apply {
            pin_digest(&secrets, &mut durable, report, &mut outbox).await?;
            consume_approvals(ctx, target, record, &mut draft, &mut outbox).await?;
            if record.drift_remediation
                || conds.reason(ctype::DRIFT_DETECTED) == Some(reasons::DRIFT_REMEDIATING)
            {
                conds.set(
                    ctype::DRIFT_DETECTED,
                    ConditionStatus::False,
                    reasons::NO_DRIFT,
                    "The remediation apply succeeded",
                );
            }
        }
    }

    if let (Target::Cluster(tc), StatusDraft::Cluster(cs)) = (target, &mut draft)
        && tc.spec.apply_policy.unwrap_or_default() == ApplyPolicy::Automatic
    {
        cs.plan = None;
    }
    let active = records
        .iter()
        .filter(|r| r.is_active())
        .max_by_key(|r| r.created)
        .cloned();
    match &active {
        Some(a) => {
            draft.workload_mut().active_job = Some(ActiveJob {
                name: a.name.clone(),
                operation: a.operation,
                attempt: a.attempt as i32,
                start_time: a.started.and_then(to_time),
            });
            if matches!(a.operation, Operation::Drift | Operation::Refresh) {
                conds.set(
                    ctype::DRIFT_JOB_SUCCEEDED,
                    ConditionStatus::Unknown,
                    reasons::DRIFT_JOB_RUNNING,
                    &format!("Job {} is running", a.name),
                );
            }
        }
        None => draft.workload_mut().active_job = None,
    }
    let mut active_counts: BTreeMap<&str, i64> = BTreeMap::new();
    for r in &records {
        if r.is_active() {
            *active_counts.entry(r.operation.as_str()).or_default() += 1;
        }
    }

    // History pruning.
    let successful_limit = policy.successful_jobs_history_limit_or_default().max(0) as u32;
    let failed_limit = policy.failed_jobs_history_limit_or_default().max(0) as u32;
    for stale in history::jobs_to_prune(&records, successful_limit, failed_limit) {
        if kept.iter().any(|k| k.name == stale) {
            continue;
        }
        delete_opt(&jobs_api, &stale).await?;
        records.retain(|r| r.name != stale);
    }

    // Credentials: identity, mirror, runner RBAC (only for an owned, unpaused object).
    let mut gates = Gates::default();
    let mut identity_name: Option<String> = None;
    let credentials_step = finalizer && !owner.paused && (!owner_stops);
    if credentials_step {
        let pinned_identity = match kind {
            ObjectKind::Machine if draft.provisioned() || deleting => {
                durable.annotation(annotations::IDENTITY).map(str::to_owned)
            }
            _ => None,
        };
        let wanted = pinned_identity.or_else(|| {
            identity::resolve_identity_name(
                target
                    .workspace()
                    .identity_ref
                    .as_ref()
                    .map(|r| r.name.as_str()),
                tc_for_defaults.as_ref(),
            )
        });
        match identity::ensure(
            client,
            &ns,
            wanted,
            &target.owner_reference(false),
            &mut conds,
            &mut outbox,
            &ctx.metrics,
        )
        .await?
        {
            identity::IdentityOutcome::Ready { identity } => identity_name = Some(identity),
            identity::IdentityOutcome::Blocked(gate) => gates.credentials = Some(gate),
        }
        let sa = policy.service_account_name_or_default().to_owned();
        if let Some(gate) = runner_rbac::ensure(client, &ns, &sa, &mut conds).await?
            && gates.credentials.is_none()
        {
            gates.credentials = Some(gate);
        }
    }

    // State, when no Job is active.
    let mut state_read = StateRead::None;
    let mut summary: Option<Box<StateSummary>> = None;
    // When the base state Secret was created: after a `clusterctl move` no Job history is left,
    // and the drift clock starts from the state's arrival instead of running at once.
    let mut state_created: Option<SystemTime> = None;
    if active.is_none() {
        let secrets_list = state::list_state_secrets(client, &ns, &suffix).await?;
        let base = contract::names::state_secret_name(&suffix);
        state_created = secrets_list
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(base.as_str()))
            .and_then(|s| s.metadata.creation_timestamp.as_ref())
            .map(|t| SystemTime::from(t.0));
        match state::read(&suffix, &secrets_list) {
            StateReading::Read(s) => {
                let lost =
                    draft.provisioned() && kind == ObjectKind::Machine && s.inputs_hash.is_none();
                if lost {
                    state_read = StateRead::Lost;
                    conds.set(
                        ctype::STATE_READABLE,
                        ConditionStatus::False,
                        reasons::STATE_LOST,
                        "The provisioned machine's state carries no inputs hash",
                    );
                } else {
                    state_read = StateRead::Read {
                        serial: s.serial,
                        inputs_hash: s.inputs_hash.clone(),
                    };
                    conds.set(
                        ctype::STATE_READABLE,
                        ConditionStatus::True,
                        reasons::STATE_READ,
                        &format!("State serial {} read", s.serial),
                    );
                }
                ctx.metrics
                    .set_state_bytes(kind_name, &ns, &name, s.compressed_bytes as i64);
                ctx.metrics
                    .set_state_resources(kind_name, &ns, &name, s.managed_resources as i64);
                let w = draft.workload_mut();
                w.observed_state_serial = Some(s.serial as i64).filter(|s| *s >= 1);
                summary = Some(s);
            }
            StateReading::NotFound => {
                // A deleting object whose destroy succeeded has nothing left: its state went
                // in a cleanup cut short.
                let destroyed = deleting
                    && records.iter().any(|r| {
                        r.operation == Operation::Destroy
                            && r.outcome == Some(JobOutcome::Succeeded)
                    });
                if draft.provisioned() && !destroyed {
                    state_read = StateRead::Lost;
                    conds.set(
                        ctype::STATE_READABLE,
                        ConditionStatus::False,
                        reasons::STATE_LOST,
                        "The provisioned object's state Secret is gone",
                    );
                    ctx.metrics.state_read_error(kind_name, "lost");
                } else {
                    conds.set(
                        ctype::STATE_READABLE,
                        ConditionStatus::Unknown,
                        reasons::STATE_NOT_FOUND,
                        "No state yet: the object was never applied",
                    );
                }
            }
            StateReading::Unreadable(e) => {
                let reason = e.reason();
                if conds.reason(ctype::STATE_READABLE) != Some(reason) {
                    ctx.metrics
                        .state_read_error(kind_name, metric_reason(reason));
                }
                conds.set(
                    ctype::STATE_READABLE,
                    ConditionStatus::False,
                    reason,
                    &e.to_string(),
                );
                state_read = StateRead::Unreadable { reason };
            }
        }
        draft.workload_mut().state_secret_suffix = Some(suffix.clone());
    }

    // Current inputs.
    let immutable_done = kind == ObjectKind::Machine && draft.provisioned();
    let mut current: Option<RenderedInputs> = None;
    let mut inputs_obs = Inputs::NotBuilt;
    if active.is_none() && !immutable_done && matches!(owner.check, OwnerCheck::Ok) {
        let built = match target {
            Target::Cluster(tc) => match &owner.cluster {
                Some(c) => inputs::cluster_inputs(client, tc, c, durable.data(TFVARS_JSON)).await?,
                None => Err(NotBuilt {
                    reason: reasons::WAITING_FOR_OWNER,
                    waiting: true,
                    message: "The Cluster is not there".to_owned(),
                    size: None,
                }),
            },
            Target::Machine(tm) => inputs::machine_inputs(client, tm, &owner).await?,
        };
        match built {
            Ok(r) => {
                ctx.metrics
                    .set_inputs_bytes(kind_name, &ns, &name, r.total_bytes() as i64);
                inputs_obs = Inputs::Built {
                    hash: r.inputs_hash.clone(),
                };
                conds.set(
                    ctype::DEPENDENCIES_READY,
                    ConditionStatus::True,
                    reasons::DEPENDENCIES_READY,
                    "Owner, inputs and variable sources are resolved",
                );
                current = Some(r);
            }
            Err(nb) => {
                if let Some(size) = nb.size {
                    ctx.metrics
                        .set_inputs_bytes(kind_name, &ns, &name, size as i64);
                    conds.set(
                        ctype::APPLY_JOB_SUCCEEDED,
                        ConditionStatus::False,
                        reasons::INPUTS_TOO_LARGE,
                        &nb.message,
                    );
                    inputs_obs = Inputs::Failed {
                        reason: reasons::INPUTS_TOO_LARGE,
                    };
                } else {
                    conds.set(
                        ctype::DEPENDENCIES_READY,
                        if nb.waiting {
                            ConditionStatus::Unknown
                        } else {
                            ConditionStatus::False
                        },
                        nb.reason,
                        &nb.message,
                    );
                    gates.dependencies = Some(decide::GateBlock {
                        condition: ctype::DEPENDENCIES_READY,
                        reason: nb.reason,
                    });
                    inputs_obs = Inputs::Failed { reason: nb.reason };
                }
            }
        }
    } else if matches!(owner.check, OwnerCheck::Ok) && immutable_done {
        conds.set(
            ctype::DEPENDENCIES_READY,
            ConditionStatus::True,
            reasons::DEPENDENCIES_READY,
            "Owner resolved; a provisioned machine's inputs are fixed",
        );
    }

    // Outputs into status and spec.
    let mut health_reading = HealthReading::Unknown;
    let mut health_definite = false;
    if let Some(s) = &summary {
        let applied = s.inputs_hash.is_some();
        let o = outputs::apply(
            ctx,
            target,
            &owner,
            s,
            &durable_tfvars(&durable),
            applied,
            &mut draft,
            &mut conds,
            &mut outbox,
        )
        .await?;
        health_reading = o.reading;
        health_definite = o.definite;
        // status.pendingRefreshes: consecutive samples reading pending, for the refresh backoff
        // (30 s, 1 m, 2 m, 4 m, then 5 m).
        let sampled = kept.iter().any(|k| {
            k.outcome == JobOutcome::Succeeded
                && records.iter().any(|r| {
                    r.name == k.name && matches!(r.operation, Operation::Refresh | Operation::Drift)
                })
        });
        let w = draft.workload_mut();
        match health_reading {
            HealthReading::Pending if sampled => {
                w.pending_refreshes = Some(w.pending_refreshes.unwrap_or(0).saturating_add(1));
            }
            HealthReading::Pending => {}
            _ => w.pending_refreshes = None,
        }
    } else if !draft.provisioned() && active.is_none() {
        conds.set_if_missing(
            ctype::OUTPUTS_VALID,
            ConditionStatus::Unknown,
            reasons::OUTPUTS_PENDING,
            "No state yet",
        );
    }
    let source = SourceStatus {
        image: durable
            .annotation(annotations::IMAGE)
            .map(str::to_owned)
            .or_else(|| Some(target.workspace().source.image.clone())),
        image_digest: durable
            .annotation(annotations::IMAGE_DIGEST)
            .map(str::to_owned),
        runtime_version: summary
            .as_ref()
            .map(|s| s.runtime_version.clone())
            .filter(|v| !v.is_empty()),
    };
    draft.workload_mut().source = Some(source);

    // Conditions before the first apply.
    conds.set_if_missing(
        ctype::APPLY_JOB_SUCCEEDED,
        ConditionStatus::Unknown,
        reasons::NO_APPLY_YET,
        "The first apply has not completed yet",
    );
    conds.set_if_missing(
        ctype::DRIFT_JOB_SUCCEEDED,
        ConditionStatus::Unknown,
        reasons::DRIFT_NOT_CHECKED,
        "No drift check yet",
    );
    conds.set_if_missing(
        ctype::DRIFT_DETECTED,
        ConditionStatus::Unknown,
        reasons::DRIFT_NOT_CHECKED,
        "No drift check yet",
    );
    conds.set_if_missing(
        ctype::STATE_READABLE,
        ConditionStatus::Unknown,
        reasons::STATE_NOT_FOUND,
        "No state yet",
    );
    if !draft.provisioned() && conds.get(ctype::INFRASTRUCTURE_HEALTHY).is_none() {
        conds.set(
            ctype::INFRASTRUCTURE_HEALTHY,
            ConditionStatus::Unknown,
            reasons::WAITING_FOR_PROVISIONING,
            "Waiting for the first apply",
        );
    }
    if !credentials_step {
        conds.set_if_missing(
            ctype::IDENTITY_ALLOWED,
            ConditionStatus::Unknown,
            reasons::IDENTITY_CHECK_FAILED,
            "Not checked yet: the object has no owner or is paused",
        );
        conds.set_if_missing(
            ctype::CREDENTIALS_MIRRORED,
            ConditionStatus::Unknown,
            reasons::MIRROR_PENDING,
            "Not mirrored yet",
        );
    }

    // Dependents of a deleting cluster.
    let mut dependents = 0u32;
    if deleting && kind == ObjectKind::Cluster && !cluster_name.is_empty() {
        let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
        let lp = ListParams::default().labels(&format!("{}={cluster_name}", labels::CLUSTER_NAME));
        let machines = tms.list_metadata(&lp).await?.items.len() as u32;
        let tmps: Api<api::machinepool::TerraformMachinePool> =
            Api::namespaced(client.clone(), &ns);
        let pools = tmps.list_metadata(&lp).await?.items.len() as u32;
        dependents = machines + pools;
        if dependents > 0 {
            conds.set(
                ctype::DELETION_BLOCKED,
                ConditionStatus::True,
                reasons::DEPENDENTS_EXIST,
                &format!(
                    "{machines} TerraformMachines and {pools} TerraformMachinePools of Cluster {cluster_name} still exist"
                ),
            );
        } else {
            conds.set(
                ctype::DELETION_BLOCKED,
                ConditionStatus::False,
                reasons::NOT_BLOCKED,
                "Nothing blocks deletion",
            );
        }
    } else if kind == ObjectKind::Cluster {
        conds.set(
            ctype::DELETION_BLOCKED,
            ConditionStatus::False,
            reasons::NOT_BLOCKED,
            "Nothing blocks deletion",
        );
    }

    // Decide.
    let config = Config {
        drift_default_interval: ctx.settings.drift_default_interval,
        failed_jobs_history_limit: failed_limit,
        successful_jobs_history_limit: successful_limit,
        membership_interval: Duration::from_secs(60),
        health_check_interval: None,
        cluster_operation_gate: ctx.settings.cluster_operation_gate,
    };
    let last_apply = records
        .iter()
        .filter(|r| r.operation == Operation::Apply && r.outcome == Some(JobOutcome::Succeeded))
        .filter_map(|r| r.finished)
        .max()
        .or_else(|| {
            summary
                .as_ref()
                .filter(|s| s.inputs_hash.is_some())
                .and(state_created)
        });
    let observed = Observed {
        kind,
        uid: uid.clone(),
        mutable: kind != ObjectKind::Machine,
        provisioned: draft.provisioned(),
        names_cluster: !cluster_name.is_empty(),
        externally_managed: false,
        deleting,
        finalizer,
        paused: owner.paused,
        owner: owner.check,
        gates,
        jobs: records.clone(),
        state: state_read.clone(),
        inputs: inputs_obs.clone(),
        durable_inputs: durable.secret.is_some(),
        restore: None,
        drift: Drift {
            interval: drift_interval(target, tc_for_defaults.as_ref()),
            action: drift_action(target),
            found: conds.status(ctype::DRIFT_DETECTED) == Some("True"),
            remediation_failures: remediation_failures(
                &records,
                draft.workload().last_drift_check.as_ref(),
            ),
        },
        health: health_reading,
        pending_refreshes: draft.workload().pending_refreshes.unwrap_or(0).max(0) as u32,
        last: LastTimes {
            apply: last_apply,
            refresh: draft
                .workload()
                .last_refresh
                .as_ref()
                .map(|t| SystemTime::from(t.0)),
            drift_check: draft
                .workload()
                .last_drift_check
                .as_ref()
                .map(|t| SystemTime::from(t.0)),
            apply_health_definite: health_definite,
        },
        approvals: Approvals {
            policy: match target {
                Target::Cluster(tc) => tc.spec.apply_policy.unwrap_or_default(),
                Target::Machine(_) => ApplyPolicy::Automatic,
            },
            plan: match &draft {
                StatusDraft::Cluster(cs) => cs.plan.as_ref().map(|p| decide::PlanStatus {
                    inputs_hash: p.inputs_hash.clone(),
                    plan_hash: p.plan_hash.clone(),
                    has_changes: contract::plan::plan_hash_has_changes(&p.plan_hash),
                }),
                StatusDraft::Machine(_) => None,
            },
            approved_plan_hash: target
                .annotation(annotations::APPROVE_PLAN)
                .map(str::to_owned),
            approved_destructive_hash: target
                .annotation(annotations::APPROVE_DESTRUCTIVE_PLAN)
                .map(str::to_owned),
        },
        leases: Leases::default(),
        dependents,
        pool: None,
        now,
    };
    let mut decision = decide::decide(&observed, &config);
    debug!(kind = kind_name, namespace = %ns, name = %name, ?decision, "decided");

    // Act.
    let mut job_started: Option<(StartJob, String)> = None;
    let mut requeue: Option<Duration> = None;
    let mut drop_finalizer = false;
    let mut stop_after_patch = false;
    if let Decision::StartJob(start) = &decision {
        match start_job(
            ctx,
            target,
            &owner,
            start,
            &cluster_name,
            &suffix,
            &policy,
            identity_name.as_deref(),
            current.as_ref(),
            match &draft {
                StatusDraft::Cluster(cs) => cs.plan.as_ref(),
                StatusDraft::Machine(_) => None,
            },
            &mut durable,
            &mut conds,
            &mut outbox,
        )
        .await?
        {
            Started::Yes(job_name) => job_started = Some((start.clone(), job_name)),
            Started::Wait(reason) => {
                decision = Decision::Wait {
                    reason,
                    requeue_after: Some(decide::LEASE_RECHECK),
                };
            }
        }
    }
    match &decision {
        Decision::AddFinalizer => {
            add_finalizer(ctx, target).await?;
            stop_after_patch = true;
        }
        Decision::DeleteStuckJob { job } => {
            delete_opt(&jobs_api, job).await?;
            outbox.warning(
                events::STUCK_JOB_DELETED,
                format!(
                    "Job {job} could never start (its per-run Secret is missing) and was deleted"
                ),
            );
            requeue = Some(Duration::from_secs(1));
        }
        Decision::DropFinalizer => drop_finalizer = true,
        Decision::Wait {
            reason,
            requeue_after,
        } => {
            report_wait(ctx, kind_name, reason, &mut conds, &mut outbox);
            requeue = *requeue_after;
        }
        Decision::Nothing { requeue_after } => requeue = *requeue_after,
        Decision::StartJob(_) => {}
    }
    let op_label = match &decision {
        Decision::StartJob(s) => s.operation.as_str(),
        _ => "none",
    };
    ctx.metrics
        .op_decision(kind_name, op_label, decision_reason(&decision));

    if let Some((start, job_name)) = &job_started {
        draft.workload_mut().active_job = Some(ActiveJob {
            name: job_name.clone(),
            operation: start.operation,
            attempt: start.attempt as i32,
            start_time: Some(Time(now_ts)),
        });
        *active_counts.entry(start.operation.as_str()).or_default() += 1;
        if start.operation == Operation::Apply && !draft.provisioned() {
            conds.set(
                ctype::INFRASTRUCTURE_HEALTHY,
                ConditionStatus::False,
                reasons::PROVISIONING,
                "The first apply is running",
            );
        }
    }
    for (op, n) in &active_counts {
        ctx.metrics.set_jobs_active(kind_name, op, *n);
    }

    // The clusterctl move block: cleared once no Job is active.
    if active.is_none()
        && job_started.is_none()
        && target.annotation(annotations::BLOCK_MOVE).is_some()
    {
        set_block_move(ctx, target, false).await?;
    }

    // Ready.
    let provisioned = draft.provisioned();
    let inputs_list: &[&str] = if provisioned {
        ctype::READY_INPUTS_PROVISIONED
    } else {
        ctype::READY_INPUTS_BEFORE_PROVISIONED
    };
    conds.summarize_ready(inputs_list);
    if deleting {
        conds.set(
            ctype::READY,
            ConditionStatus::False,
            reasons::DELETING,
            "The object is being deleted",
        );
    } else if !provisioned
        && conds.status(ctype::READY) == Some("False")
        && conds.reason(ctype::INFRASTRUCTURE_HEALTHY) == Some(reasons::PROVISIONING)
        && inputs_list
            .iter()
            .filter(|t| **t != ctype::INFRASTRUCTURE_HEALTHY && **t != ctype::DELETING)
            .all(|t| conds.status(t) != Some("False"))
    {
        conds.set(
            ctype::READY,
            ConditionStatus::False,
            reasons::PROVISIONING,
            "The first apply is running",
        );
    }
    let gauge = |s: Option<&str>| match s {
        Some("True") => 1,
        Some("False") => 0,
        _ => -1,
    };
    ctx.metrics
        .set_ready(kind_name, &ns, &name, gauge(conds.status(ctype::READY)));
    ctx.metrics.set_infrastructure_healthy(
        kind_name,
        &ns,
        &name,
        gauge(conds.status(ctype::INFRASTRUCTURE_HEALTHY)),
    );
    ctx.metrics.set_drift_detected(
        kind_name,
        &ns,
        &name,
        i64::from(conds.status(ctype::DRIFT_DETECTED) == Some("True")),
    );

    // Cleanup before the finalizer goes.
    if drop_finalizer {
        cleanup(ctx, target, &suffix, &cluster_name, &mut outbox).await?;
    }

    outbox.for_transitions(conds.transitions());
    draft.workload_mut().observed_generation = target.meta().generation;
    draft.workload_mut().conditions = Some(conds.into_list());
    let after = draft.to_value();

    // The one status patch.
    if !drop_finalizer && let Some(patch) = crate::patch::merge_patch(&before, &after) {
        let body = serde_json::json!({ "status": patch });
        if !target.merge_patch(client, &body, true).await? {
            return Ok(Action::await_change());
        }
    }
    // Bookkept only now.
    for k in &kept {
        mark_bookkept(&jobs_api, &k.name, k.outcome).await?;
    }
    if drop_finalizer {
        remove_finalizer(ctx, target).await?;
        // The last object of the namespace takes the runner's RBAC and CAPTF's leases with it.
        if let Err(e) = crate::sweep::sweep_namespace(client, &ns, Some(&uid), Duration::ZERO).await
        {
            warn!(namespace = %ns, error = %e, "orphan sweep after a finalizer's removal");
        }
        outbox.normal(
            events::DESTROYED,
            format!("{kind_name} {name}: infrastructure destroyed and state removed"),
        );
        outbox.normal(
            events::FINALIZER_REMOVED,
            format!("Finalizer removed from {kind_name} {name}"),
        );
        ctx.metrics.forget_object(kind_name, &ns, &name);
    }
    outbox.publish(ctx, &target.reference()).await;

    if stop_after_patch {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if drop_finalizer {
        return Ok(Action::await_change());
    }
    if job_started.is_some() {
        return Ok(Action::requeue(
            decide::STUCK_AFTER + Duration::from_secs(1),
        ));
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d.max(Duration::from_millis(500))),
        None => Action::requeue(ctx.settings.sync_period),
    })
}

/// Failed drift-remediation applies since the last successful drift check (Drift and Health
/// "Report or remediate").
fn remediation_failures(records: &[JobRecord], last_check: Option<&Time>) -> u32 {
    let since = last_check.map(|t| SystemTime::from(t.0));
    records
        .iter()
        .filter(|r| {
            r.operation == Operation::Apply
                && r.drift_remediation
                && r.outcome.is_some_and(JobOutcome::counts_as_failure)
                && since.is_none_or(|s| r.finished.is_some_and(|f| f > s))
        })
        .count() as u32
}

fn to_time(t: SystemTime) -> Option<Time> {
    Timestamp::try_from(t).ok().map(Time)
}

fn durable_tfvars(durable: &Durable) -> serde_json::Value {
    durable
        .data(TFVARS_JSON)
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn metric_reason(reason: &str) -> &'static str {
    match reason {
        reasons::STATE_INCONSISTENT => "inconsistent",
        reasons::STATE_ENCRYPTED => "encrypted",
        reasons::STATE_LOCKED => "locked",
        reasons::STATE_LOST => "lost",
        _ => "corrupt",
    }
}

fn decision_reason(d: &Decision) -> &'static str {
    match d {
        Decision::AddFinalizer => "finalizer",
        Decision::StartJob(s) => match s.reason {
            decide::StartReason::Restore => "restore",
            decide::StartReason::Destroy => "deleting",
            decide::StartReason::Apply(a) | decide::StartReason::Plan(a) => match a {
                decide::ApplyReason::FirstApply => "first_apply",
                decide::ApplyReason::NoInputsHash => "no_inputs_hash",
                decide::ApplyReason::InputsChanged => "inputs_changed",
                decide::ApplyReason::RetryFailedApply => "retry",
                decide::ApplyReason::DriftRemediation => "drift_remediation",
            },
            decide::StartReason::Refresh(_) => "refresh",
            decide::StartReason::DriftCheck => "drift_interval",
        },
        Decision::DeleteStuckJob { .. } => "stuck_job",
        Decision::DropFinalizer => "drop_finalizer",
        Decision::Wait { .. } => "wait",
        Decision::Nothing { .. } => "nothing_due",
    }
}

/// The object's `spec.jobs`, merged over its cluster's `spec.defaults.jobs` (machines only).
fn merged_policy(target: &Target, tc: Option<&TerraformCluster>) -> JobPolicy {
    let own = target.workspace().jobs.clone().unwrap_or_default();
    match target {
        Target::Cluster(_) => own,
        Target::Machine(_) => {
            let defaults = tc
                .and_then(|tc| tc.spec.defaults.as_ref())
                .and_then(|d| d.jobs.clone())
                .unwrap_or_default();
            own.merged_over(&defaults)
        }
    }
}

fn drift_action(target: &Target) -> DriftAction {
    match target {
        Target::Cluster(tc) => tc
            .spec
            .drift
            .as_ref()
            .and_then(|d| d.action)
            .unwrap_or_default(),
        Target::Machine(_) => DriftAction::Report,
    }
}

fn drift_interval(target: &Target, tc: Option<&TerraformCluster>) -> Option<Duration> {
    let secs = match target {
        Target::Cluster(tc) => tc.spec.drift.as_ref().and_then(|d| d.interval_seconds),
        Target::Machine(tm) => tm
            .spec
            .drift
            .as_ref()
            .and_then(|d| d.interval_seconds)
            .or_else(|| {
                tc.and_then(|tc| tc.spec.defaults.as_ref())
                    .and_then(|d| d.drift.as_ref())
                    .and_then(|d| d.interval_seconds)
            }),
    };
    secs.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
}

/// Sets the conditions a wait reports, and counts lease waits.
fn report_wait(
    ctx: &Context,
    kind: &str,
    reason: &WaitReason,
    conds: &mut Conditions,
    outbox: &mut Outbox,
) {
    let condition_for = |op: Operation| match op {
        Operation::Drift | Operation::Refresh => ctype::DRIFT_JOB_SUCCEEDED,
        Operation::Restore => ctype::RESTORE_JOB_SUCCEEDED,
        _ => ctype::APPLY_JOB_SUCCEEDED,
    };
    match reason {
        WaitReason::RunLease { operation, job } => {
            let msg = format!(
                "The {} waits for Job {job}, which holds the run lease",
                operation.as_str()
            );
            if conds.reason(condition_for(*operation)) != Some(reasons::WAITING_FOR_RUN_LEASE) {
                ctx.metrics.lease_wait(kind, "run_lease");
                outbox.normal(events::WAITING_FOR_RUN_LEASE, msg.clone());
            }
            conds.set(
                condition_for(*operation),
                ConditionStatus::Unknown,
                reasons::WAITING_FOR_RUN_LEASE,
                &msg,
            );
        }
        WaitReason::ClusterOperation { operation } => {
            let msg = format!(
                "The {} waits for the cluster's own operation",
                operation.as_str()
            );
            if conds.reason(condition_for(*operation))
                != Some(reasons::WAITING_FOR_CLUSTER_OPERATION)
            {
                ctx.metrics.lease_wait(kind, "cluster_operation");
                outbox.normal(events::WAITING_FOR_CLUSTER_OPERATION, msg.clone());
            }
            conds.set(
                condition_for(*operation),
                ConditionStatus::Unknown,
                reasons::WAITING_FOR_CLUSTER_OPERATION,
                &msg,
            );
        }
        WaitReason::MachineOperations { operation } => {
            let msg = format!(
                "The {} waits for the cluster's machine operations",
                operation.as_str()
            );
            if conds.reason(condition_for(*operation))
                != Some(reasons::WAITING_FOR_MACHINE_OPERATIONS)
            {
                ctx.metrics.lease_wait(kind, "machine_operations");
                outbox.normal(events::WAITING_FOR_MACHINE_OPERATIONS, msg.clone());
            }
            conds.set(
                condition_for(*operation),
                ConditionStatus::Unknown,
                reasons::WAITING_FOR_MACHINE_OPERATIONS,
                &msg,
            );
        }
        WaitReason::PlanAwaitingApproval
            if !matches!(
                conds.reason(ctype::APPLY_JOB_SUCCEEDED),
                Some(reasons::PLAN_CHANGED | reasons::PLAN_AWAITING_APPROVAL)
            ) =>
        {
            conds.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::Unknown,
                reasons::PLAN_AWAITING_APPROVAL,
                &format!(
                    "The plan in status.plan waits for the {} annotation naming its planHash",
                    annotations::APPROVE_PLAN
                ),
            );
        }
        WaitReason::Gate(g)
            if g.condition == ctype::IDENTITY_ALLOWED
                && matches!(
                    conds.reason(ctype::APPLY_JOB_SUCCEEDED),
                    None | Some(reasons::NO_APPLY_YET)
                ) =>
        {
            conds.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::False,
                reasons::IDENTITY_NOT_ALLOWED,
                "No Job is created: the identity does not allow this object",
            );
        }
        _ => {}
    }
}

enum Started {
    Yes(String),
    Wait(WaitReason),
}

/// The image to run: a machine's pinned `repo@digest` once it has one, else `spec.source.image`.
fn image_to_run(target: &Target, durable: &Durable, op: Operation) -> String {
    let spec_image = target.workspace().source.image.clone();
    let pinned = match target {
        Target::Machine(_) if op != Operation::Apply => durable
            .annotation(annotations::IMAGE_DIGEST)
            .zip(durable.annotation(annotations::IMAGE)),
        _ => None,
    };
    let Some((digest, image)) = pinned else {
        return spec_image;
    };
    match contract::image_ref::parse(image) {
        Ok(r) => {
            let repo = match r.host {
                Some(h) => format!("{h}/{}", r.path),
                None => r.path.to_owned(),
            };
            format!("{repo}@{digest}")
        }
        Err(_) => spec_image,
    }
}

/// Takes the leases, checks the lock, writes the durable and per-run inputs and creates the Job.
#[allow(clippy::too_many_arguments)]
async fn start_job(
    ctx: &Context,
    target: &Target,
    owner: &Owner,
    start: &StartJob,
    cluster_name: &str,
    suffix: &str,
    policy: &JobPolicy,
    identity: Option<&str>,
    current: Option<&RenderedInputs>,
    approved_plan: Option<&api::status::PlanPreview>,
    durable: &mut Durable,
    conds: &mut Conditions,
    outbox: &mut Outbox,
) -> Result<Started, Error> {
    let client = &ctx.client;
    let kind = target.kind();
    let ns = target.namespace();
    let name = target.name();
    let op = start.operation;
    let Some(identity) = identity else {
        return Ok(Started::Wait(WaitReason::InputsUnavailable {
            reason: None,
        }));
    };

    // The inputs this Job renders.
    let rendered = match op {
        Operation::Apply | Operation::Plan => current.cloned(),
        _ => match (kind, current) {
            (ObjectKind::Cluster, Some(c)) if c.inputs_hash == start.inputs_hash => Some(c.clone()),
            _ => durable
                .rendered(kind, &start.inputs_hash)
                .or_else(|| current.cloned()),
        },
    };
    let Some(rendered) = rendered else {
        if op == Operation::Destroy {
            conds.set(
                ctype::APPLY_JOB_SUCCEEDED,
                ConditionStatus::False,
                reasons::DESTROY_FAILED,
                "The durable inputs Secret is missing: destroy has nothing to run against",
            );
        }
        return Ok(Started::Wait(WaitReason::InputsUnavailable {
            reason: None,
        }));
    };

    let uid = target.uid();
    let image = image_to_run(target, durable, op);
    let approved_destructive = target.annotation(annotations::APPROVE_DESTRUCTIVE_PLAN);
    let guard_deletes = kind == ObjectKind::Cluster && op == Operation::Apply;
    // Under applyPolicy Manual an apply (but the first) runs only the plan reviewed in
    // status.plan: approved, or without changes.
    let expect_plan = match (target, approved_plan) {
        (Target::Cluster(tc), Some(plan))
            if tc.spec.apply_policy.unwrap_or_default() == ApplyPolicy::Manual
                && op == Operation::Apply
                && plan.inputs_hash == start.inputs_hash =>
        {
            Some(plan.plan_hash.clone())
        }
        _ => None,
    };
    let mut request = job::JobRequest {
        kind,
        namespace: &ns,
        name: &name,
        uid: &uid,
        cluster_name,
        operation: op,
        attempt: start.attempt,
        tick: start.tick.as_deref(),
        inputs_hash: &start.inputs_hash,
        image: &image,
        image_ref: &target.workspace().source.image,
        pull_policy: target.workspace().source.image_pull_policy,
        policy,
        identity,
        runner_image: &ctx.settings.runner_image,
        state_suffix: suffix,
        guard_deletes,
        allow_deletes_hash: approved_destructive.filter(|_| guard_deletes),
        expect_plan: expect_plan.as_deref(),
        force_unlock: None,
        runner_events: ctx.settings.runner_events,
        drift_remediation: start.drift_remediation(),
        approved_plan: expect_plan.as_deref(),
        restore: None,
    };
    let job_name = job::job_name(&request);

    // Run lease.
    let lease_labels = leases::lease_labels(leases::RUN_LEASE, kind.kind(), &name, cluster_name);
    match leases::take(
        client,
        &ns,
        &run_lease_name(suffix),
        &job_name,
        op.as_str(),
        lease_labels,
    )
    .await?
    {
        Take::Taken => {}
        Take::HeldBy(holder) => {
            return Ok(Started::Wait(WaitReason::RunLease {
                operation: op,
                job: holder,
            }));
        }
    }
    // The cluster operation gate.
    let gated = matches!(
        op,
        Operation::Apply | Operation::Destroy | Operation::Restore
    );
    if ctx.settings.cluster_operation_gate && gated && !cluster_name.is_empty() {
        let cluster_lease = cluster_lease_name(&ns, cluster_name);
        match kind {
            ObjectKind::Cluster => {
                let labels =
                    leases::lease_labels(leases::CLUSTER_LEASE, kind.kind(), &name, cluster_name);
                match leases::take(client, &ns, &cluster_lease, &job_name, op.as_str(), labels)
                    .await?
                {
                    Take::Taken => {}
                    Take::HeldBy(holder) => {
                        leases::give_back(client, &ns, &run_lease_name(suffix), &job_name).await?;
                        return Ok(Started::Wait(WaitReason::RunLease {
                            operation: op,
                            job: holder,
                        }));
                    }
                }
                if leases::machines_operating(client, &ns, cluster_name).await? > 0 {
                    return Ok(Started::Wait(WaitReason::MachineOperations {
                        operation: op,
                    }));
                }
            }
            _ => {
                if leases::live_holder(client, &ns, &cluster_lease)
                    .await?
                    .is_some()
                {
                    leases::give_back(client, &ns, &run_lease_name(suffix), &job_name).await?;
                    return Ok(Started::Wait(WaitReason::ClusterOperation {
                        operation: op,
                    }));
                }
            }
        }
    }
    // The lock.
    let force_unlock = match state::check_lock(client, &ns, suffix, &own_pod_prefix(kind, &name))
        .await?
    {
        LockCheck::Free => None,
        LockCheck::Stale { id } => Some(id),
        LockCheck::Held { who } => {
            conds.set(
                ctype::STATE_READABLE,
                ConditionStatus::False,
                reasons::STATE_LOCKED,
                &format!("The state lock is held by {who}, not by one of this object's finished runner pods"),
            );
            leases::give_back(client, &ns, &run_lease_name(suffix), &job_name).await?;
            if kind == ObjectKind::Cluster && !cluster_name.is_empty() {
                leases::give_back(
                    client,
                    &ns,
                    &cluster_lease_name(&ns, cluster_name),
                    &job_name,
                )
                .await?;
            }
            return Ok(Started::Wait(WaitReason::StateUnreadable {
                reason: reasons::STATE_LOCKED,
            }));
        }
    };

    // The durable inputs, written at apply start.
    if op == Operation::Apply {
        let previous_image = durable.annotation(annotations::IMAGE).map(str::to_owned);
        let digest = durable
            .annotation(annotations::IMAGE_DIGEST)
            .filter(|_| previous_image.as_deref() == Some(target.workspace().source.image.as_str()))
            .map(str::to_owned);
        let secret = job::durable_inputs_secret(
            &request.durable_inputs(digest.as_deref()),
            &rendered.main_tf_json,
            &rendered.tfvars_json,
        );
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let durable_name = durable_inputs_secret_name(kind, &name);
        let written = match &durable.secret {
            Some(existing) => {
                let mut s = secret.clone();
                s.metadata.resource_version = existing.metadata.resource_version.clone();
                api.replace(&durable_name, &PostParams::default(), &s)
                    .await?
            }
            None => match api.create(&PostParams::default(), &secret).await {
                Ok(s) => s,
                Err(e) if is_conflict(&e) => return Err(e.into()),
                Err(e) => return Err(e.into()),
            },
        };
        durable.secret = Some(written);
        record_user_endpoint(ctx, target, owner.cluster.as_ref()).await?;
    }

    // The clusterctl move block, just before the Job.
    if target.annotation(annotations::BLOCK_MOVE).is_none() {
        set_block_move(ctx, target, true).await?;
    }

    // The Job, then its per-run Secret.
    request.force_unlock = force_unlock.as_deref();
    let built = job::build_job(&request);
    for dropped in &built.dropped_env {
        outbox.warning(
            events::JOB_ENV_DROPPED,
            format!("spec.jobs.env entry {dropped} is reserved (TF_*, KUBE_* or set by the Job) and was dropped"),
        );
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    // Job names are deterministic: another manager (or a pass before a crash) may have created
    // this very Job already; it is then only completed here, and announced once.
    let (created, new) = match jobs.create(&PostParams::default(), &built.job).await {
        Ok(j) => (j, true),
        Err(e) if is_conflict(&e) => (jobs.get(&job_name).await?, false),
        Err(e) => return Err(e.into()),
    };
    let run_secret = job::run_secret(&created, &rendered.main_tf_json, &rendered.tfvars_json);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    match secrets.create(&PostParams::default(), &run_secret).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    if force_unlock.is_some() {
        ctx.metrics.lock_force_unlock(kind.kind());
        outbox.warning(
            events::FORCE_UNLOCKED,
            format!("Job {job_name} force-unlocks a stale state lock left by one of this object's runner pods"),
        );
    }
    if start.reason == decide::StartReason::Apply(decide::ApplyReason::InputsChanged) {
        ctx.metrics.inputs_hash_change(kind.kind());
        outbox.normal(
            events::INPUTS_CHANGED,
            format!(
                "The inputs hash changed to {}; a new apply starts",
                start.inputs_hash
            ),
        );
    }
    if start.drift_remediation() {
        conds.set(
            ctype::DRIFT_DETECTED,
            ConditionStatus::True,
            reasons::DRIFT_REMEDIATING,
            &format!("Remediation apply {job_name} is running"),
        );
        outbox.normal(
            events::DRIFT_REMEDIATION_STARTED,
            format!("Remediation apply {job_name} started"),
        );
    }
    if let Some(hash) = &expect_plan {
        outbox.normal(
            events::PLAN_APPROVED,
            format!("Apply Job {job_name} runs the approved plan {hash}"),
        );
    }
    if new {
        outbox.normal(
            events::JOB_CREATED,
            format!(
                "{} Job {job_name} created (attempt {}, image {image}, reason {})",
                op.as_str(),
                start.attempt,
                decision_reason(&Decision::StartJob(start.clone()))
            ),
        );
        info!(kind = kind.kind(), namespace = %ns, name = %name, job = %job_name, "job created");
    }
    Ok(Started::Yes(job_name))
}

/// The name prefix every runner pod of the object carries: `captf-<kindshort>-<name>-` (the
/// object name hashed as in Job names when those would be too long).
fn own_pod_prefix(kind: ObjectKind, name: &str) -> String {
    let sample = contract::names::job_name(&contract::names::JobNameParts {
        kind,
        name,
        operation: Operation::Apply,
        attempt: 1,
        inputs_hash: "",
        tick: None,
    });
    match sample.rfind("-apply-a1-") {
        Some(i) => format!("{}-", &sample[..i]),
        None => format!("captf-{}-", kind.short()),
    }
}

/// `captf.io/endpoint-source: user` before the first apply when an endpoint is already set.
async fn record_user_endpoint(
    ctx: &Context,
    target: &Target,
    cluster: Option<&Cluster>,
) -> Result<(), Error> {
    let Target::Cluster(tc) = target else {
        return Ok(());
    };
    let before_first_apply = !tc.status.as_ref().is_some_and(|s| {
        s.workload
            .initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    });
    let record = contract::inputs::cluster::endpoint_source_to_record(
        target.annotation(annotations::ENDPOINT_SOURCE),
        before_first_apply,
        inputs::endpoint(cluster.and_then(|c| c.spec.control_plane_endpoint.as_ref())).as_ref(),
        inputs::endpoint(tc.spec.control_plane_endpoint.as_ref()).as_ref(),
        false,
    );
    if let Some(source) = record {
        patch_meta(
            ctx,
            target,
            &serde_json::json!({"metadata": {"annotations": {annotations::ENDPOINT_SOURCE: source.as_str()}}}),
        )
        .await?;
    }
    Ok(())
}

/// `status.plan` from a plan (or plan-changed apply) Job's result.
fn plan_preview(record: &JobRecord, plan: &contract::result::PlanDoc) -> api::status::PlanPreview {
    api::status::PlanPreview {
        inputs_hash: record.inputs_hash.clone(),
        job: record.name.clone(),
        plan_hash: plan.hash.clone(),
        add: Some(plan.add as i32),
        change: Some(plan.change as i32),
        destroy: Some(plan.destroy as i32),
        resources: Some(plan.resources.clone()).filter(|r| !r.is_empty()),
        truncated: plan.truncated.then_some(true),
        created_at: record.finished.and_then(to_time),
    }
}

/// After a succeeded cluster apply: the plan approval and the destructive-plan approval that
/// covered it are consumed (Plan Approval "Done", "Approving a destructive plan").
async fn consume_approvals(
    ctx: &Context,
    target: &Target,
    record: &JobRecord,
    draft: &mut StatusDraft,
    outbox: &mut Outbox,
) -> Result<(), Error> {
    let Target::Cluster(_) = target else {
        return Ok(());
    };
    let kind = target.kind().kind();
    let mut remove = serde_json::Map::new();
    if let StatusDraft::Cluster(cs) = draft
        && cs
            .plan
            .as_ref()
            .is_some_and(|p| p.inputs_hash == record.inputs_hash)
    {
        cs.plan = None;
        if target.annotation(annotations::APPROVE_PLAN).is_some() {
            remove.insert(
                annotations::APPROVE_PLAN.to_owned(),
                serde_json::Value::Null,
            );
            ctx.metrics.plan_approval(kind, "approved");
            outbox.normal(
                events::PLAN_APPLIED,
                format!(
                    "Job {} applied the approved plan; the approval is consumed",
                    record.name
                ),
            );
        }
    }
    if target.annotation(annotations::APPROVE_DESTRUCTIVE_PLAN) == Some(record.inputs_hash.as_str())
    {
        remove.insert(
            annotations::APPROVE_DESTRUCTIVE_PLAN.to_owned(),
            serde_json::Value::Null,
        );
        ctx.metrics.destructive_approval_consumed(kind);
        outbox.normal(
            events::DESTRUCTIVE_PLAN_APPROVAL_CONSUMED,
            format!(
                "Job {} applied the approved inputs hash {}; the approval is consumed",
                record.name, record.inputs_hash
            ),
        );
    }
    if !remove.is_empty() {
        patch_meta(
            ctx,
            target,
            &serde_json::json!({"metadata": {"annotations": remove}}),
        )
        .await?;
    }
    Ok(())
}

/// Records the digest the kubelet ran on the durable inputs Secret after a succeeded apply.
async fn pin_digest(
    secrets: &Api<Secret>,
    durable: &mut Durable,
    report: &PodReport,
    outbox: &mut Outbox,
) -> Result<(), Error> {
    let Some(secret) = &durable.secret else {
        return Ok(());
    };
    let Some(digest) = report.image_id.as_deref().and_then(bookkeeping::digest_of) else {
        outbox.warning(
            events::DIGEST_UNKNOWN,
            "The apply's pod reported no image digest; later Jobs run the spec's image reference",
        );
        return Ok(());
    };
    if durable.annotation(annotations::IMAGE_DIGEST) == Some(digest.as_str()) {
        return Ok(());
    }
    let name = secret.metadata.name.clone().unwrap_or_default();
    let patch =
        serde_json::json!({"metadata": {"annotations": {annotations::IMAGE_DIGEST: digest}}});
    let updated = secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    durable.secret = Some(updated);
    outbox.normal(
        events::DIGEST_PINNED,
        format!("Image digest {digest} pinned"),
    );
    Ok(())
}

async fn mark_bookkept(jobs: &Api<Job>, name: &str, outcome: JobOutcome) -> Result<(), Error> {
    let annotations: serde_json::Map<String, serde_json::Value> =
        bookkeeping::bookkept_annotations(outcome)
            .into_iter()
            .map(|a| (a.to_owned(), serde_json::Value::String("true".to_owned())))
            .collect();
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    match jobs
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn patch_meta(
    ctx: &Context,
    target: &Target,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    target.merge_patch(&ctx.client, patch, false).await?;
    Ok(())
}

async fn set_block_move(ctx: &Context, target: &Target, on: bool) -> Result<(), Error> {
    let value = if on {
        serde_json::Value::String(String::new())
    } else {
        serde_json::Value::Null
    };
    patch_meta(
        ctx,
        target,
        &serde_json::json!({"metadata": {"annotations": {annotations::BLOCK_MOVE: value}}}),
    )
    .await
}

async fn add_finalizer(ctx: &Context, target: &Target) -> Result<(), Error> {
    let mut finalizers = target.meta().finalizers.clone().unwrap_or_default();
    finalizers.push(target.finalizer().to_owned());
    patch_meta(
        ctx,
        target,
        &serde_json::json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": target.meta().resource_version,
        }}),
    )
    .await
}

async fn remove_finalizer(ctx: &Context, target: &Target) -> Result<(), Error> {
    let finalizers: Vec<String> = target
        .meta()
        .finalizers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != target.finalizer())
        .collect();
    patch_meta(
        ctx,
        target,
        &serde_json::json!({"metadata": {"finalizers": finalizers}}),
    )
    .await
}

/// Deletion order's cleanup: state Secrets and lock Lease, durable inputs, leases, mirror
/// ownership.
async fn cleanup(
    ctx: &Context,
    target: &Target,
    suffix: &str,
    cluster_name: &str,
    outbox: &mut Outbox,
) -> Result<(), Error> {
    let client = &ctx.client;
    let ns = target.namespace();
    // The state goes last: a cleanup cut short is finished by the next pass, which still finds
    // the succeeded destroy.
    identity::release_mirrors(client, &ns, &target.uid(), outbox).await?;
    let leases_api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &ns);
    delete_opt(&leases_api, &run_lease_name(suffix)).await?;
    if target.kind() == ObjectKind::Cluster && !cluster_name.is_empty() {
        delete_opt(&leases_api, &cluster_lease_name(&ns, cluster_name)).await?;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    delete_opt(
        &secrets,
        &durable_inputs_secret_name(target.kind(), &target.name()),
    )
    .await?;
    state::remove(client, &ns, suffix).await?;
    Ok(())
}
