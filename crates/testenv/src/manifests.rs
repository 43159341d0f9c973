//! Manifests as a user installs them (docs/src/installation.md): rendering `config/` with
//! `kustomize`, applying objects server-side the way `kubectl apply --server-side` does while
//! keeping the API server's warnings, and the CRDs of the third-party kinds `config/` uses
//! (cert-manager's Certificate and Issuer, the Prometheus Operator's ServiceMonitor), read from
//! the modules `hack/crds/go.mod` pins.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http_body_util::BodyExt as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::Value;

use crate::env::repo_root;

/// The output of `kustomize build <dir>` (the test binary `kustomize`).
pub fn kustomize_build(dir: &Path) -> anyhow::Result<String> {
    let kustomize = crate::testbin::path("kustomize")?;
    let out = Command::new(&kustomize)
        .arg("build")
        .arg(dir)
        .output()
        .with_context(|| format!("running {}", kustomize.display()))?;
    if !out.status.success() {
        bail!(
            "kustomize build {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).context("kustomize printed something that is not UTF-8")
}

/// The objects of a multi-document YAML text (empty documents skipped).
pub fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).context("parsing YAML documents")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Substitutes clusterctl's variables the way `clusterctl init` and `generate yaml` do:
/// `${NAME}` takes `values[NAME]`; `${NAME:=default}`, `${NAME=default}`, `${NAME:-default}` and
/// `${NAME-default}` fall back to `default`. A variable with neither a value nor a default is an
/// error naming it. `$(NAME)` (Kubernetes' own expansion) is left alone.
pub fn substitute_variables(
    text: &str,
    values: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut missing = Vec::new();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').with_context(|| {
            format!(
                "an unterminated variable: ${{{}",
                after.chars().take(40).collect::<String>()
            )
        })?;
        let body = &after[..end];
        let (name, default) = match body.find([':', '=', '-']) {
            Some(i) => {
                let d = &body[i..];
                let d = d
                    .strip_prefix(":=")
                    .or_else(|| d.strip_prefix(":-"))
                    .or_else(|| d.strip_prefix('='))
                    .or_else(|| d.strip_prefix('-'))
                    .with_context(|| format!("an unsupported variable form: ${{{body}}}"))?;
                (&body[..i], Some(d))
            }
            None => (body, None),
        };
        match (values.get(name), default) {
            (Some(v), _) => out.push_str(v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => missing.push(name.to_owned()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if !missing.is_empty() {
        bail!("value for variables [{}] is not set", missing.join(", "));
    }
    Ok(out)
}

/// The source directory of a module `hack/crds/go.mod` pins (downloaded through the Go module
/// proxy on first use).
fn pinned_module_dir(module: &str) -> anyhow::Result<PathBuf> {
    let out = Command::new("go")
        .args(["mod", "download", "-json", module])
        .current_dir(repo_root().join("hack/crds"))
        .env("GOFLAGS", "-mod=readonly")
        .env("GOWORK", "off")
        .env("GOTOOLCHAIN", "local")
        .output()
        .context("running go mod download (Go is needed for the third-party CRDs)")?;
    let info: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "go mod download {module}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    if let Some(e) = info.get("Error").and_then(Value::as_str) {
        bail!("go mod download {module}: {e}");
    }
    info.get("Dir")
        .and_then(Value::as_str)
        .map(PathBuf::from)
        .with_context(|| format!("go mod download {module} printed no directory"))
}

/// The CRD files of the third-party kinds `config/` uses.
pub fn third_party_crd_files() -> anyhow::Result<Vec<PathBuf>> {
    let cert_manager = pinned_module_dir("github.com/cert-manager/cert-manager")?;
    let prometheus = pinned_module_dir("github.com/prometheus-operator/prometheus-operator")?;
    let files = vec![
        cert_manager.join("deploy/crds/cert-manager.io_certificates.yaml"),
        cert_manager.join("deploy/crds/cert-manager.io_issuers.yaml"),
        prometheus
            .join("example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"),
        prometheus
            .join("example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"),
    ];
    for f in &files {
        anyhow::ensure!(f.is_file(), "no CRD file at {}", f.display());
    }
    Ok(files)
}

/// Applies CRDs server-side and waits until they are established.
pub async fn install_crds(client: &kube::Client, files: &[PathBuf]) -> anyhow::Result<()> {
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let params = PatchParams::apply("captf-testenv").force();
    let mut names = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let crds: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("parsing {}", file.display()))?;
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(&crd))
                .await
                .with_context(|| format!("installing CRD {name}"))?;
            names.push(name);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in &names {
        loop {
            if crate::control_plane::established(&api.get(name).await?) {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "CRD {name} is not established");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// What the API server said to one server-side apply.
#[derive(Debug, Clone)]
pub struct Applied {
    /// `Kind namespace/name`.
    pub object: String,
    /// The `Warning` headers of the response (the text of each).
    pub warnings: Vec<String>,
}

/// The text of a `Warning` header (`299 - "text"`).
fn warning_text(header: &str) -> String {
    let rest = header.splitn(3, ' ').nth(2).unwrap_or(header);
    rest.trim().trim_matches('"').replace("\\\"", "\"")
}

/// Applies one object server-side (`force`, as `field_manager`), as `kubectl apply
/// --server-side` does, and returns the API server's warnings. Fails with the API server's
/// message when it refuses the object.
pub async fn apply(
    client: &kube::Client,
    object: &Value,
    field_manager: &str,
) -> anyhow::Result<Applied> {
    let api_version = object["apiVersion"]
        .as_str()
        .context("an object without apiVersion")?;
    let kind = object["kind"].as_str().context("an object without kind")?;
    let name = object["metadata"]["name"]
        .as_str()
        .context("an object without a name")?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {api_version} {kind}"))?;
    let namespace = object["metadata"]["namespace"].as_str();
    let base = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    let url = match (&caps.scope, namespace) {
        (Scope::Namespaced, Some(ns)) => format!("{base}/namespaces/{ns}/{}", resource.plural),
        (Scope::Namespaced, None) => bail!("{kind} {name} is namespaced but names no namespace"),
        (Scope::Cluster, _) => format!("{base}/{}", resource.plural),
    };
    let label = format!(
        "{kind} {}{name}",
        namespace.map(|n| format!("{n}/")).unwrap_or_default()
    );
    let request = kube::core::Request::new(url)
        .patch(
            name,
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(object),
        )
        .with_context(|| format!("building the apply request of {label}"))?;
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .with_context(|| format!("applying {label}"))?;
    let status = response.status();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| warning_text(&String::from_utf8_lossy(v.as_bytes())))
        .collect();
    let body = response
        .into_body()
        .collect()
        .await
        .with_context(|| format!("reading the answer to applying {label}"))?
        .to_bytes();
    if !status.is_success() {
        bail!(
            "applying {label}: {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(Applied {
        object: label,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_take_their_value_or_their_default_and_a_missing_one_is_named() {
        let values = std::collections::BTreeMap::from([("A".to_owned(), "x".to_owned())]);
        let text = "a=${A} b=${B:=5} c=${C=on} d=${A:=no} k=$(KEEP)";
        assert_eq!(
            substitute_variables(text, &values).unwrap(),
            "a=x b=5 c=on d=x k=$(KEEP)"
        );
        let err = substitute_variables("${MISSING} ${ALSO}", &values).unwrap_err();
        assert_eq!(
            err.to_string(),
            "value for variables [MISSING, ALSO] is not set"
        );
    }

    #[test]
    fn a_warning_header_gives_its_text() {
        assert_eq!(
            warning_text(r#"299 - "spec.template.spec.containers[0].ports[1]: duplicate port""#),
            "spec.template.spec.containers[0].ports[1]: duplicate port"
        );
    }
}
