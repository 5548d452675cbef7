//! TRACE verification against its physical limit, in one process on the same bytes.
//!
//! Reads a `.trace.jsonl` (e.g. written by cra-trace's `gen_trace` example) into memory, then
//! times, over several runs:
//! * `sha256_preimages`: SHA-256 of every event's hash preimage, already built, one core: the
//!   least work any verifier must do (the limit);
//! * `verify_1_thread` / `verify_all_threads`: cra-trace's streaming verifier (`verify_reader`,
//!   the engine behind `cra trace verify`) over the same text held in memory.
//!
//! `verify-limit FILE [--runs N]` prints one JSON document (seconds per pass, min / median / max).

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Context as _, bail};
use cra_bench_compare::summary;
use cra_trace::{TraceEvent, VerifyOptions, event_preimage, verify_reader};
use serde_json::json;
use sha2::{Digest, Sha256};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("verify-limit: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        bail!("usage: verify-limit FILE [--runs N]");
    };
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args
            .get(i + 1)
            .context("--runs needs a number")?
            .parse()
            .context("--runs needs a number")?,
        None => 5,
    };
    let text = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
    let mut preimages: Vec<Vec<u8>> = Vec::new();
    for (i, line) in text.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let e: TraceEvent = serde_json::from_slice(line)
            .with_context(|| format!("{path}: line {} is not a TRACE event", i + 1))?;
        preimages.push(event_preimage(&e).into_bytes());
    }
    let preimage_bytes: usize = preimages.iter().map(Vec::len).sum();

    let mut sha = Vec::new();
    let mut v1 = Vec::new();
    let mut vall = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for p in &preimages {
            black_box(Sha256::digest(black_box(p)));
        }
        sha.push(t.elapsed().as_secs_f64());
        for (threads, out) in [(1usize, &mut v1), (0, &mut vall)] {
            let options = VerifyOptions {
                threads,
                ..VerifyOptions::default()
            };
            let t = Instant::now();
            let report = verify_reader(&text[..], &options, &mut |_| {})?;
            out.push(t.elapsed().as_secs_f64());
            if !report.is_valid() || report.events != preimages.len() as u64 {
                bail!("{path} did not verify ({} events read)", report.events);
            }
        }
    }
    let doc = json!({
        "file": path,
        "events": preimages.len(),
        "file_bytes": text.len(),
        "preimage_bytes": preimage_bytes,
        "unit": "seconds per pass",
        "sha256_preimages": summary(sha),
        "verify_1_thread": summary(v1),
        "verify_all_threads": summary(vall),
        "threads_available": std::thread::available_parallelism().map_or(1, |n| n.get()),
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}
