//! Transparency-log proofs over large trees: an inclusion proof of a random leaf and a
//! consistency proof from a random older size, both at the tree's full size, read from the
//! stored tiles (`cra_store::tlog::LogReader`). The tree is bulk-loaded through the tree store
//! (`cra_store::testing::bulk_load_log`): 10,000,000 leaves on redb and 1,000,000 on PostgreSQL
//! (when `CRA_TEST_POSTGRES_URL` is set) under `cargo bench`; 20,000 in criterion's test mode
//! (CI's smoke), or `CRA_BENCH_TLOG_LEAVES` when set. Targets (issue 26): on redb, inclusion
//! under 50 µs p50 and consistency under 1 ms. Run: `cargo bench -p cra-store --bench tlog`.
//!
//! A bulk load writes runs that hold their leaves' data; the committer's runs hold a count and
//! read each leaf's data from its event's record (`specs/tlog.md`, "Runs count their leaves").
//! The group `tlog_redb_events` measures that form: 204,800 events (2,048 in test mode, or
//! `CRA_BENCH_TLOG_EVENTS`) appended through the store by 64 chains, 32 events an append.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use cra_store::RedbStore;
use cra_store::testing::{TestSchema, bulk_load_log, bulk_load_log_pg, postgres_url};
use cra_store::tlog::{LogReader, LogStore};
use cra_tlog::Hash;
use criterion::{Criterion, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};

/// How many: `var` when set, else `full` under `cargo bench` and `small` in test mode.
fn count(var: &str, full: u64, small: u64) -> u64 {
    if let Some(n) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        return n;
    }
    if std::env::args().any(|a| a == "--bench") {
        full
    } else {
        small
    }
}

/// Leaves to bulk-load.
fn leaves(full: u64) -> u64 {
    count("CRA_BENCH_TLOG_LEAVES", full, 20_000)
}

fn load(n: u64, mut put: impl FnMut(&[Hash])) {
    let chunk = 1u64 << 20;
    let mut i = 0;
    while i < n {
        let end = (i + chunk).min(n);
        let data: Vec<Hash> = (i..end)
            .map(|k| cra_tlog::leaf_hash(&k.to_be_bytes()))
            .collect();
        put(&data);
        i = end;
    }
}

fn proofs<S: LogStore + ?Sized>(c: &mut Criterion, name: &str, store: &S) {
    let size = store.log_size().unwrap();
    let seed = 0x7106_u64;
    eprintln!("tlog bench {name}: {size} leaves, seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut group = c.benchmark_group(format!("tlog_{name}"));
    group.bench_function(format!("inclusion_{size}"), |b| {
        b.iter(|| {
            let index = rng.random_range(0..size);
            let reader = LogReader::at(store, size);
            black_box(reader.inclusion(index, size).unwrap())
        });
    });
    group.bench_function(format!("consistency_{size}"), |b| {
        b.iter(|| {
            let old = rng.random_range(1..size);
            let reader = LogReader::at(store, size);
            black_box(reader.consistency(old, size).unwrap())
        });
    });
    group.finish();
}

/// Appends `n` events (rounded down to whole appends) to `store` as 64 chains appending 32
/// events at a time, from 8 threads, so that commits batch as they do under load.
fn append_events(store: &RedbStore, n: u64) {
    use cra_trace::store::ChainStore;
    let appends = n / 32 / 64;
    std::thread::scope(|scope| {
        for thread in 0..8u64 {
            scope.spawn(move || {
                for round in 0..appends {
                    for chain in thread * 8..thread * 8 + 8 {
                        let session = format!("0196b5a0-0000-7000-8000-{chain:012}");
                        let drafts = (0..32)
                            .map(|i| cra_trace::EventDraft {
                                trace_id: "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70".into(),
                                span_id: "0190f5d2-8a4e-7b3c-9d1e-100000000001".into(),
                                parent_span_id: None,
                                event_type: "bench.note".into(),
                                payload: serde_json::json!({ "round": round, "i": i }),
                            })
                            .collect();
                        store.append(&session, drafts).unwrap();
                    }
                }
            });
        }
    });
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open(dir.path()).unwrap();
    let n = leaves(10_000_000);
    load(n, |data| bulk_load_log(&redb, data).unwrap());
    proofs(c, "redb", &redb);
    drop(redb);
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open(dir.path()).unwrap();
    append_events(&redb, count("CRA_BENCH_TLOG_EVENTS", 204_800, 2_048));
    proofs(c, "redb_events", &redb);
    drop(redb);
    if let Some(url) = postgres_url("tlog bench") {
        let schema = TestSchema::new(&url, "tlog_bench");
        let pg = schema.store(cra_store::StoreConfig::default()).unwrap();
        load(leaves(1_000_000), |data| {
            bulk_load_log_pg(&pg, data).unwrap()
        });
        proofs(c, "postgres", &pg);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(200);
    targets = bench
}
criterion_main!(benches);
