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

use crate::runtime::kubeutil::{get_opt, is_conflict};

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

impl Timing {
    /// Whether the timings can keep one leader (as Kubernetes' leader election requires): a
    /// leader must give up (at the renew deadline) before another may take over (a lease
    /// duration after the last renewal it saw), with a retry period to spare, and must retry at
    /// least once within the deadline. The message names the flags.
    pub fn validate(&self) -> Result<(), String> {
        if self.retry_period.is_zero() {
            return Err("--leader-elect-retry-period must be more than 0".to_owned());
        }
        if self.renew_deadline <= self.retry_period {
            return Err(format!(
                "--leader-elect-renew-deadline ({:?}) must be longer than --leader-elect-retry-period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        if self.lease_duration <= self.renew_deadline + self.retry_period {
            return Err(format!(
                "--leader-elect-lease-duration ({:?}) must be longer than --leader-elect-renew-deadline ({:?}) plus --leader-elect-retry-period ({:?})",
                self.lease_duration, self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
    }
}

/// How [`Election::lead`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Led {
    /// The reconciling returned (the manager was asked to stop).
    Finished,
    /// The Lease was lost: the manager must exit so that another one takes over.
    Lost,
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

    /// Waits until this manager holds the Lease, then runs what `reconcile` returns for as long
    /// as it holds it: the reconciling stops, at whatever await point it has reached, as soon as
    /// a renewal fails within the renew deadline, and before another manager can take the Lease
    /// (the renew deadline is shorter than the lease duration another manager waits). A standby
    /// asked to stop (`shutdown`) while it waits stops waiting and never leads; a leader whose
    /// reconciling finished (it was asked to stop) gives the Lease back, so the next manager
    /// takes over at once instead of a lease duration later.
    pub async fn lead<F>(
        &self,
        client: &kube::Client,
        reconcile: impl FnOnce() -> F,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Led
    where
        F: std::future::Future<Output = ()>,
    {
        tokio::select! {
            () = self.acquire(client) => {}
            () = shutdown => {
                info!(identity = %self.identity, "asked to stop while waiting to lead");
                return Led::Finished;
            }
        }
        let reconciling = reconcile();
        let led = tokio::select! {
            () = reconciling => Led::Finished,
            () = self.hold(client) => Led::Lost,
        };
        if led == Led::Finished
            && let Err(e) = self.release(client).await
        {
            warn!(error = %e, "giving the leader Lease back");
        }
        led
    }

    /// Gives the Lease back if this manager holds it: the holder cleared, so another manager
    /// takes it at its next try.
    pub async fn release(&self, client: &kube::Client) -> kube::Result<()> {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let Some(mut lease) = get_opt(&api, LEASE_NAME).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                info!(identity = %self.identity, "gave the leader Lease back");
                Ok(())
            }
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Renews the Lease every retry period; returns when a renewal could not succeed within the
    /// renew deadline (leadership lost).
    ///
    /// A renewal still in flight at the deadline is abandoned (an API server that hangs, as
    /// with etcd paused, must not keep this manager leading), and a renewal counts from when it
    /// was sent, never later than the API server wrote it: another manager waits a whole lease
    /// duration from when it saw that write, so this one stops first.
    pub async fn hold(&self, client: &kube::Client) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            let sent = tokio::time::Instant::now();
            let left = self.timing.renew_deadline.saturating_sub(last_ok.elapsed());
            match tokio::time::timeout(left, self.try_acquire(client)).await {
                Ok(Ok(true)) => last_ok = sent,
                Ok(Ok(false)) => {
                    warn!("leadership taken by another manager");
                    return;
                }
                Ok(Err(e)) => warn!(error = %e, "renewing the leader lease"),
                Err(_) => warn!("renewing the leader lease: no answer before the renew deadline"),
            }
            if last_ok.elapsed() > self.timing.renew_deadline {
                warn!("could not renew the leader lease within the renew deadline");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// L3: timings that cannot keep one leader are refused, naming the flags.
    #[test]
    fn leader_election_timings_must_keep_one_leader() {
        let t = |lease, renew, retry| Timing {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
        };
        assert!(t(15, 10, 2).validate().is_ok());
        let e = t(10, 10, 2).validate().unwrap_err();
        assert!(e.contains("--leader-elect-lease-duration"), "{e}");
        let e = t(12, 10, 2).validate().unwrap_err();
        assert!(e.contains("plus --leader-elect-retry-period"), "{e}");
        let e = t(15, 2, 2).validate().unwrap_err();
        assert!(e.contains("--leader-elect-renew-deadline"), "{e}");
        assert!(t(15, 10, 0).validate().is_err());
    }

    /// A renewal that gets no answer (an API server that hangs, as with etcd paused) ends the
    /// leadership at the renew deadline: a manager must not lead on while another may take over.
    /// Without the deadline on the renewal, it would wait for the client's read timeout
    /// (295 s).
    #[tokio::test]
    async fn a_renewal_without_an_answer_ends_leadership_at_the_renew_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts every connection and never answers on it.
        let silent = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let election = Election::new(
            "captf-system".into(),
            "manager-a".into(),
            Timing {
                lease_duration: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(1),
                retry_period: Duration::from_millis(200),
            },
        );
        let held = tokio::time::timeout(Duration::from_secs(60), election.hold(&client)).await;
        silent.abort();
        assert!(
            held.is_ok(),
            "still leading 60 s after a renewal went unanswered, with a 1 s renew deadline"
        );
    }
}
