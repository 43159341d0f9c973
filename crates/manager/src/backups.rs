//! State backups (spec: Terraform State "State backups"; INTERFACE-FACTS "Secrets" and the
//! backup labels and annotations): whenever a pass reads a state serial it has not backed up
//! before, the state Secrets' data is copied verbatim into `captf-state-backup-<suffix>-<serial>`
//! (chunked like the state: `-part-N`), owned by the object itself (not by the state, so a backup
//! outlives a state Secret deleted by hand) and labelled for `clusterctl move`. The newest
//! `--state-backups` sets are kept, older ones pruned in the same pass; `status.stateBackups`
//! lists the newest ones.
//!
//! A serial is "observed" once its backup exists (in the cache) or `status.stateBackups` lists
//! it; a copy that failed is not, so the next pass tries again. A state that cannot be read is
//! never backed up (only a read state reaches here), and nothing is backed up while the object is
//! being deleted.

use std::collections::BTreeMap;

use api::constants::{annotations, events, labels};
use api::status::StateBackup;
use contract::names::{chunk_secret_name, state_backup_secret_name, state_secret_name};
use contract::state::{StateSet, StateSummary, chunk_index};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

use crate::kubeutil::{delete_opt, get_opt, is_conflict};
use crate::reconcile::{Error, Pass};
use crate::state;
use crate::status::Fact;

/// At most this many backups are listed in `status.stateBackups` (the CRD's bound).
pub const STATUS_MAX: usize = crate::status::bounds::STATE_BACKUPS;

/// One backup set, as chunk 0's metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The backed-up serial.
    pub serial: u64,
    /// How many chunk Secrets the set has.
    pub chunks: u32,
    /// The managed-resource count of the backed-up state.
    pub resources: u64,
    /// The inputs hash the backed-up state was adopted with, when it had one.
    pub inputs_hash: Option<String>,
    /// When it was taken.
    pub taken_at: Option<Timestamp>,
    /// The lineage of the backed-up state (`captf.io/state-backup-lineage`).
    pub lineage: Option<String>,
}

impl Backup {
    /// The backup of chunk 0 `meta` of the object with state suffix `suffix`, when `meta` is one.
    fn of(meta: &ObjectMeta, suffix: &str) -> Option<Self> {
        let a = meta.annotations.as_ref()?;
        let l = meta.labels.as_ref()?;
        if l.get(labels::STATE_BACKUP_SUFFIX).map(String::as_str) != Some(suffix) {
            return None;
        }
        let serial: u64 = a.get(annotations::STATE_BACKUP_SERIAL)?.parse().ok()?;
        if meta.name.as_deref() != Some(state_backup_secret_name(suffix, serial).as_str()) {
            return None;
        }
        Some(Self {
            serial,
            chunks: a
                .get(annotations::STATE_BACKUP_CHUNKS)
                .and_then(|c| c.parse().ok())
                .filter(|c| *c >= 1)?,
            resources: a
                .get(annotations::STATE_BACKUP_RESOURCES)
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            inputs_hash: a
                .get(annotations::INPUTS_HASH)
                .filter(|h| !h.is_empty())
                .cloned(),
            taken_at: a
                .get(annotations::STATE_BACKUP_TAKEN_AT)
                .and_then(|t| t.parse().ok()),
            lineage: a
                .get(annotations::STATE_BACKUP_LINEAGE)
                .filter(|l| !l.is_empty())
                .cloned(),
        })
    }

    /// The Secret names of the set.
    fn names(&self, suffix: &str) -> Vec<String> {
        let base = state_backup_secret_name(suffix, self.serial);
        (0..self.chunks as usize)
            .map(|i| chunk_secret_name(&base, i))
            .collect()
    }
}

/// The state `lineage` read is foreign when it differs from the lineage of the object's newest
/// backup: every state this object's Jobs wrote, and every restore, carries the lineage its
/// first apply created. `Some` is the `StateReadable` message (lineages are identifiers, not
/// secrets).
pub fn foreign_lineage(backups: &[Backup], lineage: &str) -> Option<String> {
    let newest = backups.first()?;
    let ours = newest.lineage.as_deref()?;
    (ours != lineage).then(|| {
        format!(
            "The state's lineage {lineage} is not this object's: its newest backup (serial {}) \
             has lineage {ours}. No Job runs over it; restore a backup with \
             captf.io/restore-state, or delete this object's older backups if the new state is \
             the right one",
            newest.serial
        )
    })
}

/// The object's backups as the cache shows them, newest first (by when they were taken, then by
/// serial).
pub fn list(p: &Pass<'_>) -> Vec<Backup> {
    let mut found: Vec<Backup> = p
        .ctx
        .caches
        .secrets_labelled(&p.ns, labels::STATE_BACKUP_SUFFIX, &p.suffix)
        .iter()
        .filter_map(|s| Backup::of(&s.metadata, &p.suffix))
        .collect();
    newest_first(&mut found);
    found
}

fn newest_first(backups: &mut [Backup]) {
    backups.sort_by_key(|b| std::cmp::Reverse((b.taken_at, b.serial)));
}

/// The backup step of a pass that read `summary`: a copy of a serial not backed up yet (unless
/// `--state-backups=0` or the object is being deleted), the pruning of sets past the newest
/// `--state-backups`, and `status.stateBackups`. `source_job` is the Job that wrote the state,
/// when this pass knows it.
pub async fn back_up(
    p: &mut Pass<'_>,
    summary: &StateSummary,
    source_job: Option<&str>,
) -> Result<(), Error> {
    let keep = p.ctx.settings.state_backups as usize;
    let mut backups = list(p);
    let listed: Vec<StateBackup> = p
        .facts
        .status()
        .workload()
        .state_backups
        .clone()
        .unwrap_or_default();
    let observed = backups.iter().any(|b| b.serial == summary.serial)
        || listed.iter().any(|b| b.serial as u64 == summary.serial);
    let mut taken: Option<StateBackup> = None;
    if !observed
        && keep > 0
        && !p.target.deleting()
        && let Some((backup, bytes)) = take(p, summary, source_job).await?
    {
        taken = Some(StateBackup {
            serial: backup.serial as i64,
            taken_at: Time(backup.taken_at.unwrap_or(p.now_ts)),
            bytes: bytes as i64,
        });
        backups.insert(0, backup);
    }
    if keep > 0 && backups.len() > keep {
        let pruned = backups.split_off(keep);
        prune(p, &pruned).await?;
    }
    let status = status_list(p, &backups, &listed, taken).await?;
    if status != listed {
        p.facts.record(Fact::StateBackups(status));
    }
    Ok(())
}

/// Copies the state Secrets of serial `summary.serial` into a backup set; `None` when the copy
/// was skipped (the state changed meanwhile, or the API refused a write: the next pass retries).
async fn take(
    p: &mut Pass<'_>,
    summary: &StateSummary,
    source_job: Option<&str>,
) -> Result<Option<(Backup, u64)>, Error> {
    let secrets = state::list_state_secrets(&p.ctx.client, &p.ns, &p.suffix).await?;
    // The copy is of exactly the serial read: a state written since is backed up next pass.
    let same = match state::read(&p.suffix, &secrets) {
        state::StateReading::Read(s) => s.serial == summary.serial,
        _ => false,
    };
    if !same {
        skipped(
            p,
            summary.serial,
            "the state changed while it was being copied",
        );
        return Ok(None);
    }
    let set = copies(p, summary, &secrets, source_job);
    let bytes: u64 = set.iter().map(|s| payload(s).len() as u64).sum();
    let api: Api<Secret> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    // Chunk 0 last: a set without it is not a backup yet (and is completed by the next try).
    for copy in set.iter().rev() {
        // This pass lists the backup in the status it writes: the copy's own event need not
        // wake the object again.
        let name = copy.metadata.name.clone().unwrap_or_default();
        let own = &p.ctx.caches.own_writes;
        if let Err(e) = own
            .write("Secret", &p.ns, &name, create_or_replace(&api, copy))
            .await
        {
            skipped(p, summary.serial, &format!("copying it failed: {e}"));
            return Ok(None);
        }
    }
    let backup = set.first().and_then(|s| Backup::of(&s.metadata, &p.suffix));
    let Some(backup) = backup else {
        return Ok(None);
    };
    let name = state_backup_secret_name(&p.suffix, summary.serial);
    p.ctx.metrics.state_backups(p.kind_name(), "taken", 1);
    p.outbox.normal(
        events::STATE_BACKED_UP,
        format!(
            "State serial {} backed up to {name} ({} chunk(s), {bytes} bytes)",
            summary.serial, backup.chunks
        ),
    );
    Ok(Some((backup, bytes)))
}

fn skipped(p: &Pass<'_>, serial: u64, why: &str) {
    tracing::warn!(
        kind = p.kind_name(), namespace = %p.ns, name = %p.name, serial,
        "state backup skipped: {why}"
    );
    p.ctx.metrics.state_backups(p.kind_name(), "skipped", 1);
}

fn payload(s: &Secret) -> &[u8] {
    s.data
        .as_ref()
        .and_then(|d| d.get(contract::state::STATE_DATA_KEY))
        .map_or(&[][..], |b| b.0.as_slice())
}

/// The backup Secrets of `secrets` (the live state chunks of `summary`), in chunk order: each
/// one's data verbatim, the backup labels and annotations, owned by the object.
fn copies(
    p: &Pass<'_>,
    summary: &StateSummary,
    secrets: &[Secret],
    source_job: Option<&str>,
) -> Vec<Secret> {
    let live = state_secret_name(&p.suffix);
    let mut ordered: Vec<(usize, &Secret)> = secrets
        .iter()
        .filter_map(|s| Some((chunk_index(&live, s.metadata.name.as_deref()?)?, s)))
        .collect();
    ordered.sort_by_key(|(i, _)| *i);
    let base = StateSet::Backup {
        suffix: &p.suffix,
        serial: summary.serial,
    }
    .base_name();
    let mut digest = Sha256::new();
    for (_, s) in &ordered {
        digest.update(payload(s));
    }
    let digest = hex::encode(digest.finalize());
    let taken_at = p.now_ts.to_string();
    let chunks = ordered.len().to_string();
    ordered
        .iter()
        .map(|(index, source)| {
            let mut a = BTreeMap::from([
                (annotations::STATE_BACKUP_SERIAL, summary.serial.to_string()),
                (annotations::STATE_BACKUP_LINEAGE, summary.lineage.clone()),
                (annotations::STATE_BACKUP_TAKEN_AT, taken_at.clone()),
                (annotations::STATE_BACKUP_DIGEST, digest.clone()),
                (
                    annotations::STATE_BACKUP_RESOURCES,
                    summary.managed_resources.to_string(),
                ),
                (annotations::STATE_BACKUP_SET, base.clone()),
                (annotations::STATE_BACKUP_CHUNK, index.to_string()),
                (annotations::STATE_BACKUP_CHUNKS, chunks.clone()),
            ]);
            if let Some(job) = source_job {
                a.insert(annotations::STATE_BACKUP_SOURCE_JOB, job.to_owned());
            }
            if *index == 0
                && let Some(hash) = &summary.inputs_hash
            {
                a.insert(annotations::INPUTS_HASH, hash.clone());
            }
            Secret {
                metadata: ObjectMeta {
                    name: Some(chunk_secret_name(&base, *index)),
                    namespace: Some(p.ns.clone()),
                    labels: Some(BTreeMap::from([
                        (labels::STATE_BACKUP.to_owned(), "true".to_owned()),
                        (labels::STATE_BACKUP_SUFFIX.to_owned(), p.suffix.clone()),
                        (labels::MOVE.to_owned(), String::new()),
                    ])),
                    annotations: Some(a.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
                    owner_references: Some(vec![p.target.owner_reference(false)]),
                    ..ObjectMeta::default()
                },
                data: source.data.clone(),
                type_: source.type_.clone(),
                ..Secret::default()
            }
        })
        .collect()
}

/// Creates `copy`, or replaces what an earlier, cut-short copy left under its name.
async fn create_or_replace(api: &Api<Secret>, copy: &Secret) -> kube::Result<Secret> {
    match api.create(&PostParams::default(), copy).await {
        Err(e) if is_conflict(&e) => {
            let name = copy.metadata.name.clone().unwrap_or_default();
            let Some(old) = get_opt(api, &name).await? else {
                return Ok(Secret::default());
            };
            let mut copy = copy.clone();
            copy.metadata.resource_version = old.metadata.resource_version;
            api.replace(&name, &PostParams::default(), &copy).await
        }
        written => written,
    }
}

/// Deletes the sets `pruned` (chunk 0 first, so a half-deleted set is no longer a backup).
async fn prune(p: &mut Pass<'_>, pruned: &[Backup]) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    for backup in pruned {
        for name in backup.names(&p.suffix) {
            delete_opt(&api, &name).await?;
        }
    }
    if !pruned.is_empty() {
        p.ctx
            .metrics
            .state_backups(p.kind_name(), "pruned", pruned.len() as u64);
    }
    Ok(())
}

/// `status.stateBackups` for the kept `backups` (newest first, at most [`STATUS_MAX`]): each
/// entry's size from the status listed before or the backup just taken, else read from its
/// Secrets (a set the status does not list yet, e.g. after a `clusterctl move`).
async fn status_list(
    p: &Pass<'_>,
    backups: &[Backup],
    listed: &[StateBackup],
    taken: Option<StateBackup>,
) -> Result<Vec<StateBackup>, Error> {
    let known: BTreeMap<i64, &StateBackup> = listed
        .iter()
        .chain(taken.as_ref())
        .map(|b| (b.serial, b))
        .collect();
    let mut out = Vec::new();
    for backup in backups.iter().take(STATUS_MAX) {
        let serial = backup.serial as i64;
        if let Some(b) = known.get(&serial) {
            out.push((*b).clone());
            continue;
        }
        let bytes = set_bytes(p, backup).await?;
        if bytes == 0 {
            continue;
        }
        out.push(StateBackup {
            serial,
            taken_at: Time(backup.taken_at.unwrap_or(p.now_ts)),
            bytes: bytes as i64,
        });
    }
    Ok(out)
}

/// The compressed size of a backup set, read from its Secrets.
async fn set_bytes(p: &Pass<'_>, backup: &Backup) -> Result<u64, Error> {
    let api: Api<Secret> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let mut bytes = 0u64;
    for name in backup.names(&p.suffix) {
        if let Some(s) = get_opt(&api, &name).await? {
            bytes += payload(&s).len() as u64;
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, suffix: &str, serial: &str, chunks: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                labels::STATE_BACKUP_SUFFIX.to_owned(),
                suffix.to_owned(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    annotations::STATE_BACKUP_SERIAL.to_owned(),
                    serial.to_owned(),
                ),
                (
                    annotations::STATE_BACKUP_CHUNKS.to_owned(),
                    chunks.to_owned(),
                ),
                (
                    annotations::STATE_BACKUP_RESOURCES.to_owned(),
                    "3".to_owned(),
                ),
                (
                    annotations::STATE_BACKUP_TAKEN_AT.to_owned(),
                    "2026-01-01T00:00:00Z".to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn chunk_zero_of_the_objects_own_suffix_is_a_backup() {
        let b = Backup::of(
            &meta("captf-state-backup-aaaa-c-7", "aaaa-c", "7", "2"),
            "aaaa-c",
        )
        .unwrap();
        assert_eq!((b.serial, b.chunks, b.resources), (7, 2, 3));
        assert_eq!(
            b.names("aaaa-c"),
            [
                "captf-state-backup-aaaa-c-7",
                "captf-state-backup-aaaa-c-7-part-1"
            ]
        );
    }

    #[test]
    fn parts_foreign_suffixes_and_bad_annotations_are_not_backups() {
        // A part, not chunk 0.
        assert!(
            Backup::of(
                &meta("captf-state-backup-aaaa-c-7-part-1", "aaaa-c", "7", "2"),
                "aaaa-c"
            )
            .is_none()
        );
        // Another object's backup.
        assert!(
            Backup::of(
                &meta("captf-state-backup-bbbb-c-7", "bbbb-c", "7", "1"),
                "aaaa-c"
            )
            .is_none()
        );
        // A serial that does not match the name, and a chunk count of zero.
        assert!(
            Backup::of(
                &meta("captf-state-backup-aaaa-c-7", "aaaa-c", "8", "1"),
                "aaaa-c"
            )
            .is_none()
        );
        assert!(
            Backup::of(
                &meta("captf-state-backup-aaaa-c-7", "aaaa-c", "7", "0"),
                "aaaa-c"
            )
            .is_none()
        );
    }

    #[test]
    fn newest_first_orders_by_time_then_serial() {
        let at = |s: &str| Some(s.parse::<Timestamp>().unwrap());
        let b = |serial, taken_at| Backup {
            serial,
            chunks: 1,
            resources: 0,
            inputs_hash: None,
            taken_at,
            lineage: None,
        };
        let mut v = vec![
            b(9, at("2026-01-01T00:00:00Z")),
            b(3, at("2026-01-02T00:00:00Z")),
            b(4, at("2026-01-01T00:00:00Z")),
        ];
        newest_first(&mut v);
        assert_eq!(v.iter().map(|b| b.serial).collect::<Vec<_>>(), [3, 9, 4]);
    }

    #[test]
    fn a_lineage_other_than_the_newest_backups_is_foreign() {
        let b = |serial, lineage: Option<&str>| Backup {
            serial,
            chunks: 1,
            resources: 0,
            inputs_hash: None,
            taken_at: None,
            lineage: lineage.map(str::to_owned),
        };
        let ours = "8a0c3f52-0000-4000-8000-000000000001";
        let theirs = "0f0f0f0f-1111-4222-8333-444455556666";
        // No backup, or one taken before lineages were recorded: nothing to compare with.
        assert_eq!(foreign_lineage(&[], theirs), None);
        assert_eq!(foreign_lineage(&[b(3, None)], theirs), None);
        assert_eq!(foreign_lineage(&[b(3, Some(ours))], ours), None);
        let message = foreign_lineage(&[b(3, Some(ours)), b(2, Some(theirs))], theirs).unwrap();
        assert!(message.contains(ours) && message.contains(theirs) && message.contains("serial 3"));
    }

    #[test]
    fn a_backups_lineage_is_read_from_its_annotation() {
        let mut m = meta("captf-state-backup-abc-c-7", "abc-c", "7", "1");
        m.annotations.as_mut().unwrap().insert(
            annotations::STATE_BACKUP_LINEAGE.to_owned(),
            "8a0c3f52-0000-4000-8000-000000000001".to_owned(),
        );
        let backup = Backup::of(&m, "abc-c").unwrap();
        assert_eq!(
            backup.lineage.as_deref(),
            Some("8a0c3f52-0000-4000-8000-000000000001")
        );
    }
}
