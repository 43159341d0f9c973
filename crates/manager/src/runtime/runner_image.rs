//! Which runner image the Jobs' init container runs (Installation, "The runner image"):
//! `--runner-image` when given, else the image of the manager pod's own init container
//! `runner-image`. The shipped Deployment names the runner image only there, in a container's
//! `image:` field, so `clusterctl init`'s image overrides and `clusterctl init list-images` see it
//! and an air-gapped install mirrors it with the rest.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;

/// The init container of the manager's pod whose image is the runner image.
pub const INIT_CONTAINER: &str = "runner-image";

/// The image of `pod`'s init container [`INIT_CONTAINER`], if it has one with an image.
pub fn of_pod(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == INIT_CONTAINER)?
        .image
        .clone()
        .filter(|i| !i.is_empty())
}

/// `flag` when it is not empty; else the runner image of the manager's own pod
/// `namespace/pod` (from `$POD_NAMESPACE` and `$POD_NAME`). An error says what to set.
pub async fn resolve(
    client: &kube::Client,
    flag: &str,
    namespace: &str,
    pod: Option<&str>,
) -> anyhow::Result<String> {
    if !flag.is_empty() {
        return Ok(flag.to_owned());
    }
    let Some(pod) = pod.filter(|p| !p.is_empty()) else {
        anyhow::bail!(
            "--runner-image is empty and $POD_NAME is unset: set --runner-image (or $CAPTF_MANAGER_IMAGE) to an image holding /runner, or run the manager in a pod with an init container named {INIT_CONTAINER}"
        );
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let own = api.get(pod).await.map_err(|e| {
        anyhow::anyhow!("reading the manager's own pod {namespace}/{pod} for the runner image: {e}")
    })?;
    of_pod(&own).ok_or_else(|| {
        anyhow::anyhow!(
            "--runner-image is empty and the manager's pod {namespace}/{pod} has no init container named {INIT_CONTAINER}: set --runner-image to an image holding /runner"
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(init: &[(&str, &str)]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m"},
            "spec": {
                "containers": [{"name": "manager", "image": "registry.example/captf:v1"}],
                "initContainers": init
                    .iter()
                    .map(|(n, i)| serde_json::json!({"name": n, "image": i}))
                    .collect::<Vec<_>>(),
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_runner_image_is_the_named_init_containers_never_the_managers() {
        assert_eq!(
            of_pod(&pod(&[
                ("other", "registry.example/other:v1"),
                ("runner-image", "mirror.example/captf-runner:v1"),
            ])),
            Some("mirror.example/captf-runner:v1".to_owned())
        );
        assert_eq!(of_pod(&pod(&[])), None);
        assert_eq!(of_pod(&pod(&[("runner-image", "")])), None);
        assert_eq!(of_pod(&Pod::default()), None);
    }
}
