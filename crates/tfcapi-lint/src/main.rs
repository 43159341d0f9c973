//! tfcapi-lint: checks Terraform/OpenTofu modules and module images against the CAPTF contract.
//!
//! Only `version` exists so far; the commands of this binary land with their own issue.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tfcapi-lint",
    version,
    about = "tfcapi-lint: checks Terraform/OpenTofu modules and module images against the CAPTF contract"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the version and exit.
    Version,
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("tfcapi-lint {}", env!("CARGO_PKG_VERSION")),
    }
}
