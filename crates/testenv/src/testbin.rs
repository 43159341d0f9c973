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
];

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

/// The pinned version of `tool` (`tofu`, `crane`, `etcd`, `kubernetes`).
pub fn version(tool: &str) -> anyhow::Result<String> {
    let t = TOOLS
        .iter()
        .find(|t| t.name == tool)
        .ok_or_else(|| anyhow::anyhow!("unknown test tool {tool:?}"))?;
    pinned_version(t.go_mod, t.module)
        .ok_or_else(|| anyhow::anyhow!("hack/testbin/{tool}/go.mod does not pin {}", t.module))
}

/// The path of a test binary (`tofu`, `crane`, `etcd`, `kube-apiserver`,
/// `kube-controller-manager`), or an error that says how to build it.
pub fn path(binary: &str) -> anyhow::Result<PathBuf> {
    let tool = TOOLS
        .iter()
        .find(|t| t.binaries.contains(&binary))
        .ok_or_else(|| anyhow::anyhow!("unknown test binary {binary:?}"))?;
    let version = version(tool.name)?;
    let path = root().join(format!("{}-{version}", tool.name)).join(binary);
    if path.is_file() {
        Ok(path)
    } else {
        Err(anyhow::anyhow!(
            "test binary {} is missing: run `make testbin` (hack/testbin.sh) to build it",
            path.display()
        ))
    }
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
