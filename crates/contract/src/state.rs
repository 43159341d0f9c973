//! Reading a `kubernetes`-backend state from its Secrets (spec: Terraform State "Chunking and size
//! caps", "What CAPTF reads from state", "OpenTofu state encryption"; `StateReadable` reasons).
//!
//! The caller lists the Secrets carrying the backend's labels for one suffix (or one backup set)
//! and hands them over as plain data. The reader orders the chunks — the base Secret is chunk 0,
//! `<base>-part-N` is chunk N — checks the set is exactly `0..=N` with nothing else in it,
//! gunzips their `tfstate` payloads read one after the other within the size cap, and parses only
//! what CAPTF needs from the state v4 document: serial, lineage, runtime version, root outputs and
//! the number of managed resources. Resource instances are skipped without being decoded: a
//! byte-level scan (`skim`) counts managed resources as the document is inflated, and serde
//! parses the rest.
//!
//! Nothing here panics, whatever the bytes: errors name the Secret or the byte position, never
//! content, since state holds secrets in cleartext.

mod skim;
#[cfg(test)]
mod tests;

use crate::names::{chunk_secret_name, state_backup_secret_name, state_secret_name};
use crate::outputs::{RootOutput, RootOutputs};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, Read};

/// The most chunk Secrets CAPTF reads for one state.
pub const MAX_STATE_CHUNKS: usize = 32;
/// The most decompressed bytes CAPTF reads for one state (64 MiB).
pub const MAX_STATE_BYTES: usize = 64 * 1024 * 1024;
/// The data key holding the (gzipped) state in every chunk Secret.
pub const STATE_DATA_KEY: &str = "tfstate";
/// The annotation on the base Secret recording the inputs hash of the last successful apply.
pub const INPUTS_HASH_ANNOTATION: &str = "captf.io/inputs-hash";
/// The backend's label naming the suffix.
pub const SUFFIX_LABEL: &str = "tfstateSecretSuffix";
/// The backend's label naming the workspace.
pub const WORKSPACE_LABEL: &str = "tfstateWorkspace";
/// The label naming the suffix a backup chunk was taken from.
pub const BACKUP_SUFFIX_LABEL: &str = "captf.io/state-backup-suffix";
/// The only workspace CAPTF uses.
pub const WORKSPACE: &str = "default";
/// The state format CAPTF reads.
pub const STATE_VERSION: u64 = 4;
/// The `StateReadable` reason of a state read without error.
pub const STATE_READ_REASON: &str = "StateRead";

/// A Secret, as plain data.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StateSecret {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `data`, already base64-decoded.
    pub data: BTreeMap<String, Vec<u8>>,
}

impl fmt::Debug for StateSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes: BTreeMap<&str, usize> = self
            .data
            .iter()
            .map(|(k, v)| (k.as_str(), v.len()))
            .collect();
        f.debug_struct("StateSecret")
            .field("name", &self.name)
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .field("data_bytes", &sizes)
            .finish()
    }
}

/// Which set of Secrets to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSet<'a> {
    /// The live state, `tfstate-default-<suffix>` and its parts.
    Live {
        /// The object's state suffix.
        suffix: &'a str,
    },
    /// A backup, `captf-state-backup-<suffix>-<serial>` and its parts.
    Backup {
        /// The object's state suffix.
        suffix: &'a str,
        /// The backed-up serial.
        serial: u64,
    },
}

impl StateSet<'_> {
    /// The name of chunk 0.
    pub fn base_name(&self) -> String {
        match self {
            Self::Live { suffix } => state_secret_name(suffix),
            Self::Backup { suffix, serial } => state_backup_secret_name(suffix, *serial),
        }
    }

    fn labels_agree(&self, labels: &BTreeMap<String, String>) -> bool {
        let agrees = |key: &str, want: &str| labels.get(key).is_none_or(|v| v == want);
        match self {
            Self::Live { suffix } => {
                agrees(SUFFIX_LABEL, suffix) && agrees(WORKSPACE_LABEL, WORKSPACE)
            }
            Self::Backup { suffix, .. } => agrees(BACKUP_SUFFIX_LABEL, suffix),
        }
    }
}

/// The caps the reader enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    /// The most chunk Secrets.
    pub max_chunks: usize,
    /// The most decompressed bytes.
    pub max_bytes: usize,
}

impl Default for StateLimits {
    fn default() -> Self {
        Self {
            max_chunks: MAX_STATE_CHUNKS,
            max_bytes: MAX_STATE_BYTES,
        }
    }
}

/// What CAPTF knows about a state after reading it.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSummary {
    /// `serial`.
    pub serial: u64,
    /// `lineage`.
    pub lineage: String,
    /// `terraform_version`: the Terraform or OpenTofu version that wrote the state.
    pub runtime_version: String,
    /// The root module's outputs (values may be sensitive; their `Debug` is redacted).
    pub outputs: RootOutputs,
    /// Resources with `mode: managed`; a `count`/`for_each` resource counts once.
    pub managed_resources: u64,
    /// The size of the concatenated chunk payloads, as stored.
    pub compressed_bytes: u64,
    /// The size of the state document after gunzip.
    pub decompressed_bytes: u64,
    /// How many chunk Secrets the state spans.
    pub chunks: usize,
    /// The `captf.io/inputs-hash` annotation of the base Secret, when set and non-empty.
    pub inputs_hash: Option<String>,
}

/// Why a chunk set is not one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inconsistency {
    /// A Secret whose name is neither the base nor `<base>-part-<N>`.
    UnexpectedSecret {
        /// Its name.
        name: String,
    },
    /// A Secret whose backend labels name another suffix or workspace.
    ForeignLabels {
        /// Its name.
        name: String,
    },
    /// Two Secrets for the same chunk index.
    DuplicateChunk {
        /// The index.
        index: usize,
    },
    /// There are parts but no base Secret.
    MissingBase,
    /// A gap in the part numbers.
    MissingChunk {
        /// The first index missing.
        index: usize,
    },
    /// A chunk without the `tfstate` data key.
    MissingData {
        /// Its name.
        name: String,
    },
}

impl fmt::Display for Inconsistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnexpectedSecret { name } => {
                write!(f, "Secret {name} is not a chunk of this state")
            }
            Self::ForeignLabels { name } => write!(
                f,
                "Secret {name} carries backend labels of another suffix or workspace"
            ),
            Self::DuplicateChunk { index } => write!(f, "chunk {index} appears twice"),
            Self::MissingBase => f.write_str("the base Secret is missing"),
            Self::MissingChunk { index } => write!(f, "chunk {index} is missing"),
            Self::MissingData { name } => {
                write!(f, "Secret {name} has no {STATE_DATA_KEY} data key")
            }
        }
    }
}

/// Why a state could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// More chunk Secrets than the cap.
    TooManyChunks {
        /// How many there are.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// More decompressed bytes than the cap.
    TooLarge {
        /// The cap, in bytes.
        max: usize,
    },
    /// The payload is not valid gzip.
    Gzip,
    /// The document is not valid JSON or not a state document's shape.
    Json {
        /// Line of the error (1-based).
        line: usize,
        /// Column of the error (1-based).
        column: usize,
    },
    /// The state format version is not 4.
    UnsupportedVersion {
        /// The version found, when there was one.
        version: Option<u64>,
    },
    /// A field CAPTF needs is absent.
    MissingField {
        /// The field.
        field: &'static str,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyChunks { count, max } => {
                write!(
                    f,
                    "the state spans {count} Secrets, more than the {max} read"
                )
            }
            Self::TooLarge { max } => {
                write!(f, "the state decompresses to more than {max} bytes")
            }
            Self::Gzip => f.write_str("the state payload is not valid gzip"),
            Self::Json { line, column } => write!(
                f,
                "the state document is not valid state JSON (line {line}, column {column})"
            ),
            Self::UnsupportedVersion { version: Some(v) } => {
                write!(f, "state format version {v} is not supported (only 4 is)")
            }
            Self::UnsupportedVersion { version: None } => {
                f.write_str("the state document has no format version")
            }
            Self::MissingField { field } => write!(f, "the state document has no {field}"),
        }
    }
}

/// Why no state summary could be produced; each variant maps to a `StateReadable` reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// No Secret at all: the object was never applied.
    #[error("no state Secret exists")]
    NotFound,
    /// The chunk set is incomplete, duplicated or names an unexpected Secret.
    #[error("state chunks are inconsistent: {0}")]
    Inconsistent(Inconsistency),
    /// The payload exceeds a cap, is not gzip, or is not a state v4 document.
    #[error("state is corrupt: {0}")]
    Corrupt(Corruption),
    /// OpenTofu client-side encryption wraps the state; its outputs cannot be read.
    #[error("state is encrypted with OpenTofu state encryption")]
    Encrypted {
        /// The serial OpenTofu keeps in clear next to the encrypted payload, when present.
        serial: Option<u64>,
        /// The lineage likewise.
        lineage: Option<String>,
    },
}

impl StateError {
    /// The `StateReadable` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound => "StateNotFound",
            Self::Inconsistent(_) => "StateInconsistent",
            Self::Corrupt(_) => "StateCorrupt",
            Self::Encrypted { .. } => "StateEncrypted",
        }
    }
}

/// The chunk index `name` has in the set whose base Secret is `base`: 0 for the base itself,
/// `N` for `<base>-part-N` (N ≥ 1, decimal, no sign or leading zero); `None` for any other name.
pub fn chunk_index(base: &str, name: &str) -> Option<usize> {
    let rest = name.strip_prefix(base)?;
    if rest.is_empty() {
        return Some(0);
    }
    let digits = rest.strip_prefix("-part-")?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `secrets` are what the `kubernetes` backend leaves when its very first write is cut
/// short: its `Put` creates the base Secret without data, then writes the state into it in a
/// second request, so a runner stopped between the two leaves exactly one base Secret of the set,
/// no part, and no `tfstate` key. The backend itself reads that as no state (and writes into it
/// next time); the manager does too, where [`read_state`] would say `MissingData`.
pub fn first_write_cut_short(set: StateSet<'_>, secrets: &[StateSecret]) -> bool {
    match secrets {
        [only] => {
            only.name == set.base_name()
                && set.labels_agree(&only.labels)
                && !only.data.contains_key(STATE_DATA_KEY)
        }
        _ => false,
    }
}

/// Reads a state with the default caps.
pub fn read_state(set: StateSet<'_>, secrets: &[StateSecret]) -> Result<StateSummary, StateError> {
    read_state_with_limits(set, secrets, StateLimits::default())
}

/// Reads a state with explicit caps.
pub fn read_state_with_limits(
    set: StateSet<'_>,
    secrets: &[StateSecret],
    limits: StateLimits,
) -> Result<StateSummary, StateError> {
    let chunks = order_chunks(set, secrets, limits)?;
    let compressed_len: usize = chunks.iter().map(|c| c.len()).sum();
    let mut inflating = Inflating::new(&chunks, limits.max_bytes, INFLATE_STEP);
    let resources = skim::skim_resources(&mut inflating);
    let (parsed, decompressed_len) = parse_inflated(inflating.finish(), resources, || {
        gunzip(&chunks, limits.max_bytes)
    })?;
    let inputs_hash = secrets
        .iter()
        .find(|s| s.name == set.base_name())
        .and_then(|s| s.annotations.get(INPUTS_HASH_ANNOTATION))
        .filter(|h| !h.is_empty())
        .cloned();
    Ok(StateSummary {
        serial: parsed.serial,
        lineage: parsed.lineage,
        runtime_version: parsed.runtime_version,
        outputs: parsed.outputs,
        managed_resources: parsed.managed_resources,
        compressed_bytes: compressed_len as u64,
        decompressed_bytes: decompressed_len as u64,
        chunks: chunks.len(),
        inputs_hash,
    })
}

/// Checks the chunk set and returns the payloads in index order.
fn order_chunks<'s>(
    set: StateSet<'_>,
    secrets: &'s [StateSecret],
    limits: StateLimits,
) -> Result<Vec<&'s [u8]>, StateError> {
    if secrets.is_empty() {
        return Err(StateError::NotFound);
    }
    let base = set.base_name();
    let mut by_index: BTreeMap<usize, &StateSecret> = BTreeMap::new();
    for secret in secrets {
        let Some(index) = chunk_index(&base, &secret.name) else {
            return Err(StateError::Inconsistent(Inconsistency::UnexpectedSecret {
                name: secret.name.clone(),
            }));
        };
        if !set.labels_agree(&secret.labels) {
            return Err(StateError::Inconsistent(Inconsistency::ForeignLabels {
                name: secret.name.clone(),
            }));
        }
        if by_index.insert(index, secret).is_some() {
            return Err(StateError::Inconsistent(Inconsistency::DuplicateChunk {
                index,
            }));
        }
    }
    if by_index.len() > limits.max_chunks {
        return Err(StateError::Corrupt(Corruption::TooManyChunks {
            count: by_index.len(),
            max: limits.max_chunks,
        }));
    }
    if !by_index.contains_key(&0) {
        return Err(StateError::Inconsistent(Inconsistency::MissingBase));
    }
    let mut payloads = Vec::with_capacity(by_index.len());
    for (expected, (&index, secret)) in by_index.iter().enumerate() {
        if index != expected {
            return Err(StateError::Inconsistent(Inconsistency::MissingChunk {
                index: expected,
            }));
        }
        let Some(data) = secret.data.get(STATE_DATA_KEY) else {
            return Err(StateError::Inconsistent(Inconsistency::MissingData {
                name: chunk_secret_name(&base, index),
            }));
        };
        payloads.push(data.as_slice());
    }
    Ok(payloads)
}

/// Parses what [`Inflating`] kept and the scan found, as [`parse_skimmed`] parses a whole
/// document; `whole` gunzips the whole document again, for the rare reads that need all of it
/// after the scan let part of `resources` go (a document the scan was not sure of, or one serde
/// refuses with the array cut out) and to say why a payload was refused. Returns the parse and
/// the document's size.
fn parse_inflated(
    inflated: Option<Inflated>,
    resources: Option<skim::Resources>,
    whole: impl FnOnce() -> Result<Vec<u8>, StateError>,
) -> Result<(ParsedState, usize), StateError> {
    match inflated {
        Some(Inflated { out, dropped: 0 }) => {
            let parsed = parse_skimmed(&out, resources)?;
            Ok((parsed, out.len()))
        }
        Some(Inflated { out, dropped }) => {
            if let Some(resources) = resources {
                let rest = without_resources(&out, resources.start, resources.end - dropped);
                if let Ok(parsed) = parse_with_serde(&rest) {
                    let parsed = ParsedState {
                        managed_resources: resources.managed,
                        ..parsed
                    };
                    return Ok((parsed, out.len() + dropped));
                }
            }
            let document = whole()?;
            Ok((parse_with_serde(&document)?, document.len()))
        }
        // Whether a payload both corrupt and over the cap is refused as one or the other depends
        // on where the decoder's reads stop; the reader says what reading it at once says.
        None => {
            let document = whole()?;
            Ok((parse_with_serde(&document)?, document.len()))
        }
    }
}

/// `document[..start]`, an empty array, then `document[end..]`.
fn without_resources(document: &[u8], start: usize, end: usize) -> Vec<u8> {
    let mut rest = Vec::with_capacity(start + 2 + (document.len() - end));
    rest.extend_from_slice(&document[..start]);
    rest.extend_from_slice(b"[]");
    rest.extend_from_slice(&document[end..]);
    rest
}

/// What [`Inflating`] kept of a document: all of it but `dropped` bytes the scan was done with,
/// all inside `resources`; `out` is the document with those bytes cut out.
#[derive(Debug, PartialEq, Eq)]
struct Inflated {
    out: Vec<u8>,
    dropped: usize,
}

/// The gunzip of the chunks read one after the other (every gzip member, as Go's reader does),
/// inflated a step at a time as the reader asks for more, and never more than `max` bytes plus
/// the one that shows the cap is exceeded: the buffer is never allocated past that either.
///
/// The bytes of `resources` the scan is done with are let go as it goes (the first time, what
/// comes before them is kept as the head), so the buffer holds the head, then only the bytes the
/// scan has yet to read, and is reused, still in cache, instead of growing to the whole document.
struct Inflating<'a> {
    decoder: std::io::Take<flate2::bufread::MultiGzDecoder<Chunks<'a>>>,
    /// The head (`out[..head]`), then the document from offset `head + dropped` on, inflated up
    /// to `filled`; past that, bytes already initialized for the next step.
    out: Vec<u8>,
    filled: usize,
    /// The end of the head: where the bytes let go were, once there are any.
    head: usize,
    /// How many bytes were let go.
    dropped: usize,
    /// `max` + 1.
    limit: usize,
    max: usize,
    /// How much to inflate at a time.
    step: usize,
    finished: bool,
    failed: bool,
}

/// How much is inflated at a time: small enough that it is still in cache when scanned.
const INFLATE_STEP: usize = 256 * 1024;

impl<'a> Inflating<'a> {
    fn new(chunks: &'a [&'a [u8]], max: usize, step: usize) -> Self {
        let limit = max.saturating_add(1);
        let cap = u64::try_from(limit).unwrap_or(u64::MAX);
        Self {
            decoder: flate2::bufread::MultiGzDecoder::new(Chunks::new(chunks)).take(cap),
            out: Vec::with_capacity(size_hint(chunks).min(max)),
            filled: 0,
            head: 0,
            dropped: 0,
            limit,
            max,
            step: step.max(1),
            finished: false,
            failed: false,
        }
    }

    /// Inflates the rest: the document (but the bytes let go), or `None` when the payload is not
    /// valid gzip or inflates past the cap. A valid stream inflates to the same bytes however it
    /// is read, so a document here is the one [`gunzip`] returns, but for the bytes let go.
    fn finish(mut self) -> Option<Inflated> {
        while skim::Source::more(&mut self, 0..0) {}
        self.out.truncate(self.filled);
        (!self.failed && self.out.len() + self.dropped <= self.max).then_some(Inflated {
            out: self.out,
            dropped: self.dropped,
        })
    }

    /// Lets go of the bytes of `done` not let go yet: the head ends where `done` starts.
    fn drop_done(&mut self, done: std::ops::Range<usize>) {
        if done.is_empty() {
            return;
        }
        if self.dropped == 0 {
            self.head = done.start;
        }
        let from = self.head + self.dropped;
        let amount = done.end.saturating_sub(from);
        if amount == 0 {
            return;
        }
        self.out
            .copy_within(self.head + amount..self.filled, self.head);
        self.filled -= amount;
        self.dropped += amount;
    }

    /// Makes `step` initialized bytes from `filled` on, growing as `Vec` does but never past
    /// what the cap leaves.
    fn reserve(&mut self, step: usize) {
        let end = self.filled + step;
        if end <= self.out.len() {
            return;
        }
        if end > self.out.capacity() {
            let limit = self.limit - self.dropped;
            let target = (2 * self.out.capacity()).max(end).min(limit);
            self.out.reserve_exact(target - self.out.len());
        }
        self.out.resize(end, 0);
    }
}

impl skim::Source for Inflating<'_> {
    fn data(&self) -> &[u8] {
        &self.out[self.head..self.filled]
    }

    fn start(&self) -> usize {
        self.head + self.dropped
    }

    fn more(&mut self, done: std::ops::Range<usize>) -> bool {
        self.drop_done(done);
        let step = self.step.min(self.limit - self.dropped - self.filled);
        if self.finished || step == 0 {
            return false;
        }
        self.reserve(step);
        let from = self.filled;
        let read = loop {
            match self.decoder.read(&mut self.out[from..from + step]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.failed = true;
                    break 0;
                }
            }
        };
        self.filled += read;
        self.finished = read == 0;
        read > 0
    }
}

/// Gunzips the concatenated chunks at once (every gzip member, as Go's reader does) without
/// producing more than `max` bytes: what the reader reports for a payload [`Inflating`] refuses.
fn gunzip(chunks: &[&[u8]], max: usize) -> Result<Vec<u8>, StateError> {
    let compressed = chunks.concat();
    let decoder = flate2::bufread::MultiGzDecoder::new(compressed.as_slice());
    let cap = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(8).min(max));
    decoder
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|_| StateError::Corrupt(Corruption::Gzip))?;
    if out.len() > max {
        return Err(StateError::Corrupt(Corruption::TooLarge { max }));
    }
    Ok(out)
}

/// How many bytes to reserve for the decompressed document: the last gzip member's trailer
/// records its size (modulo 4 GiB), which is the whole document's when, as the backend writes it,
/// there is one member. Only a hint — the decoder's output, not this, is held to the cap — so a
/// trailer that lies, or a payload too short to have one, only costs a reallocation; and never
/// more than deflate's best ratio (1032:1) allows, so a lying trailer reserves little.
fn size_hint(chunks: &[&[u8]]) -> usize {
    let compressed: usize = chunks.iter().map(|c| c.len()).sum();
    let mut trailer = [0u8; 4];
    let mut filled = 0;
    for &byte in chunks.iter().rev().flat_map(|c| c.iter().rev()) {
        if filled == trailer.len() {
            break;
        }
        filled += 1;
        trailer[trailer.len() - filled] = byte;
    }
    if filled < trailer.len() {
        return 0;
    }
    usize::try_from(u32::from_le_bytes(trailer))
        .unwrap_or(0)
        .min(compressed.saturating_mul(MAX_DEFLATE_RATIO))
}

/// The most bytes one compressed byte of deflate can stand for.
const MAX_DEFLATE_RATIO: usize = 1032;

/// The chunk payloads read as one stream, without copying them together.
struct Chunks<'a> {
    rest: &'a [&'a [u8]],
    current: &'a [u8],
}

impl<'a> Chunks<'a> {
    fn new(chunks: &'a [&'a [u8]]) -> Self {
        Self {
            rest: chunks,
            current: &[],
        }
    }
}

impl Read for Chunks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Chunks<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.current.is_empty() {
            let Some((first, rest)) = self.rest.split_first() else {
                break;
            };
            self.current = first;
            self.rest = rest;
        }
        Ok(self.current)
    }

    fn consume(&mut self, amount: usize) {
        self.current = &self.current[amount.min(self.current.len())..];
    }
}

/// The parts of a state document CAPTF keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedState {
    /// `serial`.
    pub serial: u64,
    /// `lineage`.
    pub lineage: String,
    /// `terraform_version`.
    pub runtime_version: String,
    /// Root outputs.
    pub outputs: RootOutputs,
    /// Managed resources.
    pub managed_resources: u64,
}

/// Parses a decompressed state document (state v4, or OpenTofu's encryption envelope, which is
/// reported as [`StateError::Encrypted`]).
///
/// Nearly all of a large state is its `resources` array, of which only the entries' modes matter:
/// when a byte-level scan finds that array plainly well-formed, serde parses the document with the
/// array cut out and the scan's count stands in for it; otherwise, or when that shorter document
/// fails, serde parses the whole document, so results and errors are the same either way.
pub fn parse_state_document(document: &[u8]) -> Result<ParsedState, StateError> {
    let resources = skim::skim_resources(&mut &document[..]);
    parse_skimmed(document, resources)
}

/// Parses a document whose `resources` array the scan may have found.
fn parse_skimmed(
    document: &[u8],
    resources: Option<skim::Resources>,
) -> Result<ParsedState, StateError> {
    if let Some(resources) = resources {
        let rest = without_resources(document, resources.start, resources.end);
        if let Ok(parsed) = parse_with_serde(&rest) {
            return Ok(ParsedState {
                managed_resources: resources.managed,
                ..parsed
            });
        }
    }
    parse_with_serde(document)
}

/// Parses a whole state document with serde, skipping resource instances unread.
fn parse_with_serde(document: &[u8]) -> Result<ParsedState, StateError> {
    if !crate::plan::is_json_object(document) {
        return Err(StateError::Corrupt(Corruption::Json { line: 1, column: 1 }));
    }
    let raw: RawState = serde_json::from_slice(document).map_err(|e| {
        StateError::Corrupt(Corruption::Json {
            line: e.line(),
            column: e.column(),
        })
    })?;
    if raw
        .encryption_version
        .as_deref()
        .is_some_and(|v| !v.is_empty())
    {
        return Err(StateError::Encrypted {
            serial: raw.serial,
            lineage: raw.lineage,
        });
    }
    if raw.version != Some(STATE_VERSION) {
        return Err(StateError::Corrupt(Corruption::UnsupportedVersion {
            version: raw.version,
        }));
    }
    let missing = |field| StateError::Corrupt(Corruption::MissingField { field });
    let serial = raw.serial.ok_or_else(|| missing("serial"))?;
    let lineage = raw.lineage.ok_or_else(|| missing("lineage"))?;
    let runtime_version = raw
        .terraform_version
        .ok_or_else(|| missing("terraform_version"))?;
    let outputs = raw
        .outputs
        .unwrap_or_default()
        .into_iter()
        .map(|(name, o)| (name, root_output(o)))
        .collect();
    Ok(ParsedState {
        serial,
        lineage,
        runtime_version,
        outputs,
        managed_resources: raw.resources.map_or(0, |c| c.0),
    })
}

/// The top level of a state v4 document, or of OpenTofu's encryption envelope (which keeps
/// `serial` and `lineage` in clear beside `meta`, `encrypted_data` and `encryption_version`).
/// Unknown fields — `check_results`, the envelope's payload — are skipped unread.
#[derive(Deserialize)]
struct RawState {
    #[serde(default)]
    version: Option<u64>,
    #[serde(default)]
    terraform_version: Option<String>,
    #[serde(default)]
    serial: Option<u64>,
    #[serde(default)]
    lineage: Option<String>,
    #[serde(default)]
    outputs: Option<BTreeMap<String, RawOutput>>,
    #[serde(default)]
    resources: Option<ManagedCount>,
    #[serde(default)]
    encryption_version: Option<String>,
}

/// One root output. Its value is kept as raw JSON text (skipping it does not recurse), so a value
/// nested deeper than the parser's recursion limit spoils only that output, not the state.
#[derive(Deserialize)]
struct RawOutput {
    #[serde(default)]
    value: Option<Box<RawValue>>,
    #[serde(default)]
    sensitive: Option<bool>,
}

/// Decodes one output's value; a value too deep to decode is null and marked undecodable.
fn root_output(raw: RawOutput) -> RootOutput {
    let sensitive = raw.sensitive.unwrap_or(false);
    let decoded = raw
        .value
        .map_or(Ok(Value::Null), |v| serde_json::from_str::<Value>(v.get()));
    match decoded {
        Ok(value) => RootOutput {
            value,
            sensitive,
            undecodable: false,
        },
        Err(_) => RootOutput {
            value: Value::Null,
            sensitive,
            undecodable: true,
        },
    }
}

/// One entry of `resources`: only its mode is looked at; `instances` and the rest are skipped.
#[derive(Deserialize)]
struct ResourceHead {
    #[serde(default)]
    mode: Option<ResourceMode>,
}

#[derive(Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum ResourceMode {
    Managed,
    #[serde(other)]
    Other,
}

/// The number of managed entries of `resources`, counted while streaming the array.
struct ManagedCount(u64);

impl<'de> Deserialize<'de> for ManagedCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl<'de> Visitor<'de> for CountVisitor {
            type Value = ManagedCount;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of resources")
            }

            fn visit_unit<E: de::Error>(self) -> Result<ManagedCount, E> {
                Ok(ManagedCount(0))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ManagedCount, A::Error> {
                let mut count = 0u64;
                while let Some(head) = seq.next_element::<ResourceHead>()? {
                    if head.mode == Some(ResourceMode::Managed) {
                        count += 1;
                    }
                }
                Ok(ManagedCount(count))
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}
