//! Canonical JSON: the one byte form of a JSON value that the inputs hash is computed over
//! (Job Inputs §7, Common "What is hashed").
//!
//! The form is: object keys sorted by their UTF-8 bytes, no insignificant whitespace, strings
//! escaped exactly as `serde_json` writes them (`"`, `\` and control characters escaped, every
//! other character — `<`, `>`, `&` and non-ASCII included — written as itself), and numbers
//! restricted to integers written in plain decimal. A fractional or exponent number anywhere in
//! the value has no canonical form: the contract calls for integers only, because a float that
//! does not round-trip exactly would change a hash silently.

use serde_json::Value;
use std::fmt::Write as _;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A number that is not an integer (a fraction, an exponent, or outside the 64-bit range).
    #[error("{path}: only integer numbers can be hashed; found a fractional or exponent number")]
    NonInteger {
        /// JSON path of the offending number, `$` being the root (for example `$.exports.ratio`).
        path: String,
    },
}

/// Writes `value` in canonical form.
pub fn canonical_json(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    write_value(value, "$", &mut out)?;
    Ok(out)
}

/// Checks that `value` has a canonical form without keeping the bytes.
pub fn check_canonicalizable(value: &Value) -> Result<(), CanonicalError> {
    canonical_json(value).map(|_| ())
}

fn write_value(value: &Value, path: &str, out: &mut String) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                return Err(CanonicalError::NonInteger {
                    path: path.to_owned(),
                });
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, &format!("{path}[{i}]"), out)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(&map[key.as_str()], &format!("{path}.{key}"), out)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_string(s: &str, out: &mut String) {
    // serde_json's string escaping is the canonical one; serialising a &str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_whitespace_dropped() {
        let v = json!({"b": 1, "a": {"d": [1, 2], "c": null}});
        assert_eq!(
            canonical_json(&v).unwrap(),
            r#"{"a":{"c":null,"d":[1,2]},"b":1}"#
        );
    }

    #[test]
    fn html_characters_and_unicode_are_written_as_themselves() {
        let v = json!({"note": "a<b & c>d é"});
        assert_eq!(canonical_json(&v).unwrap(), r#"{"note":"a<b & c>d é"}"#);
    }

    #[test]
    fn fractional_numbers_have_no_canonical_form() {
        let v: Value = serde_json::from_str(r#"{"exports": {"ratio": 0.5}}"#).unwrap();
        assert_eq!(
            canonical_json(&v),
            Err(CanonicalError::NonInteger {
                path: "$.exports.ratio".into()
            })
        );
    }

    #[test]
    fn exponent_numbers_have_no_canonical_form() {
        let v: Value = serde_json::from_str("[1e3]").unwrap();
        assert!(canonical_json(&v).is_err());
    }

    #[test]
    fn negative_and_large_integers_are_kept() {
        let v: Value = serde_json::from_str("[-5, 18446744073709551615]").unwrap();
        assert_eq!(canonical_json(&v).unwrap(), "[-5,18446744073709551615]");
    }
}
