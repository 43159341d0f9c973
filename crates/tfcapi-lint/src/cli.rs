//! The command line: `tfcapi-lint module|image|version` (spec: tfcapi-lint; exit codes 0 clean,
//! 1 findings, 2 unreadable, 3 usage — clap's own usage errors included).

use crate::checks;
use crate::config;
use crate::image::{self, ImageOptions, Platform};
use crate::module;
use crate::report::{Report, exit};
use crate::role::{Role, SUPPORTED_CONTRACTS};
use clap::builder::PossibleValuesParser;
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

#[derive(Debug, Parser)]
#[command(
    name = "tfcapi-lint",
    version,
    about = "Checks Terraform/OpenTofu modules and module images against the CAPTF contract",
    long_about = "Checks a Terraform/OpenTofu module, or the OCI image built from it, against the CAPTF module and image contracts, without running init, plan or apply.\n\nExit codes: 0 clean, 1 errors (or warnings under --strict), 2 could not parse or pull, 3 usage."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lint a module directory (its top-level .tf, .tf.json, .tofu and .tofu.json files).
    Module(ModuleArgs),
    /// Lint a module image: a registry reference, or oci:DIR for a local OCI image layout.
    Image(ImageArgs),
    /// Print the module directories of a repository, one per line: those holding FILEs (what
    /// the pre-commit hook lints), or every module the root's .tfcapi-lint.hcl maps.
    Modules(ModulesArgs),
    /// Print the version and the contract versions this release lints against.
    Version(VersionArgs),
}

/// How findings are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// `file:line: severity id: message` lines and a summary.
    Text,
    /// `{findings: [...], summary: {...}}`.
    Json,
    /// SARIF 2.1.0.
    Sarif,
}

#[derive(Debug, Args)]
struct CommonArgs {
    /// The role the module implements (else `role` of the configuration file).
    #[arg(long, value_enum)]
    role: Option<Role>,
    /// A configuration file (role, runtime, strict, allow_warning, or a repository's module
    /// map); `module` reads the module directory's .tfcapi-lint.hcl, else the map above it, when
    /// this is not given.
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// The contract version to lint against.
    #[arg(long, default_value = SUPPORTED_CONTRACTS[0], value_parser = PossibleValuesParser::new(SUPPORTED_CONTRACTS))]
    contract: String,
    /// Fail (exit 1) on warnings as well as errors.
    #[arg(long)]
    strict: bool,
    /// Downgrade this check's warnings to informational findings (repeatable or comma-separated).
    #[arg(long = "allow-warning", value_name = "ID", value_delimiter = ',')]
    allow_warning: Vec<String>,
    /// Print the report as JSON (same as --format json).
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// The runtime a module is linted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    /// OpenTofu: `x.tofu` replaces `x.tf`.
    Tofu,
    /// Terraform: `.tofu` files are ignored.
    Terraform,
}

impl From<RuntimeArg> for module::Runtime {
    fn from(r: RuntimeArg) -> Self {
        match r {
            RuntimeArg::Tofu => Self::Tofu,
            RuntimeArg::Terraform => Self::Terraform,
        }
    }
}

#[derive(Debug, Args)]
struct ModuleArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// The runtime the module runs on, which decides which files count (`tofu`: `x.tofu`
    /// replaces `x.tf`; `terraform`: `.tofu` files are ignored); else `runtime` of the
    /// configuration, else tofu.
    #[arg(long, value_enum)]
    runtime: Option<RuntimeArg>,
    /// The module directory.
    #[arg(value_name = "DIR")]
    dir: String,
}

#[derive(Debug, Args)]
struct ImageArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// The platform to check (os/arch[/variant]); linux/amd64 by default.
    #[arg(long, value_parser = parse_platform, conflicts_with = "all_platforms")]
    platform: Option<Platform>,
    /// Check every platform the image publishes.
    #[arg(long)]
    all_platforms: bool,
    /// Allow a plain-HTTP registry.
    #[arg(long)]
    insecure: bool,
    /// A registry reference (registry/repo:tag or @sha256:...), or oci:DIR[:NAME].
    #[arg(value_name = "REF")]
    reference: String,
}

#[derive(Debug, Args)]
struct ModulesArgs {
    /// The repository's configuration file (default: .tfcapi-lint.hcl in the working
    /// directory, the repository root); paths are relative to its directory.
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Changed files, relative to the root (none: every module the map names).
    #[arg(value_name = "FILE")]
    files: Vec<String>,
}

#[derive(Debug, Args)]
struct VersionArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_platform(s: &str) -> Result<Platform, String> {
    Platform::parse(s).ok_or_else(|| format!("`{s}` is not os/arch or os/arch/variant"))
}

/// Runs the command line; returns the exit code.
pub fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = write!(out, "{text}");
                    exit::CLEAN
                }
                _ => {
                    let _ = write!(err, "{text}");
                    exit::USAGE
                }
            };
        }
    };
    match cli.command {
        Command::Version(args) => {
            version(args.json, out);
            exit::CLEAN
        }
        Command::Modules(args) => modules(&args, out, err),
        Command::Module(args) => {
            let Some(settings) = settings(&args.common, Some(&args.dir), err) else {
                return exit::USAGE;
            };
            let runtime = args
                .runtime
                .map(module::Runtime::from)
                .or(settings.runtime)
                .unwrap_or_default();
            let findings =
                module::lint_dir_for(Path::new(&args.dir), &args.dir, settings.role, runtime);
            emit(
                &Report::new(findings, &settings.allowed),
                &args.common,
                settings.strict,
                Some(&args.dir),
                out,
            )
        }
        Command::Image(args) => {
            let Some(settings) = settings(&args.common, None, err) else {
                return exit::USAGE;
            };
            if let Err(why) = check_reference(&args.reference) {
                let _ = writeln!(err, "error: <REF>: {why}");
                return exit::USAGE;
            }
            let options = ImageOptions {
                role: settings.role,
                contract: args.common.contract.clone(),
                platform: args.platform,
                all_platforms: args.all_platforms,
                insecure: args.insecure,
            };
            let findings = image::lint_image(&args.reference, &options);
            emit(
                &Report::new(findings, &settings.allowed),
                &args.common,
                settings.strict,
                None,
                out,
            )
        }
    }
}

/// A malformed registry reference is a usage error, not a failed pull: nothing was fetched.
/// `oci:DIR[:NAME]` names a local layout and is checked when it is opened.
fn check_reference(reference: &str) -> Result<(), String> {
    if reference.starts_with("oci:") {
        return Ok(());
    }
    contract::image_ref::parse(reference)
        .map(|_| ())
        .map_err(|e| format!("{reference:?} is not a valid image reference: {e}"))
}

/// `tfcapi-lint modules`: the module directories, one per line on `out`; each file left out
/// and why on `err`.
fn modules(args: &ModulesArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (path, label) = match &args.config {
        Some(p) => (Path::new(p).to_path_buf(), p.clone()),
        None => (
            Path::new(config::FILE_NAME).to_path_buf(),
            config::FILE_NAME.to_owned(),
        ),
    };
    let file = if args.config.is_some() || path.is_file() {
        match config::load(&path, &label) {
            Ok(f) => Some(f),
            Err(why) => {
                let _ = writeln!(err, "error: {why}");
                return exit::USAGE;
            }
        }
    } else {
        None
    };
    // A map's paths are relative to its directory. A `--config` file without module blocks
    // holds the settings every module is linted with (as `module --config` reads it), not a
    // module of its own: only its `skip` counts here, and paths stay relative to the working
    // directory.
    let file = match file {
        Some(f) if args.config.is_some() && !f.is_map() => Some(config::ConfigFile {
            skip: f.skip,
            ..config::ConfigFile::default()
        }),
        other => other,
    };
    let root = match path.parent() {
        Some(p)
            if !p.as_os_str().is_empty()
                && file.as_ref().is_some_and(config::ConfigFile::is_map) =>
        {
            p.to_path_buf()
        }
        _ => Path::new(".").to_path_buf(),
    };
    match crate::repo::modules(&root, file.as_ref(), &args.files) {
        Ok(found) => {
            for line in &found.left_out {
                let _ = writeln!(err, "tfcapi-lint: {line}");
            }
            for dir in &found.dirs {
                let _ = writeln!(out, "{dir}");
            }
            exit::CLEAN
        }
        Err(why) => {
            let _ = writeln!(err, "error: {why}");
            exit::USAGE
        }
    }
}

/// What a run lints with: the command line over the configuration file.
struct Settings {
    role: Role,
    runtime: Option<module::Runtime>,
    strict: bool,
    allowed: BTreeSet<String>,
}

/// The configuration a run reads: `--config` (for a module, its block when the file is a map),
/// else the module directory's own `.tfcapi-lint.hcl` or its block in the map above it.
fn found_config(
    common: &CommonArgs,
    module_dir: Option<&str>,
) -> Result<Option<config::Found>, String> {
    let Some(path) = &common.config else {
        return match module_dir {
            Some(dir) => config::for_module_dir(Path::new(dir), dir.trim_end_matches('/')),
            None => Ok(None),
        };
    };
    let file = config::load(Path::new(path), path)?;
    if !file.is_map() {
        return Ok(Some(config::Found {
            config: file.settings,
            source: path.clone(),
        }));
    }
    let Some(dir) = module_dir else {
        return Err(format!(
            "{path}: a module map (module blocks) configures module directories, not an image: give the image's settings in a file without module blocks"
        ));
    };
    let abs = std::fs::canonicalize(dir).map_err(|e| format!("{dir}: {e}"))?;
    config::in_map(&file, Path::new(path), &abs)
        .map(Some)
        .ok_or_else(|| format!("{path}: no module block maps {dir}"))
}

/// The command line's flags over the configuration file (see [`found_config`]): `--role` wins
/// over `role`, `--strict` or `strict` makes the run strict, `--allow-warning` adds to
/// `allow_warning` (`--runtime` is the module command's). `None` (after writing why) is a usage
/// error.
fn settings(
    common: &CommonArgs,
    module_dir: Option<&str>,
    err: &mut dyn Write,
) -> Option<Settings> {
    let found = match found_config(common, module_dir) {
        Ok(f) => f,
        Err(why) => {
            let _ = writeln!(err, "error: {why}");
            return None;
        }
    };
    let file = found.as_ref().map(|f| f.config.clone()).unwrap_or_default();
    let Some(role) = common.role.or(file.role) else {
        let _ = match (&found, module_dir) {
            (Some(f), _) => writeln!(
                err,
                "error: no role: pass --role cluster|machine|machinepool, or set role in {}",
                f.source
            ),
            (None, Some(dir)) => writeln!(
                err,
                "error: no role for {dir}: pass --role cluster|machine|machinepool, set role in {}/{}, or map it with a module block in the repository's {}",
                dir.trim_end_matches('/'),
                config::FILE_NAME,
                config::FILE_NAME
            ),
            (None, None) => writeln!(
                err,
                "error: no role: pass --role cluster|machine|machinepool, or set role in the file --config names"
            ),
        };
        return None;
    };
    let mut allowed = allowed_warnings(common, err)?;
    allowed.extend(file.allow_warning);
    Some(Settings {
        role,
        runtime: file.runtime,
        strict: common.strict || file.strict,
        allowed,
    })
}

fn allowed_warnings(common: &CommonArgs, err: &mut dyn Write) -> Option<BTreeSet<String>> {
    let mut allowed = BTreeSet::new();
    for id in &common.allow_warning {
        let id = id.trim();
        if id.is_empty() {
            continue;
        }
        if !checks::is_known(id) {
            let _ = writeln!(
                err,
                "error: --allow-warning: `{id}` is not a check ID (see tfcapi-lint's CLI reference for the list)"
            );
            return None;
        }
        allowed.insert(id.to_owned());
    }
    Some(allowed)
}

/// Writes the report in the asked format; `module_dir` is the linted module's directory as given
/// (none for an image), which SARIF locates files against.
fn emit(
    report: &Report,
    common: &CommonArgs,
    strict: bool,
    module_dir: Option<&str>,
    out: &mut dyn Write,
) -> i32 {
    let format = if common.json {
        Format::Json
    } else {
        common.format
    };
    let text = match format {
        Format::Text => report.to_text(),
        Format::Json => report.to_json(),
        Format::Sarif => {
            let source = module_dir.and_then(|dir| {
                let cwd = std::env::current_dir().ok()?;
                Some(crate::sarif::SourceRoot::for_module(&cwd, dir))
            });
            report.to_sarif(source.as_ref())
        }
    };
    let _ = out.write_all(text.as_bytes());
    report.exit_code(strict)
}

fn version(json: bool, out: &mut dyn Write) {
    let version = env!("CARGO_PKG_VERSION");
    if json {
        let value = serde_json::json!({
            "name": "tfcapi-lint",
            "version": version,
            "contracts": SUPPORTED_CONTRACTS,
        });
        let _ = writeln!(out, "{value}");
    } else {
        let _ = writeln!(
            out,
            "tfcapi-lint {version} (contracts: {})",
            SUPPORTED_CONTRACTS.join(", ")
        );
    }
}
