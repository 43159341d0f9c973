//! Leader election (INTERFACE-FACTS §4 "Leader election"): one Lease,
//! `controller-leader-election-captf`, in the manager's namespace. A manager reconciles only while
//! it holds the Lease; one that cannot renew within the renew deadline stops.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;
use tracing::{info, warn};

use crate::kubeutil::{get_opt, is_conflict};

/// The Lease's fixed name.
pub const LEASE_NAME: &str = "controller-leader-election-captf";

/// Leader-election timing.
#[derive(Debug, Clone)]
pub struct Election {
    /// The namespace of the Lease.
    pub namespace: String,
    /// This manager's identity.
    pub identity: String,
    /// `--leader-elect-lease-duration` (15 s).
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline` (10 s).
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period` (2 s).
    pub retry_period: Duration,
}

impl Election {
    /// Tries once to take or renew the Lease; `true` when this manager holds it afterwards.
    pub async fn try_acquire(&self, client: &kube::Client) -> kube::Result<bool> {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let now = Timestamp::now();
        let secs = i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX);
        match get_opt(&api, LEASE_NAME).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEASE_NAME.to_owned()),
                        namespace: Some(self.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                match api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let holder = spec.holder_identity.clone().unwrap_or_default();
                let expired = spec.renew_time.as_ref().is_none_or(|t| {
                    let d = SignedDuration::from_secs(i64::from(
                        spec.lease_duration_seconds.unwrap_or(secs),
                    ));
                    t.0.checked_add(d).is_ok_and(|end| end < now)
                });
                if holder != self.identity && !holder.is_empty() && !expired {
                    return Ok(false);
                }
                let transitions =
                    spec.lease_transitions.unwrap_or(0) + i32::from(holder != self.identity);
                lease.spec = Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: if holder == self.identity {
                        spec.acquire_time
                    } else {
                        Some(MicroTime(now))
                    },
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(transitions),
                    ..LeaseSpec::default()
                });
                match api
                    .replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            }
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
            tokio::time::sleep(self.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns when a renewal could not succeed within the
    /// renew deadline (leadership lost).
    pub async fn hold(&self, client: &kube::Client) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.retry_period).await;
            match self.try_acquire(client).await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    warn!("leadership taken by another manager");
                    return;
                }
                Err(e) => warn!(error = %e, "renewing the leader lease"),
            }
            if last_ok.elapsed() > self.renew_deadline {
                warn!("could not renew the leader lease within the renew deadline");
                return;
            }
        }
    }
}
