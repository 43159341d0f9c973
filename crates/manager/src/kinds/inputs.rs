//! Owner lookup and the current inputs (spec: Security Model "Owner references are checked
//! against the owner"; Job Inputs §2, §3, §5, §6; Machine Role "Gating"): finding the Cluster
//! API owner and checking it references the object back, then building the role's inputs from
//! the owner, the Cluster, the bootstrap Secret, the cluster's exports and the user variables.

use std::collections::BTreeMap;

use api::capi::{Cluster, ContractVersionedObjectReference, Machine, MachinePool};
use api::cluster::TerraformCluster;
use api::constants::{annotations, labels, reasons};
use api::machine::TerraformMachine;
use api::machinepool::TerraformMachinePool;
use api::workload::WorkspaceSpec;
use contract::inputs::{
    ApiEndpointSource, BootstrapSource, ClusterHandoff, ClusterInputsSource, ClusterNetworkSource,
    MachineInputsSource, MachinePoolInputsSource, ObjectSource,
};
use contract::names::{ObjectKind, state_suffix};
use contract::outputs::decode_cluster_outputs;
use contract::render::{
    RenderError, RenderedInputs, render_cluster, render_machine, render_machinepool,
};
use contract::variables::{SourceKind, UserVariables, VariablesSource, merge_variables};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Api, ResourceExt};

use crate::pass::observed::OwnerCheck;
use crate::runtime::caches::Caches;
use crate::runtime::kubeutil::get_opt;
use crate::state::StateReading;

/// What the owner lookup found.
#[derive(Debug, Clone)]
pub struct Owner {
    /// The outcome as `decide` reads it.
    pub check: OwnerCheck,
    /// A message for `DependenciesReady` when the check is not `Ok`.
    pub message: String,
    /// The owning Cluster (a TerraformCluster's owner, a machine's Cluster by label).
    pub cluster: Option<Cluster>,
    /// A machine's owning Machine.
    pub machine: Option<Machine>,
    /// A pool's owning MachinePool.
    pub machine_pool: Option<MachinePool>,
    /// A machine's TerraformCluster (through the Cluster's infrastructureRef).
    pub terraform_cluster: Option<TerraformCluster>,
    /// Whether the object or its Cluster is paused.
    pub paused: bool,
}

impl Owner {
    /// No owner looked up (an externally managed object).
    pub fn none() -> Self {
        Self::waiting(OwnerCheck::Ok, "")
    }

    fn waiting(check: OwnerCheck, message: impl Into<String>) -> Self {
        Self {
            check,
            message: message.into(),
            cluster: None,
            machine: None,
            machine_pool: None,
            terraform_cluster: None,
            paused: false,
        }
    }
}

fn owner_ref<'a>(refs: &'a [OwnerReference], kind: &str) -> Option<&'a OwnerReference> {
    refs.iter().find(|r| {
        r.kind == kind
            && r.api_version
                .split('/')
                .next()
                .is_some_and(|g| g == "cluster.x-k8s.io")
    })
}

/// Whether `meta` carries Cluster API's `cluster.x-k8s.io/paused` annotation.
pub(crate) fn annotated_paused(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::PAUSED))
}

/// Whether a Cluster pauses its objects: `spec.paused`, or the paused annotation.
pub(crate) fn cluster_paused(cluster: &Cluster) -> bool {
    cluster.spec.paused.unwrap_or(false) || annotated_paused(&cluster.metadata)
}

/// The owner checks of the Security Model: the owner names the object in its
/// `infrastructureRef`, the owner reference's UID (when set) is the owner's, and the object's
/// `cluster.x-k8s.io/cluster-name` label (when set) names the owner's cluster. The failed
/// check's message, or `None`.
fn mismatch(
    object: &ObjectMeta,
    kind: &str,
    oref: &OwnerReference,
    owner_kind: &str,
    owner: &ObjectMeta,
    infrastructure_ref: Option<&ContractVersionedObjectReference>,
    owner_cluster: &str,
) -> Option<String> {
    let name = object.name.as_deref().unwrap_or_default();
    let owner_name = &oref.name;
    if !infrastructure_ref.is_some_and(|r| r.is_captf(kind, name)) {
        return Some(format!(
            "{owner_kind} {owner_name} does not name this {kind} in spec.infrastructureRef"
        ));
    }
    if !oref.uid.is_empty() && owner.uid.as_deref() != Some(oref.uid.as_str()) {
        return Some(format!(
            "The ownerReference's UID does not match {owner_kind} {owner_name}"
        ));
    }
    let label = object
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::CLUSTER_NAME))
        .filter(|l| !l.is_empty());
    if label.is_some_and(|l| l != owner_cluster) {
        return Some(format!(
            "The {} label does not name {owner_kind} {owner_name}'s cluster {owner_cluster}",
            labels::CLUSTER_NAME
        ));
    }
    None
}

/// The owner lookup of a TerraformCluster: its Cluster, which must name it in
/// `spec.infrastructureRef`.
pub fn cluster_owner(caches: &Caches, tc: &TerraformCluster) -> Owner {
    let ns = tc.metadata.namespace.clone().unwrap_or_default();
    let refs = tc.metadata.owner_references.clone().unwrap_or_default();
    let Some(oref) = owner_ref(&refs, "Cluster") else {
        return Owner::waiting(
            OwnerCheck::NotYet {
                reason: reasons::WAITING_FOR_OWNER,
            },
            "Waiting for a Cluster to own this TerraformCluster",
        );
    };
    let Some(cluster) = cached(&caches.clusters, &ns, &oref.name) else {
        return Owner::waiting(
            OwnerCheck::Gone,
            format!("The owning Cluster {} no longer exists", oref.name),
        );
    };
    let mut owner = Owner::waiting(OwnerCheck::Ok, "");
    owner.paused = cluster_paused(&cluster) || annotated_paused(&tc.metadata);
    if let Some(message) = mismatch(
        &tc.metadata,
        "TerraformCluster",
        oref,
        "Cluster",
        &cluster.metadata,
        cluster.spec.infrastructure_ref.as_ref(),
        &oref.name,
    ) {
        owner.check = OwnerCheck::Mismatch;
        owner.message = message;
    }
    owner.cluster = Some(cluster);
    owner
}

/// The owner lookup of a machine or pool whose owner is gone: `OwnerNotFound`, with its
/// cluster's TerraformCluster by label, since an orphan's destroy keeps its cluster's defaults
/// (`spec.defaults.jobs`).
fn orphaned(caches: &Caches, meta: &ObjectMeta, owner_kind: &str, owner_name: &str) -> Owner {
    let ns = meta.namespace.as_deref();
    let mut owner = Owner::waiting(
        OwnerCheck::Gone,
        format!("The owning {owner_kind} {owner_name} no longer exists"),
    );
    owner.terraform_cluster = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::CLUSTER_NAME))
        .and_then(|cluster| {
            caches.terraform_clusters.find(|tc| {
                tc.metadata.namespace.as_deref() == ns
                    && crate::runtime::caches::tc_cluster_name(tc).as_ref() == Some(cluster)
            })
        })
        .map(|tc| tc.as_ref().clone());
    owner
}

/// The owner lookup of a TerraformMachine: its Machine (which must name it back), then the
/// Cluster by the Machine's cluster name, then the TerraformCluster the Cluster names.
pub fn machine_owner(caches: &Caches, tm: &TerraformMachine) -> Owner {
    let ns = tm.metadata.namespace.clone().unwrap_or_default();
    let refs = tm.metadata.owner_references.clone().unwrap_or_default();
    let Some(oref) = owner_ref(&refs, "Machine") else {
        let reason = if refs.is_empty() {
            reasons::WAITING_FOR_OWNER
        } else {
            reasons::WAITING_FOR_OWNER_MACHINE
        };
        return Owner::waiting(
            OwnerCheck::NotYet { reason },
            "Waiting for a Machine to own this TerraformMachine",
        );
    };
    let Some(machine) = cached(&caches.machines, &ns, &oref.name) else {
        return orphaned(caches, &tm.metadata, "Machine", &oref.name);
    };
    let mut owner = Owner::waiting(OwnerCheck::Ok, "");
    if let Some(message) = mismatch(
        &tm.metadata,
        "TerraformMachine",
        oref,
        "Machine",
        &machine.metadata,
        machine.spec.infrastructure_ref.as_ref(),
        &machine.spec.cluster_name,
    ) {
        owner.check = OwnerCheck::Mismatch;
        owner.message = message;
    }
    owner.paused = annotated_paused(&tm.metadata) || annotated_paused(&machine.metadata);
    cluster_of(caches, &ns, &machine.spec.cluster_name, &mut owner);
    owner.machine = Some(machine);
    owner
}

/// The owner lookup's last steps for a machine or a pool: the Cluster named `cluster_name`, then
/// the TerraformCluster its infrastructureRef names (Machine Role and MachinePool Role "Gating").
fn cluster_of(caches: &Caches, ns: &str, cluster_name: &str, owner: &mut Owner) {
    let cluster = cached(&caches.clusters, ns, cluster_name);
    owner.paused |= cluster.as_ref().is_some_and(cluster_paused);
    if owner.check == OwnerCheck::Ok {
        match &cluster {
            None => {
                owner.check = OwnerCheck::NotYet {
                    reason: reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                };
                owner.message = format!("Cluster {cluster_name} does not exist yet");
            }
            Some(c) => {
                let infra = c.spec.infrastructure_ref.clone().unwrap_or_default();
                if infra.name.is_empty() {
                    owner.check = OwnerCheck::NotYet {
                        reason: reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                    };
                    "The Cluster has no infrastructureRef yet".clone_into(&mut owner.message);
                } else if infra.api_group != api::GROUP || infra.kind != "TerraformCluster" {
                    owner.check = OwnerCheck::Gated {
                        reason: reasons::CLUSTER_NOT_TERRAFORM,
                    };
                    owner.message = format!(
                        "Cluster {}'s infrastructureRef is a {}, not a TerraformCluster",
                        cluster_name, infra.kind
                    );
                } else {
                    owner.terraform_cluster = cached(&caches.terraform_clusters, ns, &infra.name);
                }
            }
        }
    }
    owner.cluster = cluster;
}

/// The owner lookup of a TerraformMachinePool: its MachinePool (which must name it back in
/// `spec.template.spec.infrastructureRef`), then the Cluster by the MachinePool's cluster name,
/// then the TerraformCluster the Cluster names (MachinePool Role "Owner").
pub fn pool_owner(caches: &Caches, tmp: &TerraformMachinePool) -> Owner {
    let ns = tmp.metadata.namespace.clone().unwrap_or_default();
    let refs = tmp.metadata.owner_references.clone().unwrap_or_default();
    let Some(oref) = owner_ref(&refs, "MachinePool") else {
        let reason = if refs.is_empty() {
            reasons::WAITING_FOR_OWNER
        } else {
            reasons::WAITING_FOR_OWNER_MACHINE_POOL
        };
        return Owner::waiting(
            OwnerCheck::NotYet { reason },
            "Waiting for a MachinePool to own this TerraformMachinePool",
        );
    };
    let Some(mp) = cached(&caches.machine_pools, &ns, &oref.name) else {
        return orphaned(caches, &tmp.metadata, "MachinePool", &oref.name);
    };
    let mut owner = Owner::waiting(OwnerCheck::Ok, "");
    if let Some(message) = mismatch(
        &tmp.metadata,
        "TerraformMachinePool",
        oref,
        "MachinePool",
        &mp.metadata,
        mp.spec.template.spec.infrastructure_ref.as_ref(),
        &mp.spec.cluster_name,
    ) {
        owner.check = OwnerCheck::Mismatch;
        owner.message = message;
    }
    owner.paused = annotated_paused(&tmp.metadata) || annotated_paused(&mp.metadata);
    cluster_of(caches, &ns, &mp.spec.cluster_name, &mut owner);
    owner.machine_pool = Some(mp);
    owner
}

/// A copy of the cached object `ns`/`name`.
fn cached<K>(store: &kube::runtime::reflector::Store<K>, ns: &str, name: &str) -> Option<K>
where
    K: kube::Resource<DynamicType = ()> + Clone,
{
    store
        .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
        .map(|o| o.as_ref().clone())
}

/// Why inputs could not be built: a `DependenciesReady` reason (or `InputsTooLarge`), its
/// status and a message naming what is missing (never a value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotBuilt {
    /// The documented reason.
    pub reason: &'static str,
    /// Whether the condition is Unknown (waiting) rather than False (broken).
    pub waiting: bool,
    /// The message.
    pub message: String,
    /// The rendered size, for `InputsTooLarge`.
    pub size: Option<usize>,
}

impl NotBuilt {
    fn waiting(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            waiting: true,
            message: message.into(),
            size: None,
        }
    }

    fn broken(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            waiting: false,
            message: message.into(),
            size: None,
        }
    }
}

fn from_render(e: RenderError) -> NotBuilt {
    match e {
        RenderError::InputsTooLarge { size } => NotBuilt {
            reason: reasons::INPUTS_TOO_LARGE,
            waiting: false,
            message: e.to_string(),
            size: Some(size),
        },
        RenderError::Inputs(contract::inputs::InputsError::ExportsNotCanonical(_)) => {
            NotBuilt::waiting(reasons::WAITING_FOR_CLUSTER_EXPORTS, e.to_string())
        }
        other => NotBuilt::broken(reasons::VARIABLES_INVALID, other.to_string()),
    }
}

/// The version of an object's user variables: its kind, inline `spec.variables` and
/// `spec.variablesFrom` entries, and the resourceVersion of each source as the metadata caches
/// show it. `None` when a source is not in its cache (it is missing, or a ConfigMap without the
/// label): the sources are then read, to say which.
fn variables_version(
    caches: &Caches,
    ns: &str,
    kind: ObjectKind,
    ws: &WorkspaceSpec,
) -> Option<String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    // The entries themselves too: an edited entry (optional, another key) merges differently.
    serde_json::to_string(&(&ws.variables, &ws.variables_from))
        .unwrap_or_default()
        .hash(&mut hasher);
    let mut version = format!("{}:{:x}", kind.short(), hasher.finish());
    for entry in ws.variables_from.iter().flatten() {
        let source = match (&entry.config_map_ref, &entry.secret_ref) {
            (Some(c), _) => {
                let cached = caches
                    .variable_config_maps
                    .get(&kube::runtime::reflector::ObjectRef::new(&c.name).within(ns))?;
                let rv = cached.metadata.resource_version.as_deref()?;
                format!("c/{}@{rv}", c.name)
            }
            (None, Some(s)) => {
                let cached = caches.secret(ns, &s.name)?;
                let rv = cached.metadata.resource_version.as_deref()?;
                format!("s/{}@{rv}", s.name)
            }
            (None, None) => continue,
        };
        version.push(' ');
        version.push_str(&source);
    }
    Some(version)
}

/// Merges the object's `spec.variables` and `spec.variablesFrom` (Module Variables): each
/// source must exist (unless optional) and carry `captf.io/variables=true`. The sources are read
/// only when one of their resourceVersions changed (the metadata caches show them); the pass
/// keeps the merged variables for that version, not the sources' data.
pub async fn user_variables(
    client: &kube::Client,
    caches: &Caches,
    meta: &ObjectMeta,
    kind: ObjectKind,
    ws: &WorkspaceSpec,
) -> kube::Result<Result<UserVariables, NotBuilt>> {
    let ns = meta.namespace.as_deref().unwrap_or_default();
    if ws.variables_from.as_ref().is_none_or(Vec::is_empty) {
        return Ok(merge_sources(kind, ws, &[]));
    }
    let key = format!("{}/variables", meta.uid.as_deref().unwrap_or_default());
    let version = variables_version(caches, ns, kind, ws);
    if let Some(version) = &version
        && let Some(kept) = caches.decoded.get::<UserVariables>(&key, version)
    {
        return Ok(Ok(kept.as_ref().clone()));
    }
    let merged = read_sources(client, ns, kind, ws).await?;
    if let (Some(version), Ok(merged)) = (&version, &merged) {
        caches
            .decoded
            .put(&key, version, std::sync::Arc::new(merged.clone()));
    }
    Ok(merged)
}

fn merge_sources(
    kind: ObjectKind,
    ws: &WorkspaceSpec,
    sources: &[VariablesSource],
) -> Result<UserVariables, NotBuilt> {
    let inline = ws.variables.clone().map(serde_json::Value::Object);
    merge_variables(kind, sources, inline.as_ref())
        .map_err(|e| NotBuilt::broken(reasons::VARIABLES_INVALID, e.to_string()))
}

/// Reads each `variablesFrom` source and merges them with the inline variables.
async fn read_sources(
    client: &kube::Client,
    ns: &str,
    kind: ObjectKind,
    ws: &WorkspaceSpec,
) -> kube::Result<Result<UserVariables, NotBuilt>> {
    let mut sources = Vec::new();
    for entry in ws.variables_from.iter().flatten() {
        let optional = entry.optional.unwrap_or(false);
        let format = entry.format.unwrap_or_default();
        let (source_kind, name) = match (&entry.config_map_ref, &entry.secret_ref) {
            (Some(c), _) => (SourceKind::ConfigMap, c.name.clone()),
            (None, Some(s)) => (SourceKind::Secret, s.name.clone()),
            (None, None) => continue,
        };
        let found = match source_kind {
            SourceKind::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                get_opt(&api, &name).await?.map(|c| {
                    let mut data: BTreeMap<String, Vec<u8>> = c
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    for (k, v) in c.binary_data.unwrap_or_default() {
                        data.insert(k, v.0);
                    }
                    (c.metadata.labels.unwrap_or_default(), data)
                })
            }
            SourceKind::Secret => {
                let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                get_opt(&api, &name).await?.map(|s| {
                    let data: BTreeMap<String, Vec<u8>> = s
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect();
                    (s.metadata.labels.unwrap_or_default(), data)
                })
            }
        };
        let what = match source_kind {
            SourceKind::ConfigMap => "ConfigMap",
            SourceKind::Secret => "Secret",
        };
        let Some((source_labels, data)) = found else {
            if optional {
                continue;
            }
            return Ok(Err(NotBuilt::broken(
                reasons::VARIABLES_SOURCE_NOT_FOUND,
                format!("{what} {name} named in spec.variablesFrom does not exist"),
            )));
        };
        if source_labels.get(labels::VARIABLES).map(String::as_str) != Some("true") {
            return Ok(Err(NotBuilt::broken(
                reasons::VARIABLES_SOURCE_NOT_FOUND,
                format!("{what} {name} lacks the label {}=true", labels::VARIABLES),
            )));
        }
        sources.push(VariablesSource {
            kind: source_kind,
            name,
            format,
            data,
        });
    }
    Ok(merge_sources(kind, ws, &sources))
}

fn object_source(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    cluster_name: &str,
) -> ObjectSource {
    ObjectSource {
        cluster_name: cluster_name.to_owned(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        object_name: meta.name.clone().unwrap_or_default(),
        cloned_from_name: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::CLONED_FROM_NAME))
            .cloned(),
    }
}

/// A spec's `controlPlaneEndpoint` as the contract reads it (Go zero values for unset parts).
pub fn endpoint(e: Option<&api::shared::ApiEndpoint>) -> Option<ApiEndpointSource> {
    e.map(|e| ApiEndpointSource {
        host: e.host.clone().unwrap_or_default(),
        port: e.port.unwrap_or(0),
    })
}

/// Builds and renders a TerraformCluster's inputs. `durable_initialized` is the
/// `control_plane_initialized` the durable inputs Secret rendered, for the latch.
pub async fn cluster_inputs(
    client: &kube::Client,
    caches: &Caches,
    tc: &TerraformCluster,
    cluster: &Cluster,
    durable_initialized: Option<bool>,
) -> kube::Result<Result<RenderedInputs, NotBuilt>> {
    let variables = match user_variables(
        client,
        caches,
        &tc.metadata,
        ObjectKind::Cluster,
        &tc.spec.workspace,
    )
    .await?
    {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    let init = cluster
        .status
        .as_ref()
        .and_then(api::capi::ClusterStatus::control_plane_initialized);
    let network = cluster
        .spec
        .cluster_network
        .as_ref()
        .map(|n| ClusterNetworkSource {
            pods: n.pods.as_ref().map(|p| p.cidr_blocks.clone()),
            services: n.services.as_ref().map(|p| p.cidr_blocks.clone()),
            service_domain: n.service_domain.clone().filter(|s| !s.is_empty()),
            api_server_port: n.api_server_port.filter(|p| *p != 0),
        });
    let source = ClusterInputsSource {
        object: object_source(&tc.metadata, &cluster_name),
        topology_version: cluster
            .spec
            .topology
            .as_ref()
            .and_then(|t| t.version.clone()),
        cluster_endpoint: endpoint(cluster.spec.control_plane_endpoint.as_ref()),
        object_endpoint: endpoint(tc.spec.control_plane_endpoint.as_ref()),
        endpoint_source: tc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::ENDPOINT_SOURCE))
            .cloned(),
        control_plane_initialized: init,
        durable_control_plane_initialized: durable_initialized,
        cluster_network: network,
    };
    Ok(render_cluster(&source, &variables, &tc.spec.workspace.source.image).map_err(from_render))
}

/// The cluster's handoff to a machine: its state's `exports` and failure domains, or nothing
/// for an externally managed TerraformCluster. `Err` when the exports cannot be read yet.
pub async fn cluster_handoff(
    client: &kube::Client,
    caches: &Caches,
    tc: &TerraformCluster,
) -> kube::Result<Result<ClusterHandoff, NotBuilt>> {
    let externally_managed = tc
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::MANAGED_BY));
    if externally_managed {
        let names = tc
            .status
            .as_ref()
            .and_then(|s| s.failure_domains.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|f| f.name)
            .collect();
        return Ok(Ok(ClusterHandoff::ExternallyManaged {
            status_failure_domains: names,
        }));
    }
    let ns = tc.metadata.namespace.clone().unwrap_or_default();
    let name = tc.metadata.name.clone().unwrap_or_default();
    let suffix = state_suffix(&ns, ObjectKind::Cluster, &name);
    // Decoded once per version of the cluster's state, shared with the cluster's own passes.
    let uid = tc.metadata.uid.clone().unwrap_or_default();
    let (view, _) = crate::state::observe(client, caches, &ns, &suffix, &uid, false).await?;
    let waiting = |m: &str| {
        Ok(Err(NotBuilt::waiting(
            reasons::WAITING_FOR_CLUSTER_EXPORTS,
            format!("TerraformCluster {name}'s exports output {m}"),
        )))
    };
    let StateReading::Read(summary) = &view.reading else {
        return waiting("cannot be read: its state is missing or unreadable");
    };
    let decoded = decode_cluster_outputs(&summary.outputs);
    let Some(exports) = decoded.outputs.exports else {
        return waiting("is not set or is not valid yet");
    };
    let failure_domains = decoded
        .outputs
        .failure_domains
        .unwrap_or_default()
        .into_iter()
        .map(|f| f.name)
        .collect();
    Ok(Ok(ClusterHandoff::State {
        exports,
        failure_domains,
    }))
}

/// Builds and renders a TerraformMachine's inputs, gated on the cluster's infrastructure, its
/// exports and the bootstrap data (Machine Role "Gating").
pub async fn machine_inputs(
    client: &kube::Client,
    caches: &Caches,
    tm: &TerraformMachine,
    owner: &Owner,
) -> kube::Result<Result<RenderedInputs, NotBuilt>> {
    let ns = tm.metadata.namespace.clone().unwrap_or_default();
    let (Some(machine), Some(cluster)) = (&owner.machine, &owner.cluster) else {
        return Ok(Err(NotBuilt::waiting(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            "The Machine or its Cluster is not there yet",
        )));
    };
    let handoff =
        match provisioned_handoff(client, caches, owner, cluster, &machine.spec.cluster_name)
            .await?
        {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
    let bootstrap =
        match read_bootstrap(client, &ns, machine.spec.bootstrap.as_ref(), "Machine").await? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
    let variables = match user_variables(
        client,
        caches,
        &tm.metadata,
        ObjectKind::Machine,
        &tm.spec.workspace,
    )
    .await?
    {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let control_plane = machine
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::CONTROL_PLANE));
    let source = MachineInputsSource {
        object: object_source(&tm.metadata, &machine.spec.cluster_name),
        machine_name: machine.metadata.name.clone().unwrap_or_default(),
        bootstrap,
        failure_domain: machine.spec.failure_domain.clone(),
        version: machine.spec.version.clone(),
        control_plane,
        cluster: handoff,
    };
    Ok(render_machine(&source, &variables, &tm.spec.workspace.source.image).map_err(from_render))
}

/// The owning TerraformCluster's handoff once the Cluster's infrastructure is provisioned
/// (Machine Role and MachinePool Role "Gating").
async fn provisioned_handoff(
    client: &kube::Client,
    caches: &Caches,
    owner: &Owner,
    cluster: &Cluster,
    cluster_name: &str,
) -> kube::Result<Result<ClusterHandoff, NotBuilt>> {
    let provisioned = cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.infrastructure_provisioned)
        .unwrap_or(false);
    let Some(tc) = owner.terraform_cluster.as_ref().filter(|_| provisioned) else {
        return Ok(Err(NotBuilt::waiting(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!("Waiting for Cluster {cluster_name}'s infrastructure to be provisioned"),
        )));
    };
    cluster_handoff(client, caches, tc).await
}

/// The bootstrap data the owner's `bootstrap.dataSecretName` names, read from the API server;
/// `WaitingForBootstrapData` until it is there with a `value` (the message names the Secret, never
/// a value).
async fn read_bootstrap(
    client: &kube::Client,
    ns: &str,
    bootstrap: Option<&api::capi::Bootstrap>,
    owner_kind: &str,
) -> kube::Result<Result<BootstrapSource, NotBuilt>> {
    let secret_name = bootstrap
        .and_then(|b| b.data_secret_name.clone())
        .filter(|n| !n.is_empty());
    let Some(secret_name) = secret_name else {
        return Ok(Err(NotBuilt::waiting(
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            format!("The {owner_kind} has no bootstrap dataSecretName yet"),
        )));
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let Some(secret) = get_opt(&secrets, &secret_name).await? else {
        return Ok(Err(NotBuilt::waiting(
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            format!("The bootstrap data Secret {secret_name} does not exist yet"),
        )));
    };
    let data = secret.data.unwrap_or_default();
    let Some(value) = data.get("value") else {
        return Ok(Err(NotBuilt::waiting(
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            format!("The bootstrap data Secret {secret_name} has no value key yet"),
        )));
    };
    Ok(Ok(BootstrapSource {
        value: value.0.clone(),
        format: data.get("format").map(|f| f.0.clone()),
    }))
}

/// Builds and renders a TerraformMachinePool's inputs from its MachinePool (MachinePool Role
/// "Inputs"): the desired count from `spec.replicas`, or under the autoscaler annotations the
/// observed `status.replicas` within `[min, max]`; `node_labels` from the MachinePool template's
/// labels; gated like a machine on the cluster's infrastructure, its exports and the bootstrap
/// data.
pub async fn pool_inputs(
    client: &kube::Client,
    caches: &Caches,
    tmp: &TerraformMachinePool,
    owner: &Owner,
) -> kube::Result<Result<RenderedInputs, NotBuilt>> {
    let ns = tmp.metadata.namespace.clone().unwrap_or_default();
    let (Some(mp), Some(cluster)) = (&owner.machine_pool, &owner.cluster) else {
        return Ok(Err(NotBuilt::waiting(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            "The MachinePool or its Cluster is not there yet",
        )));
    };
    let handoff =
        match provisioned_handoff(client, caches, owner, cluster, &mp.spec.cluster_name).await? {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
    let bootstrap = mp.spec.template.spec.bootstrap.as_ref();
    let bootstrap = match read_bootstrap(client, &ns, bootstrap, "MachinePool").await? {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    let kind = ObjectKind::MachinePool;
    let workspace = &tmp.spec.workspace;
    let variables = match user_variables(client, caches, &tmp.metadata, kind, workspace).await? {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let annotation = |k: &str| mp.annotations().get(k).cloned();
    let source = MachinePoolInputsSource {
        object: object_source(&tmp.metadata, &mp.spec.cluster_name),
        machinepool_name: mp.metadata.name.clone().unwrap_or_default(),
        spec_replicas: mp.spec.replicas,
        status_replicas: tmp.status.as_ref().and_then(|s| s.replicas),
        autoscaler_min_size: annotation(annotations::AUTOSCALER_MIN_SIZE),
        autoscaler_max_size: annotation(annotations::AUTOSCALER_MAX_SIZE),
        bootstrap,
        failure_domains: mp.spec.failure_domains.clone(),
        version: mp.spec.template.spec.version.clone(),
        node_labels: mp
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone()),
        cluster: handoff,
    };
    Ok(render_machinepool(&source, &variables, &workspace.source.image).map_err(from_render))
}
