//! The CAPTF validating admission webhook for the seven Terraform* kinds.
//!
//! Only `version` exists so far; the commands of this binary land with their own issue.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "webhook",
    version,
    about = "The CAPTF validating admission webhook for the seven Terraform* kinds"
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
        Command::Version => println!("webhook {}", env!("CARGO_PKG_VERSION")),
    }
}
