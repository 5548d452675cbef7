//! Changes of CARP state written inside the committer's batch transaction, with the events that
//! record them (`cra_carp::store::StateLog` on PostgreSQL): a resolve's request id and
//! resolution, an approval opened by an execute, an approval's decision, an execution's outcome,
//! or the removal of the outbox entry whose events these are (a Relay write's).
//!
//! A change is encoded on the appender's thread ([`PgChange::encode`]) so the committer, which
//! every append of a batch waits for, only sends statements. A resolve is one statement (two
//! data-modifying CTEs; the resolution is inserted only when the request id is new). An opened
//! approval is one insert that does nothing when its id is taken. A decision locks the
//! approval's row, applies the one transition to it as read, and writes it back. An execution's
//! outcome is inserted and its lease removed in one statement. Each runs only after the chain
//! has accepted the append's drafts, and a refusal writes nothing: the batch transaction goes on
//! for the other appends.

use crate::encryption::Encryption;
use cra_carp::store::{
    ApprovalRecord, ApprovalStatus, DecisionRecord, ExecutionRecord, ResolveRecord, SessionEnd,
    SessionStart, Settlement, StateChange,
};
use cra_trace::store::ChainStoreError;

/// A change of state as the committer writes it.
pub(crate) enum PgChange {
    /// A resolve's state, its records already JSON.
    Resolve(EncodedResolve),
    /// A decision, applied to the approval as the transaction reads it.
    Decide(DecisionRecord),
    /// An execution's outcome and its JSON.
    Execute(ExecutionRecord, String),
    /// An outbox entry to remove.
    Settle(Settlement),
    /// A pending approval opened by an execute, and its JSON.
    Open(ApprovalRecord, String),
    /// A session's opening (record and quota), its JSON and its owner column (none with a
    /// storage key), created with the events opening its chain.
    Start(SessionStart, String, Option<String>),
    /// A session's end, recorded with its `session.ended`.
    End(SessionEnd),
}

/// A resolve's state, encoded.
pub(crate) struct EncodedResolve {
    session_id: String,
    request_id: String,
    /// `(resolution id, its session, record)`; `None` records the request id alone.
    resolution: Option<(String, String, String)>,
}

/// What writing a change did: `Ok(true)` written, `Ok(false)` a resolve whose request id was
/// used (nothing written), `Err` refused (nothing written).
pub(crate) type Applied = Result<bool, ChainStoreError>;

fn encode<T: serde::Serialize>(
    enc: &Encryption,
    table: &str,
    value: &T,
) -> Result<String, ChainStoreError> {
    crate::pg::carp::encode_record(enc, table, value)
        .map_err(|e| ChainStoreError::Unavailable(format!("a CARP record: {e}")))
}

impl PgChange {
    /// Encodes `change` (on the appender's thread).
    pub(crate) fn encode(enc: &Encryption, change: StateChange) -> Result<Self, ChainStoreError> {
        Ok(match change {
            StateChange::Resolve(r) => Self::Resolve(EncodedResolve::new(enc, &r)?),
            StateChange::Decide(d) => Self::Decide(d),
            StateChange::Settle(s) => Self::Settle(s),
            StateChange::Open(a) => {
                let body = encode(enc, "carp_approvals", &a)?;
                Self::Open(a, body)
            }
            StateChange::Execute(e) => {
                let body = encode(enc, "carp_executions", &e)?;
                Self::Execute(e, body)
            }
            StateChange::Start(start) => {
                let body = encode(enc, "carp_sessions", &start.record)?;
                let agent = &start.record.agent_id;
                let owner = crate::pg::carp::owner_column(enc, agent).map(str::to_owned);
                Self::Start(start, body, owner)
            }
            StateChange::End(e) => Self::End(e),
        })
    }

    /// Writes the change in `tx`.
    pub(crate) fn apply(
        &self,
        tx: &mut postgres::Transaction<'_>,
        enc: &Encryption,
    ) -> Result<Applied, postgres::Error> {
        match self {
            Self::Resolve(r) => r.apply(tx),
            Self::Decide(d) => decide_in(tx, enc, d),
            Self::Execute(e, body) => execute_in(tx, e, body),
            Self::Settle(s) => settle_in(tx, s),
            Self::Open(a, body) => open_in(tx, a, body),
            Self::Start(r, body, owner) => start_in(tx, r, body, owner.as_deref()),
            Self::End(e) => end_in(tx, enc, e),
        }
    }
}

/// Creates a session's record and counts it open (`pg::carp::start_session_in`); refused,
/// writing nothing, when its id is taken or its agent has its quota of open sessions: the batch
/// transaction goes on after a refusal, so a refusal must leave nothing behind.
fn start_in(
    tx: &mut postgres::Transaction<'_>,
    start: &SessionStart,
    body: &str,
    owner: Option<&str>,
) -> Result<Applied, postgres::Error> {
    use crate::pg::carp::{NotStarted, start_session_in};
    let r = &start.record;
    Ok(
        match start_session_in(tx, r, body, owner, start.max_open)? {
            Ok(()) => Ok(true),
            Err(NotStarted::Taken) => Err(cra_carp::store::started_before(&r.session_id)),
            Err(NotStarted::Full) => Err(cra_carp::store::open_sessions_exceeded(
                &r.agent_id,
                start.max_open.unwrap_or_default(),
            )),
        },
    )
}

/// Marks a session ended; refused, writing nothing, while one of the session's executions
/// holds a lease, or when the session has no record. A lease claimed after the check is
/// harmless: its execution's first append comes after this transaction holds the chain's head,
/// so it finds the chain ended and the execute is refused before its executor runs.
fn end_in(
    tx: &mut postgres::Transaction<'_>,
    enc: &Encryption,
    e: &SessionEnd,
) -> Result<Applied, postgres::Error> {
    if let Some(lease) = tx.query_opt(
        "SELECT execution_id FROM carp_execution_leases WHERE session_id = $1
         ORDER BY execution_id LIMIT 1",
        &[&e.session_id],
    )? {
        return Ok(Err(e.execution_in_progress(lease.get::<_, &str>(0))));
    }
    Ok(
        match crate::pg::carp::end_session_in(tx, enc, &e.session_id, &e.ended_at)? {
            Ok(Some(_)) => Ok(true),
            Ok(None) => Err(e.not_found()),
            Err(why) => Err(ChainStoreError::Unavailable(format!(
                "session `{}`: {why}",
                e.session_id
            ))),
        },
    )
}

/// Opens a pending approval; refused, writing nothing, when its id is taken (another execute
/// under the same resolution opened it first, on this replica or another).
fn open_in(
    tx: &mut postgres::Transaction<'_>,
    a: &ApprovalRecord,
    body: &str,
) -> Result<Applied, postgres::Error> {
    let n = tx.execute(
        "INSERT INTO carp_approvals (approval_id, session_id, status, body) VALUES ($1, $2, $3, $4)
         ON CONFLICT (approval_id) DO NOTHING",
        &[&a.approval_id, &a.session_id, &a.status.as_str(), &body],
    )?;
    Ok(if n == 1 {
        Ok(true)
    } else {
        Err(cra_carp::store::opened_before(&a.approval_id))
    })
}

/// Removes the outbox entry `s` names; refused, writing nothing, when it is gone (settled by
/// another replica first: the row lock makes the second removal wait for the first to commit).
fn settle_in(
    tx: &mut postgres::Transaction<'_>,
    s: &Settlement,
) -> Result<Applied, postgres::Error> {
    let n = tx.execute("DELETE FROM relay_outbox WHERE key = $1", &[&s.outbox_key])?;
    Ok(if n == 1 {
        Ok(true)
    } else {
        Err(s.settled_before())
    })
}

impl EncodedResolve {
    fn new(enc: &Encryption, r: &ResolveRecord) -> Result<Self, ChainStoreError> {
        let resolution = match &r.resolution {
            Some(s) => Some((
                s.resolution.resolution_id.clone(),
                s.session_id.clone(),
                encode(enc, "carp_resolutions", s)?,
            )),
            None => None,
        };
        Ok(Self {
            session_id: r.session_id.clone(),
            request_id: r.request_id.clone(),
            resolution,
        })
    }

    fn apply(&self, tx: &mut postgres::Transaction<'_>) -> Result<Applied, postgres::Error> {
        let Some((resolution_id, resolution_session, resolution)) = &self.resolution else {
            let n = tx.execute(
                "INSERT INTO carp_request_ids (session_id, request_id) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING",
                &[&self.session_id, &self.request_id],
            )?;
            return Ok(Ok(n == 1));
        };
        let row = tx.query_one(
            "WITH rid AS (
                 INSERT INTO carp_request_ids (session_id, request_id) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING RETURNING 1
             ), res AS (
                 INSERT INTO carp_resolutions (resolution_id, session_id, body)
                 SELECT $3, $4, $5 WHERE EXISTS (SELECT 1 FROM rid)
                 ON CONFLICT (resolution_id) DO NOTHING RETURNING 1
             )
             SELECT (SELECT count(*) FROM rid), (SELECT count(*) FROM res)",
            &[
                &self.session_id,
                &self.request_id,
                resolution_id,
                resolution_session,
                resolution,
            ],
        )?;
        let (rid, res): (i64, i64) = (row.get(0), row.get(1));
        if rid == 0 {
            return Ok(Ok(false));
        }
        if res == 1 {
            return Ok(Ok(true));
        }
        // The resolution id was taken (ids are fresh UUIDs, so this is a bug's trace): the
        // request id this statement inserted is taken back, and the append is refused.
        tx.execute(
            "DELETE FROM carp_request_ids WHERE session_id = $1 AND request_id = $2",
            &[&self.session_id, &self.request_id],
        )?;
        Ok(Err(ChainStoreError::Unavailable(format!(
            "postgres: resolution `{resolution_id}` already exists; nothing was written, resolve again"
        ))))
    }
}

/// Decides the approval `d` names: the row is locked, the decision applied to it as read, and
/// written back. A refusal (no such approval, another session's, decided before) writes nothing.
fn decide_in(
    tx: &mut postgres::Transaction<'_>,
    enc: &Encryption,
    d: &DecisionRecord,
) -> Result<Applied, postgres::Error> {
    let row = tx.query_opt(
        "SELECT body FROM carp_approvals WHERE approval_id = $1 FOR UPDATE",
        &[&d.approval_id],
    )?;
    let Some(row) = row else {
        return Ok(Err(d.not_found()));
    };
    let found: ApprovalRecord = match crate::pg::carp::decode_record(
        enc,
        "carp_approvals",
        row.get(0),
    ) {
        Ok(found) => found,
        Err(e) => {
            return Ok(Err(ChainStoreError::Unavailable(format!(
                "postgres: approval `{}` is stored unreadable ({e}); the database needs inspection",
                d.approval_id
            ))));
        }
    };
    let decided = match d.apply_to(found) {
        Ok(decided) => decided,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let body = match encode(enc, "carp_approvals", &decided) {
        Ok(body) => body,
        Err(e) => return Ok(Err(e)),
    };
    debug_assert_ne!(decided.status, ApprovalStatus::Pending);
    tx.execute(
        "UPDATE carp_approvals SET status = $2, body = $3 WHERE approval_id = $1",
        &[&d.approval_id, &decided.status.as_str(), &body],
    )?;
    Ok(Ok(true))
}

/// Records execution `e` (JSON `body`) and removes its lease, in one statement. An execution id
/// or idempotency key already recorded refuses it and writes nothing.
fn execute_in(
    tx: &mut postgres::Transaction<'_>,
    e: &ExecutionRecord,
    body: &str,
) -> Result<Applied, postgres::Error> {
    let row = tx.query_one(
        "WITH ex AS (
             INSERT INTO carp_executions (execution_id, session_id, idempotency_key, body)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1
         ), gone AS (
             DELETE FROM carp_execution_leases
             WHERE execution_id = $1 AND EXISTS (SELECT 1 FROM ex) RETURNING 1
         )
         SELECT (SELECT count(*) FROM ex), (SELECT count(*) FROM gone)",
        &[&e.execution_id, &e.session_id, &e.idempotency_key, &body],
    )?;
    if row.get::<_, i64>(0) == 1 {
        crate::pg::carp::insert_marks(tx, &e.marks)?;
        return Ok(Ok(true));
    }
    Ok(Err(ChainStoreError::Unavailable(format!(
        "postgres: execution `{}` or its idempotency key is already recorded; nothing was written",
        e.execution_id
    ))))
}
