//! The contract inputs of every role, built from plain data the manager gathers (spec: Job Inputs
//! §2–§5, Common "Inputs" and "captf_tags", Cluster Role, Machine Role and MachinePool Role
//! "Inputs").
//!
//! Each role has a *source* struct (what the manager read from the Cluster, Machine,
//! MachinePool, bootstrap Secret, the owning TerraformCluster's state and the durable inputs
//! Secret) and an *inputs* struct (the values the module receives, in `terraform.tfvars.json`
//! order). Turning one into the other applies every value rule of the contract; nothing here reads
//! Kubernetes. [`crate::render`] writes the files and [`crate::hash`] hashes the result.

pub mod cluster;
pub mod machine;
pub mod machinepool;

pub use cluster::{
    ApiEndpointSource, ClusterInputs, ClusterInputsSource, ClusterNetwork, ClusterNetworkSource,
    ControlPlaneEndpoint, EndpointSource, cluster_inputs, durable_control_plane_initialized,
    endpoint_source_to_record, latch_control_plane_initialized, select_control_plane_endpoint,
};
pub use machine::{MachineInputs, MachineInputsSource, machine_inputs};
pub use machinepool::{
    Autoscaling, AutoscalingMode, MachinePoolInputs, MachinePoolInputsSource, machinepool_inputs,
    parse_autoscaling, pool_replicas,
};

use crate::canonical::{CanonicalError, check_canonicalizable};
use crate::names::ObjectKind;
use base64::Engine as _;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The contract version this crate renders, injected as `captf_contract`.
pub const CONTRACT_VERSION: &str = "v1alpha1";

/// `bootstrap_format` when the bootstrap Secret has no (or an empty) `format` key.
pub const DEFAULT_BOOTSTRAP_FORMAT: &str = "cloud-config";

/// The fixed keys of the `captf_tags` input (Common "captf_tags").
pub mod tag_keys {
    /// The owning Cluster's name.
    pub const CLUSTER: &str = "captf.io/cluster";
    /// The Terraform* object's namespace.
    pub const NAMESPACE: &str = "captf.io/namespace";
    /// The Terraform* kind.
    pub const KIND: &str = "captf.io/kind";
    /// The Terraform* object's name.
    pub const NAME: &str = "captf.io/name";
    /// Always [`MANAGED_BY_VALUE`].
    pub const MANAGED_BY: &str = "captf.io/managed-by";
    /// The template the object was cloned from, or `""`.
    pub const TEMPLATE: &str = "captf.io/template";
    /// The value of [`MANAGED_BY`].
    pub const MANAGED_BY_VALUE: &str = "captf";
    /// Every key, sorted.
    pub const ALL: [&str; 6] = [CLUSTER, KIND, MANAGED_BY, NAME, NAMESPACE, TEMPLATE];
}

/// The role name a kind runs (`cluster`, `machine`, `machinepool`), as hashed and as written in
/// the image's informational `io.captf.role` label.
pub fn role_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Cluster => "cluster",
        ObjectKind::Machine => "machine",
        ObjectKind::MachinePool => "machinepool",
    }
}

/// How one contract input is declared as a variable of the generated root module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputDecl {
    /// The variable name, identical in the root and in the module.
    pub name: &'static str,
    /// The Terraform type constraint, as written in the contract's skeletons.
    pub type_expr: &'static str,
    /// Whether the value may be `null`; the root then declares `default = null`.
    pub nullable: bool,
    /// Whether the root declares it `sensitive = true` (only `bootstrap_data`).
    pub sensitive: bool,
}

const fn decl(name: &'static str, type_expr: &'static str) -> InputDecl {
    InputDecl {
        name,
        type_expr,
        nullable: false,
        sensitive: false,
    }
}

const fn nullable(name: &'static str, type_expr: &'static str) -> InputDecl {
    InputDecl {
        name,
        type_expr,
        nullable: true,
        sensitive: false,
    }
}

const fn sensitive(name: &'static str, type_expr: &'static str) -> InputDecl {
    InputDecl {
        name,
        type_expr,
        nullable: false,
        sensitive: true,
    }
}

const CAPTF_CONTRACT: InputDecl = decl("captf_contract", "string");
const CAPTF_CLUSTER: InputDecl = decl(
    "captf_cluster",
    "object({ name = string, namespace = string })",
);
const CAPTF_OBJECT: InputDecl = decl(
    "captf_object",
    "object({ kind = string, name = string, namespace = string })",
);
const CAPTF_TAGS: InputDecl = decl("captf_tags", "map(string)");
const CAPTF_CLUSTER_OUTPUTS: InputDecl = nullable("captf_cluster_outputs", "any");
const KUBERNETES_VERSION: InputDecl = nullable("kubernetes_version", "string");
const BOOTSTRAP_DATA: InputDecl = sensitive("bootstrap_data", "string");
const BOOTSTRAP_FORMAT: InputDecl = decl("bootstrap_format", "string");

/// The cluster role's inputs, in `terraform.tfvars.json` order. No `captf_cluster_outputs`.
pub const CLUSTER_INPUTS: &[InputDecl] = &[
    CAPTF_CONTRACT,
    CAPTF_CLUSTER,
    CAPTF_OBJECT,
    CAPTF_TAGS,
    nullable(
        "control_plane_endpoint",
        "object({ host = string, port = number })",
    ),
    KUBERNETES_VERSION,
    decl("control_plane_initialized", "bool"),
    nullable(
        "cluster_network",
        "object({ pods = list(string), services = list(string), service_domain = string, api_server_port = number })",
    ),
];

/// The machine role's inputs, in `terraform.tfvars.json` order.
pub const MACHINE_INPUTS: &[InputDecl] = &[
    CAPTF_CONTRACT,
    CAPTF_CLUSTER,
    CAPTF_OBJECT,
    CAPTF_TAGS,
    CAPTF_CLUSTER_OUTPUTS,
    decl("machine_name", "string"),
    BOOTSTRAP_DATA,
    BOOTSTRAP_FORMAT,
    nullable("failure_domain", "string"),
    KUBERNETES_VERSION,
    decl("control_plane", "bool"),
];

/// The machinepool role's inputs, in `terraform.tfvars.json` order.
pub const MACHINEPOOL_INPUTS: &[InputDecl] = &[
    CAPTF_CONTRACT,
    CAPTF_CLUSTER,
    CAPTF_OBJECT,
    CAPTF_TAGS,
    CAPTF_CLUSTER_OUTPUTS,
    decl("machinepool_name", "string"),
    decl("replicas", "number"),
    BOOTSTRAP_DATA,
    BOOTSTRAP_FORMAT,
    decl("failure_domains", "list(string)"),
    decl("cluster_failure_domains", "list(string)"),
    KUBERNETES_VERSION,
    decl("node_labels", "map(string)"),
    decl(
        "autoscaling",
        "object({ enabled = bool, min = number, max = number })",
    ),
];

/// Every contract input of a role, in `terraform.tfvars.json` order.
pub fn contract_inputs(kind: ObjectKind) -> &'static [InputDecl] {
    match kind {
        ObjectKind::Cluster => CLUSTER_INPUTS,
        ObjectKind::Machine => MACHINE_INPUTS,
        ObjectKind::MachinePool => MACHINEPOOL_INPUTS,
    }
}

/// Whether `name` is one of the role's contract inputs.
pub fn is_contract_input(kind: ObjectKind, name: &str) -> bool {
    contract_inputs(kind).iter().any(|d| d.name == name)
}

/// Why a role's inputs could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputsError {
    /// The owning TerraformCluster's `exports` output has no canonical form (a fractional or
    /// exponent number): the manager waits with `DependenciesReady=Unknown/WaitingForClusterExports`
    /// and the cluster reports `OutputsValid=False/OutputsInvalid`.
    #[error("the cluster's exports output cannot be hashed: {0}")]
    ExportsNotCanonical(CanonicalError),
    /// The bootstrap Secret's `format` key is not UTF-8 text.
    #[error("the bootstrap Secret's format key is not UTF-8")]
    BootstrapFormatNotUtf8,
}

/// Where the object sits: read from the Terraform* object and its owning Cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectSource {
    /// The owning Cluster's `metadata.name`.
    pub cluster_name: String,
    /// The namespace of the Terraform* object (a Cluster and its infrastructure always share one).
    pub namespace: String,
    /// The Terraform* object's own `metadata.name`.
    pub object_name: String,
    /// The object's `cluster.x-k8s.io/cloned-from-name` annotation, when present.
    pub cloned_from_name: Option<String>,
}

/// `captf_cluster`: the owning Cluster, by name and namespace only (never a uid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterRef {
    /// The Cluster's name.
    pub name: String,
    /// The Cluster's namespace.
    pub namespace: String,
}

/// `captf_object`: the Terraform* object itself, by kind, name and namespace only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectRef {
    /// `TerraformCluster`, `TerraformMachine` or `TerraformMachinePool`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
}

/// The inputs every role receives, in `terraform.tfvars.json` order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommonInputs {
    /// Always [`CONTRACT_VERSION`].
    pub captf_contract: String,
    /// The owning Cluster.
    pub captf_cluster: ClusterRef,
    /// The Terraform* object.
    pub captf_object: ObjectRef,
    /// The six fixed tags (see [`captf_tags`]).
    pub captf_tags: BTreeMap<String, String>,
}

impl CommonInputs {
    /// Builds the common inputs of `kind` for an object.
    pub fn new(kind: ObjectKind, object: &ObjectSource) -> Self {
        Self {
            captf_contract: CONTRACT_VERSION.to_owned(),
            captf_cluster: ClusterRef {
                name: object.cluster_name.clone(),
                namespace: object.namespace.clone(),
            },
            captf_object: ObjectRef {
                kind: kind.kind().to_owned(),
                name: object.object_name.clone(),
                namespace: object.namespace.clone(),
            },
            captf_tags: captf_tags(kind, object),
        }
    }
}

/// `captf_tags`: exactly the six fixed keys. `captf.io/template` is the object's
/// `cluster.x-k8s.io/cloned-from-name` annotation, or `""` when it has none.
pub fn captf_tags(kind: ObjectKind, object: &ObjectSource) -> BTreeMap<String, String> {
    [
        (tag_keys::CLUSTER, object.cluster_name.as_str()),
        (tag_keys::NAMESPACE, object.namespace.as_str()),
        (tag_keys::KIND, kind.kind()),
        (tag_keys::NAME, object.object_name.as_str()),
        (tag_keys::MANAGED_BY, tag_keys::MANAGED_BY_VALUE),
        (
            tag_keys::TEMPLATE,
            object.cloned_from_name.as_deref().unwrap_or(""),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The bootstrap Secret named by `dataSecretName`: the raw bytes of its `value` and `format` keys.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct BootstrapSource {
    /// The `value` key's raw bytes (may be gzip, so not necessarily UTF-8).
    pub value: Vec<u8>,
    /// The `format` key's raw bytes, when the key exists.
    pub format: Option<Vec<u8>>,
}

impl fmt::Debug for BootstrapSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapSource")
            .field(
                "value",
                &format_args!("<{} bytes redacted>", self.value.len()),
            )
            .field(
                "format",
                &self.format.as_deref().map(String::from_utf8_lossy),
            )
            .finish()
    }
}

/// `bootstrap_data`: standard, padded base64 of the bootstrap Secret's `value` bytes, always,
/// whatever the bootstrap provider or `format` (a gzip payload is not valid UTF-8).
pub fn bootstrap_data(value: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(value)
}

/// `bootstrap_format`: the bootstrap Secret's `format` key verbatim, or `cloud-config` when the
/// key is absent or empty.
pub fn bootstrap_format(format: Option<&[u8]>) -> Result<String, InputsError> {
    match format {
        None | Some([]) => Ok(DEFAULT_BOOTSTRAP_FORMAT.to_owned()),
        Some(bytes) => std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| InputsError::BootstrapFormatNotUtf8),
    }
}

/// What a machine or pool learns from its cluster: read from the owning TerraformCluster's state,
/// or nothing at all when that TerraformCluster is externally managed.
#[derive(Clone, PartialEq)]
pub enum ClusterHandoff {
    /// The TerraformCluster runs its module: its state's root outputs.
    State {
        /// The `exports` output, verbatim; it becomes `captf_cluster_outputs`.
        exports: Value,
        /// The names in the `failure_domains` output (`[]` when the output is null).
        failure_domains: Vec<String>,
    },
    /// The TerraformCluster carries `cluster.x-k8s.io/managed-by`: there is no cluster state.
    ExternallyManaged {
        /// The names in `TerraformCluster.status.failureDomains`.
        status_failure_domains: Vec<String>,
    },
}

impl Default for ClusterHandoff {
    fn default() -> Self {
        Self::State {
            exports: Value::Object(Map::new()),
            failure_domains: Vec::new(),
        }
    }
}

impl fmt::Debug for ClusterHandoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::State {
                failure_domains, ..
            } => f
                .debug_struct("State")
                .field("exports", &"<redacted>")
                .field("failure_domains", failure_domains)
                .finish(),
            Self::ExternallyManaged {
                status_failure_domains,
            } => f
                .debug_struct("ExternallyManaged")
                .field("status_failure_domains", status_failure_domains)
                .finish(),
        }
    }
}

impl ClusterHandoff {
    /// `captf_cluster_outputs`: the cluster's `exports` exactly as the module wrote it, or `{}`
    /// for an externally managed cluster. A value with no canonical form (a fractional or
    /// exponent number anywhere) is refused, since the inputs hash could not cover it.
    pub fn cluster_outputs(&self) -> Result<Value, InputsError> {
        match self {
            Self::State { exports, .. } => {
                check_canonicalizable(exports).map_err(InputsError::ExportsNotCanonical)?;
                Ok(exports.clone())
            }
            Self::ExternallyManaged { .. } => Ok(Value::Object(Map::new())),
        }
    }

    /// `cluster_failure_domains`: the cluster's failure-domain names, from its state's
    /// `failure_domains` output, or from `status.failureDomains` for an externally managed
    /// cluster (which has no state). Sorted and de-duplicated, so a module that reorders its
    /// list does not change a pool's inputs hash.
    pub fn failure_domain_names(&self) -> Vec<String> {
        let names = match self {
            Self::State {
                failure_domains, ..
            } => failure_domains,
            Self::ExternallyManaged {
                status_failure_domains,
            } => status_failure_domains,
        };
        names
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// An optional Kubernetes string field: Go's zero value `""` means unset, so it maps to `None`.
pub(crate) fn non_empty(value: Option<&String>) -> Option<String> {
    value.filter(|s| !s.is_empty()).cloned()
}

/// The inputs of one role, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub enum RoleInputs {
    /// A TerraformCluster's inputs.
    Cluster(ClusterInputs),
    /// A TerraformMachine's inputs.
    Machine(MachineInputs),
    /// A TerraformMachinePool's inputs.
    MachinePool(MachinePoolInputs),
}

impl RoleInputs {
    /// The kind whose role these inputs feed.
    pub fn kind(&self) -> ObjectKind {
        match self {
            Self::Cluster(_) => ObjectKind::Cluster,
            Self::Machine(_) => ObjectKind::Machine,
            Self::MachinePool(_) => ObjectKind::MachinePool,
        }
    }

    /// The contract inputs as a JSON object, in `terraform.tfvars.json` order.
    pub fn to_map(&self) -> Map<String, Value> {
        let value = match self {
            Self::Cluster(i) => serde_json::to_value(i),
            Self::Machine(i) => serde_json::to_value(i),
            Self::MachinePool(i) => serde_json::to_value(i),
        };
        // These structs hold only strings, integers, booleans, maps with string keys and JSON
        // values, so serialising them cannot fail and always yields an object.
        match value {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        }
    }

    /// The contract inputs as the inputs hash sees them: [`Self::to_map`], except that a pool's
    /// `replicas` is left out while `autoscaling.enabled` (MachinePool Role "replicas").
    pub fn hashed_map(&self) -> Map<String, Value> {
        let mut map = self.to_map();
        if let Self::MachinePool(pool) = self
            && pool.autoscaling.enabled
        {
            map.remove("replicas");
        }
        map
    }
}

impl From<ClusterInputs> for RoleInputs {
    fn from(value: ClusterInputs) -> Self {
        Self::Cluster(value)
    }
}

impl From<MachineInputs> for RoleInputs {
    fn from(value: MachineInputs) -> Self {
        Self::Machine(value)
    }
}

impl From<MachinePoolInputs> for RoleInputs {
    fn from(value: MachinePoolInputs) -> Self {
        Self::MachinePool(value)
    }
}
