//! `tfcapi-lint image` against images pushed to the test environment's registry (`crane registry
//! serve` on loopback, plain HTTP): the no-op module images, by tag and by digest, a
//! multi-platform index, and a wrong role label. Skipped, with a message, when the test binaries
//! (`crane`, `tofu`) have not been built.

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use testenv::image::{ModuleImage, push_index, push_module_image};
use testenv::registry::Registry;

fn noop(role: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../modules/noop")
        .join(role)
}

fn lint(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tfcapi-lint"))
        .args(args)
        // No credentials file: the pull is anonymous.
        .env("DOCKER_CONFIG", "/nonexistent")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn have_test_binaries() -> bool {
    for binary in ["crane", "tofu"] {
        if let Err(e) = testenv::testbin::path(binary) {
            eprintln!("SKIPPED image_registry: {e}");
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_pushed_to_the_test_registry() {
    if !have_test_binaries() {
        return;
    }
    let registry = Registry::start_temp().await.unwrap();
    let host = registry.host();

    // A clean no-op machine image, by tag and by digest.
    let machine = push_module_image(
        &host,
        "noop/machine",
        "v1",
        &ModuleImage::new(noop("machine"), "machine"),
    )
    .await
    .unwrap();
    let by_tag = format!("{host}/noop/machine:v1");
    let (code, out) = lint(&["image", "--role", "machine", "--strict", &by_tag]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "summary: 0 errors, 0 warnings, 0 info\n");
    let by_digest = format!("{host}/noop/machine@{}", machine.digest.clone().unwrap());
    let (code, out) = lint(&[
        "image",
        "--role",
        "machine",
        "--strict",
        "--insecure",
        &by_digest,
    ]);
    assert_eq!(code, 0, "{out}");

    // A wrong role label.
    let mut wrong = ModuleImage::new(noop("machine"), "machine");
    wrong.labels = BTreeMap::from([("io.captf.role".to_owned(), "cluster".to_owned())]);
    push_module_image(&host, "noop/wrong", "v1", &wrong)
        .await
        .unwrap();
    let (code, out) = lint(&[
        "image",
        "--role",
        "machine",
        &format!("{host}/noop/wrong:v1"),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("error image/label-role"), "{out}");

    // A multi-platform index whose arm64 entry is a cluster module.
    let cluster = push_module_image(
        &host,
        "noop/multi",
        "cluster",
        &ModuleImage::new(noop("cluster"), "cluster"),
    )
    .await
    .unwrap();
    let amd = push_module_image(
        &host,
        "noop/multi",
        "machine",
        &ModuleImage::new(noop("machine"), "machine"),
    )
    .await
    .unwrap();
    push_index(
        &host,
        "noop/multi",
        "v1",
        &[(&amd, "linux/amd64"), (&cluster, "linux/arm64")],
    )
    .await
    .unwrap();
    let index = format!("{host}/noop/multi:v1");
    let (code, out) = lint(&["image", "--role", "machine", "--strict", &index]);
    assert_eq!(code, 0, "linux/amd64 by default: {out}");
    let (code, out) = lint(&[
        "image",
        "--role",
        "machine",
        "--all-platforms",
        "--json",
        &index,
    ]);
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings.iter().all(|f| f["platform"] == "linux/arm64"),
        "{out}"
    );
    assert!(findings.iter().any(|f| f["id"] == "image/label-role"));
    assert!(
        findings
            .iter()
            .any(|f| f["id"] == "input/missing" && f["file"] == "/captf/module")
    );

    // A repository that does not exist could not be pulled.
    let (code, _) = lint(&[
        "image",
        "--role",
        "machine",
        &format!("{host}/noop/absent:v1"),
    ]);
    assert_eq!(code, 2);

    registry.stop();
}
