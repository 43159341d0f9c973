//! The committed CRDs (`config/crd/bases`) and the generated API reference
//! (`docs/src/reference/api.md`) match what the types generate. Run `make crds` to refresh them.

use std::path::PathBuf;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn committed_crds_are_fresh() {
    let crds = api::crd::all();
    let dir = repo_root().join("config/crd/bases");
    let mut expected_files: Vec<String> = crds.iter().map(api::crd::file_name).collect();
    expected_files.sort();
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("config/crd/bases exists")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    present.sort();
    assert_eq!(
        present, expected_files,
        "config/crd/bases has stale or missing files: run `make crds`"
    );
    for crd in &crds {
        let path = dir.join(api::crd::file_name(crd));
        let committed = std::fs::read_to_string(&path).expect("CRD file readable");
        let generated = api::crd::to_yaml(crd).expect("CRD renders");
        assert!(
            committed == generated,
            "{} is stale: run `make crds`",
            path.display()
        );
    }
}

#[test]
fn committed_api_reference_is_fresh() {
    let path = repo_root().join("docs/src/reference/api.md");
    let committed = std::fs::read_to_string(&path).expect("docs/src/reference/api.md readable");
    assert!(
        committed == api::crd::api_reference_markdown(&api::crd::all()),
        "{} is stale: run `make crds`",
        path.display()
    );
}
