//! Shared by the fuzz targets (issue 19) of this crate, `tfcapi-lint` and `webhook` (they include
//! this file by path): the case count and JSON strategies.
//!
//! `CAPTF_FUZZ_CASES` sets the cases each property runs (default [`DEFAULT_CASES`], which keeps
//! `cargo test` quick); `make fuzz` raises it.

#![allow(dead_code)] // Each target uses the part it needs.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Cases per property when `CAPTF_FUZZ_CASES` is unset.
pub const DEFAULT_CASES: u32 = 256;

/// The proptest configuration every fuzz target runs with.
pub fn config() -> ProptestConfig {
    config_or(DEFAULT_CASES)
}

/// The configuration of a target whose cases default to `default` without `CAPTF_FUZZ_CASES`.
pub fn config_or(default: u32) -> ProptestConfig {
    let cases = std::env::var("CAPTF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        // Shrinking a failure found among a million cases must not run for hours.
        max_shrink_iters: 4096,
        // A failure becomes a plain regression test next to the target, not a seed file.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A JSON leaf, biased towards values the parsers look at (numbers at the edges, versions,
/// action names, empty strings).
pub fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,24}".prop_map(Value::from),
        prop::sample::select(vec![
            json!(4),
            json!(0),
            json!(-1),
            json!(""),
            json!("managed"),
            json!("data"),
            json!("ephemeral"),
            json!("create"),
            json!("delete"),
            json!("update"),
            json!("no-op"),
            json!("read"),
            json!("forget"),
            json!(["create"]),
            json!(["delete", "create"]),
            json!(["create", "delete"]),
            json!([]),
            json!({}),
        ]),
    ]
}

/// Any JSON value of bounded size.
pub fn any_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Edits of a document: JSON pointers (drawn from `fields`) and the value each is set to; a
/// `None` value removes the field.
pub fn edits(
    fields: &'static [&'static str],
) -> impl Strategy<Value = Vec<(&'static str, Option<Value>)>> {
    prop::collection::vec(
        (
            prop::sample::select(fields),
            prop::option::weighted(0.8, any_json()),
        ),
        0..5,
    )
}

/// Random bytes, or random JSON text.
pub fn garbage() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        any_json().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
    ]
}

/// The JSON document `seed` with `edits` applied, as bytes.
pub fn edited(seed: &[u8], edits: Vec<(&str, Option<Value>)>) -> Vec<u8> {
    let mut doc: Value = serde_json::from_slice(seed).unwrap_or(Value::Null);
    apply(&mut doc, edits);
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// Applies `edits` to `doc`: a non-object on a pointer's path becomes an object; a numeric
/// segment indexes an array when there is one.
pub fn apply(doc: &mut Value, edits: Vec<(&str, Option<Value>)>) {
    for (pointer, value) in edits {
        let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        set(doc, &parts, value);
    }
}

fn set(cur: &mut Value, parts: &[&str], value: Option<Value>) {
    let Some((first, rest)) = parts.split_first() else {
        *cur = value.unwrap_or(Value::Null);
        return;
    };
    if let Value::Array(items) = cur {
        if let Some(item) = first.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
            set(item, rest, value);
        }
        return;
    }
    if !cur.is_object() {
        *cur = json!({});
    }
    let Some(map) = cur.as_object_mut() else {
        return;
    };
    if rest.is_empty() && value.is_none() {
        map.remove(*first);
        return;
    }
    set(
        map.entry((*first).to_owned()).or_insert(Value::Null),
        rest,
        value,
    );
}

/// Bytes derived from `text` by a few byte-level mutations: truncation, a flipped byte, an
/// inserted byte.
pub fn mutate_bytes(text: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = text.len();
    (
        prop::option::weighted(0.3, 0..=len),
        prop::collection::vec((0..len.max(1), any::<u8>(), any::<bool>()), 0..4),
    )
        .prop_map(move |(cut, flips)| {
            let mut bytes = text.clone();
            for (at, byte, insert) in flips {
                if insert {
                    bytes.insert(at.min(bytes.len()), byte);
                } else if let Some(b) = bytes.get_mut(at) {
                    *b ^= byte;
                }
            }
            if let Some(cut) = cut {
                bytes.truncate(cut);
            }
            bytes
        })
}
