//! The TRACE events of CARP's operations and of sessions, one struct per payload (CRA §4.3 and
//! our errata), each a [`Payload`] that a [`Span`] turns into an event (`cra_trace::payload`).
//! The runtime's governance core
//! (`cra_runtime::service::carp`) and `cra resolve --record` ([`crate::replay::resolve_drafts`])
//! both record a resolve with [`resolve_events`] / [`validate_events`], so a chain written
//! locally has the server's events, payloads and spans.
//!
//! Field names and `null`s are the wire's: an `Option` member without `skip_serializing_if` is
//! written as `null`, as the specification's examples have it.

use std::collections::BTreeMap;

use cra_trace::{Payload, PreparedDraft, Span};
use serde::Serialize;
use serde_json::Value;

use crate::eval::{CounterEntry, CountersSnapshot};
use crate::explain::{Explain, Outcome};
use crate::types::{CarpRequest, ExecuteError, Operation, Resolution};

/// `carp.request.received` of a resolve or validate: §4.3.2's required fields, then everything
/// replay needs (errata): the whole request, the digests of the atlases evaluated, and the
/// counts the evaluation read (when it read any).
#[derive(Debug, Serialize)]
pub struct RequestReceived<'a> {
    request_id: &'a str,
    operation: Operation,
    goal: Option<&'a str>,
    atlas_ids: &'a Option<Vec<String>>,
    request: &'a CarpRequest,
    atlas_digests: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counters: Option<ReadCounters<'a>>,
    /// The caller's W3C `traceparent`, when its front door received one.
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a str>,
}

impl Payload for RequestReceived<'_> {
    const EVENT_TYPE: &'static str = "carp.request.received";
    const REQUIRED: &'static [&'static str] = &["request_id", "operation", "goal"];
}

impl<'a> RequestReceived<'a> {
    /// The payload for `request`, evaluated against atlases of `atlas_digests` with `counters`.
    pub fn new(
        request: &'a CarpRequest,
        atlas_digests: &'a BTreeMap<String, String>,
        counters: &'a CountersSnapshot,
    ) -> Self {
        let read = !counters.rate.is_empty() || !counters.budget.is_empty();
        Self {
            request_id: &request.request_id,
            operation: request.operation,
            goal: request.task.as_ref().map(|t| t.goal.as_str()),
            atlas_ids: &request.atlas_ids,
            request,
            atlas_digests,
            counters: read.then_some(ReadCounters {
                rate: &counters.rate,
                budget: &counters.budget,
            }),
            traceparent: request.traceparent.as_deref(),
        }
    }
}

/// The rate and budget counts a resolve's evaluation read.
#[derive(Debug, Serialize)]
struct ReadCounters<'a> {
    rate: &'a [CounterEntry],
    budget: &'a [CounterEntry],
}

/// `carp.request.received` of a request refused by a rule before it was evaluated: the request
/// as received, without digests or counters (nothing was evaluated).
#[derive(Debug, Serialize)]
pub struct RefusedRequestReceived<'a> {
    /// The request's id.
    pub request_id: &'a str,
    /// `resolve` or `validate`.
    pub operation: &'a str,
    /// The task's goal, when the request has a task.
    pub goal: Option<&'a str>,
    /// The request as received.
    pub request: &'a CarpRequest,
    /// The caller's W3C `traceparent`, when its front door received one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<&'a str>,
}

impl Payload for RefusedRequestReceived<'_> {
    const EVENT_TYPE: &'static str = "carp.request.received";
    const REQUIRED: &'static [&'static str] = &["request_id", "operation", "goal"];
}

/// `carp.request.rejected`: the refusal's token and message.
#[derive(Debug, Serialize)]
pub struct RequestRejected<'a> {
    /// The request's id.
    pub request_id: &'a str,
    /// The refusal's token.
    pub error: &'a str,
    /// The refusal's message.
    pub message: &'a str,
    /// Always `rejected`.
    pub decision: &'static str,
}

impl Payload for RequestRejected<'_> {
    const EVENT_TYPE: &'static str = "carp.request.rejected";
}

/// `policy.evaluated`: which policy decided an action, and how.
#[derive(Debug, Serialize)]
pub struct PolicyEvaluated<'a> {
    /// The action.
    pub action_id: &'a str,
    /// The atlas that offers it.
    pub atlas_id: &'a str,
    /// The deciding policy.
    pub policy_id: &'a str,
    /// Its outcome.
    pub result: Outcome,
    /// Shadow mode: what the action's `log_only` policies would have decided, when that
    /// differs (`policy_id`, `result`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowEvaluated<'a>>,
}

/// `policy.evaluated`'s `shadow` member: the outcome the `log_only` policies would have given.
#[derive(Debug, Serialize)]
pub struct ShadowEvaluated<'a> {
    /// The policy that would have decided, or `default_deny`.
    pub policy_id: &'a str,
    /// The outcome it would have had.
    pub result: Outcome,
}

impl<'a> From<&'a crate::explain::ShadowExplain> for ShadowEvaluated<'a> {
    fn from(sh: &'a crate::explain::ShadowExplain) -> Self {
        ShadowEvaluated {
            policy_id: &sh.decided_by,
            result: sh.outcome,
        }
    }
}

impl Payload for PolicyEvaluated<'_> {
    const EVENT_TYPE: &'static str = "policy.evaluated";
    const REQUIRED: &'static [&'static str] = &["policy_id", "result"];
}

/// `context.injected`: a context block's identity and the hash of its content.
#[derive(Debug, Serialize)]
pub struct ContextInjected<'a> {
    /// The block.
    pub block_id: &'a str,
    /// Its source.
    pub source: &'a str,
    /// Its media type.
    pub content_type: &'a str,
    /// Its priority.
    pub priority: i64,
    /// §4.3's name for the estimate.
    pub token_count: u64,
    /// The resolution's name for it.
    pub token_estimate: u64,
    /// `sha256:` of the content.
    pub content_hash: String,
}

impl Payload for ContextInjected<'_> {
    const EVENT_TYPE: &'static str = "context.injected";
    const REQUIRED: &'static [&'static str] = &["block_id", "source", "token_count"];
}

/// `context.redacted`: a value the operator's redaction rules replaced before it was recorded or
/// answered (`specs/redaction.md`). `block_id` is the JSON pointer of the value in the request
/// (`/execution/parameters/card`) or in the session's opening (`/goal`); the value itself
/// appears nowhere.
#[derive(Debug, Serialize)]
pub struct ContextRedacted<'a> {
    /// Where the value was: its JSON pointer in the request.
    pub block_id: &'a str,
    /// The rule's reason.
    pub redaction_reason: &'a str,
    /// The request it was in (absent for a session's goal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<&'a str>,
}

impl Payload for ContextRedacted<'_> {
    const EVENT_TYPE: &'static str = "context.redacted";
    const REQUIRED: &'static [&'static str] = &["block_id", "redaction_reason"];
}

/// One `context.redacted` in `span` per value the redaction rules replaced in the request
/// `request_id` (`None`: a session's opening).
pub fn redaction_drafts(
    span: &Span<'_>,
    redacted: &[cra_atlas::redaction::Redaction],
    request_id: Option<&str>,
) -> Vec<cra_trace::EventDraft> {
    redacted
        .iter()
        .map(|r| {
            span.draft_of(&ContextRedacted {
                block_id: &r.pointer,
                redaction_reason: &r.reason,
                request_id,
            })
        })
        .collect()
}

/// `approval.requested`: the approval, the resolution it belongs to, the actions it gates and
/// (round 2: opened by an execute) the exact call it was asked for.
#[derive(Debug, Serialize)]
pub struct ApprovalRequested<'a> {
    /// The approval.
    pub approval_id: &'a str,
    /// The resolution whose decision named it.
    pub resolution_id: &'a str,
    /// The gated actions: the call's one action.
    pub actions: Vec<&'a str>,
    /// The execute that asked, and what it asked for.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub call: Option<&'a crate::store::ApprovalCall>,
    /// When it lapses with its resolution (wire form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<&'a str>,
}

impl<'a> ApprovalRequested<'a> {
    /// The event of an approval an execute opened, lapsing at `expires_at` (its resolution's).
    pub fn opened(approval: &'a crate::store::ApprovalRecord, expires_at: Option<&'a str>) -> Self {
        Self {
            approval_id: &approval.approval_id,
            resolution_id: &approval.resolution_id,
            actions: approval.actions.iter().map(String::as_str).collect(),
            call: approval.call.as_ref(),
            expires_at,
        }
    }
}

impl Payload for ApprovalRequested<'_> {
    const EVENT_TYPE: &'static str = "approval.requested";
}

/// `carp.resolution.completed`: §4.3.2's required fields, then the full resolution replay
/// compares against (errata); `dry_run: true` on a validate's.
#[derive(Debug, Serialize)]
pub struct ResolutionCompleted<'a> {
    resolution_id: &'a str,
    decision_type: &'a str,
    allowed_count: usize,
    denied_count: usize,
    context_block_count: usize,
    ttl_seconds: u64,
    decision: &'a str,
    resolution: &'a Resolution,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<bool>,
}

impl Payload for ResolutionCompleted<'_> {
    const EVENT_TYPE: &'static str = "carp.resolution.completed";
    const REQUIRED: &'static [&'static str] = &[
        "resolution_id",
        "decision_type",
        "allowed_count",
        "denied_count",
    ];
}

/// `carp.resolution.cached`: a resolve answered by an earlier resolution of the session
/// ([`crate::cache`]), named by its id; `cache_hit` is always `true` (a miss is an ordinary
/// `carp.resolution.completed`).
#[derive(Debug, Serialize)]
pub struct ResolutionCached<'a> {
    /// The earlier resolution, answered again.
    pub resolution_id: &'a str,
    /// Whether the resolution came from the cache: `true`.
    pub cache_hit: bool,
}

impl Payload for ResolutionCached<'_> {
    const EVENT_TYPE: &'static str = "carp.resolution.cached";
    const REQUIRED: &'static [&'static str] = &["resolution_id", "cache_hit"];
}

impl<'a> ResolutionCompleted<'a> {
    /// The completion of `resolution`; `dry_run` for a validate's.
    pub fn new(resolution: &'a Resolution, dry_run: bool) -> Self {
        let kind = resolution.decision.kind.as_str();
        Self {
            resolution_id: &resolution.resolution_id,
            decision_type: kind,
            allowed_count: resolution.allowed_actions.len(),
            denied_count: resolution.denied_actions.len(),
            context_block_count: resolution.context_blocks.len(),
            ttl_seconds: resolution.ttl_seconds,
            decision: kind,
            resolution,
            dry_run: dry_run.then_some(true),
        }
    }
}

/// The events of a recorded resolve, in order, all in `span` (the resolution's trace and id):
/// `carp.request.received` (with the atlas digests and the counters the evaluation read), one
/// `policy.evaluated` per candidate action of `explained`, one `context.injected` per block, and
/// the completion. A resolve opens no approval (its decision's `approval_id` names the one the
/// first gated execute will open), so it records no `approval.requested`.
/// `resolution` is the recorded one (no `explain`).
pub fn resolve_events(
    span: &Span<'_>,
    request: &CarpRequest,
    atlas_digests: &BTreeMap<String, String>,
    counters: &CountersSnapshot,
    resolution: &Resolution,
    explained: Option<&Explain>,
) -> Vec<PreparedDraft> {
    let mut events = Vec::with_capacity(16);
    events.push(span.event(&RequestReceived::new(request, atlas_digests, counters)));
    for a in explained.iter().flat_map(|ex| &ex.actions) {
        events.push(span.event(&PolicyEvaluated {
            action_id: &a.action_id,
            atlas_id: &a.atlas_id,
            policy_id: &a.decided_by,
            result: a.outcome,
            shadow: a.shadow.as_ref().map(ShadowEvaluated::from),
        }));
    }
    for b in &resolution.context_blocks {
        events.push(span.event(&ContextInjected {
            block_id: &b.block_id,
            source: &b.source,
            content_type: &b.content_type,
            priority: b.priority,
            token_count: b.token_estimate,
            token_estimate: b.token_estimate,
            content_hash: cra_wire::hash::sha256_prefixed(b.content.as_str().as_bytes()),
        }));
    }
    events.push(span.event(&ResolutionCompleted::new(resolution, false)));
    events
}

/// The events of a resolve answered by the earlier resolution `resolution_id` ([`crate::cache`]),
/// in `span` (the earlier resolution's trace, a span of its own under the resolution's):
/// `carp.request.received`, with the digests and counters it was judged by, and
/// `carp.resolution.cached`. Replay re-resolves the request and compares the outcome with the
/// resolution that trace completed.
pub fn cached_events(
    span: &Span<'_>,
    request: &CarpRequest,
    atlas_digests: &BTreeMap<String, String>,
    counters: &CountersSnapshot,
    resolution_id: &str,
) -> Vec<PreparedDraft> {
    vec![
        span.event(&RequestReceived::new(request, atlas_digests, counters)),
        span.event(&ResolutionCached {
            resolution_id,
            cache_hit: true,
        }),
    ]
}

/// The events of a `validate` request (a dry run), in `span`: `carp.request.received` and one
/// `carp.resolution.completed` marked `dry_run: true`, and nothing else (no approval is opened,
/// nothing is injected).
pub fn validate_events(
    span: &Span<'_>,
    request: &CarpRequest,
    atlas_digests: &BTreeMap<String, String>,
    counters: &CountersSnapshot,
    resolution: &Resolution,
) -> Vec<PreparedDraft> {
    vec![
        span.event(&RequestReceived::new(request, atlas_digests, counters)),
        span.event(&ResolutionCompleted::new(resolution, true)),
    ]
}

/// `action.requested`: an execute request as received.
#[derive(Debug, Serialize)]
pub struct ActionRequested<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// The request's id.
    pub request_id: &'a str,
    /// The resolution it executes under.
    pub resolution_id: &'a str,
    /// The action.
    pub action_id: &'a str,
    /// `sha256:` of the parameters' canonical form.
    pub parameters_hash: &'a str,
    /// The call's parameters as received, so the call can be decided again offline (replay,
    /// `cra atlas simulate`): conditions on parameters and on history read them. Chains
    /// written before round 2's part 5 record only the digest.
    pub parameters: &'a Value,
    /// The idempotency key, when given.
    pub idempotency_key: Option<&'a str>,
    /// Shadow mode: what the action's `log_only` policies would have decided for this call,
    /// when that differs from what was decided (`policy_id`, `result`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowEvaluated<'a>>,
    /// What the decision read of history (`marks` asked for, `counters` its charges found), so
    /// a replay of this chain alone decides the call on the same history; absent when it read
    /// none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<&'a crate::history::HistoryRead>,
    /// The caller's W3C `traceparent`, when its front door received one (`specs/otlp.md`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<&'a str>,
}

impl Payload for ActionRequested<'_> {
    const EVENT_TYPE: &'static str = "action.requested";
    const REQUIRED: &'static [&'static str] = &["action_id", "parameters_hash"];
}

/// `action.pending_approval`: an execute of an approval-gated action whose approval is not
/// decided yet. Nothing ran and nothing was charged; the agent retries once it is granted
/// (CARP §3.5 status `pending_approval`; a runtime event type, errata "Which events").
#[derive(Debug, Serialize)]
pub struct ActionPendingApproval<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// The action.
    pub action_id: &'a str,
    /// The resolution it executes under.
    pub resolution_id: &'a str,
    /// The approval it waits for.
    pub approval_id: Option<&'a str>,
    /// Always `approval_pending`, the token the agent was answered.
    pub error: &'a str,
    /// The answer's message.
    pub reason: &'a str,
}

impl Payload for ActionPendingApproval<'_> {
    const EVENT_TYPE: &'static str = "action.pending_approval";
    const REQUIRED: &'static [&'static str] = &["action_id", "resolution_id", "approval_id"];
}

/// `action.denied`: an execute refused, by a rule or a policy.
#[derive(Debug, Serialize)]
pub struct ActionDenied<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// The action.
    pub action_id: &'a str,
    /// The refusal's token.
    pub error: &'a str,
    /// Its message.
    pub reason: &'a str,
    /// The policy that refused (`default_deny` for an action no policy allowed); `null` for a
    /// refusal of the request itself, which no policy made (§4.3.3).
    pub policy_id: Option<&'a str>,
    /// Always `deny`.
    pub decision: &'static str,
}

impl Payload for ActionDenied<'_> {
    const EVENT_TYPE: &'static str = "action.denied";
    const REQUIRED: &'static [&'static str] = &["action_id", "reason", "policy_id"];
}

/// `policy.violated`: the rule an execute broke.
#[derive(Debug, Serialize)]
pub struct PolicyViolated<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// The action.
    pub action_id: &'a str,
    /// The policy whose rule was broken, or `null` when the request broke a rule of the
    /// protocol rather than a policy's (§4.3.4).
    pub policy_id: Option<&'a str>,
    /// The rule's token (§4.3.4).
    pub violation_type: &'a str,
    /// What happened, for people (§4.3.4).
    pub details: &'a str,
    /// The rule's token, as before round 2 (the same as `violation_type`).
    pub rule: &'a str,
    /// Its message, as before round 2 (the same as `details`).
    pub message: &'a str,
}

impl<'a> PolicyViolated<'a> {
    /// The violation of rule `token` (`message` saying how) by `execution_id` of `action_id`,
    /// `policy_id` the policy whose rule it was.
    pub fn new(
        execution_id: &'a str,
        action_id: &'a str,
        policy_id: Option<&'a str>,
        token: &'a str,
        message: &'a str,
    ) -> Self {
        Self {
            execution_id,
            action_id,
            policy_id,
            violation_type: token,
            details: message,
            rule: token,
            message,
        }
    }
}

impl Payload for PolicyViolated<'_> {
    const EVENT_TYPE: &'static str = "policy.violated";
    const REQUIRED: &'static [&'static str] = &["policy_id", "violation_type", "details"];
}

/// `action.approved`: an execute cleared to run (its approval, when one gated it).
#[derive(Debug, Serialize)]
pub struct ActionApproved<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// The resolution it runs under (§4.3.3).
    pub resolution_id: &'a str,
    /// The action.
    pub action_id: &'a str,
    /// The granted approval, when the action needed one.
    pub approval_id: Option<&'a str>,
    /// Always `allow`.
    pub decision: &'static str,
}

impl Payload for ActionApproved<'_> {
    const EVENT_TYPE: &'static str = "action.approved";
    const REQUIRED: &'static [&'static str] = &["action_id", "resolution_id"];
}

/// `action.executed`: the executor succeeded.
#[derive(Debug, Serialize)]
pub struct ActionExecuted<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// The action.
    pub action_id: &'a str,
    /// The executor that ran it, when one is declared.
    pub executor: Option<&'a str>,
    /// Always `success`.
    pub status: &'static str,
    /// `sha256:` of the result's canonical form.
    pub result_hash: Option<String>,
    /// How long the executor ran, on the injected clock (§4.3.3).
    pub duration_ms: u64,
}

impl Payload for ActionExecuted<'_> {
    const EVENT_TYPE: &'static str = "action.executed";
    const REQUIRED: &'static [&'static str] = &["action_id", "execution_id", "duration_ms"];
}

/// `action.failed`: the executor failed.
#[derive(Debug, Serialize)]
pub struct ActionFailed<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// The action.
    pub action_id: &'a str,
    /// The executor that ran it, when one is declared.
    pub executor: Option<&'a str>,
    /// Always `error`.
    pub status: &'static str,
    /// The error's token (§4.3.3).
    pub error_code: &'a str,
    /// The error's message (§4.3.3).
    pub error_message: &'a str,
    /// The executor's whole error.
    pub error: Option<&'a ExecuteError>,
}

impl Payload for ActionFailed<'_> {
    const EVENT_TYPE: &'static str = "action.failed";
    const REQUIRED: &'static [&'static str] = &["action_id", "error_code", "error_message"];
}

impl<'a> ActionFailed<'a> {
    /// The failure of `execution_id` (of `action_id`, run by `executor`) with `error`; without
    /// one, the code is `executor_failed`.
    pub fn new(
        execution_id: &'a str,
        action_id: &'a str,
        executor: Option<&'a str>,
        error: Option<&'a ExecuteError>,
    ) -> Self {
        Self {
            execution_id,
            action_id,
            executor,
            status: "error",
            error_code: error.map_or("executor_failed", |e| e.code.as_str()),
            error_message: error.map_or("the executor failed and said nothing more", |e| {
                e.message.as_str()
            }),
            error,
        }
    }
}

/// `action.deduplicated`: a repeated idempotency key answered with the first response.
#[derive(Debug, Serialize)]
pub struct ActionDeduplicated<'a> {
    /// The first execution's id.
    pub execution_id: &'a str,
    /// The repeating request's id.
    pub request_id: &'a str,
    /// The key.
    pub idempotency_key: Option<&'a str>,
}

impl Payload for ActionDeduplicated<'_> {
    const EVENT_TYPE: &'static str = "action.deduplicated";
}

/// Who did something, as events name them: the actor's id and type (`agent`, `human`, `script`).
#[derive(Debug, Serialize)]
pub struct ActorRef<'a> {
    /// The actor's id.
    pub id: &'a str,
    /// The actor's type.
    #[serde(rename = "type")]
    pub kind: &'a str,
}

impl<'a> ActorRef<'a> {
    /// The actor `id` of type `kind`.
    pub fn of(id: &'a str, kind: &'a str) -> Self {
        Self { id, kind }
    }
}

/// `session.started`: the first event of a session's chain. `actor` and `callsign` are absent
/// from the chains no authenticated actor opens: the operator audit chain, and a session sealed
/// offline by `cra resolve --record` ([`crate::replay::seal_session`]).
#[derive(Debug, Serialize)]
pub struct SessionStarted<'a> {
    /// The owning agent.
    pub agent_id: &'a str,
    /// Who opened it (the agent itself, or an admin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<ActorRef<'a>>,
    /// What the session is for.
    pub goal: &'a str,
    /// The Relay project it works in, if any.
    pub project_id: Option<&'a str>,
    /// The parent session, for nested agents.
    pub parent_session_id: Option<&'a str>,
    /// Its `adjective-noun` callsign.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callsign: Option<&'a str>,
}

impl<'a> SessionStarted<'a> {
    /// The start of a chain no authenticated actor opened: `agent_id`'s, for `goal`, with no
    /// project, parent or callsign.
    pub fn unattended(agent_id: &'a str, goal: &'a str) -> Self {
        Self {
            agent_id,
            actor: None,
            goal,
            project_id: None,
            parent_session_id: None,
            callsign: None,
        }
    }
}

impl Payload for SessionStarted<'_> {
    const EVENT_TYPE: &'static str = "session.started";
    const REQUIRED: &'static [&'static str] = &["agent_id", "goal"];
}

/// `session.ended`: the last event of a session's chain.
#[derive(Debug, Serialize)]
pub struct SessionEnded<'a> {
    /// The owning agent.
    pub agent_id: &'a str,
    /// Who ended it.
    pub ended_by: ActorRef<'a>,
    /// Why.
    pub reason: &'a str,
    /// How long the session lasted, on the injected clock (§4.3.1).
    pub duration_ms: u64,
    /// The approvals still pending, which lapse with the session (absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lapsed_approvals: Option<&'a [String]>,
}

impl Payload for SessionEnded<'_> {
    const EVENT_TYPE: &'static str = "session.ended";
    const REQUIRED: &'static [&'static str] = &["reason", "duration_ms"];
}

/// An operator's decision on a pending approval: the payload of [`ApprovalGranted`] and
/// [`ApprovalRejected`].
#[derive(Debug, Serialize)]
pub struct ApprovalDecided<'a> {
    /// The approval.
    pub approval_id: &'a str,
    /// The resolution that opened it.
    pub resolution_id: &'a str,
    /// The actions it gated.
    pub actions: &'a [String],
    /// The operator.
    pub decided_by: ActorRef<'a>,
    /// The operator's note.
    pub note: Option<&'a str>,
    /// `grant` or `reject`.
    pub decision: &'static str,
}

/// `approval.granted`.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct ApprovalGranted<'a>(pub ApprovalDecided<'a>);

impl Payload for ApprovalGranted<'_> {
    const EVENT_TYPE: &'static str = "approval.granted";
}

/// `approval.rejected`.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct ApprovalRejected<'a>(pub ApprovalDecided<'a>);

impl Payload for ApprovalRejected<'_> {
    const EVENT_TYPE: &'static str = "approval.rejected";
}

/// The event types of TRACE §4.3 this runtime emits, each with the payload members §4.3 requires
/// of it, read from the payload structs ([`Payload::REQUIRED`]), in `event_type` order.
pub fn spec_event_types() -> Vec<(&'static str, &'static [&'static str])> {
    fn of<P: Payload>() -> (&'static str, &'static [&'static str]) {
        (P::EVENT_TYPE, P::REQUIRED)
    }
    let mut types = vec![
        of::<SessionStarted<'static>>(),
        of::<SessionEnded<'static>>(),
        of::<RequestReceived<'static>>(),
        of::<RefusedRequestReceived<'static>>(),
        of::<ResolutionCompleted<'static>>(),
        of::<ResolutionCached<'static>>(),
        of::<ActionRequested<'static>>(),
        of::<ActionApproved<'static>>(),
        of::<ActionDenied<'static>>(),
        of::<ActionExecuted<'static>>(),
        of::<ActionFailed<'static>>(),
        of::<PolicyEvaluated<'static>>(),
        of::<PolicyViolated<'static>>(),
        of::<ContextInjected<'static>>(),
        of::<ContextRedacted<'static>>(),
    ];
    types.sort_unstable();
    types.dedup();
    types
}

/// `schemas/trace-event.schema.json` (`cargo xtask codegen` writes it): the §4.2 envelope, and
/// for each event type of [`spec_event_types`] the payload members §4.3 requires. It checks
/// presence, as §4.3 does; a member may be `null` where our decisions say so (a goal-less
/// request's `goal`, a refusal no policy made). Unknown event types and members are allowed.
pub fn trace_event_schema() -> Value {
    let hash = serde_json::json!({"type": "string", "pattern": "^[0-9a-f]{64}$"});
    let text = serde_json::json!({"type": "string"});
    let per_type: Vec<Value> = spec_event_types()
        .into_iter()
        .map(|(event_type, required)| {
            serde_json::json!({
                "if": {"properties": {"event_type": {"const": event_type}}},
                "then": {"properties": {"payload": {"required": required}}},
            })
        })
        .collect();
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://cra.invalid/schemas/trace-event.schema.json",
        "title": "TRACE/1.0 event",
        "description": "One event of a TRACE chain (§4.2) and, for each event type of §4.3 the runtime emits, the payload members §4.3 requires. Generated from the payload structs of cra_carp::events by `cargo xtask codegen`; do not edit.",
        "type": "object",
        "required": cra_trace::event::ENVELOPE_FIELDS,
        "properties": {
            "trace_version": {"const": "1.0"},
            "event_id": text,
            "trace_id": text,
            "span_id": text,
            "parent_span_id": {"type": ["string", "null"]},
            "session_id": text,
            "sequence": {"type": "integer", "minimum": 0},
            "timestamp": text,
            "event_type": text,
            "payload": {"type": "object"},
            "event_hash": hash,
            "previous_event_hash": hash,
        },
        "allOf": per_type,
    })
}

/// Every way `event` (a whole TRACE event) breaks [`trace_event_schema`], one line each with
/// its JSON pointer; empty when it conforms.
pub fn event_schema_errors(event: &Value) -> Vec<String> {
    static SCHEMA: std::sync::OnceLock<Result<jsonschema::Validator, String>> =
        std::sync::OnceLock::new();
    let compiled = SCHEMA.get_or_init(|| {
        jsonschema::validator_for(&trace_event_schema()).map_err(|e| e.to_string())
    });
    match compiled {
        Ok(v) => v
            .iter_errors(event)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect(),
        Err(e) => vec![format!("the event schema does not compile: {e}")],
    }
}

#[cfg(test)]
mod tests {
    //! Each typed payload writes the canonical text of the `json!` value it replaced, so stored
    //! events and their hashes are what they were before the payloads were typed.

    use super::*;
    use serde_json::json;

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

    fn completion_value(r: &Resolution) -> Value {
        json!({
            "resolution_id": r.resolution_id,
            "decision_type": r.decision.kind.as_str(),
            "allowed_count": r.allowed_actions.len(),
            "denied_count": r.denied_actions.len(),
            "context_block_count": r.context_blocks.len(),
            "ttl_seconds": r.ttl_seconds,
            "decision": r.decision.kind.as_str(),
            "resolution": r,
        })
    }

    const SPAN: Span<'static> = Span {
        trace_id: "t",
        span_id: "s",
        parent: Some("p"),
    };

    /// The completion's payload is the canonical form of its value; parsed back (what live
    /// subscribers get), it is the same value.
    #[test]
    fn completion_text_is_the_canonical_form_of_the_value() {
        let r = resolution();
        let value = completion_value(&r);
        let event = SPAN.event(&ResolutionCompleted::new(&r, false));
        assert_eq!(event.draft.event_type, "carp.resolution.completed");
        let expected = cra_wire::canonical::trace_canonical(&value);
        assert_eq!(event.canonical_payload(), expected);
        let back = event.into_draft();
        assert_eq!(
            back.payload,
            serde_json::from_str::<Value>(&expected).unwrap()
        );
        assert_eq!(back.parent_span_id.as_deref(), Some("p"));
    }

    /// A validate's completion is the resolve's with `dry_run: true`.
    #[test]
    fn a_dry_run_completion_carries_its_mark() {
        let r = resolution();
        let mut value = completion_value(&r);
        value["dry_run"] = Value::Bool(true);
        let event = SPAN.event(&ResolutionCompleted::new(&r, true));
        assert_eq!(
            event.canonical_payload(),
            cra_wire::canonical::trace_canonical(&value)
        );
    }

    /// A resolution whose unknown extras repeat a member's name has no canonical form (duplicate
    /// key): the event is then made from the value, and still carries the payload.
    #[test]
    fn completion_falls_back_to_the_value_on_a_duplicate_member() {
        let mut r = resolution();
        r.extra.insert("trace_id".into(), json!("shadow"));
        assert!(cra_wire::canonical::to_trace_canonical(&r).is_err());
        let prepared = SPAN.event(&ResolutionCompleted::new(&r, false));
        assert!(!prepared.is_text_only(), "made from the value");
        assert_eq!(
            prepared.draft.payload["resolution_id"],
            r.resolution_id.as_str()
        );
    }

    fn request() -> CarpRequest {
        serde_json::from_value(json!({
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
        .unwrap()
    }

    /// With non-ASCII text, an unknown extra member, and with and without counters read.
    #[test]
    fn request_payloads_are_the_values_they_replace() {
        let request = request();
        let digests: BTreeMap<String, String> =
            [("dev.cra.github-ops".to_owned(), "sha256:ab".to_owned())].into();
        let entry = CounterEntry {
            policy_id: "rate".into(),
            scope_key: "session:s".into(),
            value: 3,
        };
        let counters = CountersSnapshot::new(vec![entry], Vec::new());
        let typed = RequestReceived::new(&request, &digests, &counters);
        let mut value = json!({
            "request_id": request.request_id,
            "operation": request.operation,
            "goal": request.task.as_ref().map(|t| t.goal.as_str()),
            "atlas_ids": request.atlas_ids,
            "request": request,
            "atlas_digests": digests,
            "counters": {"rate": counters.rate, "budget": []},
        });
        same(&typed, &value);
        let unread = CountersSnapshot::default();
        let without = RequestReceived {
            goal: None,
            ..RequestReceived::new(&request, &digests, &unread)
        };
        value["goal"] = Value::Null;
        value.as_object_mut().unwrap().remove("counters");
        same(&without, &value);
        same(
            &RefusedRequestReceived {
                request_id: &request.request_id,
                operation: "resolve",
                goal: None,
                request: &request,
                traceparent: None,
            },
            &json!({"request_id": request.request_id, "operation": "resolve", "goal": null, "request": request}),
        );
        same(
            &RequestRejected {
                request_id: "r",
                error: "session_inactive",
                message: "caf\u{e9}",
                decision: "rejected",
            },
            &json!({"request_id": "r", "error": "session_inactive", "message": "caf\u{e9}", "decision": "rejected"}),
        );
    }

    #[test]
    fn resolve_payloads_are_the_values_they_replace() {
        let outcome = Outcome::RequiresApproval;
        same(
            &PolicyEvaluated {
                action_id: "x.get",
                atlas_id: "a",
                policy_id: "p",
                result: outcome,
                shadow: None,
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
            &ContextRedacted {
                block_id: "/execution/parameters/card",
                redaction_reason: "pci",
                request_id: Some("req"),
            },
            &json!({"block_id": "/execution/parameters/card", "redaction_reason": "pci",
                "request_id": "req"}),
        );
        same(
            &ApprovalRequested {
                approval_id: "ap",
                resolution_id: "r",
                actions: vec!["x.get", "x.put"],
                call: None,
                expires_at: None,
            },
            &json!({"approval_id": "ap", "resolution_id": "r", "actions": ["x.get", "x.put"]}),
        );
        let opened = crate::store::ApprovalRecord {
            approval_id: "ap".into(),
            resolution_id: "r".into(),
            session_id: "s".into(),
            agent_id: "a".into(),
            actions: vec!["x.put".into()],
            created_at: "2026-01-05T10:00:00.000000Z".into(),
            expires_at_us: 0,
            status: crate::store::ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            note: None,
            call: Some(crate::store::ApprovalCall {
                execution_id: "e".into(),
                action_id: "x.put".into(),
                parameters_hash: "sha256:00".into(),
                atlas_id: "at".into(),
                atlas_digest: "sha256:11".into(),
            }),
        };
        same(
            &ApprovalRequested::opened(&opened, Some("2026-01-05T11:00:00.000000Z")),
            &json!({"approval_id": "ap", "resolution_id": "r", "actions": ["x.put"],
                    "execution_id": "e", "action_id": "x.put", "parameters_hash": "sha256:00",
                    "atlas_id": "at", "atlas_digest": "sha256:11",
                    "expires_at": "2026-01-05T11:00:00.000000Z"}),
        );
    }

    /// Absent options are written as `null`, as the `json!` values had them.
    #[test]
    fn execute_payloads_are_the_values_they_replace() {
        let requested = ActionRequested {
            execution_id: "e",
            request_id: "q",
            resolution_id: "r",
            action_id: "x.get",
            parameters_hash: "sha256:11",
            parameters: &json!({"id": 7}),
            idempotency_key: None,
            shadow: None,
            history: None,
            traceparent: None,
        };
        same(
            &requested,
            &json!({"execution_id": "e", "request_id": "q", "resolution_id": "r", "action_id": "x.get",
                "parameters_hash": "sha256:11", "parameters": {"id": 7}, "idempotency_key": null}),
        );
        // A caller's trace context is its own member, written only when there is one.
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        same(
            &ActionRequested {
                traceparent: Some(tp),
                ..requested
            },
            &json!({"execution_id": "e", "request_id": "q", "resolution_id": "r", "action_id": "x.get",
                "parameters_hash": "sha256:11", "parameters": {"id": 7}, "idempotency_key": null,
                "traceparent": tp}),
        );
        same(
            &ActionDenied {
                execution_id: "e",
                action_id: "x",
                error: "rate_limited",
                reason: "m",
                policy_id: Some("rl"),
                decision: "deny",
            },
            &json!({"execution_id": "e", "action_id": "x", "error": "rate_limited", "reason": "m", "policy_id": "rl", "decision": "deny"}),
        );
        same(
            &PolicyViolated::new("e", "x", Some("rl"), "rate_limited", "m"),
            &json!({"execution_id": "e", "action_id": "x", "policy_id": "rl", "violation_type": "rate_limited",
                "details": "m", "rule": "rate_limited", "message": "m"}),
        );
        same(
            &PolicyViolated::new("e", "x", None, "resolution_expired", "m"),
            &json!({"execution_id": "e", "action_id": "x", "policy_id": null, "violation_type": "resolution_expired",
                "details": "m", "rule": "resolution_expired", "message": "m"}),
        );
        same(
            &ActionApproved {
                execution_id: "e",
                resolution_id: "r",
                action_id: "x",
                approval_id: None,
                decision: "allow",
            },
            &json!({"execution_id": "e", "resolution_id": "r", "action_id": "x", "approval_id": null, "decision": "allow"}),
        );
        same(
            &ActionExecuted {
                execution_id: "e",
                action_id: "x",
                executor: Some("http:u"),
                status: "success",
                result_hash: None,
                duration_ms: 1500,
            },
            &json!({"execution_id": "e", "action_id": "x", "executor": "http:u", "status": "success", "result_hash": null, "duration_ms": 1500}),
        );
        let error = ExecuteError {
            code: "executor_failed".into(),
            message: "caf\u{e9}".into(),
            details: Some(json!({"b": 1.50, "a": null})),
        };
        same(
            &ActionFailed::new("e", "x", None, Some(&error)),
            &json!({"execution_id": "e", "action_id": "x", "executor": null, "status": "error",
                "error_code": "executor_failed", "error_message": "caf\u{e9}", "error": error}),
        );
        same(
            &ActionFailed::new("e", "x", Some("http:u"), None),
            &json!({"execution_id": "e", "action_id": "x", "executor": "http:u", "status": "error",
                "error_code": "executor_failed", "error_message": "the executor failed and said nothing more", "error": null}),
        );
        same(
            &ActionDeduplicated {
                execution_id: "e",
                request_id: "q",
                idempotency_key: Some("k"),
            },
            &json!({"execution_id": "e", "request_id": "q", "idempotency_key": "k"}),
        );
    }

    #[test]
    fn session_and_approval_payloads_are_the_values_they_replace() {
        same(
            &SessionStarted {
                agent_id: "a",
                actor: Some(ActorRef::of("root", "human")),
                goal: "caf\u{e9}",
                project_id: None,
                parent_session_id: Some("p"),
                callsign: Some("brave-otter"),
            },
            &json!({"agent_id": "a", "actor": {"id": "root", "type": "human"}, "goal": "caf\u{e9}",
                "project_id": null, "parent_session_id": "p", "callsign": "brave-otter"}),
        );
        same(
            &SessionStarted::unattended("cra-operator", "operator audit chain"),
            &json!({"agent_id": "cra-operator", "goal": "operator audit chain",
                "project_id": null, "parent_session_id": null}),
        );
        let lapsed = vec!["ap1".to_owned()];
        let ended = |lapsed_approvals| SessionEnded {
            agent_id: "a",
            ended_by: ActorRef::of("oscar", "human"),
            reason: "ended by request",
            duration_ms: 1500,
            lapsed_approvals,
        };
        let value = json!({"agent_id": "a", "ended_by": {"id": "oscar", "type": "human"}, "reason": "ended by request", "duration_ms": 1500});
        same(&ended(None), &value);
        let mut with = value;
        with["lapsed_approvals"] = json!(["ap1"]);
        same(&ended(Some(&lapsed)), &with);
        let actions = vec!["x.put".to_owned()];
        let decided = |decision| ApprovalDecided {
            approval_id: "ap1",
            resolution_id: "r",
            actions: &actions,
            decided_by: ActorRef::of("oscar", "human"),
            note: None,
            decision,
        };
        let value = |decision: &str| {
            json!({"approval_id": "ap1", "resolution_id": "r", "actions": ["x.put"],
            "decided_by": {"id": "oscar", "type": "human"}, "note": null, "decision": decision})
        };
        same(&ApprovalGranted(decided("grant")), &value("grant"));
        same(&ApprovalRejected(decided("reject")), &value("reject"));
    }

    /// A plain draft's payload is the struct's own value: numbers keep the spelling they were
    /// given (the stored event shows the executor's `1.50`; the hash covers the canonical `1.5`),
    /// as it was when these payloads were `json!` values.
    #[test]
    fn a_drafts_payload_is_the_structs_value() {
        let error = ExecuteError {
            code: "executor_failed".into(),
            message: "m".into(),
            details: Some(serde_json::from_str(r#"{"ratio": 1.50}"#).unwrap()),
        };
        let failed = ActionFailed::new("e", "x", None, Some(&error));
        let draft = SPAN.draft_of(&failed);
        assert_eq!(draft.payload, serde_json::to_value(&failed).unwrap());
        assert_eq!(
            draft.payload["error"]["details"]["ratio"].to_string(),
            "1.50"
        );
        assert_eq!(draft.parent_span_id.as_deref(), Some("p"));
        assert!(
            SPAN.event(&failed)
                .canonical_payload()
                .contains(r#""ratio":1.5}"#)
        );
    }

    /// An event of `event_type` whose payload holds `members`.
    fn event_with(event_type: &str, members: &[&str]) -> Value {
        let payload: serde_json::Map<String, Value> = members
            .iter()
            .map(|m| ((*m).to_owned(), json!("x")))
            .collect();
        json!({
            "trace_version": "1.0", "event_id": "e", "trace_id": "t", "span_id": "s",
            "parent_span_id": null, "session_id": "ss", "sequence": 0,
            "timestamp": "2026-01-01T00:00:00.000000Z", "event_type": event_type,
            "payload": payload, "event_hash": "0".repeat(64), "previous_event_hash": "0".repeat(64),
        })
    }

    /// Each required member of each §4.3 type, and each envelope member, once missing, makes the
    /// event invalid; with all of them it is valid, and an unknown type needs no payload member.
    #[test]
    fn the_event_schema_refuses_each_missing_required_member() {
        let types = spec_event_types();
        assert!(types.len() >= 12, "{types:?}");
        for (event_type, required) in &types {
            assert!(!required.is_empty(), "{event_type} requires members");
            let whole = event_with(event_type, required);
            assert_eq!(
                event_schema_errors(&whole),
                Vec::<String>::new(),
                "{event_type}"
            );
            for member in *required {
                let mut missing = whole.clone();
                missing["payload"].as_object_mut().unwrap().remove(*member);
                let errors = event_schema_errors(&missing);
                assert!(!errors.is_empty(), "{event_type} without `{member}` passed");
            }
        }
        let whole = event_with("relay.package.deposited", &[]);
        assert!(event_schema_errors(&whole).is_empty());
        for member in cra_trace::event::ENVELOPE_FIELDS {
            let mut missing = whole.clone();
            missing.as_object_mut().unwrap().remove(member);
            assert!(
                !event_schema_errors(&missing).is_empty(),
                "no `{member}` passed"
            );
        }
    }

    /// `payload`'s event: its type, written as text, the canonical form of `value`, and the
    /// same value through the plain-draft form.
    fn same<P: Payload>(payload: &P, value: &Value) {
        for member in P::REQUIRED {
            assert!(
                value.get(member).is_some(),
                "{} requires `{member}` (TRACE 4.3)",
                P::EVENT_TYPE
            );
        }
        let event = SPAN.event(payload);
        assert!(event.is_text_only(), "written as text");
        assert_eq!(event.draft.event_type, P::EVENT_TYPE);
        let expected = cra_wire::canonical::trace_canonical(value);
        assert_eq!(event.canonical_payload(), expected);
        let draft = SPAN.draft_of(payload);
        assert_eq!(
            cra_wire::canonical::trace_canonical(&draft.payload),
            expected
        );
    }
}
