//! `cra trace ...`: offline work on TRACE/1.0 chains.
//!
//! OWNER: issue 2 (verify). Placeholder until the verifier lands.

use clap::Subcommand;

use crate::exit::Exit;

/// `cra trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Verify a `.trace.jsonl` file (or standard input) offline.
    Verify {
        /// The file to verify; `-` or absent reads standard input.
        file: Option<std::path::PathBuf>,
    },
}

/// Runs a `cra trace` subcommand.
pub fn run(cmd: TraceCommand) -> Exit {
    match cmd {
        TraceCommand::Verify { .. } => {
            eprintln!("cra trace verify: not implemented yet");
            Exit::CouldNotRun
        }
    }
}
