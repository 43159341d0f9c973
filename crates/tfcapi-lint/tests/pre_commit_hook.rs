//! The `tfcapi-lint` pre-commit hook (`.pre-commit-hooks.yaml`, docs/src/tfcapi-lint.md) as a
//! module author uses it: `pre-commit` from PyPI (`make pre-commit-tool` installs it and sets
//! `$CAPTF_PRE_COMMIT`) runs the hook from a git repository holding this repository's hook
//! files, pinned by commit, on a sample module repository. A clean machine module passes; one
//! without a required output fails with the finding's check ID.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pre_commit() -> PathBuf {
    std::env::var_os("CAPTF_PRE_COMMIT")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("pre-commit"), PathBuf::from)
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e} (for pre-commit: `make pre-commit-tool`)"))
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = run(Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "captf-test")
        .env("GIT_AUTHOR_EMAIL", "captf-test@localhost")
        .env("GIT_COMMITTER_NAME", "captf-test")
        .env("GIT_COMMITTER_EMAIL", "captf-test@localhost")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
}

/// A git repository holding this repository's hook files, committed; returns its commit.
fn hook_repo(dir: &Path) -> String {
    for f in [".pre-commit-hooks.yaml", "hack/pre-commit-tfcapi-lint.sh"] {
        copy(&repo_root().join(f), &dir.join(f));
    }
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "hooks"]);
    git(dir, &["rev-parse", "HEAD"])
}

/// A module author's repository: the no-op machine module under `modules/machine`, and a
/// pre-commit configuration using the hook for it.
fn module_repo(dir: &Path, hooks: &Path, rev: &str) {
    let src = repo_root().join("modules/noop/machine");
    for e in std::fs::read_dir(&src).expect("the no-op machine module") {
        let p = e.expect("an entry").path();
        copy(
            &p,
            &dir.join("modules/machine")
                .join(p.file_name().expect("a name")),
        );
    }
    let config = format!(
        "repos:\n  - repo: {}\n    rev: {rev}\n    hooks:\n      - id: tfcapi-lint\n        args: [--role, machine, --strict]\n        files: ^modules/machine/\n",
        hooks.display()
    );
    std::fs::write(dir.join(".pre-commit-config.yaml"), config).expect("writing the config");
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "."]);
}

fn run_hooks(dir: &Path, home: &Path) -> (bool, String) {
    let out = run(Command::new(pre_commit())
        .args(["run", "--all-files", "--color", "never"])
        .current_dir(dir)
        .env("PRE_COMMIT_HOME", home)
        .env("TFCAPI_LINT", env!("CARGO_BIN_EXE_tfcapi-lint"))
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The hook repository, the module repository using it, and pre-commit's home, in a temporary
/// directory.
struct Repos {
    _tmp: tempfile::TempDir,
    hooks: PathBuf,
    module: PathBuf,
    home: PathBuf,
    rev: String,
}

fn repos() -> Repos {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (hooks, module, home) = (
        tmp.path().join("hooks"),
        tmp.path().join("module"),
        tmp.path().join("home"),
    );
    std::fs::create_dir_all(&home).expect("mkdir");
    let rev = hook_repo(&hooks);
    module_repo(&module, &hooks, &rev);
    Repos {
        _tmp: tmp,
        hooks,
        module,
        home,
        rev,
    }
}

#[test]
fn the_pre_commit_hook_passes_a_clean_module_and_fails_a_broken_one() {
    let Repos {
        _tmp,
        hooks: _,
        module,
        home,
        rev: _,
    } = repos();

    let (ok, text) = run_hooks(&module, &home);
    assert!(ok, "the clean module fails the hook:\n{text}");
    assert!(
        text.contains("tfcapi-lint") && text.contains("Passed"),
        "{text}"
    );

    // What `init` downloads under .terraform/ is not linted, even when it is committed and would
    // not parse.
    let downloaded = module.join("modules/machine/.terraform/modules/vpc/main.tf");
    std::fs::create_dir_all(downloaded.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&downloaded, "variable {\n").expect("writing a downloaded module");
    git(&module, &["add", "-f", "."]);
    let (ok, text) = run_hooks(&module, &home);
    assert!(ok, "a file under .terraform/ fails the hook:\n{text}");

    // Drop the `interruptible` output: output/missing, an error.
    let outputs = module.join("modules/machine/outputs.tf");
    let text = std::fs::read_to_string(&outputs).expect("outputs.tf");
    let cut = text
        .find("output \"interruptible\"")
        .expect("the interruptible output");
    std::fs::write(&outputs, &text[..cut]).expect("writing outputs.tf");
    git(&module, &["add", "."]);
    let (ok, text) = run_hooks(&module, &home);
    assert!(!ok, "the broken module passes the hook:\n{text}");
    assert!(text.contains("output/missing"), "{text}");
    assert!(text.contains("interruptible"), "{text}");
}

#[test]
fn the_hook_without_a_role_says_how_to_give_one() {
    let out = run(
        Command::new(repo_root().join("hack/pre-commit-tfcapi-lint.sh"))
            .arg("modules/machine/main.tf")
            .env("TFCAPI_LINT", env!("CARGO_BIN_EXE_tfcapi-lint")),
    );
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--role"), "{err}");
}

/// A module root that holds a `.tfcapi-lint.hcl` is linted whole, with the file's role and
/// strictness and no `--role` in the hook's args; a nested module folder under it is part of it,
/// never linted as a module of the role (on its own it lacks every output of the role).
#[test]
fn the_hook_lints_a_configured_module_root_and_not_its_nested_modules() {
    let Repos {
        _tmp,
        hooks,
        module,
        home,
        rev,
    } = repos();
    let root = module.join("modules/machine");
    std::fs::write(
        root.join(".tfcapi-lint.hcl"),
        "role   = \"machine\"\nstrict = true\n",
    )
    .expect("writing the configuration");
    let nested = root.join("modules/network/main.tf");
    std::fs::create_dir_all(nested.parent().expect("a parent")).expect("mkdir");
    std::fs::write(
        &nested,
        "variable \"cidr\" {\n  type = string\n}\n\noutput \"id\" {\n  value = var.cidr\n}\n",
    )
    .expect("writing the nested module");
    let config = format!(
        "repos:\n  - repo: {}\n    rev: {rev}\n    hooks:\n      - id: tfcapi-lint\n        files: ^modules/\n",
        hooks.display()
    );
    std::fs::write(module.join(".pre-commit-config.yaml"), config).expect("writing the config");
    git(&module, &["add", "."]);

    // Linted on its own as a machine module, the nested folder fails.
    let alone = run(Command::new(env!("CARGO_BIN_EXE_tfcapi-lint"))
        .args(["module", "--role", "machine"])
        .arg(nested.parent().expect("a parent")));
    assert_eq!(alone.status.code(), Some(1));

    let (ok, text) = run_hooks(&module, &home);
    assert!(ok, "the configured module fails the hook:\n{text}");

    // The configuration's strictness applies: a warning in the root fails the hook.
    let text = hook_after_a_warning(&module, &home, &root);
    assert!(text.contains("input/user-variable-default"), "{text}");
}

/// Adds a user variable without a default (an `input/user-variable-default` warning) to the
/// module in `root`, stages it, and runs the hooks, which must fail; returns their output.
fn hook_after_a_warning(module: &Path, home: &Path, root: &Path) -> String {
    let variables = root.join("variables.tf");
    let mut text = std::fs::read_to_string(&variables).expect("variables.tf");
    text.push_str("\nvariable \"flavor\" {\n  type = string\n}\n");
    std::fs::write(&variables, text).expect("writing variables.tf");
    git(module, &["add", "."]);
    let (ok, text) = run_hooks(module, home);
    assert!(!ok, "a warning passes the strict configuration:\n{text}");
    text
}

/// A module map in the repository root's `.tfcapi-lint.hcl` gives one hook entry without `args`
/// every module's role and settings: the mapped modules are linted, a skip folder and a folder
/// in no module are not (even when they would not parse).
#[test]
fn the_hook_lints_the_modules_a_repository_map_names() {
    let repos = repos();
    let (hooks, module, home) = (&repos.hooks, repos.module.clone(), &repos.home);
    std::fs::write(
        module.join(".tfcapi-lint.hcl"),
        "strict = true\nskip   = [\"examples\"]\n\nmodule \"modules/machine\" {\n  role = \"machine\"\n}\n",
    )
    .expect("writing the map");
    for unparsable in ["examples/basic/main.tf", "tools/gen/main.tf"] {
        let path = module.join(unparsable);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, "variable {\n").expect("writing a broken file");
    }
    let config = format!(
        "repos:\n  - repo: {}\n    rev: {}\n    hooks:\n      - id: tfcapi-lint\n",
        hooks.display(),
        repos.rev
    );
    std::fs::write(module.join(".pre-commit-config.yaml"), config).expect("writing the config");
    git(&module, &["add", "."]);
    let (ok, text) = run_hooks(&module, home);
    assert!(ok, "the mapped module fails the hook:\n{text}");

    // The map's strictness applies: a warning in the mapped module fails the hook.
    let text = hook_after_a_warning(&module, home, &module.join("modules/machine"));
    assert!(text.contains("input/user-variable-default"), "{text}");
    assert!(
        !text.contains("module/parse") && !text.contains("no role"),
        "a skipped folder or one in no module was linted:\n{text}"
    );
    assert!(
        text.contains("examples/basic/main.tf: in skip folder")
            && text.contains("tools/gen/main.tf: in no module of the map"),
        "{text}"
    );
}
