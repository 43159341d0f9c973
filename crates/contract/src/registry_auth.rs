//! Registry credentials from image pull Secrets, as the kubelet reads them, for the manager's own
//! reads of an image's config (TerraformMachineTemplate capacity; spec: Image Contract "OCI
//! labels", Tuning Jobs `imagePullSecrets`).
//!
//! A pull Secret holds `.dockerconfigjson` (`{"auths": {KEY: ENTRY}}`) or the older
//! `.dockercfg` (`{KEY: ENTRY}`). A KEY names a registry host, with an optional port, scheme and
//! repository path prefix; an ENTRY holds `auth` (base64 of `user:password`) or `username` and
//! `password`. Docker Hub's aliases all match each other. Nothing here ever puts a credential in
//! an error or a `Debug` output.

use std::fmt;

use base64::Engine as _;
use serde_json::Value;

/// A username and password for one registry. Its `Debug` hides both.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The username.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

const DOCKER_HUB: &[&str] = &["docker.io", "index.docker.io", "registry-1.docker.io"];

fn canonical_host(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    if DOCKER_HUB.contains(&host.as_str()) {
        "docker.io".to_owned()
    } else {
        host
    }
}

/// Whether a config KEY applies to `registry` (host and optional port) and `repository`.
fn key_matches(key: &str, registry: &str, repository: &str) -> bool {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (host, path) = key.split_once('/').unwrap_or((key, ""));
    if canonical_host(host) != canonical_host(registry) {
        return false;
    }
    // Docker Hub's `https://index.docker.io/v1/` names the API version, not a repository.
    let path = path.trim_end_matches('/');
    if path.is_empty() || (canonical_host(host) == "docker.io" && path == "v1") {
        return true;
    }
    repository == path
        || repository
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn entry_credentials(entry: &Value) -> Result<Option<Credentials>, &'static str> {
    let Value::Object(map) = entry else {
        return Err("an entry is not an object");
    };
    let text = |k: &str| map.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    if let Some(auth) = text("auth") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| "an entry's auth is not base64")?;
        let decoded = String::from_utf8(decoded).map_err(|_| "an entry's auth is not UTF-8")?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or("an entry's auth is not user:password")?;
        return Ok(Some(Credentials {
            username: username.to_owned(),
            password: password.to_owned(),
        }));
    }
    match (text("username"), text("password")) {
        (Some(u), Some(p)) => Ok(Some(Credentials {
            username: u.to_owned(),
            password: p.to_owned(),
        })),
        _ => Ok(None),
    }
}

/// The credentials a pull Secret's config (`.dockerconfigjson` or `.dockercfg` bytes) holds for
/// `registry` (as in an image reference: host and optional port) and `repository`; `None` when
/// no entry matches. A longer matching KEY wins over a shorter one. The error names what is
/// malformed, never a value.
pub fn credentials_for(
    config: &[u8],
    registry: &str,
    repository: &str,
) -> Result<Option<Credentials>, &'static str> {
    let doc: Value = serde_json::from_slice(config).map_err(|_| "the config is not JSON")?;
    let auths = match doc.get("auths") {
        Some(a) => a,
        None => &doc,
    };
    let Value::Object(auths) = auths else {
        return Err("auths is not an object");
    };
    let mut best: Option<(usize, Credentials)> = None;
    for (key, entry) in auths {
        if !key_matches(key, registry, repository) {
            continue;
        }
        if let Some(c) = entry_credentials(entry)?
            && best.as_ref().is_none_or(|(len, _)| key.len() > *len)
        {
            best = Some((key.len(), c));
        }
    }
    Ok(best.map(|(_, c)| c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn dockerconfigjson_auth_field() {
        let cfg = format!(
            r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{}"}}}}}}"#,
            b64("alice:s3cret:with-colon")
        );
        let c = credentials_for(cfg.as_bytes(), "127.0.0.1:5000", "captf/noop")
            .expect("valid")
            .expect("match");
        assert_eq!(c.username, "alice");
        assert_eq!(c.password, "s3cret:with-colon");
        assert_eq!(format!("{c:?}"), "Credentials(<redacted>)");
        assert_eq!(
            credentials_for(cfg.as_bytes(), "127.0.0.1:5001", "captf/noop"),
            Ok(None),
            "another port is another registry"
        );
    }

    #[test]
    fn dockercfg_username_password_and_scheme() {
        let cfg = br#"{"https://registry.example.com":{"username":"u","password":"p"}}"#;
        let c = credentials_for(cfg, "registry.example.com", "a/b")
            .expect("valid")
            .expect("match");
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
    }

    #[test]
    fn docker_hub_aliases_and_path_prefixes() {
        let cfg = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"registry.example.com/team-a":{{"auth":"{}"}},"registry.example.com":{{"auth":"{}"}}}}}}"#,
            b64("hub:1"),
            b64("team:2"),
            b64("all:3")
        );
        let user = |reg: &str, repo: &str| {
            credentials_for(cfg.as_bytes(), reg, repo)
                .expect("valid")
                .map(|c| c.username)
        };
        assert_eq!(user("docker.io", "library/alpine").as_deref(), Some("hub"));
        assert_eq!(
            user("registry.example.com", "team-a/mod").as_deref(),
            Some("team")
        );
        assert_eq!(
            user("registry.example.com", "team-ab/mod").as_deref(),
            Some("all")
        );
        assert_eq!(user("other.example.com", "x"), None);
    }

    #[test]
    fn malformed_configs_name_no_value() {
        for (cfg, want) in [
            (&b"not json"[..], "the config is not JSON"),
            (br#"{"auths":[]}"#, "auths is not an object"),
            (br#"{"auths":{"h":"x"}}"#, "an entry is not an object"),
            (
                br#"{"auths":{"h":{"auth":"!!!secret!!!"}}}"#,
                "an entry's auth is not base64",
            ),
        ] {
            assert_eq!(credentials_for(cfg, "h", "r"), Err(want));
        }
        let no_colon = format!(r#"{{"auths":{{"h":{{"auth":"{}"}}}}}}"#, b64("nocolon"));
        assert_eq!(
            credentials_for(no_colon.as_bytes(), "h", "r"),
            Err("an entry's auth is not user:password")
        );
    }
}
