//! Fuzzing (issue 19): the state reader (Terraform State "Chunking and size caps", "What CAPTF
//! reads from state"). Random bytes and mutated real states as documents; gzip of random and of
//! mutated documents; chunk sets with parts missing, duplicated, extra, foreign, reordered or
//! over the cap; gzip bombs, which the size cap refuses while decompressing (a thread-local
//! allocation counter shows the reader never holds much more than the cap).
//!
//! `CAPTF_FUZZ_CASES` sets the cases per property (default 256; `make fuzz` runs 1 000 000).

mod fuzz_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;

use contract::names::chunk_secret_name;
use contract::state::{
    Corruption, Inconsistency, MAX_STATE_BYTES, STATE_DATA_KEY, StateError, StateLimits,
    StateSecret, StateSet, parse_state_document, read_state, read_state_with_limits,
};
use flate2::Compression;
use flate2::write::GzEncoder;
use fuzz_support::{config, edited, edits, garbage, mutate_bytes};
use proptest::prelude::*;

const SUFFIX: &str = "0123456789abcdef-m";
const REAL_STATE: &[u8] = include_bytes!("fixtures/states/machine-role.tfstate");
const ENCRYPTED_STATE: &[u8] = include_bytes!("fixtures/states/encrypted.tfstate");

/// Fields of a state document the reader looks at, and some it skips.
const STATE_FIELDS: &[&str] = &[
    "/version",
    "/terraform_version",
    "/serial",
    "/lineage",
    "/outputs",
    "/outputs/provider_id",
    "/outputs/provider_id/value",
    "/outputs/provider_id/sensitive",
    "/outputs/addresses/value",
    "/resources",
    "/resources/0",
    "/resources/0/mode",
    "/resources/0/instances",
    "/resources/1/mode",
    "/check_results",
    "/encryption_version",
    "/encrypted_data",
    "/meta",
];

fn live() -> StateSet<'static> {
    StateSet::Live { suffix: SUFFIX }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

fn secret(name: String, payload: Vec<u8>) -> StateSecret {
    StateSecret {
        name,
        data: [(STATE_DATA_KEY.to_owned(), payload)].into(),
        ..StateSecret::default()
    }
}

/// The payload cut into `parts` chunk Secrets named as the backend names them.
fn chunked(payload: &[u8], parts: usize) -> Vec<StateSecret> {
    let base = live().base_name();
    let size = payload.len().div_ceil(parts.max(1)).max(1);
    let mut chunks: Vec<_> = payload.chunks(size).map(<[u8]>::to_vec).collect();
    chunks.resize(parts.max(1), Vec::new());
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| secret(chunk_secret_name(&base, i), c))
        .collect()
}

/// Every error names what is wrong and maps to a `StateReadable` reason.
fn assert_clear(result: &Result<impl std::fmt::Debug, StateError>) -> Result<(), TestCaseError> {
    if let Err(e) = result {
        prop_assert!(!e.to_string().is_empty());
        prop_assert!(e.reason().starts_with("State"), "{e:?}");
    }
    Ok(())
}

fn mutated_state() -> impl Strategy<Value = Vec<u8>> {
    edits(STATE_FIELDS).prop_map(|edits| edited(REAL_STATE, edits))
}

/// A document: raw bytes or random JSON, a mutated real state, or a real state with its bytes
/// mutated.
fn any_document() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        garbage(),
        mutated_state(),
        mutate_bytes(REAL_STATE.to_vec()),
        mutate_bytes(ENCRYPTED_STATE.to_vec()),
    ]
}

/// How a well-formed chunk set is spoiled.
#[derive(Debug, Clone)]
enum Spoil {
    Nothing,
    Reverse,
    DropChunk(usize),
    DuplicateChunk(usize),
    ExtraSecret(String),
    ForeignLabel(usize),
    NoData(usize),
}

fn spoil() -> impl Strategy<Value = Spoil> {
    prop_oneof![
        Just(Spoil::Nothing),
        Just(Spoil::Reverse),
        (0usize..8).prop_map(Spoil::DropChunk),
        (0usize..8).prop_map(Spoil::DuplicateChunk),
        prop_oneof![
            Just("-part-0".to_owned()),
            Just("-part-01".to_owned()),
            Just("-part--1".to_owned()),
            Just("-part-99999999999999999999999".to_owned()),
            "-part-[0-9]{1,3}",
            ".{0,12}",
        ]
        .prop_map(Spoil::ExtraSecret),
        (0usize..8).prop_map(Spoil::ForeignLabel),
        (0usize..8).prop_map(Spoil::NoData),
    ]
}

/// What a spoiled set must read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// One whole state.
    Whole,
    /// A set that looks whole but whose payload is cut or has bytes appended: the reader cannot
    /// tell from the names, so the gzip or JSON decoding refuses it (or, for bytes after the
    /// last gzip member, ignores them).
    PayloadSpoiled,
    /// Inconsistent (or, with no Secret left, not found).
    Inconsistent,
}

/// Applies `spoil`; returns what the set must read as.
fn spoiled(mut secrets: Vec<StateSecret>, spoil: &Spoil) -> (Vec<StateSecret>, Expect) {
    let n = secrets.len();
    let expect = match spoil {
        Spoil::Nothing => Expect::Whole,
        Spoil::Reverse => {
            secrets.reverse();
            Expect::Whole
        }
        Spoil::DropChunk(i) => {
            secrets.remove(i % n);
            if n > 1 && i % n == n - 1 {
                Expect::PayloadSpoiled
            } else {
                Expect::Inconsistent
            }
        }
        Spoil::DuplicateChunk(i) => {
            secrets.push(secrets[i % n].clone());
            Expect::Inconsistent
        }
        Spoil::ExtraSecret(tail) => {
            let base = live().base_name();
            let name = format!("{base}{tail}");
            let next_part = contract::state::chunk_index(&base, &name) == Some(n);
            secrets.push(secret(name, b"extra".to_vec()));
            if next_part {
                Expect::PayloadSpoiled
            } else {
                Expect::Inconsistent
            }
        }
        Spoil::ForeignLabel(i) => {
            secrets[i % n]
                .labels
                .insert("tfstateSecretSuffix".into(), "another".into());
            Expect::Inconsistent
        }
        Spoil::NoData(i) => {
            secrets[i % n].data.clear();
            Expect::Inconsistent
        }
    };
    (secrets, expect)
}

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

/// Counts the bytes this thread holds, and its peak. The one `unsafe` of the tests: a global
/// allocator is an unsafe trait, and this one only forwards to the system allocator.
struct Counting;

#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|live| {
            let now = live.get().saturating_add(layout.size());
            live.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(layout.size())));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[allow(unsafe_code)]
#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes this thread held at once while running `f`, above what it held before.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let out = f();
    (out, PEAK.with(Cell::get).saturating_sub(before))
}

/// `members` copies of one gzip member of `member_bytes` zeros: a bomb whose compressed size
/// grows with `members` only by a few hundred bytes each.
fn bomb(member_bytes: usize, members: usize) -> Vec<u8> {
    let member = gzip(&vec![0; member_bytes]);
    member.repeat(members)
}

/// A gzip bomb (1 GiB of zeros in 1 MiB members, about 1 MiB compressed) is refused with the
/// size error, and reading it never holds much more than the 64 MiB cap.
#[test]
fn a_gzip_bomb_is_refused_without_unbounded_allocation() {
    let payload = bomb(1 << 20, 1024);
    let secrets = chunked(&payload, 4);
    let (result, peak) = peak_during(|| read_state(live(), &secrets));
    assert_eq!(
        result,
        Err(StateError::Corrupt(Corruption::TooLarge {
            max: MAX_STATE_BYTES
        }))
    );
    // The counter sees the reader's buffer: it does hold up to the cap.
    assert!(peak >= MAX_STATE_BYTES, "peak {peak}");
    assert!(
        peak <= 2 * MAX_STATE_BYTES + payload.len() + (1 << 20),
        "peak {peak} bytes while reading a bomb"
    );
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn documents_parse_or_are_refused_clearly(document in any_document()) {
        assert_clear(&parse_state_document(&document))?;
    }

    #[test]
    fn gzipped_documents_read_or_are_refused_clearly(
        document in any_document(),
        parts in 1usize..4,
    ) {
        assert_clear(&read_state(live(), &chunked(&gzip(&document), parts)))?;
    }

    #[test]
    fn raw_and_mutated_payloads_read_or_are_refused_clearly(
        payload in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..512),
            mutate_bytes(gzip(REAL_STATE)),
        ],
        parts in 1usize..4,
    ) {
        assert_clear(&read_state(live(), &chunked(&payload, parts)))?;
    }

    #[test]
    fn spoiled_chunk_sets_are_inconsistent(
        parts in 1usize..6,
        spoil in spoil(),
        max_chunks in 1usize..8,
    ) {
        let (secrets, expect) = spoiled(chunked(&gzip(REAL_STATE), parts), &spoil);
        let limits = StateLimits { max_chunks, max_bytes: MAX_STATE_BYTES };
        let result = read_state_with_limits(live(), &secrets, limits);
        assert_clear(&result)?;
        let over_cap = secrets.len() > max_chunks;
        match &result {
            Ok(summary) => {
                prop_assert!(expect != Expect::Inconsistent, "{spoil:?} read as {summary:?}");
                prop_assert!(summary.chunks <= max_chunks);
            }
            Err(StateError::Corrupt(Corruption::TooManyChunks { count, max })) => {
                prop_assert!(count > max);
            }
            Err(StateError::Corrupt(Corruption::Gzip | Corruption::Json { .. })) => {
                prop_assert_eq!(expect, Expect::PayloadSpoiled, "{:?}", spoil);
            }
            Err(StateError::Inconsistent(_)) => {
                prop_assert_eq!(expect, Expect::Inconsistent, "{:?}", spoil);
            }
            Err(StateError::NotFound) => prop_assert!(secrets.is_empty()),
            Err(other) => prop_assert!(false, "{spoil:?}: {other:?}"),
        }
        if expect == Expect::Whole && !over_cap {
            prop_assert!(result.is_ok(), "{spoil:?}: {result:?}");
        }
    }

    #[test]
    fn gzip_bombs_are_refused_by_the_size_cap(
        member_bytes in 1usize..4096,
        members in 1usize..64,
        max_bytes in 0usize..8192,
    ) {
        let payload = bomb(member_bytes, members);
        let limits = StateLimits { max_chunks: 32, max_bytes };
        let (result, peak) = peak_during(|| read_state_with_limits(live(), &chunked(&payload, 1), limits));
        if member_bytes * members > max_bytes {
            prop_assert_eq!(result, Err(StateError::Corrupt(Corruption::TooLarge { max: max_bytes })));
        } else {
            // Zeros are not JSON.
            prop_assert_eq!(result, Err(StateError::Corrupt(Corruption::Json { line: 1, column: 1 })));
        }
        prop_assert!(peak <= 4 * (max_bytes + payload.len()) + 65_536, "peak {peak}");
    }
}

#[test]
fn an_inconsistent_set_names_the_problem() {
    let (secrets, expect) = spoiled(chunked(&gzip(REAL_STATE), 3), &Spoil::DropChunk(1));
    assert_eq!(expect, Expect::Inconsistent);
    assert_eq!(
        read_state(live(), &secrets),
        Err(StateError::Inconsistent(Inconsistency::MissingChunk {
            index: 1
        }))
    );
}
