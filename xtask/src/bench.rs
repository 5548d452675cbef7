//! `cargo xtask bench [--quick]`: runs the benchmarks with their same-run baselines, writes
//! `bench/results/latest.json` and renders `bench/RESULTS.md` (the full run; `--quick` writes
//! `bench/results/quick.json` and `bench/results/RESULTS-quick.md` instead, so a short run never
//! overwrites the committed full results). `--smoke` is CI's check that everything still runs,
//! measuring nothing (`smoke.rs`).
//!
//! What runs (each as a subprocess, one at a time; every build goes to `bench/target`):
//! * CARP: `bench/policy-compare` (a separate manifest): cra-carp resolve vs cedar-policy and
//!   regorus on identical questions, decisions of all three compared before timing; then
//!   `history-compare`, conditions on history in cra-carp vs cedar-policy (each given the facts);
//! * TRACE: a synthetic session from cra-trace's `gen_trace` example, then `verify-limit` (cra's
//!   verifier vs raw SHA-256 of the same preimages, in one process), cra-trace's `verify_file`
//!   example end to end, and the Appendix B Python verifier (`tools/appendix_b.py`) on the same
//!   file; then verify time vs chain length (10k, 100k and, in the full run, 1M events);
//! * Relay: `orient-growth` (orient latency vs package count on the in-memory store, redb and,
//!   when `CRA_TEST_POSTGRES_URL` is set, PostgreSQL);
//! * HTTP and WebSocket: `http-load` against a `cra serve` release binary it starts on loopback
//!   (resolve / execute / deposit at 1, 16, 64 clients; fan-out of one session emitting 100
//!   events/s to 1, 100, 1,000 subscribers, beside a bare in-process broadcast);
//! * MCP: `mcp-proxy`, a tool call of the filesystem MCP server (from `.ci/install`) through
//!   `cra mcp proxy` and straight to it, alternating, p50 and p99 of each and what the proxy adds;
//! * the crates' own criterion benches (`cargo bench -p <crate> --bench <name> -- --quick` in
//!   quick mode), read back from `bench/target/criterion/**/new/{benchmark,sample}.json`:
//!   per-iteration min / median / max over criterion's samples. `cra-store`'s `append` bench
//!   measures PostgreSQL too when `CRA_TEST_POSTGRES_URL` is set.
//!
//! The growth orders (exponent of a least-squares fit of log(time) on log(size)) are computed
//! from the figures when the report is rendered.
//!
//! A step that fails is recorded as failed (with its error) and the others still run; the command
//! fails at the end if any step failed, so a broken benchmark is not silently dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// Criterion benches run, in this order.
pub(crate) const CRITERION: &[(&str, &str, &str, bool)] = &[
    // (package, bench, area, run in quick mode)
    ("cra-carp", "resolve", "carp", true),
    ("cra-store", "append", "durable_append", true),
    ("cra-store", "history", "history", true),
    ("cra-store", "tlog", "tlog", false),
    ("cra-trace", "trace", "trace", false),
    ("cra-relay", "relay", "relay", false),
    ("cra-atlas", "atlas", "atlas", false),
];

/// The cra-trace examples the TRACE benchmarks run, as cargo arguments.
pub(crate) const TRACE_EXAMPLES: [&str; 6] = [
    "-p",
    "cra-trace",
    "--example",
    "gen_trace",
    "--example",
    "verify_file",
];

/// Every build of this command goes to its own target dir, so it never waits on the lock of the
/// shared `target/` (and the comparison crates never mix with the workspace's).
const TARGET: &str = "bench/target";
/// The filesystem MCP server `.ci/install` puts under `tools/peers` (the proxy benchmark's
/// upstream).
pub(crate) const FS_SERVER: &str =
    "tools/peers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js";

/// Entry point.
pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let root = workspace_root()?;
    std::env::set_current_dir(&root)?;
    if args.iter().any(|a| a == "--render") {
        return render_again(quick);
    }
    if args.iter().any(|a| a == "--smoke") {
        return crate::smoke::run(args.iter().any(|a| a == "--build-only"));
    }
    let started = Instant::now();
    let mut steps: Vec<Value> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut last = Instant::now();
    let mut record = |name: &str, r: anyhow::Result<Value>, steps: &mut Vec<Value>| {
        // Seconds since the previous step ended (this step's builds included).
        let secs = last.elapsed().as_secs_f64();
        last = Instant::now();
        eprintln!("xtask bench: {name} took {secs:.0} s");
        match r {
            Ok(v) => steps.push(json!({"step": name, "ok": true, "seconds": secs, "result": v})),
            Err(e) => {
                eprintln!("xtask bench: {name} failed: {e:#}");
                failed.push(name.to_owned());
                steps.push(
                    json!({"step": name, "ok": false, "seconds": secs, "error": format!("{e:#}")}),
                );
            }
        }
    };
    // Record a step, then rewrite the results so far.
    let mut step = |name: &str, r: anyhow::Result<Value>, steps: &mut Vec<Value>| {
        record(name, r, steps);
        if let Err(e) = write(quick, started, steps) {
            eprintln!("xtask bench: cannot write the results: {e:#}");
        }
    };

    step("carp_engines", policy_compare(quick), &mut steps);
    step("history_engines", history_compare(quick), &mut steps);
    let verify = trace_verify(quick);
    let one_million = verify.as_ref().ok().cloned();
    step("trace_verify", verify, &mut steps);
    step(
        "verify_growth",
        verify_growth(quick, one_million.as_ref()),
        &mut steps,
    );
    step("orient_growth", orient_growth(quick), &mut steps);
    step("http", http_load(quick, "http"), &mut steps);
    step("websocket", http_load(quick, "ws"), &mut steps);
    step("slow_clients", http_load(quick, "slow"), &mut steps);
    step("mcp_proxy", mcp_proxy(quick), &mut steps);
    step("console", console(quick), &mut steps);
    step("otlp_dead_endpoint", otlp_dead_endpoint(quick), &mut steps);
    for &(pkg, bench, area, in_quick) in CRITERION {
        if quick && !in_quick {
            continue;
        }
        let r = criterion_bench(pkg, bench, quick, SystemTime::now()).map(
            |figures| json!({"package": pkg, "bench": bench, "area": area, "figures": figures}),
        );
        step(&format!("criterion:{pkg}/{bench}"), r, &mut steps);
    }

    let (json_path, md_path) = outputs(quick);
    eprintln!(
        "xtask bench: wrote {json_path} and {md_path} in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!("benchmark steps failed: {}", failed.join(", "));
    }
    Ok(())
}

/// `--render`: renders the Markdown report again from the JSON results of the last run and the
/// current `bench/NOTES.md` (after editing the notes), measuring nothing.
fn render_again(quick: bool) -> anyhow::Result<()> {
    let (json_path, md_path) = outputs(quick);
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(json_path).with_context(|| format!("cannot read {json_path}"))?,
    )?;
    let mut md = render(&doc);
    if let Ok(notes) = std::fs::read_to_string("bench/NOTES.md") {
        md.push_str(&notes);
    }
    std::fs::write(md_path, md)?;
    eprintln!("xtask bench: rendered {md_path} from {json_path}");
    Ok(())
}

/// Where a run writes: the full run the committed files, a quick run files of its own.
fn outputs(quick: bool) -> (&'static str, &'static str) {
    if quick {
        ("bench/results/quick.json", "bench/results/RESULTS-quick.md")
    } else {
        ("bench/results/latest.json", "bench/RESULTS.md")
    }
}

/// Writes the JSON results and renders the Markdown report from the steps so far (called after
/// every step, so an interrupted run still leaves what it measured).
fn write(quick: bool, started: Instant, steps: &[Value]) -> anyhow::Result<()> {
    let (json_path, md_path) = outputs(quick);
    let doc = json!({
        "mode": if quick { "quick" } else { "full" },
        "date": cra_wire::clock::format_timestamp(cra_wire::Clock::now(&cra_wire::SystemClock)),
        "commit": git_commit(),
        "machine": machine(),
        "wall_seconds": started.elapsed().as_secs_f64(),
        "steps": steps,
    });
    std::fs::create_dir_all("bench/results")?;
    std::fs::write(json_path, serde_json::to_string_pretty(&doc)? + "\n")?;
    let mut md = render(&doc);
    // The hand-written analysis (what dominates, what is missing) follows the generated tables.
    if let Ok(notes) = std::fs::read_to_string("bench/NOTES.md") {
        md.push_str(&notes);
    }
    std::fs::write(md_path, md)?;
    Ok(())
}

pub(crate) fn workspace_root() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // xtask/ lives directly under the workspace root.
    let root = if dir.ends_with("xtask") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    };
    if !root.join("bench/policy-compare/Cargo.toml").exists() {
        bail!(
            "cannot find bench/policy-compare under {}; run from the workspace",
            root.display()
        );
    }
    Ok(root)
}

/// A `cargo` command for a nested build, with the variables `cargo run` set for this program
/// (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, ...) removed. Build scripts that declare
/// `rerun-if-env-changed` on them (ring's does, for every variable it reads) otherwise see them
/// differ from a build run from the shell, and rebuild, with every crate above them, at each
/// switch: CI's bench smoke rebuilt the TLS stack and the `cra` binary (100 s) for nothing.
pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let set_by_cargo_run = name.starts_with("CARGO_PKG_")
            || matches!(
                name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            );
        if set_by_cargo_run {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Runs `cmd` with its stderr (progress lines) passed through live, returning its stdout.
pub(crate) fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({}); its messages are above", out.status);
    }
    Ok(String::from_utf8(out.stdout)?)
}

pub(crate) fn status(cmd: &mut Command) -> anyhow::Result<()> {
    let s = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !s.success() {
        bail!("{cmd:?} failed ({s})");
    }
    Ok(())
}

fn summary(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return Value::Null;
    }
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    json!({"min": v[0], "median": median, "max": v[v.len() - 1], "runs": v.len()})
}

/// Builds every program of `bench/policy-compare` (release, target dir `bench/target`).
fn build_compare() -> anyhow::Result<()> {
    eprintln!("xtask bench: building bench/policy-compare (release, target dir {TARGET})");
    status(cargo().args([
        "build",
        "--release",
        "--quiet",
        "--manifest-path",
        "bench/policy-compare/Cargo.toml",
        "--target-dir",
        TARGET,
        "--bins",
    ]))
}

/// Builds the workspace programs the benchmarks run: cra-trace's `gen_trace` and `verify_file`
/// examples and, with `cli`, the `cra` binary (release, target dir `bench/target`).
fn build_workspace(cli: bool) -> anyhow::Result<()> {
    eprintln!(
        "xtask bench: building {}cra-trace's gen_trace and verify_file examples (release, target dir {TARGET})",
        if cli { "cra (cra-cli) and " } else { "" }
    );
    let mut cmd = cargo();
    cmd.args(["build", "--release", "--quiet", "--target-dir", TARGET]);
    if cli {
        cmd.args(["-p", "cra-cli", "--bin", "cra"]);
    }
    cmd.args(TRACE_EXAMPLES);
    status(&mut cmd)
}

/// The synthetic session of `events` events (seed 42), generated once and kept.
fn trace_file(events: u64) -> anyhow::Result<String> {
    let file = format!("{TARGET}/bench/session-{events}-42.trace.jsonl");
    std::fs::create_dir_all(format!("{TARGET}/bench"))?;
    if !Path::new(&file).exists() {
        status(
            Command::new(format!("{TARGET}/release/examples/gen_trace")).args([
                &file,
                &events.to_string(),
                "42",
            ]),
        )?;
    }
    Ok(file)
}

fn verify_limit(file: &str, runs: usize) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&output(
        Command::new(format!("{TARGET}/release/verify-limit")).args([
            file,
            "--runs",
            &runs.to_string(),
        ]),
    )?)?)
}

fn policy_compare(quick: bool) -> anyhow::Result<Value> {
    build_compare()?;
    let mut cmd = Command::new(format!("{TARGET}/release/policy-compare"));
    if quick {
        cmd.arg("--quick");
    }
    let out = output(&mut cmd)?;
    Ok(serde_json::from_str(&out)?)
}

/// `history-compare`: conditions on history in cra-carp and cedar-policy, each given the facts.
fn history_compare(quick: bool) -> anyhow::Result<Value> {
    build_compare()?;
    let mut cmd = Command::new(format!("{TARGET}/release/history-compare"));
    if quick {
        cmd.arg("--quick");
    }
    Ok(serde_json::from_str(&output(&mut cmd)?)?)
}

fn trace_verify(quick: bool) -> anyhow::Result<Value> {
    let events: u64 = if quick { 100_000 } else { 1_000_000 };
    let runs = if quick { 3 } else { 5 };
    let py_runs = if quick { 1 } else { 3 };
    build_workspace(false)?;
    // verify-limit is built by the policy-compare step (same manifest); build again in case that
    // step failed before building.
    build_compare()?;
    let file = trace_file(events)?;
    let limit = verify_limit(&file, runs)?;

    let mut cra_e2e = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out =
            output(Command::new(format!("{TARGET}/release/examples/verify_file")).arg(&file))?;
        cra_e2e.push(t.elapsed().as_secs_f64());
        let v: Value = serde_json::from_str(out.trim())?;
        if v["valid"] != json!(true) {
            bail!("verify_file did not verify {file}: {out}");
        }
    }
    let python = if Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let mut t_py = Vec::new();
        for _ in 0..py_runs {
            let t = Instant::now();
            let out = output(Command::new("python3").args([
                "tools/appendix_b.py",
                "verify",
                &file,
                "--json",
                "--no-dup-check",
            ]))?;
            t_py.push(t.elapsed().as_secs_f64());
            if !out.contains("true") {
                bail!("the Python verifier did not accept {file}: {out}");
            }
        }
        summary(t_py)
    } else {
        eprintln!("xtask bench: python3 not found; the Appendix B baseline is skipped");
        Value::Null
    };
    Ok(json!({
        "events": events,
        "file": file,
        "unit": "seconds per full verification",
        "in_process": limit,
        "cra_verify_file_end_to_end": summary(cra_e2e),
        "python_appendix_b": python,
    }))
}

/// Verify time vs chain length: `verify-limit` on sessions of 10k and 100k events (and the
/// 1M-event figure of the `trace_verify` step in the full run).
fn verify_growth(quick: bool, one_million: Option<&Value>) -> anyhow::Result<Value> {
    build_workspace(false)?;
    build_compare()?;
    let runs = if quick { 3 } else { 5 };
    let mut sizes = Vec::new();
    for events in [10_000u64, 100_000] {
        let file = trace_file(events)?;
        let mut r = verify_limit(&file, runs)?;
        r["events"] = json!(events);
        sizes.push(r);
    }
    if !quick {
        match one_million {
            Some(v) if v["events"] == json!(1_000_000) => {
                let mut r = v["in_process"].clone();
                r["events"] = json!(1_000_000);
                sizes.push(r);
            }
            _ => {
                let file = trace_file(1_000_000)?;
                let mut r = verify_limit(&file, 3)?;
                r["events"] = json!(1_000_000);
                sizes.push(r);
            }
        }
    }
    Ok(json!({"unit": "seconds per full verification, in memory", "sizes": sizes}))
}

fn orient_growth(quick: bool) -> anyhow::Result<Value> {
    build_compare()?;
    let mut cmd = Command::new(format!("{TARGET}/release/orient-growth"));
    if quick {
        cmd.arg("--quick");
    }
    Ok(serde_json::from_str(&output(&mut cmd)?)?)
}

/// `http-load` against the `cra` release binary: `only` is `http` or `ws`.
fn http_load(quick: bool, only: &str) -> anyhow::Result<Value> {
    build_compare()?;
    build_workspace(true)?;
    // 1,000 WebSocket subscribers need more than 1,024 descriptors in the driver and in the
    // server it starts: raise the soft limit to the hard one for both (through sh's ulimit).
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "ulimit -n \"$(ulimit -Hn)\" 2>/dev/null; exec \"$@\"",
        "sh",
        &format!("{TARGET}/release/http-load"),
    ]);
    cmd.args([
        "--cra",
        &format!("{TARGET}/release/cra"),
        "--atlas",
        "atlases/dev.cra.github-ops",
        "--work",
        &format!("{TARGET}/bench/http-load"),
        "--only",
        only,
    ]);
    if quick {
        cmd.arg("--quick");
    }
    Ok(serde_json::from_str(&output(&mut cmd)?)?)
}

/// A `tools/call` through `cra mcp proxy` against the same call straight to the upstream
/// (`bench/policy-compare/src/bin/mcp-proxy.rs`).
fn mcp_proxy(quick: bool) -> anyhow::Result<Value> {
    build_compare()?;
    build_workspace(true)?;
    let mut cmd = Command::new(format!("{TARGET}/release/mcp-proxy"));
    cmd.args([
        "--cra",
        &format!("{TARGET}/release/cra"),
        "--fs-server",
        FS_SERVER,
        "--work",
        &format!("{TARGET}/bench/mcp-proxy"),
    ]);
    if quick {
        cmd.args(["--calls", "500", "--runs", "1"]);
    }
    Ok(serde_json::from_str(&output(&mut cmd)?)?)
}

/// The operator console in Debian's chromium (`tools/peers/console_bench.mjs`, which needs
/// `.ci/install`'s puppeteer-core and chromium): 10,000 sessions, 1,000 live events a second
/// (a tenth of both with `--quick`).
fn console(quick: bool) -> anyhow::Result<Value> {
    build_workspace(true)?;
    let mut cmd = Command::new("node");
    cmd.args([
        "tools/peers/console_bench.mjs",
        "--cra",
        &format!("{TARGET}/release/cra"),
    ]);
    if quick {
        cmd.args(["--sessions", "1000", "--rate", "100", "--seconds", "5"]);
    }
    Ok(serde_json::from_str(&output(&mut cmd)?)?)
}

/// The append path with an OTLP endpoint that never answers against none (issue 27: a dead
/// collector must not slow it): `http-load --only http` at 16 clients, the two servers
/// alternating, `pairs` times. The endpoint is a loopback socket that listens and never
/// accepts, so every export hangs until its timeout (a refused connection would fail fast).
fn otlp_dead_endpoint(quick: bool) -> anyhow::Result<Value> {
    build_compare()?;
    build_workspace(true)?;
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0")?;
    let dead = format!(
        "otlp = {{ endpoint = \"http://{}\", timeout_ms = 5000 }}",
        blackhole.local_addr()?
    );
    let (pairs, seconds) = if quick { (1, "3") } else { (3, "8") };
    let mut rows = Vec::new();
    for pair in 0..pairs {
        for (variant, config) in [("none", None), ("dead", Some(dead.as_str()))] {
            let mut cmd = Command::new(format!("{TARGET}/release/http-load"));
            cmd.args([
                "--cra",
                &format!("{TARGET}/release/cra"),
                "--atlas",
                "atlases/dev.cra.github-ops",
                "--work",
                &format!("{TARGET}/bench/otlp-{variant}"),
                "--only",
                "http",
                "--clients",
                "16",
                "--runs",
                "1",
                "--seconds",
                seconds,
            ]);
            if let Some(c) = config {
                cmd.args(["--server-config", c]);
            }
            let doc: Value = serde_json::from_str(&output(&mut cmd)?)?;
            for row in doc["http"].as_array().into_iter().flatten() {
                rows.push(json!({"pair": pair, "otlp": variant, "op": row["op"],
                    "requests_per_second": row["requests_per_second"], "p99_ms": row["p99_ms"]}));
            }
        }
    }
    drop(blackhole);
    Ok(json!({"clients": 16, "pairs": pairs, "seconds": seconds, "rows": rows}))
}

/// Runs one criterion bench and reads back every benchmark it wrote during this run.
fn criterion_bench(
    pkg: &str,
    bench: &str,
    quick: bool,
    since: SystemTime,
) -> anyhow::Result<Vec<Value>> {
    eprintln!(
        "xtask bench: cargo bench -p {pkg} --bench {bench}{}",
        if quick { " -- --quick" } else { "" }
    );
    let mut cmd = cargo();
    // Criterion writes its results under `$CARGO_TARGET_DIR/criterion` (from the bench's own
    // working directory, the package's), not under `--target-dir`: give it the absolute path.
    let abs_target = std::env::current_dir()?.join(TARGET);
    cmd.env("CARGO_TARGET_DIR", &abs_target);
    cmd.args([
        "bench",
        "--quiet",
        "-p",
        pkg,
        "--bench",
        bench,
        "--target-dir",
        TARGET,
        "--",
    ]);
    if quick {
        cmd.arg("--quick");
    }
    let stdout = output(&mut cmd)?;
    let target = TARGET;
    let mut figures = Vec::new();
    collect(
        Path::new(&format!("{target}/criterion")),
        since,
        &mut figures,
    )?;
    if figures.is_empty() {
        bail!("cargo bench -p {pkg} wrote no criterion results");
    }
    figures.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    // Extra lines the benches print themselves (percentiles, a cold process's first call),
    // kept verbatim.
    let notes: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            ["p50", "p99", "first decision", "log cost"]
                .iter()
                .any(|k| l.contains(k))
        })
        .collect();
    if !notes.is_empty() {
        figures.push(json!({"id": "notes", "lines": notes}));
    }
    Ok(figures)
}

fn collect(dir: &Path, since: SystemTime, out: &mut Vec<Value>) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            let sample = path.join("sample.json");
            let fresh = std::fs::metadata(&sample)
                .and_then(|m| m.modified())
                .is_ok_and(|m| m >= since);
            if !fresh {
                continue;
            }
            let b: Value =
                serde_json::from_str(&std::fs::read_to_string(path.join("benchmark.json"))?)?;
            let s: Value = serde_json::from_str(&std::fs::read_to_string(&sample)?)?;
            let iters = s["iters"].as_array().context("sample.json without iters")?;
            let times = s["times"].as_array().context("sample.json without times")?;
            let per_iter: Vec<f64> = iters
                .iter()
                .zip(times)
                .filter_map(|(i, t)| Some(t.as_f64()? / i.as_f64()?))
                .collect();
            let mut fig = summary(per_iter);
            fig["id"] = b["full_id"].clone();
            fig["unit"] = json!("ns per iteration");
            fig["throughput"] = b["throughput"].clone();
            out.push(fig);
        } else {
            collect(&path, since, out)?;
        }
    }
    Ok(())
}

fn git_commit() -> Value {
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or(Value::Null, |o| {
            json!(String::from_utf8_lossy(&o.stdout).trim())
        })
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: Option<u64> = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.trim().to_owned());
    let first_line = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    json!({
        "kernel": first_line("uname", &["-r"]),
        "rustc": first_line("rustc", &["--version"]),
        "nproc": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "cpu_model": cpu,
        "memory_gib": mem_kib.map(|k| (k as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0),
        "loadavg_at_end": load,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn fmt_mmm(v: &Value, scale: f64, digits: usize) -> String {
    match (f(&v["min"]), f(&v["median"]), f(&v["max"])) {
        (Some(a), Some(b), Some(c)) => format!(
            "{:.d$} / **{:.d$}** / {:.d$}",
            a * scale,
            b * scale,
            c * scale,
            d = digits
        ),
        _ => "n/a".to_owned(),
    }
}

fn ratio(num: &Value, den: &Value) -> String {
    match (f(&num["median"]), f(&den["median"])) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".to_owned(),
    }
}

/// Renders the Markdown report from the JSON document.
fn render(doc: &Value) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let m = &doc["machine"];
    let _ = writeln!(s, "# cra benchmark results\n");
    let _ = writeln!(
        s,
        "Generated by `cargo xtask bench{}` (do not edit by hand; the raw figures are in `bench/results/{}`).\n",
        if doc["mode"] == "quick" {
            " --quick"
        } else {
            ""
        },
        if doc["mode"] == "quick" {
            "quick.json"
        } else {
            "latest.json"
        }
    );
    let _ = writeln!(
        s,
        "- mode: **{}**; date {}; commit `{}`; wall time {:.0} s",
        doc["mode"].as_str().unwrap_or("?"),
        doc["date"].as_str().unwrap_or("?"),
        doc["commit"].as_str().unwrap_or("?"),
        f(&doc["wall_seconds"]).unwrap_or(0.0)
    );
    let _ = writeln!(
        s,
        "- machine: {} cores (`nproc`), {} GiB, CPU `{}`, {} / {}, kernel `{}`, `{}`; load average at the last step's end `{}` (the machine is shared: only same-run ratios are meaningful)",
        m["nproc"],
        m["memory_gib"],
        m["cpu_model"].as_str().unwrap_or("?"),
        m["os"].as_str().unwrap_or("?"),
        m["arch"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?"),
        m["rustc"].as_str().unwrap_or("?"),
        m["loadavg_at_end"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        s,
        "- every figure is min / **median** / max over repeated runs; ratios are of medians\n"
    );

    let mut growth: Vec<GrowthRow> = Vec::new();
    for step in doc["steps"].as_array().into_iter().flatten() {
        let name = step["step"].as_str().unwrap_or("?");
        if step["ok"] != json!(true) {
            let _ = writeln!(
                s,
                "## {name}: FAILED\n\n```\n{}\n```\n",
                step["error"].as_str().unwrap_or("?")
            );
            continue;
        }
        let r = &step["result"];
        match name {
            "carp_engines" => render_engines(&mut s, r, &mut growth),
            "history_engines" => render_history_engines(&mut s, r),
            "trace_verify" => render_verify(&mut s, r),
            "verify_growth" => render_verify_growth(&mut s, r, &mut growth),
            "orient_growth" => render_orient(&mut s, r, &mut growth),
            "http" => render_http(&mut s, r),
            "websocket" => render_ws(&mut s, r),
            "slow_clients" => render_slow(&mut s, r),
            "mcp_proxy" => render_mcp_proxy(&mut s, r),
            "console" => render_console(&mut s, r),
            "otlp_dead_endpoint" => render_otlp_dead(&mut s, r),
            _ => render_criterion(&mut s, name, r),
        }
    }
    if !growth.is_empty() {
        let _ = writeln!(s, "## Cost growth (fitted order)\n");
        let _ = writeln!(
            s,
            "Exponent k of a least-squares fit of log(median time) on log(size): time grows as size^k (k = 1 is linear, 2 quadratic, about 0 constant).\n"
        );
        let _ = writeln!(s, "| quantity | sizes | median per size | fitted k |");
        let _ = writeln!(s, "|---|---|---|---:|");
        for g in &growth {
            let sizes: Vec<String> = g.points.iter().map(|p| thousands(p.0)).collect();
            let times: Vec<String> = g
                .points
                .iter()
                .map(|p| format!("{:.prec$} {}", p.1, g.unit, prec = g.digits))
                .collect();
            let k = fit_exponent(&g.points).map_or("n/a".to_owned(), |k| format!("{k:.2}"));
            let _ = writeln!(
                s,
                "| {} | {} | {} | {k} |",
                g.what,
                sizes.join(", "),
                times.join(", ")
            );
        }
        let _ = writeln!(s);
    }
    s
}

fn render_mcp_proxy(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let ms = |v: &Value| f(v).map_or("?".to_owned(), |us| format!("{:.3} ms", us / 1000.0));
    let _ = writeln!(
        s,
        "## MCP proxy: a tool call through `cra mcp proxy` vs straight to the upstream
"
    );
    let _ = writeln!(
        s,
        "`read_text_file` of the filesystem MCP server, {} calls per path over {} runs, alternating; through the proxy every call is a durable CARP execute (`bench/policy-compare/src/bin/mcp-proxy.rs`). Target: at most 1 ms added at p50 and 3 ms at p99.\n",
        r["calls_per_path"], r["runs"]
    );
    let _ = writeln!(s, "| path | p50 | p99 |");
    let _ = writeln!(s, "|---|---:|---:|");
    for (name, key) in [
        ("straight to the upstream", "direct_us"),
        ("through cra mcp proxy", "proxy_us"),
        ("added by the proxy", "added_us"),
    ] {
        let _ = writeln!(
            s,
            "| {name} | {} | {} |",
            ms(&r[key]["p50"]),
            ms(&r[key]["p99"])
        );
    }
    let _ = writeln!(s);
}

fn render_console(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let ms = |v: &Value| f(v).map_or("?".to_owned(), |x| format!("{x:.0} ms"));
    let live = &r["live"];
    let _ = writeln!(
        s,
        "## Console: {} sessions, {} live events a second, in chromium
",
        r["sessions"], r["rate"]
    );
    let _ = writeln!(
        s,
        "`tools/peers/console_bench.mjs`: the sessions are opened through the API, then the live view is watched while the API ends them at the rate (one `session.ended` each); delays run from an event's timestamp to its row in the page; the main thread's lag is a 50 ms timer's lateness. Target: the live view draws every event, delay p99 under 1 s, and a click is answered within 500 ms under the load.
"
    );
    let _ = writeln!(s, "| figure | value |");
    let _ = writeln!(s, "|---|---:|");
    let rows = [
        ("sessions opened (API)", ms(&r["seed_ms"])),
        (
            "sessions page drawn (median of 3)",
            ms(&r["sessions_page_ms"]["p50"]),
        ),
        (
            "events sent / drawn while watched",
            format!("{} / {}", live["sent"], live["drawn"]),
        ),
        (
            "rate reached",
            f(&live["rate_reached"]).map_or("?".into(), |x| format!("{x:.0} /s")),
        ),
        ("event to row, p50", ms(&live["delay_ms"]["p50"])),
        ("event to row, p99", ms(&live["delay_ms"]["p99"])),
        (
            "main thread lag, p99",
            ms(&live["main_thread_lag_ms"]["p99"]),
        ),
        (
            "under load: sessions page drawn",
            ms(&r["sessions_page_under_load_ms"]),
        ),
        (
            "under load: a session's verified timeline drawn",
            ms(&r["session_page_under_load_ms"]),
        ),
    ];
    for (name, value) in rows {
        let _ = writeln!(s, "| {name} | {value} |");
    }
    let _ = writeln!(s);
}

fn render_otlp_dead(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let rows = r["rows"].as_array().cloned().unwrap_or_default();
    let median = |variant: &str, op: &str, key: &str| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|x| x["otlp"] == variant && x["op"] == op)
            .filter_map(|x| f(&x[key]))
            .collect();
        summary(v)["median"].as_f64()
    };
    let _ = writeln!(
        s,
        "## OTLP export to a dead collector vs none\n\n`http-load --only http`, {} clients, {} alternating pairs of servers: one without `[otlp]`, one exporting to a loopback socket that never accepts (every export hangs to its 5 s timeout). Target: the append path is not slowed (ratios within the run's noise, about 0.9 to 1.1).\n",
        r["clients"], r["pairs"]
    );
    let _ = writeln!(
        s,
        "| operation | req/s without | req/s dead collector | ratio | p99 without | p99 dead collector |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    for op in ["resolve", "execute", "deposit"] {
        let (a, b) = (
            median("none", op, "requests_per_second"),
            median("dead", op, "requests_per_second"),
        );
        let ratio = a
            .zip(b)
            .map_or("?".to_owned(), |(a, b)| format!("{:.2}", b / a));
        let ms = |v: Option<f64>| v.map_or("?".to_owned(), |x| format!("{x:.2} ms"));
        let _ = writeln!(
            s,
            "| {op} | {:.0} | {:.0} | {ratio} | {} | {} |",
            a.unwrap_or(f64::NAN),
            b.unwrap_or(f64::NAN),
            ms(median("none", op, "p99_ms")),
            ms(median("dead", op, "p99_ms"))
        );
    }
    let _ = writeln!(s);
}

/// One row of the growth table: (size, median time) points.
struct GrowthRow {
    what: String,
    unit: &'static str,
    digits: usize,
    points: Vec<(f64, f64)>,
}

/// The slope of the least-squares line through (ln size, ln time).
fn fit_exponent(points: &[(f64, f64)]) -> Option<f64> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn points(sizes: &Value, size_key: &str, figure: &[&str], scale: f64) -> Vec<(f64, f64)> {
    sizes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|z| {
            let mut v = z;
            for k in figure {
                v = &v[*k];
            }
            Some((f(&z[size_key])?, f(&v["median"])? * scale))
        })
        .collect()
}

fn render_engines(s: &mut String, r: &Value, growth: &mut Vec<GrowthRow>) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "## CARP evaluation: cra-carp vs cedar-policy {} and regorus {}\n",
        r["cedar_policy_version"].as_str().unwrap_or(""),
        r["regorus_version"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        s,
        "Question: which of the atlas's N actions may this agent run now (a full CARP resolve; Cedar answers it with one `is_authorized` per action; Rego with one query of a set-valued `allowed` rule). All three engines' decisions were compared on every benchmarked (question, action) pair before timing; a difference aborts the run. Cedar's cost grows with actions x policies, so the larger atlases are measured on fewer distinct questions (and a slow engine's runs are capped by a time budget: `runs` says how many).\n"
    );
    let _ = writeln!(
        s,
        "| actions | policies | questions | decisions checked (all equal) | cra µs/resolve | cedar µs/resolve | rego µs/resolve | cedar / cra | rego / cra |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---|---|---|---:|---:|");
    for z in r["sizes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} ({} runs) | {} ({} runs) | {} | {} |",
            z["actions"],
            z["policies"],
            z["questions"],
            z["decisions_checked"],
            fmt_mmm(&z["cra"], 1.0, 2),
            fmt_mmm(&z["cedar"], 1.0, 1),
            z["cedar"]["runs"],
            fmt_mmm(&z["rego"], 1.0, 1),
            z["rego"]["runs"],
            ratio(&z["cedar"], &z["cra"]),
            ratio(&z["rego"], &z["cra"])
        );
    }
    let _ = writeln!(s);
    for (engine, label) in [
        ("cra", "resolve (cra-carp, in process) vs atlas actions"),
        (
            "cedar",
            "cedar-policy, one is_authorized per action, vs atlas actions",
        ),
        ("rego", "regorus `allowed` set query vs atlas actions"),
    ] {
        growth.push(GrowthRow {
            what: label.to_owned(),
            unit: "µs",
            digits: 1,
            points: points(&r["sizes"], "actions", &[engine], 1.0),
        });
    }
}

fn render_history_engines(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "## Conditions on history: cra-carp vs cedar-policy {}\n",
        r["cedar_policy_version"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        s,
        "The history benchmark's atlas ({} actions; the target's allow holds {} history tests), each engine given exactly the facts it needs: Cedar a context of the 20 values, cra its predicates answered from a set of the marks that exist and its charges checked against the counters' values. Reading those facts from a store is `history/decide` below. {} decisions were compared before timing.\n",
        r["actions"], r["history_tests"], r["decisions_checked"]
    );
    let _ = writeln!(
        s,
        "| question | cra µs | cedar µs | cedar / cra |\n|---|---|---|---:|"
    );
    for (q, label) in [
        (
            "resolve_100",
            "which of the 100 actions may run (cra: resolve; Cedar: one is_authorized per action)",
        ),
        ("decide", "may this call of the target run"),
    ] {
        let z = &r["questions"][q];
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {} |",
            fmt_mmm(&z["cra"], 1.0, 2),
            fmt_mmm(&z["cedar"], 1.0, 2),
            ratio(&z["cedar"], &z["cra"])
        );
    }
    let _ = writeln!(s);
}

fn render_verify(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let ip = &r["in_process"];
    let ev = r["events"].as_f64().unwrap_or(1.0);
    let _ = writeln!(
        s,
        "## TRACE verification ({} events, {} bytes, {} preimage bytes)\n",
        r["events"], ip["file_bytes"], ip["preimage_bytes"]
    );
    let _ = writeln!(
        s,
        "| what | seconds | events/s (median) | vs raw SHA-256 (limit) | Python / this |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|");
    let py = &r["python_appendix_b"];
    let limit = &ip["sha256_preimages"];
    let rows = [
        ("raw SHA-256 of the preimages, 1 core (the limit)", limit),
        (
            "cra verify_reader, 1 thread, in memory",
            &ip["verify_1_thread"],
        ),
        (
            "cra verify_reader, all threads, in memory",
            &ip["verify_all_threads"],
        ),
        (
            "cra verify_file example, end to end (process + file read)",
            &r["cra_verify_file_end_to_end"],
        ),
        (
            "Appendix B Python verifier (tools/appendix_b.py --no-dup-check)",
            py,
        ),
    ];
    for (label, v) in rows {
        let eps = f(&v["median"]).map_or("n/a".to_owned(), |t| format!("{:.0}", ev / t));
        let _ = writeln!(
            s,
            "| {label} | {} | {eps} | {} | {} |",
            fmt_mmm(v, 1.0, 3),
            ratio(v, limit),
            ratio(py, v)
        );
    }
    let _ = writeln!(s);
}

fn render_verify_growth(s: &mut String, r: &Value, growth: &mut Vec<GrowthRow>) {
    use std::fmt::Write;
    let _ = writeln!(s, "## TRACE verify time vs chain length (in memory)\n");
    let _ = writeln!(
        s,
        "| events | raw SHA-256 s | verify 1 thread s | verify all threads s | 1 thread / SHA-256 | events/s (all threads) |"
    );
    let _ = writeln!(s, "|---:|---|---|---|---:|---:|");
    for z in r["sizes"].as_array().into_iter().flatten() {
        let eps = f(&z["verify_all_threads"]["median"])
            .zip(f(&z["events"]))
            .map_or("n/a".to_owned(), |(t, n)| format!("{:.0}", n / t));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {eps} |",
            thousands(f(&z["events"]).unwrap_or(0.0)),
            fmt_mmm(&z["sha256_preimages"], 1.0, 4),
            fmt_mmm(&z["verify_1_thread"], 1.0, 4),
            fmt_mmm(&z["verify_all_threads"], 1.0, 4),
            ratio(&z["verify_1_thread"], &z["sha256_preimages"])
        );
    }
    let _ = writeln!(s);
    for (fig, label) in [
        ("verify_1_thread", "TRACE verify, 1 thread, vs chain length"),
        (
            "verify_all_threads",
            "TRACE verify, all threads, vs chain length",
        ),
    ] {
        growth.push(GrowthRow {
            what: label.to_owned(),
            unit: "ms",
            digits: 1,
            points: points(&r["sizes"], "events", &[fig], 1e3),
        });
    }
}

fn render_orient(s: &mut String, r: &Value, growth: &mut Vec<GrowthRow>) {
    use std::fmt::Write;
    if r.get("rows").is_none() {
        return render_orient_memory_only(s, r, growth);
    }
    let _ = writeln!(s, "## Relay orient vs package count, per store\n");
    for (name, what) in r["stores"].as_object().into_iter().flatten() {
        let _ = writeln!(s, "- {name}: {}", what.as_str().unwrap_or("?"));
    }
    for (name, what) in r["shapes"].as_object().into_iter().flatten() {
        let _ = writeln!(s, "- shape `{name}`: {}", what.as_str().unwrap_or("?"));
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| store | shape | packages | orient µs | vs the smallest size | load s | recent packages returned |"
    );
    let _ = writeln!(s, "|---|---|---:|---|---:|---:|---:|");
    let rows: Vec<Value> = r["rows"].as_array().cloned().unwrap_or_default();
    let mut groups: Vec<(String, String)> = Vec::new();
    for z in &rows {
        let key = (
            z["store"].as_str().unwrap_or("?").to_owned(),
            z["shape"].as_str().unwrap_or("?").to_owned(),
        );
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (store, shape) in &groups {
        let of: Vec<Value> = rows
            .iter()
            .filter(|z| z["store"] == json!(store) && z["shape"] == json!(shape))
            .cloned()
            .collect();
        let base = of.first().and_then(|z| f(&z["orient_us"]["median"]));
        for z in &of {
            let ratio = f(&z["orient_us"]["median"])
                .zip(base)
                .map_or("n/a".to_owned(), |(t, b)| format!("{:.2}x", t / b));
            let _ = writeln!(
                s,
                "| {store} | {shape} | {} | {} | {ratio} | {:.2} | {} |",
                thousands(f(&z["packages"]).unwrap_or(0.0)),
                fmt_mmm(&z["orient_us"], 1.0, 1),
                f(&z["load_seconds"]).unwrap_or(f64::NAN),
                z["recent_packages_returned"]
            );
        }
        growth.push(GrowthRow {
            what: format!("Relay orient vs packages in the project ({store}, {shape})"),
            unit: "µs",
            digits: 1,
            points: points(&Value::Array(of), "packages", &["orient_us"], 1.0),
        });
    }
    let _ = writeln!(s);
}

/// The results of `orient-growth` before it measured every store (the in-memory store only).
fn render_orient_memory_only(s: &mut String, r: &Value, growth: &mut Vec<GrowthRow>) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "## Relay orient vs package count ({})\n",
        r["store"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        s,
        "| packages | orient µs | per package ns | Markdown briefing µs | recent packages returned |"
    );
    let _ = writeln!(s, "|---:|---|---:|---|---:|");
    for z in r["sizes"].as_array().into_iter().flatten() {
        let per = f(&z["orient_us"]["median"])
            .zip(f(&z["packages"]))
            .map_or("n/a".to_owned(), |(t, n)| format!("{:.0}", t * 1e3 / n));
        let _ = writeln!(
            s,
            "| {} | {} | {per} | {} | {} |",
            thousands(f(&z["packages"]).unwrap_or(0.0)),
            fmt_mmm(&z["orient_us"], 1.0, 1),
            fmt_mmm(&z["markdown_us"], 1.0, 1),
            z["recent_packages_returned"]
        );
    }
    let _ = writeln!(s);
    growth.push(GrowthRow {
        what: "Relay orient vs packages in the project".to_owned(),
        unit: "µs",
        digits: 1,
        points: points(&r["sizes"], "packages", &["orient_us"], 1.0),
    });
}

/// Values of `key` over the rows matching `keep`, as a min / median / max summary.
fn over_runs(rows: &[Value], keep: impl Fn(&Value) -> bool, key: &str) -> Value {
    summary(
        rows.iter()
            .filter(|r| keep(r))
            .filter_map(|r| f(&r[key]))
            .collect(),
    )
}

fn render_http(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let rows = r["http"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        s,
        "## HTTP: `cra serve` on loopback, durable TRACE before every answer\n"
    );
    let _ = writeln!(
        s,
        "{}; atlas `{}`; every client its own session, project and connection pool, distinct requests back to back for {} s per phase; {} run(s) per figure (a fresh server per client count and run). Latency: each request timed alone, send to complete body. `vs 1 client` is requests/s over the 1-client figure. The load generator runs on the same 2 cores as the server.\n",
        r["server"].as_str().unwrap_or("?"),
        r["atlas"].as_str().unwrap_or("?"),
        r["seconds_per_phase"],
        r["runs"]
    );
    let _ = writeln!(
        s,
        "| operation | clients | requests/s | p50 ms | p99 ms | max ms | errors | TRACE events/s | vs 1 client |"
    );
    let _ = writeln!(s, "|---|---:|---|---|---|---:|---:|---:|---:|");
    let mut keys: Vec<(String, u64)> = Vec::new();
    for row in &rows {
        let k = (
            row["op"].as_str().unwrap_or("?").to_owned(),
            row["clients"].as_u64().unwrap_or(0),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.sort_by_key(|k| {
        (
            ["resolve", "execute", "deposit"]
                .iter()
                .position(|o| *o == k.0)
                .unwrap_or(9),
            k.1,
        )
    });
    for (op, clients) in &keys {
        let sel = |c: u64| {
            let op = op.clone();
            move |x: &Value| x["op"] == json!(op) && x["clients"] == json!(c)
        };
        let rps = over_runs(&rows, sel(*clients), "requests_per_second");
        let one = over_runs(&rows, sel(1), "requests_per_second");
        let errors: u64 = rows
            .iter()
            .filter(|x| sel(*clients)(x))
            .filter_map(|x| x["errors"].as_u64())
            .sum();
        let _ = writeln!(
            s,
            "| {op} | {clients} | {} | {} | {} | {} | {errors} | {} | {} |",
            fmt_mmm(&rps, 1.0, 0),
            fmt_mmm(&over_runs(&rows, sel(*clients), "p50_ms"), 1.0, 2),
            fmt_mmm(&over_runs(&rows, sel(*clients), "p99_ms"), 1.0, 2),
            f(&over_runs(&rows, sel(*clients), "max_ms")["max"])
                .map_or("n/a".to_owned(), |v| format!("{v:.1}")),
            f(&over_runs(&rows, sel(*clients), "trace_events_per_second")["median"])
                .map_or("n/a".to_owned(), |v| format!("{v:.0}")),
            ratio(&rps, &one)
        );
    }
    let _ = writeln!(s);
}

/// The slow-client benchmark: an agent's latency alone and under the slow connections, and the
/// server's memory (issue 29's target: p99 under 100 ms, memory flat).
fn render_slow(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let r = &r["slow_clients"];
    let _ = writeln!(
        s,
        "## Slow clients: an agent's resolves while {} connections trickle a request head\n",
        r["slow_connections"]
    );
    let _ = writeln!(
        s,
        "Each slow connection sends part of a head, then a byte a second, and reconnects when closed ({} connections opened in all). The agent's resolves are timed alone, back to back. Target: p99 under 100 ms, memory flat.\n",
        r["slow_connections_opened"]
    );
    let _ = writeln!(s, "| phase | requests | p50 ms | p99 ms | max ms |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for (name, key) in [
        ("alone", "alone"),
        ("under slow clients", "under_slow_clients"),
    ] {
        let p = &r[key];
        let _ = writeln!(
            s,
            "| {name} | {} | {:.2} | {:.2} | {:.2} |",
            p["requests"],
            f(&p["p50_ms"]).unwrap_or(f64::NAN),
            f(&p["p99_ms"]).unwrap_or(f64::NAN),
            f(&p["max_ms"]).unwrap_or(f64::NAN)
        );
    }
    let m = &r["rss_kib"];
    let mib = |k: &str| f(&m[k]).map_or(f64::NAN, |v| v / 1024.0);
    let _ = writeln!(
        s,
        "\nServer memory (VmRSS): {:.1} MiB before, {:.1} MiB once the slow connections were held, {:.1} MiB after the timed phase under them, {:.1} MiB after they left.\n",
        mib("before"),
        mib("held"),
        mib("under"),
        mib("after")
    );
}

fn render_ws(s: &mut String, r: &Value) {
    use std::fmt::Write;
    let rows = r["ws"].as_array().cloned().unwrap_or_default();
    let base = r["ws_baseline_broadcast"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "## WebSocket fan-out: one session emitting {} events/s for {} s\n",
        r["emit_rate_per_second"], r["ws_seconds"]
    );
    let _ = writeln!(
        s,
        "Each event is a Relay deposit recorded in the busy session's chain, durable before it is streamed. Latency: {}. The baseline is a bare `tokio::sync::broadcast` in one process sending the same number of ~1 KB messages at full speed to as many receiver tasks (no sockets, no JSON, no durability): the in-process ceiling of deliveries/s. Target: 1,000 subscribers all receive every event, p99 < 100 ms.\n",
        rows.first()
            .and_then(|x| x["latency"].as_str())
            .unwrap_or("?")
    );
    let _ = writeln!(
        s,
        "| subscribers | deliveries / expected | subscribers complete | slow-closed (4008) | deliveries/s | p50 ms | p99 ms | max ms | bare broadcast deliveries/s | broadcast / cra |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---|---|---|---:|---:|---:|");
    let mut sizes: Vec<u64> = rows
        .iter()
        .filter_map(|x| x["subscribers"].as_u64())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    for n in sizes {
        let sel = |x: &Value| x["subscribers"] == json!(n);
        let mine: Vec<&Value> = rows.iter().filter(|x| sel(x)).collect();
        let sum = |k: &str| -> u64 { mine.iter().filter_map(|x| x[k].as_u64()).sum() };
        let dps = over_runs(&rows, sel, "deliveries_per_second");
        let b = base
            .iter()
            .find(|x| x["subscribers"] == json!(n))
            .map_or(Value::Null, |x| {
                summary(f(&x["deliveries_per_second"]).into_iter().collect())
            });
        let _ = writeln!(
            s,
            "| {n} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {} | {} |",
            sum("deliveries"),
            sum("deliveries_expected"),
            sum("subscribers_complete"),
            n * mine.len() as u64,
            sum("closed_slow_consumer"),
            fmt_mmm(&dps, 1.0, 0),
            fmt_mmm(&over_runs(&rows, sel, "p50_ms"), 1.0, 1),
            fmt_mmm(&over_runs(&rows, sel, "p99_ms"), 1.0, 1),
            f(&over_runs(&rows, sel, "max_ms")["max"])
                .map_or("n/a".to_owned(), |v| format!("{v:.1}")),
            f(&b["median"]).map_or("n/a".to_owned(), |v| format!("{v:.0}")),
            ratio(&b, &dps)
        );
    }
    let _ = writeln!(s);
}

fn render_criterion(s: &mut String, name: &str, r: &Value) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "## {} (criterion: `cargo bench -p {} --bench {}`)\n",
        r["area"].as_str().unwrap_or(name),
        r["package"].as_str().unwrap_or("?"),
        r["bench"].as_str().unwrap_or("?")
    );
    let figs = r["figures"].as_array().cloned().unwrap_or_default();
    let id = |x: &Value| x["id"].as_str().unwrap_or("?").to_owned();
    if r["area"] == "durable_append" {
        render_appends(s, &figs);
    }
    let _ = writeln!(s, "| benchmark | µs per iteration | throughput |");
    let _ = writeln!(s, "|---|---|---|");
    for x in &figs {
        if x["id"] == "notes" {
            continue;
        }
        let tp = match x["throughput"].as_object().and_then(|o| o.iter().next()) {
            Some((k, v)) => format!("{v} {k} per iteration"),
            None => String::new(),
        };
        let _ = writeln!(s, "| `{}` | {} | {tp} |", id(x), fmt_mmm(x, 1e-3, 2));
    }
    if let Some(n) = figs.iter().find(|x| x["id"] == "notes") {
        let _ = writeln!(s, "\nPrinted by the bench:\n");
        for l in n["lines"].as_array().into_iter().flatten() {
            let _ = writeln!(s, "    {}", l.as_str().unwrap_or(""));
        }
    }
    let _ = writeln!(s);
}

/// The durable-append table: the collector's events/s per backend and session count beside the
/// bare write + fdatasync loop at the same batch size.
fn render_appends(s: &mut String, figs: &[Value]) {
    use std::fmt::Write;
    let baseline = figs.iter().find(|x| {
        x["id"]
            .as_str()
            .is_some_and(|i| i.starts_with("fsync_baseline"))
    });
    let base_eps = baseline.and_then(per_element).map(|ns| 1e9 / ns);
    let _ = writeln!(
        s,
        "Every append is acknowledged only once durable. Limit: one thread writing the same event JSON and calling fdatasync per batch, at the same batch size{}. `collector / bare loop` is time per event (the target is at most 2x).\n",
        base_eps.map_or(String::new(), |e| format!(" ({e:.0} events/s)"))
    );
    let _ = writeln!(
        s,
        "| backend | batch | sessions | events/s (median) | bare loop events/s | collector / bare loop |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    let mut any_pg = false;
    let mut rows: Vec<&Value> = figs.iter().collect();
    let sessions = |x: &Value| -> (String, u64) {
        let id = x["id"].as_str().unwrap_or("");
        let parts: Vec<&str> = id.split('/').collect();
        let n = parts
            .get(3)
            .and_then(|p| p.trim_end_matches("_sessions").parse().ok())
            .unwrap_or(0);
        (parts.get(1).copied().unwrap_or("").to_owned(), n)
    };
    rows.sort_by_key(|x| sessions(x));
    for x in rows {
        let Some(id) = x["id"].as_str() else { continue };
        // durable_append/<backend>/batch<b>/<n>_sessions
        let parts: Vec<&str> = id.split('/').collect();
        if parts.len() != 4 || parts[0] != "durable_append" {
            continue;
        }
        any_pg |= parts[1] == "postgres";
        let eps = per_element(x).map(|ns| 1e9 / ns);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            parts[1],
            parts[2].trim_start_matches("batch"),
            parts[3].trim_end_matches("_sessions"),
            eps.map_or("n/a".to_owned(), |e| format!("{e:.0}")),
            base_eps.map_or("n/a".to_owned(), |e| format!("{e:.0}")),
            eps.zip(base_eps)
                .map_or("n/a".to_owned(), |(e, b)| format!("{:.2}x", b / e))
        );
    }
    if !any_pg {
        let _ = writeln!(
            s,
            "\nPostgreSQL: not measured in this run (`CRA_TEST_POSTGRES_URL` was not set)."
        );
    }
    let _ = writeln!(s);
}

/// Median nanoseconds per element of a criterion figure with an element throughput.
fn per_element(x: &Value) -> Option<f64> {
    let n = x["throughput"]["Elements"].as_f64()?;
    Some(f(&x["median"])? / n)
}
