//! A user's bad day, with real Jobs in the test environment: every failure path the book names
//! for an object's owner, its inputs, its variables, its image and its Jobs, driven through the
//! real API server and the process kubelet (The Reconcile Lifecycle "Owner lookup", "Owners that
//! reference back"; Module Variables; Size limits; Job Policy "activeDeadlineSeconds", "env",
//! "securityContext"; Image Contract "Fixed paths"; Conditions).
//!
//! Each test names the rule it proves. Every test plants a secret value in its identity and checks
//! it never reaches an event, a condition or the manager's log.
//!
//! Needs root, the test binaries and a static runner (`make runner-static-dev`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const TC: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const LONG: Duration = Duration::from_secs(240);

/// Polls the TerraformCluster `name` until `check` holds, failing with the object after `LONG`.
async fn cluster_until(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    until(client, ns, TC, "TerraformCluster", name, what, LONG, check).await
}

/// The condition `type_` of the TerraformCluster `name`, once it reads `(status, reason)`.
async fn cluster_reads(
    client: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> Value {
    eventually(LONG, &format!("{type_}={status}/{reason}"), || async {
        let tc = get_json(client, ns, TC, "TerraformCluster", name).await;
        (condition(&tc, type_) == Some((status.to_owned(), reason.to_owned()))).then_some(tc)
    })
    .await
}

/// Nothing the test planted shows in the namespace's events, the object's status or the log.
async fn no_planted_value(client: &kube::Client, ns: &str, object: &Value, planted: &str) {
    assert!(!events_json(client, ns).await.contains(planted));
    assert!(
        !object["status"].to_string().contains(planted),
        "{object:#}"
    );
    assert!(!logs().contains(planted));
}

/// A TerraformCluster whose ownerReferences name the Cluster `owner` (with `owner_uid`), as a
/// user would write one by hand or a tool would copy one.
async fn cluster_owned_by(
    client: &kube::Client,
    ns: &str,
    name: &str,
    owner: &str,
    owner_uid: &str,
    identity: &str,
    image: &str,
) {
    create(
        client,
        ns,
        json!({"apiVersion": TC, "kind": "TerraformCluster",
               "metadata": {"name": name,
                            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                                 "name": owner, "uid": owner_uid}]},
               "spec": {"source": {"image": image}, "identityRef": {"name": identity}}}),
    )
    .await;
}

/// Owners that reference back (book: "An owner that fails any check is not an owner"): a
/// TerraformCluster whose ownerReferences name a Cluster that names another TerraformCluster is
/// `DependenciesReady=False/OwnerMismatch`, naming the failed check; one whose Cluster does not
/// exist is `OwnerNotFound` (unless the garbage collector deleted it first, as it deletes any
/// dependent of an owner that does not exist). Neither runs a Job, CAPTF writes nothing to the Cluster, and both
/// can be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_does_not_reference_back_or_is_gone_runs_no_job() {
    let Fx {
        env: _,
        images,
        client,
        ns,
    } = fixture_with_identity("owners").await;
    let mgr = start_manager(&client, &ns, &images, "manager-owners");
    cluster(&client, &ns, "real", "id-owners", &images.cluster).await;
    let owner = get_json(&client, &ns, "cluster.x-k8s.io/v1beta2", "Cluster", "real").await;
    let uid = owner["metadata"]["uid"].as_str().unwrap().to_owned();
    cluster_owned_by(
        &client,
        &ns,
        "squatter",
        "real",
        &uid,
        "id-owners",
        &images.cluster,
    )
    .await;
    cluster_owned_by(
        &client,
        &ns,
        "orphan",
        "ghost",
        "00000000-0000-0000-0000-00000000dead",
        "id-owners",
        &images.cluster,
    )
    .await;

    let squatter = cluster_reads(
        &client,
        &ns,
        "squatter",
        "DependenciesReady",
        "False",
        "OwnerMismatch",
    )
    .await;
    let message = condition_message(&squatter, "DependenciesReady");
    assert!(
        message
            .contains("Cluster real does not name this TerraformCluster in spec.infrastructureRef"),
        "{message}"
    );
    // The garbage collector deletes a dependent whose owner does not exist, so under load the
    // orphan may be gone before a pass reports it: either is the book's outcome (no Job, and
    // nothing holds the deletion).
    let orphan = eventually(LONG, "OwnerNotFound, or collected", || async {
        match get_json_opt(&client, &ns, TC, "TerraformCluster", "orphan").await {
            None => Some(None),
            Some(o)
                if condition(&o, "DependenciesReady")
                    == Some(("False".to_owned(), "OwnerNotFound".to_owned())) =>
            {
                Some(Some(o))
            }
            Some(_) => None,
        }
    })
    .await;
    if let Some(orphan) = &orphan {
        let message = condition_message(orphan, "DependenciesReady");
        assert!(
            message.contains("Cluster ghost no longer exists"),
            "{message}"
        );
    }
    // The real owner's own TerraformCluster goes on: the squatter does not block it.
    wait_ready(&client, &ns, "TerraformCluster", "real", "True", LONG).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "squatter").await.is_empty());
    assert!(jobs_of(&client, &ns, "orphan").await.is_empty());
    let squatter = get_json(&client, &ns, TC, "TerraformCluster", "squatter").await;
    assert_ne!(
        squatter["status"]["initialization"]["provisioned"], true,
        "{squatter:#}"
    );
    // The Cluster carries nothing the squatter would have written (its endpoint stays the real
    // TerraformCluster's business; no CAPTF annotation).
    let owner = get_json(&client, &ns, "cluster.x-k8s.io/v1beta2", "Cluster", "real").await;
    let annotations = owner["metadata"]["annotations"].to_string();
    assert!(!annotations.contains("captf.io"), "{owner:#}");

    delete(&client, &ns, TC, "TerraformCluster", "squatter").await;
    if get_json_opt(&client, &ns, TC, "TerraformCluster", "orphan")
        .await
        .is_some()
    {
        let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
        let _ = tcs
            .delete("orphan", &kube::api::DeleteParams::default())
            .await;
    }
    eventually(LONG, "both are gone", || async {
        let a = get_json_opt(&client, &ns, TC, "TerraformCluster", "squatter").await;
        let b = get_json_opt(&client, &ns, TC, "TerraformCluster", "orphan").await;
        (a.is_none() && b.is_none()).then_some(())
    })
    .await;
    no_planted_value(&client, &ns, &squatter, "planted-owners-1").await;
    mgr.stop().await;
}

/// Size limits (book l.798): a rendered root over 1,000,000 bytes is
/// `ApplyJobSucceeded=False/InputsTooLarge` and starts no Job; once the variable shrinks the
/// cluster applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_over_the_size_limit_start_no_job_until_they_shrink() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("toolarge").await;
    let image = slow_image(env).await;
    let mgr = start_manager(&client, &ns, &images, "manager-toolarge");
    let big = "x".repeat(1_000_001);
    cluster_with_spec(
        &client,
        &ns,
        "big",
        "id-toolarge",
        &image,
        json!({"variables": {"token": big}}),
    )
    .await;
    let tc = cluster_reads(
        &client,
        &ns,
        "big",
        "ApplyJobSucceeded",
        "False",
        "InputsTooLarge",
    )
    .await;
    let message = condition_message(&tc, "ApplyJobSucceeded");
    assert!(message.contains("1000000"), "{message}");
    assert!(
        message.len() < 1000,
        "the message holds no input: {message}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "big").await.is_empty());

    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha1",
            "TerraformCluster",
        )),
    );
    api.patch(
        "big",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"variables": {"token": "small"}}})),
    )
    .await
    .unwrap();
    let tc = wait_ready(&client, &ns, "TerraformCluster", "big", "True", LONG).await;
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "big").await, "apply").len(),
        1
    );
    no_planted_value(&client, &ns, &tc, "planted-toolarge-1").await;
    mgr.stop().await;
}

/// A `variablesFrom` source, labelled `captf.io/variables=true`.
fn variables_secret(name: &str, data: &Value, labelled: bool) -> Secret {
    let labels = if labelled {
        json!({"captf.io/variables": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "stringData": data}),
    )
    .unwrap()
}

async fn put_secret(client: &kube::Client, ns: &str, secret: &Secret) {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let name = secret.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("failures-test").force(),
        &Patch::Apply(secret),
    )
    .await
    .unwrap();
}

/// Module Variables "Confirm" and "Troubleshooting": a required source that does not exist, or
/// exists without the label, holds the cluster at `DependenciesReady=False/VariablesSourceNotFound`
/// with no Job; once it is labelled the cluster applies with its value (a Secret's value is never
/// shown). A source deleted after the first apply holds the cluster again, with no Job, while the
/// infrastructure stays provisioned; the cluster is still deleted, its destroy running from the
/// durable inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_variables_source_holds_the_cluster_and_its_deletion_still_destroys() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("varsource").await;
    let image = slow_image(env).await;
    let mgr = start_manager(&client, &ns, &images, "manager-varsource");
    cluster_with_spec(
        &client,
        &ns,
        "vars",
        "id-varsource",
        &image,
        json!({"variablesFrom": [{"secretRef": {"name": "team"}}]}),
    )
    .await;
    let tc = cluster_reads(
        &client,
        &ns,
        "vars",
        "DependenciesReady",
        "False",
        "VariablesSourceNotFound",
    )
    .await;
    let message = condition_message(&tc, "DependenciesReady");
    assert!(message.contains("Secret team"), "{message}");
    assert!(message.contains("does not exist"), "{message}");

    let planted = "planted-varsource-token-2";
    put_secret(
        &client,
        &ns,
        &variables_secret("team", &json!({"token": planted}), false),
    )
    .await;
    let tc = eventually(LONG, "the message names the missing label", || async {
        let tc = get_json(&client, &ns, TC, "TerraformCluster", "vars").await;
        condition_message(&tc, "DependenciesReady")
            .contains("lacks the label captf.io/variables=true")
            .then_some(tc)
    })
    .await;
    assert_eq!(
        condition(&tc, "DependenciesReady").unwrap().1,
        "VariablesSourceNotFound"
    );
    assert!(jobs_of(&client, &ns, "vars").await.is_empty());

    put_secret(
        &client,
        &ns,
        &variables_secret("team", &json!({"token": planted}), true),
    )
    .await;
    let tc = wait_ready(&client, &ns, "TerraformCluster", "vars", "True", LONG).await;
    assert_eq!(condition(&tc, "DependenciesReady").unwrap().0, "True");
    // The module hashed the token it was given: the variable reached it.
    let state = state_document(&client, &ns, contract::names::ObjectKind::Cluster, "vars").await;
    assert!(
        state.to_string().contains(&sha256_hex(planted)),
        "{state:#}"
    );

    // A retry of the first apply (a failed attempt on a loaded machine) is not what this test is
    // about: no Job may start once the source is gone.
    let applied = jobs_of(&client, &ns, "vars").await;
    let applied = op_jobs(&applied, "apply").len();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .delete("team", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let tc = cluster_reads(
        &client,
        &ns,
        "vars",
        "DependenciesReady",
        "False",
        "VariablesSourceNotFound",
    )
    .await;
    assert_eq!(
        tc["status"]["initialization"]["provisioned"], true,
        "{tc:#}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let jobs = jobs_of(&client, &ns, "vars").await;
    assert_eq!(
        op_jobs(&jobs, "apply").len(),
        applied,
        "{}",
        job_summary(&jobs)
    );

    delete(&client, &ns, TC, "TerraformCluster", "vars").await;
    eventually(LONG, "the cluster is gone", || async {
        let tc = get_json_opt(&client, &ns, TC, "TerraformCluster", "vars").await;
        tc.is_none().then_some(())
    })
    .await;
    let destroyed = metric_sum(
        &mgr.metrics.encode(),
        "captf_jobs_total",
        &["op=\"destroy\"", "result=\"succeeded\""],
    );
    assert_eq!(destroyed, 1, "the destroy ran from the durable inputs");
    no_planted_value(&client, &ns, &tc, "planted-varsource-1").await;
    no_planted_value(&client, &ns, &tc, planted).await;
    mgr.stop().await;
}

/// Module Variables "Merge order and formats": a `JSON` source whose value is not JSON holds the
/// cluster at `DependenciesReady=False/VariablesInvalid`, naming the source and the key, never the
/// value; so does a key that is not a variable name (`captf_` is reserved). No Job runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variables_source_that_cannot_be_read_is_variables_invalid() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("varinvalid").await;
    let image = slow_image(env).await;
    let mgr = start_manager(&client, &ns, &images, "manager-varinvalid");
    let planted = "planted-varinvalid-not-json-2";
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "shapes", "labels": {"captf.io/variables": "true"}},
        "data": {"token": format!("{{{planted}")}
    }))
    .unwrap();
    cms.create(&kube::api::PostParams::default(), &cm)
        .await
        .unwrap();
    put_secret(
        &client,
        &ns,
        &variables_secret("reserved", &json!({"captf_token": "x"}), true),
    )
    .await;
    cluster_with_spec(
        &client,
        &ns,
        "json",
        "id-varinvalid",
        &image,
        json!({"variablesFrom": [{"configMapRef": {"name": "shapes"}, "format": "JSON"}]}),
    )
    .await;
    cluster_with_spec(
        &client,
        &ns,
        "names",
        "id-varinvalid",
        &image,
        json!({"variablesFrom": [{"secretRef": {"name": "reserved"}}]}),
    )
    .await;
    let json_tc = cluster_reads(
        &client,
        &ns,
        "json",
        "DependenciesReady",
        "False",
        "VariablesInvalid",
    )
    .await;
    let message = condition_message(&json_tc, "DependenciesReady");
    assert!(message.contains("shapes"), "{message}");
    assert!(message.contains("token"), "{message}");
    assert!(!message.contains(planted), "{message}");
    let names_tc = cluster_reads(
        &client,
        &ns,
        "names",
        "DependenciesReady",
        "False",
        "VariablesInvalid",
    )
    .await;
    let message = condition_message(&names_tc, "DependenciesReady");
    assert!(message.contains("captf_token"), "{message}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "json").await.is_empty());
    assert!(jobs_of(&client, &ns, "names").await.is_empty());
    no_planted_value(&client, &ns, &json_tc, planted).await;
    no_planted_value(&client, &ns, &names_tc, "planted-varinvalid-1").await;
    mgr.stop().await;
}

/// Job Policy "activeDeadlineSeconds" (book l.1818): an apply that outlives its deadline is
/// stopped by Kubernetes and reads `ApplyJobSucceeded=False/JobDeadlineExceeded`, with the
/// `JobDeadlineExceeded` Warning event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_past_its_deadline_is_job_deadline_exceeded() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("deadline").await;
    let image = slow_image(env).await;
    let mgr = start_manager(&client, &ns, &images, "manager-deadline");
    cluster_with_spec(
        &client,
        &ns,
        "slow",
        "id-deadline",
        &image,
        json!({"variables": {"sleep_seconds": 600},
               "jobs": {"activeDeadlineSeconds": 25, "lockTimeoutSeconds": 5}}),
    )
    .await;
    let tc = cluster_reads(
        &client,
        &ns,
        "slow",
        "ApplyJobSucceeded",
        "False",
        "JobDeadlineExceeded",
    )
    .await;
    let message = condition_message(&tc, "ApplyJobSucceeded");
    assert!(message.contains("activeDeadlineSeconds"), "{message}");
    assert_eq!(condition(&tc, "Ready").unwrap().0, "False");
    // The pass writes the status first and its events after it: the condition can be read a
    // moment before the Warning event exists.
    eventually(LONG, "the JobDeadlineExceeded event", || async {
        events_json(&client, &ns)
            .await
            .contains("JobDeadlineExceeded")
            .then_some(())
    })
    .await;
    let jobs = op_jobs(&jobs_of(&client, &ns, "slow").await, "apply");
    assert_eq!(jobs.len(), 1);
    let failed = jobs[0]
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "Failed"
                && c.status == "True"
                && c.reason.as_deref() == Some("DeadlineExceeded")
        });
    assert!(failed, "{:?}", jobs[0].status);
    no_planted_value(&client, &ns, &tc, "planted-deadline-1").await;
    mgr.stop().await;
}

/// Image Contract "Fixed paths": an image without `/captf/module` fails its first run before
/// any command, as `ApplyJobSucceeded=False/ImageInvalid`, naming the missing path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_a_module_is_image_invalid() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("layout").await;
    let image = moduleless_image(env).await;
    let mgr = start_manager(&client, &ns, &images, "manager-layout");
    cluster(&client, &ns, "empty", "id-layout", &image).await;
    let tc = cluster_reads(
        &client,
        &ns,
        "empty",
        "ApplyJobSucceeded",
        "False",
        "ImageInvalid",
    )
    .await;
    assert_eq!(
        tc["status"]["lastRun"]["error"]["kind"], "image-layout",
        "{tc:#}"
    );
    let error = tc["status"]["lastRun"]["error"]["summary"].to_string();
    assert!(error.contains("/captf/module"), "{tc:#}");
    no_planted_value(&client, &ns, &tc, "planted-layout-1").await;
    mgr.stop().await;
}

/// Job Policy "env" and "securityContext": a reserved `spec.jobs.env` entry (`TF_LOG`) is left
/// out of the Job with a `JobEnvDropped` Warning while the others reach the module container;
/// `spec.jobs.securityContext` is merged field by field over the defaults (no privilege
/// escalation, every capability dropped, read-only root filesystem), and the Job runs with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_env_is_dropped_and_the_security_context_is_merged() {
    let Fx {
        env: _,
        images,
        client,
        ns,
    } = fixture_with_identity("jobpolicy").await;
    let mgr = start_manager(&client, &ns, &images, "manager-jobpolicy");
    cluster_with_spec(
        &client,
        &ns,
        "policy",
        "id-jobpolicy",
        &images.cluster,
        json!({"jobs": {
            "env": [{"name": "TF_LOG", "value": "TRACE"}, {"name": "TEAM", "value": "blue"}],
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532}}}),
    )
    .await;
    let tc = wait_ready(&client, &ns, "TerraformCluster", "policy", "True", LONG).await;
    let jobs = op_jobs(&jobs_of(&client, &ns, "policy").await, "apply");
    assert_eq!(jobs.len(), 1);
    let pod = jobs[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let main = pod
        .containers
        .iter()
        .find(|c| c.name != "captf-runner-copy")
        .unwrap();
    let env_names: Vec<&str> = main.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(env_names.contains(&"TEAM"), "{env_names:?}");
    assert!(!env_names.contains(&"TF_LOG"), "{env_names:?}");
    let sc = main.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_user, Some(65532));
    assert_eq!(sc.run_as_group, Some(65532));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_owned()][..])
    );
    let events = eventually(LONG, "JobEnvDropped", || async {
        let e = events_json(&client, &ns).await;
        e.contains("JobEnvDropped").then_some(e)
    })
    .await;
    assert!(events.contains("spec.jobs.env entry TF_LOG"), "{events}");
    no_planted_value(&client, &ns, &tc, "planted-jobpolicy-1").await;
    mgr.stop().await;
}

/// Terraform State "OpenTofu state encryption" (book l.862): a state a real `tofu` wrote with
/// client-side encryption (pbkdf2 key, AES-GCM) through the `kubernetes` backend, under the
/// object's state suffix, is `StateReadable=False/StateEncrypted`, not corrupt: no Job runs over
/// it, the state Secret is left exactly as it was, and the passphrase shows nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_encrypted_by_opentofu_is_state_encrypted_and_left_alone() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("encrypted").await;
    let passphrase = "planted-encryption-passphrase-2";
    let suffix = contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, "sealed");
    let kubeconfig = env.endpoints().kubeconfig.clone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("main.tf"),
        format!(
            r#"
terraform {{
  backend "kubernetes" {{
    secret_suffix = "{suffix}"
    namespace     = "{ns}"
    config_path   = "{kubeconfig}"
  }}
  encryption {{
    key_provider "pbkdf2" "team" {{
      passphrase = "{passphrase}"
    }}
    method "aes_gcm" "team" {{
      keys = key_provider.pbkdf2.team
    }}
    state {{
      method = method.aes_gcm.team
    }}
  }}
}}

resource "terraform_data" "sealed" {{
  input = "sealed"
}}

output "endpoint" {{
  value = {{ host = "10.0.0.1", port = 6443 }}
}}
"#,
            kubeconfig = kubeconfig.display()
        ),
    )
    .unwrap();
    let tofu = testenv::testbin::path("tofu").unwrap();
    for args in [
        &["init", "-input=false", "-no-color"][..],
        &["apply", "-input=false", "-no-color", "-auto-approve"][..],
    ] {
        let out = tokio::process::Command::new(&tofu)
            .args(args)
            .current_dir(dir.path())
            .env_remove("TF_CLI_CONFIG_FILE")
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "tofu {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let state_name = format!("tfstate-default-{suffix}");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let before = secrets.get(&state_name).await.unwrap();
    assert!(
        state_of(&before).is_some_and(|d| d.get("encrypted_data").is_some()),
        "tofu wrote an encrypted state"
    );

    let mgr = start_manager(&client, &ns, &images, "manager-encrypted");
    cluster(&client, &ns, "sealed", "id-encrypted", &images.cluster).await;
    let tc = cluster_reads(
        &client,
        &ns,
        "sealed",
        "StateReadable",
        "False",
        "StateEncrypted",
    )
    .await;
    let message = condition_message(&tc, "StateReadable");
    assert!(message.to_lowercase().contains("encrypt"), "{message}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "sealed").await.is_empty());
    let after = secrets.get(&state_name).await.unwrap();
    assert_eq!(
        before.metadata.resource_version, after.metadata.resource_version,
        "the encrypted state is left as tofu wrote it"
    );
    assert_ne!(
        tc["status"]["initialization"]["provisioned"], true,
        "{tc:#}"
    );
    no_planted_value(&client, &ns, &tc, passphrase).await;
    no_planted_value(&client, &ns, &tc, "planted-encrypted-1").await;
    mgr.stop().await;
}

async fn set_allowed(client: &kube::Client, identity: &str, allowed: &[&str]) {
    let api: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha1",
            "TerraformClusterIdentity",
        )),
    );
    api.patch(
        identity,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"allowedNamespaces": {"list": allowed}}})),
    )
    .await
    .unwrap();
}

/// Identities and Credentials "Revoke access" (book l.1107): dropping the namespace from the
/// identity's `allowedNamespaces` reconciles its objects at once: `IdentityAllowed=False`, the
/// mirror Secret in the namespace is deleted, the infrastructure is left alone (still
/// provisioned), and a deletion waits, saying why, with no destroy Job, until access is
/// restored; then the destroy runs and the object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_identity_deletes_the_mirror_and_holds_the_destroy_until_restored() {
    let Fx {
        env: _,
        images,
        client,
        ns,
    } = fixture_with_identity("revoked").await;
    let mgr = start_manager(&client, &ns, &images, "manager-revoked");
    cluster(&client, &ns, "held", "id-revoked", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "held", "True", LONG).await;
    let mirror = contract::names::credential_mirror_secret_name("id-revoked");
    assert!(
        get_json_opt(&client, &ns, "v1", "Secret", &mirror)
            .await
            .is_some()
    );

    set_allowed(&client, "id-revoked", &["somewhere-else"]).await;
    let tc = cluster_reads(
        &client,
        &ns,
        "held",
        "IdentityAllowed",
        "False",
        "NamespaceNotAllowed",
    )
    .await;
    assert_eq!(
        tc["status"]["initialization"]["provisioned"], true,
        "{tc:#}"
    );
    eventually(LONG, "the mirror Secret is deleted", || async {
        get_json_opt(&client, &ns, "v1", "Secret", &mirror)
            .await
            .is_none()
            .then_some(())
    })
    .await;

    delete(&client, &ns, TC, "TerraformCluster", "held").await;
    let tc = cluster_until(
        &client,
        &ns,
        "held",
        "the deletion says it waits for the identity",
        |tc| {
            tc["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("destroy") && m.contains("identity"))
                })
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        get_json_opt(&client, &ns, TC, "TerraformCluster", "held")
            .await
            .is_some()
    );
    assert!(op_jobs(&jobs_of(&client, &ns, "held").await, "destroy").is_empty());
    assert!(
        get_json_opt(&client, &ns, "v1", "Secret", &mirror)
            .await
            .is_none()
    );

    set_allowed(&client, "id-revoked", &[ns.as_str()]).await;
    eventually(LONG, "the cluster is destroyed and gone", || async {
        get_json_opt(&client, &ns, TC, "TerraformCluster", "held")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let destroyed = metric_sum(
        &mgr.metrics.encode(),
        "captf_jobs_total",
        &["op=\"destroy\"", "result=\"succeeded\""],
    );
    assert_eq!(destroyed, 1);
    no_planted_value(&client, &ns, &tc, "planted-revoked-1").await;
    mgr.stop().await;
}

/// Job Policy "serviceAccountName" and RBAC (book l.1836): a runner ServiceAccount override
/// without the `captf.io/runner=true` label is `RunnerRBACReady=False/ServiceAccountNotOptedIn`
/// and creates no Job until it is labelled; a `captf-runner` RoleBinding CAPTF does not manage is
/// `RunnerRBACReady=False/RBACFailed`, left untouched, and no Job runs until it is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_account_must_opt_in_and_an_unmanaged_binding_is_rbac_failed() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let Fx {
        env: _,
        images,
        client,
        ns,
    } = fixture_with_identity("runnersa").await;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    let foreign: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "captf-runner"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "someone", "namespace": ns}]
    }))
    .unwrap();
    let foreign = bindings
        .create(&kube::api::PostParams::default(), &foreign)
        .await
        .unwrap();
    let mgr = start_manager(&client, &ns, &images, "manager-runnersa");
    cluster(&client, &ns, "bound", "id-runnersa", &images.cluster).await;
    let tc = cluster_reads(
        &client,
        &ns,
        "bound",
        "RunnerRBACReady",
        "False",
        "RBACFailed",
    )
    .await;
    let message = condition_message(&tc, "RunnerRBACReady");
    assert!(message.contains("captf-runner"), "{message}");
    assert!(message.contains("not managed by CAPTF"), "{message}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "bound").await.is_empty());
    let still = bindings.get("captf-runner").await.unwrap();
    assert_eq!(
        still.metadata.resource_version, foreign.metadata.resource_version,
        "the foreign binding is left untouched"
    );
    bindings
        .delete("captf-runner", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    cluster_until(&client, &ns, "bound", "Ready=True", |tc| {
        condition(tc, "Ready").is_some_and(|c| c.0 == "True")
    })
    .await;

    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "deployer"}})).unwrap();
    sas.create(&kube::api::PostParams::default(), &sa)
        .await
        .unwrap();
    cluster_with_spec(
        &client,
        &ns,
        "own-sa",
        "id-runnersa",
        &images.cluster,
        json!({"jobs": {"serviceAccountName": "deployer"}}),
    )
    .await;
    let tc = cluster_reads(
        &client,
        &ns,
        "own-sa",
        "RunnerRBACReady",
        "False",
        "ServiceAccountNotOptedIn",
    )
    .await;
    let message = condition_message(&tc, "RunnerRBACReady");
    assert!(message.contains("deployer"), "{message}");
    assert!(message.contains("captf.io/runner=true"), "{message}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(jobs_of(&client, &ns, "own-sa").await.is_empty());
    sas.patch(
        "deployer",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"captf.io/runner": "true"}}})),
    )
    .await
    .unwrap();
    let tc = wait_ready(&client, &ns, "TerraformCluster", "own-sa", "True", LONG).await;
    let jobs = op_jobs(&jobs_of(&client, &ns, "own-sa").await, "apply");
    let pod = jobs[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("deployer"));
    let binding = bindings.get("captf-runner").await.unwrap();
    let subjects: Vec<String> = binding
        .subjects
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(subjects.contains(&"deployer".to_owned()), "{subjects:?}");
    no_planted_value(&client, &ns, &tc, "planted-runnersa-1").await;
    mgr.stop().await;
}

/// The stuck destroy runbook (docs/src/runbooks/stuck-destroy.md), step by step: the signs (the
/// object stays with its finalizer, `ApplyJobSucceeded=False/DestroyFailed`, a `JobFailed`
/// Warning naming the destroy Job); step 1 reads why from `status.lastRun` and the destroy Job's
/// `source` container log; step 3 saves the state and the durable inputs Secret by the names the
/// runbook gives, removes the finalizer with its patch, and the object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stuck_destroy_runbook_step_by_step() {
    let Fx {
        env,
        images,
        client,
        ns,
    } = fixture_with_identity("stuckdestroy").await;
    let image = undestroyable_image(env).await;
    let mgr = start_manager(&client, &ns, &images, "manager-stuckdestroy");
    cluster_with_spec(
        &client,
        &ns,
        "guarded",
        "id-stuckdestroy",
        &image,
        json!({"variables": {"protected": true}}),
    )
    .await;
    wait_ready(&client, &ns, "TerraformCluster", "guarded", "True", LONG).await;
    delete(&client, &ns, TC, "TerraformCluster", "guarded").await;

    // Signs.
    let tc = cluster_reads(
        &client,
        &ns,
        "guarded",
        "ApplyJobSucceeded",
        "False",
        "DestroyFailed",
    )
    .await;
    assert_eq!(
        tc["metadata"]["finalizers"],
        json!(["terraformcluster.infrastructure.cluster.x-k8s.io"])
    );
    let destroy = op_jobs(&jobs_of(&client, &ns, "guarded").await, "destroy");
    let job = destroy[0].metadata.name.clone().unwrap();
    let events = eventually(LONG, "the JobFailed event", || async {
        let e = events_json(&client, &ns).await;
        (e.contains("JobFailed") && e.contains(&job)).then_some(e)
    })
    .await;
    assert!(events.contains("Destroy Job"), "{events}");

    // Step 1: why, from status.lastRun and the destroy Job's `source` log.
    assert_eq!(tc["status"]["lastRun"]["operation"], "destroy", "{tc:#}");
    assert_eq!(tc["status"]["lastRun"]["error"]["kind"], "step", "{tc:#}");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods
        .list(&kube::api::ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
        .remove(0);
    let log = env
        .kubelet()
        .unwrap()
        .logs(&ns, pod.metadata.name.as_deref().unwrap(), "source");
    assert!(log.contains("deletion protection is on"), "{log}");

    // Step 3.1: save the state and the inputs, by the runbook's selector and name.
    let suffix = tc["status"]["stateSecretSuffix"]
        .as_str()
        .unwrap()
        .to_owned();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let state = secrets
        .list(&kube::api::ListParams::default().labels(&format!("tfstateSecretSuffix={suffix}")))
        .await
        .unwrap()
        .items;
    assert!(!state.is_empty());
    assert!(
        state
            .iter()
            .all(|s| state_of(s).is_some() || s.data.is_some())
    );
    let inputs = secrets.get("captf-inputs-c-guarded").await.unwrap();
    assert!(inputs.data.as_ref().is_some_and(|d| !d.is_empty()));

    // Step 3.3: remove the finalizer with the runbook's JSON patch; step 3.4: the object goes.
    let request = http::Request::patch(format!(
        "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/{ns}/terraformclusters/guarded"
    ))
    .header("Content-Type", "application/json-patch+json")
    .body(serde_json::to_vec(&json!([{"op": "remove", "path": "/metadata/finalizers"}])).unwrap())
    .unwrap();
    let _: Value = client.request(request).await.unwrap();
    eventually(LONG, "the cluster is gone", || async {
        get_json_opt(&client, &ns, TC, "TerraformCluster", "guarded")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // The manager takes the object's going in its stride: no destroy succeeded, nothing panicked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        metric_sum(
            &mgr.metrics.encode(),
            "captf_jobs_total",
            &["op=\"destroy\"", "result=\"succeeded\""],
        ),
        0
    );
    no_planted_value(&client, &ns, &tc, "planted-stuckdestroy-1").await;
    mgr.stop().await;
}

/// Job Policy "activeDeadlineSeconds" for drift (book l.1818): a drift Job that outlives its
/// deadline reads `DriftJobSucceeded=False/DriftJobDeadlineExceeded`, with the
/// `JobDeadlineExceeded` Warning, and the object stays Ready (drift results never feed Ready).
/// The deadline is lowered after the first apply: Job fields are not module inputs, so no
/// re-apply follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_check_past_its_deadline_is_drift_job_deadline_exceeded() {
    let Fx {
        env: _,
        images,
        client,
        ns,
    } = fixture_with_identity("driftdeadline").await;
    let mgr = start_manager(&client, &ns, &images, "manager-driftdeadline");
    cluster(&client, &ns, "hurried", "id-driftdeadline", &images.cluster).await;
    wait_ready(&client, &ns, "TerraformCluster", "hurried", "True", LONG).await;
    let tcs: Api<api::cluster::TerraformCluster> = Api::namespaced(client.clone(), &ns);
    tcs.patch(
        "hurried",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "jobs": {"activeDeadlineSeconds": 1, "lockTimeoutSeconds": 0},
            "drift": {"intervalSeconds": 5}}})),
    )
    .await
    .unwrap();
    let tc = cluster_reads(
        &client,
        &ns,
        "hurried",
        "DriftJobSucceeded",
        "False",
        "DriftJobDeadlineExceeded",
    )
    .await;
    assert_eq!(condition(&tc, "Ready").unwrap().0, "True", "{tc:#}");
    let message = condition_message(&tc, "DriftJobSucceeded");
    assert!(message.contains("activeDeadlineSeconds"), "{message}");
    assert!(
        events_json(&client, &ns)
            .await
            .contains("JobDeadlineExceeded")
    );
    assert_eq!(
        op_jobs(&jobs_of(&client, &ns, "hurried").await, "apply").len(),
        1,
        "no re-apply for a Job field"
    );
    no_planted_value(&client, &ns, &tc, "planted-driftdeadline-1").await;
    mgr.stop().await;
}
