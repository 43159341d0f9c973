//! The generated root (Runtime Environment "Working directory and the generated root"; Terraform
//! State "Restore"): `<workdir>/root` built from the per-run Secret mounted at `<config>`.
//!
//! - apply, destroy, refresh, drift, plan: `main.tf.json` and `terraform.tfvars.json` copied from
//!   `<config>`. The rendered `module "role"` calls `../../module`, which from `/captf/work/root` is
//!   `/captf/module`; when `--workdir`/`--module` put the module elsewhere the call is pointed at
//!   it, still as a relative local path, so init never fetches a module.
//! - restore: the backend block alone (no module, no variable) and the backup's state, assembled
//!   from the chunk files `<config>/restore/0..N` (concatenated, then gunzipped as the backend
//!   stored them) into `<workdir>/restore.tfstate`.
//!
//! Files holding values are written mode 0600.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use contract::path::normalize;
use contract::render::{MAIN_TF_JSON, MODULE_NAME, MODULE_SOURCE, TFVARS_JSON};
use contract::state::MAX_STATE_BYTES;

/// Why the root could not be prepared. Messages name files, never contents.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A file of the per-run Secret is missing or unreadable.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The work directory is not writable.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file or directory.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// `main.tf.json` is not the rendered root.
    #[error("{path} is not a JSON object")]
    NotJson {
        /// The file.
        path: String,
    },
    /// A restore without chunks.
    #[error("a restore needs --restore-chunks of at least 1")]
    NoChunks,
    /// The backup is not a gzip-compressed state.
    #[error("the backup under {path} is not a readable state: {reason}")]
    BadBackup {
        /// The restore directory.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, PrepareError> {
    fs::read(path).map_err(|e| PrepareError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Writes `data` to `path`, mode 0600 (an existing file gets that mode too).
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), PrepareError> {
    let err = |e: std::io::Error| PrepareError::Write {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    // An existing file keeps its mode on open; set it.
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    Ok(())
}

fn mkdir(path: &Path) -> Result<(), PrepareError> {
    fs::create_dir_all(path).map_err(|e| PrepareError::Write {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// The generated root's directory.
pub fn root_dir(workdir: &Path) -> PathBuf {
    workdir.join("root")
}

/// The state file a restore pushes.
pub fn state_file(workdir: &Path) -> PathBuf {
    workdir.join("restore.tfstate")
}

/// Creates `<workdir>/root` afresh (and `tmpdir` when it lies in the work directory).
pub fn make_dirs(workdir: &Path, tmpdir: &Path) -> Result<PathBuf, PrepareError> {
    let root = root_dir(workdir);
    if root.exists() {
        fs::remove_dir_all(&root).map_err(|e| PrepareError::Write {
            path: root.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    mkdir(&root)?;
    if tmpdir.starts_with(workdir) {
        mkdir(tmpdir)?;
    }
    Ok(root)
}

/// The root of a non-restore operation, as written.
#[derive(Debug)]
pub struct ModuleRoot {
    /// The tfvars bytes (for the redactor).
    pub tfvars: Vec<u8>,
    /// The contract outputs the module does not declare, dropped from the root
    /// ([`crate::undeclared`]).
    pub undeclared: Vec<String>,
}

/// Writes the root of a non-restore operation.
pub fn write_module_root(
    config: &Path,
    root: &Path,
    module: &Path,
) -> Result<ModuleRoot, PrepareError> {
    let main_path = config.join(MAIN_TF_JSON);
    let main = read(&main_path)?;
    let tfvars = read(&config.join(TFVARS_JSON))?;
    let not_json = || PrepareError::NotJson {
        path: main_path.display().to_string(),
    };
    let main = point_module_call(&main, root, module).ok_or_else(not_json)?;
    let mut undeclared = Vec::new();
    let main = match crate::undeclared::declared_outputs(module) {
        Some(declared) => {
            let mut doc: serde_json::Value =
                serde_json::from_slice(&main).map_err(|_| not_json())?;
            undeclared = crate::undeclared::drop_undeclared(&mut doc, &declared);
            if undeclared.is_empty() {
                main
            } else {
                serde_json::to_vec_pretty(&doc).map_err(|_| not_json())?
            }
        }
        None => main,
    };
    write_private(&root.join(MAIN_TF_JSON), &main)?;
    write_private(&root.join(TFVARS_JSON), &tfvars)?;
    Ok(ModuleRoot { tfvars, undeclared })
}

/// Writes a restore's root and state file.
pub fn write_restore_root(
    config: &Path,
    root: &Path,
    state_file: &Path,
    chunks: u32,
) -> Result<(), PrepareError> {
    write_private(
        &root.join(MAIN_TF_JSON),
        contract::render::restore_main_tf_json().as_bytes(),
    )?;
    let state = assemble_backup(&config.join("restore"), chunks)?;
    write_private(state_file, &state)
}

/// Concatenates the chunk files `0..chunks` under `dir` and decompresses the result (a plain
/// JSON state is accepted as is).
pub fn assemble_backup(dir: &Path, chunks: u32) -> Result<Vec<u8>, PrepareError> {
    if chunks == 0 {
        return Err(PrepareError::NoChunks);
    }
    let mut compressed = Vec::new();
    for i in 0..chunks {
        compressed.extend(read(&dir.join(i.to_string()))?);
    }
    let bad = |reason: String| PrepareError::BadBackup {
        path: dir.display().to_string(),
        reason,
    };
    let document = if compressed.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(compressed.as_slice())
            .take(MAX_STATE_BYTES as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|_| bad("not valid gzip".into()))?;
        if out.len() > MAX_STATE_BYTES {
            return Err(bad(format!("larger than {MAX_STATE_BYTES} bytes")));
        }
        out
    } else {
        compressed
    };
    match serde_json::from_slice::<serde_json::Value>(&document) {
        Ok(serde_json::Value::Object(_)) => Ok(document),
        _ => Err(bad("not a JSON state document".into())),
    }
}

/// `main.tf.json` with the module call pointed at `module` when the rendered `../../module`
/// does not reach it from `root`; `None` when the file is not a JSON object.
pub fn point_module_call(main: &[u8], root: &Path, module: &Path) -> Option<Vec<u8>> {
    let mut doc: serde_json::Value = serde_json::from_slice(main).ok()?;
    doc.as_object()?;
    let rendered = normalize(&root.join(MODULE_SOURCE));
    let wanted = normalize(module);
    if rendered == wanted {
        return Some(main.to_vec());
    }
    let Some(source) = doc
        .get_mut("module")
        .and_then(|m| m.get_mut(MODULE_NAME))
        .and_then(|m| m.get_mut("source"))
    else {
        return Some(main.to_vec());
    };
    if source.as_str() != Some(MODULE_SOURCE) {
        return Some(main.to_vec());
    }
    *source = serde_json::Value::String(relative(&normalize(root), &wanted));
    serde_json::to_vec_pretty(&doc).ok()
}

/// `to` relative to `from` (both absolute and normalised), always starting `./` or `../` as a
/// local module source must.
fn relative(from: &Path, to: &Path) -> String {
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = std::iter::repeat_n("..".to_owned(), f.len() - common).collect();
    parts.extend(
        t[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    if parts.first().is_none_or(|p| p != "..") {
        parts.insert(0, ".".to_owned());
    }
    parts.join("/")
}

/// Writes `cli.tfrc` (mode 0644: it holds no secret).
pub fn write_cli_config(path: &Path, text: &str) -> Result<(), PrepareError> {
    let err = |e: std::io::Error| PrepareError::Write {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    fs::write(path, text).map_err(err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;

    const MAIN: &str = r#"{"terraform":{"backend":{"kubernetes":{}}},"module":{"role":{"source":"../../module","x":"${var.x}"}}}"#;

    #[test]
    fn the_production_layout_keeps_the_rendered_call() {
        let out = point_module_call(
            MAIN.as_bytes(),
            Path::new("/captf/work/root"),
            Path::new("/captf/module"),
        )
        .expect("json");
        assert_eq!(out, MAIN.as_bytes());
    }

    #[test]
    fn a_moved_module_is_called_by_a_relative_path() {
        let out = point_module_call(
            MAIN.as_bytes(),
            Path::new("/tmp/t/work/root"),
            Path::new("/srv/images/m1/module"),
        )
        .expect("json");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(
            v["module"]["role"]["source"],
            "../../../../srv/images/m1/module"
        );
        assert_eq!(v["module"]["role"]["x"], "${var.x}");
        let inside = point_module_call(
            MAIN.as_bytes(),
            Path::new("/w/root"),
            Path::new("/w/root/mod"),
        )
        .expect("json");
        let v: serde_json::Value = serde_json::from_slice(&inside).expect("json");
        assert_eq!(v["module"]["role"]["source"], "./mod");
    }

    #[test]
    fn main_tf_json_must_be_an_object() {
        assert!(point_module_call(b"[]", Path::new("/w/root"), Path::new("/m")).is_none());
        assert!(point_module_call(b"nope", Path::new("/w/root"), Path::new("/m")).is_none());
    }

    #[test]
    fn a_chunked_gzip_backup_is_reassembled() {
        let state = br#"{"version":4,"serial":3,"lineage":"l","resources":[]}"#;
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(state).expect("gz");
        let gz = gz.finish().expect("gz");
        let dir = tempfile::tempdir().expect("dir");
        let (a, b) = gz.split_at(gz.len() / 2);
        fs::write(dir.path().join("0"), a).expect("0");
        fs::write(dir.path().join("1"), b).expect("1");
        assert_eq!(
            assemble_backup(dir.path(), 2).expect("state"),
            state.to_vec()
        );
        assert!(matches!(
            assemble_backup(dir.path(), 0),
            Err(PrepareError::NoChunks)
        ));
        assert!(matches!(
            assemble_backup(dir.path(), 3),
            Err(PrepareError::Read { .. })
        ));
        assert!(matches!(
            assemble_backup(dir.path(), 1),
            Err(PrepareError::BadBackup { .. })
        ));
    }

    #[test]
    fn files_with_values_are_private() {
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("config");
        fs::create_dir(&config).expect("config");
        fs::write(config.join(MAIN_TF_JSON), MAIN).expect("main");
        fs::write(config.join(TFVARS_JSON), r#"{"x":"v"}"#).expect("tfvars");
        let work = dir.path().join("work");
        let root = make_dirs(&work, &work.join("tmp")).expect("dirs");
        let written = write_module_root(&config, &root, &dir.path().join("module")).expect("root");
        assert_eq!(written.tfvars, br#"{"x":"v"}"#.to_vec());
        let mode = fs::metadata(root.join(TFVARS_JSON))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(work.join("tmp").is_dir());
    }

    /// Module Contract "Null semantics": the root written for a module that does not declare a
    /// contract output re-exports only what it declares and lists the rest in
    /// `captf_undeclared_outputs`; a module whose files cannot be parsed keeps the rendered root.
    #[test]
    fn the_written_root_lists_the_outputs_the_module_does_not_declare() {
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("config");
        let module = dir.path().join("module");
        fs::create_dir(&config).expect("config");
        fs::create_dir(&module).expect("module");
        let main = r#"{"module":{"role":{"source":"../../module"}},"output":{"provider_id":{"value":"${module.role.provider_id}","sensitive":true},"health":{"value":"${module.role.health}","sensitive":true}}}"#;
        fs::write(config.join(MAIN_TF_JSON), main).expect("main");
        fs::write(config.join(TFVARS_JSON), "{}").expect("tfvars");
        fs::write(
            module.join("outputs.tf"),
            "output \"health\" {\n  value = null\n}\n",
        )
        .expect("outputs.tf");
        let work = dir.path().join("work");
        let root = make_dirs(&work, &work.join("tmp")).expect("dirs");
        let written = write_module_root(&config, &root, &module).expect("root");
        assert_eq!(written.undeclared, vec!["provider_id".to_owned()]);
        let doc: serde_json::Value =
            serde_json::from_slice(&fs::read(root.join(MAIN_TF_JSON)).expect("read"))
                .expect("json");
        assert_eq!(
            doc["output"]["captf_undeclared_outputs"]["value"],
            serde_json::json!(["provider_id"])
        );
        assert!(doc["output"].get("provider_id").is_none());
        fs::write(module.join("broken.tf"), "output {").expect("broken.tf");
        let written = write_module_root(&config, &root, &module).expect("root");
        assert!(written.undeclared.is_empty());
        assert_eq!(
            fs::read(root.join(MAIN_TF_JSON)).expect("read"),
            main.as_bytes()
        );
    }
}
