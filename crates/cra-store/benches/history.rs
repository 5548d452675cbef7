//! The cost of conditions on history (`specs/carp.md`, "Conditions on history"), on redb, as the
//! number of recorded events grows from 1,000 to 100,000.
//!
//! The atlas has 100 actions; the measured action's policies hold 20 history tests: 5 `after`
//! and 5 `bind` predicates, 5 `count_within` and 5 `sum_within` limits. Three figures:
//! * `history/resolve_100_actions`: a resolve of the atlas (history is decided at execute, so a
//!   resolve only carries the tests into the `parameters` constraint; no counter is read);
//! * `history/decide/<events>`: the execute-time decision of one call (`execute::authorize`):
//!   the steps walked, the 10 predicates answered from the store's index
//!   (`CarpStore::has_event`, one seek each) and recorded as the engine records them for
//!   `action.requested`'s `history`, and the 10 limits' charges built. Consuming the
//!   charges is the store's write, the same as any rate limit's, and not measured here;
//! * `history/compile_20_tests`: compiling the 20 tests from their written form, which an
//!   execute does for every step of the stored resolution's `parameters` constraint;
//! * `history/decide_sum_in_store/<events>`: the store's check of the 5 `sum_within` charges
//!   inside one write transaction, refused so nothing is written (the totals summed over the
//!   window's events of one key).
//!
//! Every predicate holds (the worst case: none short-circuits). The events are spread over 500
//! customers and 24 hours; the measured customer has its share. Besides criterion's estimates it
//! prints the first decision in a freshly opened store, and p50 and p99 over 5,000 individually
//! timed decisions per size, the sizes taken in turn call by call so the machine's drift falls on
//! both alike, with the ratio of the two p50s (flat is 1.0). The same figures for a cold process:
//! this bench started again as a child over the seeded stores, timing its first 1,000 decisions
//! on each, as a server started on an existing store makes them. And what recording the reads
//! costs: the decision with and without the record, in turn call by call. Run:
//! `cargo bench -p cra-store --bench history`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Instant;

use cra_carp::eval::{CountersSnapshot, ResolveOptions, resolve};
use cra_carp::execute::authorize;
use cra_carp::history::HistoryRead;
use cra_carp::index::AtlasSet;
use cra_carp::store::{
    CarpStore, CarpStoreError, Charge, ChargeKind, ExecutionRecord, Mark, SessionRecord,
};
use cra_carp::types::{ExecuteResponse, ExecuteStatus};
use cra_carp::validate::{CarpError, compile_schema, parse_request};
use cra_carp::{CarpRequest, Resolution};
use cra_store::RedbStore;
use cra_wire::SequentialIds;
use criterion::{Criterion, criterion_group};
use serde_json::{Map, json};

#[path = "common/history_atlas.rs"]
mod history_atlas;
use history_atlas::{AGENT, NOW, SESSION, TARGET, atlas, customer, history, request};

/// Records `events` events on the 20 counters, spread over customers and the last 24 hours,
/// the way succeeded calls leave them (marks with an execution, in chunks of 1,000).
fn seed(store: &RedbStore, set: &AtlasSet, events: u64, now_us: i64) {
    let day_us = 86_400_000_000i64;
    let mut marks = Vec::with_capacity(1_000);
    let mut chunk = 0u64;
    for i in 0..events {
        let at_us = now_us - day_us + 1 + (i as i64 * 7_919) % (day_us - 1);
        let earlier = match i % 4 {
            0 => Some((format!("g1.r{}.op", 10 + (i / 4) % 5), customer(i / 4))),
            1 => Some((format!("g2.r{}.op", 20 + (i / 4) % 5), customer(i / 20))),
            _ => None,
        };
        match earlier {
            Some((action, c)) => {
                let params = json!({"customer_id": c});
                marks.extend(set.marks(&action, &params, (AGENT, SESSION), at_us));
            }
            None => {
                // A limit's event: one call counted (count_within) or one unit of a total.
                let key = format!(
                    "global|{}",
                    cra_wire::hash::canonical_digest(&json!([customer(i / 40)]))
                );
                marks.push(Mark {
                    counter: format!("allow-history#{}", 10 + i % 10),
                    scope_key: key,
                    at_us,
                });
            }
        }
        if marks.len() >= 1_000 || i + 1 == events {
            chunk += 1;
            store
                .record_execution(&execution(chunk, std::mem::take(&mut marks)))
                .unwrap();
        }
    }
}

fn execution(n: u64, marks: Vec<Mark>) -> ExecutionRecord {
    let id = format!("0190a000-0000-7000-9000-{n:012x}");
    ExecutionRecord {
        execution_id: id.clone(),
        session_id: SESSION.into(),
        idempotency_key: None,
        call: None,
        response: ExecuteResponse {
            carp_version: "1.0".into(),
            execution_id: id,
            request_id: format!("0190a000-0000-7000-a000-{n:012x}"),
            resolution_id: "r".into(),
            timestamp: NOW.into(),
            status: ExecuteStatus::Success,
            result: Some(json!({})),
            error: None,
            trace_id: "t".into(),
            extra: Map::new(),
        },
        marks,
    }
}

struct Call {
    request: CarpRequest,
    resolution: Resolution,
    validator: jsonschema::Validator,
}

fn call(set: &AtlasSet) -> Call {
    let now = cra_wire::clock::parse_rfc3339(NOW).unwrap();
    let ids = SequentialIds::new(1, 1);
    let resolved = parse_request(&request(1, "resolve")).unwrap();
    let resolution = resolve(
        &resolved,
        set,
        &CountersSnapshot::empty(),
        now,
        &ids,
        &ResolveOptions::default(),
    )
    .unwrap();
    let mut exec = request(2, "execute");
    exec.as_object_mut().unwrap().remove("task");
    exec["execution"] = json!({"resolution_id": resolution.resolution_id, "action_id": TARGET,
                               "parameters": {"customer_id": customer(7), "amount": 2.5}});
    let action = resolution
        .allowed_actions
        .iter()
        .find(|a| a.action_id.as_str() == TARGET)
        .expect("the target is listed");
    let validator = compile_schema(TARGET, &action.parameters_schema).unwrap();
    Call {
        request: parse_request(&exec).unwrap(),
        resolution,
        validator,
    }
}

/// The execute-time decision of the call over `store`, as the engine makes it with `set`
/// loaded: every step walked, predicates read and, when `record`, recorded.
fn decide_as(store: &dyn CarpStore, c: &Call, set: &AtlasSet, now_us: i64, record: bool) -> usize {
    let now = cra_wire::clock::parse_rfc3339(NOW).unwrap();
    let action = c
        .resolution
        .allowed_actions
        .iter()
        .find(|a| a.action_id.as_str() == TARGET)
        .unwrap();
    // As the engine does: one reader for the call's predicates, opened at the first one, and
    // every answer kept for the call's record (`action.requested`'s `history`).
    let mut reader: Option<Box<dyn cra_carp::store::MarkReader + '_>> = None;
    let mut read = HistoryRead::default();
    let fail = |e: CarpStoreError| CarpError::new(cra_wire::Token::InternalError, e.to_string());
    let mut marked = |counter: &str, key: &str, since: i64| -> Result<bool, CarpError> {
        let r = match &mut reader {
            Some(r) => r,
            None => reader.insert(store.mark_reader().map_err(fail)?),
        };
        let found = r.has_event(counter, key, since, now_us).map_err(fail)?;
        if record {
            read.mark(counter, key, since, now_us, found);
        }
        Ok(found)
    };
    match authorize(
        &c.request,
        &c.resolution,
        action,
        &c.validator,
        None,
        cra_carp::execute::InForce {
            atlases: Some(set),
            atlas: None,
        },
        now,
        &mut marked,
    )
    .unwrap()
    {
        cra_carp::execute::Authorization::Proceed { charges, .. } => {
            assert_eq!(read.marks.len(), if record { 10 } else { 0 });
            charges.len()
        }
        other => panic!("the call was not cleared: {other:?}"),
    }
}

/// The execute-time decision as the engine makes it, its reads recorded.
fn decide(store: &dyn CarpStore, c: &Call, set: &AtlasSet, now_us: i64) -> usize {
    decide_as(store, c, set, now_us, true)
}

/// What recording the reads costs: `count` decisions on `store` with and without the record,
/// in turn call by call; prints both p50s and their ratio.
fn record_cost(
    events: u64,
    store: &RedbStore,
    the_call: &Call,
    set: &AtlasSet,
    now_us: i64,
    count: usize,
) {
    let record = [true, false];
    let [with, without]: [Vec<u128>; 2] = in_turn(count, record.len(), |i| {
        black_box(decide_as(store, the_call, set, now_us, record[i]));
    })
    .try_into()
    .unwrap();
    let with = percentiles(&format!("history/decide/{events}: reads recorded"), with);
    let without = percentiles(
        &format!("history/decide/{events}: reads not recorded"),
        without,
    );
    println!(
        "history/decide/{events}: p50 recorded / p50 not recorded = {:.2}",
        with / without.max(f64::MIN_POSITIVE)
    );
}

/// Five `sum_within` charges of the measured customer that never fit (a maximum of 0), so the
/// store sums each window and writes nothing.
fn sum_charges() -> Vec<Charge> {
    let key = format!(
        "global|{}",
        cra_wire::hash::canonical_digest(&json!([customer(7)]))
    );
    (15..20)
        .map(|k| Charge {
            policy_id: format!("allow-history#{k}"),
            scope_key: key.clone(),
            kind: ChargeKind::Window {
                max_units: 0,
                window_seconds: 86_400,
                units: 1,
            },
        })
        .collect()
}

/// Prints `samples`' p50 and p99 (nanoseconds, shown in µs) under `label`; returns the p50 in µs.
fn percentiles(label: &str, mut samples: Vec<u128>) -> f64 {
    samples.sort_unstable();
    let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
    println!(
        "{label}: p50 {:.2} us, p99 {:.2} us ({} samples)",
        p(0.50),
        p(0.99),
        samples.len()
    );
    p(0.50)
}

fn bench(c: &mut Criterion) {
    let measuring = std::env::args().any(|a| a == "--bench");
    let set = atlas();
    let the_call = call(&set);
    let now_us = cra_carp::eval::unix_micros(cra_wire::clock::parse_rfc3339(NOW).unwrap());
    let mut group = c.benchmark_group("history");
    let ids = SequentialIds::new(1, 1);
    let now = cra_wire::clock::parse_rfc3339(NOW).unwrap();
    let resolve_req = parse_request(&request(1, "resolve")).unwrap();
    let opts = ResolveOptions::default();
    group.bench_function("resolve_100_actions", |b| {
        b.iter(|| {
            black_box(
                resolve(
                    &resolve_req,
                    &set,
                    &CountersSnapshot::empty(),
                    now,
                    &ids,
                    &opts,
                )
                .unwrap(),
            )
        })
    });
    // What an execute spends compiling the steps' tests from the stored resolution (stop 43's
    // second seam): the 20 tests, as `execute::on_parameters` compiles them on every call.
    let written = history();
    group.bench_function("compile_20_tests", |b| {
        b.iter(|| {
            black_box(
                cra_carp::history::HistoryConditions::compile("allow-target", &written).unwrap(),
            )
        })
    });
    let sizes: &[u64] = if measuring {
        &[1_000, 100_000]
    } else {
        &[1_000]
    };
    let seeded: Vec<(u64, tempfile::TempDir)> = sizes
        .iter()
        .map(|&events| (events, seeded_store(&set, events, now_us)))
        .collect();
    let count = if measuring { COLD_CALLS } else { 1 };
    cold_process(&seeded, count);
    let mut stores = Vec::with_capacity(seeded.len());
    for (events, dir) in &seeded {
        // A freshly opened store: the first decision pays for opening tables and reading pages.
        let store = RedbStore::open(dir.path()).unwrap();
        let t = Instant::now();
        assert_eq!(
            decide(&store, &the_call, &set, now_us),
            10,
            "10 limits charge the call"
        );
        println!(
            "history/decide/{events}: first decision in a freshly opened store {:.2} us",
            t.elapsed().as_nanos() as f64 / 1000.0
        );
        group.bench_function(format!("decide/{events}"), |b| {
            b.iter(|| black_box(decide(&store, &the_call, &set, now_us)))
        });
        let charges = sum_charges();
        group.bench_function(format!("decide_sum_in_store/{events}"), |b| {
            b.iter(|| black_box(store.try_consume(&charges, now_us).unwrap()))
        });
        stores.push((*events, store));
    }
    group.finish();
    let count = if measuring { 5_000 } else { 1 };
    alternating("", &stores, &the_call, &set, now_us, count);
    if let Some((events, store)) = stores.first() {
        record_cost(*events, store, &the_call, &set, now_us, count);
    }
}

/// A store of `events` recorded events over the atlas's counters, in a new directory.
fn seeded_store(set: &AtlasSet, events: u64, now_us: i64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path()).unwrap();
    store
        .create_session(&SessionRecord::opened(SESSION, AGENT, NOW.into()))
        .unwrap();
    seed(&store, set, events, now_us);
    dir
}

/// Times `count` runs of each of `variants` variants of one call (`run(i)` runs variant `i`),
/// taking the variants in turn call by call; the nanoseconds of each run, per variant.
fn in_turn(count: usize, variants: usize, mut run: impl FnMut(usize)) -> Vec<Vec<u128>> {
    let mut samples = vec![Vec::with_capacity(count); variants];
    for _ in 0..count {
        for (i, out) in samples.iter_mut().enumerate() {
            let t = Instant::now();
            run(i);
            out.push(t.elapsed().as_nanos());
        }
    }
    samples
}

/// Times `count` decisions on each store, taking the stores in turn call by call, so that a
/// change in the machine's speed during the run falls on every size alike; prints each size's
/// first decision (`label` says in what process), p50 and p99, and the largest size's p50 as a
/// ratio of the smallest's (flat is 1.0).
fn alternating(
    label: &str,
    stores: &[(u64, RedbStore)],
    the_call: &Call,
    set: &AtlasSet,
    now_us: i64,
    count: usize,
) {
    let samples = in_turn(count, stores.len(), |i| {
        black_box(decide(&stores[i].1, the_call, set, now_us));
    });
    let mut p50s = Vec::with_capacity(stores.len());
    for ((events, _), taken) in stores.iter().zip(samples) {
        if !label.is_empty() {
            println!(
                "history/decide/{events}{label}: first decision {:.2} us",
                taken[0] as f64 / 1000.0
            );
        }
        p50s.push(percentiles(
            &format!("history/decide/{events}{label}"),
            taken,
        ));
    }
    if let (Some(first), Some(last)) = (p50s.first(), p50s.last())
        && p50s.len() > 1
    {
        println!(
            "history/decide{label}: p50 at {} events / p50 at {} events = {:.2}",
            stores[stores.len() - 1].0,
            stores[0].0,
            last / first.max(f64::MIN_POSITIVE)
        );
    }
}

/// How a child process of this bench is told to time a cold process's calls: the seeded
/// stores as `events=directory` pairs separated by `;`, and the number of calls to time.
const COLD_STORES: &str = "CRA_BENCH_HISTORY_COLD_STORES";
const COLD_COUNT: &str = "CRA_BENCH_HISTORY_COLD_CALLS";
/// The calls a cold process times: a freshly started server's first thousand per store.
const COLD_CALLS: usize = 1_000;

/// Times the first `calls` decisions of a new process over the seeded stores (this bench run
/// again as a child), as a server started on an existing store makes them: nothing of the
/// process, the store's cache or its tables is warm. The child prints its figures.
fn cold_process(seeded: &[(u64, tempfile::TempDir)], calls: usize) {
    let stores: Vec<String> = seeded
        .iter()
        .map(|(events, dir)| format!("{events}={}", dir.path().display()))
        .collect();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(COLD_STORES, stores.join(";"))
        .env(COLD_COUNT, calls.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "the cold process failed: {out:?}");
    print!("{}", String::from_utf8_lossy(&out.stdout));
}

/// The child's side of [`cold_process`]: the atlas compiled as a server compiles it at start,
/// then the stores opened and their first calls timed in turn.
fn cold_child(stores: &str) {
    let calls = std::env::var(COLD_COUNT).unwrap().parse().unwrap();
    let set = atlas();
    let the_call = call(&set);
    let now_us = cra_carp::eval::unix_micros(cra_wire::clock::parse_rfc3339(NOW).unwrap());
    let opened: Vec<(u64, RedbStore)> = stores
        .split(';')
        .map(|pair| {
            let (events, dir) = pair.split_once('=').unwrap();
            let store = RedbStore::open(std::path::Path::new(dir)).unwrap();
            (events.parse().unwrap(), store)
        })
        .collect();
    alternating(": a cold process", &opened, &the_call, &set, now_us, calls);
}

criterion_group!(benches, bench);

fn main() {
    match std::env::var(COLD_STORES) {
        Ok(stores) => cold_child(&stores),
        Err(_) => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
