//! Applying a layer tarball to a root filesystem, with OCI whiteouts.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{PermissionsExt, lchown, symlink};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::shim::secure_join;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// Normalises a tar entry path to a relative path without `.`; refuses `..`.
fn normalise(path: &Path) -> anyhow::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                bail!("layer entry {} leaves the root", path.display())
            }
        }
    }
    Ok(out)
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The host path of `rel` in `root`, with the parent resolved inside `root` (so symbolic links
/// of lower layers, like `lib -> usr/lib`, are followed the way the container sees them) and the
/// last component itself not followed.
fn target_path(root: &Path, rel: &Path) -> anyhow::Result<PathBuf> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let name = rel
        .file_name()
        .with_context(|| format!("layer entry {} has no name", rel.display()))?;
    let parent = secure_join(root, &format!("/{}", parent.display()))?;
    Ok(parent.join(name))
}

/// Applies one uncompressed layer tarball to `root` (which holds the layers below it): regular
/// files, directories, symbolic and hard links, with their modes and owners; `.wh.NAME` removes
/// `NAME` of a lower layer, `.wh..wh..opq` empties its directory of lower-layer content. Device
/// nodes and FIFOs are skipped (a container's `/dev` is a fresh tmpfs).
pub fn unpack_layer(root: &Path, tarball: impl Read) -> anyhow::Result<()> {
    let mut archive = tar::Archive::new(tarball);
    let mut written: HashSet<PathBuf> = HashSet::new();
    for entry in archive.entries().context("reading the layer")? {
        let mut entry = entry.context("reading a layer entry")?;
        let rel = normalise(&entry.path().context("layer entry path")?)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == OPAQUE {
            let dir_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
            let dir = secure_join(root, &format!("/{}", dir_rel.display()))?;
            if let Ok(children) = fs::read_dir(&dir) {
                for child in children {
                    let child = child?;
                    if !written.contains(&dir_rel.join(child.file_name())) {
                        remove_any(&child.path())?;
                    }
                }
            }
            continue;
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
            let victim = rel.with_file_name(hidden);
            remove_any(&target_path(root, &victim)?)?;
            continue;
        }

        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().unwrap_or(0o644) & 0o7777;
        let uid = header.uid().unwrap_or(0) as u32;
        let gid = header.gid().unwrap_or(0) as u32;
        let dest = target_path(root, &rel)?;
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let existing = fs::symlink_metadata(&dest).ok();
        match kind {
            tar::EntryType::Directory => {
                if existing.as_ref().is_some_and(|m| !m.is_dir()) {
                    remove_any(&dest)?;
                }
                if !dest.is_dir() {
                    fs::create_dir(&dest).with_context(|| format!("mkdir {}", dest.display()))?;
                }
                lchown(&dest, Some(uid), Some(gid))?;
                fs::set_permissions(&dest, fs::Permissions::from_mode(mode))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if existing.is_some() {
                    remove_any(&dest)?;
                }
                let mut f = fs::File::create(&dest)
                    .with_context(|| format!("creating {}", dest.display()))?;
                std::io::copy(&mut entry, &mut f)
                    .with_context(|| format!("writing {}", dest.display()))?;
                if let Ok(mtime) = entry.header().mtime() {
                    let _ = f.set_modified(
                        std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime),
                    );
                }
                drop(f);
                lchown(&dest, Some(uid), Some(gid))?;
                // After chown, which clears set-id bits.
                fs::set_permissions(&dest, fs::Permissions::from_mode(mode))?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .context("symlink target")?
                    .context("symlink without a target")?
                    .into_owned();
                if existing.is_some() {
                    remove_any(&dest)?;
                }
                symlink(&target, &dest).with_context(|| format!("symlink {}", dest.display()))?;
                lchown(&dest, Some(uid), Some(gid))?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .context("hard link target")?
                    .context("hard link without a target")?;
                let target = target_path(root, &normalise(&target)?)?;
                if existing.is_some() {
                    remove_any(&dest)?;
                }
                fs::hard_link(&target, &dest)
                    .with_context(|| format!("hard link {}", dest.display()))?;
            }
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
            other => {
                tracing::debug!(path = %rel.display(), kind = ?other, "skipping layer entry");
                continue;
            }
        }
        written.insert(rel);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tarball(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o755);
            if *kind == tar::EntryType::Symlink || *kind == tar::EntryType::Link {
                h.set_size(0);
                b.append_link(&mut h, path, data).unwrap();
            } else {
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path, data.as_bytes()).unwrap();
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn layers_apply_in_order_with_whiteouts_and_symlinked_parents() {
        use tar::EntryType::{Directory, Link, Regular, Symlink};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let lower = tarball(&[
            ("./usr/", Directory, ""),
            ("./usr/lib/", Directory, ""),
            ("./lib", Symlink, "usr/lib"),
            ("./etc/", Directory, ""),
            ("./etc/a", Regular, "a"),
            ("./etc/b", Regular, "b"),
            ("./opt/", Directory, ""),
            ("./opt/old", Regular, "old"),
            ("./escape", Symlink, "/"),
        ]);
        unpack_layer(root, &lower[..]).unwrap();
        let upper = tarball(&[
            ("lib/x86_64/libc.so", Regular, "libc"),
            ("etc/.wh.a", Regular, ""),
            ("opt/", Directory, ""),
            ("opt/new", Regular, "new"),
            ("opt/.wh..wh..opq", Regular, ""),
            ("etc/hard", Link, "etc/b"),
            ("escape/etc/pwned", Regular, "no"),
        ]);
        unpack_layer(root, &upper[..]).unwrap();
        assert_eq!(
            fs::read_to_string(root.join("usr/lib/x86_64/libc.so")).unwrap(),
            "libc"
        );
        assert!(
            fs::symlink_metadata(root.join("lib"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(!root.join("etc/a").exists());
        assert_eq!(fs::read_to_string(root.join("etc/hard")).unwrap(), "b");
        assert!(!root.join("opt/old").exists());
        assert_eq!(fs::read_to_string(root.join("opt/new")).unwrap(), "new");
        assert_eq!(
            fs::read_to_string(root.join("etc/pwned")).unwrap(),
            "no",
            "stays inside the root"
        );
        // An entry leaving the root (the tar writer refuses to write one: forge the header).
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..4].copy_from_slice(b"../x");
        h.set_size(0);
        h.set_entry_type(Regular);
        h.set_cksum();
        let mut evil = h.as_bytes().to_vec();
        evil.extend([0u8; 1024]);
        assert!(unpack_layer(root, &evil[..]).is_err());
        assert!(!dir.path().parent().unwrap().join("x").exists());
    }
}
