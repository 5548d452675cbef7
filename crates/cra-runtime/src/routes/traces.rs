//! `GET /v1/traces` (the chains the caller may read), `GET /v1/traces/{session_id}` (JSON array,
//! or `.trace.jsonl` with `Accept: application/x-ndjson`) and
//! `POST /v1/traces/{session_id}/verify`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ApiResult};
use crate::routes::Caller;
use crate::service::traces::{ChainListing, VerifyResult};
use crate::state::AppState;

/// The JSON Lines media type of a `.trace.jsonl` export.
pub(crate) const NDJSON: &str = "application/x-ndjson";

/// The CARP sessions' chains the caller may read (its own; every one for auditors, operators
/// and admins), in session id order: what `cra trace export --all --url` exports.
#[utoipa::path(get, path = "/v1/traces", tag = "traces",
    responses((status = 200, description = "The readable chains", body = [ChainListing]),
              (status = 401, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(actor): Caller,
) -> ApiResult<Json<Vec<ChainListing>>> {
    Ok(Json(state.chains(&actor).await?))
}

/// A session's chain, in order.
#[utoipa::path(get, path = "/v1/traces/{session_id}", tag = "traces",
    params(("session_id" = String, Path, description = "The session")),
    responses((status = 200, description = "The events (JSON array, or JSON Lines with Accept: application/x-ndjson)", body = [Object]),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let events = state.trace(&actor, &id).await?;
    let wants_lines = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains(NDJSON));
    if wants_lines {
        let mut out = Vec::with_capacity(events.len() * 600);
        for e in &events {
            serde_json::to_writer(&mut out, e)
                .map_err(|e| ApiError::internal("could not render an event", e))?;
            out.push(b'\n');
        }
        Ok(([(CONTENT_TYPE, NDJSON)], out).into_response())
    } else {
        Ok(Json(events).into_response())
    }
}

/// Re-verifies a stored chain (sequence, links, Appendix B hashes, §4.2 fields).
#[utoipa::path(post, path = "/v1/traces/{session_id}/verify", tag = "traces",
    params(("session_id" = String, Path, description = "The session")),
    responses((status = 200, body = VerifyResult),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn verify(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<VerifyResult>> {
    Ok(Json(state.verify_chain(&actor, id).await?))
}
