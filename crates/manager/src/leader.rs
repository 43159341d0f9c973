//! Leader election (INTERFACE-FACTS §4 "Leader election"): one Lease,
//! `controller-leader-election-captf`, in the manager's namespace. A manager reconciles only while
//! it holds the Lease; one that cannot renew within the renew deadline stops. Whether another
//! manager still holds the Lease is judged by [`LeaseObserver`]: from when this manager last saw
//! the Lease's record change, on its own monotonic clock, never by comparing the holder's
//! `renewTime` with this machine's clock (the holder's clock may be skewed by minutes).
//!
//! Why not a crate: kube 5.0 has no leader election, and kube-lease-manager 0.13.1 judges expiry
//! as `renewTime + leaseDuration` against the local `SystemTime` (its `state.rs`), the very
//! comparison a skewed clock breaks.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use contract::leader::{LeaseObserver, LeaseRecord};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tracing::{info, warn};

use crate::kubeutil::{get_opt, is_conflict};

/// The Lease's fixed name.
pub const LEASE_NAME: &str = "controller-leader-election-captf";

/// Leader-election timing.
#[derive(Debug, Clone)]
pub struct Timing {
    /// `--leader-elect-lease-duration` (15 s).
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline` (10 s).
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period` (2 s).
    pub retry_period: Duration,
}

/// One manager's side of the election.
#[derive(Debug)]
pub struct Election {
    /// The namespace of the Lease.
    pub namespace: String,
    /// This manager's identity.
    pub identity: String,
    /// Leader-election timing.
    pub timing: Timing,
    observer: Mutex<LeaseObserver>,
}

/// The leader-election record of a Lease's spec.
fn record_of(spec: &LeaseSpec) -> LeaseRecord {
    let text = |t: &Option<MicroTime>| t.as_ref().map(|t| t.0.to_string());
    LeaseRecord {
        holder: spec.holder_identity.clone().unwrap_or_default(),
        lease_duration_seconds: spec.lease_duration_seconds,
        acquire_time: text(&spec.acquire_time),
        renew_time: text(&spec.renew_time),
        transitions: spec.lease_transitions,
    }
}

impl Election {
    /// An election for `identity` over the Lease in `namespace`, that has seen no Lease yet.
    pub fn new(namespace: String, identity: String, timing: Timing) -> Self {
        Election {
            namespace,
            identity,
            timing,
            observer: Mutex::new(LeaseObserver::default()),
        }
    }

    /// The observer, even if a panic elsewhere poisoned its lock (it holds plain data).
    fn observer(&self) -> std::sync::MutexGuard<'_, LeaseObserver> {
        self.observer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The spec this manager writes to take or renew the Lease, after `previous` (if any).
    fn spec_to_write(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let secs = i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let ours = previous.is_some_and(|p| p.holder_identity.as_deref() == Some(&self.identity));
        let transitions =
            previous.map_or(0, |p| p.lease_transitions.unwrap_or(0) + i32::from(!ours));
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(secs),
            acquire_time: match previous {
                Some(p) if ours => p.acquire_time.clone(),
                _ => Some(now.clone()),
            },
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Tries once to take or renew the Lease; `true` when this manager holds it afterwards.
    pub async fn try_acquire(&self, client: &kube::Client) -> kube::Result<bool> {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let written = match get_opt(&api, LEASE_NAME).await? {
            None => {
                let spec = self.spec_to_write(None);
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEASE_NAME.to_owned()),
                        namespace: Some(self.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let held = self.observer().held_by_another(
                    &record_of(&spec),
                    &self.identity,
                    self.timing.lease_duration,
                    Instant::now(),
                );
                if held {
                    return Ok(false);
                }
                lease.spec = Some(self.spec_to_write(Some(&spec)));
                api.replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                let spec = lease.spec.unwrap_or_default();
                self.observer().wrote(record_of(&spec), Instant::now());
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }
    /// Waits until this manager holds the Lease.
    pub async fn acquire(&self, client: &kube::Client) {
        loop {
            match self.try_acquire(client).await {
                Ok(true) => {
                    info!(identity = %self.identity, "became leader");
                    return;
                }
                Ok(false) => {}
                Err(e) => warn!(error = %e, "leader election"),
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns when a renewal could not succeed within the
    /// renew deadline (leadership lost).
    pub async fn hold(&self, client: &kube::Client) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            match self.try_acquire(client).await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    warn!("leadership taken by another manager");
                    return;
                }
                Err(e) => warn!(error = %e, "renewing the leader lease"),
            }
            if last_ok.elapsed() > self.timing.renew_deadline {
                warn!("could not renew the leader lease within the renew deadline");
                return;
            }
        }
    }
}
