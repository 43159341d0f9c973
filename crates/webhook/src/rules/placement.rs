//! A jobs policy's placement fields — `nodeSelector`, `tolerations`, `affinity.nodeAffinity`,
//! `priorityClassName`, `topologySpreadConstraints` (spec: Tuning Jobs, "Placement") — checked
//! by the rules the API server applies to a pod, so a mistake is refused when it is written
//! instead of leaving every later Job of the object unable to create its pod.
//!
//! Pod (anti-)affinity terms are left to the API server: their label selectors are checked when
//! the Job is created.

use api::shared::JobPolicy;
use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, Toleration, TopologySpreadConstraint,
};

use super::{Rule, Violation};

/// Checks the placement fields of the policy found at `path` (for example `spec.jobs`).
pub fn check_placement(path: &str, policy: &JobPolicy, out: &mut Vec<Violation>) {
    let mut deny = |message: String| out.push(Violation::new(Rule::JobsPlacement, message));
    for (key, value) in policy.node_selector.iter().flatten() {
        if let Err(why) = label_key(key) {
            deny(format!("{path}.nodeSelector key {key:?}: {why}"));
        }
        if let Err(why) = label_value(value) {
            deny(format!(
                "{path}.nodeSelector[{key:?}] value {value:?}: {why}"
            ));
        }
    }
    for (i, t) in policy.tolerations.iter().flatten().enumerate() {
        if let Err(why) = toleration(t) {
            deny(format!("{path}.tolerations[{i}]: {why}"));
        }
    }
    let node_affinity = policy
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    if let Some(required) = node_affinity.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        let at =
            format!("{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution");
        if required.node_selector_terms.is_empty() {
            deny(format!(
                "{at}.nodeSelectorTerms: must name at least one term (an empty list matches no node)"
            ));
        }
        for (i, term) in required.node_selector_terms.iter().enumerate() {
            node_selector_term(&format!("{at}.nodeSelectorTerms[{i}]"), term, &mut deny);
        }
    }
    for (i, p) in node_affinity
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!(
            "{path}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        );
        if !(1..=100).contains(&p.weight) {
            deny(format!("{at}.weight {}: must be 1..100", p.weight));
        }
        node_selector_term(&format!("{at}.preference"), &p.preference, &mut deny);
    }
    if let Some(name) = &policy.priority_class_name
        && let Err(why) = dns_subdomain(name)
    {
        deny(format!("{path}.priorityClassName {name:?}: {why}"));
    }
    for (i, c) in policy
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        if let Err(why) = spread(c) {
            deny(format!("{path}.topologySpreadConstraints[{i}]: {why}"));
        }
    }
}

/// One node selector term: its requirements on labels and on fields.
fn node_selector_term(at: &str, term: &NodeSelectorTerm, deny: &mut impl FnMut(String)) {
    for (i, r) in term.match_expressions.iter().flatten().enumerate() {
        if let Err(why) = label_key(&r.key).and_then(|()| requirement(r)) {
            deny(format!(
                "{at}.matchExpressions[{i}] (key {:?}): {why}",
                r.key
            ));
        }
    }
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let why = if r.key != "metadata.name" {
            Err("the only field a node can be selected by is metadata.name".to_owned())
        } else if !matches!(r.operator.as_str(), "In" | "NotIn") {
            Err(format!(
                "operator {:?} is not allowed on a field: use In or NotIn",
                r.operator
            ))
        } else if r.values.as_ref().map_or(0, Vec::len) != 1 {
            Err("must give exactly one node name".to_owned())
        } else {
            Ok(())
        };
        if let Err(why) = why {
            deny(format!("{at}.matchFields[{i}] (key {:?}): {why}", r.key));
        }
    }
}

/// A node selector requirement's operator and values.
fn requirement(r: &NodeSelectorRequirement) -> Result<(), String> {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => {
            Err(format!("operator {} needs at least one value", r.operator))
        }
        "In" | "NotIn" => values.iter().try_for_each(|v| label_value(v)),
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            Err(format!("operator {} takes no values", r.operator))
        }
        "Exists" | "DoesNotExist" => Ok(()),
        "Gt" | "Lt" => match values {
            [one] if one.parse::<i64>().is_ok() => Ok(()),
            _ => Err(format!(
                "operator {} needs exactly one integer value",
                r.operator
            )),
        },
        other => Err(format!(
            "operator {other:?} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
        )),
    }
}

/// A toleration, by the pod rules: a known operator and effect, no value with `Exists`, a key
/// unless `Exists`, and `tolerationSeconds` only for `NoExecute`.
fn toleration(t: &Toleration) -> Result<(), String> {
    let key = t.key.as_deref().unwrap_or_default();
    let value = t.value.as_deref().unwrap_or_default();
    let effect = t.effect.as_deref().unwrap_or_default();
    let operator = t.operator.as_deref().unwrap_or_default();
    if !key.is_empty() {
        label_key(key).map_err(|why| format!("key {key:?}: {why}"))?;
    }
    match operator {
        "" | "Equal" => {
            if key.is_empty() {
                return Err(
                    "an empty key needs operator Exists (it then tolerates every taint)".into(),
                );
            }
            label_value(value).map_err(|why| format!("value {value:?}: {why}"))?;
        }
        "Exists" if !value.is_empty() => {
            return Err(format!(
                "operator Exists takes no value (got {value:?}): drop the value or use Equal"
            ));
        }
        "Exists" => {}
        other => return Err(format!("operator {other:?} is not Equal or Exists")),
    }
    if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    if t.toleration_seconds.is_some() && effect != "NoExecute" {
        return Err("tolerationSeconds applies only to effect NoExecute".into());
    }
    Ok(())
}

/// A topology spread constraint's skew, key and policy.
fn spread(c: &TopologySpreadConstraint) -> Result<(), String> {
    if c.max_skew < 1 {
        return Err(format!("maxSkew {} must be at least 1", c.max_skew));
    }
    label_key(&c.topology_key).map_err(|why| format!("topologyKey {:?}: {why}", c.topology_key))?;
    match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" | "ScheduleAnyway" => {}
        other => {
            return Err(format!(
                "whenUnsatisfiable {other:?} is not DoNotSchedule or ScheduleAnyway"
            ));
        }
    }
    if let Some(min) = c.min_domains {
        if min < 1 {
            return Err(format!("minDomains {min} must be at least 1"));
        }
        if c.when_unsatisfiable != "DoNotSchedule" {
            return Err("minDomains applies only with whenUnsatisfiable DoNotSchedule".into());
        }
    }
    Ok(())
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63 characters.
fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        dns_subdomain(prefix).map_err(|why| format!("its prefix {why}"))?;
    }
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    label_value(name)
}

/// A label value: at most 63 characters, alphanumerics with `-`, `_` or `.` inside, or empty.
fn label_value(value: &str) -> Result<(), String> {
    let ok_inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if value.len() > 63 {
        return Err(format!("is {} characters; at most 63", value.len()));
    }
    let ends_ok = value
        .chars()
        .next()
        .is_none_or(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .last()
            .is_none_or(|c| c.is_ascii_alphanumeric());
    if !ends_ok || !value.chars().all(ok_inner) {
        return Err(
            "must be alphanumerics with '-', '_' or '.' inside, starting and ending alphanumeric"
                .into(),
        );
    }
    Ok(())
}

/// A DNS-1123 subdomain: lower-case alphanumerics, `-` and `.`, at most 253 characters, each
/// dot-separated part starting and ending alphanumeric.
fn dns_subdomain(s: &str) -> Result<(), String> {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    if s.is_empty() || s.len() > 253 || !s.split('.').all(part_ok) {
        return Err(
            "must be a DNS subdomain: lower-case alphanumerics, '-' and '.', at most 253 characters"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector};

    fn messages(policy: &JobPolicy) -> Vec<String> {
        let mut out = Vec::new();
        check_placement("spec.jobs", policy, &mut out);
        assert!(out.iter().all(|v| v.rule == Rule::JobsPlacement));
        out.into_iter().map(|v| v.message).collect()
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration {
            key: some(key),
            operator: some(op),
            value: some(value),
            effect: some(effect),
            toleration_seconds: None,
        }
    }

    fn node_affinity(terms: Vec<NodeSelectorTerm>) -> Affinity {
        Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..NodeAffinity::default()
            }),
            ..Affinity::default()
        }
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn what_a_user_writes_for_dedicated_nodes_passes() {
        let policy = JobPolicy {
            node_selector: Some(
                [
                    ("node-role.kubernetes.io/infra".to_owned(), String::new()),
                    ("kubernetes.io/arch".to_owned(), "arm64".to_owned()),
                ]
                .into(),
            ),
            tolerations: Some(vec![
                tol(
                    "node-role.kubernetes.io/control-plane",
                    "Exists",
                    "",
                    "NoSchedule",
                ),
                tol("dedicated", "Equal", "terraform", "NoSchedule"),
                tol("", "Exists", "", ""),
            ]),
            affinity: Some(node_affinity(vec![NodeSelectorTerm {
                match_expressions: Some(vec![
                    expr("topology.kubernetes.io/zone", "In", &["eu-1a", "eu-1b"]),
                    expr("example.com/generation", "Gt", &["3"]),
                    expr("spot", "DoesNotExist", &[]),
                ]),
                ..NodeSelectorTerm::default()
            }])),
            priority_class_name: Some("system-cluster-critical".into()),
            topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "kubernetes.io/hostname".into(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                ..TopologySpreadConstraint::default()
            }]),
            ..JobPolicy::default()
        };
        assert_eq!(messages(&policy), Vec::<String>::new());
    }

    #[test]
    fn node_selector_keys_and_values_follow_the_label_rules() {
        let policy = JobPolicy {
            node_selector: Some(
                [
                    ("Bad_Prefix/x".to_owned(), "ok".to_owned()),
                    ("zone".to_owned(), "not ok!".to_owned()),
                ]
                .into(),
            ),
            ..JobPolicy::default()
        };
        let m = messages(&policy);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with(
                "spec.jobs.nodeSelector key \"Bad_Prefix/x\": its prefix must be a DNS subdomain"
            ),
            "{m:?}"
        );
        assert!(
            m[1].starts_with("spec.jobs.nodeSelector[\"zone\"] value \"not ok!\""),
            "{m:?}"
        );
    }

    #[test]
    fn tolerations_follow_the_pod_rules() {
        let cases = [
            (
                tol("dedicated", "Exists", "x", "NoSchedule"),
                "operator Exists takes no value",
            ),
            (
                tol("", "Equal", "x", "NoSchedule"),
                "an empty key needs operator Exists",
            ),
            (
                tol("dedicated", "Matches", "", ""),
                "operator \"Matches\" is not Equal or Exists",
            ),
            (
                tol("dedicated", "Exists", "", "NoRun"),
                "effect \"NoRun\" is not",
            ),
            (
                Toleration {
                    toleration_seconds: Some(30),
                    ..tol("dedicated", "Exists", "", "NoSchedule")
                },
                "tolerationSeconds applies only to effect NoExecute",
            ),
        ];
        for (t, want) in cases {
            let m = messages(&JobPolicy {
                tolerations: Some(vec![t.clone()]),
                ..JobPolicy::default()
            });
            assert_eq!(m.len(), 1, "{t:?}: {m:?}");
            assert!(m[0].starts_with("spec.jobs.tolerations[0]: "), "{m:?}");
            assert!(m[0].contains(want), "{t:?}: {m:?}");
        }
        let ok = Toleration {
            toleration_seconds: Some(30),
            ..tol("node.kubernetes.io/unreachable", "Exists", "", "NoExecute")
        };
        assert!(
            messages(&JobPolicy {
                tolerations: Some(vec![ok]),
                ..JobPolicy::default()
            })
            .is_empty()
        );
    }

    #[test]
    fn required_node_affinity_needs_terms_and_valid_requirements() {
        let m = messages(&JobPolicy {
            affinity: Some(node_affinity(vec![])),
            ..JobPolicy::default()
        });
        assert_eq!(m.len(), 1);
        assert!(
            m[0].contains("nodeSelectorTerms: must name at least one term"),
            "{m:?}"
        );

        let bad = NodeSelectorTerm {
            match_expressions: Some(vec![
                expr("zone", "In", &[]),
                expr("zone", "Exists", &["a"]),
                expr("cpu", "Gt", &["many"]),
                expr("zone", "Near", &["a"]),
            ]),
            match_fields: Some(vec![expr("metadata.uid", "In", &["x"])]),
        };
        let m = messages(&JobPolicy {
            affinity: Some(node_affinity(vec![bad])),
            ..JobPolicy::default()
        });
        let at = "spec.jobs.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
        assert_eq!(m.len(), 5, "{m:?}");
        assert!(
            m[0].starts_with(&format!(
                "{at}.matchExpressions[0] (key \"zone\"): operator In needs at least one value"
            )),
            "{m:?}"
        );
        assert!(m[1].contains("operator Exists takes no values"), "{m:?}");
        assert!(
            m[2].contains("operator Gt needs exactly one integer value"),
            "{m:?}"
        );
        assert!(m[3].contains("operator \"Near\" is not one of"), "{m:?}");
        assert!(
            m[4].starts_with(&format!(
                "{at}.matchFields[0] (key \"metadata.uid\"): the only field"
            )),
            "{m:?}"
        );
    }

    #[test]
    fn priority_class_and_spread_constraints() {
        let m = messages(&JobPolicy {
            priority_class_name: Some("High_Priority".into()),
            topology_spread_constraints: Some(vec![
                TopologySpreadConstraint {
                    max_skew: 0,
                    topology_key: "zone".into(),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    ..TopologySpreadConstraint::default()
                },
                TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "zone".into(),
                    when_unsatisfiable: "Sometimes".into(),
                    ..TopologySpreadConstraint::default()
                },
                TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "zone".into(),
                    when_unsatisfiable: "ScheduleAnyway".into(),
                    min_domains: Some(2),
                    ..TopologySpreadConstraint::default()
                },
            ]),
            ..JobPolicy::default()
        });
        assert_eq!(m.len(), 4, "{m:?}");
        assert!(
            m[0].starts_with(
                "spec.jobs.priorityClassName \"High_Priority\": must be a DNS subdomain"
            ),
            "{m:?}"
        );
        assert!(
            m[1].contains("topologySpreadConstraints[0]: maxSkew 0 must be at least 1"),
            "{m:?}"
        );
        assert!(
            m[2].contains("topologySpreadConstraints[1]: whenUnsatisfiable \"Sometimes\""),
            "{m:?}"
        );
        assert!(
            m[3].contains("topologySpreadConstraints[2]: minDomains applies only with"),
            "{m:?}"
        );
    }
}
