//! Why a pass failed (ENGINEERING.md §3 "Errors have a category"): the one error type of a pass,
//! shared by every step, kind and state module below the reconcile core.

/// Why a pass failed (it is retried with the controller's error backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A value could not be serialised.
    #[error("serialisation: {0}")]
    Json(#[from] serde_json::Error),
    /// A cache was behind the API server where the pass must not act on what it showed: nothing
    /// was written, and the object is reconciled again shortly.
    #[error("cache behind the API server: {0}")]
    Stale(&'static str),
}

impl Error {
    /// A conflict on a write, or a cache found behind: nothing to report, only to look again.
    pub fn is_behind(&self) -> bool {
        match self {
            Self::Kube(e) => crate::runtime::kubeutil::is_conflict(e),
            Self::Stale(_) => true,
            Self::Json(_) => false,
        }
    }
}
