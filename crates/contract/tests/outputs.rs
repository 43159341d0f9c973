//! Output decoding and validation, one test per contract rule (Module Contract "Null semantics",
//! Common "Outputs", Cluster/Machine/MachinePool Role "Outputs").

use contract::health::{ConditionStatus, HealthReason, HealthState};
use contract::outputs::{
    AddressType, OutputsReason, RootOutput, RootOutputs, Rule, decode_cluster_outputs,
    decode_machine_outputs, decode_machinepool_outputs, provider_id_change,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn outputs(value: &Value) -> RootOutputs {
    value
        .as_object()
        .expect("an object of outputs")
        .iter()
        .map(|(k, v)| (k.clone(), RootOutput::new(v.clone())))
        .collect()
}

fn healthy() -> Value {
    json!({"state": "running", "healthy": true, "message": null, "reasons": []})
}

fn machine(overrides: Value) -> RootOutputs {
    let mut base = json!({
        "provider_id": "aws:///eu-west-1a/i-0123",
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        "failure_domain": "eu-west-1a",
        "interruptible": false,
        "health": healthy(),
    });
    merge(&mut base, overrides);
    outputs(&base)
}

fn cluster(overrides: Value) -> RootOutputs {
    let mut base = json!({
        "control_plane_endpoint": {"host": "api.example.com", "port": 6443},
        "failure_domains": [{"name": "a"}],
        "exports": {"network_id": "net-1"},
        "health": healthy(),
    });
    merge(&mut base, overrides);
    outputs(&base)
}

fn pool(overrides: Value) -> RootOutputs {
    let mut base = json!({
        "provider_id": "group-1",
        "provider_id_list": ["p:///b", "p:///a"],
        "replicas": 2,
        "instances": [{"provider_id": "p:///a", "state": "running"}],
        "health": healthy(),
    });
    merge(&mut base, overrides);
    outputs(&base)
}

/// Sets each key of `overrides`; the string `"<absent>"` removes the key.
fn merge(base: &mut Value, overrides: Value) {
    let (Some(base), Value::Object(overrides)) = (base.as_object_mut(), overrides) else {
        panic!("objects expected");
    };
    for (k, v) in overrides {
        if v == json!("<absent>") {
            base.remove(&k);
        } else {
            base.insert(k, v);
        }
    }
}

fn rules_of<T>(decoded: &contract::outputs::Decoded<T>) -> Vec<(String, Rule)> {
    decoded
        .verdict
        .violations
        .iter()
        .map(|v| (v.output.clone(), v.rule.clone()))
        .collect()
}

// ---- Null semantics -----------------------------------------------------------------------

#[test]
fn valid_machine_outputs_are_valid() {
    let d = decode_machine_outputs(&machine(json!({})), Some("eu-west-1a"));
    assert!(d.verdict.is_valid(), "{:?}", d.verdict);
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsValid);
    assert_eq!(d.verdict.status(), ConditionStatus::True);
    assert_eq!(
        d.outputs.provider_id.as_deref(),
        Some("aws:///eu-west-1a/i-0123")
    );
}

#[test]
fn outputs_missing_when_state_has_none_of_the_roles_outputs() {
    let only_foreign = outputs(&json!({"something_else": 1}));
    let d = decode_machine_outputs(&only_foreign, None);
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsMissing);
    assert_eq!(d.verdict.status(), ConditionStatus::False);
    assert_eq!(d.verdict.missing.len(), 5);
    assert!(d.verdict.message().contains("provider_id"));
    assert_eq!(
        decode_cluster_outputs(&RootOutputs::new()).verdict.reason(),
        OutputsReason::OutputsMissing
    );
    assert_eq!(
        decode_machinepool_outputs(&RootOutputs::new())
            .verdict
            .reason(),
        OutputsReason::OutputsMissing
    );
}

/// Module Contract "Null semantics": an output the module does not declare is a hard error,
/// `OutputsValid=False/OutputsMissing`, naming it. The runner lists such outputs in
/// `captf_undeclared_outputs`; names that are not contract outputs of the role are ignored.
#[test]
fn an_output_the_module_does_not_declare_is_outputs_missing() {
    let d = decode_machine_outputs(
        &machine(json!({
            "provider_id": "<absent>",
            "captf_undeclared_outputs": ["provider_id", "exports"],
        })),
        None,
    );
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsMissing);
    assert_eq!(d.verdict.status(), ConditionStatus::False);
    assert_eq!(d.verdict.missing, vec!["provider_id"]);
    assert!(!d.verdict.is_valid());
    let message = d.verdict.message();
    assert!(
        message.contains("does not declare the contract outputs provider_id"),
        "{message}"
    );
    assert!(!message.contains("exports"), "{message}");
    // Every other role reads it the same way.
    let c = decode_cluster_outputs(&cluster(
        json!({"health": "<absent>", "captf_undeclared_outputs": ["health"]}),
    ));
    assert_eq!(c.verdict.missing, vec!["health"]);
    let p = decode_machinepool_outputs(&pool(
        json!({"instances": "<absent>", "captf_undeclared_outputs": ["instances"]}),
    ));
    assert_eq!(p.verdict.reason(), OutputsReason::OutputsMissing);
    // A list naming nothing of the role, or not a list at all, changes nothing.
    for listed in [json!([]), json!(["exports"]), json!("provider_id")] {
        let d = decode_machine_outputs(&machine(json!({"captf_undeclared_outputs": listed})), None);
        assert_eq!(d.verdict.reason(), OutputsReason::OutputsValid, "{listed}");
    }
}

#[test]
fn absent_output_reads_as_null_because_the_runtime_drops_null_root_outputs() {
    let d = decode_machine_outputs(&machine(json!({"provider_id": "<absent>"})), None);
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsPending);
    assert_eq!(d.verdict.pending, vec!["provider_id"]);
}

#[test]
fn null_required_output_is_pending() {
    let d = decode_machine_outputs(&machine(json!({"provider_id": null})), None);
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsPending);
    assert_eq!(d.verdict.status(), ConditionStatus::Unknown);
    assert!(d.verdict.message().contains("provider_id"));
}

#[test]
fn empty_string_id_reads_as_null() {
    let d = decode_machine_outputs(&machine(json!({"provider_id": ""})), None);
    assert_eq!(d.verdict.pending, vec!["provider_id"]);
    assert_eq!(d.outputs.provider_id, None);
}

#[test]
fn null_health_is_pending() {
    let d = decode_cluster_outputs(&cluster(json!({"health": null})));
    assert_eq!(d.verdict.pending, vec!["health"]);
}

// ---- health ---------------------------------------------------------------------------------

#[test]
fn health_state_is_a_closed_enum() {
    let d = decode_machine_outputs(
        &machine(json!({"health": {"state": "sleeping", "healthy": true}})),
        None,
    );
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
    assert!(matches!(
        rules_of(&d).as_slice(),
        [(path, Rule::NotInEnum { .. })] if path == "health.state"
    ));
}

#[test]
fn health_requires_state_and_healthy() {
    let d = decode_machine_outputs(&machine(json!({"health": {"message": "x"}})), None);
    let rules = rules_of(&d);
    assert!(rules.contains(&("health.state".into(), Rule::MissingAttribute)));
    assert!(rules.contains(&("health.healthy".into(), Rule::MissingAttribute)));
}

#[test]
fn health_reasons_are_strings() {
    let d = decode_machine_outputs(
        &machine(json!({"health": {"state": "running", "healthy": true, "reasons": [1]}})),
        None,
    );
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
}

#[test]
fn health_maps_to_infrastructure_healthy() {
    let cases = [
        (
            "running",
            true,
            ConditionStatus::True,
            HealthReason::Healthy,
        ),
        (
            "running",
            false,
            ConditionStatus::False,
            HealthReason::InstanceUnhealthy,
        ),
        (
            "pending",
            true,
            ConditionStatus::False,
            HealthReason::InstancePending,
        ),
        (
            "degraded",
            true,
            ConditionStatus::False,
            HealthReason::InstanceDegraded,
        ),
        (
            "stopped",
            false,
            ConditionStatus::False,
            HealthReason::InstanceStopped,
        ),
        (
            "terminated",
            true,
            ConditionStatus::False,
            HealthReason::InstanceTerminated,
        ),
        (
            "unknown",
            true,
            ConditionStatus::Unknown,
            HealthReason::HealthUnknown,
        ),
    ];
    for (state, healthy, status, reason) in cases {
        let d = decode_machine_outputs(
            &machine(json!({"health": {"state": state, "healthy": healthy}})),
            None,
        );
        let condition = d.outputs.health.expect("decoded").condition();
        assert_eq!(
            (condition.status, condition.reason),
            (status, reason),
            "{state}"
        );
    }
}

#[test]
fn health_message_and_reasons_are_joined_into_the_condition_message() {
    let d = decode_machine_outputs(
        &machine(json!({"health": {
            "state": "degraded", "healthy": false,
            "message": "disk is slow", "reasons": ["DiskPressure", "IOWait"]
        }})),
        None,
    );
    let health = d.outputs.health.expect("decoded");
    assert_eq!(health.state, HealthState::Degraded);
    let message = health.condition().message;
    assert!(message.contains("disk is slow"), "{message}");
    assert!(message.contains("DiskPressure, IOWait"), "{message}");
}

#[test]
fn unhealthy_samples_follow_the_reading() {
    use HealthReason::*;
    assert_eq!(Healthy.counts_as_unhealthy_sample(), Some(false));
    for reason in [InstanceUnhealthy, InstanceDegraded, InstanceStopped] {
        assert_eq!(reason.counts_as_unhealthy_sample(), Some(true), "{reason}");
    }
    for reason in [InstancePending, HealthUnknown, InstanceTerminated] {
        assert_eq!(reason.counts_as_unhealthy_sample(), None, "{reason}");
    }
}

#[test]
fn a_vanished_instance_reads_as_terminated() {
    let condition = contract::health::HealthCondition::instance_vanished();
    assert_eq!(
        (condition.status, condition.reason),
        (ConditionStatus::False, HealthReason::InstanceTerminated)
    );
}

#[test]
fn health_condition_message_fits_a_condition() {
    let d = decode_machine_outputs(
        &machine(
            json!({"health": {"state": "degraded", "healthy": false, "message": "é".repeat(40_000)}}),
        ),
        None,
    );
    let message = d.outputs.health.expect("decoded").condition().message;
    assert!(message.len() <= contract::health::MAX_CONDITION_MESSAGE_BYTES);
}

// ---- provider_id ------------------------------------------------------------------------------

#[test]
fn provider_id_is_1_to_512_characters() {
    let ok = "é".repeat(512);
    let d = decode_machine_outputs(&machine(json!({ "provider_id": ok })), Some("eu-west-1a"));
    assert!(d.verdict.is_valid());
    let d = decode_machine_outputs(&machine(json!({ "provider_id": "x".repeat(513) })), None);
    assert_eq!(
        rules_of(&d),
        vec![("provider_id".into(), Rule::Length { min: 1, max: 512 })]
    );
}

#[test]
fn provider_id_must_be_a_string() {
    let d = decode_machine_outputs(&machine(json!({"provider_id": 42})), None);
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
}

#[test]
fn provider_id_is_written_once() {
    assert!(provider_id_change(Some("a"), Some("a")).is_none());
    assert!(provider_id_change(None, Some("a")).is_none());
    assert!(provider_id_change(Some("a"), None).is_none());
    let v = provider_id_change(Some("a"), Some("b")).expect("a change");
    assert_eq!(v.rule, Rule::ProviderIdChanged);
    let mut verdict = contract::outputs::OutputsVerdict::default();
    verdict.violations.push(v);
    assert_eq!(verdict.reason(), OutputsReason::ProviderIdChanged);
    assert_eq!(verdict.reason().as_str(), "ProviderIDChanged");
}

// ---- addresses ----------------------------------------------------------------------------------

#[test]
fn address_types_are_the_capi_machine_address_types() {
    let d = decode_machine_outputs(
        &machine(json!({"addresses": [{"type": "PrivateIP", "address": "10.0.0.1"}]})),
        Some("eu-west-1a"),
    );
    assert!(matches!(
        rules_of(&d).as_slice(),
        [(path, Rule::NotInEnum { .. })] if path == "addresses[0].type"
    ));
}

#[test]
fn addresses_have_at_most_256_entries() {
    let many: Vec<Value> = (0..257)
        .map(|i| json!({"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256, i % 256)}))
        .collect();
    let d = decode_machine_outputs(&machine(json!({ "addresses": many })), Some("eu-west-1a"));
    assert_eq!(
        rules_of(&d),
        vec![("addresses".into(), Rule::TooManyItems { max: 256 })]
    );
    assert_eq!(d.outputs.addresses, None, "nothing is written");
}

#[test]
fn address_is_1_to_256_characters() {
    for bad in [String::new(), "a".repeat(257)] {
        let d = decode_machine_outputs(
            &machine(json!({"addresses": [{"type": "Hostname", "address": bad}]})),
            Some("eu-west-1a"),
        );
        assert_eq!(
            rules_of(&d),
            vec![(
                "addresses[0].address".into(),
                Rule::Length { min: 1, max: 256 }
            )]
        );
    }
}

#[test]
fn addresses_are_sorted_in_canonical_order() {
    let d = decode_machine_outputs(
        &machine(json!({"addresses": [
            {"type": "Hostname", "address": "node-1"},
            {"type": "ExternalDNS", "address": "node.example.com"},
            {"type": "ExternalIP", "address": "203.0.113.9"},
            {"type": "InternalDNS", "address": "node.internal"},
            {"type": "InternalIP", "address": "10.0.0.2"},
            {"type": "InternalIP", "address": "10.0.0.10"},
        ]})),
        Some("eu-west-1a"),
    );
    let got: Vec<(AddressType, &str)> = d
        .outputs
        .addresses
        .as_deref()
        .expect("decoded")
        .iter()
        .map(|a| (a.kind, a.address.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (AddressType::InternalIp, "10.0.0.10"),
            (AddressType::InternalIp, "10.0.0.2"),
            (AddressType::InternalDns, "node.internal"),
            (AddressType::ExternalIp, "203.0.113.9"),
            (AddressType::ExternalDns, "node.example.com"),
            (AddressType::Hostname, "node-1"),
        ]
    );
}

#[test]
fn null_addresses_are_pending_and_empty_addresses_are_meaningful() {
    let d = decode_machine_outputs(&machine(json!({"addresses": null})), Some("eu-west-1a"));
    assert_eq!(d.verdict.pending, vec!["addresses"]);
    let d = decode_machine_outputs(&machine(json!({"addresses": []})), Some("eu-west-1a"));
    assert!(d.verdict.is_valid());
    assert_eq!(d.outputs.addresses, Some(vec![]));
}

// ---- failure_domain and interruptible -----------------------------------------------------------

#[test]
fn failure_domain_must_equal_the_requested_one() {
    let d = decode_machine_outputs(&machine(json!({})), Some("eu-west-1b"));
    assert_eq!(d.verdict.reason(), OutputsReason::FailureDomainMismatch);
    assert_eq!(d.verdict.status(), ConditionStatus::False);
    assert_eq!(d.outputs.failure_domain, None);
}

#[test]
fn a_requested_failure_domain_with_a_null_output_is_pending_not_a_mismatch() {
    for output in [json!(null), json!(""), json!("<absent>")] {
        let d = decode_machine_outputs(
            &machine(json!({ "failure_domain": output })),
            Some("eu-west-1b"),
        );
        assert_eq!(
            d.verdict.reason(),
            OutputsReason::OutputsPending,
            "{output}"
        );
        assert_eq!(d.verdict.pending, vec!["failure_domain"], "{output}");
        assert!(d.verdict.violations.is_empty(), "{output}");
        assert_eq!(d.outputs.failure_domain, None);
    }
}

#[test]
fn failure_domain_is_free_when_none_was_requested() {
    let d = decode_machine_outputs(&machine(json!({})), None);
    assert!(d.verdict.is_valid());
    assert_eq!(d.outputs.failure_domain.as_deref(), Some("eu-west-1a"));
    let d = decode_machine_outputs(&machine(json!({"failure_domain": null})), None);
    assert!(d.verdict.is_valid());
    assert_eq!(d.outputs.failure_domain, None);
}

#[test]
fn failure_domain_is_1_to_256_characters() {
    let d = decode_machine_outputs(&machine(json!({"failure_domain": "z".repeat(257)})), None);
    assert_eq!(
        rules_of(&d),
        vec![("failure_domain".into(), Rule::Length { min: 1, max: 256 })]
    );
}

#[test]
fn interruptible_null_is_false() {
    let d = decode_machine_outputs(&machine(json!({"interruptible": null})), Some("eu-west-1a"));
    assert!(d.verdict.is_valid());
    assert!(!d.outputs.interruptible);
    let d = decode_machine_outputs(&machine(json!({"interruptible": true})), Some("eu-west-1a"));
    assert!(d.outputs.interruptible);
}

#[test]
fn interruptible_must_be_a_bool() {
    let d = decode_machine_outputs(
        &machine(json!({"interruptible": "yes"})),
        Some("eu-west-1a"),
    );
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
}

// ---- cluster --------------------------------------------------------------------------------------

#[test]
fn failure_domains_are_a_list_of_objects() {
    let d = decode_cluster_outputs(&cluster(json!({"failure_domains": {"a": {}}})));
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
    let d = decode_cluster_outputs(&cluster(json!({"failure_domains": ["a"]})));
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
}

#[test]
fn failure_domain_names_are_unique() {
    let d = decode_cluster_outputs(&cluster(
        json!({"failure_domains": [{"name": "a"}, {"name": "a"}]}),
    ));
    assert_eq!(
        rules_of(&d),
        vec![("failure_domains[1].name".into(), Rule::DuplicateName)]
    );
}

#[test]
fn failure_domain_control_plane_defaults_to_true() {
    let d = decode_cluster_outputs(&cluster(json!({"failure_domains": [
        {"name": "b", "control_plane": false, "attributes": {"zone": "b"}},
        {"name": "a"},
        {"name": "c", "control_plane": null},
    ]})));
    assert!(d.verdict.is_valid(), "{:?}", d.verdict);
    let domains = d.outputs.failure_domains.expect("decoded");
    let flags: Vec<(&str, bool)> = domains
        .iter()
        .map(|f| (f.name.as_str(), f.control_plane))
        .collect();
    assert_eq!(flags, vec![("a", true), ("b", false), ("c", true)]);
    assert_eq!(
        domains[1].attributes.get("zone").map(String::as_str),
        Some("b")
    );
}

#[test]
fn failure_domains_have_at_most_100_entries() {
    let many: Vec<Value> = (0..101)
        .map(|i| json!({"name": format!("fd-{i}")}))
        .collect();
    let d = decode_cluster_outputs(&cluster(json!({ "failure_domains": many })));
    assert_eq!(
        rules_of(&d),
        vec![("failure_domains".into(), Rule::TooManyItems { max: 100 })]
    );
}

#[test]
fn failure_domain_names_are_1_to_256_characters() {
    let d = decode_cluster_outputs(&cluster(json!({"failure_domains": [{"name": ""}]})));
    assert_eq!(
        rules_of(&d),
        vec![(
            "failure_domains[0].name".into(),
            Rule::Length { min: 1, max: 256 }
        )]
    );
}

#[test]
fn failure_domain_attributes_are_a_map_of_strings() {
    let d = decode_cluster_outputs(&cluster(
        json!({"failure_domains": [{"name": "a", "attributes": {"n": 1}}]}),
    ));
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
}

#[test]
fn null_and_empty_failure_domains_both_clear_the_field() {
    for value in [json!(null), json!([])] {
        let d = decode_cluster_outputs(&cluster(json!({ "failure_domains": value })));
        assert!(d.verdict.is_valid());
        assert_eq!(d.outputs.failure_domains, Some(vec![]));
    }
}

#[test]
fn control_plane_endpoint_needs_host_and_port_together() {
    for half in [
        json!({"host": "api.example.com"}),
        json!({"port": 6443}),
        json!({"host": "", "port": 6443}),
        json!({"host": "api.example.com", "port": 0}),
    ] {
        let d = decode_cluster_outputs(&cluster(json!({ "control_plane_endpoint": half })));
        assert_eq!(
            rules_of(&d),
            vec![("control_plane_endpoint".into(), Rule::EndpointHalfSet)]
        );
    }
    let d = decode_cluster_outputs(&cluster(json!({})));
    let endpoint = d.outputs.control_plane_endpoint.expect("decoded");
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        ("api.example.com", 6443)
    );
}

#[test]
fn null_control_plane_endpoint_is_allowed() {
    for value in [json!(null), json!({"host": null, "port": null})] {
        let d = decode_cluster_outputs(&cluster(json!({ "control_plane_endpoint": value })));
        assert!(d.verdict.is_valid());
        assert_eq!(d.outputs.control_plane_endpoint, None);
    }
}

#[test]
fn control_plane_endpoint_port_is_1_to_65535_and_host_1_to_512() {
    let d = decode_cluster_outputs(&cluster(
        json!({"control_plane_endpoint": {"host": "h", "port": 65536}}),
    ));
    assert_eq!(
        rules_of(&d),
        vec![(
            "control_plane_endpoint.port".into(),
            Rule::IntegerOutOfRange { min: 1, max: 65535 }
        )]
    );
    let d = decode_cluster_outputs(&cluster(
        json!({"control_plane_endpoint": {"host": "h".repeat(513), "port": 6443}}),
    ));
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
}

#[test]
fn exports_must_be_canonicalizable() {
    let d = decode_cluster_outputs(&cluster(json!({"exports": {"ratio": 0.5}})));
    assert_eq!(
        rules_of(&d),
        vec![(
            "exports".into(),
            Rule::NotCanonicalizable {
                path: "$.ratio".into()
            }
        )]
    );
    assert_eq!(d.outputs.exports, None);
    let d = decode_cluster_outputs(&cluster(json!({"exports": {"n": 3, "s": "0.5"}})));
    assert!(d.verdict.is_valid());
}

#[test]
fn null_exports_are_pending() {
    let d = decode_cluster_outputs(&cluster(json!({"exports": null})));
    assert_eq!(d.verdict.pending, vec!["exports"]);
}

// ---- machine pool ---------------------------------------------------------------------------------

#[test]
fn provider_id_list_is_sorted_and_deduplicated() {
    let d = decode_machinepool_outputs(&pool(
        json!({"provider_id_list": ["p:///c", "p:///a", "p:///c", "p:///b"]}),
    ));
    assert!(d.verdict.is_valid());
    assert_eq!(
        d.outputs.provider_id_list,
        Some(vec!["p:///a".into(), "p:///b".into(), "p:///c".into()])
    );
}

#[test]
fn provider_id_list_has_at_most_10000_distinct_entries() {
    let ten_thousand: Vec<String> = (0..10_000).map(|i| format!("p:///{i}")).collect();
    let mut with_duplicates = ten_thousand.clone();
    with_duplicates.push("p:///0".into());
    let d = decode_machinepool_outputs(&pool(json!({ "provider_id_list": with_duplicates })));
    assert!(d.verdict.is_valid());
    let mut too_many = ten_thousand;
    too_many.push("p:///extra".into());
    let d = decode_machinepool_outputs(&pool(json!({ "provider_id_list": too_many })));
    assert_eq!(
        rules_of(&d),
        vec![(
            "provider_id_list".into(),
            Rule::TooManyItems { max: 10_000 }
        )]
    );
}

#[test]
fn provider_id_list_entries_are_1_to_512_characters() {
    let d = decode_machinepool_outputs(&pool(json!({"provider_id_list": ["ok", ""]})));
    assert_eq!(
        rules_of(&d),
        vec![(
            "provider_id_list[1]".into(),
            Rule::Length { min: 1, max: 512 }
        )]
    );
}

#[test]
fn null_provider_id_list_is_pending() {
    let d = decode_machinepool_outputs(&pool(json!({"provider_id_list": null})));
    assert_eq!(d.verdict.pending, vec!["provider_id_list"]);
}

#[test]
fn pool_provider_id_is_optional() {
    let d = decode_machinepool_outputs(&pool(json!({"provider_id": null})));
    assert!(d.verdict.is_valid());
    assert_eq!(d.outputs.provider_id, None);
}

#[test]
fn explicit_zero_replicas_stay_zero() {
    let d = decode_machinepool_outputs(&pool(json!({"replicas": 0, "provider_id_list": []})));
    assert!(d.verdict.is_valid());
    assert_eq!(d.outputs.replicas, Some(0));
    let d = decode_machinepool_outputs(&pool(json!({"replicas": null})));
    assert_eq!(d.outputs.replicas, None);
    assert_eq!(d.verdict.pending, vec!["replicas"]);
}

#[test]
fn replicas_are_a_non_negative_int32() {
    for bad in [json!(-1), json!(2.5), json!(2_147_483_648_i64), json!("3")] {
        let d = decode_machinepool_outputs(&pool(json!({ "replicas": bad })));
        assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid, "{bad}");
    }
}

#[test]
fn instances_are_mapped_field_by_field() {
    let d = decode_machinepool_outputs(&pool(json!({"instances": [{
        "provider_id": "p:///a",
        "instance_id": "i-1",
        "addresses": [{"type": "Hostname", "address": "h"}, {"type": "InternalIP", "address": "10.0.0.1"}],
        "failure_domain": "",
        "state": "degraded",
        "extra": "ignored"
    }]})));
    assert!(d.verdict.is_valid(), "{:?}", d.verdict);
    let instance = &d.outputs.instances.expect("decoded")[0];
    assert_eq!(instance.provider_id, "p:///a");
    assert_eq!(instance.instance_id.as_deref(), Some("i-1"));
    assert_eq!(instance.addresses[0].kind, AddressType::InternalIp);
    assert_eq!(instance.failure_domain, None);
    assert_eq!(instance.state, Some(HealthState::Degraded));
}

#[test]
fn instances_are_validated_like_machine_outputs() {
    let d = decode_machinepool_outputs(&pool(json!({"instances": [
        {"state": "running"},
        {"provider_id": "p:///b", "state": "asleep"},
        {"provider_id": "p:///c", "addresses": [{"type": "Other", "address": "x"}]},
    ]})));
    let paths: Vec<String> = rules_of(&d).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        vec![
            "instances[0].provider_id",
            "instances[1].state",
            "instances[2].addresses[0].type"
        ]
    );
}

#[test]
fn instances_are_capped_at_1000() {
    let many: Vec<Value> = (0..1_005)
        .map(|i| json!({"provider_id": format!("p:///{i:05}")}))
        .collect();
    let d = decode_machinepool_outputs(&pool(json!({ "instances": many })));
    assert_eq!(d.verdict.reason(), OutputsReason::InstancesTruncated);
    assert_eq!(d.verdict.status(), ConditionStatus::True);
    assert_eq!(d.verdict.instances_truncated_from, Some(1_005));
    let kept = d.outputs.instances.expect("decoded");
    assert_eq!(kept.len(), 1_000);
    assert_eq!(kept[0].provider_id, "p:///00000");
}

#[test]
fn null_instances_are_none() {
    let d = decode_machinepool_outputs(&pool(json!({"instances": null})));
    assert!(d.verdict.is_valid());
    assert_eq!(d.outputs.instances, Some(vec![]));
}

// ---- secrecy ---------------------------------------------------------------------------------------

#[test]
fn violation_messages_never_carry_output_values() {
    let secret = "hunter2-very-secret";
    let d = decode_cluster_outputs(&cluster(json!({
        "control_plane_endpoint": {"host": secret},
        "failure_domains": [{"name": secret}, {"name": secret}, {"name": 7}],
        "exports": {"password": secret, "ratio": 1.5},
        "health": {"state": secret, "healthy": secret},
    })));
    let message = d.verdict.message();
    assert_eq!(d.verdict.reason(), OutputsReason::OutputsInvalid);
    assert!(!message.contains(secret), "{message}");
    assert!(!format!("{:?}", d.verdict).contains(secret));
}

// ---- never panics ------------------------------------------------------------------------------------

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            Just("running".to_owned()),
            Just("InternalIP".to_owned()),
            Just(String::new()),
            ".{0,12}"
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("state".to_owned()),
                    Just("healthy".to_owned()),
                    Just("name".to_owned()),
                    Just("type".to_owned()),
                    Just("address".to_owned()),
                    Just("host".to_owned()),
                    Just("port".to_owned()),
                    Just("provider_id".to_owned()),
                    "[a-z_]{1,8}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_outputs() -> impl Strategy<Value = RootOutputs> {
    let names = prop_oneof![
        Just("provider_id"),
        Just("addresses"),
        Just("failure_domain"),
        Just("interruptible"),
        Just("health"),
        Just("control_plane_endpoint"),
        Just("failure_domains"),
        Just("exports"),
        Just("provider_id_list"),
        Just("replicas"),
        Just("instances"),
    ];
    prop::collection::btree_map(names, arb_json(), 0..11).prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.to_owned(), RootOutput::new(v)))
            .collect()
    })
}

proptest! {
    #[test]
    fn decode_never_panics(outputs in arb_outputs(), requested in proptest::option::of(".{0,4}")) {
        let m = decode_machine_outputs(&outputs, requested.as_deref());
        let c = decode_cluster_outputs(&outputs);
        let p = decode_machinepool_outputs(&outputs);
        // The verdict always has a reason and a message.
        let _ = (m.verdict.message(), c.verdict.message(), p.verdict.message());
        if let Some(h) = m.outputs.health { let _ = h.condition(); }
    }
}
