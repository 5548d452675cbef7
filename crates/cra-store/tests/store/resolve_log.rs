//! `ResolveLog`: a resolve's state and its events written as one unit. On redb both ride the
//! collector's transaction (state and events together or not at all); on PostgreSQL
//! `RecordThenAppend` records, then appends. Either way a duplicate request id writes nothing,
//! also when the duplicates race.

use std::sync::{Arc, Barrier};

use cra_carp::store::{
    CarpStore, RecordThenAppend, Recorded, ResolveLog, ResolveLogError, ResolveRecord,
    StoredResolution,
};
use cra_carp::store_contract::{sample_approval, sample_resolution};
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{RedbStore, StoreConfig};
use cra_trace::store::{ChainStore, ChainStoreError};

use crate::backends::{check_chain, draft, note};

/// A backend as the runtime holds it: the CARP store, the chains and the resolve log.
struct Under {
    name: &'static str,
    carp: Arc<dyn CarpStore>,
    chains: Arc<dyn ChainStore>,
    log: Arc<dyn ResolveLog>,
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
        log: Arc::new(redb),
        _dir: Some(dir),
        _schema: None,
    }];
    if let Some(url) = postgres_url(test) {
        let schema = TestSchema::new(&url, test);
        let pg = schema.store(StoreConfig::default()).unwrap();
        let carp: Arc<dyn CarpStore> = Arc::new(pg.clone());
        let chains: Arc<dyn ChainStore> = Arc::new(pg);
        out.push(Under {
            name: "postgres",
            log: Arc::new(RecordThenAppend {
                carp: carp.clone(),
                chains: chains.clone(),
            }),
            carp,
            chains,
            _dir: None,
            _schema: Some(schema),
        });
    }
    out
}

fn record(request_id: &str, resolution_id: &str, approval: Option<&str>) -> ResolveRecord {
    ResolveRecord {
        session_id: "s1".to_owned(),
        request_id: request_id.to_owned(),
        resolution: Some(StoredResolution {
            resolution: sample_resolution(resolution_id),
            session_id: "s1".to_owned(),
            agent_id: "agent-a".to_owned(),
            expires_at_us: 1_767_229_200_000_000,
            origins: Default::default(),
        }),
        approval: approval.map(sample_approval),
    }
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
            .record_and_append(&record("r1", "res-1", None), vec![note(0)])
            .unwrap();
        let again = ResolveRecord {
            resolution: None,
            ..record("r2", "res-1", None)
        };
        let recorded = u.log.record_and_append(&again, vec![note(1)]).unwrap();
        assert!(
            matches!(recorded, Recorded::Appended(ref e) if e.len() == 1),
            "{}: {recorded:?}",
            u.name
        );
        assert!(u.carp.has_request_id("s1", "r2").unwrap(), "{}", u.name);
        let repeat = u.log.record_and_append(&again, vec![note(2)]).unwrap();
        assert_eq!(repeat, Recorded::Duplicate, "{}", u.name);
        assert_eq!(events(&u).len(), 2, "{}", u.name);
    }
}

#[test]
fn a_resolve_is_recorded_with_its_events_and_a_duplicate_writes_nothing() {
    for u in under("resolve_log_basic") {
        let recorded = u
            .log
            .record_and_append(&record("r1", "res-1", Some("a1")), vec![note(0), note(1)])
            .unwrap();
        let Recorded::Appended(first) = recorded else {
            panic!("{}: a new request id was refused", u.name)
        };
        assert_eq!(first.len(), 2, "{}", u.name);
        assert!(u.carp.has_request_id("s1", "r1").unwrap(), "{}", u.name);
        assert_eq!(
            u.carp.get_resolution("res-1").unwrap(),
            record("r1", "res-1", None).resolution,
            "{}",
            u.name
        );
        let pending: Vec<String> = u
            .carp
            .list_pending_approvals()
            .unwrap()
            .into_iter()
            .map(|a| a.approval_id)
            .collect();
        assert_eq!(pending, ["a1"], "{}", u.name);

        // The same request id again: refused, and neither its state nor its events are written.
        let again = u
            .log
            .record_and_append(&record("r1", "res-2", Some("a2")), vec![note(2)])
            .unwrap();
        assert_eq!(
            again,
            Recorded::Duplicate,
            "{}: a duplicate was recorded",
            u.name
        );
        assert_eq!(u.carp.get_resolution("res-2").unwrap(), None, "{}", u.name);
        assert_eq!(u.carp.get_approval("a2").unwrap(), None, "{}", u.name);
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
        let barrier = Arc::new(Barrier::new(RACERS));
        let handles: Vec<_> = (0..RACERS)
            .map(|i| {
                let log = u.log.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    log.record_and_append(&record("r1", &format!("res-{i}"), None), vec![note(0)])
                        .unwrap()
                        != Recorded::Duplicate
                })
            })
            .collect();
        let won = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|w| *w)
            .count();
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

#[test]
fn on_redb_a_refused_append_records_no_state() {
    let u = under("resolve_log_refused").remove(0);
    assert_eq!(u.name, "redb");
    u.chains
        .append("s1", vec![draft("session.ended", serde_json::json!({}))])
        .unwrap();
    let refused = u
        .log
        .record_and_append(&record("r1", "res-1", Some("a1")), vec![note(0)]);
    assert!(
        matches!(
            refused,
            Err(ResolveLogError::Chain(ChainStoreError::SessionEnded { .. }))
        ),
        "{refused:?}"
    );
    assert!(!u.carp.has_request_id("s1", "r1").unwrap());
    assert_eq!(u.carp.get_resolution("res-1").unwrap(), None);
    assert_eq!(u.carp.get_approval("a1").unwrap(), None);
    assert_eq!(events(&u).len(), 1);
}
