//! The webhook against the real control plane of the test environment: it runs in-process with a
//! test CA, is registered through a url-based ValidatingWebhookConfiguration, and real creates,
//! updates and deletes are accepted or rejected by the API server for each rule, including the
//! SubjectAccessReview path (impersonated users who can and cannot read the Secret) and the
//! TerraformMachine delete guard with a real owning Machine.
//!
//! Some rules are also part of the CRD schema (CEL and bounds), which the API server applies
//! before any validating webhook; for those the test asserts the rejection and names the layer.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::capi::{
    Bootstrap, Cluster, ClusterSpec, ContractVersionedObjectReference, Machine, MachineSpec,
};
use api::identity::TerraformClusterIdentity;
use api::{
    TerraformCluster, TerraformMachine, TerraformMachinePool, cluster::TerraformClusterTemplate,
    machine::TerraformMachineTemplate, machinepool::TerraformMachinePoolTemplate,
};
use common::{pki::TestCa, with};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use testenv::TestEnv;
use webhook::cli::{Listen, TlsVersion};
use webhook::fake::StaticLookups;
use webhook::kinds::Kind;
use webhook::lookups::KubeLookups;
use webhook::metrics::Metrics;
use webhook::server::{self, DiagnosticsAuth, Listeners, Settings};

const WEBHOOK_CONFIG: &str = "captf-webhook-integration";

struct Harness {
    health: SocketAddr,
    diagnostics: SocketAddr,
}

static HARNESS: OnceLock<Result<Harness, String>> = OnceLock::new();

fn install_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The webhook shared by every test of this binary: started on its own thread and runtime (a
/// test's runtime ends with the test), registered with the API server, and effective.
fn harness() -> anyhow::Result<&'static Harness> {
    HARNESS
        .get_or_init(|| start_harness().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("the webhook harness failed to start: {e}"))
}

fn start_harness() -> anyhow::Result<Harness> {
    install_ring();
    let env = TestEnv::shared()?;
    let (tx, rx) = mpsc::channel::<anyhow::Result<Harness>>();
    std::thread::Builder::new()
        .name("captf-webhook".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e.into()));
                    return;
                }
            };
            rt.block_on(async move {
                let started = async {
                    let dir = tempfile::tempdir()?;
                    let ca = TestCa::new("captf-webhook-test-ca");
                    ca.write_serving_pair(dir.path());
                    let loopback = |p| SocketAddr::from((Ipv4Addr::LOCALHOST, p));
                    let listeners = Listeners::bind(
                        loopback(0),
                        Listen::At(loopback(0)),
                        Listen::At(loopback(0)),
                    )?;
                    let port = listeners.webhook_addr()?.port();
                    let health = listeners.health_addr().context("a health address")?;
                    let diagnostics = listeners
                        .diagnostics_addr()
                        .context("a diagnostics address")?;
                    let client = env.client().await?;
                    let settings = Settings {
                        cert_path: dir.path().join("tls.crt"),
                        key_path: dir.path().join("tls.key"),
                        tls_min_version: TlsVersion::Tls12,
                        tls_cipher_suites: Vec::new(),
                        tls_curve_preferences: Vec::new(),
                        reload_interval: Duration::from_secs(1),
                        insecure_diagnostics: true,
                    };
                    let serving = tokio::spawn(server::serve(
                        listeners,
                        settings,
                        KubeLookups::new(client.clone()),
                        DiagnosticsAuth::Open,
                        Metrics::new(),
                        std::future::pending(),
                    ));
                    register(&client, port, &ca.pem).await?;
                    wait_effective(&client).await?;
                    anyhow::Ok((
                        dir,
                        serving,
                        Harness {
                            health,
                            diagnostics,
                        },
                    ))
                };
                match started.await {
                    Ok((dir, serving, harness)) => {
                        let _ = tx.send(Ok(harness));
                        let _keep = dir;
                        let result = serving.await;
                        eprintln!("the integration webhook stopped: {result:?}");
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        })?;
    rx.recv().context("the webhook thread died")?
}

fn webhook_entry(kind: Kind, port: u16, ca_pem: &str) -> ValidatingWebhook {
    let mut operations = vec!["CREATE".to_owned(), "UPDATE".to_owned()];
    if kind.validates_delete() {
        operations.push("DELETE".to_owned());
    }
    ValidatingWebhook {
        name: format!(
            "validation.{}.{}",
            kind.name().to_ascii_lowercase(),
            api::GROUP
        ),
        admission_review_versions: vec!["v1".into()],
        side_effects: "None".into(),
        failure_policy: Some("Fail".into()),
        match_policy: Some("Equivalent".into()),
        timeout_seconds: Some(10),
        client_config: WebhookClientConfig {
            url: Some(format!("https://127.0.0.1:{port}{}", kind.path())),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: None,
        },
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec![api::GROUP.into()]),
            api_versions: Some(vec![api::VERSION.into()]),
            resources: Some(vec![kind.plural().into()]),
            operations: Some(operations),
            scope: Some(
                if kind == Kind::ClusterIdentity {
                    "Cluster"
                } else {
                    "Namespaced"
                }
                .into(),
            ),
        }]),
        ..ValidatingWebhook::default()
    }
}

async fn register(client: &Client, port: u16, ca_pem: &str) -> anyhow::Result<()> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut config = ValidatingWebhookConfiguration {
        webhooks: Some(
            Kind::ALL
                .iter()
                .map(|k| webhook_entry(*k, port, ca_pem))
                .collect(),
        ),
        ..ValidatingWebhookConfiguration::default()
    };
    config.metadata.name = Some(WEBHOOK_CONFIG.into());
    api.patch(
        WEBHOOK_CONFIG,
        &PatchParams::apply("captf-webhook-test").force(),
        &Patch::Apply(&config),
    )
    .await
    .context("registering the webhook")?;
    Ok(())
}

/// Waits until the API server calls the webhook (its configuration cache catches up).
async fn wait_effective(client: &Client) -> anyhow::Result<()> {
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), "default");
    let probe: TerraformCluster = serde_json::from_value(with(
        common::cluster("probe", "default"),
        "/spec/source/image",
        json!("Not-A-Reference"),
    ))?;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    loop {
        match api.create(&dry, &probe).await {
            Err(kube::Error::Api(s)) if s.message.contains("is not a valid image reference") => {
                return Ok(());
            }
            other => {
                if started.elapsed() > Duration::from_secs(60) {
                    anyhow::bail!("the webhook never became effective (last answer: {other:?})");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn setup(prefix: &str) -> anyhow::Result<(&'static Harness, Client, String)> {
    let harness = harness()?;
    let env = TestEnv::shared()?;
    let client = env.client().await?;
    let ns = env.namespace(prefix).await?;
    Ok((harness, client, ns))
}

/// The API server's refusal message; fails when the request was accepted.
fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A refusal by this webhook, returning our message.
fn denied_by_webhook<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    let message = refused(result);
    let (_, ours) = message
        .split_once("denied the request: ")
        .unwrap_or_else(|| panic!("not refused by the webhook: {message}"));
    ours.to_owned()
}

async fn create<K>(client: &Client, ns: &str, object: Value) -> Result<K, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let obj: K = serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
    api.create(&PostParams::default(), &obj).await
}

async fn merge<K>(
    client: &Client,
    ns: &str,
    name: &str,
    patch: Value,
    dry_run: bool,
) -> Result<K, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let params = PatchParams {
        dry_run,
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch)).await
}

#[tokio::test]
async fn the_image_reference_is_checked_by_the_api_server() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-image").await?;
    let bad = with(
        common::cluster("c1", &ns),
        "/spec/source/image",
        json!("ghcr.io/Example/module:v1"),
    );
    assert_eq!(
        denied_by_webhook(create::<TerraformCluster>(&client, &ns, bad).await),
        "spec.source.image \"ghcr.io/Example/module:v1\" is not a valid image reference: the repository path component \"Example\" must be lowercase letters and digits, joined by '.', '_', '__' or dashes"
    );
    // Without a tag or a digest the reference is valid syntax: admitted, and the API server
    // hands the webhook's warning to the client in a Warning header.
    let bare = with(
        common::cluster("c0", &ns),
        "/spec/source/image",
        json!("ghcr.io/example/module"),
    );
    let request = http::Request::post(format!(
        "/apis/{}/{}/namespaces/{ns}/terraformclusters",
        api::GROUP,
        api::VERSION
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&bare)?)?;
    let response = client.send(request.map(kube::client::Body::from)).await?;
    assert!(response.status().is_success(), "{}", response.status());
    let warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("299 ") && w.contains("names neither a tag nor a digest")),
        "{warnings:?}"
    );
    let digest = format!("ghcr.io/example/module@sha256:{}", "a".repeat(64));
    create::<TerraformCluster>(
        &client,
        &ns,
        with(
            common::cluster("c1", &ns),
            "/spec/source/image",
            json!(digest),
        ),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_machine_keeps_its_definition_and_changes_its_policy() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-machine").await?;
    create::<TerraformMachine>(&client, &ns, common::machine("m1", &ns)).await?;
    let m = |patch| merge::<TerraformMachine>(&client, &ns, "m1", patch, false);
    assert_eq!(
        denied_by_webhook(
            m(json!({"spec": {"source": {"image": "ghcr.io/example/module:v2"}}})).await
        ),
        "spec.source is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it"
    );
    assert_eq!(
        denied_by_webhook(m(json!({"spec": {"identityRef": {"name": "aws"}}})).await),
        "spec.identityRef (including from unset to a value) is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it"
    );
    assert!(
        denied_by_webhook(m(json!({"spec": {"variables": {"size": "l"}}})).await)
            .starts_with("spec.variables is immutable")
    );
    assert!(
        denied_by_webhook(
            m(json!({"spec": {"variablesFrom": [{"configMapRef": {"name": "v"}}]}})).await
        )
        .starts_with("spec.variablesFrom is immutable")
    );
    m(json!({"spec": {"jobs": {"activeDeadlineSeconds": 7200}, "drift": {"intervalSeconds": 0},
        "remediation": {"annotateMachine": true}}, "metadata": {"labels": {"tier": "gold"}, "annotations": {"a": "b"}}}))
    .await?;
    // Only the manager's ServiceAccount writes spec.providerID the first time.
    assert!(
        denied_by_webhook(m(json!({"spec": {"providerID": "aws:///us-east-1a/i-1"}})).await)
            .starts_with(
                "spec.providerID may only be set by the CAPTF manager (system:serviceaccount:captf-system:captf-controller-manager)"
            )
    );
    // A create may carry one (clusterctl move); it never changes afterwards.
    let mut moved = common::machine("m2", &ns);
    moved["spec"]["providerID"] = json!("aws:///us-east-1a/i-1");
    create::<TerraformMachine>(&client, &ns, moved).await?;
    let m2 = |patch| merge::<TerraformMachine>(&client, &ns, "m2", patch, false);
    assert_eq!(
        denied_by_webhook(m2(json!({"spec": {"providerID": "aws:///us-east-1a/i-2"}})).await),
        "spec.providerID is already set to \"aws:///us-east-1a/i-1\" and cannot change: it only ever moves from empty to a value"
    );
    Ok(())
}

#[tokio::test]
async fn a_cluster_endpoint_is_fixed_once_it_has_a_host() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-endpoint").await?;
    create::<TerraformCluster>(&client, &ns, common::cluster("c1", &ns)).await?;
    let c = |patch| merge::<TerraformCluster>(&client, &ns, "c1", patch, false);
    c(json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}})).await?;
    assert_eq!(
        denied_by_webhook(c(json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.2"}}})).await),
        "spec.controlPlaneEndpoint is immutable once it has a host (it is 10.0.0.1:6443): every Machine and kubeconfig of the cluster points at it"
    );
    c(json!({"spec": {"source": {"image": "ghcr.io/example/module:v2"}, "identityRef": {"name": "gcp"},
        "variables": {"region": "eu"}, "applyPolicy": "Manual"}}))
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_pool_is_mutable_and_its_drift_cannot_be_turned_off() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-pool").await?;
    create::<TerraformMachinePool>(&client, &ns, common::pool("p1", &ns)).await?;
    let p = |patch| merge::<TerraformMachinePool>(&client, &ns, "p1", patch, false);
    p(json!({"spec": {"source": {"image": "ghcr.io/example/pool:v2"}, "identityRef": {"name": "aws"},
        "variables": {"size": 3}, "variablesFrom": [{"secretRef": {"name": "s"}}], "drift": {"intervalSeconds": 60},
        "membershipRefreshIntervalSeconds": 30}}))
    .await?;
    // Both are also bounds of the CRD schema, which rejects them before any webhook runs.
    let zero = refused(p(json!({"spec": {"drift": {"intervalSeconds": 0}}})).await);
    assert!(zero.contains("spec.drift.intervalSeconds"), "{zero}");
    let short = refused(p(json!({"spec": {"membershipRefreshIntervalSeconds": 5}})).await);
    assert!(
        short.contains("spec.membershipRefreshIntervalSeconds"),
        "{short}"
    );
    Ok(())
}

#[tokio::test]
async fn a_template_spec_is_fixed_except_in_a_topology_dry_run() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-template").await?;
    create::<TerraformMachineTemplate>(
        &client,
        &ns,
        common::template(Kind::MachineTemplate, "t1", &ns),
    )
    .await?;
    create::<TerraformClusterTemplate>(
        &client,
        &ns,
        common::template(Kind::ClusterTemplate, "t1", &ns),
    )
    .await?;
    create::<TerraformMachinePoolTemplate>(
        &client,
        &ns,
        common::template(Kind::MachinePoolTemplate, "t1", &ns),
    )
    .await?;
    let spec_change =
        json!({"spec": {"template": {"spec": {"source": {"image": "ghcr.io/example/module:v2"}}}}});
    assert_eq!(
        denied_by_webhook(
            merge::<TerraformMachineTemplate>(&client, &ns, "t1", spec_change.clone(), false).await
        ),
        "spec.template.spec is immutable on a TerraformMachineTemplate: create a new template and point its owner at it (only spec.template.metadata may change)"
    );
    assert!(
        denied_by_webhook(
            merge::<TerraformClusterTemplate>(&client, &ns, "t1", spec_change.clone(), false).await
        )
        .starts_with("spec.template.spec is immutable on a TerraformClusterTemplate")
    );
    assert!(
        denied_by_webhook(
            merge::<TerraformMachinePoolTemplate>(&client, &ns, "t1", spec_change.clone(), false)
                .await
        )
        .starts_with("spec.template.spec is immutable on a TerraformMachinePoolTemplate")
    );
    merge::<TerraformMachineTemplate>(
        &client,
        &ns,
        "t1",
        json!({"spec": {"template": {"metadata": {"labels": {"tier": "gold"}}}}, "metadata": {"labels": {"x": "y"}}}),
        false,
    )
    .await?;
    // What Cluster API's topology controller sends: a dry-run carrying the dry-run annotation.
    let topology = with(
        spec_change.clone(),
        "/metadata/annotations",
        json!({"topology.cluster.x-k8s.io/dry-run": ""}),
    );
    merge::<TerraformMachineTemplate>(&client, &ns, "t1", topology.clone(), true).await?;
    merge::<TerraformClusterTemplate>(&client, &ns, "t1", topology.clone(), true).await?;
    // Either half alone is not a topology dry-run.
    denied_by_webhook(merge::<TerraformMachineTemplate>(&client, &ns, "t1", topology, false).await);
    denied_by_webhook(
        merge::<TerraformMachineTemplate>(&client, &ns, "t1", spec_change, true).await,
    );
    Ok(())
}

#[tokio::test]
async fn variable_names_follow_the_role_of_the_object() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-vars").await?;
    assert_eq!(
        denied_by_webhook(
            create::<TerraformCluster>(
                &client,
                &ns,
                with(
                    common::cluster("c1", &ns),
                    "/spec/variables",
                    json!({"captf_tags": {}})
                )
            )
            .await
        ),
        "spec.variables: key \"captf_tags\" starts with the reserved prefix captf_"
    );
    assert_eq!(
        denied_by_webhook(
            create::<TerraformMachine>(
                &client,
                &ns,
                with(
                    common::machine("m1", &ns),
                    "/spec/variables",
                    json!({"machine_name": "x"})
                )
            )
            .await
        ),
        "spec.variables: key \"machine_name\" is a contract input of the machine role"
    );
    assert_eq!(
        denied_by_webhook(
            create::<TerraformMachinePool>(
                &client,
                &ns,
                with(
                    common::pool("p1", &ns),
                    "/spec/variables",
                    json!({"for_each": []})
                )
            )
            .await
        ),
        "spec.variables: key \"for_each\" is a module meta-argument"
    );
    assert_eq!(
        denied_by_webhook(
            create::<TerraformCluster>(
                &client,
                &ns,
                with(
                    common::cluster("c1", &ns),
                    "/spec/variables",
                    json!({"9lives": 1})
                )
            )
            .await
        ),
        "spec.variables: key \"9lives\" is not a Terraform identifier (^[a-zA-Z_][a-zA-Z0-9_-]*$)"
    );
    create::<TerraformCluster>(
        &client,
        &ns,
        with(
            common::cluster("c1", &ns),
            "/spec/variables",
            json!({"machine_name": "x"}),
        ),
    )
    .await?;
    // Also a CEL rule of the CRD schema, checked before the webhook.
    let both = refused(
        create::<TerraformMachine>(
            &client,
            &ns,
            with(
                common::machine("m2", &ns),
                "/spec/variablesFrom",
                json!([{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]),
            ),
        )
        .await,
    );
    assert!(
        both.contains("exactly one of configMapRef or secretRef"),
        "{both}"
    );
    Ok(())
}

#[tokio::test]
async fn jobs_policies_are_checked_wherever_one_appears() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-jobs").await?;
    assert_eq!(
        denied_by_webhook(
            create::<TerraformCluster>(
                &client,
                &ns,
                with(
                    common::cluster("c1", &ns),
                    "/spec/jobs",
                    json!({"securityContext": {"privileged": true}})
                )
            )
            .await
        ),
        "spec.jobs.securityContext.privileged: true is not allowed: the module container holds the identity's cloud credentials"
    );
    assert_eq!(
        denied_by_webhook(
            create::<TerraformCluster>(
                &client,
                &ns,
                with(
                    common::cluster("c2", &ns),
                    "/spec/defaults",
                    json!({"jobs": {"securityContext": {"allowPrivilegeEscalation": true}}})
                )
            )
            .await
        ),
        "spec.defaults.jobs.securityContext.allowPrivilegeEscalation: true is not allowed: the module container holds the identity's cloud credentials"
    );
    assert_eq!(
        denied_by_webhook(
            create::<TerraformClusterTemplate>(
                &client,
                &ns,
                with(
                    common::template(Kind::ClusterTemplate, "t1", &ns),
                    "/spec/template/spec/jobs",
                    json!({"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}})
                )
            )
            .await
        ),
        "spec.template.spec.jobs.securityContext.capabilities.add: adding capabilities (NET_ADMIN) is not allowed: the module container holds the identity's cloud credentials"
    );
    // A reserved env name is admitted (with an admission warning); the manager drops it.
    create::<TerraformMachine>(
        &client,
        &ns,
        with(
            common::machine("m1", &ns),
            "/spec/jobs",
            json!({"env": [{"name": "TF_LOG", "value": "TRACE"}]}),
        ),
    )
    .await?;
    // Also a CEL rule of the CRD schema, checked before the webhook.
    let lock = refused(
        create::<TerraformMachinePool>(
            &client,
            &ns,
            with(
                common::pool("p1", &ns),
                "/spec/jobs",
                json!({"lockTimeoutSeconds": 600, "activeDeadlineSeconds": 600}),
            ),
        )
        .await,
    );
    assert!(
        lock.contains("lockTimeoutSeconds must be less than activeDeadlineSeconds"),
        "{lock}"
    );
    create::<TerraformMachinePoolTemplate>(
        &client,
        &ns,
        with(
            common::template(Kind::MachinePoolTemplate, "t1", &ns),
            "/spec/template/spec/jobs",
            json!({"securityContext": {"runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}},
                   "env": [{"name": "HTTPS_PROXY", "value": "http://proxy"}], "lockTimeoutSeconds": 60, "activeDeadlineSeconds": 600}),
        ),
    )
    .await?;
    Ok(())
}

/// A client that acts as `user` (the admin impersonates).
async fn impersonating(user: &str) -> anyhow::Result<Client> {
    let env = TestEnv::shared()?;
    let file = kube::config::Kubeconfig::read_from(&env.endpoints().kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".to_owned()]);
    Ok(Client::try_from(config)?)
}

fn user(name: &str) -> Subject {
    Subject {
        kind: "User".into(),
        name: name.into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        namespace: None,
    }
}

async fn grant_identity_editing(client: &Client, ns: &str, users: &[&str]) -> anyhow::Result<()> {
    let name = format!("{ns}-tci-editor");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let mut role = ClusterRole {
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![api::GROUP.into()]),
            resources: Some(vec!["terraformclusteridentities".into()]),
            verbs: ["get", "list", "create", "update", "patch", "delete"]
                .map(String::from)
                .to_vec(),
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    role.metadata.name = Some(name.clone());
    roles.create(&PostParams::default(), &role).await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let mut binding = ClusterRoleBinding {
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: name.clone(),
        },
        subjects: Some(users.iter().map(|u| user(u)).collect()),
        ..ClusterRoleBinding::default()
    };
    binding.metadata.name = Some(name);
    bindings.create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// Grants `who` `verb` on the core-group `resource` named `name` in `ns` (a Role and its
/// RoleBinding).
async fn grant(
    client: &Client,
    ns: &str,
    (verb, resource, name): (&str, &str, &str),
    who: &str,
) -> anyhow::Result<()> {
    let role_name = format!("{verb}-{}-{name}", resource.replace('/', "-"));
    let roles: Api<Role> = Api::namespaced(client.clone(), ns);
    let mut role = Role {
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![resource.into()]),
            resource_names: Some(vec![name.into()]),
            verbs: vec![verb.into()],
            ..PolicyRule::default()
        }]),
        ..Role::default()
    };
    role.metadata.name = Some(role_name.clone());
    roles.create(&PostParams::default(), &role).await?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    let mut binding = RoleBinding {
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: role_name.clone(),
        },
        subjects: Some(vec![user(who)]),
        ..RoleBinding::default()
    };
    binding.metadata.name = Some(format!("{role_name}-{who}"));
    bindings.create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// Waits until `check` (a lookup for `user_name`) says yes: RBAC changes reach the authorizer's
/// cache within moments; wait for it, not a fixed time.
async fn wait_until_allowed<F, Fut>(user_name: &str, check: F) -> anyhow::Result<()>
where
    F: Fn(k8s_openapi::api::authentication::v1::UserInfo) -> Fut,
    Fut: std::future::Future<Output = Result<bool, webhook::lookups::LookupError>>,
{
    let info = k8s_openapi::api::authentication::v1::UserInfo {
        username: Some(user_name.into()),
        groups: Some(vec!["system:authenticated".into()]),
        ..Default::default()
    };
    let started = Instant::now();
    while !check(info.clone()).await? {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "RBAC never allowed {user_name}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Grants `who` `get` on the Secret `ns/secret` and waits until the authorizer says so.
async fn grant_secret_get(
    client: &Client,
    ns: &str,
    secret: &str,
    who: &str,
) -> anyhow::Result<()> {
    grant(client, ns, ("get", "secrets", secret), who).await?;
    let lookups = KubeLookups::new(client.clone());
    wait_until_allowed(who, |info| {
        let lookups = lookups.clone();
        async move { webhook::lookups::Lookups::may_get_secret(&lookups, &info, ns, secret).await }
    })
    .await
}

/// Grants `who` `create` on `serviceaccounts/token` of `ns/service_account` and waits until the
/// authorizer says so.
async fn grant_token_create(
    client: &Client,
    ns: &str,
    service_account: &str,
    who: &str,
) -> anyhow::Result<()> {
    grant(
        client,
        ns,
        ("create", "serviceaccounts/token", service_account),
        who,
    )
    .await?;
    let lookups = KubeLookups::new(client.clone());
    wait_until_allowed(who, |info| {
        let lookups = lookups.clone();
        async move {
            webhook::lookups::Lookups::may_create_token(&lookups, &info, ns, service_account).await
        }
    })
    .await
}

#[tokio::test]
async fn an_identity_may_only_name_a_secret_its_creator_can_read() -> anyhow::Result<()> {
    let (_, admin, ns) = setup("wh-sar").await?;
    let (alice, bob) = (format!("alice-{ns}"), format!("bob-{ns}"));
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    for name in ["aws", "gcp"] {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.string_data = Some([("KEY".to_owned(), "not-a-real-credential".to_owned())].into());
        secrets.create(&PostParams::default(), &s).await?;
    }
    grant_identity_editing(&admin, &ns, &[&alice, &bob]).await?;
    grant_secret_get(&admin, &ns, "aws", &alice).await?;

    let as_alice: Api<TerraformClusterIdentity> = Api::all(impersonating(&alice).await?);
    let as_bob: Api<TerraformClusterIdentity> = Api::all(impersonating(&bob).await?);
    let identity: TerraformClusterIdentity =
        serde_json::from_value(common::identity(&format!("{ns}-aws"), &ns, "aws"))?;
    let pp = PostParams::default();
    assert_eq!(
        denied_by_webhook(as_bob.create(&pp, &identity).await),
        format!(
            "spec.secretRef: {bob} may not get Secret {ns}/aws; an identity may only name a Secret its creator can read (ask for get on that Secret, or name one you can read)"
        )
    );
    as_alice.create(&pp, &identity).await?;
    let name = identity.name_any();
    // An update that leaves secretRef alone is not re-checked, whoever makes it.
    as_bob
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowedNamespaces": {"selector": {}}}})),
        )
        .await?;
    // Pointing it at another Secret is, for the one making the change.
    let to_gcp = Patch::Merge(json!({"spec": {"secretRef": {"name": "gcp"}}}));
    assert!(
        denied_by_webhook(
            as_alice
                .patch(&name, &PatchParams::default(), &to_gcp)
                .await
        )
        .starts_with(&format!(
            "spec.secretRef: {alice} may not get Secret {ns}/gcp"
        ))
    );
    grant_secret_get(&admin, &ns, "gcp", &alice).await?;
    as_alice
        .patch(&name, &PatchParams::default(), &to_gcp)
        .await?;
    // `allowedNamespaces: {}` is also a CEL rule of the CRD schema, checked first.
    let empty = refused(
        as_alice
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"allowedNamespaces": {"list": null, "selector": null}}}),
                ),
            )
            .await,
    );
    assert!(
        empty.contains("allowedNamespaces must set list or selector"),
        "{empty}"
    );
    Ok(())
}

/// Identities and Credentials, "Keyless identity": the real API server's SubjectAccessReview
/// decides whether the creator may create tokens for the ServiceAccount where the identity
/// allows it; the CRD's CEL rule wants exactly one of secretRef and workloadIdentity.
#[tokio::test]
async fn a_keyless_identity_may_only_name_a_service_account_its_creator_can_get_tokens_for()
-> anyhow::Result<()> {
    let (_, admin, ns) = setup("wh-keyless").await?;
    let (alice, bob) = (format!("alice-{ns}"), format!("bob-{ns}"));
    grant_identity_editing(&admin, &ns, &[&alice, &bob]).await?;
    grant_token_create(&admin, &ns, "cloud", &alice).await?;
    let identity: TerraformClusterIdentity = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformClusterIdentity",
        "metadata": {"name": format!("{ns}-keyless")},
        "spec": {
            "workloadIdentity": {
                "serviceAccountName": "cloud",
                "audience": "sts.amazonaws.com",
                "aws": {"roleARN": "arn:aws:iam::123456789012:role/captf"}
            },
            "allowedNamespaces": {"list": [ns]}
        }
    }))?;
    let as_alice: Api<TerraformClusterIdentity> = Api::all(impersonating(&alice).await?);
    let as_bob: Api<TerraformClusterIdentity> = Api::all(impersonating(&bob).await?);
    let pp = PostParams::default();
    assert_eq!(
        denied_by_webhook(as_bob.create(&pp, &identity).await),
        format!(
            "spec.workloadIdentity.serviceAccountName: {bob} may not create tokens for ServiceAccount cloud in namespace {ns}; a keyless identity may only name a ServiceAccount its creator could get tokens for (ask for create on serviceaccounts/token, or narrow allowedNamespaces)"
        )
    );
    as_alice.create(&pp, &identity).await?;
    let name = identity.name_any();
    // Allowing every namespace needs the right in every namespace, which alice lacks.
    let widen =
        Patch::Merge(json!({"spec": {"allowedNamespaces": {"list": null, "selector": {}}}}));
    assert!(
        denied_by_webhook(as_alice.patch(&name, &PatchParams::default(), &widen).await)
            .contains("in every namespace")
    );
    // Both kinds of credentials at once, or neither, is refused by the schema.
    let both = refused(
        as_alice
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"secretRef": {"name": "aws", "namespace": ns}}})),
            )
            .await,
    );
    assert!(both.contains("set exactly one of secretRef"), "{both}");
    let bad_arn = refused(
        as_alice
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"workloadIdentity": {"aws": {"roleARN": "role/captf"}}}}),
                ),
            )
            .await,
    );
    assert!(bad_arn.contains("roleARN"), "{bad_arn}");
    Ok(())
}

#[tokio::test]
async fn an_identity_in_use_or_still_mirrored_cannot_be_deleted() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-tci-delete").await?;
    let ids: Api<TerraformClusterIdentity> = Api::all(client.clone());
    let (direct, inherited, mirrored) = (
        format!("{ns}-direct"),
        format!("{ns}-inherited"),
        format!("{ns}-mirrored"),
    );
    for name in [&direct, &inherited, &mirrored] {
        let id: TerraformClusterIdentity =
            serde_json::from_value(common::identity(name, &ns, "creds"))?;
        ids.create(&PostParams::default(), &id).await?;
    }
    // A cluster names `direct`; its machines default to `inherited`.
    let tc = with(
        with(
            common::cluster("tc1", &ns),
            "/spec/identityRef",
            json!({"name": direct}),
        ),
        "/spec/defaults",
        json!({"identityRef": {"name": inherited}}),
    );
    create::<TerraformCluster>(&client, &ns, tc).await?;
    let capi = Cluster::new(
        "c1",
        ClusterSpec {
            infrastructure_ref: Some(ContractVersionedObjectReference {
                api_group: api::GROUP.into(),
                kind: "TerraformCluster".into(),
                name: "tc1".into(),
            }),
            ..ClusterSpec::default()
        },
    );
    Api::<Cluster>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &capi)
        .await?;
    let tm = with(
        common::machine("m1", &ns),
        "/metadata/labels",
        json!({"cluster.x-k8s.io/cluster-name": "c1"}),
    );
    create::<TerraformMachine>(&client, &ns, tm).await?;

    let dp = DeleteParams::default();
    assert_eq!(
        denied_by_webhook(ids.delete(&direct, &dp).await),
        format!(
            "TerraformClusterIdentity {direct} cannot be deleted while it is in use: TerraformCluster {ns}/tc1 (spec.identityRef) resolves to it (an object being deleted still needs it for its destroy)"
        )
    );
    assert_eq!(
        denied_by_webhook(ids.delete(&inherited, &dp).await),
        format!(
            "TerraformClusterIdentity {inherited} cannot be deleted while it is in use: TerraformMachine {ns}/m1 (through TerraformCluster {ns}/tc1 spec.defaults.identityRef) resolves to it (an object being deleted still needs it for its destroy)"
        )
    );
    // Mirrors are reported by the controller in status.
    ids.patch_status(
        &mirrored,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"namespaces": [ns.clone(), "other-tenant"]}})),
    )
    .await?;
    assert_eq!(
        denied_by_webhook(ids.delete(&mirrored, &dp).await),
        format!(
            "TerraformClusterIdentity {mirrored} cannot be deleted while status.namespaces lists namespaces still holding its credential mirror: {ns}, other-tenant"
        )
    );
    ids.patch_status(
        &mirrored,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"namespaces": null}})),
    )
    .await?;
    ids.delete(&mirrored, &dp).await?;
    // Once the objects are gone, so is the guard.
    Api::<TerraformMachine>::namespaced(client.clone(), &ns)
        .delete("m1", &dp)
        .await?;
    ids.delete(&inherited, &dp).await?;
    Api::<TerraformCluster>::namespaced(client.clone(), &ns)
        .delete("tc1", &dp)
        .await?;
    ids.delete(&direct, &dp).await?;
    Ok(())
}

/// A delete that succeeded, or found the object already gone.
fn deleted_or_gone<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn owning_machine(
    client: &Client,
    ns: &str,
    name: &str,
    infra: &str,
    finalizer: bool,
) -> anyhow::Result<Machine> {
    let mut m = Machine::new(
        name,
        MachineSpec {
            cluster_name: "c1".into(),
            bootstrap: Some(Bootstrap {
                data_secret_name: Some(format!("{name}-bootstrap")),
                ..Bootstrap::default()
            }),
            infrastructure_ref: Some(ContractVersionedObjectReference {
                api_group: api::GROUP.into(),
                kind: "TerraformMachine".into(),
                name: infra.into(),
            }),
            ..MachineSpec::default()
        },
    );
    if finalizer {
        m.metadata.finalizers = Some(vec!["captf.test/hold".into()]);
    }
    Ok(Api::<Machine>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &m)
        .await?)
}

async fn owned_tm(
    client: &Client,
    ns: &str,
    name: &str,
    owner: &Machine,
    annotations: Value,
) -> anyhow::Result<()> {
    let mut tm = common::machine(name, ns);
    common::set(
        &mut tm,
        "/metadata/labels",
        json!({"cluster.x-k8s.io/cluster-name": "c1"}),
    );
    common::set(&mut tm, "/metadata/annotations", annotations);
    common::set(
        &mut tm,
        "/metadata/ownerReferences",
        json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": owner.name_any(),
                "uid": owner.uid().unwrap_or_default()}]),
    );
    create::<TerraformMachine>(client, ns, tm).await?;
    Ok(())
}

#[tokio::test]
async fn a_machine_cannot_be_deleted_behind_its_owning_machines_back() -> anyhow::Result<()> {
    let (_, client, ns) = setup("wh-tm-delete").await?;
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    let unpaused = ClusterSpec {
        paused: Some(false),
        ..ClusterSpec::default()
    };
    clusters
        .create(&PostParams::default(), &Cluster::new("c1", unpaused))
        .await?;
    let dp = DeleteParams::default();

    // A live owner that passes the checks blocks a direct delete.
    let owner = owning_machine(&client, &ns, "machine-1", "m1", false).await?;
    owned_tm(&client, &ns, "m1", &owner, json!({})).await?;
    assert_eq!(
        denied_by_webhook(tms.delete("m1", &dp).await),
        format!(
            "TerraformMachine {ns}/m1 is owned by Machine {ns}/machine-1, which is not being deleted: delete the Machine (or scale its owner down) so drain and pre-terminate hooks run first"
        )
    );
    // ... until the owner is gone (the garbage collector may then delete it first).
    machines.delete("machine-1", &dp).await?;
    deleted_or_gone(tms.delete("m1", &dp).await)?;

    // An orphan can be deleted.
    create::<TerraformMachine>(&client, &ns, common::machine("orphan", &ns)).await?;
    tms.delete("orphan", &dp).await?;

    // A Machine whose infrastructureRef names another object is not an owner.
    let stranger = owning_machine(&client, &ns, "machine-2", "someone-else", false).await?;
    owned_tm(&client, &ns, "m2", &stranger, json!({})).await?;
    tms.delete("m2", &dp).await?;

    // An owner being deleted lets its machine go.
    let deleting = owning_machine(&client, &ns, "machine-3", "m3", true).await?;
    owned_tm(&client, &ns, "m3", &deleting, json!({})).await?;
    denied_by_webhook(tms.delete("m3", &dp).await);
    machines.delete("machine-3", &dp).await?;
    tms.delete("m3", &dp).await?;
    machines
        .patch(
            "machine-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;

    // clusterctl move: honoured only while the Cluster is paused.
    let moving = owning_machine(&client, &ns, "machine-4", "m4", false).await?;
    owned_tm(
        &client,
        &ns,
        "m4",
        &moving,
        json!({"clusterctl.cluster.x-k8s.io/delete-for-move": ""}),
    )
    .await?;
    assert_eq!(
        denied_by_webhook(tms.delete("m4", &dp).await),
        format!(
            "TerraformMachine {ns}/m4 carries clusterctl.cluster.x-k8s.io/delete-for-move but its Cluster {ns}/c1 is not paused: a move deletes machines only from a paused Cluster (set spec.paused: true first)"
        )
    );
    clusters
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await?;
    tms.delete("m4", &dp).await?;
    Ok(())
}

async fn get_text(url: &str) -> anyhow::Result<(u16, String)> {
    let response = reqwest::get(url).await?;
    Ok((response.status().as_u16(), response.text().await?))
}

#[tokio::test]
async fn metrics_health_and_readiness_are_served() -> anyhow::Result<()> {
    let (harness, client, ns) = setup("wh-metrics").await?;
    let bad = with(
        common::cluster("c1", &ns),
        "/spec/source/image",
        json!("ghcr.io/UPPER/case:v1"),
    );
    denied_by_webhook(create::<TerraformCluster>(&client, &ns, bad).await);
    assert_eq!(
        get_text(&format!("http://{}/healthz", harness.health))
            .await?
            .0,
        200
    );
    assert_eq!(
        get_text(&format!("http://{}/readyz", harness.health))
            .await?
            .0,
        200
    );
    let (status, text) = get_text(&format!("http://{}/metrics", harness.diagnostics)).await?;
    assert_eq!(status, 200);
    assert!(
        text.contains(
            r#"captf_webhook_denials_total{kind="TerraformCluster",rule="image-reference"}"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"captf_webhook_requests_total{kind="TerraformCluster",operation="create",result="denied"}"#));
    assert!(text.contains("captf_webhook_request_duration_seconds_bucket"));
    Ok(())
}

/// Posts `body` to `url` until `client` gets an answer (its TLS handshake succeeds), for at most
/// ten seconds; fails with `what` otherwise.
async fn wait_until_served<B>(
    client: &reqwest::Client,
    url: &str,
    body: &B,
    what: &str,
) -> anyhow::Result<()>
where
    B: Clone + Into<reqwest::Body>,
{
    let started = Instant::now();
    while client.post(url).body(body.clone()).send().await.is_err() {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn https_client(ca_pem: &str) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes())?])
        // Every request makes a new connection, so a rotated certificate is what it sees.
        .pool_max_idle_per_host(0)
        .build()?)
}

#[tokio::test]
async fn the_serving_certificate_is_reloaded_when_the_files_rotate() -> anyhow::Result<()> {
    install_ring();
    let dir = tempfile::tempdir()?;
    let (old_ca, new_ca) = (TestCa::new("old-ca"), TestCa::new("new-ca"));
    old_ca.write_serving_pair(dir.path());
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let listeners = Listeners::bind(loopback, Listen::Off, Listen::Off)?;
    let url = format!(
        "https://127.0.0.1:{}{}",
        listeners.webhook_addr()?.port(),
        Kind::Cluster.path()
    );
    let metrics = Metrics::new();
    let settings = Settings {
        cert_path: dir.path().join("tls.crt"),
        key_path: dir.path().join("tls.key"),
        tls_min_version: TlsVersion::Tls12,
        tls_cipher_suites: Vec::new(),
        tls_curve_preferences: Vec::new(),
        reload_interval: Duration::from_millis(200),
        insecure_diagnostics: true,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve(
        listeners,
        settings,
        StaticLookups::default(),
        DiagnosticsAuth::Open,
        metrics.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let body = common::review(
        Kind::Cluster,
        "CREATE",
        Some(&common::cluster("c", "ns")),
        None,
        "alice",
        false,
    );
    let old_client = https_client(&old_ca.pem)?;
    let new_client = https_client(&new_ca.pem)?;
    wait_until_served(&old_client, &url, &body, "the server never answered").await?;
    assert!(
        new_client
            .post(&url)
            .body(body.clone())
            .send()
            .await
            .is_err()
    );
    // A half-written rotation (a key that does not match) keeps the old certificate.
    std::fs::write(dir.path().join("tls.key"), new_ca.serving_pair().1)?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        old_client
            .post(&url)
            .body(body.clone())
            .send()
            .await?
            .status(),
        200
    );
    // The full rotation is picked up.
    new_ca.write_serving_pair(dir.path());
    wait_until_served(&new_client, &url, &body, "the rotation was never served").await?;
    assert!(
        old_client
            .post(&url)
            .body(body.clone())
            .send()
            .await
            .is_err()
    );
    let text = metrics.encode();
    assert!(
        text.contains(r#"captf_webhook_certificate_reloads_total{result="succeeded"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"captf_webhook_certificate_reloads_total{result="failed"}"#),
        "{text}"
    );
    let _ = stop_tx.send(());
    serving.await??;
    Ok(())
}

#[tokio::test]
async fn secure_diagnostics_authenticate_and_authorize_the_scraper() -> anyhow::Result<()> {
    install_ring();
    let env = TestEnv::shared()?;
    let client = env.client().await?;
    let ns = env.namespace("wh-diag").await?;
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new("diag-ca");
    ca.write_serving_pair(dir.path());
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let listeners = Listeners::bind(loopback, Listen::Off, Listen::At(loopback))?;
    let url = format!(
        "https://{}/metrics",
        listeners.diagnostics_addr().context("diagnostics")?
    );
    let settings = Settings {
        cert_path: dir.path().join("tls.crt"),
        key_path: dir.path().join("tls.key"),
        tls_min_version: TlsVersion::Tls13,
        tls_cipher_suites: Vec::new(),
        tls_curve_preferences: Vec::new(),
        reload_interval: Duration::from_secs(60),
        insecure_diagnostics: false,
    };
    let serving = tokio::spawn(server::serve(
        listeners,
        settings,
        StaticLookups::default(),
        DiagnosticsAuth::Kubernetes(client.clone()),
        Metrics::new(),
        std::future::pending(),
    ));
    // A ServiceAccount token, as Prometheus would present.
    let token = testenv::rbac::service_account_token(&client, &ns, "scraper").await?;
    let https = https_client(&ca.pem)?;
    let started = Instant::now();
    let status = loop {
        match https.get(&url).send().await {
            Ok(r) => break r.status().as_u16(),
            Err(e) => {
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(10),
                    "no answer: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(status, 401, "no token");
    assert_eq!(
        https
            .get(&url)
            .bearer_auth("not-a-token")
            .send()
            .await?
            .status(),
        401
    );
    assert_eq!(
        https.get(&url).bearer_auth(&token).send().await?.status(),
        403,
        "authenticated, not authorized"
    );
    // The metrics reader role of a Prometheus deployment.
    testenv::rbac::grant_non_resource_urls(
        &client,
        &ns,
        "scraper",
        "metrics-reader",
        &["/metrics"],
        &["get"],
    )
    .await?;
    let started = Instant::now();
    loop {
        let r = https.get(&url).bearer_auth(&token).send().await?;
        if r.status() == 200 {
            assert!(r.text().await?.contains("captf_build_info"));
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "never authorized"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    serving.abort();
    Ok(())
}

#[tokio::test]
async fn the_binary_serves_until_sigterm_and_fails_without_a_certificate() -> anyhow::Result<()> {
    let env = TestEnv::shared()?;
    let dir = tempfile::tempdir()?;
    TestCa::new("bin-ca").write_serving_pair(dir.path());
    let health = testenv::net::free_loopback_port()?;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_webhook"))
        .arg(format!(
            "--kubeconfig={}",
            env.endpoints().kubeconfig.display()
        ))
        .arg(format!("--webhook-cert-dir={}", dir.path().display()))
        .arg("--webhook-port=0")
        .arg(format!("--health-addr=127.0.0.1:{health}"))
        .arg("--diagnostics-address=0")
        .arg("--logging-format=json")
        .spawn()?;
    let started = Instant::now();
    loop {
        if let Ok((200, _)) = get_text(&format!("http://127.0.0.1:{health}/readyz")).await {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            anyhow::bail!("the webhook binary never became ready");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()?;
    assert!(status.success());
    let started = Instant::now();
    let exit = loop {
        if let Some(exit) = child.try_wait()? {
            break exit;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(20),
            "the webhook ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "{exit}");

    let empty = tempfile::tempdir()?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_webhook"))
        .arg(format!(
            "--kubeconfig={}",
            env.endpoints().kubeconfig.display()
        ))
        .arg(format!("--webhook-cert-dir={}", empty.path().display()))
        .arg("--webhook-port=0")
        .arg("--health-addr=0")
        .arg("--diagnostics-address=0")
        .output()?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tls.crt"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn the_shipped_manifests_are_accepted_by_the_api_server() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Service};
    let env = TestEnv::shared()?;
    let client = env.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt("captf-system").await?.is_none() {
        let mut ns = Namespace::default();
        ns.metadata.name = Some("captf-system".into());
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/webhook");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut seen = Vec::new();
    for file in [
        "service_account.yaml",
        "role.yaml",
        "role_binding.yaml",
        "deployment.yaml",
        "service.yaml",
        "manifests.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file))?;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).with_context(|| file.to_owned())?;
        for doc in docs {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let result = match kind.as_str() {
                "ServiceAccount" => {
                    Api::<ServiceAccount>::namespaced(client.clone(), "captf-system")
                        .create(&dry, &serde_json::from_value(doc)?)
                        .await
                        .map(|_| ())
                }
                "Deployment" => Api::<Deployment>::namespaced(client.clone(), "captf-system")
                    .create(&dry, &serde_json::from_value(doc)?)
                    .await
                    .map(|_| ()),
                "Service" => Api::<Service>::namespaced(client.clone(), "captf-system")
                    .create(&dry, &serde_json::from_value(doc)?)
                    .await
                    .map(|_| ()),
                "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                    .create(&dry, &serde_json::from_value(doc)?)
                    .await
                    .map(|_| ()),
                "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                    .create(&dry, &serde_json::from_value(doc)?)
                    .await
                    .map(|_| ()),
                "ValidatingWebhookConfiguration" => {
                    Api::<ValidatingWebhookConfiguration>::all(client.clone())
                        .create(&dry, &serde_json::from_value(doc)?)
                        .await
                        .map(|_| ())
                }
                other => anyhow::bail!("unexpected kind {other} in {file}"),
            };
            result.with_context(|| format!("{kind} in {file}"))?;
            seen.push(kind);
        }
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
    Ok(())
}

/// Identity DELETE reads what may use the identity page by page (`limit`/`continue`), keeping a
/// slim copy of each object, so a large cluster neither times the check out nor fills the
/// webhook's memory.
#[tokio::test]
async fn an_identity_delete_pages_through_a_few_thousand_objects() -> anyhow::Result<()> {
    use kube::api::{ApiResource, DynamicObject};
    use webhook::lookups::{INVENTORY_PAGE, Lookups, list_paged};
    const MANY: usize = 2_000;
    let (_, client, ns) = setup("wh-many").await?;
    let identity = format!("{ns}-many");
    let mut batch = tokio::task::JoinSet::new();
    for i in 0..MANY {
        let mut tm = common::machine(&format!("m-{i:04}"), &ns);
        if i == MANY - 1 {
            tm["spec"]["identityRef"] = json!({"name": identity});
        }
        let (client, ns) = (client.clone(), ns.clone());
        batch.spawn(async move { create::<TerraformMachine>(&client, &ns, tm).await });
        if batch.len() == 50 || i == MANY - 1 {
            while let Some(created) = batch.join_next().await {
                created??;
            }
        }
    }

    let ar = ApiResource::erase::<TerraformMachine>(&());
    let listed = list_paged(
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar),
        INVENTORY_PAGE,
        "listing TerraformMachines",
        Some,
    )
    .await?;
    assert_eq!(listed.items.len(), MANY);
    // The API server may hand out one more (empty) page when the count is a multiple of it.
    let pages = MANY.div_ceil(INVENTORY_PAGE as usize);
    assert!(
        (pages..=pages + 1).contains(&listed.pages),
        "{} pages",
        listed.pages
    );

    let inventory = KubeLookups::new(client.clone()).inventory().await?;
    assert!(inventory.machines.len() >= MANY);
    assert!(
        inventory
            .machines
            .iter()
            .all(|m| m.spec.workspace.source.image.is_empty() && m.status.is_none()),
        "only slim copies are kept"
    );
    let ids: Api<TerraformClusterIdentity> = Api::all(client.clone());
    let id: TerraformClusterIdentity =
        serde_json::from_value(common::identity(&identity, &ns, "aws"))?;
    ids.create(&PostParams::default(), &id).await?;
    assert_eq!(
        denied_by_webhook(ids.delete(&identity, &DeleteParams::default()).await),
        format!(
            "TerraformClusterIdentity {identity} cannot be deleted while it is in use: TerraformMachine {ns}/m-1999 (spec.identityRef) resolves to it (an object being deleted still needs it for its destroy)"
        )
    );
    Ok(())
}

/// The shipped webhook configuration (`config/webhook/manifests.yaml`) as it behaves with the
/// webhook Deployment down, confined to `ns`: every namespaced kind's webhook, unchanged but for
/// a name of its own, a `namespaceSelector` for `ns`, a CA, and the Service `captf-webhook-service`
/// of `ns`, which selects no pod. TerraformClusterIdentity's webhook is left out: it is
/// cluster-scoped, so no namespace selector could keep it from other tests.
fn outage_configuration(ns: &str, ca_pem: &str) -> anyhow::Result<Value> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/webhook");
    let mut shipped: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("manifests.yaml"))?)?;
    let hooks = shipped["webhooks"].as_array_mut().context("webhooks")?;
    hooks.retain(|h| h["rules"][0]["scope"] == "Namespaced");
    for hook in hooks.iter_mut() {
        let service = hook["clientConfig"]["service"]
            .as_object_mut()
            .context("service")?;
        service.insert("namespace".into(), json!(ns));
        hook["clientConfig"]["caBundle"] =
            serde_json::to_value(ByteString(ca_pem.as_bytes().to_vec()))?;
        hook["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    }
    shipped["metadata"] = json!({"name": format!("captf-outage-{ns}")});
    Ok(shipped)
}

/// One object of every namespaced kind, named `name`.
fn every_namespaced_kind(name: &str, ns: &str) -> Vec<Value> {
    let mut objects = vec![
        common::cluster(name, ns),
        common::machine(name, ns),
        common::pool(name, ns),
    ];
    for kind in Kind::ALL {
        if kind.name().ends_with("Template") {
            objects.push(common::template(kind, name, ns));
        }
    }
    objects
}

fn dynamic_api(client: &Client, ns: &str, obj: &Value) -> Api<kube::api::DynamicObject> {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let plural = Kind::ALL
        .into_iter()
        .find(|k| k.name() == kind)
        .map_or_else(String::new, |k| k.plural().to_owned());
    let gvk = kube::api::GroupVersionKind::gvk(api::GROUP, api::VERSION, kind);
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, &plural);
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The webhook Deployment down (issue 19): with the shipped `failurePolicy`, every create and
/// update of a namespaced Terraform* kind is refused with a message naming the webhook, and
/// nothing is written: the refused objects do not exist, the updated ones are unchanged.
#[tokio::test]
async fn with_the_webhook_down_admission_fails_closed_and_writes_nothing() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Service;
    let (_, client, ns) = setup("wh-outage").await?;
    let before = every_namespaced_kind("before", &ns);
    for obj in &before {
        dynamic_api(&client, &ns, obj)
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj.clone())?,
            )
            .await
            .with_context(|| format!("creating {} before the outage", obj["kind"]))?;
    }
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "captf-webhook-service", "namespace": ns},
        "spec": {"selector": {"app": "no-such-pod"}, "ports": [{"port": 443, "targetPort": 9443}]}}))?;
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &service)
        .await?;
    let config = outage_configuration(&ns, &TestCa::new("outage").pem)?;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let name = format!("captf-outage-{ns}");
    configs
        .create(&PostParams::default(), &serde_json::from_value(config)?)
        .await?;
    let outcome = fails_closed(&client, &ns, &before).await;
    configs.delete(&name, &DeleteParams::default()).await?;
    outcome
}

/// Every create and update of `before`'s kinds in `ns` refused by the unreachable webhook, and
/// nothing written.
async fn fails_closed(client: &Client, ns: &str, before: &[Value]) -> anyhow::Result<()> {
    let mut refusals = Vec::new();
    for (obj, during) in before.iter().zip(every_namespaced_kind("during", ns)) {
        let api = dynamic_api(client, ns, obj);
        let kind = obj["kind"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let started = Instant::now();
        let message = loop {
            match api
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(during.clone())?,
                )
                .await
            {
                Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => {
                    break s.message;
                }
                // The API server's webhook configuration cache has not caught up yet.
                Ok(_) if started.elapsed() < Duration::from_secs(30) => {
                    api.delete("during", &DeleteParams::default()).await?;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                other => anyhow::bail!("{kind} created during the outage: {other:?}"),
            }
        };
        anyhow::ensure!(
            message.contains(&format!("validation.{kind}.{}", api::GROUP)),
            "the refusal does not name the webhook: {message}"
        );
        anyhow::ensure!(api.get_opt("during").await?.is_none(), "{kind} written");
        let was = api.get("before").await?;
        let patch = json!({"metadata": {"labels": {"outage": "changed"}}});
        let update = api
            .patch("before", &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        refusals.push(refused(update));
        let now = api.get("before").await?;
        anyhow::ensure!(
            now.metadata.resource_version == was.metadata.resource_version,
            "{kind} changed during the outage"
        );
    }
    anyhow::ensure!(
        refusals
            .iter()
            .all(|m| m.contains("failed calling webhook")),
        "{refusals:#?}"
    );
    Ok(())
}
