//! The one status patch of a pass (The Reconcile Lifecycle "One pass, one status patch"): the JSON
//! merge patch (RFC 7386) that turns the status the pass started from into the one it ends with,
//! with `null` for every field the pass removed.

use serde_json::{Map, Value};

/// The merge patch from `old` to `new`; `None` when they are equal (nothing to write).
pub fn merge_patch(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    Some(diff(old, new))
}

fn diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (key, old_value) in o {
                match n.get(key) {
                    None => {
                        out.insert(key.clone(), Value::Null);
                    }
                    Some(new_value) if new_value != old_value => {
                        out.insert(key.clone(), diff(old_value, new_value));
                    }
                    Some(_) => {}
                }
            }
            for (key, new_value) in n {
                if !o.contains_key(key) {
                    out.insert(key.clone(), strip_nulls(new_value));
                }
            }
            Value::Object(out)
        }
        (_, n) => strip_nulls(n),
    }
}

/// A merge patch cannot set `null`: an object written whole drops its null members.
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Applies a merge patch (RFC 7386), as the API server does; used to check [`merge_patch`].
pub fn apply_merge_patch(target: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut out = match target {
                Value::Object(t) => t.clone(),
                _ => Map::new(),
            };
            for (key, value) in p {
                if value.is_null() {
                    out.remove(key);
                } else {
                    let merged = apply_merge_patch(out.get(key).unwrap_or(&Value::Null), value);
                    out.insert(key.clone(), merged);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn removed_nested_fields_become_null() {
        let old = json!({"lastRun": {"job": "a", "error": {"kind": "step"}}, "x": 1});
        let new = json!({"lastRun": {"job": "b"}, "x": 1});
        let patch = merge_patch(&old, &new).unwrap();
        assert_eq!(patch, json!({"lastRun": {"job": "b", "error": null}}));
        assert_eq!(apply_merge_patch(&old, &patch), new);
    }

    #[test]
    fn equal_is_no_patch() {
        let v = json!({"a": [1, 2]});
        assert!(merge_patch(&v, &v).is_none());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::from),
            (0i64..5).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn applying_the_patch_yields_the_new_value(
            old in prop::collection::btree_map("[a-d]", json_value(), 0..4),
            new in prop::collection::btree_map("[a-d]", json_value(), 0..4),
        ) {
            let old = strip_nulls(&Value::Object(old.into_iter().collect()));
            let new = strip_nulls(&Value::Object(new.into_iter().collect()));
            let patched = match merge_patch(&old, &new) {
                Some(p) => apply_merge_patch(&old, &p),
                None => old.clone(),
            };
            prop_assert_eq!(patched, new);
        }
    }
}
