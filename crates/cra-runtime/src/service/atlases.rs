//! The atlases in force, as operations: list them, read one's manifest, install one inline
//! atlas (authors and admins), replace the whole set (admins). Loading, validation and the
//! atomic swap of generations are `crate::atlases`'; this module holds who may do what, what
//! each operation answers, and what it records: every install, replacement, removal and refusal
//! of an atlas is an event of the operator audit chain ([`events`], [`super::operator`]),
//! appended under that chain's lock after the change, so the chain's order is the changes'. A
//! change whose event cannot be appended is undone before the failure is answered: no install
//! or replacement stays in force unrecorded.

pub mod events;

use std::sync::Arc;

use cra_atlas::LoadedAtlas;
use cra_atlas::signing::Trust;
use cra_store::catalog::CatalogEntry;
use cra_trace::EventDraft;
use cra_wire::Token;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use self::events::{
    AtlasChange, AtlasInstalled, AtlasRefused, AtlasRemoved, AtlasReplaced, AtlasSource,
};
use super::operator;
use crate::atlases::{Installed, Swapped, check_inline_signature, load_inline};
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
    /// `verified` (signed by a key the server trusts: `[atlas_signing]` is configured, and no
    /// atlas is in force without that), `signed` (it carries a signature, which nothing checks
    /// because the server trusts no key) or `unsigned`.
    pub signature: &'static str,
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
            signature: if a.signature.is_some() {
                "signed"
            } else {
                "unsigned"
            },
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

/// The most generations one page of the catalog's history holds.
pub const HISTORY_PAGE_MAX: usize = 100;

/// One change of the atlases in force, as the catalog keeps it (`GET /v1/atlases/history`).
#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogGeneration {
    /// Its number: 1 for the first change, each next one more.
    pub generation: u64,
    /// When it was committed (the database's clock on PostgreSQL).
    pub committed_at: String,
    /// Who made it.
    pub actor: String,
    /// What made it: `install`, `replace_set`, `watch`, `start`, `undo`.
    pub reason: String,
    /// Whether it is recorded in the operator audit chain (a change is committed, then recorded;
    /// a start records one a crash left unrecorded).
    pub recorded: bool,
    /// The atlases in force from it on, ascending by id.
    #[schema(value_type = Vec<crate::openapi::wire::CatalogEntry>)]
    pub atlases: Vec<CatalogEntry>,
}

/// One page of the catalog's history, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogHistory {
    /// The generations, newest first.
    pub generations: Vec<CatalogGeneration>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_before: Option<u64>,
}

impl Runtime {
    /// The catalog's history (authors, auditors, operators and admins): up to `limit` (1 to
    /// [`HISTORY_PAGE_MAX`]) generations numbered below `before`, newest first. A runtime
    /// without a catalog (a front door on a data directory) has no history.
    pub async fn atlas_history(
        &self,
        actor: &Actor,
        before: Option<u64>,
        limit: usize,
    ) -> ApiResult<CatalogHistory> {
        actor.require(
            &[Role::Author, Role::Auditor, Role::Operator],
            "reading the atlas catalog's history",
        )?;
        if !(1..=HISTORY_PAGE_MAX).contains(&limit) {
            return Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `limit`: {limit} is not between 1 and {HISTORY_PAGE_MAX}"),
            ));
        }
        let Some(catalog) = self.atlas_catalog.clone() else {
            return Ok(CatalogHistory {
                generations: Vec::new(),
                next_before: None,
            });
        };
        let page = run_blocking("reading the atlas catalog failed", move || {
            catalog.history(before, limit)
        })
        .await?
        .map_err(|e| {
            ApiError::new(
                Token::Unavailable,
                format!("the atlas catalog cannot be read now ({e}); try again"),
            )
        })?;
        let next_before = page
            .last()
            .filter(|g| page.len() == limit && g.number > 1)
            .map(|g| g.number);
        let generations = page
            .into_iter()
            .map(|g| CatalogGeneration {
                generation: g.number,
                committed_at: g.committed_at,
                actor: g.actor,
                reason: g.reason,
                recorded: g.recorded,
                atlases: g.members,
            })
            .collect();
        Ok(CatalogHistory {
            generations,
            next_before,
        })
    }

    /// Every atlas in force (any authenticated caller).
    pub fn atlas_summaries(&self) -> Vec<AtlasSummary> {
        let checked = self.config.atlas_signing != crate::config::AtlasSigningConfig::default();
        let mut all: Vec<AtlasSummary> =
            self.atlases().loaded.iter().map(AtlasSummary::of).collect();
        if checked {
            for a in all.iter_mut().filter(|a| a.signature == "signed") {
                a.signature = "verified";
            }
        }
        all
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
    /// replacing the atlas with the same id at another version; the identical atlas again
    /// changes nothing (`unchanged`); the same id and version with other content is 409
    /// `atlas_version_conflict`; with trusted keys configured, an atlas without a valid
    /// `signature` by one of them is 400 `invalid_atlas` at `/signature`. Operators and admins
    /// install any atlas; an author only one whose id is in a namespace granted to them, and
    /// replaces one in force only when it is signed by a trusted key (403 `forbidden`
    /// otherwise). The install, replacement or refusal is recorded in the operator audit chain.
    pub async fn install_inline_atlas(
        self: &Arc<Self>,
        actor: &Actor,
        inline: Value,
    ) -> ApiResult<InstalledAtlas> {
        actor.require(&[Role::Author, Role::Operator], "installing an atlas")?;
        let chain = operator::lock(self).await?;
        let rt = Arc::clone(self);
        let actor_id = actor.id.clone();
        let installer = actor.clone();
        let outcome = run_blocking("installing the atlas failed", move || {
            // A refusal keeps the atlas it refused, when it loaded far enough to be known.
            let trust = rt
                .atlas_trust()
                .map_err(|e| Box::new((None, untrusted(e))))?;
            let atlas = load_inline(&inline, "").map_err(|e| Box::new((None, e)))?;
            let summary = AtlasSummary::of(&atlas);
            if let Err(e) = check_inline_signature(&inline, "", &atlas, trust.as_ref()) {
                return Err(Box::new((Some(summary), e)));
            }
            if !installer.grants_atlas(atlas.id()) {
                return Err(Box::new((
                    Some(summary),
                    namespace_refused(&installer, atlas.id()),
                )));
            }
            // With trusted keys, the signature checked above is a trusted one.
            let may_replace = installer.has(Role::Operator) || trust.is_some();
            let (installed, swap) = match rt.install_atlas(&actor_id, atlas, may_replace) {
                Ok(i) => i,
                Err(e) => return Err(Box::new((Some(summary), e))),
            };
            let (replaced, unchanged) = match installed {
                Installed::Added => (None, false),
                Installed::Replaced { version, digest } => {
                    (Some(ReplacedAtlas { version, digest }), false)
                }
                Installed::Unchanged => (None, true),
            };
            let installed = InstalledAtlas {
                atlas: summary,
                replaced,
                unchanged,
            };
            Ok((installed, swap))
        })
        .await?;
        match outcome {
            Ok((installed, swap)) => {
                let recorded = chain.append(self.installed_events(actor, &installed)).await;
                self.settle(swap, &recorded).await;
                recorded?;
                Ok(installed)
            }
            Err(refused) => {
                let (known, refusal) = *refused;
                let source = AtlasSource::Install;
                let draft = self.refused_event(actor, source, known.as_ref(), &refusal);
                chain.append(vec![draft]).await?;
                Err(refusal)
            }
        }
    }

    /// Replaces the whole set in force with `{"atlases": [inline atlas, ...]}` (distinct ids;
    /// each validated as [`Runtime::install_inline_atlas`] does), atomically: either every atlas
    /// is valid and the new set is swapped in, or nothing changes. Admins only. Answers the set
    /// now in force. Each atlas the swap installed, replaced or removed (or the refusal) is
    /// recorded in the operator audit chain.
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
        let chain = operator::lock(self).await?;
        let before = self.atlas_summaries();
        let rt = Arc::clone(self);
        let actor_id = actor.id.clone();
        let outcome = run_blocking("replacing the atlases failed", move || {
            let trust = rt.atlas_trust().map_err(untrusted)?;
            let swap = rt.replace_atlases(&actor_id, load_set(&set, trust.as_ref())?)?;
            Ok((rt.atlas_summaries(), swap))
        })
        .await?;
        match outcome {
            Ok((after, swap)) => {
                let (was, now) = (entries(&before), entries(&after));
                let drafts =
                    self.set_changed_events(&actor.id, AtlasSource::ReplaceSet, &was, &now);
                let recorded = chain.append(drafts).await;
                self.settle(swap, &recorded).await;
                recorded?;
                Ok(after)
            }
            Err(refusal) => {
                let source = AtlasSource::ReplaceSet;
                chain
                    .append(vec![self.refused_event(actor, source, None, &refusal)])
                    .await?;
                Err(refusal)
            }
        }
    }

    /// Settles `swap` once its events were appended or not (`recorded`): marks its stored
    /// generation recorded, or undoes it (the failure is then answered). On the blocking pool:
    /// both write the store's atlas catalog.
    async fn settle<T>(self: &Arc<Self>, swap: Option<Swapped>, recorded: &ApiResult<T>) {
        let Some(swap) = swap else { return };
        let failure = recorded.as_ref().err().map(|e| e.body.message.clone());
        let rt = Arc::clone(self);
        let settled = tokio::task::spawn_blocking(move || match failure {
            None => rt.mark_atlases_recorded(swap.generation()),
            Some(e) if rt.undo_atlas_change(&swap) => {
                tracing::warn!(error = %e, "an atlas change could not be recorded and was undone");
            }
            Some(e) => {
                tracing::error!(error = %e, "an atlas change could not be recorded, and a later change was built on it: it stays in force unrecorded until the next start records it");
            }
        })
        .await;
        if let Err(e) = settled {
            tracing::error!(error = %e, "settling an atlas change failed");
        }
    }

    /// The events of one install's outcome: nothing for an unchanged atlas.
    fn installed_events(&self, actor: &Actor, installed: &InstalledAtlas) -> Vec<EventDraft> {
        if installed.unchanged {
            return Vec::new();
        }
        let a = &entries(std::slice::from_ref(&installed.atlas))[0];
        let atlas = change(a, &actor.id, AtlasSource::Install);
        let draft = match &installed.replaced {
            None => operator::draft(self, &AtlasInstalled(atlas)),
            Some(old) => operator::draft(
                self,
                &AtlasReplaced {
                    atlas,
                    replaced_version: &old.version,
                    replaced_digest: &old.digest,
                },
            ),
        };
        vec![draft]
    }

    /// `atlas.refused` for `refusal`, naming the atlas when it loaded far enough to be known.
    fn refused_event(
        &self,
        actor: &Actor,
        source: AtlasSource,
        known: Option<&AtlasSummary>,
        refusal: &ApiError,
    ) -> EventDraft {
        operator::draft(
            self,
            &AtlasRefused {
                atlas_id: known.map(|a| a.atlas_id.as_str()),
                version: known.map(|a| a.version.as_str()),
                digest: known.map(|a| a.digest.as_str()),
                actor: &actor.id,
                source,
                error: &refusal.body.error,
                message: &refusal.body.message,
            },
        )
    }

    /// The events of a change of the whole set from `before` to `after`: each id new to the
    /// set installed, each with another digest replaced, each gone removed.
    pub(crate) fn set_changed_events(
        &self,
        actor: &str,
        source: AtlasSource,
        before: &[CatalogEntry],
        after: &[CatalogEntry],
    ) -> Vec<EventDraft> {
        let mut drafts = Vec::new();
        for a in after {
            let atlas = change(a, actor, source);
            match before.iter().find(|b| b.atlas_id == a.atlas_id) {
                None => drafts.push(operator::draft(self, &AtlasInstalled(atlas))),
                Some(old) if old.digest != a.digest => {
                    let replaced = AtlasReplaced {
                        atlas,
                        replaced_version: &old.version,
                        replaced_digest: &old.digest,
                    };
                    drafts.push(operator::draft(self, &replaced));
                }
                Some(_) => {}
            }
        }
        for old in before {
            if !after.iter().any(|a| a.atlas_id == old.atlas_id) {
                let gone = AtlasRemoved(change(old, actor, source));
                drafts.push(operator::draft(self, &gone));
            }
        }
        drafts
    }
}

/// The catalog entries (id, version, digest) of `summaries`.
fn entries(summaries: &[AtlasSummary]) -> Vec<CatalogEntry> {
    summaries
        .iter()
        .map(|a| CatalogEntry {
            atlas_id: a.atlas_id.clone(),
            version: a.version.clone(),
            digest: a.digest.clone(),
            signature: None,
        })
        .collect()
}

/// The event members naming atlas `a`, changed by `actor` through `source`.
fn change<'a>(a: &'a CatalogEntry, actor: &'a str, source: AtlasSource) -> AtlasChange<'a> {
    AtlasChange {
        atlas_id: &a.atlas_id,
        version: &a.version,
        digest: &a.digest,
        actor,
        source,
    }
}

/// Records what a `--watch` reload did: the set's changes from `before`, or the refusal
/// (`message`) that left the last good set in force. Failures to record are logged.
pub(crate) async fn record_reload(
    rt: &Arc<Runtime>,
    before: &[AtlasSummary],
    outcome: &Result<usize, String>,
) {
    let actor = cra_store::retention::OPERATOR_AGENT;
    let chain = match operator::lock(rt).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "the atlas reload could not be recorded");
            return;
        }
    };
    let drafts = match outcome {
        Ok(_) => {
            let now = entries(&rt.atlas_summaries());
            rt.set_changed_events(actor, AtlasSource::Watch, &entries(before), &now)
        }
        Err(message) => vec![operator::draft(
            rt,
            &AtlasRefused {
                atlas_id: None,
                version: None,
                digest: None,
                actor,
                source: AtlasSource::Watch,
                error: Token::InvalidAtlas.as_str(),
                message,
            },
        )],
    };
    let generation = rt.atlases().generation;
    match chain.append(drafts).await {
        Ok(_) if outcome.is_ok() => {
            let rt = Arc::clone(rt);
            let marked = tokio::task::spawn_blocking(move || rt.mark_atlases_recorded(generation));
            let _ = marked.await;
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "the atlas reload could not be recorded"),
    }
}

/// Records that a start refused the source atlas `refused` (not signed by a trusted key) in the
/// operator audit chain of `rt`, a runtime that never serves; then drops it. Called from a
/// start (which may run anywhere: on an async worker's blocking pool or not), so the append
/// runs on a thread and async runtime of its own. A failure to record is logged: the start is
/// refused either way.
pub(crate) fn record_start_refusal(rt: crate::state::AppState, refused: &crate::atlases::Unsigned) {
    let refused = refused.clone();
    let recorded = std::thread::spawn(move || {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let outcome = tokio.block_on(async {
            let chain = operator::lock(&rt).await?;
            let draft = operator::draft(
                &rt,
                &AtlasRefused {
                    atlas_id: Some(refused.atlas_id.as_str()),
                    version: Some(refused.version.as_str()),
                    digest: Some(refused.digest.as_str()),
                    actor: cra_store::retention::OPERATOR_AGENT,
                    source: AtlasSource::Start,
                    error: Token::InvalidAtlas.as_str(),
                    message: &refused.message,
                },
            );
            chain.append(vec![draft]).await.map(drop)
        });
        drop(tokio);
        drop(rt);
        outcome.map_err(|e| e.body.message)
    })
    .join();
    match recorded {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the refused start could not be recorded"),
        Err(_) => tracing::warn!("recording the refused start failed"),
    }
}

/// Records the change a stopped server left stored but unrecorded, if any (the catalog's
/// newest generation is not marked recorded): the change from the newest recorded generation
/// to the newest one, as its own door when it is one generation (a start's own change is one),
/// else as `recovered`; then marks it. Called as a server starts serving; failures are logged
/// and the next start tries again.
pub(crate) async fn record_unrecorded(rt: &Arc<Runtime>) {
    let Some(store) = rt.atlas_catalog.clone() else {
        return;
    };
    let read = tokio::task::spawn_blocking(move || {
        Ok::<_, cra_store::BackendError>((store.head()?, store.last_recorded()?))
    });
    let (head, last) = match read.await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            return tracing::warn!(error = %e, "the stored atlases could not be read to record their changes");
        }
        Err(e) => return tracing::warn!(error = %e, "reading the stored atlases failed"),
    };
    let Some(head) = head.filter(|g| !g.recorded) else {
        return;
    };
    let before = last.as_ref().map(|g| g.members.clone()).unwrap_or_default();
    let consecutive = last.as_ref().map_or(0, |g| g.number) + 1 == head.number;
    let (actor, source) = match (consecutive, head.reason.as_str()) {
        (true, "install") => (head.actor.as_str(), AtlasSource::Install),
        (true, "replace_set") => (head.actor.as_str(), AtlasSource::ReplaceSet),
        (true, "watch") => (head.actor.as_str(), AtlasSource::Watch),
        (true, "start") => (head.actor.as_str(), AtlasSource::Start),
        _ => (cra_store::retention::OPERATOR_AGENT, AtlasSource::Recovered),
    };
    let drafts = rt.set_changed_events(actor, source, &before, &head.members);
    let recorded = match operator::lock(rt).await {
        Ok(chain) => chain.append(drafts).await.map(|_| ()),
        Err(e) => Err(e),
    };
    match recorded {
        Ok(()) => {
            let (rt, n) = (Arc::clone(rt), head.number);
            let _ = tokio::task::spawn_blocking(move || rt.mark_atlases_recorded(Some(n))).await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "the stored atlas change could not be recorded; the next start tries again")
        }
    }
}

/// 503 `unavailable`: the trusted keys cannot be read now, so no atlas is taken in.
fn untrusted(message: String) -> ApiError {
    ApiError::new(Token::Unavailable, message)
}

/// The atlases of a `{"atlases": [...]}` document, each loaded and validated (and, with
/// `trust`, signed by a trusted key), ids distinct.
fn load_set(set: &Value, trust: Option<&Trust>) -> ApiResult<Vec<LoadedAtlas>> {
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
        let at = format!("/atlases/{i}");
        let atlas = load_inline(a, &at)?;
        check_inline_signature(a, &at, &atlas, trust)?;
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

/// The refusal of an install of `atlas_id` by an author none of whose namespaces grants it.
fn namespace_refused(actor: &Actor, atlas_id: &str) -> ApiError {
    let granted = if actor.atlas_namespaces.is_empty() {
        "none".to_owned()
    } else {
        actor.atlas_namespaces.join(", ")
    };
    ApiError::forbidden(format!(
        "atlas id `{atlas_id}` is in no namespace granted to `{}` (granted: {granted}); an administrator grants namespaces with atlas_namespaces in the keys file",
        actor.id
    ))
}
