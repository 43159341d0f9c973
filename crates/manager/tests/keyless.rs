//! Keyless identity (Identities and Credentials, "Keyless identity") with real components: the
//! real API server issues the projected ServiceAccount token through the TokenRequest API when
//! the process kubelet mounts the Job pod's projected volume, as a kubelet does; the module reads
//! the token and checks the variables the runner exports; the state records the token's claims.
//!
//! Needs the test binaries, the static runner and the kubelet's shim (`make unit` builds them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use common::*;
use contract::names::ObjectKind;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::Api;
use serde_json::json;

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);
const RUNNER_SA: &str = "cloud-runner";
const AUDIENCE: &str = "sts.amazonaws.com";

async fn keyless_identity(client: &kube::Client, name: &str, ns: &str) {
    create(
        client,
        "",
        json!({"apiVersion": TC, "kind": "TerraformClusterIdentity",
               "metadata": {"name": name},
               "spec": {
                   "workloadIdentity": {
                       "serviceAccountName": RUNNER_SA,
                       "audience": AUDIENCE,
                       "aws": {"roleARN": KEYLESS_ROLE_ARN},
                       "gcp": {"workloadIdentityProvider": KEYLESS_GCP_PROVIDER}
                   },
                   "allowedNamespaces": {"list": [ns]}}}),
    )
    .await;
}

async fn opted_in_service_account(client: &kube::Client, ns: &str) {
    create(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": RUNNER_SA, "labels": {"captf.io/runner": "true"}}}),
    )
    .await;
}

/// Waits for `name` to be Ready; else fails with its status, its Jobs and their pods' result
/// documents (the runner's termination message).
async fn ready_or_explain(client: &kube::Client, ns: &str, name: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let tc = get_json(client, ns, TC, "TerraformCluster", name).await;
        if condition(&tc, "Ready").is_some_and(|(s, _)| s == "True") {
            return tc;
        }
        if std::time::Instant::now() > deadline {
            let jobs = jobs_of(client, ns, name).await;
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
            let mut results = Vec::new();
            for p in pods.list(&kube::api::ListParams::default()).await.unwrap() {
                for c in p
                    .status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
                {
                    if let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) {
                        results.push(format!(
                            "{} {}: {}",
                            p.metadata.name.clone().unwrap_or_default(),
                            c.name,
                            t.message.clone().unwrap_or_default()
                        ));
                    }
                }
            }
            panic!(
                "{name} is not Ready: {}\njobs:\n{}\nresults:\n{}",
                tc["status"],
                job_summary(&jobs),
                results.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A TerraformCluster under a keyless identity: its Jobs run as the identity's ServiceAccount
/// with a projected token for the identity's audience and no credential mirror; the module reads
/// the token (its `aud` is the audience, its `sub` the namespace's ServiceAccount) and finds the
/// AWS and Google variables pointing at it; the cluster becomes Ready and its deletion destroys
/// under the same identity. One that also names another ServiceAccount in `spec.jobs` is held
/// with `IdentityAllowed=False/ServiceAccountConflict` and runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_identity_runs_jobs_with_a_projected_token_and_no_secret() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture("keyless").await;
    let image = keyless_image(env).await;
    let id = format!("id-keyless-{ns}");
    opted_in_service_account(&client, &ns).await;
    keyless_identity(&client, &id, &ns).await;
    let _mgr = start_manager(&client, &ns, &images, "manager-keyless");

    // The identity is ready without any Secret.
    let tci = eventually(Duration::from_secs(60), "the identity is Ready", || {
        let client = client.clone();
        let id = id.clone();
        async move {
            let tci = get_json(&client, "", TC, "TerraformClusterIdentity", &id).await;
            (condition(&tci, "Ready") == Some(("True".into(), "WorkloadIdentity".into())))
                .then_some(tci)
        }
    })
    .await;
    assert!(
        condition_message(&tci, "Ready").contains(RUNNER_SA),
        "{tci}"
    );

    cluster(&client, &ns, "keyless", &id, &image).await;
    cluster_with_spec(
        &client,
        &ns,
        "conflicted",
        &id,
        &image,
        json!({"jobs": {"serviceAccountName": "captf-runner"}}),
    )
    .await;
    let tc = ready_or_explain(&client, &ns, "keyless").await;
    assert_eq!(
        condition(&tc, "CredentialsMirrored"),
        Some(("True".into(), "WorkloadIdentity".into())),
        "{tc}"
    );

    // The apply Job: the identity's ServiceAccount, a projected token, no mirror.
    let jobs = jobs_of(&client, &ns, "keyless").await;
    let apply = op_jobs(&jobs, "apply");
    let pod = apply[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(RUNNER_SA));
    let main = &pod.containers[0];
    assert!(main.env_from.is_none(), "no mirror is mounted");
    let token = pod
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.projected.as_ref())
        .and_then(|p| p.sources.as_ref())
        .and_then(|s| s.iter().find_map(|s| s.service_account_token.clone()))
        .expect("a projected ServiceAccount token");
    assert_eq!(token.audience.as_deref(), Some(AUDIENCE));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert!(
        secrets
            .get_opt(&format!("captf-creds-{id}"))
            .await
            .unwrap()
            .is_none(),
        "a keyless identity mirrors nothing"
    );

    // What the module read from the token.
    let state = state_document(&client, &ns, ObjectKind::Cluster, "keyless").await;
    let claims = state["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "terraform_data" && r["name"] == "token_claims")
        .map(|r| r["instances"][0]["attributes"]["input"]["value"].clone())
        .expect("the module recorded the token's claims");
    assert_eq!(claims["audience"], json!([AUDIENCE]), "{claims}");
    assert_eq!(
        claims["subject"],
        json!(format!("system:serviceaccount:{ns}:{RUNNER_SA}")),
        "{claims}"
    );

    // The CAPTF-managed binding lets the identity's ServiceAccount reach the state.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    assert!(sas.get_opt(RUNNER_SA).await.unwrap().is_some());

    // A Job policy naming another ServiceAccount cannot carry this identity's token.
    let conflicted = until(
        &client,
        &ns,
        TC,
        "TerraformCluster",
        "conflicted",
        "IdentityAllowed=False/ServiceAccountConflict",
        LONG,
        |o| {
            condition(o, "IdentityAllowed")
                == Some(("False".into(), "ServiceAccountConflict".into()))
        },
    )
    .await;
    let message = condition_message(&conflicted, "IdentityAllowed");
    assert!(
        message.contains("spec.jobs.serviceAccountName is captf-runner")
            && message.contains(RUNNER_SA),
        "{message}"
    );
    assert!(jobs_of(&client, &ns, "conflicted").await.is_empty());

    // Deletion destroys under the same identity.
    delete(&client, &ns, TC, "TerraformCluster", "keyless").await;
    eventually(LONG, "the keyless cluster is destroyed and gone", || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            get_json_opt(&client, &ns, TC, "TerraformCluster", "keyless")
                .await
                .is_none()
                .then_some(())
        }
    })
    .await;
    let jobs = jobs_of(&client, &ns, "keyless").await;
    assert!(
        op_jobs(&jobs, "destroy").iter().any(job_finished) || jobs.is_empty(),
        "{}",
        job_summary(&jobs)
    );
}
