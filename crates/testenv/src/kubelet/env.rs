//! A container's environment, command line and user, computed the way the kubelet and containerd
//! compute them.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::Api;

use crate::image::ImageConfig;
use crate::shim::DEFAULT_PATH;

use super::status::POD_IP;

/// An ordered environment: later `set`s of a name replace its value in place.
#[derive(Debug, Default, Clone)]
pub(crate) struct EnvList {
    entries: Vec<(String, String)>,
}

impl EnvList {
    pub fn set(&mut self, name: &str, value: String) {
        if let Some(e) = self.entries.iter_mut().find(|(n, _)| n == name) {
            e.1 = value;
        } else {
            self.entries.push((name.to_owned(), value));
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn to_strings(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect()
    }
}

/// Kubernetes `$(VAR)` expansion: a defined `$(VAR)` is replaced, an undefined one is kept as
/// written, `$$` is an escaped `$`.
pub(crate) fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '$' && i + 1 < chars.len() {
            match chars[i + 1] {
                '$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                '(' => {
                    if let Some(close) = chars[i + 2..].iter().position(|c| *c == ')') {
                        let name: String = chars[i + 2..i + 2 + close].iter().collect();
                        if let Some(v) = lookup(&name) {
                            out.push_str(&v);
                        } else {
                            out.push_str("$(");
                            out.push_str(&name);
                            out.push(')');
                        }
                        i += close + 3;
                        continue;
                    }
                }
                _ => {}
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// Fetches Secrets and ConfigMaps of the pod's namespace once per container start.
pub(crate) struct Sources<'a> {
    pub client: &'a kube::Client,
    pub namespace: &'a str,
    secrets: BTreeMap<String, Option<Secret>>,
    config_maps: BTreeMap<String, Option<ConfigMap>>,
}

impl<'a> Sources<'a> {
    pub fn new(client: &'a kube::Client, namespace: &'a str) -> Self {
        Self {
            client,
            namespace,
            secrets: BTreeMap::new(),
            config_maps: BTreeMap::new(),
        }
    }

    pub async fn secret(&mut self, name: &str) -> Result<Option<Secret>, String> {
        if let Some(s) = self.secrets.get(name) {
            return Ok(s.clone());
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace);
        let s = api
            .get_opt(name)
            .await
            .map_err(|e| format!("getting secret {}/{name}: {e}", self.namespace))?;
        self.secrets.insert(name.to_owned(), s.clone());
        Ok(s)
    }

    pub async fn config_map(&mut self, name: &str) -> Result<Option<ConfigMap>, String> {
        if let Some(c) = self.config_maps.get(name) {
            return Ok(c.clone());
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.namespace);
        let c = api
            .get_opt(name)
            .await
            .map_err(|e| format!("getting configmap {}/{name}: {e}", self.namespace))?;
        self.config_maps.insert(name.to_owned(), c.clone());
        Ok(c)
    }
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

fn config_map_data(c: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = c
        .binary_data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in c.data.clone().unwrap_or_default() {
        out.insert(k, v.into_bytes());
    }
    out
}

/// The data of a Secret (`secret == true`) or ConfigMap: `Ok(None)` when it is missing.
pub(crate) async fn source_data(
    sources: &mut Sources<'_>,
    secret: bool,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    if secret {
        Ok(sources.secret(name).await?.as_ref().map(secret_data))
    } else {
        Ok(sources
            .config_map(name)
            .await?
            .as_ref()
            .map(config_map_data))
    }
}

/// The value of a downward-API `fieldRef` path.
pub(crate) fn field_ref(pod: &Pod, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_key = |prefix: &str| -> Option<String> {
        path.strip_prefix(prefix)?
            .strip_suffix("']")
            .map(str::to_owned)
    };
    let fmt_map = |m: Option<&BTreeMap<String, String>>| -> String {
        m.map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => fmt_map(meta.labels.as_ref()),
        "metadata.annotations" => fmt_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => POD_IP.to_owned(),
        // The kubelet stamps the address it gave the pod into the status it hands here.
        "status.podIP" | "status.podIPs" => pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_else(|| POD_IP.to_owned()),
        _ => {
            if let Some(k) = map_key("metadata.labels['") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else if let Some(k) = map_key("metadata.annotations['") {
                meta.annotations
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else {
                return Err(format!("unsupported fieldRef {path:?}"));
            }
        }
    })
}

/// The variables a kubelet sets for the `kubernetes` Service (here: the API server itself).
fn service_env(env: &mut EnvList, api_host: &str, api_port: u16) {
    let url = format!("tcp://{api_host}:{api_port}");
    env.set("KUBERNETES_SERVICE_HOST", api_host.to_owned());
    env.set("KUBERNETES_SERVICE_PORT", api_port.to_string());
    env.set("KUBERNETES_SERVICE_PORT_HTTPS", api_port.to_string());
    env.set("KUBERNETES_PORT", url.clone());
    env.set(&format!("KUBERNETES_PORT_{api_port}_TCP"), url);
    env.set(
        &format!("KUBERNETES_PORT_{api_port}_TCP_PROTO"),
        "tcp".to_owned(),
    );
    env.set(
        &format!("KUBERNETES_PORT_{api_port}_TCP_PORT"),
        api_port.to_string(),
    );
    env.set(
        &format!("KUBERNETES_PORT_{api_port}_TCP_ADDR"),
        api_host.to_owned(),
    );
}

/// The environment the kubelet computes for a container (`envFrom`, then `env`, over the
/// service variables), before the runtime merges the image's `Env` under it.
pub(crate) async fn kubelet_env(
    sources: &mut Sources<'_>,
    pod: &Pod,
    c: &Container,
    api_host: &str,
    api_port: u16,
) -> Result<EnvList, String> {
    let ns = sources.namespace.to_owned();
    let mut env = EnvList::default();
    service_env(&mut env, api_host, api_port);
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (secret, name, optional) = if let Some(s) = &from.secret_ref {
            (true, s.name.clone(), s.optional.unwrap_or(false))
        } else if let Some(cm) = &from.config_map_ref {
            (false, cm.name.clone(), cm.optional.unwrap_or(false))
        } else {
            continue;
        };
        match source_data(sources, secret, &name).await? {
            Some(data) => {
                for (k, v) in data {
                    env.set(
                        &format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v).into_owned(),
                    );
                }
            }
            None if optional => {}
            None => {
                let kind = if secret { "secret" } else { "configmap" };
                return Err(format!("{kind} \"{name}\" not found"));
            }
        }
    }
    for var in c.env.iter().flatten() {
        let value = if let Some(vf) = &var.value_from {
            if let Some(r) = &vf.secret_key_ref {
                key_ref(
                    sources,
                    true,
                    &r.name,
                    &r.key,
                    r.optional.unwrap_or(false),
                    &ns,
                )
                .await?
            } else if let Some(r) = &vf.config_map_key_ref {
                key_ref(
                    sources,
                    false,
                    &r.name,
                    &r.key,
                    r.optional.unwrap_or(false),
                    &ns,
                )
                .await?
            } else if let Some(f) = &vf.field_ref {
                Some(field_ref(pod, &f.field_path)?)
            } else if vf.resource_field_ref.is_some() {
                return Err(format!(
                    "env {}: resourceFieldRef is not supported by the process kubelet",
                    var.name
                ));
            } else {
                return Err(format!("env {}: unsupported valueFrom", var.name));
            }
        } else {
            let raw = var.value.clone().unwrap_or_default();
            Some(expand(&raw, |n| env.get(n).map(str::to_owned)))
        };
        if let Some(v) = value {
            env.set(&var.name, v);
        }
    }
    Ok(env)
}

async fn key_ref(
    sources: &mut Sources<'_>,
    secret: bool,
    name: &str,
    key: &str,
    optional: bool,
    ns: &str,
) -> Result<Option<String>, String> {
    let kind = if secret { "Secret" } else { "ConfigMap" };
    match source_data(sources, secret, name).await? {
        Some(data) => match data.get(key) {
            Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            None if optional => Ok(None),
            None => Err(format!("couldn't find key {key} in {kind} {ns}/{name}")),
        },
        None if optional => Ok(None),
        None => Err(format!("{} \"{name}\" not found", kind.to_lowercase())),
    }
}

/// The final environment: the image's `Env`, overridden by the kubelet's, plus `HOSTNAME`, and
/// `PATH`/`HOME` defaults when neither sets them.
pub(crate) fn final_env(
    image: &ImageConfig,
    kubelet: &EnvList,
    hostname: &str,
    home: &str,
) -> Vec<String> {
    let mut env = EnvList::default();
    env.set("PATH", DEFAULT_PATH.to_owned());
    env.set("HOSTNAME", hostname.to_owned());
    for e in image.env.iter().flatten() {
        if let Some((k, v)) = e.split_once('=') {
            env.set(k, v.to_owned());
        }
    }
    for (k, v) in &kubelet.entries {
        env.set(k, v.clone());
    }
    if env.get("HOME").is_none() {
        env.set("HOME", home.to_owned());
    }
    env.to_strings()
}

/// The command line: `command` (else the image's `Entrypoint`) followed by `args` (else the
/// image's `Cmd`, only when `command` is not set), with `$(VAR)` expanded from the kubelet's
/// environment.
pub(crate) fn command_line(
    c: &Container,
    image: &ImageConfig,
    env: &EnvList,
) -> Result<Vec<String>, String> {
    let lookup = |n: &str| env.get(n).map(str::to_owned);
    let mut argv: Vec<String> = match &c.command {
        Some(cmd) if !cmd.is_empty() => cmd.iter().map(|a| expand(a, lookup)).collect(),
        _ => image.entrypoint.clone().unwrap_or_default(),
    };
    match &c.args {
        Some(args) if !args.is_empty() => argv.extend(args.iter().map(|a| expand(a, lookup))),
        _ if c.command.as_ref().is_none_or(Vec::is_empty) => {
            argv.extend(image.cmd.clone().unwrap_or_default());
        }
        _ => {}
    }
    if argv.is_empty() {
        return Err("no command specified".to_owned());
    }
    Ok(argv)
}

/// Who a container runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: String,
}

struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
    home: String,
}

fn read_image_file(rootfs: &Path, path: &str) -> String {
    crate::shim::secure_join(rootfs, path)
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}

fn passwd(rootfs: &Path) -> Vec<PasswdEntry> {
    read_image_file(rootfs, "/etc/passwd")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 6).then(|| PasswdEntry {
                name: f[0].to_owned(),
                uid: f[2].parse().unwrap_or(u32::MAX),
                gid: f[3].parse().unwrap_or(0),
                home: f[5].to_owned(),
            })
        })
        .collect()
}

/// `(name, gid, members)` of the image's `/etc/group`.
fn groups(rootfs: &Path) -> Vec<(String, u32, Vec<String>)> {
    read_image_file(rootfs, "/etc/group")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4).then(|| {
                (
                    f[0].to_owned(),
                    f[2].parse().unwrap_or(u32::MAX),
                    f[3].split(',')
                        .filter(|m| !m.is_empty())
                        .map(str::to_owned)
                        .collect(),
                )
            })
        })
        .collect()
}

/// Resolves the user of a container from its and the pod's security context and the image's
/// `User`, enforcing `runAsNonRoot` the way the kubelet does.
pub(crate) fn run_as(
    pod: &Pod,
    c: &Container,
    image: &ImageConfig,
    rootfs: &Path,
) -> Result<RunAs, String> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let run_as_user = csc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user));
    let run_as_group = csc
        .and_then(|s| s.run_as_group)
        .or_else(|| psc.and_then(|s| s.run_as_group));
    let non_root = csc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let who = format!("pod: \"{pod_name}\", container: {}", c.name);

    let image_user = image.user.clone().unwrap_or_default();
    let (image_u, image_g) = match image_user.split_once(':') {
        Some((u, g)) => (u.to_owned(), Some(g.to_owned())),
        None => (image_user.clone(), None),
    };
    if non_root {
        match run_as_user {
            Some(0) => {
                return Err(format!(
                    "container's runAsUser breaks non-root policy ({who})"
                ));
            }
            Some(_) => {}
            None => {
                if image_u.is_empty() {
                    return Err(format!(
                        "container has runAsNonRoot and image will run as root ({who})"
                    ));
                }
                match image_u.parse::<u32>() {
                    Ok(0) => {
                        return Err(format!(
                            "container has runAsNonRoot and image will run as root ({who})"
                        ));
                    }
                    Ok(_) => {}
                    Err(_) => {
                        return Err(format!(
                            "container has runAsNonRoot and image has non-numeric user ({image_u}), cannot verify user is non-root ({who})"
                        ));
                    }
                }
            }
        }
    }

    let users = passwd(rootfs);
    let all_groups = groups(rootfs);
    let (uid, mut gid) = if let Some(u) = run_as_user {
        let uid = u32::try_from(u).map_err(|_| format!("invalid runAsUser {u}"))?;
        (
            uid,
            users.iter().find(|p| p.uid == uid).map_or(0, |p| p.gid),
        )
    } else if image_u.is_empty() {
        (0, 0)
    } else if let Ok(uid) = image_u.parse::<u32>() {
        (
            uid,
            users.iter().find(|p| p.uid == uid).map_or(0, |p| p.gid),
        )
    } else {
        let p = users.iter().find(|p| p.name == image_u).ok_or_else(|| {
            format!("unable to find user {image_u}: no matching entries in passwd file")
        })?;
        (p.uid, p.gid)
    };
    if run_as_user.is_none()
        && let Some(g) = &image_g
    {
        gid = match g.parse::<u32>() {
            Ok(g) => g,
            Err(_) => all_groups
                .iter()
                .find(|(n, _, _)| n == g)
                .map(|(_, id, _)| *id)
                .ok_or_else(|| {
                    format!("unable to find group {g}: no matching entries in group file")
                })?,
        };
    }
    if let Some(g) = run_as_group {
        gid = u32::try_from(g).map_err(|_| format!("invalid runAsGroup {g}"))?;
    }

    let mut extra: Vec<u32> = Vec::new();
    if let Some(name) = users.iter().find(|p| p.uid == uid).map(|p| p.name.clone()) {
        extra.extend(
            all_groups
                .iter()
                .filter(|(_, _, members)| members.contains(&name))
                .map(|(_, id, _)| *id),
        );
    }
    for g in psc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default()
    {
        extra.push(u32::try_from(g).map_err(|_| format!("invalid supplemental group {g}"))?);
    }
    if let Some(g) = psc.and_then(|s| s.fs_group) {
        extra.push(u32::try_from(g).map_err(|_| format!("invalid fsGroup {g}"))?);
    }
    let mut seen = std::collections::BTreeSet::new();
    let groups: Vec<u32> = extra.into_iter().filter(|g| seen.insert(*g)).collect();
    let home = users
        .iter()
        .find(|p| p.uid == uid)
        .map_or_else(|| "/".to_owned(), |p| p.home.clone());
    Ok(RunAs {
        uid,
        gid,
        groups,
        home,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_kubernetes() {
        let lookup = |n: &str| (n == "A").then(|| "x".to_owned());
        assert_eq!(expand("$(A)/$(B)", lookup), "x/$(B)");
        assert_eq!(expand("$$(A)", lookup), "$(A)");
        assert_eq!(expand("a$$b", lookup), "a$b");
        assert_eq!(expand("$(A", lookup), "$(A");
        assert_eq!(expand("$", lookup), "$");
        assert_eq!(expand("$x", lookup), "$x");
    }

    #[test]
    fn command_line_follows_the_entrypoint_rules() {
        let image = ImageConfig {
            entrypoint: Some(vec!["/ep".into()]),
            cmd: Some(vec!["c1".into()]),
            ..Default::default()
        };
        let env = EnvList::default();
        let mut c = Container::default();
        assert_eq!(command_line(&c, &image, &env).unwrap(), ["/ep", "c1"]);
        c.args = Some(vec!["a".into()]);
        assert_eq!(command_line(&c, &image, &env).unwrap(), ["/ep", "a"]);
        c.command = Some(vec!["/cmd".into()]);
        assert_eq!(command_line(&c, &image, &env).unwrap(), ["/cmd", "a"]);
        c.args = None;
        assert_eq!(command_line(&c, &image, &env).unwrap(), ["/cmd"]);
    }

    #[test]
    fn run_as_non_root_refuses_root() {
        let dir = tempfile::tempdir().unwrap();
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.security_context = Some(k8s_openapi::api::core::v1::SecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        });
        let root_image = ImageConfig::default();
        assert!(
            run_as(&pod, &c, &root_image, dir.path())
                .unwrap_err()
                .contains("will run as root")
        );
        let named = ImageConfig {
            user: Some("captf".into()),
            ..Default::default()
        };
        assert!(
            run_as(&pod, &c, &named, dir.path())
                .unwrap_err()
                .contains("non-numeric")
        );
        let ok = ImageConfig {
            user: Some("65532:65532".into()),
            ..Default::default()
        };
        let r = run_as(&pod, &c, &ok, dir.path()).unwrap();
        assert_eq!((r.uid, r.gid), (65532, 65532));
    }
}
