//! Verifies a `.trace.jsonl` with the same engine and options as `cra trace verify` (the
//! streaming verifier, all cores, first-error mode) and prints the same JSON summary.
//! `tools/bench_verify.sh` uses it when the full `cra` binary cannot be built.
//!
//! `cargo run --release -p cra-trace --example verify_file -- FILE [--all] [--threads N]`
//! (`--threads` defaults to 0, one worker per core; `--threads 1` is the single-threaded path,
//! handy under `perf record`).

use std::process::ExitCode;

use cra_trace::{VerifyOptions, verify_reader};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all_errors = args.iter().any(|a| a == "--all");
    let threads_at = args.iter().position(|a| a == "--threads");
    let threads: usize = threads_at
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let path = args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && threads_at.is_none_or(|t| *i != t + 1))
        .map(|(_, a)| a);
    let Some(path) = path else {
        eprintln!("usage: verify_file FILE [--all] [--threads N]");
        return ExitCode::from(1);
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("verify_file: cannot read {path}: {e}");
            return ExitCode::from(1);
        }
    };
    let options = VerifyOptions {
        all_errors,
        threads,
        ..VerifyOptions::default()
    };
    match verify_reader(file, &options, &mut |_| {}) {
        Ok(report) => {
            let first = report.first_error().map(|f| {
                serde_json::json!({"sequence": f.sequence, "line": f.line, "code": f.code.as_str(), "message": f.message})
            });
            println!(
                "{}",
                serde_json::json!({"valid": report.is_valid(), "events": report.events, "first_error": first})
            );
            ExitCode::from(if report.is_valid() { 0 } else { 2 })
        }
        Err(e) => {
            eprintln!("verify_file: cannot read {path}: {e}");
            ExitCode::from(1)
        }
    }
}
