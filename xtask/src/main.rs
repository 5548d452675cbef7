//! `cargo xtask`: project automation that is Rust, not shell.
//!
//! * `codegen [--check]`: regenerate every generated file, or (with `--check`) fail when one is
//!   stale. Generated today: the token table in `specs/errors.md`, the OpenAPI and TRACE event
//!   schemas, and `THIRD-PARTY.md` (`codegen.rs` lists them).
//! * `bench [--quick] [--render]`: benchmarks with same-run baselines -> `bench/results/latest.json`,
//!   `bench/RESULTS.md` (`--render`: only render the report again from the last results).
//!   `bench --smoke` (CI): every benchmark once, debug build, shared target, nothing written.
//! * `log-cost [--runs N] [--shapes LIST] [-o json]`: issue 26's criterion on redb, the log's
//!   cost pooled over several runs of the append bench with a bootstrap interval and a verdict
//!   (`log_cost.rs`); exits 2 when a shape is not shown inside the target.
//! * `soak [--minutes N] [--skip-storage]`: the long storage soak (64 x 10,000 appends on one
//!   session, 500 kill -9 cycles), then the server crash soak for N minutes on both backends
//!   (see `soak.rs`).

mod bench;
mod codegen;
mod log_cost;
mod smoke;
mod soak;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("codegen") => codegen::run(args.iter().any(|a| a == "--check")),
        Some("soak") => soak::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("log-cost") => return log_cost::main(&args[1..]),
        Some("help" | "--help" | "-h") | None => {
            println!(
                "usage: cargo xtask <command>\n\ncommands:\n  codegen [--check]   regenerate generated files; --check fails when one is stale\n  bench [--quick] [--render]\n                      benchmarks with same-run baselines (--render: report only)\n  bench --smoke [--build-only]\n                      every benchmark once (debug build, shared target/): CI's check\n  log-cost [--runs N] [--shapes LIST] [-o json]\n                      the transparency log's cost on redb, pooled, with a verdict\n  soak [--minutes N] [--skip-storage]\n                      storage soak, then N minutes (default 10) of server crash soak"
            );
            Ok(())
        }
        Some(other) => Err(anyhow::anyhow!(
            "unknown xtask `{other}`; run `cargo xtask help`"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}
