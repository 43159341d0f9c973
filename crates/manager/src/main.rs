//! The CAPTF manager: reconciles TerraformCluster, TerraformMachine, TerraformMachinePool and TerraformClusterIdentity.
//!
//! Only `version` exists so far; the commands of this binary land with their own issue.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "manager",
    version,
    about = "The CAPTF manager: reconciles TerraformCluster, TerraformMachine, TerraformMachinePool and TerraformClusterIdentity"
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
        Command::Version => println!("manager {}", env!("CARGO_PKG_VERSION")),
    }
}
