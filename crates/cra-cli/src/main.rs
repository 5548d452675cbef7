//! The `cra` binary: parses the command line and hands over to [`cra_cli::run`].

use clap::Parser;

/// mimalloc instead of the system allocator: the server allocates and frees many short-lived
/// buffers across threads (request bodies, event payloads, resolutions), and glibc's allocator
/// spent about a quarter of the server's CPU on them, much of it consolidating and unlinking
/// free chunks (`bench/NOTES.md`). It is built with `no_thp` (transparent huge pages off for the
/// process): with THP on `always`, as on the benchmark VM, every page mimalloc took back from the
/// kernel faulted in a whole 2 MiB huge page that the kernel zeroed first, and `clear_page_erms`
/// was a quarter of the server's CPU samples under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = cra_cli::Cli::parse();
    cra_cli::run(cli).into()
}
