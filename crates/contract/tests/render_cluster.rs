//! The cluster role's value rules (Cluster Role "Inputs", Job Inputs §2), one test per rule.
#![allow(clippy::unwrap_used, clippy::unnecessary_wraps)]

mod render_support;

use contract::inputs::{
    ApiEndpointSource, ClusterInputsSource, ClusterNetworkSource, EndpointSource, ObjectSource,
    cluster_inputs, durable_control_plane_initialized, endpoint_source_to_record,
    latch_control_plane_initialized,
};
use contract::render::{render_cluster, tfvars_json};
use contract::variables::UserVariables;
use render_support::{IMAGE, cluster_source, parse};
use serde_json::{Value, json};

fn tfvars(source: &ClusterInputsSource) -> Value {
    parse(&tfvars_json(
        &cluster_inputs(source).into(),
        &UserVariables::none(),
    ))
}

fn endpoint(host: &str, port: i32) -> Option<ApiEndpointSource> {
    Some(ApiEndpointSource {
        host: host.into(),
        port,
    })
}

#[test]
fn captf_contract_is_the_contract_version() {
    assert_eq!(tfvars(&cluster_source())["captf_contract"], "v1alpha1");
}

#[test]
fn captf_cluster_and_captf_object_carry_only_kind_name_and_namespace() {
    let v = tfvars(&cluster_source());
    assert_eq!(
        v["captf_cluster"],
        json!({"name": "prod", "namespace": "team-a"})
    );
    assert_eq!(
        v["captf_object"],
        json!({"kind": "TerraformCluster", "name": "prod", "namespace": "team-a"})
    );
}

#[test]
fn captf_tags_have_exactly_the_six_fixed_keys() {
    let v = tfvars(&cluster_source());
    assert_eq!(
        v["captf_tags"],
        json!({
            "captf.io/cluster": "prod",
            "captf.io/kind": "TerraformCluster",
            "captf.io/managed-by": "captf",
            "captf.io/name": "prod",
            "captf.io/namespace": "team-a",
            "captf.io/template": ""
        })
    );
}

#[test]
fn captf_template_tag_is_the_cloned_from_name_annotation() {
    let source = ClusterInputsSource {
        object: ObjectSource {
            cloned_from_name: Some("prod-template".into()),
            ..cluster_source().object
        },
        ..cluster_source()
    };
    assert_eq!(
        tfvars(&source)["captf_tags"]["captf.io/template"],
        "prod-template"
    );
}

#[test]
fn captf_tags_cluster_key_names_the_cluster_not_the_object() {
    let source = ClusterInputsSource {
        object: ObjectSource {
            object_name: "prod-infra".into(),
            ..cluster_source().object
        },
        ..cluster_source()
    };
    let v = tfvars(&source);
    assert_eq!(v["captf_tags"]["captf.io/cluster"], "prod");
    assert_eq!(v["captf_tags"]["captf.io/name"], "prod-infra");
    assert_eq!(v["captf_cluster"]["name"], "prod");
    assert_eq!(v["captf_object"]["name"], "prod-infra");
}

#[test]
fn cluster_role_has_no_captf_cluster_outputs() {
    let rendered = render_cluster(&cluster_source(), &UserVariables::none(), IMAGE).unwrap();
    assert!(
        parse(&rendered.tfvars_json)
            .get("captf_cluster_outputs")
            .is_none()
    );
    let root = parse(&rendered.main_tf_json);
    assert!(root["variable"].get("captf_cluster_outputs").is_none());
    assert!(
        root["module"]["role"]
            .get("captf_cluster_outputs")
            .is_none()
    );
}

#[test]
fn control_plane_endpoint_is_the_cluster_endpoint_when_valid() {
    let source = ClusterInputsSource {
        cluster_endpoint: endpoint("api.prod.example.com", 6443),
        object_endpoint: endpoint("other.example.com", 443),
        endpoint_source: None,
        ..cluster_source()
    };
    assert_eq!(
        tfvars(&source)["control_plane_endpoint"],
        json!({"host": "api.prod.example.com", "port": 6443})
    );
}

#[test]
fn control_plane_endpoint_falls_back_to_a_valid_terraformcluster_endpoint() {
    let source = ClusterInputsSource {
        cluster_endpoint: endpoint("", 0),
        object_endpoint: endpoint("lb.example.com", 443),
        endpoint_source: None,
        ..cluster_source()
    };
    assert_eq!(
        tfvars(&source)["control_plane_endpoint"],
        json!({"host": "lb.example.com", "port": 443})
    );
}

#[test]
fn control_plane_endpoint_needs_host_and_port_both_set() {
    for (host, port) in [
        ("api.example.com", 0),
        ("", 6443),
        ("api.example.com", 70000),
    ] {
        let source = ClusterInputsSource {
            cluster_endpoint: endpoint(host, port),
            object_endpoint: endpoint(host, port),
            endpoint_source: None,
            ..cluster_source()
        };
        assert_eq!(
            tfvars(&source)["control_plane_endpoint"],
            Value::Null,
            "{host}:{port}"
        );
    }
}

#[test]
fn control_plane_endpoint_is_null_without_any_endpoint() {
    let source = ClusterInputsSource {
        cluster_endpoint: None,
        object_endpoint: None,
        endpoint_source: None,
        ..cluster_source()
    };
    assert_eq!(tfvars(&source)["control_plane_endpoint"], Value::Null);
}

#[test]
fn control_plane_endpoint_is_always_null_once_endpoint_source_is_module() {
    let source = ClusterInputsSource {
        cluster_endpoint: endpoint("lb-from-module.example.com", 6443),
        object_endpoint: endpoint("lb-from-module.example.com", 6443),
        endpoint_source: Some("module".into()),
        ..cluster_source()
    };
    assert_eq!(tfvars(&source)["control_plane_endpoint"], Value::Null);
}

#[test]
fn endpoint_source_user_is_recorded_before_the_first_apply_when_an_endpoint_is_valid() {
    let valid = endpoint("api.example.com", 6443);
    assert_eq!(
        endpoint_source_to_record(None, true, valid.as_ref(), None, false),
        Some(EndpointSource::User)
    );
    assert_eq!(
        endpoint_source_to_record(None, true, None, valid.as_ref(), false),
        Some(EndpointSource::User)
    );
    assert_eq!(
        endpoint_source_to_record(None, true, None, None, false),
        None
    );
    assert_eq!(
        endpoint_source_to_record(None, false, valid.as_ref(), None, false),
        None,
        "an endpoint that appears after the first apply is not a user endpoint"
    );
}

#[test]
fn endpoint_source_module_is_recorded_when_the_module_endpoint_is_copied() {
    assert_eq!(
        endpoint_source_to_record(None, false, None, None, true),
        Some(EndpointSource::Module)
    );
    assert_eq!(EndpointSource::Module.as_str(), "module");
    assert_eq!(EndpointSource::User.as_str(), "user");
}

#[test]
fn endpoint_source_never_changes_once_written() {
    let valid = endpoint("api.example.com", 6443);
    assert_eq!(
        endpoint_source_to_record(Some("user"), false, None, None, true),
        None
    );
    assert_eq!(
        endpoint_source_to_record(Some("module"), true, valid.as_ref(), None, false),
        None
    );
}

#[test]
fn kubernetes_version_is_the_topology_version_verbatim() {
    let source = ClusterInputsSource {
        topology_version: Some("v1.31.4+rke2r1".into()),
        ..cluster_source()
    };
    assert_eq!(tfvars(&source)["kubernetes_version"], "v1.31.4+rke2r1");
}

#[test]
fn kubernetes_version_is_null_without_a_topology() {
    let source = ClusterInputsSource {
        topology_version: None,
        ..cluster_source()
    };
    assert_eq!(tfvars(&source)["kubernetes_version"], Value::Null);
}

#[test]
fn control_plane_initialized_nil_is_false() {
    let source = ClusterInputsSource {
        control_plane_initialized: None,
        ..cluster_source()
    };
    assert_eq!(tfvars(&source)["control_plane_initialized"], false);
}

#[test]
fn control_plane_initialized_is_latched_by_the_durable_inputs_secret() {
    assert!(latch_control_plane_initialized(Some(false), Some(true)));
    assert!(latch_control_plane_initialized(None, Some(true)));
    assert!(latch_control_plane_initialized(Some(true), None));
    assert!(!latch_control_plane_initialized(Some(false), Some(false)));
    let source = ClusterInputsSource {
        control_plane_initialized: None,
        durable_control_plane_initialized: Some(true),
        ..cluster_source()
    };
    assert_eq!(tfvars(&source)["control_plane_initialized"], true);
}

#[test]
fn control_plane_initialized_latch_reads_the_durable_tfvars() {
    let rendered = render_cluster(&cluster_source(), &UserVariables::none(), IMAGE).unwrap();
    assert_eq!(
        durable_control_plane_initialized(rendered.tfvars_json.as_bytes()),
        Some(true)
    );
    assert_eq!(durable_control_plane_initialized(b"not json"), None);
    assert_eq!(durable_control_plane_initialized(b"{}"), None);
}

#[test]
fn cluster_network_is_null_when_the_cluster_sets_none() {
    for network in [None, Some(ClusterNetworkSource::default())] {
        let source = ClusterInputsSource {
            cluster_network: network,
            ..cluster_source()
        };
        assert_eq!(tfvars(&source)["cluster_network"], Value::Null);
    }
}

#[test]
fn cluster_network_renders_an_unset_cidr_list_as_empty_not_null() {
    let source = ClusterInputsSource {
        cluster_network: Some(ClusterNetworkSource {
            services: Some(vec!["10.96.0.0/12".into()]),
            ..ClusterNetworkSource::default()
        }),
        ..cluster_source()
    };
    assert_eq!(
        tfvars(&source)["cluster_network"],
        json!({
            "pods": [],
            "services": ["10.96.0.0/12"],
            "service_domain": null,
            "api_server_port": null
        })
    );
}

#[test]
fn cluster_network_renders_an_unset_scalar_as_null() {
    let source = ClusterInputsSource {
        cluster_network: Some(ClusterNetworkSource {
            service_domain: Some(String::new()),
            api_server_port: Some(0),
            pods: Some(vec!["192.168.0.0/16".into()]),
            services: None,
        }),
        ..cluster_source()
    };
    let network = &tfvars(&source)["cluster_network"];
    assert_eq!(network["service_domain"], Value::Null);
    assert_eq!(network["api_server_port"], Value::Null);
    assert_eq!(network["services"], json!([]));
}

#[test]
fn cluster_tfvars_match_the_book_example() {
    let expected = json!({
        "captf_contract": "v1alpha1",
        "captf_cluster": { "name": "prod", "namespace": "team-a" },
        "captf_object": { "kind": "TerraformCluster", "name": "prod", "namespace": "team-a" },
        "captf_tags": {
            "captf.io/cluster": "prod",
            "captf.io/kind": "TerraformCluster",
            "captf.io/managed-by": "captf",
            "captf.io/name": "prod",
            "captf.io/namespace": "team-a",
            "captf.io/template": ""
        },
        "control_plane_endpoint": { "host": "api.prod.example.com", "port": 6443 },
        "kubernetes_version": "v1.36.2",
        "control_plane_initialized": true,
        "cluster_network": {
            "pods": ["192.168.0.0/16"],
            "services": ["10.96.0.0/12"],
            "service_domain": "cluster.local",
            "api_server_port": 6443
        }
    });
    assert_eq!(tfvars(&cluster_source()), expected);
}
