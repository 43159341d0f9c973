//! What the tests of the flavors' modules (`modules/libvirt`, `modules/docker`) share: running
//! `tfcapi-lint` and the test binaries' `tofu`, and judging a module's variables with a real
//! `tofu plan` of a root that holds only its `variables.tf` (no provider needed).

#![allow(dead_code)] // Each test binary uses its own subset.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `modules/<flavor>/<role>` of this repository.
pub fn module(flavor: &str, role: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../modules")
        .join(flavor)
        .join(role)
}

/// Runs `tfcapi-lint ARGS` (with `--json`); returns its exit code and report.
pub fn lint(args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_tfcapi-lint"))
        .args(args)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

/// The (id, severity) pairs of a report's findings.
pub fn finding_ids(report: &Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_owned(),
                f["severity"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The test binaries' `tofu`, or `None` (the test is skipped, saying why) when it is not built.
pub fn tofu() -> Option<PathBuf> {
    testenv::testbin::path("tofu")
        .map_err(|e| eprintln!("SKIPPED: {e}"))
        .ok()
}

/// `tofu` in `dir` without a registry, a checkpoint or a user's configuration.
pub fn run_tofu(tofu: &Path, dir: &Path, args: &[&str]) -> Output {
    let cli_config = dir.join(".captf-test.tfrc");
    std::fs::write(&cli_config, "").unwrap();
    Command::new(tofu)
        .args(args)
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", &cli_config)
        .env("TF_IN_AUTOMATION", "1")
        .env("CHECKPOINT_DISABLE", "1")
        .env("HOME", dir)
        .output()
        .unwrap()
}

/// `tofu fmt -check` of `dir`, recursively: the failure's diff, or `Ok`.
pub fn check_formatted(tofu: &Path, dir: &Path) -> Result<(), String> {
    let work = tempfile::tempdir().unwrap();
    let dir = dir.canonicalize().unwrap();
    let out = run_tofu(
        tofu,
        work.path(),
        &[
            "fmt",
            "-check",
            "-diff",
            "-recursive",
            "-no-color",
            dir.to_str().unwrap(),
        ],
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Plans a root holding only `module_dir`'s `variables.tf` with `values` as its tfvars; returns
/// whether the plan succeeded and its output, without tofu's line breaks.
pub fn plan_variables(tofu: &Path, module_dir: &Path, values: &Value) -> (bool, String) {
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(
        module_dir.join("variables.tf"),
        work.path().join("variables.tf"),
    )
    .unwrap();
    std::fs::write(
        work.path().join("terraform.tfvars.json"),
        serde_json::to_vec(values).unwrap(),
    )
    .unwrap();
    let out = run_tofu(
        tofu,
        work.path(),
        &["plan", "-input=false", "-no-color", "-lock=false"],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success(),
        text.split_whitespace().collect::<Vec<_>>().join(" "),
    )
}

/// The (key, expression) pairs of the object literal that output `name` of the module at
/// `module_dir` (its `outputs.tf`) has as its value.
pub fn output_object(module_dir: &Path, name: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(module_dir.join("outputs.tf")).unwrap();
    let body: hcl::Body = hcl::from_str(&text).unwrap();
    let output = body
        .blocks()
        .find(|b| b.identifier() == "output" && b.labels()[0].as_str() == name)
        .unwrap_or_else(|| panic!("no output {name}"));
    let value = output
        .body()
        .attributes()
        .find(|a| a.key() == "value")
        .unwrap();
    let hcl::Expression::Object(object) = value.expr() else {
        panic!("{name} is not an object: {value:?}");
    };
    object
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
