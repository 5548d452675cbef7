//! `orient-growth`: Relay `orient` latency against the number of packages in the project.
//!
//! For each size (1,000, 10,000, 100,000 packages; `--quick`: 1,000 and 10,000; `--smoke`, for CI:
//! 100 once) a fresh Relay over cra-relay's in-memory store (the `test-support` store: it
//! measures the Relay operation's own cost, not a disk) gets that many distinct packages
//! deposited through the real `Relay::deposit` (validation, content hash, transition rules), all
//! inside orient's window;
//! then `Relay::orient(project, None)` (§8.3: the project, its recent packages up to the cap,
//! current facts, deduplicated open questions) is timed. Also timed: the Markdown briefing of the
//! bundle.
//!
//! Output: one JSON document on stdout, microseconds per orient, min / median / max over runs.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use cra_bench_compare::{summary, time_runs};
use cra_relay::store::RelayStore;
use cra_relay::store::memory::MemoryStore;
use cra_relay::testkit;
use serde_json::{Value, json};

fn run() -> anyhow::Result<Value> {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--smoke` (CI, a debug build): one small size once, figures meaningless.
    let smoke = std::env::args().any(|a| a == "--smoke");
    let sizes: &[usize] = if smoke {
        &[100]
    } else if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let (runs, min_run) = if smoke {
        (1, Duration::ZERO)
    } else if quick {
        (5, Duration::from_millis(20))
    } else {
        (11, Duration::from_millis(200))
    };
    let mut out = Vec::new();
    for &n in sizes {
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
            relay
                .deposit(testkit::PROJECT, &testkit::jordan(), &p)
                .map_err(|e| anyhow::anyhow!("deposit {i}: {e}"))?;
        }
        let deposit_s = t.elapsed().as_secs_f64();
        let bundle = relay
            .orient(testkit::PROJECT, None)
            .map_err(|e| anyhow::anyhow!("orient: {e}"))?;
        if bundle.recent_packages.is_empty() {
            bail!("orient over {n} packages returned no recent package");
        }
        let orient = time_runs(runs, min_run, || {
            black_box(
                relay
                    .orient(testkit::PROJECT, None)
                    .map_err(|e| anyhow::anyhow!("orient: {e}"))?,
            );
            Ok(())
        })?;
        let markdown = time_runs(runs, min_run, || {
            black_box(cra_relay::digest::orientation_markdown(&bundle));
            Ok(())
        })?;
        let o = summary(orient);
        eprintln!(
            "orient-growth: {n} packages (deposited in {deposit_s:.2} s): orient {:.1} us (median)",
            o["median"].as_f64().unwrap_or(f64::NAN)
        );
        out.push(json!({
            "packages": n,
            "recent_packages_returned": bundle.recent_packages.len(),
            "deposit_seconds": deposit_s,
            "orient_us": o,
            "markdown_us": summary(markdown),
        }));
    }
    Ok(json!({
        "store": "cra-relay in-memory store (test-support)",
        "unit": "us per orient",
        "sizes": out,
    }))
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
