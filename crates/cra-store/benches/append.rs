//! Durable TRACE appends per second, per backend, with 1, 8 and 64 sessions appended to
//! concurrently (one appender thread per session), against a bare write + fdatasync loop at the
//! same batch size as the disk's ceiling.
//!
//! Each append carries `CRA_BENCH_BATCH` events (default 32); an iteration appends about 16k
//! events in total. Every append is acknowledged only once durable (redb: one fsync per group
//! commit; PostgreSQL: WAL flushed at commit). PostgreSQL runs when `CRA_TEST_POSTGRES_URL` is
//! set. Run: `cargo bench -p cra-store --bench append`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{RedbStore, StoreConfig};
use cra_trace::EventDraft;
use cra_trace::store::ChainStore;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

const SESSIONS: [usize; 3] = [1, 8, 64];
const EVENTS_PER_ITERATION: usize = 16_384;

fn batch() -> usize {
    std::env::var("CRA_BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

fn draft(i: usize) -> EventDraft {
    EventDraft {
        trace_id: "0196b5a0-0000-7000-8000-000000000001".into(),
        span_id: "0196b5a0-0000-7000-8000-000000000002".into(),
        parent_span_id: None,
        event_type: "action.executed".into(),
        payload: json!({
            "action_id": "ticket.create",
            "execution_id": format!("0196b5a0-0000-7000-8000-{i:012}"),
            "duration_ms": 12
        }),
    }
}

/// Appends `EVENTS_PER_ITERATION` events from `sessions` threads, `batch` per append, `iters`
/// times; returns the time taken.
fn run(
    store: &Arc<dyn ChainStore>,
    sessions: usize,
    batch: usize,
    iters: u64,
    round: &mut u64,
) -> Duration {
    let appends_per_thread = (EVENTS_PER_ITERATION / sessions / batch).max(1);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        *round += 1;
        let r = *round;
        let start = Instant::now();
        std::thread::scope(|scope| {
            for s in 0..sessions {
                let store = store.clone();
                scope.spawn(move || {
                    let session = format!("bench-{r}-{s}");
                    for a in 0..appends_per_thread {
                        let drafts = (0..batch).map(|i| draft(a * batch + i)).collect();
                        store.append(&session, drafts).unwrap();
                    }
                });
            }
        });
        total += start.elapsed();
    }
    total
}

fn events(sessions: usize, batch: usize) -> u64 {
    ((EVENTS_PER_ITERATION / sessions / batch).max(1) * sessions * batch) as u64
}

fn backends(c: &mut Criterion) {
    let batch = batch();
    eprintln!("append bench: {batch} events per append");
    let dir = tempfile::tempdir().unwrap();
    let redb: Arc<dyn ChainStore> =
        Arc::new(RedbStore::open_with(dir.path(), StoreConfig::default()).unwrap());
    let mut stores = vec![("redb", redb, None)];
    if let Some(url) = postgres_url("append bench (postgres)") {
        let schema = TestSchema::new(&url, "bench");
        let pg: Arc<dyn ChainStore> = Arc::new(schema.store(StoreConfig::default()).unwrap());
        stores.push(("postgres", pg, Some(schema)));
    }
    for (name, store, _schema) in &stores {
        let mut group = c.benchmark_group(format!("durable_append/{name}/batch{batch}"));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(6));
        let mut round = 0u64;
        for sessions in SESSIONS {
            group.throughput(Throughput::Elements(events(sessions, batch)));
            group.bench_function(format!("{sessions}_sessions"), |b| {
                b.iter_custom(|iters| run(store, sessions, batch, iters, &mut round));
            });
        }
        group.finish();
    }
}

/// The disk's ceiling: one thread writes the same JSON an append of `batch` events stores and
/// calls fdatasync, in a loop.
fn fsync_baseline(c: &mut Criterion) {
    let batch = batch();
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::create(dir.path().join("baseline.log")).unwrap();
    let line = serde_json::to_vec(&cra_trace::seal(
        draft(0),
        "bench",
        &cra_trace::ChainHead::genesis(),
        "0196b5a0-0000-7000-8000-000000000009".into(),
        "2026-03-01T12:00:00.000000Z".into(),
    ))
    .unwrap();
    let chunk: Vec<u8> = (0..batch)
        .flat_map(|_| line.iter().copied().chain([b'\n']))
        .collect();
    let mut group = c.benchmark_group(format!("fsync_baseline/batch{batch}"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Elements(batch as u64));
    group.bench_function("write_fdatasync", |b| {
        b.iter(|| {
            file.write_all(&chunk).unwrap();
            file.sync_data().unwrap();
        });
    });
    group.finish();
}

criterion_group!(benches, fsync_baseline, backends);
criterion_main!(benches);
