//! The upgrade test (issue 31; the book's Upgrading page), `make e2e-upgrade`: the previous
//! release (a fixed commit of main, `hack/previous-release`) installed with `clusterctl init`,
//! clusters brought up under it, then `clusterctl upgrade apply` to this checkout's release with
//! those clusters running, against Cluster API's real controllers.
//!
//! 1. The previous release is built from its own tree (`git archive` of the commit, kept in
//!    `$CAPTF_CACHE/previous-release/<commit>`) by its own installation page's commands: images,
//!    clusterctl repository and no-op module images, into the test registry and a local
//!    repository.
//! 2. Its page's "3. Install with clusterctl" installs it with Cluster API and cert-manager.
//! 3. Under it: the default flavor with two MachineDeployment workers, and the MachinePool flavor
//!    with a pool of three (its routine membership refresh set to a day, so that the quiet window
//!    below sees only what the upgrade starts), all Ready. The default flavor's cluster also has
//!    a second MachineDeployment, `md-slow`, at no replicas, whose module sleeps during apply.
//!    Every Job is recorded. With `CAPTF_UPGRADE_RECORD=1`, everything stored in the namespace
//!    is recorded for the manager suite's upgrade check (`testenv::upgrade::stored`).
//! 4. This checkout's release is built by this page's commands as `next`, into the same local
//!    repository. `md-slow` scales to one, and once its apply Job runs, what an upgrade must not
//!    touch is recorded (state, backups, durable inputs, leases, the credential mirror, by
//!    resourceVersion; each object's conditions), and the Upgrading page's "Upgrade" runs as
//!    written: `clusterctl upgrade plan` (which must offer it) and `clusterctl upgrade apply`.
//! 5. The new manager and webhook run `next`'s images and the old pods are gone; every CRD was
//!    updated in place (same uid); every stored object still reads. The slow apply Job, started
//!    by the old manager, is still running when the new manager holds the leader lease.
//! 6. For a quiet window after the new manager took the leader lease, no Job starts, except one
//!    apply per provisioned object of the kinds the page's upgrade notes for `next` say re-apply;
//!    nothing recorded is touched (beyond those re-applies and the slow apply's own writes);
//!    conditions that were True stay True. The new manager adopts the slow apply's outcome: its
//!    machine becomes Ready with that one Job and no second one.
//! 7. Under the new release: the MachineDeployment scales up by one and back down, and both
//!    clusters are deleted with their destroy Jobs, leaving nothing.
//!
//! Figures (`e2e figures:` lines): the Jobs the upgrade started, the time `clusterctl upgrade
//! apply` took, from its start to the new manager holding the leader lease, and to the slow
//! machine Ready under the new manager.
//!
//! Not in `make test`: the previous release is built from source the first time (its tree's own
//! `target/` is kept for the next run). Needs what the install test needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use e2e::clusterctl::Clusterctl;
use e2e::install::{
    InstallEnv, mirror_images, page_blocks_of, run_script, write_local_repositories,
};
use e2e::installed::{wait_available, wait_webhooks_trusted};
use e2e::kube_ops::{CAPI, INFRA, Kube, eventually, name_of};
use e2e::quickstart::{self, WAIT};
use e2e::stand_in;
use e2e::suite::JobLog;
use e2e::upgrade::{self, Releases};
use serde_json::json;

const INSTALL_PAGE: &str = "docs/src/installation.md";
const DEPLOYED: &str = "deployed";
const POOLED: &str = "pooled";
/// The MachineDeployment whose apply runs through the upgrade (`<DEPLOYED>-md-slow`).
const SLOW_GROUP: &str = "md-slow";
/// How long its module sleeps during apply: past the upgrade apply, the rollout and the new
/// manager's leader election (about 15 s from `clusterctl upgrade apply` here), with room for a
/// slow machine. The test fails, saying so, if the Job ends before the new manager leads.
const SLOW_APPLY: Duration = Duration::from_secs(120);

/// How long the new manager runs with no Job allowed to start (the manager reconciles every
/// object once its caches are filled, within seconds of taking the lease).
const QUIET: Duration = Duration::from_secs(90);

/// The images of the release `version` as its install page names them.
fn release_images(registry: &str, version: &str) -> [String; 3] {
    ["", "-webhook", "-runner"]
        .map(|s| format!("{registry}/you/cluster-api-provider-terraform{s}:{version}"))
}

/// Step 1: the previous release built from its own tree by its own page's commands.
fn build_previous(
    r: &Releases,
    registry: &str,
    home: &std::path::Path,
    vars: &[(String, String)],
) -> anyhow::Result<std::path::PathBuf> {
    let tree = upgrade::previous_tree(r)?;
    let sections = [
        "1. Build and push the images",
        "2. Render the provider repository",
        "The no-op module images",
    ];
    let mut script = page_blocks_of(&tree.join(INSTALL_PAGE), &sections, "sh")?;
    // The pool flavor's module image, which the page's example leaves out.
    let version = &r.previous;
    script.push_str(
        "make noop-images-push NOOP=machinepool NOOP_REGISTRY=registry.example.com/you VERSION=",
    );
    script.push_str(version);
    script.push('\n');
    // Its own build output, never this checkout's (make exports CARGO_TARGET_DIR).
    let mut vars = vars.to_vec();
    vars.push((
        "CARGO_TARGET_DIR".to_owned(),
        tree.join("target").display().to_string(),
    ));
    run_script(&sections, &script, registry, home, &tree, &vars)?;
    Ok(tree)
}

/// Step 4: this checkout's release, as `next`, into the same local repository.
fn build_next(
    r: &Releases,
    registry: &str,
    home: &std::path::Path,
    vars: &[(String, String)],
) -> anyhow::Result<()> {
    let root = testenv::env::repo_root();
    let sections = [
        "1. Build and push the images",
        "2. Render the provider repository",
    ];
    let script =
        page_blocks_of(&root.join(INSTALL_PAGE), &sections, "sh")?.replace(&r.previous, &r.next);
    run_script(&sections, &script, registry, home, &root, vars)?;
    Ok(())
}

/// The slow module: the previous release's no-op machine module (from its `tree`) with a
/// `terraform_data` whose `local-exec` sleeps `var.sleep_seconds` during apply, on the test
/// binaries' OpenTofu with the host's `sh` and `sleep`. Returns its reference.
async fn push_slow_machine_image(
    registry: &str,
    tree: &Path,
    version: &str,
) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let noop = tree.join("modules/noop/machine");
    for f in std::fs::read_dir(&noop).with_context(|| format!("reading {}", noop.display()))? {
        let f = f?;
        std::fs::copy(f.path(), dir.path().join(f.file_name()))?;
    }
    std::fs::write(
        dir.path().join("slow.tf"),
        testenv::image::SLEEP_DURING_APPLY_TF,
    )?;
    let mut image = testenv::image::ModuleImage::new(dir.path(), "machine");
    image.host_tools = vec!["/bin/sh".into(), "/bin/sleep".into()];
    testenv::image::push_module_image(registry, "you/slow-machine", version, &image).await?;
    Ok(format!("{registry}/you/slow-machine:{version}"))
}

/// The MachineDeployment `<DEPLOYED>-md-slow` of the default flavor `yaml`: md-0's
/// MachineDeployment and TerraformMachineTemplate renamed, at no replicas, its machines on the
/// slow `image` sleeping [`SLOW_APPLY`] during apply, with md-0's stand-in bootstrap `secret`.
fn slow_machine_deployment(yaml: &str, secret: &str, image: &str) -> anyhow::Result<String> {
    let md0 = format!("{DEPLOYED}-md-0");
    let slow = format!("{DEPLOYED}-{SLOW_GROUP}");
    stand_in::rewrite(
        yaml,
        |d| {
            (d["kind"] == "MachineDeployment" || d["kind"] == "TerraformMachineTemplate")
                && d["metadata"]["name"] == md0.as_str()
        },
        |doc| {
            doc["metadata"]["name"] = json!(slow);
            if doc["kind"] == "MachineDeployment" {
                doc["spec"]["replicas"] = json!(0);
                let spec = &mut doc["spec"]["template"]["spec"];
                spec["bootstrap"] = json!({"dataSecretName": secret});
                spec["infrastructureRef"]["name"] = json!(slow);
            } else {
                let spec = &mut doc["spec"]["template"]["spec"];
                spec["source"]["image"] = json!(image);
                spec["variables"] = json!({"sleep_seconds": SLOW_APPLY.as_secs()});
            }
        },
    )
}

/// Step 3: the two clusters under the previous release, every object Ready.
async fn bring_up(
    kube: &Kube,
    clusterctl: &Clusterctl,
    ns: &str,
    slow_image: &str,
) -> anyhow::Result<()> {
    quickstart::apply_identity(kube, clusterctl, ns, ns).await?;
    let secret = stand_in::bootstrap_secret(kube, ns, DEPLOYED, "md-0").await?;
    let yaml = clusterctl.generate_cluster(
        DEPLOYED,
        &clusterctl.template("cluster-template.yaml"),
        ns,
        1,
        0,
    )?;
    kube.apply_yaml(&stand_in::machine_deployment(&yaml, &secret, 2)?, ns)
        .await?;
    kube.apply_yaml(&slow_machine_deployment(&yaml, &secret, slow_image)?, ns)
        .await?;
    let pool_secret = stand_in::bootstrap_secret(kube, ns, POOLED, "mp-0").await?;
    let yaml = clusterctl.generate_cluster(
        POOLED,
        &clusterctl.template("cluster-template-machinepool.yaml"),
        ns,
        1,
        3,
    )?;
    kube.apply_yaml(
        &quiet_pool(&stand_in::machine_pool(&yaml, POOLED, &pool_secret)?)?,
        ns,
    )
    .await?;
    for cluster in [DEPLOYED, POOLED] {
        quickstart::wait_cluster_provisioned(kube, ns, cluster).await?;
        let cp = quickstart::control_plane_machine(kube, ns, cluster).await?;
        quickstart::wait_machine_provisioned(kube, ns, &name_of(&cp)).await?;
    }
    stand_in::provisioned(kube, ns, DEPLOYED, 2).await?;
    quickstart::wait_ready(kube, "TerraformMachinePool", ns, &format!("{POOLED}-mp-0")).await?;
    for kind in [
        "TerraformCluster",
        "TerraformMachine",
        "TerraformMachinePool",
    ] {
        for o in kube.list(INFRA, kind, ns, "").await? {
            quickstart::wait_ready(kube, kind, ns, &name_of(&o)).await?;
        }
    }
    Ok(())
}

/// The apply running through the upgrade: `md-slow` scaled to one; returns its Machine, its
/// TerraformMachine and its apply Job once the Job's pod runs.
async fn start_slow_apply(
    kube: &Kube,
    ns: &str,
    jobs: &JobLog,
) -> anyhow::Result<(String, String, String)> {
    let md = format!("{DEPLOYED}-{SLOW_GROUP}");
    kube.merge(
        CAPI,
        "MachineDeployment",
        ns,
        &md,
        json!({"spec": {"replicas": 1}}),
    )
    .await?;
    let (machine, tm) = eventually(
        WAIT,
        "the slow Machine and its TerraformMachine",
        || async {
            let selector = format!("cluster.x-k8s.io/deployment-name={md}");
            let ms = kube.list(CAPI, "Machine", ns, &selector).await?;
            Ok(ms.first().and_then(|m| {
                let tm = m["spec"]["infrastructureRef"]["name"].as_str()?;
                Some((name_of(m), tm.to_owned()))
            }))
        },
    )
    .await?;
    let job = eventually(WAIT, "the slow apply Job's pod running", || async {
        let Some(job) = jobs
            .of_op("apply")
            .into_iter()
            .find(|j| j.owner == tm)
            .map(|j| j.name)
        else {
            return Ok(None);
        };
        let selector = format!("batch.kubernetes.io/job-name={job}");
        let pods = kube.list("v1", "Pod", ns, &selector).await?;
        Ok(pods
            .iter()
            .any(|p| p["status"]["phase"] == "Running")
            .then_some(job))
    })
    .await?;
    Ok((machine, tm, job))
}

/// Step 5's last check: the slow apply Job has not finished when the new manager leads, so its
/// outcome is the new manager's to read.
async fn check_still_running(kube: &Kube, ns: &str, job: &str) -> anyhow::Result<()> {
    let j = kube
        .get("batch/v1", "Job", ns, job)
        .await?
        .with_context(|| format!("the slow apply Job {job} is gone"))?;
    let ended = ["succeeded", "failed"]
        .iter()
        .any(|k| j["status"][k].as_i64().unwrap_or(0) > 0);
    ensure!(
        !ended,
        "the slow apply Job {job} ended before the new manager led, so nothing was left to adopt: raise SLOW_APPLY ({SLOW_APPLY:?}) for this machine"
    );
    Ok(())
}

/// Step 6's adoption: the slow machine Ready under the new manager, with the one apply Job the
/// old manager started.
async fn check_adopted(
    kube: &Kube,
    ns: &str,
    jobs: &JobLog,
    (machine, tm, job): &(String, String, String),
) -> anyhow::Result<()> {
    quickstart::wait_machine_provisioned(kube, ns, machine).await?;
    let applies: Vec<_> = jobs
        .of_op("apply")
        .into_iter()
        .filter(|j| &j.owner == tm)
        .collect();
    ensure!(
        applies.len() == 1 && &applies[0].name == job && applies[0].succeeded,
        "the slow machine {tm} was not finished by its one apply Job {job}: {applies:#?}"
    );
    Ok(())
}

/// The pool's membership refresh set to a day: a converged pool otherwise refreshes every
/// minute under either release, and the quiet window would see those routine Jobs.
fn quiet_pool(yaml: &str) -> anyhow::Result<String> {
    stand_in::rewrite(
        yaml,
        |_| true,
        |doc| {
            if doc["kind"] == "TerraformMachinePool" {
                doc["spec"]["membershipRefreshIntervalSeconds"] = json!(86_400);
            }
        },
    )
}

/// The holder of the manager's leader-election Lease.
async fn leader(kube: &Kube) -> anyhow::Result<Option<String>> {
    let lease = kube
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "captf-system",
            "controller-leader-election-captf",
        )
        .await?;
    Ok(lease.and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned)))
}

/// Step 5: `next`'s manager and webhook run, the old pods are gone, the CRDs were updated in
/// place and every stored object reads. Returns when the new manager holds the leader lease.
async fn check_upgraded(
    kube: &Kube,
    registry: &str,
    r: &Releases,
    crds_before: &[(String, String, String)],
) -> anyhow::Result<()> {
    let [manager, webhook, _] = release_images(registry, &r.next);
    for (deployment, container, image) in [
        ("captf-controller-manager", "manager", &manager),
        ("captf-webhook", "webhook", &webhook),
    ] {
        let d = eventually(WAIT, &format!("{deployment} rolled out"), || async {
            let d = wait_available(kube, "captf-system", deployment).await?;
            let done = d["status"]["updatedReplicas"] == d["spec"]["replicas"]
                && d["status"]["replicas"] == d["spec"]["replicas"]
                && upgrade::container_image(&d, container).as_deref() == Some(image.as_str());
            Ok(done.then_some(d))
        })
        .await?;
        ensure!(upgrade::container_image(&d, container).as_ref() == Some(image));
    }
    let old = release_images(registry, &r.previous);
    eventually(WAIT, "the old pods gone", || async {
        let pods = kube.list("v1", "Pod", "captf-system", "").await?;
        let left: Vec<String> = pods
            .iter()
            .filter(|p| {
                p["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| old.iter().any(|o| c["image"] == o.as_str()))
            })
            .map(name_of)
            .collect();
        Ok(left.is_empty().then_some(()))
    })
    .await?;
    for (name, uid, rv) in crds_before {
        let crd = kube
            .get(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                name,
            )
            .await?
            .with_context(|| format!("CRD {name} is gone"))?;
        ensure!(
            crd["metadata"]["uid"] == uid.as_str(),
            "CRD {name} was recreated, not updated in place"
        );
        ensure!(
            crd["metadata"]["resourceVersion"] != rv.as_str(),
            "CRD {name} was not updated"
        );
    }
    Ok(())
}

async fn crds(kube: &Kube) -> anyhow::Result<Vec<(String, String, String)>> {
    Ok(kube
        .list(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "cluster.x-k8s.io/provider=infrastructure-terraform",
        )
        .await?
        .iter()
        .map(|c| {
            (
                name_of(c),
                c["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                c["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect())
}

/// The provisioned objects of `kinds` in `ns` (the applies the upgrade notes announce), by
/// name, with the names each re-apply writes.
async fn announced_objects(
    kube: &Kube,
    ns: &str,
    kinds: &[String],
) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let mut out = Vec::new();
    for kind in kinds {
        for o in kube.list(INFRA, kind, ns, "").await? {
            if o["status"]["initialization"]["provisioned"] == json!(true) {
                let cluster = o["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"]
                    .as_str()
                    .unwrap_or_default();
                let name = name_of(&o);
                let writes = upgrade::re_apply_writes(ns, kind, &name, cluster);
                out.push((name, writes));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Step 6's judgement: the Jobs started since `jobs_before` are one successful apply of each
/// object the upgrade notes of `next` announce, and nothing recorded in `before` was touched
/// beyond those re-applies' writes and the slow apply's (its object's, and the per-run Secret
/// of its Job, which the new manager deletes when the Job ends). Returns how many Jobs the
/// upgrade started.
#[allow(clippy::too_many_arguments)]
async fn check_only_announced(
    kube: &Kube,
    ns: &str,
    next: &str,
    jobs: &JobLog,
    jobs_before: &[String],
    announced_writes: &[(String, Vec<String>)],
    before: &upgrade::Untouched,
    (_, slow_tm, slow_job): &(String, String, String),
) -> anyhow::Result<usize> {
    let started_by_upgrade: Vec<_> = jobs
        .jobs()
        .into_iter()
        .filter(|j| !jobs_before.contains(&j.name))
        .collect();
    let announced: Vec<String> = announced_writes.iter().map(|(n, _)| n.clone()).collect();
    let mut reapplied: Vec<String> = started_by_upgrade
        .iter()
        .filter(|j| j.op == "apply")
        .map(|j| j.owner.clone())
        .collect();
    reapplied.sort();
    ensure!(
        started_by_upgrade.iter().all(|j| j.op == "apply") && reapplied == announced,
        "the upgrade started Jobs the upgrade notes of {next} do not announce (they announce one apply of each of {announced:?}): {started_by_upgrade:#?}\nJobs before the upgrade: {jobs_before:#?}"
    );
    for name in &announced {
        ensure!(
            started_by_upgrade
                .iter()
                .any(|j| &j.owner == name && j.succeeded),
            "the announced re-apply of {name} did not succeed"
        );
    }
    let after = upgrade::untouched(&kube.client, ns).await?;
    let mut slow_writes = upgrade::re_apply_writes(ns, "TerraformMachine", slow_tm, DEPLOYED);
    slow_writes.push(format!(
        "Secret {} ",
        contract::names::run_secret_name(slow_job)
    ));
    let touched: Vec<String> = upgrade::touched(before, &after)
        .into_iter()
        .filter(|t| {
            !announced_writes
                .iter()
                .flat_map(|(_, writes)| writes)
                .chain(&slow_writes)
                .any(|w| t.contains(w.as_str()))
        })
        .collect();
    ensure!(touched.is_empty(), "the upgrade touched: {touched:#?}");
    Ok(started_by_upgrade.len())
}

/// Step 7: scaling and deleting under the new release.
async fn scale_and_delete(kube: &Kube, ns: &str, jobs: &JobLog) -> anyhow::Result<()> {
    let two = stand_in::provisioned(kube, ns, DEPLOYED, 2).await?;
    stand_in::scale(kube, ns, DEPLOYED, 3).await?;
    let three = stand_in::provisioned(kube, ns, DEPLOYED, 3).await?;
    ensure!(
        two.is_subset(&three),
        "scaling up replaced machines: {two:?} -> {three:?}"
    );
    stand_in::scale(kube, ns, DEPLOYED, 2).await?;
    let after = stand_in::provisioned(kube, ns, DEPLOYED, 2).await?;
    let removed: Vec<&String> = three.difference(&after).collect();
    ensure!(removed.len() == 1, "{three:?} -> {after:?}");
    kube.wait_gone((INFRA, "TerraformMachine"), ns, removed[0], WAIT)
        .await?;
    for cluster in [DEPLOYED, POOLED] {
        kube.delete(CAPI, "Cluster", ns, cluster).await?;
    }
    for cluster in [DEPLOYED, POOLED] {
        kube.wait_gone((CAPI, "Cluster"), ns, cluster, WAIT).await?;
    }
    ensure!(
        jobs.of_op("destroy").iter().all(|j| j.succeeded),
        "a destroy Job failed: {:#?}",
        jobs.of_op("destroy")
    );
    quickstart::wait_no_leftovers(kube, ns).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make e2e-upgrade: builds the previous release from source the first time"]
async fn clusterctl_upgrade_from_the_previous_release_re_applies_only_what_the_notes_announce()
-> anyhow::Result<()> {
    let started = Instant::now();
    let r = upgrade::releases()?;
    let root = testenv::env::repo_root();
    ensure!(
        upgrade::metadata_lists(&root, &r.next)?,
        "metadata.yaml lists no release series for {}",
        r.next
    );
    let notes = std::fs::read_to_string(root.join(upgrade::UPGRADING_PAGE))?;
    let reapplied_kinds = upgrade::announced_reapplies(&notes, &r.next)?;

    let InstallEnv {
        env,
        registry,
        kube,
        tmp,
        vars,
    } = InstallEnv::start("captf-upgrade").await?;

    // 1-2: the previous release, installed as its page says.
    let tree = build_previous(&r, &registry, tmp.path(), &vars)?;
    write_local_repositories(&tmp.path().join("local-repository"))?;
    mirror_images(&registry).await?;
    let install = page_blocks_of(
        &tree.join(INSTALL_PAGE),
        &["3. Install with clusterctl"],
        "sh",
    )?;
    run_script(
        &["3. Install with clusterctl"],
        &install,
        &registry,
        tmp.path(),
        tmp.path(),
        &vars,
    )?;
    let ns = env.namespace("upgrade").await?;
    wait_webhooks_trusted(&kube, &ns).await?;
    wait_available(&kube, "captf-system", "captf-controller-manager").await?;

    // 3: two clusters under it.
    let images = e2e::suite::Images {
        runner: release_images(&registry, &r.previous)[2].clone(),
        cluster: format!("{registry}/you/noop-cluster:{}-terraform", r.previous),
        machine: format!("{registry}/you/noop-machine:{}-terraform", r.previous),
        machinepool: format!("{registry}/you/noop-machinepool:{}-terraform", r.previous),
    };
    let clusterctl = quickstart::flavor_clusterctl_in(&tmp.path().join("flavors"), &images, &ns)?
        .templates_from(&tree.join("templates"));
    let slow_image = push_slow_machine_image(&registry, &tree, &r.previous).await?;
    let jobs = JobLog::watch(&kube, &ns);
    bring_up(&kube, &clusterctl, &ns, &slow_image).await?;
    let jobs_before: Vec<String> = jobs.jobs().iter().map(|j| j.name.clone()).collect();
    println!("Jobs under {}: {jobs_before:?}", r.previous);
    if std::env::var_os("CAPTF_UPGRADE_RECORD").is_some() {
        let path = upgrade::stored::path(&r.previous);
        upgrade::stored::record(&kube.client, &ns, &r.previous)
            .await?
            .save(&path)?;
        println!(
            "recorded what {} stored into {}",
            r.previous,
            path.display()
        );
    }
    let crds_before = crds(&kube).await?;
    ensure!(crds_before.len() == 7, "CAPTF's CRDs: {crds_before:?}");
    let old_leader = leader(&kube).await?;

    // 4: the new release, and the Upgrading page's commands.
    build_next(&r, &registry, tmp.path(), &vars)?;
    let upgrade_page = root.join(upgrade::UPGRADING_PAGE);
    let plan = page_blocks_of(&upgrade_page, &["Upgrade"], "sh")?;
    let slow = start_slow_apply(&kube, &ns, &jobs).await?;
    println!("the slow apply {} of {} runs", slow.2, slow.1);
    let jobs_before: Vec<String> = jobs.jobs().iter().map(|j| j.name.clone()).collect();
    // Recorded once the slow machine has joined its identity's credential mirror (a new object's
    // owner reference on it) and its Job runs: what the slow apply writes from here on is its own.
    let before = upgrade::untouched(&kube.client, &ns).await?;
    let applied_at = Instant::now();
    let out = run_script(
        &["Upgrade"],
        &plan,
        &registry,
        tmp.path(),
        tmp.path(),
        &vars,
    )?;
    let apply = applied_at.elapsed();
    ensure!(
        out.lines()
            .any(|l| l.contains("terraform") && l.contains(&r.next)),
        "clusterctl upgrade plan does not offer {}:\n{out}",
        r.next
    );

    // 5: the new release runs.
    check_upgraded(&kube, &registry, &r, &crds_before).await?;
    let new_leader = eventually(WAIT, "the new manager leading", || async {
        let now = leader(&kube).await?;
        Ok(now.filter(|l| Some(l) != old_leader.as_ref()))
    })
    .await?;
    let leading = applied_at.elapsed();
    check_still_running(&kube, &ns, &slow.2).await?;
    for kind in [
        "TerraformCluster",
        "TerraformMachine",
        "TerraformMachinePool",
    ] {
        kube.list(INFRA, kind, &ns, "")
            .await
            .with_context(|| format!("reading the stored {kind}s with the new release"))?;
    }

    // 6: the quiet window.
    let announced_writes = announced_objects(&kube, &ns, &reapplied_kinds).await?;
    let announced: Vec<String> = announced_writes.iter().map(|(n, _)| n.clone()).collect();
    tokio::time::sleep(QUIET).await;
    check_adopted(&kube, &ns, &jobs, &slow).await?;
    let slow_ready = applied_at.elapsed();
    let started_by_upgrade = check_only_announced(
        &kube,
        &ns,
        &r.next,
        &jobs,
        &jobs_before,
        &announced_writes,
        &before,
        &slow,
    )
    .await?;

    // 7: scaling and deleting under the new release.
    scale_and_delete(&kube, &ns, &jobs).await?;
    println!(
        "e2e figures: upgrade {} -> {}: {} Jobs started by the upgrade ({} announced), clusterctl upgrade apply {:.1}s, new manager leading {:.1}s after it started ({new_leader}), the apply running through the upgrade adopted with no second Job and its machine Ready {:.1}s after it started (module sleeps {}s), whole test {:.1}s",
        r.previous,
        r.next,
        started_by_upgrade,
        announced.len(),
        apply.as_secs_f64(),
        leading.as_secs_f64(),
        slow_ready.as_secs_f64(),
        SLOW_APPLY.as_secs(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
