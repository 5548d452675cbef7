//! `POST /v1/resolve` and `POST /v1/execute`: CARP's front door on HTTP. Each handler extracts
//! the caller and the body, calls its operation in [`crate::service::carp`] (where the rules
//! and the recording live) and writes the answer; a refusal's status comes from its token.

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cra_carp::types::{ExecuteResponse, ExecuteStatus};
use cra_wire::Token;
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::extract::{QueryParams, RawJson};
use crate::routes::Caller;
use crate::service::carp as service;
use crate::state::AppState;

/// `?explain=true` attaches the evaluation's explanation to the answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveQuery {
    /// `true` or `false`.
    #[serde(default)]
    pub explain: Option<String>,
}

impl ResolveQuery {
    fn explain(&self) -> ApiResult<bool> {
        match self.explain.as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(o) => Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `explain`: `{o}` is not true or false"),
            )),
        }
    }
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
pub(crate) async fn resolve(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ResolveQuery>,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    let answer = service::resolve(&state, &actor, &body, q.explain()?).await?;
    // The chain's own bytes when the answer is exactly them.
    Ok(match answer.canonical {
        Some(text) => {
            let json = HeaderValue::from_static("application/json");
            ([(CONTENT_TYPE, json)], text).into_response()
        }
        None => Json(answer.resolution).into_response(),
    })
}

/// Executes an allowed action. An admitted request is always answered with an execute response;
/// a refusal (`denied`, `pending_approval`) carries its token's status. A request that is not
/// admitted (malformed, another agent's, no active session) gets the error body.
#[utoipa::path(post, path = "/v1/execute", tag = "carp",
    request_body(content = Object, description = "A CARP/1.0 execute request (schemas/carp-execute-request.schema.json)"),
    responses((status = 200, description = "The execute response, status `success` or `error` (schemas/carp-execute-response.schema.json)", body = Object),
              (status = 400, description = "Not a CARP execute request (error body), or an execute response refusing its parameters", body = Object),
              (status = 403, description = "An execute response refusing the action (`denied`), or the error body for another agent's request", body = Object),
              (status = 404, description = "An execute response naming an unknown resolution, or the error body for an unknown session", body = Object),
              (status = 409, description = "An execute response: `pending_approval`, or `denied` for an expired resolution or a repeated key in flight", body = Object),
              (status = 429, description = "An execute response: `denied` by a rate limit or budget", body = Object)))]
pub(crate) async fn execute(
    State(state): State<AppState>,
    Caller(actor): Caller,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    let response = service::execute(&state, &actor, &body).await?;
    let retry_after = retry_after(&response);
    let mut http = (execute_status(&response), Json(response)).into_response();
    if let Some(seconds) = retry_after {
        http.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    Ok(http)
}

/// The seconds a rate-limit refusal says to wait (`error.details.retry_after_seconds`), for the
/// `Retry-After` header (RFC 9110 §10.2.3).
fn retry_after(response: &ExecuteResponse) -> Option<u64> {
    response
        .error
        .as_ref()?
        .details
        .as_ref()?
        .get(cra_carp::engine::RETRY_AFTER_DETAIL)?
        .as_u64()
}

/// The HTTP status of an execute response: 200 when the action ran (`success` or `error`), the
/// refusal token's status when it did not (403 for a token this build does not know).
fn execute_status(response: &ExecuteResponse) -> StatusCode {
    let refused = match response.status {
        ExecuteStatus::Success | ExecuteStatus::Error => return StatusCode::OK,
        ExecuteStatus::Denied | ExecuteStatus::PendingApproval => response.error.as_ref(),
    };
    let status = refused
        .and_then(|e| Token::parse(&e.code))
        .map_or(403, Token::http_status);
    StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN)
}
