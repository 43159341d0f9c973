//! User variables: the module's own variables an object sets through `spec.variables` and
//! `spec.variablesFrom` (spec: Module Variables, Common "User variables").
//!
//! This module merges the sources (in list order, a later one winning, inline winning over all),
//! reads each source's values in its format (`String` or `JSON`), checks every name (a Terraform
//! identifier that is not reserved) and the limits, and records whether each winning value came
//! from a Secret. The name and limit checks are exposed on their own so the admission webhook
//! applies exactly the same rules. No error ever carries a value, only the source and the key.

use crate::canonical::{CanonicalError, check_canonicalizable};
use crate::inputs::is_contract_input;
use crate::names::ObjectKind;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// The most keys `spec.variables` may hold (it must hold at least one when set).
pub const MAX_INLINE_VARIABLES: usize = 256;
/// The most entries `spec.variablesFrom` may list.
pub const MAX_VARIABLES_SOURCES: usize = 16;
/// The prefix every controller-injected name carries; no user variable may start with it.
pub const RESERVED_PREFIX: &str = "captf_";
/// Module-block arguments a user variable can never be named after.
pub const META_ARGUMENTS: [&str; 8] = [
    "source",
    "version",
    "providers",
    "count",
    "for_each",
    "depends_on",
    "lifecycle",
    "locals",
];
/// The pattern a variable name must match (a Terraform identifier).
pub const NAME_PATTERN: &str = "^[a-zA-Z_][a-zA-Z0-9_-]*$";

/// Why a name cannot be a user variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not a Terraform identifier (`^[a-zA-Z_][a-zA-Z0-9_-]*$`).
    #[error("is not a Terraform identifier (^[a-zA-Z_][a-zA-Z0-9_-]*$)")]
    NotAnIdentifier,
    /// Starts with `captf_`.
    #[error("starts with the reserved prefix captf_")]
    ReservedPrefix,
    /// One of the role's contract inputs.
    #[error("is a contract input of the {role} role")]
    ContractInput {
        /// The role whose input it is.
        role: &'static str,
    },
    /// A module meta-argument (`source`, `version`, `providers`, `count`, `for_each`,
    /// `depends_on`, `lifecycle`, `locals`).
    #[error("is a module meta-argument")]
    MetaArgument,
}

/// Whether `name` matches [`NAME_PATTERN`].
pub fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks one user-variable name for a role: an identifier, not `captf_`-prefixed, not one of the
/// role's contract inputs, not a module meta-argument.
pub fn check_variable_name(kind: ObjectKind, name: &str) -> Result<(), NameError> {
    if !is_identifier(name) {
        Err(NameError::NotAnIdentifier)
    } else if name.starts_with(RESERVED_PREFIX) {
        Err(NameError::ReservedPrefix)
    } else if is_contract_input(kind, name) {
        Err(NameError::ContractInput {
            role: crate::inputs::role_name(kind),
        })
    } else if META_ARGUMENTS.contains(&name) {
        Err(NameError::MetaArgument)
    } else {
        Ok(())
    }
}

/// Whether a (well-formed) name is reserved for the role.
pub fn is_reserved_variable_name(kind: ObjectKind, name: &str) -> bool {
    matches!(
        check_variable_name(kind, name),
        Err(NameError::ReservedPrefix | NameError::ContractInput { .. } | NameError::MetaArgument)
    )
}

/// How the values of one `variablesFrom` source are read: `String` (the default) passes each
/// value as a string, `JSON` parses it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum VariablesFormat {
    /// Each value is a string (the default).
    #[default]
    String,
    /// Each value is parsed as JSON.
    #[serde(rename = "JSON")]
    Json,
}

/// Whether a source is a ConfigMap or a Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A ConfigMap (its `data` and `binaryData` together).
    ConfigMap,
    /// A Secret; a variable whose winning value comes from one is sensitive.
    Secret,
}

/// Where a variable was set, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VariableOrigin {
    /// `spec.variables`.
    Inline,
    /// A `spec.variablesFrom` entry.
    Source {
        /// ConfigMap or Secret.
        kind: SourceKind,
        /// Its name.
        name: String,
    },
}

impl fmt::Display for VariableOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inline => f.write_str("spec.variables"),
            Self::Source {
                kind: SourceKind::ConfigMap,
                name,
            } => write!(f, "ConfigMap {name}"),
            Self::Source {
                kind: SourceKind::Secret,
                name,
            } => write!(f, "Secret {name}"),
        }
    }
}

/// A resolved `spec.variablesFrom` source: the manager has found it, checked its label and read
/// its data (a missing optional source is simply not passed).
#[derive(Clone, PartialEq, Eq)]
pub struct VariablesSource {
    /// ConfigMap or Secret.
    pub kind: SourceKind,
    /// The object's name.
    pub name: String,
    /// How its values are read.
    pub format: VariablesFormat,
    /// Every data key with its raw bytes (a ConfigMap's `binaryData` included).
    pub data: BTreeMap<String, Vec<u8>>,
}

impl fmt::Debug for VariablesSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VariablesSource")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("format", &self.format)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl VariablesSource {
    fn origin(&self) -> VariableOrigin {
        VariableOrigin::Source {
            kind: self.kind,
            name: self.name.clone(),
        }
    }
}

/// Why an object's variables cannot be used. Maps to `DependenciesReady=False/VariablesInvalid`
/// in the manager (and to a rejection in the webhook). Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariablesError {
    /// `spec.variablesFrom` lists more than [`MAX_VARIABLES_SOURCES`] sources.
    #[error(
        "spec.variablesFrom lists {count} sources; at most {MAX_VARIABLES_SOURCES} are allowed"
    )]
    TooManySources {
        /// How many were listed.
        count: usize,
    },
    /// `spec.variables` holds more than [`MAX_INLINE_VARIABLES`] keys.
    #[error("spec.variables holds {count} keys; at most {MAX_INLINE_VARIABLES} are allowed")]
    TooManyInlineVariables {
        /// How many it holds.
        count: usize,
    },
    /// `spec.variables` is set but empty.
    #[error("spec.variables is set but holds no key")]
    EmptyInlineVariables,
    /// `spec.variables` is not a JSON object.
    #[error("spec.variables must be a JSON object")]
    InlineNotAnObject,
    /// A key is not a valid user-variable name.
    #[error("{origin}: key {key:?} {reason}")]
    InvalidName {
        /// Where the key is.
        origin: VariableOrigin,
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// A value is not UTF-8.
    #[error("{origin}: the value of key {key:?} is not UTF-8")]
    NotUtf8 {
        /// Where the key is.
        origin: VariableOrigin,
        /// The key.
        key: String,
    },
    /// A `JSON`-format value does not parse.
    #[error("{origin}: the value of key {key:?} is not valid JSON (line {line}, column {column})")]
    InvalidJson {
        /// Where the key is.
        origin: VariableOrigin,
        /// The key.
        key: String,
        /// Where parsing stopped.
        line: usize,
        /// Where parsing stopped.
        column: usize,
    },
    /// A value holds a fractional or exponent number, which the inputs hash cannot cover.
    #[error(
        "{origin}: the value of key {key:?} holds a fractional or exponent number at {path}; only integers can be hashed (pass it as a string)"
    )]
    NonIntegerNumber {
        /// Where the key is.
        origin: VariableOrigin,
        /// The key.
        key: String,
        /// JSON path of the number inside the value (`$` is the value itself).
        path: String,
    },
}

/// Checks the number of `spec.variablesFrom` entries.
pub fn check_sources_count(count: usize) -> Result<(), VariablesError> {
    if count > MAX_VARIABLES_SOURCES {
        Err(VariablesError::TooManySources { count })
    } else {
        Ok(())
    }
}

/// Checks `spec.variables` as admission does: a JSON object of 1 to 256 keys, each a valid,
/// unreserved name for the role, holding no fractional or exponent number.
pub fn check_inline_variables(kind: ObjectKind, inline: &Value) -> Result<(), VariablesError> {
    let Value::Object(map) = inline else {
        return Err(VariablesError::InlineNotAnObject);
    };
    if map.is_empty() {
        return Err(VariablesError::EmptyInlineVariables);
    }
    if map.len() > MAX_INLINE_VARIABLES {
        return Err(VariablesError::TooManyInlineVariables { count: map.len() });
    }
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_unstable();
    for key in keys {
        check_key(kind, &VariableOrigin::Inline, key)?;
        if let Some(value) = map.get(key) {
            check_hashable(&VariableOrigin::Inline, key, value)?;
        }
    }
    Ok(())
}

fn check_key(kind: ObjectKind, origin: &VariableOrigin, key: &str) -> Result<(), VariablesError> {
    check_variable_name(kind, key).map_err(|reason| VariablesError::InvalidName {
        origin: origin.clone(),
        key: key.to_owned(),
        reason,
    })
}

fn check_hashable(origin: &VariableOrigin, key: &str, value: &Value) -> Result<(), VariablesError> {
    check_canonicalizable(value).map_err(|CanonicalError::NonInteger { path }| {
        VariablesError::NonIntegerNumber {
            origin: origin.clone(),
            key: key.to_owned(),
            path,
        }
    })
}

/// One merged user variable.
#[derive(Clone, PartialEq)]
pub struct UserVariable {
    /// The value passed to the module.
    pub value: Value,
    /// Whether the winning value came from a Secret; the root then declares it sensitive.
    pub sensitive: bool,
}

impl fmt::Debug for UserVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("UserVariable");
        if self.sensitive {
            s.field("value", &"<redacted>");
        } else {
            s.field("value", &self.value);
        }
        s.field("sensitive", &self.sensitive).finish()
    }
}

/// An object's merged user variables, by name. Built by [`merge_variables`], so every name is
/// valid and unreserved for the role it was merged for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserVariables {
    variables: BTreeMap<String, UserVariable>,
}

impl UserVariables {
    /// No variables at all (the object sets none).
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether the object sets no variable.
    pub fn is_empty(&self) -> bool {
        self.variables.is_empty()
    }

    /// How many variables there are.
    pub fn len(&self) -> usize {
        self.variables.len()
    }

    /// One variable by name.
    pub fn get(&self, name: &str) -> Option<&UserVariable> {
        self.variables.get(name)
    }

    /// Every variable, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &UserVariable)> {
        self.variables.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The names of the sensitive variables, sorted.
    pub fn sensitive_names(&self) -> Vec<&str> {
        self.iter()
            .filter(|(_, v)| v.sensitive)
            .map(|(k, _)| k)
            .collect()
    }

    /// Every value, as one JSON object sorted by name.
    pub fn values(&self) -> Map<String, Value> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.value.clone()))
            .collect()
    }
}

/// Merges an object's variables for its role: `sources` in list order (a later source wins on a
/// shared key), then `inline` (`spec.variables`), which wins over every source. A variable is
/// sensitive when its winning value came from a Secret. Every key of every source is checked,
/// losing ones included; the first problem found (sources in order, keys sorted, then inline)
/// is returned.
pub fn merge_variables(
    kind: ObjectKind,
    sources: &[VariablesSource],
    inline: Option<&Value>,
) -> Result<UserVariables, VariablesError> {
    check_sources_count(sources.len())?;
    let mut variables = BTreeMap::new();
    for source in sources {
        let origin = source.origin();
        for (key, bytes) in &source.data {
            check_key(kind, &origin, key)?;
            let text = std::str::from_utf8(bytes).map_err(|_| VariablesError::NotUtf8 {
                origin: origin.clone(),
                key: key.clone(),
            })?;
            let value = match source.format {
                VariablesFormat::String => Value::String(text.to_owned()),
                VariablesFormat::Json => {
                    serde_json::from_str(text).map_err(|e| VariablesError::InvalidJson {
                        origin: origin.clone(),
                        key: key.clone(),
                        line: e.line(),
                        column: e.column(),
                    })?
                }
            };
            check_hashable(&origin, key, &value)?;
            variables.insert(
                key.clone(),
                UserVariable {
                    value,
                    sensitive: source.kind == SourceKind::Secret,
                },
            );
        }
    }
    if let Some(inline) = inline {
        check_inline_variables(kind, inline)?;
        if let Value::Object(map) = inline {
            for (key, value) in map {
                variables.insert(
                    key.clone(),
                    UserVariable {
                        value: value.clone(),
                        sensitive: false,
                    },
                );
            }
        }
    }
    Ok(UserVariables { variables })
}
