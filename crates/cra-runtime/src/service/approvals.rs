//! Approvals: the operators' list of pending approvals and their decisions, and one approval
//! read (and waited on) by the agent that asked or an operator. Each decision is
//! recorded in the chain of the session whose resolution asked for it (`approval.granted` /
//! `approval.rejected`).

use cra_carp::events::{ApprovalDecided, ApprovalGranted, ApprovalRejected};
use cra_carp::store::{
    ApprovalDecision, ApprovalRecord, ApprovalStatus, DecisionRecord, StateChange,
};
use cra_trace::{EventDraft, Span};
use cra_wire::Token;
use cra_wire::clock::format_timestamp;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult};
use crate::state::Runtime;

/// `POST /v1/approvals/{id}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// `grant` or `reject`.
    pub decision: DecisionArg,
    /// Why.
    #[serde(default)]
    pub note: Option<String>,
}

/// A decision.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecisionArg {
    /// Let the gated actions run.
    Grant,
    /// Refuse them.
    Reject,
}

/// The approvals waiting for a decision, for operators and auditors. An approval of an ended
/// session has lapsed: it can no longer be decided, so it is not listed.
pub async fn pending(rt: &Runtime, actor: &Actor) -> ApiResult<Vec<ApprovalRecord>> {
    actor.require(&[Role::Operator, Role::Auditor], "listing approvals")?;
    rt.carp(|s| {
        let mut open = Vec::new();
        for a in s.list_pending_approvals()? {
            if s.get_session(&a.session_id)?.is_some_and(|x| x.is_active()) {
                open.push(a);
            }
        }
        Ok(open)
    })
    .await
}

/// The most decisions one history read answers.
pub const MAX_HISTORY: usize = 500;

/// The `limit` most recent decisions (at most [`MAX_HISTORY`]), newest first, for operators and
/// auditors: the approval history the console shows.
pub async fn decided(rt: &Runtime, actor: &Actor, limit: usize) -> ApiResult<Vec<ApprovalRecord>> {
    actor.require(&[Role::Operator, Role::Auditor], "listing approvals")?;
    let limit = limit.min(MAX_HISTORY);
    rt.carp(move |s| s.list_decided_approvals(limit)).await
}

/// The longest an agent may wait for a decision in one request (`wait`, seconds).
pub const MAX_WAIT_SECONDS: u64 = 60;

/// Approval `approval_id` as `actor` may read it: operators and auditors read any, an agent the
/// approvals of its own sessions. With `wait_seconds` > 0 and the approval pending in an open
/// session, the answer waits until it is decided (its `approval.*` event is appended here) or
/// the session ends, at most `wait_seconds` (capped at [`MAX_WAIT_SECONDS`]), then reads the
/// store again: a decision made on another replica is seen when the wait runs out. A session
/// that appends more than the subscription's 64 events first drops it: the answer then comes
/// early, as it stands, and the caller waits again.
pub async fn show(
    rt: &Runtime,
    actor: &Actor,
    approval_id: &str,
    wait_seconds: u64,
) -> ApiResult<ApprovalView> {
    crate::service::sessions::check_uuid_field("/approval_id", approval_id)?;
    if wait_seconds > MAX_WAIT_SECONDS {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/wait",
            format!("at most {MAX_WAIT_SECONDS} seconds; wait again for longer"),
        ));
    }
    let first = read_approval(rt, approval_id).await?;
    let session = rt.session_record(&first.session_id).await?;
    crate::service::sessions::require_read(actor, &session)?;
    if wait_seconds == 0 || first.status != ApprovalStatus::Pending || !session.is_active() {
        return Ok(ApprovalView::of(first, session.is_active()));
    }
    // Subscribed before the second read, so a decision between the two is not missed.
    let filter = crate::tracelog::StreamFilter::default();
    let mut sub = rt.hub.subscribe(Some(&first.session_id), filter, 64);
    let again = read_approval(rt, approval_id).await?;
    if again.status != ApprovalStatus::Pending {
        return Ok(ApprovalView::of(again, true));
    }
    let settled = |e: &cra_trace::TraceEvent| {
        e.event_type == "session.ended"
            || (e.event_type.starts_with("approval.")
                && e.payload.get("approval_id").and_then(|v| v.as_str()) == Some(approval_id))
    };
    let wait = async {
        while let Some(live) = sub.rx.recv().await {
            if settled(&live.event) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(wait_seconds), wait).await;
    let last = read_approval(rt, approval_id).await?;
    let active = rt.session_record(&last.session_id).await?.is_active();
    Ok(ApprovalView::of(last, active))
}

/// One approval as `GET /v1/approvals/{id}` answers it: the record, and whether it lapsed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ApprovalView {
    /// The stored approval.
    #[serde(flatten)]
    pub record: ApprovalRecord,
    /// True when it is still pending but its session has ended: it can no longer be decided,
    /// and waiting for it is pointless (`specs/carp.md`, "Approvals and the end of a session").
    pub lapsed: bool,
}

impl ApprovalView {
    fn of(record: ApprovalRecord, session_active: bool) -> Self {
        let lapsed = record.status == ApprovalStatus::Pending && !session_active;
        Self { record, lapsed }
    }
}

/// The approval `approval_id` (404 `approval_not_found` without one).
async fn read_approval(rt: &Runtime, approval_id: &str) -> ApiResult<ApprovalRecord> {
    let aid = approval_id.to_owned();
    rt.carp_read(move |s| s.get_approval(&aid))
        .await?
        .ok_or_else(|| {
            ApiError::new(
                Token::ApprovalNotFound,
                format!(
                    "no approval {approval_id}; an approval is opened by the execute it gates, so a resolution's approval_id names none until the agent executes the gated action; list the open ones with GET /v1/approvals"
                ),
            )
        })
}

/// The approval `approval_id` while its session is open (404 `approval_not_found` without one).
/// A decision on an approval whose session has ended is refused before anything is written: the
/// decision's event could not be recorded in the closed chain, and a refusal changes nothing. A
/// pending approval lapses with its session (`specs/carp.md`, "Approvals"). The store checks
/// again when it writes the decision: a session that ends between this check and that write
/// refuses the decision there ([`lapsed`]).
async fn open_approval(state: &Runtime, approval_id: &str) -> ApiResult<ApprovalRecord> {
    let approval = read_approval(state, approval_id).await?;
    let session = state.session_record(&approval.session_id).await?;
    if session.is_active() {
        return Ok(approval);
    }
    Err(lapsed(&approval))
}

/// The refusal of a decision by the actor who asked for the approval (separation of duties).
fn own_approval(approval: &ApprovalRecord) -> ApiError {
    ApiError::new(
        Token::Forbidden,
        format!(
            "approval {} was asked for by `{}`, the caller: nobody decides an approval they requested (separation of duties); another operator decides it, or the operator turns the rule off with [approvals] separation_of_duties = false",
            approval.approval_id, approval.agent_id
        ),
    )
}

/// The refusal of a decision on an approval whose session has ended.
fn lapsed(approval: &ApprovalRecord) -> ApiError {
    ApiError::new(
        Token::SessionInactive,
        format!(
            "approval {} belongs to session {}, which has ended: its pending approvals lapsed with it and nothing was changed; the agent resolves again in a new session",
            approval.approval_id, approval.session_id
        ),
    )
}

/// Grants or rejects approval `approval_id` (operators other than the agent that asked for it,
/// unless `[approvals] separation_of_duties` is off), once. The decision and its event
/// (`approval.granted` / `approval.rejected`, in its session's chain under the resolve's trace)
/// are written as one unit: both or neither.
pub async fn decide(
    rt: &Runtime,
    actor: &Actor,
    approval_id: &str,
    body: DecideBody,
) -> ApiResult<ApprovalRecord> {
    actor.require(&[Role::Operator], "deciding approvals")?;
    crate::service::sessions::check_uuid_field("/approval_id", approval_id)?;
    if body.note.as_ref().is_some_and(|n| n.len() > 4096) {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/note",
            "at most 4096 bytes",
        ));
    }
    let approval = open_approval(rt, approval_id).await?;
    if rt.config.approvals.separation_of_duties && approval.agent_id == actor.id {
        return Err(own_approval(&approval));
    }
    let change = DecisionRecord {
        session_id: approval.session_id.clone(),
        approval_id: approval_id.to_owned(),
        decision: match body.decision {
            DecisionArg::Grant => ApprovalDecision::Grant,
            DecisionArg::Reject => ApprovalDecision::Reject,
        },
        decided_by: actor.id.clone(),
        note: body.note,
        decided_at: format_timestamp(rt.clock.now()),
    };
    // What the store will write, if it still reads the approval pending; a decided one is
    // refused here already (409), before anything is queued.
    let record = change
        .apply_to(approval.clone())
        .map_err(crate::tracelog::chain_error)?;
    let event = decision_event(rt, actor, &record, change.decision).await?;
    rt.append_change(&record.agent_id, StateChange::Decide(change), vec![event])
        .await
        .map_err(|e| {
            if e.token() == Some(Token::SessionInactive) {
                lapsed(&approval)
            } else {
                e
            }
        })?;
    rt.tool_lists_changed();
    Ok(record)
}

/// The event of `record`'s decision, on a span of its own under the resolution that asked.
async fn decision_event(
    rt: &Runtime,
    actor: &Actor,
    record: &ApprovalRecord,
    decision: ApprovalDecision,
) -> ApiResult<EventDraft> {
    let rid = record.resolution_id.clone();
    let trace_id = rt
        .carp_read(move |s| s.get_resolution(&rid))
        .await?
        .map_or_else(|| rt.ids.new_id(), |r| r.resolution.trace_id);
    let span_id = rt.ids.new_id();
    let span = Span {
        trace_id: &trace_id,
        span_id: &span_id,
        parent: Some(&record.resolution_id),
    };
    let decided = |decision| ApprovalDecided {
        approval_id: &record.approval_id,
        resolution_id: &record.resolution_id,
        actions: &record.actions,
        decided_by: actor.event_ref(),
        note: record.note.as_deref(),
        decision,
    };
    Ok(match decision {
        ApprovalDecision::Grant => span.draft_of(&ApprovalGranted(decided("grant"))),
        ApprovalDecision::Reject => span.draft_of(&ApprovalRejected(decided("reject"))),
    })
}
