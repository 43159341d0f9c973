//! The CAPTF runner: the Job entrypoint that runs a module image's runtime exactly as the
//! Runtime Environment chapter says, and reports how the run ended in a form the manager can
//! trust (Runtime Environment, Image Contract, Plan Approval, Drift, Terraform State, Security
//! Model).
//!
//! - [`cli`]: `copy`, `run`, `version` and their flags; [`duration`]: Go-style durations.
//! - [`layout`]: the image-layout check; [`root`]: the generated root; [`env`]: the environment
//!   rewrite; [`tfrc`]: the mirror-only CLI configuration; [`undeclared`]: contract outputs the
//!   module does not declare.
//! - [`steps`]: commands, flags and their order per operation; [`exec`]: running one command,
//!   streaming its output, forwarding SIGTERM.
//! - [`output`] and [`summary`]: what is read from the output (never kept whole), and the
//!   curated failure summary; [`result`]: the result document; [`events`]: progress events.
//! - [`run`]: one operation from start to result.

pub mod cli;
pub mod copy;
pub mod duration;
pub mod env;
pub mod events;
pub mod exec;
pub mod layout;
pub mod logging;
pub mod output;
pub mod plan_text;
pub use contract::result;
pub mod root;
pub mod run;
pub mod steps;
pub mod summary;
pub mod tfrc;
pub mod undeclared;
