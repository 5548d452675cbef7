//! `POST /v1/resolve` and `POST /v1/execute`: CARP's front door on HTTP. Each handler extracts
//! the caller and the body, calls its operation in [`crate::service::carp`] (where the rules
//! and the recording live) and writes the answer; a refusal's status comes from its token.

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cra_carp::types::{ExecuteResponse, ExecuteStatus};
use cra_wire::Token;
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::extract::{QueryParams, RawJson};
use crate::routes::Caller;
use crate::service::carp as service;
use crate::state::AppState;

/// `?explain=true` attaches the evaluation's explanation to the answer; `?receipt=true` a
/// receipt of the recorded resolution.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveQuery {
    /// `true` or `false`.
    #[serde(default)]
    pub explain: Option<String>,
    /// `true` or `false`.
    #[serde(default)]
    pub receipt: Option<String>,
}

/// `?receipt=true` attaches a receipt of the recorded outcome to the execute response.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecuteQuery {
    /// `true` or `false`.
    #[serde(default)]
    pub receipt: Option<String>,
}

/// What the request says beside its body: a valid W3C `traceparent` header (one that is not is
/// ignored, as the Trace Context recommendation asks).
fn call_context(headers: &HeaderMap) -> service::CallContext {
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(crate::otlp::traceparent);
    service::CallContext { traceparent }
}

/// A `true`/`false` query parameter; absent is false.
fn flag(name: &str, value: Option<&str>) -> ApiResult<bool> {
    match value {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(o) => Err(ApiError::field(
            Token::InvalidRequest,
            format!("/{name}"),
            format!("query parameter `{name}`: `{o}` is not true or false"),
        )),
    }
}

/// The receipt of what the request `body` recorded last (`service::log`), as JSON.
async fn receipt_of(
    state: &AppState,
    body: &serde_json::Value,
    recorded: Option<u64>,
) -> ApiResult<serde_json::Value> {
    let receipt = state.0.request_receipt(body, recorded).await?;
    serde_json::to_value(receipt).map_err(|e| ApiError::internal("a receipt did not serialise", e))
}

/// `answer` (a JSON object) with its receipt as the `receipt` member, or, when none could be
/// made, the error body as `receipt_error`: the operation was recorded either way, so its
/// answer is never withheld (the receipt can be asked again at `GET /v1/log/receipt`).
fn with_receipt(
    mut answer: serde_json::Value,
    receipt: ApiResult<serde_json::Value>,
) -> Json<serde_json::Value> {
    if let Some(object) = answer.as_object_mut() {
        match receipt {
            Ok(r) => object.insert("receipt".into(), r),
            Err(e) => object.insert(
                "receipt_error".into(),
                serde_json::to_value(&e.body).unwrap_or_default(),
            ),
        };
    }
    Json(answer)
}

/// Resolves a CARP request.
#[utoipa::path(post, path = "/v1/resolve", tag = "carp",
    request_body(content = crate::openapi::wire::CarpRequest, description = "A CARP/1.0 request (schemas/carp-request.schema.json)"),
    params(("explain" = Option<bool>, Query, description = "Attach the evaluation's explanation"),
           ("receipt" = Option<bool>, Query, description = "Attach a receipt (`Receipt`) of the recorded resolution as `receipt`")),
    responses((status = 200, description = "The resolution (schemas/carp-resolution.schema.json)", body = crate::openapi::wire::CarpResolution),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 409, body = crate::openapi::ErrorBodySchema),
              (status = 429, description = "`quota_exceeded`: the session holds its quota of events or bytes", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn resolve(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ResolveQuery>,
    headers: HeaderMap,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    let explain = flag("explain", q.explain.as_deref())?;
    let receipt = flag("receipt", q.receipt.as_deref())?;
    let call = call_context(&headers);
    let answer = service::resolve_in(&state, &actor, &body, explain, &call).await?;
    if receipt {
        let receipt = receipt_of(&state, &body, answer.recorded).await;
        let resolution = serde_json::to_value(&answer.resolution)
            .map_err(|e| ApiError::internal("a resolution did not serialise", e))?;
        return Ok(with_receipt(resolution, receipt).into_response());
    }
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
    request_body(content = crate::openapi::wire::CarpExecuteRequest, description = "A CARP/1.0 execute request (schemas/carp-execute-request.schema.json)"),
    params(("receipt" = Option<bool>, Query, description = "Attach a receipt (`Receipt`) of the recorded outcome as `receipt`")),
    responses((status = 200, description = "The execute response, status `success` or `error` (schemas/carp-execute-response.schema.json)", body = crate::openapi::wire::CarpExecuteResponse),
              (status = 400, description = "Not a CARP execute request (error body), or an execute response refusing its parameters", body = crate::openapi::wire::ExecuteAnswer),
              (status = 403, description = "An execute response refusing the action (`denied`), or the error body for another agent's request", body = crate::openapi::wire::ExecuteAnswer),
              (status = 404, description = "An execute response naming an unknown resolution, or the error body for an unknown session", body = crate::openapi::wire::ExecuteAnswer),
              (status = 409, description = "An execute response: `pending_approval`, or `denied` for an expired resolution or a repeated key in flight", body = crate::openapi::wire::ExecuteAnswer),
              (status = 429, description = "An execute response: `denied` by a rate limit or budget; or the error body `quota_exceeded` for a session holding its quota of events or bytes", body = crate::openapi::wire::ExecuteAnswer)))]
pub(crate) async fn execute(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ExecuteQuery>,
    headers: HeaderMap,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    let receipt = flag("receipt", q.receipt.as_deref())?;
    let call = call_context(&headers);
    let (response, recorded) = service::execute_in(&state, &actor, &body, &call).await?;
    let retry_after = retry_after(&response);
    let status = execute_status(&response);
    let mut http = if receipt {
        let receipt = receipt_of(&state, &body, recorded).await;
        let answer = serde_json::to_value(&response)
            .map_err(|e| ApiError::internal("an execute response did not serialise", e))?;
        (status, with_receipt(answer, receipt)).into_response()
    } else {
        (status, Json(response)).into_response()
    };
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
