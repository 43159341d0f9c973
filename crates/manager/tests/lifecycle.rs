//! A TerraformCluster and its TerraformMachines from first apply to destroy, with the no-op
//! modules running in real Jobs of the test environment (The Reconcile Lifecycle, Cluster Role,
//! Machine Role, Job Inputs, Terraform State). Cluster API's own controllers do not run: the test
//! creates and updates the Cluster API objects the way they would.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`,
//! see `testenv::testbin::static_runner`); a test fails without it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use base64::Engine;
use common::*;
use contract::names::ObjectKind;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use sha2::{Digest, Sha256};

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

/// Bring-up of one cluster with three control-plane and three worker machines: eight Jobs (the
/// book's count), the endpoint written once, providerIDs and sorted addresses, bootstrap data
/// arriving base64 in the module; `control_plane_initialized` re-applies the cluster exactly once;
/// label edits and controller-written fields re-apply nothing; deletion waits for the machines,
/// destroys from the durable inputs after the Machine and bootstrap Secret are gone, and leaves
/// no CAPTF Secret, Lease or finalizer behind; no log, event, condition or status carries the
/// planted secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_and_machines_from_first_apply_to_destroy() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("lifecycle").await.unwrap();
    let credential = "planted-credential-7f3a9c";
    let bootstrap_secret = "planted-bootstrap-d41d8c";
    identity(&client, "id-lifecycle", &[ns.as_str()], credential).await;
    // The manager runs as its ServiceAccount with exactly config/rbac/role.yaml.
    let manager_client = manager_client(env, &client).await;
    let mgr = start_manager(&manager_client, &ns, &images, "manager-a");
    let scrape_url = serve_metrics(&mgr);

    cluster(&client, &ns, "prod", "id-lifecycle", &images.cluster).await;
    let tc = wait_ready(&client, &ns, "TerraformCluster", "prod", "True", LONG).await;
    assert_eq!(tc["status"]["initialization"]["provisioned"], true);
    assert_eq!(
        tc["spec"]["controlPlaneEndpoint"],
        json!({"host": format!("prod.{ns}.noop.invalid"), "port": 6443})
    );
    assert_eq!(
        tc["metadata"]["annotations"]["captf.io/endpoint-source"],
        "module"
    );
    assert_eq!(
        condition(&tc, "EndpointAvailable").unwrap().0,
        "True",
        "{tc:#}"
    );
    assert!(
        tc["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("terraformcluster.infrastructure.cluster.x-k8s.io"))
    );
    // The digest the kubelet ran is pinned on the durable inputs Secret.
    let durable = get_json(&client, &ns, "v1", "Secret", "captf-inputs-c-prod").await;
    let digest = durable["metadata"]["annotations"]["captf.io/image-digest"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(digest.starts_with("sha256:"), "{durable:#}");
    assert_eq!(
        durable["metadata"]["annotations"]["captf.io/identity"],
        "id-lifecycle"
    );
    // The credential mirror, owned by the cluster.
    let mirror = get_json(&client, &ns, "v1", "Secret", "captf-creds-id-lifecycle").await;
    assert!(mirror["metadata"]["annotations"]["captf.io/source-hash"].is_string());
    // The runner's RBAC is the static ClusterRole, bound in the namespace.
    let rb = get_json(
        &client,
        &ns,
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "captf-runner",
    )
    .await;
    assert_eq!(
        rb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "captf-runner"})
    );

    capi_cluster_provisioned(&client, &ns, "prod").await;
    let machines: Vec<(String, bool)> = (0..3)
        .map(|i| (format!("prod-cp-{i}"), true))
        .chain((0..3).map(|i| (format!("prod-md-{i}"), false)))
        .collect();
    for (name, cp) in &machines {
        machine(
            &client,
            &ns,
            "prod",
            name,
            &images.machine,
            *cp,
            &format!("{bootstrap_secret}-{name}"),
        )
        .await;
    }
    for (name, _) in &machines {
        let tm = wait_ready(&client, &ns, "TerraformMachine", name, "True", LONG).await;
        assert_eq!(
            tm["spec"]["providerID"],
            format!("noop:///{ns}/{name}"),
            "{tm:#}"
        );
        assert_eq!(
            tm["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.1"}])
        );
        assert_eq!(tm["status"]["interruptible"], false);
        assert_eq!(tm["status"]["initialization"]["provisioned"], true);
        // The bootstrap data reached the module base64-encoded: the no-op module keeps its hash.
        let state = state_document(&client, &ns, ObjectKind::Machine, name).await;
        let input = &state["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["type"] == "terraform_data")
            .unwrap()["instances"][0]["attributes"]["input"]["value"];
        let b64 =
            base64::engine::general_purpose::STANDARD.encode(format!("{bootstrap_secret}-{name}"));
        assert_eq!(
            input["bootstrap_sha256"].as_str().unwrap(),
            hex::encode(Sha256::digest(b64.as_bytes()))
        );
        assert_eq!(input["control_plane"], name.contains("-cp-"));
        assert_eq!(
            input["backend_id"],
            format!("noop:///{ns}/prod/backend"),
            "captf_cluster_outputs carries the cluster's exports"
        );
    }

    // Every user of the identity owns the one mirror, once each: the machines added themselves
    // by strategic merge patch, with the cluster's reference kept.
    let mirror = get_json(&client, &ns, "v1", "Secret", "captf-creds-id-lifecycle").await;
    let mut owners: Vec<String> = mirror["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["name"].as_str().unwrap()
            )
        })
        .collect();
    owners.sort();
    let mut expected: Vec<String> = machines
        .iter()
        .map(|(name, _)| format!("TerraformMachine/{name}"))
        .chain(["TerraformCluster/prod".to_owned()])
        .collect();
    expected.sort();
    assert_eq!(owners, expected, "{mirror:#}");

    // The control plane comes up: the cluster re-applies exactly once.
    capi_control_plane_initialized(&client, &ns, "prod").await;
    eventually(LONG, "the cluster's second apply", || async {
        let jobs = jobs_of(&client, &ns, "prod").await;
        (op_jobs(&jobs, "apply").len() == 2
            && jobs
                .iter()
                .all(|j| j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) == 1))
        .then_some(())
    })
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "prod", "True", LONG).await;

    // Label edits re-apply nothing, nor does anything the controller wrote itself.
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    let tms: Api<api::machine::TerraformMachine> = Api::namespaced(client.clone(), &ns);
    tms.patch(
        "prod-md-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    // Counted by inputs hash: a retried attempt (a failure on a loaded machine) repeats its hash.
    let (mut total, mut all) = (0, Vec::new());
    for owner in std::iter::once("prod").chain(machines.iter().map(|(n, _)| n.as_str())) {
        let jobs = jobs_of(&client, &ns, owner).await;
        for op in ["apply", "drift", "refresh", "destroy", "plan"] {
            total += op_hashes(&jobs, op).len();
        }
        all.extend(jobs);
    }
    assert_eq!(
        total,
        8,
        "one cluster apply, six machine applies, one re-apply after control_plane_initialized:\n{}",
        job_summary(&all)
    );
    let jobs = jobs_of(&client, &ns, "prod").await;
    assert_eq!(op_hashes(&jobs, "apply").len(), 2, "{}", job_summary(&jobs));

    // No planted value in any status or condition.
    let tc = get_json(&client, &ns, TC, "TerraformCluster", "prod").await;
    let mut statuses = tc["status"].to_string();
    for (name, _) in &machines {
        statuses.push_str(
            &get_json(&client, &ns, TC, "TerraformMachine", name).await["status"].to_string(),
        );
    }
    assert!(!statuses.contains(credential) && !statuses.contains(bootstrap_secret));

    // Deleting the cluster first: it waits for its machines.
    delete(&client, &ns, TC, "TerraformCluster", "prod").await;
    eventually(LONG, "DeletionBlocked", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "prod").await;
        (condition(&tc, "DeletionBlocked").map(|c| c.1) == Some("DependentsExist".to_owned()))
            .then_some(())
    })
    .await;
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "prod").await, "destroy").len(),
        0
    );

    // Machines go the way Cluster API deletes them: the Machine and its bootstrap Secret first,
    // then the TerraformMachine; the destroy runs from the durable inputs.
    for (name, _) in &machines {
        delete(&client, &ns, "cluster.x-k8s.io/v1beta2", "Machine", name).await;
        delete(&client, &ns, "v1", "Secret", &format!("{name}-bootstrap")).await;
    }
    for (name, _) in &machines {
        delete(&client, &ns, TC, "TerraformMachine", name).await;
    }
    for (name, _) in &machines {
        eventually(LONG, &format!("{name} gone"), || async {
            get_json_opt(&client, &ns, TC, "TerraformMachine", name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
    eventually(LONG, "the TerraformCluster gone", || async {
        get_json_opt(&client, &ns, TC, "TerraformCluster", "prod")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let destroyed = mgr
        .metrics
        .encode()
        .lines()
        .filter(|l| {
            l.starts_with("captf_jobs_total{")
                && l.contains("op=\"destroy\"")
                && l.contains("result=\"succeeded\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum::<u64>();
    assert_eq!(destroyed, 7, "one destroy per object");
    the_run_pipeline_latency_is_populated(&scrape_url).await;

    // Nothing of CAPTF's is left: no state, inputs, run or mirror Secret, no lease; the orphan
    // sweep took the runner's RBAC with the namespace's last object.
    eventually(
        Duration::from_secs(60),
        "nothing of CAPTF's left",
        || async {
            let left = leftovers(&client, &ns).await;
            left.is_empty().then_some(()).or_else(|| {
                eprintln!("left: {left:?}");
                None
            })
        },
    )
    .await;

    mgr.stop().await;
    // No planted value in any log line, event or status the manager wrote.
    let log = logs();
    for planted in [credential, bootstrap_secret] {
        assert!(!log.contains(planted), "a log line carries {planted}");
        let b64 = base64::engine::general_purpose::STANDARD.encode(planted);
        assert!(
            !log.contains(&b64[..12]),
            "a log line carries {planted} in base64"
        );
    }
    let all = events_json(&client, &ns).await;
    assert!(!all.contains(credential) && !all.contains(bootstrap_secret));
}

/// Drops `old_uid` from the owner references of every Secret in `ns` (or re-points them to
/// `new_uid`), so deleting the old object does not take what `clusterctl move` carries over.
async fn repoint_owned_secrets(
    client: &kube::Client,
    ns: &str,
    old_uid: &str,
    new_uid: Option<&str>,
) {
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    for s in api.list(&ListParams::default()).await.unwrap() {
        let Some(owners) = s.metadata.owner_references.clone() else {
            continue;
        };
        if !owners.iter().any(|o| o.uid == old_uid) {
            continue;
        }
        let owners: Vec<_> = owners
            .into_iter()
            .filter_map(|mut o| {
                if o.uid == old_uid {
                    new_uid?.clone_into(&mut o.uid);
                }
                Some(o)
            })
            .collect();
        api.patch(
            s.metadata.name.as_ref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": owners}})),
        )
        .await
        .unwrap();
    }
}

/// A `clusterctl move`-style re-creation (new UIDs, no status, no Job history, the state and
/// durable inputs Secrets carried over) rebuilds `provisioned` from state and re-applies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_cluster_and_machine_rebuild_their_status_and_run_nothing() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("move").await.unwrap();
    identity(&client, "id-move", &[ns.as_str()], "planted-move-1").await;
    let first = start_manager(&client, &ns, &images, "manager-before-move");
    cluster(&client, &ns, "moved", "id-move", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "moved", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "moved").await;
    capi_control_plane_initialized(&client, &ns, "moved").await;
    machine(
        &client,
        &ns,
        "moved",
        "moved-m",
        &images.machine,
        true,
        "planted-move-boot",
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "moved-m", "True", LONG).await;
    eventually(LONG, "the cluster's re-apply", || async {
        let jobs = jobs_of(&client, &ns, "moved").await;
        (op_jobs(&jobs, "apply").len() == 2
            && jobs
                .iter()
                .all(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1)))
        .then_some(())
    })
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "moved", "True", LONG).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    first.stop().await;

    // "Move": every object re-created with a new UID and no status; what they owned follows.
    let moved_at = std::time::SystemTime::now();
    for (kind, name) in [
        ("TerraformMachine", "moved-m"),
        ("TerraformCluster", "moved"),
    ] {
        let old = get_json(&client, &ns, TC, kind, name).await;
        let old_uid = old["metadata"]["uid"].as_str().unwrap().to_owned();
        repoint_owned_secrets(&client, &ns, &old_uid, None).await;
        let tcs: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            &ns,
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk(
                    "infrastructure.cluster.x-k8s.io",
                    "v1alpha1",
                    kind,
                ),
                &format!("{}s", kind.to_lowercase()),
            ),
        );
        tcs.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        delete(&client, &ns, TC, kind, name).await;
        eventually(LONG, "the old object gone", || async {
            get_json_opt(&client, &ns, TC, kind, name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
        let mut fresh = json!({
            "apiVersion": TC, "kind": kind,
            "metadata": {"name": name, "labels": old["metadata"]["labels"],
                         "annotations": old["metadata"]["annotations"],
                         "ownerReferences": old["metadata"]["ownerReferences"]},
            "spec": old["spec"],
        });
        fresh["metadata"]["annotations"]
            .as_object_mut()
            .map(|a| a.remove("clusterctl.cluster.x-k8s.io/block-move"));
        let created = create(&client, &ns, fresh).await;
        let new_uid = created.metadata.uid.unwrap();
        // Secrets owned by the old object were left ownerless above; give them the new owner.
        let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
        for s in api.list(&ListParams::default()).await.unwrap() {
            let n = s.metadata.name.clone().unwrap();
            let suffix = contract::names::state_suffix(
                &ns,
                if kind == "TerraformCluster" {
                    ObjectKind::Cluster
                } else {
                    ObjectKind::Machine
                },
                name,
            );
            let short = if kind == "TerraformCluster" { "c" } else { "m" };
            if n.starts_with(&format!("tfstate-default-{suffix}"))
                || n == format!("captf-inputs-{short}-{name}")
            {
                api.patch(
                    &n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"ownerReferences": [{
                        "apiVersion": TC, "kind": kind, "name": name, "uid": new_uid}]}})),
                )
                .await
                .unwrap();
            }
        }
    }

    let _second = start_manager(&client, &ns, &images, "manager-after-move");
    let tc = wait_ready(&client, &ns, "TerraformCluster", "moved", "True", LONG).await;
    assert_eq!(
        tc["status"]["initialization"]["provisioned"], true,
        "{tc:#}"
    );
    let tm = wait_ready(&client, &ns, "TerraformMachine", "moved-m", "True", LONG).await;
    assert_eq!(
        tm["status"]["initialization"]["provisioned"], true,
        "{tm:#}"
    );
    // The state's record of the apply stands for the apply no Job of the new object ran.
    for o in [&tc, &tm] {
        assert_eq!(
            condition(o, "ApplyJobSucceeded").map(|c| (c.0, c.1)),
            Some(("True".to_owned(), "ApplySucceeded".to_owned())),
            "{o:#}"
        );
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    for owner in ["moved", "moved-m"] {
        let new_jobs: Vec<String> = jobs_of(&client, &ns, owner)
            .await
            .into_iter()
            .filter(|j| {
                std::time::SystemTime::from(j.metadata.creation_timestamp.as_ref().unwrap().0)
                    >= moved_at
            })
            .filter_map(|j| j.metadata.name)
            .collect();
        assert!(
            new_jobs.is_empty(),
            "{owner} ran {new_jobs:?} after the move"
        );
    }
}

/// Cluster API v1.14 without a control-plane provider sets only the Cluster's
/// `ControlPlaneInitialized` condition: it feeds `control_plane_initialized` as the
/// `status.initialization` field does (issue 13, finding 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_initialized_is_read_from_the_cluster_condition_too() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("cpinit").await.unwrap();
    identity(&client, "id-cpinit", &[ns.as_str()], "planted-cpinit-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-cpinit");
    cluster(&client, &ns, "cpi", "id-cpinit", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "cpi", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "cpi").await;
    capi_control_plane_initialized_condition(&client, &ns, "cpi").await;
    let durable = contract::names::durable_inputs_secret_name(ObjectKind::Cluster, "cpi");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    eventually(LONG, "control_plane_initialized rendered true", || async {
        let s = secrets.get(&durable).await.ok()?;
        let tfvars = s.data?.get(contract::render::TFVARS_JSON)?.0.clone();
        let v: serde_json::Value = serde_json::from_slice(&tfvars).ok()?;
        (v["control_plane_initialized"] == true).then_some(())
    })
    .await;
    eventually(LONG, "the cluster's re-apply", || async {
        let jobs = jobs_of(&client, &ns, "cpi").await;
        (op_jobs(&jobs, "apply").len() == 2).then_some(())
    })
    .await;
}

/// Module Contract "Null semantics" (book l.1913): an output the module does not declare is a
/// hard error, `OutputsValid=False/OutputsMissing` naming it, with no retry until the module
/// changes. A machine module without `provider_id` applies (the runner leaves out the re-export
/// the plan could not make), reads `OutputsMissing` naming `provider_id` rather than pending, is
/// not provisioned, writes no providerID and runs no second apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_the_module_does_not_declare_is_outputs_missing() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("undeclared").await.unwrap();
    identity(&client, "id-undeclared", &[ns.as_str()], "planted-undecl-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-undeclared");
    cluster(&client, &ns, "und", "id-undeclared", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "und", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "und").await;
    capi_control_plane_initialized(&client, &ns, "und").await;
    let image = undeclaring_machine_image(env).await;
    machine(
        &client,
        &ns,
        "und",
        "bare",
        &image,
        false,
        "#cloud-config\n",
    )
    .await;
    let tm = eventually(LONG, "OutputsValid=False/OutputsMissing", || async {
        let tm = get_json(&client, &ns, TC, "TerraformMachine", "bare").await;
        (condition(&tm, "OutputsValid") == Some(("False".to_owned(), "OutputsMissing".to_owned())))
            .then_some(tm)
    })
    .await;
    let message = condition_message(&tm, "OutputsValid");
    assert!(
        message.contains("does not declare the contract outputs provider_id"),
        "{message}"
    );
    assert_eq!(
        condition(&tm, "ApplyJobSucceeded").map(|c| c.0),
        Some("True".to_owned()),
        "{tm:#}"
    );
    assert_ne!(
        tm["status"]["initialization"]["provisioned"], true,
        "{tm:#}"
    );
    assert!(tm["spec"]["providerID"].is_null(), "{tm:#}");
    // No retry: the inputs did not change, so no second apply.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let jobs = jobs_of(&client, &ns, "bare").await;
    assert_eq!(op_jobs(&jobs, "apply").len(), 1);
    let tm = get_json(&client, &ns, TC, "TerraformMachine", "bare").await;
    assert_eq!(
        condition(&tm, "OutputsValid"),
        Some(("False".to_owned(), "OutputsMissing".to_owned()))
    );
}

/// After a `clusterctl move` an identity can arrive before its credentials Secret: once the
/// Secret is created, the identity reports `Ready=True` at once (its source Secret is watched),
/// and the objects using it recover without waiting for a recheck (issue 13, finding 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_recovers_as_soon_as_its_secret_arrives() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("late-secret").await.unwrap();
    let creds_ns = env.namespace("late-secret-creds").await.unwrap();
    create(
        &client,
        "",
        json!({"apiVersion": TC, "kind": "TerraformClusterIdentity",
               "metadata": {"name": "id-late"},
               "spec": {"secretRef": {"name": "late", "namespace": creds_ns},
                        "allowedNamespaces": {"list": [ns]}}}),
    )
    .await;
    let manager_client = manager_client(env, &client).await;
    let _mgr = start_manager(&manager_client, &ns, &images, "manager-late-secret");
    cluster(&client, &ns, "late", "id-late", &images.cluster).await;
    eventually(LONG, "IdentityAllowed=False/SecretNotFound", || async {
        let o = get_json(&client, &ns, TC, "TerraformCluster", "late").await;
        (condition(&o, "IdentityAllowed")
            == Some(("False".to_owned(), "SecretNotFound".to_owned())))
        .then_some(())
    })
    .await;
    eventually(LONG, "the identity Ready=False", || async {
        let o = get_json(&client, "", TC, "TerraformClusterIdentity", "id-late").await;
        (condition(&o, "Ready").map(|c| c.0) == Some("False".to_owned())).then_some(())
    })
    .await;
    create(
        &client,
        &creds_ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late"},
               "stringData": {"CLOUD_TOKEN": "planted-late-1"}}),
    )
    .await;
    // Well within the 30 s dependency recheck and the 10 min sync period.
    let soon = Duration::from_secs(12);
    eventually(soon, "the identity Ready=True", || async {
        let o = get_json(&client, "", TC, "TerraformClusterIdentity", "id-late").await;
        (condition(&o, "Ready").map(|c| c.0) == Some("True".to_owned())).then_some(())
    })
    .await;
    eventually(soon, "the cluster's IdentityAllowed=True", || async {
        let o = get_json(&client, &ns, TC, "TerraformCluster", "late").await;
        (condition(&o, "IdentityAllowed").map(|c| c.0) == Some("True".to_owned())).then_some(())
    })
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "late", "True", LONG).await;
}

/// The CAPTF objects a namespace's last Terraform* object leaves behind (the runner
/// ServiceAccount and RoleBinding, the leases) go as soon as that object leaves, also when
/// `clusterctl move` removed its finalizer and deleted it (issue 13, finding 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_object_moved_away_takes_the_runner_rbac_and_leases_with_it() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("move-source").await.unwrap();
    identity(
        &client,
        "id-move-source",
        &[ns.as_str()],
        "planted-move-source",
    )
    .await;
    let manager_client = manager_client(env, &client).await;
    let _mgr = start_manager(&manager_client, &ns, &images, "manager-move-source");
    cluster(&client, &ns, "leaving", "id-move-source", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "leaving", "True", LONG).await;
    let managed = ListParams::default().labels("captf.io/managed=true");
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let rbs: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let count = || async {
        (
            sas.list_metadata(&managed).await.unwrap().items.len(),
            rbs.list_metadata(&managed).await.unwrap().items.len(),
            leases.list_metadata(&managed).await.unwrap().items.len(),
        )
    };
    let (s, r, l) = count().await;
    assert!(
        s >= 1 && r >= 1 && l >= 1,
        "before the move: {s} SAs, {r} RoleBindings, {l} leases"
    );
    delete_as_clusterctl_move(&client, &ns, "TerraformCluster", "leaving", "leaving").await;
    eventually(Duration::from_secs(30), "the object gone", || async {
        get_json_opt(&client, &ns, TC, "TerraformCluster", "leaving")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // Well within the periodic sweep (every 10 min, for what is a minute old).
    eventually(Duration::from_secs(15), "nothing of CAPTF left", || async {
        (count().await == (0, 0, 0)).then_some(())
    })
    .await;
}

/// Serves the manager's metrics on a loopback port as `--diagnostics-address` with
/// `--insecure-diagnostics` would; answers the `/metrics` URL.
fn serve_metrics(mgr: &RunningManager) -> String {
    let settings = manager::runtime::diagnostics::DiagnosticsSettings {
        health_addr: "0".into(),
        diagnostics_addr: "127.0.0.1:0".into(),
        insecure: true,
        ..Default::default()
    };
    let listeners = manager::runtime::diagnostics::DiagnosticsListeners::bind(&settings).unwrap();
    let url = format!("http://{}/metrics", listeners.diagnostics_addr().unwrap());
    tokio::spawn(manager::runtime::diagnostics::serve_on(
        listeners,
        settings,
        std::env::temp_dir(),
        mgr.metrics.clone(),
        manager::runtime::diagnostics::Readiness::default(),
        None,
        std::future::pending(),
    ));
    url
}

/// The sum of the samples of `series` whose labels include every one of `labels`.
fn sample_sum(exposition: &str, series: &str, labels: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(&format!("{series}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Issue 20: scraped over HTTP after a cluster and its machines were applied and destroyed, each
/// stage of the run pipeline has samples for both kinds and both operations: object change to
/// Job created, Job created to pod running, and every runner step the no-op module ran (a
/// cluster's apply reads its plan back for the delete guard, so it has a `show-json` step).
async fn the_run_pipeline_latency_is_populated(url: &str) {
    let exposition = reqwest::get(url).await.unwrap().text().await.unwrap();
    let apply_steps = |kind| match kind {
        "TerraformCluster" => &["version", "init", "validate", "plan", "show-json", "apply"][..],
        _ => &["version", "init", "validate", "plan", "apply"][..],
    };
    for kind in ["TerraformCluster", "TerraformMachine"] {
        for (op, steps) in [
            ("apply", apply_steps(kind)),
            ("destroy", &["version", "init", "destroy"][..]),
        ] {
            let labels = [("kind", kind), ("op", op)];
            for series in [
                "captf_job_create_delay_seconds_count",
                "captf_job_queue_seconds_count",
            ] {
                assert!(
                    sample_sum(&exposition, series, &labels) >= 1.0,
                    "no {series} sample for {kind} {op}"
                );
            }
            for step in steps {
                let labels = [("kind", kind), ("op", op), ("step", step)];
                assert!(
                    sample_sum(
                        &exposition,
                        "captf_job_step_duration_seconds_count",
                        &labels
                    ) >= 1.0,
                    "no step {step} sample for {kind} {op}"
                );
            }
        }
    }
}

/// Job Policy "successfulJobsHistoryLimit" (book: finished Jobs kept per operation, the newest
/// success always kept): under a limit of 1, three applies leave only the newest apply Job, and
/// the drift checks running meanwhile keep their own newest Job beside it; pruning one operation
/// never removes another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_are_pruned_per_operation() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("history").await.unwrap();
    identity(&client, "id-history", &[ns.as_str()], "planted-history-1").await;
    let mgr = start_manager(&client, &ns, &images, "manager-history");
    cluster_with_spec(
        &client,
        &ns,
        "pruned",
        "id-history",
        &image,
        json!({"variables": {"token": "first"},
               "jobs": {"successfulJobsHistoryLimit": 1},
               "drift": {"intervalSeconds": 5}}),
    )
    .await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    for token in ["first", "second", "third"] {
        tcs.patch(
            "pruned",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"variables": {"token": token}}})),
        )
        .await
        .unwrap();
        let want = hex::encode(Sha256::digest(token.as_bytes()));
        eventually(LONG, &format!("token {token} applied"), || async {
            let doc = state_document_now(&client, &ns, ObjectKind::Cluster, "pruned").await?;
            doc.to_string().contains(&want).then_some(())
        })
        .await;
    }
    let (apply, drift) = eventually(LONG, "one Job kept per operation", || async {
        let jobs = jobs_of(&client, &ns, "pruned").await;
        let enc = mgr.metrics.encode();
        let succeeded = |op: &str| {
            metric_sum(
                &enc,
                "captf_jobs_total",
                &[&format!("op=\"{op}\""), "result=\"succeeded\""],
            )
        };
        let (applies, drifts) = (succeeded("apply"), succeeded("drift"));
        // History is finished Jobs: with a 5-second interval a drift check is often running.
        let finished = |op: &str| -> Vec<_> {
            op_jobs(&jobs, op)
                .into_iter()
                .filter(job_finished)
                .collect()
        };
        let (apply, drift) = (finished("apply"), finished("drift"));
        (applies >= 3 && drifts >= 2 && apply.len() == 1 && drift.len() == 1)
            .then_some((apply, drift))
    })
    .await;
    assert!(apply[0].metadata.name.as_ref().unwrap().contains("-apply-"));
    assert!(drift[0].metadata.name.as_ref().unwrap().contains("-drift-"));
    assert!(
        !events_json(&client, &ns)
            .await
            .contains("planted-history-1")
    );
}

/// The image of a Job's `source` container.
fn job_image(job: &k8s_openapi::api::batch::v1::Job) -> String {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap()
}

/// The digest pinned on an object's durable inputs Secret (none between an apply Job's start,
/// which writes the Secret, and its success, which pins).
async fn pinned(client: &kube::Client, ns: &str, secret: &str) -> Option<String> {
    let durable = get_json(client, ns, "v1", "Secret", secret).await;
    durable["metadata"]["annotations"]["captf.io/image-digest"]
        .as_str()
        .map(str::to_owned)
}

/// Image Contract "Image pinning by digest" (book l.979): a machine's first successful apply
/// pins the digest the kubelet ran; once its tag moves to another image, the machine's drift
/// checks and its destroy still run `repo@<pinned digest>`, never the tag. A cluster (mutable)
/// whose `spec.source.image` changes applies the new image and re-pins its digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_digest_runs_a_machines_drift_and_destroy_and_an_image_change_repins() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("pinning").await.unwrap();
    identity(&client, "id-pinning", &[ns.as_str()], "planted-pinning-1").await;
    let repo = "captf/pinned-machine";
    let tag = retagged_variant_image(env, "machine", repo, "# first build\n").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-pinning");
    cluster(&client, &ns, "prod", "id-pinning", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "prod", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "prod").await;
    capi_control_plane_initialized(&client, &ns, "prod").await;
    machine(
        &client,
        &ns,
        "prod",
        "pinned",
        &tag,
        false,
        "#cloud-config\n",
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "pinned", "True", LONG).await;
    let digest = pinned(&client, &ns, "captf-inputs-m-pinned").await.unwrap();
    assert!(digest.starts_with("sha256:"), "{digest}");
    let by_digest = format!("{}@{digest}", tag.rsplit_once(':').unwrap().0);

    // The tag moves to another image.
    let moved = retagged_variant_image(env, "machine", repo, "# second build\n").await;
    assert_eq!(moved, tag);
    let tms: Api<api::machine::TerraformMachine> = Api::namespaced(client.clone(), &ns);
    tms.patch(
        "pinned",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"drift": {"intervalSeconds": 5}}})),
    )
    .await
    .unwrap();
    let drift = eventually(LONG, "a drift check", || async {
        op_jobs(&jobs_of(&client, &ns, "pinned").await, "drift")
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(job_image(&drift), by_digest);
    delete(&client, &ns, TC, "TerraformMachine", "pinned").await;
    let destroy = eventually(LONG, "the destroy Job", || async {
        op_jobs(&jobs_of(&client, &ns, "pinned").await, "destroy")
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(job_image(&destroy), by_digest);
    eventually(LONG, "the machine is gone", || async {
        get_json_opt(&client, &ns, TC, "TerraformMachine", "pinned")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // The cluster: a new spec.source.image applies and re-pins.
    let first = pinned(&client, &ns, "captf-inputs-c-prod").await.unwrap();
    let other = slow_image(env).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"source": {"image": other}}})),
    )
    .await
    .unwrap();
    let apply = eventually(LONG, "the re-apply on the new image", || async {
        op_jobs(&jobs_of(&client, &ns, "prod").await, "apply")
            .into_iter()
            .find(|j| job_image(j) == other)
    })
    .await;
    let repinned = eventually(LONG, "the new digest pinned", || async {
        let d = pinned(&client, &ns, "captf-inputs-c-prod").await?;
        (d != first).then_some(d)
    })
    .await;
    assert!(repinned.starts_with("sha256:"));
    assert!(apply.metadata.name.is_some());
}

/// The `type` of every event in `ns` whose note contains `text`.
async fn event_types(client: &kube::Client, ns: &str, text: &str) -> Vec<String> {
    let events: serde_json::Value = serde_json::from_str(&events_json(client, ns).await).unwrap();
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["note"].as_str().is_some_and(|n| n.contains(text)))
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Observability "Events" (issue 29 item 1), with real Jobs: pausing and unpausing a cluster
/// announce `ConditionChanged` as Normal events both ways (`Paused` has no bad status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_and_unpausing_are_never_warnings() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("completed").await.unwrap();
    identity(
        &client,
        "id-completed",
        &[ns.as_str()],
        "planted-completed-1",
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-completed");
    cluster(&client, &ns, "kept", "id-completed", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "kept", "True", LONG).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    for paused in [Some("true"), None] {
        tcs.patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": paused}}}),
            ),
        )
        .await
        .unwrap();
        let want = if paused.is_some() {
            "Paused is True"
        } else {
            "Paused is False"
        };
        let types = eventually(LONG, want, || async {
            let types = event_types(&client, &ns, want).await;
            (!types.is_empty()).then_some(types)
        })
        .await;
        assert!(types.iter().all(|t| t == "Normal"), "{want}: {types:?}");
    }
}

/// Conditions "Deleting" (issue 29 item 1), with real Jobs: a cluster another finalizer keeps
/// reads `Deleting=True/DeletionCompleted` once CAPTF destroyed it, removed its state and dropped
/// its own finalizer, and its `ApplyJobSucceeded` is the destroy's; the other finalizer's removal
/// then lets it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_another_finalizer_keeps_reads_deletion_completed() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("held").await.unwrap();
    identity(&client, "id-held", &[ns.as_str()], "planted-held-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-held");
    cluster(&client, &ns, "held", "id-held", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "held", "True", LONG).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let hold =
        |finalizers: Vec<String>| Patch::Merge(json!({"metadata": {"finalizers": finalizers}}));
    let mut finalizers = tcs.get("held").await.unwrap().metadata.finalizers.unwrap();
    finalizers.push("example.com/hold".to_owned());
    tcs.patch("held", &PatchParams::default(), &hold(finalizers))
        .await
        .unwrap();
    delete(&client, &ns, TC, "TerraformCluster", "held").await;

    let tc = eventually(LONG, "Deleting=True/DeletionCompleted", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "held").await;
        (condition(&tc, "Deleting") == Some(("True".into(), "DeletionCompleted".into())))
            .then_some(tc)
    })
    .await;
    assert_eq!(
        tc["metadata"]["finalizers"],
        json!(["example.com/hold"]),
        "{tc:#}"
    );
    assert_eq!(
        condition(&tc, "ApplyJobSucceeded"),
        Some(("True".into(), "DestroySucceeded".into())),
        "{tc:#}"
    );
    let suffix = contract::names::state_suffix(&ns, ObjectKind::Cluster, "held");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    assert!(
        secrets
            .get_opt(&format!("tfstate-default-{suffix}"))
            .await
            .unwrap()
            .is_none(),
        "the state is removed"
    );

    tcs.patch("held", &PatchParams::default(), &hold(Vec::new()))
        .await
        .unwrap();
    eventually(LONG, "the cluster is gone", || async {
        get_json_opt(&client, &ns, TC, "TerraformCluster", "held")
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// The manager's events on `name` in `ns` (reporting controller `captf-manager`), oldest first:
/// type, reason, note and series count.
async fn manager_events(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Vec<(String, String, String, Option<i64>)> {
    let events: serde_json::Value = serde_json::from_str(&events_json(client, ns).await).unwrap();
    let mut mine: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reportingController"] == "captf-manager" && e["regarding"]["name"] == name)
        .cloned()
        .collect();
    mine.sort_by_key(|e| e["eventTime"].as_str().unwrap_or_default().to_owned());
    mine.iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (
                s("type"),
                s("reason"),
                s("note"),
                e["series"]["count"].as_i64(),
            )
        })
        .collect()
}

/// Observability "Events" (issue 34 item 2), with a real Job: a machine's bring-up announces
/// each transition a user acts on once, with the book's event for it, and nothing routine (no
/// `ConditionChanged` for first values, for a machine still provisioning, or for a Job condition
/// the Job's own event announces), no Warning, and no repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_bring_up_announces_each_book_event_once() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let ns = env.namespace("bringup").await.unwrap();
    identity(&client, "id-bringup", &[ns.as_str()], "planted-bringup-1").await;
    let _mgr = start_manager(&client, &ns, &images, "manager-bringup");
    cluster(&client, &ns, "prod", "id-bringup", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "prod", "True", LONG).await;
    capi_cluster_provisioned(&client, &ns, "prod").await;
    machine(
        &client,
        &ns,
        "prod",
        "m-0",
        &images.machine,
        false,
        "planted-bringup-2",
    )
    .await;
    wait_ready(&client, &ns, "TerraformMachine", "m-0", "True", LONG).await;
    let want = [
        "JobCreated",
        "StateAdopted",
        "DigestPinned",
        "StateBackedUp",
        "ProviderIDSet",
        "JobSucceeded",
        "Provisioned",
        "InstanceHealthy",
    ];
    let got = eventually(LONG, "the bring-up's events", || async {
        let got = manager_events(&client, &ns, "m-0").await;
        (got.len() >= want.len()).then_some(got)
    })
    .await;
    let reasons: Vec<&str> = got.iter().map(|e| e.1.as_str()).collect();
    let mut sorted = reasons.clone();
    sorted.sort_unstable();
    let mut expected = want.to_vec();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "{got:#?}");
    assert!(
        got.iter().all(|e| e.0 == "Normal" && e.3.is_none()),
        "{got:#?}"
    );
    // In the book's order by `eventTime`, though the finishing pass posts its seven at once.
    assert_eq!(reasons, want, "{got:#?}");
}

/// Observability "Events" (issue 34 item 2), against the API server: a repeat of the same
/// object, type, reason and note is one Event whose `series` counts it, written by the flush,
/// not one request per repeat; another note is an Event of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_one_event_with_a_series_count() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (env, _images) = setup().await;
    let client = env.client().await.unwrap();
    let ns = env.namespace("series").await.unwrap();
    let writes = Arc::new(AtomicUsize::new(0));
    let counted = writes.clone();
    let recorder_client = client_mapping(env, move |req: http::Request<kube::client::Body>| {
        if req.uri().path().contains("/events") && req.method() != http::Method::GET {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        req
    })
    .await;
    let recorder = manager::runtime::events::Recorder::with_flush_every(
        recorder_client,
        "captf-manager",
        "manager-series",
        Duration::from_secs(2),
    );
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("repeated".into()),
        namespace: Some(ns.clone()),
        uid: Some("5c1a2b3c-0000-4000-8000-000000000001".into()),
        ..Default::default()
    };
    for _ in 0..3 {
        recorder
            .publish(true, "JobFailed", "apply failed".into(), &reference)
            .await
            .unwrap();
    }
    recorder
        .publish(true, "JobFailed", "destroy failed".into(), &reference)
        .await
        .unwrap();
    let got = eventually(LONG, "the series written", || async {
        let got = manager_events(&client, &ns, "repeated").await;
        got.iter()
            .any(|e| e.2 == "apply failed" && e.3 == Some(3))
            .then_some(got)
    })
    .await;
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(
        got.iter().any(|e| e.2 == "destroy failed" && e.3.is_none()),
        "{got:#?}"
    );
    assert_eq!(
        writes.load(Ordering::SeqCst),
        3,
        "two creates and one series write"
    );
    assert_eq!(recorder.open_series(), 2);
}

/// Status (issue 34 item 2), with a real Job: a Job running over a provisioned object leaves
/// `status.source.runtimeVersion` in place (the passes that see the Job running do not read the
/// state, and wrote the field away before, for the finishing pass to write it back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_leaves_the_runtime_version_in_place() {
    let (env, images) = setup().await;
    let client = env.client().await.unwrap();
    install_runner_cluster_role(&client).await;
    let image = slow_image(env).await;
    let ns = env.namespace("runtimever").await.unwrap();
    identity(
        &client,
        "id-runtimever",
        &[ns.as_str()],
        "planted-runtimever-1",
    )
    .await;
    let _mgr = start_manager(&client, &ns, &images, "manager-runtimever");
    cluster_with_spec(
        &client,
        &ns,
        "steady",
        "id-runtimever",
        &image,
        json!({"variables": {"sleep_seconds": 0}}),
    )
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "steady", "True", LONG).await;
    let version = |tc: &serde_json::Value| tc["status"]["source"]["runtimeVersion"].clone();
    let before = version(&get_json(&client, &ns, TC, "TerraformCluster", "steady").await);
    assert!(before.is_string(), "{before}");
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "steady",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"sleep_seconds": 12}}})),
    )
    .await
    .unwrap();
    // Sampled while the apply runs: from its start until it is bookkept.
    let (mut running, deadline) = (0, std::time::Instant::now() + LONG);
    let finished = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the apply did not finish"
        );
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "steady").await;
        assert_eq!(version(&tc), before, "{:#}", tc["status"]);
        if tc["status"]["activeJob"]["operation"] == "apply" {
            running += 1;
        } else if running > 0 {
            break tc;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(running >= 5, "sampled {running} times while the apply ran");
    assert_eq!(version(&finished), before);
}
