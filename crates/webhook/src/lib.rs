//! CAPTF's validating admission webhook: an HTTPS AdmissionReview v1 server with one validating
//! path per kind, rejecting an invalid or disallowed change to any of the seven Terraform* kinds
//! before it is persisted (spec: The Kinds, Security Model, Identities and Credentials, Module
//! Variables, Templates and ClusterClass, Machine Pools, Drift, Tuning Jobs).
//!
//! The code reads in layers, I/O at the edges:
//! - [`rules`]: every rule as a pure function of plain data, each [`rules::Violation`] carrying a
//!   stable rule label and a message that names the field and the rule;
//! - [`kinds`]: the `Validate` dispatch, one implementation per kind, composing the rules for
//!   create, update and delete;
//! - [`lookups`]: what a decision needs from the API server (a SubjectAccessReview, the owning
//!   Machine, the objects using an identity), behind a trait so the rules never touch a client;
//! - [`admission`]: one AdmissionReview in, one AdmissionReview out, never a panic;
//! - [`server`]: the HTTPS server, certificate reload, health, readiness and diagnostics;
//! - [`diagnostics`]: the `serving` library crate, what [`server`] needs that is not about
//!   admission (TLS policy, certificate reload, authenticated `/metrics`, `/healthz` and
//!   `/readyz`), shared with the manager;
//! - [`metrics`]: requests, denials by kind and rule, and latency.
//!
//! There are no mutating webhooks: defaults are resolved at reconcile time.

pub mod admission;
pub mod cli;
pub use serving as diagnostics;
pub mod fake;
pub use contract::image_ref as image;
pub mod kinds;
pub mod lookups;
pub mod metrics;
pub mod rules;
pub mod server;
