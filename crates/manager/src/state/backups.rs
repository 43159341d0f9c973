//! State backups (spec: Terraform State "State backups"; INTERFACE-FACTS "Secrets" and the
//! backup labels and annotations): whenever a pass reads a state it has not backed up before,
//! the state Secrets' data is copied verbatim into `captf-state-backup-<suffix>-<serial>`
//! (chunked like the state: `-part-N`), owned by the object itself (not by the state, so a backup
//! outlives a state Secret deleted by hand) and labelled for `clusterctl move`. The newest
//! `--state-backups` sets are kept, older ones pruned in the same pass; `status.stateBackups`
//! lists the newest ones.
//!
//! A backup is identified by its serial and the digest of its content
//! (`captf.io/state-backup-digest`), not by its serial alone: after a restore the backend writes
//! the restored content under serials an abandoned history already used, and that content is
//! backed up again (replacing the abandoned set of the same serial), so a later restore of that
//! serial pushes the restored timeline, not the one the first restore undid.
//!
//! Observe reads the backups from the cache and [`plan`] (pure) chooses what to copy and what to
//! prune; Act copies ([`take`]) and prunes ([`prune`]). A state that cannot be read is never
//! backed up (only a read state reaches here), nothing is backed up while the object is being
//! deleted, and a backup a pending restore names is never pruned.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::constants::{annotations, labels};
use api::status::StateBackup;
use contract::names::{chunk_secret_name, state_backup_secret_name, state_secret_name};
use contract::state::{StateSet, StateSummary, chunk_index};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

use crate::runtime::caches::Caches;
use crate::runtime::kubeutil::{delete_opt, get_opt, is_conflict};
use crate::state::{self, StateView};

/// At most this many backups are listed in `status.stateBackups` (the CRD's bound).
pub const STATUS_MAX: usize = crate::pass::status::bounds::STATE_BACKUPS;

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
    /// The SHA-256 of its content (`captf.io/state-backup-digest`): with the serial, what
    /// identifies it.
    pub digest: Option<String>,
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
            digest: a
                .get(annotations::STATE_BACKUP_DIGEST)
                .filter(|d| !d.is_empty())
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
pub fn list(caches: &Caches, ns: &str, suffix: &str) -> Vec<Backup> {
    let mut found: Vec<Backup> = caches
        .secrets_labelled(ns, labels::STATE_BACKUP_SUFFIX, suffix)
        .iter()
        .filter_map(|s| Backup::of(&s.metadata, suffix))
        .collect();
    newest_first(&mut found);
    found
}

fn newest_first(backups: &mut [Backup]) {
    backups.sort_by_key(|b| std::cmp::Reverse((b.taken_at, b.serial)));
}

/// The digest of a state's content as a backup records it: SHA-256 over the chunks' payloads in
/// chunk order.
pub fn content_digest<'a>(payloads: impl Iterator<Item = &'a [u8]>) -> String {
    let mut digest = Sha256::new();
    for p in payloads {
        digest.update(p);
    }
    hex::encode(digest.finalize())
}

/// The state a pass read, as a backup needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadState {
    /// Its serial.
    pub serial: u64,
    /// The digest of its content ([`content_digest`]).
    pub digest: String,
}

/// A copy to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeBackup {
    /// The serial.
    pub serial: u64,
    /// The digest of the content to copy (the copy is skipped when the state changed since).
    pub digest: String,
    /// The Job that wrote the state, when the pass knows it.
    pub source_job: Option<String>,
    /// A set of this serial with other content is replaced by the copy.
    pub replaces: bool,
}

/// What the backup step of a pass does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BackupPlan {
    /// The copy to make, if any.
    pub take: Option<TakeBackup>,
    /// The sets to prune.
    pub prune: Vec<Backup>,
    /// The sets kept, newest first (without the copy to make).
    pub kept: Vec<Backup>,
}

/// Whether the state `read` is backed up already: a cached set of its serial with its digest (a
/// set recorded before digests were, by its serial); or, while the cache shows no set of that
/// serial or shows one older than the one `status.stateBackups` lists, the status's entry (the
/// cache is behind a copy this manager made).
pub fn observed(backups: &[Backup], listed: &[StateBackup], read: &ReadState) -> bool {
    let cached = backups.iter().find(|b| b.serial == read.serial);
    let listed = listed.iter().find(|b| b.serial as u64 == read.serial);
    match (cached, listed) {
        (Some(b), _) if b.digest.as_deref().is_none_or(|d| d == read.digest) => true,
        (Some(b), Some(l)) => b.taken_at.is_some_and(|t| l.taken_at.0 > t),
        (Some(_), None) => false,
        (None, listed) => listed.is_some(),
    }
}

/// The backup step of a pass that read `read` (pure): a copy when it is not backed up yet
/// (unless `keep` is 0 or the object is being deleted), and the sets past the newest `keep`
/// pruned, never the one a pending restore (`restoring`) names.
pub fn plan(
    mut backups: Vec<Backup>,
    listed: &[StateBackup],
    read: &ReadState,
    keep: usize,
    deleting: bool,
    restoring: Option<u64>,
    source_job: Option<&str>,
) -> BackupPlan {
    let mut out = BackupPlan::default();
    if keep > 0 && !deleting && !observed(&backups, listed, read) {
        let replaces = backups.iter().any(|b| b.serial == read.serial);
        // The set of this serial with other content is overwritten by the copy.
        backups.retain(|b| b.serial != read.serial);
        out.take = Some(TakeBackup {
            serial: read.serial,
            digest: read.digest.clone(),
            source_job: source_job.map(str::to_owned),
            replaces,
        });
    }
    let room = keep.saturating_sub(usize::from(out.take.is_some()));
    if keep > 0 && backups.len() > room {
        let over = backups.split_off(room);
        for b in over {
            if Some(b.serial) == restoring {
                backups.push(b);
            } else {
                out.prune.push(b);
            }
        }
    }
    out.kept = backups;
    out
}

/// What a copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// The set was written.
    Copied {
        /// The set.
        backup: Backup,
        /// Its compressed size.
        bytes: u64,
    },
    /// The copy was skipped, and why (the next pass tries again).
    Skipped(String),
}

/// The state a copy is made of: what the pass read of it.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The summary read (its inputs hash as adopted).
    pub summary: &'a StateSummary,
    /// The copy to make.
    pub take: &'a TakeBackup,
    /// The object owning the backup.
    pub owner: &'a OwnerReference,
    /// When the pass began.
    pub now: Timestamp,
}

/// Copies the state Secrets of `source.take.serial` into a backup set (Act), unless the state
/// changed since it was read. `listed` are the state Secrets as this pass last listed them (its
/// adoption's) with what was read of them, else they are listed and read here.
pub async fn take(
    client: &kube::Client,
    caches: &Caches,
    ns: &str,
    suffix: &str,
    source: Source<'_>,
    listed: Option<(Vec<Secret>, Arc<StateView>)>,
) -> kube::Result<Taken> {
    let (secrets, view) = if let Some(listed) = listed {
        listed
    } else {
        let secrets = state::list_state_secrets(client, ns, suffix).await?;
        let view = Arc::new(state::view_of(suffix, &secrets));
        (secrets, view)
    };
    // The copy is of exactly the state read: a state written since is backed up next pass.
    let same = matches!(&view.reading, state::StateReading::Read(s) if s.serial == source.take.serial)
        && view.digest == source.take.digest;
    if !same {
        return Ok(Taken::Skipped(
            "the state changed while it was being copied".to_owned(),
        ));
    }
    let set = copies(ns, suffix, source, &secrets);
    let bytes: u64 = set.iter().map(|s| payload(s).len() as u64).sum();
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    // Chunk 0 last: a set without it is not a backup yet (and is completed by the next try).
    for copy in set.iter().rev() {
        // The pass lists the backup in the status it writes: the copy's own event need not wake
        // the object again.
        let name = copy.metadata.name.clone().unwrap_or_default();
        if let Err(e) = caches
            .own_writes
            .write("Secret", ns, &name, create_or_replace(&api, copy))
            .await
        {
            return Ok(Taken::Skipped(format!("copying it failed: {e}")));
        }
    }
    // A replaced set with more chunks than the copy, or a copy of more chunks cut short before
    // its chunk 0, loses its extra parts: the ones the cache shows. A part is written before its
    // set's chunk 0, by an earlier pass, so the cache shows it by now; one it does not show yet
    // is never read as part of a set (chunk 0 counts its parts), is removed by the next copy of
    // its serial, and is garbage collected with the object that owns it.
    let base = state_backup_secret_name(suffix, source.take.serial);
    for name in extra_parts(caches, ns, suffix, &base, set.len()) {
        delete_opt(&api, &name).await?;
    }
    Ok(
        match set.first().and_then(|s| Backup::of(&s.metadata, suffix)) {
            Some(backup) => Taken::Copied { backup, bytes },
            None => Taken::Skipped("the copy carries no backup annotations".to_owned()),
        },
    )
}

/// The parts of set `base` from index `from` on that the cache shows.
fn extra_parts(caches: &Caches, ns: &str, suffix: &str, base: &str, from: usize) -> Vec<String> {
    caches
        .secrets_labelled(ns, labels::STATE_BACKUP_SUFFIX, suffix)
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .filter(|name| chunk_index(base, name).is_some_and(|i| i >= from))
        .collect()
}

fn payload(s: &Secret) -> &[u8] {
    s.data
        .as_ref()
        .and_then(|d| d.get(contract::state::STATE_DATA_KEY))
        .map_or(&[][..], |b| b.0.as_slice())
}

/// The live state Secrets in chunk order.
pub fn ordered<'a>(suffix: &str, secrets: &'a [Secret]) -> Vec<(usize, &'a Secret)> {
    let live = state_secret_name(suffix);
    let mut ordered: Vec<(usize, &Secret)> = secrets
        .iter()
        .filter_map(|s| Some((chunk_index(&live, s.metadata.name.as_deref()?)?, s)))
        .collect();
    ordered.sort_by_key(|(i, _)| *i);
    ordered
}

/// The digest of the live state Secrets `secrets` ([`content_digest`] in chunk order).
pub fn live_digest(suffix: &str, secrets: &[Secret]) -> String {
    content_digest(
        ordered(suffix, secrets)
            .into_iter()
            .map(|(_, s)| payload(s)),
    )
}

/// The backup Secrets of `secrets` (the live state chunks of the summary), in chunk order: each
/// one's data verbatim, the backup labels and annotations, owned by the object.
fn copies(ns: &str, suffix: &str, source: Source<'_>, secrets: &[Secret]) -> Vec<Secret> {
    let summary = source.summary;
    let ordered = ordered(suffix, secrets);
    let base = StateSet::Backup {
        suffix,
        serial: summary.serial,
    }
    .base_name();
    let digest = content_digest(ordered.iter().map(|(_, s)| payload(s)));
    let taken_at = source.now.to_string();
    let chunks = ordered.len().to_string();
    ordered
        .iter()
        .map(|(index, from)| {
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
            if let Some(job) = &source.take.source_job {
                a.insert(annotations::STATE_BACKUP_SOURCE_JOB, job.clone());
            }
            if *index == 0
                && let Some(hash) = &summary.inputs_hash
            {
                a.insert(annotations::INPUTS_HASH, hash.clone());
            }
            Secret {
                metadata: ObjectMeta {
                    name: Some(chunk_secret_name(&base, *index)),
                    namespace: Some(ns.to_owned()),
                    labels: Some(BTreeMap::from([
                        (labels::STATE_BACKUP.to_owned(), "true".to_owned()),
                        (labels::STATE_BACKUP_SUFFIX.to_owned(), suffix.to_owned()),
                        (labels::MOVE.to_owned(), String::new()),
                    ])),
                    annotations: Some(a.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
                    owner_references: Some(vec![source.owner.clone()]),
                    ..ObjectMeta::default()
                },
                data: from.data.clone(),
                type_: from.type_.clone(),
                ..Secret::default()
            }
        })
        .collect()
}

/// Creates `copy`, or replaces what an earlier, cut-short copy (or the abandoned set of the same
/// serial) left under its name.
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
pub async fn prune(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
    pruned: &[Backup],
) -> kube::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    for backup in pruned {
        for name in backup.names(suffix) {
            delete_opt(&api, &name).await?;
        }
    }
    Ok(())
}

/// The compressed sizes of the `backups` that `listed` (`status.stateBackups`) does not list
/// yet (e.g. after a `clusterctl move`), read from their Secrets.
pub async fn sizes(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
    backups: &[Backup],
    listed: &[StateBackup],
) -> kube::Result<BTreeMap<u64, u64>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut out = BTreeMap::new();
    for backup in backups.iter().take(STATUS_MAX) {
        if listed.iter().any(|l| l.serial as u64 == backup.serial) {
            continue;
        }
        let mut bytes = 0u64;
        for name in backup.names(suffix) {
            if let Some(s) = get_opt(&api, &name).await? {
                bytes += payload(&s).len() as u64;
            }
        }
        out.insert(backup.serial, bytes);
    }
    Ok(out)
}

/// `status.stateBackups` for the `kept` sets and the copy just made (`taken`, newest), at most
/// [`STATUS_MAX`]: each entry's size from the copy, the status listed before or `sizes`; a set
/// of no known size is left out.
pub fn status_list(
    kept: &[Backup],
    listed: &[StateBackup],
    taken: Option<&StateBackup>,
    sizes: &BTreeMap<u64, u64>,
    now: Timestamp,
) -> Vec<StateBackup> {
    let mut out: Vec<StateBackup> = taken.cloned().into_iter().collect();
    for backup in kept {
        if out.len() >= STATUS_MAX {
            break;
        }
        let serial = backup.serial as i64;
        if taken.is_some_and(|t| t.serial == serial) {
            continue;
        }
        if let Some(b) = listed.iter().find(|b| b.serial == serial) {
            out.push(b.clone());
            continue;
        }
        let bytes = sizes.get(&backup.serial).copied().unwrap_or(0);
        if bytes == 0 {
            continue;
        }
        out.push(StateBackup {
            serial,
            taken_at: Time(backup.taken_at.unwrap_or(now)),
            bytes: bytes as i64,
        });
    }
    out
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
            digest: None,
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
            digest: None,
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

    fn backup(serial: u64, digest: &str, taken: &str) -> Backup {
        Backup {
            serial,
            chunks: 1,
            resources: 1,
            inputs_hash: None,
            taken_at: Some(taken.parse().unwrap()),
            lineage: None,
            digest: Some(digest.to_owned()),
        }
    }

    fn listed(serial: i64, taken: &str) -> StateBackup {
        StateBackup {
            serial,
            taken_at: Time(taken.parse().unwrap()),
            bytes: 10,
        }
    }

    fn read(serial: u64, digest: &str) -> ReadState {
        ReadState {
            serial,
            digest: digest.to_owned(),
        }
    }

    /// H2: a backup is its serial and its content. After a restore, the backend writes the
    /// restored content under a serial the abandoned history already backed up: that content is
    /// not backed up yet, so it is copied (over the abandoned set of the same serial); a state
    /// whose serial and digest a backup already has is not copied again.
    #[test]
    fn a_backup_is_identified_by_its_serial_and_its_content() {
        let t0 = "2026-01-01T00:00:00Z";
        let abandoned = vec![
            backup(9, "d9", t0),
            backup(6, "d6", t0),
            backup(5, "d5", t0),
        ];
        let status = [listed(9, t0), listed(6, t0), listed(5, t0)];
        let same = plan(
            abandoned.clone(),
            &status,
            &read(6, "d6"),
            5,
            false,
            None,
            None,
        );
        assert_eq!(same.take, None);
        let restored = plan(
            abandoned.clone(),
            &status,
            &read(6, "d5"),
            5,
            false,
            None,
            None,
        );
        let take = restored.take.expect("the restored content is backed up");
        assert_eq!(
            (take.serial, take.digest.as_str(), take.replaces),
            (6, "d5", true)
        );
        // The abandoned set of serial 6 is replaced, not kept beside the copy.
        assert!(restored.kept.iter().all(|b| b.serial != 6));
        assert!(restored.prune.is_empty());
    }

    /// H2: a copy this manager just made, not in the cache yet, is not made again: the status
    /// lists its serial newer than the set the cache still shows.
    #[test]
    fn a_copy_the_cache_does_not_show_yet_is_not_made_again() {
        let (t0, t1) = ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z");
        let cached = [backup(6, "d6", t0)];
        assert!(observed(&cached, &[listed(6, t1)], &read(6, "d5")));
        assert!(!observed(&cached, &[listed(6, t0)], &read(6, "d5")));
        // Not cached at all: the status's word for it.
        assert!(observed(&[], &[listed(6, t0)], &read(6, "d5")));
        assert!(!observed(&[], &[], &read(6, "d5")));
        // A set recorded before digests were is known by its serial.
        let old = Backup {
            digest: None,
            ..backup(6, "", t0)
        };
        assert!(observed(&[old], &[], &read(6, "d5")));
    }

    /// L7: a restore can never name a backup the same pass prunes: the set a pending restore
    /// names is kept even past `--state-backups`.
    #[test]
    fn the_backup_a_pending_restore_names_is_never_pruned() {
        let t = |d: u32| format!("2026-01-{d:02}T00:00:00Z");
        let sets: Vec<Backup> = (1..=6)
            .rev()
            .map(|s| backup(s, &format!("d{s}"), &t(s as u32)))
            .collect();
        let plain = plan(sets.clone(), &[], &read(7, "d7"), 5, false, None, None);
        let pruned: Vec<u64> = plain.prune.iter().map(|b| b.serial).collect();
        assert_eq!(pruned, [2, 1]);
        let restoring = plan(sets, &[], &read(7, "d7"), 5, false, Some(1), None);
        let pruned: Vec<u64> = restoring.prune.iter().map(|b| b.serial).collect();
        assert_eq!(pruned, [2]);
        assert!(restoring.kept.iter().any(|b| b.serial == 1));
    }

    /// Nothing is copied while the object is being deleted, nor with `--state-backups=0` (which
    /// prunes nothing either).
    #[test]
    fn no_copy_while_deleting_or_with_no_backups_kept() {
        let t0 = "2026-01-01T00:00:00Z";
        let sets = vec![backup(3, "d3", t0)];
        assert_eq!(
            plan(sets.clone(), &[], &read(4, "d4"), 5, true, None, None).take,
            None
        );
        let none = plan(sets, &[], &read(4, "d4"), 0, false, None, None);
        assert_eq!((none.take, none.prune.len()), (None, 0));
    }
}
