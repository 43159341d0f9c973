//! The environment rewrite (Runtime Environment "Environment set and dropped" and "Provider
//! mirror and CLI configuration"; Job Environment).
//!
//! Starting from the container's own environment: `HOME` is forced to the work directory,
//! `TF_DATA_DIR` to `<workdir>/.terraform`, `TMPDIR` is kept when set and otherwise defaults to
//! `<workdir>/tmp`, `TF_CLI_CONFIG_FILE` points at the runner's `cli.tfrc` only when the image
//! ships a provider mirror, and every other `TF_*` and `KUBE_*` variable is dropped, except the
//! three the Job sets itself. Dropped variables are reported by name only, never by value.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The `TF_*`/`KUBE_*` variables the Job sets and the runtime keeps.
pub const KEPT: [&str; 3] = ["TF_IN_AUTOMATION", "TF_INPUT", "KUBE_NAMESPACE"];

/// The rewritten environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// Every variable the runtime gets, sorted by name.
    pub vars: BTreeMap<OsString, OsString>,
    /// The names of the variables dropped, sorted (values are never kept).
    pub dropped: Vec<String>,
    /// The `TMPDIR` the runtime gets.
    pub tmpdir: PathBuf,
}

/// Whether a variable name falls under the dropped `TF_*`/`KUBE_*` families.
pub fn is_reserved(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    (bytes.starts_with(b"TF_") || bytes.starts_with(b"KUBE_"))
        && !KEPT.iter().any(|k| k.as_bytes() == bytes)
}

/// The file `TF_CLI_CONFIG_FILE` names when the image ships a mirror.
pub fn cli_config_path(workdir: &Path) -> PathBuf {
    workdir.join("cli.tfrc")
}

/// Rewrites `env` for a runtime whose work directory is `workdir`; `cli_config` is the
/// `cli.tfrc` the runner wrote, when the image ships a provider mirror.
pub fn rewrite<I>(env: I, workdir: &Path, cli_config: Option<&Path>) -> Rewritten
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let mut vars = BTreeMap::new();
    let mut dropped = Vec::new();
    for (name, value) in env {
        if name.is_empty() {
            continue;
        }
        if is_reserved(&name) {
            dropped.push(name.to_string_lossy().into_owned());
        } else {
            vars.insert(name, value);
        }
    }
    dropped.sort();
    dropped.dedup();
    vars.insert("HOME".into(), workdir.as_os_str().to_owned());
    vars.insert("TF_DATA_DIR".into(), workdir.join(".terraform").into());
    let tmpdir = match vars.get(OsStr::new("TMPDIR")) {
        Some(t) if !t.is_empty() => PathBuf::from(t),
        _ => workdir.join("tmp"),
    };
    vars.insert("TMPDIR".into(), tmpdir.clone().into());
    if let Some(path) = cli_config {
        vars.insert("TF_CLI_CONFIG_FILE".into(), path.as_os_str().to_owned());
    }
    Rewritten {
        vars,
        dropped,
        tmpdir,
    }
}

/// Sets a keyless identity's variables (`contract::web_identity`) in the runtime's environment:
/// the identity's values win over the same names from the container. Returns the names set.
pub fn apply_web_identity(
    vars: &mut BTreeMap<OsString, OsString>,
    exported: &[(String, String)],
) -> Vec<String> {
    for (name, value) in exported {
        vars.insert(name.into(), value.into());
    }
    exported.iter().map(|(name, _)| name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn get<'a>(r: &'a Rewritten, name: &str) -> Option<&'a str> {
        r.vars.get(OsStr::new(name)).and_then(|v| v.to_str())
    }

    /// The worked example of docs/src/runtime-environment.md.
    #[test]
    fn worked_example_with_a_provider_mirror() {
        let container = env(&[
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOSTNAME", "captf-c-demo-apply-a1-3f9c2e-x7k2p"),
            ("HOME", "/captf/work"),
            ("TMPDIR", "/tmp"),
            ("TF_IN_AUTOMATION", "1"),
            ("TF_INPUT", "0"),
            ("KUBE_NAMESPACE", "team-a"),
            ("CHECKPOINT_DISABLE", "1"),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "example-secret"),
            ("TF_LOG", "TRACE"),
            ("TF_VAR_region", "eu-west-1"),
            ("TF_WORKSPACE", "prod"),
            ("TF_CLI_ARGS_apply", "-destroy"),
            ("TF_CLI_CONFIG_FILE", "/home/user/.terraformrc"),
            ("TF_PLUGIN_CACHE_DIR", "/var/cache/tf"),
            ("KUBE_CONFIG_PATH", "/root/.kube/config"),
            ("KUBE_TOKEN", "eyJhbGciOi"),
        ]);
        let work = Path::new("/captf/work");
        let tfrc = cli_config_path(work);
        let r = rewrite(container, work, Some(&tfrc));

        assert_eq!(
            r.dropped,
            vec![
                "KUBE_CONFIG_PATH",
                "KUBE_TOKEN",
                "TF_CLI_ARGS_apply",
                "TF_CLI_CONFIG_FILE",
                "TF_LOG",
                "TF_PLUGIN_CACHE_DIR",
                "TF_VAR_region",
                "TF_WORKSPACE",
            ]
        );
        let kept: Vec<(&str, &str)> = r
            .vars
            .iter()
            .map(|(k, v)| (k.to_str().unwrap_or("?"), v.to_str().unwrap_or("?")))
            .collect();
        assert_eq!(
            kept,
            vec![
                ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
                ("AWS_SECRET_ACCESS_KEY", "example-secret"),
                ("CHECKPOINT_DISABLE", "1"),
                ("HOME", "/captf/work"),
                ("HOSTNAME", "captf-c-demo-apply-a1-3f9c2e-x7k2p"),
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                ("KUBE_NAMESPACE", "team-a"),
                ("PATH", "/usr/local/bin:/usr/bin:/bin"),
                ("TF_CLI_CONFIG_FILE", "/captf/work/cli.tfrc"),
                ("TF_DATA_DIR", "/captf/work/.terraform"),
                ("TF_INPUT", "0"),
                ("TF_IN_AUTOMATION", "1"),
                ("TMPDIR", "/tmp"),
            ]
        );
        assert_eq!(r.tmpdir, PathBuf::from("/tmp"));
    }

    #[test]
    fn without_a_mirror_no_cli_config_is_set() {
        let r = rewrite(
            env(&[("TF_CLI_CONFIG_FILE", "/x"), ("PATH", "/bin")]),
            Path::new("/w"),
            None,
        );
        assert_eq!(get(&r, "TF_CLI_CONFIG_FILE"), None);
        assert_eq!(r.dropped, vec!["TF_CLI_CONFIG_FILE"]);
    }

    #[test]
    fn home_and_data_dir_are_forced_and_tmpdir_defaults() {
        let r = rewrite(
            env(&[
                ("HOME", "/root"),
                ("TF_DATA_DIR", "/elsewhere"),
                ("TMPDIR", ""),
            ]),
            Path::new("/w"),
            None,
        );
        assert_eq!(get(&r, "HOME"), Some("/w"));
        assert_eq!(get(&r, "TF_DATA_DIR"), Some("/w/.terraform"));
        assert_eq!(get(&r, "TMPDIR"), Some("/w/tmp"));
        assert_eq!(r.tmpdir, PathBuf::from("/w/tmp"));
        assert_eq!(r.dropped, vec!["TF_DATA_DIR"]);
    }

    #[test]
    fn only_the_three_job_variables_survive_the_families() {
        for name in KEPT {
            assert!(!is_reserved(OsStr::new(name)), "{name}");
        }
        for name in [
            "TF_",
            "TF_X",
            "KUBE_",
            "KUBE_HOST",
            "TF_INPUT_X",
            "TF_IN_AUTOMATIONX",
        ] {
            assert!(is_reserved(OsStr::new(name)), "{name}");
        }
        for name in [
            "KUBERNETES_SERVICE_HOST",
            "tf_log",
            "XTF_LOG",
            "KUBECONFIG",
            "TFX",
        ] {
            assert!(!is_reserved(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn non_utf8_names_are_handled() {
        use std::os::unix::ffi::OsStringExt;
        let weird = OsString::from_vec(b"TF_\xff".to_vec());
        let r = rewrite(vec![(weird, OsString::from("v"))], Path::new("/w"), None);
        assert_eq!(r.dropped.len(), 1);
    }

    #[test]
    fn a_keyless_identity_wins_over_the_container_environment() {
        let container = env(&[
            ("AWS_ROLE_ARN", "arn:aws:iam::000000000000:role/from-env"),
            ("AWS_REGION", "eu-west-1"),
        ]);
        let mut r = rewrite(container, Path::new("/captf/work"), None);
        let names = apply_web_identity(
            &mut r.vars,
            &[
                (
                    "AWS_ROLE_ARN".to_owned(),
                    "arn:aws:iam::123456789012:role/captf".to_owned(),
                ),
                (
                    "AWS_WEB_IDENTITY_TOKEN_FILE".to_owned(),
                    "/var/run/captf/identity/token".to_owned(),
                ),
            ],
        );
        assert_eq!(names, ["AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"]);
        assert_eq!(
            get(&r, "AWS_ROLE_ARN"),
            Some("arn:aws:iam::123456789012:role/captf")
        );
        assert_eq!(
            get(&r, "AWS_WEB_IDENTITY_TOKEN_FILE"),
            Some("/var/run/captf/identity/token")
        );
        assert_eq!(get(&r, "AWS_REGION"), Some("eu-west-1"));
    }
}
