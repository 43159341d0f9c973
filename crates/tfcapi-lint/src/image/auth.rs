//! Registry credentials, found the way docker and podman find them (spec: tfcapi-lint "Registry
//! credentials"): `$DOCKER_CONFIG/config.json` when `DOCKER_CONFIG` is set, else
//! `~/.docker/config.json`; when that file does not exist, a podman auth file at
//! `$REGISTRY_AUTH_FILE`, else `$XDG_RUNTIME_DIR/containers/auth.json`; with none, anonymous.
//! Credential helpers named by the file (`credHelpers`, `credsStore`) are run as docker runs them.

use docker_credential::DockerCredential;
use oci_client::secrets::RegistryAuth;
use std::ffi::OsString;
use std::io::BufReader;
use std::path::PathBuf;

/// Where credentials came from, for messages (never the credential itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthSource {
    /// No file named credentials for the registry.
    Anonymous,
    /// A docker or podman auth file.
    File(PathBuf),
}

/// The auth file to read, from the environment as given.
pub fn auth_file(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let docker = env("DOCKER_CONFIG")
        .map(|d| PathBuf::from(d).join("config.json"))
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".docker").join("config.json")));
    if let Some(path) = docker
        && path.is_file()
    {
        return Some(path);
    }
    let podman = env("REGISTRY_AUTH_FILE").map(PathBuf::from).or_else(|| {
        env("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("containers").join("auth.json"))
    });
    podman.filter(|p| p.is_file())
}

/// The keys a docker config may file a registry under.
fn server_keys(registry: &str) -> Vec<String> {
    let mut keys = vec![registry.to_owned()];
    if matches!(
        registry,
        "docker.io" | "index.docker.io" | "registry-1.docker.io"
    ) {
        keys.push("https://index.docker.io/v1/".to_owned());
        keys.push("docker.io".to_owned());
    }
    keys
}

/// Credentials for `registry` from the environment as given.
pub fn registry_auth_from(
    registry: &str,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> (RegistryAuth, AuthSource) {
    let Some(path) = auth_file(env) else {
        return (RegistryAuth::Anonymous, AuthSource::Anonymous);
    };
    for key in server_keys(registry) {
        let Ok(file) = std::fs::File::open(&path) else {
            break;
        };
        match docker_credential::get_credential_from_reader(BufReader::new(file), &key) {
            Ok(DockerCredential::UsernamePassword(user, password)) => {
                return (RegistryAuth::Basic(user, password), AuthSource::File(path));
            }
            Ok(DockerCredential::IdentityToken(token)) => {
                return (RegistryAuth::Bearer(token), AuthSource::File(path));
            }
            Err(_) => {}
        }
    }
    (RegistryAuth::Anonymous, AuthSource::Anonymous)
}

/// Credentials for `registry` from the process environment.
pub fn registry_auth(registry: &str) -> (RegistryAuth, AuthSource) {
    registry_auth_from(registry, &|name| std::env::var_os(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: HashMap<&'static str, OsString>) -> impl Fn(&str) -> Option<OsString> {
        move |k| vars.get(k).cloned()
    }

    #[test]
    fn docker_config_then_podman_then_anonymous() {
        let dir = tempfile::tempdir().unwrap();
        let docker = dir.path().join("docker");
        std::fs::create_dir_all(&docker).unwrap();
        // "user:pass" in base64.
        std::fs::write(
            docker.join("config.json"),
            r#"{"auths":{"registry.example:5000":{"auth":"dXNlcjpwYXNz"}}}"#,
        )
        .unwrap();
        let podman = dir.path().join("auth.json");
        std::fs::write(&podman, r#"{"auths":{"other.example":{"auth":"YTpi"}}}"#).unwrap();

        let env = env_of(HashMap::from([
            ("DOCKER_CONFIG", docker.clone().into_os_string()),
            ("REGISTRY_AUTH_FILE", podman.clone().into_os_string()),
        ]));
        let (auth, source) = registry_auth_from("registry.example:5000", &env);
        assert!(matches!(auth, RegistryAuth::Basic(ref u, ref p) if u == "user" && p == "pass"));
        assert_eq!(source, AuthSource::File(docker.join("config.json")));
        // The docker file exists, so podman's is not consulted.
        assert!(matches!(
            registry_auth_from("other.example", &env).0,
            RegistryAuth::Anonymous
        ));

        let env = env_of(HashMap::from([
            ("HOME", dir.path().join("nohome").into_os_string()),
            ("REGISTRY_AUTH_FILE", podman.clone().into_os_string()),
        ]));
        assert!(
            matches!(registry_auth_from("other.example", &env).0, RegistryAuth::Basic(ref u, _) if u == "a")
        );

        let env = env_of(HashMap::from([(
            "XDG_RUNTIME_DIR",
            dir.path().join("run").into_os_string(),
        )]));
        assert_eq!(
            registry_auth_from("other.example", &env).1,
            AuthSource::Anonymous
        );
    }
}
