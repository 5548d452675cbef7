//! TRACE chains in redb, with group commit.
//!
//! Appends are handed to one committer thread (`crate::collector`). It takes every append waiting
//! in its queue (up to `MAX_BATCH_APPENDS`), seals them all in one write transaction (reading each session's head,
//! the clock and new ids there, so the thread *is* the per-session serialisation), commits with
//! `Durability::Immediate` (redb fsyncs before `commit` returns) and only then answers each
//! caller. One fsync thus covers every append that arrived while the previous one ran. An append
//! refused by a chain rule is answered at once and writes nothing; if the commit fails, every
//! append of the batch is answered with the error and nothing of the batch is stored.
//!
//! Tables: `trace_events` maps `(session_id, sequence of an append's first event)` to the wire
//! JSON of that append's events, one per line (an append is one record, so a resolve's sixteen
//! events cost one B-tree insert, not sixteen; a record of one event is the event's JSON alone,
//! which is also how databases written before records held several events read);
//! `trace_heads` maps `session_id` to its [`HeadRecord`] (JSON).
//!
//! A resolve's state (request id, resolution, approval: `cra_carp::store::ResolveLog`) may ride
//! with its events: the committer writes it in the same transaction just before sealing them, so
//! the resolve waits for the single writer once, with the batch, and its state and events are
//! stored together or not at all.

use std::collections::HashMap;

use ::redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use cra_trace::store::{ChainStore, ChainStoreError, SessionSummary, check_batch};
use cra_trace::{ChainHead, EventDraft, TraceEvent};

use super::{RedbStore, backend};
use crate::chain::{HeadRecord, decode_event, decode_head, seal_all};
use crate::collector::{Answer, Job, answer_all, split_with_state};
use crate::{StoreConfig, StoreError};

pub(crate) const EVENTS: TableDefinition<'static, (&str, u64), &[u8]> =
    TableDefinition::new("trace_events");
pub(crate) const HEADS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("trace_heads");

fn unavailable(e: impl std::fmt::Display) -> ChainStoreError {
    ChainStoreError::Unavailable(format!("redb: {e}"))
}

/// Creates the TRACE tables so readers never meet a missing table.
pub(crate) fn create_tables(db: &Database) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(backend)?;
    txn.open_table(EVENTS).map_err(backend)?;
    txn.open_table(HEADS).map_err(backend)?;
    txn.commit().map_err(backend)
}

/// Seals and commits `batch` in one durable write transaction, then answers every job.
pub(crate) fn commit_batch(db: &Database, config: &StoreConfig, batch: Vec<Job>) {
    let (replies, work) = split_with_state(batch);
    let mut answers: Vec<Answer> = vec![None; replies.len()];
    let result = (|| -> Result<(), ChainStoreError> {
        let mut txn = db.begin_write().map_err(unavailable)?;
        txn.set_durability(Durability::Immediate)
            .map_err(unavailable)?;
        {
            let mut events = txn.open_table(EVENTS).map_err(unavailable)?;
            let mut heads = txn.open_table(HEADS).map_err(unavailable)?;
            let mut touched: HashMap<String, HeadRecord> = HashMap::new();
            // Opened at the batch's first resolve, then shared by every resolve of the batch.
            let mut resolve_tables: Option<super::carp::ResolveTables<'_>> = None;
            for ((session_id, drafts, resolve), answer) in work.into_iter().zip(answers.iter_mut())
            {
                let head = match touched.get(&session_id) {
                    Some(head) => head.clone(),
                    None => match heads.get(session_id.as_str()).map_err(unavailable)? {
                        Some(bytes) => decode_head(&session_id, bytes.value())?,
                        None => HeadRecord::genesis(),
                    },
                };
                if let Err(e) = check_batch(&session_id, head.ended, &drafts) {
                    *answer = Some(Err(e));
                    continue;
                }
                if let Some(resolve) = &resolve {
                    let tables = match &mut resolve_tables {
                        Some(tables) => tables,
                        None => resolve_tables
                            .insert(super::carp::ResolveTables::open(&txn).map_err(unavailable)?),
                    };
                    match super::carp::apply_resolve(tables, resolve) {
                        Ok(true) => {}
                        // The request id was used: neither the state nor the events are written.
                        Ok(false) => {
                            *answer = Some(Ok(Vec::new()));
                            continue;
                        }
                        Err(e @ cra_carp::StoreError::AlreadyExists { .. }) => {
                            *answer = Some(Err(unavailable(e)));
                            continue;
                        }
                        Err(e) => return Err(unavailable(e)),
                    }
                }
                let (head, sealed, bodies) = seal_all(config, &session_id, head, drafts)?;
                if let Some(first) = sealed.first() {
                    events
                        .insert(
                            (session_id.as_str(), first.sequence),
                            pack(&bodies).as_slice(),
                        )
                        .map_err(unavailable)?;
                }
                touched.insert(session_id, head);
                *answer = Some(Ok(sealed));
            }
            for (session_id, head) in &touched {
                let bytes = serde_json::to_vec(head).map_err(unavailable)?;
                heads
                    .insert(session_id.as_str(), bytes.as_slice())
                    .map_err(unavailable)?;
            }
        }
        txn.commit().map_err(unavailable)
    })();
    answer_all(replies, answers, &result);
}

/// One append's record: its events' wire JSON, one per line. Wire JSON never holds a raw line
/// break (a string's breaks are escaped and nothing is pretty-printed), so the lines split back
/// exactly.
fn pack(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut record = Vec::with_capacity(bodies.iter().map(|b| b.len() + 1).sum());
    for body in bodies {
        if !record.is_empty() {
            record.push(b'\n');
        }
        record.extend_from_slice(body);
    }
    record
}

/// Up to `limit` events of `session_id` whose places are in `from..to`, in order, from the
/// records of `events` (a line's place is its record's key plus its index; the record holding
/// `from` may start before it).
fn read_records(
    events: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    session_id: &str,
    from: u64,
    to: u64,
    limit: usize,
) -> Result<Vec<TraceEvent>, ChainStoreError> {
    let mut out = Vec::new();
    if from >= to || limit == 0 {
        return Ok(out);
    }
    let start = match events
        .range((session_id, 0)..=(session_id, from))
        .map_err(unavailable)?
        .next_back()
    {
        Some(entry) => entry.map_err(unavailable)?.0.value().1,
        None => from,
    };
    for entry in events
        .range((session_id, start)..(session_id, to))
        .map_err(unavailable)?
    {
        let (key, value) = entry.map_err(unavailable)?;
        let first = key.value().1;
        for (i, line) in value.value().split(|b| *b == b'\n').enumerate() {
            let sequence = first.saturating_add(i as u64);
            if sequence < from {
                continue;
            }
            if sequence >= to || out.len() == limit {
                return Ok(out);
            }
            // The event is returned as stored, whatever `sequence` it says: judging the chain
            // (a gap, a swap) is verification's job, and it must see what was stored.
            out.push(decode_event(session_id, sequence, line)?);
        }
    }
    Ok(out)
}

impl ChainStore for RedbStore {
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
        self.collector().queue(session_id, drafts, None, done);
    }

    fn read_range(
        &self,
        session_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        if from >= to {
            return Ok(Vec::new());
        }
        let txn = self.database().begin_read().map_err(unavailable)?;
        let events = txn.open_table(EVENTS).map_err(unavailable)?;
        read_records(&events, session_id, from, to, usize::MAX)
    }

    fn read_after(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        let from = match after {
            None => 0,
            Some(u64::MAX) => return Ok(Vec::new()),
            Some(n) => n + 1,
        };
        let txn = self.database().begin_read().map_err(unavailable)?;
        let events = txn.open_table(EVENTS).map_err(unavailable)?;
        read_records(&events, session_id, from, u64::MAX, limit)
    }

    fn session(&self, session_id: &str) -> Result<Option<SessionSummary>, ChainStoreError> {
        let txn = self.database().begin_read().map_err(unavailable)?;
        let heads = txn.open_table(HEADS).map_err(unavailable)?;
        let found = heads.get(session_id).map_err(unavailable)?;
        match found {
            None => Ok(None),
            Some(bytes) => Ok(Some(
                decode_head(session_id, bytes.value())?.summary(session_id.to_owned()),
            )),
        }
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, ChainStoreError> {
        let txn = self.database().begin_read().map_err(unavailable)?;
        let heads = txn.open_table(HEADS).map_err(unavailable)?;
        let mut out = Vec::new();
        for entry in heads.iter().map_err(unavailable)? {
            let (key, value) = entry.map_err(unavailable)?;
            let session_id = key.value().to_owned();
            let head = decode_head(&session_id, value.value())?;
            out.push(head.summary(session_id));
        }
        Ok(out)
    }
}

/// Removes `session_id`'s chain if its head is still `expected` (so a chain that grew is kept).
pub(crate) fn remove_chain(
    db: &Database,
    session_id: &str,
    expected: &ChainHead,
) -> Result<bool, ChainStoreError> {
    let mut txn = db.begin_write().map_err(unavailable)?;
    txn.set_durability(Durability::Immediate)
        .map_err(unavailable)?;
    {
        let mut heads = txn.open_table(HEADS).map_err(unavailable)?;
        let current = match heads.get(session_id).map_err(unavailable)? {
            Some(bytes) => decode_head(session_id, bytes.value())?,
            None => return Ok(false),
        };
        if current.next_sequence != expected.next_sequence
            || current.head_hash != expected.head_hash
        {
            return Ok(false);
        }
        heads.remove(session_id).map_err(unavailable)?;
        let mut events = txn.open_table(EVENTS).map_err(unavailable)?;
        events
            .retain_in((session_id, 0)..=(session_id, u64::MAX), |_, _| false)
            .map_err(unavailable)?;
    }
    super::carp::remove_session_records(&txn, session_id).map_err(unavailable)?;
    txn.commit().map_err(unavailable)?;
    Ok(true)
}
