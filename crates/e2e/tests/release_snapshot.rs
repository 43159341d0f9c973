//! The release snapshot (issue 30 items 1 to 3; the book's Installation page, "Platforms",
//! "Release snapshot" and "Install with the Cluster API Operator"): `make release-snapshot` cuts
//! a release on this x86-64 machine, for linux/amd64 and linux/arm64, into a folder and the test
//! registry, and every part of it is checked as a user on either platform meets it.
//!
//! 1. The Linux tfcapi-lint assets verify against their checksum file, are static binaries of
//!    their architecture, and `version --json` runs — the arm64 one under Debian's qemu-user;
//!    the tfcapi-lint image is an index of both, each holding that platform's asset. The assets
//!    the release workflow builds on other runners (`SNAPSHOT_ASSETS`, a stand-in file here) are
//!    copied as they are, listed in the same checksum file and given their SBOM.
//! 2. The manager, webhook and runner images are OCI indexes of exactly both platforms; each
//!    platform's image names its architecture, holds a static binary of it, and that binary's
//!    `--version` runs.
//! 3. The no-op module images, built on runtime base images that are indexes as upstream's are,
//!    are indexes too; `tfcapi-lint image --all-platforms --strict` (the release asset of step 1)
//!    passes on each of the six, and each platform's `/captf/runtime` reports its own platform.
//! 4. Each binary has an SPDX SBOM per platform whose checksum is that of the binary the image or
//!    asset ships; `checksums.txt` covers every file; `images.txt` names every image by digest;
//!    cosign verifies every image (ten) and the checksum file with the snapshot's `cosign.pub`, and
//!    refuses a checksum file changed after signing.
//! 5. CAPTF installs from the release alone, after its signatures verified: `clusterctl init`
//!    with a provider entry naming the release folder's `infrastructure-components.yaml` (nothing
//!    of the clone), CAPTF's three images copied into a mirror with both platforms and named by an
//!    `images:` override (`clusterctl init list-images` lists the mirror's, the runner's included),
//!    the other images from the release's registry (linux/amd64 taken from each index),
//!    and the Quick Start passes against it with the release's flavor, identity template and no-op
//!    module images, then the delete.
//! 6. The same release installs through the Cluster API Operator (v0.29.0, built from the Go
//!    module proxy), once `clusterctl delete` removed the first install: Cluster API's providers
//!    and CAPTF's `InfrastructureProvider` (the installation page's YAML as written, with more
//!    `spec.manager` settings) from ConfigMaps, Ready; the manager runs with every flag the
//!    Operator passes for them and never restarts; the Quick Start passes against it; deleting
//!    the provider object removes CAPTF's Deployments.
//!
//! Needs the test binaries (`make testbin`: crane, and tofu and terraform for linux/arm64), the
//! linux/arm64 builds and qemu-user (`make static-dev-arm64`), cosign (`make release-snapshot`
//! builds it from the Go module proxy), the Cluster API Operator (`make testbin`) and a container
//! engine or Debian's buildah (the make targets install buildah).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context as _, bail, ensure};
use e2e::install::{mirror_images, write_local_repositories};
use e2e::installed::{
    WAIT, check_captf_pods, check_runner_image, check_webhook_called, delete_quickstart_cluster,
    wait_webhooks_trusted,
};
use e2e::kube_ops::Kube;
use e2e::operator;
use e2e::quickstart::{self, Progress};
use e2e::suite::{Images, JobLog};
use serde_json::Value;
use testenv::TestEnv;
use testenv::env::repo_root;

const PLATFORMS: &str = "linux/amd64,linux/arm64";
const BOTH: [&str; 2] = ["linux/amd64", "linux/arm64"];

/// Runs `cmd`, failing with its output when it fails.
fn run(cmd: &mut Command) -> anyhow::Result<Output> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}

/// The ELF machine of the executable at `path`: `amd64` (EM_X86_64) or `arm64` (EM_AARCH64), and
/// whether it is static (no `PT_INTERP` program header).
fn elf(path: &Path) -> anyhow::Result<(&'static str, bool)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        bytes.len() > 64 && bytes.starts_with(b"\x7fELF") && bytes[4] == 2 && bytes[5] == 1,
        "{} is not a 64-bit little-endian ELF file",
        path.display()
    );
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let machine = match u16_at(18) {
        62 => "amd64",
        183 => "arm64",
        other => bail!("{} has ELF machine {other}", path.display()),
    };
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54) as usize, u16_at(56));
    let interp = (0..usize::from(phnum)).any(|i| {
        let o = phoff + i * phentsize;
        bytes.len() >= o + 4 && u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) == 3
    });
    Ok((machine, !interp))
}

/// Runs the executable at `path` built for `platform`: directly for linux/amd64, under
/// qemu-user for linux/arm64, with an empty environment (the machine's `TF_CLI_CONFIG_FILE`, for
/// one, would add a warning to a runtime's output). Returns its standard output.
fn run_for(platform: &str, path: &Path, args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = if platform == "linux/arm64" {
        let mut c = Command::new("qemu-aarch64-static");
        c.arg(path);
        c
    } else {
        Command::new(path)
    };
    let out = run(cmd.args(args).env_clear())?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Asserts that the executable at `path` is a static binary for `platform`.
fn check_binary(platform: &str, path: &Path) -> anyhow::Result<()> {
    let (machine, is_static) = elf(path)?;
    ensure!(
        Some(machine) == platform.strip_prefix("linux/"),
        "{} is built for {machine}, not {platform}",
        path.display()
    );
    ensure!(is_static, "{} is not static", path.display());
    Ok(())
}

/// `crane ARGS --insecure` against the test registry.
fn crane(args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let crane = testenv::testbin::path("crane")?;
    Ok(run(Command::new(crane).args(args).arg("--insecure"))?.stdout)
}

/// `os/architecture` of an index entry's platform or an image config.
fn os_arch(v: &Value) -> String {
    let field = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    format!("{}/{}", field("os"), field("architecture"))
}

/// Asserts that `reference` is an OCI index of exactly one image per platform in [`BOTH`], each of
/// whose configs names its platform.
fn check_index(reference: &str) -> anyhow::Result<()> {
    let index: Value = serde_json::from_slice(&crane(&["manifest", reference])?)?;
    ensure!(
        index["mediaType"] == "application/vnd.oci.image.index.v1+json",
        "{reference} is not an OCI index: {index:#}"
    );
    let mut platforms: Vec<String> = index["manifests"]
        .as_array()
        .context("manifests")?
        .iter()
        .map(|m| os_arch(&m["platform"]))
        .collect();
    platforms.sort();
    ensure!(platforms == BOTH, "{reference} publishes {platforms:?}");
    for platform in BOTH {
        let config: Value =
            serde_json::from_slice(&crane(&["config", "--platform", platform, reference])?)?;
        let named = os_arch(&config);
        ensure!(
            named == platform,
            "{reference}'s {platform} image has the config of {named}"
        );
    }
    Ok(())
}

/// Exports `platform`'s root filesystem of `reference` into `dir` and returns `dir/path`.
fn export_file(reference: &str, platform: &str, dir: &Path, path: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let tar = dir.join("rootfs.tar");
    crane(&[
        "export",
        "--platform",
        platform,
        reference,
        &tar.display().to_string(),
    ])?;
    run(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(dir))?;
    std::fs::remove_file(&tar)?;
    Ok(dir.join(path.trim_start_matches('/')))
}

/// A cut snapshot: its folder and the cosign that signed it.
struct Snapshot {
    dir: PathBuf,
    cosign: PathBuf,
}

const PASSWORD: &str = "snapshot-test";
/// The stand-in for a tfcapi-lint asset the release workflow builds on another runner.
const ELSEWHERE: &str = "tfcapi-lint-darwin-arm64";

/// `make release-snapshot` of v0.1.0 into `tmp` and `registry`, signed with a key made here.
async fn cut(tmp: &Path, registry: &str) -> anyhow::Result<Snapshot> {
    // cosign is not among the test binaries `make testbin` builds: built here when missing.
    run(Command::new(repo_root().join("hack/testbin.sh")).arg("cosign"))?;
    let cosign = testenv::testbin::path("cosign")?;
    run(Command::new(&cosign)
        .args(["generate-key-pair", "--output-key-prefix"])
        .arg(tmp.join("cosign"))
        .env("COSIGN_PASSWORD", PASSWORD))?;
    let bases = testenv::image::push_multi_platform_runtime_base_images(registry, &BOTH).await?;
    let dir = tmp.join("release/infrastructure-terraform/v0.1.0");
    // What the workflow's macOS runner hands over: the snapshot treats it as opaque bytes.
    let assets = tmp.join("assets");
    std::fs::create_dir(&assets)?;
    std::fs::write(
        assets.join(ELSEWHERE),
        b"tfcapi-lint for darwin/arm64, built elsewhere\n",
    )?;
    let started = std::time::Instant::now();
    run(Command::new("make")
        .args(["--no-print-directory", "release-snapshot", "VERSION=v0.1.0"])
        .arg(format!("SNAPSHOT_DIR={}", dir.display()))
        .arg(format!("SNAPSHOT_ASSETS={}", assets.display()))
        .arg(format!("SNAPSHOT_REGISTRY={registry}/you"))
        .arg(format!("COSIGN_KEY={}", tmp.join("cosign.key").display()))
        .arg(format!("SNAPSHOT_PLATFORMS={PLATFORMS}"))
        .args(["IMAGE_PROFILE=dev", "LINT_PROFILE=dev"])
        .arg(format!("TERRAFORM_IMAGE={}", bases.terraform))
        .arg(format!("TOFU_IMAGE={}", bases.tofu))
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("IMAGE_STORAGE_ROOT", tmp.join("store"))
        .current_dir(repo_root()))?;
    eprintln!(
        "e2e figures: make release-snapshot (dev profile, both platforms) took {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // Everything from here on reads the registry and the folder. The engine's image store (vfs:
    // a full copy of every layer, several GB for twenty platform images) goes now, not at the
    // end of the test.
    std::fs::remove_dir_all(tmp.join("store"))?;
    Ok(Snapshot { dir, cosign })
}

/// The SHA-256 of the file at `path`, in hex.
fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let digest = testenv::image::sha256_digest(&bytes);
    Ok(digest.trim_start_matches("sha256:").to_owned())
}

/// The snapshot's SBOM `<name>.spdx.json`, where `name` is `<binary>-<os>-<arch>`, describes the
/// file at `shipped`: its checksum, the release version, and the crates linked into the binary.
fn check_sbom(dir: &Path, name: &str, shipped: &Path) -> anyhow::Result<()> {
    let binary = name
        .rsplitn(3, '-')
        .nth(2)
        .context("<binary>-<os>-<arch>")?;
    let path = dir.join(format!("{name}.spdx.json"));
    let doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    ensure!(doc["spdxVersion"] == "SPDX-2.3", "{}", path.display());
    let packages = doc["packages"].as_array().context("packages")?;
    let root = &packages[0];
    ensure!(
        root["name"] == binary
            && root["versionInfo"] == "v0.1.0"
            && root["checksums"][0]["checksumValue"] == sha256_file(shipped)?.as_str(),
        "{}: the SBOM does not describe the shipped binary: {root:#}",
        path.display()
    );
    ensure!(
        packages.iter().any(|p| p["name"] == "serde_json")
            && !packages.iter().any(|p| p["name"] == "proptest"),
        "{}: not the crates linked into {binary}",
        path.display()
    );
    Ok(())
}

/// Step 1: the Linux tfcapi-lint assets of both platforms, their checksum file and the
/// tfcapi-lint image. Returns the linux/amd64 asset.
fn lint_assets(tmp: &Path, dir: &Path, registry: &str) -> anyhow::Result<PathBuf> {
    let image = format!("{registry}/you/tfcapi-lint:v0.1.0");
    check_index(&image)?;
    run(Command::new("sha256sum")
        .args(["--check", "--strict", "tfcapi-lint-checksums.txt"])
        .current_dir(dir))?;
    let sums = std::fs::read_to_string(dir.join("tfcapi-lint-checksums.txt"))?;
    for platform in BOTH {
        let arch = platform.strip_prefix("linux/").unwrap();
        let asset = dir.join(format!("tfcapi-lint-linux-{arch}"));
        ensure!(
            sums.contains(&format!("tfcapi-lint-linux-{arch}\n")),
            "{sums}"
        );
        check_binary(platform, &asset)?;
        let version: Value =
            serde_json::from_str(&run_for(platform, &asset, &["version", "--json"])?)?;
        ensure!(
            version["name"] == "tfcapi-lint" && version["version"] == env!("CARGO_PKG_VERSION"),
            "{platform}: {version}"
        );
        check_sbom(dir, &format!("tfcapi-lint-linux-{arch}"), &asset)?;
        let into = tmp.join(format!("tfcapi-lint-{arch}"));
        let in_image = export_file(&image, platform, &into, "tfcapi-lint")?;
        ensure!(
            sha256_file(&in_image)? == sha256_file(&asset)?,
            "{image} ships another tfcapi-lint for {platform} than the release asset"
        );
    }
    let elsewhere = dir.join(ELSEWHERE);
    ensure!(
        std::fs::read(&elsewhere)? == b"tfcapi-lint for darwin/arm64, built elsewhere\n"
            && sums.lines().count() == 3
            && sums.contains(&format!("{}  {ELSEWHERE}\n", sha256_file(&elsewhere)?)),
        "{ELSEWHERE} is not copied as it is or not in the checksum file: {sums}"
    );
    check_sbom(dir, ELSEWHERE, &elsewhere)?;
    Ok(dir.join("tfcapi-lint-linux-amd64"))
}

/// Step 2: the manager, webhook and runner images for both platforms.
fn provider_images(tmp: &Path, dir: &Path, registry: &str) -> anyhow::Result<()> {
    let img = format!("{registry}/you/cluster-api-provider-terraform:v0.1.0");
    // The clusterctl repository names these images.
    let components = std::fs::read_to_string(dir.join("infrastructure-components.yaml"))?;
    ensure!(components.contains(&format!("image: {img}")), "{img}");
    for (suffix, binary, version) in [
        ("", "manager", "manager v"),
        ("-webhook", "webhook", "webhook "),
        ("-runner", "runner", "runner "),
    ] {
        let reference = img.replace(":v0.1.0", &format!("{suffix}:v0.1.0"));
        check_index(&reference)?;
        for platform in BOTH {
            let into = tmp.join(format!("{binary}-{}", platform.replace('/', "-")));
            let path = export_file(&reference, platform, &into, binary)?;
            check_binary(platform, &path)?;
            let out = run_for(platform, &path, &["--version"])?;
            ensure!(
                out.starts_with(&format!("{version}{}", env!("CARGO_PKG_VERSION"))),
                "{platform} {binary} --version: {out}"
            );
            let arch = platform.strip_prefix("linux/").unwrap();
            check_sbom(dir, &format!("{binary}-linux-{arch}"), &path)?;
        }
    }
    Ok(())
}

/// Step 3: the no-op module images for both platforms, linted with the release asset `lint`.
fn noop_images(tmp: &Path, registry: &str, lint: &Path) -> anyhow::Result<()> {
    for role in ["cluster", "machine", "machinepool"] {
        for runtime in ["terraform", "opentofu"] {
            let reference = format!("{registry}/you/noop-{role}:v0.1.0-{runtime}");
            check_index(&reference)?;
            let out = Command::new(lint)
                .args([
                    "image",
                    "--role",
                    role,
                    "--strict",
                    "--all-platforms",
                    "--insecure",
                ])
                .arg(&reference)
                .output()?;
            ensure!(
                out.status.success(),
                "tfcapi-lint image --all-platforms {reference}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // Each platform's runtime is the one built for it, and runs there.
    for (runtime, tool) in [("terraform", "terraform"), ("opentofu", "tofu")] {
        let version = testenv::testbin::version(tool)?;
        let reference = format!("{registry}/you/noop-machine:v0.1.0-{runtime}");
        for platform in BOTH {
            let into = tmp.join(format!("noop-{runtime}-{}", platform.replace('/', "-")));
            let path = export_file(&reference, platform, &into, "/captf/runtime")?;
            check_binary(platform, &path)?;
            let out: Value =
                serde_json::from_str(&run_for(platform, &path, &["version", "-json"])?)?;
            ensure!(
                out["terraform_version"] == version.trim_start_matches('v')
                    && out["platform"] == platform.replace('/', "_"),
                "{platform} {runtime} version -json: {out}"
            );
            std::fs::remove_dir_all(&into)?;
        }
    }
    Ok(())
}

/// Step 4: checksums, digests and signatures.
fn signatures(snapshot: &Snapshot, registry: &str) -> anyhow::Result<()> {
    let dir = &snapshot.dir;
    run(Command::new("sha256sum")
        .args(["--check", "--strict", "checksums.txt"])
        .current_dir(dir))?;
    let sums = std::fs::read_to_string(dir.join("checksums.txt"))?;
    let listed: std::collections::BTreeSet<&str> = sums
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(_, f)| f))
        .collect();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !["checksums.txt", "checksums.txt.sig", "cosign.pub"].contains(&name.as_str()) {
            ensure!(
                listed.contains(name.as_str()),
                "checksums.txt misses {name}"
            );
        }
    }
    let images = std::fs::read_to_string(dir.join("images.txt"))?;
    ensure!(images.lines().count() == 10, "{images}");
    let pubkey = dir.join("cosign.pub");
    for image in images.lines() {
        ensure!(
            image.starts_with(&format!("{registry}/you/")) && image.contains("@sha256:"),
            "{image}"
        );
        run(Command::new(&snapshot.cosign)
            .args([
                "verify",
                "--insecure-ignore-tlog",
                "--allow-insecure-registry",
                "--key",
            ])
            .arg(&pubkey)
            .arg(image))
        .with_context(|| format!("cosign verify {image}"))?;
    }
    let verify_blob = |file: &Path| {
        Command::new(&snapshot.cosign)
            .args(["verify-blob", "--insecure-ignore-tlog", "--key"])
            .arg(&pubkey)
            .arg("--signature")
            .arg(dir.join("checksums.txt.sig"))
            .arg(file)
            .output()
    };
    let out = verify_blob(&dir.join("checksums.txt"))?;
    ensure!(
        out.status.success(),
        "cosign verify-blob checksums.txt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A checksum file changed after signing is refused.
    let changed = dir.with_file_name("checksums-changed.txt");
    std::fs::write(&changed, sums.replacen(&sums[..1], "0", 1))?;
    ensure!(
        !verify_blob(&changed)?.status.success(),
        "cosign verified a changed checksum file"
    );
    Ok(())
}

/// The clusterctl configuration of an install from the release alone: CAPTF from the release
/// folder; Cluster API, cert-manager and their images from local repositories and a mirror, as on
/// a machine without internet access (the Installation page's step 3).
fn clusterctl_config(release: &Path, repos: &Path, registry: &str) -> anyhow::Result<String> {
    let capi = testenv::testbin::version("cluster-api")?;
    let cm = testenv::testbin::version("cert-manager")?;
    let (r, m) = (repos.display(), format!("{registry}/you"));
    Ok(format!(
        "providers:
  - name: terraform
    type: InfrastructureProvider
    url: file://{}/infrastructure-components.yaml
  - name: cluster-api
    type: CoreProvider
    url: file://{r}/cluster-api/{capi}/core-components.yaml
  - name: kubeadm
    type: BootstrapProvider
    url: file://{r}/bootstrap-kubeadm/{capi}/bootstrap-components.yaml
  - name: kubeadm
    type: ControlPlaneProvider
    url: file://{r}/control-plane-kubeadm/{capi}/control-plane-components.yaml
cert-manager:
  url: file://{r}/cert-manager/{cm}/cert-manager.yaml
  version: {cm}
images:
  cluster-api:
    repository: {m}/cluster-api
  bootstrap-kubeadm:
    repository: {m}/cluster-api
  control-plane-kubeadm:
    repository: {m}/cluster-api
  cert-manager:
    repository: {m}/jetstack
  infrastructure-terraform:
    repository: {registry}/{MIRROR}
",
        release.display()
    ))
}

/// Where the install from the release mirrors CAPTF's images, as an air-gapped user does.
const MIRROR: &str = "mirror/captf";
/// CAPTF's three images, by repository name.
const CAPTF_IMAGES: [&str; 3] = [
    "cluster-api-provider-terraform",
    "cluster-api-provider-terraform-webhook",
    "cluster-api-provider-terraform-runner",
];

/// Copies CAPTF's three images, every platform of each, from the release's registry into the
/// mirror (`crane copy`, as the Installation page's "Install from a release" does); both
/// platforms stay.
fn mirror_release_images(registry: &str) -> anyhow::Result<()> {
    for name in CAPTF_IMAGES {
        let mirrored = format!("{registry}/{MIRROR}/{name}:v0.1.0");
        crane(&["copy", &format!("{registry}/you/{name}:v0.1.0"), &mirrored])?;
        check_index(&mirrored)?;
    }
    Ok(())
}

/// The test binaries' clusterctl against `env`'s cluster, without its version check.
fn clusterctl_command(env: &TestEnv) -> anyhow::Result<Command> {
    let mut cmd = Command::new(testenv::testbin::path("clusterctl")?);
    cmd.env("KUBECONFIG", &env.endpoints().kubeconfig)
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true");
    Ok(cmd)
}

/// `clusterctl init`'s arguments for the release and Cluster API's pinned providers.
fn init_args(config: &Path) -> anyhow::Result<Vec<String>> {
    let capi = testenv::testbin::version("cluster-api")?;
    Ok([
        "--config".to_owned(),
        config.display().to_string(),
        "--core".to_owned(),
        format!("cluster-api:{capi}"),
        "--bootstrap".to_owned(),
        format!("kubeadm:{capi}"),
        "--control-plane".to_owned(),
        format!("kubeadm:{capi}"),
        "--infrastructure".to_owned(),
        "terraform:v0.1.0".to_owned(),
    ]
    .into())
}

/// Step 5: `clusterctl init` from the release, with CAPTF's images mirrored as an air-gapped
/// user does (`clusterctl init list-images` lists the mirror's three, the runner's included), the
/// Quick Start against it, the delete.
async fn install_from_release(
    env: &TestEnv,
    tmp: &Path,
    snapshot: &Snapshot,
    registry: &str,
) -> anyhow::Result<()> {
    let kube = Kube::new(env.client().await?);
    let repos = tmp.join("local-repository");
    write_local_repositories(&repos)?;
    mirror_images(registry).await?;
    mirror_release_images(registry)?;
    let config = tmp.join("clusterctl.yaml");
    std::fs::write(&config, clusterctl_config(&snapshot.dir, &repos, registry)?)?;
    let clusterctl = |args: &[&str]| {
        run(clusterctl_command(env)?
            .args(args)
            .args(init_args(&config)?))
    };
    // Every image of CAPTF's the install pulls, the runner's included, is the mirror's.
    let listed = String::from_utf8(clusterctl(&["init", "list-images"])?.stdout)?;
    for name in CAPTF_IMAGES {
        let want = format!("{registry}/{MIRROR}/{name}:v0.1.0");
        ensure!(
            listed.lines().any(|l| l.trim() == want),
            "clusterctl init list-images does not list {want}:\n{listed}"
        );
    }
    ensure!(
        !listed.contains(&format!("{registry}/you/cluster-api-provider-terraform")),
        "an image of the release's own registry is still listed:\n{listed}"
    );
    let started = std::time::Instant::now();
    clusterctl(&["init", "--wait-providers"])?;
    let init = started.elapsed();
    let runner = format!("{registry}/{MIRROR}/cluster-api-provider-terraform-runner:v0.1.0");
    let provisioned =
        quickstart_on_release(env, &kube, tmp, snapshot, (registry, &runner), "opentofu").await?;
    println!(
        "e2e figures: install from the release: clusterctl init {:.1}s, apply to Machine Provisioned {:.1}s",
        init.as_secs_f64(),
        provisioned.as_secs_f64()
    );
    Ok(())
}

/// The Quick Start against an install of the release, in a namespace of its own, once the
/// install is checked: the release's own flavor and identity template, its no-op module images
/// of `runtime`, Jobs running `runner` (the release's runner image, or its mirror's), then the
/// delete. Returns the time from apply to Machine Provisioned.
async fn quickstart_on_release(
    env: &TestEnv,
    kube: &Kube,
    tmp: &Path,
    snapshot: &Snapshot,
    (registry, runner): (&str, &str),
    runtime: &str,
) -> anyhow::Result<std::time::Duration> {
    let ns = env.namespace(runtime).await?;
    wait_webhooks_trusted(kube, &ns).await?;
    check_captf_pods(env, kube).await?;
    check_webhook_called(kube, &ns).await?;
    let m = format!("{registry}/you");
    let images = Images {
        runner: runner.to_owned(),
        cluster: format!("{m}/noop-cluster:v0.1.0-{runtime}"),
        machine: format!("{m}/noop-machine:v0.1.0-{runtime}"),
        machinepool: format!("{m}/noop-machinepool:v0.1.0-{runtime}"),
    };
    // The flavor and the identity template are the release's own files.
    let clusterctl =
        quickstart::flavor_clusterctl_in(&tmp.join(format!("flavors-{runtime}")), &images, &ns)?
            .templates_from(&snapshot.dir);
    let jobs = JobLog::watch(kube, &ns);
    let progress = Progress::new(true);
    let f =
        quickstart::run_with(&clusterctl, kube, &ns, &ns, "my-cluster", &progress, true).await?;
    check_runner_image(kube, &ns, &images.runner).await?;
    delete_quickstart_cluster(kube, &ns, "my-cluster", &jobs).await?;
    Ok(f.apply_to_machine_provisioned)
}

/// Removes everything `clusterctl init` installed but cert-manager: the providers, their CRDs and
/// their namespaces, as a user moving to the Operator does; waits until they are gone.
async fn remove_clusterctl_install(env: &TestEnv, kube: &Kube, tmp: &Path) -> anyhow::Result<()> {
    delete_captf_objects(kube).await?;
    // One provider at a time, dependents first, each once the namespace holding its inventory
    // entry is gone: a single `--all` deletes some providers' CRDs before it reaches another,
    // whose deletion then fails listing those kinds (seen for MachineDeployment and
    // KubeadmControlPlane).
    let steps: [(&[&str], &str); 4] = [
        (&["--infrastructure", "terraform"], "captf-system"),
        (
            &["--control-plane", "kubeadm"],
            "capi-kubeadm-control-plane-system",
        ),
        (&["--bootstrap", "kubeadm"], "capi-kubeadm-bootstrap-system"),
        (&["--core", "cluster-api"], "capi-system"),
    ];
    for (which, ns) in steps {
        run(clusterctl_command(env)?
            .arg("delete")
            .args(which)
            .args(["--include-crd", "--include-namespace", "--config"])
            .arg(tmp.join("clusterctl.yaml")))?;
        kube.wait_gone(("v1", "Namespace"), "", ns, WAIT).await?;
    }
    for crd in [
        "clusters.cluster.x-k8s.io",
        "terraformclusters.infrastructure.cluster.x-k8s.io",
    ] {
        kube.wait_gone(
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            "",
            crd,
            WAIT,
        )
        .await?;
    }
    Ok(())
}

/// Deletes every object of CAPTF's kinds left after the Quick Start (its identity), while the
/// manager still runs to release them: `clusterctl delete --include-crd` refuses CRDs that still
/// hold objects.
async fn delete_captf_objects(kube: &Kube) -> anyhow::Result<()> {
    let crds = kube
        .list(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "cluster.x-k8s.io/provider=infrastructure-terraform",
        )
        .await?;
    for crd in &crds {
        let kind = crd["spec"]["names"]["kind"].as_str().context("kind")?;
        let api_version = format!(
            "{}/{}",
            crd["spec"]["group"].as_str().context("group")?,
            crd["spec"]["versions"][0]["name"]
                .as_str()
                .context("version")?
        );
        for obj in kube.list(&api_version, kind, "", "").await? {
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = e2e::kube_ops::name_of(&obj);
            kube.delete(&api_version, kind, ns, &name).await?;
            kube.wait_gone((&api_version, kind), ns, &name, WAIT)
                .await?;
        }
    }
    Ok(())
}

/// The `spec.manager` settings the Operator install adds to the page's: every one the Operator
/// turns into a manager flag, and the flags it must pass for them.
fn operator_manager_settings() -> (Value, Vec<&'static str>) {
    let settings = serde_json::json!({
        "maxConcurrentReconciles": 4,
        "verbosity": 3,
        "featureGates": {"MachinePool": true, "ClusterTopology": true},
        "profilerAddress": "localhost:6060",
        "controller": {"groupKindConcurrency": {"TerraformMachine": 6}},
        "health": {"healthProbeBindAddress": ":9440"},
        "metrics": {"bindAddress": ":8443", "diagnosticsAddress": ":8443"},
        "webhook": {"port": 9443, "host": "0.0.0.0", "certDir": "/tmp/k8s-webhook-server/serving-certs"},
        "leaderElection": {
            "leaderElect": true,
            "resourceName": "captf-operator",
            "resourceNamespace": "captf-system",
            "resourceLock": "leases",
            "leaseDuration": "15s",
            "renewDeadline": "10s",
            "retryPeriod": "2s",
        },
    });
    let flags = vec![
        "--max-concurrent-reconciles=4",
        "--terraformmachine-concurrency=6",
        "--v=3",
        "--feature-gates=ClusterTopology=true,MachinePool=true",
        "--profiler-address=localhost:6060",
        "--health-addr=:9440",
        "--metrics-bind-addr=:8443",
        "--diagnostics-address=:8443",
        "--webhook-port=9443",
        "--webhook-host=0.0.0.0",
        "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
        "--leader-elect=true",
        "--leader-election-id=captf-system/captf-operator",
        "--sync-period=600s",
        // The page's configSecret.
        "--state-backups=3",
        "--drift-default-interval=1h0m0s",
    ];
    (settings, flags)
}

/// Step 6: the same release through the Cluster API Operator, after the clusterctl install is
/// removed: the Operator, Cluster API's providers and CAPTF as its objects, the manager started
/// with every flag the Operator passes, the Quick Start against it, then the provider deleted.
async fn install_with_operator(
    env: &TestEnv,
    tmp: &Path,
    snapshot: &Snapshot,
    registry: &str,
) -> anyhow::Result<()> {
    let kube = Kube::new(env.client().await?);
    remove_clusterctl_install(env, &kube, tmp).await?;
    let started = std::time::Instant::now();
    operator::install(&kube, registry).await?;
    let capi = operator::install_capi(&kube, registry).await?;
    let (settings, flags) = operator_manager_settings();
    let version = operator::install_captf(&kube, &snapshot.dir, &settings).await?;
    let capi_version = testenv::testbin::version("cluster-api")?;
    for (kind, ns, name) in &capi {
        operator::wait_ready(&kube, kind, ns, name, &capi_version).await?;
    }
    operator::wait_ready(
        &kube,
        "InfrastructureProvider",
        "captf-system",
        "terraform",
        &version,
    )
    .await?;
    let install = started.elapsed();
    let args = operator::manager_args(&kube).await?;
    for flag in &flags {
        ensure!(
            args.iter().any(|a| a == flag),
            "the Operator did not pass {flag}: {args:?}"
        );
    }
    // The Terraform-based module images this time.
    let runner = format!("{registry}/you/cluster-api-provider-terraform-runner:v0.1.0");
    let provisioned =
        quickstart_on_release(env, &kube, tmp, snapshot, (registry, &runner), "terraform").await?;
    operator::check_manager_running(&kube).await?;
    // Deleting the provider object uninstalls CAPTF.
    kube.delete(
        operator::API,
        "InfrastructureProvider",
        "captf-system",
        "terraform",
    )
    .await?;
    for name in ["captf-controller-manager", "captf-webhook"] {
        kube.wait_gone(("apps/v1", "Deployment"), "captf-system", name, WAIT)
            .await?;
    }
    println!(
        "e2e figures: install through the Cluster API Operator: providers Ready {:.1}s, apply to Machine Provisioned {:.1}s",
        install.as_secs_f64(),
        provisioned.as_secs_f64()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_snapshot_builds_signs_runs_and_installs_for_linux_amd64_and_linux_arm64()
-> anyhow::Result<()> {
    let tmp = tempfile::Builder::new()
        .prefix("captf-release-snapshot-")
        .tempdir()?;
    let env = TestEnv::start_empty("captf-release")?;
    let host = env.registry()?.host();
    env.kubelet()?;
    let snapshot = cut(tmp.path(), &host).await?;
    let lint = lint_assets(tmp.path(), &snapshot.dir, &host)?;
    provider_images(tmp.path(), &snapshot.dir, &host)?;
    noop_images(tmp.path(), &host, &lint)?;
    signatures(&snapshot, &host)?;
    install_from_release(&env, tmp.path(), &snapshot, &host).await?;
    install_with_operator(&env, tmp.path(), &snapshot, &host).await
}

/// `make release-snapshot` refuses each wrong setting before it builds anything, saying which
/// setting and why, and writes no folder.
#[test]
fn release_snapshot_refuses_each_wrong_setting_before_building() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("cosign.key");
    std::fs::write(&key, "not read before the checks pass").unwrap();
    let key = format!("COSIGN_KEY={}", key.display());
    let existing = tmp.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    let odd_assets = tmp.path().join("assets");
    std::fs::create_dir(&odd_assets).unwrap();
    std::fs::write(odd_assets.join("checksums.txt"), "").unwrap();
    let dir = tmp.path().join("snapshot");
    // Each case changes a valid base (a registry, a key): a later assignment on make's command
    // line wins, and an empty one unsets.
    let cases: [(&[&str], &str); 10] = [
        (&["SNAPSHOT_REGISTRY="], "set REGISTRY=<registry>/<path>"),
        (&["COSIGN_KEY="], "set COSIGN_KEY to a cosign private key"),
        (
            &["COSIGN_KEYLESS=true"],
            "set COSIGN_KEY or COSIGN_KEYLESS=true, not both",
        ),
        (&["COSIGN_KEYLESS=yes"], "COSIGN_KEYLESS=yes: true or false"),
        (
            &["COSIGN_KEY=", "COSIGN_KEYLESS=true"],
            "COSIGN_KEYLESS=true needs an OIDC identity",
        ),
        (
            &["COSIGN_KEY=/nonexistent/cosign.key"],
            "COSIGN_KEY=/nonexistent/cosign.key is not a readable file",
        ),
        (&["VERSION=0.1.0"], "VERSION=0.1.0 is not vX.Y.Z"),
        (
            &[&format!("SNAPSHOT_DIR={}", existing.display())],
            "exists: a snapshot is written into a new folder",
        ),
        (
            &["SNAPSHOT_ASSETS=/nonexistent"],
            "ASSETS=/nonexistent is not a folder",
        ),
        (
            &[&format!("SNAPSHOT_ASSETS={}", odd_assets.display())],
            "ASSETS: checksums.txt is not one of the assets built elsewhere",
        ),
    ];
    for (args, expected) in cases {
        let out = Command::new("make")
            .args(["--no-print-directory", "release-snapshot"])
            .arg(format!("SNAPSHOT_DIR={}", dir.display()))
            .args(["VERSION=v0.1.0", "SNAPSHOT_REGISTRY=r/you", &key])
            .args(args)
            .env_remove("ACTIONS_ID_TOKEN_REQUEST_URL")
            .env_remove("SIGSTORE_ID_TOKEN")
            .env_remove("COSIGN_KEY")
            .env_remove("COSIGN_KEYLESS")
            .current_dir(repo_root())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains(expected) && !err.contains("release-snapshot: images for"),
            "{args:?}: {err}"
        );
    }
    assert!(!dir.exists());
}

/// A platform CAPTF does not build for is refused before anything is built, naming the ones it
/// does.
#[test]
fn an_unsupported_platform_is_refused_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    for target in ["static-binaries", "release-lint", "docker-build"] {
        let out = Command::new("make")
            .args([
                "--no-print-directory",
                target,
                "PLATFORMS=linux/amd64,linux/s390x",
            ])
            .env("LINT_DIST", tmp.path())
            .current_dir(repo_root())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{target}: {err}");
        assert!(
            err.contains("platform \"linux/s390x\" is not supported: PLATFORMS takes linux/amd64, linux/arm64"),
            "{target}: {err}"
        );
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}
