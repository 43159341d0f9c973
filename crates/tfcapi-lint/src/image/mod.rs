//! `tfcapi-lint image`: reads a module image from a registry or a local OCI layout, picks the
//! platform(s) to check from a multi-platform index, builds each platform's root filesystem from
//! its layers, and runs the image checks on it (spec: tfcapi-lint "Lint an image", "Registry
//! credentials"; Image Contract "Fixed paths", "OCI labels", "User", "Multi-arch" and
//! "Checklist for tfcapi-lint image").

pub mod auth;
pub mod fs;
pub mod rules;
pub mod source;

use crate::checks;
use crate::report::Finding;
use crate::role::Role;
use source::{Descriptor, Manifest, Source};
use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader};

/// An image platform, `os/arch[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Platform {
    /// Operating system (`linux`).
    pub os: String,
    /// CPU architecture (`amd64`).
    pub architecture: String,
    /// CPU variant (`v8`), when given.
    pub variant: Option<String>,
}

impl Platform {
    /// The platform checked when none is asked for.
    pub fn default_target() -> Self {
        Self {
            os: "linux".to_owned(),
            architecture: "amd64".to_owned(),
            variant: None,
        }
    }

    /// Parses `os/arch` or `os/arch/variant`.
    pub fn parse(s: &str) -> Option<Self> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Some(Self {
                os: (*os).to_owned(),
                architecture: (*arch).to_owned(),
                variant: None,
            }),
            [os, arch, variant] if ok(os) && ok(arch) && ok(variant) => Some(Self {
                os: (*os).to_owned(),
                architecture: (*arch).to_owned(),
                variant: Some((*variant).to_owned()),
            }),
            _ => None,
        }
    }

    /// Whether an index entry's platform is this one (a missing variant here matches any).
    pub fn matches(&self, other: &Self) -> bool {
        self.os == other.os
            && self.architecture == other.architecture
            && (self.variant.is_none() || self.variant == other.variant)
    }

    /// The provider-mirror target name, `os_arch`.
    pub fn mirror_target(&self) -> String {
        format!("{}_{}", self.os, self.architecture)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// What `tfcapi-lint image` was asked to do.
#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// `--role`.
    pub role: Role,
    /// `--contract`.
    pub contract: String,
    /// `--platform`.
    pub platform: Option<Platform>,
    /// `--all-platforms`.
    pub all_platforms: bool,
    /// `--insecure`.
    pub insecure: bool,
}

/// The parts of an image config the checks read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `config.User`.
    pub user: String,
    /// `config.Labels`.
    pub labels: BTreeMap<String, String>,
    /// The platform the config declares, when it does.
    pub platform: Option<Platform>,
}

fn parse_config(bytes: &[u8]) -> Result<ImageConfig, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("the image config is not valid JSON: {e}"))?;
    let config = value.get("config");
    let user = config
        .and_then(|c| c.get("User"))
        .and_then(|u| u.as_str())
        .unwrap_or_default()
        .to_owned();
    let labels = config
        .and_then(|c| c.get("Labels"))
        .and_then(|l| l.as_object())
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let text = |k: &str| {
        value
            .get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    let platform = match (text("os"), text("architecture")) {
        (Some(os), Some(arch)) => Some(Platform {
            os: os.to_owned(),
            architecture: arch.to_owned(),
            variant: text("variant").map(str::to_owned),
        }),
        _ => None,
    };
    Ok(ImageConfig {
        user,
        labels,
        platform,
    })
}

fn descriptor_platform(d: &Descriptor) -> Option<Platform> {
    let p = d.platform.as_ref()?;
    if p.os.is_empty() || p.os == "unknown" || p.architecture == "unknown" {
        return None;
    }
    if d.annotations
        .get("vnd.docker.reference.type")
        .is_some_and(|t| t == "attestation-manifest")
    {
        return None;
    }
    Some(Platform {
        os: p.os.clone(),
        architecture: p.architecture.clone(),
        variant: p.variant.clone().filter(|v| !v.is_empty()),
    })
}

/// Whether the image filesystem loader keeps a file's contents.
fn keep_contents(path: &str) -> bool {
    path == "etc/passwd"
        || path == "etc/group"
        || crate::module::is_config_file(path.rsplit('/').next().unwrap_or(path))
}

/// Builds a platform's root filesystem from its layers.
fn build_fs(source: &mut Source, manifest: &Manifest) -> Result<fs::Fs, String> {
    let mut root = fs::Fs::new();
    for layer in &manifest.layers {
        if layer.media_type.contains("foreign") || layer.media_type.contains("nondistributable") {
            continue;
        }
        let blob = source.blob(layer)?;
        let mut reader = BufReader::new(blob.file);
        let (gzip, zstd) = {
            let head = reader
                .fill_buf()
                .map_err(|e| format!("cannot read layer {}: {e}", layer.digest))?;
            (
                head.starts_with(&[0x1f, 0x8b]),
                head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]),
            )
        };
        let result = if gzip {
            root.apply_layer(flate2::bufread::MultiGzDecoder::new(reader), &keep_contents)
        } else if zstd {
            Err(
                "zstd-compressed layers are not supported; push the image with gzip layers"
                    .to_owned(),
            )
        } else {
            root.apply_layer(reader, &keep_contents)
        };
        result.map_err(|e| format!("layer {}: {e}", layer.digest))?;
    }
    Ok(root)
}

/// The two capacity labels of one platform, as written.
type CapacityLabels = (Option<String>, Option<String>);

/// Lints one image reference (`REF` or `oci:DIR[:NAME]`).
pub fn lint_image(reference: &str, options: &ImageOptions) -> Vec<Finding> {
    let pull = |message: String| vec![Finding::error(checks::IMAGE_PULL, reference, None, message)];
    let mut source = match Source::open(reference, options.insecure) {
        Ok(s) => s,
        Err(e) => return pull(e),
    };
    let top = match source.top() {
        Ok(t) => t,
        Err(e) => return pull(e),
    };
    let wanted = options
        .platform
        .clone()
        .unwrap_or_else(Platform::default_target);
    let mut targets: Vec<(Option<Platform>, Manifest)> = Vec::new();
    if top.is_index() {
        let entries: Vec<(Platform, &Descriptor)> = top
            .manifests
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter_map(|d| descriptor_platform(d).map(|p| (p, d)))
            .collect();
        let chosen: Vec<&(Platform, &Descriptor)> = if options.all_platforms {
            entries.iter().collect()
        } else {
            entries
                .iter()
                .filter(|(p, _)| wanted.matches(p))
                .take(1)
                .collect()
        };
        if chosen.is_empty() {
            let published: Vec<String> = entries.iter().map(|(p, _)| p.to_string()).collect();
            return vec![Finding::error(
                checks::IMAGE_PLATFORM,
                reference,
                None,
                if options.all_platforms {
                    "the index lists no runnable platform".to_owned()
                } else {
                    format!(
                        "the image does not publish {wanted} (it publishes {}); publish it, or check another with --platform",
                        if published.is_empty() {
                            "nothing".to_owned()
                        } else {
                            published.join(", ")
                        }
                    )
                },
            )];
        }
        for (platform, desc) in chosen {
            match source.manifest(desc) {
                Ok(m) if m.is_index() => {
                    return pull(format!(
                        "{platform}: a nested index is not an image manifest"
                    ));
                }
                Ok(m) => targets.push((Some(platform.clone()), m)),
                Err(e) => return pull(e),
            }
        }
    } else {
        targets.push((None, top));
    }

    let mut findings = Vec::new();
    let mut capacity_by_platform: Vec<(String, CapacityLabels)> = Vec::new();
    for (platform, manifest) in targets {
        let Some(config_desc) = manifest.config.clone() else {
            return pull("the manifest is not an image manifest (no config)".to_owned());
        };
        let config = match source
            .small_blob(&config_desc, false)
            .and_then(|b| parse_config(&b))
        {
            Ok(c) => c,
            Err(e) => return pull(e),
        };
        let checked = platform
            .clone()
            .or_else(|| config.platform.clone())
            .unwrap_or_else(|| wanted.clone());
        let tag = checked.to_string();
        if platform.is_none()
            && let Some(declared) = &config.platform
            && !options.all_platforms
            && !wanted.matches(declared)
        {
            findings.push(
                Finding::error(
                    checks::IMAGE_PLATFORM,
                    reference,
                    None,
                    format!(
                        "this single-platform image is {declared}, not {wanted}; publish {wanted} (a multi-arch index) or check --platform {declared}"
                    ),
                )
                .on_platform(&tag),
            );
        }
        let root = match build_fs(&mut source, &manifest) {
            Ok(r) => r,
            Err(e) => return pull(e),
        };
        findings.extend(
            rules::check(&root, &config, options, &checked, reference)
                .into_iter()
                .map(|f| f.on_platform(&tag)),
        );
        capacity_by_platform.push((
            tag,
            (
                config.labels.get(rules::LABEL_CAPACITY).cloned(),
                config.labels.get(rules::LABEL_NODE_INFO).cloned(),
            ),
        ));
    }
    if options.role == Role::Machine
        && let Some((first_platform, first)) = capacity_by_platform.first()
    {
        for (platform, labels) in &capacity_by_platform[1..] {
            if labels != first {
                findings.push(Finding::warning(
                    checks::IMAGE_CAPACITY_LABEL_PAIR,
                    reference,
                    None,
                    format!(
                        "the capacity labels of {platform} differ from those of {first_platform}; set them identically on every platform"
                    ),
                ));
            }
        }
    }
    findings
}
