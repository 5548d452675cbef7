//! Criterion benchmarks: event hashing, chain building, and verification (fast streaming path on
//! one and all cores, and the tree-based reference) of a synthetic session.

use std::hint::black_box;

use cra_trace::{VerifyOptions, compute_event_hash, verify_reader, verify_text_reference};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

#[path = "support/synth.rs"]
mod synth;

const SEED: u64 = 42;

fn hashing(c: &mut Criterion) {
    let mut events = Vec::new();
    synth::session(SEED, 64, |e| events.push(e.clone()));
    let mut g = c.benchmark_group("hash");
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("compute_event_hash x64", |b| {
        b.iter(|| {
            for e in &events {
                black_box(compute_event_hash(black_box(e)));
            }
        })
    });
    g.finish();
}

fn chain_building(c: &mut Criterion) {
    let mut g = c.benchmark_group("chain");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("seal 1000 events", |b| {
        b.iter(|| {
            let mut n = 0u64;
            synth::session(SEED, 1000, |e| n += e.sequence);
            black_box(n)
        })
    });
    g.finish();
}

fn verification(c: &mut Criterion) {
    const N: u64 = 20_000;
    let text = synth::session_jsonl(SEED, N);
    println!(
        "verification input: {N} events, {} bytes, seed {SEED}",
        text.len()
    );
    let mut g = c.benchmark_group("verify");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(20);
    for threads in [1, 2] {
        g.bench_function(format!("streaming, {threads} thread(s)"), |b| {
            let options = VerifyOptions {
                threads,
                ..VerifyOptions::default()
            };
            b.iter(|| {
                let report = verify_reader(&text[..], &options, &mut |_| {}).unwrap_or_default();
                assert!(report.is_valid());
                black_box(report.events)
            })
        });
    }
    g.bench_function("reference (tree per line)", |b| {
        b.iter(|| black_box(verify_text_reference(&text, false).events))
    });
    g.finish();
}

criterion_group!(benches, hashing, chain_building, verification);
criterion_main!(benches);
