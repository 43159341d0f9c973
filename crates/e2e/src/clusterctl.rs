//! `clusterctl` as the book runs it: `generate cluster --from`, `generate yaml --from` and
//! `move`, with the binary `make testbin` builds, offline (an empty clusterctl config of its own,
//! no version check).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// The kubernetes version the flavors are generated with (the test control plane's).
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// A clusterctl invocation: the binary, an empty config of its own (it never reads the user's
/// `~/.config/cluster-api`) and the variables to render with.
#[derive(Debug, Clone)]
pub struct Clusterctl {
    binary: PathBuf,
    config: PathBuf,
    vars: Vec<(String, String)>,
    /// Where the flavors and identity templates are read: this checkout's `templates/`, or a
    /// release's folder.
    templates: PathBuf,
}

impl Clusterctl {
    /// clusterctl with its config file written into `dir`.
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let config = dir.join("clusterctl.yaml");
        std::fs::write(
            &config,
            "# clusterctl config of the end-to-end tests: no providers, no overrides\n",
        )?;
        Ok(Clusterctl {
            binary: testenv::testbin::path("clusterctl")?,
            config,
            vars: Vec::new(),
            templates: testenv::env::repo_root().join("templates"),
        })
    }

    /// Reads the templates from `dir` (a release's folder) instead of this checkout.
    #[must_use]
    pub fn templates_from(mut self, dir: &Path) -> Self {
        self.templates = dir.to_path_buf();
        self
    }

    /// The template `name` where this clusterctl reads templates.
    pub fn template(&self, name: &str) -> PathBuf {
        self.templates.join(name)
    }

    /// Adds a template variable (passed as an environment variable, as the book exports them).
    #[must_use]
    pub fn var(mut self, name: &str, value: &str) -> Self {
        self.vars.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Runs `clusterctl ARGS...`; returns its standard output, or fails with its error output.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        self.run_with_log(args).map(|(out, _)| out)
    }

    /// Runs `clusterctl ARGS...`; returns its standard output and its log (standard error).
    pub fn run_with_log(&self, args: &[&str]) -> anyhow::Result<(String, String)> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(args)
            .arg("--config")
            .arg(&self.config)
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env_remove("KUBECONFIG");
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        let out = cmd
            .output()
            .with_context(|| format!("running {}", self.binary.display()))?;
        if !out.status.success() {
            bail!(
                "clusterctl {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// `clusterctl generate yaml --from <template>` (e.g. `templates/identity.yaml`).
    pub fn generate_yaml(&self, template: &Path) -> anyhow::Result<String> {
        self.run(&["generate", "yaml", "--from", &template.to_string_lossy()])
    }

    /// `clusterctl generate cluster NAME --from <template> --target-namespace NS
    /// --kubernetes-version V --control-plane-machine-count C --worker-machine-count W`.
    pub fn generate_cluster(
        &self,
        name: &str,
        template: &Path,
        namespace: &str,
        control_plane: u32,
        workers: u32,
    ) -> anyhow::Result<String> {
        self.run(&[
            "generate",
            "cluster",
            name,
            "--from",
            &template.to_string_lossy(),
            "--target-namespace",
            namespace,
            "--kubernetes-version",
            KUBERNETES_VERSION,
            "--control-plane-machine-count",
            &control_plane.to_string(),
            "--worker-machine-count",
            &workers.to_string(),
        ])
    }
}

/// A template of this checkout (`templates/<name>`).
pub fn template(name: &str) -> PathBuf {
    testenv::env::repo_root().join("templates").join(name)
}
