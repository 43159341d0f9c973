//! tfcapi-lint: checks a Terraform/OpenTofu module, and the OCI image built from it, against the
//! CAPTF module contract and image contract without running init, plan or apply (spec:
//! tfcapi-lint; Image Contract "Checklist for tfcapi-lint image"; Module Contract; Common; the
//! Cluster, Machine and MachinePool Role chapters).
//!
//! - [`module`] reads `.tf`/`.tf.json`/`.tofu`/`.tofu.json` files and runs the module checks;
//! - [`image`] reads an image from a registry or an OCI layout and runs the image checks;
//! - [`checks`] lists every check (ID, severity, roles, example, fix);
//! - [`report`] and [`sarif`] turn findings into text, JSON or SARIF and an exit code;
//! - [`cli`] is the command line, [`config`] its configuration file `.tfcapi-lint.hcl`, and
//!   [`repo`] the modules of a repository that file maps.

pub mod checks;
pub mod cli;
pub mod config;
pub mod image;
pub mod module;
pub mod repo;
pub mod report;
pub mod role;
pub mod sarif;
