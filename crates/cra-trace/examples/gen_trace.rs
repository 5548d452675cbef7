//! Writes a synthetic, valid TRACE session of N events as JSONL (for `tools/bench_verify.sh`).
//!
//! `cargo run --release -p cra-trace --example gen_trace -- OUT [EVENTS] [SEED]`
//! (defaults: 1,000,000 events, seed 42).

use std::io::{BufWriter, Write};

#[path = "../benches/support/synth.rs"]
mod synth;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(out) = args.get(1) else {
        eprintln!("usage: gen_trace OUT [EVENTS] [SEED]");
        std::process::exit(1);
    };
    let n: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(42);
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let mut result = Ok(());
    synth::session(seed, n, |e| {
        if result.is_ok() {
            result = serde_json::to_writer(&mut w, e)
                .map_err(std::io::Error::other)
                .and_then(|()| w.write_all(b"\n"));
        }
    });
    result?;
    w.flush()?;
    eprintln!("gen_trace: wrote {n} events (seed {seed}) to {out}");
    Ok(())
}
