//! Checks of an installed CAPTF (the book's Installation page, "Check the install"), shared by the
//! install tests: its Deployments available on the pod network, the webhooks trusted once
//! cert-manager's cainjector wrote their CA, the API server calling CAPTF's webhook, the Jobs
//! running the install's runner image, and nothing left after `clusterctl delete`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use testenv::TestEnv;

use crate::kube_ops::{INFRA, Kube, name_of};

/// How long each wait of an install allows.
pub const WAIT: Duration = Duration::from_secs(300);

/// Waits until `ns/name` has all its replicas available and ready.
pub async fn wait_available(kube: &Kube, ns: &str, name: &str) -> anyhow::Result<Value> {
    kube.wait_for(
        ("apps/v1", "Deployment"),
        ns,
        name,
        WAIT,
        "available",
        |d| {
            let want = &d["spec"]["replicas"];
            d["status"]["availableReplicas"] == *want && d["status"]["readyReplicas"] == *want
        },
    )
    .await
}

/// CAPTF's two Deployments are available with their pods on the pod network, and cert-manager's
/// cainjector wrote the CA into the webhook configuration.
pub async fn check_captf_pods(env: &TestEnv, kube: &Kube) -> anyhow::Result<()> {
    wait_available(kube, "captf-system", "captf-webhook").await?;
    wait_available(kube, "captf-system", "captf-controller-manager").await?;
    let gateway = env.pod_gateway()?.to_string();
    let subnet = format!("{}.", gateway.strip_suffix(".1").context("gateway")?);
    let pods = kube.list("v1", "Pod", "captf-system", "").await?;
    ensure!(
        pods.len() == 3,
        "one manager and two webhook pods: {pods:#?}"
    );
    for p in &pods {
        let ip = p["status"]["podIP"].as_str().unwrap_or_default();
        ensure!(ip.starts_with(&subnet), "{} has {ip}", name_of(p));
    }
    for ns in [
        "capi-system",
        "capi-kubeadm-bootstrap-system",
        "capi-kubeadm-control-plane-system",
        "cert-manager",
    ] {
        let pods = kube.list("v1", "Pod", ns, "").await?;
        ensure!(!pods.is_empty(), "no pod runs in {ns}");
    }
    let vwc = kube
        .get(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "",
            "captf-validating-webhook-configuration",
        )
        .await?
        .context("the webhook configuration")?;
    ensure!(
        vwc["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .is_some_and(|b| !b.is_empty()),
        "cert-manager's cainjector set no CA bundle: {vwc:#}"
    );
    Ok(())
}

/// The API server calls CAPTF's webhook through its Service: a privileged module container is
/// refused by the webhook's own rule.
pub async fn check_webhook_called(kube: &Kube, ns: &str) -> anyhow::Result<()> {
    let api = kube.api(INFRA, "TerraformCluster", ns).await?;
    let privileged: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": INFRA, "kind": "TerraformCluster",
        "metadata": {"name": "privileged"},
        "spec": {"source": {"image": "registry.example/m:v1"}, "identityRef": {"name": "any"},
                 "jobs": {"securityContext": {"privileged": true}}}}))?;
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..kube::api::PostParams::default()
    };
    let err = api
        .create(&dry_run, &privileged)
        .await
        .err()
        .context("a privileged module container was accepted")?
        .to_string();
    ensure!(
        err.contains("admission webhook") && err.contains("privileged: true is not allowed"),
        "the webhook answered: {err}"
    );
    Ok(())
}

/// The objects whose CA cert-manager's cainjector writes (`cert-manager.io/inject-ca-from`), and
/// which of them still lack it: webhook configurations without a `caBundle` on every webhook,
/// and custom resource definitions whose conversion webhook has none.
pub async fn ca_not_injected(kube: &Kube) -> anyhow::Result<Vec<String>> {
    const INJECT: &str = "cert-manager.io/inject-ca-from";
    let has_bundle = |c: &Value| c["caBundle"].as_str().is_some_and(|b| !b.is_empty());
    let mut missing = Vec::new();
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let configs = kube
            .list("admissionregistration.k8s.io/v1", kind, "", "")
            .await?;
        for c in configs
            .iter()
            .filter(|c| !c["metadata"]["annotations"][INJECT].is_null())
        {
            let hooks = c["webhooks"].as_array().cloned().unwrap_or_default();
            if !hooks.iter().all(|h| has_bundle(&h["clientConfig"])) {
                missing.push(format!("{kind} {}", name_of(c)));
            }
        }
    }
    let crds = kube
        .list(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "",
        )
        .await?;
    for crd in crds
        .iter()
        .filter(|c| !c["metadata"]["annotations"][INJECT].is_null())
    {
        let conversion = &crd["spec"]["conversion"];
        if conversion["strategy"] == "Webhook"
            && !has_bundle(&conversion["webhook"]["clientConfig"])
        {
            missing.push(format!("CustomResourceDefinition {}", name_of(crd)));
        }
    }
    Ok(missing)
}

/// Waits until cert-manager's cainjector has written the CA into every webhook configuration
/// and conversion webhook that asks for it (Cluster API's as well as CAPTF's), and Cluster
/// API's own webhook admits a Cluster (a server-side dry run). `clusterctl init
/// --wait-providers` returns once the Deployments are available, which can be before the
/// injection: until then the API server refuses Clusters with "certificate signed by unknown
/// authority".
pub async fn wait_webhooks_trusted(kube: &Kube, ns: &str) -> anyhow::Result<()> {
    let probe = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "webhook-probe", "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "TerraformCluster", "name": "webhook-probe"}}});
    let deadline = Instant::now() + WAIT;
    loop {
        let missing = ca_not_injected(kube).await?;
        let admitted = if missing.is_empty() {
            kube.apply_with(&probe, ns, true)
                .await
                .map_err(|e| format!("{e:#}"))
        } else {
            Err(format!("no CA yet in {missing:?}"))
        };
        match admitted {
            Ok(()) => return Ok(()),
            Err(e) if e.contains("failed calling webhook") || !missing.is_empty() => {
                ensure!(
                    Instant::now() < deadline,
                    "webhooks not trusted after {WAIT:?}: {e}"
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => anyhow::bail!("Cluster API's webhook refused the probe Cluster: {e}"),
        }
    }
}

/// Every Job of the Quick Start ran the runner image of the install in its init container: the
/// image of the manager pod's `runner-image` init container, which the manager read from its pod.
pub async fn check_runner_image(kube: &Kube, ns: &str, want: &str) -> anyhow::Result<()> {
    let jobs = kube.list("batch/v1", "Job", ns, "").await?;
    ensure!(!jobs.is_empty(), "no Job is left in {ns} to look at");
    for job in jobs {
        let init = &job["spec"]["template"]["spec"]["initContainers"][0]["image"];
        ensure!(*init == want, "Job {} runs {init} first", name_of(&job));
    }
    Ok(())
}

/// After `clusterctl delete --infrastructure terraform`: CAPTF's Deployments and its entry in
/// clusterctl's inventory are gone; Cluster API's providers stay.
pub async fn check_uninstalled(kube: &Kube) -> anyhow::Result<()> {
    for name in ["captf-controller-manager", "captf-webhook"] {
        kube.wait_gone(("apps/v1", "Deployment"), "captf-system", name, WAIT)
            .await?;
    }
    let providers = kube
        .list("clusterctl.cluster.x-k8s.io/v1alpha3", "Provider", "", "")
        .await?;
    let names: Vec<String> = providers.iter().map(name_of).collect();
    ensure!(
        !names.iter().any(|n| n == "infrastructure-terraform"),
        "still in the inventory: {names:?}"
    );
    ensure!(names.iter().any(|n| n == "cluster-api"), "{names:?}");
    Ok(())
}

/// Deletes the Quick Start's `cluster` in `ns` and checks that every destroy Job ran and nothing
/// of CAPTF's is left ([`crate::quickstart::check_deleted`]); returns how long the delete took.
pub async fn delete_quickstart_cluster(
    kube: &Kube,
    ns: &str,
    cluster: &str,
    jobs: &crate::suite::JobLog,
) -> anyhow::Result<Duration> {
    let mut owners: Vec<String> = kube
        .list(INFRA, "TerraformMachine", ns, "")
        .await?
        .iter()
        .map(name_of)
        .collect();
    owners.push(cluster.to_owned());
    let delete = crate::quickstart::delete_cluster(kube, ns, cluster).await?;
    crate::quickstart::check_deleted(kube, ns, jobs, &owners).await?;
    Ok(delete)
}
