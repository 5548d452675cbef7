//! CARP's operations, resolve (with validate, its dry run) and execute, from an authenticated
//! caller's request to a typed answer: admit, evaluate, record, answer. Each takes one snapshot
//! of the atlases and reads the session once; everything it records goes into the session's
//! TRACE chain through [`cra_carp::events`] before the answer is returned.
//!
//! Order of checks: the request's shape (`invalid_request`, nothing stored); the caller is the
//! requester (`identity_mismatch`, nothing stored: an actor cannot write into another's chain);
//! the session exists, belongs to the requester and is active (nothing stored: there is no chain
//! to write to). Everything after that is a well-formed request in a session the caller owns: a
//! refusal by a protocol rule is answered with its token *and* recorded. An admitted execute is
//! always answered with an execute response (§3.5): a refusal is one with status `denied` (or
//! `pending_approval`), its token in `error.code`, under the execution id its events name.
//!
//! Ids: one `trace_id` per resolve (the resolution's); the resolve's events share the span
//! `resolution_id`; an execute under it uses the same `trace_id`, its own span (the
//! `execution_id`) and the resolve's span as parent.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cra_carp::engine::{
    Carp, CarpConfig, ClearedExecution, ExecuteDecided, ExecuteOutcome, PreparedResolve,
    refusal_response,
};
use cra_carp::eval::ExplainLevel;
use cra_carp::events::{
    ActionApproved, ActionDeduplicated, ActionDenied, ActionExecuted, ActionFailed,
    ActionPendingApproval, ActionRequested, ApprovalRequested, PolicyViolated,
    RefusedRequestReceived, RequestRejected, ShadowEvaluated, cached_events, redaction_drafts,
    resolve_events, validate_events,
};
use cra_carp::explain::ShadowExplain;
use cra_carp::history::HistoryRead;
use cra_carp::index::{AtlasSet, CompiledAtlas};
use cra_carp::store::{Recorded, ResolveRecord, SessionRecord, StateChange, StoredResolution};
use cra_carp::types::{
    CarpRequest, ExecuteResponse, ExecuteStatus, Execution, Operation, Resolution,
};
use cra_carp::validate::{CarpError, parse_request};
use cra_trace::EventDraft;
use cra_trace::Span;
use cra_wire::Token;
use cra_wire::clock::millis_between;
use serde_json::Value;

use crate::atlases::AtlasState;
use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult, run_blocking};
use crate::state::Runtime;
use cra_atlas::redaction::{REQUEST_ROOTS, RESULT_ROOTS, Redaction, Redactor};

/// The CARP engine (`cra_carp`'s rules over the store) for one operation, over the atlas
/// snapshot `atlases`.
pub fn engine(rt: &Runtime, atlases: Arc<AtlasSet>) -> Carp {
    let config = CarpConfig {
        ttl_seconds: rt.config.resolution_ttl_seconds,
        max_skew_seconds: i64::try_from(rt.config.clock_skew_seconds).unwrap_or(300),
        max_candidates: rt.config.quotas.resolve_actions(),
    };
    let owner = rt.config.replica_id.as_deref();
    let carp = Carp::new(
        rt.backends.carp.clone(),
        atlases,
        rt.clock.clone(),
        rt.ids.clone(),
        config,
    )
    .with_owner(owner.unwrap_or(cra_carp::engine::DEFAULT_LEASE_OWNER));
    match &rt.resolution_cache {
        Some(cache) => carp.with_cache(cache.clone()),
        None => carp,
    }
}

/// A request admitted: well-formed, from its requester, in a session it owns and may write to.
struct Admitted {
    request: CarpRequest,
    session: SessionRecord,
}

/// Parses `body`, checks the operation, the caller's identity and the session (read once: the
/// engine judges the request against this reading).
async fn admit(
    rt: &Runtime,
    actor: &Actor,
    body: &Value,
    want: Operation,
    call: &CallContext,
) -> ApiResult<Admitted> {
    // HTTP bodies were checked when parsed; an MCP tool call's arguments arrive here unchecked.
    cra_wire::json::require_finite(body).map_err(|e| crate::extract::json_error(&e))?;
    let mut request = parse_request(body).map_err(ApiError::from)?;
    request.traceparent = call.traceparent.clone();
    // `validate` is a resolve that changes nothing (CARP §3.2): it takes resolve's door.
    let taken = request.operation == want
        || (want == Operation::Resolve && request.operation == Operation::Validate);
    if !taken {
        let message = format!(
            "this route takes operation `{}`, the request says `{}`",
            want.as_str(),
            request.operation.as_str()
        );
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/operation",
            message,
        ));
    }
    actor.require(&[Role::Agent], "CARP requests")?;
    if actor.id != request.requester.agent_id {
        let message = format!(
            "this key authenticates `{}`; requester.agent_id must be the caller",
            actor.id
        );
        return Err(ApiError::field(
            Token::IdentityMismatch,
            "/requester/agent_id",
            message,
        ));
    }
    let sid = &request.requester.session_id;
    let (session, room) = tokio::join!(rt.session_record(sid), check_session_room(rt, sid));
    let session = session.map_err(|e| match e.token() {
        Some(Token::SessionNotFound) => ApiError::field(
            Token::SessionNotFound,
            "/requester/session_id",
            "no such session; open one with POST /v1/sessions",
        ),
        _ => e,
    })?;
    cra_carp::validate::check_session(&request, Some(&session)).map_err(ApiError::from)?;
    room?;
    Ok(Admitted { request, session })
}

/// Refuses (429 `quota_exceeded`) a request to a session whose chain holds
/// `quotas.max_session_events` events or `quotas.max_session_bytes` bytes: it would make the
/// chain longer. Read beside the session's record, so the check costs no extra round trip;
/// requests of one session racing past it add at most their own events. Nothing is recorded:
/// the chain is full.
async fn check_session_room(rt: &Runtime, session_id: &str) -> ApiResult<()> {
    if !rt.config.quotas.bounds_sessions() {
        return Ok(());
    }
    let Some(summary) = rt.chain_summary(session_id).await? else {
        return Ok(());
    };
    let (events, bytes) = (summary.head.next_sequence, summary.bytes);
    let Some((setting, limit)) = rt.config.quotas.session_full(events, bytes) else {
        return Ok(());
    };
    rt.metrics
        .quota_exceeded
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Err(ApiError::new(
        Token::QuotaExceeded,
        format!(
            "session {session_id} holds {events} events ({bytes} bytes), past the {limit} this \
             server keeps in one session (quotas.{setting}); end it and go on in a new session"
        ),
    ))
}

/// Tokens of rule refusals that are recorded in the chain (not the runtime's own failures).
fn is_recorded_refusal(t: Token) -> bool {
    !matches!(
        t,
        Token::InternalError | Token::Unavailable | Token::IntegrityError
    )
}

/// A resolve's (or validate's) answer.
#[derive(Debug)]
pub struct ResolveAnswer {
    /// The resolution, with its explanation when one was asked for.
    pub resolution: Resolution,
    /// The resolution's TRACE canonical text, the bytes its chain hashed, when the answer is
    /// exactly those (no explanation attached, and the resolution has a canonical form).
    pub canonical: Option<String>,
    /// The sequence of the last event the resolve recorded in the session's chain
    /// (`carp.resolution.completed`): what a receipt binds.
    pub recorded: Option<u64>,
}

/// What a front door knew of a CARP call beside its body.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The caller's W3C trace context (`traceparent`), already checked with
    /// [`crate::otlp::traceparent`]: the call's events record it (`specs/otlp.md`).
    pub traceparent: Option<String>,
}

/// Resolves (or validates) the CARP request `body` for `actor`; `explain` attaches the
/// evaluation's explanation to the answer.
pub async fn resolve(
    rt: &Runtime,
    actor: &Actor,
    body: &Value,
    explain: bool,
) -> ApiResult<ResolveAnswer> {
    resolve_in(rt, actor, body, explain, &CallContext::default()).await
}

/// [`resolve`], for a call whose front door knew `call`.
pub async fn resolve_in(
    rt: &Runtime,
    actor: &Actor,
    body: &Value,
    explain: bool,
    call: &CallContext,
) -> ApiResult<ResolveAnswer> {
    let began = std::time::Instant::now();
    let atlases = rt.atlases();
    let (body, redacted) = redactor_for(rt, &atlases, body).apply(body, REQUEST_ROOTS);
    let Admitted { request, session } = admit(rt, actor, &body, Operation::Resolve, call).await?;
    let trace_id = rt.ids.new_id();
    record_redactions(rt, &request, &redacted, &trace_id, None).await?;
    let prepared = evaluate(rt, &atlases, session, &request, explain, &trace_id).await?;
    let mut prepared = match prepared {
        Ok(p) => p,
        Err(e) => return Err(refuse(rt, &request, &trace_id, e.into()).await),
    };
    let digests = atlases.digests();
    match prepared.record.take() {
        Some(record) => {
            let answer =
                record_resolve(rt, &request, &trace_id, digests, prepared, record, explain).await?;
            let decision = answer.resolution.decision.kind.as_str();
            rt.metrics
                .observe_carp("resolve", decision, began.elapsed());
            Ok(answer)
        }
        None => record_validate(rt, &request, &trace_id, digests, prepared, explain).await,
    }
}

/// The redaction rules for the request `body`: the operator's, then those of each atlas it
/// names: an execute's action's atlases, a resolve's `atlas_ids` (every atlas in force when it
/// names none, as the resolve then considers them all).
fn redactor_for<'r>(rt: &'r Runtime, atlases: &AtlasState, body: &Value) -> Cow<'r, Redactor> {
    if atlases.set.atlases().iter().all(|a| a.redactor.is_empty()) {
        return Cow::Borrowed(&rt.redactor);
    }
    let all = atlases.set.atlases().iter();
    let named: Vec<&CompiledAtlas> = match body.pointer("/execution/action_id") {
        Some(action) => all
            .filter(|a| {
                action
                    .as_str()
                    .is_some_and(|id| a.action_index.contains_key(id))
            })
            .collect(),
        None => match body.get("atlas_ids").and_then(Value::as_array) {
            Some(ids) => ids
                .iter()
                .filter_map(|id| atlases.set.get(id.as_str()?))
                .collect(),
            None => all.collect(),
        },
    };
    let mut with_rules = named
        .into_iter()
        .filter(|a| !a.redactor.is_empty())
        .peekable();
    if with_rules.peek().is_none() {
        return Cow::Borrowed(&rt.redactor);
    }
    Cow::Owned(with_rules.fold(rt.redactor.clone(), |r, a| r.and(&a.redactor)))
}

/// Records each value the redaction rules replaced in `request` as `context.redacted`, in the
/// request's trace, before anything else of the request is recorded.
async fn record_redactions(
    rt: &Runtime,
    request: &CarpRequest,
    redacted: &[Redaction],
    trace_id: &str,
    parent: Option<&str>,
) -> ApiResult<()> {
    if redacted.is_empty() {
        return Ok(());
    }
    let span_id = rt.ids.new_id();
    let span = Span {
        trace_id,
        span_id: &span_id,
        parent,
    };
    let drafts = redaction_drafts(&span, redacted, Some(&request.request_id));
    let sid = &request.requester.session_id;
    rt.append_events(sid, &request.requester.agent_id, drafts)
        .await?;
    Ok(())
}

/// Checks and evaluates `request` against the snapshot; writes nothing.
async fn evaluate(
    rt: &Runtime,
    atlases: &AtlasState,
    session: SessionRecord,
    request: &CarpRequest,
    explain: bool,
    trace_id: &str,
) -> ApiResult<Result<PreparedResolve, CarpError>> {
    let carp = engine(rt, atlases.set.clone()).with_session(session);
    let (request, trace_id) = (request.clone(), trace_id.to_owned());
    // Each action's outcome and deciding policy are recorded (`policy.evaluated`) on every
    // resolve; the policy trail is computed only when it is answered.
    let level = if explain {
        ExplainLevel::Full
    } else {
        ExplainLevel::Outcomes
    };
    // Checks and evaluation read the store and write nothing: no blocking-pool hop on redb.
    rt.quick("the resolve task failed", move || {
        carp.prepare_resolve(&request, level, Some(trace_id))
    })
    .await
}

/// Records a resolve refused by a rule (`carp.request.received` + `carp.request.rejected`) and
/// returns the refusal to answer; a failure to record it is answered instead.
async fn refuse(rt: &Runtime, request: &CarpRequest, trace_id: &str, err: ApiError) -> ApiError {
    if !err.token().is_some_and(is_recorded_refusal) {
        return err;
    }
    let span_id = rt.ids.new_id();
    let span = Span::root(trace_id, &span_id);
    let drafts = vec![
        span.draft_of(&RefusedRequestReceived {
            request_id: &request.request_id,
            operation: request.operation.as_str(),
            goal: request.task.as_ref().map(|t| t.goal.as_str()),
            request,
            traceparent: request.traceparent.as_deref(),
        }),
        span.draft_of(&RequestRejected {
            request_id: &request.request_id,
            error: &err.body.error,
            message: &err.body.message,
            decision: "rejected",
        }),
    ];
    let sid = &request.requester.session_id;
    match rt
        .append_events(sid, &request.requester.agent_id, drafts)
        .await
    {
        Ok(_) => err,
        Err(e) => e,
    }
}

/// The resolution's TRACE canonical text, or `None` when it has none (its unknown extras repeat
/// a member's name).
fn resolution_text(resolution: &Resolution) -> Option<String> {
    cra_wire::canonical::to_trace_canonical(resolution).ok()
}

/// Records a resolve: its state (request id, resolution) with its events, in one
/// durable append, then answers.
async fn record_resolve(
    rt: &Runtime,
    request: &CarpRequest,
    trace_id: &str,
    digests: &BTreeMap<String, String>,
    prepared: PreparedResolve,
    record: ResolveRecord,
    explain: bool,
) -> ApiResult<ResolveAnswer> {
    let PreparedResolve {
        mut resolution,
        counters,
        cache_hit,
        ..
    } = prepared;
    let explained = resolution.explain.take();
    // The resolution is written once, in its TRACE canonical form: that text is the answer and,
    // as it is, the completion event's `resolution`, so the bytes an agent receives are the
    // bytes its chain hashed.
    let canonical = resolution_text(&resolution);
    let events = if cache_hit {
        // An earlier resolution answered again: recorded in its trace, in a span of this
        // request's own under the resolution's.
        let span_id = rt.ids.new_id();
        let span = Span {
            trace_id: &resolution.trace_id,
            span_id: &span_id,
            parent: Some(&resolution.resolution_id),
        };
        cached_events(
            &span,
            request,
            digests,
            &counters,
            &resolution.resolution_id,
        )
    } else {
        let span = Span::root(trace_id, &resolution.resolution_id);
        resolve_events(
            &span,
            request,
            digests,
            &counters,
            &resolution,
            explained.as_ref(),
        )
    };
    let agent = &request.requester.agent_id;
    let appended = rt.append_resolve(agent, record, events).await?;
    let Recorded::Appended(appended) = appended else {
        // A duplicate that raced past the read check: refused, and nothing of it was written.
        let e = cra_carp::validate::check_request_id_new(request, false)
            .err()
            .map_or_else(
                || ApiError::new(Token::DuplicateRequestId, "request_id was already used"),
                ApiError::from,
            );
        return Err(refuse(rt, request, trace_id, e).await);
    };
    let recorded = appended.last().map(|e| e.sequence);
    rt.metrics
        .record_resolution(resolution.decision.kind.as_str());
    if let (false, Some(ex)) = (cache_hit, &explained) {
        rt.metrics.record_policy_decisions(&ex.actions);
    }
    if cache_hit {
        rt.metrics.record_resolution_cache_hit();
    } else {
        let disagreements = explained
            .iter()
            .flat_map(|ex| &ex.actions)
            .filter(|a| a.shadow.is_some())
            .count();
        rt.metrics.record_shadow_disagreements(disagreements as u64);
    }
    if explain && explained.is_some() {
        resolution.explain = explained;
        return Ok(ResolveAnswer {
            resolution,
            canonical: None,
            recorded,
        });
    }
    Ok(ResolveAnswer {
        resolution,
        canonical,
        recorded,
    })
}

/// Records a `validate` request (a dry run): `carp.request.received` (operation `validate`) and
/// one `carp.resolution.completed` marked `dry_run: true`, and nothing else. No resolution is
/// stored (its id cannot be executed), no approval is opened (the answer's `approval_id`, if
/// any, names none) and no counter is read for a charge.
async fn record_validate(
    rt: &Runtime,
    request: &CarpRequest,
    trace_id: &str,
    digests: &BTreeMap<String, String>,
    prepared: PreparedResolve,
    explain: bool,
) -> ApiResult<ResolveAnswer> {
    let mut resolution = prepared.resolution;
    let explained = resolution.explain.take();
    let span = Span::root(trace_id, &resolution.resolution_id);
    let drafts = validate_events(&span, request, digests, &prepared.counters, &resolution)
        .into_iter()
        .map(cra_trace::PreparedDraft::into_draft)
        .collect();
    let sid = &request.requester.session_id;
    let appended = rt
        .append_events(sid, &request.requester.agent_id, drafts)
        .await?;
    if explain {
        resolution.explain = explained;
    }
    Ok(ResolveAnswer {
        resolution,
        canonical: None,
        recorded: appended.last().map(|e| e.sequence),
    })
}

/// Executes the CARP execute request `body` for `actor`: the engine's checks and charges, the
/// executor, and the outcome, each recorded in the session's chain as it happens. Once the
/// request is admitted, every answer is an execute response: refusals and denials with status
/// `denied`, an approval not yet granted with `pending_approval`. `Err` is a request that was not
/// admitted (no execution exists for it) or the runtime's own failure.
pub async fn execute(rt: &Runtime, actor: &Actor, body: &Value) -> ApiResult<ExecuteResponse> {
    execute_recorded(rt, actor, body).await.map(|(r, _)| r)
}

/// The `outcome` label of an execute answered with `status`.
fn status_label(status: ExecuteStatus) -> &'static str {
    match status {
        ExecuteStatus::Success => "success",
        ExecuteStatus::Error => "error",
        ExecuteStatus::Denied => "denied",
        ExecuteStatus::PendingApproval => "pending_approval",
    }
}

/// As [`execute`], also answering the sequence of the last event the execute recorded in the
/// session's chain (its outcome, refusal or pending approval): what a receipt binds.
pub async fn execute_recorded(
    rt: &Runtime,
    actor: &Actor,
    body: &Value,
) -> ApiResult<(ExecuteResponse, Option<u64>)> {
    execute_in(rt, actor, body, &CallContext::default()).await
}

/// [`execute_recorded`], for a call whose front door knew `call`.
pub async fn execute_in(
    rt: &Runtime,
    actor: &Actor,
    body: &Value,
    call: &CallContext,
) -> ApiResult<(ExecuteResponse, Option<u64>)> {
    let began = std::time::Instant::now();
    let answered = decide_and_record_execute(rt, actor, body, call).await?;
    let outcome = status_label(answered.0.status);
    rt.metrics.observe_carp("execute", outcome, began.elapsed());
    Ok(answered)
}

/// [`execute_recorded`]'s work: decide the call, run it when cleared, record what happened.
async fn decide_and_record_execute(
    rt: &Runtime,
    actor: &Actor,
    body: &Value,
    call: &CallContext,
) -> ApiResult<(ExecuteResponse, Option<u64>)> {
    let atlases = rt.atlases();
    let redactor = redactor_for(rt, &atlases, body);
    let (body, redacted) = redactor.apply(body, REQUEST_ROOTS);
    let Admitted { request, session } = admit(rt, actor, &body, Operation::Execute, call).await?;
    let Some(exec) = request.execution.clone() else {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/execution",
            "an execute request needs an `execution` member",
        ));
    };
    // The resolve's trace and span, when the resolution is this agent's.
    let rid = exec.resolution_id.clone();
    let stored = rt.carp_read(move |s| s.get_resolution(&rid)).await?;
    let (trace_id, parent) = match &stored {
        Some(s) if s.agent_id == request.requester.agent_id => (
            s.resolution.trace_id.clone(),
            Some(s.resolution.resolution_id.clone()),
        ),
        _ => (rt.ids.new_id(), None),
    };
    record_redactions(rt, &request, &redacted, &trace_id, parent.as_deref()).await?;
    let carp = Arc::new(engine(rt, atlases.set.clone()).with_session(session));
    let decide = |again: bool| {
        let (carp, req) = (carp.clone(), request.clone());
        run_blocking("the execute task failed", move || {
            carp.decide_execute(&req, again)
        })
    };
    let (mut outcome, mut shadow, history) = split(decide(false).await?);
    let approval_id = stored
        .as_ref()
        .and_then(|s| s.resolution.decision.approval_id.as_deref());
    let mut call = Call {
        rt,
        redactor: &redactor,
        parameters_hash: cra_wire::hash::canonical_digest(&exec.parameters),
        request: &request,
        exec: &exec,
        trace_id: &trace_id,
        parent: parent.as_deref(),
        approval_id,
        shadow: shadow.take(),
        history,
        recorded: AtomicU64::new(NOT_RECORDED),
    };
    if let Ok(ExecuteOutcome::OpenApproval { response, approval }) = outcome {
        let expires_at = stored
            .as_ref()
            .and_then(|s| s.resolution.decision.expires_at.clone());
        match call.open(response, approval, expires_at.as_deref()).await? {
            Some(answer) => return Ok((answer, call.recorded())),
            // Another execute under the resolution opened its approval first: decide again,
            // on the approval as it now stands.
            None => (outcome, call.shadow, call.history) = split(decide(true).await?),
        }
    }
    if call.shadow.is_some() {
        rt.metrics.record_execute_shadow_disagreement();
    }
    let response = match outcome {
        Err(e) => call.refused(e).await,
        Ok(ExecuteOutcome::Answered(resp)) => call.answered(resp).await,
        Ok(ExecuteOutcome::Run(cleared)) => call.run(cleared, &atlases, stored.as_ref()).await,
        Ok(ExecuteOutcome::OpenApproval { .. }) => Err(ApiError::new(
            Token::Unavailable,
            "an approval was opened and then found missing; retry the execute",
        )),
    }?;
    Ok((response, call.recorded()))
}

/// [`Call::recorded`] before anything was recorded.
const NOT_RECORDED: u64 = u64::MAX;

/// An execute's outcome, its shadow decision and the history it read, apart.
fn split(
    decided: Result<ExecuteDecided, CarpError>,
) -> (
    Result<ExecuteOutcome, CarpError>,
    Option<ShadowExplain>,
    HistoryRead,
) {
    match decided {
        Ok(d) => (Ok(d.outcome), d.shadow, d.history),
        Err(e) => (Err(e), None, HistoryRead::default()),
    }
}

/// Why an execution was refused, as its events record it.
#[derive(Clone, Copy)]
struct Refusal<'a> {
    token: &'a str,
    message: &'a str,
    policy_id: Option<&'a str>,
}

/// One execute request after the engine's verdict: what its events need.
struct Call<'a> {
    rt: &'a Runtime,
    /// The request's redaction rules, applied to the executor's result too.
    redactor: &'a Redactor,
    request: &'a CarpRequest,
    exec: &'a Execution,
    parameters_hash: String,
    trace_id: &'a str,
    parent: Option<&'a str>,
    /// The resolution's approval, when it issued one.
    approval_id: Option<&'a str>,
    /// What the action's `log_only` policies would have decided for the call, when otherwise.
    shadow: Option<ShadowExplain>,
    /// What the decision read of history.
    history: HistoryRead,
    /// The sequence of the last event this call recorded ([`NOT_RECORDED`]: none yet).
    recorded: AtomicU64,
}

impl Call<'_> {
    fn span<'s>(&'s self, execution_id: &'s str) -> Span<'s> {
        Span {
            trace_id: self.trace_id,
            span_id: execution_id,
            parent: self.parent,
        }
    }

    async fn append(&self, drafts: Vec<EventDraft>) -> ApiResult<()> {
        let r = &self.request.requester;
        let events = self
            .rt
            .append_events(&r.session_id, &r.agent_id, drafts)
            .await?;
        self.note_recorded(&events);
        Ok(())
    }

    /// Remembers the last of `events` as what this call recorded last.
    fn note_recorded(&self, events: &[cra_trace::TraceEvent]) {
        if let Some(last) = events.last() {
            self.recorded.store(last.sequence, Ordering::Release);
        }
    }

    /// The sequence of the last event this call recorded, if any.
    fn recorded(&self) -> Option<u64> {
        Some(self.recorded.load(Ordering::Acquire)).filter(|&s| s != NOT_RECORDED)
    }

    /// `action.requested` under `execution_id`.
    fn requested(&self, execution_id: &str) -> EventDraft {
        self.span(execution_id).draft_of(&ActionRequested {
            execution_id,
            request_id: &self.request.request_id,
            resolution_id: &self.exec.resolution_id,
            action_id: &self.exec.action_id,
            parameters_hash: &self.parameters_hash,
            parameters: &self.exec.parameters,
            idempotency_key: self.exec.idempotency_key.as_deref(),
            shadow: self.shadow.as_ref().map(ShadowEvaluated::from),
            history: (!self.history.is_empty()).then_some(&self.history),
            traceparent: self.request.traceparent.as_deref(),
        })
    }

    /// `action.requested`, `action.denied` and, when a rule was broken, `policy.violated`, each
    /// naming `policy_id`, the policy that refused (none for a refusal of the request itself).
    fn denied(&self, execution_id: &str, refusal: Refusal<'_>, violated: bool) -> Vec<EventDraft> {
        let span = self.span(execution_id);
        let action_id = self.exec.action_id.as_str();
        let Refusal {
            token,
            message,
            policy_id,
        } = refusal;
        let mut v = vec![
            self.requested(execution_id),
            span.draft_of(&ActionDenied {
                execution_id,
                action_id,
                error: token,
                reason: message,
                policy_id,
                decision: "deny",
            }),
        ];
        if violated {
            let violation = PolicyViolated::new(execution_id, action_id, policy_id, token, message);
            v.push(span.draft_of(&violation));
        }
        v
    }

    /// `action.requested` and `action.pending_approval`: the approval is not decided yet.
    fn pending(&self, execution_id: &str, message: &str) -> Vec<EventDraft> {
        let span = self.span(execution_id);
        vec![
            self.requested(execution_id),
            span.draft_of(&ActionPendingApproval {
                execution_id,
                action_id: &self.exec.action_id,
                resolution_id: &self.exec.resolution_id,
                approval_id: self.approval_id,
                error: Token::ApprovalPending.as_str(),
                reason: message,
            }),
        ]
    }

    /// A gated call asked for its approval: the approval is opened with `action.requested`,
    /// `approval.requested` (naming the call) and `action.pending_approval`, in one write, and
    /// the pending answer returned. `None` (nothing written) when another execute under the
    /// resolution opened the approval first.
    async fn open(
        &self,
        response: ExecuteResponse,
        approval: Box<cra_carp::store::ApprovalRecord>,
        expires_at: Option<&str>,
    ) -> ApiResult<Option<ExecuteResponse>> {
        let execution_id = response.execution_id.as_str();
        let message = response.error.as_ref().map_or("", |e| e.message.as_str());
        let span = self.span(execution_id);
        let requested = span.draft_of(&ApprovalRequested::opened(&approval, expires_at));
        let mut drafts = self.pending(execution_id, message);
        drafts.insert(1, requested);
        let r = &self.request.requester;
        let change = StateChange::Open(*approval);
        match self.rt.append_change(&r.agent_id, change, drafts).await {
            Ok(events) => self.note_recorded(&events),
            Err(e) if e.body.error == Token::AlreadyExists.as_str() => return Ok(None),
            Err(e) => return Err(e),
        }
        self.rt.metrics.record_execution("pending_approval");
        Ok(Some(response))
    }

    /// A request the engine refused by a rule: recorded under a new execution id, then
    /// answered as a `denied` execute response naming it.
    async fn refused(&self, refusal: CarpError) -> ApiResult<ExecuteResponse> {
        let token = refusal.token;
        if !is_recorded_refusal(token) {
            return Err(ApiError::from(refusal));
        }
        let execution_id = self.rt.ids.new_id();
        let timestamp = cra_wire::clock::format_timestamp(self.rt.clock.now());
        let response = refusal_response(
            self.request,
            execution_id,
            self.trace_id.to_owned(),
            timestamp,
            Some(&refusal),
        );
        // A repeat of a running execution's key is refused, but it breaks no rule.
        let violated = token != Token::ExecutionInProgress;
        let recorded = Refusal {
            token: token.as_str(),
            message: &refusal.message,
            policy_id: refusal.policy_id.as_deref(),
        };
        self.append(self.denied(&response.execution_id, recorded, violated))
            .await?;
        self.rt.metrics.record_execution("refused");
        Ok(response)
    }

    /// Answered without running: denied or pending approval, or the first response of a
    /// repeated idempotency key.
    async fn answered(&self, resp: ExecuteResponse) -> ApiResult<ExecuteResponse> {
        let execution_id = resp.execution_id.as_str();
        let (token, message) = resp.error.as_ref().map_or(("forbidden", "denied"), |e| {
            (e.code.as_str(), e.message.as_str())
        });
        match resp.status {
            ExecuteStatus::PendingApproval => {
                self.append(self.pending(execution_id, message)).await?;
                self.rt.metrics.record_execution("pending_approval");
                return Ok(resp);
            }
            ExecuteStatus::Denied => {
                let details = resp.error.as_ref().and_then(|e| e.details.as_ref());
                let policy_id = details.and_then(|d| d.get("policy_id")?.as_str());
                let refusal = Refusal {
                    token,
                    message,
                    policy_id,
                };
                self.append(self.denied(execution_id, refusal, true))
                    .await?;
                self.rt.metrics.record_execution("denied");
                return Ok(resp);
            }
            ExecuteStatus::Success | ExecuteStatus::Error => {}
        }
        // A repeated idempotency key: the first response, not run again.
        let span_id = self.rt.ids.new_id();
        let event = self.span(&span_id).draft_of(&ActionDeduplicated {
            execution_id,
            request_id: &self.request.request_id,
            idempotency_key: self.exec.idempotency_key.as_deref(),
        });
        self.append(vec![event]).await?;
        self.rt.metrics.record_execution("deduplicated");
        Ok(resp)
    }

    /// Cleared to run: `action.requested` + `action.approved`, the executor, its outcome.
    async fn run(
        &self,
        cleared: ClearedExecution,
        atlases: &AtlasState,
        stored: Option<&StoredResolution>,
    ) -> ApiResult<ExecuteResponse> {
        cra_store::fault_point!("execute.leased");
        let execution_id = cleared.execution_id.clone();
        let approval_id = self
            .approval_id
            .filter(|_| cleared.action.requires_confirmation);
        let approved = self.span(&execution_id).draft_of(&ActionApproved {
            execution_id: &execution_id,
            resolution_id: &self.exec.resolution_id,
            action_id: &self.exec.action_id,
            approval_id,
            decision: "allow",
        });
        let appended = self
            .append(vec![self.requested(&execution_id), approved])
            .await;
        // Not approved in the chain: the executor never runs, the lease goes.
        if appended.is_err() {
            self.rt.release_lease(&execution_id).await;
        }
        appended?;
        cra_store::fault_point!("execute.approved");
        let started = self.rt.clock.now();
        let (executor, outcome) =
            match crate::executor::executor_of(atlases, stored, &self.exec.action_id) {
                Ok(executor) => {
                    let outcome = self
                        .rt
                        .run_executor(
                            executor.as_deref(),
                            &self.exec.action_id,
                            &execution_id,
                            &cleared.parameters,
                            self.exec.extra.get("outcome"),
                        )
                        .await;
                    (executor, outcome)
                }
                Err(unavailable) => (None, Err(unavailable)),
            };
        let duration_ms = millis_between(started, self.rt.clock.now());
        cra_store::fault_point!("execute.performed");
        let mut record = engine(self.rt, atlases.set.clone()).execution_record(cleared, outcome);
        let redacted = self.redact_result(&mut record.response.result);
        let response = record.response.clone();
        let mut events =
            vec![self.outcome(&execution_id, executor.as_deref(), &response, duration_ms)];
        events.extend(self.redaction_events(&execution_id, &redacted));
        // The outcome, the lease's release and the events are one write.
        let r = &self.request.requester;
        let appended = self
            .rt
            .append_change(&r.agent_id, StateChange::Execute(record), events)
            .await;
        self.rt.settle_lease(&execution_id, &appended).await;
        self.note_recorded(&appended?);
        let label = match response.status {
            ExecuteStatus::Success => "success",
            _ => "error",
        };
        self.rt.metrics.record_execution(label);
        Ok(response)
    }

    /// Applies the redaction rules to the executor's result (as `/result`), before it is hashed,
    /// stored or answered; answers what they replaced.
    fn redact_result(&self, result: &mut Option<Value>) -> Vec<Redaction> {
        let Some(value) = result.as_mut().filter(|_| !self.redactor.is_empty()) else {
            return Vec::new();
        };
        let mut wrapped = serde_json::json!({ "result": value.take() });
        let found = self.redactor.redact(&mut wrapped, RESULT_ROOTS);
        *value = wrapped["result"].take();
        found
    }

    /// One `context.redacted` per value replaced in the result, in the execution's span.
    fn redaction_events(&self, execution_id: &str, redacted: &[Redaction]) -> Vec<EventDraft> {
        redaction_drafts(
            &self.span(execution_id),
            redacted,
            Some(&self.request.request_id),
        )
    }

    /// `action.executed` (with the executor's `duration_ms`) or `action.failed`.
    fn outcome(
        &self,
        execution_id: &str,
        executor: Option<&str>,
        response: &ExecuteResponse,
        duration_ms: u64,
    ) -> EventDraft {
        let span = self.span(execution_id);
        let action_id = self.exec.action_id.as_str();
        match (&response.status, &response.error) {
            (ExecuteStatus::Success, _) => span.draft_of(&ActionExecuted {
                execution_id,
                action_id,
                executor,
                status: "success",
                result_hash: response
                    .result
                    .as_ref()
                    .map(cra_wire::hash::canonical_digest),
                duration_ms,
            }),
            (_, error) => span.draft_of(&ActionFailed::new(
                execution_id,
                action_id,
                executor,
                error.as_ref(),
            )),
        }
    }
}
