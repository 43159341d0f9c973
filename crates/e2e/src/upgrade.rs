//! The upgrade test's previous release (issue 31; book: Upgrading): its source tree, a fixed
//! commit of main named in `hack/previous-release`, built with its own make targets. The
//! releases file, the upgrade notes and what an upgrade must leave untouched are
//! [`testenv::upgrade`]'s, re-exported here.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

pub use testenv::upgrade::*;

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

/// The image of the container `name` of Deployment `ns/deployment`.
pub fn container_image(deployment: &Value, name: &str) -> Option<String> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["image"].as_str())
        .map(str::to_owned)
}
