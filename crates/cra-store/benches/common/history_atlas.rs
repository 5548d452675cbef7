//! The question of the history benchmarks, shared by `cra-store`'s criterion bench
//! (`benches/history.rs`) and the Cedar comparison (`bench/policy-compare`'s `history-compare`,
//! which includes this file by path): an atlas of 100 actions whose target action's allow holds 20
//! history tests (5 `after`, 5 `bind`, 5 `count_within`, 5 `sum_within`), and the requests that ask
//! about it.

use std::collections::BTreeMap;

use cra_carp::index::{AtlasSet, CompiledAtlas};
use serde_json::{Value, json};

pub(crate) const TARGET: &str = "g0.r0.op";
pub(crate) const SESSION: &str = "0190a000-0000-7000-8000-000000000001";
pub(crate) const AGENT: &str = "agent-1";
pub(crate) const NOW: &str = "2026-01-05T10:00:00Z";
pub(crate) const CUSTOMERS: u64 = 500;

/// The 20 history tests on the target action, in one allow.
pub(crate) fn history() -> Value {
    let mut tests = Vec::new();
    for k in 0..5 {
        tests.push(json!({"after": {"action": format!("g1.r{}.op", 10 + k), "within_seconds": 86_400}, "scope": "global"}));
    }
    for k in 0..5 {
        tests.push(json!({"bind": {"pointer": "/customer_id", "action": format!("g2.r{}.op", 20 + k)}, "scope": "global"}));
    }
    for k in 0..5 {
        tests.push(json!({"count_within": {"max": 1_000_000 + k, "window_seconds": 86_400, "per": "/customer_id"}, "scope": "global"}));
    }
    for k in 0..5 {
        tests.push(json!({"sum_within": {"pointer": "/amount", "max": 1_000_000 + k, "window_seconds": 86_400, "per": "/customer_id"}, "scope": "global"}));
    }
    Value::Array(tests)
}

pub(crate) fn atlas() -> AtlasSet {
    let actions: Vec<Value> = (0..100)
        .map(|i| {
            json!({
                "action_id": format!("g{}.r{i}.op", i / 10),
                "name": format!("Action {i}"), "description": "A benchmark action.", "risk_tier": "low",
                "parameters_schema": {"type": "object", "properties": {
                    "customer_id": {"type": "string"}, "amount": {"type": "number"}}},
            })
        })
        .collect();
    let policies = vec![
        json!({"policy_id": "allow-history", "type": "allow", "actions": [TARGET], "conditions": {"history": history()}}),
        json!({"policy_id": "allow-rest", "type": "allow", "actions": ["g1.*.op", "g2.*.op", "g3.*.op", "g4.*.op", "g5.*.op", "g6.*.op", "g7.*.op", "g8.*.op", "g9.*.op"]}),
    ];
    let manifest: cra_atlas::Manifest = serde_json::from_value(json!({
        "atlas_version": "1.0", "atlas_id": "com.example.bench", "version": "1.0.0", "name": "bench",
        "policies": policies, "actions": actions,
    }))
    .unwrap();
    AtlasSet::new(vec![
        CompiledAtlas::compile(&manifest, &BTreeMap::new(), "digest").unwrap(),
    ])
    .unwrap()
}

pub(crate) fn request(n: u64, operation: &str) -> Value {
    json!({
        "carp_version": "1.0",
        "request_id": format!("0190a000-0000-7000-8000-{n:012x}"),
        "timestamp": NOW, "operation": operation,
        "requester": {"agent_id": AGENT, "session_id": SESSION},
        "task": {"goal": "refund the customer"},
    })
}

/// The customer of the `i`th call: 500 customers, in turn.
pub(crate) fn customer(i: u64) -> String {
    format!("C-{:06}", i % CUSTOMERS)
}
