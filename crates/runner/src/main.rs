//! The CAPTF runner: the Job entrypoint that runs a module image's runtime.
//!
//! Only `version` exists so far; the commands of this binary land with their own issue.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version,
    about = "The CAPTF runner: the Job entrypoint that runs a module image's runtime"
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
        Command::Version => println!("runner {}", env!("CARGO_PKG_VERSION")),
    }
}
