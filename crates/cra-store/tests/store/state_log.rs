//! `StateLog`: a change of CARP state and its events written as one unit, in the committer's
//! transaction on both backends (state and events together or not at all). A duplicate request
//! id writes nothing, also when the duplicates race; a decision is written once, never into a
//! chain that has ended, also when the decisions race. A Relay write keeps the events it owes
//! as an outbox entry in its own transaction, and settling the entry appends them and removes it
//! in one, exactly once, also when settlements race.

use std::sync::{Arc, Barrier};

use cra_carp::store::{
    ApprovalDecision, ApprovalStatus, CarpStore, ClaimOutcome, DecisionRecord, Recorded,
    ResolveRecord, SessionEnd, SessionRecord, SessionStart, Settlement, StateChange, StateLog,
    StateLogError, StoredResolution,
};
use cra_carp::store_contract::{
    sample_approval, sample_execution, sample_lease, sample_resolution,
};
use cra_relay::store::{Outbox, OutboxEntry, RelayStore, RelayStoreError, Written};
use cra_store::relay::{PgRelay, RedbRelay};
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{RedbStore, StoreConfig};
use cra_trace::store::{ChainStore, ChainStoreError};
use cra_wire::Token;

use crate::backends::{check_chain, draft, note};

/// A backend as the runtime holds it: the CARP store, the chains and the state log.
struct Under {
    name: &'static str,
    carp: Arc<dyn CarpStore>,
    chains: Arc<dyn ChainStore>,
    log: Arc<dyn StateLog>,
    relay: Arc<dyn RelayStore>,
    _dir: Option<tempfile::TempDir>,
    _schema: Option<TestSchema>,
}

fn under(test: &str) -> Vec<Under> {
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open(dir.path()).unwrap();
    let mut out = vec![Under {
        name: "redb",
        carp: Arc::new(redb.clone()),
        chains: Arc::new(redb.clone()),
        relay: Arc::new(RedbRelay::open(&redb).unwrap()),
        log: Arc::new(redb),
        _dir: Some(dir),
        _schema: None,
    }];
    if let Some(url) = postgres_url(test) {
        let schema = TestSchema::new(&url, test);
        let pg = schema.store(StoreConfig::default()).unwrap();
        out.push(Under {
            name: "postgres",
            log: Arc::new(pg.clone()),
            carp: Arc::new(pg.clone()),
            chains: Arc::new(pg.clone()),
            relay: Arc::new(PgRelay::new(pg)),
            _dir: None,
            _schema: Some(schema),
        });
    }
    out
}

fn resolve(request_id: &str, resolution_id: &str) -> StateChange {
    StateChange::Resolve(record(request_id, resolution_id))
}

fn record(request_id: &str, resolution_id: &str) -> ResolveRecord {
    ResolveRecord {
        session_id: "s1".to_owned(),
        request_id: request_id.to_owned(),
        resolution: Some(StoredResolution {
            resolution: sample_resolution(resolution_id),
            session_id: "s1".to_owned(),
            agent_id: "agent-a".to_owned(),
            expires_at_us: 1_767_229_200_000_000,
            origins: Default::default(),
            atlas_digests: Default::default(),
        }),
    }
}

/// Runs `attempt(log, i)` for `i` in `0..n` on `n` threads released together by a barrier;
/// returns how many attempts said they won.
fn race(n: usize, log: &Arc<dyn StateLog>, attempt: fn(&dyn StateLog, usize) -> bool) -> usize {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (log, barrier) = (log.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                attempt(log.as_ref(), i)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|won| *won)
        .count()
}

fn events(u: &Under) -> Vec<cra_trace::TraceEvent> {
    u.chains.read_range("s1", 0, u64::MAX).unwrap()
}

/// A request an earlier resolution answers again records its request id and its events, no
/// resolution; its request id used again is a duplicate that writes nothing.
#[test]
fn a_request_answered_again_records_its_request_id_alone() {
    for u in under("resolve_log_cached") {
        u.log
            .record_and_append(resolve("r1", "res-1"), vec![note(0)])
            .unwrap();
        let again = ResolveRecord {
            resolution: None,
            ..record("r2", "res-1")
        };
        let again = StateChange::Resolve(again);
        let recorded = u
            .log
            .record_and_append(again.clone(), vec![note(1)])
            .unwrap();
        assert!(
            matches!(recorded, Recorded::Appended(ref e) if e.len() == 1),
            "{}: {recorded:?}",
            u.name
        );
        assert!(u.carp.has_request_id("s1", "r2").unwrap(), "{}", u.name);
        let repeat = u.log.record_and_append(again, vec![note(2)]).unwrap();
        assert_eq!(repeat, Recorded::Duplicate, "{}", u.name);
        assert_eq!(events(&u).len(), 2, "{}", u.name);
    }
}

#[test]
fn a_resolve_is_recorded_with_its_events_and_a_duplicate_writes_nothing() {
    for u in under("resolve_log_basic") {
        let recorded = u
            .log
            .record_and_append(resolve("r1", "res-1"), vec![note(0), note(1)])
            .unwrap();
        let Recorded::Appended(first) = recorded else {
            panic!("{}: a new request id was refused", u.name)
        };
        assert_eq!(first.len(), 2, "{}", u.name);
        assert!(u.carp.has_request_id("s1", "r1").unwrap(), "{}", u.name);
        assert_eq!(
            u.carp.get_resolution("res-1").unwrap(),
            record("r1", "res-1").resolution,
            "{}",
            u.name
        );
        assert!(
            u.carp.list_pending_approvals().unwrap().is_empty(),
            "{}: a resolve opens no approval",
            u.name
        );

        // The same request id again: refused, and neither its state nor its events are written.
        let again = u
            .log
            .record_and_append(resolve("r1", "res-2"), vec![note(2)])
            .unwrap();
        assert_eq!(
            again,
            Recorded::Duplicate,
            "{}: a duplicate was recorded",
            u.name
        );
        assert_eq!(u.carp.get_resolution("res-2").unwrap(), None, "{}", u.name);
        let stored = events(&u);
        assert_eq!(
            stored.len(),
            2,
            "{}: the duplicate's events were appended",
            u.name
        );
        check_chain("s1", &stored).unwrap();
    }
}

#[test]
fn racing_duplicates_record_once() {
    const RACERS: usize = 8;
    for u in under("resolve_log_race") {
        let won = race(RACERS, &u.log, |log, i| {
            log.record_and_append(resolve("r1", &format!("res-{i}")), vec![note(0)])
                .unwrap()
                != Recorded::Duplicate
        });
        assert_eq!(
            won, 1,
            "{}: {won} of {RACERS} duplicates were recorded",
            u.name
        );
        let stored = events(&u);
        assert_eq!(stored.len(), 1, "{}", u.name);
        check_chain("s1", &stored).unwrap();
        let resolutions = (0..RACERS)
            .filter(|i| {
                u.carp
                    .get_resolution(&format!("res-{i}"))
                    .unwrap()
                    .is_some()
            })
            .count();
        assert_eq!(resolutions, 1, "{}", u.name);
    }
}

/// A resolve into a chain that has ended is refused with its state: no request id, resolution
/// or approval is written, on every backend.
#[test]
fn a_refused_append_records_no_state() {
    for u in under("state_log_refused") {
        u.chains
            .append("s1", vec![draft("session.ended", serde_json::json!({}))])
            .unwrap();
        let refused = u
            .log
            .record_and_append(resolve("r1", "res-1"), vec![note(0)]);
        assert!(
            matches!(
                refused,
                Err(StateLogError::Chain(ChainStoreError::SessionEnded { .. }))
            ),
            "{}: {refused:?}",
            u.name
        );
        assert!(!u.carp.has_request_id("s1", "r1").unwrap(), "{}", u.name);
        assert_eq!(u.carp.get_resolution("res-1").unwrap(), None, "{}", u.name);
        assert_eq!(events(&u).len(), 1, "{}", u.name);
    }
}

/// A resolve whose resolution id is taken is refused whole: its request id is not kept, so
/// the same request sent again is not taken for a duplicate.
#[test]
fn a_resolve_whose_resolution_id_is_taken_writes_nothing() {
    for u in under("state_log_taken") {
        u.log
            .record_and_append(resolve("r1", "res-1"), vec![note(0)])
            .unwrap();
        let taken = u
            .log
            .record_and_append(resolve("r2", "res-1"), vec![note(1)]);
        assert!(
            matches!(
                taken,
                Err(StateLogError::Chain(ChainStoreError::Unavailable(_)))
            ),
            "{}: {taken:?}",
            u.name
        );
        assert!(!u.carp.has_request_id("s1", "r2").unwrap(), "{}", u.name);
        assert_eq!(events(&u).len(), 1, "{}", u.name);
    }
}

fn decision(approval_id: &str, decision: ApprovalDecision, by: &str) -> StateChange {
    StateChange::Decide(DecisionRecord {
        session_id: "s1".to_owned(),
        approval_id: approval_id.to_owned(),
        decision,
        decided_by: by.to_owned(),
        note: Some("checked".to_owned()),
        decided_at: "2026-01-01T00:00:05.000000Z".to_owned(),
    })
}

/// The token of a refusal the store answered in the append's transaction.
fn refused_with(outcome: &Result<Recorded, StateLogError>) -> Option<Token> {
    match outcome {
        Err(StateLogError::Chain(ChainStoreError::Refused { token, .. })) => Some(*token),
        _ => None,
    }
}

/// A decision is written with its event; a second one is refused in the store's transaction
/// (409 `already_exists`) and writes nothing; so is one of another session's approval or of an
/// approval the store does not have (404 `approval_not_found`).
#[test]
fn a_decision_is_recorded_with_its_event_once() {
    for u in under("state_log_decision") {
        u.log
            .record_and_append(resolve("r1", "res-1"), vec![note(0)])
            .unwrap();
        // The approval an execute opened (its own events are not this test's).
        u.carp.create_approval(&sample_approval("a1")).unwrap();
        let granted = u
            .log
            .record_and_append(decision("a1", ApprovalDecision::Grant, "op"), vec![note(1)])
            .unwrap();
        assert!(
            matches!(granted, Recorded::Appended(ref e) if e.len() == 1),
            "{}: {granted:?}",
            u.name
        );
        let stored = u.carp.get_approval("a1").unwrap().unwrap();
        assert_eq!(stored.status, ApprovalStatus::Granted, "{}", u.name);
        assert_eq!(stored.decided_by.as_deref(), Some("op"), "{}", u.name);
        assert!(
            u.carp.list_pending_approvals().unwrap().is_empty(),
            "{}",
            u.name
        );

        let again = u.log.record_and_append(
            decision("a1", ApprovalDecision::Reject, "op2"),
            vec![note(2)],
        );
        assert_eq!(
            refused_with(&again),
            Some(Token::AlreadyExists),
            "{}: {again:?}",
            u.name
        );
        let unknown = u
            .log
            .record_and_append(decision("a9", ApprovalDecision::Grant, "op"), vec![note(2)]);
        assert_eq!(
            refused_with(&unknown),
            Some(Token::ApprovalNotFound),
            "{}",
            u.name
        );
        let elsewhere = StateChange::Decide(DecisionRecord {
            session_id: "s2".to_owned(),
            ..match decision("a1", ApprovalDecision::Grant, "op") {
                StateChange::Decide(d) => d,
                _ => unreachable!(),
            }
        });
        let elsewhere = u.log.record_and_append(elsewhere, vec![note(0)]);
        assert_eq!(
            refused_with(&elsewhere),
            Some(Token::ApprovalNotFound),
            "{}",
            u.name
        );
        assert!(u.chains.session("s2").unwrap().is_none(), "{}", u.name);

        assert_eq!(
            u.carp.get_approval("a1").unwrap().unwrap(),
            stored,
            "{}",
            u.name
        );
        let events = events(&u);
        assert_eq!(events.len(), 2, "{}: a refused decision appended", u.name);
        check_chain("s1", &events).unwrap();
    }
}

/// The session ends (its chain closes) after the approval was read pending and before the
/// decision is written: the decision is refused and the approval stays pending, on every
/// backend.
#[test]
fn a_decision_into_an_ended_chain_changes_nothing() {
    for u in under("state_log_decision_ended") {
        u.log
            .record_and_append(resolve("r1", "res-1"), vec![note(0)])
            .unwrap();
        // The approval an execute opened (its own events are not this test's).
        u.carp.create_approval(&sample_approval("a1")).unwrap();
        u.chains
            .append("s1", vec![draft("session.ended", serde_json::json!({}))])
            .unwrap();
        let refused = u
            .log
            .record_and_append(decision("a1", ApprovalDecision::Grant, "op"), vec![note(1)]);
        assert!(
            matches!(
                refused,
                Err(StateLogError::Chain(ChainStoreError::SessionEnded { .. }))
            ),
            "{}: {refused:?}",
            u.name
        );
        let stored = u.carp.get_approval("a1").unwrap().unwrap();
        assert_eq!(stored.status, ApprovalStatus::Pending, "{}", u.name);
        assert_eq!(stored.decided_by, None, "{}", u.name);
        assert_eq!(events(&u).len(), 2, "{}", u.name);
    }
}

/// Eight operators decide one approval at once: one decision is written, with one event.
#[test]
fn racing_decisions_record_once() {
    const RACERS: usize = 8;
    for u in under("state_log_decision_race") {
        u.log
            .record_and_append(resolve("r1", "res-1"), vec![note(0)])
            .unwrap();
        // The approval an execute opened (its own events are not this test's).
        u.carp.create_approval(&sample_approval("a1")).unwrap();
        let won = race(RACERS, &u.log, |log, i| {
            let d = if i % 2 == 0 {
                ApprovalDecision::Grant
            } else {
                ApprovalDecision::Reject
            };
            let outcome =
                log.record_and_append(decision("a1", d, &format!("op{i}")), vec![note(1)]);
            let lost = refused_with(&outcome);
            assert!(
                outcome.is_ok() || lost == Some(Token::AlreadyExists),
                "{outcome:?}"
            );
            outcome.is_ok()
        });
        assert_eq!(
            won, 1,
            "{}: {won} of {RACERS} decisions were recorded",
            u.name
        );
        let stored = events(&u);
        assert_eq!(stored.len(), 2, "{}", u.name);
        check_chain("s1", &stored).unwrap();
        assert_ne!(
            u.carp.get_approval("a1").unwrap().unwrap().status,
            ApprovalStatus::Pending,
            "{}",
            u.name
        );
    }
}

/// An approval an execute opens is written with its events, listed as pending, and decidable;
/// of executes racing to open the same approval (on one backend, as on several replicas of
/// one), exactly one is written and the others are refused `already_exists`, writing nothing.
#[test]
fn racing_opens_of_one_approval_record_once() {
    const RACERS: usize = 8;
    for u in under("state_log_open_race") {
        u.log
            .record_and_append(resolve("r1", "res-1"), vec![note(0)])
            .unwrap();
        let won = race(RACERS, &u.log, |log, i| {
            let mut approval = sample_approval("a1");
            if let Some(call) = approval.call.as_mut() {
                call.execution_id = format!("exec-{i}");
            }
            let outcome = log.record_and_append(StateChange::Open(approval), vec![note(1)]);
            let lost = refused_with(&outcome);
            assert!(
                outcome.is_ok() || lost == Some(Token::AlreadyExists),
                "{outcome:?}"
            );
            outcome.is_ok()
        });
        assert_eq!(won, 1, "{}: {won} of {RACERS} opens were recorded", u.name);
        let stored = events(&u);
        assert_eq!(stored.len(), 2, "{}", u.name);
        check_chain("s1", &stored).unwrap();
        let pending = u.carp.list_pending_approvals().unwrap();
        assert_eq!(pending.len(), 1, "{}", u.name);
        assert!(pending[0].call.is_some(), "{}: the call is kept", u.name);
        u.log
            .record_and_append(decision("a1", ApprovalDecision::Grant, "op"), vec![note(2)])
            .unwrap();
        assert_eq!(
            u.carp.get_approval("a1").unwrap().unwrap().status,
            ApprovalStatus::Granted,
            "{}",
            u.name
        );
    }
}

/// An execution's outcome is recorded with its event and releases its lease in the same write;
/// its idempotency key then answers it. Into a chain that has ended, nothing is written and the
/// lease stays for the caller to settle.
#[test]
fn an_execution_outcome_is_recorded_with_its_event_and_releases_its_lease() {
    for u in under("state_log_execute") {
        for (id, sid) in [("e1", "s1"), ("e2", "s2")] {
            let lease = sample_lease(id, "replica-a", sid, Some("key-1"));
            assert_eq!(
                u.carp.claim_execution(&lease).unwrap(),
                ClaimOutcome::Claimed
            );
        }
        let done = u.log.record_and_append(
            StateChange::Execute(sample_execution("e1", "s1", Some("key-1"))),
            vec![note(0)],
        );
        assert!(
            matches!(done, Ok(Recorded::Appended(ref e)) if e.len() == 1),
            "{}: {done:?}",
            u.name
        );
        let first = u.carp.get_execution_by_key("s1", "key-1").unwrap();
        assert_eq!(
            first.map(|e| e.execution_id).as_deref(),
            Some("e1"),
            "{}",
            u.name
        );
        assert!(
            u.carp
                .leases_of("replica-a")
                .unwrap()
                .iter()
                .all(|l| l.execution_id != "e1")
        );

        u.chains
            .append("s2", vec![draft("session.ended", serde_json::json!({}))])
            .unwrap();
        let refused = u.log.record_and_append(
            StateChange::Execute(sample_execution("e2", "s2", Some("key-1"))),
            vec![note(0)],
        );
        assert!(
            matches!(
                refused,
                Err(StateLogError::Chain(ChainStoreError::SessionEnded { .. }))
            ),
            "{}: {refused:?}",
            u.name
        );
        assert_eq!(
            u.carp.get_execution_by_key("s2", "key-1").unwrap(),
            None,
            "{}",
            u.name
        );
        let held: Vec<String> = u
            .carp
            .leases_of("replica-a")
            .unwrap()
            .into_iter()
            .map(|l| l.execution_id)
            .collect();
        assert_eq!(held, ["e2"], "{}", u.name);
    }
}

// --- the audit outbox of Relay writes ---------------------------------------------------------

/// An outbox owing one entry, `owed-<project>`, per project created or changed.
struct PerProject;

impl Outbox for PerProject {
    fn entries(&self, written: Written<'_>) -> Result<Vec<OutboxEntry>, RelayStoreError> {
        Ok(match written {
            Written::Project(p) => vec![OutboxEntry {
                key: format!("owed-{}", p.project_id),
                body: format!("{{\"project\":\"{}\"}}", p.project_id),
            }],
            _ => Vec::new(),
        })
    }
}

/// An outbox that cannot make its entries.
struct Broken;

impl Outbox for Broken {
    fn entries(&self, _: Written<'_>) -> Result<Vec<OutboxEntry>, RelayStoreError> {
        Err(RelayStoreError::Backend("the outbox is broken".into()))
    }
}

fn project(id: &str) -> cra_relay::Project {
    cra_relay::Project {
        project_id: id.to_owned(),
        name: format!("project {id}"),
        created_at: "2026-11-26T10:00:00.000000Z".to_owned(),
        archived_at: None,
    }
}

fn settle(log: &dyn StateLog, key: &str, n: u64) -> Result<Recorded, StateLogError> {
    let change = StateChange::Settle(Settlement {
        session_id: "s1".to_owned(),
        outbox_key: key.to_owned(),
    });
    log.record_and_append(change, vec![note(n)])
}

/// A write made through a store with an outbox stores the outbox's entries in its own
/// transaction; a refused write stores none, and a write through the plain store none either.
#[test]
fn a_relay_write_stores_its_outbox_entry_with_it() {
    for u in under("outbox_write") {
        let owed = u.relay.with_outbox(Arc::new(PerProject));
        owed.create_project(&project("p1")).unwrap();
        let entries = u.relay.outbox().unwrap();
        assert_eq!(entries.len(), 1, "{}", u.name);
        assert_eq!(entries[0].key, "owed-p1", "{}", u.name);
        assert_eq!(entries[0].body, r#"{"project":"p1"}"#, "{}", u.name);

        let again = owed.create_project(&project("p1"));
        assert!(
            matches!(again, Err(RelayStoreError::AlreadyExists(_))),
            "{}: {again:?}",
            u.name
        );
        u.relay.create_project(&project("p2")).unwrap();
        assert_eq!(u.relay.outbox().unwrap().len(), 1, "{}", u.name);
    }
}

/// A write whose outbox cannot make its entries is refused and changes nothing: a change is
/// never stored without the events it owes.
#[test]
fn a_write_whose_outbox_fails_changes_nothing() {
    for u in under("outbox_broken") {
        let broken = u.relay.with_outbox(Arc::new(Broken));
        let refused = broken.create_project(&project("p1"));
        assert!(
            matches!(refused, Err(RelayStoreError::Backend(_))),
            "{}: {refused:?}",
            u.name
        );
        assert_eq!(u.relay.get_project("p1").unwrap(), None, "{}", u.name);
        assert!(u.relay.outbox().unwrap().is_empty(), "{}", u.name);
    }
}

/// Settling an entry appends its events and removes it in one transaction; settling it again
/// is refused (409 `already_exists`) and appends nothing.
#[test]
fn settling_an_outbox_entry_appends_its_events_and_removes_it_once() {
    for u in under("outbox_settle") {
        let owed = u.relay.with_outbox(Arc::new(PerProject));
        owed.create_project(&project("p1")).unwrap();
        let first = settle(u.log.as_ref(), "owed-p1", 0).unwrap();
        assert!(
            matches!(first, Recorded::Appended(ref e) if e.len() == 1),
            "{}: {first:?}",
            u.name
        );
        assert!(u.relay.outbox().unwrap().is_empty(), "{}", u.name);
        let again = settle(u.log.as_ref(), "owed-p1", 1);
        assert_eq!(
            refused_with(&again),
            Some(Token::AlreadyExists),
            "{}: {again:?}",
            u.name
        );
        let stored = events(&u);
        assert_eq!(stored.len(), 1, "{}", u.name);
        check_chain("s1", &stored).unwrap();
        // An append behind the refused settlement links to the chain as stored.
        u.chains.append("s1", vec![note(2)]).unwrap();
        check_chain("s1", &events(&u)).unwrap();
    }
}

/// Settlements of one entry racing (a request and replicas rolling the outbox forward at their
/// start) append its events once.
#[test]
fn racing_settlements_append_once() {
    const RACERS: usize = 8;
    for u in under("outbox_settle_race") {
        let owed = u.relay.with_outbox(Arc::new(PerProject));
        owed.create_project(&project("p1")).unwrap();
        let won = race(RACERS, &u.log, |log, i| {
            let outcome = settle(log, "owed-p1", i as u64);
            let lost = refused_with(&outcome);
            assert!(
                outcome.is_ok() || lost == Some(Token::AlreadyExists),
                "{outcome:?}"
            );
            outcome.is_ok()
        });
        assert_eq!(won, 1, "{}: {won} of {RACERS} settlements appended", u.name);
        let stored = events(&u);
        assert_eq!(stored.len(), 1, "{}", u.name);
        check_chain("s1", &stored).unwrap();
        assert!(u.relay.outbox().unwrap().is_empty(), "{}", u.name);
    }
}

fn start(session_id: &str) -> StateChange {
    start_within(session_id, None)
}

/// A start of `session_id` by agent-a, which may have at most `max_open` sessions open.
fn start_within(session_id: &str, max_open: Option<u64>) -> StateChange {
    StateChange::Start(SessionStart {
        record: SessionRecord::opened(
            session_id,
            "agent-a",
            "2026-01-01T00:00:00.000000Z".to_owned(),
        ),
        max_open,
    })
}

/// Invariant: an agent never has more sessions open than its quota. Every start and end keeps
/// its count in the transaction that writes the record; a start past the quota is refused
/// (`quota_exceeded`) and writes neither record nor events; an end makes room again; another
/// agent's sessions do not count.
#[test]
fn an_agent_opens_sessions_up_to_its_quota_and_an_end_makes_room() {
    for u in under("state_log_open_quota") {
        for id in ["q1", "q2"] {
            let opened = u
                .log
                .record_and_append(start_within(id, Some(2)), vec![note(0)]);
            assert!(
                matches!(opened, Ok(Recorded::Appended(_))),
                "{}: {opened:?}",
                u.name
            );
        }
        assert_eq!(u.carp.open_sessions("agent-a").unwrap(), 2, "{}", u.name);
        let refused = u
            .log
            .record_and_append(start_within("q3", Some(2)), vec![note(0)]);
        assert_eq!(
            refused_with(&refused),
            Some(Token::QuotaExceeded),
            "{}",
            u.name
        );
        assert_eq!(u.carp.get_session("q3").unwrap(), None, "{}", u.name);
        assert!(
            u.chains.session("q3").unwrap().is_none(),
            "{}: no events",
            u.name
        );
        assert_eq!(u.carp.open_sessions("agent-a").unwrap(), 2, "{}", u.name);

        let ended = vec![draft("session.ended", serde_json::json!({}))];
        u.log.record_and_append(end("q1"), ended.clone()).unwrap();
        assert_eq!(u.carp.open_sessions("agent-a").unwrap(), 1, "{}", u.name);
        // Ending it again (a repair) does not count it twice.
        u.carp
            .end_session("q1", "2026-01-01T02:00:00.000000Z")
            .unwrap();
        assert_eq!(u.carp.open_sessions("agent-a").unwrap(), 1, "{}", u.name);
        let opened = u
            .log
            .record_and_append(start_within("q3", Some(2)), vec![note(0)]);
        assert!(
            matches!(opened, Ok(Recorded::Appended(_))),
            "{}: {opened:?}",
            u.name
        );

        let other = SessionRecord::opened("q4", "agent-b", "2026-01-01T00:00:00.000000Z".into());
        let change = StateChange::Start(SessionStart {
            record: other,
            max_open: Some(1),
        });
        u.log.record_and_append(change, vec![note(0)]).unwrap();
        assert_eq!(u.carp.open_sessions("agent-b").unwrap(), 1, "{}", u.name);
        assert_eq!(u.carp.open_sessions("agent-a").unwrap(), 2, "{}", u.name);
        // A start without a quota (the runtime's own chains) is counted all the same.
        u.log.record_and_append(start("q5"), vec![note(0)]).unwrap();
        assert_eq!(u.carp.open_sessions("agent-a").unwrap(), 3, "{}", u.name);
        // A quota of none refuses an agent's first session.
        let first = SessionRecord::opened("q6", "agent-c", "2026-01-01T00:00:00.000000Z".into());
        let change = StateChange::Start(SessionStart {
            record: first,
            max_open: Some(0),
        });
        let refused = u.log.record_and_append(change, vec![note(0)]);
        assert_eq!(
            refused_with(&refused),
            Some(Token::QuotaExceeded),
            "{}",
            u.name
        );
        assert_eq!(u.carp.open_sessions("agent-c").unwrap(), 0, "{}", u.name);
        assert_eq!(u.carp.get_session("q6").unwrap(), None, "{}", u.name);
    }
}

/// Starts of one agent's sessions racing for the last places of its quota: exactly as many
/// win as there are places, on every replica's committer alike.
#[test]
fn racing_starts_fill_the_quota_and_no_more() {
    const RACERS: usize = 8;
    for u in under("state_log_open_quota_race") {
        let won = race(RACERS, &u.log, |log, i| {
            let outcome =
                log.record_and_append(start_within(&format!("r{i}"), Some(3)), vec![note(0)]);
            let lost = refused_with(&outcome);
            assert!(
                outcome.is_ok() || lost == Some(Token::QuotaExceeded),
                "{outcome:?}"
            );
            outcome.is_ok()
        });
        assert_eq!(won, 3, "{}: {won} of {RACERS} starts won", u.name);
        assert_eq!(u.carp.open_sessions("agent-a").unwrap(), 3, "{}", u.name);
    }
}

fn end(session_id: &str) -> StateChange {
    StateChange::End(SessionEnd {
        session_id: session_id.to_owned(),
        ended_at: "2026-01-01T01:00:00.000000Z".to_owned(),
    })
}

/// A session's record is created with the events that open its chain, or not at all: a taken id
/// refuses both, and so does a chain that refuses the events.
#[test]
fn a_session_starts_with_its_first_event_or_not_at_all() {
    for u in under("state_log_start") {
        let started = u.log.record_and_append(start("s1"), vec![note(0)]);
        assert!(
            matches!(started, Ok(Recorded::Appended(_))),
            "{}: {started:?}",
            u.name
        );
        let record = u.carp.get_session("s1").unwrap().unwrap();
        assert_eq!(
            (record.agent_id.as_str(), record.is_active()),
            ("agent-a", true)
        );
        assert_eq!(
            u.carp.sessions_of("agent-a").unwrap(),
            Some(vec!["s1".to_owned()]),
            "{}",
            u.name
        );
        let again = u.log.record_and_append(start("s1"), vec![note(1)]);
        assert_eq!(
            refused_with(&again),
            Some(Token::AlreadyExists),
            "{}",
            u.name
        );
        assert_eq!(
            events(&u).len(),
            1,
            "{}: the refusal appended nothing",
            u.name
        );

        // s2's chain has ended (an id used before): neither record nor events are written.
        u.chains
            .append("s2", vec![draft("session.ended", serde_json::json!({}))])
            .unwrap();
        let refused = u.log.record_and_append(start("s2"), vec![note(0)]);
        assert!(refused.is_err(), "{}: {refused:?}", u.name);
        assert_eq!(u.carp.get_session("s2").unwrap(), None, "{}", u.name);
    }
}

/// A session ends with its `session.ended`, and not while one of its executions holds a lease
/// (`execution_in_progress`, nothing written); once the lease is released it ends; a record
/// already marked ended (an earlier version's two writes, cut between) takes the event.
#[test]
fn a_session_ends_with_its_event_and_not_while_an_execution_runs() {
    for u in under("state_log_end") {
        u.log.record_and_append(start("s1"), vec![note(0)]).unwrap();
        let lease = sample_lease("e1", "replica-a", "s1", None);
        assert_eq!(
            u.carp.claim_execution(&lease).unwrap(),
            ClaimOutcome::Claimed
        );
        let ended = || vec![draft("session.ended", serde_json::json!({}))];
        let refused = u.log.record_and_append(end("s1"), ended());
        assert_eq!(
            refused_with(&refused),
            Some(Token::ExecutionInProgress),
            "{}",
            u.name
        );
        assert!(
            u.carp.get_session("s1").unwrap().unwrap().is_active(),
            "{}",
            u.name
        );
        assert_eq!(events(&u).len(), 1, "{}", u.name);

        u.carp.release_execution("e1").unwrap();
        let done = u.log.record_and_append(end("s1"), ended());
        assert!(
            matches!(done, Ok(Recorded::Appended(_))),
            "{}: {done:?}",
            u.name
        );
        let record = u.carp.get_session("s1").unwrap().unwrap();
        assert_eq!(
            record.ended_at.as_deref(),
            Some("2026-01-01T01:00:00.000000Z")
        );
        let twice = u.log.record_and_append(end("s1"), ended());
        assert!(
            matches!(
                twice,
                Err(StateLogError::Chain(ChainStoreError::SessionEnded { .. }))
            ),
            "{}: {twice:?}",
            u.name
        );

        u.log.record_and_append(start("s3"), vec![note(0)]).unwrap();
        u.carp
            .end_session("s3", "2026-01-01T00:30:00.000000Z")
            .unwrap();
        let repaired = u.log.record_and_append(end("s3"), ended());
        assert!(
            matches!(repaired, Ok(Recorded::Appended(_))),
            "{}: {repaired:?}",
            u.name
        );
        let kept = u.carp.get_session("s3").unwrap().unwrap().ended_at;
        assert_eq!(
            kept.as_deref(),
            Some("2026-01-01T00:30:00.000000Z"),
            "{}",
            u.name
        );

        let unknown = u.log.record_and_append(end("s9"), ended());
        assert_eq!(
            refused_with(&unknown),
            Some(Token::SessionNotFound),
            "{}",
            u.name
        );
    }
}
