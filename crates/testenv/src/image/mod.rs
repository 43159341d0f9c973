//! OCI images for the test environment: pulling from the loopback registry into a per-digest
//! cache of unpacked root filesystems ([`ImageStore`]), and building images from layers and
//! pushing them by tag, addressed by digest ([`ImageBuilder`], [`Layer`], and the helpers for the
//! OpenTofu base layer, module images, the runner image and the test fixture image).
//!
//! Only registries on loopback are reached, over plain HTTP, without authentication — the test
//! environment's own registry ([`crate::registry::Registry`]).

mod build;
mod http;
mod store;
mod unpack;

pub use build::{
    ImageBuilder, Layer, LayerBlob, ModuleImage, NONROOT, RuntimeBaseImages, SLEEP_DURING_APPLY_TF,
    fixture_image, push_index, push_module_image, push_multi_platform_runtime_base_images,
    push_runner_image, push_runtime_base_images, tofu_base_layer,
};
pub use store::{Image, ImageStore, PullPolicy};
pub use unpack::unpack_layer;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Media types this module reads and writes.
pub mod media_type {
    /// OCI image index.
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    /// OCI image manifest.
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    /// OCI image config.
    pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
    /// OCI gzip layer.
    pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    /// OCI uncompressed layer.
    pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
    /// Docker manifest list.
    pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
    /// Docker image manifest.
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    /// Docker gzip layer.
    pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
}

/// An image reference `registry/repository[:tag][@sha256:...]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host[:port]`.
    pub registry: String,
    /// Repository path (`captf/module`).
    pub repository: String,
    /// Tag, when given.
    pub tag: Option<String>,
    /// `sha256:<hex>`, when given.
    pub digest: Option<String>,
}

impl Reference {
    /// The tag or digest a registry resolves (`latest` when neither is given).
    pub fn target(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// `registry/repository@digest`: the reference a container runtime reports as `imageID`.
    #[must_use]
    pub fn with_digest(&self, digest: &str) -> Reference {
        Reference {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_owned()),
        }
    }

    /// Whether the registry is on loopback (the only kind this module talks to).
    pub fn is_loopback(&self) -> bool {
        let host = self
            .registry
            .rsplit_once(':')
            .map_or(self.registry.as_str(), |(h, p)| {
                if p.chars().all(|c| c.is_ascii_digit()) {
                    h
                } else {
                    self.registry.as_str()
                }
            });
        matches!(host, "127.0.0.1" | "localhost" | "[::1]")
    }
}

impl FromStr for Reference {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| anyhow::anyhow!("image {s:?}: only sha256 digests"))?;
                if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    anyhow::bail!("image {s:?}: malformed digest");
                }
                (n, Some(d.to_owned()))
            }
            None => (s, None),
        };
        let (registry, rest) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_owned(), rest.to_owned())
            }
            Some(_) => ("docker.io".to_owned(), name.to_owned()),
            None => ("docker.io".to_owned(), format!("library/{name}")),
        };
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r.to_owned(), Some(t.to_owned())),
            _ => (rest, None),
        };
        if repository.is_empty() {
            anyhow::bail!("image {s:?}: empty repository");
        }
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// The runtime part of an OCI image config (`config` in the config blob).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ImageConfig {
    /// `uid`, `uid:gid`, `name` or `name:group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `K=V` entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    /// Entrypoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Default arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// The status code of a plain-HTTP GET of `url`.
pub(crate) async fn http_get_status(url: &str) -> anyhow::Result<u16> {
    Ok(http::HttpClient::new().get(url, &[]).await?.status.as_u16())
}

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_references() {
        let d = format!("sha256:{}", "a".repeat(64));
        let r: Reference = format!("127.0.0.1:5000/captf/module:v1@{d}")
            .parse()
            .unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "captf/module");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        assert_eq!(r.target(), d);
        assert!(r.is_loopback());
        assert_eq!(
            r.with_digest(&d).to_string(),
            format!("127.0.0.1:5000/captf/module@{d}")
        );
        let r: Reference = "localhost:5000/x".parse().unwrap();
        assert_eq!(r.target(), "latest");
        assert!(r.is_loopback());
        let r: Reference = "busybox".parse().unwrap();
        assert_eq!(r.registry, "docker.io");
        assert_eq!(r.repository, "library/busybox");
        assert!(!r.is_loopback());
        assert!("x@sha256:zz".parse::<Reference>().is_err());
    }
}
