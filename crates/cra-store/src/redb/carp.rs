//! CARP state in redb (`cra_carp::store::CarpStore`): sessions, request ids, resolutions,
//! executions with idempotency keys, rate and budget counters, approvals.
//!
//! Every write is one redb write transaction, committed with `Durability::Immediate`, or without
//! fsync under [`crate::StateDurability::WithNextAppend`] (the collector's next durable commit
//! persists it); redb runs
//! write transactions one at a time, so insert-if-absent and the check-then-record of
//! `try_consume` are atomic without further locking. A call that changes nothing aborts its
//! transaction (no fsync). Records are stored as JSON.
//!
//! Tables: `carp_sessions` (id -> record), `carp_request_ids` ((session, request) -> ()),
//! `carp_resolutions` (id -> record), `carp_executions` (id -> record), `carp_execution_keys`
//! ((session, key) -> execution id), `carp_rate` ((policy, scope, at_us) -> executions at that
//! instant), `carp_budget` ((policy, scope) -> units spent), `carp_approvals` (id -> record),
//! `carp_pending` (approval id -> ()) listing the pending ones, `carp_leases` (execution id ->
//! lease) of executions running (added later: opening an older data directory creates it empty),
//! `carp_sessions_by_agent` ((agent, session) -> ()), the owner index `GET /v1/traces` reads for
//! an agent (added later: opening an older data directory builds it from `carp_sessions`; kept
//! only while records are stored in the clear, since it holds agent ids), `carp_open_sessions`
//! (SHA-256 of an agent id -> its open sessions), the counter of the open-sessions quota,
//! written with every start and end (added in data format 2: opening an older data directory
//! counts the open sessions of `carp_sessions`).
//!
//! An execution's idempotency key is claimed with its lease (`carp_execution_keys` names the
//! execution before its record exists); a key naming no record is in flight while its lease
//! lives.

use ::redb::{
    Database, Durability, ReadableTable, ReadableTableMetadata, Table, TableDefinition,
    TableHandle, WriteTransaction,
};
use cra_carp::eval::unix_micros;
use cra_carp::store::{
    ApprovalDecision, ApprovalRecord, ApprovalStatus, CarpStore, CarpStoreError as CarpError,
    Charge, ChargeKind, ClaimOutcome, ConsumeOutcome, DecisionRecord, ExecutionLease,
    ExecutionRecord, Recorded, SessionEnd, SessionRecord, Settlement, StateChange,
    StoredResolution, open_sessions_key,
};
use cra_trace::store::ChainStoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::RedbStore;
use crate::encryption::Encryption;

pub(crate) const SESSIONS: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new("carp_sessions");
pub(crate) const REQUEST_IDS: TableDefinition<'static, (&str, &str), ()> =
    TableDefinition::new("carp_request_ids");
pub(crate) const RESOLUTIONS: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new("carp_resolutions");
pub(crate) const EXECUTIONS: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new("carp_executions");
const EXECUTION_KEYS: TableDefinition<'static, (&str, &str), &str> =
    TableDefinition::new("carp_execution_keys");
pub(crate) const RATE: TableDefinition<'static, (&str, &str, i64), u64> =
    TableDefinition::new("carp_rate");
pub(crate) const BUDGET: TableDefinition<'static, (&str, &str), u64> =
    TableDefinition::new("carp_budget");
pub(crate) const APPROVALS: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new("carp_approvals");
const PENDING: TableDefinition<'static, &str, ()> = TableDefinition::new("carp_pending");
pub(crate) const LEASES: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new("carp_leases");
const SESSIONS_BY_AGENT: TableDefinition<'static, (&str, &str), ()> =
    TableDefinition::new("carp_sessions_by_agent");
pub(crate) const OPEN_SESSIONS: TableDefinition<'static, &str, u64> =
    TableDefinition::new("carp_open_sessions");

fn be(e: impl std::fmt::Display) -> CarpError {
    CarpError::Backend(format!(
        "redb: {e}; check the data directory's disk and permissions"
    ))
}

type RecordTable = TableDefinition<'static, &'static str, &'static [u8]>;

/// The tables holding CARP records (each value a record's stored form, re-encrypted by
/// `RedbStore::reencrypt`); the other CARP tables hold keys and counters.
pub(super) const RECORDS: [RecordTable; 5] = [SESSIONS, RESOLUTIONS, EXECUTIONS, APPROVALS, LEASES];

/// A record's stored form in `table`: its JSON, compressed when large and encrypted when a key
/// is configured (`super::record::store`).
fn encode<T: Serialize>(
    enc: &Encryption,
    table: RecordTable,
    value: &T,
) -> Result<Vec<u8>, CarpError> {
    let json =
        serde_json::to_vec(value).map_err(|e| CarpError::Backend(format!("cannot encode: {e}")))?;
    super::record::store(enc, table.name(), json)
        .map_err(|e| CarpError::Backend(format!("cannot encode: {e}")))
}

fn decode<T: DeserializeOwned>(
    enc: &Encryption,
    table: RecordTable,
    bytes: &[u8],
) -> Result<T, CarpError> {
    let what = table.name();
    let text = super::record::load(enc, what, bytes)
        .map_err(|e| CarpError::Corrupt(format!("{what}: {e}")))?;
    serde_json::from_slice(&text).map_err(|e| CarpError::Corrupt(format!("{what}: {e}")))
}

/// Passes this area's tables to a rewrite (`super::rewrite`).
pub(crate) fn copy_tables(c: &mut super::rewrite::Copier<'_>) -> Result<(), crate::BackendError> {
    for table in RECORDS {
        c.copy(table)?;
    }
    c.copy(REQUEST_IDS)?;
    c.copy(EXECUTION_KEYS)?;
    c.copy(RATE)?;
    c.copy(BUDGET)?;
    c.copy(PENDING)?;
    c.copy(SESSIONS_BY_AGENT)?;
    c.copy(OPEN_SESSIONS)
}

/// Creates the CARP tables so readers never meet a missing table, and builds the owner index of
/// a data directory an earlier version wrote (sessions, none indexed), in the same transaction.
pub(crate) fn create_tables(db: &Database, enc: &Encryption) -> Result<(), crate::BackendError> {
    let txn = db.begin_write().map_err(super::backend)?;
    index_sessions_by_agent(&txn, enc).map_err(super::backend)?;
    count_open_sessions(&txn, enc).map_err(super::backend)?;
    txn.open_table(SESSIONS).map_err(super::backend)?;
    txn.open_table(REQUEST_IDS).map_err(super::backend)?;
    txn.open_table(RESOLUTIONS).map_err(super::backend)?;
    txn.open_table(EXECUTIONS).map_err(super::backend)?;
    txn.open_table(EXECUTION_KEYS).map_err(super::backend)?;
    txn.open_table(RATE).map_err(super::backend)?;
    txn.open_table(BUDGET).map_err(super::backend)?;
    txn.open_table(APPROVALS).map_err(super::backend)?;
    txn.open_table(PENDING).map_err(super::backend)?;
    txn.open_table(LEASES).map_err(super::backend)?;
    txn.commit().map_err(super::backend)
}

/// The owner index [`create_tables`] will build, as read from `txn` (`super::upgrade::plan`).
pub(crate) fn pending(
    txn: &::redb::ReadTransaction,
    steps: &mut Vec<crate::upgrade::UpgradeStep>,
) -> Result<(), crate::BackendError> {
    let sessions = super::upgrade::rows(txn, SESSIONS)?;
    if sessions > 0 && super::upgrade::rows(txn, SESSIONS_BY_AGENT)? == 0 {
        steps.push(crate::upgrade::UpgradeStep::new(
            "carp.owner_index",
            format!(
                "index {sessions} sessions by their agent (a store whose records are encrypted \
                 keeps no such index)"
            ),
        ));
    }
    if sessions > 0 && !has_table(txn, OPEN_SESSIONS.name())? {
        steps.push(crate::upgrade::UpgradeStep::new(
            "carp.open_sessions",
            format!("count the open sessions of each agent among {sessions} sessions"),
        ));
    }
    Ok(())
}

/// Whether `txn`'s database holds the table `name`.
fn has_table(txn: &::redb::ReadTransaction, name: &str) -> Result<bool, crate::BackendError> {
    Ok(txn
        .list_tables()
        .map_err(super::backend)?
        .any(|t| t.name() == name))
}

/// Counts each agent's open sessions into `carp_open_sessions` when the table is new (a data
/// directory an earlier version wrote): from then on every start and end keeps the counts.
fn count_open_sessions(txn: &WriteTransaction, enc: &Encryption) -> Result<(), CarpError> {
    if txn
        .list_tables()
        .map_err(be)?
        .any(|t| t.name() == OPEN_SESSIONS.name())
    {
        return Ok(());
    }
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for row in txn.open_table(SESSIONS).map_err(be)?.iter().map_err(be)? {
        let record: SessionRecord = decode(enc, SESSIONS, row.map_err(be)?.1.value())?;
        if record.is_active() {
            *counts
                .entry(open_sessions_key(&record.agent_id))
                .or_default() += 1;
        }
    }
    let mut table = txn.open_table(OPEN_SESSIONS).map_err(be)?;
    for (key, open) in &counts {
        table.insert(key.as_str(), open).map_err(be)?;
    }
    Ok(())
}

/// Adds `delta` (1 or -1) to the open sessions of `agent_id`, a count of 0 removed.
fn count_open(txn: &WriteTransaction, agent_id: &str, delta: i64) -> Result<(), CarpError> {
    let key = open_sessions_key(agent_id);
    let mut table = txn.open_table(OPEN_SESSIONS).map_err(be)?;
    let now = table
        .get(key.as_str())
        .map_err(be)?
        .map_or(0, |v| v.value());
    let next = now.saturating_add_signed(delta);
    if next == 0 {
        table.remove(key.as_str()).map_err(be)?;
    } else {
        table.insert(key.as_str(), next).map_err(be)?;
    }
    Ok(())
}

/// The open sessions of `agent_id` as `table` counts them.
fn open_count(
    table: &impl ReadableTable<&'static str, u64>,
    agent_id: &str,
) -> Result<u64, CarpError> {
    let key = open_sessions_key(agent_id);
    Ok(table
        .get(key.as_str())
        .map_err(be)?
        .map_or(0, |v| v.value()))
}

/// Fills `carp_sessions_by_agent` from `carp_sessions` when it is empty and they are not. Every
/// session has exactly one index entry, written with it, so an empty index beside sessions means
/// a directory from before the index. A store whose records are encrypted keeps no index (it
/// would hold agent ids in the clear): one left from before a key was configured is emptied.
fn index_sessions_by_agent(txn: &WriteTransaction, enc: &Encryption) -> Result<(), CarpError> {
    let mut index = txn.open_table(SESSIONS_BY_AGENT).map_err(be)?;
    if enc.current().is_some() {
        index.retain(|_, ()| false).map_err(be)?;
        return Ok(());
    }
    let sessions = txn.open_table(SESSIONS).map_err(be)?;
    if !index.is_empty().map_err(be)? || sessions.is_empty().map_err(be)? {
        return Ok(());
    }
    for row in sessions.iter().map_err(be)? {
        let (id, bytes) = row.map_err(be)?;
        let record: SessionRecord = decode(enc, SESSIONS, bytes.value())?;
        index
            .insert((record.agent_id.as_str(), id.value()), ())
            .map_err(be)?;
    }
    Ok(())
}

impl RedbStore {
    /// Runs `f` in a write transaction (durable as the store's [`crate::StateDurability`] says);
    /// commits when it returns `(value, true)`, aborts (nothing changed) on `(value, false)` or an
    /// error.
    fn carp_write<T>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<(T, bool), CarpError>,
    ) -> Result<T, CarpError> {
        let mut txn = self.handle().begin_write().map_err(be)?;
        let durability = match self.config().state_durability {
            crate::StateDurability::Immediate => Durability::Immediate,
            crate::StateDurability::WithNextAppend => Durability::None,
        };
        txn.set_durability(durability).map_err(be)?;
        let (value, changed) = f(&txn)?;
        if changed {
            txn.commit().map_err(be)?;
        } else {
            txn.abort().map_err(be)?;
        }
        Ok(value)
    }

    fn carp_get<T: DeserializeOwned>(
        &self,
        table: TableDefinition<'static, &str, &[u8]>,
        id: &str,
    ) -> Result<Option<T>, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let t = txn.open_table(table).map_err(be)?;
        let found = t.get(id).map_err(be)?;
        found
            .map(|v| decode(&self.config().encryption, table, v.value()))
            .transpose()
    }

    fn carp_insert_new<T: Serialize>(
        &self,
        table: TableDefinition<'static, &str, &[u8]>,
        what: &'static str,
        id: &str,
        value: &T,
        also: impl FnOnce(&WriteTransaction) -> Result<(), CarpError>,
    ) -> Result<(), CarpError> {
        let bytes = encode(&self.config().encryption, table, value)?;
        self.carp_write(|txn| {
            insert_new_in(txn, table, what, id, &bytes)?;
            also(txn)?;
            Ok(((), true))
        })
    }
}

/// A resolve's state, encoded off the writer's thread so that the write transaction only
/// inserts bytes.
pub(crate) struct EncodedResolve {
    session_id: String,
    request_id: String,
    /// `(resolution id, record)`; `None` records the request id alone (a request an earlier
    /// resolution answers again).
    resolution: Option<(String, Vec<u8>)>,
}

impl EncodedResolve {
    pub(crate) fn new(
        enc: &Encryption,
        session_id: &str,
        request_id: &str,
        resolution: Option<&StoredResolution>,
    ) -> Result<Self, CarpError> {
        Ok(Self {
            session_id: session_id.to_owned(),
            request_id: request_id.to_owned(),
            resolution: resolution
                .map(|r| {
                    encode(enc, RESOLUTIONS, r)
                        .map(|bytes| (r.resolution.resolution_id.clone(), bytes))
                })
                .transpose()?,
        })
    }
}

impl EncodedResolve {
    /// The request id the resolve answers.
    pub(crate) fn request_id(&self) -> &str {
        &self.request_id
    }
}

/// Whether `session_id` has already used `request_id`, as stored.
pub(crate) fn request_id_stored(
    db: &super::handle::DatabaseHandle,
    session_id: &str,
    request_id: &str,
) -> Result<bool, CarpError> {
    let txn = db.begin_read().map_err(be)?;
    let t = txn.open_table(REQUEST_IDS).map_err(be)?;
    Ok(t.get((session_id, request_id)).map_err(be)?.is_some())
}

/// Writes a resolve's state in `txn`: its request id and its resolution. Returns `false` and
/// writes nothing when the session has already seen the request id;
/// [`CarpError::AlreadyExists`] (nothing written) when the resolution id is taken.
/// Everything is checked before anything is written, so a refusal leaves `txn` as it was.
pub(crate) fn apply_resolve(
    t: &mut ResolveTables<'_>,
    r: &EncodedResolve,
) -> Result<bool, CarpError> {
    let key = (r.session_id.as_str(), r.request_id.as_str());
    if t.ids.get(key).map_err(be)?.is_some() {
        return Ok(false);
    }
    if let Some((id, _)) = &r.resolution
        && t.resolutions.get(id.as_str()).map_err(be)?.is_some()
    {
        return Err(CarpError::AlreadyExists {
            what: "resolution",
            id: id.clone(),
        });
    }
    t.ids.insert(key, ()).map_err(be)?;
    if let Some((id, bytes)) = &r.resolution {
        t.resolutions
            .insert(id.as_str(), bytes.as_slice())
            .map_err(be)?;
    }
    Ok(true)
}

/// The tables a resolve's state is written to, opened once per write transaction: the
/// committer applies every resolve of a batch through one set (in redb, opening a table and
/// closing it again writes its root back each time).
pub(crate) struct ResolveTables<'txn> {
    enc: &'txn Encryption,
    ids: Table<'txn, (&'static str, &'static str), ()>,
    resolutions: Table<'txn, &'static str, &'static [u8]>,
    approvals: Table<'txn, &'static str, &'static [u8]>,
    pending: Table<'txn, &'static str, ()>,
}

impl<'txn> ResolveTables<'txn> {
    /// Opens the tables in `txn`.
    pub(crate) fn open(
        txn: &'txn WriteTransaction,
        enc: &'txn Encryption,
    ) -> Result<Self, CarpError> {
        Ok(Self {
            enc,
            ids: txn.open_table(REQUEST_IDS).map_err(be)?,
            resolutions: txn.open_table(RESOLUTIONS).map_err(be)?,
            approvals: txn.open_table(APPROVALS).map_err(be)?,
            pending: txn.open_table(PENDING).map_err(be)?,
        })
    }
}

impl cra_carp::store::StateLog for RedbStore {
    fn record_and_append_then(
        &self,
        change: StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
        done: cra_carp::store::StateDone,
    ) {
        let session_id = change.session_id().to_owned();
        let enc = &self.config().encryption;
        let encoded = match change {
            StateChange::Resolve(record) => match EncodedResolve::new(
                enc,
                &record.session_id,
                &record.request_id,
                record.resolution.as_ref(),
            ) {
                Ok(e) => EncodedChange::Resolve(e),
                Err(e) => return done(Err(e.into())),
            },
            StateChange::Decide(d) => EncodedChange::Decide(d),
            StateChange::Settle(s) => EncodedChange::Settle(s),
            StateChange::Execute(e) => match encode(enc, EXECUTIONS, &e) {
                Ok(bytes) => EncodedChange::Execute(Box::new(e), bytes),
                Err(err) => return done(Err(err.into())),
            },
            StateChange::Open(a) => match encode(enc, APPROVALS, &a) {
                Ok(bytes) => EncodedChange::Open(a.approval_id, bytes),
                Err(err) => return done(Err(err.into())),
            },
            StateChange::Start(start) => match encode(enc, SESSIONS, &start.record) {
                Ok(bytes) => EncodedChange::Start(Box::new(start.record), start.max_open, bytes),
                Err(err) => return done(Err(err.into())),
            },
            StateChange::End(e) => EncodedChange::End(e),
        };
        self.queue_append(
            &session_id,
            drafts,
            Some(encoded),
            // The committer answers a used request id with no events: nothing was written.
            Box::new(move |outcome| {
                done(outcome.map_err(Into::into).map(|events| {
                    if events.is_empty() {
                        Recorded::Duplicate
                    } else {
                        Recorded::Appended(events)
                    }
                }));
            }),
        );
    }
}

/// A change of state riding with an append, written by the committer in the append's
/// transaction just before its events.
pub(crate) enum EncodedChange {
    /// A resolve's state, encoded on the appender's thread.
    Resolve(EncodedResolve),
    /// A decision, applied to the approval as the transaction reads it.
    Decide(DecisionRecord),
    /// An execution's outcome and its JSON, encoded on the appender's thread.
    Execute(Box<ExecutionRecord>, Vec<u8>),
    /// An outbox entry removed as its events are appended.
    Settle(Settlement),
    /// A pending approval opened by an execute: its id and its JSON.
    Open(String, Vec<u8>),
    /// A session's record, its agent's open-sessions quota and its JSON, created with the
    /// events opening its chain.
    Start(Box<SessionRecord>, Option<u64>, Vec<u8>),
    /// A session's end, recorded with its `session.ended`.
    End(SessionEnd),
}

impl EncodedChange {
    /// The request id of a resolve (the appender refuses one its session has used).
    pub(crate) fn request_id(&self) -> Option<&str> {
        match self {
            Self::Resolve(r) => Some(r.request_id()),
            Self::Decide(_)
            | Self::Execute(..)
            | Self::Settle(_)
            | Self::Open(..)
            | Self::Start(..)
            | Self::End(_) => None,
        }
    }

    /// Whether the committer refuses this change in the ordinary course (a decision on an
    /// approval decided meanwhile, an outbox entry another replica settled), not only on a
    /// bug's trace: its drafts are sealed by the committer onto the head it reads, so a refusal
    /// leaves no append behind it sealed onto events that were never written.
    pub(crate) fn refused_in_course(&self) -> bool {
        matches!(
            self,
            Self::Decide(_) | Self::Settle(_) | Self::Open(..) | Self::Start(..) | Self::End(_)
        )
    }
}

/// Writes `change` in the committer's transaction `txn`, resolves and decisions through the
/// tables `t` holds open there. `Ok(Ok(true))`: written; `Ok(Ok(false))`: a resolve whose
/// request id was used, nothing written; `Ok(Err(refusal))`: refused, nothing written; `Err`:
/// the transaction failed.
pub(crate) fn apply_change(
    txn: &WriteTransaction,
    t: &mut ResolveTables<'_>,
    change: &EncodedChange,
) -> Result<Result<bool, ChainStoreError>, CarpError> {
    match change {
        EncodedChange::Execute(e, bytes) => apply_execution(txn, t.enc, e, bytes),
        EncodedChange::Resolve(r) => match apply_resolve(t, r) {
            Ok(fresh) => Ok(Ok(fresh)),
            Err(e @ CarpError::AlreadyExists { .. }) => {
                Ok(Err(ChainStoreError::Unavailable(format!("redb: {e}"))))
            }
            Err(e) => Err(e),
        },
        EncodedChange::Decide(d) => apply_decision(t, d),
        EncodedChange::Settle(s) => apply_settlement(txn, s),
        EncodedChange::Open(id, bytes) => apply_open(t, id, bytes),
        EncodedChange::Start(r, max_open, bytes) => apply_start(txn, t.enc, r, *max_open, bytes),
        EncodedChange::End(e) => apply_end(txn, t.enc, e),
    }
}

/// Creates a session's record; refused, writing nothing, when its id is taken or its agent
/// has `max_open` sessions open already.
fn apply_start(
    txn: &WriteTransaction,
    enc: &Encryption,
    r: &SessionRecord,
    max_open: Option<u64>,
    bytes: &[u8],
) -> Result<Result<bool, ChainStoreError>, CarpError> {
    if let Some(max) = max_open
        && open_count(&txn.open_table(OPEN_SESSIONS).map_err(be)?, &r.agent_id)? >= max
    {
        return Ok(Err(cra_carp::store::open_sessions_exceeded(
            &r.agent_id,
            max,
        )));
    }
    match create_session_in(txn, enc, r, bytes) {
        Ok(()) => Ok(Ok(true)),
        Err(CarpError::AlreadyExists { .. }) => {
            Ok(Err(cra_carp::store::started_before(&r.session_id)))
        }
        Err(e) => Err(e),
    }
}

/// Marks a session ended; refused, writing nothing, while one of its executions holds a lease
/// (leases are few: only executions running now), or when the session has no record.
fn apply_end(
    txn: &WriteTransaction,
    enc: &Encryption,
    e: &SessionEnd,
) -> Result<Result<bool, ChainStoreError>, CarpError> {
    for row in txn.open_table(LEASES).map_err(be)?.iter().map_err(be)? {
        let lease: ExecutionLease = decode(enc, LEASES, row.map_err(be)?.1.value())?;
        if lease.session_id == e.session_id {
            return Ok(Err(e.execution_in_progress(&lease.execution_id)));
        }
    }
    Ok(
        match end_session_in(txn, enc, &e.session_id, &e.ended_at)? {
            Some(_) => Ok(true),
            None => Err(e.not_found()),
        },
    )
}

/// Stores a new session's record, `bytes` its encoding, and its owner index entry (kept only
/// without a storage key: the index holds agent ids in the clear); [`CarpError::AlreadyExists`]
/// when its id is taken.
fn create_session_in(
    txn: &WriteTransaction,
    enc: &Encryption,
    r: &SessionRecord,
    bytes: &[u8],
) -> Result<(), CarpError> {
    insert_new_in(txn, SESSIONS, "session", &r.session_id, bytes)?;
    count_open(txn, &r.agent_id, 1)?;
    if enc.current().is_none() {
        txn.open_table(SESSIONS_BY_AGENT)
            .map_err(be)?
            .insert((r.agent_id.as_str(), r.session_id.as_str()), ())
            .map_err(be)?;
    }
    Ok(())
}

/// Marks session `session_id` ended at `ended_at` in `txn`, a record already ended left as it
/// is. Returns the record and whether it was written; `None` when there is no such session.
fn end_session_in(
    txn: &WriteTransaction,
    enc: &Encryption,
    session_id: &str,
    ended_at: &str,
) -> Result<Option<(SessionRecord, bool)>, CarpError> {
    let mut t = txn.open_table(SESSIONS).map_err(be)?;
    let found: Option<SessionRecord> = match t.get(session_id).map_err(be)? {
        Some(bytes) => Some(decode(enc, SESSIONS, bytes.value())?),
        None => None,
    };
    let Some(mut record) = found else {
        return Ok(None);
    };
    if record.ended_at.is_some() {
        return Ok(Some((record, false)));
    }
    record.ended_at = Some(ended_at.to_owned());
    t.insert(session_id, encode(enc, SESSIONS, &record)?.as_slice())
        .map_err(be)?;
    drop(t);
    count_open(txn, &record.agent_id, -1)?;
    Ok(Some((record, true)))
}

/// Opens a pending approval; refused, writing nothing, when its id is taken (another execute
/// under the same resolution opened it first).
fn apply_open(
    t: &mut ResolveTables<'_>,
    id: &str,
    bytes: &[u8],
) -> Result<Result<bool, ChainStoreError>, CarpError> {
    if t.approvals.get(id).map_err(be)?.is_some() {
        return Ok(Err(cra_carp::store::opened_before(id)));
    }
    t.approvals.insert(id, bytes).map_err(be)?;
    t.pending.insert(id, ()).map_err(be)?;
    Ok(Ok(true))
}

/// Removes the outbox entry `s` names; refused, writing nothing, when it is gone (settled by
/// another appender first).
fn apply_settlement(
    txn: &WriteTransaction,
    s: &Settlement,
) -> Result<Result<bool, ChainStoreError>, CarpError> {
    let mut outbox = txn.open_table(crate::relay::redb::OUTBOX).map_err(be)?;
    let removed = outbox.remove(s.outbox_key.as_str()).map_err(be)?.is_some();
    Ok(if removed {
        Ok(true)
    } else {
        Err(s.settled_before())
    })
}

/// Decides the approval `d` names, as the transaction reads it: a refusal (not found, another
/// session's, decided before) writes nothing.
fn apply_decision(
    t: &mut ResolveTables<'_>,
    d: &DecisionRecord,
) -> Result<Result<bool, ChainStoreError>, CarpError> {
    let found: Option<ApprovalRecord> = match t.approvals.get(d.approval_id.as_str()).map_err(be)? {
        Some(bytes) => Some(decode(t.enc, APPROVALS, bytes.value())?),
        None => None,
    };
    let Some(found) = found else {
        return Ok(Err(d.not_found()));
    };
    let decided = match d.apply_to(found) {
        Ok(decided) => decided,
        Err(refusal) => return Ok(Err(refusal)),
    };
    t.approvals
        .insert(
            d.approval_id.as_str(),
            encode(t.enc, APPROVALS, &decided)?.as_slice(),
        )
        .map_err(be)?;
    t.pending.remove(d.approval_id.as_str()).map_err(be)?;
    Ok(Ok(true))
}

/// History predicates answered from one read transaction's view of the rate table
/// ([`cra_carp::store::CarpStore::mark_reader`]): one seek each, the table opened once.
struct RedbMarks {
    rate: redb::ReadOnlyTable<(&'static str, &'static str, i64), u64>,
}

impl cra_carp::store::MarkReader for RedbMarks {
    fn has_event(
        &mut self,
        counter: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<bool, CarpError> {
        if since_us >= until_us {
            return Ok(false);
        }
        let start = since_us.saturating_add(1);
        let mut range = self
            .rate
            .range((counter, scope_key, start)..=(counter, scope_key, until_us))
            .map_err(be)?;
        Ok(range.next_back().transpose().map_err(be)?.is_some())
    }
}

/// Inserts `id -> bytes` into `table` in `txn`; [`CarpError::AlreadyExists`] when `id` is taken.
fn insert_new_in(
    txn: &WriteTransaction,
    table: TableDefinition<'static, &str, &[u8]>,
    what: &'static str,
    id: &str,
    bytes: &[u8],
) -> Result<(), CarpError> {
    let mut t = txn.open_table(table).map_err(be)?;
    if t.get(id).map_err(be)?.is_some() {
        return Err(CarpError::AlreadyExists {
            what,
            id: id.to_owned(),
        });
    }
    t.insert(id, bytes).map_err(be)?;
    Ok(())
}

/// The count of executions in `(since_us, until_us]` for one counter, in `txn`'s view.
fn count_in<T>(
    table: &T,
    policy: &str,
    scope: &str,
    since: i64,
    until: i64,
) -> Result<u64, CarpError>
where
    T: ReadableTable<(&'static str, &'static str, i64), u64>,
{
    if since >= until {
        return Ok(0);
    }
    let start = since.saturating_add(1);
    let mut n = 0u64;
    for entry in table
        .range((policy, scope, start)..=(policy, scope, until))
        .map_err(be)?
    {
        let (_, count) = entry.map_err(be)?;
        n = n.saturating_add(count.value());
    }
    Ok(n)
}

fn window_start(at_us: i64, window_seconds: u64) -> i64 {
    let window = i64::try_from(window_seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000_000);
    at_us.saturating_sub(window)
}

/// Checks every charge at `at_us` in `txn` and records them all if all fit; `(outcome, changed)`.
fn consume_in(
    txn: &WriteTransaction,
    charges: &[Charge],
    at_us: i64,
) -> Result<(ConsumeOutcome, bool), CarpError> {
    let mut rate = txn.open_table(RATE).map_err(be)?;
    let mut budget = txn.open_table(BUDGET).map_err(be)?;
    // Check every charge first; record only if all fit. Charges on one counter given
    // twice are counted together.
    let mut rate_planned: Vec<(&str, &str, u64)> = Vec::new();
    let mut budget_planned: Vec<(&str, &str, u64)> = Vec::new();
    let mut read = Vec::with_capacity(charges.len());
    for (at, c) in charges.iter().enumerate() {
        let (policy, scope) = (c.policy_id.as_str(), c.scope_key.as_str());
        let refused = |used| {
            Ok((
                ConsumeOutcome::Refused {
                    at,
                    policy_id: c.policy_id.clone(),
                    scope_key: c.scope_key.clone(),
                    kind: c.kind.clone(),
                    used,
                },
                false,
            ))
        };
        match c.kind {
            ChargeKind::Rate { .. } | ChargeKind::Window { .. } | ChargeKind::Once { .. } => {
                let (max, units, window_seconds) = c.kind.windowed().unwrap_or_default();
                let since = window_start(at_us, window_seconds);
                let earlier: u64 = rate_planned
                    .iter()
                    .filter(|p| p.0 == policy && p.1 == scope)
                    .map(|p| p.2)
                    .sum();
                let used = count_in(&rate, policy, scope, since, at_us)?.saturating_add(earlier);
                if used.checked_add(units).is_none_or(|t| t > max) {
                    return refused(used);
                }
                rate_planned.push((policy, scope, units));
                read.push(used);
            }
            ChargeKind::Budget { max_units, units } => {
                let earlier: u64 = budget_planned
                    .iter()
                    .filter(|p| p.0 == policy && p.1 == scope)
                    .map(|p| p.2)
                    .sum();
                let stored = budget.get((policy, scope)).map_err(be)?.map(|v| v.value());
                let used = stored.unwrap_or(0) + earlier;
                if used
                    .checked_add(units)
                    .is_none_or(|total| total > max_units)
                {
                    return refused(used);
                }
                budget_planned.push((policy, scope, units));
                read.push(used);
            }
        }
    }
    for (policy, scope, n) in rate_planned {
        let now = rate
            .get((policy, scope, at_us))
            .map_err(be)?
            .map(|v| v.value());
        rate.insert((policy, scope, at_us), now.unwrap_or(0) + n)
            .map_err(be)?;
    }
    for (policy, scope, units) in budget_planned {
        let now = budget.get((policy, scope)).map_err(be)?.map(|v| v.value());
        budget
            .insert((policy, scope), now.unwrap_or(0) + units)
            .map_err(be)?;
    }
    Ok((ConsumeOutcome::Consumed { used: read }, true))
}

/// Records `lease` in `txn` and claims its key (see [`CarpStore::claim_execution`]).
fn claim_in(
    txn: &WriteTransaction,
    enc: &Encryption,
    lease: &ExecutionLease,
    bytes: &[u8],
) -> Result<(ClaimOutcome, bool), CarpError> {
    let mut leases = txn.open_table(LEASES).map_err(be)?;
    if let Some(key) = lease.idempotency_key.as_deref() {
        let mut keys = txn.open_table(EXECUTION_KEYS).map_err(be)?;
        let holder = keys
            .get((lease.session_id.as_str(), key))
            .map_err(be)?
            .map(|id| id.value().to_owned());
        if let Some(id) = holder {
            let executions = txn.open_table(EXECUTIONS).map_err(be)?;
            let found = executions.get(id.as_str()).map_err(be)?;
            return Ok(match found {
                Some(first) => (
                    ClaimOutcome::Finished(Box::new(decode(enc, EXECUTIONS, first.value())?)),
                    false,
                ),
                None => (ClaimOutcome::InFlight { execution_id: id }, false),
            });
        }
        keys.insert(
            (lease.session_id.as_str(), key),
            lease.execution_id.as_str(),
        )
        .map_err(be)?;
    }
    leases
        .insert(lease.execution_id.as_str(), bytes)
        .map_err(be)?;
    Ok((ClaimOutcome::Claimed, true))
}

/// Records `execution` (JSON `bytes`) in `txn`, claiming its idempotency key unless it claimed
/// it with its lease. When the key names another execution, that one is returned with `false`
/// and nothing is written.
fn record_execution_in(
    txn: &WriteTransaction,
    enc: &Encryption,
    execution: &ExecutionRecord,
    bytes: &[u8],
) -> Result<(ExecutionRecord, bool), CarpError> {
    let mut executions = txn.open_table(EXECUTIONS).map_err(be)?;
    if let Some(key) = execution.idempotency_key.as_deref() {
        let mut keys = txn.open_table(EXECUTION_KEYS).map_err(be)?;
        let existing = keys
            .get((execution.session_id.as_str(), key))
            .map_err(be)?
            .map(|id| id.value().to_owned());
        // A key claimed by this very execution ([`CarpStore::claim_execution`]).
        if let Some(id) = existing.filter(|id| *id != execution.execution_id) {
            let found = executions.get(id.as_str()).map_err(be)?;
            let Some(first) = found else {
                return Err(CarpError::Corrupt(format!(
                    "idempotency key `{key}` names a missing execution `{id}`"
                )));
            };
            return Ok((decode(enc, EXECUTIONS, first.value())?, false));
        }
        keys.insert(
            (execution.session_id.as_str(), key),
            execution.execution_id.as_str(),
        )
        .map_err(be)?;
    }
    if executions
        .get(execution.execution_id.as_str())
        .map_err(be)?
        .is_some()
    {
        return Err(CarpError::AlreadyExists {
            what: "execution",
            id: execution.execution_id.clone(),
        });
    }
    executions
        .insert(execution.execution_id.as_str(), bytes)
        .map_err(be)?;
    if !execution.marks.is_empty() {
        let mut rate = txn.open_table(RATE).map_err(be)?;
        for m in &execution.marks {
            let key = (m.counter.as_str(), m.scope_key.as_str(), m.at_us);
            let now = rate.get(key).map_err(be)?.map(|v| v.value());
            rate.insert(key, now.unwrap_or(0).saturating_add(1))
                .map_err(be)?;
        }
    }
    Ok((execution.clone(), true))
}

/// Records an execution's outcome and releases its lease in `txn` (the committer's): a key
/// recorded for another execution, or a taken execution id, is refused and nothing is written.
fn apply_execution(
    txn: &WriteTransaction,
    enc: &Encryption,
    execution: &ExecutionRecord,
    bytes: &[u8],
) -> Result<Result<bool, ChainStoreError>, CarpError> {
    match record_execution_in(txn, enc, execution, bytes) {
        Ok((_, true)) => {}
        Ok((first, false)) => {
            return Ok(Err(ChainStoreError::Unavailable(format!(
                "redb: the idempotency key of execution `{}` is recorded for execution `{}`; nothing was written",
                execution.execution_id, first.execution_id
            ))));
        }
        Err(e @ CarpError::AlreadyExists { .. }) => {
            return Ok(Err(ChainStoreError::Unavailable(format!("redb: {e}"))));
        }
        Err(e) => return Err(e),
    }
    release_in(txn, enc, &execution.execution_id)?;
    Ok(Ok(true))
}

/// Removes a lease in `txn`, with its key claim when no execution was recorded under it.
/// Returns whether anything changed.
fn release_in(
    txn: &WriteTransaction,
    enc: &Encryption,
    execution_id: &str,
) -> Result<bool, CarpError> {
    let mut leases = txn.open_table(LEASES).map_err(be)?;
    let Some(bytes) = leases.remove(execution_id).map_err(be)? else {
        return Ok(false);
    };
    let lease: ExecutionLease = decode(enc, LEASES, bytes.value())?;
    drop(bytes);
    let recorded = txn
        .open_table(EXECUTIONS)
        .map_err(be)?
        .get(execution_id)
        .map_err(be)?
        .is_some();
    if let (Some(key), false) = (lease.idempotency_key.as_deref(), recorded) {
        let mut keys = txn.open_table(EXECUTION_KEYS).map_err(be)?;
        let k = (lease.session_id.as_str(), key);
        let ours = keys
            .get(k)
            .map_err(be)?
            .is_some_and(|id| id.value() == execution_id);
        if ours {
            keys.remove(k).map_err(be)?;
        }
    }
    Ok(true)
}

impl CarpStore for RedbStore {
    fn create_session(&self, session: &SessionRecord) -> Result<(), CarpError> {
        let enc = &self.config().encryption;
        let bytes = encode(enc, SESSIONS, session)?;
        self.carp_write(|txn| {
            create_session_in(txn, enc, session, &bytes)?;
            Ok(((), true))
        })
    }

    fn sessions_of(&self, agent_id: &str) -> Result<Option<Vec<String>>, CarpError> {
        if self.config().encryption.current().is_some() {
            return Ok(None);
        }
        let txn = self.handle().begin_read().map_err(be)?;
        let index = txn.open_table(SESSIONS_BY_AGENT).map_err(be)?;
        let mut out = Vec::new();
        for row in index
            .range((agent_id, "")..=(agent_id, "\u{10FFFF}"))
            .map_err(be)?
        {
            out.push(row.map_err(be)?.0.value().1.to_owned());
        }
        Ok(Some(out))
    }

    fn open_sessions(&self, agent_id: &str) -> Result<u64, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        open_count(&txn.open_table(OPEN_SESSIONS).map_err(be)?, agent_id)
    }

    fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, CarpError> {
        self.carp_get(SESSIONS, session_id)
    }

    fn end_session(&self, session_id: &str, ended_at: &str) -> Result<SessionRecord, CarpError> {
        let enc = &self.config().encryption;
        self.carp_write(|txn| {
            end_session_in(txn, enc, session_id, ended_at)?.ok_or_else(|| CarpError::NotFound {
                what: "session",
                id: session_id.to_owned(),
            })
        })
    }

    fn insert_request_id(&self, session_id: &str, request_id: &str) -> Result<bool, CarpError> {
        self.carp_write(|txn| {
            let mut t = txn.open_table(REQUEST_IDS).map_err(be)?;
            let seen = t
                .insert((session_id, request_id), ())
                .map_err(be)?
                .is_some();
            Ok((!seen, !seen))
        })
    }

    fn has_request_id(&self, session_id: &str, request_id: &str) -> Result<bool, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let t = txn.open_table(REQUEST_IDS).map_err(be)?;
        Ok(t.get((session_id, request_id)).map_err(be)?.is_some())
    }

    fn record_resolve(
        &self,
        session_id: &str,
        request_id: &str,
        resolution: &StoredResolution,
    ) -> Result<bool, CarpError> {
        let enc = &self.config().encryption;
        let encoded = EncodedResolve::new(enc, session_id, request_id, Some(resolution))?;
        self.carp_write(|txn| {
            let fresh = apply_resolve(&mut ResolveTables::open(txn, enc)?, &encoded)?;
            Ok((fresh, fresh))
        })
    }

    fn put_resolution(&self, resolution: &StoredResolution) -> Result<(), CarpError> {
        let id = resolution.resolution.resolution_id.as_str();
        self.carp_insert_new(RESOLUTIONS, "resolution", id, resolution, |_| Ok(()))
    }

    fn get_resolution(&self, resolution_id: &str) -> Result<Option<StoredResolution>, CarpError> {
        self.carp_get(RESOLUTIONS, resolution_id)
    }

    fn get_execution_by_key(
        &self,
        session_id: &str,
        idempotency_key: &str,
    ) -> Result<Option<ExecutionRecord>, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let keys = txn.open_table(EXECUTION_KEYS).map_err(be)?;
        let Some(id) = keys.get((session_id, idempotency_key)).map_err(be)? else {
            return Ok(None);
        };
        let executions = txn.open_table(EXECUTIONS).map_err(be)?;
        let found = executions.get(id.value()).map_err(be)?;
        let leases = txn.open_table(LEASES).map_err(be)?;
        match found {
            Some(bytes) => decode(&self.config().encryption, EXECUTIONS, bytes.value()).map(Some),
            // Claimed by an execution still running: no outcome yet.
            None if leases.get(id.value()).map_err(be)?.is_some() => Ok(None),
            None => Err(CarpError::Corrupt(format!(
                "idempotency key `{idempotency_key}` of session `{session_id}` names a missing execution"
            ))),
        }
    }

    fn record_execution(&self, execution: &ExecutionRecord) -> Result<ExecutionRecord, CarpError> {
        let enc = &self.config().encryption;
        let bytes = encode(enc, EXECUTIONS, execution)?;
        self.carp_write(|txn| record_execution_in(txn, enc, execution, &bytes))
    }

    fn rate_count(
        &self,
        policy_id: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<u64, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let t = txn.open_table(RATE).map_err(be)?;
        count_in(&t, policy_id, scope_key, since_us, until_us)
    }

    fn has_event(
        &self,
        policy_id: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<bool, CarpError> {
        self.mark_reader()?
            .has_event(policy_id, scope_key, since_us, until_us)
    }

    fn mark_reader(&self) -> Result<Box<dyn cra_carp::store::MarkReader + '_>, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        Ok(Box::new(RedbMarks {
            rate: txn.open_table(RATE).map_err(be)?,
        }))
    }

    fn budget_spent(&self, policy_id: &str, scope_key: &str) -> Result<u64, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let t = txn.open_table(BUDGET).map_err(be)?;
        let spent = t.get((policy_id, scope_key)).map_err(be)?;
        Ok(spent.map(|v| v.value()).unwrap_or(0))
    }

    fn try_consume(&self, charges: &[Charge], at_us: i64) -> Result<ConsumeOutcome, CarpError> {
        self.carp_write(|txn| consume_in(txn, charges, at_us))
    }

    fn try_consume_now(
        &self,
        charges: &[Charge],
        clock: &dyn cra_wire::Clock,
    ) -> Result<(ConsumeOutcome, i64), CarpError> {
        self.carp_write(|txn| {
            // Read under the write lock: no charge is recorded between this reading and ours.
            let at_us = unix_micros(clock.now());
            let (outcome, changed) = consume_in(txn, charges, at_us)?;
            Ok(((outcome, at_us), changed))
        })
    }

    fn claim_and_consume_now(
        &self,
        lease: &ExecutionLease,
        charges: &[Charge],
        clock: &dyn cra_wire::Clock,
    ) -> Result<(ClaimOutcome, Option<(ConsumeOutcome, i64)>), CarpError> {
        let enc = &self.config().encryption;
        let bytes = encode(enc, LEASES, lease)?;
        self.carp_write(|txn| {
            let (claim, claimed) = claim_in(txn, enc, lease, &bytes)?;
            if !claimed {
                return Ok(((claim, None), false));
            }
            // Read under the write lock, as `try_consume_now` does. A refused charge aborts the
            // transaction, and the claim with it.
            let at_us = unix_micros(clock.now());
            let (outcome, consumed) = consume_in(txn, charges, at_us)?;
            Ok(((claim, Some((outcome, at_us))), consumed))
        })
    }

    fn claim_execution(&self, lease: &ExecutionLease) -> Result<ClaimOutcome, CarpError> {
        let enc = &self.config().encryption;
        let bytes = encode(enc, LEASES, lease)?;
        self.carp_write(|txn| claim_in(txn, enc, lease, &bytes))
    }

    fn release_execution(&self, execution_id: &str) -> Result<(), CarpError> {
        let enc = &self.config().encryption;
        self.carp_write(|txn| release_in(txn, enc, execution_id).map(|changed| ((), changed)))
    }

    fn leases_of(&self, owner: &str) -> Result<Vec<ExecutionLease>, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let t = txn.open_table(LEASES).map_err(be)?;
        let mut out = Vec::new();
        for entry in t.iter().map_err(be)? {
            let (_, v) = entry.map_err(be)?;
            let lease: ExecutionLease = decode(&self.config().encryption, LEASES, v.value())?;
            if lease.owner == owner {
                out.push(lease);
            }
        }
        Ok(out)
    }

    fn create_approval(&self, approval: &ApprovalRecord) -> Result<(), CarpError> {
        let id = approval.approval_id.as_str();
        let pending = approval.status == ApprovalStatus::Pending;
        self.carp_insert_new(APPROVALS, "approval", id, approval, |txn| {
            if pending {
                let mut p = txn.open_table(PENDING).map_err(be)?;
                p.insert(id, ()).map_err(be)?;
            }
            Ok(())
        })
    }

    fn get_approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, CarpError> {
        self.carp_get(APPROVALS, approval_id)
    }

    fn decide_approval(
        &self,
        approval_id: &str,
        decision: ApprovalDecision,
        decided_by: &str,
        note: Option<&str>,
        decided_at: &str,
    ) -> Result<ApprovalRecord, CarpError> {
        let enc = &self.config().encryption;
        self.carp_write(|txn| {
            let mut t = txn.open_table(APPROVALS).map_err(be)?;
            let found: Option<ApprovalRecord> = match t.get(approval_id).map_err(be)? {
                Some(bytes) => Some(decode(enc, APPROVALS, bytes.value())?),
                None => None,
            };
            let Some(mut record) = found else {
                return Err(CarpError::NotFound {
                    what: "approval",
                    id: approval_id.to_owned(),
                });
            };
            record.decide(decision, decided_by, note, decided_at)?;
            t.insert(approval_id, encode(enc, APPROVALS, &record)?.as_slice())
                .map_err(be)?;
            let mut p = txn.open_table(PENDING).map_err(be)?;
            p.remove(approval_id).map_err(be)?;
            Ok((record, true))
        })
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let pending = txn.open_table(PENDING).map_err(be)?;
        let approvals = txn.open_table(APPROVALS).map_err(be)?;
        let mut out = Vec::new();
        for entry in pending.iter().map_err(be)? {
            let (id, _) = entry.map_err(be)?;
            let found = approvals.get(id.value()).map_err(be)?;
            match found {
                Some(bytes) => {
                    out.push(decode(&self.config().encryption, APPROVALS, bytes.value())?)
                }
                None => {
                    return Err(CarpError::Corrupt(format!(
                        "pending approval `{}` has no record",
                        id.value()
                    )));
                }
            }
        }
        Ok(out)
    }

    fn list_decided_approvals(&self, limit: usize) -> Result<Vec<ApprovalRecord>, CarpError> {
        let txn = self.handle().begin_read().map_err(be)?;
        let approvals = txn.open_table(APPROVALS).map_err(be)?;
        let mut all = Vec::new();
        for entry in approvals.iter().map_err(be)? {
            let (_, bytes) = entry.map_err(be)?;
            all.push(decode::<ApprovalRecord>(
                &self.config().encryption,
                APPROVALS,
                bytes.value(),
            )?);
        }
        Ok(cra_carp::store::newest_decisions(all, limit))
    }
}

/// Whether a stored JSON record of `table` names `session_id` as its `session_id`. A record that
/// does not read is an error: retention must not keep a session's records silently.
fn of_session(
    enc: &Encryption,
    table: RecordTable,
    bytes: &[u8],
    session_id: &str,
) -> Result<bool, CarpError> {
    decode::<serde_json::Value>(enc, table, bytes)
        .map(|v| v.get("session_id").and_then(|s| s.as_str()) == Some(session_id))
}

/// Removes every CARP record of `session_id` inside `txn`: the session, its request ids,
/// resolutions, executions and their keys, approvals, and its `session:<id>` counters. Retention
/// calls this in the transaction that removes the session's chain.
pub(crate) fn remove_session_records(
    txn: &WriteTransaction,
    enc: &Encryption,
    session_id: &str,
) -> Result<(), CarpError> {
    let removed = txn
        .open_table(SESSIONS)
        .map_err(be)?
        .remove(session_id)
        .map_err(be)?
        .map(|bytes| decode::<SessionRecord>(enc, SESSIONS, bytes.value()))
        .transpose()?;
    if let Some(record) = removed {
        txn.open_table(SESSIONS_BY_AGENT)
            .map_err(be)?
            .remove((record.agent_id.as_str(), session_id))
            .map_err(be)?;
        if record.is_active() {
            count_open(txn, &record.agent_id, -1)?;
        }
    }
    txn.open_table(REQUEST_IDS)
        .map_err(be)?
        .retain_in((session_id, "")..=(session_id, "\u{10FFFF}"), |_, _| false)
        .map_err(be)?;
    txn.open_table(EXECUTION_KEYS)
        .map_err(be)?
        .retain_in((session_id, "")..=(session_id, "\u{10FFFF}"), |_, _| false)
        .map_err(be)?;
    for table in [RESOLUTIONS, EXECUTIONS, LEASES] {
        let mut t = txn.open_table(table).map_err(be)?;
        for id in records_of_session(&t, enc, table, session_id)? {
            t.remove(id.as_str()).map_err(be)?;
        }
    }
    let mut approvals = txn.open_table(APPROVALS).map_err(be)?;
    let removed = records_of_session(&approvals, enc, APPROVALS, session_id)?;
    let mut pending = txn.open_table(PENDING).map_err(be)?;
    for id in &removed {
        approvals.remove(id.as_str()).map_err(be)?;
        pending.remove(id.as_str()).map_err(be)?;
    }
    let scope = format!("session:{session_id}");
    // A history test's counter keys a session scope by values too: `session:<id>|<digest>`.
    let narrowed = format!("{scope}|");
    txn.open_table(RATE)
        .map_err(be)?
        .retain(|(_, s, _), _| s != scope && !s.starts_with(&narrowed))
        .map_err(be)?;
    txn.open_table(BUDGET)
        .map_err(be)?
        .retain(|(_, s), _| s != scope)
        .map_err(be)?;
    Ok(())
}

/// The ids of the records of `table` (open as `t`) that belong to `session_id`.
fn records_of_session(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    enc: &Encryption,
    table: RecordTable,
    session_id: &str,
) -> Result<Vec<String>, CarpError> {
    let mut out = Vec::new();
    for entry in t.iter().map_err(be)? {
        let (id, value) = entry.map_err(be)?;
        let of = of_session(enc, table, value.value(), session_id).map_err(|e| {
            CarpError::Backend(format!(
                "record `{}` of `{}` cannot be read ({e}), so the records of session {session_id} cannot all be found and none is removed; restore the data directory from a backup",
                id.value(),
                table.name()
            ))
        })?;
        if of {
            out.push(id.value().to_owned());
        }
    }
    Ok(out)
}
