//! Shared builders and schema loading for the render, hash and schema tests.
#![allow(dead_code, clippy::unwrap_used, clippy::missing_panics_doc)]

use contract::inputs::{
    ApiEndpointSource, BootstrapSource, ClusterHandoff, ClusterInputsSource, ClusterNetworkSource,
    MachineInputsSource, MachinePoolInputsSource, ObjectSource,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;

/// The image every example runs.
pub const IMAGE: &str = "ghcr.io/example/noop-module:v1.0.0";

pub fn object(name: &str) -> ObjectSource {
    ObjectSource {
        cluster_name: "prod".into(),
        namespace: "team-a".into(),
        object_name: name.into(),
        cloned_from_name: None,
    }
}

pub fn cluster_source() -> ClusterInputsSource {
    ClusterInputsSource {
        object: object("prod"),
        topology_version: Some("v1.36.2".into()),
        cluster_endpoint: Some(ApiEndpointSource {
            host: "api.prod.example.com".into(),
            port: 6443,
        }),
        object_endpoint: None,
        endpoint_source: Some("user".into()),
        control_plane_initialized: Some(true),
        durable_control_plane_initialized: None,
        cluster_network: Some(ClusterNetworkSource {
            pods: Some(vec!["192.168.0.0/16".into()]),
            services: Some(vec!["10.96.0.0/12".into()]),
            service_domain: Some("cluster.local".into()),
            api_server_port: Some(6443),
        }),
    }
}

pub fn exports() -> Value {
    json!({ "network_id": "net-1", "note": "a<b & c>d" })
}

pub fn bootstrap() -> BootstrapSource {
    BootstrapSource {
        value: b"#cloud-config\nruncmd: []\n".to_vec(),
        format: Some(b"cloud-config".to_vec()),
    }
}

pub fn machine_source() -> MachineInputsSource {
    MachineInputsSource {
        object: ObjectSource {
            cloned_from_name: Some("prod-md-0".into()),
            ..object("prod-md-0-abcde")
        },
        machine_name: "prod-md-0-abcde-xyz12".into(),
        bootstrap: bootstrap(),
        failure_domain: None,
        version: Some("v1.36.2".into()),
        control_plane: false,
        cluster: ClusterHandoff::State {
            exports: exports(),
            failure_domains: vec!["zone-a".into()],
        },
    }
}

pub fn pool_source() -> MachinePoolInputsSource {
    MachinePoolInputsSource {
        object: object("prod-pool-0"),
        machinepool_name: "prod-pool-0".into(),
        spec_replicas: Some(3),
        status_replicas: None,
        autoscaler_min_size: None,
        autoscaler_max_size: None,
        bootstrap: bootstrap(),
        failure_domains: None,
        version: Some("v1.36.2".into()),
        node_labels: Some(BTreeMap::from([("workload".into(), "batch".into())])),
        cluster: ClusterHandoff::State {
            exports: exports(),
            failure_domains: vec!["zone-b".into(), "zone-a".into()],
        },
    }
}

/// Parses a rendered file.
pub fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// The repository's `schemas/` directory.
pub fn schemas_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schemas")
}

pub fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every schema file name.
pub const SCHEMAS: [&str; 7] = [
    "definitions",
    "cluster-inputs",
    "cluster-outputs",
    "machine-inputs",
    "machine-outputs",
    "machinepool-inputs",
    "machinepool-outputs",
];

/// Every schema, by file name, registered under its `$id` so `definitions.json` references
/// resolve locally.
pub static REGISTRY: LazyLock<jsonschema::Registry<'static>> = LazyLock::new(|| {
    let mut builder = jsonschema::Registry::new();
    for name in SCHEMAS {
        let schema = read_json(&schemas_dir().join(format!("{name}.json")));
        let id = schema["$id"].as_str().unwrap().to_owned();
        builder = builder.add(id, schema).unwrap();
    }
    builder.prepare().unwrap()
});

/// The schema document of `name`.
pub fn schema(name: &str) -> Value {
    read_json(&schemas_dir().join(format!("{name}.json")))
}

/// A validator for schema `name` (offline: only the registered documents resolve).
pub fn validator(name: &str) -> jsonschema::Validator {
    validator_for(&schema(name))
}

/// A validator for any schema that refers to the registered documents.
pub fn validator_for(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .offline()
        .with_registry(&REGISTRY)
        .build(schema)
        .unwrap()
}

/// Every error of `instance` against `validator`, as instance paths.
pub fn error_paths(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| e.instance_path().to_string())
        .collect()
}

/// Proptest strategies for sources that hold what the Kubernetes API can hold (the CAPI
/// markers), so every render must satisfy the role's input schema.
pub mod strategies {
    use super::*;
    use contract::inputs::ClusterHandoff;
    use proptest::prelude::*;
    use serde_json::Map;

    pub fn name() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9-]{0,30}"
    }

    pub fn object_source() -> impl Strategy<Value = ObjectSource> {
        (name(), name(), name(), proptest::option::of(name())).prop_map(
            |(cluster_name, namespace, object_name, cloned_from_name)| ObjectSource {
                cluster_name,
                namespace,
                object_name,
                cloned_from_name,
            },
        )
    }

    /// JSON with integers only (what a hashable `exports` holds).
    pub fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec((".{0,8}", inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    fn endpoint() -> impl Strategy<Value = Option<ApiEndpointSource>> {
        proptest::option::of(
            ("[a-z0-9.]{0,20}", prop_oneof![-5..70_000i32, Just(6443)])
                .prop_map(|(host, port)| ApiEndpointSource { host, port }),
        )
    }

    fn version() -> impl Strategy<Value = Option<String>> {
        proptest::option::of("(v[0-9]\\.[0-9]{1,2}\\.[0-9](\\+rke2r[0-9])?)?")
    }

    fn cidrs() -> impl Strategy<Value = Option<Vec<String>>> {
        proptest::option::of(proptest::collection::vec(
            "[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2}",
            1..4,
        ))
    }

    pub fn cluster_source() -> impl Strategy<Value = ClusterInputsSource> {
        (
            object_source(),
            version(),
            endpoint(),
            endpoint(),
            proptest::option::of(prop_oneof![
                Just("user".to_owned()),
                Just("module".to_owned()),
                "[a-z]{0,6}"
            ]),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(
                (
                    cidrs(),
                    cidrs(),
                    proptest::option::of("[a-z.]{0,20}"),
                    proptest::option::of(-2..70_000i32),
                )
                    .prop_map(
                        |(pods, services, service_domain, api_server_port)| ClusterNetworkSource {
                            pods,
                            services,
                            service_domain,
                            api_server_port,
                        },
                    ),
            ),
        )
            .prop_map(
                |(
                    object,
                    topology_version,
                    cluster_endpoint,
                    object_endpoint,
                    endpoint_source,
                    cpi,
                    durable,
                    cluster_network,
                )| {
                    ClusterInputsSource {
                        object,
                        topology_version,
                        cluster_endpoint,
                        object_endpoint,
                        endpoint_source,
                        control_plane_initialized: cpi,
                        durable_control_plane_initialized: durable,
                        cluster_network,
                    }
                },
            )
    }

    pub fn bootstrap() -> impl Strategy<Value = BootstrapSource> {
        (
            proptest::collection::vec(any::<u8>(), 0..200),
            proptest::option::of(prop_oneof![
                Just(b"cloud-config".to_vec()),
                Just(b"ignition".to_vec()),
                Just(Vec::new()),
                "[a-z-]{1,10}".prop_map(String::into_bytes),
            ]),
        )
            .prop_map(|(value, format)| BootstrapSource { value, format })
    }

    fn domains(max: usize) -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec("[a-z0-9-]{1,20}", 0..max)
    }

    pub fn handoff() -> impl Strategy<Value = ClusterHandoff> {
        prop_oneof![
            (json_value(), domains(8)).prop_map(|(exports, failure_domains)| {
                ClusterHandoff::State {
                    exports,
                    failure_domains,
                }
            }),
            domains(8).prop_map(|status_failure_domains| ClusterHandoff::ExternallyManaged {
                status_failure_domains
            }),
        ]
    }

    pub fn machine_source() -> impl Strategy<Value = MachineInputsSource> {
        (
            object_source(),
            name(),
            bootstrap(),
            proptest::option::of("[a-z0-9-]{0,20}"),
            version(),
            any::<bool>(),
            handoff(),
        )
            .prop_map(
                |(
                    object,
                    machine_name,
                    bootstrap,
                    failure_domain,
                    version,
                    control_plane,
                    cluster,
                )| {
                    MachineInputsSource {
                        object,
                        machine_name,
                        bootstrap,
                        failure_domain,
                        version,
                        control_plane,
                        cluster,
                    }
                },
            )
    }

    fn annotation() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(prop_oneof!["[0-9]{1,3}", "-?[0-9a-z ]{0,4}"])
    }

    pub fn pool_source() -> impl Strategy<Value = MachinePoolInputsSource> {
        (
            (
                object_source(),
                name(),
                proptest::option::of(any::<i32>()),
                proptest::option::of(0..i32::MAX),
            ),
            (annotation(), annotation(), bootstrap()),
            (
                proptest::option::of(domains(8)),
                version(),
                proptest::option::of(proptest::collection::btree_map(
                    "[a-z./-]{1,20}",
                    ".{0,10}",
                    0..4,
                )),
                handoff(),
            ),
        )
            .prop_map(
                |(
                    (object, machinepool_name, spec_replicas, status_replicas),
                    (autoscaler_min_size, autoscaler_max_size, bootstrap),
                    (failure_domains, version, node_labels, cluster),
                )| MachinePoolInputsSource {
                    object,
                    machinepool_name,
                    spec_replicas,
                    status_replicas,
                    autoscaler_min_size,
                    autoscaler_max_size,
                    bootstrap,
                    failure_domains,
                    version,
                    node_labels,
                    cluster,
                },
            )
    }
}
