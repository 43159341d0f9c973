//! The TerraformMachine delete guard (spec: Security Model, "Owner references are checked against
//! the owner"; Machine Role, "Delete"; the clusterctl move runbook).
//!
//! A TerraformMachine is normally deleted by its Machine, after drain and pre-terminate hooks; a
//! direct delete would bypass them. So a direct delete is refused while an owner exists that
//! passes the owner checks and is not being deleted. It is allowed for an orphan (no Machine
//! owner reference, as when a control-plane provider cleans up a failed create), when every
//! Machine named is gone or fails a check, when the owner is itself deleting, and for
//! `clusterctl move` (the object carries `clusterctl.cluster.x-k8s.io/delete-for-move`) while the
//! owning Cluster is paused.
//!
//! The owner checks: the Machine's `spec.infrastructureRef` names this TerraformMachine (API
//! group, kind and name); the owner reference's UID, when set, is the Machine's; the
//! TerraformMachine's `cluster.x-k8s.io/cluster-name` label, when set, is the Machine's
//! `spec.clusterName`.

use api::capi::{Cluster, Machine};
use api::constants::{annotations, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use super::{Rule, Violation};

/// The Cluster API group owners come from.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// The Machine-kind owner references of a TerraformMachine.
pub fn machine_owner_refs(meta: &ObjectMeta) -> Vec<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .filter(|r| {
            r.kind == "Machine" && r.api_version.split_once('/').map(|(g, _)| g) == Some(CAPI_GROUP)
        })
        .collect()
}

/// Why a named Machine is not the owner, or `Ok` when it passes every check.
pub fn owner_check(
    tm: &ObjectMeta,
    owner_ref: &OwnerReference,
    machine: &Machine,
) -> Result<(), String> {
    let name = tm.name.as_deref().unwrap_or_default();
    let names_us = machine
        .spec
        .infrastructure_ref
        .as_ref()
        .is_some_and(|r| r.is_captf("TerraformMachine", name));
    if !names_us {
        return Err("its spec.infrastructureRef does not name this TerraformMachine".into());
    }
    if !owner_ref.uid.is_empty() && machine.metadata.uid.as_deref() != Some(owner_ref.uid.as_str())
    {
        return Err("the owner reference's UID is not the Machine's".into());
    }
    if let Some(cluster) = tm.labels.as_ref().and_then(|l| l.get(labels::CLUSTER_NAME))
        && *cluster != machine.spec.cluster_name
    {
        return Err(format!(
            "the {} label does not match its spec.clusterName",
            labels::CLUSTER_NAME
        ));
    }
    Ok(())
}

/// Whether the TerraformMachine carries `clusterctl.cluster.x-k8s.io/delete-for-move`.
pub fn is_delete_for_move(tm: &ObjectMeta) -> bool {
    tm.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::DELETE_FOR_MOVE))
}

/// Whether a Cluster is paused (`spec.paused: true`, as `clusterctl move` and its runbook set).
pub fn is_paused(cluster: &Cluster) -> bool {
    cluster.spec.paused == Some(true)
}

/// The decision for one owner that passed the checks and is not deleting. `cluster` is the
/// owning Cluster when the delete carries `delete-for-move` (`None` when it is not found).
pub fn decide_live_owner(
    tm: &ObjectMeta,
    machine: &Machine,
    for_move: bool,
    cluster: Option<&Cluster>,
) -> Result<(), Violation> {
    let ns = tm.namespace.as_deref().unwrap_or_default();
    let name = tm.name.as_deref().unwrap_or_default();
    let machine_name = machine.name_any();
    if for_move {
        return match cluster {
            Some(c) if is_paused(c) => Ok(()),
            Some(c) => Err(Violation::new(
                Rule::MachineDelete,
                format!(
                    "TerraformMachine {ns}/{name} carries {} but its Cluster {ns}/{} is not paused: a move deletes machines only from a paused Cluster (set spec.paused: true first)",
                    annotations::DELETE_FOR_MOVE,
                    c.name_any()
                ),
            )),
            None => Err(Violation::new(
                Rule::MachineDelete,
                format!(
                    "TerraformMachine {ns}/{name} carries {} but its Cluster {ns}/{} was not found, so it cannot be confirmed paused",
                    annotations::DELETE_FOR_MOVE,
                    machine.spec.cluster_name
                ),
            )),
        };
    }
    Err(Violation::new(
        Rule::MachineDelete,
        format!(
            "TerraformMachine {ns}/{name} is owned by Machine {ns}/{machine_name}, which is not being deleted: delete the Machine (or scale its owner down) so drain and pre-terminate hooks run first"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::capi::{ClusterSpec, ContractVersionedObjectReference, MachineSpec};
    use std::collections::BTreeMap;

    fn tm_meta(label: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("m1".into()),
            namespace: Some("ns".into()),
            labels: label
                .map(|c| BTreeMap::from([(labels::CLUSTER_NAME.to_owned(), c.to_owned())])),
            owner_references: Some(vec![owner("uid-1")]),
            ..ObjectMeta::default()
        }
    }

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            name: "machine-1".into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }
    }

    fn machine(infra: &str, uid: &str, cluster: &str) -> Machine {
        let mut m = Machine::new(
            "machine-1",
            MachineSpec {
                cluster_name: cluster.into(),
                infrastructure_ref: Some(ContractVersionedObjectReference {
                    api_group: api::GROUP.into(),
                    kind: "TerraformMachine".into(),
                    name: infra.into(),
                }),
                ..MachineSpec::default()
            },
        );
        m.metadata.uid = Some(uid.into());
        m.metadata.namespace = Some("ns".into());
        m
    }

    #[test]
    fn only_machine_owner_references_of_cluster_api_count() {
        let mut meta = tm_meta(None);
        meta.owner_references = Some(vec![
            owner("u"),
            OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Machine".into(),
                ..OwnerReference::default()
            },
            OwnerReference {
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "MachineSet".into(),
                ..OwnerReference::default()
            },
        ]);
        assert_eq!(machine_owner_refs(&meta).len(), 1);
        assert!(machine_owner_refs(&ObjectMeta::default()).is_empty());
    }

    #[test]
    fn an_owner_must_pass_all_three_checks() {
        let meta = tm_meta(Some("c1"));
        let r = owner("uid-1");
        assert_eq!(
            owner_check(&meta, &r, &machine("m1", "uid-1", "c1")),
            Ok(())
        );
        assert_eq!(
            owner_check(&meta, &r, &machine("other", "uid-1", "c1")),
            Err("its spec.infrastructureRef does not name this TerraformMachine".into())
        );
        assert_eq!(
            owner_check(&meta, &r, &machine("m1", "uid-2", "c1")),
            Err("the owner reference's UID is not the Machine's".into())
        );
        assert_eq!(
            owner_check(&meta, &r, &machine("m1", "uid-1", "c2")),
            Err(
                "the cluster.x-k8s.io/cluster-name label does not match its spec.clusterName"
                    .into()
            )
        );
        // An owner reference without a UID and an object without the label skip those checks.
        assert_eq!(
            owner_check(&tm_meta(None), &owner(""), &machine("m1", "uid-9", "any")),
            Ok(())
        );
    }

    #[test]
    fn a_live_owner_blocks_a_direct_delete() {
        let meta = tm_meta(Some("c1"));
        let err = decide_live_owner(&meta, &machine("m1", "uid-1", "c1"), false, None).unwrap_err();
        assert_eq!(err.rule, Rule::MachineDelete);
        assert_eq!(
            err.message,
            "TerraformMachine ns/m1 is owned by Machine ns/machine-1, which is not being deleted: delete the Machine (or scale its owner down) so drain and pre-terminate hooks run first"
        );
    }

    #[test]
    fn delete_for_move_is_honoured_only_while_the_cluster_is_paused() {
        let meta = tm_meta(Some("c1"));
        let m = machine("m1", "uid-1", "c1");
        let mut c = Cluster::new("c1", ClusterSpec::default());
        assert_eq!(
            decide_live_owner(&meta, &m, true, Some(&c))
                .unwrap_err()
                .message,
            "TerraformMachine ns/m1 carries clusterctl.cluster.x-k8s.io/delete-for-move but its Cluster ns/c1 is not paused: a move deletes machines only from a paused Cluster (set spec.paused: true first)"
        );
        assert_eq!(
            decide_live_owner(&meta, &m, true, None)
                .unwrap_err()
                .message,
            "TerraformMachine ns/m1 carries clusterctl.cluster.x-k8s.io/delete-for-move but its Cluster ns/c1 was not found, so it cannot be confirmed paused"
        );
        c.spec.paused = Some(true);
        assert_eq!(decide_live_owner(&meta, &m, true, Some(&c)), Ok(()));
    }

    #[test]
    fn the_move_annotation_is_read_from_the_object() {
        let mut meta = tm_meta(None);
        assert!(!is_delete_for_move(&meta));
        meta.annotations = Some(BTreeMap::from([(
            annotations::DELETE_FOR_MOVE.to_owned(),
            String::new(),
        )]));
        assert!(is_delete_for_move(&meta));
    }
}
