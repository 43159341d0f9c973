//! Whether an unbound pod may be bound to a node, as kube-scheduler's filter plugins decide it:
//! TaintToleration (every `NoSchedule`/`NoExecute` taint tolerated), then NodeAffinity (the
//! `nodeSelector` and the required node affinity terms), in the scheduler's order.
//!
//! Only these filters: preferred node affinity is a score, not a filter; inter-pod affinity,
//! topology spread, resources and priority/preemption are not evaluated. `spec.nodeName` is not
//! looked at (only unbound pods are bound). Tolerations with the alpha operators `Lt`/`Gt`
//! tolerate nothing, as with their feature gate off (the default).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

/// The scheduler's reason when the `nodeSelector` or the required node affinity does not match.
pub const NODE_AFFINITY_MISMATCH: &str = "node(s) didn't match Pod's node affinity/selector";

/// The only field `matchFields` may name.
const NODE_NAME_FIELD: &str = "metadata.name";

/// Whether a pod with `pod` may be bound to the node `node_name` with `labels` and `taints`;
/// `Err` holds the reason, worded like the scheduler's.
pub fn fits(
    pod: &PodSpec,
    node_name: &str,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> Result<(), String> {
    let tolerations = pod.tolerations.as_deref().unwrap_or_default();
    if let Some(taint) = untolerated_taint(taints, tolerations) {
        return Err(format!(
            "node(s) had untolerated taint {{{}: {}}}",
            taint.key,
            taint.value.as_deref().unwrap_or_default()
        ));
    }
    if !matches_node_selector(pod, labels) || !matches_required_affinity(pod, node_name, labels) {
        return Err(NODE_AFFINITY_MISMATCH.to_owned());
    }
    Ok(())
}

/// The first taint that keeps pods off the node (effect `NoSchedule` or `NoExecute`; a
/// `PreferNoSchedule` one only lowers a score) that no toleration tolerates.
fn untolerated_taint<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Whether `toleration` tolerates `taint` (`Toleration.ToleratesTaint` of `k8s.io/api`): its
/// effect is empty or the taint's, its key is empty or the taint's, and its operator is `Exists`
/// or `Equal` (the default) with the taint's value.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether every `nodeSelector` entry is a node label with the same value.
fn matches_node_selector(pod: &PodSpec, labels: &BTreeMap<String, String>) -> bool {
    pod.node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether the required node affinity matches: some `nodeSelectorTerms` entry does (none when
/// there are none). Without required node affinity, every node matches.
fn matches_required_affinity(
    pod: &PodSpec,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let required = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    required.is_none_or(|ns| {
        ns.node_selector_terms
            .iter()
            .any(|term| matches_term(term, node_name, labels))
    })
}

/// Whether every `matchExpressions` and `matchFields` requirement of `term` matches; a term with
/// neither matches no node.
fn matches_term(
    term: &NodeSelectorTerm,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions.iter().all(|r| matches_label(r, labels))
        && fields.iter().all(|r| matches_field(r, node_name))
}

/// Whether a `matchExpressions` requirement matches the node labels, as a label selector
/// requirement does. An invalid one (unknown operator, values where none belong or none where
/// some must be, a `Gt`/`Lt` value that is not one integer) matches nothing, as the scheduler
/// drops a term it cannot parse.
fn matches_label(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let label = labels.get(&req.key);
    match req.operator.as_str() {
        "In" => !values.is_empty() && label.is_some_and(|l| values.contains(l)),
        "NotIn" => !values.is_empty() && label.is_none_or(|l| !values.contains(l)),
        "Exists" => values.is_empty() && label.is_some(),
        "DoesNotExist" => values.is_empty() && label.is_none(),
        op @ ("Gt" | "Lt") => {
            let [bound] = values else { return false };
            let (Ok(bound), Some(Ok(value))) =
                (bound.parse::<i64>(), label.map(|l| l.parse::<i64>()))
            else {
                return false;
            };
            if op == "Gt" {
                value > bound
            } else {
                value < bound
            }
        }
        _ => false,
    }
}

/// Whether a `matchFields` requirement matches the node: only `metadata.name` with `In` or
/// `NotIn` and one value; anything else matches nothing.
fn matches_field(req: &NodeSelectorRequirement, node_name: &str) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let [value] = values else { return false };
    if req.key != NODE_NAME_FIELD {
        return false;
    }
    match req.operator.as_str() {
        "In" => value == node_name,
        "NotIn" => value != node_name,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NODE: &str = "node-a";

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).expect("a valid PodSpec")
    }

    fn labels() -> BTreeMap<String, String> {
        [
            ("kubernetes.io/hostname", NODE),
            ("zone", "a"),
            ("cores", "8"),
            ("word", "eight"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
            time_added: None,
        }
    }

    /// A pod with one required node affinity term of the given `matchExpressions`.
    fn with_expressions(exprs: &serde_json::Value) -> PodSpec {
        spec(json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": exprs}],
            }}},
        }))
    }

    fn expression_fits(key: &str, operator: &str, values: &[&str]) -> bool {
        let pod = with_expressions(&json!([{"key": key, "operator": operator, "values": values}]));
        fits(&pod, NODE, &labels(), &[]).is_ok()
    }

    #[test]
    fn a_pod_without_placement_fits_an_untainted_node() {
        let pod = spec(json!({"containers": []}));
        assert_eq!(fits(&pod, NODE, &BTreeMap::new(), &[]), Ok(()));
        assert_eq!(fits(&pod, NODE, &labels(), &[]), Ok(()));
    }

    #[test]
    fn node_selector_needs_every_label_with_its_value() {
        let sel = |s: serde_json::Value| spec(json!({"containers": [], "nodeSelector": s}));
        let l = labels();
        assert!(fits(&sel(json!({"zone": "a", "cores": "8"})), NODE, &l, &[]).is_ok());
        assert_eq!(
            fits(&sel(json!({"zone": "b"})), NODE, &l, &[]),
            Err(NODE_AFFINITY_MISMATCH.to_owned())
        );
        assert!(fits(&sel(json!({"zone": "a", "gpu": "yes"})), NODE, &l, &[]).is_err());
        assert!(fits(&sel(json!({})), NODE, &l, &[]).is_ok());
    }

    #[test]
    fn in_and_not_in() {
        assert!(expression_fits("zone", "In", &["b", "a"]));
        assert!(!expression_fits("zone", "In", &["b"]));
        assert!(!expression_fits("missing", "In", &["a"]));
        assert!(expression_fits("zone", "NotIn", &["b"]));
        assert!(!expression_fits("zone", "NotIn", &["a", "b"]));
        assert!(expression_fits("missing", "NotIn", &["a"]));
        assert!(!expression_fits("zone", "In", &[]), "In needs values");
    }

    #[test]
    fn exists_and_does_not_exist() {
        assert!(expression_fits("zone", "Exists", &[]));
        assert!(!expression_fits("missing", "Exists", &[]));
        assert!(expression_fits("missing", "DoesNotExist", &[]));
        assert!(!expression_fits("zone", "DoesNotExist", &[]));
        assert!(
            !expression_fits("zone", "Exists", &["a"]),
            "Exists takes no values"
        );
    }

    #[test]
    fn gt_and_lt_compare_integers() {
        assert!(expression_fits("cores", "Gt", &["4"]));
        assert!(!expression_fits("cores", "Gt", &["8"]));
        assert!(expression_fits("cores", "Lt", &["16"]));
        assert!(!expression_fits("cores", "Lt", &["8"]));
        assert!(expression_fits("cores", "Gt", &["-1"]));
        // Integer, not string, order: "8" > "16" as strings.
        assert!(!expression_fits("cores", "Gt", &["16"]));
        assert!(
            !expression_fits("word", "Gt", &["1"]),
            "a label that is no integer"
        );
        assert!(!expression_fits("missing", "Lt", &["1"]));
        assert!(!expression_fits("cores", "Gt", &["x"]));
        assert!(!expression_fits("cores", "Gt", &["1", "2"]));
        assert!(!expression_fits("cores", "Gt", &[]));
    }

    #[test]
    fn unknown_operators_match_nothing() {
        assert!(!expression_fits("zone", "Equals", &["a"]));
    }

    #[test]
    fn expressions_of_a_term_are_anded() {
        let pod = with_expressions(&json!([
            {"key": "zone", "operator": "In", "values": ["a"]},
            {"key": "cores", "operator": "Gt", "values": ["4"]},
        ]));
        assert!(fits(&pod, NODE, &labels(), &[]).is_ok());
        let pod = with_expressions(&json!([
            {"key": "zone", "operator": "In", "values": ["a"]},
            {"key": "cores", "operator": "Gt", "values": ["10"]},
        ]));
        assert!(fits(&pod, NODE, &labels(), &[]).is_err());
    }

    #[test]
    fn terms_are_ored_and_an_empty_term_matches_nothing() {
        let terms = |t: serde_json::Value| {
            spec(json!({
                "containers": [],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": t,
                }}},
            }))
        };
        let miss =
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]});
        let hit = json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}]});
        let l = labels();
        assert!(fits(&terms(json!([miss, hit])), NODE, &l, &[]).is_ok());
        assert!(fits(&terms(json!([miss])), NODE, &l, &[]).is_err());
        assert!(fits(&terms(json!([{}])), NODE, &l, &[]).is_err());
        assert!(fits(&terms(json!([{"matchExpressions": []}])), NODE, &l, &[]).is_err());
        assert!(fits(&terms(json!([])), NODE, &l, &[]).is_err());
    }

    #[test]
    fn match_fields_name_the_node() {
        let field = |op: &str, key: &str, name: &str| {
            spec(json!({
                "containers": [],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{
                        "matchFields": [{"key": key, "operator": op, "values": [name]}],
                    }],
                }}},
            }))
        };
        let l = labels();
        assert!(fits(&field("In", "metadata.name", NODE), NODE, &l, &[]).is_ok());
        assert!(fits(&field("In", "metadata.name", "node-b"), NODE, &l, &[]).is_err());
        assert!(fits(&field("NotIn", "metadata.name", "node-b"), NODE, &l, &[]).is_ok());
        assert!(fits(&field("NotIn", "metadata.name", NODE), NODE, &l, &[]).is_err());
        assert!(fits(&field("In", "metadata.uid", NODE), NODE, &l, &[]).is_err());
        assert!(fits(&field("Exists", "metadata.name", NODE), NODE, &l, &[]).is_err());
    }

    #[test]
    fn match_fields_and_expressions_of_a_term_are_anded() {
        let pod = |zone: &str| {
            spec(json!({
                "containers": [],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{
                        "matchExpressions": [
                            {"key": "zone", "operator": "In", "values": [zone]},
                        ],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [NODE]},
                        ],
                    }],
                }}},
            }))
        };
        assert!(fits(&pod("a"), NODE, &labels(), &[]).is_ok());
        assert!(fits(&pod("b"), NODE, &labels(), &[]).is_err());
    }

    #[test]
    fn node_selector_and_affinity_must_both_match() {
        let pod = spec(json!({
            "containers": [],
            "nodeSelector": {"zone": "b"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                ],
            }}},
        }));
        assert!(fits(&pod, NODE, &labels(), &[]).is_err());
    }

    #[test]
    fn preferred_affinity_is_no_filter() {
        let pod = spec(json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "preference": {
                    "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}],
                },
            }]}},
        }));
        assert!(fits(&pod, NODE, &labels(), &[]).is_ok());
    }

    fn tolerating(tolerations: &serde_json::Value) -> PodSpec {
        spec(json!({"containers": [], "tolerations": tolerations}))
    }

    #[test]
    fn an_untolerated_taint_keeps_pods_off() {
        let taints = [taint("dedicated", Some("infra"), "NoSchedule")];
        assert_eq!(
            fits(&spec(json!({"containers": []})), NODE, &labels(), &taints),
            Err("node(s) had untolerated taint {dedicated: infra}".to_owned())
        );
        let no_exec = [taint("gone", None, "NoExecute")];
        assert_eq!(
            fits(&spec(json!({"containers": []})), NODE, &labels(), &no_exec),
            Err("node(s) had untolerated taint {gone: }".to_owned())
        );
    }

    #[test]
    fn prefer_no_schedule_is_no_filter() {
        let taints = [taint("soft", Some("x"), "PreferNoSchedule")];
        assert!(fits(&spec(json!({"containers": []})), NODE, &labels(), &taints).is_ok());
    }

    #[test]
    fn equal_matches_key_and_value() {
        let taints = [taint("dedicated", Some("infra"), "NoSchedule")];
        let ok = |t: serde_json::Value| fits(&tolerating(&t), NODE, &labels(), &taints).is_ok();
        assert!(ok(
            json!([{"key": "dedicated", "operator": "Equal", "value": "infra"}])
        ));
        assert!(
            ok(json!([{"key": "dedicated", "value": "infra"}])),
            "Equal is the default"
        );
        assert!(!ok(json!([{"key": "dedicated", "value": "other"}])));
        assert!(!ok(json!([{"key": "other", "value": "infra"}])));
        assert!(
            !ok(json!([{"key": "dedicated"}])),
            "Equal with no value needs an empty value"
        );
    }

    #[test]
    fn exists_matches_the_key_or_with_no_key_every_taint() {
        let taints = [
            taint("dedicated", Some("infra"), "NoSchedule"),
            taint("gone", None, "NoExecute"),
        ];
        let ok = |t: serde_json::Value| fits(&tolerating(&t), NODE, &labels(), &taints).is_ok();
        assert!(ok(json!([{"operator": "Exists"}])));
        assert!(!ok(json!([{"key": "dedicated", "operator": "Exists"}])));
        assert!(ok(json!([
            {"key": "dedicated", "operator": "Exists"},
            {"key": "gone", "operator": "Exists"},
        ])));
        assert!(!ok(json!([{"key": "other", "operator": "Exists"}])));
    }

    #[test]
    fn the_effect_must_be_empty_or_the_taints() {
        let taints = [taint("dedicated", Some("infra"), "NoSchedule")];
        let ok = |t: serde_json::Value| fits(&tolerating(&t), NODE, &labels(), &taints).is_ok();
        assert!(ok(
            json!([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
        ));
        assert!(!ok(
            json!([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}])
        ));
        assert!(!ok(json!([{"operator": "Exists", "effect": "NoExecute"}])));
        assert!(ok(json!([{"operator": "Exists", "effect": "NoSchedule"}])));
    }

    #[test]
    fn alpha_comparison_operators_tolerate_nothing() {
        let taints = [taint("cores", Some("8"), "NoSchedule")];
        let pod = tolerating(&json!([{"key": "cores", "operator": "Gt", "value": "4"}]));
        assert!(fits(&pod, NODE, &labels(), &taints).is_err());
    }

    #[test]
    fn taints_are_checked_before_affinity() {
        let taints = [taint("dedicated", Some("infra"), "NoSchedule")];
        let pod = spec(json!({"containers": [], "nodeSelector": {"zone": "b"}}));
        let err = fits(&pod, NODE, &labels(), &taints).unwrap_err();
        assert!(err.contains("untolerated taint"), "{err}");
    }
}
