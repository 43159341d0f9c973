//! Installing CAPTF as a user does (issue 16; the book's Installation page): the page's own
//! commands, run as written, and what a machine without internet access needs beside them — the
//! clusterctl local repositories of Cluster API's core, kubeadm bootstrap and kubeadm
//! control-plane providers and cert-manager's manifest, and their images in a mirror registry,
//! all built from the test binaries `hack/testbin.sh` builds from source.
//!
//! - Cluster API's repositories are rendered as its release does: `kustomize build` of each
//!   provider's `config/default` in the pinned module, with the release image
//!   (`registry.k8s.io/cluster-api/<name>:<version>`, pull policy `IfNotPresent`), beside the
//!   module's `metadata.yaml`.
//! - cert-manager's repository holds `cert-manager.yaml`, rendered from its chart
//!   (`hack/cert-manager-manifest.sh`, run by `hack/testbin.sh`).
//! - The images are single static binaries on an empty base, user 65532, pushed to
//!   `<registry>/you/cluster-api/<name>` and `<registry>/you/jetstack/<name>`: the installation
//!   page's `images:` overrides point clusterctl there.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use testenv::capi::{PROVIDERS, Provider};
use testenv::image::{ImageBuilder, Layer};

/// The page the commands come from.
pub const PAGE: &str = "docs/src/installation.md";
/// The example registry of the page, replaced by the test registry.
pub const EXAMPLE_REGISTRY: &str = "registry.example.com/you";

/// What Cluster API's release publishes for one of its providers ([`testenv::capi::PROVIDERS`]):
/// the components file clusterctl reads and the image name in `registry.k8s.io/cluster-api`.
#[derive(Debug, Clone, Copy)]
pub struct CapiRelease {
    /// The provider (its label names the repository directory; its test binary the image's).
    pub provider: &'static Provider,
    /// The components file.
    pub components: &'static str,
    /// The image name.
    pub image: &'static str,
}

/// The release of each of Cluster API's three providers.
pub fn capi_releases() -> anyhow::Result<Vec<CapiRelease>> {
    PROVIDERS
        .iter()
        .map(|provider| {
            let (components, image) = match provider.label {
                "cluster-api" => ("core-components.yaml", "cluster-api-controller"),
                "bootstrap-kubeadm" => {
                    ("bootstrap-components.yaml", "kubeadm-bootstrap-controller")
                }
                "control-plane-kubeadm" => (
                    "control-plane-components.yaml",
                    "kubeadm-control-plane-controller",
                ),
                other => bail!("no release file known for Cluster API provider {other}"),
            };
            Ok(CapiRelease {
                provider,
                components,
                image,
            })
        })
        .collect()
}

/// cert-manager's three images and the test binaries they ship (the chart runs each image's
/// entrypoint with its own arguments).
pub const CERT_MANAGER_IMAGES: [(&str, &str); 3] = [
    ("cert-manager-controller", "cert-manager-controller"),
    ("cert-manager-cainjector", "cert-manager-cainjector"),
    ("cert-manager-webhook", "cert-manager-webhook"),
];

/// The shell commands of the given sections of the installation page (its ```sh blocks under a
/// `## ` or `### ` heading of that name), in page order. Fails when a section is missing.
pub fn page_commands(sections: &[&str]) -> anyhow::Result<String> {
    page_blocks(sections, "sh")
}

/// The ```yaml blocks of the given sections of the installation page, in page order, as one
/// YAML stream. Fails when a section is missing.
pub fn page_yaml(sections: &[&str]) -> anyhow::Result<String> {
    page_blocks(sections, "yaml")
}

/// The blocks fenced as ```lang under the given `## ` or `### ` sections of the installation
/// page, in page order; YAML blocks are separated by `---` lines.
fn page_blocks(sections: &[&str], lang: &str) -> anyhow::Result<String> {
    page_blocks_of(&testenv::env::repo_root().join(PAGE), sections, lang)
}

/// [`page_blocks`] of any page of the book, at `page` (this checkout's, or a previous
/// release's).
pub fn page_blocks_of(page: &Path, sections: &[&str], lang: &str) -> anyhow::Result<String> {
    let label = page.display();
    let page = std::fs::read_to_string(page).with_context(|| format!("reading {label}"))?;
    for s in sections {
        ensure!(
            page.lines()
                .any(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")) == Some(s)),
            "{label} has no section {s:?}"
        );
    }
    let fence = format!("```{lang}");
    let mut out = String::new();
    let (mut section, mut in_block) = (String::new(), false);
    for line in page.lines() {
        if let Some(h) = line
            .strip_prefix("## ")
            .or_else(|| line.strip_prefix("### "))
        {
            h.clone_into(&mut section);
        } else if line == fence {
            in_block = sections.contains(&section.as_str());
            if in_block && lang == "yaml" && !out.is_empty() {
                out.push_str("---\n");
            }
        } else if line == "```" {
            in_block = false;
        } else if in_block {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// Runs the commands of the page's `sections` as a user would (bash, in `cwd`: the repository
/// root for its `make` commands, a scratch directory for clusterctl's), with the page's example
/// registry replaced by `registry` and `${HOME}` by `home`, and `env` added to the environment.
/// Fails with their output.
pub fn run_page(
    sections: &[&str],
    registry: &str,
    home: &Path,
    cwd: &Path,
    env: &[(String, String)],
) -> anyhow::Result<String> {
    run_script(
        sections,
        &page_commands(sections)?,
        registry,
        home,
        cwd,
        env,
    )
}

/// Runs `script`, the commands of the `sections` of a page, as [`run_page`] runs the
/// installation page's.
pub fn run_script(
    sections: &[&str],
    script: &str,
    registry: &str,
    home: &Path,
    cwd: &Path,
    env: &[(String, String)],
) -> anyhow::Result<String> {
    let script = script
        .replace(EXAMPLE_REGISTRY, &format!("{registry}/you"))
        .replace("${HOME}", &home.display().to_string());
    let started = Instant::now();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .context("running bash")?;
    eprintln!("{sections:?} took {:.1}s", started.elapsed().as_secs_f64());
    if !out.status.success() {
        bail!(
            "{script}\nfailed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A provider's components as its release renders them: `kustomize build` of `config/default`
/// with the release image and pull policy.
pub fn capi_components(release: &CapiRelease, version: &str) -> anyhow::Result<String> {
    let dir = testenv::capi::module_dir()?
        .join(release.provider.module_subdir)
        .join("config/default");
    let text = testenv::manifests::kustomize_build(&dir)?;
    let staging = format!("gcr.io/k8s-staging-cluster-api/{}:main", release.image);
    ensure!(
        text.contains(&staging),
        "{} renders no image {staging}",
        dir.display()
    );
    Ok(text
        .replace(
            &staging,
            &format!("registry.k8s.io/cluster-api/{}:{version}", release.image),
        )
        .replace("imagePullPolicy: Always", "imagePullPolicy: IfNotPresent"))
}

/// Writes the clusterctl local repositories of Cluster API's three providers and cert-manager
/// under `root` (`<label>/<version>/<components>` and `metadata.yaml`; cert-manager's
/// `cert-manager/<version>/cert-manager.yaml`), as a user copies them from the releases.
pub fn write_local_repositories(root: &Path) -> anyhow::Result<()> {
    let capi_version = testenv::testbin::version("cluster-api")?;
    let metadata = testenv::capi::module_dir()?.join("metadata.yaml");
    for release in &capi_releases()? {
        let dir = root.join(release.provider.label).join(&capi_version);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join(release.components),
            capi_components(release, &capi_version)?,
        )?;
        std::fs::copy(&metadata, dir.join("metadata.yaml"))
            .with_context(|| format!("copying {}", metadata.display()))?;
    }
    let cm_version = testenv::testbin::version("cert-manager")?;
    let dir = root.join("cert-manager").join(&cm_version);
    std::fs::create_dir_all(&dir)?;
    let manifest = testenv::testbin::path("cert-manager.yaml")?;
    std::fs::copy(&manifest, dir.join("cert-manager.yaml"))
        .with_context(|| format!("copying {}", manifest.display()))?;
    Ok(())
}

/// Pushes an image holding one static binary of the test binaries at `/<entrypoint>`, user
/// 65532, as `registry/repository:tag`. Like the distroless `static:nonroot` base upstream's
/// images use, it has a writable `/tmp` and an `/etc/passwd` naming the user's home
/// `/home/nonroot`, which the kubelet gives as `$HOME` (the Cluster API Operator's clusterctl
/// library writes its configuration there).
pub async fn push_binary_image(
    registry: &str,
    repository: &str,
    tag: &str,
    binary: &str,
    entrypoint: &str,
) -> anyhow::Result<()> {
    let path: PathBuf = testenv::testbin::path(binary)?;
    let mut layer = Layer::new();
    layer.host_binary(entrypoint, &path)?;
    layer.dir("/tmp", 0o1777);
    layer.file(
        "/etc/passwd",
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        0o644,
    );
    layer.owner(65532, 65532).dir("/home/nonroot", 0o700);
    ImageBuilder::new()
        .layer(layer)
        .user("65532:65532")
        .entrypoint([entrypoint])
        .label("org.opencontainers.image.title", repository)
        .label("org.opencontainers.image.version", tag)
        .push(registry, repository, tag)
        .await
        .with_context(|| format!("pushing {registry}/{repository}:{tag}"))?;
    Ok(())
}

/// Mirrors Cluster API's and cert-manager's images into `registry` where the page's `images:`
/// overrides point: `you/cluster-api/<name>:<version>` (the manager at `/manager`, as their
/// Deployments run it) and `you/jetstack/<name>:<version>` (the binary as the entrypoint).
pub async fn mirror_images(registry: &str) -> anyhow::Result<()> {
    let capi = testenv::testbin::version("cluster-api")?;
    for r in capi_releases()? {
        let repo = format!("you/cluster-api/{}", r.image);
        push_binary_image(registry, &repo, &capi, r.provider.binary, "/manager").await?;
    }
    let cm = testenv::testbin::version("cert-manager")?;
    for (image, binary) in CERT_MANAGER_IMAGES {
        let repo = format!("you/jetstack/{image}");
        push_binary_image(registry, &repo, &cm, binary, &format!("/app/{image}")).await?;
    }
    Ok(())
}

/// An empty test environment with its kubelet, ready for the installation page's commands: its
/// registry, a kube client, a scratch home (image store, local repository, clusterctl.yaml) and
/// the commands' bash environment (see [`page_env`]).
#[derive(Debug)]
pub struct InstallEnv {
    /// The environment.
    pub env: testenv::TestEnv,
    /// Its registry's host.
    pub registry: String,
    /// A client of its API server.
    pub kube: crate::kube_ops::Kube,
    /// The scratch home.
    pub tmp: tempfile::TempDir,
    /// The page commands' environment variables.
    pub vars: Vec<(String, String)>,
}

impl InstallEnv {
    /// Starts the environment `name` and pushes the runtime base images into its registry.
    pub async fn start(name: &str) -> anyhow::Result<Self> {
        let env = testenv::TestEnv::start_empty(name)?;
        let registry = env.registry()?.host();
        env.kubelet()?;
        let kube = crate::kube_ops::Kube::new(env.client().await?);
        let tmp = tempfile::tempdir()?;
        let storage = tmp.path().join("images").display().to_string();
        let bases = testenv::image::push_runtime_base_images(&registry).await?;
        let vars = page_env(&env, &storage, &bases)?;
        Ok(Self {
            env,
            registry,
            kube,
            tmp,
            vars,
        })
    }
}

/// The bash environment of the page's commands: the test registry's images, a scratch image
/// store, the environment's kubeconfig and the test binaries' clusterctl first on `PATH`.
fn page_env(
    env: &testenv::TestEnv,
    storage: &str,
    bases: &testenv::image::RuntimeBaseImages,
) -> anyhow::Result<Vec<(String, String)>> {
    let clusterctl = testenv::testbin::path("clusterctl")?;
    let path = format!(
        "{}:{}",
        clusterctl
            .parent()
            .context("clusterctl's directory")?
            .display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Ok(vec![
        ("IMAGE_PROFILE".into(), "dev".into()),
        ("IMAGE_STORAGE_ROOT".into(), storage.into()),
        ("TERRAFORM_IMAGE".into(), bases.terraform.clone()),
        ("TOFU_IMAGE".into(), bases.tofu.clone()),
        (
            "KUBECONFIG".into(),
            env.endpoints().kubeconfig.display().to_string(),
        ),
        ("CLUSTERCTL_DISABLE_VERSIONCHECK".into(), "true".into()),
        ("PATH".into(), path),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_section_names_the_pinned_versions() {
        let commands = page_commands(&["3. Install with clusterctl"]).unwrap();
        for (tool, what) in [
            ("cluster-api", "Cluster API"),
            ("cert-manager", "cert-manager"),
        ] {
            let v = testenv::testbin::version(tool).unwrap();
            assert!(
                commands.contains(&format!("/{v}/")),
                "the page's clusterctl config names {what} {v}: {commands}"
            );
        }
        for r in capi_releases().unwrap() {
            assert!(commands.contains(r.components), "{}", r.components);
        }
    }

    #[test]
    fn a_missing_section_is_an_error() {
        let err = page_commands(&["No such section"]).unwrap_err().to_string();
        assert!(err.contains("No such section"), "{err}");
    }
}
