//! Pulling images from the loopback registry into a cache of unpacked root filesystems, one per
//! image digest.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, bail};
use serde::Deserialize;

use super::http::HttpClient;
use super::{ImageConfig, Reference, media_type, sha256_digest};

/// `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Resolve the reference at the registry every time.
    Always,
    /// Use the local image when the reference was pulled before.
    IfNotPresent,
    /// Never contact the registry.
    Never,
}

impl PullPolicy {
    /// The policy of a container: its `imagePullPolicy`, else the API server's default (`Always`
    /// for `:latest` or untagged images, `IfNotPresent` otherwise).
    pub fn for_container(policy: Option<&str>, reference: &Reference) -> Self {
        match policy {
            Some("Always") => Self::Always,
            Some("Never") => Self::Never,
            Some("IfNotPresent") => Self::IfNotPresent,
            _ if reference.digest.is_none()
                && reference.tag.as_deref().is_none_or(|t| t == "latest") =>
            {
                Self::Always
            }
            _ => Self::IfNotPresent,
        }
    }
}

/// A pulled and unpacked image.
#[derive(Debug, Clone)]
pub struct Image {
    /// The reference it was pulled by.
    pub reference: Reference,
    /// The digest the reference resolved to (of the index when the image is multi-platform).
    pub digest: String,
    /// The unpacked root filesystem (shared: never write to it; mount it read-only or as an
    /// overlay's lower directory).
    pub rootfs: PathBuf,
    /// The image's runtime config.
    pub config: ImageConfig,
}

impl Image {
    /// `registry/repository@sha256:...`, as containerd reports a container's `imageID`.
    pub fn image_id(&self) -> String {
        self.reference.with_digest(&self.digest).to_string()
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct ConfigFile {
    #[serde(default)]
    config: ImageConfig,
}

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
                      application/vnd.docker.distribution.manifest.list.v2+json, \
                      application/vnd.oci.image.manifest.v1+json, \
                      application/vnd.docker.distribution.manifest.v2+json";

/// A cache of unpacked images under a directory:
/// `<dir>/sha256-<hex>/{rootfs/,config.json}` per resolved digest, and `<dir>/refs/` mapping
/// references to the digest they last resolved to. Unpacking happens once per digest (also across
/// processes sharing the directory: an image directory appears by an atomic rename).
#[derive(Debug, Clone)]
pub struct ImageStore {
    dir: PathBuf,
    http: HttpClient,
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl ImageStore {
    /// A store under `dir` (created when missing).
    pub fn new(dir: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(dir.join("refs"))
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            dir,
            http: HttpClient::new(),
            locks: Arc::default(),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn image_dir(&self, digest: &str) -> PathBuf {
        self.dir.join(digest.replace(':', "-"))
    }

    fn ref_file(&self, reference: &Reference) -> PathBuf {
        let key = sha256_digest(reference.to_string().as_bytes());
        self.dir.join("refs").join(key.replace(':', "-"))
    }

    fn load(&self, reference: &Reference, digest: &str) -> anyhow::Result<Option<Image>> {
        let dir = self.image_dir(digest);
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Ok(None);
        }
        let file: ConfigFile = serde_json::from_slice(&std::fs::read(&config_path)?)
            .with_context(|| format!("parsing {}", config_path.display()))?;
        Ok(Some(Image {
            reference: reference.clone(),
            digest: digest.to_owned(),
            rootfs: dir.join("rootfs"),
            config: file.config,
        }))
    }

    /// The local image for `reference`, if it was pulled before.
    pub fn local(&self, reference: &Reference) -> anyhow::Result<Option<Image>> {
        let digest = match &reference.digest {
            Some(d) => d.clone(),
            None => match std::fs::read_to_string(self.ref_file(reference)) {
                Ok(d) => d.trim().to_owned(),
                Err(_) => return Ok(None),
            },
        };
        self.load(reference, &digest)
    }

    /// Makes `image` (a reference string) available locally according to `policy`.
    pub async fn ensure(&self, image: &str, policy: Option<&str>) -> anyhow::Result<Image> {
        let reference: Reference = image.parse()?;
        match PullPolicy::for_container(policy, &reference) {
            PullPolicy::Never => self
                .local(&reference)?
                .with_context(|| format!("image {image} is not present with pull policy of Never")),
            PullPolicy::IfNotPresent => match self.local(&reference)? {
                Some(img) => Ok(img),
                None => self.pull(&reference).await,
            },
            PullPolicy::Always => self.pull(&reference).await,
        }
    }

    fn lock_for(&self, digest: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(digest.to_owned()).or_default().clone()
    }

    async fn fetch_manifest(
        &self,
        reference: &Reference,
        target: &str,
    ) -> anyhow::Result<(String, Manifest)> {
        let url = format!(
            "http://{}/v2/{}/manifests/{target}",
            reference.registry, reference.repository
        );
        let resp = self
            .http
            .get(&url, &[("Accept", ACCEPT)])
            .await?
            .expect(&format!("manifest of {reference}"), &[http::StatusCode::OK])?;
        let digest = sha256_digest(&resp.body);
        if target.starts_with("sha256:") && digest != target {
            bail!("manifest of {reference}: digest {digest} does not match {target}");
        }
        let manifest: Manifest = serde_json::from_slice(&resp.body)
            .with_context(|| format!("parsing the manifest of {reference}"))?;
        Ok((digest, manifest))
    }

    async fn fetch_blob(
        &self,
        reference: &Reference,
        digest: &str,
    ) -> anyhow::Result<bytes::Bytes> {
        let url = format!(
            "http://{}/v2/{}/blobs/{digest}",
            reference.registry, reference.repository
        );
        let resp = self.http.get(&url, &[]).await?.expect(
            &format!("blob {digest} of {reference}"),
            &[http::StatusCode::OK],
        )?;
        let actual = sha256_digest(&resp.body);
        if actual != digest {
            bail!("blob of {reference}: digest {actual} does not match {digest}");
        }
        Ok(resp.body)
    }

    /// Resolves `reference` at its registry and unpacks the image unless its digest is cached.
    pub async fn pull(&self, reference: &Reference) -> anyhow::Result<Image> {
        if !reference.is_loopback() {
            bail!("image {reference}: the test environment pulls only from loopback registries");
        }
        let (top_digest, top) = self.fetch_manifest(reference, reference.target()).await?;
        let lock = self.lock_for(&top_digest);
        let _guard = lock.lock().await;
        if let Some(img) = self.load(reference, &top_digest)? {
            self.remember(reference, &top_digest)?;
            return Ok(img);
        }
        let is_index = !top.manifests.is_empty()
            || matches!(
                top.media_type.as_deref(),
                Some(media_type::OCI_INDEX | media_type::DOCKER_LIST)
            );
        let manifest = if is_index {
            let chosen = top
                .manifests
                .iter()
                .find(|m| {
                    m.platform
                        .as_ref()
                        .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                })
                .with_context(|| format!("image {reference} has no linux/amd64 manifest"))?;
            self.fetch_manifest(reference, &chosen.digest).await?.1
        } else {
            top
        };
        let config_desc = manifest
            .config
            .as_ref()
            .with_context(|| format!("manifest of {reference} has no config"))?;
        let config_blob = self.fetch_blob(reference, &config_desc.digest).await?;
        let mut layers = Vec::new();
        for layer in &manifest.layers {
            let blob = self.fetch_blob(reference, &layer.digest).await?;
            layers.push((layer.media_type.clone(), blob));
        }

        let final_dir = self.image_dir(&top_digest);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            &top_digest[7..19]
        ));
        let tmp2 = tmp.clone();
        let config_blob2 = config_blob.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let _ = std::fs::remove_dir_all(&tmp2);
            let rootfs = tmp2.join("rootfs");
            std::fs::create_dir_all(&rootfs)?;
            for (mt, blob) in layers {
                match mt.as_str() {
                    media_type::OCI_LAYER_GZIP | media_type::DOCKER_LAYER_GZIP | "" => {
                        super::unpack_layer(&rootfs, flate2::read::GzDecoder::new(&blob[..]))?;
                    }
                    media_type::OCI_LAYER_TAR => super::unpack_layer(&rootfs, &blob[..])?,
                    other => bail!("unsupported layer media type {other}"),
                }
            }
            std::fs::write(tmp2.join("config.json"), &config_blob2)?;
            Ok(())
        })
        .await
        .context("unpacking task")?
        .with_context(|| format!("unpacking {reference}"))?;
        if let Err(e) = std::fs::rename(&tmp, &final_dir) {
            // Another process unpacked the same digest meanwhile.
            let _ = std::fs::remove_dir_all(&tmp);
            if !final_dir.join("config.json").is_file() {
                return Err(e).with_context(|| format!("moving {}", final_dir.display()));
            }
        }
        self.remember(reference, &top_digest)?;
        tracing::info!(image = %reference, digest = %top_digest, "pulled and unpacked image");
        self.load(reference, &top_digest)?
            .with_context(|| format!("image {reference} vanished after unpacking"))
    }

    fn remember(&self, reference: &Reference, digest: &str) -> anyhow::Result<()> {
        if reference.digest.is_none() {
            let f = self.ref_file(reference);
            let tmp = f.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, digest)?;
            std::fs::rename(&tmp, &f)?;
        }
        Ok(())
    }
}
