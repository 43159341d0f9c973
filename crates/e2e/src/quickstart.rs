//! The book's Quick Start, step by step (steps 2, 4, 5 and 6: the provider is already running),
//! driven by `clusterctl` and the kube API exactly as its commands are: used verbatim by
//! end-to-end test 1 and by `make quickstart`, which prints the progress for a person.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use sha2::Digest as _;

use crate::clusterctl::Clusterctl;
use crate::kube_ops::{CAPI, INFRA, Kube, condition, is_true, name_of};
use crate::suite::{Images, JobLog, Suite};

/// How long one object may take to come up or go away.
pub const WAIT: Duration = Duration::from_secs(600);

/// Prints a person's progress (or keeps quiet in tests): a line per step with the elapsed time,
/// and `kubectl get`-style tables.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    print: bool,
}

impl Progress {
    pub fn new(print: bool) -> Self {
        Progress {
            started: Instant::now(),
            print,
        }
    }

    /// One step, with the time since the start.
    pub fn step(&self, what: &str) {
        if self.print {
            println!("[{:>6.1}s] {what}", self.started.elapsed().as_secs_f64());
        }
    }

    /// A block of text (a table), indented under the steps.
    pub fn block(&self, text: &str) {
        if self.print {
            for line in text.lines() {
                println!("          {line}");
            }
        }
    }
}

/// A `kubectl get`-style table: a header and one row per object, columns padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.len());
            }
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("   ")
            .trim_end()
            .to_owned()
    };
    let mut out = line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.clone()));
    }
    out
}

fn cond_cell(obj: &Value, type_: &str) -> String {
    condition(obj, type_).map_or_else(|| "-".to_owned(), |(s, r)| format!("{s}/{r}"))
}

/// `kubectl get clusters,machines,terraformclusters,terraformmachines -n NS` as one table.
pub async fn objects_table(kube: &Kube, ns: &str) -> anyhow::Result<String> {
    let mut rows = Vec::new();
    for obj in kube.list(CAPI, "Cluster", ns, "").await? {
        rows.push(vec![
            format!("cluster/{}", name_of(&obj)),
            obj["status"]["phase"].as_str().unwrap_or("-").to_owned(),
            cond_cell(&obj, "Available"),
            endpoint_of(&obj["spec"]["controlPlaneEndpoint"]),
        ]);
    }
    for obj in kube.list(CAPI, "Machine", ns, "").await? {
        rows.push(vec![
            format!("machine/{}", name_of(&obj)),
            obj["status"]["phase"].as_str().unwrap_or("-").to_owned(),
            cond_cell(&obj, "InfrastructureReady"),
            obj["spec"]["providerID"].as_str().unwrap_or("-").to_owned(),
        ]);
    }
    for kind in ["TerraformCluster", "TerraformMachine"] {
        for obj in kube.list(INFRA, kind, ns, "").await? {
            rows.push(vec![
                format!("{}/{}", kind.to_lowercase(), name_of(&obj)),
                if obj["status"]["initialization"]["provisioned"] == true {
                    "Provisioned"
                } else {
                    "-"
                }
                .to_owned(),
                cond_cell(&obj, "Ready"),
                obj["spec"]["providerID"].as_str().map_or_else(
                    || endpoint_of(&obj["spec"]["controlPlaneEndpoint"]),
                    str::to_owned,
                ),
            ]);
        }
    }
    Ok(table(
        &["NAME", "PHASE", "READY", "ENDPOINT / PROVIDERID"],
        &rows,
    ))
}

fn endpoint_of(ep: &Value) -> String {
    match (ep["host"].as_str(), ep["port"].as_i64()) {
        (Some(h), Some(p)) if !h.is_empty() => format!("{h}:{p}"),
        _ => "-".to_owned(),
    }
}

/// Step 2: `clusterctl generate yaml --from templates/identity.yaml | kubectl apply -f -` with
/// `TERRAFORM_IDENTITY_NAME` and `NAMESPACE`; waits for the identity's Ready=True.
pub async fn apply_identity(
    kube: &Kube,
    clusterctl: &Clusterctl,
    identity: &str,
    ns: &str,
) -> anyhow::Result<Value> {
    apply_identity_from(kube, clusterctl, "identity.yaml", identity, ns).await
}

/// [`apply_identity`] from another identity template (`identity-docker.yaml`: its own variables
/// are set on `clusterctl`).
pub async fn apply_identity_from(
    kube: &Kube,
    clusterctl: &Clusterctl,
    template: &str,
    identity: &str,
    ns: &str,
) -> anyhow::Result<Value> {
    let yaml = clusterctl
        .clone()
        .var("TERRAFORM_IDENTITY_NAME", identity)
        .var("NAMESPACE", ns)
        .generate_yaml(&clusterctl.template(template))?;
    kube.apply_yaml(&yaml, ns).await?;
    kube.wait_for(
        (INFRA, "TerraformClusterIdentity"),
        "",
        identity,
        WAIT,
        "Ready=True",
        |o| is_true(o, "Ready"),
    )
    .await
}

/// The clusterctl of a cluster flavor: images and identity set as the book exports them.
pub fn flavor_clusterctl(suite: &Suite, identity: &str) -> anyhow::Result<Clusterctl> {
    flavor_clusterctl_in(
        &suite.env.endpoints().dir.join("clusterctl"),
        &suite.images,
        identity,
    )
}

/// [`flavor_clusterctl`] with its config in `dir` and the given images.
pub fn flavor_clusterctl_in(
    dir: &Path,
    images: &Images,
    identity: &str,
) -> anyhow::Result<Clusterctl> {
    Ok(Clusterctl::new(dir)?
        .var("TERRAFORM_CLUSTER_IMAGE", &images.cluster)
        .var("TERRAFORM_MACHINE_IMAGE", &images.machine)
        .var("TERRAFORM_MACHINEPOOL_IMAGE", &images.machinepool)
        .var("TERRAFORM_IDENTITY_NAME", identity))
}

/// The control-plane Machine of `cluster` once KubeadmControlPlane created it.
pub async fn control_plane_machine(kube: &Kube, ns: &str, cluster: &str) -> anyhow::Result<Value> {
    crate::kube_ops::eventually(WAIT, "the control-plane Machine", || async {
        let selector =
            format!("cluster.x-k8s.io/cluster-name={cluster},cluster.x-k8s.io/control-plane");
        Ok(kube
            .list(CAPI, "Machine", ns, &selector)
            .await?
            .into_iter()
            .next())
    })
    .await
}

/// What test 1 measures (the closing-note figures).
#[derive(Debug, Clone)]
pub struct Figures {
    /// From `kubectl apply` of the generated cluster to Cluster phase Provisioned.
    pub apply_to_cluster_provisioned: Duration,
    /// From apply to the control-plane Machine's phase Provisioned.
    pub apply_to_machine_provisioned: Duration,
    /// Jobs started from apply to the end of the delete.
    pub jobs_started: usize,
    /// From `kubectl delete cluster` until the Cluster is gone.
    pub delete: Duration,
}

/// Waits until a CAPTF object reports Ready=True; returns it.
pub async fn wait_ready(kube: &Kube, kind: &str, ns: &str, name: &str) -> anyhow::Result<Value> {
    kube.wait_for((INFRA, kind), ns, name, WAIT, "Ready=True", |o| {
        is_true(o, "Ready")
    })
    .await
}

/// Waits until a Cluster API object (`Cluster`, `Machine`) names its infrastructure object;
/// returns that name.
async fn infrastructure_of(
    kube: &Kube,
    kind: &str,
    ns: &str,
    name: &str,
) -> anyhow::Result<String> {
    let obj = kube
        .wait_for((CAPI, kind), ns, name, WAIT, "an infrastructureRef", |o| {
            o["spec"]["infrastructureRef"]["name"].is_string()
        })
        .await?;
    Ok(obj["spec"]["infrastructureRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Waits for the Cluster's TerraformCluster (whatever its name: a ClusterClass names it) to be
/// Ready and the Cluster to reach phase Provisioned with its endpoint; returns
/// `(cluster, terraform_cluster)`.
pub async fn wait_cluster_provisioned(
    kube: &Kube,
    ns: &str,
    name: &str,
) -> anyhow::Result<(Value, Value)> {
    let tc = wait_ready(
        kube,
        "TerraformCluster",
        ns,
        &infrastructure_of(kube, "Cluster", ns, name).await?,
    )
    .await?;
    let host = tc["spec"]["controlPlaneEndpoint"]["host"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        host.ends_with(".noop.invalid"),
        "the no-op cluster module wrote endpoint host {host:?}"
    );
    let cluster = kube
        .wait_for(
            (CAPI, "Cluster"),
            ns,
            name,
            WAIT,
            "phase Provisioned with the module's endpoint",
            |o| {
                o["status"]["phase"] == "Provisioned"
                    && o["spec"]["controlPlaneEndpoint"]["host"] == host.as_str()
            },
        )
        .await?;
    Ok((cluster, tc))
}

/// Waits for a Machine's TerraformMachine Ready=True and the Machine's phase Provisioned with the
/// module's providerID; returns `(machine, terraform_machine)`.
pub async fn wait_machine_provisioned(
    kube: &Kube,
    ns: &str,
    machine: &str,
) -> anyhow::Result<(Value, Value)> {
    let tm = wait_ready(
        kube,
        "TerraformMachine",
        ns,
        &infrastructure_of(kube, "Machine", ns, machine).await?,
    )
    .await?;
    let provider_id = tm["spec"]["providerID"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        provider_id.starts_with("noop:///"),
        "the no-op machine module wrote providerID {provider_id:?}"
    );
    let m = kube
        .wait_for(
            (CAPI, "Machine"),
            ns,
            machine,
            WAIT,
            "phase Provisioned with the module's providerID",
            |o| {
                o["status"]["phase"] == "Provisioned"
                    && o["spec"]["providerID"] == provider_id.as_str()
            },
        )
        .await?;
    Ok((m, tm))
}

/// `kubectl delete cluster NAME` and waits for it to be gone; returns how long that took.
pub async fn delete_cluster(kube: &Kube, ns: &str, name: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    kube.delete(CAPI, "Cluster", ns, name).await?;
    kube.wait_gone((CAPI, "Cluster"), ns, name, WAIT).await?;
    Ok(started.elapsed())
}

/// Waits until `jobs` saw `n` successful apply Jobs of `owner` (a re-apply when `n` is 2).
pub async fn wait_applies(jobs: &JobLog, owner: &str, n: usize) -> anyhow::Result<()> {
    crate::kube_ops::eventually(
        WAIT,
        &format!("{n} successful apply Jobs of {owner}"),
        || async {
            let done = jobs
                .of_op("apply")
                .iter()
                .filter(|j| j.owner == owner && j.succeeded)
                .count();
            Ok((done >= n).then_some(()))
        },
    )
    .await
}

/// Finds `key` anywhere in a JSON document; returns its first value.
pub fn find_value(doc: &Value, key: &str) -> Option<Value> {
    match doc {
        Value::Object(map) => map
            .get(key)
            .cloned()
            .or_else(|| map.values().find_map(|v| find_value(v, key))),
        Value::Array(items) => items.iter().find_map(|v| find_value(v, key)),
        _ => None,
    }
}

/// Finds `key` anywhere in a JSON document; returns its first value when it is a string.
pub fn find_string(doc: &Value, key: &str) -> Option<String> {
    find_value(doc, key).and_then(|v| v.as_str().map(str::to_owned))
}

/// The gunzipped state document of a CAPTF object (`tfstate-default-<suffix>`).
pub async fn state_document(
    kube: &Kube,
    ns: &str,
    kind: contract::names::ObjectKind,
    name: &str,
) -> anyhow::Result<Value> {
    let secret_name = format!(
        "tfstate-default-{}",
        contract::names::state_suffix(ns, kind, name)
    );
    let secret = kube
        .get("v1", "Secret", ns, &secret_name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("state Secret {ns}/{secret_name} is missing"))?;
    state_of_secret(&secret)
}

/// The state document a single (unchunked) state Secret holds, as JSON.
pub fn state_of_secret(secret: &Value) -> anyhow::Result<Value> {
    use base64::Engine as _;
    let gz = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["tfstate"].as_str().unwrap_or_default())
        .context("decoding the state Secret")?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)?;
    Ok(serde_json::from_str(&text)?)
}

/// Checks that the machine module received the Machine's real bootstrap data: the no-op module
/// keeps `sha256(base64(value))` of what it was given in its state.
pub async fn check_bootstrap_hash(
    kube: &Kube,
    ns: &str,
    machine: &Value,
    tm_name: &str,
) -> anyhow::Result<String> {
    use base64::Engine as _;
    let secret_name = machine["spec"]["bootstrap"]["dataSecretName"]
        .as_str()
        .ok_or_else(|| {
            anyhow::anyhow!("Machine {} has no bootstrap data Secret", name_of(machine))
        })?;
    let secret = kube
        .get("v1", "Secret", ns, secret_name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("bootstrap Secret {secret_name} is missing"))?;
    // The Secret's data is base64 already: exactly what the module receives as bootstrap_data.
    let value_b64 = secret["data"]["value"].as_str().unwrap_or_default();
    let value = base64::engine::general_purpose::STANDARD.decode(value_b64)?;
    let expected = hex::encode(sha2::Sha256::digest(
        base64::engine::general_purpose::STANDARD
            .encode(&value)
            .as_bytes(),
    ));
    let state = state_document(kube, ns, contract::names::ObjectKind::Machine, tm_name).await?;
    let recorded = find_string(&state, "bootstrap_sha256")
        .ok_or_else(|| anyhow::anyhow!("the machine's state records no bootstrap_sha256"))?;
    ensure!(
        recorded == expected,
        "the module received other bootstrap data than Secret {secret_name} holds ({recorded} != {expected})"
    );
    Ok(String::from_utf8_lossy(&value)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// What CAPTF may leave behind in a namespace once every object is gone: nothing. Returns a
/// description of whatever remains.
pub async fn captf_leftovers(kube: &Kube, ns: &str) -> anyhow::Result<Vec<String>> {
    let mut left = Vec::new();
    for kind in [
        "TerraformCluster",
        "TerraformMachine",
        "TerraformMachinePool",
    ] {
        for o in kube.list(INFRA, kind, ns, "").await? {
            left.push(format!(
                "{kind} {} (finalizers {})",
                name_of(&o),
                o["metadata"]["finalizers"]
            ));
        }
    }
    for s in kube.list("v1", "Secret", ns, "").await? {
        let name = name_of(&s);
        let labels = &s["metadata"]["labels"];
        if name.starts_with("tfstate-")
            || name.starts_with("captf-")
            || labels["captf.io/managed"].is_string()
        {
            left.push(format!("Secret {name}"));
        }
    }
    for l in kube.list("coordination.k8s.io/v1", "Lease", ns, "").await? {
        left.push(format!("Lease {}", name_of(&l)));
    }
    for (av, kind) in [
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("v1", "ConfigMap"),
    ] {
        for o in kube.list(av, kind, ns, "captf.io/managed").await? {
            left.push(format!("{kind} {}", name_of(&o)));
        }
    }
    if kube
        .get("v1", "ServiceAccount", ns, "captf-runner")
        .await?
        .is_some()
    {
        left.push("ServiceAccount captf-runner".to_owned());
    }
    if kube
        .get(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            ns,
            "captf-runner",
        )
        .await?
        .is_some()
    {
        left.push("RoleBinding captf-runner".to_owned());
    }
    left.sort();
    left.dedup();
    Ok(left)
}

/// The Quick Start in namespace `ns` with identity `identity` and cluster `name`: everything up
/// to Provisioned, checked; then, unless `keep`, the delete, checked. Returns the figures.
pub async fn run(
    suite: &Suite,
    kube: &Kube,
    ns: &str,
    identity: &str,
    name: &str,
    progress: &Progress,
    keep: bool,
) -> anyhow::Result<Figures> {
    let clusterctl = flavor_clusterctl(suite, identity)?;
    run_with(&clusterctl, kube, ns, identity, name, progress, keep).await
}

/// [`run`] with the clusterctl of the flavors given (its images and identity set): for an
/// install that is not the suite's, such as `clusterctl init`'s.
pub async fn run_with(
    clusterctl: &Clusterctl,
    kube: &Kube,
    ns: &str,
    identity: &str,
    name: &str,
    progress: &Progress,
    keep: bool,
) -> anyhow::Result<Figures> {
    progress.step(&format!(
        "applying identity {identity} (templates/identity.yaml) for namespace {ns}"
    ));
    let id = apply_identity(kube, clusterctl, identity, ns).await?;
    progress.step(&format!(
        "identity {identity} Ready: {}",
        cond_cell(&id, "Ready")
    ));

    let yaml = clusterctl.generate_cluster(
        name,
        &clusterctl.template("cluster-template.yaml"),
        ns,
        1,
        0,
    )?;
    let jobs = JobLog::watch(kube, ns);
    let applied_at = Instant::now();
    let applied = kube.apply_yaml(&yaml, ns).await?;
    progress.step(&format!(
        "applied the default flavor (1 control-plane machine, 0 workers): {}",
        applied
            .iter()
            .map(|(k, n)| format!("{k}/{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    let (_, tc) = wait_cluster_provisioned(kube, ns, name).await?;
    let apply_to_cluster_provisioned = applied_at.elapsed();
    progress.step(&format!(
        "Cluster {name} Provisioned, endpoint {} from the cluster module",
        endpoint_of(&tc["spec"]["controlPlaneEndpoint"])
    ));
    progress.block(&objects_table(kube, ns).await?);

    let machine = control_plane_machine(kube, ns, name).await?;
    let machine_name = name_of(&machine);
    progress.step(&format!(
        "KubeadmControlPlane created Machine {machine_name}; waiting for its TerraformMachine"
    ));
    let (machine, tm) = wait_machine_provisioned(kube, ns, &machine_name).await?;
    let apply_to_machine_provisioned = applied_at.elapsed();
    let first_line = check_bootstrap_hash(kube, ns, &machine, &name_of(&tm)).await?;
    progress.step(&format!(
        "Machine {machine_name} Provisioned, providerID {}; the module got KubeadmConfig's bootstrap data ({first_line:?}...), its hash is in state",
        tm["spec"]["providerID"].as_str().unwrap_or_default()
    ));
    progress.block(&objects_table(kube, ns).await?);
    if keep {
        return Ok(Figures {
            apply_to_cluster_provisioned,
            apply_to_machine_provisioned,
            jobs_started: jobs.jobs().len(),
            delete: Duration::ZERO,
        });
    }

    progress.step(&format!(
        "kubectl delete cluster {name}; waiting for it to be gone"
    ));
    let delete_at = Instant::now();
    kube.delete(CAPI, "Cluster", ns, name).await?;
    kube.wait_gone((CAPI, "Cluster"), ns, name, WAIT).await?;
    let delete = delete_at.elapsed();
    progress.step(&format!(
        "Cluster {name} gone in {:.1}s",
        delete.as_secs_f64()
    ));
    check_deleted(kube, ns, &jobs, &[name_of(&tc), name_of(&tm)]).await?;
    let jobs_started = jobs.jobs().len();
    progress.step(&format!(
        "every destroy Job ran ({} of them), nothing of CAPTF's is left in {ns}; {jobs_started} Jobs in all",
        jobs.of_op("destroy").len()
    ));
    Ok(Figures {
        apply_to_cluster_provisioned,
        apply_to_machine_provisioned,
        jobs_started,
        delete,
    })
}

/// After a delete: a destroy Job succeeded for each of `objects`, and nothing of CAPTF's is left
/// in `ns` (state, inputs, creds, leases, RBAC).
pub async fn check_deleted(
    kube: &Kube,
    ns: &str,
    jobs: &JobLog,
    objects: &[String],
) -> anyhow::Result<()> {
    // The last poll of the Job log may lag the delete by half a second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for object in objects {
        let destroyed = jobs
            .of_op("destroy")
            .iter()
            .any(|j| &j.owner == object && j.succeeded);
        ensure!(
            destroyed,
            "no successful destroy Job was seen for {object}: {:?}",
            jobs.jobs()
        );
    }
    wait_no_leftovers(kube, ns).await
}

/// Waits (a minute at most) until nothing of CAPTF's is left in `ns`.
pub async fn wait_no_leftovers(kube: &Kube, ns: &str) -> anyhow::Result<()> {
    let left = crate::kube_ops::eventually(
        Duration::from_secs(60),
        "CAPTF's leftovers to go",
        || async { Ok(captf_leftovers(kube, ns).await?.is_empty().then_some(())) },
    )
    .await;
    if left.is_err() {
        bail!("left in {ns}: {:?}", captf_leftovers(kube, ns).await?);
    }
    Ok(())
}
