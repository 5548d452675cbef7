//! Seeded synthetic TRACE sessions for benchmarks: realistic event types and payloads (unicode
//! goals, floats across magnitudes, nested parameters), sealed into a valid chain.
//!
//! Shared by `benches/trace.rs` and `examples/gen_trace.rs` (included with `#[path]`).

use cra_trace::{ChainHead, EventDraft, TraceEvent, seal};
use serde_json::{Value, json};

/// splitmix64: a tiny deterministic generator (the seed is printed by the callers).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }

    pub(crate) fn float(&mut self) -> f64 {
        let mantissa = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let exp = self.below(24) as i32 - 12;
        mantissa * 10f64.powi(exp)
    }
}

const GOALS: &[&str] = &[
    "Résumé des tickets ouverts — priorité haute",
    "Summarise the open incidents for the on-call handover",
    "顧客のチケットを要約する",
    "Проверить статус заказа №42 🚀",
    "Close stale tickets older than 30 days ✓",
    "Κλείσιμο παλαιών αιτημάτων",
];
const ACTIONS: &[&str] = &[
    "ticket.get",
    "ticket.list",
    "ticket.update",
    "ticket.delete",
    "kb.search",
];
const POLICIES: &[&str] = &[
    "allow-read",
    "allow-write",
    "deny-delete",
    "approve-refund",
    "rate-search",
];

fn uuid(rng: &mut Rng) -> String {
    let a = rng.next();
    let b = rng.next();
    format!(
        "{:08x}-{:04x}-7{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48 & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

fn payload(rng: &mut Rng, i: u64) -> (String, Value) {
    match i % 8 {
        0 => (
            "carp.request.received".into(),
            json!({
                "request_id": uuid(rng),
                "operation": "resolve",
                "goal": rng.pick(GOALS),
                "atlas_ids": ["com.example.support", "com.example.kb"],
                "atlas_digests": {"com.example.support": format!("sha256:{:016x}{:016x}", rng.next(), rng.next())},
            }),
        ),
        1..=3 => (
            "policy.evaluated".into(),
            json!({
                "policy_id": rng.pick(POLICIES),
                "action_id": rng.pick(ACTIONS),
                "result": rng.pick(&["allow", "deny", "require_approval"]),
                "evaluation_ms": rng.float(),
            }),
        ),
        4 => (
            "carp.resolution.completed".into(),
            json!({
                "resolution_id": uuid(rng),
                "decision_type": rng.pick(&["allow", "partial", "deny"]),
                "allowed_count": rng.below(10),
                "denied_count": rng.below(4),
                "ttl_seconds": 3600,
            }),
        ),
        5 => (
            "action.requested".into(),
            json!({
                "action_id": rng.pick(ACTIONS),
                "execution_id": uuid(rng),
                "parameters_hash": format!("sha256:{:016x}{:016x}{:016x}{:016x}", rng.next(), rng.next(), rng.next(), rng.next()),
                "parameters": {"ticket_id": rng.below(100_000), "note": rng.pick(GOALS), "weight": rng.float()},
            }),
        ),
        6 => (
            "action.executed".into(),
            json!({
                "action_id": rng.pick(ACTIONS),
                "execution_id": uuid(rng),
                "duration_ms": rng.float() * 1000.0,
                "result": {"status": "ok", "items": [rng.below(1000), rng.below(1000), rng.below(1000)]},
            }),
        ),
        _ => (
            "context.injected".into(),
            json!({
                "block_id": format!("ctx-{}", rng.below(500)),
                "source": "atlas://com.example.support/context/overview.md",
                "token_count": rng.below(4000),
                "score": rng.float(),
            }),
        ),
    }
}

/// Calls `sink` with each of `n` events of one valid session chain, in order.
pub(crate) fn session(seed: u64, n: u64, mut sink: impl FnMut(&TraceEvent)) {
    let mut rng = Rng::new(seed);
    let session_id = uuid(&mut rng);
    let trace_id = uuid(&mut rng);
    let root_span = uuid(&mut rng);
    let mut head = ChainHead::genesis();
    for i in 0..n {
        let (event_type, payload) = if i == 0 {
            (
                "session.started".to_owned(),
                json!({"agent_id": "bench-agent", "goal": rng.pick(GOALS)}),
            )
        } else {
            payload(&mut rng, i)
        };
        let draft = EventDraft {
            trace_id: trace_id.clone(),
            span_id: uuid(&mut rng),
            parent_span_id: (i > 0).then(|| root_span.clone()),
            event_type,
            payload,
        };
        let micros = i * 137;
        let timestamp = format!(
            "2026-01-01T{:02}:{:02}:{:02}.{:06}Z",
            (micros / 3_600_000_000) % 24,
            (micros / 60_000_000) % 60,
            (micros / 1_000_000) % 60,
            micros % 1_000_000
        );
        let event = seal(draft, &session_id, &head, uuid(&mut rng), timestamp);
        head = ChainHead::after(&event);
        sink(&event);
    }
}

/// `n` events of one valid session as JSONL.
#[allow(dead_code)]
pub(crate) fn session_jsonl(seed: u64, n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    session(seed, n, |e| {
        out.extend_from_slice(serde_json::to_string(e).unwrap_or_default().as_bytes());
        out.push(b'\n');
    });
    out
}
