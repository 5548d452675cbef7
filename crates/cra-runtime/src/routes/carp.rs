//! `POST /v1/resolve` and `POST /v1/execute`: CARP over HTTP, with every operation recorded in
//! the session's TRACE chain before the answer is sent.
//!
//! Order of checks: the body's shape (400, nothing stored); the caller is the requester (403
//! `identity_mismatch`, nothing stored: an actor cannot write into another's chain); the session
//! exists, belongs to the requester and is active (404/403, nothing stored: there is no chain to
//! write to). Everything after that is a well-formed request in a session the caller owns: a
//! refusal by a protocol rule is answered with its token *and* recorded.
//!
//! Ids: one `trace_id` per resolve (the resolution's); the resolve's events share the span
//! `resolution_id`; an execute under it uses the same `trace_id`, its own span (the
//! `execution_id`) and the resolve's span as parent.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use cra_carp::eval::{CountersSnapshot, ExplainLevel};
use cra_carp::service::{Carp, CarpConfig, ExecuteOutcome};
use cra_carp::types::{CarpRequest, ExecuteStatus, Operation, Resolution};
use cra_carp::validate::{CarpError, parse_request};
use cra_trace::{EventDraft, PreparedDraft};
use cra_wire::Token;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult};
use crate::extract::{QueryParams, RawJson};
use crate::routes::Caller;
use crate::state::{AppState, Runtime};
use crate::tracelog::{draft, typed_draft};

/// `?explain=true` attaches the evaluation's explanation to the answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveQuery {
    /// `true` or `false`.
    #[serde(default)]
    pub explain: Option<String>,
}

/// A CARP refusal as an HTTP refusal.
pub fn carp_error(e: CarpError) -> ApiError {
    let mut a = ApiError::new(e.token, e.message);
    if !e.errors.is_empty() {
        a = a.with_errors(e.errors);
    }
    a
}

/// Tokens of rule refusals that are recorded in the chain.
fn is_recorded_refusal(t: Token) -> bool {
    !matches!(
        t,
        Token::InternalError | Token::Unavailable | Token::IntegrityError
    )
}

impl Runtime {
    /// The CARP service over the current atlases.
    pub fn carp_service(&self) -> Carp {
        Carp::new(
            self.backends.carp.clone(),
            self.atlases().set.clone(),
            self.clock.clone(),
            self.ids.clone(),
            CarpConfig {
                ttl_seconds: self.config.resolution_ttl_seconds,
                max_skew_seconds: i64::try_from(self.config.clock_skew_seconds).unwrap_or(300),
            },
        )
        .with_owner(
            self.config
                .replica_id
                .as_deref()
                .unwrap_or(cra_carp::service::DEFAULT_LEASE_OWNER),
        )
    }
}

/// Parses the body, checks the operation, the caller's identity and the session; returns the
/// request once it is well-formed and in a session the caller owns and may write to.
async fn admit(
    state: &Runtime,
    actor: &Actor,
    body: &Value,
    want: Operation,
) -> ApiResult<CarpRequest> {
    let request = parse_request(body).map_err(carp_error)?;
    // `validate` is a resolve that changes nothing (CARP §3.2): it takes the resolve route.
    let taken = request.operation == want
        || (want == Operation::Resolve && request.operation == Operation::Validate);
    if !taken {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/operation",
            format!(
                "this route takes operation `{}`, the request says `{}`",
                want.as_str(),
                request.operation.as_str()
            ),
        ));
    }
    actor.require(&[Role::Agent], "CARP requests")?;
    if actor.id != request.requester.agent_id {
        return Err(ApiError::field(
            Token::IdentityMismatch,
            "/requester/agent_id",
            format!(
                "this key authenticates `{}`; requester.agent_id must be the caller",
                actor.id
            ),
        ));
    }
    let session = state
        .session_record(&request.requester.session_id)
        .await
        .map_err(|e| {
            if e.token() == Some(Token::SessionNotFound) {
                ApiError::field(
                    Token::SessionNotFound,
                    "/requester/session_id",
                    "no such session; open one with POST /v1/sessions",
                )
            } else {
                e
            }
        })?;
    cra_carp::validate::check_session(&request, Some(&session)).map_err(carp_error)?;
    Ok(request)
}

/// A resolve refused by a rule: `carp.request.received` + `carp.request.rejected`.
fn rejection_events(
    request: &CarpRequest,
    trace_id: &str,
    span: &str,
    e: &ApiError,
) -> Vec<EventDraft> {
    vec![
        draft(
            trace_id,
            span,
            None,
            "carp.request.received",
            json!({
                "request_id": request.request_id,
                "operation": request.operation.as_str(),
                "goal": request.task.as_ref().map(|t| t.goal.as_str()),
                "request": request,
            }),
        ),
        draft(
            trace_id,
            span,
            None,
            "carp.request.rejected",
            json!({"request_id": request.request_id, "error": e.body.error, "message": e.body.message, "decision": "rejected"}),
        ),
    ]
}

/// Records a resolve refused by a rule (`carp.request.received` + `carp.request.rejected`) and
/// returns the refusal to answer; a failure to record it is answered instead.
async fn refuse(state: &Runtime, request: &CarpRequest, trace_id: &str, err: ApiError) -> ApiError {
    if err.token().is_some_and(is_recorded_refusal) {
        let span = state.ids.new_id();
        let drafts = rejection_events(request, trace_id, &span, &err);
        let sid = &request.requester.session_id;
        if let Err(e) = state
            .append_events(sid, &request.requester.agent_id, drafts)
            .await
        {
            return e;
        }
    }
    err
}

/// The size of the last resolution text written, a little over: the next one is written into a
/// string this large (resolutions of one deployment are much alike in size).
static RESOLUTION_TEXT_HINT: AtomicUsize = AtomicUsize::new(4096);

/// The resolution's TRACE canonical text, or `None` when it has none (see `completion_draft`).
fn resolution_text(resolution: &Resolution) -> Option<String> {
    let hint = RESOLUTION_TEXT_HINT.load(Ordering::Relaxed).min(1 << 20);
    let text = cra_wire::canonical::to_trace_canonical_sized(resolution, hint).ok()?;
    RESOLUTION_TEXT_HINT.store(text.len() + text.len() / 8, Ordering::Relaxed);
    Some(text)
}

/// Resolves a CARP request.
#[utoipa::path(post, path = "/v1/resolve", tag = "carp",
    request_body(content = Object, description = "A CARP/1.0 request (schemas/carp-request.schema.json)"),
    params(("explain" = Option<bool>, Query, description = "Attach the evaluation's explanation")),
    responses((status = 200, description = "The resolution (schemas/carp-resolution.schema.json)", body = Object),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 409, body = crate::openapi::ErrorBodySchema)))]
pub async fn resolve(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ResolveQuery>,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    let explain = match q.explain.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(o) => {
            return Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `explain`: `{o}` is not true or false"),
            ));
        }
    };
    let request = admit(&state, &actor, &body, Operation::Resolve).await?;
    let agent = request.requester.agent_id.clone();
    let trace_id = state.ids.new_id();
    let atlases = state.atlases();
    let carp = state.carp_service();
    let req2 = request.clone();
    let tid = trace_id.clone();
    // Each action's outcome and deciding policy are recorded (`policy.evaluated`) on every
    // resolve; the policy trail is computed only when it is answered.
    let level = if explain {
        ExplainLevel::Full
    } else {
        ExplainLevel::Outcomes
    };
    // Checks and evaluation read the store and write nothing: no blocking-pool hop on redb.
    let result = state
        .quick("the resolve task failed", move || {
            carp.prepare_resolve(&req2, level, Some(tid))
        })
        .await?;
    let (mut resolution, counters, record) = match result {
        Ok(p) => match p.record {
            Some(record) => (p.resolution, p.counters, record),
            None => {
                let digests = atlases.digests();
                return answer_validate(&state, &request, &trace_id, &digests, p, explain).await;
            }
        },
        Err(e) => return Err(refuse(&state, &request, &trace_id, carp_error(e)).await),
    };
    let span = resolution.resolution_id.clone();
    let explain_data = resolution.explain.take();
    let digests = atlases.digests();
    let mut prepared = Vec::with_capacity(16);
    prepared.push(received_draft(
        &trace_id, &span, &request, &digests, &counters,
    ));
    if let Some(ex) = &explain_data {
        for a in &ex.actions {
            prepared.push(typed_draft(
                &trace_id,
                &span,
                "policy.evaluated",
                &PolicyEvaluated {
                    action_id: &a.action_id,
                    atlas_id: &a.atlas_id,
                    policy_id: &a.decided_by,
                    result: a.outcome,
                },
            ));
        }
    }
    for b in &resolution.context_blocks {
        prepared.push(typed_draft(
            &trace_id,
            &span,
            "context.injected",
            &ContextInjected {
                block_id: &b.block_id,
                source: &b.source,
                content_type: &b.content_type,
                priority: b.priority,
                token_count: b.token_estimate,
                token_estimate: b.token_estimate,
                content_hash: cra_wire::hash::sha256_prefixed(b.content.as_str().as_bytes()),
            },
        ));
    }
    if let Some(approval_id) = &resolution.decision.approval_id {
        let gated: Vec<&str> = resolution
            .allowed_actions
            .iter()
            .filter(|a| a.requires_confirmation)
            .map(|a| a.action_id.as_str())
            .collect();
        prepared.push(typed_draft(
            &trace_id,
            &span,
            "approval.requested",
            &ApprovalRequested {
                approval_id,
                resolution_id: &resolution.resolution_id,
                actions: gated,
            },
        ));
    }
    // The resolution is written once, in its TRACE canonical form: that text is the answer and,
    // as it is, the completion event's `resolution`, so the bytes an agent receives are the
    // bytes its chain hashed. (serde_json's text when it has no canonical form: see
    // `completion_draft`.)
    let canonical = resolution_text(&resolution);
    prepared.push(completion_draft(
        &trace_id,
        &span,
        &resolution,
        canonical.as_deref(),
    ));
    let answer = match canonical {
        Some(text) => text,
        None => serde_json::to_string(&resolution)
            .map_err(|e| ApiError::internal("cannot serialise the resolution", e))?,
    };
    // The resolve's state (request id, resolution, approval) is stored with its events: on redb
    // in the same durable transaction.
    if state
        .append_resolve(&agent, record, prepared)
        .await?
        .is_none()
    {
        // A duplicate that raced past the read check: refused, and nothing of it was written.
        let e = cra_carp::validate::check_request_id_new(&request, false)
            .err()
            .map_or_else(
                || ApiError::new(Token::DuplicateRequestId, "request_id was already used"),
                carp_error,
            );
        return Err(refuse(&state, &request, &trace_id, e).await);
    }
    state
        .metrics
        .record_resolution(resolution.decision.kind.as_str());
    if explain && explain_data.is_some() {
        resolution.explain = explain_data;
        return Ok(Json(resolution).into_response());
    }
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        answer,
    )
        .into_response())
}

/// Answers a `validate` request (a dry run): records `carp.request.received` (operation
/// `validate`) and one `carp.resolution.completed` marked `dry_run: true`, and nothing else. No
/// resolution is stored (its id cannot be executed), no approval is opened (the answer's
/// `approval_id`, if any, names none) and no counter is read for a charge.
async fn answer_validate(
    state: &Runtime,
    request: &CarpRequest,
    trace_id: &str,
    digests: &BTreeMap<String, String>,
    prepared: cra_carp::service::PreparedResolve,
    explain: bool,
) -> ApiResult<Response> {
    let mut resolution = prepared.resolution;
    let explained = resolution.explain.take();
    let span = resolution.resolution_id.clone();
    let received = received_draft(trace_id, &span, request, digests, &prepared.counters);
    let mut completion = completion_value(&resolution);
    completion["dry_run"] = Value::Bool(true);
    let completed = PreparedDraft::new(draft(
        trace_id,
        &span,
        None,
        "carp.resolution.completed",
        completion,
    ));
    let drafts = vec![received.into_draft(), completed.into_draft()];
    let sid = &request.requester.session_id;
    state
        .append_events(sid, &request.requester.agent_id, drafts)
        .await?;
    if explain {
        resolution.explain = explained;
    }
    Ok(Json(resolution).into_response())
}

/// The `carp.request.received` event of a resolve or validate, with the counts its evaluation
/// read (when it read any), so that replay decides as it did (errata: replay).
fn received_draft(
    trace_id: &str,
    span: &str,
    request: &CarpRequest,
    digests: &BTreeMap<String, String>,
    counters: &CountersSnapshot,
) -> PreparedDraft {
    let read = (!counters.rate.is_empty() || !counters.budget.is_empty()).then_some(ReadCounters {
        rate: &counters.rate,
        budget: &counters.budget,
    });
    typed_draft(
        trace_id,
        span,
        "carp.request.received",
        &RequestReceived::new(request, digests, read),
    )
}

/// The `carp.request.received` payload: §4.3.2's required fields, then everything replay needs
/// (errata).
#[derive(Serialize)]
struct RequestReceived<'a> {
    request_id: &'a str,
    operation: Operation,
    goal: Option<&'a str>,
    atlas_ids: &'a Option<Vec<String>>,
    request: &'a CarpRequest,
    atlas_digests: &'a std::collections::BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counters: Option<ReadCounters<'a>>,
}

impl<'a> RequestReceived<'a> {
    fn new(
        request: &'a CarpRequest,
        atlas_digests: &'a std::collections::BTreeMap<String, String>,
        counters: Option<ReadCounters<'a>>,
    ) -> Self {
        Self {
            request_id: &request.request_id,
            operation: request.operation,
            goal: request.task.as_ref().map(|t| t.goal.as_str()),
            atlas_ids: &request.atlas_ids,
            request,
            atlas_digests,
            counters,
        }
    }
}

/// The rate and budget counts a resolve's evaluation read.
#[derive(Serialize)]
struct ReadCounters<'a> {
    rate: &'a [cra_carp::eval::CounterEntry],
    budget: &'a [cra_carp::eval::CounterEntry],
}

/// The `policy.evaluated` payload: which policy decided an action, and how.
#[derive(Serialize)]
struct PolicyEvaluated<'a> {
    action_id: &'a str,
    atlas_id: &'a str,
    policy_id: &'a str,
    result: cra_carp::explain::Outcome,
}

/// The `context.injected` payload: a context block's identity and the hash of its content.
#[derive(Serialize)]
struct ContextInjected<'a> {
    block_id: &'a str,
    source: &'a str,
    content_type: &'a str,
    priority: i64,
    token_count: u64,
    token_estimate: u64,
    content_hash: String,
}

/// The `approval.requested` payload: the approval and the actions it gates.
#[derive(Serialize)]
struct ApprovalRequested<'a> {
    approval_id: &'a str,
    resolution_id: &'a str,
    actions: Vec<&'a str>,
}

/// The `carp.resolution.completed` payload as a value: §4.3.2's required fields, then the full
/// resolution replay compares against (errata).
fn completion_value(resolution: &Resolution) -> Value {
    let kind = resolution.decision.kind.as_str();
    json!({
        "resolution_id": resolution.resolution_id,
        "decision_type": kind,
        "allowed_count": resolution.allowed_actions.len(),
        "denied_count": resolution.denied_actions.len(),
        "context_block_count": resolution.context_blocks.len(),
        "ttl_seconds": resolution.ttl_seconds,
        "decision": kind,
        "resolution": resolution,
    })
}

/// The completion payload in its TRACE canonical form, around the resolution's canonical text
/// `canonical`: the members of [`completion_value`] in key order, each written as the
/// canonical form writes it.
fn canonical_completion_payload(resolution: &Resolution, canonical: &str) -> String {
    use cra_wire::canonical::trace::write_ascii_string;
    use std::fmt::Write as _;
    let kind = resolution.decision.kind.as_str();
    let mut out = String::with_capacity(canonical.len() + 256);
    let _ = write!(
        out,
        r#"{{"allowed_count":{},"context_block_count":{},"decision":"#,
        resolution.allowed_actions.len(),
        resolution.context_blocks.len()
    );
    write_ascii_string(kind, &mut out);
    out.push_str(r#","decision_type":"#);
    write_ascii_string(kind, &mut out);
    let _ = write!(
        out,
        r#","denied_count":{},"resolution":"#,
        resolution.denied_actions.len()
    );
    out.push_str(canonical);
    out.push_str(r#","resolution_id":"#);
    write_ascii_string(&resolution.resolution_id, &mut out);
    let _ = write!(out, r#","ttl_seconds":{}}}"#, resolution.ttl_seconds);
    out
}

/// The completion event's draft. Its payload is written as canonical text around the
/// resolution's canonical form `canonical`, never as a `serde_json::Value` (building,
/// canonicalising and dropping that tree of the 14 kB resolution was about a third of a
/// resolve's handler time). A resolution without a canonical form (its unknown extras repeat a
/// member's name, which the text path refuses too) has its draft made from the value, where the
/// later member wins, as serde_json has it.
fn completion_draft(
    trace_id: &str,
    span: &str,
    resolution: &Resolution,
    canonical: Option<&str>,
) -> PreparedDraft {
    const COMPLETED: &str = "carp.resolution.completed";
    match canonical {
        Some(text) => PreparedDraft::from_canonical(
            draft(trace_id, span, None, COMPLETED, Value::Null),
            canonical_completion_payload(resolution, text),
        ),
        None => PreparedDraft::new(draft(
            trace_id,
            span,
            None,
            COMPLETED,
            completion_value(resolution),
        )),
    }
}

fn parameters_hash(parameters: &Value) -> String {
    cra_wire::hash::sha256_prefixed(cra_wire::canonical::trace_canonical(parameters).as_bytes())
}

/// Executes an allowed action.
#[utoipa::path(post, path = "/v1/execute", tag = "carp",
    request_body(content = Object, description = "A CARP/1.0 execute request (schemas/carp-execute-request.schema.json)"),
    responses((status = 200, description = "The execute response (schemas/carp-execute-response.schema.json)", body = Object),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 409, body = crate::openapi::ErrorBodySchema),
              (status = 429, body = crate::openapi::ErrorBodySchema)))]
pub async fn execute(
    State(state): State<AppState>,
    Caller(actor): Caller,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    let request = admit(&state, &actor, &body, Operation::Execute).await?;
    let sid = request.requester.session_id.clone();
    let agent = request.requester.agent_id.clone();
    let Some(exec) = request.execution.clone() else {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/execution",
            "an execute request needs an `execution` member",
        ));
    };
    // The resolve's trace and span, when the resolution is this agent's.
    let rid = exec.resolution_id.clone();
    let stored = state.carp_read(move |s| s.get_resolution(&rid)).await?;
    let (trace_id, parent) = match &stored {
        Some(s) if s.agent_id == agent => (
            s.resolution.trace_id.clone(),
            Some(s.resolution.resolution_id.clone()),
        ),
        _ => (state.ids.new_id(), None),
    };
    let carp = state.carp_service();
    let req2 = request.clone();
    let outcome =
        crate::error::run_blocking("the execute task failed", move || carp.execute(&req2)).await?;
    let phash = parameters_hash(&exec.parameters);
    let requested = |execution_id: &str| {
        draft(
            &trace_id,
            execution_id,
            parent.as_deref(),
            "action.requested",
            json!({
                "execution_id": execution_id,
                "request_id": request.request_id,
                "resolution_id": exec.resolution_id,
                "action_id": exec.action_id,
                "parameters_hash": phash,
                "idempotency_key": exec.idempotency_key,
            }),
        )
    };
    let denied = |execution_id: &str, token: &str, message: &str, violated: bool| {
        let mut v = vec![draft(
            &trace_id,
            execution_id,
            parent.as_deref(),
            "action.denied",
            json!({
                "execution_id": execution_id,
                "action_id": exec.action_id,
                "error": token,
                "reason": message,
                "decision": "deny",
            }),
        )];
        if violated {
            v.push(draft(
                &trace_id,
                execution_id,
                parent.as_deref(),
                "policy.violated",
                json!({
                    "execution_id": execution_id,
                    "action_id": exec.action_id,
                    "rule": token,
                    "message": message,
                }),
            ));
        }
        v
    };
    match outcome {
        Err(e) => {
            let err = carp_error(e);
            if err.token().is_some_and(is_recorded_refusal) {
                let execution_id = state.ids.new_id();
                let mut drafts = vec![requested(&execution_id)];
                // A repeat of a running execution's key is refused, but it breaks no rule.
                let violated = err.token() != Some(Token::ExecutionInProgress);
                drafts.extend(denied(
                    &execution_id,
                    &err.body.error,
                    &err.body.message,
                    violated,
                ));
                state.append_events(&sid, &agent, drafts).await?;
                state.metrics.record_execution("refused");
            }
            Err(err)
        }
        Ok(ExecuteOutcome::Answered(resp)) => {
            let execution_id = resp.execution_id.clone();
            match resp.status {
                ExecuteStatus::Denied | ExecuteStatus::PendingApproval => {
                    let (token, message) = resp
                        .error
                        .as_ref()
                        .map(|e| (e.code.clone(), e.message.clone()))
                        .unwrap_or_else(|| ("forbidden".into(), "denied".into()));
                    let violated = resp.status == ExecuteStatus::Denied;
                    let mut drafts = vec![requested(&execution_id)];
                    drafts.extend(denied(&execution_id, &token, &message, violated));
                    state.append_events(&sid, &agent, drafts).await?;
                    state.metrics.record_execution(if violated {
                        "denied"
                    } else {
                        "pending_approval"
                    });
                    let t = Token::parse(&token).unwrap_or(Token::Forbidden);
                    Err(ApiError::new(t, message))
                }
                ExecuteStatus::Success | ExecuteStatus::Error => {
                    // A repeated idempotency key: the first response, not run again.
                    state
                        .append_events(
                            &sid,
                            &agent,
                            vec![draft(
                                &trace_id,
                                &state.ids.new_id(),
                                parent.as_deref(),
                                "action.deduplicated",
                                json!({
                                    "execution_id": execution_id,
                                    "request_id": request.request_id,
                                    "idempotency_key": exec.idempotency_key,
                                }),
                            )],
                        )
                        .await?;
                    state.metrics.record_execution("deduplicated");
                    Ok(Json(resp).into_response())
                }
            }
        }
        Ok(ExecuteOutcome::Run(cleared)) => {
            let execution_id = cleared.execution_id.clone();
            let approval_id = stored
                .as_ref()
                .and_then(|s| s.resolution.decision.approval_id.clone())
                .filter(|_| cleared.action.requires_confirmation);
            let approved = state
                .append_events(
                    &sid,
                    &agent,
                    vec![
                        requested(&execution_id),
                        draft(
                            &trace_id,
                            &execution_id,
                            parent.as_deref(),
                            "action.approved",
                            json!({
                                "execution_id": execution_id,
                                "action_id": exec.action_id,
                                "approval_id": approval_id,
                                "decision": "allow",
                            }),
                        ),
                    ],
                )
                .await;
            // Not approved in the chain: the executor never runs, the lease goes.
            if approved.is_err() {
                state.release_lease(&execution_id).await;
            }
            approved?;
            let executor =
                crate::executor::executor_of(&state.atlases(), stored.as_ref(), &exec.action_id);
            let outcome = state
                .run_executor(
                    executor.as_deref(),
                    &exec.action_id,
                    &execution_id,
                    &cleared.parameters,
                    exec.extra.get("outcome"),
                )
                .await;
            let carp = state.carp_service();
            let response = crate::error::run_blocking("the execute task failed", move || {
                carp.finish_execution(cleared, outcome)
            })
            .await?
            .map_err(carp_error)?;
            let (event_type, payload) = match (&response.status, &response.error) {
                (ExecuteStatus::Success, _) => (
                    "action.executed",
                    json!({
                        "execution_id": execution_id,
                        "action_id": exec.action_id,
                        "executor": executor,
                        "status": "success",
                        "result_hash": response.result.as_ref().map(parameters_hash),
                    }),
                ),
                (_, e) => (
                    "action.failed",
                    json!({
                        "execution_id": execution_id,
                        "action_id": exec.action_id,
                        "executor": executor,
                        "status": "error",
                        "error": e,
                    }),
                ),
            };
            let appended = state
                .append_events(
                    &sid,
                    &agent,
                    vec![draft(
                        &trace_id,
                        &execution_id,
                        parent.as_deref(),
                        event_type,
                        payload,
                    )],
                )
                .await;
            state.settle_lease(&execution_id, &appended).await;
            appended?;
            state.metrics.record_execution(match response.status {
                ExecuteStatus::Success => "success",
                _ => "error",
            });
            Ok(Json(response).into_response())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        ApprovalRequested, ContextInjected, PolicyEvaluated, ReadCounters, RequestReceived,
        completion_draft, completion_value,
    };
    use cra_carp::types::{CarpRequest, Resolution};
    use serde_json::{Value, json};

    /// A resolution with what a canonical writer can get wrong: non-ASCII text, escapes,
    /// floats spelled several ways, keys out of order, unknown extras.
    fn resolution() -> Resolution {
        serde_json::from_value(json!({
            "carp_version": "1.0",
            "resolution_id": "01a20f73-45ea-720b-bf21-23219480b08a",
            "request_id": "0190a000-0000-7000-8000-000000000001",
            "timestamp": "2026-11-25T10:00:00.000000Z",
            "decision": {"type": "partial", "reason": "Some \"actions\" are denied\n", "approval_id": null, "expires_at": null},
            "context_blocks": [{"block_id": "a/ctx/caf\u{e9}.md", "source": "a", "content": "caf\u{e9} \u{1f600}\ttab \u{7f}",
                "content_type": "text/markdown", "priority": 10, "token_estimate": 4}],
            "allowed_actions": [{"action_id": "x.get", "name": "Get", "description": "d",
                "parameters_schema": {"type": "object", "properties": {"n": {"type": "number", "minimum": 1.50, "maximum": 1e3, "multipleOf": 0.1}}},
                "risk_tier": "low", "requires_confirmation": false, "idempotent": true}],
            "denied_actions": [{"action_id": "x.drop", "policy_id": "deny-drop", "reason": "never"}],
            "constraints": [],
            "ttl_seconds": 3600,
            "trace_id": "01a20f73-45ea-720b-bf21-23219480b08b",
            "zeta_extra": {"b": 2, "a": -0.0}
        }))
        .unwrap()
    }

    /// The text path gives the bytes the value path gave (the payload as a `Value`, then its
    /// TRACE canonical form), so the stored event and its hash are what they were.
    #[test]
    fn completion_text_is_the_canonical_form_of_the_value() {
        let r = resolution();
        let value = json!({
            "resolution_id": r.resolution_id,
            "decision_type": r.decision.kind.as_str(),
            "allowed_count": r.allowed_actions.len(),
            "denied_count": r.denied_actions.len(),
            "context_block_count": r.context_blocks.len(),
            "ttl_seconds": r.ttl_seconds,
            "decision": r.decision.kind.as_str(),
            "resolution": r,
        });
        // Assembled around the resolution's canonical text.
        let canonical = cra_wire::canonical::to_trace_canonical(&r).unwrap();
        let prepared = completion_draft("t", "s", &r, Some(&canonical));
        assert!(prepared.draft.payload.is_null(), "written as text");
        assert_eq!(
            prepared.canonical_payload(),
            cra_wire::canonical::trace_canonical(&value)
        );
        assert_eq!(completion_value(&r), value);
        // Parsed back (what live subscribers get), it is the same value.
        let back = prepared.into_draft();
        assert_eq!(
            back.payload,
            serde_json::from_str::<Value>(&cra_wire::canonical::trace_canonical(&value)).unwrap()
        );
    }

    /// A resolution whose unknown extras repeat a member's name has no canonical form (duplicate
    /// key), neither written from the value nor from its text: the draft is then made from the
    /// value, and still carries the payload.
    #[test]
    fn completion_falls_back_to_the_value_on_a_duplicate_member() {
        let mut r = resolution();
        r.extra.insert("trace_id".into(), json!("shadow"));
        assert!(cra_wire::canonical::to_trace_canonical(&r).is_err());
        // Nor does serde_json's text of it.
        let text = serde_json::to_string(&r).unwrap();
        assert!(cra_wire::canonical::trace::trace_canonical_from_str(&text).is_err());
        let prepared = completion_draft("t", "s", &r, None);
        assert!(!prepared.draft.payload.is_null(), "made from the value");
        assert_eq!(
            prepared.draft.payload["resolution_id"],
            r.resolution_id.as_str()
        );
    }

    /// Each typed payload of a resolve's events writes the canonical text of the `json!` value
    /// it replaced, so stored events and their hashes are unchanged; with non-ASCII text, an
    /// unknown extra member and counters.
    #[test]
    fn typed_payloads_are_the_values_they_replace() {
        let request: CarpRequest = serde_json::from_value(json!({
            "carp_version": "1.0",
            "request_id": "0190a000-0000-7000-8000-000000000001",
            "timestamp": "2026-11-25T10:00:00.000Z",
            "operation": "resolve",
            "requester": {"agent_id": "caf\u{e9}-bot", "session_id": "0190a000-0000-7000-8000-000000000100"},
            "task": {"goal": "Fix the \"build\"\n\u{1f600}", "risk_tier": "low"},
            "atlas_ids": ["dev.cra.github-ops"],
            "context": {"z": 1.5, "a": [true, null]},
            "x_extra": {"b": 2, "a": 1}
        }))
        .unwrap();
        let digests: std::collections::BTreeMap<String, String> =
            [("dev.cra.github-ops".to_owned(), "sha256:ab".to_owned())].into();
        let entry = cra_carp::eval::CounterEntry {
            policy_id: "rate".into(),
            scope_key: "session:s".into(),
            value: 3,
        };
        let (rate, budget) = (vec![entry], Vec::new());
        let typed = RequestReceived::new(
            &request,
            &digests,
            Some(ReadCounters {
                rate: &rate,
                budget: &budget,
            }),
        );
        let value = json!({
            "request_id": request.request_id,
            "operation": request.operation,
            "goal": request.task.as_ref().map(|t| t.goal.as_str()),
            "atlas_ids": request.atlas_ids,
            "request": request,
            "atlas_digests": digests,
            "counters": {"rate": rate, "budget": budget},
        });
        same(&typed, &value);
        let without = RequestReceived {
            counters: None,
            goal: None,
            ..typed
        };
        let mut value = value;
        value["goal"] = Value::Null;
        value.as_object_mut().unwrap().remove("counters");
        same(&without, &value);

        let outcome = cra_carp::explain::Outcome::RequiresApproval;
        same(
            &PolicyEvaluated {
                action_id: "x.get",
                atlas_id: "a",
                policy_id: "p",
                result: outcome,
            },
            &json!({"action_id": "x.get", "atlas_id": "a", "policy_id": "p",
                "result": serde_json::to_value(outcome).unwrap()}),
        );
        same(
            &ContextInjected {
                block_id: "a/ctx/caf\u{e9}.md",
                source: "a",
                content_type: "text/markdown",
                priority: -3,
                token_count: 7,
                token_estimate: 7,
                content_hash: "sha256:00".into(),
            },
            &json!({"block_id": "a/ctx/caf\u{e9}.md", "source": "a", "content_type": "text/markdown",
                "priority": -3, "token_count": 7, "token_estimate": 7, "content_hash": "sha256:00"}),
        );
        same(
            &ApprovalRequested {
                approval_id: "ap",
                resolution_id: "r",
                actions: vec!["x.get", "x.put"],
            },
            &json!({"approval_id": "ap", "resolution_id": "r", "actions": ["x.get", "x.put"]}),
        );
    }

    fn same<T: serde::Serialize>(typed: &T, value: &Value) {
        let draft = crate::tracelog::typed_draft("t", "s", "e", typed);
        assert!(draft.draft.payload.is_null(), "written as text");
        assert_eq!(
            draft.canonical_payload(),
            cra_wire::canonical::trace_canonical(value)
        );
    }
}
