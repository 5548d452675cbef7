//! `POST /v1/resolve` and `POST /v1/execute`: CARP's front door on HTTP. Each handler extracts
//! the caller and the body, calls its operation in [`crate::service::carp`] (where the rules
//! and the recording live) and writes the answer; a refusal's status comes from its token.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
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
pub struct ResolveQuery {
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
pub async fn resolve(
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
    let response = service::execute(&state, &actor, &body).await?;
    Ok(Json(response).into_response())
}
