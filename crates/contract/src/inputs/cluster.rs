//! The cluster role's inputs (spec: Cluster Role "Inputs", Job Inputs §2).

use super::{CommonInputs, ObjectSource, non_empty};
use crate::names::ObjectKind;
use serde::Serialize;
use serde_json::Value;

/// The longest endpoint host Cluster API accepts (`APIEndpoint.host`).
pub const MAX_ENDPOINT_HOST: usize = 512;

/// A Cluster API `APIEndpoint` as read from a spec, Go zero values included (`""`, `0`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiEndpointSource {
    /// `host`; `""` when unset.
    pub host: String,
    /// `port`; `0` when unset.
    pub port: i32,
}

impl ApiEndpointSource {
    /// The endpoint when it is valid: host and port both set (Cluster API's `IsValid`), within
    /// the API markers (host 1–512 characters, port 1–65535).
    pub fn valid(&self) -> Option<ControlPlaneEndpoint> {
        let port = u16::try_from(self.port).ok().filter(|p| *p != 0)?;
        let len = self.host.chars().count();
        (1..=MAX_ENDPOINT_HOST)
            .contains(&len)
            .then(|| ControlPlaneEndpoint {
                host: self.host.clone(),
                port,
            })
    }
}

/// The value of the `captf.io/endpoint-source` annotation on a TerraformCluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointSource {
    /// A user (or a control-plane provider) supplied the endpoint before the first apply.
    User,
    /// The module created it; the input then stays `null` for the life of the object.
    Module,
}

impl EndpointSource {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Module => "module",
        }
    }

    /// Reads the annotation; any value other than `user` or `module` is not a known provenance.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "user" => Some(Self::User),
            "module" => Some(Self::Module),
            _ => None,
        }
    }
}

/// `Cluster.spec.clusterNetwork` as read, Go zero values included.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterNetworkSource {
    /// `pods.cidrBlocks`; `None` when `pods` is unset.
    pub pods: Option<Vec<String>>,
    /// `services.cidrBlocks`; `None` when `services` is unset.
    pub services: Option<Vec<String>>,
    /// `serviceDomain`; `""` counts as unset.
    pub service_domain: Option<String>,
    /// `apiServerPort`; `0` counts as unset.
    pub api_server_port: Option<i32>,
}

/// Everything the cluster role's inputs are built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInputsSource {
    /// The TerraformCluster and its Cluster.
    pub object: ObjectSource,
    /// `Cluster.spec.topology.version`; `None` without a ClusterClass.
    pub topology_version: Option<String>,
    /// `Cluster.spec.controlPlaneEndpoint`.
    pub cluster_endpoint: Option<ApiEndpointSource>,
    /// `TerraformCluster.spec.controlPlaneEndpoint`.
    pub object_endpoint: Option<ApiEndpointSource>,
    /// The TerraformCluster's `captf.io/endpoint-source` annotation, raw.
    pub endpoint_source: Option<String>,
    /// `Cluster.status.initialization.controlPlaneInitialized` (nil is `None`).
    pub control_plane_initialized: Option<bool>,
    /// `control_plane_initialized` as last rendered into the durable inputs Secret, if that
    /// Secret exists (see [`durable_control_plane_initialized`]).
    pub durable_control_plane_initialized: Option<bool>,
    /// `Cluster.spec.clusterNetwork`; `None` when the Cluster has none.
    pub cluster_network: Option<ClusterNetworkSource>,
}

/// `control_plane_endpoint` when non-null.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlPlaneEndpoint {
    /// 1–512 characters.
    pub host: String,
    /// 1–65535.
    pub port: u16,
}

/// `cluster_network` when non-null: every attribute is always present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterNetwork {
    /// Pod CIDR blocks; `[]` when unset.
    pub pods: Vec<String>,
    /// Service CIDR blocks; `[]` when unset.
    pub services: Vec<String>,
    /// `null` when unset.
    pub service_domain: Option<String>,
    /// `null` when unset.
    pub api_server_port: Option<u16>,
}

/// The cluster role's inputs, in `terraform.tfvars.json` order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterInputs {
    /// `captf_contract`, `captf_cluster`, `captf_object`, `captf_tags`.
    #[serde(flatten)]
    pub common: CommonInputs,
    /// See [`select_control_plane_endpoint`].
    pub control_plane_endpoint: Option<ControlPlaneEndpoint>,
    /// `Cluster.spec.topology.version`, verbatim; `null` without a ClusterClass.
    pub kubernetes_version: Option<String>,
    /// See [`latch_control_plane_initialized`].
    pub control_plane_initialized: bool,
    /// See [`ClusterNetwork`]; `null` when the Cluster sets no network attribute.
    pub cluster_network: Option<ClusterNetwork>,
}

/// Builds a TerraformCluster's inputs. Infallible: every source value has a rendering.
pub fn cluster_inputs(source: &ClusterInputsSource) -> ClusterInputs {
    ClusterInputs {
        common: CommonInputs::new(ObjectKind::Cluster, &source.object),
        control_plane_endpoint: select_control_plane_endpoint(
            source.cluster_endpoint.as_ref(),
            source.object_endpoint.as_ref(),
            source.endpoint_source.as_deref(),
        ),
        kubernetes_version: non_empty(source.topology_version.as_ref()),
        control_plane_initialized: latch_control_plane_initialized(
            source.control_plane_initialized,
            source.durable_control_plane_initialized,
        ),
        cluster_network: source.cluster_network.as_ref().and_then(cluster_network),
    }
}

/// `control_plane_endpoint`: always `null` once `captf.io/endpoint-source` is `module`;
/// otherwise `Cluster.spec.controlPlaneEndpoint` when valid, else a valid
/// `TerraformCluster.spec.controlPlaneEndpoint`, else `null`.
pub fn select_control_plane_endpoint(
    cluster: Option<&ApiEndpointSource>,
    object: Option<&ApiEndpointSource>,
    endpoint_source: Option<&str>,
) -> Option<ControlPlaneEndpoint> {
    if endpoint_source.and_then(EndpointSource::parse) == Some(EndpointSource::Module) {
        return None;
    }
    cluster
        .and_then(ApiEndpointSource::valid)
        .or_else(|| object.and_then(ApiEndpointSource::valid))
}

/// The `captf.io/endpoint-source` value to write now, if any. Once written it never changes, so
/// an object that already carries the annotation gets `None`. `module` is recorded when the
/// controller copies the module's endpoint output into the spec (`copying_module_output`);
/// `user` before the first apply when either spec field holds a valid endpoint.
pub fn endpoint_source_to_record(
    current: Option<&str>,
    before_first_apply: bool,
    cluster: Option<&ApiEndpointSource>,
    object: Option<&ApiEndpointSource>,
    copying_module_output: bool,
) -> Option<EndpointSource> {
    if current.is_some_and(|v| !v.is_empty()) {
        return None;
    }
    if copying_module_output {
        return Some(EndpointSource::Module);
    }
    let user_endpoint = cluster.and_then(ApiEndpointSource::valid).is_some()
        || object.and_then(ApiEndpointSource::valid).is_some();
    (before_first_apply && user_endpoint).then_some(EndpointSource::User)
}

/// `control_plane_initialized`, latched: `true` when the Cluster says so or when the durable
/// inputs Secret last rendered `true`, so it never goes back to `false` (Cluster status is not
/// moved by `clusterctl move`; the durable Secret is).
pub fn latch_control_plane_initialized(cluster: Option<bool>, durable: Option<bool>) -> bool {
    cluster.unwrap_or(false) || durable.unwrap_or(false)
}

/// Reads the last rendered `control_plane_initialized` from the durable inputs Secret's
/// `terraform.tfvars.json`; `None` when it is unreadable or lacks a boolean value.
pub fn durable_control_plane_initialized(tfvars_json: &[u8]) -> Option<bool> {
    let value: Value = serde_json::from_slice(tfvars_json).ok()?;
    value.get("control_plane_initialized")?.as_bool()
}

/// `cluster_network`: `null` when every attribute is unset; otherwise all four attributes, an
/// unset CIDR list as `[]` and an unset scalar as `null`.
fn cluster_network(source: &ClusterNetworkSource) -> Option<ClusterNetwork> {
    let network = ClusterNetwork {
        pods: source.pods.clone().unwrap_or_default(),
        services: source.services.clone().unwrap_or_default(),
        service_domain: non_empty(source.service_domain.as_ref()),
        api_server_port: source
            .api_server_port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0),
    };
    let unset = network.pods.is_empty()
        && network.services.is_empty()
        && network.service_domain.is_none()
        && network.api_server_port.is_none();
    (!unset).then_some(network)
}
