//! The events a pass emits (INTERFACE-FACTS §2 "Manager events"): collected during the pass and
//! published once its status patch has landed, so a transition is announced once. The
//! [`Recorder`] posts them as events.k8s.io/v1 Events and folds a repeat (the same object, type,
//! reason and note) into its first Event's `series`, as events.k8s.io does: a repeat costs no
//! request of its own, and its count is written at most once per flush interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use api::constants::events::next_event_time;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tracing::{debug, warn};

use crate::runtime::context::Context;

/// The most bytes of an event note.
const MAX_NOTE: usize = 1024;

/// One event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Normal or Warning.
    pub warning: bool,
    /// The documented reason.
    pub reason: &'static str,
    /// The note (never a secret value).
    pub note: String,
}

/// The events of one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outbox {
    events: Vec<Pending>,
}

impl Outbox {
    /// A Normal event.
    pub fn normal(&mut self, reason: &'static str, note: impl Into<String>) {
        self.events.push(Pending {
            warning: false,
            reason,
            note: note.into(),
        });
    }

    /// A Warning event.
    pub fn warning(&mut self, reason: &'static str, note: impl Into<String>) {
        self.events.push(Pending {
            warning: true,
            reason,
            note: note.into(),
        });
    }

    /// An event of either type.
    pub fn push(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.events.push(Pending {
            warning,
            reason,
            note: note.into(),
        });
    }

    /// Queues `other`'s events after these.
    pub fn extend(&mut self, other: Outbox) {
        self.events.extend(other.events);
    }

    /// The queued events.
    pub fn events(&self) -> &[Pending] {
        &self.events
    }

    /// Publishes every event on the object `reference` names, all at once: the pass waits for one
    /// round trip, not one per event. Each event is timed and counted into its series in the
    /// order it was queued (the first poll of each post, in order, does that before any request
    /// goes out). A failed publish is logged, never retried.
    pub async fn publish(self, ctx: &Context, reference: &ObjectReference) {
        let posts = self.events.into_iter().map(|e| async move {
            let note = contract::result::cap(&e.note, MAX_NOTE);
            if let Err(err) = ctx
                .recorder
                .publish(e.warning, e.reason, note, reference)
                .await
            {
                warn!(reason = e.reason, error = %err, "could not publish an event");
            }
        });
        futures::future::join_all(posts).await;
    }
}

/// How long a series stays open: a repeat later than this after the last one starts a new
/// Event (client-go's events.k8s.io recorder closes a series after six minutes too).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How often a series' new count is written by default: a repeat is written at once when its
/// Event was last written longer ago than this, else by the next flush.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// What makes two events one series: the object they regard, their type, reason and note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    /// The regarded object's namespace, kind, name and uid.
    pub regarding: (String, String, String, String),
    /// Warning or Normal.
    pub warning: bool,
    /// The reason.
    pub reason: &'static str,
    /// The note, as posted.
    pub note: String,
}

/// One open series: its Event (once created), how often it was seen and how much of that the
/// Event shows.
#[derive(Debug, Clone)]
struct Open {
    /// The Event's namespace and name; `None` while its create is on its way.
    event: Option<(String, String)>,
    count: i32,
    written: i32,
    last_seen: Instant,
    last_observed: Timestamp,
    last_write: Instant,
}

/// What to do with an event just seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A new Event.
    Create,
    /// A repeat: its Event's series is written now.
    Write(Box<SeriesWrite>),
    /// A repeat counted here, written by a later flush.
    Defer,
}

/// A series count to write onto an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesWrite {
    /// The series.
    pub key: SeriesKey,
    /// The Event's namespace.
    pub namespace: String,
    /// The Event's name.
    pub name: String,
    /// How often the event was seen.
    pub count: i32,
    /// When it was last seen.
    pub last_observed: Timestamp,
}

/// The open series (no I/O: the [`Recorder`] does the writes this table asks for).
#[derive(Debug, Default)]
pub struct Series {
    open: HashMap<SeriesKey, Open>,
    /// The time given to the last event seen.
    last_at: Timestamp,
}

impl Series {
    /// The time of an event seen at `now` (see [`next_event_time`]).
    pub fn stamp(&mut self, now: Timestamp) -> Timestamp {
        self.last_at = next_event_time(self.last_at, now);
        self.last_at
    }

    /// Counts one event seen at `now` (`at` as the API writes it).
    pub fn observe(
        &mut self,
        key: &SeriesKey,
        now: Instant,
        at: Timestamp,
        flush_every: Duration,
    ) -> Step {
        if let Some(o) = self.open.get_mut(key)
            && now.duration_since(o.last_seen) <= SERIES_WINDOW
        {
            o.count += 1;
            o.last_seen = now;
            o.last_observed = at;
            return match &o.event {
                Some((namespace, name)) if now.duration_since(o.last_write) >= flush_every => {
                    Step::Write(Box::new(SeriesWrite {
                        key: key.clone(),
                        namespace: namespace.clone(),
                        name: name.clone(),
                        count: o.count,
                        last_observed: at,
                    }))
                }
                _ => Step::Defer,
            };
        }
        self.open.insert(
            key.clone(),
            Open {
                event: None,
                count: 1,
                written: 1,
                last_seen: now,
                last_observed: at,
                last_write: now,
            },
        );
        Step::Create
    }

    /// The Event of `key`'s series was created as `namespace/name`.
    pub fn created(&mut self, key: &SeriesKey, namespace: &str, name: &str, now: Instant) {
        if let Some(o) = self.open.get_mut(key) {
            o.event = Some((namespace.to_owned(), name.to_owned()));
            o.last_write = now;
        }
    }

    /// `count` of `key`'s series is on its Event.
    pub fn written(&mut self, key: &SeriesKey, count: i32, now: Instant) {
        if let Some(o) = self.open.get_mut(key) {
            o.written = o.written.max(count);
            o.last_write = now;
        }
    }

    /// `key`'s Event could not be created, or is gone: its next repeat starts a new one.
    pub fn forget(&mut self, key: &SeriesKey) {
        self.open.remove(key);
    }

    /// The counts due to be written at `now` (seen more often than their Event shows, and last
    /// written at least `flush_every` ago); series closed and fully written are dropped.
    pub fn due(&mut self, now: Instant, flush_every: Duration) -> Vec<SeriesWrite> {
        self.open.retain(|_, o| {
            now.duration_since(o.last_seen) <= SERIES_WINDOW
                || (o.event.is_some() && o.written < o.count)
        });
        self.open
            .iter()
            .filter(|(_, o)| o.written < o.count)
            .filter(|(_, o)| now.duration_since(o.last_write) >= flush_every)
            .filter_map(|(key, o)| {
                let (namespace, name) = o.event.clone()?;
                Some(SeriesWrite {
                    key: key.clone(),
                    namespace,
                    name,
                    count: o.count,
                    last_observed: o.last_observed,
                })
            })
            .collect()
    }

    /// How many series are open.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether no series is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Posts the manager's events (reporting controller `captf-manager`, instance `--instance`):
/// a new event creates an Event, a repeat within [`SERIES_WINDOW`] adds to its `series`.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    controller: String,
    instance: String,
    flush_every: Duration,
    series: Mutex<Series>,
    flusher: std::sync::Once,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("controller", &self.inner.controller)
            .field("instance", &self.inner.instance)
            .field("flush_every", &self.inner.flush_every)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder posting as `controller`/`instance`, writing repeats every [`FLUSH_EVERY`].
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self::with_flush_every(client, controller, instance, FLUSH_EVERY)
    }

    /// A recorder that writes a series' new count at most once per `flush_every`.
    pub fn with_flush_every(
        client: Client,
        controller: &str,
        instance: &str,
        flush_every: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                controller: controller.to_owned(),
                instance: instance.to_owned(),
                flush_every,
                series: Mutex::new(Series::default()),
                flusher: std::sync::Once::new(),
            }),
        }
    }

    /// Posts one event on `reference`: a new Event, a series count written now, or a repeat
    /// counted for the next flush.
    pub async fn publish(
        &self,
        warning: bool,
        reason: &'static str,
        note: String,
        reference: &ObjectReference,
    ) -> kube::Result<()> {
        self.start_flusher();
        let key = SeriesKey {
            regarding: (
                reference.namespace.clone().unwrap_or_default(),
                reference.kind.clone().unwrap_or_default(),
                reference.name.clone().unwrap_or_default(),
                reference.uid.clone().unwrap_or_default(),
            ),
            warning,
            reason,
            note,
        };
        let (at, step) = {
            let mut table = self.table();
            let at = table.stamp(Timestamp::now());
            (
                at,
                table.observe(&key, Instant::now(), at, self.inner.flush_every),
            )
        };
        match step {
            Step::Create => self.create(&key, reference, at).await,
            Step::Write(w) => self.inner.write(&w).await,
            Step::Defer => Ok(()),
        }
    }

    /// How many series are open (for tests and diagnostics).
    pub fn open_series(&self) -> usize {
        self.table().len()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Series> {
        self.inner.table()
    }

    async fn create(
        &self,
        key: &SeriesKey,
        reference: &ObjectReference,
        at: Timestamp,
    ) -> kube::Result<()> {
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = format!(
            "{}.{:x}",
            reference.name.as_deref().unwrap_or(&self.inner.controller),
            at.as_nanosecond()
        );
        let event = Event {
            action: Some("Reconcile".to_owned()),
            event_time: Some(MicroTime(at)),
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            note: Some(key.note.clone()),
            reason: Some(key.reason.to_owned()),
            regarding: Some(reference.clone()),
            reporting_controller: Some(self.inner.controller.clone()),
            reporting_instance: Some(self.inner.instance.clone()),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.to_owned()),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.inner.client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => {
                self.table().created(key, &namespace, &name, Instant::now());
                Ok(())
            }
            Err(e) => {
                self.table().forget(key);
                Err(e)
            }
        }
    }

    /// Starts, once, the task that writes deferred series counts; it ends with the recorder.
    fn start_flusher(&self) {
        let weak = Arc::downgrade(&self.inner);
        self.inner.flusher.call_once(|| {
            tokio::spawn(flush_loop(weak));
        });
    }
}

impl Inner {
    /// The open series (a poisoned lock still holds a consistent table: every change to it is
    /// one call).
    fn table(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes a series count onto its Event; an Event gone (expired, deleted) closes the series.
    async fn write(&self, w: &SeriesWrite) -> kube::Result<()> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &w.namespace);
        let patch = serde_json::json!({
            "series": {"count": w.count, "lastObservedTime": MicroTime(w.last_observed)},
        });
        match api
            .patch(&w.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.table().written(&w.key, w.count, Instant::now());
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.table().forget(&w.key);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Every quarter of the flush interval, writes the counts that are due.
async fn flush_loop(inner: Weak<Inner>) {
    loop {
        let every = match inner.upgrade() {
            Some(i) => i.flush_every,
            None => return,
        };
        tokio::time::sleep((every / 4).max(Duration::from_millis(100))).await;
        let Some(i) = inner.upgrade() else { return };
        let due = i.table().due(Instant::now(), i.flush_every);
        for w in due {
            if let Err(e) = i.write(&w).await {
                debug!(event = %w.name, error = %e, "could not write an event's series");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(note: &str) -> SeriesKey {
        SeriesKey {
            regarding: (
                "ns".into(),
                "TerraformMachine".into(),
                "m".into(),
                "u".into(),
            ),
            warning: true,
            reason: "JobFailed",
            note: note.to_owned(),
        }
    }

    const EVERY: Duration = Duration::from_secs(30);

    /// A repeat of the same object, type, reason and note adds to the first Event's series,
    /// written at most once per flush interval (the latest count); another note is another
    /// Event.
    #[test]
    fn repeats_fold_into_one_series_written_once_per_interval() {
        let (t0, at) = (Instant::now(), Timestamp::now());
        let mut s = Series::default();
        let a = key("apply failed");
        assert_eq!(s.observe(&a, t0, at, EVERY), Step::Create);
        // A repeat while the create is on its way is counted, not created again.
        assert_eq!(s.observe(&a, t0, at, EVERY), Step::Defer);
        s.created(&a, "ns", "m.1", t0);
        assert_eq!(
            s.observe(&a, t0 + Duration::from_secs(1), at, EVERY),
            Step::Defer
        );
        assert_eq!(s.observe(&key("other"), t0, at, EVERY), Step::Create);
        assert!(s.due(t0 + Duration::from_secs(10), EVERY).is_empty());
        let due = s.due(t0 + EVERY, EVERY);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].name.as_str(), due[0].count), ("m.1", 3));
        s.written(&a, 3, t0 + EVERY);
        assert!(s.due(t0 + EVERY * 3, EVERY).is_empty());
        // A repeat long after the last write is written at once.
        match s.observe(&a, t0 + EVERY * 3, at, EVERY) {
            Step::Write(w) => assert_eq!(w.count, 4),
            other => panic!("{other:?}"),
        }
    }

    /// A series closes once its event was not seen for the window: the next one is a new
    /// Event, and a closed, fully written series is dropped; a failed create or a deleted
    /// Event starts over.
    #[test]
    fn a_series_closes_after_the_window_and_restarts_after_a_failure() {
        let (t0, at) = (Instant::now(), Timestamp::now());
        let mut s = Series::default();
        let a = key("apply failed");
        assert_eq!(s.observe(&a, t0, at, EVERY), Step::Create);
        s.created(&a, "ns", "m.1", t0);
        let later = t0 + SERIES_WINDOW + Duration::from_secs(1);
        assert!(s.due(later, EVERY).is_empty());
        assert!(s.is_empty());
        assert_eq!(s.observe(&a, later, at, EVERY), Step::Create);
        s.forget(&a);
        assert_eq!(s.observe(&a, later, at, EVERY), Step::Create);
        assert_eq!(s.len(), 1);
    }
}
