//! The image builder and the loopback registry: images built from layers are pushed by tag,
//! addressed by digest, pulled back (manifests and indexes, digests verified) and unpacked with
//! whiteouts applied, once per digest.
//!
//! Needs the test binaries (`make testbin`: crane, tofu) and root (file ownership).
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

use testenv::image::{ImageBuilder, ImageStore, Layer, ModuleImage, push_index, push_module_image};
use testenv::registry::Registry;

fn two_layer_image() -> ImageBuilder {
    let mut lower = Layer::new();
    lower
        .file("/a/keep", "keep", 0o644)
        .file("/a/gone", "gone", 0o644)
        .file("/dir/old1", "1", 0o600)
        .dir("/dir/sub", 0o755)
        .file("/dir/sub/old2", "2", 0o644)
        .dir("/usr/lib", 0o755)
        .symlink("/lib", "usr/lib")
        .owner(65532, 65532)
        .file("/home/nonroot/owned", "mine", 0o640)
        .file("/bin/tool", "#!tool", 0o4755);
    let mut upper = Layer::new();
    upper
        .whiteout("/a/gone")
        .opaque("/dir")
        .file("/dir/new", "new", 0o644)
        .file("/a/keep", "replaced", 0o644);
    ImageBuilder::new()
        .layer(lower)
        .layer(upper)
        .user("65532:65532")
        .env("PATH", "/bin")
        .env("A", "b")
        .entrypoint(["/bin/tool"])
        .cmd(["--help"])
        .working_dir("/home/nonroot")
        .label("io.captf.role", "machine")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_images_round_trip_through_the_registry_with_whiteouts() {
    let registry = Registry::start_temp().await.unwrap();
    let host = registry.host();
    let reference = two_layer_image()
        .push(&host, "captf/layers", "v1")
        .await
        .unwrap();
    assert_eq!(reference.registry, host);
    let digest = reference.digest.clone().unwrap();
    assert!(
        reference
            .to_string()
            .ends_with(&format!("captf/layers@{digest}"))
    );

    // Deterministic: the same inputs give the same digest.
    let again = two_layer_image()
        .push(&host, "captf/layers", "v2")
        .await
        .unwrap();
    assert_eq!(again.digest, reference.digest);

    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(cache.path()).unwrap();
    let by_tag = store
        .ensure(&format!("{host}/captf/layers:v1"), None)
        .await
        .unwrap();
    assert_eq!(by_tag.digest, digest);
    assert_eq!(by_tag.image_id(), format!("{host}/captf/layers@{digest}"));
    let root = &by_tag.rootfs;
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    assert_eq!(read("a/keep").as_deref(), Some("replaced"));
    assert!(
        !root.join("a/gone").exists(),
        "whiteout removes the lower file"
    );
    assert!(!root.join("a/.wh.gone").exists());
    assert!(
        !root.join("dir/old1").exists(),
        "opaque directory hides lower content"
    );
    assert!(!root.join("dir/sub").exists());
    assert_eq!(
        read("dir/new").as_deref(),
        Some("new"),
        "the opaque layer's own files stay"
    );
    assert!(
        std::fs::symlink_metadata(root.join("lib"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let owned = std::fs::metadata(root.join("home/nonroot/owned")).unwrap();
    assert_eq!(
        (owned.uid(), owned.gid(), owned.mode() & 0o7777),
        (65532, 65532, 0o640)
    );
    let tool = std::fs::metadata(root.join("bin/tool")).unwrap();
    assert_eq!(
        tool.permissions().mode() & 0o7777,
        0o4755,
        "set-id bits survive chown"
    );

    let cfg = &by_tag.config;
    assert_eq!(cfg.user.as_deref(), Some("65532:65532"));
    assert_eq!(
        cfg.env.as_deref(),
        Some(&["PATH=/bin".to_owned(), "A=b".to_owned()][..])
    );
    assert_eq!(
        cfg.entrypoint.as_deref(),
        Some(&["/bin/tool".to_owned()][..])
    );
    assert_eq!(cfg.cmd.as_deref(), Some(&["--help".to_owned()][..]));
    assert_eq!(cfg.working_dir.as_deref(), Some("/home/nonroot"));
    assert_eq!(cfg.labels.as_ref().unwrap()["io.captf.role"], "machine");

    // Unpacked once per digest: by digest and by the other tag, the same directory.
    let by_digest = store.ensure(&reference.to_string(), None).await.unwrap();
    assert_eq!(by_digest.rootfs, by_tag.rootfs);
    let other_tag = store
        .ensure(&format!("{host}/captf/layers:v2"), Some("IfNotPresent"))
        .await
        .unwrap();
    assert_eq!(other_tag.rootfs, by_tag.rootfs);

    // Never: only what is present.
    assert!(
        store
            .ensure(&format!("{host}/captf/layers:v3"), Some("Never"))
            .await
            .is_err()
    );
    assert!(
        store
            .ensure(&format!("{host}/captf/layers:v1"), Some("Never"))
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_resolves_to_its_linux_amd64_manifest() {
    let registry = Registry::start_temp().await.unwrap();
    let host = registry.host();
    let mut l = Layer::new();
    l.file("/platform", "amd64", 0o644);
    let amd64 = ImageBuilder::new()
        .layer(l)
        .push(&host, "captf/multi", "amd64")
        .await
        .unwrap();
    let mut l = Layer::new();
    l.file("/platform", "arm64", 0o644);
    let arm64 = ImageBuilder::new()
        .layer(l)
        .push(&host, "captf/multi", "arm64")
        .await
        .unwrap();
    let index = push_index(
        &host,
        "captf/multi",
        "v1",
        &[(&arm64, "linux/arm64"), (&amd64, "linux/amd64")],
    )
    .await
    .unwrap();

    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(cache.path()).unwrap();
    let img = store
        .ensure(&format!("{host}/captf/multi:v1"), None)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(img.rootfs.join("platform")).unwrap(),
        "amd64"
    );
    // imageID carries the digest the reference resolved to: the index's.
    assert_eq!(img.digest, index.digest.clone().unwrap());

    // A digest that does not match the content is refused.
    let wrong = format!("{host}/captf/multi@sha256:{}", "0".repeat(64));
    assert!(store.ensure(&wrong, None).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_images_follow_the_image_contract() {
    let registry = Registry::start_temp().await.unwrap();
    let module = tempfile::tempdir().unwrap();
    std::fs::write(
        module.path().join("main.tf"),
        "output \"x\" { value = 1 }\n",
    )
    .unwrap();
    std::fs::create_dir(module.path().join("nested")).unwrap();
    std::fs::write(module.path().join("nested/vars.tf"), "variable \"v\" {}\n").unwrap();
    let reference = push_module_image(
        &registry.host(),
        "captf/module",
        "v1",
        &ModuleImage::new(module.path(), "cluster"),
    )
    .await
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let img = ImageStore::new(cache.path())
        .unwrap()
        .ensure(&reference.to_string(), None)
        .await
        .unwrap();
    let labels = img.config.labels.clone().unwrap();
    assert_eq!(labels["io.captf.contract"], "v1alpha1");
    assert_eq!(labels["io.captf.role"], "cluster");
    assert_eq!(labels["io.captf.runtime"], "tofu");
    assert_eq!(
        format!("v{}", labels["io.captf.runtime.version"]),
        testenv::testbin::version("tofu").unwrap()
    );
    assert_eq!(img.config.user.as_deref(), Some("65532:65532"));
    let runtime = std::fs::metadata(img.rootfs.join("captf/runtime")).unwrap();
    assert!(runtime.is_file() && runtime.mode() & 0o111 != 0);
    let main = std::fs::metadata(img.rootfs.join("captf/module/main.tf")).unwrap();
    assert_eq!((main.uid(), main.gid()), (65532, 65532));
    assert!(img.rootfs.join("captf/module/nested/vars.tf").is_file());
    assert!(!img.rootfs.join("captf/providers").exists());
    assert!(
        !img.rootfs.join("captf/work").exists(),
        "reserved paths stay empty"
    );
    let passwd = std::fs::read_to_string(img.rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains(":65532:65532:"));
    assert_eq!(
        std::fs::metadata(img.rootfs.join("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );
}
