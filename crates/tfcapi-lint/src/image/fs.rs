//! The image's root filesystem as the layers build it, without writing anything to disk: paths,
//! types, modes and owners, plus the contents of the few files the checks read (the module's
//! configuration files and `/etc/passwd`/`/etc/group`). Whiteouts (`.wh.NAME`, `.wh..wh..opq`)
//! remove what lower layers shipped, as a container runtime would.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};

/// The largest file whose contents are kept.
const MAX_KEPT_FILE: u64 = 8 * 1024 * 1024;
/// The most file contents kept in all.
const MAX_KEPT_TOTAL: u64 = 256 * 1024 * 1024;
/// How many symlinks a path may go through.
const MAX_SYMLINKS: usize = 40;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file; `data` holds its contents when the loader kept them.
    File {
        /// Contents, for kept files.
        data: Option<Vec<u8>>,
    },
    /// A directory.
    Dir,
    /// A symbolic link and its target as written.
    Symlink(String),
    /// A hard link to another path of the image.
    Hardlink(String),
    /// A device, fifo or other special file.
    Other,
}

/// One path of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its type.
    pub kind: EntryKind,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
}

/// The merged filesystem; keys are paths without a leading `/` (`captf/module/main.tf`).
#[derive(Debug, Clone, Default)]
pub struct Fs {
    entries: BTreeMap<String, Entry>,
    kept: u64,
}

/// Normalises a tar path: no leading `./` or `/`, no trailing `/`, no `.` components; `None` for
/// paths that climb out with `..`.
pub fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

fn parent(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

impl Fs {
    /// An empty filesystem.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts an entry (tests and layer reading).
    pub fn insert(&mut self, path: &str, entry: Entry) {
        if let Some(p) = normalize(path)
            && !p.is_empty()
        {
            self.entries.insert(p, entry);
        }
    }

    fn remove_tree(&mut self, path: &str) {
        self.entries.remove(path);
        self.remove_children(path);
    }

    fn remove_children(&mut self, dir: &str) {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let doomed: Vec<String> = self
            .entries
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.entries.remove(&k);
        }
    }

    /// Applies one uncompressed layer tar; `keep` says which files' contents to keep.
    pub fn apply_layer(
        &mut self,
        reader: impl Read,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<(), String> {
        let mut archive = tar::Archive::new(reader);
        let mut additions: Vec<(String, Entry)> = Vec::new();
        let mut whiteouts: Vec<String> = Vec::new();
        let mut opaque: Vec<String> = Vec::new();
        let entries = archive
            .entries()
            .map_err(|e| format!("cannot read the layer: {e}"))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| format!("cannot read the layer: {e}"))?;
            let raw_path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let Some(path) = normalize(&raw_path) else {
                continue;
            };
            if path.is_empty() {
                continue;
            }
            let name = path.rsplit('/').next().unwrap_or(&path);
            if name == ".wh..wh..opq" {
                opaque.push(parent(&path).to_owned());
                continue;
            }
            if let Some(hidden) = name.strip_prefix(".wh.") {
                whiteouts.push(join(parent(&path), hidden));
                continue;
            }
            let (mode, uid, gid, entry_type, size) = {
                let header = entry.header();
                (
                    header.mode().unwrap_or(0o644) & 0o7777,
                    header.uid().unwrap_or(0),
                    header.gid().unwrap_or(0),
                    header.entry_type(),
                    header.size().unwrap_or(0),
                )
            };
            let link = entry
                .link_name_bytes()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let kind = match entry_type {
                tar::EntryType::Directory => EntryKind::Dir,
                tar::EntryType::Symlink => EntryKind::Symlink(link),
                tar::EntryType::Link => EntryKind::Hardlink(normalize(&link).unwrap_or_default()),
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let data = if keep(&path)
                        && size <= MAX_KEPT_FILE
                        && self.kept + size <= MAX_KEPT_TOTAL
                    {
                        self.kept += size;
                        let mut buf = Vec::new();
                        entry
                            .read_to_end(&mut buf)
                            .map_err(|e| format!("cannot read {path} from the layer: {e}"))?;
                        Some(buf)
                    } else {
                        None
                    };
                    EntryKind::File { data }
                }
                _ => EntryKind::Other,
            };
            additions.push((
                path,
                Entry {
                    kind,
                    mode,
                    uid,
                    gid,
                },
            ));
        }
        for dir in opaque {
            self.remove_children(&dir);
        }
        for path in whiteouts {
            self.remove_tree(&path);
        }
        for (path, entry) in additions {
            if entry.kind != EntryKind::Dir {
                self.remove_children(&path);
            }
            self.entries.insert(path, entry);
        }
        Ok(())
    }

    /// The entry at `path` exactly as stored (no symlink following).
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path)
    }

    /// Whether `path` exists as an entry or as the implicit parent of one.
    fn is_implicit_dir(&self, path: &str) -> bool {
        if path.is_empty() {
            return true;
        }
        let prefix = format!("{path}/");
        self.entries
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&prefix))
    }

    /// Resolves `path` following symlinks (in every component) and hard links; returns the final
    /// path and its entry, or `None` when it does not exist. Directories implied by their contents
    /// come back as a synthetic directory entry.
    pub fn resolve(&self, path: &str) -> Option<(String, Entry)> {
        let mut pending: Vec<String> = normalize(path)?
            .split('/')
            .filter(|p| !p.is_empty())
            .rev()
            .map(str::to_owned)
            .collect();
        let mut current = String::new();
        let mut hops = 0;
        while let Some(part) = pending.pop() {
            if part == ".." {
                let up = parent(&current).len();
                current.truncate(up);
                continue;
            }
            let candidate = join(&current, &part);
            match self.entries.get(&candidate).map(|e| &e.kind) {
                Some(EntryKind::Symlink(target)) => {
                    hops += 1;
                    if hops > MAX_SYMLINKS {
                        return None;
                    }
                    if target.starts_with('/') {
                        current.clear();
                    }
                    for p in target
                        .split('/')
                        .filter(|p| !p.is_empty() && *p != ".")
                        .rev()
                    {
                        pending.push(p.to_owned());
                    }
                }
                Some(EntryKind::Hardlink(target)) => {
                    hops += 1;
                    if hops > MAX_SYMLINKS {
                        return None;
                    }
                    let target = target.clone();
                    current.clear();
                    for p in target.split('/').filter(|p| !p.is_empty()).rev() {
                        pending.push(p.to_owned());
                    }
                }
                Some(_) => current = candidate,
                None if self.is_implicit_dir(&candidate) => current = candidate,
                None => return None,
            }
        }
        if current.is_empty() {
            return Some((
                current,
                Entry {
                    kind: EntryKind::Dir,
                    mode: 0o755,
                    uid: 0,
                    gid: 0,
                },
            ));
        }
        let entry = self.entries.get(&current).cloned().unwrap_or(Entry {
            kind: EntryKind::Dir,
            mode: 0o755,
            uid: 0,
            gid: 0,
        });
        Some((current, entry))
    }

    /// The names directly inside directory `dir` (a stored path, no symlink following).
    pub fn children(&self, dir: &str) -> Vec<String> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut names: Vec<String> = Vec::new();
        for (k, _) in self
            .entries
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
        {
            let rest = &k[prefix.len()..];
            let name = rest.split('/').next().unwrap_or(rest);
            if names.last().map(String::as_str) != Some(name) {
                names.push(name.to_owned());
            }
        }
        names.dedup();
        names
    }

    /// Every stored path under `dir` with its entry (no symlink following).
    pub fn descendants<'a>(
        &'a self,
        dir: &str,
    ) -> impl Iterator<Item = (&'a String, &'a Entry)> + 'a {
        let prefix = format!("{dir}/");
        self.entries
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
    }

    /// The contents of a kept file at `path` (symlinks followed).
    pub fn read(&self, path: &str) -> Option<&[u8]> {
        let (resolved, _) = self.resolve(path)?;
        match &self.entries.get(&resolved)?.kind {
            EntryKind::File { data: Some(d) } => Some(d),
            _ => None,
        }
    }

    /// Looks a user up in `/etc/passwd`: `(uid, gid)`.
    pub fn passwd_user(&self, name: &str) -> Option<(u64, u64)> {
        let data = self.read("etc/passwd")?;
        for line in BufReader::new(data).lines().map_while(Result::ok) {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() >= 4 && fields[0] == name {
                return Some((fields[2].parse().ok()?, fields[3].parse().ok()?));
            }
        }
        None
    }

    /// Looks a group up in `/etc/group`.
    pub fn group_gid(&self, name: &str) -> Option<u64> {
        let data = self.read("etc/group")?;
        for line in BufReader::new(data).lines().map_while(Result::ok) {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() >= 3 && fields[0] == name {
                return fields[2].parse().ok();
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, content) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o755);
            match kind {
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    h.set_size(0);
                    b.append_link(&mut h, path, content).unwrap();
                }
                _ => {
                    h.set_size(content.len() as u64);
                    b.append_data(&mut h, path, content.as_bytes()).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn whiteouts_and_symlinks() {
        use tar::EntryType::{Directory, Regular, Symlink};
        let mut fs = Fs::new();
        let keep = |_: &str| true;
        fs.apply_layer(
            &layer(&[
                ("bin/", Directory, ""),
                ("bin/tofu", Regular, "x"),
                ("captf/bin/runner", Regular, "r"),
                ("old/a", Regular, "a"),
                ("old/b", Regular, "b"),
            ])[..],
            &keep,
        )
        .unwrap();
        fs.apply_layer(
            &layer(&[
                ("captf/runtime", Symlink, "/bin/tofu"),
                ("captf/bin/.wh.runner", Regular, ""),
                ("old/.wh..wh..opq", Regular, ""),
                ("old/c", Regular, "c"),
            ])[..],
            &keep,
        )
        .unwrap();
        assert_eq!(fs.resolve("/captf/runtime").unwrap().0, "bin/tofu");
        assert!(fs.get("captf/bin/runner").is_none());
        assert_eq!(fs.children("old"), ["c"]);
        assert_eq!(fs.read("old/c"), Some(&b"c"[..]));
        assert!(fs.resolve("captf").is_some());
        assert!(fs.resolve("nope").is_none());
    }

    #[test]
    fn symlink_loops_end() {
        let mut fs = Fs::new();
        let link = |t: &str| Entry {
            kind: EntryKind::Symlink(t.into()),
            mode: 0o777,
            uid: 0,
            gid: 0,
        };
        fs.insert("a", link("b"));
        fs.insert("b", link("a"));
        assert!(fs.resolve("a").is_none());
        assert_eq!(normalize("./a/../../b"), None);
        assert_eq!(normalize("./a//b/"), Some("a/b".into()));
    }
}
