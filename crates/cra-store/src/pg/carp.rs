//! CARP state in PostgreSQL (`cra_carp::store::CarpStore`).
//!
//! Insert-if-absent calls use `INSERT ... ON CONFLICT DO NOTHING` (the unique key decides which
//! of two concurrent calls wins). `try_consume` locks one `carp_counters` row per distinct
//! `(policy, scope)` in key order (`SELECT ... FOR UPDATE`, creating missing rows first), so
//! concurrent consumers of a counter, on any replica, check and record one after the other and
//! never deadlock; it counts a charge at the database's clock (`clock_timestamp()`, read once the
//! rows are locked), one clock for every replica whatever their own clocks say. Execution leases
//! (`carp_execution_leases`) claim an idempotency key through their unique key.
//! `decide_approval` is a conditional update (`WHERE status = 'pending'`).

use crate::encryption::Encryption;
use std::collections::BTreeSet;

use cra_carp::store::{
    ApprovalDecision, ApprovalRecord, CarpStore, CarpStoreError as CarpError, Charge, ChargeKind,
    ClaimOutcome, ConsumeOutcome, CounterRead, ExecutionLease, ExecutionRecord, SessionRecord,
    StoredResolution, open_sessions_key,
};
use postgres::error::SqlState;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{PgStore, PooledClient, to_i64};

fn be(e: impl std::error::Error) -> CarpError {
    CarpError::Backend(format!(
        "postgres: {}; check that the database is reachable",
        super::error_text(&e)
    ))
}

pub(crate) const SESSIONS: &str = "carp_sessions";
pub(crate) const RESOLUTIONS: &str = "carp_resolutions";
pub(crate) const EXECUTIONS: &str = "carp_executions";
pub(crate) const LEASES: &str = "carp_execution_leases";
pub(crate) const APPROVALS: &str = "carp_approvals";

/// A record's stored form in `table`: its JSON, encrypted when a storage key is configured.
pub(crate) fn encode_record<T: Serialize>(
    enc: &Encryption,
    table: &str,
    value: &T,
) -> Result<String, String> {
    let json = serde_json::to_string(value).map_err(|e| format!("cannot encode: {e}"))?;
    enc.encrypt_text(table, json)
        .map_err(|e| format!("cannot encode: {e}"))
}

/// Inserts a session's record: `$1` its id, `$2` its encoded body, `$3` its owner column
/// ([`owner_column`]); nothing when the id is taken.
const INSERT_SESSION: &str =
    "INSERT INTO carp_sessions (session_id, body, agent_id) VALUES ($1, $2, $3)
     ON CONFLICT (session_id) DO NOTHING";

/// What `carp_sessions.agent_id` holds for a session of `agent_id`: the id while records are
/// stored in the clear, nothing once they are encrypted (the index would reveal it).
pub(crate) fn owner_column<'a>(enc: &Encryption, agent_id: &'a str) -> Option<&'a str> {
    enc.current().is_none().then_some(agent_id)
}

/// Marks session `session_id` ended at `ended_at` in `tx`, its row locked first; a record already
/// ended is left as it is. `Ok(Ok(None))` when there is no such session; the inner `Err`: its
/// record could not be decoded or encoded.
pub(crate) fn end_session_in(
    tx: &mut postgres::Transaction<'_>,
    enc: &Encryption,
    session_id: &str,
    ended_at: &str,
) -> Result<Result<Option<SessionRecord>, String>, postgres::Error> {
    let Some(row) = tx.query_opt(
        "SELECT body FROM carp_sessions WHERE session_id = $1 FOR UPDATE",
        &[&session_id],
    )?
    else {
        return Ok(Ok(None));
    };
    let mut record: SessionRecord = match decode_record(enc, SESSIONS, row.get::<_, &str>(0)) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    if record.ended_at.is_some() {
        return Ok(Ok(Some(record)));
    }
    record.ended_at = Some(ended_at.to_owned());
    let body = match encode_record(enc, SESSIONS, &record) {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    tx.execute(
        "UPDATE carp_sessions SET body = $2 WHERE session_id = $1",
        &[&session_id, &body],
    )?;
    count_end_in(tx, &record.agent_id)?;
    Ok(Ok(Some(record)))
}

/// The record a row of `table` holds, as [`encode_record`] stored it (or as stored before
/// encryption was turned on).
pub(crate) fn decode_record<T: DeserializeOwned>(
    enc: &Encryption,
    table: &str,
    text: &str,
) -> Result<T, String> {
    let json = enc
        .decrypt_text(table, text)
        .map_err(|e| format!("{table}: {e}"))?;
    serde_json::from_str(&json).map_err(|e| format!("{table}: {e}"))
}

/// Fills in `carp_sessions.agent_id` (the owner index, migration 0019) of sessions stored before
/// it existed, reading each one's agent from its record: records may be encrypted, so SQL alone
/// cannot. Runs when the store starts; idempotent, so replicas starting together only repeat
/// each other's updates. A record that cannot be decoded stops the start, naming it. A store
/// whose records are encrypted keeps no index (it would hold agent ids in the clear): one left
/// from before a key was configured is emptied instead.
pub(crate) fn index_session_agents(
    pool: &super::pool::Pool,
    enc: &Encryption,
) -> Result<(), crate::BackendError> {
    let mut c = pool.get()?;
    let fail = |e: String| crate::BackendError::Backend(format!("indexing sessions by agent: {e}"));
    if enc.current().is_some() {
        c.execute(
            "UPDATE carp_sessions SET agent_id = NULL WHERE agent_id IS NOT NULL",
            &[],
        )
        .map_err(|e| fail(super::error_text(&e)))?;
        return Ok(());
    }
    loop {
        let rows = c
            .query(
                "SELECT session_id, body FROM carp_sessions WHERE agent_id IS NULL LIMIT 1000",
                &[],
            )
            .map_err(|e| fail(super::error_text(&e)))?;
        if rows.is_empty() {
            return Ok(());
        }
        for row in rows {
            let (id, body) = (row.get::<_, &str>(0), row.get::<_, &str>(1));
            let record: SessionRecord = decode_record(enc, SESSIONS, body)
                .map_err(|e| fail(format!("session {id} cannot be read ({e})")))?;
            c.execute(
                "UPDATE carp_sessions SET agent_id = $2 WHERE session_id = $1",
                &[&id, &record.agent_id],
            )
            .map_err(|e| fail(super::error_text(&e)))?;
        }
    }
}

/// Counts the open sessions of each agent into `carp_open_sessions` when migration 0020 left
/// its row keyed '' (the sessions stored before it, not counted yet), and removes that row, in
/// one transaction that then holds `carp_sessions` against writes while it counts: replicas
/// starting together count once, and a session started on a running replica is counted once.
/// Runs when the store starts; records may be encrypted, so SQL alone cannot count.
pub(crate) fn count_open_sessions(
    pool: &super::pool::Pool,
    enc: &Encryption,
) -> Result<(), crate::BackendError> {
    let fail = |e: String| crate::BackendError::Backend(format!("counting open sessions: {e}"));
    let pg = |e: postgres::Error| fail(super::error_text(&e));
    let mut c = pool.get()?;
    let mut tx = c.transaction().map_err(pg)?;
    // The marker's row lock makes replicas starting together wait for the first to count.
    let pending = tx
        .query_opt(
            "DELETE FROM carp_open_sessions WHERE agent_key = '' RETURNING 1",
            &[],
        )
        .map_err(pg)?;
    if pending.is_none() {
        return tx.commit().map_err(pg);
    }
    // Starts in flight on running replicas finish first, and later ones wait for the count:
    // each is then in the count or counts itself, never both (the count overwrites).
    tx.batch_execute("LOCK TABLE carp_sessions IN SHARE MODE")
        .map_err(pg)?;
    let mut counts = std::collections::BTreeMap::<String, i64>::new();
    for row in tx
        .query("SELECT session_id, body FROM carp_sessions", &[])
        .map_err(pg)?
    {
        let (id, body) = (row.get::<_, &str>(0), row.get::<_, &str>(1));
        let record: SessionRecord = decode_record(enc, SESSIONS, body)
            .map_err(|e| fail(format!("session {id} cannot be read ({e})")))?;
        if record.is_active() {
            *counts
                .entry(open_sessions_key(&record.agent_id))
                .or_default() += 1;
        }
    }
    for (key, open) in &counts {
        tx.execute(
            "INSERT INTO carp_open_sessions (agent_key, open) VALUES ($1, $2)
             ON CONFLICT (agent_key) DO UPDATE SET open = EXCLUDED.open",
            &[key, open],
        )
        .map_err(pg)?;
    }
    tx.commit().map_err(pg)
}

/// Why [`start_session_in`] started nothing.
pub(crate) enum NotStarted {
    /// The session id is taken.
    Taken,
    /// The agent has its quota of open sessions.
    Full,
}

/// Creates session `r`'s record (`body` its encoding, `owner` its owner column) and counts it
/// among its agent's open sessions, in a savepoint of `tx`: refused, with nothing left of it in
/// `tx` (which may go on for other writes), when its id is taken or its agent has `max_open`
/// sessions open. The record goes first, so a taken id never touches the counter.
pub(crate) fn start_session_in(
    tx: &mut postgres::Transaction<'_>,
    r: &SessionRecord,
    body: &str,
    owner: Option<&str>,
    max_open: Option<u64>,
) -> Result<Result<(), NotStarted>, postgres::Error> {
    let mut savepoint = tx.transaction()?;
    if savepoint.execute(INSERT_SESSION, &[&r.session_id, &body, &owner])? != 1 {
        return Ok(Err(NotStarted::Taken));
    }
    if !count_start_in(&mut savepoint, &r.agent_id, max_open)? {
        return Ok(Err(NotStarted::Full));
    }
    savepoint.commit()?;
    Ok(Ok(()))
}

/// Adds one to `agent_id`'s open sessions in `tx`, unless it has `max_open` or more already:
/// `Ok(false)` then, and nothing changed. The counter's row lock orders concurrent starts of
/// one agent's sessions, on every replica.
fn count_start_in(
    tx: &mut postgres::Transaction<'_>,
    agent_id: &str,
    max_open: Option<u64>,
) -> Result<bool, postgres::Error> {
    if max_open == Some(0) {
        return Ok(false);
    }
    let max = max_open.map(to_i64);
    let n = tx.execute(
        "INSERT INTO carp_open_sessions AS o (agent_key, open) VALUES ($1, 1)
         ON CONFLICT (agent_key) DO UPDATE SET open = o.open + 1
         WHERE $2::bigint IS NULL OR o.open < $2::bigint",
        &[&open_sessions_key(agent_id), &max],
    )?;
    Ok(n == 1)
}

/// Takes one from `agent_id`'s open sessions in `tx` (a session ended).
pub(crate) fn count_end_in(
    tx: &mut postgres::Transaction<'_>,
    agent_id: &str,
) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE carp_open_sessions SET open = open - 1 WHERE agent_key = $1 AND open > 0",
        &[&open_sessions_key(agent_id)],
    )?;
    Ok(())
}

fn is_unique_violation(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

impl PgStore {
    fn encode<T: Serialize>(&self, table: &str, value: &T) -> Result<String, CarpError> {
        encode_record(&self.config().encryption, table, value).map_err(CarpError::Backend)
    }

    fn decode<T: DeserializeOwned>(&self, table: &str, text: &str) -> Result<T, CarpError> {
        decode_record(&self.config().encryption, table, text).map_err(CarpError::Corrupt)
    }

    fn carp_client(&self) -> Result<PooledClient<'_>, CarpError> {
        self.state_client().map_err(be)
    }

    fn carp_body<T: DeserializeOwned>(
        &self,
        sql: &str,
        what: &str,
        id: &str,
    ) -> Result<Option<T>, CarpError> {
        let mut c = self.carp_client()?;
        let row = c.query_opt(sql, &[&id]).map_err(be)?;
        row.map(|r| self.decode(what, r.get::<_, &str>(0)))
            .transpose()
    }

    /// Runs an INSERT whose only possible conflict is the record's id.
    fn carp_insert(
        &self,
        what: &'static str,
        id: &str,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<(), CarpError> {
        let mut c = self.carp_client()?;
        match c.execute(sql, params) {
            Ok(1) => Ok(()),
            Ok(_) => Err(CarpError::AlreadyExists {
                what,
                id: id.to_owned(),
            }),
            Err(e) if is_unique_violation(&e) => Err(CarpError::AlreadyExists {
                what,
                id: id.to_owned(),
            }),
            Err(e) => Err(be(e)),
        }
    }
}

impl PgStore {
    /// Checks and records `charges` in one transaction, at `at_us` or, when `None`, at the
    /// database's clock read once the counters are locked. Returns the instant used.
    fn consume(
        &self,
        charges: &[Charge],
        at_us: Option<i64>,
    ) -> Result<(ConsumeOutcome, i64), CarpError> {
        let counters: BTreeSet<(&str, &str)> = charges
            .iter()
            .map(|c| (c.policy_id.as_str(), c.scope_key.as_str()))
            .collect();
        let mut c = self.carp_client()?;
        let mut tx = c.transaction().map_err(be)?;
        for (policy, scope) in &counters {
            tx.execute(
                "INSERT INTO carp_counters (policy_id, scope_key) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING",
                &[policy, scope],
            )
            .map_err(be)?;
        }
        // Lock in key order so two consumers never wait on each other in a cycle.
        let mut spent = std::collections::BTreeMap::new();
        for (policy, scope) in &counters {
            let row = tx
                .query_one(
                    "SELECT spent FROM carp_counters WHERE policy_id = $1 AND scope_key = $2
                     FOR UPDATE",
                    &[policy, scope],
                )
                .map_err(be)?;
            spent.insert((*policy, *scope), row.get::<_, i64>(0).unsigned_abs());
        }
        // The instant is read under the counters' locks, from the database's clock.
        let at_us = match at_us {
            Some(at) => at,
            None => tx
                .query_one(
                    "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
                    &[],
                )
                .map_err(be)?
                .get::<_, i64>(0),
        };
        let mut rate_added: std::collections::BTreeMap<(&str, &str), u64> = Default::default();
        let mut budget_added: std::collections::BTreeMap<(&str, &str), u64> = Default::default();
        let mut read = Vec::with_capacity(charges.len());
        for (at, charge) in charges.iter().enumerate() {
            let key = (charge.policy_id.as_str(), charge.scope_key.as_str());
            let refused = |used| ConsumeOutcome::Refused {
                at,
                policy_id: charge.policy_id.clone(),
                scope_key: charge.scope_key.clone(),
                kind: charge.kind.clone(),
                used,
            };
            match charge.kind {
                ChargeKind::Rate { .. } | ChargeKind::Window { .. } | ChargeKind::Once { .. } => {
                    let (max, units, window_seconds) = charge.kind.windowed().unwrap_or_default();
                    let window = to_i64(window_seconds).saturating_mul(1_000_000);
                    let since = at_us.saturating_sub(window);
                    let row = tx
                        .query_one(
                            "SELECT COALESCE(SUM(n), 0)::bigint FROM carp_rate_events
                             WHERE policy_id = $1 AND scope_key = $2 AND at_us > $3 AND at_us <= $4",
                            &[&key.0, &key.1, &since, &at_us],
                        )
                        .map_err(be)?;
                    let used = row
                        .get::<_, i64>(0)
                        .unsigned_abs()
                        .saturating_add(rate_added.get(&key).copied().unwrap_or(0));
                    if used.checked_add(units).is_none_or(|t| t > max) {
                        return Ok((refused(used), at_us));
                    }
                    *rate_added.entry(key).or_default() += units;
                    read.push(used);
                }
                ChargeKind::Budget { max_units, units } => {
                    let used = spent.get(&key).copied().unwrap_or(0)
                        + budget_added.get(&key).copied().unwrap_or(0);
                    if used
                        .checked_add(units)
                        .is_none_or(|total| total > max_units)
                    {
                        return Ok((refused(used), at_us));
                    }
                    *budget_added.entry(key).or_default() += units;
                    read.push(used);
                }
            }
        }
        for ((policy, scope), n) in &rate_added {
            tx.execute(
                "INSERT INTO carp_rate_events (policy_id, scope_key, at_us, n) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (policy_id, scope_key, at_us) DO UPDATE SET n = carp_rate_events.n + EXCLUDED.n",
                &[policy, scope, &at_us, &to_i64(*n)],
            )
            .map_err(be)?;
        }
        for ((policy, scope), units) in &budget_added {
            tx.execute(
                "UPDATE carp_counters SET spent = spent + $3 WHERE policy_id = $1 AND scope_key = $2",
                &[policy, scope, &to_i64(*units)],
            )
            .map_err(be)?;
        }
        tx.commit().map_err(be)?;
        Ok((ConsumeOutcome::Consumed { used: read }, at_us))
    }

    /// One try of [`CarpStore::claim_execution`]; `None` when the key's holder went away
    /// between the insert and the read.
    fn try_claim(
        &self,
        lease: &ExecutionLease,
        body: &str,
    ) -> Result<Option<ClaimOutcome>, CarpError> {
        let mut c = self.carp_client()?;
        let mut tx = c.transaction().map_err(be)?;
        let inserted = tx
            .execute(
                "INSERT INTO carp_execution_leases
                     (execution_id, owner, session_id, idempotency_key, body)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[
                    &lease.execution_id,
                    &lease.owner,
                    &lease.session_id,
                    &lease.idempotency_key,
                    &body,
                ],
            )
            .map_err(be)?;
        let Some(key) = lease.idempotency_key.as_deref() else {
            tx.commit().map_err(be)?;
            return Ok(Some(if inserted == 1 {
                ClaimOutcome::Claimed
            } else {
                ClaimOutcome::InFlight {
                    execution_id: lease.execution_id.clone(),
                }
            }));
        };
        // A finished execution under the key wins over a new claim: its lease is gone.
        let first = tx
            .query_opt(
                "SELECT body FROM carp_executions WHERE session_id = $1 AND idempotency_key = $2",
                &[&lease.session_id, &key],
            )
            .map_err(be)?;
        if let Some(row) = first {
            let record: ExecutionRecord = self.decode(EXECUTIONS, row.get::<_, &str>(0))?;
            tx.rollback().map_err(be)?;
            return Ok(Some(ClaimOutcome::Finished(Box::new(record))));
        }
        if inserted == 1 {
            tx.commit().map_err(be)?;
            return Ok(Some(ClaimOutcome::Claimed));
        }
        let holder = tx
            .query_opt(
                "SELECT execution_id FROM carp_execution_leases
                 WHERE session_id = $1 AND idempotency_key = $2",
                &[&lease.session_id, &key],
            )
            .map_err(be)?;
        Ok(holder.map(|r| ClaimOutcome::InFlight {
            execution_id: r.get(0),
        }))
    }
}

/// Records `marks` ([`cra_carp::store::Mark`]) as rate events of one in `tx`.
pub(crate) fn insert_marks(
    tx: &mut postgres::Transaction<'_>,
    marks: &[cra_carp::store::Mark],
) -> Result<(), postgres::Error> {
    for m in marks {
        tx.execute(
            "INSERT INTO carp_rate_events (policy_id, scope_key, at_us, n) VALUES ($1, $2, $3, 1)
             ON CONFLICT (policy_id, scope_key, at_us) DO UPDATE SET n = carp_rate_events.n + 1",
            &[&m.counter, &m.scope_key, &m.at_us],
        )?;
    }
    Ok(())
}

/// Whether a counter has an event in a window: a history predicate's question.
const HAS_EVENT: &str = "SELECT EXISTS (SELECT 1 FROM carp_rate_events
     WHERE policy_id = $1 AND scope_key = $2 AND at_us > $3 AND at_us <= $4)";

/// History predicates answered over one pooled connection, which keeps the question prepared
/// ([`cra_carp::store::CarpStore::mark_reader`]).
struct PgMarks<'a> {
    client: PooledClient<'a>,
}

impl cra_carp::store::MarkReader for PgMarks<'_> {
    fn has_event(
        &mut self,
        counter: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<bool, CarpError> {
        // The connection keeps the statement prepared (`super::pool`).
        let row = self
            .client
            .query_one(HAS_EVENT, &[&counter, &scope_key, &since_us, &until_us])
            .map_err(be)?;
        Ok(row.get::<_, bool>(0))
    }
}

impl CarpStore for PgStore {
    fn create_session(&self, session: &SessionRecord) -> Result<(), CarpError> {
        let body = self.encode(SESSIONS, session)?;
        let mut c = self.carp_client()?;
        let mut tx = c.transaction().map_err(be)?;
        let owner = owner_column(&self.config().encryption, &session.agent_id);
        if start_session_in(&mut tx, session, &body, owner, None)
            .map_err(be)?
            .is_err()
        {
            return Err(CarpError::AlreadyExists {
                what: "session",
                id: session.session_id.clone(),
            });
        }
        tx.commit().map_err(be)
    }

    fn open_sessions(&self, agent_id: &str) -> Result<u64, CarpError> {
        let mut c = self.carp_client()?;
        let row = c
            .query_opt(
                "SELECT open FROM carp_open_sessions WHERE agent_key = $1",
                &[&open_sessions_key(agent_id)],
            )
            .map_err(be)?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0).unsigned_abs()))
    }

    fn sessions_of(&self, agent_id: &str) -> Result<Option<Vec<String>>, CarpError> {
        if self.config().encryption.current().is_some() {
            return Ok(None);
        }
        let mut c = self.carp_client()?;
        let rows = c
            .query(
                "SELECT session_id FROM carp_sessions WHERE agent_id = $1
                 ORDER BY session_id COLLATE \"C\"",
                &[&agent_id],
            )
            .map_err(be)?;
        Ok(Some(rows.iter().map(|r| r.get::<_, String>(0)).collect()))
    }

    fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, CarpError> {
        self.carp_body(
            "SELECT body FROM carp_sessions WHERE session_id = $1",
            SESSIONS,
            session_id,
        )
    }

    fn end_session(&self, session_id: &str, ended_at: &str) -> Result<SessionRecord, CarpError> {
        let mut c = self.carp_client()?;
        let mut tx = c.transaction().map_err(be)?;
        let ended = end_session_in(&mut tx, &self.config().encryption, session_id, ended_at)
            .map_err(be)?
            .map_err(CarpError::Corrupt)?;
        let Some(record) = ended else {
            return Err(CarpError::NotFound {
                what: "session",
                id: session_id.to_owned(),
            });
        };
        tx.commit().map_err(be)?;
        Ok(record)
    }

    fn insert_request_id(&self, session_id: &str, request_id: &str) -> Result<bool, CarpError> {
        let mut c = self.carp_client()?;
        let n = c
            .execute(
                "INSERT INTO carp_request_ids (session_id, request_id) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING",
                &[&session_id, &request_id],
            )
            .map_err(be)?;
        Ok(n == 1)
    }

    fn has_request_id(&self, session_id: &str, request_id: &str) -> Result<bool, CarpError> {
        let mut c = self.carp_client()?;
        let row = c
            .query_opt(
                "SELECT 1 FROM carp_request_ids WHERE session_id = $1 AND request_id = $2",
                &[&session_id, &request_id],
            )
            .map_err(be)?;
        Ok(row.is_some())
    }

    fn put_resolution(&self, resolution: &StoredResolution) -> Result<(), CarpError> {
        let id = &resolution.resolution.resolution_id;
        let body = self.encode(RESOLUTIONS, resolution)?;
        self.carp_insert(
            "resolution",
            id,
            "INSERT INTO carp_resolutions (resolution_id, session_id, body) VALUES ($1, $2, $3)
             ON CONFLICT (resolution_id) DO NOTHING",
            &[id, &resolution.session_id, &body],
        )
    }

    fn get_resolution(&self, resolution_id: &str) -> Result<Option<StoredResolution>, CarpError> {
        self.carp_body(
            "SELECT body FROM carp_resolutions WHERE resolution_id = $1",
            RESOLUTIONS,
            resolution_id,
        )
    }

    fn get_execution_by_key(
        &self,
        session_id: &str,
        idempotency_key: &str,
    ) -> Result<Option<ExecutionRecord>, CarpError> {
        let mut c = self.carp_client()?;
        let row = c
            .query_opt(
                "SELECT body FROM carp_executions WHERE session_id = $1 AND idempotency_key = $2",
                &[&session_id, &idempotency_key],
            )
            .map_err(be)?;
        row.map(|r| self.decode(EXECUTIONS, r.get::<_, &str>(0)))
            .transpose()
    }

    fn record_execution(&self, execution: &ExecutionRecord) -> Result<ExecutionRecord, CarpError> {
        let body = self.encode(EXECUTIONS, execution)?;
        let mut c = self.carp_client()?;
        let inserted = c.execute(
            "INSERT INTO carp_executions (execution_id, session_id, idempotency_key, body)
             VALUES ($1, $2, $3, $4) ON CONFLICT (session_id, idempotency_key) DO NOTHING",
            &[
                &execution.execution_id,
                &execution.session_id,
                &execution.idempotency_key,
                &body,
            ],
        );
        match inserted {
            Ok(1) => {
                // Outside a transaction with the insert: only the state log's path
                // (`execute_in`) writes both at once, which is the runtime's.
                let mut tx = c.transaction().map_err(be)?;
                insert_marks(&mut tx, &execution.marks).map_err(be)?;
                tx.commit().map_err(be)?;
                Ok(execution.clone())
            }
            Ok(_) => {
                // The key was taken: answer with the first execution recorded under it.
                let key = execution.idempotency_key.as_deref().unwrap_or_default();
                drop(c);
                self.get_execution_by_key(&execution.session_id, key)?
                    .ok_or_else(|| {
                        CarpError::Corrupt(
                            "an idempotency key conflicted but its execution is missing".into(),
                        )
                    })
            }
            Err(e) if is_unique_violation(&e) => Err(CarpError::AlreadyExists {
                what: "execution",
                id: execution.execution_id.clone(),
            }),
            Err(e) => Err(be(e)),
        }
    }

    fn rate_count(
        &self,
        policy_id: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<u64, CarpError> {
        let mut c = self.carp_client()?;
        let row = c
            .query_one(
                "SELECT COALESCE(SUM(n), 0)::bigint FROM carp_rate_events
                 WHERE policy_id = $1 AND scope_key = $2 AND at_us > $3 AND at_us <= $4",
                &[&policy_id, &scope_key, &since_us, &until_us],
            )
            .map_err(be)?;
        Ok(row.get::<_, i64>(0).unsigned_abs())
    }

    fn has_event(
        &self,
        policy_id: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<bool, CarpError> {
        let mut c = self.carp_client()?;
        let row = c
            .query_one(HAS_EVENT, &[&policy_id, &scope_key, &since_us, &until_us])
            .map_err(be)?;
        Ok(row.get::<_, bool>(0))
    }

    fn mark_reader(&self) -> Result<Box<dyn cra_carp::store::MarkReader + '_>, CarpError> {
        Ok(Box::new(PgMarks {
            client: self.carp_client()?,
        }))
    }

    fn read_counters(&self, reads: &[CounterRead<'_>]) -> Result<Vec<u64>, CarpError> {
        // One statement for every counter: a resolve reads them all before it decides.
        let mut kinds: Vec<bool> = Vec::with_capacity(reads.len());
        let (mut policies, mut keys) = (Vec::new(), Vec::new());
        let (mut since, mut until) = (Vec::new(), Vec::new());
        for r in reads {
            let (rate, p, k, s, u) = match *r {
                CounterRead::Rate {
                    policy_id,
                    scope_key,
                    since_us,
                    until_us,
                } => (true, policy_id, scope_key, since_us, until_us),
                CounterRead::Budget {
                    policy_id,
                    scope_key,
                } => (false, policy_id, scope_key, 0, 0),
            };
            kinds.push(rate);
            policies.push(p);
            keys.push(k);
            since.push(s);
            until.push(u);
        }
        let mut c = self.carp_client()?;
        let rows = c
            .query(
                "SELECT CASE WHEN q.rate THEN
                     (SELECT COALESCE(SUM(n), 0)::bigint FROM carp_rate_events e
                      WHERE e.policy_id = q.p AND e.scope_key = q.k
                        AND e.at_us > q.s AND e.at_us <= q.u)
                   ELSE
                     COALESCE((SELECT spent FROM carp_counters c
                               WHERE c.policy_id = q.p AND c.scope_key = q.k), 0)
                   END
                 FROM unnest($1::boolean[], $2::text[], $3::text[], $4::bigint[], $5::bigint[])
                      WITH ORDINALITY AS q(rate, p, k, s, u, i)
                 ORDER BY q.i",
                &[&kinds, &policies, &keys, &since, &until],
            )
            .map_err(be)?;
        Ok(rows
            .iter()
            .map(|r| r.get::<_, i64>(0).unsigned_abs())
            .collect())
    }

    fn budget_spent(&self, policy_id: &str, scope_key: &str) -> Result<u64, CarpError> {
        let mut c = self.carp_client()?;
        let row = c
            .query_opt(
                "SELECT spent FROM carp_counters WHERE policy_id = $1 AND scope_key = $2",
                &[&policy_id, &scope_key],
            )
            .map_err(be)?;
        Ok(row.map(|r| r.get::<_, i64>(0).unsigned_abs()).unwrap_or(0))
    }

    fn try_consume(&self, charges: &[Charge], at_us: i64) -> Result<ConsumeOutcome, CarpError> {
        self.consume(charges, Some(at_us)).map(|(o, _)| o)
    }

    fn try_consume_now(
        &self,
        charges: &[Charge],
        _clock: &dyn cra_wire::Clock,
    ) -> Result<(ConsumeOutcome, i64), CarpError> {
        self.consume(charges, None)
    }

    fn claim_execution(&self, lease: &ExecutionLease) -> Result<ClaimOutcome, CarpError> {
        let body = self.encode(LEASES, lease)?;
        // A claim that loses to a lease released before it could read it tries again.
        for _ in 0..3 {
            if let Some(outcome) = self.try_claim(lease, &body)? {
                return Ok(outcome);
            }
        }
        Err(CarpError::Backend(
            "postgres: an idempotency key kept changing hands; retry".into(),
        ))
    }

    fn release_execution(&self, execution_id: &str) -> Result<(), CarpError> {
        let mut c = self.carp_client()?;
        c.execute(
            "DELETE FROM carp_execution_leases WHERE execution_id = $1",
            &[&execution_id],
        )
        .map_err(be)?;
        Ok(())
    }

    fn leases_of(&self, owner: &str) -> Result<Vec<ExecutionLease>, CarpError> {
        let mut c = self.carp_client()?;
        let rows = c
            .query(
                "SELECT body FROM carp_execution_leases WHERE owner = $1
                 ORDER BY execution_id COLLATE \"C\"",
                &[&owner],
            )
            .map_err(be)?;
        rows.iter()
            .map(|r| self.decode(LEASES, r.get::<_, &str>(0)))
            .collect()
    }

    fn create_approval(&self, approval: &ApprovalRecord) -> Result<(), CarpError> {
        let body = self.encode(APPROVALS, approval)?;
        self.carp_insert(
            "approval",
            &approval.approval_id,
            "INSERT INTO carp_approvals (approval_id, session_id, status, body) VALUES ($1, $2, $3, $4)
             ON CONFLICT (approval_id) DO NOTHING",
            &[
                &approval.approval_id,
                &approval.session_id,
                &approval.status.as_str(),
                &body,
            ],
        )
    }

    fn get_approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, CarpError> {
        self.carp_body(
            "SELECT body FROM carp_approvals WHERE approval_id = $1",
            APPROVALS,
            approval_id,
        )
    }

    fn decide_approval(
        &self,
        approval_id: &str,
        decision: ApprovalDecision,
        decided_by: &str,
        note: Option<&str>,
        decided_at: &str,
    ) -> Result<ApprovalRecord, CarpError> {
        let mut c = self.carp_client()?;
        let mut tx = c.transaction().map_err(be)?;
        let row = tx
            .query_opt(
                "SELECT body FROM carp_approvals WHERE approval_id = $1 FOR UPDATE",
                &[&approval_id],
            )
            .map_err(be)?;
        let Some(row) = row else {
            return Err(CarpError::NotFound {
                what: "approval",
                id: approval_id.to_owned(),
            });
        };
        let mut record: ApprovalRecord = self.decode(APPROVALS, row.get::<_, &str>(0))?;
        record.decide(decision, decided_by, note, decided_at)?;
        tx.execute(
            "UPDATE carp_approvals SET status = $2, body = $3 WHERE approval_id = $1",
            &[
                &approval_id,
                &record.status.as_str(),
                &self.encode(APPROVALS, &record)?,
            ],
        )
        .map_err(be)?;
        tx.commit().map_err(be)?;
        Ok(record)
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, CarpError> {
        let mut c = self.carp_client()?;
        let rows = c
            .query(
                "SELECT body FROM carp_approvals WHERE status = 'pending'
                 ORDER BY approval_id COLLATE \"C\"",
                &[],
            )
            .map_err(be)?;
        rows.iter()
            .map(|r| self.decode(APPROVALS, r.get::<_, &str>(0)))
            .collect()
    }

    fn list_decided_approvals(&self, limit: usize) -> Result<Vec<ApprovalRecord>, CarpError> {
        let mut c = self.carp_client()?;
        let rows = c
            .query(
                "SELECT body FROM carp_approvals WHERE status <> 'pending'",
                &[],
            )
            .map_err(be)?;
        let decided = rows
            .iter()
            .map(|r| self.decode(APPROVALS, r.get::<_, &str>(0)))
            .collect::<Result<Vec<ApprovalRecord>, CarpError>>()?;
        Ok(cra_carp::store::newest_decisions(decided, limit))
    }
}
