//! Properties of rendering: every render satisfies its role's input schema, and no input makes
//! rendering panic.
#![allow(clippy::unwrap_used)]

mod render_support;

use contract::inputs::{
    ApiEndpointSource, BootstrapSource, ClusterHandoff, ClusterInputsSource, ClusterNetworkSource,
    MachineInputsSource, MachinePoolInputsSource, ObjectSource,
};
use contract::render::{render_cluster, render_machine, render_machinepool};
use contract::variables::UserVariables;
use proptest::prelude::*;
use render_support::{IMAGE, error_paths, parse, strategies, validator};
use std::sync::LazyLock;

static CLUSTER: LazyLock<jsonschema::Validator> = LazyLock::new(|| validator("cluster-inputs"));
static MACHINE: LazyLock<jsonschema::Validator> = LazyLock::new(|| validator("machine-inputs"));
static POOL: LazyLock<jsonschema::Validator> = LazyLock::new(|| validator("machinepool-inputs"));

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_rendered_cluster_tfvars_satisfies_the_cluster_input_schema(source in strategies::cluster_source()) {
        let rendered = render_cluster(&source, &UserVariables::none(), IMAGE).unwrap();
        let errors = error_paths(&CLUSTER, &parse(&rendered.tfvars_json));
        prop_assert!(errors.is_empty(), "{:?}", errors);
    }

    #[test]
    fn every_rendered_machine_tfvars_satisfies_the_machine_input_schema(source in strategies::machine_source()) {
        let rendered = render_machine(&source, &UserVariables::none(), IMAGE).unwrap();
        let errors = error_paths(&MACHINE, &parse(&rendered.tfvars_json));
        prop_assert!(errors.is_empty(), "{:?}", errors);
    }

    #[test]
    fn every_rendered_machinepool_tfvars_satisfies_the_machinepool_input_schema(source in strategies::pool_source()) {
        let rendered = render_machinepool(&source, &UserVariables::none(), IMAGE).unwrap();
        let errors = error_paths(&POOL, &parse(&rendered.tfvars_json));
        prop_assert!(errors.is_empty(), "{:?}", errors);
    }

    #[test]
    fn rendering_never_panics(
        strings in proptest::collection::vec(any::<String>(), 12),
        ints in proptest::collection::vec(any::<i32>(), 6),
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
        format in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        exports in strategies::json_value(),
        float in any::<f64>(),
    ) {
        let object = ObjectSource {
            cluster_name: strings[0].clone(),
            namespace: strings[1].clone(),
            object_name: strings[2].clone(),
            cloned_from_name: Some(strings[3].clone()),
        };
        let endpoint = ApiEndpointSource { host: strings[4].clone(), port: ints[0] };
        let cluster = ClusterInputsSource {
            object: object.clone(),
            topology_version: Some(strings[5].clone()),
            cluster_endpoint: Some(endpoint.clone()),
            object_endpoint: Some(endpoint),
            endpoint_source: Some(strings[6].clone()),
            control_plane_initialized: None,
            durable_control_plane_initialized: Some(true),
            cluster_network: Some(ClusterNetworkSource {
                pods: Some(vec![strings[7].clone()]),
                services: None,
                service_domain: Some(strings[8].clone()),
                api_server_port: Some(ints[1]),
            }),
        };
        let _ = render_cluster(&cluster, &UserVariables::none(), &strings[9]);
        let mut exports = exports;
        if let serde_json::Value::Object(map) = &mut exports {
            map.insert("f".into(), serde_json::Number::from_f64(float).map_or(serde_json::Value::Null, serde_json::Value::Number));
        }
        let handoff = ClusterHandoff::State { exports, failure_domains: vec![strings[10].clone()] };
        let bootstrap = BootstrapSource { value: bytes, format };
        let machine = MachineInputsSource {
            object: object.clone(),
            machine_name: strings[11].clone(),
            bootstrap: bootstrap.clone(),
            failure_domain: Some(strings[10].clone()),
            version: Some(strings[5].clone()),
            control_plane: true,
            cluster: handoff.clone(),
        };
        let _ = render_machine(&machine, &UserVariables::none(), IMAGE);
        let pool = MachinePoolInputsSource {
            object,
            machinepool_name: strings[11].clone(),
            spec_replicas: Some(ints[2]),
            status_replicas: Some(ints[3]),
            autoscaler_min_size: Some(ints[4].to_string()),
            autoscaler_max_size: Some(strings[8].clone()),
            bootstrap,
            failure_domains: Some(vec![strings[7].clone()]),
            version: None,
            node_labels: Some([(strings[6].clone(), strings[4].clone())].into()),
            cluster: handoff,
        };
        let _ = render_machinepool(&pool, &UserVariables::none(), IMAGE);
    }
}
