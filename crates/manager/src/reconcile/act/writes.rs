//! Act's writes besides the decision (spec: The Reconcile Lifecycle "Bookkeeping", "Deletion
//! order", "After the shared flow"; Terraform State "State backups", "Restore"; Security Model
//! "Image pinning by digest"; Plan Approval "Done"; Identities and Credentials "How credentials
//! reach a Job"): each [`Write`] Observe found and [`crate::reconcile::plan`] ordered, made here.
//! Writes to the object go through [`Pass::patch_object`], under the pass's resourceVersion; the
//! event of a write no later pass repeats goes to `announced` with it, and its metric is counted
//! once it landed.

use api::constants::{annotations, events};
use api::status::StateBackup;
use contract::names::run_secret_name;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::{Acted, block_start};
use crate::kinds::identity;
use crate::kinds::identity::runner_rbac;
use crate::kinds::pool;
use crate::kinds::remediation;
use crate::pass::status::Fact;
use crate::pass::{Error, Pass};
use crate::reconcile::decide::Decision;
use crate::reconcile::observe::Observation;
use crate::reconcile::plan::{Consumed, Write};
use crate::runtime::kubeutil::delete_opt;
use crate::runtime::leases;
use crate::state::{self, backups};

/// Makes one planned write (not the decision, which [`super::carry_out`] carries out).
pub async fn make(
    p: &mut Pass<'_>,
    o: &mut Observation,
    acted: &mut Acted,
    write: Write,
) -> Result<(), Error> {
    let (client, ns) = (p.ctx.client.clone(), p.ns.clone());
    match write {
        Write::AdoptState { job, inputs_hash } => adopt(p, o, &job, &inputs_hash).await?,
        Write::PinDigest { digest } => pin_digest(p, o, &digest).await?,
        Write::ConsumeApprovals(c) => consume_approvals(p, &c).await?,
        Write::RemoveRestoreAnnotation { .. } => {
            let patch = serde_json::json!({"metadata": {"annotations": {
                annotations::RESTORE_STATE: null}}});
            p.patch_object(&patch).await?;
        }
        Write::ReleaseRun { job, cluster_lease } => {
            // Three objects, none waiting for another: deleted and given back at once.
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let run_secret = run_secret_name(&job);
            let cluster_lease = async {
                match &cluster_lease {
                    Some(lease) => {
                        leases::give_back(&client, &p.ctx.caches.leases, &ns, lease, &job).await
                    }
                    None => Ok(()),
                }
            };
            let (deleted, run_lease, cluster_lease) = tokio::join!(
                delete_opt(&secrets, &run_secret),
                super::start::give_back_run_lease(p, &job),
                cluster_lease
            );
            deleted?;
            run_lease?;
            cluster_lease?;
        }
        Write::PruneJob { job } => {
            let jobs: Api<Job> = Api::namespaced(client, &ns);
            delete_opt(&jobs, &job).await?;
        }
        Write::Mirror(mirror) => {
            if let Err(message) =
                identity::write_mirror(&client, &ns, &mirror, &mut p.announced).await?
            {
                let gate = identity::mirror_failed(&mut p.findings, &message);
                block_start(acted, gate);
            }
        }
        Write::RunnerRbac(rbac) => {
            if let Err(message) = runner_rbac::write(&client, &ns, &rbac).await? {
                let gate = runner_rbac::rbac_failed(&mut p.findings, &message);
                block_start(acted, gate);
            }
        }
        Write::BackUp(take) => acted.taken_backup = back_up(p, o, &take).await?,
        Write::PruneBackups(sets) => {
            backups::prune(&client, &ns, &p.suffix, &sets).await?;
            p.ctx
                .metrics
                .state_backups(p.kind_name(), "pruned", sets.len() as u64);
        }
        Write::PatchSpec(mut patch) => {
            // A pass that writes the spec and will clear the move block clears it in the same
            // patch (one request instead of two).
            if clears_move_block(p, o, acted) {
                patch["metadata"]["annotations"][annotations::BLOCK_MOVE] = serde_json::Value::Null;
                // As the clearing on its own is: its own watch event wakes no one.
                p.patch_object_accounted(&patch).await?;
                p.move_block_cleared = true;
            } else {
                p.patch_object(&patch).await?;
            }
            let spec_events = std::mem::take(&mut o.writes.spec_events);
            p.announced.extend(spec_events);
        }
        Write::Remediation(r) => {
            remediation::annotate(&client, &ns, &r, &mut p.announced, &p.ctx.metrics).await?;
        }
        Write::SyncMachinePool(s) => {
            let announced = &mut p.announced;
            pool::write_back(
                &client,
                &s.machine_pool,
                s.autoscaling,
                s.observed,
                announced,
            )
            .await?;
        }
        Write::Decision(_) => {}
    }
    Ok(())
}

/// The state of a succeeded apply or restore adopted; what was decoded of it is forgotten (the
/// next pass reads it from the API server), and the version a Job start checks the state
/// against is the adopted one.
/// Whether this pass clears the clusterctl move block once its writes are made: no Job is
/// active, none will start, and the object carries the block (see `carry_out`).
fn clears_move_block(p: &Pass<'_>, o: &Observation, acted: &Acted) -> bool {
    o.active.is_none()
        && !matches!(acted.decision, Decision::StartJob(_))
        && p.target.annotation(annotations::BLOCK_MOVE).is_some()
}

async fn adopt(
    p: &mut Pass<'_>,
    o: &mut Observation,
    job: &str,
    inputs_hash: &str,
) -> Result<(), Error> {
    let adopted = state::adopt(
        &p.ctx.client,
        (&p.ns, &p.suffix),
        &p.target.owner_reference(false),
        inputs_hash,
        &p.ctx.caches.own_writes,
        o.state_listed.take(),
    )
    .await?;
    let view = state::remember_adopted(&p.ctx.caches, &p.uid, &p.suffix, &adopted.secrets);
    if o.state_version.is_some() {
        o.state_version = Some(view.version.clone());
    }
    p.state_adopted = Some((adopted.secrets, view));
    if adopted.changed {
        p.announced.normal(
            events::STATE_ADOPTED,
            format!("State of Job {job} adopted with inputs hash {inputs_hash}"),
        );
    }
    Ok(())
}

/// The digest the kubelet ran for a succeeded apply, recorded on the durable inputs Secret.
async fn pin_digest(p: &mut Pass<'_>, o: &mut Observation, digest: &str) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let patch =
        serde_json::json!({"metadata": {"annotations": {annotations::IMAGE_DIGEST: digest}}});
    let (pp, merge) = (PatchParams::default(), Patch::Merge(&patch));
    let name = o.durable.name().to_owned();
    let write = secrets.patch(&name, &pp, &merge);
    let own = &p.ctx.caches.own_writes;
    let updated = own.write("Secret", &p.ns, &name, write).await?;
    o.durable.written(updated);
    o.durable.remember(&p.ctx.caches, &p.uid);
    p.announced.normal(
        events::DIGEST_PINNED,
        format!("Image digest {digest} pinned"),
    );
    Ok(())
}

/// The approvals a succeeded cluster apply consumed, removed from the object under the pass's
/// resourceVersion; their events and metrics once the write landed.
async fn consume_approvals(p: &mut Pass<'_>, c: &Consumed) -> Result<(), Error> {
    let mut remove = serde_json::Map::new();
    if c.plan {
        remove.insert(
            annotations::APPROVE_PLAN.to_owned(),
            serde_json::Value::Null,
        );
    }
    if c.destructive {
        remove.insert(
            annotations::APPROVE_DESTRUCTIVE_PLAN.to_owned(),
            serde_json::Value::Null,
        );
    }
    let patch = serde_json::json!({"metadata": {"annotations": remove}});
    p.patch_object(&patch).await?;
    let kind = p.kind_name();
    if c.plan {
        p.ctx.metrics.plan_approval(kind, "approved");
        p.announced.normal(
            events::PLAN_APPLIED,
            format!(
                "Job {} applied the approved plan; the approval is consumed",
                c.job
            ),
        );
    }
    if c.destructive {
        p.ctx.metrics.destructive_approval_consumed(kind);
        p.announced.normal(
            events::DESTRUCTIVE_PLAN_APPROVAL_CONSUMED,
            format!(
                "Job {} applied the approved inputs hash {}; the approval is consumed",
                c.job, c.inputs_hash
            ),
        );
    }
    Ok(())
}

/// A copy of the state read; its entry for `status.stateBackups` when it was made.
async fn back_up(
    p: &mut Pass<'_>,
    o: &Observation,
    take: &backups::TakeBackup,
) -> Result<Option<StateBackup>, Error> {
    let Some(summary) = o.summary.as_deref() else {
        return Ok(None);
    };
    let source = backups::Source {
        summary,
        take,
        owner: &p.target.owner_reference(false),
        now: p.now_ts,
    };
    let listed = p.state_adopted.take();
    let caches = &p.ctx.caches;
    let taken = backups::take(&p.ctx.client, caches, &p.ns, &p.suffix, source, listed).await?;
    let kind = p.kind_name();
    match taken {
        backups::Taken::Copied { backup, bytes } => {
            p.ctx.metrics.state_backups(kind, "taken", 1);
            let name = contract::names::state_backup_secret_name(&p.suffix, backup.serial);
            p.announced.normal(
                events::STATE_BACKED_UP,
                format!(
                    "State serial {} backed up to {name} ({} chunk(s), {bytes} bytes)",
                    backup.serial, backup.chunks
                ),
            );
            Ok(Some(StateBackup {
                serial: backup.serial as i64,
                taken_at: Time(backup.taken_at.unwrap_or(p.now_ts)),
                bytes: bytes as i64,
            }))
        }
        backups::Taken::Skipped(why) => {
            tracing::warn!(
                kind, namespace = %p.ns, name = %p.name, serial = take.serial,
                "state backup skipped: {why}"
            );
            p.ctx.metrics.state_backups(kind, "skipped", 1);
            Ok(None)
        }
    }
}

/// `status.stateBackups` after the backup step: the kept sets and the copy made, when the pass
/// read a state.
pub fn backup_status(p: &mut Pass<'_>, o: &Observation, acted: &Acted) {
    if o.summary.is_none() {
        return;
    }
    let listed = p
        .facts
        .status()
        .workload()
        .state_backups
        .clone()
        .unwrap_or_default();
    let status = backups::status_list(
        &o.writes.backups.kept,
        &listed,
        acted.taken_backup.as_ref(),
        &o.backup_sizes,
        p.now_ts,
    );
    if status != listed {
        p.facts.record(Fact::StateBackups(status));
    }
}
