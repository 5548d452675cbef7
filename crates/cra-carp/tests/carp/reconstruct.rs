//! State reconstruction from a trace the runtime wrote (`fixtures/reconstruct/session.trace.jsonl`:
//! a session driven over HTTP by `cra-cli`'s trace tests, exported from the store), and the
//! comparison with a store. The end-to-end "reconstruction equals the stored state" check runs
//! in `cra-cli`'s tests against the real runtime and both backends; here the comparison's own
//! logic is checked against the in-memory store.
//!
//! `CRA_BLESS=1` rewrites `expected-state.json` from the current output (review it).

use std::collections::BTreeMap;

use cra_carp::memory::MemoryStore;
use cra_carp::reconstruct::{
    CounterKind, ExecutionStatus, SessionState, compare_with_store, reconstruct,
};
use cra_carp::store::{
    ApprovalDecision, ApprovalRecord, ApprovalStatus, CarpStore, Charge, ChargeKind,
    ExecutionRecord, SessionRecord, StoredResolution,
};
use cra_carp::types::{ExecuteResponse, ExecuteStatus};
use cra_trace::TraceEvent;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::common::fixture;

fn session() -> Vec<TraceEvent> {
    let text = std::fs::read(fixture("reconstruct/session.trace.jsonl")).unwrap();
    let events = cra_trace::diff::parse_events(&text).unwrap();
    assert!(cra_trace::verify_events(&events, false).is_valid());
    events
}

fn counters(st: &SessionState) -> BTreeMap<(&str, CounterKind), u64> {
    st.counters
        .iter()
        .map(|c| ((c.policy_id.as_str(), c.kind), c.value))
        .collect()
}

#[test]
fn a_runtime_session_rebuilds_as_expected() {
    let st = reconstruct(&session());
    let got = serde_json::to_value(&st).unwrap();
    let path = fixture("reconstruct/expected-state.json");
    if std::env::var_os("CRA_BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&got).unwrap());

    assert_eq!(st.session.agent_id.as_deref(), Some("ops-bot"));
    assert!(st.session.ended);
    let decisions: Vec<&str> = st
        .resolutions
        .values()
        .map(|r| r.decision.as_str())
        .collect();
    assert_eq!(decisions, ["allow", "deny", "requires_approval"]);
    let approval = st.approvals.values().next().unwrap();
    assert_eq!(approval.status, ApprovalStatus::Granted);
    assert_eq!(approval.actions, ["deploy.run"]);
    let count = |s: ExecutionStatus| st.executions.values().filter(|x| x.status == s).count();
    assert_eq!(count(ExecutionStatus::Success), 6);
    assert_eq!(count(ExecutionStatus::Error), 1);
    assert_eq!(count(ExecutionStatus::Denied), 2);
    assert_eq!(count(ExecutionStatus::PendingApproval), 1);
    assert_eq!(
        st.executions.values().map(|x| x.deduplicated).sum::<u64>(),
        1
    );
    assert_eq!(
        counters(&st),
        BTreeMap::from([
            (("budget-ci", CounterKind::Budget), 9),
            (("rl-everything", CounterKind::Rate), 7),
            (("rl-reads", CounterKind::Rate), 2),
        ])
    );
    assert!(st.issues.is_empty(), "{:?}", st.issues);
}

#[test]
fn a_trace_cut_short_rebuilds_the_state_at_that_point() {
    let events = session();
    let granted = events
        .iter()
        .position(|e| e.event_type == "approval.granted")
        .unwrap();
    let st = reconstruct(&events[..granted]);
    let approval = st.approvals.values().next().unwrap();
    assert_eq!(approval.status, ApprovalStatus::Pending);
    assert_eq!(approval.decided_by, None);
    assert!(!st.session.ended);
    // doc.read once, ci.rerun three times; the deploys had not run.
    assert_eq!(
        counters(&st),
        BTreeMap::from([
            (("budget-ci", CounterKind::Budget), 9),
            (("rl-everything", CounterKind::Rate), 4),
            (("rl-reads", CounterKind::Rate), 1),
        ])
    );
    // An execution whose outcome is not in the trace yet is `approved`.
    let approved = events
        .iter()
        .position(|e| e.event_type == "action.approved")
        .unwrap();
    let st = reconstruct(&events[..=approved]);
    assert_eq!(
        st.executions.values().next().unwrap().status,
        ExecutionStatus::Approved
    );
}

#[test]
fn events_without_their_context_are_issues_not_panics() {
    let events = session();
    // Drop the resolves: executions and the approval decision now refer to nothing.
    let kept: Vec<TraceEvent> = events
        .into_iter()
        .filter(|e| e.event_type != "carp.resolution.completed")
        .collect();
    let st = reconstruct(&kept);
    assert!(st.resolutions.is_empty());
    assert!(st.counters.is_empty());
    let messages: Vec<&str> = st.issues.iter().map(|i| i.message.as_str()).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("which the trace does not hold")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("is decided but no resolution")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("is announced but no resolution")),
        "{messages:?}"
    );
}

/// Fills a memory store with what the trace says, the way the service would have written it.
fn store_from(st: &SessionState, events: &[TraceEvent]) -> MemoryStore {
    let store = MemoryStore::new();
    let sid = st.session.session_id.clone().unwrap();
    store
        .create_session(&SessionRecord {
            session_id: sid.clone(),
            agent_id: st.session.agent_id.clone().unwrap(),
            parent_session_id: None,
            created_at: events[0].timestamp.clone(),
            ended_at: None,
        })
        .unwrap();
    store
        .end_session(&sid, &events[events.len() - 1].timestamp)
        .unwrap();
    for r in st.resolutions.values() {
        store
            .put_resolution(&StoredResolution {
                resolution: r.resolution.clone(),
                session_id: sid.clone(),
                agent_id: r.agent_id.clone().unwrap(),
                expires_at_us: r.expires_at_us,
                origins: Default::default(),
                atlas_digests: Default::default(),
            })
            .unwrap();
    }
    for a in st.approvals.values() {
        store
            .create_approval(&ApprovalRecord {
                approval_id: a.approval_id.clone(),
                resolution_id: a.resolution_id.clone(),
                session_id: sid.clone(),
                agent_id: "ops-bot".into(),
                actions: a.actions.clone(),
                created_at: a.created_at.clone(),
                expires_at_us: a.expires_at_us,
                status: ApprovalStatus::Pending,
                decided_by: None,
                decided_at: None,
                note: None,
                call: None,
            })
            .unwrap();
    }
    for x in st.executions.values().filter(|x| x.status.is_recorded()) {
        let success = x.status == ExecutionStatus::Success;
        store
            .record_execution(&ExecutionRecord {
                marks: Vec::new(),
                call: None,
                execution_id: x.execution_id.clone(),
                session_id: sid.clone(),
                idempotency_key: x.idempotency_key.clone(),
                response: ExecuteResponse {
                    carp_version: "1.0".into(),
                    execution_id: x.execution_id.clone(),
                    request_id: x.request_id.clone().unwrap(),
                    resolution_id: x.resolution_id.clone().unwrap(),
                    timestamp: events[0].timestamp.clone(),
                    status: if success {
                        ExecuteStatus::Success
                    } else {
                        ExecuteStatus::Error
                    },
                    // The fixture's results are the echo of the parameters or the reported one;
                    // only their hash is in the trace, so the store copy is left without it.
                    result: None,
                    error: (!success).then(|| cra_carp::types::ExecuteError {
                        code: x.error.clone().unwrap(),
                        message: "m".into(),
                        details: None,
                    }),
                    trace_id: String::new(),
                    extra: Default::default(),
                },
            })
            .unwrap();
    }
    for c in &st.counters {
        let kind = match c.kind {
            CounterKind::Rate => ChargeKind::Rate {
                max_calls: u64::MAX,
                window_seconds: 3600,
            },
            CounterKind::Budget => ChargeKind::Budget {
                max_units: u64::MAX,
                units: c.value,
            },
        };
        let n = if c.kind == CounterKind::Rate {
            c.value
        } else {
            1
        };
        for i in 0..n {
            store
                .try_consume(
                    &[Charge {
                        policy_id: c.policy_id.clone(),
                        scope_key: c.scope_key.clone(),
                        kind: kind.clone(),
                    }],
                    1_000_000 + i as i64,
                )
                .unwrap();
        }
    }
    store
}

#[test]
fn the_comparison_names_each_disagreement() {
    let events = session();
    let st = reconstruct(&events);

    // An empty store: every record is missing.
    let cmp = compare_with_store(&st, &MemoryStore::new()).unwrap();
    let pointers: Vec<&str> = cmp.differences.iter().map(|d| d.pointer.as_str()).collect();
    assert_eq!(pointers[0], "/session");
    assert_eq!(
        pointers
            .iter()
            .filter(|p| p.starts_with("/resolutions/"))
            .count(),
        3
    );
    assert_eq!(
        pointers
            .iter()
            .filter(|p| p.starts_with("/executions/"))
            .count(),
        6
    );
    assert_eq!(
        pointers
            .iter()
            .filter(|p| p.starts_with("/counters/"))
            .count(),
        3
    );
    assert_eq!(cmp.checked["executions"], 6);

    // A store with the same records, but the approval rejected and a result where the trace
    // has its hash: exactly those differ.
    let store = store_from(&st, &events);
    let approval = st.approvals.keys().next().unwrap().clone();
    store
        .decide_approval(&approval, ApprovalDecision::Reject, "mallory", None, "x")
        .unwrap();
    let cmp = compare_with_store(&st, &store).unwrap();
    let mut got: Vec<(String, Value, Value)> = cmp
        .differences
        .iter()
        .map(|d| (d.pointer.clone(), d.trace.clone(), d.store.clone()))
        .collect();
    let hashes: Vec<(String, Value, Value)> = got
        .iter()
        .filter(|(p, _, _)| p.ends_with("/result_hash"))
        .cloned()
        .collect();
    // Five successes with a key each carry a result hash the store copy cannot match.
    assert_eq!(hashes.len(), 5, "{got:?}");
    assert!(hashes.iter().all(|(_, _, s)| s.is_null()));
    got.retain(|(p, _, _)| !p.ends_with("/result_hash"));
    assert_eq!(
        got,
        [
            (
                format!("/approvals/{approval}/status"),
                json!("granted"),
                json!("rejected")
            ),
            (
                format!("/approvals/{approval}/decided_by"),
                json!("oscar"),
                json!("mallory")
            ),
            (
                format!("/approvals/{approval}/note"),
                json!("release window open"),
                Value::Null
            ),
        ]
    );
    // A counter shared with other sessions may hold more than this session charged.
    assert!(
        cmp.unchecked.iter().all(|u| !u.contains("rl-everything")),
        "{:?}",
        cmp.unchecked
    );
    store
        .try_consume(
            &[Charge {
                policy_id: "rl-everything".into(),
                scope_key: "global".into(),
                kind: ChargeKind::Rate {
                    max_calls: u64::MAX,
                    window_seconds: 3600,
                },
            }],
            5_000_000,
        )
        .unwrap();
    let cmp2 = compare_with_store(&st, &store).unwrap();
    assert_eq!(cmp2.differences.len(), cmp.differences.len());
    assert!(
        cmp2.unchecked
            .iter()
            .any(|u| u.contains("rl-everything global is shared")),
        "{:?}",
        cmp2.unchecked
    );
}

#[test]
fn a_validate_request_stores_nothing() {
    use cra_carp::eval::{CountersSnapshot, ExplainLevel, ResolveOptions, resolve};
    use cra_carp::events::SessionStarted;
    use cra_carp::replay::{resolve_drafts, seal_session};
    let set = crate::table::table_atlases();
    let mut req = crate::table::full_request(
        &json!({"agent_id": "agent-1", "goal": "help", "atlas_ids": ["com.example.support"]}),
        "2026-01-05T10:00:00Z",
    );
    req["operation"] = json!("validate");
    let request = cra_carp::validate::parse_request(&req).unwrap();
    let ids = crate::common::ids();
    let res = resolve(
        &request,
        &set,
        &CountersSnapshot::empty(),
        crate::common::at("2026-01-05T10:00:00Z"),
        &ids,
        &ResolveOptions {
            explain: ExplainLevel::Full,
            ..ResolveOptions::default()
        },
    )
    .unwrap();
    let drafts = resolve_drafts(&request, &res, set.digests(), &CountersSnapshot::empty());
    let events = seal_session(
        crate::table::SESSION,
        &SessionStarted::unattended("agent-1", "reconstruct test"),
        "2026-01-05T10:00:00.000000Z",
        drafts,
        &ids,
    );
    let st = reconstruct(&events);
    assert!(st.resolutions.is_empty());
    assert!(st.issues.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Whatever a payload member is replaced with, reconstruction answers (with issues, maybe)
    /// and is deterministic.
    #[test]
    fn any_payload_damage_is_survived(
        index in 0usize..47,
        member in prop::sample::select(vec![
            "resolution", "execution_id", "approval_id", "resolution_id", "action_id",
            "request", "error", "decided_by", "idempotency_key", "agent_id",
        ]),
        value in prop::sample::select(vec![
            json!(null), json!(7), json!("x"), json!([]), json!({}),
            json!({"constraints": "no"}), json!({"id": 1}),
        ]),
    ) {
        let mut events = session();
        let e = &mut events[index % 47];
        if let Value::Object(m) = &mut e.payload {
            m.insert(member.to_owned(), value);
        }
        let a = reconstruct(&events);
        let b = reconstruct(&events);
        prop_assert_eq!(a, b);
    }
}
