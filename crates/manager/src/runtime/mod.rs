//! The manager's runtime (spec: Architecture "Components"; INTERFACE-FACTS §3 metrics, §4 manager
//! flags, §9 leases): what every pass and controller shares and nothing in it decides — the
//! context and the object a pass works on ([`context`]), the watch caches ([`caches`]), run and
//! cluster leases ([`leases`]), leader election ([`leader`]), metrics ([`metrics`]) and the
//! diagnostics server ([`diagnostics`]), the command line's component-base and Cluster API
//! Operator flags ([`flags`]), the event outbox ([`events`]), the namespace sweep
//! ([`sweep`]) and small API helpers ([`kubeutil`], [`patch`]). It imports nothing from the
//! folders above it.

pub mod backoff;
pub mod caches;
pub mod context;
pub mod diagnostics;
pub mod events;
pub mod flags;
pub mod kubeutil;
pub mod leader;
pub mod leases;
pub mod metrics;
pub mod patch;
pub mod runner_image;
pub mod sweep;
