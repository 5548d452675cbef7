//! Resolve latency for atlases of 10, 100 and 1,000 actions. Each iteration resolves a distinct
//! request (its own request id, agent, goal and risk tier, cycling through 1,024 prepared ones),
//! so nothing can be cached between iterations. Besides criterion's estimates, prints p50 and
//! p99 over 20,000 individually timed resolves per size. `resolution_cache_key` measures the key
//! the runtime's resolution cache computes on every resolve (`cra_carp::cache`).

#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use cra_carp::CarpRequest;
use cra_carp::eval::{CountersSnapshot, ResolveOptions, resolve};
use cra_carp::index::{AtlasSet, CompiledAtlas};
use cra_carp::validate::parse_request;
use cra_wire::SequentialIds;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const TIERS: [&str; 4] = ["low", "medium", "high", "critical"];

/// An atlas of `n` actions `g<k>.r<i>.op` in groups of ten, with a realistic policy mix:
/// reads allowed, writes allowed at low/medium risk, one deny per group, approvals, a rate
/// limit and a budget over everything.
fn atlas(n: usize) -> AtlasSet {
    let groups = n.div_ceil(10);
    let actions: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "action_id": format!("g{}.r{}.op", i / 10, i),
                "name": format!("Action {i}"),
                "description": "A benchmark action.",
                "risk_tier": TIERS[i % 3],
                "parameters_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
            })
        })
        .collect();
    let mut policies = vec![
        json!({"policy_id": "allow-low", "type": "allow", "actions": ["*"], "conditions": {"risk_tiers": ["low", "medium"]}}),
        json!({"policy_id": "rl-all", "type": "rate_limit", "actions": ["**"], "parameters": {"max_calls": 100, "window_seconds": 60, "scope": "agent"}}),
        json!({"policy_id": "budget-all", "type": "budget", "actions": ["*"], "parameters": {"max_units": 1000, "scope": "global"}}),
        json!({"policy_id": "deny-contractors", "type": "deny", "actions": ["*"], "conditions": {"agents": ["contractor-*"], "context_matches": ["delete"]}}),
    ];
    for g in 0..groups {
        policies.push(json!({"policy_id": format!("deny-g{g}"), "type": "deny", "actions": [format!("g{g}.r{}.op", g * 10 + 9)], "parameters": {"reason": "never"}}));
        policies.push(json!({"policy_id": format!("approve-g{g}"), "type": "require_approval", "actions": [format!("g{g}.r{}.op", g * 10 + 5)], "conditions": {"risk_tiers": ["high", "critical"]}}));
        policies.push(json!({"policy_id": format!("allow-g{g}"), "type": "allow", "actions": [format!("g{g}.*.op")], "conditions": {"time_window": {"start_hour": 6, "end_hour": 22}}}));
    }
    let manifest: cra_atlas::Manifest = serde_json::from_value(json!({
        "atlas_version": "1.0", "atlas_id": "com.example.bench", "version": "1.0.0", "name": "bench",
        "context_packs": [{"pack_id": "intro", "files": ["context/intro.md"], "priority": 10}],
        "policies": policies, "actions": actions,
    }))
    .expect("bench manifest");
    let ctx = BTreeMap::from([(
        "context/intro.md".to_owned(),
        "# Intro\n\nBenchmark context.\n".to_owned(),
    )]);
    AtlasSet::new(vec![
        CompiledAtlas::compile(&manifest, &ctx, "digest").expect("compile"),
    ])
    .expect("set")
}

fn requests() -> Vec<CarpRequest> {
    (0..1024u32)
        .map(|i| {
            parse_request(&json!({
                "carp_version": "1.0",
                "request_id": format!("0190a000-0000-7000-8000-{i:012x}"),
                "timestamp": "2026-01-05T10:00:00Z",
                "operation": "resolve",
                "requester": {"agent_id": if i % 7 == 0 { format!("contractor-{i}") } else { format!("agent-{i}") },
                              "session_id": "0190a000-0000-7000-8000-000000000001"},
                "task": {"goal": if i % 5 == 0 { format!("delete record {i}") } else { format!("look up record {i}") },
                         "risk_tier": TIERS[(i % 4) as usize],
                         "context_hints": ["billing"]},
            }))
            .expect("bench request")
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let reqs = requests();
    let now = cra_wire::clock::parse_rfc3339("2026-01-05T10:00:00Z").expect("now");
    let counters = CountersSnapshot::empty();
    let opts = ResolveOptions::default();
    let ids = SequentialIds::new(1, 1);
    let measuring = std::env::args().any(|a| a == "--bench");
    let mut group = c.benchmark_group("resolve");
    for n in [10usize, 100, 1000] {
        let set = atlas(n);
        let mut i = 0usize;
        group.bench_function(format!("{n}_actions"), |b| {
            b.iter(|| {
                i = (i + 1) % reqs.len();
                black_box(resolve(&reqs[i], &set, &counters, now, &ids, &opts).expect("resolve"))
            })
        });
        // Percentiles over individually timed resolves; one resolve when criterion runs in test
        // mode (`cargo test --bench`, CI's smoke: no `--bench` argument), where figures mean
        // nothing.
        let count = if measuring { 20_000usize } else { 1 };
        let mut samples: Vec<u128> = Vec::with_capacity(count);
        for k in 0..count {
            let r = &reqs[k % reqs.len()];
            let t = Instant::now();
            black_box(resolve(r, &set, &counters, now, &ids, &opts).expect("resolve"));
            samples.push(t.elapsed().as_nanos());
        }
        samples.sort_unstable();
        let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
        println!(
            "resolve/{n}_actions: p50 {:.2} us, p99 {:.2} us ({count} distinct-request samples)",
            p(0.50),
            p(0.99)
        );
    }
    group.finish();
    // What the runtime's resolution cache adds to every resolve it does not answer from the
    // cache: the key (the request without its id and timestamp, the digests and the counters,
    // canonicalised and hashed). Compare with `resolve/10_actions`, the cheapest resolve.
    let set = atlas(10);
    let mut i = 0usize;
    c.bench_function("resolution_cache_key", |b| {
        b.iter(|| {
            i = (i + 1) % reqs.len();
            black_box(cra_carp::cache::cache_key(
                &reqs[i],
                set.digests(),
                &counters,
            ))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
