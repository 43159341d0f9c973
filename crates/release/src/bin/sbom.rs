//! `sbom`: writes the SPDX 2.3 JSON SBOM of one released binary to standard output
//! (`make release-snapshot`; see the `release` crate).
//!
//! Usage: `sbom METADATA PACKAGE BINARY NAME VERSION CREATED`, where METADATA is the output of
//! `cargo metadata --format-version 1 --locked --filter-platform TARGET`, PACKAGE the workspace
//! package of the binary, BINARY the binary's path, NAME the document's name, VERSION the release
//! version and CREATED the creation time (RFC 3339, UTC).

use std::process::ExitCode;

use anyhow::Context as _;

fn run(args: &[String]) -> anyhow::Result<String> {
    let [metadata, package, binary, name, version, created] = args else {
        anyhow::bail!("usage: sbom METADATA PACKAGE BINARY NAME VERSION CREATED");
    };
    let metadata: serde_json::Value = serde_json::from_slice(
        &std::fs::read(metadata).with_context(|| format!("reading {metadata}"))?,
    )
    .with_context(|| format!("{metadata} is not cargo metadata's JSON"))?;
    let contents = std::fs::read(binary).with_context(|| format!("reading {binary}"))?;
    let doc = release::sbom::spdx(
        &metadata,
        &release::sbom::Binary {
            package,
            name,
            version,
            contents: &contents,
            created,
        },
    )?;
    Ok(serde_json::to_string_pretty(&doc)? + "\n")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sbom: {e:#}");
            ExitCode::FAILURE
        }
    }
}
