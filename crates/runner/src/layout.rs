//! The image-layout check (Image Contract "Fixed paths", Runtime Environment "Working directory
//! and the generated root"): before any command runs, the module directory must hold at least
//! one `.tf`, `.tf.json`, `.tofu` or `.tofu.json` file at its top level and the runtime must be an
//! executable file. The provider mirror is optional; when its path exists it must be a
//! directory. A failure ends the run with `error.kind: image-layout`.

use std::path::Path;

use nix::unistd::{AccessFlags, access};

/// Why an image does not follow the image contract. The message names paths only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The module directory is missing or unreadable.
    #[error("the module directory {path} is missing or unreadable: {reason}")]
    ModuleUnreadable {
        /// The module directory.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The module directory holds no configuration file at its top level.
    #[error("the module directory {path} has no .tf, .tf.json, .tofu or .tofu.json file")]
    NoConfiguration {
        /// The module directory.
        path: String,
    },
    /// The runtime is missing.
    #[error("the runtime {path} is missing: {reason}")]
    RuntimeMissing {
        /// The runtime path.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The runtime is not an executable file.
    #[error("the runtime {path} is not an executable file")]
    RuntimeNotExecutable {
        /// The runtime path.
        path: String,
    },
    /// The provider mirror path exists but is not a directory.
    #[error("the provider mirror {path} is not a directory")]
    MirrorNotDirectory {
        /// The mirror path.
        path: String,
    },
}

/// The file names the runtime reads as configuration.
pub fn is_configuration_file(name: &str) -> bool {
    [".tf", ".tf.json", ".tofu", ".tofu.json"]
        .iter()
        .any(|ext| name.len() > ext.len() && name.ends_with(ext))
}

/// Checks the image layout; returns whether the provider mirror is present.
pub fn check(module: &Path, runtime: &Path, providers: &Path) -> Result<bool, LayoutError> {
    check_module(module)?;
    check_runtime(runtime)?;
    match std::fs::metadata(providers) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => Err(LayoutError::MirrorNotDirectory {
            path: providers.display().to_string(),
        }),
        Err(_) => Ok(false),
    }
}

fn check_module(module: &Path) -> Result<(), LayoutError> {
    let unreadable = |e: std::io::Error| LayoutError::ModuleUnreadable {
        path: module.display().to_string(),
        reason: e.to_string(),
    };
    for entry in std::fs::read_dir(module).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // Follow symlinks: a linked file counts, a directory named `x.tf` does not.
        if is_configuration_file(name) && entry.path().is_file() {
            return Ok(());
        }
    }
    Err(LayoutError::NoConfiguration {
        path: module.display().to_string(),
    })
}

fn check_runtime(runtime: &Path) -> Result<(), LayoutError> {
    let meta = std::fs::metadata(runtime).map_err(|e| LayoutError::RuntimeMissing {
        path: runtime.display().to_string(),
        reason: e.to_string(),
    })?;
    if !meta.is_file() || access(runtime, AccessFlags::X_OK).is_err() {
        return Err(LayoutError::RuntimeNotExecutable {
            path: runtime.display().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn layout() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("module")).expect("module");
        std::fs::write(dir.path().join("module/main.tf"), "").expect("main.tf");
        let runtime = dir.path().join("runtime");
        std::fs::write(&runtime, "").expect("runtime");
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        dir
    }

    #[test]
    fn a_complete_image_passes_with_or_without_a_mirror() {
        let d = layout();
        let p = d.path();
        assert_eq!(
            check(&p.join("module"), &p.join("runtime"), &p.join("providers")),
            Ok(false)
        );
        std::fs::create_dir(p.join("providers")).expect("providers");
        assert_eq!(
            check(&p.join("module"), &p.join("runtime"), &p.join("providers")),
            Ok(true)
        );
    }

    #[test]
    fn every_configuration_suffix_counts() {
        for name in ["a.tf", "a.tf.json", "a.tofu", "a.tofu.json"] {
            assert!(is_configuration_file(name), "{name}");
        }
        for name in [".tf", "a.tfvars", "a.json", "README.md", "a.tf.bak"] {
            assert!(!is_configuration_file(name), "{name}");
        }
    }

    #[test]
    fn a_module_without_configuration_fails() {
        let d = layout();
        let p = d.path();
        std::fs::remove_file(p.join("module/main.tf")).expect("rm");
        std::fs::create_dir(p.join("module/nested.tf")).expect("dir named like a file");
        std::fs::write(p.join("module/vars.tfvars"), "").expect("tfvars");
        let err = check(&p.join("module"), &p.join("runtime"), &p.join("providers"));
        assert!(
            matches!(err, Err(LayoutError::NoConfiguration { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn a_missing_module_or_runtime_fails() {
        let d = layout();
        let p = d.path();
        let err = check(&p.join("nope"), &p.join("runtime"), &p.join("providers"));
        assert!(
            matches!(err, Err(LayoutError::ModuleUnreadable { .. })),
            "{err:?}"
        );
        let err = check(&p.join("module"), &p.join("nope"), &p.join("providers"));
        assert!(
            matches!(err, Err(LayoutError::RuntimeMissing { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn a_runtime_without_execute_permission_fails() {
        let d = layout();
        let p = d.path();
        std::fs::set_permissions(p.join("runtime"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        // root passes access(X_OK) for any file with an execute bit; 0644 has none.
        let err = check(&p.join("module"), &p.join("runtime"), &p.join("providers"));
        assert!(
            matches!(err, Err(LayoutError::RuntimeNotExecutable { .. })),
            "{err:?}"
        );
        let err = check(&p.join("module"), &p.join("module"), &p.join("providers"));
        assert!(
            matches!(err, Err(LayoutError::RuntimeNotExecutable { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn a_mirror_that_is_a_file_fails() {
        let d = layout();
        let p = d.path();
        std::fs::write(p.join("providers"), "").expect("file");
        let err = check(&p.join("module"), &p.join("runtime"), &p.join("providers"));
        assert!(
            matches!(err, Err(LayoutError::MirrorNotDirectory { .. })),
            "{err:?}"
        );
    }
}
