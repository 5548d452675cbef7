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

/// The response header that says how many events the chain held when the read began: a body
/// with fewer stopped at a stored event the server cannot decode (`POST .../verify` names it).
pub(crate) const CHAIN_EVENTS: &str = "cra-chain-events";

/// A session's chain, in order, streamed page by page from the store (memory bounded by a page,
/// not the chain). The body holds the events stored when the read began
/// (`CRA-Chain-Events`); one the store cannot decode ends it early, after the readable prefix.
#[utoipa::path(get, path = "/v1/traces/{session_id}", tag = "traces",
    params(("session_id" = String, Path, description = "The session")),
    responses((status = 200, description = "The events (JSON array, or JSON Lines with Accept: application/x-ndjson); the CRA-Chain-Events header gives their number", body = [crate::openapi::wire::TraceEvent]),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let mut reader = state.open_chain(&actor, &id).await?;
    let lines = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains(NDJSON));
    // The first page is read before answering, so a store that cannot answer is a status.
    let first = reader.next_page().await?;
    let count = reader.event_count();
    let body = futures::stream::unfold(
        Rendering {
            reader,
            pending: first,
            lines,
            opened: false,
            any: false,
            closed: false,
        },
        Rendering::next_chunk,
    );
    let content_type = if lines { NDJSON } else { "application/json" };
    Ok((
        [
            (CONTENT_TYPE, content_type.to_owned()),
            (
                axum::http::HeaderName::from_static(CHAIN_EVENTS),
                count.to_string(),
            ),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// The state of a chain's body as it is rendered, a page at a time.
struct Rendering {
    reader: crate::service::traces::ChainReader,
    /// The page read but not yet rendered.
    pending: Option<cra_trace::store::Page>,
    /// JSON Lines rather than one JSON array.
    lines: bool,
    /// Whether the array's `[` was sent.
    opened: bool,
    /// Whether an event was rendered (the array's commas).
    any: bool,
    /// Whether the body is complete.
    closed: bool,
}

impl Rendering {
    /// The body's next chunk: a page of events, then the array's close. A store that fails
    /// mid-body ends the stream with an error, so the client sees a broken transfer, never a
    /// silently short chain.
    async fn next_chunk(mut self) -> Option<(std::io::Result<Vec<u8>>, Self)> {
        if self.closed {
            return None;
        }
        let page = match self.pending.take() {
            Some(page) => Some(page),
            None => match self.reader.next_page().await {
                Ok(page) => page,
                Err(e) => return Some((Err(self.fail(&e)), self)),
            },
        };
        let mut out = Vec::new();
        if !self.lines && !self.opened {
            out.push(b'[');
            self.opened = true;
        }
        match page {
            Some(page) => {
                if let Err(e) = self.render(&page.events, &mut out) {
                    return Some((Err(self.fail(&e)), self));
                }
            }
            None => {
                self.closed = true;
                if !self.lines {
                    out.push(b']');
                }
            }
        }
        Some((Ok(out), self))
    }

    /// Ends the body with `e`: hyper then aborts the transfer.
    fn fail(&mut self, e: &ApiError) -> std::io::Error {
        self.closed = true;
        tracing::warn!(error = %e, "a chain's body was cut short");
        std::io::Error::other(e.to_string())
    }

    fn render(&mut self, events: &[cra_trace::TraceEvent], out: &mut Vec<u8>) -> ApiResult<()> {
        for event in events {
            if !self.lines && self.any {
                out.push(b',');
            }
            self.any = true;
            serde_json::to_writer(&mut *out, event)
                .map_err(|e| ApiError::internal("could not render an event", e))?;
            if self.lines {
                out.push(b'\n');
            }
        }
        Ok(())
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
