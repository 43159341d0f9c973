//! The image checks, run on one platform's root filesystem and config (spec: Image Contract
//! "Fixed paths", "Provider mirror layout", "OCI labels", "User", "Multi-arch" and the checklist;
//! the reserved paths of the v1alpha1 freeze; Job Environment's mounts).

use super::fs::{Entry, EntryKind, Fs};
use super::{ImageConfig, ImageOptions, Platform};
use crate::checks;
use crate::module::{self, Runtime, SourceFile, is_config_file};
use crate::report::{Finding, Severity};
use crate::role::Role;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// `io.captf.contract`.
pub const LABEL_CONTRACT: &str = "io.captf.contract";
/// `io.captf.role`.
pub const LABEL_ROLE: &str = "io.captf.role";
/// `io.captf.runtime`.
pub const LABEL_RUNTIME: &str = "io.captf.runtime";
/// `io.captf.runtime.version`.
pub const LABEL_RUNTIME_VERSION: &str = "io.captf.runtime.version";
/// `io.captf.capacity`.
pub const LABEL_CAPACITY: &str = "io.captf.capacity";
/// `io.captf.node-info`.
pub const LABEL_NODE_INFO: &str = "io.captf.node-info";

/// The module the runner runs.
pub const MODULE_PATH: &str = "captf/module";
/// The runtime the runner execs.
pub const RUNTIME_PATH: &str = "captf/runtime";
/// The optional provider mirror.
pub const PROVIDERS_PATH: &str = "captf/providers";
/// Mount points an image must leave empty: the injected runner and the per-run Secret.
pub const RESERVED_PATHS: &[&str] = &["captf/bin", "captf/config"];
/// Volumes the Job mounts over the image: what the image ships there is hidden.
pub const MOUNTED_PATHS: &[&str] = &["captf/work", "var/run/captf/credentials"];
/// The pod's default `fsGroup`, a supplementary group of the runner's process.
pub const FS_GROUP: u64 = 65_532;

/// The runtimes `io.captf.runtime` names.
const RUNTIMES: &[&str] = &["tofu", "terraform"];
/// Default registry hosts of unqualified provider sources.
const TOFU_REGISTRY: &str = "registry.opentofu.org";
const TERRAFORM_REGISTRY: &str = "registry.terraform.io";
/// How deep local module calls are followed for `required_providers`.
const MAX_MODULE_DEPTH: usize = 8;
/// How many example paths a finding lists.
const EXAMPLES: usize = 3;

/// The image's user as the runner's process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum User {
    Root,
    Known { uid: u64, gid: Option<u64> },
    Unknown,
}

fn image_user(user: &str, fs: &Fs) -> User {
    let (name, group) = user
        .split_once(':')
        .map_or((user, None), |(u, g)| (u, Some(g)));
    let (uid, passwd_gid) = if name.is_empty() {
        return User::Root;
    } else if let Ok(uid) = name.parse::<u64>() {
        (uid, None)
    } else if let Some((uid, gid)) = fs.passwd_user(name) {
        (uid, Some(gid))
    } else if name == "root" {
        (0, Some(0))
    } else {
        return User::Unknown;
    };
    if uid == 0 {
        return User::Root;
    }
    let gid = match group {
        Some(g) => g.parse::<u64>().ok().or_else(|| fs.group_gid(g)),
        None => passwd_gid,
    };
    User::Known { uid, gid }
}

/// Whether `user` has all of `bits` (4 read, 1 execute) on `entry`.
fn allowed(entry: &Entry, user: &User, bits: u32) -> bool {
    match user {
        User::Root => bits & 1 == 0 || entry.mode & 0o111 != 0 || entry.kind == EntryKind::Dir,
        User::Unknown => true,
        User::Known { uid, gid } => {
            let class = if entry.uid == *uid {
                entry.mode >> 6
            } else if Some(entry.gid) == *gid || entry.gid == FS_GROUP {
                entry.mode >> 3
            } else {
                entry.mode
            };
            class & bits == bits
        }
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

fn shown(path: &str) -> String {
    format!("/{path}")
}

/// Runs every image check on one platform.
pub fn check(
    fs: &Fs,
    config: &ImageConfig,
    options: &ImageOptions,
    platform: &Platform,
    reference: &str,
) -> Vec<Finding> {
    let mut out = Vec::new();
    labels(config, options, reference, &mut out);
    if options.role == Role::Machine {
        capacity_labels(config, reference, &mut out);
    }
    let user = image_user(&config.user, fs);
    if user == User::Root {
        out.push(Finding::warning(
            checks::IMAGE_ROOT_USER,
            reference,
            None,
            format!(
                "the image runs as root (config.User is {}); set a non-root USER (for example 65532) so the Job can run under the restricted Pod Security profile",
                if config.user.is_empty() { "empty".to_owned() } else { format!("\"{}\"", config.user) }
            ),
        ));
    }
    reserved_paths(fs, &mut out);
    runtime(fs, &user, &mut out);
    let module = module_dir(fs, options.role, image_runtime(fs, config), &mut out);
    if let Some(module_path) = &module {
        permissions(fs, module_path, &user, &mut out);
    }
    providers(fs, module.as_deref(), config, platform, &user, &mut out);
    out
}

fn labels(config: &ImageConfig, options: &ImageOptions, reference: &str, out: &mut Vec<Finding>) {
    if let Some(role) = config.labels.get(LABEL_ROLE)
        && role != options.role.as_str()
    {
        out.push(Finding::error(
            checks::IMAGE_LABEL_ROLE,
            reference,
            None,
            format!(
                "label {LABEL_ROLE} is \"{role}\" but the image is linted as --role {}; build it with the right role, or lint the right role",
                options.role
            ),
        ));
    }
    if let Some(contract) = config.labels.get(LABEL_CONTRACT)
        && *contract != options.contract
    {
        out.push(Finding::error(
            checks::IMAGE_LABEL_CONTRACT,
            reference,
            None,
            format!(
                "label {LABEL_CONTRACT} is \"{contract}\" but the image is linted against --contract {}",
                options.contract
            ),
        ));
    }
    if let Some(runtime) = config.labels.get(LABEL_RUNTIME)
        && !RUNTIMES.contains(&runtime.as_str())
    {
        out.push(Finding::warning(
            checks::IMAGE_LABEL_RUNTIME,
            reference,
            None,
            format!("label {LABEL_RUNTIME} is \"{runtime}\"; use tofu or terraform"),
        ));
    }
    if let Some(version) = config.labels.get(LABEL_RUNTIME_VERSION)
        && !is_version(version)
    {
        out.push(Finding::warning(
            checks::IMAGE_LABEL_RUNTIME,
            reference,
            None,
            format!("label {LABEL_RUNTIME_VERSION} is \"{version}\", not a version such as 1.12.6"),
        ));
    }
}

fn is_version(v: &str) -> bool {
    let v = v.strip_prefix('v').unwrap_or(v);
    let core = v.split(['-', '+']).next().unwrap_or(v);
    let parts: Vec<&str> = core.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `s` is a Kubernetes resource quantity (`4`, `16Gi`, `500m`, `1e3`).
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let valid_number = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.bytes().any(|b| b.is_ascii_digit());
    let valid_suffix = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()));
    valid_number && valid_suffix
}

fn capacity_labels(config: &ImageConfig, reference: &str, out: &mut Vec<Finding>) {
    let capacity = config.labels.get(LABEL_CAPACITY);
    let node_info = config.labels.get(LABEL_NODE_INFO);
    let mut error = |message: String| {
        out.push(Finding::error(
            checks::IMAGE_CAPACITY_LABEL,
            reference,
            None,
            message,
        ));
    };
    if let Some(text) = capacity {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) if !map.is_empty() => {
                for (resource, quantity) in &map {
                    match quantity.as_str() {
                        Some(q) if is_quantity(q) && !resource.is_empty() => {}
                        _ => error(format!(
                            "label {LABEL_CAPACITY}: \"{resource}\" must map to a quantity string such as \"4\" or \"16Gi\", found {quantity}"
                        )),
                    }
                }
            }
            Ok(_) => error(format!(
                "label {LABEL_CAPACITY} must be a non-empty JSON object of resource to quantity, for example {{\"cpu\":\"4\",\"memory\":\"16Gi\"}}"
            )),
            Err(e) => error(format!("label {LABEL_CAPACITY} is not valid JSON: {e}")),
        }
    }
    if let Some(text) = node_info {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => {
                for key in ["architecture", "operatingSystem"] {
                    if map
                        .get(key)
                        .and_then(|v| v.as_str())
                        .is_none_or(str::is_empty)
                    {
                        error(format!(
                            "label {LABEL_NODE_INFO} needs a non-empty string \"{key}\""
                        ));
                    }
                }
                for key in map.keys() {
                    if key != "architecture" && key != "operatingSystem" {
                        error(format!(
                            "label {LABEL_NODE_INFO} has unknown key \"{key}\" (only architecture and operatingSystem)"
                        ));
                    }
                }
            }
            Ok(_) => error(format!(
                "label {LABEL_NODE_INFO} must be a JSON object such as {{\"architecture\":\"amd64\",\"operatingSystem\":\"linux\"}}"
            )),
            Err(e) => error(format!("label {LABEL_NODE_INFO} is not valid JSON: {e}")),
        }
    }
    if capacity.is_some() != node_info.is_some() {
        let (set, unset) = if capacity.is_some() {
            (LABEL_CAPACITY, LABEL_NODE_INFO)
        } else {
            (LABEL_NODE_INFO, LABEL_CAPACITY)
        };
        out.push(Finding::warning(
            checks::IMAGE_CAPACITY_LABEL_PAIR,
            reference,
            None,
            format!("label {set} is set without {unset}; set both for scale-from-zero"),
        ));
    }
}

fn listing(paths: &[String]) -> String {
    let mut text = paths
        .iter()
        .take(EXAMPLES)
        .map(|p| shown(p))
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > EXAMPLES {
        let _ = write!(text, " and {} more", paths.len() - EXAMPLES);
    }
    text
}

fn reserved_paths(fs: &Fs, out: &mut Vec<Finding>) {
    for (roots, id, why) in [
        (
            RESERVED_PATHS,
            checks::IMAGE_RESERVED_PATH,
            "is a mount point (the injected runner or the per-run Secret); the image must not ship anything there",
        ),
        (
            MOUNTED_PATHS,
            checks::IMAGE_MOUNTED_PATH,
            "is mounted over by the Job; whatever the image ships there is hidden",
        ),
    ] {
        for root in roots {
            let Some((resolved, entry)) = fs.resolve(root) else {
                continue;
            };
            let contents: Vec<String> = if entry.kind == EntryKind::Dir {
                fs.descendants(&resolved).map(|(p, _)| p.clone()).collect()
            } else {
                vec![resolved.clone()]
            };
            if contents.is_empty() {
                continue;
            }
            let severity = if id == checks::IMAGE_RESERVED_PATH {
                Severity::Error
            } else {
                Severity::Warning
            };
            out.push(Finding::new(
                id,
                severity,
                shown(root),
                None,
                format!("/{root} {why}: found {}", listing(&contents)),
            ));
        }
    }
}

/// The runtime the image runs, which decides which module files count: the `io.captf.runtime`
/// label, else the name `/captf/runtime` links to, else OpenTofu.
pub fn image_runtime(fs: &Fs, config: &ImageConfig) -> Runtime {
    match config.labels.get(LABEL_RUNTIME).map(String::as_str) {
        Some("terraform") => return Runtime::Terraform,
        Some("tofu") => return Runtime::Tofu,
        _ => {}
    }
    match fs.resolve(RUNTIME_PATH) {
        Some((resolved, _)) if resolved.rsplit('/').next() == Some("terraform") => {
            Runtime::Terraform
        }
        _ => Runtime::Tofu,
    }
}

fn runtime(fs: &Fs, user: &User, out: &mut Vec<Finding>) {
    let path = shown(RUNTIME_PATH);
    let problem = match fs.resolve(RUNTIME_PATH) {
        None => Some(if fs.get(RUNTIME_PATH).is_some() {
            "/captf/runtime is a link that leads nowhere inside the image".to_owned()
        } else {
            "/captf/runtime is missing: the runner execs it (copy or link tofu or terraform there)"
                .to_owned()
        }),
        Some((resolved, entry)) => match entry.kind {
            EntryKind::File { .. } if !allowed(&entry, user, 1) => Some(format!(
                "/captf/runtime (/{resolved}, mode {:o}) is not executable by the image user",
                entry.mode
            )),
            EntryKind::File { .. } => None,
            EntryKind::Dir => {
                Some("/captf/runtime is a directory, not the runtime binary".to_owned())
            }
            _ => Some("/captf/runtime is not a regular file".to_owned()),
        },
    };
    if let Some(message) = problem {
        out.push(Finding::error(checks::IMAGE_RUNTIME, &path, None, message));
    }
}

/// Reads the configuration files directly in `dir` (symlinks followed). A configuration file
/// that is a link leading nowhere inside the image (dangling or looping), or not a regular file,
/// comes back as a `module/parse` finding naming it: the runtime fails to load such a directory.
fn config_files(fs: &Fs, dir: &str, display_dir: &str) -> (Vec<SourceFile>, Vec<Finding>) {
    let mut files = Vec::new();
    let mut findings = Vec::new();
    for name in fs.children(dir) {
        if !is_config_file(&name) {
            continue;
        }
        let path = join(dir, &name);
        let display = format!("{display_dir}/{name}");
        let unreadable = |why: &str| Finding::error(checks::MODULE_PARSE, &display, None, why);
        match fs.resolve(&path) {
            Some((
                _,
                Entry {
                    kind: EntryKind::File { .. },
                    ..
                },
            )) => {}
            Some((
                _,
                Entry {
                    kind: EntryKind::Dir,
                    ..
                },
            )) => continue,
            Some(_) => {
                findings.push(unreadable("not a regular file; the runtime cannot load it"));
                continue;
            }
            None => {
                findings.push(unreadable(
                    "a symbolic link that leads nowhere inside the image (dangling or looping); the runtime fails to load the module",
                ));
                continue;
            }
        }
        match fs.read(&path).map(|d| String::from_utf8(d.to_vec())) {
            Some(Ok(text)) => files.push(SourceFile {
                name,
                display,
                text,
            }),
            Some(Err(_)) => findings.push(Finding::error(
                checks::MODULE_PARSE,
                &display,
                Some(1),
                "the file is not UTF-8",
            )),
            None => findings.push(unreadable("its contents could not be read from the image")),
        }
    }
    (files, findings)
}

/// Checks `/captf/module` and lints the module in it; returns its resolved path.
fn module_dir(fs: &Fs, role: Role, runtime: Runtime, out: &mut Vec<Finding>) -> Option<String> {
    let display = shown(MODULE_PATH);
    match fs.resolve(MODULE_PATH) {
        None => {
            out.push(Finding::error(
                checks::IMAGE_MODULE,
                &display,
                None,
                "/captf/module is missing: copy the module there (COPY . /captf/module)",
            ));
            None
        }
        Some((_, entry)) if entry.kind != EntryKind::Dir => {
            out.push(Finding::error(
                checks::IMAGE_MODULE,
                &display,
                None,
                "/captf/module is not a directory",
            ));
            None
        }
        Some((resolved, _)) => {
            let (files, unreadable) = config_files(fs, &resolved, &display);
            if files.is_empty() && unreadable.is_empty() {
                out.push(Finding::error(
                    checks::IMAGE_MODULE,
                    &display,
                    None,
                    "/captf/module holds no .tf, .tf.json, .tofu or .tofu.json file",
                ));
            } else if !unreadable.is_empty() {
                out.extend(unreadable);
            } else {
                out.extend(module::lint_sources_for(files, role, &display, runtime).1);
            }
            Some(resolved)
        }
    }
}

fn permissions(fs: &Fs, dir: &str, user: &User, out: &mut Vec<Finding>) {
    if !matches!(user, User::Known { .. }) {
        return;
    }
    let mut denied: Vec<String> = Vec::new();
    for (path, entry) in fs.descendants(dir) {
        let ok = match entry.kind {
            EntryKind::Dir => allowed(entry, user, 5),
            EntryKind::File { .. } => allowed(entry, user, 4),
            _ => true,
        };
        if !ok {
            denied.push(path.clone());
        }
    }
    if !denied.is_empty() {
        out.push(Finding::warning(
            checks::IMAGE_PERMISSIONS,
            shown(dir),
            None,
            format!(
                "{} path(s) cannot be read (or traversed) by the image user: {}; chown them to the image user or make them world-readable",
                denied.len(),
                listing(&denied)
            ),
        ));
    }
}

/// A provider's registry address; `host` is `None` for the runtime's default registry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ProviderAddress {
    host: Option<String>,
    namespace: String,
    kind: String,
}

fn provider_address(req: &module::load::ProviderRequirement) -> Option<ProviderAddress> {
    let source = req
        .source
        .clone()
        .unwrap_or_else(|| req.local_name.clone())
        .to_lowercase();
    let parts: Vec<&str> = source.split('/').collect();
    let address = match parts.as_slice() {
        [kind] => ProviderAddress {
            host: None,
            namespace: "hashicorp".into(),
            kind: (*kind).into(),
        },
        [ns, kind] => ProviderAddress {
            host: None,
            namespace: (*ns).into(),
            kind: (*kind).into(),
        },
        [host, ns, kind] => ProviderAddress {
            host: Some((*host).into()),
            namespace: (*ns).into(),
            kind: (*kind).into(),
        },
        _ => return None,
    };
    if address.host.as_deref() == Some("terraform.io") && address.namespace == "builtin" {
        return None;
    }
    Some(address)
}

/// Every provider the module and its local submodules require.
fn required_providers(fs: &Fs, module_dir: &str) -> BTreeSet<ProviderAddress> {
    let mut found = BTreeSet::new();
    let mut visited = BTreeSet::new();
    let mut pending = vec![(module_dir.to_owned(), 0usize)];
    while let Some((dir, depth)) = pending.pop() {
        if depth > MAX_MODULE_DEPTH || !visited.insert(dir.clone()) {
            continue;
        }
        let (module, _) = module::load(config_files(fs, &dir, "").0);
        found.extend(
            module
                .required_providers
                .iter()
                .filter_map(provider_address),
        );
        for source in &module.module_sources {
            if (source.starts_with("./") || source.starts_with("../"))
                && let Some((sub, entry)) = fs.resolve(&join(&dir, source))
                && entry.kind == EntryKind::Dir
            {
                pending.push((sub, depth + 1));
            }
        }
    }
    found
}

fn packed_target(name: &str, kind: &str) -> Option<String> {
    let rest = name
        .strip_prefix(&format!("terraform-provider-{kind}_"))?
        .strip_suffix(".zip")?;
    let mut parts = rest.rsplitn(3, '_');
    let arch = parts.next()?;
    let os = parts.next()?;
    let version = parts.next()?;
    (!version.is_empty() && is_target(&format!("{os}_{arch}"))).then(|| format!("{os}_{arch}"))
}

fn is_target(s: &str) -> bool {
    s.split_once('_').is_some_and(|(os, arch)| {
        let ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        ok(os) && ok(arch)
    })
}

fn is_dir(fs: &Fs, path: &str) -> Option<String> {
    match fs.resolve(path) {
        Some((resolved, entry)) if entry.kind == EntryKind::Dir => Some(resolved),
        _ => None,
    }
}

fn providers(
    fs: &Fs,
    module_dir: Option<&str>,
    config: &ImageConfig,
    platform: &Platform,
    user: &User,
    out: &mut Vec<Finding>,
) {
    let display = shown(PROVIDERS_PATH);
    let Some((mirror, entry)) = fs.resolve(PROVIDERS_PATH) else {
        return;
    };
    if entry.kind != EntryKind::Dir {
        out.push(Finding::error(
            checks::IMAGE_PROVIDERS_LAYOUT,
            &display,
            None,
            "/captf/providers is not a directory",
        ));
        return;
    }
    permissions(fs, &mirror, user, out);
    // (host, namespace, type) -> targets
    let mut packages: BTreeSet<(String, String, String, String)> = BTreeSet::new();
    let mut misplaced: Vec<String> = Vec::new();
    for host in fs.children(&mirror) {
        let host_path = join(&mirror, &host);
        let Some(host_dir) = is_dir(fs, &host_path) else {
            misplaced.push(host_path);
            continue;
        };
        for ns in fs.children(&host_dir) {
            let ns_path = join(&host_dir, &ns);
            let Some(ns_dir) = is_dir(fs, &ns_path) else {
                misplaced.push(ns_path);
                continue;
            };
            for kind in fs.children(&ns_dir) {
                let kind_path = join(&ns_dir, &kind);
                let Some(kind_dir) = is_dir(fs, &kind_path) else {
                    misplaced.push(kind_path);
                    continue;
                };
                for item in fs.children(&kind_dir) {
                    let item_path = join(&kind_dir, &item);
                    if let Some(version_dir) = is_dir(fs, &item_path) {
                        for target in fs.children(&version_dir) {
                            let target_path = join(&version_dir, &target);
                            if is_target(&target) && is_dir(fs, &target_path).is_some() {
                                packages.insert((
                                    host.to_lowercase(),
                                    ns.to_lowercase(),
                                    kind.to_lowercase(),
                                    target,
                                ));
                            } else {
                                misplaced.push(target_path);
                            }
                        }
                    } else if let Some(target) = packed_target(&item, &kind) {
                        packages.insert((
                            host.to_lowercase(),
                            ns.to_lowercase(),
                            kind.to_lowercase(),
                            target,
                        ));
                    } else if !std::path::Path::new(&item)
                        .extension()
                        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
                    {
                        misplaced.push(item_path);
                    }
                }
            }
        }
    }
    if !misplaced.is_empty() {
        out.push(Finding::error(
            checks::IMAGE_PROVIDERS_LAYOUT,
            &display,
            None,
            format!(
                "/captf/providers does not follow a filesystem mirror layout (HOST/NAMESPACE/TYPE/terraform-provider-TYPE_VERSION_OS_ARCH.zip or HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/): unexpected {}; build it with `tofu providers mirror`",
                listing(&misplaced)
            ),
        ));
    }
    let Some(module_dir) = module_dir else {
        return;
    };
    let default_hosts: Vec<&str> = match config.labels.get(LABEL_RUNTIME).map(String::as_str) {
        Some("tofu") => vec![TOFU_REGISTRY],
        Some("terraform") => vec![TERRAFORM_REGISTRY],
        _ => vec![TOFU_REGISTRY, TERRAFORM_REGISTRY],
    };
    let target = platform.mirror_target();
    for req in required_providers(fs, module_dir) {
        let hosts: Vec<String> = match &req.host {
            Some(h) => vec![h.clone()],
            None => default_hosts.iter().map(|h| (*h).to_owned()).collect(),
        };
        let present = hosts.iter().any(|h| {
            packages.contains(&(
                h.clone(),
                req.namespace.clone(),
                req.kind.clone(),
                target.clone(),
            ))
        });
        if !present {
            out.push(Finding::error(
                checks::IMAGE_PROVIDERS_MISSING,
                &display,
                None,
                format!(
                    "the mirror has no {target} package of required provider {}/{}/{}: the runner installs providers from the mirror only; mirror it with -platform={target}",
                    hosts.join("|"),
                    req.namespace,
                    req.kind
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for q in ["4", "16Gi", "500m", "1.5", "1e3", "100Mi", "+2"] {
            assert!(is_quantity(q), "{q}");
        }
        for q in ["", "Gi", "4 Gi", "4GB", "1..2", "abc", "."] {
            assert!(!is_quantity(q), "{q}");
        }
    }

    #[test]
    fn packed_names_and_versions() {
        assert_eq!(
            packed_target("terraform-provider-aws_5.1.0_linux_arm64.zip", "aws").as_deref(),
            Some("linux_arm64")
        );
        assert_eq!(
            packed_target("terraform-provider-aws_linux_arm64.zip", "aws"),
            None
        );
        assert!(is_version("1.12.6") && is_version("v1.16.4") && !is_version("latest"));
    }

    #[test]
    fn users() {
        let fs = Fs::new();
        assert_eq!(image_user("", &fs), User::Root);
        assert_eq!(image_user("0:0", &fs), User::Root);
        assert_eq!(image_user("root", &fs), User::Root);
        assert_eq!(
            image_user("65532", &fs),
            User::Known {
                uid: 65532,
                gid: None
            }
        );
        assert_eq!(image_user("captf", &fs), User::Unknown);
    }
}
