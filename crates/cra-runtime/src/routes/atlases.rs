//! `GET /v1/atlases` (summaries) and `GET /v1/atlases/{atlas_id}` (the merged manifest), for any
//! authenticated caller; `POST /v1/atlases` (install one inline atlas, authors and admins) and
//! `PUT /v1/atlases` (replace the whole set in force, admins).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use cra_atlas::LoadedAtlas;
use cra_wire::Token;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::atlases::{Installed, load_inline};
use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::extract::RawJson;
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

impl AtlasSummary {
    /// The summary of a loaded atlas.
    pub fn of(a: &LoadedAtlas) -> Self {
        Self {
            atlas_id: a.manifest.atlas_id.clone(),
            version: a.manifest.version.clone(),
            name: a.manifest.name.clone(),
            description: a.manifest.description.clone(),
            digest: a.digest.clone(),
            actions: a.manifest.actions.len(),
            policies: a.manifest.policies.len(),
        }
    }
}

/// Every atlas in force.
#[utoipa::path(get, path = "/v1/atlases", tag = "atlases",
    responses((status = 200, body = [AtlasSummary])))]
pub async fn list(
    State(state): State<AppState>,
    Caller(_actor): Caller,
) -> Json<Vec<AtlasSummary>> {
    let atlases = state.atlases();
    Json(atlases.loaded.iter().map(AtlasSummary::of).collect())
}

/// The atlas an install replaced.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplacedAtlas {
    /// Its version.
    pub version: String,
    /// Its digest.
    pub digest: String,
}

/// The answer of `POST /v1/atlases`.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstalledAtlas {
    /// The atlas now in force.
    #[serde(flatten)]
    pub atlas: AtlasSummary,
    /// The atlas with the same id it replaced, if any.
    pub replaced: Option<ReplacedAtlas>,
    /// True when the identical atlas was already in force (nothing changed).
    pub unchanged: bool,
}

/// Installs one inline atlas `{"manifest": {...}, "files": {"context/x.md": "..."}}`, validated
/// exactly as a directory holding those files. It joins the set in force, replacing the atlas
/// with the same id whatever its version: 201. The identical atlas again: 200, nothing changes.
#[utoipa::path(post, path = "/v1/atlases", tag = "atlases", request_body = Object,
    responses((status = 201, description = "Installed", body = InstalledAtlas),
              (status = 200, description = "Already in force, unchanged", body = InstalledAtlas),
              (status = 400, description = "invalid_request or invalid_atlas (every diagnostic, by pointer)", body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub async fn install(
    State(state): State<AppState>,
    Caller(actor): Caller,
    RawJson(body): RawJson,
) -> ApiResult<(StatusCode, Json<InstalledAtlas>)> {
    actor.require(&[Role::Author], "installing an atlas")?;
    let s = state.clone();
    crate::error::run_blocking("installing the atlas failed", move || {
        let atlas = load_inline(&body, "")?;
        let summary = AtlasSummary::of(&atlas);
        let (status, replaced, unchanged) = match s.install_atlas(atlas)? {
            Installed::Added => (StatusCode::CREATED, None, false),
            Installed::Replaced { version, digest } => (
                StatusCode::CREATED,
                Some(ReplacedAtlas { version, digest }),
                false,
            ),
            Installed::Unchanged => (StatusCode::OK, None, true),
        };
        Ok((
            status,
            Json(InstalledAtlas {
                atlas: summary,
                replaced,
                unchanged,
            }),
        ))
    })
    .await?
}

/// Replaces the whole set in force with `{"atlases": [inline atlas, ...]}` (distinct ids; each
/// validated as `POST /v1/atlases` does), atomically: either every atlas is valid and the new set
/// is swapped in, or nothing changes. The configured sources leave the set until restart.
#[utoipa::path(put, path = "/v1/atlases", tag = "atlases", request_body = Object,
    responses((status = 200, description = "The set now in force", body = [AtlasSummary]),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub async fn replace(
    State(state): State<AppState>,
    Caller(actor): Caller,
    RawJson(body): RawJson,
) -> ApiResult<Json<Vec<AtlasSummary>>> {
    if !actor.has(Role::Admin) {
        return Err(ApiError::forbidden(
            "replacing the whole atlas set needs the admin role; authors install one atlas with POST /v1/atlases",
        ));
    }
    let s = state.clone();
    crate::error::run_blocking("replacing the atlases failed", move || {
        let obj = body.as_object().map(|o| o.len()).unwrap_or_default();
        let list = body
            .get("atlases")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                ApiError::field(
                    Token::InvalidRequest,
                    "/atlases",
                    "send {\"atlases\": [inline atlas, ...]} (an empty array leaves no atlas in force)",
                )
            })?;
        if obj != 1 {
            return Err(ApiError::field(
                Token::InvalidRequest,
                "",
                "the body has exactly one member, `atlases`",
            ));
        }
        let mut loaded: Vec<LoadedAtlas> = Vec::with_capacity(list.len());
        for (i, a) in list.iter().enumerate() {
            let atlas = load_inline(a, &format!("/atlases/{i}"))?;
            if let Some(j) = loaded.iter().position(|b| b.id() == atlas.id()) {
                return Err(ApiError::field(
                    Token::InvalidAtlas,
                    format!("/atlases/{i}/manifest/atlas_id"),
                    format!("atlas `{}` is also /atlases/{j}; one atlas per id is in force", atlas.id()),
                ));
            }
            loaded.push(atlas);
        }
        s.replace_atlases(loaded)?;
        Ok(Json(s.atlases().loaded.iter().map(AtlasSummary::of).collect()))
    })
    .await?
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
    let a = atlases.get(&id).ok_or_else(|| {
        ApiError::new(
            Token::AtlasNotFound,
            format!("atlas `{id}` is not loaded; GET /v1/atlases lists those that are"),
        )
    })?;
    serde_json::to_value(&a.manifest)
        .map(Json)
        .map_err(|e| ApiError::internal("could not render the manifest", e))
}
