//! TRACE chains in PostgreSQL, with group commit.
//!
//! Appends are queued to a few committer threads (`crate::collector`); each takes every append
//! waiting and makes them one transaction: create missing `trace_heads` rows, lock the heads of
//! every session in the batch (`SELECT ... ORDER BY session_id FOR UPDATE`: one lock order for
//! all committers and replicas, so no deadlock), read the clock and new ids under those locks,
//! insert all events with one statement, move the heads, commit, and only then answer. The row
//! locks serialise appenders to one session across every replica sharing the schema; the
//! primary key `(session_id, sequence)` is the backstop against a fork. `synchronous_commit` is
//! on, so a commit returns once its WAL is flushed. A deadlock or serialisation failure (which
//! the lock order should prevent) retries the whole batch; nothing of a failed try is kept.
//!
//! An append may carry a change of CARP state (`cra_carp::store::StateLog`): it is written in
//! the batch's transaction once its chain has accepted the drafts and before its events
//! (`super::state`), so the state and the events are committed together or not at all. The
//! batch's events become the transparency log's next leaves in the same transaction, last
//! (`super::tlog`).

use cra_trace::store::{ChainStore, ChainStoreError, SessionSummary, check_batch};
use cra_trace::{ChainHead, EventDraft, GENESIS_PREVIOUS_HASH, PreparedDraft, TraceEvent};
use postgres::Row;
use postgres::fallible_iterator::FallibleIterator as _;

use std::collections::{BTreeSet, HashMap};

use postgres::error::SqlState;

use super::{PgStore, Pool, to_i64};
use crate::StoreConfig;
use crate::chain::{HeadRecord, decode_event, seal_all};

/// The table of event bodies, also the associated data of their encryption.
pub(crate) const EVENTS: &str = "trace_events";
use crate::collector::{Answer, Job, JobWork, answer_all, split};
use crate::tlog::NewLeaf;

fn unavailable(e: impl std::error::Error) -> ChainStoreError {
    ChainStoreError::Unavailable(format!("postgres: {}", super::error_text(&e)))
}

/// Tries of a batch that met a deadlock or serialisation failure.
const TRIES: usize = 3;

/// Where a batch transaction announces its appends (`super::feed`).
#[derive(Clone)]
pub(crate) struct Notify {
    /// The schema's channel.
    pub(crate) channel: String,
    /// The store's origin.
    pub(crate) origin: u64,
}

/// Seals and commits `batch` in one transaction, then answers every job.
pub(crate) fn commit_batch(pool: &Pool, config: &StoreConfig, notify: &Notify, batch: Vec<Job>) {
    let (replies, work) = split(batch);
    let mut answers: Vec<Answer> = vec![None; replies.len()];
    let mut result = Err(Retry::Fail(ChainStoreError::Unavailable(
        "postgres: not tried".into(),
    )));
    for _ in 0..TRIES {
        answers.iter_mut().for_each(|a| *a = None);
        result = try_batch(pool, config, notify, &work, &mut answers);
        match &result {
            Err(Retry::Again(_)) => continue,
            _ => break,
        }
    }
    let result = result.map_err(|r| match r {
        Retry::Again(e) | Retry::Fail(e) => e,
    });
    if result.is_ok() {
        crate::fault_point!("trace.append.committed");
    }
    answer_all(replies, answers, &result);
}

enum Retry {
    Again(ChainStoreError),
    Fail(ChainStoreError),
}

fn sql(e: postgres::Error) -> Retry {
    let again = matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
    );
    if again {
        Retry::Again(unavailable(e))
    } else {
        Retry::Fail(unavailable(e))
    }
}

fn try_batch(
    pool: &Pool,
    config: &StoreConfig,
    notify: &Notify,
    work: &[JobWork],
    answers: &mut [Answer],
) -> Result<(), Retry> {
    let mut client = pool.get().map_err(|e| Retry::Fail(unavailable(e)))?;
    let mut tx = client.transaction().map_err(sql)?;
    let sessions: Vec<&str> = work
        .iter()
        .map(|w| w.session_id.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    tx.execute(
        "INSERT INTO trace_heads
           (session_id, next_sequence, head_hash, first_timestamp, last_timestamp, ended)
         SELECT s, 0, $2, '', '', false FROM unnest($1::text[]) AS s ORDER BY s COLLATE \"C\"
         ON CONFLICT (session_id) DO NOTHING",
        &[&sessions, &GENESIS_PREVIOUS_HASH],
    )
    .map_err(sql)?;
    let rows = tx
        .query(
            &format!(
                "SELECT {HEAD_COLUMNS} FROM trace_heads WHERE session_id = ANY($1)
                 ORDER BY session_id COLLATE \"C\" FOR UPDATE"
            ),
            &[&sessions],
        )
        .map_err(sql)?;
    let mut heads: HashMap<String, HeadRecord> = rows
        .iter()
        .map(|r| (r.get::<_, String>(5), head_from_row(r)))
        .collect();
    let mut ev_sessions: Vec<&str> = Vec::new();
    let mut sequences: Vec<i64> = Vec::new();
    let mut types: Vec<String> = Vec::new();
    let mut stamps: Vec<String> = Vec::new();
    let mut hashes: Vec<String> = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    // Where each session's appends in this batch begin.
    let mut starts: HashMap<&str, u64> = HashMap::new();
    // The batch's events in the order they are written: the log's new leaves.
    let mut leaves = Vec::new();
    for (w, answer) in work.iter().zip(answers.iter_mut()) {
        let (session_id, drafts) = (&w.session_id, &w.drafts);
        let Some(head) = heads.get(session_id).cloned() else {
            // Its head row was inserted (or found) above, then removed by retention before the
            // lock was taken: the batch is tried again, which inserts the row afresh.
            return Err(Retry::Again(ChainStoreError::Unavailable(format!(
                "postgres: session `{session_id}`'s chain was removed while this append was \
                 being written; send it again"
            ))));
        };
        if let Err(e) = check_batch(session_id, head.ended, drafts) {
            *answer = Some(Err(e));
            continue;
        }
        if let Some(change) = &w.state {
            match change.apply(&mut tx, &config.encryption).map_err(sql)? {
                Ok(true) => {}
                // A used request id (answered with no events) or a refusal: nothing written.
                refused => {
                    *answer = Some(refused.map(|_| Vec::new()));
                    continue;
                }
            }
        }
        starts
            .entry(session_id.as_str())
            .or_insert(head.next_sequence);
        let (head, sealed, bodies) =
            seal_all(config, session_id, head, drafts.clone()).map_err(Retry::Fail)?;
        for (event, body) in sealed.iter().zip(bodies) {
            ev_sessions.push(session_id);
            sequences.push(to_i64(event.sequence));
            types.push(event.event_type.clone());
            stamps.push(event.timestamp.clone());
            hashes.push(event.event_hash.clone());
            let text = String::from_utf8(body).map_err(|e| Retry::Fail(unavailable(e)))?;
            let stored = config
                .encryption
                .encrypt_text(EVENTS, text)
                .map_err(|e| Retry::Fail(unavailable(e)))?;
            texts.push(stored);
        }
        for event in &sealed {
            leaves.push(NewLeaf::of(event).map_err(|e| Retry::Fail(log_failed(e)))?);
        }
        heads.insert(session_id.clone(), head);
        *answer = Some(Ok(sealed));
    }
    if !sequences.is_empty() {
        tx.execute(
            "INSERT INTO trace_events (session_id, sequence, event_type, timestamp, event_hash, body)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[])",
            &[&ev_sessions, &sequences, &types, &stamps, &hashes, &texts],
        )
        .map_err(sql)?;
        let touched: Vec<&str> = sessions
            .iter()
            .copied()
            .filter(|s| ev_sessions.contains(s))
            .collect();
        let mut next = Vec::new();
        let mut hash = Vec::new();
        let mut first = Vec::new();
        let mut last = Vec::new();
        let mut ended = Vec::new();
        let mut bytes = Vec::new();
        for s in &touched {
            let Some(h) = heads.get(*s) else { continue };
            next.push(to_i64(h.next_sequence));
            hash.push(h.head_hash.as_str());
            first.push(h.first_timestamp.as_str());
            last.push(h.last_timestamp.as_str());
            ended.push(h.ended);
            bytes.push(to_i64(h.bytes));
        }
        tx.execute(
            "UPDATE trace_heads AS h
             SET next_sequence = u.n, head_hash = u.hh, first_timestamp = u.ft,
                 last_timestamp = u.lt, ended = u.e, bytes = u.b
             FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::boolean[],
                         $7::bigint[])
                  AS u(s, n, hh, ft, lt, e, b)
             WHERE h.session_id = u.s",
            &[&touched, &next, &hash, &first, &last, &ended, &bytes],
        )
        .map_err(sql)?;
        announce(&mut tx, notify, &touched, &starts, &heads)?;
    }
    // A session whose every append was refused keeps no (empty) head row.
    let empty: Vec<&str> = sessions
        .iter()
        .copied()
        .filter(|s| heads.get(*s).is_some_and(|h| h.next_sequence == 0))
        .collect();
    if !empty.is_empty() {
        tx.execute(
            "DELETE FROM trace_heads WHERE session_id = ANY($1) AND next_sequence = 0",
            &[&empty],
        )
        .map_err(sql)?;
    }
    // Last, so the log's lock is held for as little as possible (`super::tlog`).
    super::tlog::append_leaves(&mut tx, &leaves).map_err(|e| Retry::Fail(log_failed(e)))?;
    tx.commit().map_err(sql)?;
    Ok(())
}

fn log_failed(e: crate::tlog::LogError) -> ChainStoreError {
    ChainStoreError::Unavailable(format!("postgres: {e}"))
}

/// Sends the batch's appends on the feed, in its transaction: listeners hear of them only if it
/// commits (`super::feed`).
fn announce(
    tx: &mut postgres::Transaction<'_>,
    notify: &Notify,
    touched: &[&str],
    starts: &HashMap<&str, u64>,
    heads: &HashMap<String, HeadRecord>,
) -> Result<(), Retry> {
    let appended: Vec<super::feed::Appended> = touched
        .iter()
        .filter_map(|s| {
            let head = heads.get(*s)?;
            let from = *starts.get(s)?;
            (from < head.next_sequence).then(|| super::feed::Appended {
                session_id: (*s).to_owned(),
                from,
                to: head.next_sequence,
                ended: head.ended,
            })
        })
        .collect();
    let payloads = super::feed::encode(notify.origin, &appended);
    if !payloads.is_empty() {
        tx.execute(
            "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
            &[&notify.channel, &payloads],
        )
        .map_err(sql)?;
    }
    Ok(())
}

fn head_from_row(row: &Row) -> HeadRecord {
    HeadRecord {
        next_sequence: row.get::<_, i64>(0).unsigned_abs(),
        head_hash: row.get(1),
        first_timestamp: row.get(2),
        last_timestamp: row.get(3),
        ended: row.get(4),
        bytes: row.get::<_, i64>(6).unsigned_abs(),
    }
}

/// The columns [`head_from_row`] reads, in its order.
const HEAD_COLUMNS: &str =
    "next_sequence, head_hash, first_timestamp, last_timestamp, ended, session_id, bytes";

impl PgStore {
    fn events_where(
        &self,
        session_id: &str,
        from: u64,
        to: u64,
        limit: usize,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        if from >= to || limit == 0 {
            return Ok(Vec::new());
        }
        let mut client = self.client().map_err(unavailable)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT sequence, body FROM trace_events
                 WHERE session_id = $1 AND sequence >= $2 AND sequence < $3
                 ORDER BY sequence LIMIT $4",
                &[&session_id, &to_i64(from), &to_i64(to), &limit],
            )
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                let sequence = r.get::<_, i64>(0).unsigned_abs();
                let stored = r.get::<_, &str>(1);
                let text = self
                    .config()
                    .encryption
                    .decrypt_text(EVENTS, stored)
                    .map_err(|e| ChainStoreError::Corrupt {
                        session_id: session_id.to_owned(),
                        sequence,
                        reason: e.to_string(),
                    })?;
                decode_event(session_id, sequence, text.as_bytes())
            })
            .collect()
    }
}

/// Every change of state rides with its events in the committer's batch transaction
/// (`pg/state.rs`).
impl cra_carp::store::StateLog for PgStore {
    fn record_and_append_then(
        &self,
        change: cra_carp::store::StateChange,
        drafts: Vec<PreparedDraft>,
        done: cra_carp::store::StateDone,
    ) {
        use cra_carp::store::Recorded;
        let session_id = change.session_id().to_owned();
        let change = match super::state::PgChange::encode(&self.config().encryption, change) {
            Ok(change) => change,
            Err(e) => return done(Err(e.into())),
        };
        // The committer answers a used request id with no events: nothing was written.
        let reply: cra_trace::store::AppendDone = Box::new(move |outcome| {
            done(outcome.map_err(Into::into).map(|events| {
                if events.is_empty() {
                    Recorded::Duplicate
                } else {
                    Recorded::Appended(events)
                }
            }));
        });
        self.collector()
            .queue_prepared(&session_id, drafts, Some(change), reply);
    }
}

impl ChainStore for PgStore {
    fn append(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        self.collector().submit(session_id, drafts)
    }

    fn append_then(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
        done: cra_trace::store::AppendDone,
    ) {
        self.collector().queue(session_id, drafts, done);
    }

    fn read_range(
        &self,
        session_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        self.events_where(session_id, from, to, usize::MAX)
    }

    fn read_after(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        let from = match after {
            None => 0,
            Some(n) => n.saturating_add(1),
        };
        self.events_where(session_id, from, u64::MAX, limit)
    }

    fn session(&self, session_id: &str) -> Result<Option<SessionSummary>, ChainStoreError> {
        let mut client = self.client().map_err(unavailable)?;
        let row = client
            .query_opt(
                &format!("SELECT {HEAD_COLUMNS} FROM trace_heads WHERE session_id = $1"),
                &[&session_id],
            )
            .map_err(unavailable)?;
        Ok(row.map(|r| head_from_row(&r).summary(session_id.to_owned())))
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, ChainStoreError> {
        let mut client = self.client().map_err(unavailable)?;
        let mut out = Vec::new();
        let query =
            format!("SELECT {HEAD_COLUMNS} FROM trace_heads ORDER BY session_id COLLATE \"C\"");
        let mut rows = client
            .query_raw(&query, std::iter::empty::<i32>())
            .map_err(unavailable)?;
        while let Some(r) = rows.next().map_err(unavailable)? {
            let session_id: String = r.get(5);
            out.push(head_from_row(&r).summary(session_id));
        }
        Ok(out)
    }
}

/// Removes `session_id`'s chain if its head is still `expected`.
pub(crate) fn remove_chain(
    store: &PgStore,
    session_id: &str,
    expected: &ChainHead,
) -> Result<bool, ChainStoreError> {
    let mut client = store.client().map_err(unavailable)?;
    let mut tx = client.transaction().map_err(unavailable)?;
    let row = tx
        .query_opt(
            &format!("SELECT {HEAD_COLUMNS} FROM trace_heads WHERE session_id = $1 FOR UPDATE"),
            &[&session_id],
        )
        .map_err(unavailable)?;
    let Some(row) = row else { return Ok(false) };
    let head = head_from_row(&row);
    if head.next_sequence != expected.next_sequence || head.head_hash != expected.head_hash {
        return Ok(false);
    }
    tx.execute(
        "DELETE FROM trace_events WHERE session_id = $1",
        &[&session_id],
    )
    .map_err(unavailable)?;
    tx.execute(
        "DELETE FROM trace_heads WHERE session_id = $1",
        &[&session_id],
    )
    .map_err(unavailable)?;
    // The session's CARP records go with it; one still open leaves its agent's count.
    let record = tx
        .query_opt(
            "SELECT body FROM carp_sessions WHERE session_id = $1",
            &[&session_id],
        )
        .map_err(unavailable)?;
    if let Some(row) = record {
        let enc = &store.config().encryption;
        let record: cra_carp::store::SessionRecord =
            crate::pg::carp::decode_record(enc, "carp_sessions", row.get(0))
                .map_err(|e| ChainStoreError::Unavailable(format!("session {session_id}: {e}")))?;
        if record.is_active() {
            crate::pg::carp::count_end_in(&mut tx, &record.agent_id).map_err(unavailable)?;
        }
    }
    for sql in [
        "DELETE FROM carp_sessions WHERE session_id = $1",
        "DELETE FROM carp_request_ids WHERE session_id = $1",
        "DELETE FROM carp_resolutions WHERE session_id = $1",
        "DELETE FROM carp_executions WHERE session_id = $1",
        "DELETE FROM carp_approvals WHERE session_id = $1",
        "DELETE FROM carp_execution_leases WHERE session_id = $1",
        "DELETE FROM carp_counters WHERE scope_key = 'session:' || $1",
        // A history test's counter keys a session scope by values too: `session:<id>|<digest>`
        // (`starts_with`, not LIKE: a session id may hold `_` or `%`).
        "DELETE FROM carp_rate_events WHERE scope_key = 'session:' || $1
             OR starts_with(scope_key, 'session:' || $1 || '|')",
    ] {
        tx.execute(sql, &[&session_id]).map_err(unavailable)?;
    }
    tx.commit().map_err(unavailable)?;
    Ok(true)
}
