//! Best-effort progress events (Observability "Events"; INTERFACE-FACTS §2 "Runner events"):
//! `events.k8s.io/v1` Events on the object that owns the Job, related to the Job, reporting
//! controller `captf.io/runner`. They carry step names, exit codes, durations, counts and the
//! curated failure summary — never a value, plan output or raw stderr.
//!
//! Posting never fails or stalls the run: events queue to a background task that posts them in
//! order with a short per-request timeout and stops posting after a few failures; at the end the
//! queue gets a bounded time to drain. The client uses the pod's service-account token and the
//! in-cluster CA file as its only trust root (no system roots are consulted).

use std::path::PathBuf;
use std::time::Duration;

use api::constants::events::runner::RUNNER_CONTROLLER;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::cli::EventObject;

/// Timeout of one request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Failures after which posting stops for the rest of the run.
pub const MAX_FAILURES: u32 = 3;
/// The most bytes of an event note (the API's limit is 1 KiB).
pub const MAX_NOTE_BYTES: usize = 1024;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Progress.
    Normal,
    /// A failure.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub type_: EventType,
    /// One of `api::constants::events::runner`.
    pub reason: &'static str,
    /// What the runner was doing (`Run`, a step name, `Plan`).
    pub action: String,
    /// The human-readable note (capped to 1 KiB).
    pub note: String,
}

/// Where events go: a queue to a posting task, or nowhere.
#[derive(Debug)]
pub struct EventSink {
    tx: Option<mpsc::UnboundedSender<Note>>,
    task: Option<JoinHandle<()>>,
}

/// What an event refers to.
#[derive(Debug, Clone)]
struct Target {
    object: EventObject,
    job: Option<String>,
    instance: String,
}

impl EventSink {
    /// A sink that posts nothing.
    pub fn disabled() -> Self {
        Self {
            tx: None,
            task: None,
        }
    }

    /// A sink posting on `object`, related to `job`, with the in-cluster service account (or
    /// `kubeconfig` when given). When no client can be built, events are disabled with a
    /// warning; the run goes on.
    pub async fn start(object: EventObject, job: &str, kubeconfig: Option<PathBuf>) -> Self {
        let client = match client(kubeconfig).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "events disabled: no API client");
                return Self::disabled();
            }
        };
        let target = Target {
            object,
            job: (!job.is_empty()).then(|| job.to_owned()),
            instance: instance_name(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(post_all(client, target, rx));
        Self {
            tx: Some(tx),
            task: Some(task),
        }
    }

    /// Queues an event.
    pub fn emit(&self, type_: EventType, reason: &'static str, action: &str, note: String) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Note {
                type_,
                reason,
                action: action.to_owned(),
                note,
            });
        }
    }

    /// Stops queuing and gives the queue up to `grace` to drain.
    pub async fn finish(mut self, grace: Duration) {
        self.tx = None;
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(grace, task).await.is_err() {
                warn!("events not all posted in time; giving up on the rest");
                abort.abort();
            }
        }
    }
}

/// A client from `kubeconfig`, else the pod's service account, with short timeouts and no retry.
pub(crate) async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, String> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path).map_err(|e| e.to_string())?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| e.to_string())?
        }
        None => kube::Config::incluster().map_err(|e| e.to_string())?,
    };
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    config.reset_reader_on_write = true;
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// The pod's name (the hostname), else `runner`.
fn instance_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
        })
        .unwrap_or_else(|| "runner".to_owned());
    crate::summary::cap(&host, 128)
}

async fn post_all(client: kube::Client, target: Target, mut rx: mpsc::UnboundedReceiver<Note>) {
    let api: Api<Event> = Api::namespaced(client, &target.object.namespace);
    let mut failures = 0;
    let mut seq: u32 = 0;
    while let Some(note) = rx.recv().await {
        if failures >= MAX_FAILURES {
            continue;
        }
        seq += 1;
        let event = build(&target, &note, seq, Timestamp::now());
        match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &event))
            .await
        {
            Ok(Ok(_)) => {
                failures = 0;
                debug!(reason = note.reason, "event posted");
            }
            Ok(Err(e)) => {
                failures += 1;
                warn!(reason = note.reason, error = %e, failures, "event not posted");
            }
            Err(_) => {
                failures += 1;
                warn!(
                    reason = note.reason,
                    failures, "event not posted: timed out"
                );
            }
        }
        if failures == MAX_FAILURES {
            warn!("too many event failures; no more events for this run");
        }
    }
}

/// The Event object for a note.
fn build(target: &Target, note: &Note, seq: u32, now: Timestamp) -> Event {
    let o = &target.object;
    // `<object>.<time><seq>` in hex: unique per run, a valid name for any object name.
    let stem: String = o.name.chars().take(200).collect();
    let name = format!(
        "{stem}.{:x}{:04x}",
        now.as_nanosecond().unsigned_abs() / 1000,
        seq
    );
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(o.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(RUNNER_CONTROLLER.to_owned()),
        reporting_instance: Some(target.instance.clone()),
        action: Some(crate::summary::cap(&note.action, 128)),
        reason: Some(note.reason.to_owned()),
        note: Some(crate::summary::cap(&note.note, MAX_NOTE_BYTES)),
        type_: Some(note.type_.as_str().to_owned()),
        regarding: Some(ObjectReference {
            api_version: Some(o.api_version.clone()),
            kind: Some(o.kind.clone()),
            namespace: Some(o.namespace.clone()),
            name: Some(o.name.clone()),
            uid: Some(o.uid.clone()),
            ..ObjectReference::default()
        }),
        related: target.job.as_ref().map(|job| ObjectReference {
            api_version: Some("batch/v1".to_owned()),
            kind: Some("Job".to_owned()),
            namespace: Some(o.namespace.clone()),
            name: Some(job.clone()),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_regards_the_object_and_relates_to_the_job() {
        let target = Target {
            object: crate::cli::parse_event_object(
                "infrastructure.cluster.x-k8s.io/v1alpha1/TerraformCluster/team-a/demo/uid-1",
            )
            .expect("object"),
            job: Some("captf-c-demo-apply-a1-abcdef".into()),
            instance: "pod-x".into(),
        };
        let note = Note {
            type_: EventType::Warning,
            reason: api::constants::events::runner::STEP_FAILED,
            action: "plan".into(),
            note: "n".repeat(3000),
        };
        let e = build(&target, &note, 7, Timestamp::UNIX_EPOCH);
        assert_eq!(e.reporting_controller.as_deref(), Some("captf.io/runner"));
        assert_eq!(e.reason.as_deref(), Some("StepFailed"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert!(e.note.as_ref().is_some_and(|n| n.len() <= MAX_NOTE_BYTES));
        assert_eq!(e.metadata.name.as_deref(), Some("demo.00007"));
        let r = e.regarding.expect("regarding");
        assert_eq!(r.kind.as_deref(), Some("TerraformCluster"));
        assert_eq!(r.uid.as_deref(), Some("uid-1"));
        let j = e.related.expect("related");
        assert_eq!(j.kind.as_deref(), Some("Job"));
        assert_eq!(j.name.as_deref(), Some("captf-c-demo-apply-a1-abcdef"));
    }
}
