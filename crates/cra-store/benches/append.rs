//! Durable TRACE appends per second, per backend, with 1, 8 and 64 sessions appended to
//! concurrently (one appender thread per session), against a bare write + fdatasync loop at the
//! same batch size as the disk's ceiling, and on redb against the same store with its
//! transparency log left alone (`redb_without_log`, `cra_store::testing::without_log`): the
//! log's cost (issue 26's target: within 10%).
//!
//! Each append carries `CRA_BENCH_BATCH` events (default 32); an iteration appends about 16k
//! events in total. Every append is acknowledged only once durable (redb: one fsync per group
//! commit; PostgreSQL: WAL flushed at commit). PostgreSQL runs when `CRA_TEST_POSTGRES_URL` is
//! set. Run: `cargo bench -p cra-store --bench append`.
//!
//! For an A/B of the log's cost (`log_cost`) on some shapes, `CRA_BENCH_SHAPES` names them as
//! `SESSIONSxBATCH` (`64x32`, or `1x1,8x1`) and `CRA_BENCH_ROUNDS` sets the rounds of each.
//! `cargo xtask log-cost` runs it several times and pools the rounds into one verdict.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cra_store::testing::{TestSchema, postgres_url, without_log};
use cra_store::{RedbStore, StoreConfig};
use cra_trace::EventDraft;
use cra_trace::store::ChainStore;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

const SESSIONS: [usize; 3] = [1, 8, 64];
const EVENTS_PER_ITERATION: usize = 16_384;

fn batch() -> usize {
    env_count("CRA_BENCH_BATCH").unwrap_or(32)
}

/// The positive number the environment variable `name` holds, if it holds one.
fn env_count(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.parse().ok().filter(|&n| n > 0)
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
    (0..iters)
        .map(|_| {
            *round += 1;
            one_round(store, sessions, batch, appends_per_thread, *round)
        })
        .sum()
}

/// `appends` appends of `batch` events from each of `sessions` threads (sessions named after
/// `round`); returns the time taken.
fn one_round(
    store: &Arc<dyn ChainStore>,
    sessions: usize,
    batch: usize,
    appends: usize,
    round: u64,
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for s in 0..sessions {
            let store = store.clone();
            scope.spawn(move || {
                let session = format!("bench-{round}-{s}");
                for a in 0..appends {
                    let drafts = (0..batch).map(|i| draft(a * batch + i)).collect();
                    store.append(&session, drafts).unwrap();
                }
            });
        }
    });
    start.elapsed()
}

fn events(sessions: usize, batch: usize) -> u64 {
    ((EVENTS_PER_ITERATION / sessions / batch).max(1) * sessions * batch) as u64
}

fn backends(c: &mut Criterion) {
    let batch = batch();
    eprintln!("append bench: {batch} events per append");
    let dir = tempfile::tempdir().unwrap();
    let redb: Arc<dyn ChainStore> =
        Arc::new(RedbStore::open_with(dir.path().join("log"), StoreConfig::default()).unwrap());
    let bare: Arc<dyn ChainStore> = Arc::new(
        RedbStore::open_with(dir.path().join("bare"), without_log(StoreConfig::default())).unwrap(),
    );
    // The baseline first: the log's cost is redb's figure over this one's.
    let mut stores = vec![("redb_without_log", bare, None), ("redb", redb, None)];
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

/// The log's cost on redb, interleaved so that the disk's drift falls on both sides alike: in
/// each round the same work is appended to a store without the log and to one with it (a fresh
/// pair per shape), in alternating order; prints each round's ratio of throughputs (with /
/// without) and their median, then the bytes written, the bytes handed to write calls and the
/// process's CPU time an event on each side (steadier than throughput on a disk whose speed
/// drifts). Fifteen rounds under `cargo bench` (a round lasts about 0.2 s, and the median of
/// seven moved by 5-8% from run to run: `bench/NOTES.md`, stop 70), three with `--quick`, one
/// short one in criterion's test mode, or `CRA_BENCH_ROUNDS`. Each round appends 4,096 events
/// with one session, 8,192 with 8 and 16,384 with 64 (65,536 in batches of 32).
fn log_cost(_: &mut Criterion) {
    let args: Vec<String> = std::env::args().collect();
    // Criterion's test mode (CI's smoke) runs one short round of each shape.
    let (rounds, scale) = if !args.iter().any(|a| a == "--bench") {
        (1, 16)
    } else if args.iter().any(|a| a == "--quick") {
        (3, 1)
    } else {
        (15, 1)
    };
    let rounds = env_count("CRA_BENCH_ROUNDS").unwrap_or(rounds);
    let all = [
        (1, 1, 4096),
        (8, 1, 8192),
        (64, 1, 16_384),
        (64, 32, 65_536),
    ];
    let names: Vec<String> = all.iter().map(|(s, b, _)| format!("{s}x{b}")).collect();
    let only = std::env::var("CRA_BENCH_SHAPES").ok();
    let only: Option<Vec<&str>> = only
        .as_deref()
        .map(|o| o.split(',').map(str::trim).collect());
    // A name of no shape is a typo, not a request to measure nothing.
    for name in only.iter().flatten() {
        assert!(
            names.iter().any(|k| k == name),
            "CRA_BENCH_SHAPES names `{name}`, which is no shape of log_cost; the shapes are {}",
            names.join(", ")
        );
    }
    for ((sessions, batch, events), shape) in all.into_iter().zip(&names) {
        if only.as_ref().is_some_and(|o| !o.contains(&shape.as_str())) {
            continue;
        }
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let stores: [Arc<dyn ChainStore>; 2] = [
            Arc::new(
                RedbStore::open_with(dirs[0].path(), without_log(StoreConfig::default())).unwrap(),
            ),
            Arc::new(RedbStore::open_with(dirs[1].path(), StoreConfig::default()).unwrap()),
        ];
        let appends = (events / scale / sessions / batch).max(1);
        let mut round = 0u64;
        // Bytes each store had written to storage and the process's CPU ticks, over the
        // measured rounds.
        let mut written = [Usage::default(); 2];
        let mut time = |side: usize, written: &mut [Usage; 2]| {
            round += 1;
            let before = Usage::now();
            let took = one_round(&stores[side], sessions, batch, appends, round).as_secs_f64();
            written[side].add_since(&before);
            took
        };
        // A warm-up round on each.
        time(0, &mut [Usage::default(); 2]);
        time(1, &mut [Usage::default(); 2]);
        let mut ratios: Vec<f64> = (0..rounds)
            .map(|r| {
                let (without, with) = if r % 2 == 0 {
                    let w = time(0, &mut written);
                    (w, time(1, &mut written))
                } else {
                    let l = time(1, &mut written);
                    (time(0, &mut written), l)
                };
                without / with
            })
            .collect();
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "log cost: redb, {sessions} sessions, batch {batch}: throughput with the log / without, median {:.2} (rounds {})",
            ratios[ratios.len() / 2],
            each.join(" ")
        );
        let measured = rounds as f64 * (appends * sessions * batch) as f64;
        let [without, with] = written.map(|u| u.per_event(measured));
        println!(
            "log cost: redb, {sessions} sessions, batch {batch}: bytes written an event with the log {:.0} ({:.0} handed to write calls), without {:.0} ({:.0}); CPU an event with the log {:.1} us, without {:.1} us",
            with.bytes, with.handed, without.bytes, without.handed, with.cpu_us, without.cpu_us
        );
    }
}

/// What the process spent over some rounds: bytes it caused to be written to storage
/// (`write_bytes` of `/proc/self/io`), bytes it handed to write calls (`wchar`: redb's page
/// writes, before the page cache merges any), and CPU time of all its threads (`utime` and
/// `stime` of `/proc/self/stat`, in ticks of 10 ms); 0 where there is no `/proc`. Steadier
/// accounts of what the log adds than throughput, which moves with the disk from one round to
/// the next.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    bytes: u64,
    handed: u64,
    ticks: u64,
}

/// [`Usage`] an event.
struct PerEvent {
    bytes: f64,
    handed: f64,
    cpu_us: f64,
}

impl Usage {
    fn now() -> Self {
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        // The fields after the command's closing parenthesis; utime and stime are the 12th
        // and 13th of them.
        let ticks = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| {
                let fields: Vec<u64> = stat
                    .rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .skip(11)
                    .take(2)
                    .map(|f| f.parse().unwrap_or(0))
                    .collect();
                Some(fields.iter().sum())
            })
            .unwrap_or(0);
        Self {
            bytes: field("write_bytes:"),
            handed: field("wchar:"),
            ticks,
        }
    }

    fn add_since(&mut self, before: &Self) {
        let now = Self::now();
        self.bytes += now.bytes.saturating_sub(before.bytes);
        self.handed += now.handed.saturating_sub(before.handed);
        self.ticks += now.ticks.saturating_sub(before.ticks);
    }

    /// The usage an event, over `events`.
    fn per_event(&self, events: f64) -> PerEvent {
        PerEvent {
            bytes: self.bytes as f64 / events,
            handed: self.handed as f64 / events,
            cpu_us: self.ticks as f64 * 10_000.0 / events,
        }
    }
}

criterion_group!(benches, fsync_baseline, backends, log_cost);
criterion_main!(benches);
