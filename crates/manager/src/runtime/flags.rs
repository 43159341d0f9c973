//! The manager's command line beyond its own settings (INTERFACE-FACTS §4 "Manager flags": the
//! component-base logging flags and "Other"; docs/src/reference/manager.md, "Flags"): flag names
//! written with underscores, `--vmodule`, `--feature-gates`, `--version=raw`, and the flags the
//! Cluster API Operator passes to every provider's manager. Pure functions; `main` applies them.

use std::ffi::OsString;

/// `--flag_name=value` means `--flag-name=value`, as component-base normalizes names: only the
/// name of a `--` argument changes, never a value (`--namespace=team_a` stays), never a short
/// flag, and nothing after a bare `--`.
pub fn dashes_for_underscores<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut flags_end = false;
    for arg in args {
        let normalized = match arg.to_str() {
            Some("--") => {
                flags_end = true;
                None
            }
            Some(s) if !flags_end && s.starts_with("--") => {
                let (name, value) = s.split_at(s.find('=').unwrap_or(s.len()));
                Some(OsString::from(format!("{}{value}", name.replace('_', "-"))))
            }
            _ => None,
        };
        out.push(normalized.unwrap_or(arg));
    }
    out
}

/// One `--vmodule` entry: the log verbosity of one module of the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmoduleEntry {
    /// The module's path in the manager (`reconcile`, `state::backups`), or a log target of its
    /// own (`manager::…`, `captf::writes`).
    pub module: String,
    /// Its verbosity, as `-v`.
    pub verbosity: u8,
}

/// `--vmodule`'s entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vmodule(pub Vec<VmoduleEntry>);

/// Parses `--vmodule` (see [`parse_vmodule`]).
pub fn parse_vmodule_flag(s: &str) -> Result<Vmodule, String> {
    parse_vmodule(s).map(Vmodule)
}

/// Parses `--vmodule`: comma-separated `module=N` entries (`reconcile=4,state/backups=5`). A
/// module is a path of the manager's modules, written with `::`, `/` or `.`; Go's file-name
/// globs (`*`, `?`) have no meaning in a Rust binary and are refused rather than ignored.
pub fn parse_vmodule(s: &str) -> Result<Vec<VmoduleEntry>, String> {
    let mut entries = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((module, level)) = entry.split_once('=') else {
            return Err(format!(
                "entry {entry:?} is not module=N (for example reconcile=4)"
            ));
        };
        let verbosity: u8 = level.trim().parse().map_err(|_| {
            format!("entry {entry:?}: the verbosity {level:?} is not a number from 0 to 255")
        })?;
        let module = module.trim().replace(['/', '.'], "::");
        if module.contains(['*', '?']) {
            return Err(format!(
                "entry {entry:?}: patterns are not supported; name a module of the manager such \
                 as reconcile or state::backups"
            ));
        }
        let valid = !module.is_empty()
            && module.split("::").all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            });
        if !valid {
            return Err(format!(
                "entry {entry:?}: {module:?} is not a module path (lowercase names joined by ::)"
            ));
        }
        entries.push(VmoduleEntry { module, verbosity });
    }
    Ok(entries)
}

/// The log level of a verbosity, as `-v` maps it: 0 warnings, 1-2 info, 3-4 debug, 5 and above
/// trace.
pub fn level_of(verbosity: u8) -> &'static str {
    match verbosity {
        0 => "warn",
        1 | 2 => "info",
        3 | 4 => "debug",
        _ => "trace",
    }
}

/// The log filter directives of `--vmodule` entries, to follow the verbosity's own directives
/// (a later, more specific directive wins): `manager::reconcile=debug,…`.
pub fn vmodule_directives(entries: &[VmoduleEntry]) -> String {
    entries
        .iter()
        .map(|e| {
            let target = if e.module.starts_with("manager::") || e.module.starts_with("captf::") {
                e.module.clone()
            } else {
                format!("manager::{}", e.module)
            };
            format!("{target}={}", level_of(e.verbosity))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// component-base's gates: CAPTF registers none of its own, and its logging does not depend on
/// them (the text and JSON formats, `-v` and `--vmodule` work whatever they say).
pub const KNOWN_GATES: [&str; 5] = [
    "AllAlpha",
    "AllBeta",
    "ContextualLogging",
    "LoggingAlphaOptions",
    "LoggingBetaOptions",
];

/// `--feature-gates`, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// The gates this manager knows, with their values.
    pub known: Vec<(String, bool)>,
    /// Gates it does not know (the Cluster API Operator passes Cluster API's gates, such as
    /// `MachinePool=true`, to every provider): ignored with a warning, never a start-up failure.
    pub unknown: Vec<String>,
}

/// Parses `--feature-gates`: comma-separated `Gate=bool` entries, the booleans as Go reads them
/// (`true`, `1`, `t`, `TRUE`, …). A malformed entry is an error; an unknown gate is not.
pub fn parse_feature_gates(s: &str) -> Result<FeatureGates, String> {
    let mut gates = FeatureGates::default();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("entry {entry:?} is not Gate=true or Gate=false"));
        };
        let (name, value) = (name.trim(), value.trim());
        let Some(value) = go_bool(value) else {
            return Err(format!(
                "entry {entry:?}: {value:?} is not a boolean (true or false)"
            ));
        };
        if KNOWN_GATES.contains(&name) {
            gates.known.push((name.to_owned(), value));
        } else {
            gates.unknown.push(name.to_owned());
        }
    }
    Ok(gates)
}

/// What `--version` asks: nothing, the version line, or the raw version record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionFlag {
    /// `--version=false` (or absent).
    Off,
    /// `--version` or `--version=true`: `manager v0.1.0`.
    Short,
    /// `--version=raw`: every field of the build's version record.
    Raw,
}

/// Parses the value of `--version` as component-base does: a boolean, or `raw`.
pub fn parse_version_flag(s: &str) -> Result<VersionFlag, String> {
    match (s, go_bool(s)) {
        ("raw", _) => Ok(VersionFlag::Raw),
        (_, Some(true)) => Ok(VersionFlag::Short),
        (_, Some(false)) => Ok(VersionFlag::Off),
        (other, None) => Err(format!("{other:?} is not true, false or raw")),
    }
}

/// A boolean as Go's `strconv.ParseBool` reads it.
fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The version line: `manager v0.1.0`.
pub fn version_line(version: &str) -> String {
    format!("manager v{version}")
}

/// The raw version record, one field a line, as `--version=raw` prints it.
pub fn version_record(version: &str) -> String {
    let (major, minor) = {
        let mut parts = version.split('.');
        (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        )
    };
    format!(
        "major: {major}\nminor: {minor}\ngitVersion: v{version}\ncompiler: rustc\nplatform: {}/{}\n",
        std::env::consts::OS,
        match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        dashes_for_underscores(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn underscores_in_flag_names_are_dashes_and_values_are_kept() {
        assert_eq!(
            strings(&[
                "manager",
                "--leader_elect=false",
                "--namespace=team_a",
                "--state_backups",
                "3",
                "-v",
                "--",
                "--not_a_flag",
            ]),
            [
                "manager",
                "--leader-elect=false",
                "--namespace=team_a",
                "--state-backups",
                "3",
                "-v",
                "--",
                "--not_a_flag",
            ]
        );
    }

    #[test]
    fn vmodule_names_modules_and_refuses_globs() {
        let entries = parse_vmodule("reconcile=4, state/backups=5,captf::writes=3").unwrap();
        assert_eq!(
            vmodule_directives(&entries),
            "manager::reconcile=debug,manager::state::backups=trace,captf::writes=debug"
        );
        assert_eq!(parse_vmodule("").unwrap(), []);
        let err = parse_vmodule("reconcile*=4").unwrap_err();
        assert!(err.contains("patterns are not supported"), "{err}");
        let err = parse_vmodule("reconcile").unwrap_err();
        assert!(err.contains("module=N"), "{err}");
        let err = parse_vmodule("reconcile=high").unwrap_err();
        assert!(err.contains("not a number"), "{err}");
        assert!(parse_vmodule("Reconcile=2").is_err());
        assert!(parse_vmodule("a::::b=2").is_err());
    }

    #[test]
    fn feature_gates_keep_known_ones_and_set_unknown_ones_aside() {
        let gates =
            parse_feature_gates("ContextualLogging=false, MachinePool=true,AllAlpha=1").unwrap();
        assert_eq!(
            gates.known,
            [
                ("ContextualLogging".to_owned(), false),
                ("AllAlpha".to_owned(), true)
            ]
        );
        assert_eq!(gates.unknown, ["MachinePool"]);
        assert_eq!(parse_feature_gates("").unwrap(), FeatureGates::default());
        let err = parse_feature_gates("MachinePool").unwrap_err();
        assert!(err.contains("Gate=true"), "{err}");
        let err = parse_feature_gates("MachinePool=yes").unwrap_err();
        assert!(err.contains("not a boolean"), "{err}");
    }

    #[test]
    fn version_flag_is_a_boolean_or_raw() {
        assert_eq!(parse_version_flag("true"), Ok(VersionFlag::Short));
        assert_eq!(parse_version_flag("false"), Ok(VersionFlag::Off));
        assert_eq!(parse_version_flag("raw"), Ok(VersionFlag::Raw));
        assert!(parse_version_flag("json").is_err());
        assert_eq!(version_line("0.1.0"), "manager v0.1.0");
        let raw = version_record("0.1.0");
        assert!(
            raw.starts_with("major: 0\nminor: 1\ngitVersion: v0.1.0\n"),
            "{raw}"
        );
        assert!(raw.contains("platform: linux/"), "{raw}");
    }
}
