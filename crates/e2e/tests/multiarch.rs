//! The multi-platform build (issue 30 item 1; the book's Installation page, "Platforms", and
//! tfcapi-lint's "Install"): linux/amd64 and linux/arm64, built on this x86-64 machine by the make
//! targets a release runs, checked as a user on either platform meets them.
//!
//! 1. `make release-lint PLATFORMS=linux/amd64,linux/arm64` writes both Linux assets and a
//!    checksum file that verifies them; each asset is a static binary of its architecture, and
//!    `version --json` runs — the arm64 one under Debian's qemu-user.
//! 2. `make docker-build docker-push` with both platforms pushes the manager, webhook and runner
//!    images as OCI indexes of one image per platform; each platform's image names its
//!    architecture, holds a static binary of it, and that binary's `--version` runs.
//! 3. `make noop-images-push` with both platforms, on runtime base images that are indexes as
//!    upstream's are, pushes the no-op module images as indexes; `tfcapi-lint image
//!    --all-platforms --strict` (the release asset of step 1) passes on each of the six, and each
//!    platform's `/captf/runtime` is the runtime built for it and runs.
//!
//! Needs the test binaries (`make testbin`: crane, and tofu and terraform for linux/arm64), the
//! linux/arm64 builds and qemu-user (`make static-dev-arm64`) and a container engine or Debian's
//! buildah (the make targets install buildah).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

const PLATFORMS: &str = "linux/amd64,linux/arm64";
const BOTH: [&str; 2] = ["linux/amd64", "linux/arm64"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

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

/// `make ARGS` in the repository, with `IMAGE_STORAGE_ROOT` at `store`.
fn make(args: &[&str], store: &Path) -> anyhow::Result<String> {
    let started = std::time::Instant::now();
    let out = run(Command::new("make")
        .arg("--no-print-directory")
        .args(args)
        .env("IMAGE_STORAGE_ROOT", store)
        .current_dir(repo_root()))?;
    eprintln!(
        "make {} took {:.1}s",
        args[0],
        started.elapsed().as_secs_f64()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or_default(),
                m["platform"]["architecture"].as_str().unwrap_or_default()
            )
        })
        .collect();
    platforms.sort();
    ensure!(platforms == BOTH, "{reference} publishes {platforms:?}");
    for platform in BOTH {
        let config: Value =
            serde_json::from_slice(&crane(&["config", "--platform", platform, reference])?)?;
        ensure!(
            format!("{}/{}", config["os"], config["architecture"]).replace('"', "") == platform,
            "{reference}'s {platform} image has the config of {}/{}",
            config["os"],
            config["architecture"]
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

/// Step 1: the Linux tfcapi-lint assets of both platforms and their checksum file. Returns the
/// linux/amd64 asset.
fn release_lint(tmp: &Path) -> anyhow::Result<PathBuf> {
    let dist = tmp.join("dist");
    let out = make(
        &[
            "release-lint",
            &format!("PLATFORMS={PLATFORMS}"),
            "LINT_PROFILE=dev",
            &format!("LINT_DIST={}", dist.display()),
        ],
        &tmp.join("store"),
    )?;
    ensure!(out.contains("tfcapi-lint-linux-arm64"), "{out}");
    run(Command::new("sha256sum")
        .args(["--check", "--strict", "tfcapi-lint-checksums.txt"])
        .current_dir(&dist))?;
    let sums = std::fs::read_to_string(dist.join("tfcapi-lint-checksums.txt"))?;
    for platform in BOTH {
        let arch = platform.strip_prefix("linux/").unwrap();
        let asset = dist.join(format!("tfcapi-lint-linux-{arch}"));
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
    }
    Ok(dist.join("tfcapi-lint-linux-amd64"))
}

/// Step 2: the manager, webhook and runner images for both platforms.
fn provider_images(tmp: &Path, registry: &str) -> anyhow::Result<()> {
    let img = format!("{registry}/you/cluster-api-provider-terraform:v0.1.0");
    make(
        &[
            "docker-build",
            "docker-push",
            &format!("PLATFORMS={PLATFORMS}"),
            "IMAGE_PROFILE=dev",
            &format!("IMG={img}"),
        ],
        &tmp.join("store"),
    )?;
    for (suffix, binary, version) in [
        ("", "manager", "manager v"),
        ("-webhook", "webhook", "webhook "),
        ("-runner", "runner", "runner "),
    ] {
        let reference = img.replace(":v0.1.0", &format!("{suffix}:v0.1.0"));
        check_index(&reference)?;
        for platform in BOTH {
            let dir = tmp.join(format!("{binary}-{}", platform.replace('/', "-")));
            let path = export_file(&reference, platform, &dir, binary)?;
            check_binary(platform, &path)?;
            let out = run_for(platform, &path, &["--version"])?;
            ensure!(
                out.starts_with(&format!("{version}{}", env!("CARGO_PKG_VERSION"))),
                "{platform} {binary} --version: {out}"
            );
        }
    }
    Ok(())
}

/// Step 3: the no-op module images for both platforms, linted with the release asset `lint`.
async fn noop_images(tmp: &Path, registry: &str, lint: &Path) -> anyhow::Result<()> {
    let bases = testenv::image::push_multi_platform_runtime_base_images(registry, &BOTH).await?;
    make(
        &[
            "noop-images-push",
            &format!("PLATFORMS={PLATFORMS}"),
            &format!("NOOP_REGISTRY={registry}/captf"),
            "VERSION=v0.1.0",
            &format!("TERRAFORM_IMAGE={}", bases.terraform),
            &format!("TOFU_IMAGE={}", bases.tofu),
        ],
        &tmp.join("store"),
    )?;
    for role in ["cluster", "machine", "machinepool"] {
        for runtime in ["terraform", "opentofu"] {
            let reference = format!("{registry}/captf/noop-{role}:v0.1.0-{runtime}");
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
    for (runtime, version) in [
        ("terraform", &bases.terraform_version),
        ("opentofu", &bases.tofu_version),
    ] {
        let reference = format!("{registry}/captf/noop-machine:v0.1.0-{runtime}");
        for platform in BOTH {
            let dir = tmp.join(format!("noop-{runtime}-{}", platform.replace('/', "-")));
            let path = export_file(&reference, platform, &dir, "/captf/runtime")?;
            check_binary(platform, &path)?;
            let out: Value =
                serde_json::from_str(&run_for(platform, &path, &["version", "-json"])?)?;
            ensure!(
                out["terraform_version"] == version.as_str()
                    && out["platform"] == platform.replace('/', "_"),
                "{platform} {runtime} version -json: {out}"
            );
            std::fs::remove_dir_all(&dir)?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn releases_build_and_run_for_linux_amd64_and_linux_arm64() {
    let tmp = tempfile::Builder::new()
        .prefix("captf-multiarch-")
        .tempdir()
        .unwrap();
    let registry = testenv::registry::Registry::start_temp().await.unwrap();
    let host = registry.host();
    let lint = release_lint(tmp.path()).unwrap();
    provider_images(tmp.path(), &host).unwrap();
    noop_images(tmp.path(), &host, &lint).await.unwrap();
    registry.stop();
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
