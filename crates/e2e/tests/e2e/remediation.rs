//! A Machine whose instance is gone, remediated by Cluster API itself (book: Machine
//! Remediation, "With a MachineHealthCheck"): a MachineDeployment of one worker whose
//! TerraformMachineTemplate asks for `remediation.annotateMachine`, and a MachineHealthCheck
//! selecting its Machines. When a health check of the worker's TerraformMachine reads its
//! instance terminated, CAPTF annotates the Machine with `cluster.x-k8s.io/remediate-machine`;
//! Cluster API's MachineHealthCheck marks it unhealthy for that annotation, its MachineSet
//! deletes it (CAPTF destroys its TerraformMachine from the durable inputs) and creates a
//! replacement, which CAPTF provisions.
//!
//! The MachineHealthCheck's own condition check waits an hour, so only the annotation can
//! explain a remediation within the test's time.
//!
//! The worker's module is the no-op machine module whose `health` output reads `terminated` when
//! a value outside its inputs names the instance: the output `knob` of the state Secret
//! `tfstate-default-drift-knob` in the namespace, read through `terraform_remote_state` as a
//! module reads anything it does not own (`testenv::knob`). Naming one TerraformMachine leaves
//! its replacement healthy. Workers take stand-in bootstrap data, as in the workers test.

use anyhow::Context as _;
use e2e::clusterctl::template;
use e2e::kube_ops::{CAPI, INFRA, Kube, condition, eventually, name_of};
use e2e::quickstart::{self, WAIT};
use e2e::suite::{JobLog, Suite};
use serde_json::{Value, json};
use testenv::image::{ModuleImage, push_module_image};
use testenv::knob::{self, KNOB_TF};

use e2e::stand_in::{bootstrap_secret, machine_deployment, machines, provisioned};

const CLUSTER: &str = "remediated";

/// The no-op machine module whose `health` reads `terminated` for the TerraformMachine the knob
/// names, and `running` and healthy otherwise (after [`KNOB_TF`]).
const AILING_TF: &str = r#"
locals {
  gone = local.knob == var.captf_object.name
}

output "health" {
  value = {
    state   = local.gone ? "terminated" : "running"
    healthy = !local.gone
    message = local.gone ? "the e2e test terminated it" : null
    reasons = []
  }
}
"#;

/// Pushes the ailing machine module image; returns its reference.
async fn ailing_machine_image(suite: &Suite) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let noop = testenv::env::repo_root().join("modules/noop/machine");
    for f in std::fs::read_dir(&noop)? {
        let f = f?;
        std::fs::copy(f.path(), dir.path().join(f.file_name()))?;
    }
    // The variant's `health` stands in for the module's own.
    let outputs = dir.path().join("outputs.tf");
    let text = std::fs::read_to_string(&outputs)?;
    let start = text
        .find("output \"health\"")
        .context("modules/noop/machine/outputs.tf has no health output")?;
    let end = start
        + text[start..]
            .find("\n}\n")
            .context("the health output block has no end")?
        + 3;
    std::fs::write(&outputs, format!("{}{}", &text[..start], &text[end..]))?;
    std::fs::write(
        dir.path().join("ailing.tf"),
        format!("{KNOB_TF}{AILING_TF}"),
    )?;
    let host = suite.env.registry()?.host();
    push_module_image(
        &host,
        "captf/ailing-machine",
        "e2e",
        &ModuleImage::new(dir.path(), "machine"),
    )
    .await?;
    Ok(format!("{host}/captf/ailing-machine:e2e"))
}

/// Writes the knob: a state whose output `knob` names `value`.
async fn set_knob(kube: &Kube, ns: &str, value: &str) -> anyhow::Result<()> {
    let data = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        knob::knob_state(value)?,
    );
    kube.apply(
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": knob::KNOB_SECRET, "namespace": ns},
                "data": {"tfstate": data}}),
        ns,
    )
    .await
}

/// The generated default flavor: one worker from the ailing image with `annotateMachine`, a
/// health check every minute, stand-in bootstrap data, and a MachineHealthCheck on the workers.
fn flavor(yaml: &str, secret: &str, image: &str) -> anyhow::Result<String> {
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(&machine_deployment(yaml, secret, 1)?)?;
    let workers = format!("{CLUSTER}-md-0");
    for doc in &mut docs {
        if doc["kind"] == "TerraformMachineTemplate" && doc["metadata"]["name"] == workers.as_str()
        {
            let spec = &mut doc["spec"]["template"]["spec"];
            spec["source"]["image"] = json!(image);
            spec["remediation"] =
                json!({"annotateMachine": true, "healthCheckIntervalSeconds": 60});
        }
    }
    docs.push(json!({
        "apiVersion": CAPI, "kind": "MachineHealthCheck",
        "metadata": {"name": workers},
        "spec": {
            "clusterName": CLUSTER,
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": workers}},
            "checks": {"unhealthyMachineConditions": [
                {"type": "InfrastructureReady", "status": "False", "timeoutSeconds": 3600}
            ]}
        }
    }));
    let mut out = String::new();
    for doc in docs.iter().filter(|d| d.is_object()) {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string(doc)?);
        out.push('\n');
    }
    Ok(out)
}

/// The Machine owning TerraformMachine `tm`.
async fn owning_machine(kube: &Kube, ns: &str, tm: &str) -> anyhow::Result<String> {
    let tm = kube
        .get(INFRA, "TerraformMachine", ns, tm)
        .await?
        .with_context(|| format!("TerraformMachine {tm} is gone"))?;
    tm["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["kind"] == "Machine")
        .and_then(|o| o["name"].as_str())
        .map(str::to_owned)
        .with_context(|| format!("TerraformMachine {} has no owning Machine", name_of(&tm)))
}

/// Waits until Cluster API starts deleting `machine`; returns the Machine as it was then. On a
/// timeout the error carries the Machine's annotations and conditions.
async fn deleted_by_cluster_api(kube: &Kube, ns: &str, machine: &str) -> anyhow::Result<Value> {
    let waited = eventually(
        WAIT,
        &format!("Machine {machine} being deleted"),
        || async {
            let m = kube
                .get(CAPI, "Machine", ns, machine)
                .await?
                .with_context(|| {
                    format!("Machine {machine} is gone before it was seen deleting")
                })?;
            Ok((!m["metadata"]["deletionTimestamp"].is_null()).then_some(m))
        },
    )
    .await;
    match waited {
        Ok(m) => Ok(m),
        Err(e) => {
            let last = kube.get(CAPI, "Machine", ns, machine).await?;
            let last = last.unwrap_or_default();
            Err(e.context(format!(
                "Machine {machine}: annotations {}, conditions {}",
                last["metadata"]["annotations"], last["status"]["conditions"]
            )))
        }
    }
}

/// The reasons of the events posted on TerraformMachine `tm`.
async fn event_reasons(kube: &Kube, ns: &str, tm: &str) -> anyhow::Result<Vec<String>> {
    Ok(kube
        .list("v1", "Event", ns, "")
        .await?
        .iter()
        .filter(|e| {
            e["involvedObject"]["kind"] == "TerraformMachine" && e["involvedObject"]["name"] == tm
        })
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_instance_is_remediated_by_cluster_apis_machine_health_check()
-> anyhow::Result<()> {
    let (suite, kube, ns) = crate::setup("remediation").await?;
    let clusterctl = quickstart::flavor_clusterctl(suite, &ns)?;
    quickstart::apply_identity(&kube, &clusterctl, &ns, &ns).await?;
    let secret = bootstrap_secret(&kube, &ns, CLUSTER, "md-0").await?;
    let image = ailing_machine_image(suite).await?;
    let yaml =
        clusterctl.generate_cluster(CLUSTER, &template("cluster-template.yaml"), &ns, 1, 0)?;
    let jobs = JobLog::watch(&kube, &ns);
    kube.apply_yaml(&flavor(&yaml, &secret, &image)?, &ns)
        .await?;
    quickstart::wait_cluster_provisioned(&kube, &ns, CLUSTER).await?;
    let first = provisioned(&kube, &ns, CLUSTER, 1).await?;
    let tm = first.first().context("no worker")?.clone();
    let machine = owning_machine(&kube, &ns, &tm).await?;

    set_knob(&kube, &ns, &tm).await?;
    let asked = std::time::Instant::now();
    let deleting = deleted_by_cluster_api(&kube, &ns, &machine).await?;
    let annotations = &deleting["metadata"]["annotations"];
    assert_eq!(
        annotations["cluster.x-k8s.io/remediate-machine"], "",
        "{deleting:#}"
    );
    assert_eq!(
        annotations["captf.io/remediation-requested"], "the instance is terminated",
        "{deleting:#}"
    );
    assert_eq!(
        condition(&deleting, "HealthCheckSucceeded"),
        Some(("False".to_owned(), "HasRemediateAnnotation".to_owned())),
        "Cluster API's MachineHealthCheck did not act on the annotation: {deleting:#}"
    );
    assert_eq!(
        condition(&deleting, "OwnerRemediated").map(|c| c.0),
        Some("False".to_owned()),
        "the MachineSet did not remediate: {deleting:#}"
    );
    let reasons = event_reasons(&kube, &ns, &tm).await?;
    assert!(
        reasons.iter().any(|r| r == "RemediationRequested"),
        "no RemediationRequested event on {tm}: {reasons:?}"
    );

    kube.wait_gone((INFRA, "TerraformMachine"), &ns, &tm, WAIT)
        .await?;
    let destroy = eventually(WAIT, &format!("the destroy Job of {tm}"), || async {
        Ok(jobs
            .of_op("destroy")
            .into_iter()
            .find(|j| j.owner == tm && j.succeeded))
    })
    .await?;
    assert_eq!(destroy.destroyed_from_durable_inputs, Some(Ok(true)));
    let replaced = provisioned(&kube, &ns, CLUSTER, 1).await?;
    assert!(
        !replaced.contains(&tm),
        "{tm} was not replaced: {replaced:?}"
    );
    let now = machines(&kube, &ns, CLUSTER).await?;
    assert!(
        now.iter().all(|m| name_of(m) != machine),
        "Machine {machine} is still there"
    );
    println!(
        "e2e figures: remediation: a terminated instance's Machine replaced {:.0?} after the knob named it",
        asked.elapsed()
    );

    quickstart::delete_cluster(&kube, &ns, CLUSTER).await?;
    // The knob is the test's, not CAPTF's: removed before the leftovers are looked for, with the
    // Lease the `kubernetes` backend creates beside a state it reads.
    kube.delete("v1", "Secret", &ns, knob::KNOB_SECRET).await?;
    kube.delete("coordination.k8s.io/v1", "Lease", &ns, knob::KNOB_LEASE)
        .await?;
    quickstart::wait_no_leftovers(&kube, &ns).await
}
