//! `/v1/health`, `/v1/conformance` (public) and `/metrics` (operators). The conformance suite's
//! evaluation and clock routes live in [`crate::conformance`].

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Role;
use crate::error::ApiResult;
use crate::routes::Caller;
use crate::state::AppState;

/// `GET /v1/health`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok` when the server answers and its store is open.
    pub status: String,
    /// The implementation version.
    pub version: String,
    /// When this process started serving.
    pub started_at: String,
    /// `redb` or `postgres`.
    pub store: String,
    /// Atlases in force.
    pub atlases: usize,
}

/// Liveness and what is loaded.
#[utoipa::path(get, path = "/v1/health", tag = "system",
    responses((status = 200, description = "The server is up", body = Health)))]
pub(crate) async fn health(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        started_at: state.started_at.clone(),
        store: state.backends.kind.into(),
        atlases: state.atlases().loaded.len(),
    })
}

/// The Relay conformance descriptor.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Conformance {
    /// `0.1`.
    pub protocol_version: String,
    /// `L0`..`L3`.
    pub conformance_level: String,
    /// The CRA conformance levels this deployment claims (CRA §7.1): `carp-core`, `trace-core`,
    /// `atlas-core`, `cra-full`.
    pub cra_levels: Vec<String>,
    /// Optional capabilities.
    pub capabilities: ConformanceCapabilities,
    /// Who implements it.
    pub implementation: Implementation,
}

/// Optional Relay capabilities.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConformanceCapabilities {
    /// Keyword + vector fusion.
    pub hybrid_search: bool,
    /// Vector search.
    pub semantic_search: bool,
    /// Live streams.
    pub realtime: bool,
    /// Blob storage.
    pub blob_storage: bool,
}

/// Implementation name and version.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Implementation {
    /// `cra`.
    pub name: String,
    /// The crate version.
    pub version: String,
}

/// The Relay conformance descriptor (Relay §10).
#[utoipa::path(get, path = "/v1/conformance", tag = "system",
    responses((status = 200, description = "What this deployment implements", body = Conformance)))]
pub(crate) async fn conformance(State(_state): State<AppState>) -> Json<Conformance> {
    Json(Conformance {
        protocol_version: "0.1".into(),
        conformance_level: "L3".into(),
        cra_levels: ["carp-core", "trace-core", "atlas-core", "cra-full"]
            .map(str::to_owned)
            .to_vec(),
        capabilities: ConformanceCapabilities {
            hybrid_search: false,
            semantic_search: false,
            realtime: true,
            blob_storage: false,
        },
        implementation: Implementation {
            name: "cra".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
    })
}

/// Prometheus text exposition of the runtime's counters (operator, auditor or admin).
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text", content_type = "text/plain"),
              (status = 403, description = "Not an operator", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    Caller(actor): Caller,
) -> ApiResult<impl IntoResponse> {
    actor.require(&[Role::Operator, Role::Auditor], "reading /metrics")?;
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    ))
}
