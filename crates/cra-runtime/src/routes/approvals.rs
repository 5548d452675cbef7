//! Approvals: `GET /v1/approvals?status=pending` and `POST /v1/approvals/{approval_id}`
//! (`{decision: grant|reject, note?}`), operators only. Each decision is recorded in the chain of
//! the session whose resolution asked for it (`approval.granted` / `approval.rejected`).

use axum::Json;
use axum::extract::{Path, State};
use cra_carp::store::{ApprovalDecision, ApprovalRecord};
use cra_wire::Token;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, QueryParams};
use crate::routes::Caller;
use crate::state::AppState;
use crate::tracelog::draft;

/// `GET /v1/approvals` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only `pending` is listed.
    #[serde(default)]
    pub status: Option<String>,
}

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

/// Pending approvals (operators, auditors).
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals",
    params(("status" = Option<String>, Query, description = "`pending` (the default)")),
    responses((status = 200, description = "Pending approvals", body = [Object]),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ListQuery>,
) -> ApiResult<Json<Vec<ApprovalRecord>>> {
    actor.require(&[Role::Operator, Role::Auditor], "listing approvals")?;
    match q.status.as_deref() {
        None | Some("pending") => {}
        Some(o) => {
            return Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `status`: only `pending` is listed, not `{o}`"),
            ));
        }
    }
    // An approval of an ended session has lapsed: it can no longer be decided, so it is not
    // listed as waiting for a decision.
    let pending = state
        .carp(|s| {
            let mut open = Vec::new();
            for a in s.list_pending_approvals()? {
                if s.get_session(&a.session_id)?.is_some_and(|x| x.is_active()) {
                    open.push(a);
                }
            }
            Ok(open)
        })
        .await?;
    Ok(Json(pending))
}

/// Refuses a decision on an approval whose session has ended, before anything is written: the
/// decision's event could not be recorded in the closed chain, and a refusal changes nothing.
/// A pending approval lapses with its session (`specs/carp.md`, "Approvals"); an unknown
/// approval is left to the decision itself to report (404).
async fn check_session_open(state: &AppState, approval_id: &str) -> ApiResult<()> {
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

/// Grants or rejects an approval (operators), once.
#[utoipa::path(post, path = "/v1/approvals/{approval_id}", tag = "approvals",
    params(("approval_id" = String, Path, description = "The approval")),
    request_body = DecideBody,
    responses((status = 200, description = "The decided approval", body = Object),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 409, body = crate::openapi::ErrorBodySchema)))]
pub async fn decide(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<DecideBody>,
) -> ApiResult<Json<ApprovalRecord>> {
    actor.require(&[Role::Operator], "deciding approvals")?;
    crate::routes::sessions::check_uuid_field("/approval_id", &id)?;
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
    check_session_open(&state, &id).await?;
    let carp = crate::service::carp::engine(&state, state.atlases().set.clone());
    let who = actor.id.clone();
    let note = body.note.clone();
    let aid = id.clone();
    let record = crate::error::run_blocking("the approval task failed", move || {
        carp.decide_approval(&aid, decision, &who, note.as_deref())
    })
    .await?
    .map_err(ApiError::from)?;
    let rid = record.resolution_id.clone();
    let trace_id = state
        .carp(move |s| s.get_resolution(&rid))
        .await?
        .map(|r| r.resolution.trace_id)
        .unwrap_or_else(|| state.ids.new_id());
    let event_type = match decision {
        ApprovalDecision::Grant => "approval.granted",
        ApprovalDecision::Reject => "approval.rejected",
    };
    let span = state.ids.new_id();
    state
        .append_events(
            &record.session_id,
            &record.agent_id,
            vec![draft(
                &trace_id,
                &span,
                Some(&record.resolution_id),
                event_type,
                json!({
                    "approval_id": record.approval_id,
                    "resolution_id": record.resolution_id,
                    "actions": record.actions,
                    "decided_by": {"id": actor.id, "type": actor.actor_type.as_str()},
                    "note": record.note,
                    "decision": match decision { ApprovalDecision::Grant => "grant", ApprovalDecision::Reject => "reject" },
                }),
            )],
        )
        .await?;
    Ok(Json(record))
}
