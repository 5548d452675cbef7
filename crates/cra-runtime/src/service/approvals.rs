//! Approvals: the operators' list of pending approvals and their decisions. Each decision is
//! recorded in the chain of the session whose resolution asked for it (`approval.granted` /
//! `approval.rejected`).

use cra_carp::events::{ApprovalDecided, ApprovalGranted, ApprovalRejected};
use cra_carp::store::{ApprovalDecision, ApprovalRecord};
use cra_trace::Span;
use cra_wire::Token;
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

/// Refuses a decision on an approval whose session has ended, before anything is written: the
/// decision's event could not be recorded in the closed chain, and a refusal changes nothing.
/// A pending approval lapses with its session (`specs/carp.md`, "Approvals"); an unknown
/// approval is left to the decision itself to report (404).
async fn check_session_open(state: &Runtime, approval_id: &str) -> ApiResult<()> {
    let aid = approval_id.to_owned();
    let Some(approval) = state.carp_read(move |s| s.get_approval(&aid)).await? else {
        return Ok(());
    };
    let session = state.session_record(&approval.session_id).await?;
    if session.is_active() {
        return Ok(());
    }
    Err(ApiError::new(
        Token::SessionInactive,
        format!(
            "approval {approval_id} belongs to session {}, which has ended: its pending approvals lapsed with it and nothing was changed; the agent resolves again in a new session",
            approval.session_id
        ),
    ))
}

/// Grants or rejects approval `approval_id` (operators), once, and records the decision in its
/// session's chain under the resolve's trace.
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
    let decision = match body.decision {
        DecisionArg::Grant => ApprovalDecision::Grant,
        DecisionArg::Reject => ApprovalDecision::Reject,
    };
    check_session_open(rt, approval_id).await?;
    let carp = crate::service::carp::engine(rt, rt.atlases().set.clone());
    let (who, note, aid) = (actor.id.clone(), body.note, approval_id.to_owned());
    let record = crate::error::run_blocking("the approval task failed", move || {
        carp.decide_approval(&aid, decision, &who, note.as_deref())
    })
    .await?
    .map_err(ApiError::from)?;
    let rid = record.resolution_id.clone();
    let trace_id = rt
        .carp(move |s| s.get_resolution(&rid))
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
    let event = match decision {
        ApprovalDecision::Grant => span.draft_of(&ApprovalGranted(decided("grant"))),
        ApprovalDecision::Reject => span.draft_of(&ApprovalRejected(decided("reject"))),
    };
    rt.append_events(&record.session_id, &record.agent_id, vec![event])
        .await?;
    Ok(record)
}
