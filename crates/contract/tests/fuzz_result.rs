//! Fuzzing (issue 19): result documents and termination messages (Runtime Environment "What a
//! failed step reports"; INTERFACE-FACTS §5 "Result document"). Documents with random content
//! in every field the runner fills from outside (image reference, runtime command and version,
//! step names, the error summary, resource addresses, counts) always serialise to at most
//! `MAX_RESULT_BYTES` that read back with the plan hash, counts and error kind intact; random and
//! mutated termination messages read as a document or as none, never a panic.
//!
//! `CAPTF_FUZZ_CASES` sets the cases per property (default 256; `make fuzz` runs 100 000).

mod fuzz_support;

use contract::health::refresh_failed_because_gone;
use contract::result::{
    ChangesDoc, DriftDoc, ErrorDoc, ErrorKind, ImageInfo, MAX_RESULT_BYTES, PlanDoc,
    ResultDocument, RuntimeInfo, StepRecord, cap,
};
use fuzz_support::{any_json, config, mutate_bytes};
use proptest::prelude::*;

/// Text from outside the runner: short, long, multi-byte, with JSON escapes.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => ".{0,16}",
        8 => "[\"\\\\\u{0}-\u{1f}é😀a-z]{0,64}",
        1 => (0usize..6000).prop_map(|n| "x".repeat(n)),
        1 => (0usize..1500).prop_map(|n| "\u{1}".repeat(n)),
    ]
}

fn error_kind() -> impl Strategy<Value = ErrorKind> {
    prop::sample::select(vec![
        ErrorKind::ImageLayout,
        ErrorKind::Step,
        ErrorKind::Interrupted,
        ErrorKind::Blocked,
        ErrorKind::PlanChanged,
    ])
}

fn plan_doc() -> impl Strategy<Value = PlanDoc> {
    (
        "[0-9a-f]{64}",
        any::<[u64; 7]>(),
        prop::collection::vec(text(), 0..55),
        any::<bool>(),
    )
        .prop_map(|(hex, n, resources, truncated)| PlanDoc {
            hash: format!("p1:{hex}"),
            add: n[0],
            change: n[1],
            destroy: n[2],
            outputs: n[3],
            import: n[4],
            moved: n[5],
            forget: n[6],
            resources,
            truncated,
            text_secret: None,
        })
}

fn drift_doc() -> impl Strategy<Value = DriftDoc> {
    (
        any::<(bool, u64, u64, u64, u64)>(),
        prop::collection::vec(text(), 0..30),
    )
        .prop_map(
            |((detected, add, change, destroy, forget), resources)| DriftDoc {
                detected,
                add,
                change,
                destroy,
                forget,
                resources,
            },
        )
}

fn error_doc() -> impl Strategy<Value = ErrorDoc> {
    (
        error_kind(),
        prop::option::of(text()),
        prop::option::of(text()),
        any::<Option<i32>>(),
    )
        .prop_map(|(kind, step, summary, exit_code)| ErrorDoc {
            kind,
            step,
            summary,
            exit_code,
        })
}

fn document() -> impl Strategy<Value = ResultDocument> {
    (
        prop::sample::select(vec![
            "apply", "plan", "destroy", "drift", "import", "restore",
        ]),
        (text(), any::<bool>()),
        (prop::collection::vec(text(), 0..4), text()),
        prop::collection::vec((text(), any::<i32>(), any::<f64>()), 0..12),
        (prop::option::of(drift_doc()), prop::option::of(error_doc())),
        (
            prop::option::of(any::<[u64; 5]>()),
            prop::option::of(plan_doc()),
        ),
    )
        .prop_map(
            |(op, image, runtime, steps, (drift, error), (changes, plan))| ResultDocument {
                steps: steps
                    .into_iter()
                    .map(|(name, exit, seconds)| StepRecord {
                        name,
                        exit,
                        seconds,
                    })
                    .collect(),
                drift,
                error,
                changes: changes.map(|c| ChangesDoc {
                    add: c[0],
                    change: c[1],
                    destroy: c[2],
                    import: c[3],
                    forget: c[4],
                }),
                plan,
                ..ResultDocument::new(
                    op,
                    ImageInfo {
                        reference: image.0,
                        providers_mirror: image.1,
                    },
                    RuntimeInfo {
                        command: runtime.0,
                        version: runtime.1,
                    },
                )
            },
        )
}

/// A termination message as the manager reads it: a document the runner wrote, mutated; random
/// JSON; random text.
fn message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        document().prop_flat_map(|d| mutate_bytes(d.to_json_capped().into_bytes())),
        any_json().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        prop::collection::vec(any::<u8>(), 0..512),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_document_always_fits_the_termination_message(doc in document()) {
        let json = doc.to_json_capped();
        prop_assert!(json.len() <= MAX_RESULT_BYTES, "{} bytes", json.len());
        prop_assert!(!json.contains('\n'));
        let back: ResultDocument = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.version, doc.version);
        prop_assert_eq!(&back.op, &doc.op);
        prop_assert_eq!(back.error.as_ref().map(|e| e.kind), doc.error.as_ref().map(|e| e.kind));
        prop_assert_eq!(back.error.as_ref().map(|e| e.exit_code), doc.error.as_ref().map(|e| e.exit_code));
        let counts = |p: &PlanDoc| (p.hash.clone(), p.add, p.change, p.destroy, p.outputs, p.import, p.moved);
        prop_assert_eq!(back.plan.as_ref().map(counts), doc.plan.as_ref().map(counts));
        prop_assert_eq!(back.drift.as_ref().map(|d| d.detected), doc.drift.as_ref().map(|d| d.detected));
    }

    #[test]
    fn a_termination_message_reads_as_a_document_or_none(message in message()) {
        let text = String::from_utf8_lossy(&message);
        if let Ok(doc) = serde_json::from_str::<ResultDocument>(&text) {
            let _ = doc.error.as_ref().map(refresh_failed_because_gone);
            prop_assert!(doc.to_json_capped().len() <= MAX_RESULT_BYTES);
        }
    }

    #[test]
    fn cap_cuts_on_a_character_boundary(text in text(), max in 3usize..7000) {
        let cut = cap(&text, max);
        prop_assert!(cut.len() <= max);
        if text.len() <= max {
            prop_assert_eq!(cut, text);
        } else {
            let kept = cut.strip_suffix('…').unwrap_or_default();
            prop_assert!(text.starts_with(kept));
        }
    }
}
