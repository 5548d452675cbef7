//! CARP sessions over HTTP: `POST /v1/sessions`, `GET /v1/sessions/{id}`,
//! `DELETE /v1/sessions/{id}`. The rules live in [`crate::service::sessions`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::routes::Caller;
use crate::service::sessions as service;
use crate::service::sessions::{CreateSession, SessionView};
use crate::state::AppState;

/// Opens a session.
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = CreateSession,
    responses((status = 201, body = SessionView),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 429, description = "`quota_exceeded`: the agent has `quotas.max_open_sessions` open", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Caller(actor): Caller,
    JsonBody(req): JsonBody<CreateSession>,
) -> ApiResult<(StatusCode, Json<SessionView>)> {
    let view = service::open(&state, &actor, req).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// Reads a session.
#[utoipa::path(get, path = "/v1/sessions/{session_id}", tag = "sessions",
    params(("session_id" = String, Path, description = "The session")),
    responses((status = 200, body = SessionView),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SessionView>> {
    Ok(Json(service::get(&state, &actor, &id).await?))
}

/// Ends a session (idempotent): appends `session.ended` and marks it ended.
#[utoipa::path(delete, path = "/v1/sessions/{session_id}", tag = "sessions",
    params(("session_id" = String, Path, description = "The session")),
    responses((status = 204, description = "Ended"),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 409, description = "`execution_in_progress`: an action of the session is executing; end it again once that execute has answered", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn end(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    service::end(&state, &actor, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
