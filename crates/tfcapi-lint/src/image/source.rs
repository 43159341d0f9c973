//! Where an image comes from: a registry (through `oci-client`, credentials as docker/podman
//! find them) or a local OCI image layout (`oci:DIR[:NAME]`, every blob checked against its
//! digest and size). Both hand out manifests and blobs the same way; layers land in temporary
//! files, never in the working directory.

use super::auth;
// Whether a registry host is loopback (plain HTTP by default, as crane does).
use contract::image_ref::is_loopback_registry as is_loopback;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker image manifest v2.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The annotation naming an image in an OCI layout's `index.json`.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// The largest manifest or config blob read into memory.
const MAX_SMALL_BLOB: u64 = 16 * 1024 * 1024;

/// A content descriptor.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Descriptor {
    /// Media type.
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    /// `sha256:...`.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// Platform of an index entry.
    #[serde(default)]
    pub platform: Option<DescriptorPlatform>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The platform of an index entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct DescriptorPlatform {
    /// CPU architecture.
    #[serde(default)]
    pub architecture: String,
    /// Operating system.
    #[serde(default)]
    pub os: String,
    /// CPU variant.
    #[serde(default)]
    pub variant: Option<String>,
}

/// An image manifest or an index.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Manifest {
    /// Media type, when the document says.
    #[serde(rename = "mediaType", default)]
    pub media_type: Option<String>,
    /// Entries of an index.
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
    /// The config of an image manifest.
    #[serde(default)]
    pub config: Option<Descriptor>,
    /// The layers of an image manifest.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

impl Manifest {
    /// Whether this is an index (or a Docker manifest list).
    pub fn is_index(&self) -> bool {
        self.manifests.is_some()
            || matches!(self.media_type.as_deref(), Some(OCI_INDEX | DOCKER_LIST))
    }
}

fn parse_manifest(bytes: &[u8]) -> Result<Manifest, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("the manifest is not valid JSON: {e}"))
}

/// Checks `sha256:<64 hex>` and returns the hex part.
fn digest_hex(digest: &str) -> Result<&str, String> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| format!("unsupported digest algorithm in `{digest}` (sha256 only)"))?;
    if hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(hex)
    } else {
        Err(format!("`{digest}` is not a valid sha256 digest"))
    }
}

fn sha256_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn verify(bytes: &[u8], desc: &Descriptor) -> Result<(), String> {
    if bytes.len() as u64 != desc.size {
        return Err(format!(
            "blob {} is {} bytes, its descriptor says {}",
            desc.digest,
            bytes.len(),
            desc.size
        ));
    }
    let actual = sha256_of(bytes);
    if actual != desc.digest {
        return Err(format!("blob {} has digest {actual}", desc.digest));
    }
    Ok(())
}

/// A local OCI image layout.
#[derive(Debug)]
pub struct Layout {
    dir: PathBuf,
    name: Option<String>,
}

/// A registry repository.
pub struct Registry {
    client: oci_client::Client,
    reference: oci_client::Reference,
    auth: oci_client::secrets::RegistryAuth,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("reference", &self.reference.whole())
            .finish_non_exhaustive()
    }
}

/// An image source.
#[derive(Debug)]
pub enum Source {
    /// `oci:DIR[:NAME]`.
    Layout(Layout),
    /// A registry reference.
    Registry(Box<Registry>),
}

/// A layer blob, verified, ready to read from the start.
#[derive(Debug)]
pub struct Blob {
    /// The open file.
    pub file: File,
    _temp: Option<tempfile::TempPath>,
}

impl Source {
    /// Opens `oci:DIR[:NAME]` or a registry reference.
    pub fn open(reference: &str, insecure: bool) -> Result<Self, String> {
        if let Some(rest) = reference.strip_prefix("oci:") {
            return Layout::open(rest).map(Self::Layout);
        }
        Registry::open(reference, insecure).map(|r| Self::Registry(Box::new(r)))
    }

    /// The manifest or index the reference names.
    pub fn top(&mut self) -> Result<Manifest, String> {
        match self {
            Self::Layout(l) => l.top(),
            Self::Registry(r) => r.top(),
        }
    }

    /// The manifest a descriptor points at.
    pub fn manifest(&mut self, desc: &Descriptor) -> Result<Manifest, String> {
        let bytes = self.small_blob(desc, true)?;
        parse_manifest(&bytes)
    }

    /// A small blob (config), read into memory and verified.
    pub fn small_blob(&mut self, desc: &Descriptor, manifest: bool) -> Result<Vec<u8>, String> {
        if desc.size > MAX_SMALL_BLOB {
            return Err(format!(
                "blob {} is too large ({} bytes)",
                desc.digest, desc.size
            ));
        }
        let bytes = match self {
            Self::Layout(l) => {
                let mut file = l.open_blob(desc)?;
                let mut buf = Vec::new();
                file.read_to_end(&mut buf)
                    .map_err(|e| format!("cannot read blob {}: {e}", desc.digest))?;
                buf
            }
            Self::Registry(r) if manifest => r.manifest_bytes(&desc.digest)?,
            Self::Registry(r) => r.blob_bytes(desc)?,
        };
        verify(&bytes, desc)?;
        Ok(bytes)
    }

    /// A layer blob in a file, verified.
    pub fn blob(&mut self, desc: &Descriptor) -> Result<Blob, String> {
        match self {
            Self::Layout(l) => l.blob(desc),
            Self::Registry(r) => r.blob(desc),
        }
    }
}

impl Layout {
    fn open(spec: &str) -> Result<Self, String> {
        let (dir, name) = if Path::new(spec).is_dir() {
            (spec, None)
        } else if let Some((dir, name)) = spec.rsplit_once(':')
            && Path::new(dir).is_dir()
        {
            (dir, Some(name.to_owned()))
        } else {
            return Err(format!("`{spec}` is not a directory"));
        };
        let dir = PathBuf::from(dir);
        let layout = std::fs::read(dir.join("oci-layout")).map_err(|_| {
            format!(
                "{} has no oci-layout file: not an OCI image layout",
                dir.display()
            )
        })?;
        let layout: serde_json::Value = serde_json::from_slice(&layout)
            .map_err(|e| format!("oci-layout is not valid JSON: {e}"))?;
        if layout
            .get("imageLayoutVersion")
            .and_then(|v| v.as_str())
            .is_none()
        {
            return Err("oci-layout has no imageLayoutVersion".to_owned());
        }
        Ok(Self { dir, name })
    }

    fn top(&mut self) -> Result<Manifest, String> {
        let bytes = std::fs::read(self.dir.join("index.json"))
            .map_err(|e| format!("cannot read index.json: {e}"))?;
        let index = parse_manifest(&bytes)?;
        let entries = index.manifests.clone().unwrap_or_default();
        let chosen: Vec<&Descriptor> = match &self.name {
            Some(name) => entries
                .iter()
                .filter(|d| {
                    d.annotations.get(REF_NAME).is_some_and(|r| {
                        r == name || r.rsplit_once(':').is_some_and(|(_, tag)| tag == name)
                    })
                })
                .collect(),
            None => entries.iter().collect(),
        };
        match chosen.as_slice() {
            [] if self.name.is_some() => Err(format!(
                "no image named `{}` in index.json",
                self.name.as_deref().unwrap_or_default()
            )),
            [] => Err("index.json lists no image".to_owned()),
            [one] => {
                let one = (*one).clone();
                let bytes = {
                    let mut file = self.open_blob(&one)?;
                    let mut buf = Vec::new();
                    file.read_to_end(&mut buf)
                        .map_err(|e| format!("cannot read blob {}: {e}", one.digest))?;
                    buf
                };
                verify(&bytes, &one)?;
                parse_manifest(&bytes)
            }
            many if self.name.is_none() && many.iter().all(|d| d.platform.is_some()) => Ok(index),
            _ => Err("index.json lists several images: name one with oci:DIR:NAME".to_owned()),
        }
    }

    fn open_blob(&self, desc: &Descriptor) -> Result<File, String> {
        let hex = digest_hex(&desc.digest)?;
        let path = self.dir.join("blobs").join("sha256").join(hex);
        let file = File::open(&path)
            .map_err(|_| format!("blob {} is missing from the layout", desc.digest))?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot read blob {}: {e}", desc.digest))?
            .len();
        if len != desc.size {
            return Err(format!(
                "blob {} is {len} bytes, its descriptor says {}",
                desc.digest, desc.size
            ));
        }
        Ok(file)
    }

    fn blob(&self, desc: &Descriptor) -> Result<Blob, String> {
        let mut file = self.open_blob(desc)?;
        let mut hasher = Sha256::new();
        std::io::copy(&mut file, &mut hasher)
            .map_err(|e| format!("cannot read blob {}: {e}", desc.digest))?;
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != desc.digest {
            return Err(format!("blob {} has digest {actual}", desc.digest));
        }
        file.seek(SeekFrom::Start(0))
            .map_err(|e| format!("cannot read blob {}: {e}", desc.digest))?;
        Ok(Blob { file, _temp: None })
    }
}

const ACCEPTED: &[&str] = &[OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST];

impl Registry {
    fn open(reference: &str, insecure: bool) -> Result<Self, String> {
        let reference: oci_client::Reference = reference
            .parse()
            .map_err(|e| format!("`{reference}` is not an image reference: {e}"))?;
        // One crypto provider for the process (ring); an error means one is already installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let registry = reference.resolve_registry().to_owned();
        let protocol = if insecure {
            oci_client::client::ClientProtocol::Http
        } else if is_loopback(&registry) {
            oci_client::client::ClientProtocol::HttpsExcept(vec![registry.clone()])
        } else {
            oci_client::client::ClientProtocol::Https
        };
        let config = oci_client::client::ClientConfig {
            protocol,
            connect_timeout: Some(std::time::Duration::from_secs(30)),
            read_timeout: Some(std::time::Duration::from_secs(300)),
            ..Default::default()
        };
        let client = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            oci_client::Client::try_from(config)
        }))
        .map_err(|_| "cannot set up an HTTP client (no CA certificates?)".to_owned())?
        .map_err(|e| format!("cannot set up an HTTP client: {e}"))?;
        let (auth, _source) = auth::registry_auth(reference.registry());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start an I/O runtime: {e}"))?;
        Ok(Self {
            client,
            reference,
            auth,
            runtime,
        })
    }

    /// Runs a future to completion on its own task, so a panic inside a dependency becomes an
    /// error instead of ending the process.
    fn run<T, F>(&self, future: F) -> Result<T, String>
    where
        F: std::future::Future<Output = Result<T, String>> + Send + 'static,
        T: Send + 'static,
    {
        self.runtime
            .block_on(async move { tokio::spawn(future).await })
            .map_err(|_| "the registry client failed unexpectedly".to_owned())?
    }

    fn by_digest(&self, digest: &str) -> oci_client::Reference {
        oci_client::Reference::with_digest(
            self.reference.registry().to_owned(),
            self.reference.repository().to_owned(),
            digest.to_owned(),
        )
    }

    fn pull_manifest(&self, reference: oci_client::Reference) -> Result<Vec<u8>, String> {
        let client = self.client.clone();
        let auth = self.auth.clone();
        let whole = reference.whole();
        self.run(async move {
            client
                .pull_manifest_raw(&reference, &auth, ACCEPTED)
                .await
                .map(|(bytes, _)| bytes.to_vec())
                .map_err(|e| format!("cannot pull the manifest of {whole}: {e}"))
        })
    }

    fn top(&mut self) -> Result<Manifest, String> {
        let bytes = self.pull_manifest(self.reference.clone())?;
        if let Some(digest) = self.reference.digest() {
            let actual = sha256_of(&bytes);
            if actual != digest {
                return Err(format!(
                    "the manifest of {} has digest {actual}",
                    self.reference.whole()
                ));
            }
        }
        parse_manifest(&bytes)
    }

    fn manifest_bytes(&self, digest: &str) -> Result<Vec<u8>, String> {
        digest_hex(digest)?;
        self.pull_manifest(self.by_digest(digest))
    }

    fn blob_bytes(&self, desc: &Descriptor) -> Result<Vec<u8>, String> {
        digest_hex(&desc.digest)?;
        let client = self.client.clone();
        let reference = self.reference.clone();
        let digest = desc.digest.clone();
        self.run(async move {
            let mut out: Vec<u8> = Vec::new();
            client
                .pull_blob(&reference, digest.as_str(), &mut out)
                .await
                .map_err(|e| format!("cannot pull blob {digest}: {e}"))?;
            Ok(out)
        })
    }

    fn blob(&self, desc: &Descriptor) -> Result<Blob, String> {
        digest_hex(&desc.digest)?;
        let temp = tempfile::NamedTempFile::new()
            .map_err(|e| format!("cannot create a temporary file: {e}"))?;
        let (file, path) = temp.into_parts();
        let writer = file
            .try_clone()
            .map_err(|e| format!("cannot create a temporary file: {e}"))?;
        let client = self.client.clone();
        let reference = self.reference.clone();
        let digest = desc.digest.clone();
        self.run(async move {
            let mut out = tokio::fs::File::from_std(writer);
            client
                .pull_blob(&reference, digest.as_str(), &mut out)
                .await
                .map_err(|e| format!("cannot pull blob {digest}: {e}"))
        })?;
        let mut file = file;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot read blob {}: {e}", desc.digest))?
            .len();
        if len != desc.size {
            return Err(format!(
                "blob {} is {len} bytes, its descriptor says {}",
                desc.digest, desc.size
            ));
        }
        file.seek(SeekFrom::Start(0))
            .map_err(|e| format!("cannot read blob {}: {e}", desc.digest))?;
        Ok(Blob {
            file,
            _temp: Some(path),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_checked_before_use() {
        assert!(digest_hex("sha256:../../etc/passwd").is_err());
        assert!(digest_hex("sha512:00").is_err());
        assert!(digest_hex(&format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(
            is_loopback("127.0.0.1:5000") && is_loopback("localhost") && is_loopback("[::1]:80")
        );
        assert!(!is_loopback("registry.example:5000"));
    }
}
