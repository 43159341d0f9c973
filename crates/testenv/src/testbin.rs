//! Locates the test binaries `hack/testbin.sh` builds from source (ENGINEERING.md §2).
//!
//! Layout: `${CAPTF_TESTBIN:-$HOME/.cache/captf/testbin}/<tool>-<version>/<binary>`, where
//! `<version>` is the version of the tool's main module pinned in `hack/testbin/<tool>/go.mod` —
//! read here at compile time, so the Rust side and the build script can never disagree.

use std::path::PathBuf;

/// A tool `hack/testbin.sh` builds, and the binaries it produces.
struct Tool {
    name: &'static str,
    module: &'static str,
    go_mod: &'static str,
    binaries: &'static [&'static str],
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "tofu",
        module: "github.com/opentofu/opentofu",
        go_mod: include_str!("../../../hack/testbin/tofu/go.mod"),
        binaries: &["tofu"],
    },
    Tool {
        name: "crane",
        module: "github.com/google/go-containerregistry",
        go_mod: include_str!("../../../hack/testbin/crane/go.mod"),
        binaries: &["crane"],
    },
    Tool {
        name: "etcd",
        module: "go.etcd.io/etcd/server/v3",
        go_mod: include_str!("../../../hack/testbin/etcd/go.mod"),
        binaries: &["etcd"],
    },
    Tool {
        name: "kubernetes",
        module: "k8s.io/kubernetes",
        go_mod: include_str!("../../../hack/testbin/kubernetes/go.mod"),
        binaries: &["kube-apiserver", "kube-controller-manager"],
    },
    // The node tools (`hack/testbin.sh`'s NODE_TOOLS), built for real nodes, not by `make
    // testbin`: kubectl reads a workload cluster's Nodes.
    Tool {
        name: "kubernetes-node",
        module: "k8s.io/kubernetes",
        go_mod: include_str!("../../../hack/testbin/kubernetes/go.mod"),
        binaries: &[
            "kubelet",
            "kubeadm",
            "kubectl",
            "kube-proxy",
            "kube-scheduler",
        ],
    },
    // The Docker provider of the docker modules' images (`modules/docker`), required under its
    // old module path (see its wrapper's go.mod).
    Tool {
        name: "terraform-provider-docker",
        module: "github.com/terraform-providers/terraform-provider-docker",
        go_mod: include_str!("../../../hack/testbin/terraform-provider-docker/go.mod"),
        binaries: &["terraform-provider-docker"],
    },
    Tool {
        name: "kustomize",
        module: "sigs.k8s.io/kustomize/kustomize/v5",
        go_mod: include_str!("../../../hack/testbin/kustomize/go.mod"),
        binaries: &["kustomize"],
    },
    Tool {
        name: "terraform",
        module: "github.com/hashicorp/terraform",
        go_mod: include_str!("../../../hack/testbin/terraform/go.mod"),
        binaries: &["terraform"],
    },
    Tool {
        name: "cluster-api",
        module: "sigs.k8s.io/cluster-api",
        go_mod: include_str!("../../../hack/testbin/cluster-api/go.mod"),
        binaries: &[
            "capi-manager",
            "kubeadm-bootstrap-manager",
            "kubeadm-control-plane-manager",
            "clusterctl",
        ],
    },
    Tool {
        name: "cert-manager",
        module: "github.com/cert-manager/cert-manager",
        go_mod: include_str!("../../../hack/testbin/cert-manager/go.mod"),
        // `cert-manager.yaml` is its install manifest, rendered from its chart with this `helm`.
        binaries: &[
            "cert-manager-controller",
            "cert-manager-cainjector",
            "cert-manager-webhook",
            "helm",
            "cert-manager.yaml",
        ],
    },
    Tool {
        name: "promtool",
        module: "github.com/prometheus/prometheus",
        go_mod: include_str!("../../../hack/testbin/promtool/go.mod"),
        binaries: &["promtool"],
    },
    Tool {
        name: "cluster-api-operator",
        module: "sigs.k8s.io/cluster-api-operator",
        go_mod: include_str!("../../../hack/testbin/cluster-api-operator/go.mod"),
        binaries: &["cluster-api-operator"],
    },
    // Built by `make release-snapshot` (`hack/testbin.sh cosign`), not by `make testbin`.
    Tool {
        name: "cosign",
        module: "github.com/sigstore/cosign/v2",
        go_mod: include_str!("../../../hack/testbin/cosign/go.mod"),
        binaries: &["cosign"],
    },
    // Built only for `make bench` (`hack/testbin.sh tflint`), not by `make testbin`.
    Tool {
        name: "tflint",
        module: "github.com/terraform-linters/tflint",
        go_mod: include_str!("../../../hack/testbin/tflint/go.mod"),
        binaries: &["tflint"],
    },
];

/// The version the Docker provider reports to the runtime (`main.version` in its build flags in
/// `hack/testbin.sh`): the version a provider mirror files it under.
pub const DOCKER_PROVIDER_VERSION: &str = "4.6.0";

/// The root directory of the test binaries.
pub fn root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPTF_TESTBIN").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/captf/testbin")
}

/// The version a `go.mod` pins `module` at (`<module> <version>` in a require line).
fn pinned_version(go_mod: &str, module: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let first = words.next()?;
        let first = if first == "require" {
            words.next()?
        } else {
            first
        };
        let version = words.next()?;
        (first == module && version.starts_with('v')).then(|| version.to_owned())
    })
}

fn tool(name: &str) -> anyhow::Result<&'static Tool> {
    TOOLS
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| anyhow::anyhow!("unknown test tool {name:?}"))
}

/// The pinned version of `tool` (`tofu`, `crane`, `etcd`, `kubernetes`, `cluster-api`,
/// `cert-manager`, ...).
pub fn version(tool: &str) -> anyhow::Result<String> {
    let t = self::tool(tool)?;
    pinned_version(t.go_mod, t.module)
        .ok_or_else(|| anyhow::anyhow!("hack/testbin/{tool}/go.mod does not pin {}", t.module))
}

/// The path of a test binary (`tofu`, `crane`, `etcd`, `kube-apiserver`,
/// `kube-controller-manager`, `promtool`, ...), or an error that says how to build it.
pub fn path(binary: &str) -> anyhow::Result<PathBuf> {
    let tool = TOOLS
        .iter()
        .find(|t| t.binaries.contains(&binary))
        .ok_or_else(|| anyhow::anyhow!("unknown test binary {binary:?}"))?;
    located(tool, "", binary, "`make testbin` (hack/testbin.sh)")
}

/// `binary` in `tool`'s directory `<tool>-<version><suffix>`, or an error naming `build`, the
/// command that builds it.
fn located(tool: &Tool, suffix: &str, binary: &str, build: &str) -> anyhow::Result<PathBuf> {
    let version = version(tool.name)?;
    let path = root()
        .join(format!("{}-{version}{suffix}", tool.name))
        .join(binary);
    if path.is_file() {
        Ok(path)
    } else {
        Err(anyhow::anyhow!(
            "test binary {} is missing: run {build} to build it",
            path.display()
        ))
    }
}

/// The runtimes `hack/testbin.sh` also builds for linux/arm64 (`<tool>-linux-arm64`), into
/// `<tool>-<version>-linux-arm64/`.
const ARM64_TOOLS: &[&str] = &["tofu", "terraform"];

/// The path of a test binary built for `platform`: [`path`] for `linux/amd64` (the machine's
/// own), the `linux/arm64` build of a runtime (`tofu`, `terraform`) for `linux/arm64`.
pub fn path_for_platform(binary: &str, platform: &str) -> anyhow::Result<PathBuf> {
    match platform {
        "linux/amd64" => path(binary),
        "linux/arm64" => {
            let tool = TOOLS
                .iter()
                .find(|t| t.binaries.contains(&binary) && ARM64_TOOLS.contains(&t.name))
                .ok_or_else(|| anyhow::anyhow!("no linux/arm64 build of {binary:?}"))?;
            let build = format!("`make testbin` (hack/testbin.sh {}-linux-arm64)", tool.name);
            located(tool, "-linux-arm64", binary, &build)
        }
        other => Err(anyhow::anyhow!("no test binaries for platform {other:?}")),
    }
}

/// Go's module cache: `$GOMODCACHE`, else what `go env GOMODCACHE` says, else
/// `$GOPATH/pkg/mod`, else `$HOME/go/pkg/mod` (Go's own default).
pub fn go_mod_cache() -> PathBuf {
    let non_empty = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = non_empty("GOMODCACHE") {
        return dir;
    }
    let from_go = std::process::Command::new("go")
        .args(["env", "GOMODCACHE"])
        .env("GOTOOLCHAIN", "local")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty());
    if let Some(dir) = from_go {
        return PathBuf::from(dir);
    }
    if let Some(gopath) = non_empty("GOPATH") {
        return gopath.join("pkg/mod");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join("go/pkg/mod")
}

/// A module path as the module cache spells it: every upper-case letter becomes `!` and its
/// lower-case form.
fn escape_module_path(module: &str) -> String {
    let mut out = String::with_capacity(module.len());
    for c in module.chars() {
        if c.is_ascii_uppercase() {
            out.push('!');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The source tree of `tool`'s pinned main module in Go's module cache, where `make testbin`
/// put it: Cluster API's CRDs and webhook manifests are read from there, found at run time.
pub fn module_dir(tool: &str) -> anyhow::Result<PathBuf> {
    let t = self::tool(tool)?;
    let version = version(tool)?;
    let dir = go_mod_cache().join(format!("{}@{version}", escape_module_path(t.module)));
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(anyhow::anyhow!(
            "module {}@{version} is not in the Go module cache ({}): run `make testbin` \
             (hack/testbin.sh) to download it",
            t.module,
            dir.display()
        ))
    }
}

/// The static runner: `$CAPTF_RUNNER_BIN`, else the cross-target build in this target directory
/// (`RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -p runner --target
/// x86_64-unknown-linux-gnu`, release or debug).
pub fn static_runner() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = if let Some(p) = std::env::var_os("CAPTF_RUNNER_BIN") {
        vec![PathBuf::from(p)]
    } else {
        let exe = std::env::current_exe().ok()?;
        // <target>/x86_64-unknown-linux-gnu/<profile>/deps/<test>-<hash> (the workspace's
        // default target, .cargo/config.toml), or <target>/<profile>/deps/... in a host build.
        let profile = exe.parent()?.parent()?;
        let triple = profile.parent()?;
        let dirs = [
            Some(triple.to_path_buf()),
            triple.parent().map(|t| t.join("x86_64-unknown-linux-gnu")),
        ];
        std::iter::once(profile.join("runner"))
            .chain(
                dirs.into_iter()
                    .flatten()
                    .flat_map(|d| ["release", "debug"].map(|p| d.join(p).join("runner"))),
            )
            .collect()
    };
    let required = std::env::var_os("CAPTF_RUNNER_BIN").is_some();
    let found = candidates.into_iter().find(|p| is_static(p));
    assert!(
        found.is_some() || !required,
        "CAPTF_RUNNER_BIN does not name a static runner binary"
    );
    if found.is_none() {
        eprintln!(
            "SKIPPED: no static runner; build one with RUSTFLAGS='-C target-feature=+crt-static' \
             cargo build --release -p runner --target x86_64-unknown-linux-gnu (or set \
             CAPTF_RUNNER_BIN)"
        );
    }
    found
}

/// Whether an ELF file has no program interpreter (static or static-pie).
pub fn is_static(path: &std::path::Path) -> bool {
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]);
    let mut phoff_bytes = [0u8; 8];
    phoff_bytes.copy_from_slice(&data[32..40]);
    let Ok(phoff) = usize::try_from(u64::from_le_bytes(phoff_bytes)) else {
        return false;
    };
    let phentsize = usize::from(u16_at(54));
    let phnum = usize::from(u16_at(56));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        // PT_INTERP (3) names a dynamic loader.
        o + 4 <= data.len()
            && u32::from_le_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]) != 3
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_pinned_version() {
        for tool in TOOLS {
            let v = version(tool.name).unwrap();
            assert!(v.starts_with('v'), "{}: {v}", tool.name);
        }
    }

    #[test]
    fn the_docker_provider_version_is_the_one_its_build_stamps() {
        let script = include_str!("../../../hack/testbin.sh");
        let stamp = format!("-X main.version={DOCKER_PROVIDER_VERSION} ");
        assert!(
            script.contains(&stamp),
            "hack/testbin.sh builds the Docker provider without {stamp:?}"
        );
    }

    #[test]
    fn module_paths_are_escaped_as_the_module_cache_spells_them() {
        assert_eq!(
            escape_module_path("sigs.k8s.io/cluster-api"),
            "sigs.k8s.io/cluster-api"
        );
        assert_eq!(
            escape_module_path("github.com/BurntSushi/toml"),
            "github.com/!burnt!sushi/toml"
        );
    }

    #[test]
    fn pinned_version_reads_single_and_block_requires() {
        let go_mod = "module x\nrequire k8s.io/kubernetes v1.36.3\nrequire (\n\tgithub.com/a/b v0.1.0 // indirect\n)\n";
        assert_eq!(
            pinned_version(go_mod, "k8s.io/kubernetes").as_deref(),
            Some("v1.36.3")
        );
        assert_eq!(
            pinned_version(go_mod, "github.com/a/b").as_deref(),
            Some("v0.1.0")
        );
        assert_eq!(pinned_version(go_mod, "github.com/a"), None);
    }
}
