//! The atlases in force, as operations: list them, read one's manifest, install one inline
//! atlas (authors and admins), replace the whole set (admins). Loading, validation and the
//! atomic swap of generations are `crate::atlases`'; this module holds who may do what and what
//! each operation answers.

use std::sync::Arc;

use cra_atlas::LoadedAtlas;
use cra_wire::Token;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::atlases::{Installed, load_inline};
use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult, run_blocking};
use crate::state::Runtime;

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

/// The atlas an install replaced.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplacedAtlas {
    /// Its version.
    pub version: String,
    /// Its digest.
    pub digest: String,
}

/// What an install did: the atlas now in force, the one it replaced, whether anything changed.
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

impl Runtime {
    /// Every atlas in force (any authenticated caller).
    pub fn atlas_summaries(&self) -> Vec<AtlasSummary> {
        self.atlases().loaded.iter().map(AtlasSummary::of).collect()
    }

    /// The manifest of atlas `atlas_id` (inline and folder-held policies and actions merged),
    /// or 404 `atlas_not_found`.
    pub fn atlas_manifest(&self, atlas_id: &str) -> ApiResult<Value> {
        let atlases = self.atlases();
        let a = atlases.get(atlas_id).ok_or_else(|| {
            ApiError::new(
                Token::AtlasNotFound,
                format!("atlas `{atlas_id}` is not loaded; GET /v1/atlases lists those that are"),
            )
        })?;
        serde_json::to_value(&a.manifest)
            .map_err(|e| ApiError::internal("could not render the manifest", e))
    }

    /// Installs one inline atlas `{"manifest": {...}, "files": {"context/x.md": "..."}}`,
    /// validated exactly as a directory holding those files. It joins the set in force,
    /// replacing the atlas with the same id whatever its version; the identical atlas again
    /// changes nothing (`unchanged`). Authors and admins.
    pub async fn install_inline_atlas(
        self: &Arc<Self>,
        actor: &Actor,
        inline: Value,
    ) -> ApiResult<InstalledAtlas> {
        actor.require(&[Role::Author], "installing an atlas")?;
        let rt = Arc::clone(self);
        run_blocking("installing the atlas failed", move || {
            let atlas = load_inline(&inline, "")?;
            let summary = AtlasSummary::of(&atlas);
            let (replaced, unchanged) = match rt.install_atlas(atlas)? {
                Installed::Added => (None, false),
                Installed::Replaced { version, digest } => {
                    (Some(ReplacedAtlas { version, digest }), false)
                }
                Installed::Unchanged => (None, true),
            };
            Ok(InstalledAtlas {
                atlas: summary,
                replaced,
                unchanged,
            })
        })
        .await?
    }

    /// Replaces the whole set in force with `{"atlases": [inline atlas, ...]}` (distinct ids;
    /// each validated as [`Runtime::install_inline_atlas`] does), atomically: either every atlas
    /// is valid and the new set is swapped in, or nothing changes. Admins only. Answers the set
    /// now in force.
    pub async fn replace_atlas_set(
        self: &Arc<Self>,
        actor: &Actor,
        set: Value,
    ) -> ApiResult<Vec<AtlasSummary>> {
        if !actor.has(Role::Admin) {
            return Err(ApiError::forbidden(
                "replacing the whole atlas set needs the admin role; authors install one atlas with POST /v1/atlases",
            ));
        }
        let rt = Arc::clone(self);
        run_blocking("replacing the atlases failed", move || {
            rt.replace_atlases(load_set(&set)?)?;
            Ok(rt.atlas_summaries())
        })
        .await?
    }
}

/// The atlases of a `{"atlases": [...]}` document, each loaded and validated, ids distinct.
fn load_set(set: &Value) -> ApiResult<Vec<LoadedAtlas>> {
    let members = set.as_object().map(|o| o.len()).unwrap_or_default();
    let list = set
        .get("atlases")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ApiError::field(
                Token::InvalidRequest,
                "/atlases",
                "send {\"atlases\": [inline atlas, ...]} (an empty array leaves no atlas in force)",
            )
        })?;
    if members != 1 {
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
                format!(
                    "atlas `{}` is also /atlases/{j}; one atlas per id is in force",
                    atlas.id()
                ),
            ));
        }
        loaded.push(atlas);
    }
    Ok(loaded)
}
