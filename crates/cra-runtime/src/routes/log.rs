//! The transparency log's routes (`specs/tlog.md`): `GET /v1/log/key`, `GET /v1/log/checkpoint`
//! (public), `POST /v1/log/checkpoint` (operators cut one now), `GET /v1/log/proof/inclusion`
//! and `GET /v1/log/receipt` (a reader of the event's chain), `GET /v1/log/proof/consistency`
//! and the C2SP `tlog-tiles`
//! read paths `GET /v1/log/tile/...` (public). The rules are the service's
//! ([`crate::service::log`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::extract::{QueryParams, query_u64};
use crate::routes::Caller;
use crate::service::log::{ConsistencyProof, InclusionProof, Receipt};
use crate::state::AppState;

fn text(body: String) -> Response {
    ([(CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The log's verifier key string (`<origin>+<key id>+<key>`), for checking its checkpoints.
#[utoipa::path(get, path = "/v1/log/key", tag = "log",
    responses((status = 200, description = "The verifier key string", content_type = "text/plain", body = String),
              (status = 503, description = "The log signs no checkpoint (no key configured)", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn key(State(state): State<AppState>) -> ApiResult<Response> {
    Ok(text(format!("{}\n", state.0.log_key()?)))
}

/// The latest checkpoint: a C2SP `tlog-checkpoint` signed note.
#[utoipa::path(get, path = "/v1/log/checkpoint", tag = "log",
    responses((status = 200, description = "The signed checkpoint", content_type = "text/plain", body = String),
              (status = 503, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn checkpoint(State(state): State<AppState>) -> ApiResult<Response> {
    Ok(text(state.0.log_checkpoint().await?))
}

/// Cuts a checkpoint of the tree as it is now and answers the latest (operators).
#[utoipa::path(post, path = "/v1/log/checkpoint", tag = "log",
    responses((status = 200, description = "The signed checkpoint", content_type = "text/plain", body = String),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 503, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn cut(
    State(state): State<AppState>,
    Caller(actor): Caller,
) -> ApiResult<Response> {
    Ok(text(state.0.cut_log_checkpoint(&actor).await?))
}

/// `GET /v1/log/proof/inclusion` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InclusionQuery {
    event_hash: Option<String>,
    tree_size: Option<String>,
}

/// The inclusion proof of one event (by its hash) in the tree of `tree_size` leaves.
#[utoipa::path(get, path = "/v1/log/proof/inclusion", tag = "log",
    params(("event_hash" = String, Query, description = "The event's hash, 64 lowercase hex digits"),
           ("tree_size" = u64, Query, description = "The size of the tree (a checkpoint's)")),
    responses((status = 200, body = InclusionProof),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn inclusion(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<InclusionQuery>,
) -> ApiResult<Json<InclusionProof>> {
    let hash = q.event_hash.ok_or_else(|| missing("event_hash"))?;
    let size = query_u64(
        "tree_size",
        Some(q.tree_size.as_deref().ok_or_else(|| missing("tree_size"))?),
    )?;
    Ok(Json(state.0.log_inclusion(&actor, &hash, size).await?))
}

/// `GET /v1/log/receipt` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReceiptQuery {
    event_hash: Option<String>,
}

/// The receipt of one event (by its hash): the event, bound by a C2SP `tlog-proof@v1` to a
/// signed checkpoint, which is cut first when the latest does not cover the event.
#[utoipa::path(get, path = "/v1/log/receipt", tag = "log",
    params(("event_hash" = String, Query, description = "The event's hash, 64 lowercase hex digits")),
    responses((status = 200, body = Receipt),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 503, description = "No checkpoint could be published (no key, or too few witnesses)", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn receipt(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ReceiptQuery>,
) -> ApiResult<Json<Receipt>> {
    let hash = q.event_hash.ok_or_else(|| missing("event_hash"))?;
    Ok(Json(state.0.log_receipt(&actor, &hash).await?))
}

/// `GET /v1/log/proof/consistency` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsistencyQuery {
    from: Option<String>,
    to: Option<String>,
}

/// The consistency proof from the tree of `from` leaves to the tree of `to`.
#[utoipa::path(get, path = "/v1/log/proof/consistency", tag = "log",
    params(("from" = u64, Query, description = "The older tree's size"),
           ("to" = u64, Query, description = "The newer tree's size")),
    responses((status = 200, body = ConsistencyProof),
              (status = 400, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn consistency(
    State(state): State<AppState>,
    QueryParams(q): QueryParams<ConsistencyQuery>,
) -> ApiResult<Json<ConsistencyProof>> {
    let from = query_u64(
        "from",
        Some(q.from.as_deref().ok_or_else(|| missing("from"))?),
    )?;
    let to = query_u64("to", Some(q.to.as_deref().ok_or_else(|| missing("to"))?))?;
    Ok(Json(state.0.log_consistency(from, to).await?))
}

/// A C2SP `tlog-tiles` tile or entry bundle (`tile/<L>/<N>[.p/<W>]`, `tile/entries/<N>[.p/<W>]`).
/// Full tiles never change and may be cached for ever.
#[utoipa::path(get, path = "/v1/log/tile/{path}", tag = "log",
    params(("path" = String, Path, description = "The tile path after `tile/`")),
    responses((status = 200, description = "The tile's bytes", content_type = "application/octet-stream", body = Vec<u8>),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn tile(
    State(state): State<AppState>,
    Path(path): Path<String>,
) -> ApiResult<Response> {
    let path = format!("tile/{path}");
    let bytes = state.0.log_tile(&path).await?;
    let cache = if path.contains(".p/") {
        "no-cache"
    } else {
        "public, max-age=31536000, immutable"
    };
    Ok((
        [
            (CONTENT_TYPE, "application/octet-stream"),
            (CACHE_CONTROL, cache),
        ],
        bytes,
    )
        .into_response())
}

fn missing(name: &str) -> ApiError {
    ApiError::field(
        cra_wire::Token::InvalidRequest,
        format!("/{name}"),
        format!("query parameter `{name}` is required"),
    )
}
