//! Fuzzing (issue 19): image manifests, indexes and configs as `tfcapi-lint image` reads them
//! from an OCI layout (Module Images; the `image/*` checks). A clean noop image whose config,
//! manifest or `index.json` has fields replaced or removed, or its bytes mutated (blobs keep a
//! matching digest, so the mutated document is what gets parsed): the image is linted into
//! findings that name a check and say what is wrong, never a panic.
//!
//! `CAPTF_FUZZ_CASES` sets the cases per property (default 256; `make fuzz` runs 100 000).

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

mod common;
#[path = "../../contract/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use common::{Image, LayoutWriter};
use fuzz_support::{config, edited, edits, mutate_bytes};
use proptest::prelude::*;
use serde_json::json;
use tfcapi_lint::image::{ImageOptions, lint_image};
use tfcapi_lint::role::Role;

const CONFIG_FIELDS: &[&str] = &[
    "/config",
    "/config/User",
    "/config/Labels",
    "/config/Labels/io.captf.role",
    "/config/Labels/io.captf.contract",
    "/config/Labels/io.captf.runtime",
    "/config/Labels/io.captf.capacity",
    "/config/Labels/io.captf.node-info",
    "/os",
    "/architecture",
    "/variant",
];

const MANIFEST_FIELDS: &[&str] = &[
    "/mediaType",
    "/schemaVersion",
    "/config",
    "/config/digest",
    "/config/size",
    "/config/mediaType",
    "/layers",
    "/layers/0",
    "/layers/0/digest",
    "/layers/0/size",
    "/layers/0/mediaType",
    "/layers/1/size",
    "/manifests",
];

const INDEX_FIELDS: &[&str] = &[
    "/mediaType",
    "/manifests",
    "/manifests/0",
    "/manifests/0/digest",
    "/manifests/0/size",
    "/manifests/0/mediaType",
    "/manifests/0/platform",
    "/manifests/0/platform/os",
    "/manifests/0/platform/architecture",
    "/manifests/0/annotations",
];

/// One document of the layout, spoiled one way.
#[derive(Debug, Clone)]
enum Spoil {
    Edits(Vec<(&'static str, Option<serde_json::Value>)>),
    Bytes(Vec<u8>),
}

fn spoil(fields: &'static [&'static str]) -> impl Strategy<Value = Spoil> {
    prop_oneof![
        edits(fields).prop_map(Spoil::Edits),
        // Bytes flipped, inserted or cut from a small JSON object stand for a corrupt blob.
        mutate_bytes(br#"{"schemaVersion":2,"config":{},"layers":[]}"#.to_vec())
            .prop_map(Spoil::Bytes),
    ]
}

fn spoiled(doc: &serde_json::Value, spoil: Option<Spoil>) -> Vec<u8> {
    let bytes = serde_json::to_vec(doc).unwrap();
    match spoil {
        None => bytes,
        Some(Spoil::Edits(e)) => edited(&bytes, e),
        Some(Spoil::Bytes(b)) => b,
    }
}

/// Writes the clean image of `role` with its config, manifest and index spoiled as given.
fn layout(
    dir: &std::path::Path,
    role: Role,
    config: Option<Spoil>,
    manifest: Option<Spoil>,
    index: Option<Spoil>,
) -> String {
    let image = Image::clean(role.as_str());
    let w = LayoutWriter::new(dir);
    let layers = w.layers(&image);
    let config_desc = w.blob(
        "application/vnd.oci.image.config.v1+json",
        &spoiled(&image.config(), config),
    );
    let manifest_doc = common::manifest(&config_desc, &layers);
    let mut manifest_desc = w.blob(
        "application/vnd.oci.image.manifest.v1+json",
        &spoiled(&manifest_doc, manifest),
    );
    manifest_desc["annotations"] = json!({ "org.opencontainers.image.ref.name": "latest" });
    let index_doc = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest_desc],
    });
    std::fs::write(dir.join("index.json"), spoiled(&index_doc, index)).unwrap();
    format!("oci:{}", dir.display())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn spoiled_layouts_give_findings_not_panics(
        role in prop::sample::select(Role::ALL.to_vec()),
        config in prop::option::of(spoil(CONFIG_FIELDS)),
        manifest in prop::option::weighted(0.3, spoil(MANIFEST_FIELDS)),
        index in prop::option::weighted(0.3, spoil(INDEX_FIELDS)),
        all_platforms in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let clean = config.is_none() && manifest.is_none() && index.is_none();
        let reference = layout(tmp.path(), role, config, manifest, index);
        let options = ImageOptions {
            role,
            contract: "v1alpha1".into(),
            platform: None,
            all_platforms,
            insecure: false,
        };
        let findings = lint_image(&reference, &options);
        for f in &findings {
            prop_assert!(!f.id.is_empty() && !f.message.is_empty(), "{f:?}");
        }
        if clean {
            prop_assert!(findings.is_empty(), "{findings:#?}");
        }
    }
}
