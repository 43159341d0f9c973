//! The writes of one pass, in the book's order (spec: The Reconcile Lifecycle "One pass, one
//! status patch", "One pass, visually", "Bookkeeping", "Deletion order", "After the shared
//! flow"; ENGINEERING.md §4 "Act"). Observe only reads: what it found to write is recorded in the
//! [`Observation`] as plain intents, each chosen by a pure function of the kind or state module
//! that owns it. [`plan`], pure as well, puts them in the order Act makes them:
//!
//! 1. bookkeeping: the state of a succeeded apply or restore adopted, the image digest pinned,
//!    the approvals it consumed removed, a succeeded restore's annotation removed, then each
//!    finished Job's per-run Secret deleted and its leases given back, then the history beyond
//!    the limits pruned;
//! 2. credentials: the credential mirror, the runner's ServiceAccount and RoleBinding;
//! 3. state: the backup of a state serial not backed up yet, the sets beyond `--state-backups`;
//! 4. outputs: the write-once spec fields (endpoint, providerID, providerIDList);
//! 5. the decision ([`Write::Decision`]): the finalizer, a stuck Job deleted, or the leases, the
//!    durable inputs, the move block, the Job and its per-run Secret; the move block cleared
//!    once no Job is active;
//! 6. after the shared flow: the remediation request on a machine's Machine, a pool's
//!    replica count written back to its MachinePool;
//!
//! then (not planned here) the one status patch, the Jobs marked bookkept, and a deletion's
//! cleanup with the finalizer's removal. Every write is idempotent: a crash between two of them
//! is repaired by the next pass, which plans what is still missing.

use std::fmt;

use crate::kinds::identity::MirrorWrite;
use crate::kinds::identity::runner_rbac::RbacWrite;
use crate::kinds::pool::PoolSync;
use crate::kinds::remediation::{MachineAction, RemediationWrite};
use crate::reconcile::decide::Decision;
use crate::reconcile::observe::Observation;
use crate::state::backups::{Backup, TakeBackup};

/// The approvals a succeeded cluster apply consumed (Plan Approval "Done", "Approving a
/// destructive plan").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    /// The apply Job.
    pub job: String,
    /// The inputs hash it applied.
    pub inputs_hash: String,
    /// `captf.io/approve-plan` is removed.
    pub plan: bool,
    /// `captf.io/approve-destructive-plan` is removed.
    pub destructive: bool,
}

/// One write of a pass other than its status patch.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A succeeded apply's or restore's state: owned by the object, its inputs hash recorded.
    AdoptState {
        /// The Job that wrote it.
        job: String,
        /// The inputs hash it applied (a restore's: the backup's).
        inputs_hash: String,
    },
    /// The digest the apply's pod ran, on the durable inputs Secret.
    PinDigest {
        /// `sha256:…`.
        digest: String,
    },
    /// The approval annotations a succeeded apply consumed.
    ConsumeApprovals(Consumed),
    /// `captf.io/restore-state` removed after its restore succeeded.
    RemoveRestoreAnnotation {
        /// The restore Job.
        job: String,
    },
    /// A finished Job's per-run Secret deleted and its leases given back.
    ReleaseRun {
        /// The Job.
        job: String,
        /// The cluster write lease a TerraformCluster's Job held too.
        cluster_lease: Option<String>,
    },
    /// A Job beyond the history limits.
    PruneJob {
        /// Its name.
        job: String,
    },
    /// The credential mirror.
    Mirror(MirrorWrite),
    /// The runner's ServiceAccount or RoleBinding.
    RunnerRbac(RbacWrite),
    /// A copy of the state read, not backed up yet.
    BackUp(TakeBackup),
    /// Backup sets beyond `--state-backups`.
    PruneBackups(Vec<Backup>),
    /// The write-once spec fields the outputs give.
    PatchSpec(serde_json::Value),
    /// The decision, carried out.
    Decision(Decision),
    /// The remediation request on the owning Machine.
    Remediation(RemediationWrite),
    /// The replica count written back to the owning MachinePool.
    SyncMachinePool(Box<PoolSync>),
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AdoptState { job, inputs_hash } => {
                write!(
                    f,
                    "adopt the state Job {job} wrote, with inputs hash {inputs_hash}"
                )
            }
            Self::PinDigest { digest } => write!(f, "pin image digest {digest}"),
            Self::ConsumeApprovals(c) => write!(
                f,
                "consume the approvals of Job {} (plan: {}, destructive: {})",
                c.job, c.plan, c.destructive
            ),
            Self::RemoveRestoreAnnotation { job } => {
                write!(f, "remove captf.io/restore-state after Job {job}")
            }
            Self::ReleaseRun { job, .. } => {
                write!(
                    f,
                    "delete the per-run Secret of Job {job} and give its leases back"
                )
            }
            Self::PruneJob { job } => write!(f, "prune Job {job}"),
            Self::Mirror(MirrorWrite::Remove { name }) => write!(f, "remove mirror {name}"),
            Self::Mirror(MirrorWrite::AddOwner { name, .. }) => {
                write!(f, "add this object to the owners of mirror {name}")
            }
            Self::Mirror(MirrorWrite::Refresh { name, .. }) => {
                write!(f, "create or refresh mirror {name}")
            }
            Self::RunnerRbac(RbacWrite::CreateServiceAccount) => {
                write!(f, "create the runner ServiceAccount")
            }
            Self::RunnerRbac(RbacWrite::Bind {
                service_account, ..
            }) => write!(
                f,
                "bind ServiceAccount {service_account} to the runner role"
            ),
            Self::BackUp(t) => write!(f, "back up state serial {}", t.serial),
            Self::PruneBackups(sets) => {
                let serials: Vec<String> = sets.iter().map(|b| b.serial.to_string()).collect();
                write!(f, "prune state backups {}", serials.join(", "))
            }
            Self::PatchSpec(patch) => write!(
                f,
                "write spec fields {}",
                patch
                    .get("spec")
                    .and_then(serde_json::Value::as_object)
                    .map(|s| s.keys().cloned().collect::<Vec<_>>().join(", "))
                    .unwrap_or_default()
            ),
            Self::Decision(d) => write!(f, "carry out {d:?}"),
            Self::Remediation(r) => match &r.action {
                MachineAction::Withdraw => {
                    write!(
                        f,
                        "withdraw the remediation request on Machine {}",
                        r.machine
                    )
                }
                _ => write!(f, "request remediation of Machine {}", r.machine),
            },
            Self::SyncMachinePool(s) => write!(
                f,
                "sync MachinePool {}",
                s.machine_pool.metadata.name.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// The writes of a pass that observed `o` and decided `decision`, in the order Act makes them
/// (see the module's list).
pub fn plan(o: &Observation, decision: &Decision) -> Vec<Write> {
    let mut out = Vec::new();
    let w = &o.writes;
    if let Some((job, inputs_hash)) = &w.adopt {
        out.push(Write::AdoptState {
            job: job.clone(),
            inputs_hash: inputs_hash.clone(),
        });
    }
    if let Some(digest) = &w.pin_digest {
        out.push(Write::PinDigest {
            digest: digest.clone(),
        });
    }
    if let Some(c) = &w.approvals {
        out.push(Write::ConsumeApprovals(c.clone()));
    }
    if let Some(job) = &w.restore_done {
        out.push(Write::RemoveRestoreAnnotation { job: job.clone() });
    }
    for (job, cluster_lease) in &w.release {
        out.push(Write::ReleaseRun {
            job: job.clone(),
            cluster_lease: cluster_lease.clone(),
        });
    }
    out.extend(
        w.prune
            .iter()
            .map(|job| Write::PruneJob { job: job.clone() }),
    );
    out.extend(w.mirror.clone().map(Write::Mirror));
    out.extend(w.rbac.iter().cloned().map(Write::RunnerRbac));
    out.extend(w.backups.take.clone().map(Write::BackUp));
    if !w.backups.prune.is_empty() {
        out.push(Write::PruneBackups(w.backups.prune.clone()));
    }
    out.extend(w.spec.clone().map(Write::PatchSpec));
    out.push(Write::Decision(decision.clone()));
    out.extend(w.remediation.clone().map(Write::Remediation));
    out.extend(w.pool.clone().map(|s| Write::SyncMachinePool(Box::new(s))));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::observe::Writes;
    use crate::state::backups::BackupPlan;

    fn kinds(writes: &[Write]) -> Vec<&'static str> {
        writes
            .iter()
            .map(|w| match w {
                Write::AdoptState { .. } => "adopt",
                Write::PinDigest { .. } => "pin",
                Write::ConsumeApprovals(_) => "approvals",
                Write::RemoveRestoreAnnotation { .. } => "restore-annotation",
                Write::ReleaseRun { .. } => "release",
                Write::PruneJob { .. } => "prune-job",
                Write::Mirror(_) => "mirror",
                Write::RunnerRbac(_) => "rbac",
                Write::BackUp(_) => "backup",
                Write::PruneBackups(_) => "prune-backups",
                Write::PatchSpec(_) => "spec",
                Write::Decision(_) => "decision",
                Write::Remediation(_) => "remediation",
                Write::SyncMachinePool(_) => "pool",
            })
            .collect()
    }

    /// Everything a pass can write, in the book's order: bookkeeping (the state adopted before
    /// the leases are given back, so the next Job's pass finds it), history, credentials,
    /// backups, the outputs' spec fields, the decision, then the Machine and MachinePool.
    #[test]
    fn a_pass_writes_in_the_books_order() {
        let mut o = Observation::empty();
        o.writes = Writes {
            adopt: Some(("j".into(), "h".into())),
            pin_digest: Some("sha256:x".into()),
            approvals: Some(Consumed {
                job: "j".into(),
                inputs_hash: "h".into(),
                plan: true,
                destructive: false,
            }),
            restore_done: Some("r".into()),
            release: vec![("j".into(), None), ("r".into(), None)],
            prune: vec!["old".into()],
            mirror: Some(MirrorWrite::Remove { name: "m".into() }),
            rbac: vec![RbacWrite::CreateServiceAccount],
            backups: BackupPlan {
                take: Some(TakeBackup {
                    serial: 3,
                    digest: "d".into(),
                    source_job: None,
                    replaces: false,
                }),
                prune: vec![Backup {
                    serial: 1,
                    chunks: 1,
                    resources: 0,
                    inputs_hash: None,
                    taken_at: None,
                    lineage: None,
                    digest: None,
                }],
                kept: Vec::new(),
            },
            spec: Some(serde_json::json!({"spec": {"providerID": "p"}})),
            remediation: Some(RemediationWrite {
                machine: "m".into(),
                resource_version: None,
                action: MachineAction::Withdraw,
            }),
            pool: None,
            spec_events: crate::runtime::events::Outbox::default(),
        };
        let d = Decision::Nothing {
            requeue_after: None,
        };
        assert_eq!(
            kinds(&plan(&o, &d)),
            [
                "adopt",
                "pin",
                "approvals",
                "restore-annotation",
                "release",
                "release",
                "prune-job",
                "mirror",
                "rbac",
                "backup",
                "prune-backups",
                "spec",
                "decision",
                "remediation",
            ]
        );
    }

    /// A pass that found nothing to write plans only its decision.
    #[test]
    fn a_pass_with_nothing_to_write_plans_only_its_decision() {
        let d = Decision::AddFinalizer;
        assert_eq!(plan(&Observation::empty(), &d), vec![Write::Decision(d)]);
    }
}
