//! Properties of the capacity labels (spec: Image Contract "OCI labels"): any label text gives a
//! result or an error naming the label, never a panic; any object of valid names and
//! non-negative quantities resolves to exactly itself.

use std::collections::BTreeMap;

use contract::capacity::{CAPACITY_LABEL, Capacity, NODE_INFO_LABEL, resolve};
use proptest::prelude::*;

fn quantity() -> impl Strategy<Value = String> {
    (
        0u32..100_000,
        prop::option::of(0u32..1000),
        prop::sample::select(vec![
            "", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e3", "E-2", "n", "u",
        ]),
    )
        .prop_map(|(int, frac, suffix)| match frac {
            Some(f) => format!("{int}.{f}{suffix}"),
            None => format!("{int}{suffix}"),
        })
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,20}[a-z0-9]",
        "[a-z]{1,10}\\.(com|io)/[a-z][a-z0-9_.-]{0,10}[a-z0-9]",
    ]
}

proptest! {
    #[test]
    fn arbitrary_label_text_never_panics(capacity in ".{0,80}", node_info in ".{0,80}") {
        let labels = BTreeMap::from([
            (CAPACITY_LABEL.to_owned(), capacity),
            (NODE_INFO_LABEL.to_owned(), node_info),
        ]);
        if let Err(e) = resolve(&labels) {
            prop_assert!(e.label == CAPACITY_LABEL || e.label == NODE_INFO_LABEL);
            prop_assert!(!e.message.is_empty());
        }
    }

    #[test]
    fn valid_capacity_resolves_to_itself(map in prop::collection::btree_map(name(), quantity(), 1..8)) {
        let text = serde_json::to_string(&map).expect("json");
        let labels = BTreeMap::from([(CAPACITY_LABEL.to_owned(), text)]);
        match resolve(&labels) {
            Ok(Capacity::Resolved { capacity: Some(got), node_info: None }) => prop_assert_eq!(got, map),
            other => prop_assert!(false, "{other:?}"),
        }
    }

    #[test]
    fn a_negative_quantity_is_always_refused(map in prop::collection::btree_map(name(), quantity(), 1..8), pick in any::<prop::sample::Index>()) {
        let mut map = map;
        let key = pick.get(&map.keys().cloned().collect::<Vec<_>>()).clone();
        let value = format!("-{}", map[&key]);
        if value.trim_start_matches('-').bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').all(|b| b == b'0' || b == b'.') {
            return Ok(()); // -0 is zero, not negative
        }
        map.insert(key.clone(), value);
        let labels = BTreeMap::from([(CAPACITY_LABEL.to_owned(), serde_json::to_string(&map).expect("json"))]);
        let err = resolve(&labels).expect_err("negative");
        prop_assert_eq!(err.label, CAPACITY_LABEL);
        prop_assert!(err.message.contains("is negative"), "{}", err.message);
    }
}
