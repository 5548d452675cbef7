//! `GET /v1/atlases` (summaries) and `GET /v1/atlases/{atlas_id}` (the merged manifest), for any
//! authenticated caller; `POST /v1/atlases` (install one inline atlas, authors and admins) and
//! `PUT /v1/atlases` (replace the whole set in force, admins); `GET /v1/atlases/history` (the
//! atlas catalog's generations, newest first; authors, auditors, operators). The rules are the service's
//! ([`crate::service::atlases`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiResult;
use crate::extract::RawJson;
use crate::extract::{QueryParams, query_u64};
use crate::routes::Caller;
use crate::service::atlases::{AtlasSummary, CatalogHistory, InstalledAtlas};
use crate::state::AppState;

/// Every atlas in force.
#[utoipa::path(get, path = "/v1/atlases", tag = "atlases",
    responses((status = 200, body = [AtlasSummary])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(_actor): Caller,
) -> Json<Vec<AtlasSummary>> {
    Json(state.atlas_summaries())
}

/// Installs one inline atlas `{"manifest": {...}, "files": {"context/x.md": "..."}}`, validated
/// exactly as a directory holding those files. It joins the set in force, replacing the atlas
/// with the same id at another version: 201. The identical atlas again: 200, nothing changes.
/// The same id and version with other content: 409 `atlas_version_conflict`.
#[utoipa::path(post, path = "/v1/atlases", tag = "atlases", request_body = crate::openapi::wire::InlineAtlas,
    responses((status = 201, description = "Installed", body = InstalledAtlas),
              (status = 200, description = "Already in force, unchanged", body = InstalledAtlas),
              (status = 400, description = "invalid_request or invalid_atlas (every diagnostic, by pointer)", body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 409, description = "atlas_version_conflict: this id and version are in force with other content", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn install(
    State(state): State<AppState>,
    Caller(actor): Caller,
    RawJson(body): RawJson,
) -> ApiResult<(StatusCode, Json<InstalledAtlas>)> {
    let installed = state.0.install_inline_atlas(&actor, body).await?;
    let status = if installed.unchanged {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(installed)))
}

/// Replaces the whole set in force with `{"atlases": [inline atlas, ...]}` (distinct ids; each
/// validated as `POST /v1/atlases` does), atomically: either every atlas is valid and the new set
/// is swapped in, or nothing changes. The configured sources leave the set until restart.
#[utoipa::path(put, path = "/v1/atlases", tag = "atlases", request_body = crate::openapi::wire::AtlasSet,
    responses((status = 200, description = "The set now in force", body = [AtlasSummary]),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn replace(
    State(state): State<AppState>,
    Caller(actor): Caller,
    RawJson(body): RawJson,
) -> ApiResult<Json<Vec<AtlasSummary>>> {
    Ok(Json(state.0.replace_atlas_set(&actor, body).await?))
}

/// One atlas's manifest (inline and folder-held policies and actions merged).
#[utoipa::path(get, path = "/v1/atlases/{atlas_id}", tag = "atlases",
    params(("atlas_id" = String, Path, description = "The atlas id")),
    responses((status = 200, description = "The manifest", body = crate::openapi::wire::AtlasManifest),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(_actor): Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    state.atlas_manifest(&id).map(Json)
}

/// `GET /v1/atlases/history` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    /// Only generations numbered below this one (the previous page's `next_before`).
    #[serde(default)]
    pub before: Option<String>,
    /// Generations per page, 1 to 100 (default 20).
    #[serde(default)]
    pub limit: Option<String>,
}

/// Generations per history page unless `limit` says otherwise.
const HISTORY_PAGE: u64 = 20;

/// The atlas catalog's history: each change of the atlases in force (who, when, why, and the
/// set from then on), newest first, paged with `before`.
#[utoipa::path(get, path = "/v1/atlases/history", tag = "atlases",
    params(("before" = Option<u64>, Query, description = "Only generations numbered below this one"),
           ("limit" = Option<u64>, Query, description = "Generations per page, 1-100 (default 20)")),
    responses((status = 200, description = "Generations, newest first", body = CatalogHistory),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 503, description = "The catalog cannot be read now", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn history(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<HistoryQuery>,
) -> ApiResult<Json<CatalogHistory>> {
    let before = q
        .before
        .as_deref()
        .map(|b| query_u64("before", Some(b)))
        .transpose()?;
    let limit = q
        .limit
        .as_deref()
        .map_or(Ok(HISTORY_PAGE), |l| query_u64("limit", Some(l)))?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    Ok(Json(state.0.atlas_history(&actor, before, limit).await?))
}
