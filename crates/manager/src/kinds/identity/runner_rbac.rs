//! The runner's RBAC in a namespace (spec: Security Model "What the runner can read, and why";
//! INTERFACE-FACTS §8 "Per-namespace behaviour", §1 `RunnerRBACReady`): the `captf-runner`
//! ServiceAccount, created on first need, and the `captf-runner` RoleBinding to the static
//! `captf-runner` ClusterRole whose subjects are the ServiceAccounts Jobs run as. A custom
//! ServiceAccount must exist and carry `captf.io/runner=true`.

use std::collections::BTreeMap;

use api::constants::{conditions as ctype, labels, reasons};
use contract::health::ConditionStatus;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;

use crate::kinds::workload;
use crate::pass::conditions::Findings;
use crate::pass::observed::GateBlock;
use crate::runtime::caches::Caches;
use crate::runtime::context::Target;
use crate::runtime::kubeutil::{delete_opt, get_opt, is_conflict};

/// The default runner ServiceAccount, RoleBinding and ClusterRole name.
pub const RUNNER: &str = api::shared::DEFAULT_RUNNER_SERVICE_ACCOUNT;

/// A write the runner's RBAC in a namespace needs, chosen by [`check`] and made by Act
/// ([`write`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RbacWrite {
    /// The default `captf-runner` ServiceAccount, created on first need.
    CreateServiceAccount,
    /// The `captf-runner` RoleBinding with `service_account` among its subjects and the `stale`
    /// ones gone (created when missing, recreated when its roleRef is wrong).
    Bind {
        /// The ServiceAccount Jobs run as.
        service_account: String,
        /// Subjects nothing in the namespace needs any more.
        stale: Vec<String>,
    },
}

/// Checks, from the caches, that the ServiceAccount `service_account` can run Jobs in `ns`,
/// setting `RunnerRBACReady` as it will be once the planned writes land. Returns the gate that
/// keeps Jobs from starting, if any, and the writes needed; nothing is written here.
pub fn check(
    caches: &Caches,
    ns: &str,
    service_account: &str,
    conds: &mut Findings,
) -> (Option<GateBlock>, Vec<RbacWrite>) {
    let custom = service_account != RUNNER;
    let cached = caches
        .service_accounts
        .get(&ObjectRef::new(service_account).within(ns));
    let mut writes = Vec::new();
    match cached {
        Some(sa) if custom => {
            if !labelled(&sa.metadata, labels::RUNNER) {
                let message = format!(
                    "ServiceAccount {service_account} lacks the label {}=true",
                    labels::RUNNER
                );
                return (Some(not_opted_in(conds, &message)), writes);
            }
        }
        Some(_) => {}
        None if custom => {
            let message = format!("ServiceAccount {service_account} does not exist");
            return (Some(not_opted_in(conds, &message)), writes);
        }
        None => writes.push(RbacWrite::CreateServiceAccount),
    }
    let cached = caches.role_bindings.get(&ObjectRef::new(RUNNER).within(ns));
    if let Some(b) = cached.as_deref()
        && !labelled(&b.metadata, labels::MANAGED)
    {
        return (Some(rbac_failed(conds, &unmanaged_binding())), writes);
    }
    let stale = cached
        .as_deref()
        .map(|b| stale_subjects(caches, b, ns, service_account))
        .unwrap_or_default();
    let bound = cached.is_some_and(|b| binding_ready(&b, ns, service_account)) && stale.is_empty();
    if !bound {
        writes.push(RbacWrite::Bind {
            service_account: service_account.to_owned(),
            stale,
        });
    }
    conds.set(
        ctype::RUNNER_RBAC_READY,
        ConditionStatus::True,
        reasons::RBAC_READY,
        &format!("ServiceAccount {service_account} is bound to ClusterRole {RUNNER}"),
    );
    (None, writes)
}

/// Makes one planned [`RbacWrite`] (Act). `Ok(Err(message))` when the binding cannot be
/// written for a reason the user must see (`RunnerRBACReady=False/RBACFailed`).
pub async fn write(
    client: &kube::Client,
    ns: &str,
    write: &RbacWrite,
) -> kube::Result<Result<(), String>> {
    match write {
        RbacWrite::CreateServiceAccount => {
            let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(RUNNER.to_owned()),
                    namespace: Some(ns.to_owned()),
                    labels: Some(managed()),
                    ..ObjectMeta::default()
                },
                ..ServiceAccount::default()
            };
            match sas.create(&PostParams::default(), &sa).await {
                Ok(_) => Ok(Ok(())),
                Err(e) if is_conflict(&e) => Ok(Ok(())),
                Err(e) => Err(e),
            }
        }
        RbacWrite::Bind {
            service_account,
            stale,
        } => ensure_binding(client, ns, service_account, stale).await,
    }
}

/// `RunnerRBACReady=False/RBACFailed` with `message`, and its gate.
pub fn rbac_failed(conds: &mut Findings, message: &str) -> GateBlock {
    conds.set(
        ctype::RUNNER_RBAC_READY,
        ConditionStatus::False,
        reasons::RBAC_FAILED,
        message,
    );
    GateBlock {
        condition: ctype::RUNNER_RBAC_READY,
        reason: reasons::RBAC_FAILED,
    }
}

fn unmanaged_binding() -> String {
    format!(
        "RoleBinding {RUNNER} exists and is not managed by CAPTF (no {}=true label)",
        labels::MANAGED
    )
}

fn not_opted_in(conds: &mut Findings, message: &str) -> GateBlock {
    conds.set(
        ctype::RUNNER_RBAC_READY,
        ConditionStatus::False,
        reasons::SERVICE_ACCOUNT_NOT_OPTED_IN,
        message,
    );
    GateBlock {
        condition: ctype::RUNNER_RBAC_READY,
        reason: reasons::SERVICE_ACCOUNT_NOT_OPTED_IN,
    }
}

fn managed() -> BTreeMap<String, String> {
    BTreeMap::from([(labels::MANAGED.to_owned(), "true".to_owned())])
}

fn role_ref() -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".to_owned()),
        kind: "ClusterRole".to_owned(),
        name: RUNNER.to_owned(),
    }
}

fn subject(ns: &str, sa: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".to_owned(),
        name: sa.to_owned(),
        namespace: Some(ns.to_owned()),
        api_group: None,
    }
}

/// Whether `meta` carries `label=true`.
fn labelled(meta: &ObjectMeta, label: &str) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(label))
        .is_some_and(|v| v == "true")
}

/// Whether `binding` is CAPTF's, binds the runner ClusterRole and lists `sa` of `ns`.
fn binding_ready(binding: &RoleBinding, ns: &str, sa: &str) -> bool {
    labelled(&binding.metadata, labels::MANAGED)
        && binding.role_ref == role_ref()
        && binding.subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(ns)
        })
}

/// The ServiceAccount subjects of `binding` (in `ns`, other than `sa`) that nothing in the
/// namespace needs any more: no TerraformCluster or TerraformMachine there runs its Jobs as it,
/// and no running Job does (INTERFACE-FACTS §8: the subjects are recomputed per namespace, not
/// only grown).
fn stale_subjects(caches: &Caches, binding: &RoleBinding, ns: &str, sa: &str) -> Vec<String> {
    binding
        .subjects
        .iter()
        .flatten()
        .filter(|s| s.kind == "ServiceAccount" && s.namespace.as_deref() == Some(ns))
        .map(|s| s.name.clone())
        .filter(|name| name != sa && !still_needed(caches, ns, name))
        .collect()
}

/// Whether a running Job of `ns`, or a TerraformCluster, TerraformMachine or TerraformMachinePool there (by its merged
/// Job policy and its identity, which may be keyless), runs as ServiceAccount `sa`.
fn still_needed(caches: &Caches, ns: &str, sa: &str) -> bool {
    let runs_as = |j: &k8s_openapi::api::batch::v1::Job| {
        j.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.service_account_name.as_deref())
            == Some(sa)
    };
    if !caches
        .jobs_where(ns, |j| crate::runtime::leases::job_active(j) && runs_as(j))
        .is_empty()
    {
        return true;
    }
    let in_ns = |m: &ObjectMeta| m.namespace.as_deref() == Some(ns);
    let needs = |target: Target| {
        let owner = workload::owner(&target, caches);
        let defaults = workload::defaults(&target, &owner);
        let policy = workload::job_policy(&target, defaults.as_ref());
        let identity = super::resolve_identity_name(
            target
                .workspace()
                .identity_ref
                .as_ref()
                .map(|r| r.name.as_str()),
            defaults.as_ref(),
        )
        .unwrap_or_default();
        let tci = caches.identities.get(&ObjectRef::new(&identity));
        let keyless = tci.as_ref().and_then(|t| t.spec.keyless());
        super::job_service_account(&policy, &identity, keyless)
            .unwrap_or_else(|_| policy.service_account_name_or_default().to_owned())
            == sa
    };
    caches
        .terraform_clusters
        .state()
        .iter()
        .filter(|tc| in_ns(&tc.metadata))
        .any(|tc| needs(Target::Cluster(Box::new(tc.as_ref().clone()))))
        || caches
            .terraform_machines
            .state()
            .iter()
            .filter(|tm| in_ns(&tm.metadata))
            .any(|tm| needs(Target::Machine(Box::new(tm.as_ref().clone()))))
        || caches
            .terraform_machine_pools
            .state()
            .iter()
            .filter(|tmp| in_ns(&tmp.metadata))
            .any(|tmp| needs(Target::Pool(Box::new(tmp.as_ref().clone()))))
}

/// The RoleBinding with `sa` among its subjects and the `stale` ones gone; `Ok(Err(_))` when an
/// unmanaged binding of the same name is in the way.
async fn ensure_binding(
    client: &kube::Client,
    ns: &str,
    sa: &str,
    stale: &[String],
) -> kube::Result<Result<(), String>> {
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    let fresh = |subjects: Vec<Subject>| RoleBinding {
        metadata: ObjectMeta {
            name: Some(RUNNER.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: Some(managed()),
            ..ObjectMeta::default()
        },
        role_ref: role_ref(),
        subjects: Some(subjects),
    };
    match get_opt(&api, RUNNER).await? {
        None => {
            match api
                .create(&PostParams::default(), &fresh(vec![subject(ns, sa)]))
                .await
            {
                Ok(_) => Ok(Ok(())),
                Err(e) => Err(e),
            }
        }
        Some(mut binding) => {
            if !labelled(&binding.metadata, labels::MANAGED) {
                return Ok(Err(unmanaged_binding()));
            }
            let before = binding.subjects.clone().unwrap_or_default();
            let mut subjects: Vec<Subject> = before
                .iter()
                .filter(|s| {
                    !(s.kind == "ServiceAccount"
                        && s.namespace.as_deref() == Some(ns)
                        && stale.contains(&s.name))
                })
                .cloned()
                .collect();
            if !subjects.iter().any(|s| {
                s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(ns)
            }) {
                subjects.push(subject(ns, sa));
            }
            let changed = subjects != before;
            if binding.role_ref != role_ref() {
                // roleRef is immutable: recreate the binding.
                delete_opt(&api, RUNNER).await?;
                api.create(&PostParams::default(), &fresh(subjects)).await?;
                return Ok(Ok(()));
            }
            if changed {
                binding.subjects = Some(subjects);
                api.replace(RUNNER, &PostParams::default(), &binding)
                    .await?;
            }
            Ok(Ok(()))
        }
    }
}
