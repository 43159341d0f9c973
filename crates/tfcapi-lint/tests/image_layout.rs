//! `tfcapi-lint image` against OCI layouts written by the test: one test per image check, a
//! clean image per role, a multi-platform index, and broken layouts.

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

mod common;

use common::{Image, Item, dir, exe, file, multi, single};
use std::process::Command;
use tfcapi_lint::image::{ImageOptions, Platform, lint_image};
use tfcapi_lint::report::{Finding, Severity};
use tfcapi_lint::role::Role;

fn options(role: Role) -> ImageOptions {
    ImageOptions {
        role,
        contract: "v1alpha1".into(),
        platform: None,
        all_platforms: false,
        insecure: false,
    }
}

fn ids(findings: &[Finding]) -> Vec<&'static str> {
    let mut ids: Vec<_> = findings.iter().map(|f| f.id).collect();
    ids.sort_unstable();
    ids
}

fn lint(image: &Image, role: Role) -> Vec<Finding> {
    let tmp = tempfile::tempdir().unwrap();
    let reference = single(tmp.path(), image);
    lint_image(&reference, &options(role))
}

fn only(findings: &[Finding], id: &str, severity: Severity) -> Finding {
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].id, id, "{findings:#?}");
    assert_eq!(findings[0].severity, severity);
    findings[0].clone()
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tfcapi-lint"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn clean_image_per_role() {
    for role in Role::ALL {
        let findings = lint(&Image::clean(role.as_str()), role);
        assert!(findings.is_empty(), "{role}: {findings:#?}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let reference = single(tmp.path(), &Image::clean("machine"));
    let (code, out) = run(&["image", "--role", "machine", "--strict", &reference]);
    assert_eq!(
        (code, out.as_str()),
        (0, "summary: 0 errors, 0 warnings, 0 info\n")
    );
    // The named image of the layout, too.
    let (code, _) = run(&[
        "image",
        "--role",
        "machine",
        "--strict",
        &format!("{reference}:latest"),
    ]);
    assert_eq!(code, 0);
}

#[test]
fn image_module_lints_the_module_inside() {
    // A cluster module linted as a machine: the module's own findings, named inside the image.
    let findings = lint(
        &Image::clean("cluster").label("io.captf.role", "machine"),
        Role::Machine,
    );
    assert!(
        findings
            .iter()
            .any(|f| f.id == "input/missing" && f.file == "/captf/module")
    );
    assert!(
        findings
            .iter()
            .all(|f| f.platform.as_deref() == Some("linux/amd64"))
    );

    let mut image = Image::clean("machine");
    image.layers[1].retain(|i| !matches!(i, Item::File(p, ..) if p.starts_with("/captf/module/")));
    let f = only(
        &lint(&image, Role::Machine),
        "image/module",
        Severity::Error,
    );
    assert!(f.message.contains("no .tf"));

    let image = Image::clean("machine").layer(vec![Item::Whiteout("/captf/module".into())]);
    only(
        &lint(&image, Role::Machine),
        "image/module",
        Severity::Error,
    );
}

#[test]
fn image_runtime() {
    let missing = Image::clean("machine").layer(vec![Item::Whiteout("/captf/runtime".into())]);
    let f = only(
        &lint(&missing, Role::Machine),
        "image/runtime",
        Severity::Error,
    );
    assert!(f.message.contains("missing"));

    let dangling = Image::clean("machine").layer(vec![Item::Whiteout("/bin/tofu".into())]);
    only(
        &lint(&dangling, Role::Machine),
        "image/runtime",
        Severity::Error,
    );

    let not_exec = Image::clean("machine").layer(vec![Item::File(
        "/bin/tofu".into(),
        b"x".to_vec(),
        0o644,
        0,
        0,
    )]);
    let f = only(
        &lint(&not_exec, Role::Machine),
        "image/runtime",
        Severity::Error,
    );
    assert!(f.message.contains("not executable"));

    // Executable by its owner only, and the image user is someone else.
    let owner_only = Image::clean("machine").layer(vec![Item::File(
        "/bin/tofu".into(),
        b"x".to_vec(),
        0o700,
        0,
        0,
    )]);
    only(
        &lint(&owner_only, Role::Machine),
        "image/runtime",
        Severity::Error,
    );

    // A regular file copied to /captf/runtime (the OpenTofu reference image) is fine.
    let copied = Image::clean("machine").layer(vec![exe("/captf/runtime")]);
    assert!(lint(&copied, Role::Machine).is_empty());
}

#[test]
fn image_reserved_path_under_captf_bin_or_config() {
    let image =
        Image::clean("machine").layer(vec![dir("/captf/bin"), file("/captf/bin/runner", "x")]);
    let f = only(
        &lint(&image, Role::Machine),
        "image/reserved-path",
        Severity::Error,
    );
    assert_eq!(f.file, "/captf/bin");
    assert!(f.message.contains("/captf/bin/runner"));

    let image = Image::clean("machine").layer(vec![file("/captf/config/main.tf.json", "{}")]);
    only(
        &lint(&image, Role::Machine),
        "image/reserved-path",
        Severity::Error,
    );

    // An empty mount point is fine, and a whiteout in a later layer removes what an earlier shipped.
    let image = Image::clean("machine")
        .layer(vec![dir("/captf/bin"), file("/captf/bin/runner", "x")])
        .layer(vec![Item::Whiteout("/captf/bin/runner".into())]);
    assert!(lint(&image, Role::Machine).is_empty());
}

#[test]
fn image_mounted_path() {
    let image = Image::clean("machine").layer(vec![file("/captf/work/cache", "x")]);
    only(
        &lint(&image, Role::Machine),
        "image/mounted-path",
        Severity::Warning,
    );
}

#[test]
fn image_root_user_is_a_warning() {
    for user in ["", "root", "0", "0:0"] {
        let f = only(
            &lint(&Image::clean("machine").user(user), Role::Machine),
            "image/root-user",
            Severity::Warning,
        );
        assert_eq!(f.line, None);
    }
    // A named non-root user from /etc/passwd is fine.
    assert!(lint(&Image::clean("machine").user("captf"), Role::Machine).is_empty());

    let tmp = tempfile::tempdir().unwrap();
    let reference = single(tmp.path(), &Image::clean("machine").user(""));
    assert_eq!(run(&["image", "--role", "machine", &reference]).0, 0);
    assert_eq!(
        run(&["image", "--role", "machine", "--strict", &reference]).0,
        1
    );
    assert_eq!(
        run(&[
            "image",
            "--role",
            "machine",
            "--strict",
            "--allow-warning",
            "image/root-user",
            &reference
        ])
        .0,
        0
    );
}

#[test]
fn image_permissions() {
    let image = Image::clean("machine").layer(vec![Item::File(
        "/captf/module/secret.txt".into(),
        b"x".to_vec(),
        0o600,
        0,
        0,
    )]);
    let f = only(
        &lint(&image, Role::Machine),
        "image/permissions",
        Severity::Warning,
    );
    assert!(f.message.contains("/captf/module/secret.txt"));
    // Group-readable through the pod's fsGroup is fine.
    let image = Image::clean("machine").layer(vec![Item::File(
        "/captf/module/shared.txt".into(),
        b"x".to_vec(),
        0o640,
        0,
        65532,
    )]);
    assert!(lint(&image, Role::Machine).is_empty());
}

#[test]
fn image_label_role_and_contract() {
    let f = only(
        &lint(
            &Image::clean("machine").label("io.captf.role", "cluster"),
            Role::Machine,
        ),
        "image/label-role",
        Severity::Error,
    );
    assert!(f.message.contains("\"cluster\""));
    only(
        &lint(
            &Image::clean("machine").label("io.captf.contract", "v1beta1"),
            Role::Machine,
        ),
        "image/label-contract",
        Severity::Error,
    );
    let findings = lint(
        &Image::clean("machine")
            .label("io.captf.runtime", "opentofu")
            .label("io.captf.runtime.version", "latest"),
        Role::Machine,
    );
    assert_eq!(
        ids(&findings),
        ["image/label-runtime", "image/label-runtime"]
    );
    // Labels are optional.
    let mut image = Image::clean("machine");
    image.labels.clear();
    assert!(lint(&image, Role::Machine).is_empty());
}

#[test]
fn image_capacity_labels() {
    let good = Image::clean("machine")
        .label(
            "io.captf.capacity",
            r#"{"cpu":"4","memory":"16Gi","nvidia.com/gpu":"1"}"#,
        )
        .label(
            "io.captf.node-info",
            r#"{"architecture":"amd64","operatingSystem":"linux"}"#,
        );
    assert!(lint(&good, Role::Machine).is_empty());

    let bad = good.clone().label("io.captf.capacity", r#"{"cpu":4}"#);
    only(
        &lint(&bad, Role::Machine),
        "image/capacity-label",
        Severity::Error,
    );
    let bad = good
        .clone()
        .label("io.captf.node-info", r#"{"arch":"amd64"}"#);
    assert_eq!(ids(&lint(&bad, Role::Machine)), ["image/capacity-label"; 3]);
    let bad = good.clone().label("io.captf.capacity", "not json");
    only(
        &lint(&bad, Role::Machine),
        "image/capacity-label",
        Severity::Error,
    );

    let mut half = good.clone();
    half.labels.remove("io.captf.node-info");
    only(
        &lint(&half, Role::Machine),
        "image/capacity-label-pair",
        Severity::Warning,
    );

    // Ignored on the other roles.
    let pool = Image::clean("machinepool").label("io.captf.capacity", "not json");
    assert!(lint(&pool, Role::Machinepool).is_empty());
}

fn with_provider(image: Image, mirror: Vec<Item>) -> Image {
    let mut image = image.layer(vec![file(
        "/captf/module/providers.tf",
        "terraform {\n  required_providers {\n    random = {\n      source  = \"hashicorp/random\"\n      version = \"~> 3.6\"\n    }\n  }\n}\n",
    )]);
    image.layers.push(mirror);
    image
}

const RANDOM: &str = "/captf/providers/registry.opentofu.org/hashicorp/random";

#[test]
fn image_providers_missing_from_the_mirror() {
    // Packed layout with the package of the checked platform.
    let packed = with_provider(
        Image::clean("machine"),
        vec![
            file(&format!("{RANDOM}/index.json"), "{}"),
            file(&format!("{RANDOM}/3.6.3.json"), "{}"),
            file(
                &format!("{RANDOM}/terraform-provider-random_3.6.3_linux_amd64.zip"),
                "zip",
            ),
        ],
    );
    assert!(
        lint(&packed, Role::Machine).is_empty(),
        "{:#?}",
        lint(&packed, Role::Machine)
    );

    // Unpacked layout.
    let unpacked = with_provider(
        Image::clean("machine"),
        vec![exe(&format!(
            "{RANDOM}/3.6.3/linux_amd64/terraform-provider-random_v3.6.3_x5"
        ))],
    );
    assert!(lint(&unpacked, Role::Machine).is_empty());

    // Only another platform's package.
    let other = with_provider(
        Image::clean("machine"),
        vec![file(
            &format!("{RANDOM}/terraform-provider-random_3.6.3_linux_arm64.zip"),
            "zip",
        )],
    );
    let f = only(
        &lint(&other, Role::Machine),
        "image/providers-missing",
        Severity::Error,
    );
    assert!(f.message.contains("linux_amd64") && f.message.contains("hashicorp/random"));

    // No mirror at all is allowed (non-hermetic image).
    let mut none = with_provider(Image::clean("machine"), vec![]);
    none.layers[1].retain(|i| !matches!(i, Item::Dir(p, ..) if p == "/captf/providers"));
    assert!(lint(&none, Role::Machine).is_empty());
}

#[test]
fn image_providers_layout() {
    let image = Image::clean("machine").layer(vec![file(
        "/captf/providers/terraform-provider-random_3.6.3_linux_amd64.zip",
        "zip",
    )]);
    let f = only(
        &lint(&image, Role::Machine),
        "image/providers-layout",
        Severity::Error,
    );
    assert!(
        f.message
            .contains("terraform-provider-random_3.6.3_linux_amd64.zip")
    );
}

fn index_dir() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    let amd = with_provider(
        Image::clean("machine"),
        vec![file(
            &format!("{RANDOM}/terraform-provider-random_3.6.3_linux_amd64.zip"),
            "zip",
        )],
    );
    // The arm64 image's mirror lacks its own platform's package.
    let arm = with_provider(
        Image::clean("machine").arch("arm64"),
        vec![file(
            &format!("{RANDOM}/terraform-provider-random_3.6.3_linux_amd64.zip"),
            "zip",
        )],
    );
    let reference = multi(tmp.path(), &[("amd64", amd), ("arm64", arm)]);
    (tmp, reference)
}

#[test]
fn multi_platform_index() {
    let (_tmp, reference) = index_dir();
    // linux/amd64 by default.
    assert!(lint_image(&reference, &options(Role::Machine)).is_empty());
    // --platform picks another.
    let mut opts = options(Role::Machine);
    opts.platform = Platform::parse("linux/arm64");
    let f = only(
        &lint_image(&reference, &opts),
        "image/providers-missing",
        Severity::Error,
    );
    assert_eq!(f.platform.as_deref(), Some("linux/arm64"));
    assert!(f.message.contains("linux_arm64"));
    // --all-platforms checks both.
    let mut opts = options(Role::Machine);
    opts.all_platforms = true;
    let f = only(
        &lint_image(&reference, &opts),
        "image/providers-missing",
        Severity::Error,
    );
    assert_eq!(f.platform.as_deref(), Some("linux/arm64"));
    // A platform the index does not publish.
    let mut opts = options(Role::Machine);
    opts.platform = Platform::parse("linux/s390x");
    let f = only(
        &lint_image(&reference, &opts),
        "image/platform",
        Severity::Error,
    );
    assert!(f.message.contains("linux/amd64, linux/arm64"));

    let (code, out) = run(&[
        "image",
        "--role",
        "machine",
        "--all-platforms",
        "--json",
        &reference,
    ]);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["findings"][0]["platform"], "linux/arm64");
}

#[test]
fn single_platform_image_of_another_platform() {
    let image = Image::clean("machine").arch("arm64");
    only(
        &lint(&image, Role::Machine),
        "image/platform",
        Severity::Error,
    );
    let tmp = tempfile::tempdir().unwrap();
    let reference = single(tmp.path(), &image);
    let mut opts = options(Role::Machine);
    opts.platform = Platform::parse("linux/arm64");
    assert!(lint_image(&reference, &opts).is_empty());
}

#[test]
fn capacity_labels_must_match_across_platforms() {
    let tmp = tempfile::tempdir().unwrap();
    let amd = Image::clean("machine")
        .label("io.captf.capacity", r#"{"cpu":"4"}"#)
        .label(
            "io.captf.node-info",
            r#"{"architecture":"amd64","operatingSystem":"linux"}"#,
        );
    let arm = amd
        .clone()
        .arch("arm64")
        .label("io.captf.capacity", r#"{"cpu":"8"}"#);
    let reference = multi(tmp.path(), &[("amd64", amd), ("arm64", arm)]);
    let mut opts = options(Role::Machine);
    opts.all_platforms = true;
    only(
        &lint_image(&reference, &opts),
        "image/capacity-label-pair",
        Severity::Warning,
    );
}

#[test]
fn image_pull_failures_exit_2() {
    // Not a layout.
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = run(&[
        "image",
        "--role",
        "machine",
        &format!("oci:{}", tmp.path().display()),
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("image/pull"));

    // A blob that does not match its digest.
    let reference = single(tmp.path(), &Image::clean("machine"));
    let blobs = tmp.path().join("blobs/sha256");
    let mut biggest = std::fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut data = std::fs::read(&biggest).unwrap();
    let last = data.len() - 1;
    data[last] ^= 0xff;
    std::fs::write(&mut biggest, data).unwrap();
    let findings = lint_image(&reference, &options(Role::Machine));
    let f = only(&findings, "image/pull", Severity::Error);
    assert!(f.message.contains("digest"), "{}", f.message);
    assert_eq!(run(&["image", "--role", "machine", &reference]).0, 2);

    // A registry that is not there.
    let (code, _) = run(&["image", "--role", "machine", "127.0.0.1:1/nothing:here"]);
    assert_eq!(code, 2);
}

/// A `.tf` link inside `/captf/module` that leads nowhere is `module/parse` naming it: the
/// runtime fails to load such a module.
#[test]
fn a_dangling_tf_link_in_the_image_module_is_a_parse_error() {
    let image = Image::clean("machine").layer(vec![Item::Symlink(
        "/captf/module/extra.tf".into(),
        "/nowhere/extra.tf".into(),
    )]);
    let f = only(
        &lint(&image, Role::Machine),
        "module/parse",
        Severity::Error,
    );
    assert_eq!(f.file, "/captf/module/extra.tf");
    assert!(f.message.contains("leads nowhere"), "{}", f.message);
}

/// The image is linted for its runtime (`io.captf.runtime`): a `.tofu` file shadowing a `.tf`
/// file is a warning either way, and the side that runtime never reads is not linted.
#[test]
fn the_image_module_is_linted_for_the_images_runtime() {
    let broken = Item::File(
        "/captf/module/outputs.tofu".into(),
        b"output \"x\" {\n  value = [\n}\n".to_vec(),
        0o644,
        65532,
        65532,
    );
    let terraform = Image::clean("machine")
        .label("io.captf.runtime", "terraform")
        .layer(vec![broken.clone()]);
    let f = only(
        &lint(&terraform, Role::Machine),
        "module/tofu-shadow",
        Severity::Warning,
    );
    assert_eq!(f.file, "/captf/module/outputs.tofu");
    // Under OpenTofu the broken file is the one that runs.
    let tofu = Image::clean("machine").layer(vec![broken]);
    assert!(
        lint(&tofu, Role::Machine)
            .iter()
            .any(|f| f.id == "module/parse" && f.file == "/captf/module/outputs.tofu")
    );
}
