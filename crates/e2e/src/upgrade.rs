//! The upgrade test's releases and records (issue 31; book: Upgrading): the previous release,
//! a fixed commit of main named in `hack/previous-release` and built from its own tree with its
//! own make targets; the upgrade notes of the book, which say what an upgrade re-applies; and
//! what an upgrade must leave untouched (state, backups, durable inputs, leases, conditions).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use crate::kube_ops::{INFRA, Kube, name_of};

/// The file naming the previous release.
pub const PREVIOUS_RELEASE: &str = "hack/previous-release";

/// The book's page whose "Upgrade notes" say what each release re-applies.
pub const UPGRADING_PAGE: &str = "docs/src/upgrading.md";

/// The previous release and this checkout's version.
#[derive(Debug, Clone)]
pub struct Releases {
    /// The previous release's commit of main.
    pub commit: String,
    /// The version the previous release is released as.
    pub previous: String,
    /// The version this checkout is released as.
    pub next: String,
}

/// Reads [`PREVIOUS_RELEASE`] from this checkout.
pub fn releases() -> anyhow::Result<Releases> {
    let path = testenv::env::repo_root().join(PREVIOUS_RELEASE);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {PREVIOUS_RELEASE}"))?;
    parse_releases(&text)
}

fn parse_releases(text: &str) -> anyhow::Result<Releases> {
    let mut fields = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .with_context(|| format!("{PREVIOUS_RELEASE}: {line:?} is not key=value"))?;
        fields.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let get = |k: &str| {
        fields
            .get(k)
            .cloned()
            .with_context(|| format!("{PREVIOUS_RELEASE}: no {k}="))
    };
    let commit = get("commit")?;
    ensure!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{PREVIOUS_RELEASE}: commit={commit} is not a full commit hash"
    );
    Ok(Releases {
        commit,
        previous: get("version")?,
        next: get("next")?,
    })
}

/// The previous release's source tree: the commit exported with `git archive` into
/// `$CAPTF_CACHE/previous-release/<commit>/src` (once; a commit never changes, so its tree and
/// its own `target/` are kept for the next run, outside this checkout).
pub fn previous_tree(releases: &Releases) -> anyhow::Result<PathBuf> {
    let cache = std::env::var_os("CAPTF_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/captf")))
        .context("neither CAPTF_CACHE nor HOME is set")?;
    let dir = cache.join("previous-release").join(&releases.commit);
    let tree = dir.join("src");
    if tree.join("Makefile").is_file() {
        return Ok(tree);
    }
    let partial = dir.join("src.partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)?;
    let archive = Command::new("git")
        .args(["archive", "--format=tar", &releases.commit])
        .current_dir(testenv::env::repo_root())
        .output()
        .context("running git archive")?;
    if !archive.status.success() {
        bail!(
            "git archive {} (this clone must hold the commit {PREVIOUS_RELEASE} names): {}",
            releases.commit,
            String::from_utf8_lossy(&archive.stderr)
        );
    }
    let mut tar = Command::new("tar")
        .args(["-x", "-C"])
        .arg(&partial)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("running tar")?;
    std::io::Write::write_all(tar.stdin.as_mut().context("tar's stdin")?, &archive.stdout)?;
    drop(tar.stdin.take());
    ensure!(
        tar.wait()?.success(),
        "tar -x of the previous release failed"
    );
    std::fs::rename(&partial, &tree)?;
    Ok(tree)
}

/// The kinds whose provisioned objects the upgrade to `version` re-applies once, as the
/// Upgrading page's "Upgrade notes" say in the `- **Re-applies:**` line under `### <version>`
/// (`none`, or kinds separated by commas). No section or no such line is an error: every
/// release says what it re-applies.
pub fn announced_reapplies(page: &str, version: &str) -> anyhow::Result<Vec<String>> {
    let heading = format!("### {version}");
    let section: Vec<&str> = page
        .lines()
        .skip_while(|l| l.trim() != heading)
        .skip(1)
        .take_while(|l| !l.starts_with("## ") && !l.starts_with("### "))
        .collect();
    ensure!(
        !section.is_empty(),
        "{UPGRADING_PAGE} has no {heading:?} under its upgrade notes"
    );
    let line = section
        .iter()
        .find_map(|l| l.trim().strip_prefix("- **Re-applies:**"))
        .with_context(|| format!("{UPGRADING_PAGE}: {heading} has no `- **Re-applies:**` line"))?;
    let kinds = line.trim().trim_end_matches('.');
    if kinds.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    kinds
        .split(',')
        .map(|k| {
            let k = k.trim().trim_matches('`');
            ensure!(
                [
                    "TerraformCluster",
                    "TerraformMachine",
                    "TerraformMachinePool"
                ]
                .contains(&k),
                "{UPGRADING_PAGE}: {heading}: {k:?} is not a kind that applies"
            );
            Ok(k.to_owned())
        })
        .collect()
}

/// What an upgrade must not touch in a namespace: CAPTF's Secrets (state chunks, backups,
/// durable inputs) and Leases by resourceVersion, and each object's conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untouched {
    /// `Secret <name>` or `Lease <name>` → resourceVersion.
    pub stored: BTreeMap<String, String>,
    /// `<Kind>/<name>` → condition type → status.
    pub conditions: BTreeMap<String, BTreeMap<String, String>>,
}

/// Records [`Untouched`] of `ns`.
pub async fn untouched(kube: &Kube, ns: &str) -> anyhow::Result<Untouched> {
    let mut stored = BTreeMap::new();
    for (api_version, kind, prefixes) in [
        ("v1", "Secret", &["tfstate-", "captf-"][..]),
        (
            "coordination.k8s.io/v1",
            "Lease",
            &["captf-", "lock-tfstate-"][..],
        ),
    ] {
        for o in kube.list(api_version, kind, ns, "").await? {
            let name = name_of(&o);
            if prefixes.iter().any(|p| name.starts_with(p)) {
                let rv = o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                stored.insert(format!("{kind} {name}"), rv.to_owned());
            }
        }
    }
    let mut conditions = BTreeMap::new();
    for kind in [
        "TerraformCluster",
        "TerraformMachine",
        "TerraformMachinePool",
    ] {
        for o in kube.list(INFRA, kind, ns, "").await? {
            let by_type = o["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c["type"].as_str().unwrap_or_default().to_owned(),
                        c["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            conditions.insert(format!("{kind}/{}", name_of(&o)), by_type);
        }
    }
    Ok(Untouched { stored, conditions })
}

/// What changed between two records: each Secret or Lease written, made or deleted, and each
/// condition that was True and is no longer.
pub fn touched(before: &Untouched, after: &Untouched) -> Vec<String> {
    let mut out = Vec::new();
    for (k, rv) in &before.stored {
        match after.stored.get(k) {
            None => out.push(format!("{k} deleted")),
            Some(now) if now != rv => {
                out.push(format!("{k} written (resourceVersion {rv} -> {now})"));
            }
            Some(_) => {}
        }
    }
    for k in after
        .stored
        .keys()
        .filter(|k| !before.stored.contains_key(*k))
    {
        out.push(format!("{k} made"));
    }
    for (object, conds) in &before.conditions {
        let now = after.conditions.get(object);
        for (t, status) in conds.iter().filter(|(_, s)| s.as_str() == "True") {
            let after = now.and_then(|c| c.get(t)).map_or("gone", String::as_str);
            if after != status {
                out.push(format!("{object} {t}: True -> {after}"));
            }
        }
    }
    out
}

/// The names a re-apply of the object `kind`/`name` of `cluster` in `ns` writes: its state
/// suffix (state and chunk Secrets, backups, the backend's lock Lease, its run Lease), its
/// durable inputs Secret and its cluster's write Lease. A record entry naming one of them is the
/// re-apply's, not the upgrade's.
pub fn re_apply_writes(ns: &str, kind: &str, name: &str, cluster: &str) -> Vec<String> {
    use contract::names::{self, ObjectKind};
    let kind = match kind {
        "TerraformCluster" => ObjectKind::Cluster,
        "TerraformMachine" => ObjectKind::Machine,
        _ => ObjectKind::MachinePool,
    };
    vec![
        names::state_suffix(ns, kind, name),
        names::durable_inputs_secret_name(kind, name),
        names::cluster_lease_name(ns, cluster),
    ]
}

/// The image of the container `name` of Deployment `ns/deployment`.
pub fn container_image(deployment: &Value, name: &str) -> Option<String> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["image"].as_str())
        .map(str::to_owned)
}

/// This checkout's root `metadata.yaml` lists `version`'s `major.minor` release series.
pub fn metadata_lists(root: &Path, version: &str) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(root.join("metadata.yaml"))?;
    let doc: Value = serde_saphyr::from_str(&text)?;
    let mut parts = version.trim_start_matches('v').split('.');
    let (major, minor) = (parts.next(), parts.next());
    Ok(doc["releaseSeries"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| {
            Some(s["major"].to_string().as_str()) == major
                && Some(s["minor"].to_string().as_str()) == minor
        }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_previous_release_file_is_read_and_checked() {
        let r = parse_releases(
            "# c\ncommit=ab840b3de89b6fbc1e11fbb655fc2b5a13ede9ec\nversion=v0.1.0\nnext=v0.2.0\n",
        )
        .unwrap();
        assert_eq!((r.previous.as_str(), r.next.as_str()), ("v0.1.0", "v0.2.0"));
        assert!(parse_releases("commit=ab840b3\nversion=v0.1.0\nnext=v0.2.0").is_err());
        assert!(
            parse_releases("commit=ab840b3de89b6fbc1e11fbb655fc2b5a13ede9ec\nnext=v0.2.0").is_err()
        );
        // This checkout's file.
        let r = releases().unwrap();
        assert!(metadata_lists(&testenv::env::repo_root(), &r.next).unwrap());
        assert!(metadata_lists(&testenv::env::repo_root(), &r.previous).unwrap());
    }

    #[test]
    fn the_upgrade_notes_say_what_re_applies() {
        let page = "# Upgrading\n\n## Upgrade notes\n\n### v0.3.0\n\n- **Re-applies:** `TerraformCluster`, TerraformMachinePool.\n\n### v0.2.0\n\nFrom v0.1.0:\n\n- **Re-applies:** none.\n- Other notes.\n\n## Rollback\n";
        assert!(announced_reapplies(page, "v0.2.0").unwrap().is_empty());
        assert_eq!(
            announced_reapplies(page, "v0.3.0").unwrap(),
            ["TerraformCluster", "TerraformMachinePool"]
        );
        assert!(announced_reapplies(page, "v0.4.0").is_err());
        assert!(announced_reapplies("### v0.2.0\n\n- nothing\n", "v0.2.0").is_err());
        assert!(announced_reapplies("### v0.2.0\n- **Re-applies:** Machines\n", "v0.2.0").is_err());
        // This checkout's page names this checkout's version.
        let page = std::fs::read_to_string(testenv::env::repo_root().join(UPGRADING_PAGE)).unwrap();
        announced_reapplies(&page, &releases().unwrap().next).unwrap();
    }

    #[test]
    fn a_write_a_deletion_and_a_lost_true_condition_are_touches() {
        let rec = |rv: &str, ready: &str| Untouched {
            stored: [("Secret tfstate-x".to_owned(), rv.to_owned())].into(),
            conditions: [(
                "TerraformCluster/c".to_owned(),
                [("Ready".to_owned(), ready.to_owned())].into(),
            )]
            .into(),
        };
        assert!(touched(&rec("1", "True"), &rec("1", "True")).is_empty());
        assert_eq!(touched(&rec("1", "True"), &rec("2", "False")).len(), 2);
        let mut gone = rec("1", "True");
        gone.stored.clear();
        gone.stored.insert("Lease captf-run-x".into(), "5".into());
        let t = touched(&rec("1", "True"), &gone);
        assert!(
            t.iter().any(|l| l.ends_with("deleted")) && t.iter().any(|l| l.ends_with("made")),
            "{t:?}"
        );
    }
}
