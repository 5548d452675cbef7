//! The harness: every backend a test should run against, each fresh, plus chain checks.

use std::sync::Arc;

use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{RedbStore, SessionRemoval, StoreConfig};
use cra_trace::store::ChainStore;
use cra_trace::{EventDraft, GENESIS_PREVIOUS_HASH, TraceEvent, compute_event_hash};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};

/// A store under test, whichever backend.
pub(crate) trait TestStore:
    ChainStore
    + SessionRemoval
    + cra_carp::store::CarpStore
    + cra_store::AtlasCatalog
    + cra_store::tlog::LogStore
{
}
impl<
    T: ChainStore
        + SessionRemoval
        + cra_carp::store::CarpStore
        + cra_store::AtlasCatalog
        + cra_store::tlog::LogStore,
> TestStore for T
{
}

/// A fresh store and what keeps its storage alive.
pub(crate) struct Fresh {
    pub name: &'static str,
    pub store: Arc<dyn TestStore>,
    _guard: Guard,
}

#[allow(dead_code)]
enum Guard {
    Dir(tempfile::TempDir),
    Schema(TestSchema),
}

/// One fresh redb store and, when configured, one fresh PostgreSQL store, both with `config`.
pub(crate) fn backends(test: &str, config: impl Fn() -> StoreConfig) -> Vec<Fresh> {
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open_with(dir.path().join("data"), config()).unwrap();
    let mut out = vec![Fresh {
        name: "redb",
        store: Arc::new(redb),
        _guard: Guard::Dir(dir),
    }];
    if let Some(url) = postgres_url(test) {
        let schema = TestSchema::new(&url, test);
        let pg = schema.store(config()).unwrap();
        out.push(Fresh {
            name: "postgres",
            store: Arc::new(pg),
            _guard: Guard::Schema(schema),
        });
    }
    out
}

/// A clock frozen at a known instant and deterministic ids.
pub(crate) fn fixed() -> (Arc<FixedClock>, StoreConfig) {
    let clock = Arc::new(FixedClock::parse("2026-03-01T12:00:00Z").unwrap());
    let config = StoreConfig::new(
        clock.clone(),
        Arc::new(SequentialIds::new(1_772_366_400_000, 7)),
    );
    (clock, config)
}

pub(crate) fn draft(event_type: &str, payload: Value) -> EventDraft {
    EventDraft {
        trace_id: "0196b5a0-0000-7000-8000-000000000001".into(),
        span_id: "0196b5a0-0000-7000-8000-000000000002".into(),
        parent_span_id: None,
        event_type: event_type.into(),
        payload,
    }
}

pub(crate) fn note(n: u64) -> EventDraft {
    draft("test.note", json!({ "n": n }))
}

/// Checks `events` form the whole chain of `session`: sequences 0..N, hashes recompute, links
/// hold, timestamps never go back. Returns a description of the first break.
pub(crate) fn check_chain(session: &str, events: &[TraceEvent]) -> Result<(), String> {
    let mut previous = GENESIS_PREVIOUS_HASH.to_owned();
    let mut last_time = String::new();
    for (i, e) in events.iter().enumerate() {
        let i = i as u64;
        if e.session_id != session {
            return Err(format!("event {i} belongs to {}", e.session_id));
        }
        if e.sequence != i {
            return Err(format!("event at {i} has sequence {}", e.sequence));
        }
        if e.previous_event_hash != previous {
            return Err(format!("event {i} does not link to its predecessor"));
        }
        if compute_event_hash(e) != e.event_hash {
            return Err(format!("event {i} hash does not recompute"));
        }
        if e.timestamp < last_time {
            return Err(format!("event {i} timestamp goes back"));
        }
        previous = e.event_hash.clone();
        last_time = e.timestamp.clone();
    }
    Ok(())
}

/// Reads and checks a whole chain, returning its length.
pub(crate) fn verify_stored(store: &dyn TestStore, session: &str) -> Result<u64, String> {
    let events = store
        .read_range(session, 0, u64::MAX)
        .map_err(|e| e.to_string())?;
    check_chain(session, &events)?;
    let summary = store
        .session(session)
        .map_err(|e| e.to_string())?
        .ok_or("no summary")?;
    let n = events.len() as u64;
    if summary.head.next_sequence != n {
        return Err(format!(
            "head says {} events, {n} stored",
            summary.head.next_sequence
        ));
    }
    if let Some(last) = events.last()
        && summary.head.head_hash != last.event_hash
    {
        return Err("head hash differs from the last event".into());
    }
    Ok(n)
}
