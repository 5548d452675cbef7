//! TRACE verification against its limit, in one process on the same bytes: the same measurement
//! as `bench/policy-compare`'s `verify-limit`, without building the comparison engines.
//!
//! Reads a `.trace.jsonl` into memory, builds every event's Appendix B preimage, then times over
//! several runs (interleaved, so load changes hit every figure alike):
//! * `sha256_preimages`: SHA-256 of every preimage, one core (the least work any verifier does);
//! * `verify_1_thread`, `verify_2_threads`: `verify_reader` over the text in memory.
//!
//! `cargo run --release -p cra-trace --example verify_limit -- FILE [--runs N]`

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use cra_trace::{TraceEvent, VerifyOptions, event_preimage, verify_reader};
use sha2::{Digest, Sha256};

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: verify_limit FILE [--runs N]");
        return ExitCode::from(1);
    };
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("verify_limit: cannot read {path}: {e}");
            return ExitCode::from(1);
        }
    };
    let mut preimages: Vec<Vec<u8>> = Vec::new();
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<TraceEvent>(line) {
            Ok(e) => preimages.push(event_preimage(&e).into_bytes()),
            Err(e) => {
                eprintln!("verify_limit: not a TRACE event: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let preimage_bytes: usize = preimages.iter().map(Vec::len).sum();
    let mut sha = Vec::new();
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for p in &preimages {
            black_box(Sha256::digest(black_box(p)));
        }
        sha.push(t.elapsed().as_secs_f64());
        for (threads, out) in [(1usize, &mut v1), (2, &mut v2)] {
            let options = VerifyOptions {
                threads,
                ..VerifyOptions::default()
            };
            let t = Instant::now();
            let report = verify_reader(&text[..], &options, &mut |_| {});
            out.push(t.elapsed().as_secs_f64());
            match report {
                Ok(r) if r.is_valid() && r.events == preimages.len() as u64 => {}
                other => {
                    eprintln!("verify_limit: {path} did not verify: {other:?}");
                    return ExitCode::from(2);
                }
            }
        }
    }
    println!(
        "{path}: {} events, {} bytes, {preimage_bytes} preimage bytes, {runs} runs",
        preimages.len(),
        text.len()
    );
    let (smin, smed, smax) = stats(sha.clone());
    println!("sha256_preimages  min {smin:.3} median {smed:.3} max {smax:.3} s  1.00x");
    for (name, v) in [("verify_1_thread", &v1), ("verify_2_threads", &v2)] {
        // The ratio of each run to the SHA-256 pass of the same run, then the median of those.
        let ratios: Vec<f64> = v.iter().zip(&sha).map(|(a, b)| a / b).collect();
        let (rmin, rmed, _) = stats(ratios);
        let (min, med, max) = stats(v.clone());
        println!(
            "{name:<17} min {min:.3} median {med:.3} max {max:.3} s  {:.2}x (per-run median {rmed:.2}x, best {rmin:.2}x)",
            med / smed
        );
    }
    ExitCode::SUCCESS
}
