//! What may change on a live object (spec: The Kinds, Machine Role "Lifecycle", Templates and
//! ClusterClass "Template immutability").
//!
//! - TerraformMachine: `spec.source`, `spec.identityRef` (unset → set included), `spec.variables`
//!   and `spec.variablesFrom` are fixed at creation; `spec.providerID` only moves from empty to
//!   set, and only the manager's own ServiceAccount makes that first write (it copies the
//!   module's `provider_id` output; anyone else setting it would tell Cluster API a machine exists
//!   that the module never reported); `jobs`, `drift`, `remediation` and all metadata stay mutable.
//! - TerraformCluster: `spec.controlPlaneEndpoint` is fixed once it has a host.
//! - Templates: `spec.template.spec` is fixed, `spec.template.metadata` mutable, except during a
//!   ClusterClass topology dry-run (a dry-run request whose object carries
//!   `topology.cluster.x-k8s.io/dry-run`).
//! - TerraformMachinePool and TerraformClusterIdentity: everything is mutable.

use api::cluster::TerraformClusterSpec;
use api::constants::annotations;
use api::machine::TerraformMachineSpec;
use kube::api::ObjectMeta;

use super::{Rule, Violation};

/// The rollout advice every TerraformMachine immutability message ends with.
const MACHINE_ROLLOUT: &str = "replace the machine through a MachineDeployment or control-plane rollout instead of editing it";

/// Checks a TerraformMachine UPDATE.
pub fn check_machine_update(
    new: &TerraformMachineSpec,
    old: &TerraformMachineSpec,
    out: &mut Vec<Violation>,
) {
    let (n, o) = (&new.workspace, &old.workspace);
    let mut immutable = |field: &str, differs: bool| {
        if differs {
            out.push(Violation::new(
                Rule::MachineImmutable,
                format!("{field} is immutable on a TerraformMachine: {MACHINE_ROLLOUT}"),
            ));
        }
    };
    immutable("spec.source", n.source != o.source);
    if n.identity_ref != o.identity_ref {
        let field = if o.identity_ref.is_none() {
            "spec.identityRef (including from unset to a value)"
        } else {
            "spec.identityRef"
        };
        immutable(field, true);
    }
    immutable("spec.variables", n.variables != o.variables);
    immutable("spec.variablesFrom", n.variables_from != o.variables_from);

    let old_id = old.provider_id.as_deref().filter(|s| !s.is_empty());
    if let Some(old_id) = old_id
        && new.provider_id.as_deref() != Some(old_id)
    {
        out.push(Violation::new(
            Rule::ProviderId,
            format!(
                "spec.providerID is already set to {old_id:?} and cannot change: it only ever moves from empty to a value"
            ),
        ));
    }
}

/// Checks who writes a TerraformMachine's `spec.providerID` the first time (empty → value, on
/// UPDATE): only `manager`, the user name of the manager's ServiceAccount. A CREATE may carry one
/// (`clusterctl move` and restores recreate machines with it).
pub fn check_provider_id_first_write(
    new: &TerraformMachineSpec,
    old: &TerraformMachineSpec,
    user: &str,
    manager: &str,
    out: &mut Vec<Violation>,
) {
    let was_empty = old.provider_id.as_deref().is_none_or(str::is_empty);
    let now_set = new.provider_id.as_deref().is_some_and(|s| !s.is_empty());
    if was_empty && now_set && user != manager {
        out.push(Violation::new(
            Rule::ProviderId,
            format!(
                "spec.providerID may only be set by the CAPTF manager ({manager}), which copies it from the module's provider_id output; {user} may not set it"
            ),
        ));
    }
}

/// Checks a TerraformCluster UPDATE.
pub fn check_cluster_update(
    new: &TerraformClusterSpec,
    old: &TerraformClusterSpec,
    out: &mut Vec<Violation>,
) {
    if let Some(old_ep) = &old.control_plane_endpoint
        && old_ep.has_host()
        && new.control_plane_endpoint.as_ref() != Some(old_ep)
    {
        out.push(Violation::new(
            Rule::ControlPlaneEndpoint,
            format!(
                "spec.controlPlaneEndpoint is immutable once it has a host (it is {}): every Machine and kubeconfig of the cluster points at it",
                describe_endpoint(old_ep)
            ),
        ));
    }
}

fn describe_endpoint(ep: &api::shared::ApiEndpoint) -> String {
    match (&ep.host, ep.port) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => format!("{h} without a port"),
        _ => String::from("unset"),
    }
}

/// Whether a request is a ClusterClass topology dry-run: a dry-run request whose object carries
/// the `topology.cluster.x-k8s.io/dry-run` annotation (how Cluster API's topology controller
/// validates a patched template without persisting it).
pub fn is_topology_dry_run(dry_run: bool, meta: &ObjectMeta) -> bool {
    dry_run
        && meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(annotations::TOPOLOGY_DRY_RUN))
}

/// Checks a template UPDATE of `kind`: `spec.template.spec` must not change unless the request is
/// a topology dry-run.
pub fn check_template_update<S: PartialEq>(
    kind: &str,
    new: &S,
    old: &S,
    topology_dry_run: bool,
    out: &mut Vec<Violation>,
) {
    if !topology_dry_run && new != old {
        out.push(Violation::new(
            Rule::TemplateImmutable,
            format!(
                "spec.template.spec is immutable on a {kind}: create a new template and point its owner at it (only spec.template.metadata may change)"
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::shared::{
        ApiEndpoint, IdentityReference, JobPolicy, MachineDriftPolicy, MachineRemediation,
        VariablesObjectReference, VariablesSource,
    };
    use std::collections::BTreeMap;

    fn machine() -> TerraformMachineSpec {
        let mut m = TerraformMachineSpec::default();
        m.workspace.source.image = "ghcr.io/a/m:v1".into();
        m
    }

    fn machine_messages(new: &TerraformMachineSpec, old: &TerraformMachineSpec) -> Vec<String> {
        let mut out = Vec::new();
        check_machine_update(new, old, &mut out);
        out.into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn machine_source_is_immutable() {
        let old = machine();
        let mut new = old.clone();
        new.workspace.source.image = "ghcr.io/a/m:v2".into();
        assert_eq!(
            machine_messages(&new, &old),
            [
                "spec.source is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it"
            ]
        );
    }

    #[test]
    fn machine_identity_ref_is_immutable_including_unset_to_set() {
        let old = machine();
        let mut new = old.clone();
        new.workspace.identity_ref = Some(IdentityReference { name: "aws".into() });
        assert_eq!(
            machine_messages(&new, &old),
            [
                "spec.identityRef (including from unset to a value) is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it"
            ]
        );
        let mut other = new.clone();
        other.workspace.identity_ref = Some(IdentityReference { name: "gcp".into() });
        assert_eq!(
            machine_messages(&other, &new),
            [
                "spec.identityRef is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it"
            ]
        );
    }

    #[test]
    fn machine_variables_and_sources_are_immutable() {
        let old = machine();
        let mut new = old.clone();
        let mut vars = serde_json::Map::new();
        vars.insert("size".into(), "m".into());
        new.workspace.variables = Some(vars);
        new.workspace.variables_from = Some(vec![VariablesSource {
            config_map_ref: Some(VariablesObjectReference { name: "a".into() }),
            ..VariablesSource::default()
        }]);
        assert_eq!(
            machine_messages(&new, &old),
            [
                "spec.variables is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it",
                "spec.variablesFrom is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it",
            ]
        );
    }

    #[test]
    fn only_the_managers_service_account_writes_provider_id_the_first_time() {
        const MANAGER: &str = "system:serviceaccount:captf-system:captf-controller-manager";
        let run = |new: &TerraformMachineSpec, old: &TerraformMachineSpec, user: &str| {
            let mut out = Vec::new();
            check_provider_id_first_write(new, old, user, MANAGER, &mut out);
            out.into_iter().map(|v| v.message).collect::<Vec<_>>()
        };
        let old = machine();
        let mut set = old.clone();
        set.provider_id = Some("aws:///us-east-1a/i-1".into());
        assert!(run(&set, &old, MANAGER).is_empty());
        assert_eq!(
            run(&set, &old, "alice"),
            [
                "spec.providerID may only be set by the CAPTF manager (system:serviceaccount:captf-system:captf-controller-manager), which copies it from the module's provider_id output; alice may not set it"
            ]
        );
        let mut empty = old.clone();
        empty.provider_id = Some(String::new());
        assert_eq!(run(&set, &empty, "alice").len(), 1);
        // Anything else is not a first write: unchanged, or cleared.
        assert!(run(&set, &set, "alice").is_empty());
        assert!(run(&old, &set, "alice").is_empty());
        assert!(run(&empty, &old, "alice").is_empty());
    }

    #[test]
    fn machine_provider_id_only_moves_from_empty_to_set() {
        let old = machine();
        let mut set = old.clone();
        set.provider_id = Some("aws:///us-east-1a/i-1".into());
        assert!(machine_messages(&set, &old).is_empty());
        let mut empty = old.clone();
        empty.provider_id = Some(String::new());
        assert!(machine_messages(&set, &empty).is_empty());
        let mut changed = set.clone();
        changed.provider_id = Some("aws:///us-east-1a/i-2".into());
        assert_eq!(
            machine_messages(&changed, &set),
            [
                "spec.providerID is already set to \"aws:///us-east-1a/i-1\" and cannot change: it only ever moves from empty to a value"
            ]
        );
        assert_eq!(
            machine_messages(&old, &set).len(),
            1,
            "unsetting is a change too"
        );
    }

    #[test]
    fn machine_jobs_drift_and_remediation_stay_mutable() {
        let old = machine();
        let mut new = old.clone();
        new.workspace.jobs = Some(JobPolicy {
            active_deadline_seconds: Some(7200),
            ..JobPolicy::default()
        });
        new.drift = Some(MachineDriftPolicy {
            interval_seconds: Some(0),
        });
        new.remediation = Some(MachineRemediation {
            annotate_machine: Some(true),
            ..MachineRemediation::default()
        });
        assert!(machine_messages(&new, &old).is_empty());
    }

    fn cluster(ep: impl Into<Option<ApiEndpoint>>) -> TerraformClusterSpec {
        TerraformClusterSpec {
            control_plane_endpoint: ep.into(),
            ..TerraformClusterSpec::default()
        }
    }

    fn ep(host: Option<&str>, port: Option<i32>) -> ApiEndpoint {
        ApiEndpoint {
            host: host.map(Into::into),
            port,
        }
    }

    #[test]
    fn cluster_endpoint_is_immutable_once_it_has_a_host() {
        let run = |new: &TerraformClusterSpec, old: &TerraformClusterSpec| {
            let mut out = Vec::new();
            check_cluster_update(new, old, &mut out);
            out.into_iter().map(|v| v.message).collect::<Vec<_>>()
        };
        // Mutable while it has no host.
        assert!(run(&cluster(ep(Some("10.0.0.1"), Some(6443))), &cluster(None)).is_empty());
        assert!(
            run(
                &cluster(ep(Some("a"), Some(1))),
                &cluster(ep(None, Some(6443)))
            )
            .is_empty()
        );
        // Fixed after.
        let set = cluster(ep(Some("10.0.0.1"), Some(6443)));
        assert_eq!(
            run(&cluster(ep(Some("10.0.0.2"), Some(6443))), &set),
            [
                "spec.controlPlaneEndpoint is immutable once it has a host (it is 10.0.0.1:6443): every Machine and kubeconfig of the cluster points at it"
            ]
        );
        assert_eq!(run(&cluster(None), &set).len(), 1);
        assert!(run(&set.clone(), &set).is_empty());
        // The rest of the cluster stays mutable.
        let mut other = set.clone();
        other.workspace.source.image = "x:y".into();
        assert!(run(&other, &set).is_empty());
    }

    #[test]
    fn template_spec_is_immutable_except_in_a_topology_dry_run() {
        let run = |dry: bool| {
            let mut out = Vec::new();
            check_template_update("TerraformMachineTemplate", &1, &2, dry, &mut out);
            out.into_iter().map(|v| v.message).collect::<Vec<_>>()
        };
        assert_eq!(
            run(false),
            [
                "spec.template.spec is immutable on a TerraformMachineTemplate: create a new template and point its owner at it (only spec.template.metadata may change)"
            ]
        );
        assert!(run(true).is_empty());
    }

    #[test]
    fn a_topology_dry_run_needs_both_the_dry_run_flag_and_the_annotation() {
        let mut meta = ObjectMeta::default();
        assert!(!is_topology_dry_run(true, &meta));
        meta.annotations = Some(BTreeMap::from([(
            annotations::TOPOLOGY_DRY_RUN.to_owned(),
            String::new(),
        )]));
        assert!(!is_topology_dry_run(false, &meta));
        assert!(is_topology_dry_run(true, &meta));
    }
}
