//! TerraformClusterIdentity (spec: Identities and Credentials, "Create the identity" and "Delete
//! an identity"; The Kinds, "What a cluster passes to its machines and pools").
//!
//! - `allowedNamespaces: {}` is ambiguous (an empty selector reads as every namespace) and is
//!   rejected; set `list`, or `selector: {}` to allow every namespace.
//! - On create, and on an update that changes `spec.secretRef`, the requesting user must be
//!   allowed to `get` the named Secret (a SubjectAccessReview, run by the caller; this module words
//!   the refusal).
//! - A keyless identity (`spec.workloadIdentity`): on create, and on an update that changes its
//!   ServiceAccount or its allowed namespaces, the requesting user must be allowed to `create`
//!   `serviceaccounts/token` for that ServiceAccount in every listed namespace, and cluster-wide
//!   when a selector allows namespaces ([`token_scopes`]).
//! - Deletion is refused while any TerraformCluster, TerraformMachine or TerraformMachinePool, in
//!   any namespace and even while being deleted, resolves to the identity (its own `identityRef`,
//!   else its cluster's `spec.defaults.identityRef`, else the cluster's own `spec.identityRef`,
//!   the cluster found through the object's `cluster.x-k8s.io/cluster-name` label and the Cluster's
//!   `spec.infrastructureRef`), naming one such object; or while `status.namespaces` lists a
//!   namespace still holding a credential mirror, naming them all.

use std::collections::BTreeMap;

use api::capi::Cluster;
use api::constants::labels;
use api::identity::{SecretReference, TerraformClusterIdentitySpec};
use api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use kube::ResourceExt;

use super::{Rule, Violation};

/// Checks `spec.allowedNamespaces`.
pub fn check_allowed_namespaces(spec: &TerraformClusterIdentitySpec, out: &mut Vec<Violation>) {
    if let Some(allowed) = &spec.allowed_namespaces {
        let has_list = allowed.list.as_ref().is_some_and(|l| !l.is_empty());
        if !has_list && allowed.selector.is_none() {
            out.push(Violation::new(
                Rule::AllowedNamespaces,
                "spec.allowedNamespaces sets neither list nor selector; {} is ambiguous and not allowed: list the namespaces, write selector: {} to allow every namespace, or leave allowedNamespaces unset to allow none",
            ));
        }
    }
}

/// Whether an UPDATE changes `spec.secretRef` (and so needs a new access check).
pub fn secret_ref_changed(
    new: &TerraformClusterIdentitySpec,
    old: &TerraformClusterIdentitySpec,
) -> bool {
    new.secret_ref != old.secret_ref
}

/// Whether an UPDATE of a keyless identity changes what its tokens can reach: its ServiceAccount,
/// or the namespaces it allows (and so needs a new access check).
pub fn token_scope_changed(
    new: &TerraformClusterIdentitySpec,
    old: &TerraformClusterIdentitySpec,
) -> bool {
    let account = |s: &TerraformClusterIdentitySpec| {
        s.workload_identity
            .as_ref()
            .map(|w| w.service_account_name.clone())
    };
    new.workload_identity.is_some()
        && (account(new) != account(old) || new.allowed_namespaces != old.allowed_namespaces)
}

/// The namespaces in which the requester of a keyless identity must be allowed to create tokens
/// for its ServiceAccount: every listed namespace, and `""` (every namespace) when a selector is
/// set. Empty for an identity with a Secret, or one that allows no namespace.
pub fn token_scopes(spec: &TerraformClusterIdentitySpec) -> Vec<String> {
    if spec.workload_identity.is_none() {
        return Vec::new();
    }
    let Some(allowed) = &spec.allowed_namespaces else {
        return Vec::new();
    };
    let mut out: Vec<String> = allowed.list.iter().flatten().cloned().collect();
    if allowed.selector.is_some() {
        out.push(String::new());
    }
    out.sort();
    out.dedup();
    out
}

/// The refusal when `user` may not create tokens for `service_account` in `namespace` (`""`:
/// every namespace).
pub fn token_access_denied(user: &str, service_account: &str, namespace: &str) -> Violation {
    let user = if user.is_empty() {
        "the requesting user"
    } else {
        user
    };
    let scope = if namespace.is_empty() {
        "in every namespace (allowedNamespaces.selector allows any)".to_owned()
    } else {
        format!("in namespace {namespace}")
    };
    Violation::new(
        Rule::TokenAccess,
        format!(
            "spec.workloadIdentity.serviceAccountName: {user} may not create tokens for ServiceAccount {service_account} {scope}; a keyless identity may only name a ServiceAccount its creator could get tokens for (ask for create on serviceaccounts/token, or narrow allowedNamespaces)"
        ),
    )
}

/// The refusal when `user` may not `get` the Secret `secret_ref` names.
pub fn secret_access_denied(user: &str, secret_ref: &SecretReference) -> Violation {
    let user = if user.is_empty() {
        "the requesting user"
    } else {
        user
    };
    Violation::new(
        Rule::SecretAccess,
        format!(
            "spec.secretRef: {user} may not get Secret {}/{}; an identity may only name a Secret its creator can read (ask for get on that Secret, or name one you can read)",
            secret_ref.namespace, secret_ref.name
        ),
    )
}

/// Everything that can resolve to an identity, read cluster-wide. The webhook's lookups keep only
/// slim copies (name, namespace, the cluster-name label, identity references, a Cluster's
/// TerraformCluster reference), read page by page.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    /// Every TerraformCluster.
    pub clusters: Vec<TerraformCluster>,
    /// Every TerraformMachine.
    pub machines: Vec<TerraformMachine>,
    /// Every TerraformMachinePool.
    pub pools: Vec<TerraformMachinePool>,
    /// Every Cluster API Cluster (to find a machine's or pool's TerraformCluster).
    pub capi_clusters: Vec<Cluster>,
}

fn key(ns: Option<String>, name: String) -> (String, String) {
    (ns.unwrap_or_default(), name)
}

/// One object that currently resolves to `identity`, described for a message, or `None`.
/// Clusters are searched first, then machines, then pools, each in namespace/name order.
pub fn find_user(identity: &str, inv: &Inventory) -> Option<String> {
    // (namespace, TerraformCluster name) → the identity its machines and pools fall back to, and
    // which field says so.
    let mut fallback: BTreeMap<(String, String), (&str, &'static str)> = BTreeMap::new();
    let mut clusters: Vec<&TerraformCluster> = inv.clusters.iter().collect();
    clusters.sort_by_key(|c| key(c.namespace(), c.name_any()));
    for tc in &clusters {
        let ws = &tc.spec.workspace;
        if ws.identity_ref.as_ref().is_some_and(|r| r.name == identity) {
            return Some(format!(
                "TerraformCluster {}/{} (spec.identityRef)",
                tc.namespace().unwrap_or_default(),
                tc.name_any()
            ));
        }
        let defaults = tc
            .spec
            .defaults
            .as_ref()
            .and_then(|d| d.identity_ref.as_ref());
        let resolved = match (defaults, ws.identity_ref.as_ref()) {
            (Some(d), _) => Some((d.name.as_str(), "spec.defaults.identityRef")),
            (None, Some(own)) => Some((own.name.as_str(), "spec.identityRef")),
            (None, None) => None,
        };
        if let Some(r) = resolved {
            fallback.insert(key(tc.namespace(), tc.name_any()), r);
        }
    }
    // (namespace, Cluster name) → TerraformCluster name.
    let infra: BTreeMap<(String, String), &str> = inv
        .capi_clusters
        .iter()
        .filter_map(|c| {
            let r = c.spec.infrastructure_ref.as_ref()?;
            (r.api_group == api::GROUP && r.kind == "TerraformCluster")
                .then(|| (key(c.namespace(), c.name_any()), r.name.as_str()))
        })
        .collect();

    let resolve = |kind: &str,
                   ns: Option<String>,
                   name: String,
                   own: Option<&api::shared::IdentityReference>,
                   labels_of: &BTreeMap<String, String>|
     -> Option<String> {
        let ns = ns.unwrap_or_default();
        if let Some(own) = own {
            return (own.name == identity)
                .then(|| format!("{kind} {ns}/{name} (spec.identityRef)"));
        }
        let cluster = labels_of.get(labels::CLUSTER_NAME)?;
        let tc = infra.get(&(ns.clone(), cluster.clone()))?;
        let (resolved, field) = fallback.get(&(ns.clone(), (*tc).to_owned()))?;
        (*resolved == identity)
            .then(|| format!("{kind} {ns}/{name} (through TerraformCluster {ns}/{tc} {field})"))
    };

    let mut machines: Vec<&TerraformMachine> = inv.machines.iter().collect();
    machines.sort_by_key(|m| key(m.namespace(), m.name_any()));
    for m in machines {
        if let Some(found) = resolve(
            "TerraformMachine",
            m.namespace(),
            m.name_any(),
            m.spec.workspace.identity_ref.as_ref(),
            m.labels(),
        ) {
            return Some(found);
        }
    }
    let mut pools: Vec<&TerraformMachinePool> = inv.pools.iter().collect();
    pools.sort_by_key(|p| key(p.namespace(), p.name_any()));
    for p in pools {
        if let Some(found) = resolve(
            "TerraformMachinePool",
            p.namespace(),
            p.name_any(),
            p.spec.workspace.identity_ref.as_ref(),
            p.labels(),
        ) {
            return Some(found);
        }
    }
    None
}

/// The refusal to delete `identity` while `user` resolves to it.
pub fn in_use(identity: &str, user: &str) -> Violation {
    Violation::new(
        Rule::IdentityInUse,
        format!(
            "TerraformClusterIdentity {identity} cannot be deleted while it is in use: {user} resolves to it (an object being deleted still needs it for its destroy)"
        ),
    )
}

/// The refusal to delete `identity` while `namespaces` hold credential mirrors, or `None`.
pub fn mirrors_remain(identity: &str, namespaces: &[String]) -> Option<Violation> {
    (!namespaces.is_empty()).then(|| {
        Violation::new(
            Rule::IdentityMirrors,
            format!(
                "TerraformClusterIdentity {identity} cannot be deleted while status.namespaces lists namespaces still holding its credential mirror: {}",
                namespaces.join(", ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::capi::{ClusterSpec, ContractVersionedObjectReference};
    use api::cluster::{ClusterDefaults, TerraformClusterSpec};
    use api::identity::AllowedNamespaces;
    use api::shared::IdentityReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn id(name: &str) -> IdentityReference {
        IdentityReference { name: name.into() }
    }

    fn tc(ns: &str, name: &str, own: Option<&str>, defaults: Option<&str>) -> TerraformCluster {
        let mut spec = TerraformClusterSpec::default();
        spec.workspace.identity_ref = own.map(id);
        spec.defaults = defaults.map(|d| ClusterDefaults {
            identity_ref: Some(id(d)),
            ..ClusterDefaults::default()
        });
        let mut o = TerraformCluster::new(name, spec);
        o.metadata.namespace = Some(ns.into());
        o
    }

    fn capi_cluster(ns: &str, name: &str, tc: &str) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                infrastructure_ref: Some(ContractVersionedObjectReference {
                    api_group: api::GROUP.into(),
                    kind: "TerraformCluster".into(),
                    name: tc.into(),
                }),
                ..ClusterSpec::default()
            },
        );
        c.metadata.namespace = Some(ns.into());
        c
    }

    fn tm(ns: &str, name: &str, own: Option<&str>, cluster: Option<&str>) -> TerraformMachine {
        let mut m = TerraformMachine::new(name, api::TerraformMachineSpec::default());
        m.spec.workspace.identity_ref = own.map(id);
        m.metadata.namespace = Some(ns.into());
        if let Some(c) = cluster {
            m.labels_mut().insert(labels::CLUSTER_NAME.into(), c.into());
        }
        m
    }

    #[test]
    fn allowed_namespaces_empty_object_is_rejected() {
        let mut spec = TerraformClusterIdentitySpec {
            allowed_namespaces: Some(AllowedNamespaces::default()),
            ..TerraformClusterIdentitySpec::default()
        };
        let mut out = Vec::new();
        check_allowed_namespaces(&spec, &mut out);
        assert_eq!(
            out[0].message,
            "spec.allowedNamespaces sets neither list nor selector; {} is ambiguous and not allowed: list the namespaces, write selector: {} to allow every namespace, or leave allowedNamespaces unset to allow none"
        );
        for ok in [
            None,
            Some(AllowedNamespaces {
                list: Some(vec!["a".into()]),
                selector: None,
            }),
            Some(AllowedNamespaces {
                list: None,
                selector: Some(LabelSelector::default()),
            }),
        ] {
            spec.allowed_namespaces = ok;
            let mut out = Vec::new();
            check_allowed_namespaces(&spec, &mut out);
            assert!(out.is_empty());
        }
    }

    #[test]
    fn secret_access_refusal_names_the_user_and_the_secret() {
        let r = SecretReference {
            name: "aws".into(),
            namespace: "creds".into(),
        };
        assert_eq!(
            secret_access_denied("bob", &r).message,
            "spec.secretRef: bob may not get Secret creds/aws; an identity may only name a Secret its creator can read (ask for get on that Secret, or name one you can read)"
        );
    }

    #[test]
    fn a_cluster_naming_the_identity_keeps_it() {
        let inv = Inventory {
            clusters: vec![
                tc("b", "c2", Some("other"), None),
                tc("a", "c1", Some("aws"), None),
            ],
            ..Inventory::default()
        };
        assert_eq!(
            find_user("aws", &inv).as_deref(),
            Some("TerraformCluster a/c1 (spec.identityRef)")
        );
        assert_eq!(find_user("gcp", &inv), None);
    }

    #[test]
    fn a_machine_falls_back_to_its_clusters_defaults_then_its_identity() {
        let mut inv = Inventory {
            clusters: vec![tc("a", "tc1", Some("own"), Some("dflt"))],
            capi_clusters: vec![capi_cluster("a", "c1", "tc1")],
            machines: vec![tm("a", "m1", None, Some("c1"))],
            ..Inventory::default()
        };
        assert_eq!(
            find_user("dflt", &inv).as_deref(),
            Some(
                "TerraformMachine a/m1 (through TerraformCluster a/tc1 spec.defaults.identityRef)"
            )
        );
        // Without defaults the machine uses the cluster's own identity, which the cluster itself
        // already names first.
        inv.clusters = vec![tc("a", "tc1", Some("own"), None)];
        assert_eq!(
            find_user("own", &inv).as_deref(),
            Some("TerraformCluster a/tc1 (spec.identityRef)")
        );
        assert_eq!(find_user("dflt", &inv), None);
        // A machine's own identityRef wins over every fallback.
        inv.clusters = vec![tc("a", "tc1", Some("own"), Some("dflt"))];
        inv.machines = vec![tm("a", "m1", Some("mine"), Some("c1"))];
        assert_eq!(find_user("dflt", &inv), None);
        assert_eq!(
            find_user("mine", &inv).as_deref(),
            Some("TerraformMachine a/m1 (spec.identityRef)")
        );
    }

    #[test]
    fn a_pool_without_a_resolvable_cluster_uses_nothing() {
        let mut p = TerraformMachinePool::new("p1", api::TerraformMachinePoolSpec::default());
        p.metadata.namespace = Some("a".into());
        p.labels_mut()
            .insert(labels::CLUSTER_NAME.into(), "missing".into());
        let inv = Inventory {
            clusters: vec![tc("a", "tc1", Some("other"), Some("dflt"))],
            pools: vec![p],
            ..Inventory::default()
        };
        assert_eq!(find_user("dflt", &inv), None);
    }

    #[test]
    fn mirrors_block_deletion_naming_every_namespace() {
        assert_eq!(mirrors_remain("aws", &[]), None);
        assert_eq!(
            mirrors_remain("aws", &["a".into(), "b".into()])
                .map(|v| v.message)
                .as_deref(),
            Some(
                "TerraformClusterIdentity aws cannot be deleted while status.namespaces lists namespaces still holding its credential mirror: a, b"
            )
        );
        assert_eq!(
            in_use("aws", "TerraformCluster a/c1 (spec.identityRef)").message,
            "TerraformClusterIdentity aws cannot be deleted while it is in use: TerraformCluster a/c1 (spec.identityRef) resolves to it (an object being deleted still needs it for its destroy)"
        );
    }
}
