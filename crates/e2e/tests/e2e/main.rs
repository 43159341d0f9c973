//! The end-to-end suite (issue 13): each test is a user's flow against Cluster API's real core,
//! kubeadm bootstrap and kubeadm control-plane managers and CAPTF's own manager and webhook
//! binaries, driven by `clusterctl` and the kube API as the book's commands are. All tests share
//! one environment (one process) and work in namespaces of their own.
//!
//! Figures the issue asks for are printed as `e2e figures:` lines (`cargo test -p captf-e2e --
//! --nocapture` shows them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod clusterclass;
mod control_plane_initialized;
mod flavors;
mod move_;
mod pause;
mod pools;
mod quickstart;
mod remediation;
mod scale;
mod workers;

use e2e::kube_ops::Kube;
use e2e::suite::Suite;

/// The suite, a client for this test's runtime, a namespace and an identity allowed in it (named
/// after the namespace, so tests never share one).
pub async fn setup(prefix: &str) -> anyhow::Result<(&'static Suite, Kube, String)> {
    let suite = Suite::shared()?;
    let kube = suite.kube().await?;
    let ns = suite.namespace(prefix).await?;
    Ok((suite, kube, ns))
}
