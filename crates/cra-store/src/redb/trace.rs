//! TRACE chains in redb, with group commit.
//!
//! **Sealing** happens on the appender's thread. Each session has a slot (`super::heads`) holding
//! the head after every append of it queued so far. Under the slot's lock the appender checks the
//! chain rules against that head, seals its drafts onto it (clock reading, ids, hashes, the
//! stored JSON), moves the slot's head on and queues the sealed append, so a session's appends
//! are queued in the order they were sealed and sessions seal in parallel. A slot that does not
//! know its head reads it from the database when none of its appends is queued; while some are,
//! the append is queued as drafts for the committer to seal.
//!
//! **Committing** is one thread (`crate::collector`). It takes every append waiting in its queue
//! (up to `MAX_BATCH_APPENDS`) and writes them in one write transaction. It is the authority on
//! every chain: a sealed append is written only if the head it was sealed onto is the session's
//! head in that transaction (stored, or left by an earlier append of the batch), so whatever a
//! slot believed, nothing that does not link is ever stored. An append that does not link, or
//! whose resolve the committer refuses, is refused (`Unavailable`, nothing written: the caller may
//! send it again) and its slot forgets its head. The committer commits with
//! `Durability::Immediate` (redb fsyncs before `commit` returns) and only then answers each
//! caller, so one fsync covers every append that arrived while the previous one ran. If the
//! commit fails, every append of the batch is answered with the error, nothing of the batch is
//! stored, and the slots of its sessions forget their heads.
//!
//! Tables: `trace_events` maps `(session_id, sequence of an append's first event)` to the wire
//! JSON of that append's events, one per line (an append is one record, so a resolve's sixteen
//! events cost one B-tree insert, not sixteen; a record of one event is the event's JSON alone,
//! which is also how databases written before records held several events read), compressed
//! with LZ4 when it is large (`super::record`);
//! `trace_heads` maps `session_id` to its [`HeadRecord`] (JSON). The batch's events become the
//! transparency log's next leaves in the same transaction, in the order they are written
//! (`super::tlog`).
//!
//! A change of CARP state (`cra_carp::store::StateLog`: a resolve's request id, resolution and
//! approval, an approval's decision, or an execution's outcome with its lease released) may ride
//! with its events: the committer writes it in the same transaction just before the events, so
//! the change waits for the single writer once, with the batch, and the state and the events are
//! stored together or not at all. A chain that has ended refuses both. The appender refuses a
//! request id its session has used (stored, or on a resolve still queued) before sealing; the
//! committer checks again in its transaction, and decides an approval only if that transaction
//! reads it pending.

use std::collections::HashMap;
use std::sync::Arc;

use ::redb::{Database, Durability, ReadableTable, TableDefinition, TableHandle};
use cra_trace::store::{ChainStore, ChainStoreError, SessionSummary, check_batch};
use cra_trace::{ChainHead, EventDraft, PreparedDraft, TraceEvent};

use super::carp::EncodedChange;
use super::handle::DatabaseHandle;
use super::heads::{Slot, SlotState};
use super::tlog::{Edge, PartialTile};
use super::{RedbStore, backend};
use crate::chain::{HeadRecord, decode_event, decode_head, seal_all};
use crate::collector::{Answer, Reply, check_append, settle, stopped, wait_for};
use crate::encryption::Encryption;
use crate::tlog::NewLeaf;
use crate::{BackendError, StoreConfig};

pub(crate) const EVENTS: TableDefinition<'static, (&str, u64), &[u8]> =
    TableDefinition::new("trace_events");
pub(crate) const HEADS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("trace_heads");

fn unavailable(e: impl std::fmt::Display) -> ChainStoreError {
    ChainStoreError::Unavailable(format!("redb: {e}"))
}

/// Passes this area's tables to a rewrite (`super::rewrite`).
pub(crate) fn copy_tables(c: &mut super::rewrite::Copier<'_>) -> Result<(), BackendError> {
    c.copy(EVENTS)?;
    c.copy(HEADS)
}

/// Creates the TRACE tables so readers never meet a missing table.
pub(crate) fn create_tables(db: &Database) -> Result<(), BackendError> {
    let txn = db.begin_write().map_err(backend)?;
    txn.open_table(EVENTS).map_err(backend)?;
    txn.open_table(HEADS).map_err(backend)?;
    txn.commit().map_err(backend)
}

/// One append on its way to the committer.
pub(crate) struct Append {
    session_id: String,
    work: Work,
    /// A change of state, written in the same transaction just before the events. When it is
    /// a resolve whose request id turns out to be used, the append is answered with no events;
    /// when the store refuses it, with the refusal; either way nothing of it is written.
    state: Option<EncodedChange>,
    slot: Arc<Slot>,
    reply: Reply,
}

/// What the committer is to write.
enum Work {
    /// Events the appender sealed onto `base`, its slot's head then.
    Sealed {
        base: ChainHead,
        head: HeadRecord,
        events: Vec<TraceEvent>,
        record: Vec<u8>,
        /// The events' hashes as the log's leaf data (empty when the store keeps no log):
        /// decoded here, on the appender's thread, so that the committer only copies them.
        leaves: Vec<cra_tlog::Hash>,
    },
    /// Drafts for the committer to seal: the slot did not know its head while earlier appends of
    /// the session were queued.
    Drafts(Vec<PreparedDraft>),
}

/// What is left of an append once its work is taken: how to answer it and what to tell its slot.
struct Ticket {
    reply: Reply,
    slot: Arc<Slot>,
    state: Option<EncodedChange>,
}

impl RedbStore {
    /// Seals `drafts` onto `session_id`'s chain on this thread and queues them (see the module
    /// documentation); `done` is told the outcome once, when the append is durable or refused.
    /// With a resolve's `state`, a used request id is answered `Ok` with no events.
    pub(crate) fn queue_append(
        &self,
        session_id: &str,
        drafts: Vec<PreparedDraft>,
        state: Option<EncodedChange>,
        done: Reply,
    ) {
        if let Err(e) = check_append(session_id, drafts.len()) {
            return done(Err(e));
        }
        let slot = self.heads().slot(session_id);
        let request_id = state.as_ref().and_then(EncodedChange::request_id);
        let mut slot_state = slot.lock();
        let sealed = if state.as_ref().is_some_and(EncodedChange::refused_in_course) {
            // A change the committer refuses in the ordinary course (a decision on an approval
            // decided meanwhile, an outbox entry settled by another replica) would leave every
            // append sealed behind it unlinked ("send it again"); the committer seals it onto
            // the head it reads instead, and the appends behind it wait for that head.
            slot_state.head = None;
            Ok(Some(Work::Drafts(drafts)))
        } else {
            self.seal_onto_slot(&mut slot_state, session_id, drafts, request_id)
        };
        let work = match sealed {
            Ok(Some(work)) => work,
            Ok(None) => {
                drop(slot_state);
                return done(Ok(Vec::new()));
            }
            Err(e) => {
                drop(slot_state);
                return done(Err(e));
            }
        };
        if let Some(id) = request_id {
            slot_state.requests.push(id.to_owned());
        }
        slot_state.in_flight += 1;
        let append = Append {
            session_id: session_id.to_owned(),
            work,
            state,
            slot: slot.clone(),
            reply: done,
        };
        if let Err(append) = self.collector().send(append) {
            slot_state.in_flight -= 1;
            if append
                .state
                .as_ref()
                .and_then(EncodedChange::request_id)
                .is_some()
            {
                slot_state.requests.pop();
            }
            slot_state.head = None;
            drop(slot_state);
            (append.reply)(Err(stopped()));
        }
    }

    /// The work of an append under its slot's lock: sealed onto the slot's head when it is known
    /// (after the chain rules and, for a resolve, its `request_id` are checked: `Ok(None)` when
    /// the id is used), else the drafts.
    fn seal_onto_slot(
        &self,
        state: &mut SlotState,
        session_id: &str,
        drafts: Vec<PreparedDraft>,
        request_id: Option<&str>,
    ) -> Result<Option<Work>, ChainStoreError> {
        if state.head.is_none() && state.in_flight == 0 {
            // Nothing of the session is queued: the database has its whole chain.
            state.head = Some(read_head(self.handle(), session_id)?);
        }
        let Some(head) = &state.head else {
            return Ok(Some(Work::Drafts(drafts)));
        };
        check_batch(session_id, head.ended, &drafts)?;
        if let Some(r) = request_id
            && (state.requests.iter().any(|id| id == r)
                || super::carp::request_id_stored(self.handle(), session_id, r)
                    .map_err(unavailable)?)
        {
            return Ok(None);
        }
        let base = ChainHead {
            next_sequence: head.next_sequence,
            head_hash: head.head_hash.clone(),
        };
        let (head, events, bodies) = seal_all(self.config(), session_id, head.clone(), drafts)?;
        state.head = Some(head.clone());
        Ok(Some(Work::Sealed {
            base,
            head,
            leaves: leaf_data(self.config(), &events)?,
            record: pack(&self.config().encryption, &bodies)?,
            events,
        }))
    }
}

/// `session_id`'s head as stored (genesis when it has no chain).
fn read_head(db: &DatabaseHandle, session_id: &str) -> Result<HeadRecord, ChainStoreError> {
    let txn = db.begin_read().map_err(unavailable)?;
    let heads = txn.open_table(HEADS).map_err(unavailable)?;
    let found = heads.get(session_id).map_err(unavailable)?;
    match found {
        Some(bytes) => decode_head(session_id, bytes.value()),
        None => Ok(HeadRecord::genesis()),
    }
}

/// The refusal of a sealed append that no longer links.
fn moved(session_id: &str) -> ChainStoreError {
    ChainStoreError::Unavailable(format!(
        "session `{session_id}`'s chain changed while this append was queued, so nothing of it \
         was written; send it again"
    ))
}

/// Writes `batch` in one durable write transaction, then answers every append and tells each
/// slot what became of it.
///
/// A database a failed commit left refusing every transaction is reopened first; a commit that
/// fails marks it failed, one that succeeds clears the mark ([`super::handle`]).
pub(crate) fn commit_batch(
    db: &DatabaseHandle,
    config: &StoreConfig,
    partial: &PartialTile,
    batch: Vec<Append>,
) {
    if let Err(e) = db.reopen() {
        db.mark_failed(&e);
    }
    let (tickets, work): (Vec<Ticket>, Vec<(String, Work)>) = batch
        .into_iter()
        .map(|a| {
            let ticket = Ticket {
                reply: a.reply,
                slot: a.slot,
                state: a.state,
            };
            (ticket, (a.session_id, a.work))
        })
        .unzip();
    let mut answers: Vec<Answer> = vec![None; tickets.len()];
    // Sealed appends refused here: their slots' heads are wrong.
    let mut spoiled = vec![false; tickets.len()];
    let result = (|| -> Result<Option<Edge>, ChainStoreError> {
        // The batch's events in the order they are written: the log's new leaves.
        let mut leaves = Vec::new();
        let mut txn = db.begin_write().map_err(unavailable)?;
        txn.set_durability(Durability::Immediate)
            .map_err(unavailable)?;
        {
            let mut events = txn.open_table(EVENTS).map_err(unavailable)?;
            let mut heads = txn.open_table(HEADS).map_err(unavailable)?;
            let mut touched: HashMap<String, HeadRecord> = HashMap::new();
            // Opened at the batch's first change of state, then shared by every one of the batch.
            let mut state_tables: Option<super::carp::ResolveTables<'_>> = None;
            for (i, (session_id, work)) in work.into_iter().enumerate() {
                let head = match touched.get(&session_id) {
                    Some(head) => head.clone(),
                    None => match heads.get(session_id.as_str()).map_err(unavailable)? {
                        Some(bytes) => decode_head(&session_id, bytes.value())?,
                        None => HeadRecord::genesis(),
                    },
                };
                let was_sealed = matches!(work, Work::Sealed { .. });
                match &work {
                    Work::Sealed { base, .. } => {
                        if base.next_sequence != head.next_sequence
                            || base.head_hash != head.head_hash
                        {
                            answers[i] = Some(Err(moved(&session_id)));
                            spoiled[i] = true;
                            continue;
                        }
                    }
                    Work::Drafts(drafts) => {
                        if let Err(e) = check_batch(&session_id, head.ended, drafts) {
                            answers[i] = Some(Err(e));
                            continue;
                        }
                    }
                }
                if let Some(change) = &tickets[i].state {
                    let tables = match &mut state_tables {
                        Some(tables) => tables,
                        None => state_tables.insert(
                            super::carp::ResolveTables::open(&txn, &config.encryption)
                                .map_err(unavailable)?,
                        ),
                    };
                    match super::carp::apply_change(&txn, tables, change).map_err(unavailable)? {
                        Ok(true) => {}
                        // A used request id, or a refusal: neither the state nor the events are
                        // written.
                        refused => {
                            answers[i] = Some(refused.map(|_| Vec::new()));
                            spoiled[i] = was_sealed;
                            continue;
                        }
                    }
                }
                let (head, first, record, sealed, data) = match work {
                    Work::Sealed {
                        head,
                        events,
                        record,
                        leaves,
                        ..
                    } => (head, base_sequence(&events), record, events, leaves),
                    Work::Drafts(drafts) => {
                        let (head, events, bodies) = seal_all(config, &session_id, head, drafts)?;
                        let data = leaf_data(config, &events)?;
                        (
                            head,
                            base_sequence(&events),
                            pack(&config.encryption, &bodies)?,
                            events,
                            data,
                        )
                    }
                };
                events
                    .insert((session_id.as_str(), first), record.as_slice())
                    .map_err(unavailable)?;
                if !data.is_empty() {
                    let session: Arc<str> = session_id.as_str().into();
                    leaves.extend((first..).zip(data).map(|(sequence, event_hash)| NewLeaf {
                        event_hash,
                        session_id: session.clone(),
                        sequence,
                    }));
                }
                touched.insert(session_id, head);
                answers[i] = Some(Ok(sealed));
            }
            for (session_id, head) in &touched {
                let bytes = serde_json::to_vec(head).map_err(unavailable)?;
                heads
                    .insert(session_id.as_str(), bytes.as_slice())
                    .map_err(unavailable)?;
            }
        }
        let edge = if config.log_appends {
            super::tlog::append_counted(&txn, &config.encryption, &leaves, partial)
                .map_err(unavailable)?
        } else {
            None
        };
        txn.commit().map_err(unavailable)?;
        Ok(edge)
    })();
    let result = result.map(|edge| edge.map_or((), |edge| partial.keep(edge)));
    match &result {
        Ok(()) => {
            db.clear();
            crate::fault_point!("trace.append.committed");
        }
        Err(e) => db.mark_failed(&e.to_string()),
    }
    for ((ticket, answer), spoiled) in tickets.into_iter().zip(answers).zip(spoiled) {
        {
            let mut state = ticket.slot.lock();
            state.in_flight = state.in_flight.saturating_sub(1);
            if let Some(r) = ticket.state.as_ref().and_then(EncodedChange::request_id)
                && let Some(at) = state.requests.iter().position(|id| id == r)
            {
                state.requests.swap_remove(at);
            }
            if spoiled || result.is_err() {
                state.head = None;
            }
        }
        (ticket.reply)(settle(&result, answer));
    }
}

/// The log's leaf data of `events` (their hashes), or nothing when the store keeps no log.
fn leaf_data(
    config: &StoreConfig,
    events: &[TraceEvent],
) -> Result<Vec<cra_tlog::Hash>, ChainStoreError> {
    if !config.log_appends {
        return Ok(Vec::new());
    }
    events
        .iter()
        .map(|e| NewLeaf::data_of(e).map_err(unavailable))
        .collect()
}

/// The sequence of an append's first event (every append has one).
fn base_sequence(events: &[TraceEvent]) -> u64 {
    events.first().map_or(0, |e| e.sequence)
}

/// One append's record: its events' wire JSON, one per line, compressed when that pays and
/// encrypted when a key is configured (`super::record::store`). Wire JSON never holds a raw line
/// break (a string's breaks are escaped and nothing is pretty-printed), so the lines split back
/// exactly.
fn pack(enc: &Encryption, bodies: &[Vec<u8>]) -> Result<Vec<u8>, ChainStoreError> {
    let mut text = Vec::with_capacity(bodies.iter().map(|b| b.len() + 1).sum());
    for body in bodies {
        if !text.is_empty() {
            text.push(b'\n');
        }
        text.extend_from_slice(body);
    }
    super::record::store(enc, EVENTS.name(), text).map_err(unavailable)
}

/// Up to `limit` events of `session_id` whose places are in `from..to`, in order, from the
/// records of `events` (a line's place is its record's key plus its index; the record holding
/// `from` may start before it).
fn read_records(
    enc: &Encryption,
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
        let text = super::record::load(enc, EVENTS.name(), value.value()).map_err(|reason| {
            ChainStoreError::Corrupt {
                session_id: session_id.to_owned(),
                sequence: first,
                reason: reason.to_string(),
            }
        })?;
        for (i, line) in text.split(|b| *b == b'\n').enumerate() {
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
        wait_for(|done| self.append_then(session_id, drafts, done))
    }

    fn append_then(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
        done: cra_trace::store::AppendDone,
    ) {
        let drafts = drafts.into_iter().map(PreparedDraft::new).collect();
        self.queue_append(session_id, drafts, None, done);
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
        let txn = self.handle().begin_read().map_err(unavailable)?;
        let events = txn.open_table(EVENTS).map_err(unavailable)?;
        read_records(
            &self.config().encryption,
            &events,
            session_id,
            from,
            to,
            usize::MAX,
        )
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
        let txn = self.handle().begin_read().map_err(unavailable)?;
        let events = txn.open_table(EVENTS).map_err(unavailable)?;
        read_records(
            &self.config().encryption,
            &events,
            session_id,
            from,
            u64::MAX,
            limit,
        )
    }

    fn session(&self, session_id: &str) -> Result<Option<SessionSummary>, ChainStoreError> {
        let txn = self.handle().begin_read().map_err(unavailable)?;
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
        let txn = self.handle().begin_read().map_err(unavailable)?;
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
/// The session's slot is held meanwhile, so no append of it is sealed during the removal, and
/// forgets its head after.
pub(crate) fn remove_chain(
    store: &RedbStore,
    session_id: &str,
    expected: &ChainHead,
) -> Result<bool, ChainStoreError> {
    let slot = store.heads().slot(session_id);
    let mut state = slot.lock();
    let removed = remove_stored_chain(store, session_id, expected);
    state.head = None;
    removed
}

fn remove_stored_chain(
    store: &RedbStore,
    session_id: &str,
    expected: &ChainHead,
) -> Result<bool, ChainStoreError> {
    let mut txn = store.handle().begin_write().map_err(unavailable)?;
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
        super::tlog::retire_chain(&txn, &store.config().encryption, session_id)
            .map_err(unavailable)?;
        let mut events = txn.open_table(EVENTS).map_err(unavailable)?;
        events
            .retain_in((session_id, 0)..=(session_id, u64::MAX), |_, _| false)
            .map_err(unavailable)?;
    }
    super::carp::remove_session_records(&txn, &store.config().encryption, session_id)
        .map_err(unavailable)?;
    txn.commit().map_err(unavailable)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    //! The committer's guard and the drafts fallback, driven directly: in normal use they only
    //! run when a commit fails or another writer changes a chain, which a test cannot time.

    use super::*;
    use serde_json::json;

    /// The session (a UUID, as TRACE §4.2 requires of a verifiable chain).
    const S: &str = "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71";

    fn note(n: u64) -> PreparedDraft {
        PreparedDraft::new(EventDraft {
            trace_id: "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70".into(),
            span_id: "0190f5d2-8a4e-7b3c-9d1e-100000000001".into(),
            parent_span_id: None,
            event_type: "test.note".into(),
            payload: json!({ "n": n }),
        })
    }

    fn verifies(store: &RedbStore, session: &str, len: usize) {
        let events = store.read_range(session, 0, u64::MAX).unwrap();
        assert_eq!(events.len(), len);
        let report = cra_trace::verify::verify_events(&events, true);
        assert!(report.is_valid(), "{:?}", report.first_error());
    }

    /// A sealed append whose base is no longer the chain's head is refused with nothing written,
    /// its slot forgets its head, and the session's next append links to the stored chain.
    #[test]
    fn a_sealed_append_that_no_longer_links_is_refused_and_its_slot_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        store.append(S, vec![note(0).draft]).unwrap();
        let first = store.append(S, vec![note(1).draft]).unwrap();
        assert_eq!(first[0].sequence, 1);

        // Sealed onto genesis, as a slot that missed the two appends above would have.
        let (head, events, bodies) =
            seal_all(store.config(), S, HeadRecord::genesis(), vec![note(9)]).unwrap();
        let slot = store.heads().slot(S);
        slot.lock().in_flight += 1;
        let answer = wait_for(|reply| {
            commit_batch(
                store.handle(),
                store.config(),
                &PartialTile::default(),
                vec![Append {
                    session_id: S.into(),
                    work: Work::Sealed {
                        base: ChainHead::genesis(),
                        head,
                        leaves: leaf_data(store.config(), &events).unwrap(),
                        events,
                        record: pack(&store.config().encryption, &bodies).unwrap(),
                    },
                    state: None,
                    slot: slot.clone(),
                    reply,
                }],
            );
        });
        let refused = answer.unwrap_err();
        assert!(refused.to_string().contains("send it again"), "{refused}");
        {
            let state = slot.lock();
            assert!(state.head.is_none());
            assert_eq!(state.in_flight, 0);
        }
        verifies(&store, S, 2);
        let next = store.append(S, vec![note(2).draft]).unwrap();
        assert_eq!(next[0].sequence, 2);
        verifies(&store, S, 3);
    }

    /// While a slot does not know its head and appends of the session are queued, an append is
    /// queued as drafts and the committer seals it onto the stored chain; once nothing is
    /// queued, the slot reads its head again and appenders seal.
    #[test]
    fn a_slot_without_a_head_queues_drafts_for_the_committer() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        store.append(S, vec![note(0).draft, note(1).draft]).unwrap();
        let slot = store.heads().slot(S);
        {
            let mut state = slot.lock();
            state.head = None;
            // As if an append of the session were still queued.
            state.in_flight += 1;
        }
        let sealed = store.append(S, vec![note(2).draft]).unwrap();
        assert_eq!(sealed[0].sequence, 2);
        {
            let mut state = slot.lock();
            assert!(
                state.head.is_none(),
                "sealed by the committer, not the slot"
            );
            assert_eq!(state.in_flight, 1);
            state.in_flight -= 1;
        }
        let sealed = store.append(S, vec![note(3).draft]).unwrap();
        assert_eq!(sealed[0].sequence, 3);
        assert_eq!(slot.lock().head.as_ref().map(|h| h.next_sequence), Some(4));
        verifies(&store, S, 4);
    }
}
