//! The review's correctness findings whose rule is about I/O (issue 12: 3, 11, 13, the two
//! fallbacks of 14 and the runner RoleBinding of 15), each a test named after its rule, against
//! the real API server of the test environment. Single passes run through [`Passes`]: the
//! manager's caches without a controller, so a test chooses exactly which object a pass sees (a
//! stale copy, say) and nothing else reconciles meanwhile.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use api::cluster::TerraformCluster;
use api::constants::{annotations, finalizers};
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use manager::runtime::context::Target;
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(240);
const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

fn condition_types(obj: &Value) -> Vec<String> {
    obj["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["type"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn patch_json(client: &kube::Client, ns: &str, kind: &str, name: &str, patch: Value) {
    let params = PatchParams::default();
    match kind {
        "TerraformCluster" => {
            Api::<TerraformCluster>::namespaced(client.clone(), ns)
                .patch(name, &params, &Patch::Merge(patch))
                .await
                .unwrap();
        }
        _ => {
            Api::<api::machine::TerraformMachine>::namespaced(client.clone(), ns)
                .patch(name, &params, &Patch::Merge(patch))
                .await
                .unwrap();
        }
    }
}

/// Finding 3: decisions and conditions come from a fresh read and writes carry a precondition.
/// A pass that runs on the copy a watch showed before the previous pass's status write (here:
/// while the first apply ran) neither reverts the conditions that write set nor starts another
/// Job: nothing it would write lands, and the Jobs it reads are the live ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_on_a_stale_copy_neither_reverts_conditions_nor_starts_a_second_job() {
    let Fx {
        images, client, ns, ..
    } = fixture_with_identity("stale").await;
    let mgr = start_manager(&client, &ns, &images, "manager-stale");
    cluster(&client, &ns, "stale", "id-stale", &images.cluster).await;
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let stale = eventually(LONG, "the apply running", || async {
        let tc = tcs.get("stale").await.unwrap();
        tc.status
            .as_ref()
            .is_some_and(|s| s.workload.active_job.is_some())
            .then_some(tc)
    })
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "stale", "True", LONG).await;
    // The apply is bookkept and the object settled: the manager stops, so only the stale pass
    // runs from now on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    mgr.stop().await;
    let fresh = get_json(&client, &ns, TC, "TerraformCluster", "stale").await;
    let jobs = jobs_of(&client, &ns, "stale").await.len();

    let passes = Passes::start(&client, &ns, &images, "passes-stale").await;
    passes.pass(Target::Cluster(Box::new(stale))).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let after = get_json(&client, &ns, TC, "TerraformCluster", "stale").await;
    assert_eq!(
        after["metadata"]["resourceVersion"], fresh["metadata"]["resourceVersion"],
        "nothing was written from the stale copy: {after:#}"
    );
    assert_eq!(after["status"]["conditions"], fresh["status"]["conditions"]);
    assert_eq!(
        condition(&after, "Ready"),
        Some(("True".to_owned(), "Ready".to_owned()))
    );
    assert_eq!(
        jobs_of(&client, &ns, "stale").await.len(),
        jobs,
        "no second Job"
    );
}

/// Finding 11: `variablesFrom` sources are watched. Editing a ConfigMap labelled
/// `captf.io/variables=true` wakes the objects whose `variablesFrom` name it, and they apply the
/// new value, long before any sync period or drift interval would look again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_labelled_variables_config_map_re_applies_the_objects_that_reference_it() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("varswatch").await;
    let image = slow_image(env).await;
    create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "vars", "labels": {"captf.io/variables": "true"}},
               "data": {"token": "first-value"}}),
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-varswatch");
    let sources = json!({"variablesFrom": [{"configMapRef": {"name": "vars"}}]});
    cluster_with_spec(&client, &ns, "varswatch", "id-varswatch", &image, sources).await;
    wait_ready(&client, &ns, "TerraformCluster", "varswatch", "True", LONG).await;
    let state = |client: kube::Client, ns: String| async move {
        state_document(
            &client,
            &ns,
            contract::names::ObjectKind::Cluster,
            "varswatch",
        )
        .await
        .to_string()
    };
    eventually(LONG, "the first value applied", || async {
        state(client.clone(), ns.clone())
            .await
            .contains(&sha256_hex("first-value"))
            .then_some(())
    })
    .await;
    let applies = op_jobs(&jobs_of(&client, &ns, "varswatch").await, "apply").len();

    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .patch(
            "vars",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"token": "second-value"}})),
        )
        .await
        .unwrap();
    // The edit itself wakes the object: its apply starts at once, not at its next scheduled
    // pass (a pending-health refresh 30 s on at the soonest, the 10-minute sync period).
    eventually(Duration::from_secs(25), "an apply for the edit", || async {
        (op_jobs(&jobs_of(&client, &ns, "varswatch").await, "apply").len() > applies).then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(120),
        "the edited value applied",
        || async {
            state(client.clone(), ns.clone())
                .await
                .contains(&sha256_hex("second-value"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "varswatch").await, "apply").len(),
        applies + 1,
        "one more apply, for the edit"
    );
}

/// Finding 13, first rule: externally managed applies to every kind. A TerraformCluster and a
/// TerraformMachine carrying `cluster.x-k8s.io/managed-by` get no finalizer, no status and no
/// Job, and nothing is created in their namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn externally_managed_objects_of_every_kind_are_left_alone() {
    let Fx {
        images, client, ns, ..
    } = fixture_with_identity("extmgd").await;
    cluster(&client, &ns, "ext", "id-extmgd", &images.cluster).await;
    machine(
        &client,
        &ns,
        "ext",
        "ext-m",
        &images.machine,
        true,
        "#cloud-config",
    )
    .await;
    let managed = json!({"metadata": {"annotations": {annotations::MANAGED_BY: "someone-else"}}});
    patch_json(&client, &ns, "TerraformCluster", "ext", managed.clone()).await;
    patch_json(&client, &ns, "TerraformMachine", "ext-m", managed).await;

    let passes = Passes::start(&client, &ns, &images, "passes-extmgd").await;
    for (kind, name) in [("TerraformCluster", "ext"), ("TerraformMachine", "ext-m")] {
        let before = get_json(&client, &ns, TC, kind, name).await;
        passes.pass(target(&client, &ns, kind, name).await).await;
        let after = get_json(&client, &ns, TC, kind, name).await;
        assert_eq!(
            after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
            "{kind}: nothing written: {after:#}"
        );
        assert!(after["metadata"]["finalizers"].is_null(), "{kind}");
        assert!(after["status"].is_null(), "{kind}: {after:#}");
        assert!(jobs_of(&client, &ns, name).await.is_empty(), "{kind}");
    }
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    assert!(sas.get_opt("captf-runner").await.unwrap().is_none());
}

/// Finding 13, second rule: without our finalizer a pass adds it and stops right after the
/// owner lookup. Nothing else is read or created: no runner ServiceAccount, no credential
/// mirror, no identity, state or inputs conditions, no Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_finalizer_the_pass_stops_right_after_the_owner_lookup() {
    let Fx {
        images, client, ns, ..
    } = fixture_with_identity("nofin").await;
    cluster(&client, &ns, "nofin", "id-nofin", &images.cluster).await;

    let passes = Passes::start(&client, &ns, &images, "passes-nofin").await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "nofin")
        .await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "nofin").await)
        .await;

    let after = get_json(&client, &ns, TC, "TerraformCluster", "nofin").await;
    assert_eq!(
        after["metadata"]["finalizers"],
        json!([finalizers::TERRAFORM_CLUSTER])
    );
    let types = condition_types(&after);
    for later in [
        "IdentityAllowed",
        "CredentialsMirrored",
        "RunnerRBACReady",
        "StateReadable",
        "ApplyJobSucceeded",
        "OutputsValid",
    ] {
        assert!(
            !types.iter().any(|t| t == later),
            "{later} was reported: {types:?}"
        );
    }
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    assert!(sas.get_opt("captf-runner").await.unwrap().is_none());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let listed = secrets.list(&ListParams::default()).await.unwrap().items;
    assert!(listed.is_empty(), "no mirror, no inputs: {listed:?}");
    assert!(jobs_of(&client, &ns, "nofin").await.is_empty());
}

/// Finding 13, third rule: the paused branch does only what the book lists. A paused object
/// with its finalizer reports `Paused=True`, has its move block cleared (no Job is active), and
/// nothing else is read or started: no credentials, no runner RBAC, no state, no Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paused_branch_does_only_what_the_book_lists() {
    let Fx {
        images, client, ns, ..
    } = fixture_with_identity("paused").await;
    cluster(&client, &ns, "paused", "id-paused", &images.cluster).await;
    patch_json(
        &client,
        &ns,
        "TerraformCluster",
        "paused",
        json!({"metadata": {
            "finalizers": [finalizers::TERRAFORM_CLUSTER],
            "annotations": {annotations::PAUSED: "", annotations::BLOCK_MOVE: ""},
        }}),
    )
    .await;

    let passes = Passes::start(&client, &ns, &images, "passes-paused").await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "paused")
        .await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "paused").await)
        .await;

    let after = get_json(&client, &ns, TC, "TerraformCluster", "paused").await;
    assert_eq!(
        condition(&after, "Paused"),
        Some(("True".to_owned(), "Paused".to_owned()))
    );
    assert!(
        after["metadata"]["annotations"][annotations::BLOCK_MOVE].is_null(),
        "the move block is cleared: {after:#}"
    );
    let types = condition_types(&after);
    for unread in [
        "IdentityAllowed",
        "CredentialsMirrored",
        "RunnerRBACReady",
        "StateReadable",
    ] {
        assert!(
            !types.iter().any(|t| t == unread),
            "{unread} was reported: {types:?}"
        );
    }
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    assert!(sas.get_opt("captf-runner").await.unwrap().is_none());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert!(
        secrets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(jobs_of(&client, &ns, "paused").await.is_empty());
}

/// The pass that adds the finalizer to a paused object writes its status too (`Paused=True`):
/// no later pass acts on it until the unpause, so none would write it (as `clusterctl move`
/// creates objects, paused, and the adoption's pass count relies on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_pass_of_a_paused_object_reports_paused() {
    let Fx {
        images, client, ns, ..
    } = fixture_with_identity("pausedfin").await;
    cluster(&client, &ns, "pausedfin", "id-pausedfin", &images.cluster).await;
    patch_json(
        &client,
        &ns,
        "TerraformCluster",
        "pausedfin",
        json!({"metadata": {"annotations": {annotations::PAUSED: ""}}}),
    )
    .await;

    let passes = Passes::start(&client, &ns, &images, "passes-pausedfin").await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "pausedfin")
        .await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "pausedfin").await)
        .await;

    let after = get_json(&client, &ns, TC, "TerraformCluster", "pausedfin").await;
    let held = after["metadata"]["finalizers"].as_array().cloned();
    assert_eq!(
        held.unwrap_or_default(),
        vec![json!(finalizers::TERRAFORM_CLUSTER)],
        "{after:#}"
    );
    assert_eq!(
        condition(&after, "Paused"),
        Some(("True".to_owned(), "Paused".to_owned())),
        "{after:#}"
    );
    assert!(jobs_of(&client, &ns, "pausedfin").await.is_empty());
}

/// Finding 14, first fallback: a deleting TerraformCluster without the cluster-name label, whose
/// Cluster is gone, finds its dependents by its Cluster owner reference's name: its machines
/// hold its deletion (`DeletionBlocked=True/DependentsExist`), and the finalizer stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dependents_check_falls_back_to_the_cluster_owner_reference_name() {
    let Fx {
        images, client, ns, ..
    } = fixture_with_identity("depsref").await;
    create(
        &client,
        &ns,
        json!({"apiVersion": TC, "kind": "TerraformCluster",
               "metadata": {"name": "tc-depsref",
                            "finalizers": [finalizers::TERRAFORM_CLUSTER],
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                                 "kind": "Cluster", "name": "depsref",
                                                 "uid": "00000000-0000-4000-8000-00000000d0d0"}]},
               "spec": {"source": {"image": images.cluster}, "identityRef": {"name": "id-depsref"}}}),
    )
    .await;
    create(
        &client,
        &ns,
        json!({"apiVersion": TC, "kind": "TerraformMachine",
               "metadata": {"name": "m-depsref",
                            "labels": {"cluster.x-k8s.io/cluster-name": "depsref"}},
               "spec": {"source": {"image": images.machine}}}),
    )
    .await;
    delete(&client, &ns, TC, "TerraformCluster", "tc-depsref").await;

    let passes = Passes::start(&client, &ns, &images, "passes-depsref").await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "tc-depsref")
        .await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "tc-depsref").await)
        .await;

    let after = get_json(&client, &ns, TC, "TerraformCluster", "tc-depsref").await;
    assert_eq!(
        condition(&after, "DeletionBlocked"),
        Some(("True".to_owned(), "DependentsExist".to_owned())),
        "{after:#}"
    );
    assert_eq!(
        after["metadata"]["finalizers"],
        json!([finalizers::TERRAFORM_CLUSTER])
    );
}

/// Finding 14, second fallback: an orphaned TerraformMachine (its Machine gone) keeps its
/// cluster's `spec.defaults.jobs`, found by its cluster-name label, so its destroy runs under
/// the same Job policy as its applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_machine_keeps_its_cluster_job_defaults() {
    let Fx {
        images, client, ns, ..
    } = fixture("orphan").await;
    create(
        &client,
        &ns,
        json!({"apiVersion": TC, "kind": "TerraformCluster",
               "metadata": {"name": "tc-orphan",
                            "labels": {"cluster.x-k8s.io/cluster-name": "orphan"}},
               "spec": {"source": {"image": images.cluster}, "identityRef": {"name": "id-orphan"},
                        "defaults": {"jobs": {"activeDeadlineSeconds": 1234}}}}),
    )
    .await;
    create(
        &client,
        &ns,
        json!({"apiVersion": TC, "kind": "TerraformMachine",
               "metadata": {"name": "m-orphan",
                            "finalizers": [finalizers::TERRAFORM_MACHINE],
                            "labels": {"cluster.x-k8s.io/cluster-name": "orphan"},
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                                 "kind": "Machine", "name": "gone",
                                                 "uid": "00000000-0000-4000-8000-00000000beef"}]},
               "spec": {"source": {"image": images.machine}}}),
    )
    .await;

    let passes = Passes::start(&client, &ns, &images, "passes-orphan").await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "tc-orphan")
        .await;
    passes
        .caught_up(&client, &ns, "TerraformMachine", "m-orphan")
        .await;
    let machine = target(&client, &ns, "TerraformMachine", "m-orphan").await;
    let owner = manager::kinds::workload::owner(&machine, &passes.ctx.caches);
    assert_eq!(owner.check, manager::reconcile::decide::OwnerCheck::Gone);
    let defaults = manager::kinds::workload::defaults(&machine, &owner);
    let policy = manager::kinds::workload::job_policy(&machine, defaults.as_ref());
    assert_eq!(policy.active_deadline_seconds, Some(1234));
}

/// The ServiceAccount subjects of the namespace's `captf-runner` RoleBinding.
async fn runner_subjects(client: &kube::Client, ns: &str) -> Vec<String> {
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    let mut names: Vec<String> = bindings
        .get_opt("captf-runner")
        .await
        .unwrap()
        .and_then(|b| b.subjects)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.kind == "ServiceAccount")
        .map(|s| s.name)
        .collect();
    names.sort();
    names
}

/// Finding 15, first rule: the runner RoleBinding's subjects are recomputed per namespace, not
/// only grown. Once the only object running its Jobs as a custom ServiceAccount goes back to the
/// default one, the next pass there removes the custom subject and binds the default.
/// (The identity does not exist, so no Job starts and no running Job needs either account.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_role_binding_subjects_are_recomputed_not_only_grown() {
    let Fx {
        images, client, ns, ..
    } = fixture("rbsubj").await;
    create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "custom-runner", "labels": {"captf.io/runner": "true"}}}),
    )
    .await;
    let custom = json!({"jobs": {"serviceAccountName": "custom-runner"}});
    cluster_with_spec(
        &client,
        &ns,
        "rb",
        "no-such-identity",
        &images.cluster,
        custom,
    )
    .await;
    let finalizer = json!({"metadata": {"finalizers": [finalizers::TERRAFORM_CLUSTER]}});
    patch_json(&client, &ns, "TerraformCluster", "rb", finalizer).await;

    let passes = Passes::start(&client, &ns, &images, "passes-rbsubj").await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "rb")
        .await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "rb").await)
        .await;
    assert_eq!(runner_subjects(&client, &ns).await, ["custom-runner"]);
    // The next pass decides from the cached binding: wait until the caches show it.
    let binding = kube::runtime::reflector::ObjectRef::new("captf-runner").within(&ns);
    eventually(Duration::from_secs(20), "the binding cached", || async {
        passes.ctx.caches.role_bindings.get(&binding).map(drop)
    })
    .await;

    patch_json(
        &client,
        &ns,
        "TerraformCluster",
        "rb",
        json!({"spec": {"jobs": null}}),
    )
    .await;
    passes
        .caught_up(&client, &ns, "TerraformCluster", "rb")
        .await;
    passes
        .pass(target(&client, &ns, "TerraformCluster", "rb").await)
        .await;
    assert_eq!(runner_subjects(&client, &ns).await, ["captf-runner"]);
}
