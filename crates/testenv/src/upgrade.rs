//! The previous release and what an upgrade from it must keep (issue 31; book: Upgrading).
//!
//! - `hack/previous-release` names the previous release, a fixed commit of main, and the version
//!   this checkout is released as; [`releases`] reads it.
//! - The Upgrading page's upgrade notes say what each release re-applies
//!   ([`announced_reapplies`]).
//! - [`Untouched`] is what an upgrade must leave alone in a namespace (state, backups, durable
//!   inputs, leases, True conditions), and [`touched`] what changed.
//! - [`stored`] records the previous release's stored objects (`make e2e-upgrade` with
//!   `CAPTF_UPGRADE_RECORD=1`) and replays them into a test environment, where the manager suite
//!   checks that HEAD's manager starts no Job the upgrade notes do not announce.

pub mod stored;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, ensure};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

/// CAPTF's API group and version.
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

/// The kinds that apply (a Job per object), in the order their objects are reported.
pub const APPLYING_KINDS: [&str; 3] = [
    "TerraformCluster",
    "TerraformMachine",
    "TerraformMachinePool",
];

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
    let path = crate::env::repo_root().join(PREVIOUS_RELEASE);
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
pub async fn untouched(client: &Client, ns: &str) -> anyhow::Result<Untouched> {
    let mut stored = BTreeMap::new();
    for (api_version, kind, prefixes) in [
        ("v1", "Secret", &["tfstate-", "captf-"][..]),
        (
            "coordination.k8s.io/v1",
            "Lease",
            &["captf-", "lock-tfstate-"][..],
        ),
    ] {
        for o in list(client, api_version, kind, ns).await? {
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
        for o in list(client, INFRA, kind, ns).await? {
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

/// Every object of `api_version` `kind` in `ns` (all namespaces when empty), as JSON.
pub async fn list(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
) -> anyhow::Result<Vec<Value>> {
    let found = resource(client, api_version, kind).await?;
    let api = api_in(client, &found, ns);
    let items = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {kind} in {ns:?}"))?
        .items;
    items
        .into_iter()
        .map(|o| serde_json::to_value(o).context("an object as JSON"))
        .collect()
}

/// The API resource and capabilities of `api_version` `kind`, by discovery.
pub(crate) async fn resource(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> anyhow::Result<(
    kube::discovery::ApiResource,
    kube::discovery::ApiCapabilities,
)> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {api_version} {kind}"))
}

/// The API of a discovered kind, in `ns` when it is namespaced and `ns` is not empty.
pub(crate) fn api_in(
    client: &Client,
    (ar, caps): &(
        kube::discovery::ApiResource,
        kube::discovery::ApiCapabilities,
    ),
    ns: &str,
) -> Api<DynamicObject> {
    match caps.scope {
        kube::discovery::Scope::Namespaced if !ns.is_empty() => {
            Api::namespaced_with(client.clone(), ns, ar)
        }
        _ => Api::all_with(client.clone(), ar),
    }
}

/// `metadata.name` of an object as JSON.
pub fn name_of(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
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
        assert!(metadata_lists(&crate::env::repo_root(), &r.next).unwrap());
        assert!(metadata_lists(&crate::env::repo_root(), &r.previous).unwrap());
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
        let page = std::fs::read_to_string(crate::env::repo_root().join(UPGRADING_PAGE)).unwrap();
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
