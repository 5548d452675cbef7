//! Approvals over HTTP: `GET /v1/approvals?status=pending` and
//! `POST /v1/approvals/{approval_id}` (`{decision: grant|reject, note?}`), operators only, and
//! `GET /v1/approvals/{approval_id}?wait=N`, the long poll an agent waits on. The rules live in
//! [`crate::service::approvals`].

use axum::Json;
use axum::extract::{Path, State};
use cra_carp::store::ApprovalRecord;
use cra_wire::Token;
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, QueryParams};
use crate::routes::Caller;
use crate::service::approvals as service;
use crate::service::approvals::DecideBody;
use crate::state::AppState;

/// `GET /v1/approvals` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// `pending` (the default) or `decided`.
    #[serde(default)]
    pub status: Option<String>,
    /// How many decisions `status=decided` answers (default 50, at most 500).
    #[serde(default)]
    pub limit: Option<String>,
}

/// Pending approvals of open sessions, or the most recent decisions (operators, auditors).
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals",
    params(("status" = Option<String>, Query, description = "`pending` (the default): the queue; `decided`: the newest decisions first"),
           ("limit" = Option<u64>, Query, description = "With `status=decided`: how many (default 50, at most 500)")),
    responses((status = 200, description = "Approvals", body = [crate::openapi::wire::Approval]),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ListQuery>,
) -> ApiResult<Json<Vec<ApprovalRecord>>> {
    match q.status.as_deref() {
        None | Some("pending") => {
            if q.limit.is_some() {
                return Err(ApiError::new(
                    Token::InvalidRequest,
                    "query parameter `limit` applies to `status=decided`; the pending queue is listed whole",
                ));
            }
            Ok(Json(service::pending(&state, &actor).await?))
        }
        Some("decided") => {
            let limit = match q.limit.as_deref() {
                None => DEFAULT_HISTORY,
                Some(v) => crate::extract::query_u64("limit", Some(v))?,
            };
            if limit == 0 || limit > service::MAX_HISTORY as u64 {
                return Err(ApiError::new(
                    Token::InvalidRequest,
                    format!(
                        "query parameter `limit`: {limit} is not between 1 and {}",
                        service::MAX_HISTORY
                    ),
                ));
            }
            let limit = usize::try_from(limit).unwrap_or(service::MAX_HISTORY);
            Ok(Json(service::decided(&state, &actor, limit).await?))
        }
        Some(o) => Err(ApiError::new(
            Token::InvalidRequest,
            format!("query parameter `status`: `{o}` is neither `pending` nor `decided`"),
        )),
    }
}

/// How many decisions `status=decided` answers without a `limit`.
const DEFAULT_HISTORY: u64 = 50;

/// `GET /v1/approvals/{approval_id}` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShowQuery {
    /// Seconds to wait for a decision while pending (0 to 60; default 0: answer now).
    #[serde(default)]
    pub wait: Option<String>,
}

/// One approval: the agent whose session asked, operators and auditors. With `wait`, answers
/// once it is decided (or its session ends), at most `wait` seconds later.
#[utoipa::path(get, path = "/v1/approvals/{approval_id}", tag = "approvals",
    params(("approval_id" = String, Path, description = "The approval"),
           ("wait" = Option<u64>, Query, description = "Seconds to wait while pending, 0-60")),
    responses((status = 200, description = "The approval as it stands", body = crate::openapi::wire::ApprovalView),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<ShowQuery>,
) -> ApiResult<Json<service::ApprovalView>> {
    let wait = crate::extract::query_u64("wait", q.wait.as_deref())?;
    Ok(Json(service::show(&state, &actor, &id, wait).await?))
}

/// Grants or rejects an approval (operators), once.
#[utoipa::path(post, path = "/v1/approvals/{approval_id}", tag = "approvals",
    params(("approval_id" = String, Path, description = "The approval")),
    request_body = DecideBody,
    responses((status = 200, description = "The decided approval", body = crate::openapi::wire::Approval),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 409, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn decide(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<DecideBody>,
) -> ApiResult<Json<ApprovalRecord>> {
    Ok(Json(service::decide(&state, &actor, &id, body).await?))
}
