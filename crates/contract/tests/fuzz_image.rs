//! Fuzzing (issue 19): what CAPTF reads from an image's config and reference (Module Images
//! "Capacity labels"; the image reference grammar). Random and mutated `io.captf.capacity` and
//! `io.captf.node-info` label values, random label maps, Kubernetes quantities and image
//! references: each is read or refused with an error naming the label or the part at fault.
//!
//! `CAPTF_FUZZ_CASES` sets the cases per property (default 256; `make fuzz` runs 100 000).

mod fuzz_support;

use std::collections::BTreeMap;

use contract::capacity::{
    CAPACITY_LABEL, Capacity, MAX_RESOURCES, NODE_INFO_LABEL, parse_quantity, resolve,
};
use contract::image_ref::parse;
use fuzz_support::{any_json, config, mutate_bytes};
use proptest::prelude::*;
use serde_json::json;

fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        "[+-]?[0-9]{0,4}(\\.[0-9]{0,3})?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|e[+-]?[0-9]{1,3}|)",
        ".{0,12}",
        (0usize..100).prop_map(|n| "9".repeat(n)),
    ]
}

fn valid_capacity() -> impl Strategy<Value = String> {
    prop::collection::btree_map("[a-z./-]{1,20}", quantity(), 0..(MAX_RESOURCES + 4))
        .prop_map(|m| serde_json::to_string(&m).unwrap_or_default())
}

/// A capacity label value: valid, mutated, or anything.
fn capacity_text() -> impl Strategy<Value = String> {
    prop_oneof![
        valid_capacity(),
        valid_capacity()
            .prop_flat_map(|t| mutate_bytes(t.into_bytes()))
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        any_json().prop_map(|v| v.to_string()),
        ".{0,40}",
    ]
}

fn node_info_text() -> impl Strategy<Value = String> {
    let valid = (
        prop::option::of(prop::sample::select(vec![
            "amd64", "arm64", "s390x", "ppc64le", "x86",
        ])),
        prop::option::of(prop_oneof![
            "[a-z]{0,8}",
            (60usize..70).prop_map(|n| "l".repeat(n))
        ]),
    )
        .prop_map(|(a, o)| json!({"architecture": a, "operatingSystem": o}).to_string());
    prop_oneof![
        valid.clone(),
        valid
            .prop_flat_map(|t| mutate_bytes(t.into_bytes()))
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        any_json().prop_map(|v| v.to_string()),
    ]
}

fn reference() -> impl Strategy<Value = String> {
    let valid = (
        prop::option::of("(localhost|[a-z]{1,8}\\.[a-z]{2,3}|\\[::1\\])(:[0-9]{1,5})?"),
        "[a-z0-9]{1,8}(/[a-z0-9._-]{1,8}){0,3}",
        prop::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
        prop::option::of("(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}|[a-z]{1,6}:[0-9a-fA-F]{0,40})"),
    )
        .prop_map(|(host, path, tag, digest)| {
            let mut r = host.map(|h| format!("{h}/")).unwrap_or_default();
            r.push_str(&path);
            if let Some(t) = tag {
                r.push(':');
                r.push_str(&t);
            }
            if let Some(d) = digest {
                r.push('@');
                r.push_str(&d);
            }
            r
        });
    prop_oneof![
        valid.clone(),
        valid
            .prop_flat_map(|t| mutate_bytes(t.into_bytes()))
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        "[a-zA-Z0-9:/@._\\[\\]-]{0,80}",
        (250usize..300).prop_map(|n| format!("r/{}:v1", "a".repeat(n))),
        ".{0,40}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn capacity_labels_resolve_or_name_the_label(
        capacity in prop::option::of(capacity_text()),
        node_info in prop::option::of(node_info_text()),
        other in prop::collection::btree_map(".{0,12}", ".{0,12}", 0..4),
    ) {
        let mut labels: BTreeMap<String, String> = other;
        if let Some(c) = capacity {
            labels.insert(CAPACITY_LABEL.into(), c);
        }
        if let Some(n) = node_info {
            labels.insert(NODE_INFO_LABEL.into(), n);
        }
        match resolve(&labels) {
            Ok(Capacity::Resolved { capacity, .. }) => {
                prop_assert!(capacity.is_none_or(|c| !c.is_empty() && c.len() <= MAX_RESOURCES));
            }
            Ok(Capacity::NotDeclared) => {}
            Err(e) => {
                prop_assert!(e.label == CAPACITY_LABEL || e.label == NODE_INFO_LABEL);
                prop_assert!(!e.message.is_empty());
                prop_assert!(e.to_string().contains(e.label));
            }
        }
    }

    #[test]
    fn quantities_parse_or_say_why(text in quantity()) {
        if let Err(why) = parse_quantity(&text) {
            prop_assert!(!why.is_empty());
        }
    }

    #[test]
    fn references_parse_into_their_own_parts_or_say_why(text in reference()) {
        match parse(&text) {
            Ok(r) => {
                let mut again = r.host.map(|h| format!("{h}/")).unwrap_or_default();
                again.push_str(r.path);
                if let Some(t) = r.tag {
                    again.push(':');
                    again.push_str(t);
                }
                if let Some(d) = r.digest {
                    again.push('@');
                    again.push_str(d);
                }
                prop_assert_eq!(again, text);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
