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

use crate::caches::Caches;
use crate::conditions::Findings;
use crate::context::Target;
use crate::decide::GateBlock;
use crate::kubeutil::{delete_opt, get_opt, is_conflict};
use crate::workload;

/// The default runner ServiceAccount, RoleBinding and ClusterRole name.
pub const RUNNER: &str = "captf-runner";

/// Ensures the ServiceAccount `service_account` can run Jobs in `ns`, setting `RunnerRBACReady`.
/// `None` when ready, else the gate that keeps Jobs from starting.
pub async fn ensure(
    client: &kube::Client,
    caches: &Caches,
    ns: &str,
    service_account: &str,
    conds: &mut Findings,
) -> kube::Result<Option<GateBlock>> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let custom = service_account != RUNNER;
    let cached = caches
        .service_accounts
        .get(&ObjectRef::new(service_account).within(ns));
    match cached {
        Some(sa) if custom => {
            if !labelled(&sa.metadata, labels::RUNNER) {
                return Ok(Some(not_opted_in(
                    conds,
                    &format!(
                        "ServiceAccount {service_account} lacks the label {}=true",
                        labels::RUNNER
                    ),
                )));
            }
        }
        Some(_) => {}
        None if custom => {
            return Ok(Some(not_opted_in(
                conds,
                &format!("ServiceAccount {service_account} does not exist"),
            )));
        }
        None => {
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
                Ok(_) => {}
                Err(e) if is_conflict(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let cached = caches.role_bindings.get(&ObjectRef::new(RUNNER).within(ns));
    let stale = cached
        .as_deref()
        .map(|b| stale_subjects(caches, b, ns, service_account))
        .unwrap_or_default();
    let bound = cached.is_some_and(|b| binding_ready(&b, ns, service_account)) && stale.is_empty();
    let binding = if bound {
        Ok(())
    } else {
        ensure_binding(client, ns, service_account, &stale).await?
    };
    match binding {
        Ok(()) => {
            conds.set(
                ctype::RUNNER_RBAC_READY,
                ConditionStatus::True,
                reasons::RBAC_READY,
                &format!("ServiceAccount {service_account} is bound to ClusterRole {RUNNER}"),
            );
            Ok(None)
        }
        Err(message) => {
            conds.set(
                ctype::RUNNER_RBAC_READY,
                ConditionStatus::False,
                reasons::RBAC_FAILED,
                &message,
            );
            Ok(Some(GateBlock {
                condition: ctype::RUNNER_RBAC_READY,
                reason: reasons::RBAC_FAILED,
            }))
        }
    }
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
/// Job policy), runs as ServiceAccount `sa`.
fn still_needed(caches: &Caches, ns: &str, sa: &str) -> bool {
    let runs_as = |j: &k8s_openapi::api::batch::v1::Job| {
        j.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.service_account_name.as_deref())
            == Some(sa)
    };
    if !caches
        .jobs_where(ns, |j| crate::leases::job_active(j) && runs_as(j))
        .is_empty()
    {
        return true;
    }
    let in_ns = |m: &ObjectMeta| m.namespace.as_deref() == Some(ns);
    let needs = |target: Target| {
        let owner = workload::owner(&target, caches);
        let defaults = workload::defaults(&target, &owner);
        workload::job_policy(&target, defaults.as_ref()).service_account_name_or_default() == sa
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
                Err(e) if is_conflict(&e) => Err(e),
                Err(e) => Err(e),
            }
        }
        Some(mut binding) => {
            if !labelled(&binding.metadata, labels::MANAGED) {
                return Ok(Err(format!(
                    "RoleBinding {RUNNER} exists and is not managed by CAPTF (no {}=true label)",
                    labels::MANAGED
                )));
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
