//! Release tooling (docs/src/installation.md, "Release snapshot"): the software bill of materials
//! of each released binary.
//!
//! [`sbom::spdx`] turns `cargo metadata --filter-platform TARGET` output into an SPDX 2.3 JSON
//! document for one binary: its package and every crate linked into it, found by following the
//! resolve graph's normal dependency edges from the binary's package. Build and dev dependencies
//! and procedural macros (which run in the compiler and are not linked) are left out.

pub mod sbom;
