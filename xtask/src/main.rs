//! `cargo xtask`: project automation that is Rust, not shell.
//!
//! * `codegen [--check]`: regenerate every generated file, or (with `--check`) fail when one is
//!   stale. Generated today: the token table in `specs/errors.md` (from `cra_wire::Token`).

mod codegen;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("codegen") => codegen::run(args.iter().any(|a| a == "--check")),
        Some("help" | "--help" | "-h") | None => {
            println!("usage: cargo xtask <command>\n\ncommands:\n  codegen [--check]   regenerate generated files; --check fails when one is stale");
            Ok(())
        }
        Some(other) => Err(anyhow::anyhow!("unknown xtask `{other}`; run `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}
