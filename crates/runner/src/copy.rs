//! `runner copy <dest>` (Job Environment, init container): the runner copies its own binary into
//! the shared volume so the module image, which needs no shell or tool of its own, can run it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Copies the running binary to `dest` with mode 0755 (through a temporary file beside it, so
/// `dest` is never a partial binary).
pub fn copy_self(dest: &Path) -> std::io::Result<()> {
    let me = std::env::current_exe()?;
    copy_binary(&me, dest)
}

/// Copies `src` to `dest` with mode 0755.
pub fn copy_binary(src: &Path, dest: &Path) -> std::io::Result<()> {
    let name = dest.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "destination has no file name",
        )
    })?;
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    let mut tmp_name = name.to_owned();
    tmp_name.push(".tmp");
    let tmp = dest.with_file_name(tmp_name);
    fs::copy(src, &tmp)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    fs::rename(&tmp, dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_is_identical_and_mode_0755() {
        let dir = tempfile::tempdir().expect("dir");
        let src = dir.path().join("src");
        fs::write(&src, b"\x7fELF binary").expect("src");
        fs::set_permissions(&src, fs::Permissions::from_mode(0o600)).expect("chmod");
        let dest = dir.path().join("bin/runner");
        copy_binary(&src, &dest).expect("copy");
        assert_eq!(fs::read(&dest).expect("read"), b"\x7fELF binary");
        let mode = fs::metadata(&dest).expect("meta").permissions().mode();
        assert_eq!(mode & 0o7777, 0o755);
        assert!(!dir.path().join("bin/runner.tmp").exists());
    }
}
