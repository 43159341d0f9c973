//! Best-effort progress events (Observability "Events"; INTERFACE-FACTS §2 "Runner events"):
//! `events.k8s.io/v1` Events on the object that owns the Job, related to the Job, reporting
//! controller `captf.io/runner`. They carry step names, exit codes, durations, counts and the
//! curated failure summary — never a value, plan output or raw stderr.
//!
//! Posting never fails or stalls the run: events queue to a background task that posts each one
//! as it arrives, without waiting for the ones before it, with a short per-request timeout, and
//! stops posting after a few failures; at the end the queue gets a bounded time to drain. Each
//! event's time is taken when the task takes it from the queue, at least a microsecond after the
//! one before, so `eventTime` keeps the run's order. The client speaks HTTP/2 when the API server
//! offers it (it does unless `--disable-http2-serving`), so the events in flight share one
//! connection and the last few of a run cost one round trip, not one each. It uses the pod's
//! service-account token and the in-cluster CA file as its only trust root (no system roots are
//! consulted).

use std::path::PathBuf;
use std::time::Duration;

use api::constants::events::next_event_time;
use api::constants::events::runner::RUNNER_CONTROLLER;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kube::client::ConfigExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

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

/// A client from `kubeconfig`, else the pod's service account, with short timeouts and no retry:
/// HTTP/2 when the server offers it, else HTTP/1.1.
pub(crate) async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path).map_err(|e| e.to_string())?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| e.to_string())?
        }
        None => kube::Config::incluster().map_err(|e| e.to_string())?,
    };
    http2_client(&config).map_err(|e| e.to_string())
}

/// The most any request of the runner's client may take (the plan-text Secret's store and
/// delete; an event gives up after [`REQUEST_TIMEOUT`]). kube's HTTP/1.1 client bounded each read
/// and write by `REQUEST_TIMEOUT` instead, which has no counterpart on a shared HTTP/2 connection.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// kube's own client stack (base URI, authentication) over a connector that offers `h2` and
/// `http/1.1` by ALPN: kube's default client offers only HTTP/1.1, where requests in flight at
/// once each need a connection of their own, each with its TLS handshake. No retry; a connection
/// is made within [`REQUEST_TIMEOUT`], a request answered within [`CALL_TIMEOUT`].
fn http2_client(config: &kube::Config) -> kube::Result<kube::Client> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(REQUEST_TIMEOUT));
    // HTTP/2 writes a request as several frames: without this, Nagle holds the last back
    // until the server acknowledges the first, a delayed ACK (40 ms) per event.
    http.set_nodelay(true);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let connector = builder.enable_all_versions().wrap_connector(http);
    let http_client = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .timeout(CALL_TIMEOUT)
        .map_response(log_protocol_once)
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// Logs the HTTP version of the client's first answer, once per process.
fn log_protocol_once<B>(response: http::Response<B>) -> http::Response<B> {
    static LOGGED: std::sync::Once = std::sync::Once::new();
    LOGGED.call_once(|| info!(protocol = ?response.version(), "API server answered"));
    response
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

/// Posts each note as it is queued, without waiting for the ones in flight; gives up on the rest
/// after [`MAX_FAILURES`] failures in a row. Returns once the queue is closed and every post is done.
async fn post_all(client: kube::Client, target: Target, mut rx: mpsc::UnboundedReceiver<Note>) {
    let api: Api<Event> = Api::namespaced(client, &target.object.namespace);
    let mut in_flight = FuturesUnordered::new();
    let mut failures = 0;
    let mut seq: u32 = 0;
    let mut last = Timestamp::UNIX_EPOCH;
    let mut open = true;
    while open || !in_flight.is_empty() {
        tokio::select! {
            note = rx.recv(), if open => match note {
                Some(note) if failures < MAX_FAILURES => {
                    seq += 1;
                    last = next_event_time(last, Timestamp::now());
                    let event = build(&target, &note, seq, last);
                    in_flight.push(post(&api, note.reason, event));
                }
                Some(_) => {}
                None => open = false,
            },
            Some(posted) = in_flight.next() => {
                failures = if posted { 0 } else { failures + 1 };
                if failures == MAX_FAILURES {
                    warn!("too many event failures; no more events for this run");
                }
            }
        }
    }
}

/// Creates one Event within [`REQUEST_TIMEOUT`]; whether it was posted.
async fn post(api: &Api<Event>, reason: &'static str, event: Event) -> bool {
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &event)).await {
        Ok(Ok(_)) => {
            debug!(reason, "event posted");
            true
        }
        Ok(Err(e)) => {
            warn!(reason, error = %e, "event not posted");
            false
        }
        Err(_) => {
            warn!(reason, "event not posted: timed out");
            false
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
