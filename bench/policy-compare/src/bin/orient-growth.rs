//! `orient-growth`: Relay `orient` latency against the number of packages in the project, on each
//! store backend.
//!
//! For each size (1,000, 10,000, 100,000 packages; `--quick`: 1,000 and 10,000; `--smoke`, for CI:
//! 100 once) and each of two shapes of project, a fresh Relay over cra-relay's in-memory store
//! (the `test-support` store: it measures the Relay operation's own cost, not a disk) gets that
//! many distinct packages deposited through the real `Relay::deposit` (validation, content hash,
//! transition rules). The shapes:
//!
//! - `all_in_window`: every package created now, so all are inside orient's window;
//! - `sparse_window`: the first 5 deposited are created now, every later one 400 days ago, so
//!   the window holds 5 packages and the 99.99% newest deposits lie outside it.
//!
//! The same packages are then restored (one transaction, batched; `RelayStore::restore`) into a
//! fresh redb data directory and, when `CRA_TEST_POSTGRES_URL` is set, a fresh PostgreSQL
//! schema (dropped at the end); the load time of each is reported. On each store
//! `Relay::orient(project, None)` (§8.3: the project, its recent packages up to the cap, current
//! facts, deduplicated open questions) is timed; on the in-memory store also the Markdown
//! briefing of the bundle.
//!
//! Output: one JSON document on stdout, microseconds per orient, min / median / max over runs,
//! per backend and shape.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cra_bench_compare::{summary, time_runs};
use cra_relay::Relay;
use cra_relay::store::memory::MemoryStore;
use cra_relay::store::{RelayStore, Snapshot};
use cra_relay::testkit;
use cra_store::relay::{PgRelay, RedbRelay};
use cra_store::testing::TestSchema;
use cra_store::{RedbStore, StoreConfig};
use serde_json::{Value, json};

/// Packages created now in the `sparse_window` shape.
const SPARSE_IN_WINDOW: usize = 5;

struct Plan {
    sizes: &'static [usize],
    runs: usize,
    min_run: Duration,
}

/// Deposits `n` packages of `shape` into a fresh in-memory Relay; returns it and the seconds.
fn deposit(n: usize, shape: &str) -> anyhow::Result<(Relay, f64)> {
    let store: Arc<dyn RelayStore> = Arc::new(MemoryStore::new());
    let (relay, _clock) = testkit::relay(store);
    relay
        .create_project(testkit::PROJECT, "orient bench")
        .map_err(|e| anyhow::anyhow!("create project: {e}"))?;
    let t = Instant::now();
    for i in 0..n {
        let mut p = testkit::package(&format!("pkg_{i:07}"), "complete");
        p["open_questions"] = json!([format!("question {}", i % 50)]);
        p["content_md"] = json!(format!("# Step {i}\n\nWhat was done and why.\n"));
        if shape == "sparse_window" && i >= SPARSE_IN_WINDOW {
            // testkit::START minus 400 days.
            p["created_at"] = json!("2025-03-14T20:00:00Z");
        }
        relay
            .deposit(testkit::PROJECT, &testkit::jordan(), &p)
            .map_err(|e| anyhow::anyhow!("deposit {i}: {e}"))?;
    }
    Ok((relay, t.elapsed().as_secs_f64()))
}

/// Times orient (and, with `markdown`, the briefing) over `relay`.
fn measure(relay: &Relay, plan: &Plan, markdown: bool) -> anyhow::Result<Value> {
    let bundle = relay
        .orient(testkit::PROJECT, None)
        .map_err(|e| anyhow::anyhow!("orient: {e}"))?;
    if bundle.recent_packages.is_empty() {
        bail!("orient returned no recent package");
    }
    let orient = time_runs(plan.runs, plan.min_run, || {
        black_box(
            relay
                .orient(testkit::PROJECT, None)
                .map_err(|e| anyhow::anyhow!("orient: {e}"))?,
        );
        Ok(())
    })?;
    let mut out = json!({
        "recent_packages_returned": bundle.recent_packages.len(),
        "orient_us": summary(orient),
    });
    if markdown {
        let md = time_runs(plan.runs, plan.min_run, || {
            black_box(cra_relay::digest::orientation_markdown(&bundle));
            Ok(())
        })?;
        out["markdown_us"] = summary(md);
    }
    Ok(out)
}

/// Restores `snap` into `store` (timed) and measures orient there, checking it answers as the
/// in-memory store did.
fn on_store(
    store: Arc<dyn RelayStore>,
    snap: &Snapshot,
    expected: &Value,
    plan: &Plan,
) -> anyhow::Result<Value> {
    let t = Instant::now();
    store
        .restore(snap)
        .map_err(|e| anyhow::anyhow!("restore: {e}"))?;
    let load_s = t.elapsed().as_secs_f64();
    let (relay, _clock) = testkit::relay(store);
    let got = relay
        .orient(testkit::PROJECT, None)
        .map_err(|e| anyhow::anyhow!("orient: {e}"))?;
    if serde_json::to_value(&got.recent_packages)? != *expected {
        bail!("orient answers differently from the in-memory store");
    }
    let mut m = measure(&relay, plan, false)?;
    m["load_seconds"] = json!(load_s);
    Ok(m)
}

fn run() -> anyhow::Result<Value> {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--smoke` (CI, a debug build): one small size once, figures meaningless.
    let smoke = std::env::args().any(|a| a == "--smoke");
    let plan = if smoke {
        Plan {
            sizes: &[100],
            runs: 1,
            min_run: Duration::ZERO,
        }
    } else if quick {
        Plan {
            sizes: &[1_000, 10_000],
            runs: 5,
            min_run: Duration::from_millis(20),
        }
    } else {
        Plan {
            sizes: &[1_000, 10_000, 100_000],
            runs: 11,
            min_run: Duration::from_millis(200),
        }
    };
    let pg_url = std::env::var(cra_store::testing::POSTGRES_URL_VAR)
        .ok()
        .filter(|u| !u.is_empty());
    let mut rows = Vec::new();
    for shape in ["all_in_window", "sparse_window"] {
        for &n in plan.sizes {
            let (relay, deposit_s) = deposit(n, shape)?;
            let expected = serde_json::to_value(
                relay
                    .orient(testkit::PROJECT, None)
                    .map_err(|e| anyhow::anyhow!("orient: {e}"))?
                    .recent_packages,
            )?;
            let mut memory = measure(&relay, &plan, true)?;
            memory["load_seconds"] = json!(deposit_s);
            let snap = relay
                .store()
                .snapshot()
                .map_err(|e| anyhow::anyhow!("snapshot: {e}"))?;
            drop(relay);
            report("memory", shape, n, &memory);
            rows.push(row("memory", shape, n, memory));

            let dir = tempfile::tempdir()?;
            let data = RedbStore::open(dir.path()).context("open redb")?;
            let redb = on_store(
                Arc::new(RedbRelay::open(&data).map_err(|e| anyhow::anyhow!("{e}"))?),
                &snap,
                &expected,
                &plan,
            )?;
            report("redb", shape, n, &redb);
            rows.push(row("redb", shape, n, redb));
            drop(data);

            if let Some(url) = &pg_url {
                let schema = TestSchema::new(url, "orient_growth");
                let store = schema
                    .store(StoreConfig::default())
                    .context("connect PostgreSQL")?;
                let pg = on_store(Arc::new(PgRelay::new(store)), &snap, &expected, &plan)?;
                report("postgres", shape, n, &pg);
                rows.push(row("postgres", shape, n, pg));
            }
        }
    }
    Ok(json!({
        "stores": {
            "memory": "cra-relay in-memory store (test-support), packages deposited through Relay::deposit",
            "redb": "cra-store redb in a temporary data directory, packages restored in one transaction",
            "postgres": if pg_url.is_some() {
                "cra-store PostgreSQL, a fresh schema, packages restored in one transaction"
            } else {
                "not measured: CRA_TEST_POSTGRES_URL not set"
            },
        },
        "shapes": {
            "all_in_window": "every package created now (inside the 14-day window)",
            "sparse_window": "5 packages in the window (the first deposited), every later one created 400 days ago",
        },
        "unit": "us per orient",
        "rows": rows,
    }))
}

fn row(store: &str, shape: &str, n: usize, mut m: Value) -> Value {
    m["store"] = json!(store);
    m["shape"] = json!(shape);
    m["packages"] = json!(n);
    m
}

fn report(store: &str, shape: &str, n: usize, m: &Value) {
    eprintln!(
        "orient-growth: {store} {shape} {n} packages (loaded in {:.2} s): orient {:.1} us (median)",
        m["load_seconds"].as_f64().unwrap_or(f64::NAN),
        m["orient_us"]["median"].as_f64().unwrap_or(f64::NAN)
    );
}

fn main() -> std::process::ExitCode {
    match run().and_then(|doc| Ok(serde_json::to_string_pretty(&doc)?)) {
        Ok(s) => {
            println!("{s}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("orient-growth: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
