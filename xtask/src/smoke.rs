//! `cargo xtask bench --smoke`: CI's check that every benchmark still builds and runs. Each
//! program runs once on small inputs, built in the debug profile into the shared target
//! directory (the one the tests use), so CI builds no second release tree. Its figures mean
//! nothing and are not written anywhere; `cargo xtask bench [--quick]` measures.
//! `--smoke --build-only` compiles what the steps run and stops.
//!
//! What runs: the `bench/policy-compare` programs with `--smoke` (the engines' agreement checks
//! included: `policy-compare`, `history-compare`), a 1,000-event synthetic session through
//! `verify-limit`, cra-trace's `verify_file` and the Appendix B Python verifier, `http-load` against the debug `cra` for HTTP and
//! WebSocket, `mcp-proxy` for five calls each way (the filesystem MCP server from `.ci/install`),
//! the console's benchmark in chromium on 50 sessions (`tools/peers/console_bench.mjs`),
//! and every criterion bench in criterion's test mode (each benchmark once, through
//! one `cargo test --workspace --bench ...`). A failed step does not stop the others; the
//! command fails at the end naming every failed step.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::bench::{CRITERION, FS_SERVER, TRACE_EXAMPLES, cargo, output, status};

/// The shared target directory, as cargo itself chooses it.
fn target_dir() -> String {
    std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned())
}

/// Entry point (the working directory is the workspace root). `build_only` compiles what the
/// steps run and stops (CI compiles everything in one phase, then runs).
pub(crate) fn run(build_only: bool) -> anyhow::Result<()> {
    let target = target_dir();
    if build_only {
        build(&target)?;
        return status(criterion_cmd().arg("--no-run"));
    }
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut step = |name: &str, r: anyhow::Result<()>| {
        let secs = started.elapsed().as_secs_f64();
        match r {
            Ok(()) => eprintln!("xtask bench --smoke: {name} ok (at {secs:.0} s)"),
            Err(e) => {
                eprintln!("xtask bench --smoke: {name} FAILED (at {secs:.0} s): {e:#}");
                failed.push(name.to_owned());
            }
        }
    };
    step("build", build(&target));
    step(
        "carp_engines",
        json_of(&target, "policy-compare", &["--smoke"]),
    );
    step(
        "history_engines",
        json_of(&target, "history-compare", &["--smoke"]),
    );
    step("trace_verify", trace_verify(&target));
    step(
        "orient_growth",
        json_of(&target, "orient-growth", &["--smoke"]),
    );
    step("http", http_load(&target, "http"));
    step("websocket", http_load(&target, "ws"));
    step("slow_clients", http_load(&target, "slow"));
    step(
        "mcp_proxy",
        json_of(
            &target,
            "mcp-proxy",
            &[
                "--smoke",
                "--cra",
                &format!("{target}/debug/cra"),
                "--fs-server",
                FS_SERVER,
                "--work",
                &format!("{target}/bench-smoke/mcp-proxy"),
            ],
        ),
    );
    step("console", console(&target));
    step("criterion", criterion());
    if !failed.is_empty() {
        bail!("benchmark smoke steps failed: {}", failed.join(", "));
    }
    eprintln!(
        "xtask bench --smoke: every benchmark ran once in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The comparison programs and the workspace programs the steps run, debug profile.
fn build(target: &str) -> anyhow::Result<()> {
    status(cargo().args([
        "build",
        "--locked",
        "--quiet",
        "--manifest-path",
        "bench/policy-compare/Cargo.toml",
        "--target-dir",
        target,
        "--bins",
    ]))?;
    status(
        cargo()
            .args([
                "build", "--locked", "--quiet", "-p", "cra-cli", "--bin", "cra",
            ])
            .args(TRACE_EXAMPLES),
    )
}

/// Runs `target/debug/<program> args` and checks that it printed one JSON document.
fn json_of(target: &str, program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = output(Command::new(format!("{target}/debug/{program}")).args(args))?;
    serde_json::from_str::<Value>(&out)
        .with_context(|| format!("{program} did not print one JSON document"))?;
    Ok(())
}

/// The console's benchmark in chromium on 50 sessions, 20 events a second for 2 s.
fn console(target: &str) -> anyhow::Result<()> {
    let out = output(Command::new("node").args([
        "tools/peers/console_bench.mjs",
        "--cra",
        &format!("{target}/debug/cra"),
        "--sessions",
        "50",
        "--rate",
        "20",
        "--seconds",
        "2",
    ]))?;
    serde_json::from_str::<Value>(&out)
        .context("console_bench.mjs did not print one JSON document")?;
    Ok(())
}

/// A 1,000-event session, verified by `verify-limit`, `verify_file` and (when `python3` is
/// there) the Appendix B Python verifier.
fn trace_verify(target: &str) -> anyhow::Result<()> {
    let dir = format!("{target}/bench-smoke");
    std::fs::create_dir_all(&dir)?;
    let file = format!("{dir}/session-1000-42.trace.jsonl");
    status(Command::new(format!("{target}/debug/examples/gen_trace")).args([&file, "1000", "42"]))?;
    json_of(target, "verify-limit", &[&file, "--runs", "1"])?;
    let out = output(Command::new(format!("{target}/debug/examples/verify_file")).arg(&file))?;
    let v: Value = serde_json::from_str(out.trim())?;
    if v["valid"] != Value::Bool(true) {
        bail!("verify_file did not verify {file}: {out}");
    }
    if Command::new("python3").arg("--version").output().is_ok() {
        let out = output(Command::new("python3").args([
            "tools/appendix_b.py",
            "verify",
            &file,
            "--json",
        ]))?;
        if !out.contains("true") {
            bail!("the Python verifier did not accept {file}: {out}");
        }
    }
    Ok(())
}

/// Every criterion bench in criterion's test mode (each benchmark once), in one `cargo test`
/// over the workspace: a per-package run would resolve features apart from the tests' build
/// and compile the dependencies again.
fn criterion() -> anyhow::Result<()> {
    status(&mut criterion_cmd())
}

/// `cargo test --workspace --bench ...` over every criterion bench.
fn criterion_cmd() -> Command {
    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--locked", "--quiet"]);
    for &(_, bench, _, _) in CRITERION {
        cmd.args(["--bench", bench]);
    }
    cmd
}

/// `http-load --smoke` against the debug `cra`: `only` is `http` or `ws`.
fn http_load(target: &str, only: &str) -> anyhow::Result<()> {
    let cra = format!("{target}/debug/cra");
    let work = format!("{target}/bench-smoke/http-load");
    json_of(
        target,
        "http-load",
        &[
            "--cra",
            &cra,
            "--atlas",
            "atlases/dev.cra.github-ops",
            "--work",
            &work,
            "--only",
            only,
            "--smoke",
        ],
    )
}
