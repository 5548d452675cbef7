//! Property tests over random atlases and requests: explicit deny beats any allow; nothing is
//! allowed without an allow or require_approval policy; evaluation is deterministic; the order
//! of policies in the files changes nothing. Proptest prints the failing seed and input.

use std::collections::BTreeMap;

use cra_atlas::pattern;
use cra_carp::CarpRequest;
use cra_carp::eval::{CounterEntry, CountersSnapshot, ExplainLevel, ResolveOptions, resolve};
use cra_carp::index::{AtlasSet, CompiledAtlas};
use cra_carp::validate::parse_request;
use cra_wire::SequentialIds;
use proptest::prelude::*;
use serde_json::{Value, json};

const ACTIONS: [&str; 5] = ["a.x", "a.y", "b.x", "b.y.z", "c.w"];
const PATTERNS: [&str; 8] = ["a.x", "a.y", "b.y.z", "a.*", "*.x", "b.**", "*", "c.w"];
const TYPES: [&str; 6] = [
    "deny",
    "allow",
    "require_approval",
    "requires_approval",
    "rate_limit",
    "budget",
];
const TIERS: [&str; 4] = ["low", "medium", "high", "critical"];

#[derive(Debug, Clone)]
struct P {
    kind: usize,
    patterns: Vec<usize>,
    priority: i64,
    tiers: Option<Vec<usize>>,
    agent: Option<bool>,
    keyword: bool,
}

fn policy_strategy() -> impl Strategy<Value = P> {
    (
        0..TYPES.len(),
        prop::collection::vec(0..PATTERNS.len(), 1..3),
        -2i64..3,
        prop::option::of(prop::collection::vec(0..4usize, 1..3)),
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(kind, patterns, priority, tiers, agent, keyword)| P {
            kind,
            patterns,
            priority,
            tiers,
            agent,
            keyword,
        })
}

#[derive(Debug, Clone)]
struct Req {
    tier: usize,
    agent_one: bool,
    keyword: bool,
    rate_used: u64,
}

fn req_strategy() -> impl Strategy<Value = Req> {
    (0..4usize, any::<bool>(), any::<bool>(), 0u64..4).prop_map(
        |(tier, agent_one, keyword, rate_used)| Req {
            tier,
            agent_one,
            keyword,
            rate_used,
        },
    )
}

fn policy_json(i: usize, p: &P) -> Value {
    let mut v = json!({
        "policy_id": format!("p{i}"),
        "type": TYPES[p.kind],
        "actions": p.patterns.iter().map(|&k| PATTERNS[k]).collect::<Vec<_>>(),
        "priority": p.priority,
    });
    let mut cond = serde_json::Map::new();
    if let Some(t) = &p.tiers {
        cond.insert(
            "risk_tiers".into(),
            json!(t.iter().map(|&k| TIERS[k]).collect::<Vec<_>>()),
        );
    }
    if let Some(one) = p.agent {
        cond.insert(
            "agents".into(),
            json!([if one { "agent-1" } else { "agent-2" }]),
        );
    }
    if p.keyword {
        cond.insert("context_matches".into(), json!(["alpha"]));
    }
    if !cond.is_empty() {
        v["conditions"] = Value::Object(cond);
    }
    match TYPES[p.kind] {
        "rate_limit" => {
            v["parameters"] = json!({"max_calls": 2, "window_seconds": 60, "scope": "agent"})
        }
        "budget" => v["parameters"] = json!({"max_units": 2, "scope": "global"}),
        "deny" => v["parameters"] = json!({"reason": "no"}),
        _ => {}
    }
    v
}

fn atlas(policies: &[Value]) -> AtlasSet {
    let manifest = json!({
        "atlas_version": "1.0",
        "atlas_id": "com.example.prop",
        "version": "1.0.0",
        "name": "prop",
        "policies": policies,
        "actions": ACTIONS.iter().map(|a| json!({"action_id": a, "name": a})).collect::<Vec<_>>(),
    });
    let m: cra_atlas::Manifest = serde_json::from_value(manifest).unwrap();
    AtlasSet::new(vec![
        CompiledAtlas::compile(&m, &BTreeMap::new(), "d").unwrap(),
    ])
    .unwrap()
}

fn request(r: &Req) -> CarpRequest {
    parse_request(&json!({
        "carp_version": "1.0",
        "request_id": "0190a000-0000-7000-8000-00000000aaaa",
        "timestamp": "2026-01-05T10:00:00Z",
        "operation": "resolve",
        "requester": {"agent_id": if r.agent_one { "agent-1" } else { "agent-3" },
                      "session_id": "0190a000-0000-7000-8000-000000000001"},
        "task": {"goal": if r.keyword { "do the Alpha thing" } else { "do it" }, "risk_tier": TIERS[r.tier]},
    }))
    .unwrap()
}

fn counters(policies: &[P], r: &Req) -> CountersSnapshot {
    let agent = if r.agent_one {
        "agent:agent-1"
    } else {
        "agent:agent-3"
    };
    let rate = (0..policies.len())
        .map(|i| CounterEntry {
            policy_id: format!("p{i}"),
            scope_key: agent.into(),
            value: r.rate_used,
        })
        .collect();
    CountersSnapshot::new(rate, vec![])
}

/// The test's own reading of "the conditions hold" (independent of the evaluator).
fn holds(p: &P, r: &Req) -> bool {
    p.tiers.as_ref().is_none_or(|t| t.contains(&r.tier))
        && p.agent.is_none_or(|one| one && r.agent_one)
        && (!p.keyword || r.keyword)
}

fn matches(p: &P, action: &str) -> bool {
    p.patterns
        .iter()
        .any(|&k| pattern::matches(PATTERNS[k], action))
}

fn run(policies: &[Value], ps: &[P], r: &Req) -> (cra_carp::Resolution, String) {
    run_at(policies, ps, r, ExplainLevel::Full)
}

fn run_at(
    policies: &[Value],
    ps: &[P],
    r: &Req,
    explain: ExplainLevel,
) -> (cra_carp::Resolution, String) {
    let res = resolve(
        &request(r),
        &atlas(policies),
        &counters(ps, r),
        cra_wire::clock::parse_rfc3339("2026-01-05T10:00:00Z").unwrap(),
        &SequentialIds::new(1, 9),
        &ResolveOptions {
            explain,
            ..ResolveOptions::default()
        },
    )
    .unwrap();
    let bytes = serde_json::to_string(&res).unwrap();
    (res, bytes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn explicit_deny_beats_any_allow(ps in prop::collection::vec(policy_strategy(), 0..8), r in req_strategy()) {
        let policies: Vec<Value> = ps.iter().enumerate().map(|(i, p)| policy_json(i, p)).collect();
        let (res, _) = run(&policies, &ps, &r);
        for action in ACTIONS {
            let denied_explicitly = ps.iter().any(|p| TYPES[p.kind] == "deny" && matches(p, action) && holds(p, &r));
            if denied_explicitly {
                prop_assert!(res.allowed_actions.iter().all(|a| *a.action_id != *action), "{action} allowed despite a holding deny");
                let d = res.denied_actions.iter().find(|d| *d.action_id == *action);
                prop_assert!(d.is_some_and(|d| ps.iter().enumerate().any(|(i, p)| *d.policy_id == *format!("p{i}") && TYPES[p.kind] == "deny")),
                    "{action} must be denied by a deny policy");
            }
        }
    }

    #[test]
    fn nothing_is_allowed_without_a_granting_policy(ps in prop::collection::vec(policy_strategy(), 0..8), r in req_strategy()) {
        let policies: Vec<Value> = ps.iter().enumerate().map(|(i, p)| policy_json(i, p)).collect();
        let (res, _) = run(&policies, &ps, &r);
        for a in &res.allowed_actions {
            let granted = ps.iter().any(|p| {
                matches!(TYPES[p.kind], "allow" | "require_approval" | "requires_approval") && matches(p, &a.action_id) && holds(p, &r)
            });
            prop_assert!(granted, "{} allowed without a holding allow or require_approval policy", a.action_id);
            let gated = ps.iter().any(|p| matches!(TYPES[p.kind], "require_approval" | "requires_approval") && matches(p, &a.action_id) && holds(p, &r));
            prop_assert_eq!(a.requires_confirmation, gated);
        }
        // Every candidate is either allowed or denied, exactly once.
        prop_assert_eq!(res.allowed_actions.len() + res.denied_actions.len(), ACTIONS.len());
    }

    #[test]
    fn evaluation_is_deterministic(ps in prop::collection::vec(policy_strategy(), 0..8), r in req_strategy()) {
        let policies: Vec<Value> = ps.iter().enumerate().map(|(i, p)| policy_json(i, p)).collect();
        let (_, a) = run(&policies, &ps, &r);
        let (_, b) = run(&policies, &ps, &r);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn policy_order_in_files_changes_nothing(
        ps in prop::collection::vec(policy_strategy(), 0..8),
        r in req_strategy(),
        seed in any::<u64>(),
    ) {
        let policies: Vec<Value> = ps.iter().enumerate().map(|(i, p)| policy_json(i, p)).collect();
        let mut shuffled = policies.clone();
        // A deterministic Fisher-Yates from the seed (printed by proptest on failure).
        let mut s = seed | 1;
        for i in (1..shuffled.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            shuffled.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let (_, a) = run(&policies, &ps, &r);
        let (_, b) = run(&shuffled, &ps, &r);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn explain_levels_change_only_the_explanation(
        ps in prop::collection::vec(policy_strategy(), 0..8),
        r in req_strategy(),
    ) {
        let policies: Vec<Value> = ps.iter().enumerate().map(|(i, p)| policy_json(i, p)).collect();
        let (mut full, _) = run_at(&policies, &ps, &r, ExplainLevel::Full);
        let (mut outcomes, _) = run_at(&policies, &ps, &r, ExplainLevel::Outcomes);
        let (off, _) = run_at(&policies, &ps, &r, ExplainLevel::Off);
        prop_assert!(off.explain.is_none());
        // Outcomes: every action's outcome and decider as the full explanation has them, and
        // nothing of the trail.
        let mut trimmed = full.explain.take().expect("full explanation");
        for a in &mut trimmed.actions {
            a.policies.clear();
        }
        trimmed.context_packs.clear();
        prop_assert_eq!(outcomes.explain.take(), Some(trimmed));
        // The rest of the resolution is the same at every level.
        prop_assert_eq!(&full, &off);
        prop_assert_eq!(&outcomes, &off);
    }
}
