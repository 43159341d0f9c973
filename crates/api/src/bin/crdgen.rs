//! Writes the CRDs to `config/crd/bases/` and the generated API reference to
//! `docs/src/reference/api.md`. Run it through `make crds`; a test fails when the committed files
//! are stale.
//!
//! Usage: `crdgen [REPO_ROOT]` (defaults to the current directory).

use anyhow::Context as _;
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let root = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let crds = api::crd::all();
    let dir = root.join("config/crd/bases");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for crd in &crds {
        let path = dir.join(api::crd::file_name(crd));
        std::fs::write(&path, api::crd::to_yaml(crd)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let reference = root.join("docs/src/reference/api.md");
    if let Some(parent) = reference.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&reference, api::crd::api_reference_markdown(&crds))
        .with_context(|| format!("writing {}", reference.display()))?;
    println!("wrote {}", reference.display());
    Ok(())
}
