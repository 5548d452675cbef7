//! The behaviour every [`CarpStore`] must show, as one reusable check (feature `test-support`).
//! `cra-store` runs it against redb and PostgreSQL; this crate runs it against the in-memory
//! store. Call [`check_all`] with a function that returns a fresh, empty store each time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Map;

use crate::store::{
    ApprovalDecision, ApprovalRecord, ApprovalStatus, CarpStore, CarpStoreError, Charge,
    ChargeKind, ClaimOutcome, ConsumeOutcome, CounterRead, ExecutionLease, ExecutionRecord,
    SessionRecord, StoredResolution,
};
use crate::types::{
    CARP_VERSION, Decision, DecisionType, ExecuteResponse, ExecuteStatus, Resolution,
};

/// Runs every check, each on a fresh store from `make`. Panics (test assertion) on the first
/// broken rule, naming it.
pub fn check_all(make: &dyn Fn() -> Box<dyn CarpStore>) {
    sessions(make().as_ref());
    sessions_of_lists_exactly_the_agents_sessions_in_id_order(make().as_ref());
    request_ids(make().as_ref());
    resolutions(make().as_ref());
    resolve_records(make().as_ref());
    executions(make().as_ref());
    rate_counters(make().as_ref());
    windowed_totals(make().as_ref());
    marks_are_recorded_with_the_first_record_of_an_execution(make().as_ref());
    budget_counters(make().as_ref());
    consume_is_all_or_nothing(make().as_ref());
    uncapped_charges_always_fit_and_are_counted(make().as_ref());
    charges_on_one_counter_in_one_call_count_together(make().as_ref());
    consume_now_records_at_the_instant_it_returns(make().as_ref());
    consume_now_counts_the_window_ending_at_the_store_clock(make().as_ref());
    consume_now_is_all_or_nothing(make().as_ref());
    a_claimed_key_is_in_flight_until_its_outcome_is_recorded(make().as_ref());
    releasing_an_unfinished_claim_frees_its_key(make().as_ref());
    a_claim_whose_charge_is_refused_is_not_kept(make().as_ref());
    a_key_with_a_recorded_execution_answers_it_after_release(make().as_ref());
    leases_of_lists_exactly_the_owners_leases_in_id_order(make().as_ref());
    release_removes_only_that_lease(make().as_ref());
    approvals(make().as_ref());
    decided_approvals_are_listed_newest_decision_first(make().as_ref());
}

/// The owner index: an agent's sessions and none of another's, ended ones included.
fn sessions_of_lists_exactly_the_agents_sessions_in_id_order(s: &dyn CarpStore) {
    assert_eq!(s.sessions_of("agent-a").unwrap(), Some(Vec::new()));
    for (id, agent) in [("s3", "agent-a"), ("s1", "agent-a"), ("s2", "agent-b")] {
        let mut record = session(id);
        record.agent_id = agent.to_owned();
        s.create_session(&record).unwrap();
    }
    s.end_session("s3", "2026-01-01T01:00:00.000000Z").unwrap();
    let of = |agent: &str| {
        s.sessions_of(agent)
            .unwrap()
            .expect("a plaintext store keeps the index")
    };
    assert_eq!(of("agent-a"), ["s1", "s3"]);
    assert_eq!(of("agent-b"), ["s2"]);
    assert!(of("agent").is_empty(), "no prefix match");
}

fn session(id: &str) -> SessionRecord {
    SessionRecord {
        session_id: id.to_owned(),
        agent_id: "agent-a".to_owned(),
        parent_session_id: None,
        created_at: "2026-01-01T00:00:00.000000Z".to_owned(),
        ended_at: None,
    }
}

/// A small but complete resolution, for storing.
pub fn sample_resolution(id: &str) -> Resolution {
    Resolution {
        carp_version: CARP_VERSION.to_owned(),
        resolution_id: id.to_owned(),
        request_id: "00000000-0000-7000-8000-000000000001".to_owned(),
        timestamp: "2026-01-01T00:00:00.000000Z".to_owned(),
        decision: Decision {
            kind: DecisionType::Allow,
            reason: Some("All candidate actions are allowed".to_owned()),
            approval_id: None,
            expires_at: None,
        },
        context_blocks: vec![],
        allowed_actions: vec![],
        denied_actions: vec![],
        constraints: vec![],
        ttl_seconds: 3600,
        trace_id: "00000000-0000-7000-8000-000000000002".to_owned(),
        explain: None,
        extra: Map::new(),
    }
}

/// An execution of `session_id` under `key`, with a successful response.
pub fn sample_execution(id: &str, session_id: &str, key: Option<&str>) -> ExecutionRecord {
    ExecutionRecord {
        marks: Vec::new(),
        call: Some(crate::store::IdempotentCall::of(
            "payment.refund",
            &serde_json::json!({"amount": 5}),
        )),
        execution_id: id.to_owned(),
        session_id: session_id.to_owned(),
        idempotency_key: key.map(str::to_owned),
        response: ExecuteResponse {
            carp_version: CARP_VERSION.to_owned(),
            execution_id: id.to_owned(),
            request_id: "00000000-0000-7000-8000-000000000003".to_owned(),
            resolution_id: "r1".to_owned(),
            timestamp: "2026-01-01T00:00:00.000000Z".to_owned(),
            status: ExecuteStatus::Success,
            result: Some(serde_json::json!({"ok": id})),
            error: None,
            trace_id: "t1".to_owned(),
            extra: Map::new(),
        },
    }
}

fn sessions(s: &dyn CarpStore) {
    assert_eq!(
        s.get_session("s1").unwrap(),
        None,
        "unknown session is None"
    );
    s.create_session(&session("s1")).unwrap();
    assert!(
        matches!(
            s.create_session(&session("s1")),
            Err(CarpStoreError::AlreadyExists { .. })
        ),
        "creating a session twice is AlreadyExists"
    );
    let got = s.get_session("s1").unwrap().unwrap();
    assert!(got.is_active());
    assert_eq!(got, session("s1"));
    let ended = s.end_session("s1", "2026-01-01T01:00:00.000000Z").unwrap();
    assert_eq!(
        ended.ended_at.as_deref(),
        Some("2026-01-01T01:00:00.000000Z")
    );
    let again = s.end_session("s1", "2026-01-01T02:00:00.000000Z").unwrap();
    assert_eq!(
        again.ended_at.as_deref(),
        Some("2026-01-01T01:00:00.000000Z"),
        "ending twice keeps the first end"
    );
    assert!(!s.get_session("s1").unwrap().unwrap().is_active());
    assert!(matches!(
        s.end_session("nope", "2026-01-01T01:00:00.000000Z"),
        Err(CarpStoreError::NotFound { .. })
    ));
}

fn request_ids(s: &dyn CarpStore) {
    assert!(
        s.insert_request_id("s1", "r1").unwrap(),
        "first insert is new"
    );
    assert!(
        !s.insert_request_id("s1", "r1").unwrap(),
        "second insert is seen"
    );
    assert!(
        s.insert_request_id("s2", "r1").unwrap(),
        "request ids are per session"
    );
    assert!(s.has_request_id("s1", "r1").unwrap());
    assert!(!s.has_request_id("s1", "r2").unwrap());
    assert!(!s.has_request_id("s3", "r1").unwrap(), "per session");
}

/// `record_resolve`: request id and resolution together, or nothing on a duplicate; a resolve
/// opens no approval.
fn resolve_records(s: &dyn CarpStore) {
    let stored = |id: &str| StoredResolution {
        resolution: sample_resolution(id),
        session_id: "s1".to_owned(),
        agent_id: "agent-a".to_owned(),
        expires_at_us: 1_767_229_200_000_000,
        origins: Default::default(),
        atlas_digests: Default::default(),
    };
    assert!(s.record_resolve("s1", "r1", &stored("res-1")).unwrap());
    assert!(s.has_request_id("s1", "r1").unwrap());
    assert_eq!(s.get_resolution("res-1").unwrap(), Some(stored("res-1")));
    assert!(s.list_pending_approvals().unwrap().is_empty());
    // A duplicate request id: refused, and its resolution is not written.
    assert!(!s.record_resolve("s1", "r1", &stored("res-2")).unwrap());
    assert_eq!(s.get_resolution("res-2").unwrap(), None);
}

fn resolutions(s: &dyn CarpStore) {
    let r = StoredResolution {
        resolution: sample_resolution("res-1"),
        session_id: "s1".to_owned(),
        agent_id: "agent-a".to_owned(),
        expires_at_us: 1_767_229_200_000_000,
        // The executor an execute runs is the one recorded with the resolution: it round-trips.
        origins: [(
            "payment.refund".to_owned(),
            crate::eval::ActionOrigin {
                atlas_id: "com.example.payments".into(),
                executor: Some("http:payments".into()),
                shadow: None,
            },
        )]
        .into(),
        // And the digest of its atlas, which an execute holds against the atlas in force.
        atlas_digests: [("com.example.payments".to_owned(), "ab".repeat(32))].into(),
    };
    assert_eq!(s.get_resolution("res-1").unwrap(), None);
    s.put_resolution(&r).unwrap();
    assert_eq!(s.get_resolution("res-1").unwrap(), Some(r.clone()));
    assert!(matches!(
        s.put_resolution(&r),
        Err(CarpStoreError::AlreadyExists { .. })
    ));
}

fn executions(s: &dyn CarpStore) {
    assert_eq!(s.get_execution_by_key("s1", "k").unwrap(), None);
    let first = sample_execution("e1", "s1", Some("k"));
    assert_eq!(s.record_execution(&first).unwrap(), first);
    let second = sample_execution("e2", "s1", Some("k"));
    assert_eq!(
        s.record_execution(&second).unwrap(),
        first,
        "a repeated idempotency key returns the first execution"
    );
    assert_eq!(s.get_execution_by_key("s1", "k").unwrap(), Some(first));
    let other_session = sample_execution("e3", "s2", Some("k"));
    assert_eq!(
        s.record_execution(&other_session).unwrap(),
        other_session,
        "idempotency keys are per session"
    );
    let no_key = sample_execution("e4", "s1", None);
    assert_eq!(s.record_execution(&no_key).unwrap(), no_key);
}

fn rate(max_calls: u64, window_seconds: u64) -> ChargeKind {
    ChargeKind::Rate {
        max_calls,
        window_seconds,
    }
}

fn rate_counters(s: &dyn CarpStore) {
    let c = Charge {
        policy_id: "rl".to_owned(),
        scope_key: "agent:a".to_owned(),
        kind: rate(2, 60),
    };
    let t0 = 1_000_000_000_i64;
    assert_eq!(
        s.try_consume(std::slice::from_ref(&c), t0).unwrap(),
        ConsumeOutcome::Consumed { used: vec![0] }
    );
    assert_eq!(
        s.try_consume(std::slice::from_ref(&c), t0 + 1_000_000)
            .unwrap(),
        ConsumeOutcome::Consumed { used: vec![1] }
    );
    match s
        .try_consume(std::slice::from_ref(&c), t0 + 2_000_000)
        .unwrap()
    {
        ConsumeOutcome::Refused {
            policy_id, used, ..
        } => {
            assert_eq!(policy_id, "rl");
            assert_eq!(used, 2);
        }
        other => panic!("third call in the window must be refused, got {other:?}"),
    }
    assert_eq!(
        s.rate_count("rl", "agent:a", t0 - 1, t0 + 2_000_000)
            .unwrap(),
        2
    );
    assert_eq!(
        s.rate_count("rl", "agent:a", t0, t0 + 2_000_000).unwrap(),
        1,
        "the window's start is exclusive"
    );
    assert_eq!(s.rate_count("rl", "agent:b", 0, i64::MAX).unwrap(), 0);
    // 60 s after the first call it leaves the window: (t - 60 s, t].
    assert_eq!(
        s.try_consume(std::slice::from_ref(&c), t0 + 60_000_000)
            .unwrap(),
        ConsumeOutcome::Consumed { used: vec![1] }
    );
    let other_scope = Charge {
        scope_key: "agent:b".to_owned(),
        ..c
    };
    assert_eq!(
        s.try_consume(&[other_scope], t0 + 60_000_000).unwrap(),
        ConsumeOutcome::Consumed { used: vec![0] },
        "scopes are counted apart"
    );
}

/// `sum_within`: units in the window plus the charge's stay at most `max_units`; a charge that
/// does not fit records nothing; units leave the window as calls do.
fn windowed_totals(s: &dyn CarpStore) {
    let c = |units| Charge {
        policy_id: "p#0".to_owned(),
        scope_key: "global|k".to_owned(),
        kind: ChargeKind::Window {
            max_units: 1_000,
            window_seconds: 60,
            units,
        },
    };
    let t0 = 1_000_000_000_i64;
    let at = |s_: i64| t0 + s_ * 1_000_000;
    assert_eq!(
        s.try_consume(&[c(600)], at(0)).unwrap(),
        ConsumeOutcome::Consumed { used: vec![0] }
    );
    assert_eq!(
        s.try_consume(&[c(400)], at(1)).unwrap(),
        ConsumeOutcome::Consumed { used: vec![600] },
        "exactly the maximum fits"
    );
    match s.try_consume(&[c(1)], at(2)).unwrap() {
        ConsumeOutcome::Refused { used, .. } => assert_eq!(used, 1_000),
        other => panic!("a unit past the maximum must be refused, got {other:?}"),
    }
    assert_eq!(
        s.rate_count("p#0", "global|k", 0, i64::MAX).unwrap(),
        1_000,
        "nothing recorded by the refusal"
    );
    // At 60 s the first 600 leave the window (t - 60 s, t].
    assert!(matches!(
        s.try_consume(&[c(601)], at(60)).unwrap(),
        ConsumeOutcome::Refused { .. }
    ));
    assert_eq!(
        s.try_consume(&[c(600)], at(60)).unwrap(),
        ConsumeOutcome::Consumed { used: vec![400] }
    );
    assert!(
        matches!(
            s.try_consume(&[c(1_001)], at(500)).unwrap(),
            ConsumeOutcome::Refused { used: 0, .. }
        ),
        "a charge larger than the maximum never fits"
    );
    // Two charges on one counter in one call count together.
    assert!(matches!(
        s.try_consume(&[c(500), c(501)], at(1_000)).unwrap(),
        ConsumeOutcome::Refused { .. }
    ));
    assert_eq!(
        s.try_consume(&[c(500), c(500)], at(1_000)).unwrap(),
        ConsumeOutcome::Consumed { used: vec![0, 500] }
    );
}

/// A history predicate's marks are counted once the execution carrying them is recorded, and
/// not again when the same idempotency key is recorded a second time.
fn marks_are_recorded_with_the_first_record_of_an_execution(s: &dyn CarpStore) {
    s.create_session(&session("s1")).unwrap();
    let mark = |at_us| crate::store::Mark {
        counter: "allow-refund#0".to_owned(),
        scope_key: "session:s1|sha256:ab".to_owned(),
        at_us,
    };
    let mut e = sample_execution("e1", "s1", Some("k"));
    e.marks = vec![mark(5_000_000)];
    s.record_execution(&e).unwrap();
    let count = || {
        s.rate_count("allow-refund#0", "session:s1|sha256:ab", 0, i64::MAX)
            .unwrap()
    };
    assert_eq!(count(), 1);
    // The store's one-question answer and its reader's (one view for many) agree.
    let mut reader = s.mark_reader().unwrap();
    let mut seen = |since, until| {
        let one = s
            .has_event("allow-refund#0", "session:s1|sha256:ab", since, until)
            .unwrap();
        let many = reader
            .has_event("allow-refund#0", "session:s1|sha256:ab", since, until)
            .unwrap();
        assert_eq!(
            one, many,
            "has_event and mark_reader disagree on ({since}, {until}]"
        );
        one
    };
    assert!(seen(4_999_999, 5_000_000), "the window's end is inclusive");
    assert!(!seen(5_000_000, 9_000_000), "its start is exclusive");
    assert!(!seen(0, 4_999_999));
    assert!(!seen(9_000_000, 1), "an empty window");
    drop(reader);
    assert!(
        !s.has_event("allow-refund#0", "session:s2", 0, i64::MAX)
            .unwrap()
    );
    let mut again = sample_execution("e2", "s1", Some("k"));
    again.marks = vec![mark(6_000_000)];
    let first = s.record_execution(&again).unwrap();
    assert_eq!(first.execution_id, "e1");
    assert_eq!(count(), 1, "a repeated key leaves no second mark");
}

fn budget_counters(s: &dyn CarpStore) {
    let c = |units| Charge {
        policy_id: "b".to_owned(),
        scope_key: "global".to_owned(),
        kind: ChargeKind::Budget {
            max_units: 10,
            units,
        },
    };
    assert_eq!(s.budget_spent("b", "global").unwrap(), 0);
    assert_eq!(
        s.try_consume(&[c(7)], 1).unwrap(),
        ConsumeOutcome::Consumed { used: vec![0] }
    );
    assert!(matches!(
        s.try_consume(&[c(4)], 2).unwrap(),
        ConsumeOutcome::Refused { used: 7, .. }
    ));
    assert_eq!(
        s.try_consume(&[c(3)], 3).unwrap(),
        ConsumeOutcome::Consumed { used: vec![7] }
    );
    assert_eq!(s.budget_spent("b", "global").unwrap(), 10);
    assert!(matches!(
        s.try_consume(&[c(1)], 4).unwrap(),
        ConsumeOutcome::Refused { .. }
    ));
}

/// A shadow limit's charge ([`ChargeKind::uncapped`]) never refuses, and counts as its limit
/// would: the limit's own maximum, read beside it, sees every call it counted.
fn uncapped_charges_always_fit_and_are_counted(s: &dyn CarpStore) {
    let of = |policy_id: &str, kind: ChargeKind| Charge {
        policy_id: policy_id.to_owned(),
        scope_key: "session:s1".to_owned(),
        kind,
    };
    let limit = rate(1, 60);
    let budget = ChargeKind::Budget {
        max_units: 2,
        units: 2,
    };
    for at in 1..=3 {
        let charges = [of("rl", limit.uncapped()), of("b", budget.uncapped())];
        assert_eq!(
            s.try_consume(&charges, at).unwrap(),
            ConsumeOutcome::Consumed {
                used: vec![at as u64 - 1, 2 * (at as u64 - 1)]
            }
        );
    }
    assert_eq!(s.rate_count("rl", "session:s1", 0, 3).unwrap(), 3);
    assert_eq!(s.budget_spent("b", "session:s1").unwrap(), 6);
    // Every counter in one read answers what each read alone does, in the order asked.
    let reads = [
        CounterRead::Budget {
            policy_id: "b",
            scope_key: "session:s1",
        },
        CounterRead::Rate {
            policy_id: "rl",
            scope_key: "session:s1",
            since_us: 1,
            until_us: 3,
        },
        CounterRead::Budget {
            policy_id: "none",
            scope_key: "session:s1",
        },
        CounterRead::Rate {
            policy_id: "rl",
            scope_key: "session:s2",
            since_us: 0,
            until_us: i64::MAX,
        },
        CounterRead::Rate {
            policy_id: "rl",
            scope_key: "session:s1",
            since_us: 0,
            until_us: 3,
        },
    ];
    assert_eq!(s.read_counters(&reads).unwrap(), vec![6, 2, 0, 0, 3]);
    assert_eq!(s.read_counters(&[]).unwrap(), Vec::<u64>::new());
    assert!(
        matches!(
            s.try_consume(&[of("rl", limit)], 4).unwrap(),
            ConsumeOutcome::Refused { used: 3, .. }
        ),
        "the capped limit sees the uncapped calls"
    );
}

fn consume_is_all_or_nothing(s: &dyn CarpStore) {
    let ok = Charge {
        policy_id: "rl".to_owned(),
        scope_key: "global".to_owned(),
        kind: rate(5, 60),
    };
    let full = Charge {
        policy_id: "b".to_owned(),
        scope_key: "global".to_owned(),
        kind: ChargeKind::Budget {
            max_units: 1,
            units: 2,
        },
    };
    assert!(matches!(
        s.try_consume(&[ok.clone(), full], 10).unwrap(),
        ConsumeOutcome::Refused { at: 1, ref policy_id, .. } if policy_id == "b"
    ));
    assert_eq!(
        s.rate_count("rl", "global", 0, 100).unwrap(),
        0,
        "a refused consume records nothing"
    );
    assert_eq!(s.budget_spent("b", "global").unwrap(), 0);
    // Two identical charges: the refusal names the second by its index, not by its counter.
    let once = Charge {
        policy_id: "twice".to_owned(),
        scope_key: "global".to_owned(),
        kind: rate(1, 60),
    };
    let outcome = s.try_consume(&[once.clone(), once], 10).unwrap();
    assert!(
        matches!(outcome, ConsumeOutcome::Refused { at: 1, used: 1, .. }),
        "the second charge finds the first's unit and is refused: got {outcome:?}"
    );
}

/// A pending approval of resolution `res-1` in session `s1`, as the contract uses.
pub fn sample_approval(id: &str) -> ApprovalRecord {
    ApprovalRecord {
        approval_id: id.to_owned(),
        resolution_id: "res-1".to_owned(),
        session_id: "s1".to_owned(),
        agent_id: "agent-a".to_owned(),
        actions: vec!["payment.refund".to_owned()],
        created_at: "2026-01-01T00:00:00.000000Z".to_owned(),
        expires_at_us: 1_767_229_200_000_000,
        status: ApprovalStatus::Pending,
        decided_by: None,
        decided_at: None,
        note: None,
        call: Some(crate::store::ApprovalCall {
            execution_id: format!("exec-of-{id}"),
            action_id: "payment.refund".to_owned(),
            parameters_hash: cra_wire::hash::canonical_digest(&serde_json::json!({"amount": 5})),
            atlas_id: "com.example.payments".to_owned(),
            atlas_digest: "sha256:00".to_owned(),
        }),
    }
}

fn approvals(s: &dyn CarpStore) {
    s.create_approval(&sample_approval("a2")).unwrap();
    s.create_approval(&sample_approval("a1")).unwrap();
    assert!(matches!(
        s.create_approval(&sample_approval("a1")),
        Err(CarpStoreError::AlreadyExists { .. })
    ));
    let pending: Vec<String> = s
        .list_pending_approvals()
        .unwrap()
        .into_iter()
        .map(|a| a.approval_id)
        .collect();
    assert_eq!(pending, ["a1", "a2"], "pending approvals ordered by id");
    let decided = s
        .decide_approval(
            "a1",
            ApprovalDecision::Grant,
            "human-1",
            Some("ok"),
            "2026-01-01T00:05:00.000000Z",
        )
        .unwrap();
    assert_eq!(decided.status, ApprovalStatus::Granted);
    assert_eq!(decided.decided_by.as_deref(), Some("human-1"));
    assert_eq!(decided.note.as_deref(), Some("ok"));
    assert!(matches!(
        s.decide_approval(
            "a1",
            ApprovalDecision::Reject,
            "human-2",
            None,
            "2026-01-01T00:06:00.000000Z"
        ),
        Err(CarpStoreError::AlreadyDecided { .. })
    ));
    assert_eq!(s.get_approval("a1").unwrap(), Some(decided));
    assert!(matches!(
        s.decide_approval(
            "zz",
            ApprovalDecision::Grant,
            "h",
            None,
            "2026-01-01T00:06:00.000000Z"
        ),
        Err(CarpStoreError::NotFound { .. })
    ));
    let rejected = s
        .decide_approval(
            "a2",
            ApprovalDecision::Reject,
            "human-1",
            None,
            "2026-01-01T00:07:00.000000Z",
        )
        .unwrap();
    assert_eq!(rejected.status, ApprovalStatus::Rejected);
    assert!(s.list_pending_approvals().unwrap().is_empty());
}

/// The history: decisions only, newest `decided_at` first (ties by id), at most `limit`.
fn decided_approvals_are_listed_newest_decision_first(s: &dyn CarpStore) {
    for id in ["a1", "a2", "a3", "a4"] {
        s.create_approval(&sample_approval(id)).unwrap();
    }
    assert!(s.list_decided_approvals(10).unwrap().is_empty());
    for (id, decision, at) in [
        ("a3", ApprovalDecision::Grant, "2026-01-01T00:05:00.000000Z"),
        (
            "a1",
            ApprovalDecision::Reject,
            "2026-01-01T00:09:00.000000Z",
        ),
        ("a2", ApprovalDecision::Grant, "2026-01-01T00:05:00.000000Z"),
    ] {
        s.decide_approval(id, decision, "human-1", None, at)
            .unwrap();
    }
    let ids = |limit| -> Vec<String> {
        s.list_decided_approvals(limit)
            .unwrap()
            .into_iter()
            .map(|a| a.approval_id)
            .collect()
    };
    assert_eq!(ids(10), ["a1", "a2", "a3"], "a4 is pending: not history");
    assert_eq!(ids(2), ["a1", "a2"]);
    assert!(ids(0).is_empty());
}

/// Two charges on one `(policy, scope)` in one call are counted together: each fitting alone
/// is not enough (else one execution could take more than the limit).
fn charges_on_one_counter_in_one_call_count_together(s: &dyn CarpStore) {
    let budget = |units| Charge {
        policy_id: "b".to_owned(),
        scope_key: "global".to_owned(),
        kind: ChargeKind::Budget {
            max_units: 10,
            units,
        },
    };
    assert!(
        matches!(
            s.try_consume(&[budget(6), budget(6)], 1).unwrap(),
            ConsumeOutcome::Refused { used: 6, .. }
        ),
        "6 + 6 units of a budget of 10 in one call must be refused at the second charge"
    );
    assert_eq!(
        s.budget_spent("b", "global").unwrap(),
        0,
        "the refused call records nothing"
    );
    let limit = Charge {
        policy_id: "rl".to_owned(),
        scope_key: "global".to_owned(),
        kind: rate(1, 60),
    };
    assert!(
        matches!(
            s.try_consume(&[limit.clone(), limit], 10).unwrap(),
            ConsumeOutcome::Refused { used: 1, .. }
        ),
        "two calls against a limit of one in one call must be refused"
    );
    assert_eq!(s.rate_count("rl", "global", 0, 100).unwrap(), 0);
}

/// Wall-clock time now, in Unix microseconds.
fn wall_now_us() -> i64 {
    crate::eval::unix_micros(time::OffsetDateTime::now_utc())
}

/// How far the store's clock may be from this process's: redb and the memory store read the
/// clock they are given (here the system's); PostgreSQL reads the database's.
const CLOCK_TOLERANCE_US: i64 = 300_000_000;

fn hourly(policy_id: &str, max_calls: u64) -> Charge {
    Charge {
        policy_id: policy_id.to_owned(),
        scope_key: "global".to_owned(),
        kind: rate(max_calls, 3600),
    }
}

/// `try_consume_now` counts the charge at the instant it returns, read from the store's clock,
/// and the instants of one counter follow the order its charges were recorded in.
fn consume_now_records_at_the_instant_it_returns(s: &dyn CarpStore) {
    let clock = cra_wire::SystemClock;
    let c = hourly("rl", 10);
    let before = wall_now_us();
    let (outcome, t1) = s.try_consume_now(std::slice::from_ref(&c), &clock).unwrap();
    assert_eq!(outcome, ConsumeOutcome::Consumed { used: vec![0] });
    assert!(
        (t1 - before).abs() < CLOCK_TOLERANCE_US,
        "the instant used ({t1}) is the store's clock, near now ({before})"
    );
    assert_eq!(
        s.rate_count("rl", "global", t1 - 1, t1).unwrap(),
        1,
        "the charge is recorded at exactly the instant returned"
    );
    let (outcome, t2) = s.try_consume_now(std::slice::from_ref(&c), &clock).unwrap();
    assert_eq!(outcome, ConsumeOutcome::Consumed { used: vec![1] });
    assert!(
        t2 >= t1,
        "a later charge is not counted earlier ({t2} < {t1})"
    );
    assert_eq!(s.rate_count("rl", "global", t1 - 1, t2).unwrap(), 2);
}

/// The window of a `try_consume_now` charge ends at the store's clock: charges recorded inside
/// `(now - window, now]` count against it, older ones do not; a refusal records nothing.
fn consume_now_counts_the_window_ending_at_the_store_clock(s: &dyn CarpStore) {
    let clock = cra_wire::SystemClock;
    let c = hourly("rl", 2);
    let now = wall_now_us();
    // Two hours ago: outside the one-hour window. Half an hour ago: inside it.
    for at in [now - 7_200_000_000, now - 1_800_000_000] {
        assert_eq!(
            s.try_consume(std::slice::from_ref(&c), at).unwrap(),
            ConsumeOutcome::Consumed { used: vec![0] }
        );
    }
    let (outcome, t) = s.try_consume_now(std::slice::from_ref(&c), &clock).unwrap();
    assert_eq!(
        outcome,
        ConsumeOutcome::Consumed { used: vec![1] },
        "one call in the window and a limit of two: the charge fits"
    );
    let (outcome, t_refused) = s.try_consume_now(std::slice::from_ref(&c), &clock).unwrap();
    assert!(
        matches!(outcome, ConsumeOutcome::Refused { used: 2, .. }),
        "two calls in the window (half an hour ago and now) fill a limit of two, got {outcome:?}"
    );
    assert_eq!(
        s.rate_count("rl", "global", t - 3_600_000_000, t_refused.max(t))
            .unwrap(),
        2,
        "the refused charge is not recorded"
    );
}

/// `try_consume_now` records every charge or none, and names the first that did not fit.
fn consume_now_is_all_or_nothing(s: &dyn CarpStore) {
    let clock = cra_wire::SystemClock;
    let budget = |max_units, units| Charge {
        policy_id: "b".to_owned(),
        scope_key: "agent:a".to_owned(),
        kind: ChargeKind::Budget { max_units, units },
    };
    let (outcome, _) = s
        .try_consume_now(&[hourly("rl", 5), budget(3, 2)], &clock)
        .unwrap();
    assert_eq!(outcome, ConsumeOutcome::Consumed { used: vec![0, 0] });
    let (outcome, _) = s
        .try_consume_now(&[hourly("rl", 5), budget(3, 2), hourly("rl2", 5)], &clock)
        .unwrap();
    assert!(
        matches!(outcome, ConsumeOutcome::Refused { at: 1, ref policy_id, used: 2, .. } if policy_id == "b"),
        "2 + 2 units of a budget of 3 are refused, naming the budget: got {outcome:?}"
    );
    assert_eq!(
        s.rate_count("rl", "global", 0, i64::MAX).unwrap(),
        1,
        "the charge that fitted before the refused one is not recorded"
    );
    assert_eq!(
        s.rate_count("rl2", "global", 0, i64::MAX).unwrap(),
        0,
        "nor the one after it"
    );
    assert_eq!(s.budget_spent("b", "agent:a").unwrap(), 2);
}

/// The lease of execution `execution_id`, held by `owner`.
pub fn sample_lease(
    execution_id: &str,
    owner: &str,
    session_id: &str,
    key: Option<&str>,
) -> ExecutionLease {
    ExecutionLease {
        execution_id: execution_id.to_owned(),
        owner: owner.to_owned(),
        session_id: session_id.to_owned(),
        agent_id: "agent-a".to_owned(),
        idempotency_key: key.map(str::to_owned),
        action_id: "payment.refund".to_owned(),
        request_id: format!("req-{execution_id}"),
        resolution_id: "res-1".to_owned(),
        trace_id: "t1".to_owned(),
        claimed_at: "2026-01-01T00:00:00.000000Z".to_owned(),
        parameters_hash: Some("sha256:00".to_owned()),
    }
}

fn lease_ids(s: &dyn CarpStore, owner: &str) -> Vec<String> {
    s.leases_of(owner)
        .unwrap()
        .into_iter()
        .map(|l| l.execution_id)
        .collect()
}

/// Of two claims of one `(session, key)` the first wins; the second is told who holds it and
/// records nothing. Keys are per session, and claims without a key never conflict.
fn a_claimed_key_is_in_flight_until_its_outcome_is_recorded(s: &dyn CarpStore) {
    assert_eq!(
        s.claim_execution(&sample_lease("e1", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e2", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::InFlight {
            execution_id: "e1".to_owned()
        },
        "a second claim of a key whose execution has no outcome is in flight"
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e3", "r2", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::InFlight {
            execution_id: "e1".to_owned()
        },
        "whichever server instance asks"
    );
    assert_eq!(
        lease_ids(s, "r1"),
        ["e1"],
        "the refused claim left no lease"
    );
    assert!(lease_ids(s, "r2").is_empty());
    assert_eq!(
        s.get_execution_by_key("s1", "k").unwrap(),
        None,
        "a claimed key has no execution yet"
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e4", "r1", "s2", Some("k")))
            .unwrap(),
        ClaimOutcome::Claimed,
        "idempotency keys are per session"
    );
    for id in ["e5", "e6"] {
        assert_eq!(
            s.claim_execution(&sample_lease(id, "r1", "s1", None))
                .unwrap(),
            ClaimOutcome::Claimed,
            "claims without a key never conflict"
        );
    }
    assert_eq!(lease_ids(s, "r1"), ["e1", "e4", "e5", "e6"]);
}

/// A claim released without an outcome (its charges were refused) gives its key back.
fn releasing_an_unfinished_claim_frees_its_key(s: &dyn CarpStore) {
    assert_eq!(
        s.claim_execution(&sample_lease("e1", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::Claimed
    );
    s.release_execution("e1").unwrap();
    assert!(lease_ids(s, "r1").is_empty(), "release removes the lease");
    assert_eq!(s.get_execution_by_key("s1", "k").unwrap(), None);
    assert_eq!(
        s.claim_execution(&sample_lease("e2", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::Claimed,
        "the key of a released claim with no outcome can be claimed again"
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e3", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::InFlight {
            execution_id: "e2".to_owned()
        },
        "and is then held by the new claim"
    );
}

/// `claim_and_consume_now` is one step: a claimed execution's charges are consumed; a refused
/// charge leaves neither the lease nor the key's claim, and a key held by another execution is
/// answered without consuming anything.
fn a_claim_whose_charge_is_refused_is_not_kept(s: &dyn CarpStore) {
    let clock = cra_wire::SystemClock;
    let once = [hourly("rl-claim", 1)];
    let (claim, consumed) = s
        .claim_and_consume_now(&sample_lease("e1", "r1", "s1", Some("k1")), &once, &clock)
        .unwrap();
    assert_eq!(claim, ClaimOutcome::Claimed);
    assert_eq!(
        consumed.map(|(c, _)| c),
        Some(ConsumeOutcome::Consumed { used: vec![0] })
    );
    assert_eq!(lease_ids(s, "r1"), ["e1"]);
    let (claim, consumed) = s
        .claim_and_consume_now(&sample_lease("e2", "r1", "s1", Some("k2")), &once, &clock)
        .unwrap();
    assert_eq!(claim, ClaimOutcome::Claimed);
    assert!(
        matches!(consumed, Some((ConsumeOutcome::Refused { .. }, _))),
        "the limit of one is spent: {consumed:?}"
    );
    assert_eq!(
        lease_ids(s, "r1"),
        ["e1"],
        "the refused claim left no lease"
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e3", "r1", "s1", Some("k2")))
            .unwrap(),
        ClaimOutcome::Claimed,
        "nor its key's claim"
    );
    let (claim, consumed) = s
        .claim_and_consume_now(&sample_lease("e4", "r1", "s1", Some("k1")), &once, &clock)
        .unwrap();
    assert_eq!(
        claim,
        ClaimOutcome::InFlight {
            execution_id: "e1".to_owned()
        }
    );
    assert_eq!(
        consumed, None,
        "nothing is consumed for a key held elsewhere"
    );
    assert_eq!(s.rate_count("rl-claim", "global", 0, i64::MAX).unwrap(), 1);
}

/// Once the claiming execution's outcome is recorded, the key answers that execution: before
/// and after its lease is released. The claim itself does not stop its own execution from being
/// recorded under the key.
fn a_key_with_a_recorded_execution_answers_it_after_release(s: &dyn CarpStore) {
    assert_eq!(
        s.claim_execution(&sample_lease("e1", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::Claimed
    );
    let first = sample_execution("e1", "s1", Some("k"));
    assert_eq!(
        s.record_execution(&first).unwrap(),
        first,
        "the claiming execution records its outcome under its own key"
    );
    assert_eq!(
        s.get_execution_by_key("s1", "k").unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e2", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::Finished(Box::new(first.clone())),
        "a recorded outcome wins over the lease still held"
    );
    s.release_execution("e1").unwrap();
    assert!(
        lease_ids(s, "r1").is_empty(),
        "no lease was added by the refused claim"
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e3", "r1", "s1", Some("k")))
            .unwrap(),
        ClaimOutcome::Finished(Box::new(first.clone())),
        "releasing a finished execution's lease keeps its key"
    );
    assert_eq!(s.get_execution_by_key("s1", "k").unwrap(), Some(first));
    assert!(lease_ids(s, "r1").is_empty());
}

/// `leases_of(owner)` answers that owner's leases, whole and ordered by execution id, and no
/// other owner's.
fn leases_of_lists_exactly_the_owners_leases_in_id_order(s: &dyn CarpStore) {
    let a2 = sample_lease("0002", "replica-a", "s1", Some("k2"));
    let a1 = sample_lease("0001", "replica-a", "s2", None);
    let b = sample_lease("0003", "replica-b", "s1", Some("k3"));
    for l in [&a2, &b, &a1] {
        assert_eq!(s.claim_execution(l).unwrap(), ClaimOutcome::Claimed);
    }
    assert_eq!(s.leases_of("replica-a").unwrap(), [a1, a2]);
    assert_eq!(s.leases_of("replica-b").unwrap(), [b]);
    assert!(s.leases_of("replica-c").unwrap().is_empty());
    assert!(
        s.leases_of("replica").unwrap().is_empty(),
        "owners match exactly, not by prefix"
    );
}

/// `release_execution` removes that lease only; releasing an absent lease changes nothing.
fn release_removes_only_that_lease(s: &dyn CarpStore) {
    for id in ["e1", "e2"] {
        assert_eq!(
            s.claim_execution(&sample_lease(id, "r1", "s1", Some(id)))
                .unwrap(),
            ClaimOutcome::Claimed
        );
    }
    s.release_execution("e1").unwrap();
    assert_eq!(lease_ids(s, "r1"), ["e2"]);
    s.release_execution("e1").unwrap();
    s.release_execution("nope").unwrap();
    assert_eq!(
        lease_ids(s, "r1"),
        ["e2"],
        "releasing an absent lease is a no-op"
    );
    assert_eq!(
        s.claim_execution(&sample_lease("e9", "r1", "s1", Some("e2")))
            .unwrap(),
        ClaimOutcome::InFlight {
            execution_id: "e2".to_owned()
        },
        "the other lease still holds its key"
    );
}
