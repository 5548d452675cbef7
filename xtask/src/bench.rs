//! `cargo xtask bench [--quick]`: runs the benchmarks with their same-run baselines, writes
//! `bench/results/latest.json` and renders `bench/RESULTS.md`.
//!
//! What runs (each as a subprocess, one cargo command at a time):
//! * CARP: `bench/policy-compare` (a separate manifest, target dir `bench/target`): cra-carp
//!   resolve vs cedar-policy on identical questions, decisions compared before timing;
//! * TRACE: a synthetic session from cra-trace's `gen_trace` example, then `verify-limit` (cra's
//!   verifier vs raw SHA-256 of the same preimages, in one process), cra-trace's `verify_file`
//!   example end to end, and the Appendix B Python verifier (`tools/appendix_b.py`) on the same
//!   file;
//! * the crates' own criterion benches (`cargo bench -p <crate> --bench <name> -- --quick` in
//!   quick mode), read back from `bench/target/criterion/**/new/{benchmark,sample}.json`: per-iteration
//!   min / median / max over criterion's samples.
//!
//! A step that fails is recorded as failed (with its error) and the others still run; the command
//! fails at the end if any step failed, so a broken benchmark is not silently dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// Criterion benches run, in this order.
const CRITERION: &[(&str, &str, &str, bool)] = &[
    // (package, bench, area, run in quick mode)
    ("cra-carp", "resolve", "carp", true),
    ("cra-store", "append", "durable_append", true),
    ("cra-trace", "trace", "trace", false),
    ("cra-relay", "relay", "relay", false),
    ("cra-atlas", "atlas", "atlas", false),
];

/// Every build of this command goes to its own target dir, so it never waits on the lock of the
/// shared `target/` (and the comparison crates never mix with the workspace's).
const TARGET: &str = "bench/target";

/// Entry point.
pub fn run(args: &[String]) -> anyhow::Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let root = workspace_root()?;
    std::env::set_current_dir(&root)?;
    let started = Instant::now();
    let start_time = SystemTime::now();
    let mut steps: Vec<Value> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut record = |name: &str, r: anyhow::Result<Value>, steps: &mut Vec<Value>| match r {
        Ok(v) => steps.push(json!({"step": name, "ok": true, "result": v})),
        Err(e) => {
            eprintln!("xtask bench: {name} failed: {e:#}");
            failed.push(name.to_owned());
            steps.push(json!({"step": name, "ok": false, "error": format!("{e:#}")}));
        }
    };
    // Record a step, then rewrite the results so far.
    let mut step = |name: &str, r: anyhow::Result<Value>, steps: &mut Vec<Value>| {
        record(name, r, steps);
        if let Err(e) = write(quick, started, steps) {
            eprintln!("xtask bench: cannot write the results: {e:#}");
        }
    };

    step("carp_vs_cedar", policy_compare(quick), &mut steps);
    step("trace_verify", trace_verify(quick), &mut steps);
    for &(pkg, bench, area, in_quick) in CRITERION {
        if quick && !in_quick {
            continue;
        }
        let r = criterion_bench(pkg, bench, quick, start_time).map(
            |figures| json!({"package": pkg, "bench": bench, "area": area, "figures": figures}),
        );
        step(&format!("criterion:{pkg}/{bench}"), r, &mut steps);
    }

    eprintln!(
        "xtask bench: wrote bench/results/latest.json and bench/RESULTS.md in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!("benchmark steps failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Writes `bench/results/latest.json` and renders `bench/RESULTS.md` from the steps so far
/// (called after every step, so an interrupted run still leaves what it measured).
fn write(quick: bool, started: Instant, steps: &[Value]) -> anyhow::Result<()> {
    let doc = json!({
        "mode": if quick { "quick" } else { "full" },
        "date": cra_wire::clock::format_timestamp(cra_wire::Clock::now(&cra_wire::SystemClock)),
        "commit": git_commit(),
        "machine": machine(),
        "wall_seconds": started.elapsed().as_secs_f64(),
        "steps": steps,
    });
    std::fs::create_dir_all("bench/results")?;
    std::fs::write(
        "bench/results/latest.json",
        serde_json::to_string_pretty(&doc)? + "\n",
    )?;
    let mut md = render(&doc);
    // The hand-written analysis (what dominates, what is missing) follows the generated tables.
    if let Ok(notes) = std::fs::read_to_string("bench/NOTES.md") {
        md.push_str(&notes);
    }
    std::fs::write("bench/RESULTS.md", md)?;
    Ok(())
}

fn workspace_root() -> anyhow::Result<PathBuf> {
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

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

/// Runs `cmd`, returning its stdout; fails with its stderr's tail when it fails.
fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("{cmd:?} failed ({}):\n{}", out.status, tail.join("\n"));
    }
    // Progress lines from the benchmark programs are useful in the log.
    eprint!(
        "{}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.trim_start().starts_with("Compiling"))
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn status(cmd: &mut Command) -> anyhow::Result<()> {
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

fn policy_compare(quick: bool) -> anyhow::Result<Value> {
    eprintln!("xtask bench: building bench/policy-compare (release, target dir bench/target)");
    status(cargo().args([
        "build",
        "--release",
        "--quiet",
        "--manifest-path",
        "bench/policy-compare/Cargo.toml",
        "--target-dir",
        "bench/target",
        "--bins",
    ]))?;
    let mut cmd = Command::new("bench/target/release/policy-compare");
    if quick {
        cmd.arg("--quick");
    }
    let out = output(&mut cmd)?;
    Ok(serde_json::from_str(&out)?)
}

fn trace_verify(quick: bool) -> anyhow::Result<Value> {
    let events: u64 = if quick { 100_000 } else { 1_000_000 };
    let runs = if quick { 3 } else { 5 };
    let py_runs = if quick { 1 } else { 3 };
    let target = TARGET;
    eprintln!("xtask bench: building cra-trace's gen_trace and verify_file examples (release)");
    status(cargo().args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "cra-trace",
        "--example",
        "gen_trace",
        "--example",
        "verify_file",
        "--target-dir",
        TARGET,
    ]))?;
    // verify-limit is built by the policy-compare step (same manifest); build again in case that
    // step failed before building.
    status(cargo().args([
        "build",
        "--release",
        "--quiet",
        "--manifest-path",
        "bench/policy-compare/Cargo.toml",
        "--target-dir",
        "bench/target",
        "--bin",
        "verify-limit",
    ]))?;
    let file = format!("{target}/bench/session-{events}-42.trace.jsonl");
    std::fs::create_dir_all(format!("{target}/bench"))?;
    if !Path::new(&file).exists() {
        status(
            Command::new(format!("{target}/release/examples/gen_trace")).args([
                &file,
                &events.to_string(),
                "42",
            ]),
        )?;
    }
    let limit: Value = serde_json::from_str(&output(
        Command::new("bench/target/release/verify-limit").args([
            &file,
            "--runs",
            &runs.to_string(),
        ]),
    )?)?;

    let mut cra_e2e = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out =
            output(Command::new(format!("{target}/release/examples/verify_file")).arg(&file))?;
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
    // Extra lines the benches print themselves (percentiles), kept verbatim.
    let notes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("p50") || l.contains("p99"))
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
    json!({
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
        "Generated by `cargo xtask bench{}` (do not edit by hand; the raw figures are in `bench/results/latest.json`).\n",
        if doc["mode"] == "quick" {
            " --quick"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "- mode: **{}**; date {}; commit `{}`",
        doc["mode"].as_str().unwrap_or("?"),
        doc["date"].as_str().unwrap_or("?"),
        doc["commit"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        s,
        "- machine: {} cores (`nproc`), {} GiB, CPU `{}`, {} / {}; load average at the end `{}` (the machine is shared: only same-run ratios are meaningful)",
        m["nproc"],
        m["memory_gib"],
        m["cpu_model"].as_str().unwrap_or("?"),
        m["os"].as_str().unwrap_or("?"),
        m["arch"].as_str().unwrap_or("?"),
        m["loadavg_at_end"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        s,
        "- every figure is min / **median** / max over repeated runs; ratios are of medians\n"
    );

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
            "carp_vs_cedar" => {
                let _ = writeln!(
                    s,
                    "## CARP evaluation: cra-carp vs cedar-policy {}\n",
                    r["cedar_policy_version"].as_str().unwrap_or("")
                );
                let _ = writeln!(
                    s,
                    "Question: which of the atlas's N actions may this agent run now (a full CARP resolve; Cedar answers it with one `is_authorized` per action). Both engines' decisions were compared on every benchmarked (question, action) pair before timing; a difference aborts the run.\n"
                );
                let _ = writeln!(
                    s,
                    "| actions | policies | questions | decisions checked (all equal) | cra µs/resolve | cedar µs/resolve | cedar / cra |"
                );
                let _ = writeln!(s, "|---:|---:|---:|---:|---|---|---:|");
                for z in r["sizes"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {} | {} | {} |",
                        z["actions"],
                        z["policies"],
                        z["questions"],
                        z["decisions_checked"],
                        fmt_mmm(&z["cra"], 1.0, 2),
                        fmt_mmm(&z["cedar"], 1.0, 1),
                        ratio(&z["cedar"], &z["cra"])
                    );
                }
                let _ = writeln!(s);
            }
            "trace_verify" => {
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
                    let eps =
                        f(&v["median"]).map_or("n/a".to_owned(), |t| format!("{:.0}", ev / t));
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
            _ => {
                let _ = writeln!(
                    s,
                    "## {} (criterion: `cargo bench -p {} --bench {}`)\n",
                    r["area"].as_str().unwrap_or(name),
                    r["package"].as_str().unwrap_or("?"),
                    r["bench"].as_str().unwrap_or("?")
                );
                let figs = r["figures"].as_array().cloned().unwrap_or_default();
                let baseline = figs
                    .iter()
                    .find(|x| {
                        x["id"]
                            .as_str()
                            .is_some_and(|i| i.contains("fsync_baseline"))
                    })
                    .cloned();
                let _ = writeln!(
                    s,
                    "| benchmark | µs per iteration | throughput | per element vs fdatasync baseline |"
                );
                let _ = writeln!(s, "|---|---|---|---:|");
                for x in &figs {
                    if x["id"] == "notes" {
                        continue;
                    }
                    let tp = match x["throughput"].as_object().and_then(|o| o.iter().next()) {
                        Some((k, v)) => format!("{v} {k} per iteration"),
                        None => String::new(),
                    };
                    let vs = match (&baseline, x["id"].as_str()) {
                        (Some(b), Some(id)) if id.contains("durable_append") => per_element(x)
                            .zip(per_element(b))
                            .map_or("n/a".to_owned(), |(a, b)| format!("{:.2}x", a / b)),
                        _ => String::new(),
                    };
                    let _ = writeln!(
                        s,
                        "| `{}` | {} | {tp} | {vs} |",
                        x["id"].as_str().unwrap_or("?"),
                        fmt_mmm(x, 1e-3, 2)
                    );
                }
                if let Some(n) = figs.iter().find(|x| x["id"] == "notes") {
                    let _ = writeln!(s, "\nPrinted by the bench:\n");
                    for l in n["lines"].as_array().into_iter().flatten() {
                        let _ = writeln!(s, "    {}", l.as_str().unwrap_or(""));
                    }
                }
                let _ = writeln!(s);
            }
        }
    }
    s
}

/// Median nanoseconds per element of a criterion figure with an element throughput.
fn per_element(x: &Value) -> Option<f64> {
    let n = x["throughput"]["Elements"].as_f64()?;
    Some(f(&x["median"])? / n)
}
