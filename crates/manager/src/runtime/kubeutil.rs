//! Small helpers over the Kubernetes API used by every step of a pass.

use kube::Api;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// The kubelet's waiting reasons of a container whose image cannot be pulled.
pub const IMAGE_PULL_FAILURES: &[&str] = &["ErrImagePull", "ImagePullBackOff", "InvalidImageName"];

/// Whether an error is a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether an error is a 409 (already exists, or a stale resourceVersion).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Whether an error is a 422 (the API server refused the write as invalid).
pub fn is_invalid(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422)
}

/// `GET`, with a missing object as `None`.
pub async fn get_opt<K>(api: &Api<K>, name: &str) -> kube::Result<Option<K>>
where
    K: Clone + DeserializeOwned + Debug,
{
    match api.get(name).await {
        Ok(o) => Ok(Some(o)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `DELETE` in the background; a missing object is fine.
pub async fn delete_opt<K>(api: &Api<K>, name: &str) -> kube::Result<bool>
where
    K: Clone + DeserializeOwned + Debug,
{
    match api
        .delete(name, &kube::api::DeleteParams::background())
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether a Job finished, and how its Job conditions say it did.
pub fn finished_condition(
    job: &k8s_openapi::api::batch::v1::Job,
) -> Option<(
    bool,
    Option<String>,
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
)> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            (
                c.type_ == "Complete",
                c.reason.clone(),
                c.last_transition_time.clone(),
            )
        })
}
