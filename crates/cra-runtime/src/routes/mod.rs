//! The HTTP routes, one module per area, and the router that assembles them with the auth,
//! rate-limit and metrics layers.

pub(crate) mod approvals;
pub(crate) mod atlases;
pub(crate) mod carp;
pub(crate) mod log;
pub(crate) mod relay;
pub(crate) mod sessions;
pub(crate) mod system;
pub(crate) mod traces;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, RETRY_AFTER};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cra_wire::Token;

use crate::auth::Actor;
use crate::error::ApiError;
use crate::state::AppState;

/// Paths answered without credentials.
const PUBLIC_PATHS: &[&str] = &[
    "/v1/health",
    "/v1/health/live",
    "/v1/health/ready",
    "/v1/conformance",
];

/// Whether a request is answered without credentials: health, conformance, and the
/// transparency log's key, checkpoint (read), consistency proofs and tiles, which any auditor
/// must be able to fetch (`specs/tlog.md`).
fn is_public(method: &axum::http::Method, path: &str) -> bool {
    PUBLIC_PATHS.contains(&path)
        || (method == axum::http::Method::GET && crate::console::is_page_path(path))
        || (method == axum::http::Method::GET
            && (PUBLIC_LOG_PATHS.contains(&path) || path.starts_with("/v1/log/tile/")))
}

/// The log's public reads (GET only: cutting a checkpoint needs an operator).
const PUBLIC_LOG_PATHS: &[&str] = &[
    "/v1/log/key",
    "/v1/log/checkpoint",
    "/v1/log/proof/consistency",
];

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/health", get(system::health))
        .route("/v1/health/live", get(system::live))
        .route("/v1/health/ready", get(system::ready))
        .route("/v1/conformance", get(system::conformance))
        .route("/v1/whoami", get(system::whoami))
        .route("/metrics", get(system::metrics))
        .route("/v1/backup", get(system::backup))
        .route("/v1/sessions", post(sessions::create))
        .route(
            "/v1/sessions/{session_id}",
            get(sessions::get).delete(sessions::end),
        )
        .route(
            "/v1/atlases",
            get(atlases::list)
                .post(atlases::install)
                .put(atlases::replace),
        )
        .merge(crate::conformance::routes())
        .route("/v1/atlases/history", get(atlases::history))
        .route("/v1/atlases/{atlas_id}", get(atlases::get))
        .route("/v1/resolve", post(carp::resolve))
        .route("/v1/execute", post(carp::execute))
        .route("/v1/approvals", get(approvals::list))
        .route(
            "/v1/approvals/{approval_id}",
            get(approvals::show).post(approvals::decide),
        )
        .route("/v1/projects", post(relay::create_project))
        .route("/v1/projects/{project_id}", get(relay::get_project))
        .route("/v1/projects/{project_id}/archive", post(relay::archive))
        .route(
            "/v1/projects/{project_id}/unarchive",
            post(relay::unarchive),
        )
        .route(
            "/v1/projects/{project_id}/packages",
            post(relay::deposit).get(relay::list_packages),
        )
        .route(
            "/v1/projects/{project_id}/facts",
            post(relay::assert_fact)
                .get(relay::facts)
                .delete(relay::invalidate_fact),
        )
        .route("/v1/projects/{project_id}/orient", get(relay::orient))
        .route(
            "/v1/projects/{project_id}/sessions",
            post(relay::start_session),
        )
        .route(
            "/v1/projects/{project_id}/sessions/{session_id}",
            get(relay::get_session),
        )
        .route(
            "/v1/projects/{project_id}/sessions/{session_id}/end",
            post(relay::end_session),
        )
        .route(
            "/v1/projects/{project_id}/export",
            get(relay::export_project),
        )
        .route("/v1/export", get(relay::export_all))
        .route("/v1/import", post(relay::import))
        .route("/v1/orchestrate", get(relay::orchestrate))
        .route(
            "/v1/projects/{project_id}/packages/{package_id}",
            get(relay::get_project_package),
        )
        .route(
            "/v1/projects/{project_id}/packages/{package_id}/flag",
            post(relay::flag_project_package),
        )
        .route(
            "/v1/projects/{project_id}/packages/{package_id}/review",
            post(relay::review_project_package),
        )
        .route("/v1/packages/{package_id}", get(relay::get_package))
        .route("/v1/packages/{package_id}/flag", post(relay::flag))
        .route("/v1/packages/{package_id}/review", post(relay::review))
        .route("/v1/log/key", get(log::key))
        .route("/v1/log/checkpoint", get(log::checkpoint).post(log::cut))
        .route("/v1/log/proof/inclusion", get(log::inclusion))
        .route("/v1/log/proof/consistency", get(log::consistency))
        .route("/v1/log/receipt", get(log::receipt))
        .route("/v1/log/tile/{*path}", get(log::tile))
        .route("/v1/traces/stream", get(crate::stream::stream))
        .route("/v1/traces", get(traces::list))
        .route("/v1/traces/{session_id}", get(traces::get))
        .route("/v1/traces/{session_id}/verify", post(traces::verify))
        .merge(crate::mcp::http::router(state.clone()))
        .merge(crate::console::routes())
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn(crate::extract::require_utf8_path))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

async fn fallback() -> ApiError {
    ApiError::not_found("no such route; see /v1/health and schemas/openapi.json for the API")
}

async fn method_not_allowed() -> ApiError {
    ApiError::not_found("this route does not answer that method; see schemas/openapi.json")
}

/// Authenticates every request but the public ones, applies the per-key rate limit, and leaves
/// the [`Actor`] in the request's extensions.
async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if is_public(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    // A browser's trace stream carries its key in the subprotocols it offers (no other route).
    let from_protocol = (req.uri().path() == "/v1/traces/stream")
        .then(|| crate::stream::bearer_from_protocols(req.headers()))
        .flatten();
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .or(from_protocol.as_deref());
    let peer = req.extensions().get::<crate::tls::PeerCertificate>();
    let now = state.clock.now();
    let actor = match state.auth.current().authenticate_request(header, peer, now) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    if let Err(retry) = state.limiter.admit(&actor.key_fingerprint).await {
        state
            .metrics
            .rate_limited
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut resp = ApiError::new(
            Token::TooManyRequests,
            format!("too many requests for this key; retry in {retry} s"),
        )
        .into_response();
        if let Ok(v) = retry.to_string().parse() {
            resp.headers_mut().insert(RETRY_AFTER, v);
        }
        return resp;
    }
    req.extensions_mut().insert(actor);
    next.run(req).await
}

/// Counts every answer by method, route template and status, and observes its latency.
async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let method = crate::metrics::method_label(req.method());
    let route = crate::metrics::route_label(req.extensions().get::<MatchedPath>()).to_owned();
    // Latency is a measurement of this machine, not a time the protocol records: the
    // monotonic clock, not the injected one.
    let began = std::time::Instant::now();
    let resp = next.run(req).await;
    state
        .metrics
        .record_request(method, &route, resp.status().as_u16(), began.elapsed());
    resp
}

/// The authenticated caller, for handlers.
#[derive(Debug, Clone)]
pub struct Caller(pub Actor);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Actor>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| ApiError::new(Token::Unauthenticated, "no credentials"))
    }
}
