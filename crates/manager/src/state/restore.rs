//! Restore (spec: Terraform State "Restore"; the state restore runbook; INTERFACE-FACTS
//! `RestoreJobSucceeded`, `captf.io/restore-state`): the annotation names a backup serial of the
//! object; a restore Job pushes that backup back into the backend (`state push -force`) under
//! the run lease and the cluster operation gate. What the annotation asks is read here; `decide`
//! starts the Job (a restore beats apply, drift and refresh, and loses to deletion and pause);
//! bookkeeping reports its end, and after a success Act adopts the state with the backup's
//! inputs hash and removes the annotation.
//!
//! An annotation that is not a serial, or names no backup of this very object (another object's
//! backup has another suffix, so it is not found), is refused with
//! `RestoreJobSucceeded=False/RestoreBackupNotFound` and changes nothing. A failed restore is not
//! retried for the same serial while its Job is kept (a new serial, or the Job deleted, asks
//! again).

use api::constants::{annotations, conditions as ctype, reasons};
use contract::health::ConditionStatus;
use contract::names::Operation;

use crate::pass::Pass;
use crate::pass::observed::RestoreBackup;
use crate::pass::observed::{JobOutcome, JobRecord, RestoreAsk};
use crate::state::backups;

/// What the `captf.io/restore-state` annotation asks for now: a restore Job to start, or nothing
/// (no annotation, a refused request, a restore already done or failed for that serial).
/// `records` are the object's Jobs.
pub fn requested(p: &mut Pass<'_>, records: &[JobRecord]) -> Option<RestoreAsk> {
    let value = p
        .target
        .annotation(annotations::RESTORE_STATE)?
        .trim()
        .to_owned();
    let serial = value.parse::<u64>().ok().filter(|s| *s >= 1);
    let cached = backups::list(&p.ctx.caches, &p.ns, &p.suffix);
    let backup = serial.and_then(|s| cached.into_iter().find(|b| b.serial == s));
    let Some(backup) = backup else {
        not_found(p, &value, serial.is_some());
        return None;
    };
    let tick = backup.serial.to_string();
    let newest = records
        .iter()
        .filter(|r| r.operation == Operation::Restore && r.tick.as_deref() == Some(tick.as_str()))
        .max_by_key(|r| (r.created, r.attempt));
    if let Some(job) = newest {
        match job.outcome {
            // Done, unless an apply ran since (the annotation's removal is on its way).
            Some(JobOutcome::Succeeded) if !applied_since(records, job) => return None,
            Some(JobOutcome::Succeeded) => {}
            // Not retried for the same serial (bookkeeping reported RestoreFailed); an active
            // Job is waited for before anything is decided.
            Some(_) | None => return None,
        }
    }
    Some(RestoreAsk {
        backup: RestoreBackup {
            serial: backup.serial,
            chunks: backup.chunks,
            resources: backup.resources,
        },
        inputs_hash: backup.inputs_hash,
    })
}

/// Whether an apply succeeded after the restore Job `restore` finished.
fn applied_since(records: &[JobRecord], restore: &JobRecord) -> bool {
    records.iter().any(|r| {
        r.operation == Operation::Apply
            && r.outcome == Some(JobOutcome::Succeeded)
            && r.finished > restore.finished
    })
}

/// Refuses a request naming no backup: `RestoreBackupNotFound`, counted once per refusal.
fn not_found(p: &mut Pass<'_>, value: &str, is_serial: bool) {
    let message = if is_serial {
        format!(
            "captf.io/restore-state names serial {value}, but this object has no state backup of \
             that serial (see status.stateBackups); nothing was restored"
        )
    } else {
        format!(
            "captf.io/restore-state must be a state serial (a whole number of at least 1), not \
             {value:?}; nothing was restored"
        )
    };
    let already = p.findings.reason(ctype::RESTORE_JOB_SUCCEEDED)
        == Some(reasons::RESTORE_BACKUP_NOT_FOUND)
        && p.findings
            .before()
            .iter()
            .any(|c| c.type_ == ctype::RESTORE_JOB_SUCCEEDED && c.message == message);
    if !already {
        p.ctx.metrics.state_restore(p.kind_name(), "not_found");
    }
    p.findings.set(
        ctype::RESTORE_JOB_SUCCEEDED,
        ConditionStatus::False,
        reasons::RESTORE_BACKUP_NOT_FOUND,
        &message,
    );
}

/// Whether a pass removes the `captf.io/restore-state` annotation: a restore Job succeeded in
/// it (the state is adopted with the backup's inputs hash by then), and the annotation is still
/// there.
pub fn annotation_to_remove(p: &Pass<'_>, restore_succeeded: bool) -> bool {
    restore_succeeded && p.target.annotation(annotations::RESTORE_STATE).is_some()
}
