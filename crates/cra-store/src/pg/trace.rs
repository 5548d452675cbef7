//! TRACE chains in PostgreSQL.
//!
//! An append is one transaction: lock the session's `trace_heads` row (`SELECT ... FOR UPDATE`,
//! inserting the genesis row first for a new session), read the clock and new ids under that
//! lock, insert the events, move the head, commit. The row lock serialises appenders to one
//! session across every replica sharing the schema; the primary key `(session_id, sequence)` is
//! the backstop against a fork. `synchronous_commit` is on, so `Ok` means the WAL is flushed.

use cra_trace::store::{
    ChainStore, ChainStoreError, SessionSummary, check_batch, check_session_id,
};
use cra_trace::{ChainHead, EventDraft, GENESIS_PREVIOUS_HASH, TraceEvent};
use postgres::Row;
use postgres::fallible_iterator::FallibleIterator as _;

use super::PgStore;
use crate::chain::{HeadRecord, decode_event, seal_all};

fn unavailable(e: impl std::fmt::Display) -> ChainStoreError {
    ChainStoreError::Unavailable(format!("postgres: {e}"))
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn head_from_row(row: &Row) -> HeadRecord {
    HeadRecord {
        next_sequence: row.get::<_, i64>(0).unsigned_abs(),
        head_hash: row.get(1),
        first_timestamp: row.get(2),
        last_timestamp: row.get(3),
        ended: row.get(4),
    }
}

const HEAD_COLUMNS: &str =
    "next_sequence, head_hash, first_timestamp, last_timestamp, ended, session_id";

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
                decode_event(session_id, sequence, r.get::<_, &str>(1).as_bytes())
            })
            .collect()
    }
}

impl ChainStore for PgStore {
    fn append(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        check_session_id(session_id)?;
        if drafts.is_empty() {
            return Err(ChainStoreError::EmptyAppend);
        }
        let mut client = self.client().map_err(unavailable)?;
        let mut tx = client.transaction().map_err(unavailable)?;
        let lock =
            format!("SELECT {HEAD_COLUMNS} FROM trace_heads WHERE session_id = $1 FOR UPDATE");
        let mut row = tx.query_opt(&lock, &[&session_id]).map_err(unavailable)?;
        if row.is_none() {
            tx.execute(
                "INSERT INTO trace_heads
                   (session_id, next_sequence, head_hash, first_timestamp, last_timestamp, ended)
                 VALUES ($1, 0, $2, '', '', false) ON CONFLICT (session_id) DO NOTHING",
                &[&session_id, &GENESIS_PREVIOUS_HASH],
            )
            .map_err(unavailable)?;
            row = tx.query_opt(&lock, &[&session_id]).map_err(unavailable)?;
        }
        let head =
            head_from_row(&row.ok_or_else(|| unavailable("the session's head row vanished"))?);
        check_batch(session_id, head.ended, &drafts)?;
        let (head, sealed, bodies) = seal_all(self.config(), session_id, head, drafts)?;
        let mut sequences = Vec::with_capacity(sealed.len());
        let mut types = Vec::with_capacity(sealed.len());
        let mut stamps = Vec::with_capacity(sealed.len());
        let mut hashes = Vec::with_capacity(sealed.len());
        let mut texts = Vec::with_capacity(sealed.len());
        for (event, body) in sealed.iter().zip(bodies) {
            sequences.push(to_i64(event.sequence));
            types.push(event.event_type.as_str());
            stamps.push(event.timestamp.as_str());
            hashes.push(event.event_hash.as_str());
            texts.push(String::from_utf8(body).map_err(unavailable)?);
        }
        tx.execute(
            "INSERT INTO trace_events (session_id, sequence, event_type, timestamp, event_hash, body)
             SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[])",
            &[&session_id, &sequences, &types, &stamps, &hashes, &texts],
        )
        .map_err(unavailable)?;
        tx.execute(
            "UPDATE trace_heads SET next_sequence = $2, head_hash = $3, first_timestamp = $4,
                    last_timestamp = $5, ended = $6
             WHERE session_id = $1",
            &[
                &session_id,
                &to_i64(head.next_sequence),
                &head.head_hash,
                &head.first_timestamp,
                &head.last_timestamp,
                &head.ended,
            ],
        )
        .map_err(unavailable)?;
        tx.commit().map_err(unavailable)?;
        Ok(sealed)
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
    tx.commit().map_err(unavailable)?;
    Ok(true)
}
