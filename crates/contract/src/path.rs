//! Lexical path normalisation, shared by the runner (where the generated root's module source
//! points, Module Contract "Injection mechanics") and tfcapi-lint (SARIF locations relative to a
//! repository).

use std::path::{Component, Path, PathBuf};

/// `path` with `.` dropped and each `..` applied to the component before it, without touching the
/// file system: no symlink is resolved, and a path that does not exist normalises too.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_are_applied_without_the_file_system() {
        assert_eq!(
            normalize(Path::new("/a/./b/../c/missing")),
            PathBuf::from("/a/c/missing")
        );
        assert_eq!(normalize(Path::new("/a/../../b")), PathBuf::from("/b"));
        assert_eq!(normalize(Path::new("a/b/..")), PathBuf::from("a"));
    }
}
