//! One test per module check: its bad fixture (`tests/fixtures/bad/<name>`, a whole module with
//! one contract mistake) fires exactly that check, at the recorded file and line, and the clean
//! fixture of the same role does not fire it.

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tfcapi_lint::checks::{self, Scope};
use tfcapi_lint::module;
use tfcapi_lint::report::Severity;
use tfcapi_lint::role::Role;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn role(name: &str) -> Role {
    match name {
        "cluster" => Role::Cluster,
        "machine" => Role::Machine,
        "machinepool" => Role::Machinepool,
        other => panic!("unknown role {other}"),
    }
}

fn expectation(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(dir.join("EXPECT"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn fires(name: &str) {
    let dir = fixtures().join("bad").join(name);
    let expect = expectation(&dir);
    let role = role(&expect["role"]);
    let id = expect["id"].as_str();
    let display = dir.to_string_lossy().into_owned();
    let findings = module::lint_dir(&dir, &display, role);
    assert_eq!(
        findings.len(),
        1,
        "{name}: expected exactly one finding, got {findings:#?}"
    );
    let f = &findings[0];
    assert_eq!(f.id, id, "{name}");
    let severity = match expect["severity"].as_str() {
        "error" => Severity::Error,
        "warning" => Severity::Warning,
        other => panic!("bad severity {other}"),
    };
    assert_eq!(f.severity, severity, "{name}");
    if expect["file"].is_empty() {
        assert_eq!(
            f.file, display,
            "{name}: a finding about the module names its directory"
        );
        assert_eq!(f.line, None, "{name}");
    } else {
        assert_eq!(f.file, format!("{display}/{}", expect["file"]), "{name}");
        assert_eq!(
            f.line,
            Some(expect["line"].parse().unwrap()),
            "{name}: line"
        );
    }
    assert!(
        checks::get(id).unwrap().roles.contains(&role),
        "{name}: check applies to the role"
    );

    // The clean fixture of the same role does not fire it (nor anything else).
    let clean = fixtures().join("clean").join(role.as_str());
    let clean_findings = module::lint_dir(&clean, "clean", role);
    assert!(
        clean_findings.iter().all(|f| f.id != id),
        "{name}: the clean {role} fixture fires {id}"
    );
}

macro_rules! fixture_tests {
    ($($test:ident => $fixture:literal,)*) => {
        $(
            #[test]
            fn $test() {
                fires($fixture);
            }
        )*

        /// Every module check has a fixture.
        #[test]
        fn every_module_check_has_a_fixture() {
            let fixtures = [$($fixture),*];
            for check in checks::CHECKS.iter().filter(|c| c.scope == Scope::Module) {
                let covered = fixtures.iter().any(|f| {
                    expectation(&self::fixtures().join("bad").join(f))["id"] == check.id
                });
                assert!(covered, "no fixture fires {}", check.id);
            }
        }
    };
}

fixture_tests! {
    module_parse => "module-parse",
    module_one_line_block => "module-one-line-block",
    module_no_configuration => "module-no-configuration",
    module_tofu_shadow => "module-tofu-shadow",
    module_ignore => "module-ignore",
    module_duplicate => "module-duplicate",
    module_backend => "module-backend",
    input_missing => "input-missing",
    input_type => "input-type",
    input_default => "input-default",
    input_nullable => "input-nullable",
    input_cluster_outputs_default => "input-cluster-outputs-default",
    input_bootstrap_data_sensitive => "input-bootstrap-data-sensitive",
    input_reserved_name => "input-reserved-name",
    input_user_variable_default => "input-user-variable-default",
    input_tags_unused => "input-tags-unused",
    naming_reserved_prefix => "naming-reserved-prefix",
    output_missing => "output-missing",
    output_sensitive_reference => "output-sensitive-reference",
    output_health_shape => "output-health-shape",
    output_health_shape_in_json_syntax => "output-health-shape-json",
    output_endpoint_never_set => "output-endpoint-never-set",
    output_endpoint_shape => "output-endpoint-shape",
    output_exports_number => "output-exports-number",
    output_addresses_shape => "output-addresses-shape",
    output_provider_id_list_not_a_list => "output-provider-id-list-shape-error",
    output_provider_id_list_not_sorted => "output-provider-id-list-shape-warning",
}

#[test]
fn clean_fixtures_have_no_findings() {
    for role in Role::ALL {
        let dir = fixtures().join("clean").join(role.as_str());
        let findings = module::lint_dir(&dir, "clean", role);
        assert!(findings.is_empty(), "{role}: {findings:#?}");
    }
}

#[test]
fn noop_modules_have_no_findings() {
    let noop = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../modules/noop");
    for role in Role::ALL {
        let findings = module::lint_dir(&noop.join(role.as_str()), "noop", role);
        assert!(findings.is_empty(), "{role}: {findings:#?}");
    }
}

fn lint_text(role: Role, files: &[(&str, &str)]) -> Vec<(String, Option<u32>)> {
    let sources = files
        .iter()
        .map(|(name, text)| module::SourceFile {
            name: (*name).to_owned(),
            display: (*name).to_owned(),
            text: (*text).to_owned(),
        })
        .collect();
    module::lint_sources(sources, role, "m")
        .1
        .into_iter()
        .map(|f| (f.id.to_owned(), f.line))
        .collect()
}

fn noop_files(role: Role) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../modules/noop")
        .join(role.as_str());
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

fn lint_noop_with(role: Role, replace: &str, old: &str, new: &str) -> Vec<(String, Option<u32>)> {
    let files: Vec<(String, String)> = noop_files(role)
        .into_iter()
        .map(|(n, t)| {
            if n == replace {
                assert!(t.contains(old), "{old}");
                let t = t.replace(old, new);
                (n, t)
            } else {
                (n, t)
            }
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    lint_text(role, &refs)
}

#[test]
fn provider_id_list_in_a_template_or_constant_list_passes() {
    for value in [
        "\"${sort(local.raw_ids)}\"",
        "distinct(local.raw_ids)",
        "[]",
        "[\"a\", \"b\"]",
    ] {
        let found = lint_noop_with(
            Role::Machinepool,
            "outputs.tf",
            "value = sort(local.raw_ids)",
            &format!("value = {value}"),
        );
        assert!(found.is_empty(), "{value}: {found:?}");
    }
    // A conditional is not the output's own sort().
    let found = lint_noop_with(
        Role::Machinepool,
        "outputs.tf",
        "value = sort(local.raw_ids)",
        "value = var.replicas > 0 ? sort(local.raw_ids) : []",
    );
    assert_eq!(
        found,
        [("output/provider-id-list-shape".to_owned(), Some(9))]
    );
}

#[test]
fn endpoint_with_a_conditional_path_to_a_value_passes() {
    let found = lint_noop_with(
        Role::Cluster,
        "outputs.tf",
        "value = var.control_plane_endpoint != null ? var.control_plane_endpoint : local.created_endpoint",
        "value = var.control_plane_endpoint != null ? var.control_plane_endpoint : null",
    );
    assert!(found.is_empty(), "{found:?}");
    let found = lint_noop_with(
        Role::Cluster,
        "outputs.tf",
        "value = var.control_plane_endpoint != null ? var.control_plane_endpoint : local.created_endpoint",
        "value = true ? null : (null)",
    );
    assert_eq!(found, [("output/endpoint-never-set".to_owned(), Some(5))]);
}

#[test]
fn nonsensitive_and_sensitive_outputs_pass() {
    for extra in [
        "output \"x\" {\n  value     = var.bootstrap_data\n  sensitive = true\n}\n",
        "output \"x\" {\n  value = nonsensitive(sha256(var.bootstrap_data))\n}\n",
    ] {
        let mut files = noop_files(Role::Machine);
        files.push(("extra.tf".into(), extra.into()));
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        assert!(lint_text(Role::Machine, &refs).is_empty(), "{extra}");
    }
}

#[test]
fn invalid_type_on_a_user_variable_is_reported() {
    let mut files = noop_files(Role::Machine);
    files.push((
        "user.tf".into(),
        "variable \"size\" {\n  type    = strng\n  default = \"a\"\n}\n".into(),
    ));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        lint_text(Role::Machine, &refs),
        [("input/type".to_owned(), Some(2))]
    );
}

#[test]
fn json_variables_are_checked_with_lines() {
    let mut files: Vec<(String, String)> = noop_files(Role::Machinepool)
        .into_iter()
        .filter(|(n, _)| n != "variables.tf")
        .collect();
    let hcl = noop_files(Role::Machinepool)
        .into_iter()
        .find(|(n, _)| n == "variables.tf")
        .unwrap()
        .1
        .replace("variable \"replicas\" {\n  type = number\n}\n", "");
    files.push(("variables.tf".into(), hcl));
    files.push((
        "replicas.tf.json".into(),
        "{\n  \"variable\": {\n    \"replicas\": {\n      \"type\": \"string\"\n    }\n  }\n}\n"
            .into(),
    ));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        lint_text(Role::Machinepool, &refs),
        [("input/type".to_owned(), Some(4))]
    );
}

#[test]
fn a_module_that_does_not_parse_gets_no_contract_findings() {
    let found = lint_text(Role::Cluster, &[("main.tf", "variable \"x\" {\n")]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "module/parse");
}

fn clean_machine_files() -> Vec<module::SourceFile> {
    let dir = fixtures().join("clean/machine");
    let (files, findings) = module::read_dir(&dir, "m");
    assert!(findings.is_empty(), "{findings:?}");
    files
}

fn source(name: &str, text: &str) -> module::SourceFile {
    module::SourceFile {
        name: name.to_owned(),
        display: format!("m/{name}"),
        text: text.to_owned(),
    }
}

fn ids(findings: &[tfcapi_lint::report::Finding]) -> Vec<(&str, &str)> {
    findings.iter().map(|f| (f.id, f.file.as_str())).collect()
}

/// OpenTofu reads `x.tofu` instead of `x.tf`; Terraform ignores `.tofu` files. A module is linted
/// for its runtime, the pair is a warning either way, and the side the runtime never reads is not
/// linted (so it cannot fail the module).
#[test]
fn tofu_shadowing_depends_on_the_runtime() {
    let broken = "output \"x\" {\n  value = \n";
    let mut files = clean_machine_files();
    files.push(source("outputs.tofu", broken));
    let (_, found) =
        module::lint_sources_for(files, Role::Machine, "m", module::Runtime::Terraform);
    assert_eq!(
        ids(&found),
        [(checks::MODULE_TOFU_SHADOW, "m/outputs.tofu")]
    );

    let mut files: Vec<_> = clean_machine_files()
        .into_iter()
        .map(|f| {
            if f.name == "outputs.tf" {
                source("outputs.tf", broken)
            } else {
                f
            }
        })
        .collect();
    files.push(source(
        "outputs.tofu",
        &std::fs::read_to_string(fixtures().join("clean/machine/outputs.tf")).unwrap(),
    ));
    let (_, found) =
        module::lint_sources_for(files.clone(), Role::Machine, "m", module::Runtime::Tofu);
    assert_eq!(ids(&found), [(checks::MODULE_TOFU_SHADOW, "m/outputs.tf")]);
    // Linted for Terraform, the same module reads the broken outputs.tf.
    let (_, found) =
        module::lint_sources_for(files, Role::Machine, "m", module::Runtime::Terraform);
    assert!(
        found
            .iter()
            .any(|f| f.id == checks::MODULE_PARSE && f.file == "m/outputs.tf")
    );

    // A module made only of .tofu files has no configuration for Terraform.
    let (_, found) = module::lint_sources_for(
        vec![source("main.tofu", "")],
        Role::Machine,
        "m",
        module::Runtime::Terraform,
    );
    assert_eq!(ids(&found), [(checks::MODULE_NO_CONFIGURATION, "m")]);
}

/// Terraform fails to load a directory holding a `.tf` link that leads nowhere or loops; lint
/// reports `module/parse` naming the file instead of skipping it.
#[test]
fn a_dangling_or_looping_tf_symlink_is_a_parse_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    for f in clean_machine_files() {
        std::fs::write(dir.join(&f.name), &f.text).unwrap();
    }
    std::os::unix::fs::symlink("missing.tf", dir.join("dangling.tf")).unwrap();
    std::os::unix::fs::symlink("loop.tf", dir.join("loop.tf")).unwrap();
    let found = module::lint_dir(&dir, "m", Role::Machine);
    assert_eq!(
        ids(&found),
        [
            (checks::MODULE_PARSE, "m/dangling.tf"),
            (checks::MODULE_PARSE, "m/loop.tf")
        ],
        "{found:#?}"
    );
    assert!(
        found[0].message.contains("symbolic link"),
        "{}",
        found[0].message
    );

    let only = tmp.path().join("only");
    std::fs::create_dir(&only).unwrap();
    std::os::unix::fs::symlink("missing.tf", only.join("main.tf")).unwrap();
    let found = module::lint_dir(&only, "only", Role::Machine);
    assert_eq!(ids(&found), [(checks::MODULE_PARSE, "only/main.tf")]);
}

/// Lints the no-op machine module plus one more file.
fn lint_noop_plus(name: &str, text: &str) -> Vec<(String, Option<u32>)> {
    let mut files = noop_files(Role::Machine);
    files.push((name.to_owned(), text.to_owned()));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    lint_text(Role::Machine, &refs)
}

/// `default = null` with a validation that rejects null is required in effect: warned like a
/// user variable without a default. Whether a validation accepts null is decided from its
/// expression evaluated with the variable null (a `== null` test, a conditional, `try`,
/// `coalesce`), not from its text.
#[test]
fn a_null_default_with_a_validation_rejecting_null_is_required_in_effect() {
    let user = |validation: &str| {
        lint_noop_plus(
            "user.tf",
            &format!(
                "variable \"size\" {{\n  type    = string\n  default = null\n{validation}}}\n"
            ),
        )
    };
    let rejecting = [
        "  validation {\n    condition     = var.size != null\n    error_message = \"set it\"\n  }\n",
        "  validation {\n    condition     = length(var.size) > 0\n    error_message = \"set it\"\n  }\n",
    ];
    for v in rejecting {
        assert_eq!(
            user(v),
            [("input/user-variable-default".to_owned(), Some(1))],
            "{v}"
        );
    }
    let accepting = [
        "",
        "  validation {\n    condition     = var.size == null || length(var.size) > 0\n    error_message = \"x\"\n  }\n",
        "  validation {\n    condition     = var.size == null ? true : contains([\"s\"], var.size)\n    error_message = \"x\"\n  }\n",
        // Shapes without the text `== null` that accept null all the same (issue 29).
        "  validation {\n    condition     = var.size != null ? length(var.size) > 0 : true\n    error_message = \"x\"\n  }\n",
        "  validation {\n    condition     = try(length(var.size) > 0, true)\n    error_message = \"x\"\n  }\n",
        "  validation {\n    condition     = coalesce(var.size, \"ok\") != \"\"\n    error_message = \"x\"\n  }\n",
    ];
    for v in accepting {
        assert!(user(v).is_empty(), "{v}");
    }
    // The same in JSON syntax.
    assert_eq!(
        lint_noop_plus(
            "user.tf.json",
            r#"{"variable": {"size": {"type": "string", "default": null, "validation": [{"condition": "${var.size != null}", "error_message": "set it"}]}}}"#,
        ),
        [("input/user-variable-default".to_owned(), Some(1))]
    );
}

/// A large file is parsed a run of whole blocks at a time (memory stays near the file's size);
/// findings keep the exact lines a whole-file parse gives, across runs.
#[test]
fn a_large_file_is_read_a_run_of_blocks_at_a_time_with_exact_lines() {
    use std::fmt::Write as _;
    use tfcapi_lint::module::split::SPLIT_MIN_BYTES;
    let mut big = String::new();
    let mut i = 0;
    while big.len() < 2 * SPLIT_MIN_BYTES {
        writeln!(
            big,
            "resource \"terraform_data\" \"r{i}\" {{\n  input = \"${{var.captf_object.name}}-{i}\" # }} {{\n}}\n"
        )
        .unwrap();
        i += 1;
    }
    let before = big.matches('\n').count() as u32;
    big.push_str("variable \"size\" {\n  default = 1\n}\n");
    big.push_str("variable \"size\" {\n  default = 2\n}\n");
    let with = |text: &str| {
        let mut files = clean_machine_files();
        files.push(source("big.tf", text));
        module::lint_sources(files, Role::Machine, "m").1
    };
    let found = with(&big);
    assert_eq!(ids(&found), [(checks::MODULE_DUPLICATE, "m/big.tf")]);
    assert_eq!(found[0].line, Some(before + 4));

    big.push_str("output \"x\" {\n  value = [\n}\n");
    let whole = hcl::edit::parser::parse_body(&big).expect_err("a syntax error");
    let found = with(&big);
    assert_eq!(ids(&found), [(checks::MODULE_PARSE, "m/big.tf")]);
    assert_eq!(found[0].line, Some(whole.location().line() as u32));
}
