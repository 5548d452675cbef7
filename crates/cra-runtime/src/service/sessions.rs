//! CARP sessions: open, read and end. A session belongs to the agent that opened it. Its chain
//! starts with `session.started` (agent, goal, project, parent, callsign) and closes with
//! `session.ended`. Only the owning agent writes to it; the owner, auditors, operators and admins
//! read it. Also here: the checks every operation makes of ids, and of who may read or write a
//! session.

use cra_carp::events::{SessionEnded, SessionStarted, redaction_drafts};
use cra_carp::store::{CarpStoreError, SessionEnd, SessionRecord, SessionStart, StateChange};
use cra_trace::Span;
use cra_trace::TraceEvent;
use cra_trace::store::SessionSummary;
use cra_wire::Token;
use cra_wire::clock::{format_timestamp, millis_between, parse_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult};
use crate::state::Runtime;
use cra_atlas::redaction::{Redaction, SESSION_ROOTS};

/// `POST /v1/sessions` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// The agent that will own the session (an agent key may only name itself).
    pub agent_id: String,
    /// What the session is for.
    pub goal: String,
    /// The Relay project the session works in, if any.
    #[serde(default)]
    pub project_id: Option<String>,
    /// The parent session, for nested agents.
    #[serde(default)]
    pub parent_session_id: Option<String>,
}

/// A session as answered.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionView {
    /// UUIDv7.
    pub session_id: String,
    /// The owning agent.
    pub agent_id: String,
    /// What it is for.
    pub goal: Option<String>,
    /// The Relay project, if any.
    pub project_id: Option<String>,
    /// The parent session, if any.
    pub parent_session_id: Option<String>,
    /// `adjective-noun`, a memorability aid (not unique).
    pub callsign: String,
    /// `active` or `ended`.
    pub status: String,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub ended_at: Option<String>,
    /// Events in its chain.
    pub event_count: u64,
    /// The length of its chain's events as stored (their wire JSON, as exported), summed: what
    /// `quotas.max_session_bytes` counts. Events a store kept before it counted them add 0.
    pub stored_bytes: u64,
}

/// The longest accepted agent id, goal and project id.
pub const MAX_ID_LEN: usize = 128;
/// The longest accepted goal.
pub(crate) const MAX_GOAL_LEN: usize = 8192;

/// `adjective-noun` derived from the session id (SHA-256), so every replica names it the same.
pub(crate) fn callsign_for(session_id: &str) -> String {
    use cra_relay::session::{ADJECTIVES, NOUNS};
    let h = Sha256::digest(session_id.as_bytes());
    format!(
        "{}-{}",
        ADJECTIVES[usize::from(h[0]) % ADJECTIVES.len()],
        NOUNS[usize::from(h[1]) % NOUNS.len()]
    )
}

/// True when `value` is an identifier: non-empty, at most [`MAX_ID_LEN`] bytes, printable ASCII,
/// no spaces.
pub(crate) fn is_id(value: &str) -> bool {
    !value.is_empty() && value.len() <= MAX_ID_LEN && value.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks an identifier field ([`is_id`]).
pub(crate) fn check_id_field(pointer: &str, value: &str) -> ApiResult<()> {
    if !is_id(value) {
        return Err(ApiError::field(
            Token::InvalidRequest,
            pointer,
            format!("must be 1 to {MAX_ID_LEN} printable ASCII characters without spaces"),
        ));
    }
    Ok(())
}

/// Checks a UUID field (canonical lowercase 8-4-4-4-12).
pub(crate) fn check_uuid_field(pointer: &str, value: &str) -> ApiResult<()> {
    if cra_wire::id::is_canonical_uuid(value) {
        Ok(())
    } else {
        Err(ApiError::field(
            Token::InvalidRequest,
            pointer,
            format!("`{value}` is not a canonical lowercase UUID (8-4-4-4-12 hex)"),
        ))
    }
}

/// A CARP store failure as an HTTP refusal.
pub(crate) fn carp_store_error(e: CarpStoreError) -> ApiError {
    match e {
        CarpStoreError::NotFound {
            what: "session",
            id,
        } => ApiError::new(
            Token::SessionNotFound,
            format!("no session {id}; open one with POST /v1/sessions"),
        ),
        CarpStoreError::NotFound {
            what: "resolution",
            id,
        } => ApiError::new(
            Token::ResolutionNotFound,
            format!("no resolution {id}; resolve first"),
        ),
        CarpStoreError::NotFound {
            what: "approval",
            id,
        } => ApiError::new(Token::ApprovalNotFound, format!("no approval {id}")),
        CarpStoreError::NotFound { what, id } => ApiError::not_found(format!("no {what} {id}")),
        CarpStoreError::AlreadyExists { what, id } => {
            ApiError::new(Token::AlreadyExists, format!("{what} {id} already exists"))
        }
        e @ CarpStoreError::AlreadyDecided { .. } => {
            ApiError::new(Token::AlreadyExists, e.to_string())
        }
        CarpStoreError::Backend(m) => ApiError::new(
            Token::Unavailable,
            format!("the store failed ({m}); nothing was changed, retry later"),
        ),
        CarpStoreError::Corrupt(m) => ApiError::new(Token::IntegrityError, m),
    }
}

impl Runtime {
    /// Runs a blocking CARP-store call off the async threads.
    pub async fn carp<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn cra_carp::CarpStore) -> Result<T, CarpStoreError> + Send + 'static,
    ) -> ApiResult<T> {
        let store = self.backends.carp.clone();
        crate::error::run_blocking("a store task failed", move || f(store.as_ref()))
            .await?
            .map_err(carp_store_error)
    }

    /// A read of the CARP store, made where reads cost least ([`Runtime::quick`]).
    pub(crate) async fn carp_read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn cra_carp::CarpStore) -> Result<T, CarpStoreError> + Send + 'static,
    ) -> ApiResult<T> {
        let store = self.backends.carp.clone();
        self.quick("a store read failed", move || f(store.as_ref()))
            .await?
            .map_err(carp_store_error)
    }

    /// The session `id`, or 404 `session_not_found`.
    pub async fn session_record(&self, id: &str) -> ApiResult<SessionRecord> {
        let key = id.to_owned();
        self.carp_read(move |s| s.get_session(&key))
            .await?
            .ok_or_else(|| {
                ApiError::new(
                    Token::SessionNotFound,
                    format!("no session {id}; open one with POST /v1/sessions"),
                )
            })
    }
}

/// May `actor` read `session` (owner, auditor, operator, admin)?
pub(crate) fn can_read(actor: &Actor, session: &SessionRecord) -> bool {
    actor.reads_all() || (actor.has(Role::Agent) && actor.id == session.agent_id)
}

/// Fails with 403 unless `actor` may read `session`.
pub(crate) fn require_read(actor: &Actor, session: &SessionRecord) -> ApiResult<()> {
    if can_read(actor, session) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "session {} belongs to another agent; only its owner, auditors and operators read it",
            session.session_id
        )))
    }
}

/// The session `id` as `actor` may read it: a canonical UUID (400), an existing session (404),
/// and a caller who owns it or audits (403).
pub(crate) async fn readable_session(
    state: &Runtime,
    actor: &Actor,
    id: &str,
) -> ApiResult<SessionRecord> {
    check_uuid_field("/session_id", id)?;
    let record = state.session_record(id).await?;
    require_read(actor, &record)?;
    Ok(record)
}

/// Fails with 403 unless `actor` owns `session` (or is admin).
pub(crate) fn require_owner(actor: &Actor, session: &SessionRecord) -> ApiResult<()> {
    if actor.has(Role::Admin) || (actor.has(Role::Agent) && actor.id == session.agent_id) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "session {} belongs to another agent; only its owner writes to it",
            session.session_id
        )))
    }
}

/// The answer about `record`, from its chain's first event and length.
fn view(
    record: &SessionRecord,
    first: Option<&TraceEvent>,
    summary: Option<&SessionSummary>,
) -> SessionView {
    let p = first.map(|e| &e.payload);
    let s = |k: &str| {
        p.and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    SessionView {
        session_id: record.session_id.clone(),
        agent_id: record.agent_id.clone(),
        goal: s("goal"),
        project_id: s("project_id"),
        parent_session_id: record.parent_session_id.clone(),
        callsign: s("callsign").unwrap_or_else(|| callsign_for(&record.session_id)),
        status: if record.is_active() {
            "active"
        } else {
            "ended"
        }
        .to_owned(),
        started_at: record.created_at.clone(),
        ended_at: record.ended_at.clone(),
        event_count: summary.map_or(0, |s| s.head.next_sequence),
        stored_bytes: summary.map_or(0, |s| s.bytes),
    }
}

/// Opens a session for `input.agent_id` (the caller itself, or anyone's for an admin) and
/// records `session.started`.
pub async fn open(rt: &Runtime, actor: &Actor, mut input: CreateSession) -> ApiResult<SessionView> {
    check_open(actor, &input)?;
    let redacted = redact_goal(rt, &mut input);
    if let Some(parent) = &input.parent_session_id {
        let p = rt.session_record(parent).await?;
        require_read(actor, &p)?;
    }
    if let Some(project) = &input.project_id {
        require_known_project(rt, actor, project).await?;
    }
    let session_id = rt.ids.new_id();
    let callsign = callsign_for(&session_id);
    let record = SessionRecord {
        session_id: session_id.clone(),
        agent_id: input.agent_id.clone(),
        parent_session_id: input.parent_session_id.clone(),
        created_at: format_timestamp(rt.clock.now()),
        ended_at: None,
    };
    let start = SessionStart {
        record: record.clone(),
        max_open: rt.config.quotas.open_sessions(),
    };
    let (trace_id, span_id) = (rt.ids.new_id(), rt.ids.new_id());
    let started = Span::root(&trace_id, &span_id).draft_of(&SessionStarted {
        agent_id: &input.agent_id,
        actor: Some(actor.event_ref()),
        goal: &input.goal,
        project_id: input.project_id.as_deref(),
        parent_session_id: input.parent_session_id.as_deref(),
        callsign: Some(&callsign),
    });
    let mut drafts = vec![started];
    drafts.extend(redaction_drafts(
        &Span::root(&trace_id, &span_id),
        &redacted,
        None,
    ));
    // The record and the events that open its chain are written in one transaction: no session
    // is ever stored without its `session.started`. The same transaction counts it among its
    // agent's open sessions, refusing it (429 `quota_exceeded`) past the quota.
    let events = rt
        .append_change(&record.agent_id, StateChange::Start(start), drafts)
        .await
        .inspect_err(|e| {
            if e.token() == Some(Token::QuotaExceeded) {
                let counter = &rt.metrics.quota_exceeded;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })?;
    let summary = rt.chain_summary(&record.session_id).await?;
    Ok(view(&record, events.first(), summary.as_ref()))
}

/// Refuses a session naming a project its opener may not read, with the answer an unknown
/// project gets (404 `project_not_found` at `/project_id`): the chain would otherwise tie
/// another team's project to this work, and two answers would tell a caller which ids exist.
async fn require_known_project(rt: &Runtime, actor: &Actor, project: &str) -> ApiResult<()> {
    match rt.require_project(actor, project, false).await {
        Err(e)
            if matches!(
                e.token(),
                Some(Token::ProjectNotFound | Token::Unauthorized)
            ) =>
        {
            Err(ApiError::field(
                Token::ProjectNotFound,
                "/project_id",
                format!(
                    "no project `{project}` that {} may read; name a project it was granted, or none",
                    actor.id
                ),
            ))
        }
        other => other,
    }
}

/// Applies the redaction rules to the goal (the one free text of an opening); answers what they
/// replaced, to be recorded after `session.started`.
fn redact_goal(rt: &Runtime, input: &mut CreateSession) -> Vec<Redaction> {
    if rt.redactor.is_empty() {
        return Vec::new();
    }
    let mut body = serde_json::json!({ "goal": input.goal });
    let found = rt.redactor.redact(&mut body, SESSION_ROOTS);
    if let Some(goal) = body["goal"].as_str() {
        goal.clone_into(&mut input.goal);
    }
    found
}

/// The shape of an open request and whether `actor` may make it.
fn check_open(actor: &Actor, input: &CreateSession) -> ApiResult<()> {
    if let Some(problem) = crate::auth::actor_id_problem(&input.agent_id) {
        return Err(ApiError::field(Token::InvalidRequest, "/agent_id", problem));
    }
    if input.goal.trim().is_empty() || input.goal.len() > MAX_GOAL_LEN {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/goal",
            format!("must be a non-empty text of at most {MAX_GOAL_LEN} bytes"),
        ));
    }
    if let Some(p) = &input.project_id {
        check_id_field("/project_id", p)?;
    }
    if let Some(p) = &input.parent_session_id {
        check_uuid_field("/parent_session_id", p)?;
    }
    if actor.has(Role::Admin) {
        return Ok(());
    }
    if !actor.has(Role::Agent) {
        return Err(ApiError::forbidden(
            "opening a session needs the agent role (or admin)",
        ));
    }
    if actor.id != input.agent_id {
        return Err(ApiError::field(
            Token::IdentityMismatch,
            "/agent_id",
            format!(
                "this key authenticates `{}`; an agent opens sessions only for itself",
                actor.id
            ),
        ));
    }
    Ok(())
}

/// The session `id` as `actor` may read it, with its chain's length.
pub async fn get(rt: &Runtime, actor: &Actor, id: &str) -> ApiResult<SessionView> {
    let record = readable_session(rt, actor, id).await?;
    let first = rt.read_events_after(id, None, 1).await?;
    let summary = rt.chain_summary(id).await?;
    Ok(view(&record, first.first(), summary.as_ref()))
}

/// Ends session `id` (idempotent: an ended session is left as it is): marks it ended and
/// appends `session.ended`, naming the pending approvals that lapse with it, in one transaction.
/// Refused (409 `execution_in_progress`) while one of its actions is executing, so no outcome is
/// ever left out of a closed chain. A session whose record says ended but whose chain has no
/// `session.ended` (a store an earlier version wrote, stopped between the two) gets the event:
/// a repeated end repairs the chain. Its owner, an operator or an admin may end it.
pub async fn end(rt: &Runtime, actor: &Actor, id: &str) -> ApiResult<()> {
    check_uuid_field("/session_id", id)?;
    let record = rt.session_record(id).await?;
    if !(actor.has(Role::Operator) || actor.has(Role::Admin)) {
        require_owner(actor, &record)?;
    }
    if !record.is_active() && rt.chain_summary(id).await?.is_some_and(|s| s.ended) {
        return Ok(());
    }
    let ended_at = rt.clock.now();
    let duration_ms =
        parse_rfc3339(&record.created_at).map_or(0, |started| millis_between(started, ended_at));
    let sid = id.to_owned();
    // The session's pending approvals lapse with it (they can no longer be decided): the end
    // event names them, so the chain says what became of each `approval.requested`.
    let lapsed = rt
        .carp_read(move |s| {
            Ok(s.list_pending_approvals()?
                .into_iter()
                .filter(|a| a.session_id == sid)
                .map(|a| a.approval_id)
                .collect::<Vec<_>>())
        })
        .await?;
    let (trace_id, span_id) = (rt.ids.new_id(), rt.ids.new_id());
    let ended = Span::root(&trace_id, &span_id).draft_of(&SessionEnded {
        agent_id: &record.agent_id,
        ended_by: actor.event_ref(),
        reason: "ended by request",
        duration_ms,
        lapsed_approvals: (!lapsed.is_empty()).then_some(lapsed.as_slice()),
    });
    let change = StateChange::End(SessionEnd {
        session_id: id.to_owned(),
        ended_at: format_timestamp(ended_at),
    });
    match rt
        .append_change(&record.agent_id, change, vec![ended])
        .await
    {
        // Ended meanwhile by another request: the session is ended, as asked.
        Err(e) if e.token() != Some(Token::SessionInactive) => Err(e),
        _ => Ok(()),
    }
}
