//! The SPDX 2.3 SBOM of one binary, from `cargo metadata` (see the crate documentation).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

/// What the document describes: the binary and where it came from.
#[derive(Debug, Clone)]
pub struct Binary<'a> {
    /// The workspace package that builds the binary (`manager`).
    pub package: &'a str,
    /// The document's name, for example `manager-linux-arm64`.
    pub name: &'a str,
    /// The release version the binary was built as (`v0.1.0`).
    pub version: &'a str,
    /// The binary's contents, for its SHA-256 checksum.
    pub contents: &'a [u8],
    /// The document's creation time, RFC 3339 in UTC (the release commit's time, so that the same
    /// commit gives the same document).
    pub created: &'a str,
}

/// One crate of the resolve graph.
#[derive(Debug)]
struct Crate<'a> {
    name: &'a str,
    version: &'a str,
    license: Option<&'a str>,
    source: Option<&'a str>,
    proc_macro: bool,
}

fn crates(metadata: &Value) -> anyhow::Result<BTreeMap<&str, Crate<'_>>> {
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?;
    let mut out = BTreeMap::new();
    for p in packages {
        let id = p["id"]
            .as_str()
            .context("cargo metadata: a package without id")?;
        let proc_macro = p["targets"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "proc-macro"))
            })
        });
        out.insert(
            id,
            Crate {
                name: p["name"]
                    .as_str()
                    .context("cargo metadata: a package without name")?,
                version: p["version"].as_str().unwrap_or_default(),
                license: p["license"].as_str(),
                source: p["source"].as_str(),
                proc_macro,
            },
        );
    }
    Ok(out)
}

/// Whether a resolve edge is a normal (linked) dependency for the platform metadata was filtered to.
fn is_normal(dep: &Value) -> bool {
    dep["dep_kinds"]
        .as_array()
        .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
}

/// A dependency graph by package id: the crates and the edges between them.
struct Graph<'a> {
    crates: BTreeSet<&'a str>,
    edges: BTreeSet<(&'a str, &'a str)>,
}

/// The crates linked into the binary of `root`, and the normal edges between them, by package id.
fn linked<'a>(
    metadata: &'a Value,
    root: &'a str,
    crates: &BTreeMap<&'a str, Crate<'a>>,
) -> anyhow::Result<Graph<'a>> {
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata: no resolve graph (run it without --no-deps)")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let mut seen = BTreeSet::from([root]);
    let mut edges = BTreeSet::new();
    let mut queue = VecDeque::from([root]);
    while let Some(id) = queue.pop_front() {
        let Some(node) = nodes.get(id) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let Some(to) = dep["pkg"].as_str() else {
                continue;
            };
            if !is_normal(dep) || crates.get(to).is_none_or(|c| c.proc_macro) {
                continue;
            }
            edges.insert((id, to));
            if seen.insert(to) {
                queue.push_back(to);
            }
        }
    }
    Ok(Graph {
        crates: seen,
        edges,
    })
}

/// An SPDX identifier for a crate: letters, digits, `.` and `-` only.
fn spdx_id(c: &Crate<'_>) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() || ch == '.' {
                    ch
                } else {
                    '-'
                }
            })
            .collect::<String>()
    };
    format!("SPDXRef-Package-{}-{}", clean(c.name), clean(c.version))
}

/// The SPDX package of a crate.
fn package(c: &Crate<'_>) -> Value {
    let registry = c
        .source
        .is_some_and(|s| s.starts_with("registry+https://github.com/rust-lang/crates.io-index"));
    let mut p = json!({
        "name": c.name,
        "SPDXID": spdx_id(c),
        "versionInfo": c.version,
        "downloadLocation": if registry {
            format!("https://crates.io/api/v1/crates/{}/{}/download", c.name, c.version)
        } else {
            "NOASSERTION".to_owned()
        },
        "filesAnalyzed": false,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": c.license.map_or("NOASSERTION", |l| l),
        "copyrightText": "NOASSERTION",
    });
    if registry {
        p["externalRefs"] = json!([{
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": format!("pkg:cargo/{}@{}", c.name, c.version),
        }]);
    }
    p
}

/// The SPDX package of the binary itself: its crate's, with the release version and the binary's
/// checksum.
fn application(c: &Crate<'_>, version: &str, sha256: &str) -> Value {
    let mut p = package(c);
    p["versionInfo"] = json!(version);
    p["checksums"] = json!([{ "algorithm": "SHA256", "checksumValue": sha256 }]);
    p["primaryPackagePurpose"] = json!("APPLICATION");
    p
}

/// The SPDX 2.3 JSON document of `binary`, from `cargo metadata --format-version 1
/// --filter-platform TARGET` output. The binary's package must be a workspace member.
pub fn spdx(metadata: &Value, binary: &Binary<'_>) -> anyhow::Result<Value> {
    let crates = crates(metadata)?;
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .context("cargo metadata: no workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let roots: Vec<&str> = members
        .iter()
        .copied()
        .filter(|id| crates.get(id).is_some_and(|c| c.name == binary.package))
        .collect();
    let [root] = roots.as_slice() else {
        bail!(
            "no workspace package {:?} in the cargo metadata",
            binary.package
        );
    };
    let Graph {
        crates: linked,
        edges,
    } = linked(metadata, root, &crates)?;
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(binary.contents));
    let id = |pid: &str| spdx_id(&crates[pid]);
    let mut packages = vec![application(&crates[root], binary.version, &sha256)];
    packages.extend(
        linked
            .iter()
            .filter(|pid| *pid != root)
            .map(|pid| package(&crates[pid])),
    );
    let mut relationships = vec![json!({
        "spdxElementId": "SPDXRef-DOCUMENT",
        "relationshipType": "DESCRIBES",
        "relatedSpdxElement": id(root),
    })];
    relationships.extend(edges.iter().map(|(from, to)| {
        json!({
            "spdxElementId": id(from),
            "relationshipType": "DEPENDS_ON",
            "relatedSpdxElement": id(to),
        })
    }));
    Ok(json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": binary.name,
        "documentNamespace": format!(
            "https://github.com/captf-io/cluster-api-provider-terraform/sbom/{}-{}-{sha256}",
            binary.name, binary.version
        ),
        "creationInfo": {
            "created": binary.created,
            "creators": [format!("Tool: captf-sbom-{}", env!("CARGO_PKG_VERSION"))],
        },
        "documentDescribes": [id(root)],
        "packages": packages,
        "relationships": relationships,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

    fn pkg(id: &str, kind: &str, source: Option<&str>) -> Value {
        json!({"id": id, "name": id, "version": "1.0.0", "license": "MIT", "source": source,
               "targets": [{"kind": [kind]}]})
    }

    fn dep(pkg: &str, kinds: &[Option<&str>]) -> Value {
        let kinds: Vec<Value> = kinds
            .iter()
            .map(|k| json!({"kind": k, "target": null}))
            .collect();
        json!({"pkg": pkg, "dep_kinds": kinds})
    }

    /// manager → a (normal), → b (dev only), → serde (normal and build); a → c (build only),
    /// → derive (proc-macro) → syn; other → d (another member's crate).
    fn metadata() -> Value {
        json!({
            "packages": [
                pkg("manager", "bin", None),
                pkg("a", "lib", Some(CRATES_IO)),
                pkg("b", "lib", Some(CRATES_IO)),
                pkg("c", "lib", Some(CRATES_IO)),
                pkg("serde", "lib", Some(CRATES_IO)),
                pkg("derive", "proc-macro", Some(CRATES_IO)),
                pkg("syn", "lib", Some(CRATES_IO)),
                pkg("other", "bin", None),
                pkg("d", "lib", Some(CRATES_IO)),
            ],
            "workspace_members": ["manager", "other"],
            "resolve": {"nodes": [
                {"id": "manager", "deps": [dep("a", &[None]), dep("b", &[Some("dev")]),
                                            dep("serde", &[None, Some("build")])]},
                {"id": "a", "deps": [dep("c", &[Some("build")]), dep("derive", &[None])]},
                {"id": "derive", "deps": [dep("syn", &[None])]},
                {"id": "other", "deps": [dep("d", &[None])]},
                {"id": "b", "deps": []}, {"id": "c", "deps": []}, {"id": "serde", "deps": []},
                {"id": "syn", "deps": []}, {"id": "d", "deps": []},
            ]},
        })
    }

    fn binary(contents: &[u8]) -> Binary<'_> {
        Binary {
            package: "manager",
            name: "manager-linux-arm64",
            version: "v0.1.0",
            contents,
            created: "2026-12-05T00:00:00Z",
        }
    }

    #[test]
    fn the_sbom_lists_the_linked_crates_only() {
        let doc = spdx(&metadata(), &binary(b"\x7fELF")).unwrap();
        let names: BTreeSet<&str> = doc["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, BTreeSet::from(["manager", "a", "serde"]));
        let root = &doc["packages"][0];
        assert_eq!(root["versionInfo"], "v0.1.0");
        assert_eq!(root["primaryPackagePurpose"], "APPLICATION");
        assert_eq!(
            root["checksums"][0]["checksumValue"],
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"\x7fELF"))
        );
        let a = doc["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "a")
            .unwrap();
        assert_eq!(
            a["externalRefs"][0]["referenceLocator"],
            "pkg:cargo/a@1.0.0"
        );
        assert_eq!(a["licenseDeclared"], "MIT");
        let rels: BTreeSet<(String, String, String)> = doc["relationships"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["spdxElementId"].as_str().unwrap().to_owned(),
                    r["relationshipType"].as_str().unwrap().to_owned(),
                    r["relatedSpdxElement"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let m = "SPDXRef-Package-manager-1.0.0".to_owned();
        assert_eq!(
            rels,
            BTreeSet::from([
                (
                    "SPDXRef-DOCUMENT".to_owned(),
                    "DESCRIBES".to_owned(),
                    m.clone()
                ),
                (
                    m.clone(),
                    "DEPENDS_ON".to_owned(),
                    "SPDXRef-Package-a-1.0.0".to_owned()
                ),
                (
                    m,
                    "DEPENDS_ON".to_owned(),
                    "SPDXRef-Package-serde-1.0.0".to_owned()
                ),
            ])
        );
    }

    #[test]
    fn the_same_binary_gives_the_same_document_and_another_binary_another_namespace() {
        let one = spdx(&metadata(), &binary(b"one")).unwrap();
        assert_eq!(one, spdx(&metadata(), &binary(b"one")).unwrap());
        let two = spdx(&metadata(), &binary(b"two")).unwrap();
        assert_ne!(one["documentNamespace"], two["documentNamespace"]);
    }

    #[test]
    fn a_package_outside_the_workspace_or_without_a_graph_is_an_error() {
        let mut b = binary(b"");
        b.package = "a";
        let err = spdx(&metadata(), &b).unwrap_err().to_string();
        assert!(err.contains("no workspace package \"a\""), "{err}");
        let mut m = metadata();
        m["resolve"] = Value::Null;
        let err = spdx(&m, &binary(b"")).unwrap_err().to_string();
        assert!(err.contains("no resolve graph"), "{err}");
    }
}
