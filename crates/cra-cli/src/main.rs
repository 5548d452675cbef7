//! The `cra` binary: parses the command line and hands over to [`cra_cli::run`].

use clap::Parser;

/// mimalloc instead of the system allocator: the server allocates and frees many short-lived
/// buffers across threads (request bodies, event payloads, resolutions), and glibc's allocator
/// spent about a quarter of the server's CPU on them, much of it consolidating and unlinking
/// free chunks (`bench/NOTES.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = cra_cli::Cli::parse();
    cra_cli::run(cli).into()
}
