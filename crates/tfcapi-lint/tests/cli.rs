//! The binary as CI runs it: exit codes, `--strict`, `--allow-warning`, the three output formats,
//! `version`, and the no-op modules (lint-clean under `--strict`, and valid for real OpenTofu).

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tfcapi-lint"))
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn noop(role: &str) -> PathBuf {
    manifest_dir().join("../../modules/noop").join(role)
}

fn bad(name: &str) -> String {
    manifest_dir()
        .join("tests/fixtures/bad")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn noop_modules_are_clean_under_strict() {
    for role in ["cluster", "machine", "machinepool"] {
        let dir = noop(role);
        let (code, out, _) = run(&["module", "--role", role, "--strict", dir.to_str().unwrap()]);
        assert_eq!(code, 0, "{role}: {out}");
        assert_eq!(out, "summary: 0 errors, 0 warnings, 0 info\n");
        let (code, out, _) = run(&[
            "module",
            "--role",
            role,
            "--strict",
            "--json",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0);
        let report: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["findings"], serde_json::json!([]));
        assert_eq!(
            report["summary"],
            serde_json::json!({"errors": 0, "warnings": 0, "info": 0})
        );
    }
}

#[test]
fn exit_codes() {
    // Errors.
    assert_eq!(
        run(&["module", "--role", "machine", &bad("input-nullable")]).0,
        1
    );
    // Warnings: 0, or 1 under --strict.
    let warn = bad("input-user-variable-default");
    assert_eq!(run(&["module", "--role", "machine", &warn]).0, 0);
    assert_eq!(
        run(&["module", "--role", "machine", "--strict", &warn]).0,
        1
    );
    // Could not parse.
    assert_eq!(
        run(&["module", "--role", "machine", &bad("module-parse")]).0,
        2
    );
    assert_eq!(
        run(&["module", "--role", "cluster", &bad("module-one-line-block")]).0,
        2
    );
    assert_eq!(
        run(&["module", "--role", "machine", "/nonexistent/module"]).0,
        2
    );
    // Usage errors, clap's own included.
    let dir = noop("machine");
    let dir = dir.to_str().unwrap();
    for args in [
        vec!["module", dir],
        vec!["module", "--role", "worker", dir],
        vec!["module", "--role", "machine"],
        vec!["module", "--role", "machine", "--contract", "v9", dir],
        vec![
            "module",
            "--role",
            "machine",
            "--allow-warning",
            "input/nope",
            dir,
        ],
        vec![
            "module", "--role", "machine", "--json", "--format", "sarif", dir,
        ],
        vec![
            "image",
            "--role",
            "machine",
            "--platform",
            "linux",
            "oci:/x",
        ],
        vec![
            "image",
            "--role",
            "machine",
            "--platform",
            "linux/amd64",
            "--all-platforms",
            "oci:/x",
        ],
        vec!["frobnicate"],
        vec![],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 3, "{args:?}: {err}");
    }
    assert_eq!(run(&["--help"]).0, 0);
}

/// A module's `.tfcapi-lint.hcl` gives its role, strictness and allowed warnings; the command
/// line's `--role` wins, `--strict` adds to it, `--config` names another file, and a wrong file
/// is a usage error naming the file and the rule.
#[test]
fn the_configuration_file_sets_role_strict_and_allowed_warnings() {
    let dir = std::env::temp_dir().join(format!("tfcapi-lint-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(Path::new(&bad("input-user-variable-default")), &dir);
    let _ = std::fs::remove_file(dir.join("EXPECT"));
    let d = dir.to_str().unwrap();
    let config = dir.join(".tfcapi-lint.hcl");
    // Without a role anywhere: a usage error that says where to put one.
    let (code, _, err) = run(&["module", d]);
    assert_eq!(code, 3);
    assert!(
        err.contains("set role in ") && err.contains("/.tfcapi-lint.hcl"),
        "{err}"
    );
    // The file's role and strictness: the warning fails the run.
    std::fs::write(&config, "role = \"machine\"\nstrict = true\n").unwrap();
    let (code, out, _) = run(&["module", d]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("warning input/user-variable-default"), "{out}");
    // ... unless the file allows that warning.
    std::fs::write(
        &config,
        "role = \"machine\"\nstrict = true\nallow_warning = [\"input/user-variable-default\"]\n",
    )
    .unwrap();
    let (code, out, _) = run(&["module", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("info input/user-variable-default"), "{out}");
    // --role wins over the file's role: as a cluster module, the machine outputs are wrong.
    let (code, out, _) = run(&["module", "--role", "cluster", d]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("output/missing"), "{out}");
    // --config names another file, read instead of the module's.
    let other = dir.join("other.hcl");
    std::fs::write(&other, "role = \"machine\"\n").unwrap();
    let (code, out, _) = run(&["module", "--config", other.to_str().unwrap(), "--strict", d]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        run(&["module", "--config", other.to_str().unwrap(), d]).0,
        0
    );
    // A wrong file: exit 3, naming the file and what is wrong.
    for (text, want) in [
        ("role = \"worker\"\n", "role = \"worker\" is not a role"),
        (
            "allow_warning = [\"input/nope\"]\n",
            "`input/nope` is not a check ID",
        ),
        ("severity = \"error\"\n", "unknown field `severity`"),
    ] {
        std::fs::write(&config, text).unwrap();
        let (code, _, err) = run(&["module", "--role", "machine", d]);
        assert_eq!(code, 3, "{text}: {err}");
        assert!(
            err.contains(".tfcapi-lint.hcl: ") && err.contains(want),
            "{text}: {err}"
        );
    }
    let missing = run(&[
        "module",
        "--config",
        "/nonexistent/x.hcl",
        "--role",
        "machine",
        d,
    ]);
    assert_eq!(missing.0, 3);
    assert!(
        missing.2.contains("/nonexistent/x.hcl: cannot read"),
        "{}",
        missing.2
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn text_lines_name_file_line_severity_and_id() {
    let dir = bad("input-type");
    let (code, out, _) = run(&["module", "--role", "machinepool", &dir]);
    assert_eq!(code, 1);
    let mut lines = out.lines();
    let first = lines.next().unwrap();
    assert!(
        first.starts_with(&format!("{dir}/variables.tf:37: error input/type: ")),
        "{first}"
    );
    assert_eq!(lines.next(), Some("summary: 1 errors, 0 warnings, 0 info"));
}

/// An inline `tfcapi-lint-ignore` comment above the line a finding names takes it out of the
/// result (clean under `--strict`) and reports it as ignored, with its reason, in all three
/// formats; SARIF marks it as a suppression in source.
#[test]
fn an_inline_ignore_reports_the_finding_as_ignored_with_its_reason() {
    let dir = std::env::temp_dir().join(format!("tfcapi-lint-ignore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(Path::new(&bad("input-type")), &dir);
    std::fs::remove_file(dir.join("EXPECT")).unwrap();
    let variables = dir.join("variables.tf");
    let text = std::fs::read_to_string(&variables).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    // The finding names the `type` line (37); the comment goes on the line above it.
    assert_eq!(lines[36], "  type = string");
    lines.insert(
        36,
        "  # tfcapi-lint-ignore: input/type -- our wrapper passes replicas as a string",
    );
    std::fs::write(&variables, lines.join("\n") + "\n").unwrap();
    let path = dir.to_string_lossy().into_owned();

    let (code, out, _) = run(&["module", "--role", "machinepool", "--strict", &path]);
    assert_eq!(code, 0, "{out}");
    let mut text = out.lines();
    let first = text.next().unwrap();
    assert!(
        first.starts_with(&format!("{path}/variables.tf:38: ignored input/type: ")),
        "{first}"
    );
    assert!(
        first.ends_with(" (ignored: our wrapper passes replicas as a string)"),
        "{first}"
    );
    assert_eq!(
        text.next(),
        Some("summary: 0 errors, 0 warnings, 0 info, 1 ignored")
    );

    let (_, out, _) = run(&["module", "--role", "machinepool", "--json", &path]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["findings"], serde_json::json!([]));
    assert_eq!(report["ignored"][0]["id"], "input/type");
    assert_eq!(report["ignored"][0]["line"], 38);
    assert_eq!(
        report["ignored"][0]["reason"],
        "our wrapper passes replicas as a string"
    );
    assert_eq!(report["summary"]["ignored"], 1);
    assert_eq!(report["summary"]["errors"], 0);

    let (_, out, _) = run(&[
        "module",
        "--role",
        "machinepool",
        "--format",
        "sarif",
        &path,
    ]);
    let log: Value = serde_json::from_str(&out).unwrap();
    let result = &log["runs"][0]["results"][0];
    assert_eq!(result["ruleId"], "input/type");
    assert_eq!(
        result["suppressions"],
        serde_json::json!([{"kind": "inSource", "justification": "our wrapper passes replicas as a string"}])
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn allow_warning_downgrades_warnings_to_info_only() {
    let warn = bad("input-tags-unused");
    let (code, out, _) = run(&[
        "module",
        "--role",
        "cluster",
        "--strict",
        "--allow-warning",
        "input/default,input/tags-unused",
        "--json",
        &warn,
    ]);
    assert_eq!(code, 0, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["findings"][0]["severity"], "info");
    assert_eq!(report["summary"]["info"], 1);
    // Errors are never touched.
    let err = bad("input-nullable");
    let (code, _, _) = run(&[
        "module",
        "--role",
        "machine",
        "--allow-warning",
        "input/nullable",
        &err,
    ]);
    assert_eq!(code, 1);
}

#[test]
fn json_report_shape() {
    let dir = bad("output-sensitive-reference");
    let (_, out, _) = run(&["module", "--role", "machine", "--format", "json", &dir]);
    let report: Value = serde_json::from_str(&out).unwrap();
    let f = &report["findings"][0];
    assert_eq!(f["id"], "output/sensitive-reference");
    assert_eq!(f["severity"], "error");
    assert_eq!(f["file"], format!("{dir}/debug.tf"));
    assert_eq!(f["line"], 5);
    assert!(f["message"].as_str().unwrap().contains("sensitive = true"));
    assert_eq!(report["summary"]["errors"], 1);
}

#[test]
fn sarif_report_has_rules_and_located_results() {
    let dir = bad("module-backend");
    let (code, out, _) = run(&["module", "--role", "cluster", "--format", "sarif", &dir]);
    assert_eq!(code, 1);
    let log: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), tfcapi_lint::checks::CHECKS.len());
    assert!(
        rules
            .iter()
            .all(|r| r["help"]["text"].as_str().is_some_and(|t| !t.is_empty()))
    );
    let version = env!("CARGO_PKG_VERSION");
    let book = format!(
        "https://github.com/captf-io/cluster-api-provider-terraform/blob/v{version}/docs/src/"
    );
    assert_eq!(
        run["tool"]["driver"]["informationUri"],
        format!("{book}tfcapi-lint.md")
    );
    assert!(
        rules
            .iter()
            .all(|r| r["helpUri"] == format!("{book}reference/tfcapi-lint-cli.md"))
    );
    let result = &run["results"][0];
    assert_eq!(result["ruleId"], "module/backend");
    assert_eq!(result["level"], "error");
    let index = result["ruleIndex"].as_u64().unwrap() as usize;
    assert_eq!(rules[index]["id"], "module/backend");
    let location = &result["locations"][0]["physicalLocation"];
    // Relative to the repository that holds the module, as code scanning resolves it.
    let repo = Path::new(&dir)
        .ancestors()
        .find(|a| a.join(".git").exists())
        .unwrap();
    let relative = Path::new(&dir).strip_prefix(repo).unwrap();
    assert_eq!(
        location["artifactLocation"],
        json!({"uri": format!("{}/versions.tf", relative.display()), "uriBaseId": "%SRCROOT%"})
    );
    assert_eq!(
        run["originalUriBaseIds"]["%SRCROOT%"]["uri"],
        format!("file://{}/", repo.display())
    );
    assert_eq!(location["region"]["startLine"], 6);
}

/// A module linted from anywhere in a repository is located relative to the repository's root,
/// the same from its root, from inside the module and by an absolute path.
#[test]
fn sarif_locations_are_relative_to_the_repository_wherever_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let module = repo.join("infra/modules/machine");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(&module).unwrap();
    for f in std::fs::read_dir(bad("module-backend")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), module.join(f.file_name())).unwrap();
    }
    let absolute = module.display().to_string();
    for (cwd, dir) in [
        (repo.clone(), "infra/modules/machine"),
        (module.clone(), "."),
        (repo.join("infra"), "./modules/../modules/machine"),
        (tmp.path().to_path_buf(), absolute.as_str()),
    ] {
        let out = bin()
            .args(["module", "--role", "cluster", "--format", "sarif", dir])
            .current_dir(&cwd)
            .output()
            .unwrap();
        let log: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run = &log["runs"][0];
        let uris: BTreeSet<String> = run["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let a = &r["locations"][0]["physicalLocation"]["artifactLocation"];
                assert_eq!(a["uriBaseId"], "%SRCROOT%", "{cwd:?} {dir}");
                a["uri"].as_str().unwrap().to_owned()
            })
            .collect();
        assert!(
            uris.contains("infra/modules/machine/versions.tf"),
            "{cwd:?} {dir}: {uris:?}"
        );
        assert_eq!(
            run["originalUriBaseIds"]["%SRCROOT%"]["uri"],
            format!("file://{}/", repo.display())
        );
    }
}

#[test]
fn version_reports_the_contracts() {
    let (code, out, _) = run(&["version", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["contracts"], serde_json::json!(["v1alpha1"]));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let (_, out, _) = run(&["version"]);
    assert!(out.contains("v1alpha1"));
}

/// `runtime` (tofu or terraform) run in `dir` without a registry, a checkpoint or a user's
/// configuration: `HOME` is `home`, the CLI configuration `cli_config`.
fn runtime_in(runtime: &Path, dir: &Path, home: &Path, cli_config: &Path) -> Command {
    let mut command = Command::new(runtime);
    command
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", cli_config)
        .env("TF_IN_AUTOMATION", "1")
        .env("CHECKPOINT_DISABLE", "1")
        .env("HOME", home);
    command
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// The no-op modules are also valid for the real OpenTofu: `tofu init` and `tofu validate` in a
/// temporary copy (they need no provider, so init never goes to a registry).
#[test]
fn noop_modules_validate_with_opentofu() {
    let Some(home) = std::env::var_os("HOME") else {
        eprintln!("SKIPPED noop_modules_validate_with_opentofu: HOME is not set");
        return;
    };
    let tofu = Path::new(&home).join(".cache/captf/testbin/tofu-v1.12.6/tofu");
    if !tofu.is_file() {
        eprintln!(
            "SKIPPED noop_modules_validate_with_opentofu: {} is absent (build it with hack/testbin.sh)",
            tofu.display()
        );
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let cli_config = work.path().join("cli.tfrc");
    std::fs::write(&cli_config, "").unwrap();
    for role in ["cluster", "machine", "machinepool"] {
        let dir = work.path().join(role);
        copy_dir(&noop(role), &dir);
        for args in [
            &["init", "-backend=false", "-input=false", "-no-color"][..],
            &["validate", "-no-color"][..],
        ] {
            let out = runtime_in(&tofu, &dir, work.path(), &cli_config)
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "tofu {args:?} for {role}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// `tofu validate` agrees that a one-line block with two arguments does not parse.
#[test]
fn one_line_block_is_also_an_opentofu_error() {
    let Some(home) = std::env::var_os("HOME") else {
        return;
    };
    let tofu = Path::new(&home).join(".cache/captf/testbin/tofu-v1.12.6/tofu");
    if !tofu.is_file() {
        eprintln!(
            "SKIPPED one_line_block_is_also_an_opentofu_error: {} is absent",
            tofu.display()
        );
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let cli_config = work.path().join("cli.tfrc");
    std::fs::write(&cli_config, "").unwrap();
    copy_dir(
        Path::new(&bad("module-one-line-block")),
        &work.path().join("m"),
    );
    std::fs::remove_file(work.path().join("m/EXPECT")).unwrap();
    let out = Command::new(&tofu)
        .args(["validate", "-no-color"])
        .current_dir(work.path().join("m"))
        .env("TF_CLI_CONFIG_FILE", &cli_config)
        .env("HOME", work.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid single-argument block definition")
    );
}

/// A reference that is not an image reference is a usage error (exit 3): nothing was pulled.
#[test]
fn a_malformed_image_reference_is_a_usage_error_not_a_pull_failure() {
    for reference in ["ghcr.io/Acme/machine:v1", "ghcr.io/acme/machine:", "a@b@c"] {
        let (code, out, err) = run(&["image", "--role", "machine", reference]);
        assert_eq!(code, 3, "{reference}: {err}");
        assert!(
            err.contains("is not a valid image reference"),
            "{reference}: {err}"
        );
        assert!(!out.contains("image/pull"), "{reference}: {out}");
    }
}

/// `--runtime` picks which files count; the shadowing pair is a warning under either runtime.
#[test]
fn module_is_linted_for_the_runtime_flag() {
    let dir = bad("module-tofu-shadow");
    for runtime in ["tofu", "terraform"] {
        let (code, out, err) = run(&["module", "--role", "machine", "--runtime", runtime, &dir]);
        assert_eq!(code, 0, "{runtime}: {err}");
        assert!(out.contains("module/tofu-shadow"), "{runtime}: {out}");
    }
    let (code, _, _) = run(&["module", "--role", "machine", "--runtime", "podman", &dir]);
    assert_eq!(code, 3);
}

/// A runtime built by `hack/testbin.sh`, or `None` when it is absent (the caller says SKIPPED).
fn testbin_runtime(relative: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".cache/captf/testbin").join(relative);
    path.is_file().then_some(path)
}

/// Whether `runtime` plans a module whose variable `x` (of `ty`) defaults to null behind a
/// validation with `condition`, with no value set.
fn plans_with_null(runtime: &Path, ty: &str, condition: &str) -> bool {
    let work = tempfile::tempdir().unwrap();
    let cli_config = work.path().join("cli.tfrc");
    std::fs::write(&cli_config, "").unwrap();
    std::fs::write(
        work.path().join("main.tf"),
        format!(
            "variable \"x\" {{\n  type    = {ty}\n  default = null\n  validation {{\n    condition     = {condition}\n    error_message = \"rejected\"\n  }}\n}}\n\nvariable \"y\" {{\n  type    = list(number)\n  default = [1]\n}}\n\nlocals {{\n  names = [\"a\"]\n}}\n"
        ),
    )
    .unwrap();
    let out = runtime_in(runtime, work.path(), work.path(), &cli_config)
        .args(["plan", "-input=false", "-no-color", "-lock=false"])
        .output()
        .unwrap();
    out.status.success()
}

/// tfcapi-lint `input/user-variable-default` decides whether a validation accepts null from the
/// expression (issue 29), and agrees with a real `tofu plan` and `terraform plan` (each judged
/// for its own runtime) on every shape: a condition it accepts plans with the variable unset,
/// one it rejects fails the plan, one it cannot evaluate is never reported.
#[test]
fn null_accepting_validations_agree_with_a_real_plan() {
    use tfcapi_lint::module::load::Runtime;
    use tfcapi_lint::module::null_check::{NullVerdict, condition_with_null};
    let runtimes: Vec<(PathBuf, Runtime)> = [
        ("tofu-v1.12.6/tofu", Runtime::Tofu),
        ("terraform-v1.8.5/terraform", Runtime::Terraform),
    ]
    .into_iter()
    .filter_map(|(path, runtime)| Some((testbin_runtime(path)?, runtime)))
    .collect();
    if runtimes.is_empty() {
        eprintln!(
            "SKIPPED null_accepting_validations_agree_with_a_real_plan: no runtime in the testbin cache (hack/testbin.sh builds it)"
        );
        return;
    }
    let shapes = [
        ("string", "var.x != null ? length(var.x) > 0 : true"),
        ("string", "try(length(var.x) > 0, true)"),
        ("string", "coalesce(var.x, \"ok\") != \"\""),
        ("string", "var.x == null ? true : length(var.x) > 0"),
        ("string", "var.x == null || length(var.x) > 0"),
        ("string", "can(regex(\"^a\", var.x)) || var.x == null"),
        ("string", "!(var.x != null)"),
        ("string", "var.x != null"),
        ("string", "length(var.x) > 0"),
        ("string", "can(regex(\"^a\", var.x))"),
        ("string", "contains([\"a\", \"b\"], var.x)"),
        ("string", "var.x != null ? length(var.x) > 0 : false"),
        ("string", "try(length(var.x) > 0, false)"),
        ("string", "coalesce(var.x, \"\") != \"\""),
        ("string", "startswith(var.x, \"a\")"),
        ("string", "\"${var.x}\" != \"\""),
        ("string", "\"a-${var.x}\" != \"\""),
        ("string", "var.x != null && length(var.x) > 0"),
        ("string", "contains(local.names, var.x)"),
        ("string", "tostring(var.x) == null"),
        ("number", "var.x > 0"),
        ("object({ name = string })", "var.x.name != \"\""),
        ("list(number)", "var.x[0] == 1"),
        ("string", "contains(local.names, var.x) || var.x == null"),
    ];
    for (runtime, which) in &runtimes {
        for (ty, condition) in shapes {
            let planned = plans_with_null(runtime, ty, condition);
            match condition_with_null(condition, "x", *which) {
                NullVerdict::Accepts => assert!(
                    planned,
                    "{}: `{condition}` is judged to accept null, but the plan failed",
                    runtime.display()
                ),
                NullVerdict::Rejects => assert!(
                    !planned,
                    "{}: `{condition}` is judged to reject null, but the plan succeeded",
                    runtime.display()
                ),
                NullVerdict::Unknown => {}
            }
        }
    }
}

fn run_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).current_dir(dir).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A repository's `.tfcapi-lint.hcl` maps module paths to their settings: `tfcapi-lint module`
/// finds a module's block from inside the repository (role, runtime, strictness and allowed
/// warnings, the top level's as defaults), `--config` names the map from anywhere, and
/// `tfcapi-lint modules` names the modules holding changed files, leaving out skip folders,
/// `.terraform/` and files in no module.
#[test]
fn a_repository_map_gives_each_module_its_settings() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    std::fs::create_dir(root.join(".git")).unwrap();
    copy_dir(&noop("machine"), &root.join("modules/machine"));
    copy_dir(&noop("cluster"), &root.join("modules/cluster"));
    copy_dir(
        Path::new(&bad("input-user-variable-default")),
        &root.join("modules/loose"),
    );
    copy_dir(
        Path::new(&bad("module-tofu-shadow")),
        &root.join("modules/shadow"),
    );
    copy_dir(
        Path::new(&bad("module-parse")),
        &root.join("examples/broken"),
    );
    std::fs::write(
        root.join(".tfcapi-lint.hcl"),
        r#"strict = true
skip   = ["examples"]

module "modules/machine" {
  role = "machine"
}
module "modules/cluster" {
  role = "cluster"
}
module "modules/loose" {
  role          = "machine"
  allow_warning = ["input/user-variable-default"]
}
module "modules/shadow" {
  role    = "machine"
  runtime = "terraform"
}
"#,
    )
    .unwrap();

    // Each module with its block's settings, from the repository root and from inside it.
    assert_eq!(run_in(root, &["module", "modules/machine"]).0, 0);
    let (code, out, err) = run_in(&root.join("modules/cluster"), &["module", "."]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run_in(root, &["module", "modules/loose"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("info input/user-variable-default"), "{out}");
    // The block's runtime: linted for Terraform, the .tofu file is the one not read; strict from
    // the top level makes the warning fail; --runtime wins over the block.
    let (code, out, _) = run_in(root, &["module", "modules/shadow"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("outputs.tofu:1: warning module/tofu-shadow"),
        "{out}"
    );
    let (code, out, _) = run_in(root, &["module", "--runtime", "tofu", "modules/shadow"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("outputs.tf:1: warning module/tofu-shadow"),
        "{out}"
    );

    // A folder the map does not name has no role; the error says where one goes.
    let (code, _, err) = run_in(root, &["module", "examples/broken"]);
    assert_eq!(code, 3);
    assert!(
        err.contains("module block in the repository's .tfcapi-lint.hcl"),
        "{err}"
    );

    // --config names the map from outside the repository.
    let map = root.join(".tfcapi-lint.hcl");
    let map = map.to_str().unwrap();
    let machine = root.join("modules/machine");
    let (code, out, err) = run(&["module", "--config", map, machine.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = run(&[
        "module",
        "--config",
        map,
        root.join("examples/broken").to_str().unwrap(),
    ]);
    assert_eq!(code, 3);
    assert!(err.contains("no module block maps"), "{err}");
    let (code, _, err) = run(&["image", "--config", map, "oci:/nonexistent"]);
    assert_eq!(code, 3);
    assert!(
        err.contains("a module map (module blocks) configures module directories"),
        "{err}"
    );

    // The modules of a repository, and of changed files.
    let (code, out, _) = run_in(root, &["modules"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "modules/cluster\nmodules/loose\nmodules/machine\nmodules/shadow\n"
    );
    let (code, out, err) = run_in(
        root,
        &[
            "modules",
            "modules/machine/main.tf",
            "modules/machine/modules/net/main.tf",
            "modules/shadow/outputs.tofu",
            "modules/machine/.terraform/modules/x/main.tf",
            "examples/broken/main.tf",
            "tools/main.tf",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "modules/machine\nmodules/shadow\n");
    for why in [
        "under .terraform/",
        "in skip folder \"examples\"",
        "tools/main.tf: in no module",
    ] {
        assert!(err.contains(why), "{why}: {err}");
    }
    // The same through --config, from elsewhere.
    let (code, out, _) = run(&["modules", "--config", map, "modules/cluster/main.tf"]);
    assert_eq!((code, out.as_str()), (0, "modules/cluster\n"));

    // A broken map is a usage error naming it, for both commands.
    std::fs::write(
        root.join(".tfcapi-lint.hcl"),
        "module \"m\" {\n  role = \"worker\"\n}\n",
    )
    .unwrap();
    for args in [&["modules"][..], &["module", "modules/machine"][..]] {
        let (code, _, err) = run_in(root, args);
        assert_eq!(code, 3, "{args:?}");
        assert!(
            err.contains("role = \"worker\" is not a role"),
            "{args:?}: {err}"
        );
    }
}
