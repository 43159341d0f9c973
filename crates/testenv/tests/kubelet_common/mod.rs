//! Shared by the kubelet integration tests: one control plane (the lead's `TestEnv`), one
//! registry with the fixture image, and one process kubelet per test binary.
#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use testenv::TestEnv;
use testenv::kubelet::KubeletInfo;
use testenv::registry::Registry;

/// The environment of one test binary.
pub struct Shared {
    pub env: &'static TestEnv,
    pub kubelet: KubeletInfo,
    pub registry: &'static Registry,
    /// The fixture image (`captf-testenv` at `/fixture`), by digest.
    pub fixture: String,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn start() -> anyhow::Result<Shared> {
    let started = Instant::now();
    let env = TestEnv::shared()?;
    eprintln!("control plane ready after {:?}", started.elapsed());
    let registry = env.registry()?;
    let kubelet = env.kubelet()?.clone();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_captf-testenv"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let fixture = rt.block_on(testenv::image::fixture_image(
        &registry.host(),
        "captf/fixture",
        "test",
        &bin,
    ))?;
    eprintln!("test environment ready after {:?}", started.elapsed());
    Ok(Shared {
        env,
        kubelet,
        registry,
        fixture: fixture.to_string(),
    })
}

/// The shared environment, started on first use (on its own thread: tests call this from
/// inside their runtime).
pub fn shared() -> &'static Shared {
    SHARED.get_or_init(|| {
        std::thread::spawn(start)
            .join()
            .expect("starting the test environment panicked")
            .unwrap_or_else(|e| panic!("starting the test environment: {e:#}"))
    })
}

/// Polls the pod until `pred` holds (or panics after `timeout`, printing the last status).
pub async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    timeout: Duration,
    pred: impl Fn(&Pod) -> bool,
) -> Pod {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        if let Ok(Some(p)) = api.get_opt(name).await {
            if pred(&p) {
                return p;
            }
            last = Some(p);
        }
        assert!(
            Instant::now() <= deadline,
            "timed out waiting for pod {name}; last status: {}",
            serde_json::to_string_pretty(&last.and_then(|p| p.status)).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn terminated(
    p: &Pod,
    container: &str,
) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    let s = p.status.as_ref()?;
    s.container_statuses
        .iter()
        .chain(s.init_container_statuses.iter())
        .flatten()
        .find(|c| c.name == container)?
        .state
        .as_ref()?
        .terminated
        .clone()
}

/// Waits until the container's log contains `needle` (or panics after `timeout`).
pub async fn wait_log(ns: &str, pod: &str, container: &str, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let log = shared().kubelet.logs(ns, pod, container);
        if log.contains(needle) {
            return;
        }
        assert!(
            Instant::now() <= deadline,
            "timed out waiting for {needle:?} in the log of {ns}/{pod}/{container}:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates an object from JSON, waiting for the new namespace's `default` ServiceAccount (until
/// it exists, the ServiceAccount admission plugin refuses pods).
pub async fn create<K>(api: &Api<K>, value: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).expect("valid object");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(o) => return o,
            Err(kube::Error::Api(e))
                if e.code == 403
                    && e.message.contains("service account")
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("create: {e}"),
        }
    }
}
