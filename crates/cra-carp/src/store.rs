//! The storage CARP needs, as a trait: sessions, request ids seen per session, resolutions,
//! executions with idempotency keys, rate-limit and budget counters, and approvals.
//!
//! The trait is synchronous, object-safe and `Send + Sync` (used as `Arc<dyn CarpStore>`; the
//! server calls it from `spawn_blocking`). `cra-store` implements it for redb and PostgreSQL.
//! The in-memory implementation (`crate::memory::MemoryStore`, feature `test-support`) exists
//! for tests only.
//!
//! Contract every implementation must keep (the shared test suite checks it):
//! * Every write is atomic: it happens entirely or not at all, and a failed call changes nothing.
//! * [`CarpStore::insert_request_id`] and [`CarpStore::record_execution`] are insert-if-absent:
//!   of two concurrent calls with the same key exactly one inserts, the other sees the first.
//! * [`CarpStore::try_consume`] checks *every* charge and records them all or none, atomically
//!   with respect to other `try_consume` calls on the same `(policy_id, scope_key)` pairs, so two
//!   concurrent executions can never both take the last unit of a limit.
//! * [`CarpStore::try_consume_now`] reads the instant a charge is counted at *inside* that
//!   atomic step (redb: the injected clock under the write lock; PostgreSQL: the database's
//!   clock once the counters are locked), so the instants of one counter follow the order the
//!   charges were recorded in, whatever clocks the callers read before.
//! * [`CarpStore::claim_execution`] is insert-if-absent on the execution's idempotency key: of
//!   two concurrent first uses of one `(session, key)` exactly one claims it.
//! * [`CarpStore::decide_approval`] succeeds once per approval; later calls fail with
//!   [`CarpStoreError::AlreadyDecided`] and change nothing.
//!
//! Times are passed as Unix microseconds (`i64`, UTC) where the store compares them, and as wire
//! strings (`YYYY-MM-DDTHH:MM:SS.ffffffZ`) where they are only recorded.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::types::{ExecuteResponse, Resolution};

/// A CARP session: opened by one agent, active until ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// UUIDv7.
    pub session_id: String,
    /// The agent that owns the session; only it may append to it.
    pub agent_id: String,
    /// The parent session, for nested agents.
    pub parent_session_id: Option<String>,
    /// When it was opened (wire form).
    pub created_at: String,
    /// When it was ended (wire form); `None` while active.
    pub ended_at: Option<String>,
}

impl SessionRecord {
    /// A session opened at `created_at` with no parent: a client's, or a chain the runtime keeps
    /// itself (an operator or project audit chain, `agent_id` naming it).
    pub fn opened(session_id: &str, agent_id: &str, created_at: String) -> Self {
        Self {
            session_id: session_id.to_owned(),
            agent_id: agent_id.to_owned(),
            parent_session_id: None,
            created_at,
            ended_at: None,
        }
    }

    /// True until the session is ended.
    pub fn is_active(&self) -> bool {
        self.ended_at.is_none()
    }
}

/// A session's opening ([`StateChange::Start`]): its record, and the most sessions its agent
/// may have open once it is (the open-sessions quota; `None`: no limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStart {
    /// The new session.
    pub record: SessionRecord,
    /// The agent's open sessions may number at most this many, the new one included.
    pub max_open: Option<u64>,
}

/// The key of `agent_id`'s open-sessions counter: the lowercase hex SHA-256 of the id, so a
/// store whose records are encrypted keeps no agent id in the clear beside them (a reader who
/// guesses an id still learns how many sessions it has open).
pub fn open_sessions_key(agent_id: &str) -> String {
    cra_wire::hash::sha256_hex(agent_id.as_bytes())
}

/// The refusal of a [`StateChange::Start`] that would give its agent more than `max_open`
/// open sessions.
pub fn open_sessions_exceeded(agent_id: &str, max_open: u64) -> cra_trace::store::ChainStoreError {
    cra_trace::store::ChainStoreError::Refused {
        token: cra_wire::Token::QuotaExceeded,
        message: format!(
            "agent `{agent_id}` has {max_open} open sessions, the most this server allows \
             (quotas.max_open_sessions); end one (DELETE /v1/sessions/{{id}}) and open again"
        ),
    }
}

/// A resolution as stored for later execute requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResolution {
    /// The resolution as answered, in its stored form ([`StoredResolution::stored_form`]):
    /// without `explain` and without the context blocks' content.
    pub resolution: Resolution,
    /// The session it was made in.
    pub session_id: String,
    /// The agent it was made for.
    pub agent_id: String,
    /// When it stops being valid: `timestamp + ttl_seconds`, Unix microseconds.
    pub expires_at_us: i64,
    /// Which atlas offered each allowed action, and its executor, by action id. An execute runs
    /// the executor recorded here, never another atlas's action of the same id. Empty in
    /// resolutions stored before it was kept (the executor is then looked up in the atlases in
    /// force, first atlas first, as it was then).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub origins: std::collections::BTreeMap<String, crate::eval::ActionOrigin>,
    /// The digest of each atlas in `origins`, as in force when the resolution was made: an
    /// execute whose action's atlas is no longer in force with this digest is refused
    /// `resolution_stale`, so a changed policy (an emergency deny) applies to resolutions made
    /// before it (`specs/carp.md`, "The atlas in force at execute"). Empty in resolutions stored
    /// before it was kept, which are not checked.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub atlas_digests: std::collections::BTreeMap<String, String>,
}

impl StoredResolution {
    /// What is kept of an answered resolution: everything an execute checks (actions, schemas,
    /// constraints, decision, approval, expiry), without `explain` and with `context_blocks`
    /// empty. The blocks are recorded, whole, in the resolve's `carp.resolution.completed` TRACE
    /// event; keeping a second copy made a resolve write a third more bytes.
    pub fn stored_form(resolution: &Resolution) -> Resolution {
        Resolution {
            carp_version: resolution.carp_version.clone(),
            resolution_id: resolution.resolution_id.clone(),
            request_id: resolution.request_id.clone(),
            timestamp: resolution.timestamp.clone(),
            decision: resolution.decision.clone(),
            context_blocks: Vec::new(),
            allowed_actions: resolution.allowed_actions.clone(),
            denied_actions: resolution.denied_actions.clone(),
            constraints: resolution.constraints.clone(),
            ttl_seconds: resolution.ttl_seconds,
            trace_id: resolution.trace_id.clone(),
            explain: None,
            extra: resolution.extra.clone(),
        }
    }
}

/// An execution, keyed for idempotency by `(session_id, idempotency_key)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// The execution id (also in `response`).
    pub execution_id: String,
    /// The session the execute request came in.
    pub session_id: String,
    /// The client's idempotency key, if it sent one.
    pub idempotency_key: Option<String>,
    /// The response answered the first time.
    pub response: ExecuteResponse,
    /// The marks a succeeded call leaves for later `after` and `bind` tests
    /// ([`crate::history`]), recorded with the execution, in its write, when it is the first
    /// record of its key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Mark>,
    /// The call that ran: a later use of the idempotency key must repeat it to get `response`.
    /// `None` in records written before round 2 (any repeat then gets the first response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<IdempotentCall>,
}

/// The call an idempotency key names: its action and the digest of its parameters
/// (`cra_wire::hash::canonical_digest`, as `action.requested` records it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotentCall {
    /// The action.
    pub action_id: String,
    /// `sha256:` of the parameters in TRACE canonical form.
    pub parameters_hash: String,
}

impl IdempotentCall {
    /// The call of `action_id` with `parameters`.
    pub fn of(action_id: &str, parameters: &serde_json::Value) -> Self {
        Self {
            action_id: action_id.to_owned(),
            parameters_hash: cra_wire::hash::canonical_digest(parameters),
        }
    }
}

/// One event on a history predicate's counter: a call the predicate compares with succeeded, at
/// `at_us` (Unix microseconds). Stored as a rate-limit event of one on `(counter, scope_key)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// `<policy_id>#<n>`: the predicate.
    pub counter: String,
    /// The scope's key, narrowed to the compared values ([`crate::history`]).
    pub scope_key: String,
    /// When the call succeeded.
    pub at_us: i64,
}

/// An execution cleared to run whose outcome is not recorded yet: the lease of the server
/// instance (`owner`) that runs it. Claimed before the executor runs, released once the outcome
/// is recorded; a lease left by a crash is closed by its owner when it starts again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionLease {
    /// The execution id.
    pub execution_id: String,
    /// The server instance running it (`replica_id`).
    pub owner: String,
    /// The session of the execute request.
    pub session_id: String,
    /// The agent that owns the session.
    pub agent_id: String,
    /// The client's idempotency key, claimed with the lease.
    pub idempotency_key: Option<String>,
    /// The action.
    pub action_id: String,
    /// The execute request's id.
    pub request_id: String,
    /// The resolution it runs under (the parent span of its events).
    pub resolution_id: String,
    /// The resolution's trace id.
    pub trace_id: String,
    /// When it was claimed (wire form).
    pub claimed_at: String,
    /// `sha256:` of the call's parameters, so that the outcome recorded for a run cut off by a
    /// crash still names its call ([`ExecutionRecord::call`]); `None` in leases written before
    /// round 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_hash: Option<String>,
}

/// The answer of [`CarpStore::claim_execution`].
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The lease (and its idempotency key) is recorded: the executor may run.
    Claimed,
    /// Another execution holds the idempotency key and has no outcome yet; nothing changed.
    InFlight {
        /// The execution holding the key.
        execution_id: String,
    },
    /// The idempotency key already has a recorded execution; nothing changed.
    Finished(Box<ExecutionRecord>),
}

/// What a charge counts against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChargeKind {
    /// One execution, counted in a sliding window `(at - window_seconds, at]`.
    Rate {
        /// Executions allowed per window.
        max_calls: u64,
        /// Window length.
        window_seconds: u64,
    },
    /// `units` of a total counted in a sliding window `(at - window_seconds, at]`: fits while
    /// the units in the window plus these stay at most `max_units` (`sum_within`).
    Window {
        /// Units allowed per window.
        max_units: u64,
        /// Window length.
        window_seconds: u64,
        /// Units this execution adds.
        units: u64,
    },
    /// The one use of a granted approval asked for one call: fits while the counter has no
    /// event in `(at - window_seconds, at]` (a window that outlasts the approval).
    Once {
        /// Window length.
        window_seconds: u64,
    },
    /// `units` of a budget that is never replenished.
    Budget {
        /// Units available in total.
        max_units: u64,
        /// Units this execution costs.
        units: u64,
    },
}

impl ChargeKind {
    /// A windowed charge as `(max_units, units, window_seconds)`: a rate limit's call is one
    /// unit of `max_calls`. `None` for a budget. Every store checks both kinds as one: the
    /// units in `(at - window, at]` plus `units` stay at most `max_units`.
    pub fn windowed(&self) -> Option<(u64, u64, u64)> {
        match *self {
            ChargeKind::Rate {
                max_calls,
                window_seconds,
            } => Some((max_calls, 1, window_seconds)),
            ChargeKind::Window {
                max_units,
                window_seconds,
                units,
            } => Some((max_units, units, window_seconds)),
            ChargeKind::Once { window_seconds } => Some((1, 1, window_seconds)),
            ChargeKind::Budget { .. } => None,
        }
    }

    /// `(max, units)`: the most its counter may hold (in its window, for a windowed charge) and
    /// what this charge adds. A charge fits while the counter's units plus these stay at most
    /// `max`.
    pub fn cap_and_units(&self) -> (u64, u64) {
        match *self {
            ChargeKind::Budget { max_units, units } => (max_units, units),
            _ => self
                .windowed()
                .map_or((0, 0), |(max, units, _)| (max, units)),
        }
    }

    /// The same count without a maximum: it always fits. A `log_only` limit's charge is taken
    /// so, with the call's own, to count the calls it would have limited ([`crate::shadow`]).
    #[must_use]
    pub fn uncapped(&self) -> ChargeKind {
        match *self {
            ChargeKind::Rate { window_seconds, .. } => ChargeKind::Window {
                max_units: u64::MAX,
                window_seconds,
                units: 1,
            },
            ChargeKind::Window {
                window_seconds,
                units,
                ..
            } => ChargeKind::Window {
                max_units: u64::MAX,
                window_seconds,
                units,
            },
            ChargeKind::Once { window_seconds } => ChargeKind::Window {
                max_units: u64::MAX,
                window_seconds,
                units: 1,
            },
            ChargeKind::Budget { units, .. } => ChargeKind::Budget {
                max_units: u64::MAX,
                units,
            },
        }
    }
}

/// One limit an execution must fit in: `(policy_id, scope_key)` names the counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The rate_limit or budget policy.
    pub policy_id: String,
    /// `session:<id>`, `agent:<id>` or `global` (see [`crate::eval::scope_key`]).
    pub scope_key: String,
    /// What is counted.
    pub kind: ChargeKind,
}

/// The answer of [`CarpStore::try_consume`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsumeOutcome {
    /// Every charge fitted and all were recorded.
    Consumed {
        /// What each charge found counted on its counter before it (in the order given):
        /// executions or units in its window, units spent of a budget, with the earlier charges
        /// of the same call on that counter. An execute records these as the history it read
        /// (`action.requested`'s `history`), so a replay can decide it again from its chain.
        used: Vec<u64>,
    },
    /// This charge did not fit; nothing was recorded.
    Refused {
        /// The first charge that did not fit: its index in the charges given.
        at: usize,
        /// Its policy (the charge's `policy_id`).
        policy_id: String,
        /// Its counter.
        scope_key: String,
        /// Whether it was a rate limit or a budget.
        kind: ChargeKind,
        /// Executions in the window (rate) or units spent (budget) at the time of the check.
        used: u64,
    },
}

impl ConsumeOutcome {
    /// True when every charge fitted and was recorded.
    pub fn is_consumed(&self) -> bool {
        matches!(self, Self::Consumed { .. })
    }
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a human.
    Pending,
    /// Granted: the gated actions may run.
    Granted,
    /// Rejected: the gated actions may not run.
    Rejected,
}

impl ApprovalStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Granted => "granted",
            ApprovalStatus::Rejected => "rejected",
        }
    }
}

/// A human decision on an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Let the gated actions run.
    Grant,
    /// Refuse them.
    Reject,
}

/// The exact call an approval was asked for: the execute that opened it. A granted approval
/// runs this call once and no other ([`crate::execute::authorize`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalCall {
    /// The execute request that asked.
    pub execution_id: String,
    /// The gated action.
    pub action_id: String,
    /// `sha256:` of the call's parameters in TRACE canonical form.
    pub parameters_hash: String,
    /// The atlas that declares the action, as it was in force when the approval was asked.
    pub atlas_id: String,
    /// That atlas's digest: a grant does not carry over to another version of its policies.
    pub atlas_digest: String,
}

/// One approval: opened by the first execute of a gated action under a `requires_approval`
/// resolution (round 2; before, by the resolve itself), decided once, used once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The `approval_id` of the resolution's decision.
    pub approval_id: String,
    /// The resolution it belongs to.
    pub resolution_id: String,
    /// The session of that resolution.
    pub session_id: String,
    /// The agent that asked.
    pub agent_id: String,
    /// The gated action ids.
    pub actions: Vec<String>,
    /// When it was issued (wire form).
    pub created_at: String,
    /// When it lapses (Unix microseconds; the resolution's expiry).
    pub expires_at_us: i64,
    /// Pending, granted or rejected.
    pub status: ApprovalStatus,
    /// Who decided, once decided.
    pub decided_by: Option<String>,
    /// When it was decided (wire form), once decided.
    pub decided_at: Option<String>,
    /// The decider's note.
    pub note: Option<String>,
    /// The call it was asked for; `None` for an approval a resolve opened before round 2, which
    /// covers every action it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<ApprovalCall>,
}

impl ApprovalRecord {
    /// The one transition of an approval, which every backend applies inside its write: a
    /// pending approval becomes granted or rejected, with who decided, when and why.
    /// [`CarpStoreError::AlreadyDecided`] (and the record unchanged) when it is not pending.
    pub fn decide(
        &mut self,
        decision: ApprovalDecision,
        decided_by: &str,
        note: Option<&str>,
        decided_at: &str,
    ) -> Result<(), CarpStoreError> {
        if self.status != ApprovalStatus::Pending {
            return Err(CarpStoreError::AlreadyDecided {
                approval_id: self.approval_id.clone(),
                status: self.status.as_str(),
            });
        }
        self.status = match decision {
            ApprovalDecision::Grant => ApprovalStatus::Granted,
            ApprovalDecision::Reject => ApprovalStatus::Rejected,
        };
        self.decided_by = Some(decided_by.to_owned());
        self.decided_at = Some(decided_at.to_owned());
        self.note = note.map(str::to_owned);
        Ok(())
    }
}

/// Why a store call failed. Every variant leaves the store unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CarpStoreError {
    /// A record with this key already exists.
    #[error("{what} `{id}` already exists; use a new id")]
    AlreadyExists {
        /// The kind of record (`session`, `resolution`, `approval`).
        what: &'static str,
        /// Its key.
        id: String,
    },
    /// No record with this key.
    #[error("no {what} `{id}`; check the id")]
    NotFound {
        /// The kind of record.
        what: &'static str,
        /// Its key.
        id: String,
    },
    /// The approval was decided before.
    #[error("approval `{approval_id}` was already {status}; an approval is decided once")]
    AlreadyDecided {
        /// The approval.
        approval_id: String,
        /// Its status (`granted` or `rejected`).
        status: &'static str,
    },
    /// The backend failed (I/O, connection, serialisation); the message says what to check.
    #[error("the CARP store failed: {0}")]
    Backend(String),
    /// A stored record could not be read back (corruption or an incompatible version).
    #[error("a stored CARP record is unreadable: {0}; the data directory may be damaged")]
    Corrupt(String),
}

/// Answers history predicates ([`CarpStore::has_event`]'s question) for one execute
/// ([`CarpStore::mark_reader`]).
pub trait MarkReader {
    /// Whether `(counter, scope_key)` has an event at an instant `t` with
    /// `since_us < t <= until_us`.
    fn has_event(
        &mut self,
        counter: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<bool, CarpStoreError>;
}

/// The default [`MarkReader`]: one [`CarpStore::has_event`] per question.
struct EachCall<'a, S: ?Sized>(&'a S);

impl<S: CarpStore + ?Sized> MarkReader for EachCall<'_, S> {
    fn has_event(
        &mut self,
        counter: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<bool, CarpStoreError> {
        self.0.has_event(counter, scope_key, since_us, until_us)
    }
}

/// Everything CARP keeps between requests. See the module documentation for the contract.
pub trait CarpStore: Send + Sync + fmt::Debug {
    // --- sessions ---------------------------------------------------------------------------

    /// Stores a new session; [`CarpStoreError::AlreadyExists`] when its id is taken.
    fn create_session(&self, session: &SessionRecord) -> Result<(), CarpStoreError>;

    /// The session, if it exists.
    fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, CarpStoreError>;

    /// The ids of the sessions whose agent is `agent_id`, in id order, read from an index kept
    /// with the sessions: what an agent's `GET /v1/traces` lists, without reading any other
    /// agent's sessions. `None` when the store keeps no such index: a store whose records are
    /// encrypted does not, since the index would hold agent ids in the clear.
    fn sessions_of(&self, agent_id: &str) -> Result<Option<Vec<String>>, CarpStoreError>;

    /// How many sessions of `agent_id` are open: the counter the open-sessions quota reads
    /// ([`SessionStart::max_open`]), kept with the records by every write that starts or ends a
    /// session. This default counts through [`CarpStore::sessions_of`] (0 without that index).
    fn open_sessions(&self, agent_id: &str) -> Result<u64, CarpStoreError> {
        let mut open = 0;
        for id in self.sessions_of(agent_id)?.unwrap_or_default() {
            if self.get_session(&id)?.is_some_and(|r| r.is_active()) {
                open += 1;
            }
        }
        Ok(open)
    }

    /// Ends an active session at `ended_at` and returns it. Ending an ended session returns it
    /// unchanged; [`CarpStoreError::NotFound`] when there is no such session.
    fn end_session(
        &self,
        session_id: &str,
        ended_at: &str,
    ) -> Result<SessionRecord, CarpStoreError>;

    // --- request ids ------------------------------------------------------------------------

    /// Records `request_id` as used in `session_id`. Returns `true` when it was new, `false`
    /// when the session had already seen it (nothing changes then).
    fn insert_request_id(&self, session_id: &str, request_id: &str)
    -> Result<bool, CarpStoreError>;

    /// Whether `session_id` has already seen `request_id` (a read; nothing changes).
    fn has_request_id(&self, session_id: &str, request_id: &str) -> Result<bool, CarpStoreError>;

    /// Records what a resolve leaves behind: `request_id` as used in `session_id`, and the
    /// resolution (a resolve opens no approval: the execute it gates does). Returns `false` and
    /// changes nothing when the session has already seen `request_id` (a duplicate sent
    /// concurrently). A store whose writes are serialised (redb) does it in one transaction, so
    /// a resolve waits for the writer once; the default makes the two writes in turn.
    fn record_resolve(
        &self,
        session_id: &str,
        request_id: &str,
        resolution: &StoredResolution,
    ) -> Result<bool, CarpStoreError> {
        if !self.insert_request_id(session_id, request_id)? {
            return Ok(false);
        }
        self.put_resolution(resolution)?;
        Ok(true)
    }

    // --- resolutions ------------------------------------------------------------------------

    /// Stores a resolution; [`CarpStoreError::AlreadyExists`] when its id is taken.
    fn put_resolution(&self, resolution: &StoredResolution) -> Result<(), CarpStoreError>;

    /// The resolution, if it exists (expired ones may still be returned; the caller checks
    /// `expires_at_us`).
    fn get_resolution(
        &self,
        resolution_id: &str,
    ) -> Result<Option<StoredResolution>, CarpStoreError>;

    // --- executions -------------------------------------------------------------------------

    /// The execution recorded under `(session_id, idempotency_key)`, if any.
    fn get_execution_by_key(
        &self,
        session_id: &str,
        idempotency_key: &str,
    ) -> Result<Option<ExecutionRecord>, CarpStoreError>;

    /// Records an execution. When it carries an idempotency key already recorded in its session
    /// the stored (first) record is returned and nothing changes; otherwise `execution` is stored
    /// and returned. Records without a key are always stored.
    fn record_execution(
        &self,
        execution: &ExecutionRecord,
    ) -> Result<ExecutionRecord, CarpStoreError>;

    // --- counters ---------------------------------------------------------------------------

    /// Executions counted for `(policy_id, scope_key)` at instants `t` with
    /// `since_us < t <= until_us`.
    fn rate_count(
        &self,
        policy_id: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<u64, CarpStoreError>;

    /// Whether `(policy_id, scope_key)` has any event at an instant `t` with
    /// `since_us < t <= until_us`: a history predicate's question ([`crate::history`]). The
    /// durable stores answer from their index in one seek, whatever the number of events.
    fn has_event(
        &self,
        policy_id: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<bool, CarpStoreError> {
        Ok(self.rate_count(policy_id, scope_key, since_us, until_us)? > 0)
    }

    /// A reader of history marks that answers [`CarpStore::has_event`] questions from one view
    /// of the store, opened once for all the predicates of one execute: on redb one read
    /// transaction instead of one per predicate. The default asks [`CarpStore::has_event`] each
    /// time.
    fn mark_reader(&self) -> Result<Box<dyn MarkReader + '_>, CarpStoreError> {
        Ok(Box::new(EachCall(self)))
    }

    /// Units spent so far on `(policy_id, scope_key)`.
    fn budget_spent(&self, policy_id: &str, scope_key: &str) -> Result<u64, CarpStoreError>;

    /// The value of each counter of `reads`, in order: what [`CarpStore::rate_count`] or
    /// [`CarpStore::budget_spent`] answers for it. A backend reached over a network answers
    /// them in one round trip; the default asks one at a time.
    fn read_counters(&self, reads: &[CounterRead<'_>]) -> Result<Vec<u64>, CarpStoreError> {
        reads
            .iter()
            .map(|r| match *r {
                CounterRead::Rate {
                    policy_id,
                    scope_key,
                    since_us,
                    until_us,
                } => self.rate_count(policy_id, scope_key, since_us, until_us),
                CounterRead::Budget {
                    policy_id,
                    scope_key,
                } => self.budget_spent(policy_id, scope_key),
            })
            .collect()
    }

    /// Checks every charge at instant `at_us` and, only if all fit, records them all
    /// (one execution at `at_us` per rate charge, `units` per budget charge). A rate charge fits
    /// when fewer than `max_calls` executions fall in `(at_us - window_seconds, at_us]`; a budget
    /// charge fits when `spent + units <= max_units`.
    fn try_consume(&self, charges: &[Charge], at_us: i64)
    -> Result<ConsumeOutcome, CarpStoreError>;

    /// As [`CarpStore::try_consume`], at an instant the store reads inside the atomic step: the
    /// database's clock on PostgreSQL (one clock for every replica), `clock` otherwise. An
    /// instant read before waiting for the lock would be older than charges recorded meanwhile
    /// and miss them in its window. Returns the instant used (Unix microseconds) with the answer.
    fn try_consume_now(
        &self,
        charges: &[Charge],
        clock: &dyn cra_wire::Clock,
    ) -> Result<(ConsumeOutcome, i64), CarpStoreError>;

    // --- execution leases -------------------------------------------------------------------

    /// Records `lease` and claims its idempotency key (if any) in one atomic step, before the
    /// executor runs. [`ClaimOutcome::Finished`] when the key already has a recorded execution,
    /// [`ClaimOutcome::InFlight`] when another lease holds it; nothing changes then.
    fn claim_execution(&self, lease: &ExecutionLease) -> Result<ClaimOutcome, CarpStoreError>;

    /// [`CarpStore::claim_execution`], then, once claimed, [`CarpStore::try_consume_now`], as
    /// one step: a refused charge (or a failure) leaves no claim behind. The consume's outcome,
    /// with the instant it was judged at (Unix microseconds, the store's clock: what a
    /// `Retry-After` is counted from), is `None` when nothing was claimed. The default makes the three calls (claim, consume,
    /// release on refusal); a store with one write transaction per call (redb) does both in one.
    fn claim_and_consume_now(
        &self,
        lease: &ExecutionLease,
        charges: &[Charge],
        clock: &dyn cra_wire::Clock,
    ) -> Result<(ClaimOutcome, Option<(ConsumeOutcome, i64)>), CarpStoreError> {
        let claim = self.claim_execution(lease)?;
        if claim != ClaimOutcome::Claimed {
            return Ok((claim, None));
        }
        let consumed = self.try_consume_now(charges, clock);
        if !matches!(consumed, Ok((ConsumeOutcome::Consumed { .. }, _))) {
            self.release_execution(&lease.execution_id)?;
        }
        Ok((claim, Some(consumed?)))
    }

    /// Removes the lease of `execution_id`, and its key claim if no execution was recorded under
    /// it (a claim whose charges were refused). Removing an absent lease changes nothing.
    fn release_execution(&self, execution_id: &str) -> Result<(), CarpStoreError>;

    /// Every lease held by `owner`, ordered by execution id.
    fn leases_of(&self, owner: &str) -> Result<Vec<ExecutionLease>, CarpStoreError>;

    // --- approvals --------------------------------------------------------------------------

    /// Stores a new pending approval; [`CarpStoreError::AlreadyExists`] when its id is taken.
    fn create_approval(&self, approval: &ApprovalRecord) -> Result<(), CarpStoreError>;

    /// The approval, if it exists.
    fn get_approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, CarpStoreError>;

    /// Decides a pending approval once and returns the updated record.
    /// [`CarpStoreError::NotFound`] when there is none, [`CarpStoreError::AlreadyDecided`] when it was
    /// decided before.
    fn decide_approval(
        &self,
        approval_id: &str,
        decision: ApprovalDecision,
        decided_by: &str,
        note: Option<&str>,
        decided_at: &str,
    ) -> Result<ApprovalRecord, CarpStoreError>;

    /// Every approval still pending, ordered by `approval_id`.
    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, CarpStoreError>;

    /// The `limit` approvals decided most recently (granted or rejected), newest decision
    /// first, ties by `approval_id`: the history an operator reviews. Backends read every
    /// approval to answer (retention bounds how many there are).
    fn list_decided_approvals(&self, limit: usize) -> Result<Vec<ApprovalRecord>, CarpStoreError>;
}

/// The `limit` newest decisions among `approvals`, as
/// [`CarpStore::list_decided_approvals`] orders them (every backend sorts with this).
pub fn newest_decisions(
    approvals: impl IntoIterator<Item = ApprovalRecord>,
    limit: usize,
) -> Vec<ApprovalRecord> {
    let mut decided: Vec<ApprovalRecord> = approvals
        .into_iter()
        .filter(|a| a.status != ApprovalStatus::Pending)
        .collect();
    // Wire timestamps are RFC 3339 UTC with a fixed width, so they sort as text.
    decided.sort_by(|a, b| {
        b.decided_at
            .cmp(&a.decided_at)
            .then_with(|| a.approval_id.cmp(&b.approval_id))
    });
    decided.truncate(limit);
    decided
}

// --- a change of state and its trace events as one unit -------------------------------------

/// What a resolve leaves in the store: its request id as used in the session and the
/// resolution (for later execute requests). It opens no approval: the execute it gates does
/// ([`StateChange::Open`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveRecord {
    /// The requester's session.
    pub session_id: String,
    /// The request's id, unique per session.
    pub request_id: String,
    /// The resolution as stored (without `explain`); `None` when an earlier resolution answers
    /// the request again ([`crate::cache`]): only the request id is recorded.
    pub resolution: Option<StoredResolution>,
}

impl ResolveRecord {
    /// Records this in `store`: with [`CarpStore::record_resolve`], or, for a request answered
    /// by an earlier resolution, its request id alone. `false` when the request id was used.
    pub fn record_in(&self, store: &dyn CarpStore) -> Result<bool, CarpStoreError> {
        match &self.resolution {
            Some(r) => store.record_resolve(&self.session_id, &self.request_id, r),
            None => store.insert_request_id(&self.session_id, &self.request_id),
        }
    }
}

/// A decision on a pending approval of `session_id`, as it is recorded
/// ([`ApprovalRecord::decide`] applied inside the store's write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// The approval's session: the chain its event goes to. An approval of another session is
    /// refused as not found.
    pub session_id: String,
    /// The approval decided.
    pub approval_id: String,
    /// Grant or reject.
    pub decision: ApprovalDecision,
    /// Who decided.
    pub decided_by: String,
    /// Why.
    pub note: Option<String>,
    /// When (wire form).
    pub decided_at: String,
}

impl DecisionRecord {
    /// `approval` as this decision leaves it; the refusal when it cannot be decided (another
    /// session's approval, or one decided before), as the chain error a store answers with.
    pub fn apply_to(
        &self,
        mut approval: ApprovalRecord,
    ) -> Result<ApprovalRecord, cra_trace::store::ChainStoreError> {
        if approval.session_id != self.session_id {
            return Err(self.not_found());
        }
        approval
            .decide(
                self.decision,
                &self.decided_by,
                self.note.as_deref(),
                &self.decided_at,
            )
            .map_err(decision_refusal)?;
        Ok(approval)
    }

    /// The refusal of a decision on an approval the store does not have.
    pub fn not_found(&self) -> cra_trace::store::ChainStoreError {
        decision_refusal(CarpStoreError::NotFound {
            what: "approval",
            id: self.approval_id.clone(),
        })
    }
}

/// A store's refusal of a decision, as the append carrying it is answered: `approval_not_found`
/// (404) or, for an approval decided before, `already_exists` (409). Other failures are the
/// store's and are answered unavailable.
pub fn decision_refusal(e: CarpStoreError) -> cra_trace::store::ChainStoreError {
    use cra_trace::store::ChainStoreError;
    use cra_wire::Token;
    match e {
        CarpStoreError::NotFound { .. } => ChainStoreError::Refused {
            token: Token::ApprovalNotFound,
            message: e.to_string(),
        },
        CarpStoreError::AlreadyDecided { .. } => ChainStoreError::Refused {
            token: Token::AlreadyExists,
            message: e.to_string(),
        },
        other => ChainStoreError::Unavailable(other.to_string()),
    }
}

/// The refusal of an [`StateChange::Open`] whose approval id is taken: another execute under
/// the same resolution opened it first. The caller reads it and answers as for any opened
/// approval.
pub fn opened_before(approval_id: &str) -> cra_trace::store::ChainStoreError {
    cra_trace::store::ChainStoreError::Refused {
        token: cra_wire::Token::AlreadyExists,
        message: format!("approval `{approval_id}` was opened before by another execute"),
    }
}

/// The events an outbox entry held (a Relay write's: `cra_relay::store::OutboxEntry`), appended
/// to `session_id`'s chain as the entry is removed, in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The chain the events go to.
    pub session_id: String,
    /// The entry removed.
    pub outbox_key: String,
}

impl Settlement {
    /// The refusal of a settlement whose entry is gone: another appender (a replica rolling the
    /// outbox forward at its start) appended its events and removed it first.
    pub fn settled_before(&self) -> cra_trace::store::ChainStoreError {
        cra_trace::store::ChainStoreError::Refused {
            token: cra_wire::Token::AlreadyExists,
            message: format!(
                "outbox entry `{}` was settled before; its events are in the chain",
                self.outbox_key
            ),
        }
    }
}

/// A change of state that is recorded together with the TRACE events that tell of it.
#[derive(Debug, Clone, PartialEq)]
pub enum StateChange {
    /// What a resolve leaves behind.
    Resolve(ResolveRecord),
    /// An approval decided.
    Decide(DecisionRecord),
    /// An execution's outcome recorded (insert-if-absent, its idempotency key kept for it) and
    /// its lease released.
    Execute(ExecutionRecord),
    /// An outbox entry's events appended and the entry removed; refused with
    /// [`Settlement::settled_before`] when the entry is gone.
    Settle(Settlement),
    /// A pending approval opened by the execute it gates; refused with [`opened_before`] when
    /// its id is taken (a concurrent execute under the same resolution opened it first).
    Open(ApprovalRecord),
    /// A session's record created with the events that open its chain (`session.started`), so
    /// no record is ever stored without them; refused with [`started_before`] when its id is
    /// taken, and with [`open_sessions_exceeded`] when its agent has its quota of open sessions.
    Start(SessionStart),
    /// A session marked ended with the `session.ended` that closes its chain. Refused with
    /// [`SessionEnd::execution_in_progress`] while an execution of the session holds its lease
    /// (its outcome still has to be appended), and with [`SessionEnd::not_found`] when there is
    /// no such session. A record already marked ended (by a version that wrote the two apart)
    /// is left as it is and the event appended: a repeated end repairs the chain.
    End(SessionEnd),
}

/// A session's end, recorded with its `session.ended` ([`StateChange::End`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnd {
    /// The session.
    pub session_id: String,
    /// When it ended (wire form).
    pub ended_at: String,
}

impl SessionEnd {
    /// The refusal of an end while `execution_id` of the session is running.
    pub fn execution_in_progress(&self, execution_id: &str) -> cra_trace::store::ChainStoreError {
        cra_trace::store::ChainStoreError::Refused {
            token: cra_wire::Token::ExecutionInProgress,
            message: format!(
                "session `{}` has an action executing (execution `{execution_id}`); its outcome \
                 must be recorded before the session ends: end it again once that execute has \
                 answered",
                self.session_id
            ),
        }
    }

    /// The refusal of an end of a session with no record.
    pub fn not_found(&self) -> cra_trace::store::ChainStoreError {
        cra_trace::store::ChainStoreError::Refused {
            token: cra_wire::Token::SessionNotFound,
            message: format!("no session `{}`", self.session_id),
        }
    }
}

/// The refusal of a [`StateChange::Start`] whose session id is taken.
pub fn started_before(session_id: &str) -> cra_trace::store::ChainStoreError {
    cra_trace::store::ChainStoreError::Refused {
        token: cra_wire::Token::AlreadyExists,
        message: format!("session `{session_id}` exists already; open a new session"),
    }
}

impl StateChange {
    /// The session whose chain records the change.
    pub fn session_id(&self) -> &str {
        match self {
            Self::Resolve(r) => &r.session_id,
            Self::Decide(d) => &d.session_id,
            Self::Execute(e) => &e.session_id,
            Self::Settle(s) => &s.session_id,
            Self::Open(a) => &a.session_id,
            Self::Start(s) => &s.record.session_id,
            Self::End(e) => &e.session_id,
        }
    }
}

/// Why [`StateLog::record_and_append`] failed. Nothing of the change or its events was written,
/// except as [`RecordThenAppend`] says.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StateLogError {
    /// The CARP store refused or failed.
    #[error(transparent)]
    Store(#[from] CarpStoreError),
    /// The chain refused the events (or, with [`cra_trace::store::ChainStoreError::Refused`],
    /// the store refused the change in the append's transaction), or its store failed.
    #[error(transparent)]
    Chain(#[from] cra_trace::store::ChainStoreError),
}

/// What recording a change did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// The state is recorded and these events appended, durable.
    Appended(Vec<cra_trace::TraceEvent>),
    /// The session had already seen the resolve's request id (a duplicate sent concurrently):
    /// nothing was recorded or appended.
    Duplicate,
}

/// Records a change of state and appends the TRACE events that tell of it.
///
/// Both backends of `cra-store` write both in the transaction that appends the events: the state
/// and the events are stored together or not at all, and a chain that ended meanwhile refuses
/// both. [`RecordThenAppend`] does them one after the other for any pair of stores.
pub trait StateLog: Send + Sync {
    /// Records `change` and appends `drafts` (payloads prepared, some perhaps as canonical text
    /// only: [`cra_trace::PreparedDraft::from_canonical`]) to the chain of
    /// `change.session_id()`, and tells `done` the outcome, exactly once, when it is durable. A
    /// store that queues the work for a committer returns once it is queued; another does the
    /// work, then calls `done`. It may block either way: call it where blocking is allowed.
    fn record_and_append_then(
        &self,
        change: StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
        done: StateDone,
    );

    /// [`StateLog::record_and_append_then`], waiting for the outcome, with plain drafts.
    fn record_and_append(
        &self,
        change: StateChange,
        drafts: Vec<cra_trace::EventDraft>,
    ) -> Result<Recorded, StateLogError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let drafts = drafts
            .into_iter()
            .map(cra_trace::PreparedDraft::new)
            .collect();
        let done: StateDone = Box::new(move |outcome| {
            let _ = reply.send(outcome);
        });
        self.record_and_append_then(change, drafts, done);
        answer.recv().unwrap_or_else(|_| {
            let gone = "the store dropped the change without answering; it may be shutting down";
            Err(cra_trace::store::ChainStoreError::Unavailable(gone.into()).into())
        })
    }
}

/// Told the outcome of [`StateLog::record_and_append_then`].
pub type StateDone = Box<dyn FnOnce(Result<Recorded, StateLogError>) + Send>;

/// [`StateLog`] over two stores: the change, then the chain append. If the append fails, the
/// recorded state stays (a resolution is then usable, a decision made, without its events; the
/// error is answered, so the caller was not told it succeeded). A session's end does not
/// look for running executions here. For stores that cannot share a
/// transaction (the in-memory test store); the runtime's backends do not use it.
#[derive(Clone)]
pub struct RecordThenAppend {
    /// Where the state goes.
    pub carp: std::sync::Arc<dyn CarpStore>,
    /// Where the events go.
    pub chains: std::sync::Arc<dyn cra_trace::store::ChainStore>,
}

impl fmt::Debug for RecordThenAppend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordThenAppend")
            .field("carp", &self.carp)
            .finish_non_exhaustive()
    }
}

impl StateLog for RecordThenAppend {
    fn record_and_append_then(
        &self,
        change: StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
        done: StateDone,
    ) {
        done(self.record_then_append(&change, drafts));
    }
}

impl RecordThenAppend {
    fn record_then_append(
        &self,
        change: &StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
    ) -> Result<Recorded, StateLogError> {
        match change {
            StateChange::Resolve(record) => {
                if !record.record_in(self.carp.as_ref())? {
                    return Ok(Recorded::Duplicate);
                }
            }
            StateChange::Decide(d) => {
                let decided = self.carp.decide_approval(
                    &d.approval_id,
                    d.decision,
                    &d.decided_by,
                    d.note.as_deref(),
                    &d.decided_at,
                );
                decided.map_err(decision_refusal)?;
            }
            StateChange::Execute(e) => {
                self.carp.record_execution(e)?;
                self.carp.release_execution(&e.execution_id)?;
            }
            StateChange::Open(a) => match self.carp.create_approval(a) {
                Ok(()) => {}
                Err(CarpStoreError::AlreadyExists { .. }) => {
                    return Err(opened_before(&a.approval_id).into());
                }
                Err(e) => return Err(e.into()),
            },
            StateChange::Start(start) => {
                let r = &start.record;
                if let Some(max) = start.max_open
                    && self.carp.open_sessions(&r.agent_id)? >= max
                {
                    return Err(open_sessions_exceeded(&r.agent_id, max).into());
                }
                match self.carp.create_session(r) {
                    Ok(()) => {}
                    Err(CarpStoreError::AlreadyExists { .. }) => {
                        return Err(started_before(&r.session_id).into());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            StateChange::End(e) => match self.carp.end_session(&e.session_id, &e.ended_at) {
                Ok(_) => {}
                Err(CarpStoreError::NotFound { .. }) => return Err(e.not_found().into()),
                Err(err) => return Err(err.into()),
            },
            StateChange::Settle(_) => {
                return Err(cra_trace::store::ChainStoreError::Unavailable(
                    "these stores do not share a transaction, so an outbox entry cannot be \
                     settled with its append; use a cra-store backend"
                        .into(),
                )
                .into());
            }
        }
        let drafts = drafts
            .into_iter()
            .map(cra_trace::PreparedDraft::into_draft)
            .collect();
        Ok(Recorded::Appended(
            self.chains.append(change.session_id(), drafts)?,
        ))
    }
}

/// One counter a resolve reads ([`CarpStore::read_counters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterRead<'a> {
    /// Executions of `(policy_id, scope_key)` at instants in `(since_us, until_us]`.
    Rate {
        /// The rate-limit policy.
        policy_id: &'a str,
        /// Its scope's key.
        scope_key: &'a str,
        /// The window's start (excluded).
        since_us: i64,
        /// The window's end (included).
        until_us: i64,
    },
    /// Units spent on `(policy_id, scope_key)`.
    Budget {
        /// The budget policy.
        policy_id: &'a str,
        /// Its scope's key.
        scope_key: &'a str,
    },
}
