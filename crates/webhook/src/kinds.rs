//! The `Validate` dispatch: one implementation per kind, composing the pure [`crate::rules`] for
//! CREATE, UPDATE and DELETE, with I/O only through [`Lookups`] (spec: The Kinds for what each
//! kind allows to change; Security Model and Identities and Credentials for what needs the API
//! server).

use std::future::Future;

use api::cluster::{TerraformClusterSpec, TerraformClusterTemplate};
use api::identity::TerraformClusterIdentity;
use api::machine::{TerraformMachineSpec, TerraformMachineTemplate};
use api::machinepool::{TerraformMachinePoolSpec, TerraformMachinePoolTemplate};
use api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use contract::names::ObjectKind;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;

use crate::lookups::{LookupError, Lookups};
use crate::rules::{
    Rule, Violation, changed, drift, identity, immutability, jobs, machine_delete, workspace,
};

/// The seven kinds, each served on its own path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// TerraformCluster.
    Cluster,
    /// TerraformClusterTemplate.
    ClusterTemplate,
    /// TerraformMachine.
    Machine,
    /// TerraformMachineTemplate.
    MachineTemplate,
    /// TerraformMachinePool.
    MachinePool,
    /// TerraformMachinePoolTemplate.
    MachinePoolTemplate,
    /// TerraformClusterIdentity.
    ClusterIdentity,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 7] = [
        Kind::Cluster,
        Kind::ClusterTemplate,
        Kind::Machine,
        Kind::MachineTemplate,
        Kind::MachinePool,
        Kind::MachinePoolTemplate,
        Kind::ClusterIdentity,
    ];

    /// The Kubernetes kind.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cluster => "TerraformCluster",
            Kind::ClusterTemplate => "TerraformClusterTemplate",
            Kind::Machine => "TerraformMachine",
            Kind::MachineTemplate => "TerraformMachineTemplate",
            Kind::MachinePool => "TerraformMachinePool",
            Kind::MachinePoolTemplate => "TerraformMachinePoolTemplate",
            Kind::ClusterIdentity => "TerraformClusterIdentity",
        }
    }

    /// The resource (plural) name.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Cluster => "terraformclusters",
            Kind::ClusterTemplate => "terraformclustertemplates",
            Kind::Machine => "terraformmachines",
            Kind::MachineTemplate => "terraformmachinetemplates",
            Kind::MachinePool => "terraformmachinepools",
            Kind::MachinePoolTemplate => "terraformmachinepooltemplates",
            Kind::ClusterIdentity => "terraformclusteridentities",
        }
    }

    /// The validating path, `/validate-<group with dashes>-<version>-<lowercase kind>`.
    pub fn path(self) -> String {
        format!(
            "/validate-{}-{}-{}",
            api::GROUP.replace('.', "-"),
            api::VERSION,
            self.name().to_ascii_lowercase()
        )
    }

    /// Whether DELETE is validated for this kind (TerraformClusterIdentity and TerraformMachine).
    pub fn validates_delete(self) -> bool {
        matches!(self, Kind::ClusterIdentity | Kind::Machine)
    }
}

/// What a CREATE or UPDATE is about. A DELETE is judged on metadata alone
/// ([`Validate::validate_delete`]), so a stored object that no longer decodes never blocks its
/// own deletion.
#[derive(Debug)]
pub enum Change<'a, T> {
    /// A new object.
    Create(&'a T),
    /// A changed object and the stored one.
    Update {
        /// The object as it would be stored.
        new: &'a T,
        /// The object as stored now.
        old: &'a T,
    },
}

/// The request attributes a rule may read.
#[derive(Debug, Clone, Copy)]
pub struct RequestInfo<'a> {
    /// Who is asking.
    pub user: &'a UserInfo,
    /// Whether the request is a dry run.
    pub dry_run: bool,
    /// The user name the manager authenticates as (its ServiceAccount).
    pub manager: &'a str,
}

/// One kind's admission rules.
pub trait Validate: ResourceExt + DeserializeOwned + Send + Sync + 'static {
    /// The kind.
    const KIND: Kind;

    /// Every violation of `change`; empty when it is allowed.
    fn validate<L: Lookups>(
        change: Change<'_, Self>,
        req: RequestInfo<'_>,
        lookups: &L,
    ) -> impl Future<Output = Vec<Violation>> + Send;

    /// Every violation of a DELETE, judged from the stored object's metadata and raw JSON only
    /// (it may no longer decode as the kind). Only kinds whose DELETE is validated override it.
    fn validate_delete<L: Lookups>(
        object: &DynamicObject,
        lookups: &L,
    ) -> impl Future<Output = Vec<Violation>> + Send {
        let _ = (object, lookups);
        async { Vec::new() }
    }

    /// The JSON pointers an UPDATE may not change while the stored object `old` no longer decodes
    /// (the rules that compare old and new cannot run then). The default fixes nothing: the new
    /// object is checked as if created.
    fn fixed_while_undecodable(old: &serde_json::Value) -> Vec<&'static str> {
        let _ = old;
        Vec::new()
    }
}

/// A lookup failure as a refusal: the webhook fails closed.
fn lookup_failed(what: &str, e: &LookupError) -> Violation {
    Violation::new(
        Rule::Lookup,
        format!("could not check {what}: {e}; try again"),
    )
}

fn split<'a, T>(change: &Change<'a, T>) -> (&'a T, Option<&'a T>) {
    match *change {
        Change::Create(new) => (new, None),
        Change::Update { new, old } => (new, Some(old)),
    }
}

/// On-demand checks: a changed `captf.io/requested-at` value fits the status that records it.
fn check_request<T: ResourceExt>(change: &Change<'_, T>, out: &mut Vec<Violation>) {
    let (new, old) = split(change);
    let key = api::constants::annotations::REQUESTED_AT;
    let value = |o: &T| o.annotations().get(key).cloned();
    crate::rules::requested::check_requested_at(
        value(new).as_deref(),
        old.and_then(value).as_deref(),
        out,
    );
}

/// What every workload kind's spec has: its workspace and its drift interval.
trait WorkloadSpec {
    fn workspace(&self) -> &api::workload::WorkspaceSpec;
    fn drift_interval(&self) -> Option<i32>;
}

macro_rules! workload_spec {
    ($spec:ty) => {
        impl WorkloadSpec for $spec {
            fn workspace(&self) -> &api::workload::WorkspaceSpec {
                &self.workspace
            }
            fn drift_interval(&self) -> Option<i32> {
                self.drift.as_ref().and_then(|d| d.interval_seconds)
            }
        }
    };
}

workload_spec!(TerraformClusterSpec);
workload_spec!(TerraformMachineSpec);
workload_spec!(TerraformMachinePoolSpec);

/// The checks every workload kind's spec at `prefix` shares: its workspace (source, identity,
/// variables, jobs) and its drift interval (`check_interval` is the kind's rule for it).
fn check_workload<S: WorkloadSpec>(
    prefix: &str,
    kind: ObjectKind,
    (new, old): (&S, Option<&S>),
    check_interval: fn(&str, Option<i32>, &mut Vec<Violation>),
    out: &mut Vec<Violation>,
) {
    workspace::check_workspace(
        prefix,
        kind,
        new.workspace(),
        old.map(WorkloadSpec::workspace),
        out,
    );
    let interval = new.drift_interval();
    if changed(&interval, old.map(WorkloadSpec::drift_interval).as_ref()) {
        check_interval(&format!("{prefix}.drift.intervalSeconds"), interval, out);
    }
}

/// The checks of a TerraformCluster spec at `prefix` (`spec` or `spec.template.spec`).
fn check_cluster_spec(
    prefix: &str,
    new: &TerraformClusterSpec,
    old: Option<&TerraformClusterSpec>,
    out: &mut Vec<Violation>,
) {
    let kind = ObjectKind::Cluster;
    check_workload(prefix, kind, (new, old), drift::check_interval, out);
    let defaults = new.defaults.as_ref();
    let old_defaults = old.map(|o| o.defaults.as_ref());
    let new_jobs = defaults.and_then(|d| d.jobs.as_ref());
    if let Some(policy) = new_jobs
        && changed(
            &new_jobs,
            old_defaults
                .map(|d| d.and_then(|d| d.jobs.as_ref()))
                .as_ref(),
        )
    {
        jobs::check_job_policy(&format!("{prefix}.defaults.jobs"), policy, out);
    }
    let new_default_drift = defaults
        .and_then(|d| d.drift.as_ref())
        .and_then(|d| d.interval_seconds);
    let old_default_drift = old_defaults.map(|d| {
        d.and_then(|d| d.drift.as_ref())
            .and_then(|d| d.interval_seconds)
    });
    if changed(&new_default_drift, old_default_drift.as_ref()) {
        drift::check_interval(
            &format!("{prefix}.defaults.drift.intervalSeconds"),
            new_default_drift,
            out,
        );
    }
}

/// The checks of a TerraformMachine spec at `prefix`.
fn check_machine_spec(
    prefix: &str,
    new: &TerraformMachineSpec,
    old: Option<&TerraformMachineSpec>,
    out: &mut Vec<Violation>,
) {
    let kind = ObjectKind::Machine;
    check_workload(prefix, kind, (new, old), drift::check_interval, out);
}

/// The checks of a TerraformMachinePool spec at `prefix`.
fn check_pool_spec(
    prefix: &str,
    new: &TerraformMachinePoolSpec,
    old: Option<&TerraformMachinePoolSpec>,
    out: &mut Vec<Violation>,
) {
    let kind = ObjectKind::MachinePool;
    check_workload(prefix, kind, (new, old), drift::check_pool_interval, out);
}

impl Validate for TerraformCluster {
    const KIND: Kind = Kind::Cluster;

    fn fixed_while_undecodable(old: &serde_json::Value) -> Vec<&'static str> {
        let has_host = old
            .pointer("/spec/controlPlaneEndpoint/host")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|h| !h.is_empty());
        if has_host {
            vec!["/spec/controlPlaneEndpoint"]
        } else {
            Vec::new()
        }
    }

    async fn validate<L: Lookups>(
        change: Change<'_, Self>,
        _: RequestInfo<'_>,
        _: &L,
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        check_request(&change, &mut out);
        let (new, old) = split(&change);
        check_cluster_spec("spec", &new.spec, old.map(|o| &o.spec), &mut out);
        if let Some(old) = old {
            immutability::check_cluster_update(&new.spec, &old.spec, &mut out);
        }
        out
    }
}

impl Validate for TerraformMachine {
    const KIND: Kind = Kind::Machine;

    async fn validate<L: Lookups>(
        change: Change<'_, Self>,
        req: RequestInfo<'_>,
        _: &L,
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        check_request(&change, &mut out);
        match change {
            Change::Create(new) => check_machine_spec("spec", &new.spec, None, &mut out),
            Change::Update { new, old } => {
                check_machine_spec("spec", &new.spec, Some(&old.spec), &mut out);
                immutability::check_machine_update(&new.spec, &old.spec, &mut out);
                immutability::check_provider_id_first_write(
                    &new.spec,
                    &old.spec,
                    req.user.username.as_deref().unwrap_or_default(),
                    req.manager,
                    &mut out,
                );
            }
        }
        out
    }

    async fn validate_delete<L: Lookups>(object: &DynamicObject, lookups: &L) -> Vec<Violation> {
        machine_delete_guard(&object.metadata, lookups)
            .await
            .err()
            .into_iter()
            .collect()
    }

    fn fixed_while_undecodable(_: &serde_json::Value) -> Vec<&'static str> {
        vec!["/spec"]
    }
}

/// The TerraformMachine delete guard: read each Machine the object names as owner, and refuse
/// while one passes the owner checks and is not deleting (unless a move of a paused Cluster).
async fn machine_delete_guard<L: Lookups>(meta: &ObjectMeta, lookups: &L) -> Result<(), Violation> {
    let ns = meta.namespace.clone().unwrap_or_default();
    for owner_ref in machine_delete::machine_owner_refs(meta) {
        let machine = lookups
            .machine(&ns, &owner_ref.name)
            .await
            .map_err(|e| lookup_failed("the owning Machine", &e))?;
        let Some(machine) = machine else { continue };
        if machine_delete::owner_check(meta, owner_ref, &machine).is_err()
            || machine.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let for_move = machine_delete::is_delete_for_move(meta);
        let cluster = if for_move {
            lookups
                .cluster(&ns, &machine.spec.cluster_name)
                .await
                .map_err(|e| lookup_failed("the owning Cluster", &e))?
        } else {
            None
        };
        machine_delete::decide_live_owner(meta, &machine, for_move, cluster.as_ref())?;
    }
    Ok(())
}

impl Validate for TerraformMachinePool {
    const KIND: Kind = Kind::MachinePool;

    async fn validate<L: Lookups>(
        change: Change<'_, Self>,
        _: RequestInfo<'_>,
        _: &L,
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        check_request(&change, &mut out);
        let (new, old) = split(&change);
        check_pool_spec("spec", &new.spec, old.map(|o| &o.spec), &mut out);
        out
    }
}

const TEMPLATE_SPEC: &str = "spec.template.spec";

/// The rules every template kind shares: its `spec.template.spec` is checked like the spec of the
/// object it creates, and is immutable except in a ClusterClass topology dry-run.
fn validate_template<T, S: PartialEq>(
    kind: Kind,
    change: &Change<'_, T>,
    req: RequestInfo<'_>,
    template_spec: fn(&T) -> &S,
    check_spec: fn(&str, &S, Option<&S>, &mut Vec<Violation>),
) -> Vec<Violation>
where
    T: ResourceExt,
{
    let mut out = Vec::new();
    let (new, old) = split(change);
    let (n, o) = (template_spec(new), old.map(template_spec));
    check_spec(TEMPLATE_SPEC, n, o, &mut out);
    if let Some(o) = o {
        let dry = immutability::is_topology_dry_run(req.dry_run, new.meta());
        immutability::check_template_update(kind.name(), n, o, dry, &mut out);
    }
    out
}

/// A template kind's `Validate`: its `spec.template.spec` checked as `check_spec` checks the
/// spec of the object it creates ([`validate_template`]).
macro_rules! template_kind {
    ($template:ty, $kind:expr, $check_spec:path) => {
        impl Validate for $template {
            const KIND: Kind = $kind;

            fn fixed_while_undecodable(_: &serde_json::Value) -> Vec<&'static str> {
                vec!["/spec/template/spec"]
            }

            async fn validate<L: Lookups>(
                change: Change<'_, Self>,
                req: RequestInfo<'_>,
                _: &L,
            ) -> Vec<Violation> {
                validate_template(
                    Self::KIND,
                    &change,
                    req,
                    |t| &t.spec.template.spec,
                    $check_spec,
                )
            }
        }
    };
}

template_kind!(
    TerraformClusterTemplate,
    Kind::ClusterTemplate,
    check_cluster_spec
);
template_kind!(
    TerraformMachineTemplate,
    Kind::MachineTemplate,
    check_machine_spec
);
template_kind!(
    TerraformMachinePoolTemplate,
    Kind::MachinePoolTemplate,
    check_pool_spec
);

impl Validate for TerraformClusterIdentity {
    const KIND: Kind = Kind::ClusterIdentity;

    async fn validate_delete<L: Lookups>(object: &DynamicObject, lookups: &L) -> Vec<Violation> {
        let mut out = Vec::new();
        let name = object.metadata.name.clone().unwrap_or_default();
        match lookups.inventory().await {
            Ok(inv) => {
                if let Some(user) = identity::find_user(&name, &inv) {
                    out.push(identity::in_use(&name, &user));
                }
            }
            Err(e) => out.push(lookup_failed("which objects use the identity", &e)),
        }
        // Read leniently: the stored status may not decode as the kind any more.
        let namespaces: Vec<String> = object
            .data
            .pointer("/status/namespaces")
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        out.extend(identity::mirrors_remain(&name, &namespaces));
        out
    }

    async fn validate<L: Lookups>(
        change: Change<'_, Self>,
        req: RequestInfo<'_>,
        lookups: &L,
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        let (new, old) = split(&change);
        if changed(
            &new.spec.allowed_namespaces,
            old.map(|o| &o.spec.allowed_namespaces),
        ) {
            identity::check_allowed_namespaces(&new.spec, &mut out);
        }
        if let Some(r) = &new.spec.secret_ref
            && old.is_none_or(|o| identity::secret_ref_changed(&new.spec, &o.spec))
        {
            match lookups
                .may_get_secret(req.user, &r.namespace, &r.name)
                .await
            {
                Ok(true) => {}
                Ok(false) => out.push(identity::secret_access_denied(
                    req.user.username.as_deref().unwrap_or_default(),
                    r,
                )),
                Err(e) => out.push(lookup_failed("access to spec.secretRef", &e)),
            }
        }
        if let Some(keyless) = &new.spec.workload_identity
            && old.is_none_or(|o| identity::token_scope_changed(&new.spec, &o.spec))
        {
            let account = &keyless.service_account_name;
            for ns in identity::token_scopes(&new.spec) {
                match lookups.may_create_token(req.user, &ns, account).await {
                    Ok(true) => {}
                    Ok(false) => out.push(identity::token_access_denied(
                        req.user.username.as_deref().unwrap_or_default(),
                        account,
                        &ns,
                    )),
                    Err(e) => {
                        out.push(lookup_failed("access to spec.workloadIdentity", &e));
                        break;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_cluster_api_convention() {
        assert_eq!(
            Kind::Cluster.path(),
            "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-terraformcluster"
        );
        assert_eq!(
            Kind::ClusterIdentity.path(),
            "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-terraformclusteridentity"
        );
        let paths: std::collections::BTreeSet<String> =
            Kind::ALL.iter().map(|k| k.path()).collect();
        assert_eq!(paths.len(), 7);
    }
}
