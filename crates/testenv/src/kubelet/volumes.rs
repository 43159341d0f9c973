//! Pod volumes under the kubelet's state directory: `emptyDir`, `hostPath`, and the
//! atomically written `secret`, `configMap`, `downwardAPI` and `projected` volumes (including
//! service-account tokens from the TokenRequest API), kept in sync while the pod runs.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{KeyToPath, Pod, ServiceAccount, Volume};
use kube::Api;
use kube::api::PostParams;

use super::env::{Sources, field_ref, source_data};

/// The files of an atomically written volume: relative path → (contents, mode).
type Files = BTreeMap<String, (Vec<u8>, u32)>;

const DEFAULT_MODE: u32 = 0o644;

#[derive(Debug)]
struct CachedToken {
    token: String,
    refresh_at: Instant,
}

/// The volumes of one pod.
#[derive(Debug)]
pub(crate) struct PodVolumes {
    /// Volume name → host directory.
    pub paths: HashMap<String, PathBuf>,
    /// Atomically written volumes: name → files last written.
    written: HashMap<String, Files>,
    tokens: HashMap<(String, i64), CachedToken>,
    fs_group: Option<u32>,
}

fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

/// Gives `path` the group `fs_group` the way the kubelet's `SetVolumeOwnership` does: group
/// ownership, group read (and write when not read-only), setgid on directories.
fn apply_fs_group(path: &Path, fs_group: u32, read_only: bool) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, None, Some(fs_group))?;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mut mask = if read_only { 0o440 } else { 0o660 };
    if meta.is_dir() {
        mask |= 0o2000 | 0o110;
    }
    let mode = meta.permissions().mode() & 0o7777;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | mask))
}

impl PodVolumes {
    /// Creates every volume of `pod` under `base`.
    pub async fn prepare(client: &kube::Client, pod: &Pod, base: &Path) -> anyhow::Result<Self> {
        let mut v = PodVolumes {
            paths: HashMap::new(),
            written: HashMap::new(),
            tokens: HashMap::new(),
            fs_group: fs_group(pod),
        };
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for vol in &volumes {
            let dir = base.join(&vol.name);
            if let Some(hp) = &vol.host_path {
                let p = PathBuf::from(&hp.path);
                if !p.exists() && hp.type_.as_deref() == Some("DirectoryOrCreate") {
                    std::fs::create_dir_all(&p)?;
                }
                v.paths.insert(vol.name.clone(), p);
                continue;
            }
            if vol.empty_dir.is_some() {
                std::fs::create_dir_all(&dir)?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
                if let Some(g) = v.fs_group {
                    apply_fs_group(&dir, g, false)?;
                }
                v.paths.insert(vol.name.clone(), dir);
                continue;
            }
            if vol.secret.is_none()
                && vol.config_map.is_none()
                && vol.projected.is_none()
                && vol.downward_api.is_none()
            {
                bail!("volume {}: unsupported volume type", vol.name);
            }
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
            if let Some(g) = v.fs_group {
                apply_fs_group(&dir, g, true)?;
            }
            v.paths.insert(vol.name.clone(), dir);
        }
        v.refresh(client, pod).await?;
        Ok(v)
    }

    /// Re-renders the secret, configMap, downwardAPI and projected volumes and rewrites those
    /// whose content changed (atomically: a new `..<timestamp>` directory, then `..data` swapped).
    pub async fn refresh(&mut self, client: &kube::Client, pod: &Pod) -> anyhow::Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let mut sources = Sources::new(client, &ns);
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for vol in &volumes {
            if vol.empty_dir.is_some() || vol.host_path.is_some() {
                continue;
            }
            let files = self
                .render(client, &mut sources, pod, vol)
                .await
                .with_context(|| format!("volume {}", vol.name))?;
            if self.written.get(&vol.name) == Some(&files) {
                continue;
            }
            let dir = self.paths[&vol.name].clone();
            let fs_group = self.fs_group;
            let f = files.clone();
            tokio::task::spawn_blocking(move || atomic_write(&dir, &f, fs_group))
                .await
                .context("volume write task")?
                .with_context(|| format!("writing volume {}", vol.name))?;
            if self.written.contains_key(&vol.name) {
                tracing::info!(volume = %vol.name, pod = ?pod.metadata.name, "volume content updated");
            }
            self.written.insert(vol.name.clone(), files);
        }
        Ok(())
    }

    async fn render(
        &mut self,
        client: &kube::Client,
        sources: &mut Sources<'_>,
        pod: &Pod,
        vol: &Volume,
    ) -> anyhow::Result<Files> {
        let mut files = Files::new();
        if let Some(s) = &vol.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let mode = s.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            add_source(
                &mut files,
                sources,
                true,
                &name,
                s.items.as_deref(),
                mode,
                s.optional.unwrap_or(false),
            )
            .await?;
        } else if let Some(c) = &vol.config_map {
            let mode = c.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            add_source(
                &mut files,
                sources,
                false,
                &c.name,
                c.items.as_deref(),
                mode,
                c.optional.unwrap_or(false),
            )
            .await?;
        } else if let Some(d) = &vol.downward_api {
            let mode = d.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            for item in d.items.iter().flatten() {
                add_downward(&mut files, pod, item, mode)?;
            }
        } else if let Some(p) = &vol.projected {
            let mode = p.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            for src in p.sources.iter().flatten() {
                if let Some(s) = &src.secret {
                    add_source(
                        &mut files,
                        sources,
                        true,
                        &s.name,
                        s.items.as_deref(),
                        mode,
                        s.optional.unwrap_or(false),
                    )
                    .await?;
                } else if let Some(c) = &src.config_map {
                    add_source(
                        &mut files,
                        sources,
                        false,
                        &c.name,
                        c.items.as_deref(),
                        mode,
                        c.optional.unwrap_or(false),
                    )
                    .await?;
                } else if let Some(d) = &src.downward_api {
                    for item in d.items.iter().flatten() {
                        add_downward(&mut files, pod, item, mode)?;
                    }
                } else if let Some(t) = &src.service_account_token {
                    let audience = t.audience.clone().unwrap_or_default();
                    let expiration = t.expiration_seconds.unwrap_or(3600);
                    let token = self.token(client, pod, &audience, expiration).await?;
                    files.insert(t.path.clone(), (token.into_bytes(), mode));
                } else {
                    bail!("unsupported projected volume source");
                }
            }
        }
        Ok(files)
    }

    /// A token for the pod's ServiceAccount, bound to the pod, from the TokenRequest API;
    /// re-requested after 80% of its lifetime (or 24 hours), as the kubelet does.
    async fn token(
        &mut self,
        client: &kube::Client,
        pod: &Pod,
        audience: &str,
        expiration: i64,
    ) -> anyhow::Result<String> {
        let key = (audience.to_owned(), expiration);
        if let Some(t) = self.tokens.get(&key)
            && Instant::now() < t.refresh_at
        {
            return Ok(t.token.clone());
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".to_owned());
        let request = TokenRequest {
            metadata: kube::api::ObjectMeta::default(),
            spec: Some(TokenRequestSpec {
                audiences: Some(if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience.to_owned()]
                }),
                expiration_seconds: Some(expiration),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".to_owned()),
                    kind: Some("Pod".to_owned()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            }),
            status: None,
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        let issued = Instant::now();
        let resp: TokenRequest = api
            .create_subresource("token", &sa, &PostParams::default(), &request)
            .await
            .with_context(|| format!("requesting a token for serviceaccount {ns}/{sa}"))?;
        let status = resp.status.context("token request without status")?;
        let token = status.token.context("token request without a token")?;
        let ttl = {
            let exp = status
                .expiration_timestamp
                .context("token request without an expiration")?
                .0;
            let secs = exp
                .duration_since(k8s_openapi::jiff::Timestamp::now())
                .as_secs();
            Duration::from_secs(u64::try_from(secs).unwrap_or(0))
        };
        let refresh = (ttl * 4 / 5).min(Duration::from_secs(24 * 3600));
        self.tokens.insert(
            key,
            CachedToken {
                token: token.clone(),
                refresh_at: issued + refresh,
            },
        );
        Ok(token)
    }
}

async fn add_source(
    files: &mut Files,
    sources: &mut Sources<'_>,
    secret: bool,
    name: &str,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: bool,
) -> anyhow::Result<()> {
    let kind = if secret { "Secret" } else { "ConfigMap" };
    let ns = sources.namespace.to_owned();
    let Some(data) = source_data(sources, secret, name)
        .await
        .map_err(anyhow::Error::msg)?
    else {
        if optional {
            return Ok(());
        }
        bail!("{} \"{name}\" not found", kind.to_lowercase());
    };
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => {
                        let m = item.mode.map_or(mode, |m| m as u32);
                        files.insert(item.path.clone(), (v.clone(), m));
                    }
                    None if optional => {}
                    None => bail!("couldn't find key {} in {kind} {ns}/{name}", item.key),
                }
            }
        }
        _ => {
            for (k, v) in data {
                files.insert(k, (v, mode));
            }
        }
    }
    Ok(())
}

fn add_downward(
    files: &mut Files,
    pod: &Pod,
    item: &k8s_openapi::api::core::v1::DownwardAPIVolumeFile,
    mode: u32,
) -> anyhow::Result<()> {
    let Some(f) = &item.field_ref else {
        bail!("downwardAPI item {}: only fieldRef is supported", item.path);
    };
    let value = field_ref(pod, &f.field_path).map_err(anyhow::Error::msg)?;
    let m = item.mode.map_or(mode, |m| m as u32);
    files.insert(item.path.clone(), (value.into_bytes(), m));
    Ok(())
}

/// Writes `files` into `dir` the way the kubelet's atomic writer does: the files go into a new
/// hidden `..<timestamp>` directory, the `..data` symlink is swapped to it with a rename, and each
/// top-level name is a symlink through `..data`; the previous directory is then removed. A
/// reader never sees a mix of old and new files.
fn atomic_write(dir: &Path, files: &Files, fs_group: Option<u32>) -> anyhow::Result<()> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let stamp = format!(
        "..{}_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let ts_dir = dir.join(&stamp);
    std::fs::create_dir(&ts_dir)?;
    std::fs::set_permissions(&ts_dir, std::fs::Permissions::from_mode(0o755))?;
    if let Some(g) = fs_group {
        apply_fs_group(&ts_dir, g, true)?;
    }
    for (rel, (content, mode)) in files {
        if rel.starts_with("..") || rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
            bail!("invalid volume path {rel:?}");
        }
        let path = ts_dir.join(rel);
        if let Some(parent) = path.parent()
            && parent != ts_dir
        {
            std::fs::create_dir_all(parent)?;
            if let Some(g) = fs_group {
                apply_fs_group(parent, g, true)?;
            }
        }
        std::fs::write(&path, content)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))?;
        if let Some(g) = fs_group {
            apply_fs_group(&path, g, true)?;
        }
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    symlink(&stamp, &tmp_link)?;
    std::fs::rename(&tmp_link, dir.join("..data"))?;

    let top: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|k| k.split('/').next().map(str::to_owned))
        .collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{name}"), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !top.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old
        && old != Path::new(&stamp)
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_swaps_content() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Files::new();
        files.insert("a".into(), (b"1".to_vec(), 0o440));
        files.insert("sub/b".into(), (b"2".to_vec(), 0o644));
        atomic_write(dir.path(), &files, None).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"1");
        assert_eq!(std::fs::read(dir.path().join("sub/b")).unwrap(), b"2");
        let mode = std::fs::metadata(dir.path().join("a"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o440);
        files.remove("sub/b");
        files.insert("a".into(), (b"3".to_vec(), 0o440));
        atomic_write(dir.path(), &files, None).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"3");
        assert!(!dir.path().join("sub").exists());
        let stamps = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let n = e
                    .as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(stamps, 1, "the old timestamp directory is removed");
    }
}
