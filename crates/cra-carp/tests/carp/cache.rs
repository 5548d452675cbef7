//! The resolution cache (`cra_carp::cache`, `specs/carp.md` "The resolution cache"): an
//! identical resolve inside the ttl is answered by the earlier resolution; each thing that can
//! change the answer (counters, conditions, approvals, atlases, expiry) gives a fresh one.

use std::sync::Arc;

use cra_carp::cache::ResolutionCache;
use cra_carp::engine::{Carp, ExecuteOutcome, PreparedResolve};
use cra_carp::eval::ExplainLevel;
use cra_carp::validate::parse_request;
use cra_wire::FixedClock;
use serde_json::{Value, json};

use crate::table::{SESSION, table_engine};

struct World {
    carp: Carp,
    clock: Arc<FixedClock>,
    store: Arc<cra_carp::memory::MemoryStore>,
    n: std::cell::Cell<u32>,
}

impl World {
    fn new() -> Self {
        let (carp, clock, store) = table_engine(7);
        let carp = carp.with_cache(Arc::new(ResolutionCache::new(64)));
        Self {
            carp,
            clock,
            store,
            n: std::cell::Cell::new(0),
        }
    }

    fn request(&self, atlas: &str, goal: &str) -> Value {
        self.n.set(self.n.get() + 1);
        let now = cra_wire::clock::format_timestamp(cra_wire::Clock::now(self.clock.as_ref()));
        json!({
            "carp_version": "1.0",
            "request_id": format!("0190a000-0000-7000-8000-{:012x}", self.n.get()),
            "timestamp": now,
            "operation": "resolve",
            "requester": {"agent_id": "agent-1", "session_id": SESSION},
            "task": {"goal": goal}, "atlas_ids": [atlas],
        })
    }

    /// Prepares and records `request` as the runtime does, returning what was prepared.
    fn resolve(&self, request: &Value) -> PreparedResolve {
        let request = parse_request(request).unwrap();
        let prepared = self
            .carp
            .prepare_resolve(&request, ExplainLevel::Off, None)
            .unwrap();
        if let Some(record) = &prepared.record {
            assert!(
                record.record_in(self.store.as_ref()).unwrap(),
                "request id reused"
            );
        }
        prepared
    }

    fn execute(&self, resolution_id: &str, action: &str) {
        match self.ask(resolution_id, action) {
            ExecuteOutcome::Run(run) => {
                self.carp.finish_execution(run, Ok(json!({}))).unwrap();
            }
            ExecuteOutcome::Answered(r) | ExecuteOutcome::OpenApproval { response: r, .. } => {
                panic!("not cleared: {r:?}")
            }
        }
    }

    fn ask(&self, resolution_id: &str, action: &str) -> ExecuteOutcome {
        self.n.set(self.n.get() + 1);
        let now = cra_wire::clock::format_timestamp(cra_wire::Clock::now(self.clock.as_ref()));
        let request = json!({
            "carp_version": "1.0",
            "request_id": format!("0190a000-0000-7000-8000-{:012x}", self.n.get()),
            "timestamp": now, "operation": "execute",
            "requester": {"agent_id": "agent-1", "session_id": SESSION},
            "execution": {"resolution_id": resolution_id, "action_id": action, "parameters": {}},
        });
        self.carp
            .execute_in_store(&parse_request(&request).unwrap())
            .unwrap()
    }
}

#[test]
fn an_identical_resolve_inside_the_ttl_is_answered_by_the_same_resolution() {
    let w = World::new();
    let first = w.resolve(&w.request("com.example.ops", "read the logs"));
    assert!(!first.cache_hit);
    w.clock.advance(time::Duration::seconds(30));
    let again = w.resolve(&w.request("com.example.ops", "read the logs"));
    assert!(again.cache_hit, "an identical resolve was evaluated afresh");
    assert_eq!(
        again.resolution.resolution_id,
        first.resolution.resolution_id
    );
    assert_eq!(again.resolution.timestamp, first.resolution.timestamp);
    assert_eq!(again.resolution.request_id, first.resolution.request_id);
    assert_eq!(
        again.resolution.context_blocks, first.resolution.context_blocks,
        "the answer lost the blocks the stored form does not keep"
    );
    let record = again.record.unwrap();
    assert!(record.resolution.is_none());
}

#[test]
fn a_request_that_differs_in_anything_but_its_id_and_timestamp_is_resolved_afresh() {
    let w = World::new();
    let first = w.resolve(&w.request("com.example.ops", "read the logs"));
    let mut other_goal = w.request("com.example.ops", "read the other logs");
    assert!(!w.resolve(&other_goal).cache_hit);
    other_goal["request_id"] = json!("0190a000-0000-7000-8000-0000000000aa");
    other_goal["context"] = json!({"ticket": "T-1"});
    let fresh = w.resolve(&other_goal);
    assert!(!fresh.cache_hit);
    assert_ne!(
        fresh.resolution.resolution_id,
        first.resolution.resolution_id
    );
}

#[test]
fn an_execute_that_charges_a_counter_the_resolve_reads_makes_the_next_one_fresh() {
    let w = World::new();
    let first = w.resolve(&w.request("com.example.ops", "read the logs"));
    w.execute(&first.resolution.resolution_id, "log.read");
    let next = w.resolve(&w.request("com.example.ops", "read the logs"));
    assert!(
        !next.cache_hit,
        "a charged rate limit left the answer cached"
    );
    assert_ne!(
        next.resolution.resolution_id,
        first.resolution.resolution_id
    );
    // Nothing charged since: the fresh one is answered again.
    let again = w.resolve(&w.request("com.example.ops", "read the logs"));
    assert!(again.cache_hit);
    assert_eq!(
        again.resolution.resolution_id,
        next.resolution.resolution_id
    );
}

#[test]
fn a_condition_that_changed_the_answer_gives_a_fresh_resolution() {
    let w = World::new();
    let at = |t: &str| cra_wire::clock::parse_rfc3339(t).unwrap();
    w.clock.set(at("2026-01-05T17:30:00Z"));
    let open = w.resolve(&w.request("com.example.support", "take a payment"));
    w.clock.set(at("2026-01-05T18:10:00Z"));
    let closed = w.resolve(&w.request("com.example.support", "take a payment"));
    assert!(
        !closed.cache_hit,
        "the closed time window was answered from the cache"
    );
    assert_ne!(
        open.resolution.denied_actions,
        closed.resolution.denied_actions
    );
}

#[test]
fn an_opened_approval_makes_the_next_identical_resolve_fresh() {
    let w = World::new();
    let first = w.resolve(&w.request("com.example.ops", "deploy to production"));
    let approval = first.resolution.decision.approval_id.clone().unwrap();
    let again = w.resolve(&w.request("com.example.ops", "deploy to production"));
    assert!(
        again.cache_hit,
        "a resolution whose approval nobody asked for yet was not answered again"
    );
    assert_eq!(
        again.resolution.decision.approval_id.as_deref(),
        Some(approval.as_str())
    );
    // An execute opens the approval for its call; a resolve after it must bring a new approval
    // id, for another call.
    let asked = w.ask(&first.resolution.resolution_id, "deploy.start");
    assert!(
        matches!(asked, ExecuteOutcome::Answered(r) if r.error.as_ref().unwrap().code == "approval_pending")
    );
    let after = w.resolve(&w.request("com.example.ops", "deploy to production"));
    assert!(
        !after.cache_hit,
        "a resolution whose approval is bound to a call was answered again"
    );
    assert_ne!(after.resolution.decision.approval_id, Some(approval));
}

#[test]
fn an_expired_resolution_is_not_answered_again() {
    let w = World::new();
    let first = w.resolve(&w.request("com.example.ops", "read the logs"));
    w.clock.advance(time::Duration::seconds(
        i64::try_from(first.resolution.ttl_seconds).unwrap(),
    ));
    let later = w.resolve(&w.request("com.example.ops", "read the logs"));
    assert!(!later.cache_hit);
}

#[test]
fn other_atlases_in_force_give_a_fresh_resolution() {
    let mut w = World::new();
    let first = w.resolve(&w.request("com.example.ops", "read the logs"));
    let dirs = [crate::common::fixture("table/atlases/ops")];
    w.carp
        .set_atlases(Arc::new(crate::common::atlas_set(&dirs)));
    let other = w.resolve(&w.request("com.example.ops", "read the logs"));
    assert!(
        !other.cache_hit,
        "a changed atlas set was answered from the cache"
    );
    assert_ne!(
        other.resolution.resolution_id,
        first.resolution.resolution_id
    );
}

#[test]
fn a_validate_is_never_answered_from_the_cache_nor_cached() {
    let w = World::new();
    let mut dry = w.request("com.example.ops", "read the logs");
    dry["operation"] = json!("validate");
    let validated = w.resolve(&dry);
    assert!(!validated.cache_hit && validated.record.is_none());
    let resolved = w.resolve(&w.request("com.example.ops", "read the logs"));
    assert!(!resolved.cache_hit, "a dry run's id was answered");
    let mut dry_again = w.request("com.example.ops", "read the logs");
    dry_again["operation"] = json!("validate");
    assert!(!w.resolve(&dry_again).cache_hit);
}

#[test]
fn another_session_never_gets_this_sessions_resolution() {
    let w = World::new();
    let first = w.resolve(&w.request("com.example.ops", "read the logs"));
    let other = "0190a000-0000-7000-8000-0000000000e2";
    w.carp.open_session("agent-1", Some(other), None).unwrap();
    let mut there = w.request("com.example.ops", "read the logs");
    there["requester"]["session_id"] = json!(other);
    let answer = w.resolve(&there);
    assert!(!answer.cache_hit);
    assert_ne!(
        answer.resolution.resolution_id,
        first.resolution.resolution_id
    );
}
