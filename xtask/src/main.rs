//! `cargo xtask`: project automation that is Rust, not shell.
//!
//! * `codegen [--check]`: regenerate every generated file, or (with `--check`) fail when one is
//!   stale. Generated today: the token table in `specs/errors.md` (from `cra_wire::Token`).
//! * `bench [--quick]`: benchmarks with same-run baselines -> `bench/results/latest.json`, `bench/RESULTS.md`.
//! * `soak`: the long storage soak (64 x 10,000 appends on one session, 500 kill -9 cycles).

mod bench;
mod codegen;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("codegen") => codegen::run(args.iter().any(|a| a == "--check")),
        Some("soak") => soak(),
        Some("bench") => bench::run(&args[1..]),
        Some("help" | "--help" | "-h") | None => {
            println!(
                "usage: cargo xtask <command>\n\ncommands:\n  codegen [--check]   regenerate generated files; --check fails when one is stale"
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

/// The storage soak: 64 appenders x 10,000 events on one session (both backends when
/// `CRA_TEST_POSTGRES_URL` is set) and 500 kill -9 cycles, in release mode. Sizes can be changed
/// with `CRA_STORE_SOAK_EVENTS` and `CRA_STORE_CRASH_CYCLES`.
fn soak() -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let var =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let status = std::process::Command::new(cargo)
        .args([
            "test",
            "-p",
            "cra-store",
            "--release",
            "--test",
            "store",
            "--",
        ])
        .args([
            "concurrency::",
            "crash::kill_nine",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env(
            "CRA_STORE_SOAK_EVENTS",
            var("CRA_STORE_SOAK_EVENTS", "10000"),
        )
        .env(
            "CRA_STORE_CRASH_CYCLES",
            var("CRA_STORE_CRASH_CYCLES", "500"),
        )
        .status()?;
    anyhow::ensure!(status.success(), "the storage soak failed ({status})");
    Ok(())
}
