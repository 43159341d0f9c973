//! Building images without a container engine: layers from files and directories as
//! deterministic gzip tarballs, an OCI config and manifest, pushed to a registry by tag and
//! addressed by digest.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;

use super::http::HttpClient;
use super::{ImageConfig, Reference, media_type, sha256_digest};

/// The non-root user of the images built here (the Image Contract's recommendation).
pub const NONROOT: u32 = 65532;

#[derive(Debug, Clone)]
enum Content {
    Bytes(Arc<Vec<u8>>),
    Host(PathBuf),
}

#[derive(Debug, Clone)]
enum Kind {
    Dir,
    File(Content),
    Symlink(String),
    Whiteout,
}

#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// A layer being assembled: paths inside the image (absolute or relative, both mean the same)
/// with their content, mode and owner. Parent directories are added (0755, root) when missing.
/// The tarball is deterministic: sorted entries, mtime 0, numeric owners only.
#[derive(Debug, Clone, Default)]
pub struct Layer {
    entries: BTreeMap<String, Entry>,
    owner: (u32, u32),
}

fn key(path: &str) -> String {
    path.trim_matches('/').to_owned()
}

impl Layer {
    /// An empty layer whose entries are owned by root.
    pub fn new() -> Self {
        Self::default()
    }

    /// The owner of entries added from now on.
    pub fn owner(&mut self, uid: u32, gid: u32) -> &mut Self {
        self.owner = (uid, gid);
        self
    }

    fn put(&mut self, path: &str, kind: Kind, mode: u32) -> &mut Self {
        let (uid, gid) = self.owner;
        self.entries.insert(
            key(path),
            Entry {
                kind,
                mode,
                uid,
                gid,
            },
        );
        self
    }

    /// A directory.
    pub fn dir(&mut self, path: &str, mode: u32) -> &mut Self {
        self.put(path, Kind::Dir, mode)
    }

    /// A file with the given contents.
    pub fn file(&mut self, path: &str, contents: impl Into<Vec<u8>>, mode: u32) -> &mut Self {
        self.put(
            path,
            Kind::File(Content::Bytes(Arc::new(contents.into()))),
            mode,
        )
    }

    /// A file copied from the host when the layer is built.
    pub fn host_file(&mut self, path: &str, src: impl Into<PathBuf>, mode: u32) -> &mut Self {
        self.put(path, Kind::File(Content::Host(src.into())), mode)
    }

    /// A symbolic link.
    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.put(path, Kind::Symlink(target.to_owned()), 0o777)
    }

    /// A whiteout: removes `path` of the layers below.
    pub fn whiteout(&mut self, path: &str) -> &mut Self {
        let k = key(path);
        let (dir, name) = k.rsplit_once('/').unwrap_or(("", k.as_str()));
        let wh = if dir.is_empty() {
            format!(".wh.{name}")
        } else {
            format!("{dir}/.wh.{name}")
        };
        self.put(&wh, Kind::Whiteout, 0o644)
    }

    /// An opaque-directory marker: hides everything the layers below have in `dir`.
    pub fn opaque(&mut self, dir: &str) -> &mut Self {
        let k = key(dir);
        let wh = if k.is_empty() {
            ".wh..wh..opq".to_owned()
        } else {
            format!("{k}/.wh..wh..opq")
        };
        self.put(&wh, Kind::Whiteout, 0o644)
    }

    /// The tree under `src` at `dest`: directories, files (with their permission bits) and
    /// symbolic links, owned by the current owner.
    pub fn host_dir(&mut self, dest: &str, src: &Path) -> anyhow::Result<&mut Self> {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(src).with_context(|| format!("reading {}", src.display()))?;
        if !meta.is_dir() {
            bail!("{} is not a directory", src.display());
        }
        self.dir(dest, 0o755);
        let mut stack = vec![(src.to_path_buf(), key(dest))];
        while let Some((host, inside)) = stack.pop() {
            let mut children: Vec<_> = std::fs::read_dir(&host)
                .with_context(|| format!("reading {}", host.display()))?
                .collect::<Result<_, _>>()?;
            children.sort_by_key(std::fs::DirEntry::file_name);
            for child in children {
                let name = child.file_name().to_string_lossy().into_owned();
                let path = format!("{inside}/{name}");
                let m = std::fs::symlink_metadata(child.path())?;
                if m.file_type().is_symlink() {
                    let target = std::fs::read_link(child.path())?;
                    self.symlink(&path, &target.to_string_lossy());
                } else if m.is_dir() {
                    self.dir(&path, m.permissions().mode() & 0o7777);
                    stack.push((child.path(), path));
                } else if m.is_file() {
                    self.host_file(&path, child.path(), m.permissions().mode() & 0o7777);
                }
            }
        }
        Ok(self)
    }

    /// An executable from the host at `dest`, plus — when it is dynamically linked — the shared
    /// libraries `ldd` lists, at their host paths.
    pub fn host_binary(&mut self, dest: &str, src: &Path) -> anyhow::Result<&mut Self> {
        self.host_file(dest, src, 0o755);
        let out = std::process::Command::new("ldd")
            .arg(src)
            .output()
            .context("running ldd")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || text.contains("statically linked") {
            return Ok(self);
        }
        let owner = self.owner;
        self.owner = (0, 0);
        for line in text.lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux... (0x...)"
            let path = line
                .split("=>")
                .last()
                .and_then(|s| s.split_whitespace().next())
                .filter(|p| p.starts_with('/'));
            if let Some(p) = path {
                self.host_file(p, p, 0o755);
            }
        }
        self.owner = owner;
        Ok(self)
    }

    fn with_parents(&self) -> BTreeMap<String, Entry> {
        let mut all = self.entries.clone();
        for k in self.entries.keys() {
            let mut p = k.as_str();
            while let Some((parent, _)) = p.rsplit_once('/') {
                all.entry(parent.to_owned()).or_insert(Entry {
                    kind: Kind::Dir,
                    mode: 0o755,
                    uid: 0,
                    gid: 0,
                });
                p = parent;
            }
        }
        all
    }

    /// Builds the gzip tarball (CPU-bound: call it off the async runtime for big layers).
    pub fn build(&self) -> anyhow::Result<LayerBlob> {
        let hashing = HashingWriter {
            inner: flate2::GzBuilder::new()
                .mtime(0)
                .write(Vec::new(), flate2::Compression::fast()),
            hasher: <sha2::Sha256 as sha2::Digest>::new(),
        };
        let mut tar = tar::Builder::new(hashing);
        tar.mode(tar::HeaderMode::Deterministic);
        for (path, e) in self.with_parents() {
            let mut h = tar::Header::new_gnu();
            h.set_mode(e.mode);
            h.set_uid(u64::from(e.uid));
            h.set_gid(u64::from(e.gid));
            h.set_mtime(0);
            match &e.kind {
                Kind::Dir => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    tar.append_data(&mut h, format!("{path}/"), std::io::empty())?;
                }
                Kind::Whiteout => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(0);
                    tar.append_data(&mut h, &path, std::io::empty())?;
                }
                Kind::Symlink(target) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    tar.append_link(&mut h, &path, target)?;
                }
                Kind::File(Content::Bytes(b)) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(b.len() as u64);
                    tar.append_data(&mut h, &path, &b[..])?;
                }
                Kind::File(Content::Host(src)) => {
                    let f = std::fs::File::open(src)
                        .with_context(|| format!("opening {}", src.display()))?;
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(f.metadata()?.len());
                    tar.append_data(&mut h, &path, f)?;
                }
            }
        }
        let hashing = tar.into_inner()?;
        let diff_id = format!(
            "sha256:{}",
            hex::encode(sha2::Digest::finalize(hashing.hasher))
        );
        let gz = hashing.inner.finish()?;
        Ok(LayerBlob {
            digest: sha256_digest(&gz),
            diff_id,
            data: Bytes::from(gz),
        })
    }
}

struct HashingWriter<W> {
    inner: W,
    hasher: sha2::Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        sha2::Digest::update(&mut self.hasher, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A built layer: the gzip tarball, its digest and the digest of the uncompressed tar.
#[derive(Debug, Clone)]
pub struct LayerBlob {
    /// `sha256:` of the gzip data.
    pub digest: String,
    /// `sha256:` of the uncompressed tarball.
    pub diff_id: String,
    /// The gzip data.
    pub data: Bytes,
}

#[derive(Debug, Clone)]
enum PendingLayer {
    Built(Arc<LayerBlob>),
    Pending(Layer),
}

/// An image being assembled: layers (bottom first) and the runtime config.
#[derive(Debug, Clone, Default)]
pub struct ImageBuilder {
    layers: Vec<PendingLayer>,
    config: ImageConfig,
    /// The config's `architecture`; `amd64` when unset.
    architecture: Option<String>,
}

impl ImageBuilder {
    /// An empty image.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a layer on top (built when the image is pushed).
    #[must_use]
    pub fn layer(mut self, layer: Layer) -> Self {
        self.layers.push(PendingLayer::Pending(layer));
        self
    }

    /// Adds an already built layer on top.
    #[must_use]
    pub fn layer_blob(mut self, blob: Arc<LayerBlob>) -> Self {
        self.layers.push(PendingLayer::Built(blob));
        self
    }

    /// `User` (`uid[:gid]` or a name).
    #[must_use]
    pub fn user(mut self, user: &str) -> Self {
        self.config.user = Some(user.to_owned());
        self
    }

    /// Adds `K=V` to `Env`.
    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.config
            .env
            .get_or_insert_with(Vec::new)
            .push(format!("{key}={value}"));
        self
    }

    /// The platform's architecture the config names (`amd64` unless set).
    #[must_use]
    pub fn architecture(mut self, architecture: &str) -> Self {
        self.architecture = Some(architecture.to_owned());
        self
    }

    /// `Entrypoint`.
    #[must_use]
    pub fn entrypoint<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.config.entrypoint = Some(args.into_iter().map(Into::into).collect());
        self
    }

    /// `Cmd`.
    #[must_use]
    pub fn cmd<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.config.cmd = Some(args.into_iter().map(Into::into).collect());
        self
    }

    /// `WorkingDir`.
    #[must_use]
    pub fn working_dir(mut self, dir: &str) -> Self {
        self.config.working_dir = Some(dir.to_owned());
        self
    }

    /// Adds a label.
    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.config
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// The runtime config so far.
    pub fn config(&self) -> &ImageConfig {
        &self.config
    }

    /// Builds the layers, pushes blobs, config and manifest to `registry` (`host:port`) as
    /// `repository:tag`, and returns the digest reference `registry/repository@sha256:...`.
    pub async fn push(
        &self,
        registry: &str,
        repository: &str,
        tag: &str,
    ) -> anyhow::Result<Reference> {
        let mut blobs = Vec::new();
        for l in &self.layers {
            blobs.push(match l {
                PendingLayer::Built(b) => b.clone(),
                PendingLayer::Pending(layer) => {
                    let layer = layer.clone();
                    Arc::new(
                        tokio::task::spawn_blocking(move || layer.build())
                            .await
                            .context("layer build task")??,
                    )
                }
            });
        }
        let config = json!({
            "created": "1970-01-01T00:00:00Z",
            "architecture": self.architecture.as_deref().unwrap_or("amd64"),
            "os": "linux",
            "config": self.config,
            "rootfs": {
                "type": "layers",
                "diff_ids": blobs.iter().map(|b| b.diff_id.clone()).collect::<Vec<_>>(),
            },
        });
        let config = Bytes::from(serde_json::to_vec(&config)?);
        let config_digest = sha256_digest(&config);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": media_type::OCI_MANIFEST,
            "config": {
                "mediaType": media_type::OCI_CONFIG,
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": blobs.iter().map(|b| json!({
                "mediaType": media_type::OCI_LAYER_GZIP,
                "digest": b.digest,
                "size": b.data.len(),
            })).collect::<Vec<_>>(),
        });
        let manifest = Bytes::from(serde_json::to_vec(&manifest)?);
        let digest = sha256_digest(&manifest);

        let http = HttpClient::new();
        let base = format!("http://{registry}/v2/{repository}");
        for (d, data) in blobs
            .iter()
            .map(|b| (b.digest.clone(), b.data.clone()))
            .chain(std::iter::once((config_digest.clone(), config.clone())))
        {
            push_blob(&http, &base, &d, data).await?;
        }
        http.send(
            Method::PUT,
            &format!("{base}/manifests/{tag}"),
            &[("Content-Type", media_type::OCI_MANIFEST)],
            manifest,
        )
        .await?
        .expect(
            &format!("pushing the manifest of {repository}:{tag}"),
            &[StatusCode::CREATED, StatusCode::OK],
        )?;
        tracing::info!(%registry, %repository, %tag, %digest, "pushed image");
        Ok(Reference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: None,
            digest: Some(digest),
        })
    }
}

/// Pushes an image index (`application/vnd.oci.image.index.v1+json`) as `repository:tag` whose
/// entries are the given manifests (by digest, in the same repository) with their platform
/// (`os/architecture`); returns the index's digest reference. For multi-platform tests.
pub async fn push_index(
    registry: &str,
    repository: &str,
    tag: &str,
    manifests: &[(&Reference, &str)],
) -> anyhow::Result<Reference> {
    let http = HttpClient::new();
    let base = format!("http://{registry}/v2/{repository}");
    let mut entries = Vec::new();
    for (r, platform) in manifests {
        let digest = r
            .digest
            .as_deref()
            .context("index entries need digest references")?;
        let resp = http
            .get(
                &format!("{base}/manifests/{digest}"),
                &[("Accept", media_type::OCI_MANIFEST)],
            )
            .await?
            .expect(&format!("manifest {digest}"), &[StatusCode::OK])?;
        let (os, arch) = platform
            .split_once('/')
            .with_context(|| format!("platform {platform:?} is not os/architecture"))?;
        entries.push(json!({
            "mediaType": media_type::OCI_MANIFEST,
            "digest": digest,
            "size": resp.body.len(),
            "platform": {"os": os, "architecture": arch},
        }));
    }
    let index = Bytes::from(serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": media_type::OCI_INDEX,
        "manifests": entries,
    }))?);
    let digest = sha256_digest(&index);
    http.send(
        Method::PUT,
        &format!("{base}/manifests/{tag}"),
        &[("Content-Type", media_type::OCI_INDEX)],
        index,
    )
    .await?
    .expect(
        &format!("pushing the index {repository}:{tag}"),
        &[StatusCode::CREATED, StatusCode::OK],
    )?;
    Ok(Reference {
        registry: registry.to_owned(),
        repository: repository.to_owned(),
        tag: None,
        digest: Some(digest),
    })
}

async fn push_blob(http: &HttpClient, base: &str, digest: &str, data: Bytes) -> anyhow::Result<()> {
    let head = http
        .send(
            Method::HEAD,
            &format!("{base}/blobs/{digest}"),
            &[],
            Bytes::new(),
        )
        .await?;
    if head.status == StatusCode::OK {
        return Ok(());
    }
    let start = http
        .send(
            Method::POST,
            &format!("{base}/blobs/uploads/"),
            &[],
            Bytes::new(),
        )
        .await?
        .expect("starting a blob upload", &[StatusCode::ACCEPTED])?;
    let location = start
        .header("Location")
        .context("blob upload without a Location")?
        .to_owned();
    let url = if location.starts_with("http") {
        location
    } else {
        let host = base
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
            .unwrap_or_default();
        format!("http://{host}{location}")
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let len = data.len().to_string();
    http.send(
        Method::PUT,
        &format!("{url}{sep}digest={digest}"),
        &[
            ("Content-Type", "application/octet-stream"),
            ("Content-Length", &len),
        ],
        data,
    )
    .await?
    .expect(&format!("uploading blob {digest}"), &[StatusCode::CREATED])?;
    Ok(())
}

/// The OpenTofu base layer: `tofu` at `/captf/runtime`, `/etc/passwd` and `/etc/group` with root
/// and `nonroot` (65532), `/home/nonroot` and `/tmp`. Built once per process per `tofu` binary.
pub fn tofu_base_layer(tofu: &Path) -> anyhow::Result<Arc<LayerBlob>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<LayerBlob>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    // Holding the lock while building makes concurrent callers wait for one build.
    let mut cache = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(b) = cache.get(tofu) {
        return Ok(b.clone());
    }
    let mut layer = Layer::new();
    layer
        .file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
            0o644,
        )
        .file("/etc/group", "root:x:0:\nnonroot:x:65532:\n", 0o644)
        .dir("/tmp", 0o1777)
        .dir("/root", 0o700)
        .owner(NONROOT, NONROOT)
        .dir("/home/nonroot", 0o700)
        .dir("/captf", 0o755)
        .host_file("/captf/runtime", tofu, 0o755);
    let blob = Arc::new(layer.build()?);
    cache.insert(tofu.to_path_buf(), blob.clone());
    Ok(blob)
}

/// Module code that makes an apply slow: a `terraform_data` whose `local-exec` sleeps
/// `var.sleep_seconds` (0, the default, creates nothing). Added to a module as its own file; the
/// image needs `/bin/sh` and `/bin/sleep` ([`ModuleImage::host_tools`]).
pub const SLEEP_DURING_APPLY_TF: &str = r#"variable "sleep_seconds" {
  type    = number
  default = 0
}

resource "terraform_data" "slow" {
  count            = var.sleep_seconds > 0 ? 1 : 0
  triggers_replace = var.sleep_seconds
  provisioner "local-exec" {
    command = "sleep ${var.sleep_seconds}"
  }
}
"#;

/// A module image, per the Image Contract: the OpenTofu base layer, then the module at
/// `/captf/module` (and an optional provider mirror at `/captf/providers`) owned by 65532, user
/// `65532:65532`, and the `io.captf.*` labels.
#[derive(Debug, Clone)]
pub struct ModuleImage {
    /// The module directory (copied to `/captf/module`).
    pub module_dir: PathBuf,
    /// A provider mirror (copied to `/captf/providers`).
    pub providers_dir: Option<PathBuf>,
    /// `io.captf.role`: `cluster`, `machine` or `machinepool`.
    pub role: String,
    /// `io.captf.contract`.
    pub contract: String,
    /// The `tofu` binary (default: the test binary `tofu`).
    pub tofu: Option<PathBuf>,
    /// `io.captf.runtime.version` (default: what `tofu version -json` reports).
    pub runtime_version: Option<String>,
    /// More labels.
    pub labels: BTreeMap<String, String>,
    /// Host programs copied in at the same paths, with their shared libraries, in a layer of
    /// their own: a module whose `local-exec` runs `/bin/sh -c "sleep …"` needs `/bin/sh` and
    /// `/bin/sleep`.
    pub host_tools: Vec<PathBuf>,
}

impl ModuleImage {
    /// A module image of `module_dir` for `role` with the defaults.
    pub fn new(module_dir: impl Into<PathBuf>, role: &str) -> Self {
        Self {
            module_dir: module_dir.into(),
            providers_dir: None,
            role: role.to_owned(),
            contract: "v1alpha1".to_owned(),
            tofu: None,
            runtime_version: None,
            labels: BTreeMap::new(),
            host_tools: Vec::new(),
        }
    }
}

fn tofu_version(tofu: &Path) -> anyhow::Result<String> {
    let out = std::process::Command::new(tofu)
        .args(["version", "-json"])
        .output()
        .with_context(|| format!("running {} version", tofu.display()))?;
    // Warnings about the CLI configuration may precede the JSON document.
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.find('{').map_or("", |i| &text[i..]);
    let v: serde_json::Value =
        serde_json::from_str(json).context("parsing `tofu version -json`")?;
    v.get("terraform_version")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .context("`tofu version -json` has no terraform_version")
}

/// Builds and pushes a module image; returns its digest reference.
pub async fn push_module_image(
    registry: &str,
    repository: &str,
    tag: &str,
    image: &ModuleImage,
) -> anyhow::Result<Reference> {
    let tofu = match &image.tofu {
        Some(t) => t.clone(),
        None => crate::testbin::path("tofu")?,
    };
    let t = tofu.clone();
    let base = tokio::task::spawn_blocking(move || tofu_base_layer(&t))
        .await
        .context("base layer task")??;
    let version = if let Some(v) = &image.runtime_version {
        v.clone()
    } else {
        let t = tofu.clone();
        tokio::task::spawn_blocking(move || tofu_version(&t))
            .await
            .context("tofu version task")??
    };
    let mut layer = Layer::new();
    layer.owner(NONROOT, NONROOT);
    layer.host_dir("/captf/module", &image.module_dir)?;
    if let Some(p) = &image.providers_dir {
        layer.host_dir("/captf/providers", p)?;
    }
    let mut builder = ImageBuilder::new().layer_blob(base).layer(layer);
    if !image.host_tools.is_empty() {
        let mut tools = Layer::new();
        for tool in &image.host_tools {
            let dest = tool
                .to_str()
                .with_context(|| format!("host tool {} is not UTF-8", tool.display()))?;
            tools.host_binary(dest, tool)?;
        }
        builder = builder.layer(tools);
    }
    builder = builder
        .user(&format!("{NONROOT}:{NONROOT}"))
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .label("io.captf.contract", &image.contract)
        .label("io.captf.role", &image.role)
        .label("io.captf.runtime", "tofu")
        .label("io.captf.runtime.version", &version);
    for (k, v) in &image.labels {
        builder = builder.label(k, v);
    }
    builder.push(registry, repository, tag).await
}

/// Builds and pushes the runner image: the runner binary at `/runner` (with its shared libraries
/// when it is dynamically linked), user 65532, entrypoint `/runner`.
pub async fn push_runner_image(
    registry: &str,
    repository: &str,
    tag: &str,
    runner: &Path,
) -> anyhow::Result<Reference> {
    let mut layer = Layer::new();
    layer.host_binary("/runner", runner)?;
    layer.dir("/tmp", 0o1777);
    ImageBuilder::new()
        .layer(layer)
        .user(&format!("{NONROOT}:{NONROOT}"))
        .entrypoint(["/runner"])
        .push(registry, repository, tag)
        .await
}

/// Builds and pushes the test fixture image: `captf-testenv` at `/fixture` (with its shared
/// libraries), `/tmp`, user 65532, entrypoint `/fixture fixture` (see [`crate::fixture`]).
pub async fn fixture_image(
    registry: &str,
    repository: &str,
    tag: &str,
    captf_testenv: &Path,
) -> anyhow::Result<Reference> {
    let mut layer = Layer::new();
    layer.host_binary("/fixture", captf_testenv)?;
    layer
        .dir("/tmp", 0o1777)
        .file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
            0o644,
        )
        .file("/etc/group", "root:x:0:\nnonroot:x:65532:\n", 0o644);
    ImageBuilder::new()
        .layer(layer)
        .user(&format!("{NONROOT}:{NONROOT}"))
        .entrypoint(["/fixture", "fixture"])
        .push(registry, repository, tag)
        .await
}

/// The runtime base images the no-op module Containerfiles copy their runtime from, built from
/// the test binaries in the layouts of the upstream images they stand for: `tofu` at
/// `/usr/local/bin/tofu` (like `ghcr.io/opentofu/opentofu:<version>-minimal`) and `terraform` at
/// `/bin/terraform` (like `docker.io/hashicorp/terraform:<version>`), nothing else.
#[derive(Debug, Clone)]
pub struct RuntimeBaseImages {
    /// `<registry>/opentofu/opentofu:<version>-minimal`.
    pub tofu: String,
    /// The OpenTofu version.
    pub tofu_version: String,
    /// `<registry>/hashicorp/terraform:<version>`.
    pub terraform: String,
    /// The Terraform version.
    pub terraform_version: String,
}

/// Each runtime base image: the test binary, where the upstream image keeps it, its repository,
/// and what its tag adds after the runtime's version.
const RUNTIME_BASES: [(&str, &str, &str, &str); 2] = [
    (
        "tofu",
        "/usr/local/bin/tofu",
        "opentofu/opentofu",
        "-minimal",
    ),
    ("terraform", "/bin/terraform", "hashicorp/terraform", ""),
];

/// The pinned version of the runtime `binary`, without the `v`.
fn runtime_version(binary: &str) -> anyhow::Result<String> {
    Ok(crate::testbin::version(binary)?
        .trim_start_matches('v')
        .to_owned())
}

/// The references and versions of the runtime base images in `registry`.
fn runtime_base_images(registry: &str) -> anyhow::Result<RuntimeBaseImages> {
    let reference = |(binary, _, repository, suffix): (&str, &str, &str, &str)| {
        anyhow::Ok(format!(
            "{registry}/{repository}:{}{suffix}",
            runtime_version(binary)?
        ))
    };
    Ok(RuntimeBaseImages {
        tofu: reference(RUNTIME_BASES[0])?,
        tofu_version: runtime_version("tofu")?,
        terraform: reference(RUNTIME_BASES[1])?,
        terraform_version: runtime_version("terraform")?,
    })
}

/// Pushes the [`RuntimeBaseImages`] to `registry` (`host:port`).
pub async fn push_runtime_base_images(registry: &str) -> anyhow::Result<RuntimeBaseImages> {
    for (binary, path, repository, suffix) in RUNTIME_BASES {
        let mut layer = Layer::new();
        layer.host_file(path, crate::testbin::path(binary)?, 0o755);
        let tag = format!("{}{suffix}", runtime_version(binary)?);
        ImageBuilder::new()
            .layer(layer)
            .entrypoint([path])
            .push(registry, repository, &tag)
            .await
            .with_context(|| format!("pushing the {binary} base image"))?;
    }
    runtime_base_images(registry)
}

/// Pushes the [`RuntimeBaseImages`] to `registry` (`host:port`), each an index of one image per
/// platform in `platforms` (`linux/amd64`, `linux/arm64`), as the upstream images are; the
/// runtimes come from the test binaries built for each platform
/// ([`crate::testbin::path_for_platform`]).
pub async fn push_multi_platform_runtime_base_images(
    registry: &str,
    platforms: &[&str],
) -> anyhow::Result<RuntimeBaseImages> {
    for (binary, path, repository, suffix) in RUNTIME_BASES {
        let tag = format!("{}{suffix}", runtime_version(binary)?);
        let mut images = Vec::new();
        for platform in platforms {
            let arch = platform
                .strip_prefix("linux/")
                .with_context(|| format!("platform {platform:?} is not linux/<arch>"))?;
            let mut layer = Layer::new();
            layer.host_file(
                path,
                crate::testbin::path_for_platform(binary, platform)?,
                0o755,
            );
            let image = ImageBuilder::new()
                .architecture(arch)
                .layer(layer)
                .entrypoint([path])
                .push(registry, repository, &format!("{tag}-{arch}"))
                .await
                .with_context(|| format!("pushing the {binary} base image for {platform}"))?;
            images.push((image, *platform));
        }
        let entries: Vec<(&Reference, &str)> = images.iter().map(|(r, p)| (r, *p)).collect();
        push_index(registry, repository, &tag, &entries).await?;
    }
    runtime_base_images(registry)
}
