//! Module variables at admission (spec: Module Variables, "Names and limits").
//!
//! The name and limit rules themselves live once, in `contract::variables` (which the manager
//! applies to referenced sources at reconcile time); this module only calls them and words the
//! result with the field path of the object at hand (`spec.variables` on a workload object,
//! `spec.template.spec.variables` on a template). A `variablesFrom` entry must name exactly one
//! of a ConfigMap or a Secret.

use api::shared::VariablesSource;
use api::workload::Variables;
use contract::names::ObjectKind;
use contract::variables::{self as rules, VariablesError};

use super::{Rule, Violation};

/// Checks inline `variables` found at `path` for the role of `kind`.
pub fn check_inline(path: &str, kind: ObjectKind, variables: &Variables, out: &mut Vec<Violation>) {
    // The contract checks a JSON value; a map is always an object.
    let value = serde_json::Value::Object(variables.clone());
    if let Err(e) = rules::check_inline_variables(kind, &value) {
        out.push(inline_violation(path, &e));
    }
}

fn inline_violation(path: &str, e: &VariablesError) -> Violation {
    match e {
        VariablesError::TooManyInlineVariables { count } => Violation::new(
            Rule::VariablesCount,
            format!(
                "{path} holds {count} keys; at most {} are allowed",
                rules::MAX_INLINE_VARIABLES
            ),
        ),
        VariablesError::EmptyInlineVariables => Violation::new(
            Rule::VariablesCount,
            format!(
                "{path} is set but holds no key: set at least one variable, or leave {path} unset"
            ),
        ),
        VariablesError::InlineNotAnObject => {
            Violation::new(Rule::VariableName, format!("{path} must be a JSON object"))
        }
        VariablesError::InvalidName { key, reason, .. } => {
            Violation::new(Rule::VariableName, format!("{path}: key {key:?} {reason}"))
        }
        VariablesError::NonIntegerNumber { key, path: at, .. } => Violation::new(
            Rule::VariableName,
            format!(
                "{path}: the value of key {key:?} holds a fractional or exponent number at {at}; only integers can be hashed into the inputs (pass it as a string)"
            ),
        ),
        // Source errors never come out of the inline check; word them plainly all the same.
        other => Violation::new(Rule::VariableName, format!("{path}: {other}")),
    }
}

/// Checks `variablesFrom` found at `path`: at most 16 entries, each naming exactly one of a
/// ConfigMap or a Secret.
pub fn check_sources(path: &str, sources: &[VariablesSource], out: &mut Vec<Violation>) {
    if let Err(VariablesError::TooManySources { count }) = rules::check_sources_count(sources.len())
    {
        out.push(Violation::new(
            Rule::VariablesCount,
            format!(
                "{path} lists {count} sources; at most {} are allowed",
                rules::MAX_VARIABLES_SOURCES
            ),
        ));
    }
    for (i, source) in sources.iter().enumerate() {
        match (&source.config_map_ref, &source.secret_ref) {
            (Some(_), Some(_)) => out.push(Violation::new(
                Rule::VariablesSource,
                format!(
                    "{path}[{i}] names both a configMapRef and a secretRef: each entry names exactly one of them"
                ),
            )),
            (None, None) => out.push(Violation::new(
                Rule::VariablesSource,
                format!(
                    "{path}[{i}] names neither a configMapRef nor a secretRef: each entry names exactly one of them"
                ),
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::shared::VariablesObjectReference;
    use serde_json::json;

    fn vars(v: serde_json::Value) -> Variables {
        match v {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("test variables are objects"),
        }
    }

    fn inline(kind: ObjectKind, v: serde_json::Value) -> Vec<String> {
        let mut out = Vec::new();
        check_inline("spec.variables", kind, &vars(v), &mut out);
        out.into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn a_name_must_be_a_terraform_identifier() {
        assert_eq!(
            inline(ObjectKind::Cluster, json!({"1bad": 1})),
            [
                "spec.variables: key \"1bad\" is not a Terraform identifier (^[a-zA-Z_][a-zA-Z0-9_-]*$)"
            ]
        );
        assert!(inline(ObjectKind::Cluster, json!({"_ok-name_2": 1})).is_empty());
    }

    #[test]
    fn captf_prefixed_names_are_reserved() {
        assert_eq!(
            inline(ObjectKind::MachinePool, json!({"captf_tags": {}})),
            ["spec.variables: key \"captf_tags\" starts with the reserved prefix captf_"]
        );
    }

    #[test]
    fn contract_inputs_are_reserved_per_role() {
        assert_eq!(
            inline(ObjectKind::Machine, json!({"machine_name": "x"})),
            ["spec.variables: key \"machine_name\" is a contract input of the machine role"]
        );
        // Not one of the cluster role's inputs.
        assert!(inline(ObjectKind::Cluster, json!({"machine_name": "x"})).is_empty());
    }

    #[test]
    fn module_meta_arguments_are_reserved() {
        assert_eq!(
            inline(ObjectKind::Cluster, json!({"for_each": []})),
            ["spec.variables: key \"for_each\" is a module meta-argument"]
        );
    }

    #[test]
    fn at_least_one_and_at_most_256_inline_keys() {
        assert_eq!(
            inline(ObjectKind::Cluster, json!({})),
            [
                "spec.variables is set but holds no key: set at least one variable, or leave spec.variables unset"
            ]
        );
        let mut many = serde_json::Map::new();
        for i in 0..257 {
            many.insert(format!("v{i}"), json!(i));
        }
        assert_eq!(
            inline(ObjectKind::Cluster, serde_json::Value::Object(many.clone())),
            ["spec.variables holds 257 keys; at most 256 are allowed"]
        );
        many.remove("v0");
        assert!(inline(ObjectKind::Cluster, serde_json::Value::Object(many)).is_empty());
    }

    #[test]
    fn fractional_numbers_cannot_be_hashed() {
        assert_eq!(
            inline(ObjectKind::Cluster, json!({"ratio": 0.5})),
            [
                "spec.variables: the value of key \"ratio\" holds a fractional or exponent number at $; only integers can be hashed into the inputs (pass it as a string)"
            ]
        );
    }

    fn source(cm: bool, secret: bool) -> VariablesSource {
        let r = || VariablesObjectReference { name: "x".into() };
        VariablesSource {
            config_map_ref: cm.then(r),
            secret_ref: secret.then(r),
            ..VariablesSource::default()
        }
    }

    fn sources(list: &[VariablesSource]) -> Vec<String> {
        let mut out = Vec::new();
        check_sources("spec.variablesFrom", list, &mut out);
        out.into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn a_source_names_exactly_one_of_configmap_or_secret() {
        assert_eq!(
            sources(&[source(true, false), source(true, true)]),
            [
                "spec.variablesFrom[1] names both a configMapRef and a secretRef: each entry names exactly one of them"
            ]
        );
        assert_eq!(
            sources(&[source(false, false)]),
            [
                "spec.variablesFrom[0] names neither a configMapRef nor a secretRef: each entry names exactly one of them"
            ]
        );
        assert!(sources(&[source(true, false), source(false, true)]).is_empty());
    }

    #[test]
    fn at_most_16_sources() {
        let list: Vec<_> = (0..17).map(|_| source(true, false)).collect();
        assert_eq!(
            sources(&list),
            ["spec.variablesFrom lists 17 sources; at most 16 are allowed"]
        );
        assert!(sources(&list[..16]).is_empty());
    }
}
