//! `GET /v1/atlases` (summaries) and `GET /v1/atlases/{atlas_id}` (the merged manifest), for any
//! authenticated caller.

use axum::Json;
use axum::extract::{Path, State};
use cra_wire::Token;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::routes::Caller;
use crate::state::AppState;

/// One atlas in force.
#[derive(Debug, Serialize, ToSchema)]
pub struct AtlasSummary {
    /// Reverse-DNS id.
    pub atlas_id: String,
    /// Semver.
    pub version: String,
    /// Display name.
    pub name: String,
    /// What it is for.
    pub description: Option<String>,
    /// SHA-256 over its files (the atlas digest).
    pub digest: String,
    /// Number of actions.
    pub actions: usize,
    /// Number of policies.
    pub policies: usize,
}

/// Every atlas in force.
#[utoipa::path(get, path = "/v1/atlases", tag = "atlases",
    responses((status = 200, body = [AtlasSummary])))]
pub async fn list(
    State(state): State<AppState>,
    Caller(_actor): Caller,
) -> Json<Vec<AtlasSummary>> {
    let atlases = state.atlases();
    Json(
        atlases
            .loaded
            .iter()
            .map(|a| AtlasSummary {
                atlas_id: a.manifest.atlas_id.clone(),
                version: a.manifest.version.clone(),
                name: a.manifest.name.clone(),
                description: a.manifest.description.clone(),
                digest: a.digest.clone(),
                actions: a.manifest.actions.len(),
                policies: a.manifest.policies.len(),
            })
            .collect(),
    )
}

/// One atlas's manifest (inline and folder-held policies and actions merged).
#[utoipa::path(get, path = "/v1/atlases/{atlas_id}", tag = "atlases",
    params(("atlas_id" = String, Path, description = "The atlas id")),
    responses((status = 200, description = "The manifest", body = Object),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub async fn get(
    State(state): State<AppState>,
    Caller(_actor): Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let atlases = state.atlases();
    let a = atlases
        .loaded
        .iter()
        .find(|a| a.manifest.atlas_id == id)
        .ok_or_else(|| {
            ApiError::new(
                Token::AtlasNotFound,
                format!("atlas `{id}` is not loaded; GET /v1/atlases lists those that are"),
            )
        })?;
    serde_json::to_value(&a.manifest)
        .map(Json)
        .map_err(|e| ApiError::internal("could not render the manifest", e))
}
