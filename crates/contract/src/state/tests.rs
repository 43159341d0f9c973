//! The reader's fast paths against the plain ones they stand in for: the byte-level scan of
//! `resources` against serde reading the whole document, and the step-by-step gunzip against
//! reading the concatenated chunks to the end at once ([`gunzip`], which has the last word on
//! payloads the step-by-step one refuses). Results and errors must be the same.

use super::skim::{Source, skim_resources};
use super::*;
use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use std::io::Write;

#[path = "../../tests/fuzz_support/mod.rs"]
mod fuzz_support;

use fuzz_support::{any_json, config, mutate_bytes};

const REAL_STATE: &[u8] = include_bytes!("../../tests/fixtures/states/machine-role.tfstate");
const ENCRYPTED_STATE: &[u8] = include_bytes!("../../tests/fixtures/states/encrypted.tfstate");

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

/// A document handed out `step` bytes at a time, letting go of every byte the scan is done with
/// (and everything before them), so a scan that looked at one again would read out of bounds.
struct Trickle<'a> {
    all: &'a [u8],
    start: usize,
    len: usize,
    step: usize,
}

impl Source for Trickle<'_> {
    fn data(&self) -> &[u8] {
        &self.all[self.start..self.len]
    }

    fn start(&self) -> usize {
        self.start
    }

    fn more(&mut self, done: std::ops::Range<usize>) -> bool {
        assert!(
            done.end <= self.len,
            "the scan is done only with bytes it was given"
        );
        self.start = self.start.max(done.end);
        let before = self.len;
        self.len = (self.len + self.step).min(self.all.len());
        self.len > before
    }
}

/// JSON text the scan decides on: keys and values it reads, ones it leaves to serde, and ones
/// neither accepts.
fn member() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        3 => Just(r#""mode""#),
        4 => prop::sample::select(vec![r#""type""#, r#""instances""#, r#""""#]),
        1 => prop::sample::select(vec![r#""mod\u0065""#, r#""m\u00e9de""#, "\"m\u{e9}de\""]),
    ];
    let value = prop_oneof![
        6 => prop::sample::select(vec![
            "null", r#""managed""#, r#""data""#, "1", "-0.5e+3", "0", "-0", "1E9", "[]", "{}",
            "true", "false", r#""\"\\\/\b\f\n\r\t\u00e9""#, r#"[{"a":[]},{}]"#,
        ])
        .prop_map(str::to_owned),
        1 => prop::sample::select(vec![
            r#""man\u0061ged""#, r#"{"managed":null}"#, r#"["managed"]"#,
        ])
        .prop_map(str::to_owned),
        1 => prop::sample::select(vec![
            "-", "-01", "01", "1.", "1e", "1e+", ".5", "+1", "nul", "tru", "nulls", r#""\x""#,
            r#""\u12""#, "\"a\u{1}b\"", "[1,]", "{\"a\":1,}", "[1 2]", "{\"a\" 1}", "{1:2}",
            "[", "]", "\"\u{ff}\"",
        ])
        .prop_map(str::to_owned),
        2 => any_json().prop_map(|v| v.to_string()),
    ];
    (key, value).prop_map(|(k, v)| format!("{k}:{v}"))
}

fn resource() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::collection::vec(member(), 0..4).prop_map(|m| format!("{{{}}}", m.join(","))),
        1 => prop::sample::select(vec!["null", r#"["managed"]"#, "1", r#""managed""#])
            .prop_map(str::to_owned),
    ]
}

/// A state document whose `resources` are made of [`resource`]s, compact or spaced out.
fn synthetic_state() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(resource(), 0..4),
        prop::sample::select(vec!["", " ", "\n  ", "\t\r\n"]),
        any::<bool>(),
    )
        .prop_map(|(resources, space, resources_first)| {
            let head = format!(
                r#""version":4,{space}"terraform_version":"1.12.6","serial":3,"lineage":"l","outputs":{{"a":{{"value":[1,{{"b":null}}],"sensitive":true}}}}"#
            );
            let resources = format!(
                r#""resources":{space}[{space}{}{space}]"#,
                resources.join(&format!(",{space}"))
            );
            let body = if resources_first {
                format!("{resources},{space}{head}")
            } else {
                format!("{head},{space}{resources},\"check_results\":null")
            };
            format!("{space}{{{space}{body}{space}}}{space}").into_bytes()
        })
}

/// A state document: real, synthetic, or either with a few bytes changed.
fn any_state() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        synthetic_state(),
        synthetic_state().prop_flat_map(mutate_bytes),
        mutate_bytes(REAL_STATE.to_vec()),
        mutate_bytes(ENCRYPTED_STATE.to_vec()),
    ]
}

#[test]
fn the_scan_reads_the_resources_of_a_real_state() {
    let skimmed = skim_resources(&mut &REAL_STATE[..]).expect("the real state is scanned");
    let parsed = parse_with_serde(REAL_STATE).expect("the real state parses");
    assert_eq!(skimmed.managed, parsed.managed_resources);
    assert!(skimmed.managed > 0);
    assert_eq!(REAL_STATE[skimmed.start], b'[');
    assert_eq!(REAL_STATE[skimmed.end - 1], b']');
}

/// One `resources` text per rule the scan follows, valid and not: each reads as serde reads it.
#[test]
fn each_rule_of_the_scan_reads_as_serde_does() {
    let cases = [
        "[]",
        "[{}]",
        r#"[{"mode":"managed"},{"mode":"data"},{"mode":null},{"type":"x"}]"#,
        r#"[{"mode":"managed","mode":"managed"}]"#,
        r#"[{"mode":"managed","mode":null}]"#,
        r#"[{"mod\u0065":"managed"}]"#,
        r#"[{"mode":"man\u0061ged"}]"#,
        r#"[{"mode":{"managed":null}}]"#,
        r#"[{"mode":["managed"]}]"#,
        r#"[{"mode":1}]"#,
        r#"[["managed"]]"#,
        "[null]",
        r#"[{"mode":"managed"},]"#,
        r#"[{"mode":"managed",}]"#,
        r#"[{"mode":"managed"} {"mode":"managed"}]"#,
        r#"[{"mode" "managed"}]"#,
        r#"[{"a":-},{"mode":"managed"}]"#,
        r#"[{"a":-01},{"mode":"managed"}]"#,
        r#"[{"a":01},{"mode":"managed"}]"#,
        r#"[{"a":1.},{"mode":"managed"}]"#,
        r#"[{"a":1e},{"mode":"managed"}]"#,
        r#"[{"a":1e+},{"mode":"managed"}]"#,
        r#"[{"a":-0.5E-3,"b":0,"c":1e9},{"mode":"managed"}]"#,
        r#"[{"a":.5},{"mode":"managed"}]"#,
        r#"[{"a":nul},{"mode":"managed"}]"#,
        r#"[{"a":nulls},{"mode":"managed"}]"#,
        r#"[{"a":[true,false,null,{}]},{"mode":"managed"}]"#,
        r#"[{"a":"\x"},{"mode":"managed"}]"#,
        r#"[{"a":"\u12"},{"mode":"managed"}]"#,
        r#"[{"a":"\u12G4"},{"mode":"managed"}]"#,
        r#"[{"a":"\"\\\/\b\f\n\r\t\ud800"},{"mode":"managed"}]"#,
        "[{\"a\":\"\u{1}\"},{\"mode\":\"managed\"}]",
        "[{\"a\":\"\u{1f}\"},{\"mode\":\"managed\"}]",
        "[{\"a\":\"\u{7f}\u{e9}\"},{\"mode\":\"managed\"}]",
        r#"[{"a":[1,]},{"mode":"managed"}]"#,
        r#"[{"a":{"b":1,}},{"mode":"managed"}]"#,
        r#"[{"a":{1:2}},{"mode":"managed"}]"#,
        r#"[{"a":[[[[{"b":[]}]]]]},{"mode":"managed"}]"#,
        r#"[{"a":[[[[{"b":[]}]]]},{"mode":"managed"}]"#,
        " [ { \"mode\" : \"managed\" } ,\n\t{\r\"a\" : [ 1 , { } ] } ] ",
        r#"[{"mode":"managed"}"#,
        r#"[{"mode":"managed""#,
    ];
    for resources in cases {
        for document in [
            format!(
                r#"{{"version":4,"terraform_version":"1","serial":1,"lineage":"l","resources":{resources}}}"#
            ),
            format!(
                r#"{{"resources":{resources},"version":4,"terraform_version":"1","serial":1,"lineage":"l"}}"#
            ),
        ] {
            let document = document.as_bytes();
            assert_eq!(
                parse_state_document(document),
                parse_with_serde(document),
                "{resources}"
            );
        }
    }
    let bad_key = b"{\"resources\":[{\"\xff\":1,\"mode\":\"managed\"}],\"version\":4}";
    assert_eq!(parse_state_document(bad_key), parse_with_serde(bad_key));
    let bad_mode = b"{\"resources\":[{\"mode\":\"\xff\"}],\"version\":4}";
    assert_eq!(parse_state_document(bad_mode), parse_with_serde(bad_mode));
}

#[test]
fn a_lying_gzip_trailer_reserves_no_more_than_deflate_can_produce() {
    let mut payload = gzip(b"{}");
    let len = payload.len();
    payload[len - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(size_hint(&[&payload]), len * MAX_DEFLATE_RATIO);
    assert_eq!(
        size_hint(&[&payload[..2], &payload[2..]]),
        len * MAX_DEFLATE_RATIO
    );
    assert_eq!(size_hint(&[&payload[..3]]), 0);
}

#[test]
fn the_resources_scanned_are_not_kept() {
    let entry = r#"{"mode":"managed","type":"t","name":"n","instances":[{"attributes":{"blob":"0123456789abcdef0123456789abcdef"}}]}"#;
    let entries = vec![entry; 2000].join(",");
    let document = format!(
        r#"{{"version":4,"terraform_version":"1.12.6","serial":3,"lineage":"l","resources":[{entries}],"outputs":{{"a":{{"value":"b"}}}}}}"#
    );
    let payload = gzip(document.as_bytes());
    let chunks = [payload.as_slice()];
    let step = 4096;
    let mut inflating = Inflating::new(&chunks, MAX_STATE_BYTES, step);
    let skimmed = skim_resources(&mut inflating);
    // The head, then no more than the entry being read and the step it arrived in.
    assert!(
        inflating.out.len() < 4 * step,
        "{} bytes kept",
        inflating.out.len()
    );
    let inflated = inflating.finish().expect("inflates");
    assert!(inflated.dropped > document.len() - 4 * step);
    assert_eq!(
        parse_inflated(Some(inflated), skimmed, || unreachable!("no second gunzip")),
        Ok((
            parse_with_serde(document.as_bytes()).expect("parses"),
            document.len()
        ))
    );
}

#[test]
fn a_bomb_is_never_buffered_past_the_cap() {
    let bomb = gzip(&vec![0; 1 << 20]).repeat(8);
    let max = 3 * (1 << 20) + 5;
    let chunks = [bomb.as_slice()];
    let mut inflating = Inflating::new(&chunks, max, INFLATE_STEP);
    while inflating.more(0..0) {
        assert!(inflating.out.capacity() <= max + 1);
    }
    assert_eq!(inflating.finish(), None);
    assert_eq!(
        gunzip(&chunks, max),
        Err(StateError::Corrupt(Corruption::TooLarge { max }))
    );
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_scan_and_serde_read_every_document_alike(document in any_state()) {
        prop_assert_eq!(parse_state_document(&document), parse_with_serde(&document));
    }

    #[test]
    fn the_scan_reads_a_document_alike_however_it_arrives(
        document in any_state(),
        step in 1usize..40,
    ) {
        let whole = skim_resources(&mut &document[..]);
        let mut trickle = Trickle { all: &document, start: 0, len: 0, step };
        prop_assert_eq!(skim_resources(&mut trickle), whole);
    }

    #[test]
    fn inflating_step_by_step_gunzips_as_reading_at_once(
        payload in prop_oneof![
            any_state().prop_map(|d| gzip(&d)),
            any_state().prop_flat_map(|d| mutate_bytes(gzip(&d))),
            any_state().prop_map(|d| [gzip(&d), gzip(b"{}")].concat()),
            prop::collection::vec(any::<u8>(), 0..64),
        ],
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        slack in -8isize..8,
        step in prop_oneof![1usize..64, Just(INFLATE_STEP)],
    ) {
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(payload.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut from = 0;
        for cut in cuts.into_iter().chain([payload.len()]) {
            chunks.push(&payload[from..cut]);
            from = cut;
        }
        let natural = gunzip(&[&payload], usize::MAX).map_or(64, |d| d.len());
        let max = natural.saturating_add_signed(slack);
        let mut inflating = Inflating::new(&chunks, max, step);
        let skimmed = skim_resources(&mut inflating);
        let at_once = gunzip(&chunks, max);
        let inflated = inflating.finish();
        match &inflated {
            Some(Inflated { out, dropped: 0 }) => {
                prop_assert_eq!(skimmed, skim_resources(&mut &out[..]));
                prop_assert_eq!(Ok(out), at_once.as_ref());
            }
            Some(Inflated { out, dropped }) => {
                // Bytes are let go only from inside the array the scan found (or gave up on
                // after entering it), and all the rest is kept as it was inflated.
                let document = at_once.clone().expect("a stream inflated step by step gunzips");
                prop_assert_eq!(skimmed, skim_resources(&mut &document[..]));
                prop_assert_eq!(out.len() + dropped, document.len());
                if let Some(resources) = skimmed {
                    prop_assert!(*dropped <= resources.end - resources.start);
                    prop_assert_eq!(&out[..resources.start], &document[..resources.start]);
                    prop_assert_eq!(&out[resources.end - dropped..], &document[resources.end..]);
                }
            }
            None => prop_assert!(at_once.is_err(), "{at_once:?}"),
        }
        // The reader's result is the plain one's: gunzip at once, then parse the document.
        prop_assert_eq!(
            parse_inflated(inflated, skimmed, || gunzip(&chunks, max)),
            at_once.and_then(|d| parse_state_document(&d).map(|p| (p, d.len())))
        );
    }
}
