//! The state reader, one test per rule (Terraform State "Chunking and size caps", "What CAPTF
//! reads from state", "OpenTofu state encryption"; `StateReadable` reasons).

use contract::names::{chunk_secret_name, state_backup_secret_name, state_secret_name};
use contract::state::{
    Corruption, Inconsistency, MAX_STATE_BYTES, MAX_STATE_CHUNKS, StateError, StateLimits,
    StateSecret, StateSet, chunk_index, first_write_cut_short, read_state, read_state_with_limits,
};
use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;

const SUFFIX: &str = "0123456789abcdef-m";

fn live() -> StateSet<'static> {
    StateSet::Live { suffix: SUFFIX }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).expect("write");
    encoder.finish().expect("finish")
}

fn state_json() -> Value {
    json!({
        "version": 4,
        "terraform_version": "1.12.6",
        "serial": 7,
        "lineage": "5c1e9a3e-0000-4000-8000-000000000001",
        "outputs": {
            "provider_id": {"value": "noop:///ns/m", "type": "string", "sensitive": true},
            "health": {"value": {"state": "running", "healthy": true}, "type": ["object", {}]}
        },
        "resources": [
            {"mode": "managed", "type": "terraform_data", "name": "one", "provider": "p",
             "instances": [{"schema_version": 0, "attributes": {"id": "x"}}]},
            {"mode": "managed", "type": "terraform_data", "name": "many", "provider": "p",
             "instances": [{"index_key": 0, "attributes": {}}, {"index_key": 1, "attributes": {}},
                           {"index_key": 2, "attributes": {}}]},
            {"mode": "managed", "type": "terraform_data", "name": "each", "provider": "p",
             "instances": [{"index_key": "a", "attributes": {}}, {"index_key": "b", "attributes": {}}]},
            {"mode": "data", "type": "terraform_remote_state", "name": "d", "provider": "p",
             "instances": [{"attributes": {}}]},
            {"module": "module.role", "mode": "managed", "type": "terraform_data", "name": "tags",
             "provider": "p", "instances": [{"attributes": {}}]}
        ],
        "check_results": null
    })
}

fn secret(name: &str, payload: Vec<u8>) -> StateSecret {
    let labels = BTreeMap::from([
        ("tfstate".to_owned(), "true".to_owned()),
        ("tfstateSecretSuffix".to_owned(), SUFFIX.to_owned()),
        ("tfstateWorkspace".to_owned(), "default".to_owned()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "terraform".to_owned(),
        ),
    ]);
    StateSecret {
        name: name.to_owned(),
        labels,
        annotations: BTreeMap::from([("encoding".to_owned(), "gzip".to_owned())]),
        data: BTreeMap::from([("tfstate".to_owned(), payload)]),
    }
}

/// Splits `compressed` into `parts` chunk Secrets of the live set.
fn chunked(compressed: &[u8], parts: usize) -> Vec<StateSecret> {
    let base = state_secret_name(SUFFIX);
    let size = compressed.len().div_ceil(parts);
    compressed
        .chunks(size)
        .enumerate()
        .map(|(i, bytes)| secret(&chunk_secret_name(&base, i), bytes.to_vec()))
        .collect()
}

fn single(document: &Value) -> Vec<StateSecret> {
    let bytes = serde_json::to_vec(document).expect("json");
    chunked(&gzip(&bytes), 1)
}

#[test]
fn reads_an_opentofu_single_secret_state() {
    let mut secrets = single(&state_json());
    secrets[0]
        .annotations
        .insert("captf.io/inputs-hash".into(), "h2:abc".into());
    let summary = read_state(live(), &secrets).expect("readable");
    assert_eq!(summary.serial, 7);
    assert_eq!(summary.lineage, "5c1e9a3e-0000-4000-8000-000000000001");
    assert_eq!(summary.runtime_version, "1.12.6");
    assert_eq!(summary.chunks, 1);
    assert_eq!(summary.inputs_hash.as_deref(), Some("h2:abc"));
    assert_eq!(
        summary.compressed_bytes,
        secrets[0].data["tfstate"].len() as u64
    );
    assert_eq!(
        summary.decompressed_bytes,
        serde_json::to_vec(&state_json()).expect("json").len() as u64
    );
    assert_eq!(summary.outputs["provider_id"].value, json!("noop:///ns/m"));
    assert!(summary.outputs["provider_id"].sensitive);
    assert!(!summary.outputs["health"].sensitive);
}

#[test]
fn a_count_or_for_each_resource_counts_once_and_data_sources_not_at_all() {
    let summary = read_state(live(), &single(&state_json())).expect("readable");
    assert_eq!(summary.managed_resources, 4);
}

#[test]
fn chunks_are_concatenated_in_index_order() {
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let mut secrets = chunked(&gzip(&bytes), 4);
    assert_eq!(secrets.len(), 4);
    secrets.reverse();
    secrets.swap(0, 2);
    let summary = read_state(live(), &secrets).expect("readable");
    assert_eq!(summary.chunks, 4);
    assert_eq!(summary.serial, 7);
}

#[test]
fn the_inputs_hash_comes_from_the_base_secret_only() {
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let mut secrets = chunked(&gzip(&bytes), 2);
    secrets[1]
        .annotations
        .insert("captf.io/inputs-hash".into(), "h2:part".into());
    assert_eq!(read_state(live(), &secrets).expect("ok").inputs_hash, None);
    secrets[0]
        .annotations
        .insert("captf.io/inputs-hash".into(), String::new());
    assert_eq!(read_state(live(), &secrets).expect("ok").inputs_hash, None);
}

#[test]
fn no_secret_is_state_not_found() {
    let err = read_state(live(), &[]).expect_err("nothing");
    assert_eq!(err, StateError::NotFound);
    assert_eq!(err.reason(), "StateNotFound");
}

#[test]
fn parts_without_the_base_are_inconsistent() {
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let secrets = chunked(&gzip(&bytes), 3);
    let err = read_state(live(), &secrets[1..]).expect_err("no base");
    assert_eq!(err, StateError::Inconsistent(Inconsistency::MissingBase));
    assert_eq!(err.reason(), "StateInconsistent");
}

#[test]
fn a_gap_in_the_chunks_is_inconsistent() {
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let mut secrets = chunked(&gzip(&bytes), 4);
    secrets.remove(2);
    assert_eq!(
        read_state(live(), &secrets),
        Err(StateError::Inconsistent(Inconsistency::MissingChunk {
            index: 2
        }))
    );
}

#[test]
fn a_duplicated_chunk_is_inconsistent() {
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let mut secrets = chunked(&gzip(&bytes), 3);
    secrets.push(secrets[1].clone());
    assert_eq!(
        read_state(live(), &secrets),
        Err(StateError::Inconsistent(Inconsistency::DuplicateChunk {
            index: 1
        }))
    );
}

#[test]
fn an_unexpected_secret_is_inconsistent() {
    let base = state_secret_name(SUFFIX);
    for name in [
        format!("{base}-part-0"),
        format!("{base}-part-01"),
        format!("{base}-part-x"),
        format!("{base}-part-"),
        format!("{base}x"),
        "tfstate-default-other-m".to_owned(),
    ] {
        let mut secrets = single(&state_json());
        secrets.push(secret(&name, vec![1, 2, 3]));
        assert_eq!(
            read_state(live(), &secrets),
            Err(StateError::Inconsistent(Inconsistency::UnexpectedSecret {
                name: name.clone()
            })),
            "{name}"
        );
    }
}

#[test]
fn a_secret_labelled_for_another_suffix_is_inconsistent() {
    let mut secrets = single(&state_json());
    secrets[0]
        .labels
        .insert("tfstateSecretSuffix".into(), "ffffffffffffffff-m".into());
    assert!(matches!(
        read_state(live(), &secrets),
        Err(StateError::Inconsistent(
            Inconsistency::ForeignLabels { .. }
        ))
    ));
}

#[test]
fn a_chunk_without_the_tfstate_key_is_inconsistent() {
    let mut secrets = single(&state_json());
    secrets[0].data.clear();
    assert!(matches!(
        read_state(live(), &secrets),
        Err(StateError::Inconsistent(Inconsistency::MissingData { .. }))
    ));
}

/// A lone base Secret with no `tfstate` key is the backend's first write cut short (it creates
/// the Secret, then writes into it); a part without data, or a base beside parts, is not.
#[test]
fn a_lone_base_without_the_tfstate_key_is_a_first_write_cut_short() {
    let mut lone = single(&state_json());
    lone[0].data.clear();
    assert!(first_write_cut_short(live(), &lone));
    assert!(!first_write_cut_short(live(), &single(&state_json())));
    assert!(!first_write_cut_short(live(), &[]));
    let mut foreign = lone.clone();
    foreign[0]
        .labels
        .insert("tfstateSecretSuffix".to_owned(), "another-m".to_owned());
    assert!(!first_write_cut_short(live(), &foreign));
    let mut parts = chunked(&gzip(&serde_json::to_vec(&state_json()).unwrap()), 2);
    parts[0].data.clear();
    assert!(!first_write_cut_short(live(), &parts));
    let backup = StateSet::Backup {
        suffix: SUFFIX,
        serial: 3,
    };
    assert!(!first_write_cut_short(backup, &lone));
}

#[test]
fn more_than_32_chunks_is_corrupt() {
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let compressed = gzip(&bytes);
    let base = state_secret_name(SUFFIX);
    let mut secrets: Vec<StateSecret> = (0..=MAX_STATE_CHUNKS)
        .map(|i| secret(&chunk_secret_name(&base, i), Vec::new()))
        .collect();
    secrets[0].data.insert("tfstate".into(), compressed);
    let err = read_state(live(), &secrets).expect_err("over the cap");
    assert_eq!(
        err,
        StateError::Corrupt(Corruption::TooManyChunks { count: 33, max: 32 })
    );
    assert_eq!(err.reason(), "StateCorrupt");
    // Exactly 32 (most of them empty) is fine.
    secrets.pop();
    assert!(read_state(live(), &secrets).is_ok());
}

/// A valid state document padded with trailing whitespace to exactly `len` bytes.
fn padded_document(len: usize) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&state_json()).expect("json");
    bytes.resize(len, b' ');
    bytes
}

#[test]
fn more_than_64_mib_decompressed_is_corrupt() {
    let at_cap = gzip(&padded_document(MAX_STATE_BYTES));
    let summary = read_state(live(), &chunked(&at_cap, 1)).expect("exactly at the cap");
    assert_eq!(summary.decompressed_bytes, MAX_STATE_BYTES as u64);
    let over = gzip(&padded_document(MAX_STATE_BYTES + 1));
    assert_eq!(
        read_state(live(), &chunked(&over, 1)),
        Err(StateError::Corrupt(Corruption::TooLarge {
            max: MAX_STATE_BYTES
        }))
    );
}

#[test]
fn caps_are_configurable() {
    let limits = StateLimits {
        max_chunks: 2,
        max_bytes: 100,
    };
    let err = read_state_with_limits(live(), &single(&state_json()), limits).expect_err("big");
    assert_eq!(err, StateError::Corrupt(Corruption::TooLarge { max: 100 }));
}

#[test]
fn a_payload_that_is_not_gzip_is_corrupt() {
    let secrets = chunked(&serde_json::to_vec(&state_json()).expect("json"), 1);
    assert_eq!(
        read_state(live(), &secrets),
        Err(StateError::Corrupt(Corruption::Gzip))
    );
    let mut truncated = gzip(b"{\"version\": 4}");
    truncated.truncate(truncated.len() - 4);
    assert_eq!(
        read_state(live(), &chunked(&truncated, 1)),
        Err(StateError::Corrupt(Corruption::Gzip))
    );
}

#[test]
fn concatenated_gzip_members_are_one_stream() {
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let (a, b) = bytes.split_at(bytes.len() / 2);
    let mut compressed = gzip(a);
    compressed.extend(gzip(b));
    assert!(read_state(live(), &chunked(&compressed, 2)).is_ok());
}

#[test]
fn a_document_that_is_not_json_is_corrupt_without_echoing_content() {
    let secrets = chunked(&gzip(b"{\"version\": 4, \"serial\": \"hunter2\"}"), 1);
    let err = read_state(live(), &secrets).expect_err("bad");
    assert!(matches!(err, StateError::Corrupt(Corruption::Json { .. })));
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn only_state_version_4_is_read() {
    let mut doc = state_json();
    doc["version"] = json!(3);
    assert_eq!(
        read_state(live(), &single(&doc)),
        Err(StateError::Corrupt(Corruption::UnsupportedVersion {
            version: Some(3)
        }))
    );
}

#[test]
fn serial_lineage_and_runtime_version_are_required() {
    for field in ["serial", "lineage", "terraform_version"] {
        let mut doc = state_json();
        doc.as_object_mut().expect("object").remove(field);
        assert!(
            matches!(
                read_state(live(), &single(&doc)),
                Err(StateError::Corrupt(Corruption::MissingField { .. }))
            ),
            "{field}"
        );
    }
}

#[test]
fn the_opentofu_encryption_envelope_is_encrypted_not_corrupt() {
    let envelope = json!({
        "serial": 3,
        "lineage": "l-1",
        "meta": {"key_provider.pbkdf2.k": "eyJzYWx0Ijoi"},
        "encrypted_data": "c2VjcmV0",
        "encryption_version": "v0"
    });
    let err = read_state(live(), &single(&envelope)).expect_err("encrypted");
    assert_eq!(
        err,
        StateError::Encrypted {
            serial: Some(3),
            lineage: Some("l-1".into())
        }
    );
    assert_eq!(err.reason(), "StateEncrypted");
}

#[test]
fn instance_attributes_are_never_parsed() {
    // 1e400 does not fit an f64: decoding attributes into values would fail on it.
    let document = br#"{"version":4,"terraform_version":"1.12.6","serial":1,"lineage":"l",
        "outputs":{},"resources":[{"mode":"managed","type":"t","name":"n",
        "instances":[{"attributes":{"huge":1e400,"deep":[[[[[]]]]],"s":"\u00e9"}}]}]}"#;
    let summary = read_state(live(), &chunked(&gzip(document), 1)).expect("readable");
    assert_eq!(summary.managed_resources, 1);
}

#[test]
fn a_backup_set_reads_like_the_live_state() {
    let base = state_backup_secret_name(SUFFIX, 7);
    let bytes = serde_json::to_vec(&state_json()).expect("json");
    let compressed = gzip(&bytes);
    let size = compressed.len().div_ceil(2);
    let secrets: Vec<StateSecret> = compressed
        .chunks(size)
        .enumerate()
        .map(|(i, b)| StateSecret {
            name: chunk_secret_name(&base, i),
            labels: BTreeMap::from([(
                "captf.io/state-backup-suffix".to_owned(),
                SUFFIX.to_owned(),
            )]),
            annotations: BTreeMap::new(),
            data: BTreeMap::from([("tfstate".to_owned(), b.to_vec())]),
        })
        .collect();
    let set = StateSet::Backup {
        suffix: SUFFIX,
        serial: 7,
    };
    assert_eq!(read_state(set, &secrets).expect("readable").serial, 7);
    // The live reader does not take a backup for its state.
    assert!(matches!(
        read_state(live(), &secrets),
        Err(StateError::Inconsistent(
            Inconsistency::UnexpectedSecret { .. }
        ))
    ));
}

#[test]
fn chunk_names_parse_to_their_index() {
    assert_eq!(chunk_index("b", "b"), Some(0));
    assert_eq!(chunk_index("b", "b-part-1"), Some(1));
    assert_eq!(chunk_index("b", "b-part-31"), Some(31));
    assert_eq!(chunk_index("b", "b-part-0"), None);
    assert_eq!(chunk_index("b", "b-part-+1"), None);
    assert_eq!(chunk_index("b", "b-part-99999999999999999999999"), None);
}

#[test]
fn secret_debug_never_prints_data() {
    let secrets = single(&state_json());
    assert!(!format!("{:?}", secrets[0]).contains("tfstate\": ["));
    let summary = read_state(live(), &secrets).expect("readable");
    assert!(!format!("{summary:?}").contains("noop:///ns/m"));
}

// ---- never panics ---------------------------------------------------------------------------------

fn arb_name() -> impl Strategy<Value = String> {
    let base = state_secret_name(SUFFIX);
    prop_oneof![
        Just(base.clone()),
        (0usize..40).prop_map(move |i| format!("{base}-part-{i}")),
        "[a-z0-9-]{0,30}",
    ]
}

fn arb_secret() -> impl Strategy<Value = StateSecret> {
    (
        arb_name(),
        prop::collection::vec(any::<u8>(), 0..64),
        any::<bool>(),
    )
        .prop_map(|(name, data, gzipped)| {
            let payload = if gzipped { gzip(&data) } else { data };
            secret(&name, payload)
        })
}

proptest! {
    #[test]
    fn reader_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let name = state_secret_name(SUFFIX);
        let _ = read_state(live(), &[secret(&name, bytes.clone())]);
        let _ = read_state(live(), &[secret(&name, gzip(&bytes))]);
        let _ = contract::state::parse_state_document(&bytes);
    }

    #[test]
    fn reader_never_panics_on_arbitrary_chunk_sets(secrets in prop::collection::vec(arb_secret(), 0..40)) {
        let _ = read_state(live(), &secrets);
    }

    #[test]
    fn reader_never_panics_on_arbitrary_json(doc in arb_state_json()) {
        let bytes = serde_json::to_vec(&doc).expect("json");
        let _ = read_state(live(), &[secret(&state_secret_name(SUFFIX), gzip(&bytes))]);
    }
}

fn arb_state_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        Just(json!(4)),
        Just(json!("managed")),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("version".to_owned()),
                    Just("serial".to_owned()),
                    Just("lineage".to_owned()),
                    Just("terraform_version".to_owned()),
                    Just("outputs".to_owned()),
                    Just("resources".to_owned()),
                    Just("mode".to_owned()),
                    Just("value".to_owned()),
                    Just("sensitive".to_owned()),
                    Just("encryption_version".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

// ---- states written by a real OpenTofu (hack/gen-plan-fixtures.sh) ----------------------------

fn real_state(name: &str) -> Vec<StateSecret> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/states")
        .join(name);
    let bytes = std::fs::read(path).expect("fixture");
    chunked(&gzip(&bytes), 1)
}

#[test]
fn reads_a_real_opentofu_state_and_its_machine_outputs() {
    let summary = read_state(live(), &real_state("machine-role.tfstate")).expect("readable");
    assert_eq!(summary.runtime_version, "1.12.6");
    // module.role: disk (count = 2) counts once, instance and nic once each.
    assert_eq!(summary.managed_resources, 3);
    // The runtime drops the null failure_domain root output from state altogether.
    assert!(!summary.outputs.contains_key("failure_domain"));
    assert!(summary.outputs.values().all(|o| o.sensitive));
    let decoded = contract::outputs::decode_machine_outputs(&summary.outputs, None);
    assert!(decoded.verdict.is_valid(), "{:?}", decoded.verdict);
    assert_eq!(decoded.outputs.failure_domain, None);
    assert_eq!(
        decoded.outputs.addresses.expect("addresses")[0].address,
        "10.0.0.1",
        "InternalIP sorts before Hostname"
    );
}

#[test]
fn a_real_encrypted_opentofu_state_is_encrypted() {
    let err = read_state(live(), &real_state("encrypted.tfstate")).expect_err("encrypted");
    assert!(
        matches!(
            err,
            StateError::Encrypted {
                serial: Some(1),
                lineage: Some(_)
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_document_that_is_not_an_object_is_corrupt() {
    let doc = json!([4, "1.12.6", 1, "l"]);
    assert!(matches!(
        read_state(live(), &single(&doc)),
        Err(StateError::Corrupt(Corruption::Json { .. }))
    ));
}

/// A state whose `addresses` and `deep` outputs nest `depth` arrays.
fn state_with_deep_outputs(depth: usize) -> Vec<u8> {
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let mut document = state_json();
    document["outputs"]["addresses"] = json!({"value": "DEEP", "type": "dynamic"});
    document["outputs"]["deep"] = json!({"value": "DEEP", "type": "dynamic"});
    serde_json::to_string(&document)
        .expect("json")
        .replace("\"DEEP\"", &nested)
        .into_bytes()
}

#[test]
fn an_output_nested_deeper_than_the_parser_allows_spoils_only_itself() {
    let document = state_with_deep_outputs(contract::outputs::MAX_OUTPUT_DEPTH + 100);
    let summary = read_state(live(), &chunked(&gzip(&document), 1)).expect("readable");
    assert_eq!(summary.serial, 7);
    assert_eq!(summary.managed_resources, 4);
    assert!(summary.outputs["deep"].undecodable);
    assert!(summary.outputs["addresses"].undecodable);
    assert_eq!(summary.outputs["deep"].value, Value::Null);
    assert!(!summary.outputs["provider_id"].undecodable);
    assert_eq!(summary.outputs["provider_id"].value, json!("noop:///ns/m"));

    let decoded = contract::outputs::decode_machine_outputs(&summary.outputs, None);
    assert_eq!(
        decoded.verdict.reason(),
        contract::outputs::OutputsReason::OutputsInvalid
    );
    let message = decoded.verdict.message();
    assert!(
        message.contains("output addresses cannot be decoded"),
        "{message}"
    );
    assert!(
        !message.contains("output deep "),
        "a non-contract output is not reported: {message}"
    );

    let shallow = state_with_deep_outputs(10);
    let summary = read_state(live(), &chunked(&gzip(&shallow), 1)).expect("readable");
    assert!(!summary.outputs["deep"].undecodable);
}
