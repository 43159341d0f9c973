//! The Version Support page (docs/src/version-support.md) against its sources: every release
//! series of `metadata.yaml` with its Cluster API contract, the module contract the code renders
//! against, and the versions of the test binaries the suites run (`hack/testbin/*/go.mod`). A
//! bump of any of them without the page fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use testenv::env::repo_root;
use testenv::testbin::version;

fn page() -> String {
    std::fs::read_to_string(repo_root().join("docs/src/version-support.md")).unwrap()
}

/// The rows of the table under `heading` (`## ...`), each as its cells.
fn rows(page: &str, heading: &str) -> Vec<Vec<String>> {
    let section = page
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("| ---"))
        .skip(1)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// `(series, contract)` of every release series in `metadata.yaml`.
fn release_series() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("metadata.yaml")).unwrap();
    let doc = &testenv::manifests::documents(&text).unwrap()[0];
    doc["releaseSeries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!("v{}.{}", s["major"], s["minor"]),
                s["contract"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_release_series_is_listed_with_its_cluster_api_contract() {
    let page = page();
    let rows = rows(&page, "CAPTF and Cluster API");
    let listed: Vec<(String, String)> = rows.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
    assert_eq!(listed, release_series(), "{rows:?}");
    for r in &rows {
        assert!(
            r[3].contains(&format!("Cluster API {}", version("cluster-api").unwrap())),
            "{r:?}"
        );
        assert_eq!(r[4], "`infrastructure.cluster.x-k8s.io/v1alpha1`");
    }
}

#[test]
fn the_tested_versions_are_the_test_binaries_versions() {
    let page = page();
    let series: Vec<String> = release_series().into_iter().map(|(s, _)| s).collect();
    let management = rows(&page, "Management cluster");
    let modules = rows(&page, "Modules");
    for (rows, name) in [(&management, "management"), (&modules, "modules")] {
        let listed: Vec<&String> = rows.iter().map(|r| &r[0]).collect();
        assert_eq!(listed, series.iter().collect::<Vec<_>>(), "{name}");
    }
    let current = management.last().unwrap();
    for expected in [
        format!("Kubernetes {}", version("kubernetes").unwrap()),
        format!("etcd {}", version("etcd").unwrap()),
    ] {
        assert!(current[2].contains(&expected), "{expected}: {current:?}");
    }
    assert_eq!(current[3], version("cert-manager").unwrap());
    let operator = format!(
        "with the Operator {}.",
        version("cluster-api-operator").unwrap()
    );
    assert!(
        page.replace('\n', " ").contains(&operator),
        "the page names another Cluster API Operator than {operator}"
    );
    assert_eq!(current[4], "linux/amd64, linux/arm64");
    let current = modules.last().unwrap();
    assert_eq!(current[1], contract::inputs::CONTRACT_VERSION);
    assert_eq!(
        current[4],
        format!(
            "Terraform {}, OpenTofu {}",
            version("terraform").unwrap(),
            version("tofu").unwrap()
        )
    );
}

/// The default base images of the module Containerfiles are pinned by digest (a moved tag cannot
/// change what a build ships), and the runtime ones are the Terraform and OpenTofu versions the
/// suites test, the same as the image's RUNTIME_VERSION label.
#[test]
fn the_module_images_start_from_the_tested_runtimes_pinned_by_digest() {
    let root = repo_root();
    let terraform = version("terraform").unwrap();
    let tofu = version("tofu").unwrap();
    for file in [
        "modules/noop/Containerfile.terraform",
        "modules/noop/Containerfile.opentofu",
        "modules/libvirt/Containerfile",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let arg = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("ARG {name}=")))
                .map(str::to_owned)
        };
        let runtime = arg("RUNTIME_VERSION").unwrap_or_else(|| panic!("{file}: RUNTIME_VERSION"));
        let mut bases = 0;
        for line in text.lines().filter(|l| l.starts_with("FROM ")) {
            let from = line["FROM ".len()..].split_whitespace().next().unwrap();
            if from == "scratch" {
                continue;
            }
            let name = from
                .strip_prefix("${")
                .and_then(|f| f.strip_suffix('}'))
                .unwrap_or_else(|| panic!("{file}: FROM {from} is not an ARG"));
            let image = arg(name).unwrap_or_else(|| panic!("{file}: ARG {name} has no default"));
            let (reference, digest) = image
                .split_once("@sha256:")
                .unwrap_or_else(|| panic!("{file}: {name}={image} is not pinned by digest"));
            assert!(
                digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
                "{file}: {image}"
            );
            let tag = reference.rsplit_once(':').unwrap().1;
            let expected = match name {
                "TERRAFORM_IMAGE" => Some((terraform.trim_start_matches('v'), "")),
                "TOFU_IMAGE" => Some((tofu.trim_start_matches('v'), "-minimal")),
                _ => None,
            };
            if let Some((version, suffix)) = expected {
                assert_eq!(tag, format!("{version}{suffix}"), "{file}: {name}");
                assert_eq!(runtime, version, "{file}: RUNTIME_VERSION");
            }
            bases += 1;
        }
        assert!(bases > 0, "{file} has no base image");
    }
}
