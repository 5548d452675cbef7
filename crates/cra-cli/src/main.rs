//! The `cra` binary: parses the command line and hands over to [`cra_cli::run`].

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cra_cli::Cli::parse();
    cra_cli::run(cli).into()
}
