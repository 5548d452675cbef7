//! The atlases in force: loaded at start (the `--atlas` paths, or every atlas under `./atlases`),
//! compiled once for CARP evaluation, swapped atomically on reload. A reload that fails keeps the
//! last good set and is reported (log line + `cra_atlas_reload_failures_total`). `--watch` polls
//! the sources' file metadata once a second and reloads when it changes.
//!
//! Atlases may also be installed over HTTP (`POST /v1/atlases` adds or replaces one atlas,
//! `PUT /v1/atlases` replaces the whole set; `specs/http.md`). An inline atlas is validated exactly
//! as a directory holding the same files ([`load_inline`]); installed atlases stay in force across
//! `--watch` reloads (an installed atlas stands in for a source atlas with the same id) until the
//! server restarts. Every change builds a new generation and swaps it in with one pointer swap.
//!
//! With trusted keys configured (`[atlas_signing]`, `specs/atlas-signing.md`), every atlas taken
//! in must carry a `cra-atlas` SSH signature by one of them over its digest, fail closed: a
//! source's signature file ([`cra_atlas::signing::signature_path`]) at start and on reload, an
//! inline atlas's `signature` member on `POST`/`PUT` ([`check_inline_signature`]). A refusal
//! changes nothing. The signature an atlas came with is kept with it in the catalog, signing on
//! or off, so that a start with trusted keys checks the atlases the catalog keeps and no source
//! holds (`check_kept`), as does a replica reading another's generation; the same atlas posted
//! again with a new signature (a rotated key) keeps the new one.
//!
//! A server keeps the atlases in force in its store's atlas catalog (`catalog`): every change
//! is committed there before it is swapped in, so installed atlases survive restarts and every
//! replica sharing a PostgreSQL schema decides with the same ones. A front door on a data
//! directory (`crate::open_local`) uses only the atlases it is given and stores none.

pub(crate) mod catalog;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use cra_atlas::signing::Trust;
use cra_atlas::{Diagnostic, LoadError, LoadedAtlas};
use cra_carp::index::AtlasSet;
use cra_wire::{FieldError, Token};
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::escape_pointer_token;
use crate::state::Runtime;

/// One consistent generation of atlases.
#[derive(Debug, Clone)]
pub struct AtlasState {
    /// As loaded (manifests, files, digests).
    pub loaded: Vec<LoadedAtlas>,
    /// Compiled for evaluation.
    pub set: Arc<AtlasSet>,
    /// Where they came from.
    pub sources: Vec<PathBuf>,
    /// The ids of the atlases of `loaded` installed over HTTP (kept across reloads).
    pub posted: BTreeSet<String>,
    /// `atlas_id -> digest` of the atlases this process's sources last loaded (what a reload
    /// may change).
    pub source_digests: BTreeMap<String, String>,
    /// The atlas catalog's generation this set is (`None`: nothing stored).
    pub generation: Option<u64>,
}

impl AtlasState {
    /// No atlases.
    pub fn empty() -> Self {
        Self {
            loaded: Vec::new(),
            set: Arc::new(AtlasSet::default()),
            sources: Vec::new(),
            posted: BTreeSet::new(),
            source_digests: BTreeMap::new(),
            generation: None,
        }
    }

    /// The atlas in force with this id.
    pub fn get(&self, atlas_id: &str) -> Option<&LoadedAtlas> {
        self.loaded.iter().find(|a| a.manifest.atlas_id == atlas_id)
    }

    /// `atlas_id -> digest` of every atlas in force.
    pub fn digests(&self) -> &std::collections::BTreeMap<String, String> {
        self.set.digests()
    }
}

/// The atlas sources: the configured paths, or every directory with an `atlas.json` and every
/// `.tar.gz` directly under `./atlases`.
pub fn sources(configured: &[PathBuf]) -> Vec<PathBuf> {
    if !configured.is_empty() {
        return configured.to_vec();
    }
    let root = Path::new("atlases");
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root) {
        for entry in rd.flatten() {
            let p = entry.path();
            let is_atlas_dir = p.is_dir() && p.join("atlas.json").is_file();
            let is_archive = p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(".tar.gz"));
            if is_atlas_dir || is_archive {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Loads and compiles every source, each through the one atlas validator
/// (`cra_carp::atlas_check`), and resolves every dependency inside the set, as `cra atlas check`
/// does; any failure names the atlas and what is wrong.
pub fn load_all(sources: &[PathBuf]) -> Result<AtlasState, String> {
    resolved(compose(
        sources.to_vec(),
        load_sources(sources, None)?,
        Vec::new(),
    )?)
}

/// `state` when every dependency of its atlases resolves inside it; otherwise why not.
fn resolved(state: AtlasState) -> Result<AtlasState, String> {
    check_dependencies(&state.loaded, &|_| None).map_err(|e| {
        let errors = e.body.details.map(|d| d.errors).unwrap_or_default();
        let listed: Vec<String> = errors.into_iter().map(|f| f.message).collect();
        format!("{} ({})", e.body.message, listed.join("; "))
    })?;
    Ok(state)
}

/// An atlas refused at start because it is not signed by a trusted key: a source, or one the
/// catalog keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsigned {
    /// The atlas's id.
    pub atlas_id: String,
    /// Its version.
    pub version: String,
    /// Its digest.
    pub digest: String,
    /// What is wrong, naming the atlas and its source.
    pub message: String,
}

impl Unsigned {
    /// The refusal of `a`, `what` saying where it came from and why (after its id and version).
    fn of(a: &LoadedAtlas, what: String) -> Self {
        Unsigned {
            message: format!("atlas {} {} {what}", a.id(), a.manifest.version),
            atlas_id: a.id().to_owned(),
            version: a.manifest.version.clone(),
            digest: a.digest.clone(),
        }
    }
}

/// Why the sources could not be taken in: an atlas refused for its signature, or anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SourceError {
    /// An atlas is not signed by a trusted key.
    Unsigned(Unsigned),
    /// Any other failure (unreadable, invalid, unresolved dependency, store failure).
    Other(String),
}

impl From<String> for SourceError {
    fn from(message: String) -> Self {
        SourceError::Other(message)
    }
}

impl From<SourceError> for String {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Unsigned(u) => u.message,
            SourceError::Other(m) => m,
        }
    }
}

/// Loads every source; with `trust`, each must be signed by a trusted key (its signature file
/// over its digest), and the first that is not fails the whole load, named.
fn load_sources(
    sources: &[PathBuf],
    trust: Option<&Trust>,
) -> Result<Vec<LoadedAtlas>, SourceError> {
    let mut loaded = Vec::with_capacity(sources.len());
    for p in sources {
        let mut a =
            cra_carp::atlas_check::load(p).map_err(|e| format!("atlas {}: {e}", p.display()))?;
        // Kept with the atlas (and in the catalog) whether or not this start checks it.
        a.signature = cra_atlas::signing::read_signature(p).map_err(|e| e.to_string())?;
        if let Some(trust) = trust
            && let Err(e) = trust.verify_found(p, &a.digest, a.signature.as_deref())
        {
            let message = format!("from {} is refused: {e}", p.display());
            return Err(SourceError::Unsigned(Unsigned::of(&a, message)));
        }
        loaded.push(a);
    }
    Ok(loaded)
}

/// With `trust`, refuses the first of `kept` (atlases the catalog keeps and no source holds:
/// installed over HTTP, perhaps while no keys were trusted) whose kept signature is missing or
/// does not verify, saying how to mend it.
fn check_kept(kept: &[LoadedAtlas], trust: Option<&Trust>) -> Result<(), SourceError> {
    let Some(trust) = trust else {
        return Ok(());
    };
    for a in kept {
        let why = match &a.signature {
            None => "it was taken in without a signature".to_owned(),
            Some(armored) => match trust.verify_digest(&a.digest, armored) {
                Ok(_) => continue,
                Err(e) => e.to_string(),
            },
        };
        let message = format!(
            "({}), kept in the atlas catalog, is refused: {why}. Start with a copy signed by a trusted key as a source (`cra atlas sign DIR`, then --atlas DIR), which stands in for it; or start once without [atlas_signing] and replace the set (PUT /v1/atlases) with signed atlases",
            a.digest
        );
        return Err(SourceError::Unsigned(Unsigned::of(a, message)));
    }
    Ok(())
}

/// With `trust`, checks that the inline atlas `value` (at `pointer` in the body), loaded as
/// `atlas`, carries in `signature` a `cra-atlas` SSH signature by a trusted key over its digest;
/// otherwise 400 `invalid_atlas` at `{pointer}/signature` saying what is missing or wrong.
/// Without `trust`, nothing is checked.
pub fn check_inline_signature(
    value: &Value,
    pointer: &str,
    atlas: &LoadedAtlas,
    trust: Option<&Trust>,
) -> Result<(), ApiError> {
    let Some(trust) = trust else {
        return Ok(());
    };
    let at = format!("{pointer}/signature");
    let Some(armored) = value.get("signature").and_then(Value::as_str) else {
        return Err(ApiError::field(
            Token::InvalidAtlas,
            at,
            format!(
                "this server takes only atlases signed by a trusted key: send `signature`, the armored SSH signature (namespace cra-atlas) over the atlas digest {} (`cra atlas sign`)",
                atlas.digest
            ),
        ));
    };
    trust
        .verify_digest(&atlas.digest, armored)
        .map(drop)
        .map_err(|e| {
            ApiError::field(
                Token::InvalidAtlas,
                at,
                format!(
                    "atlas {} {} (digest {}) is refused: {e}",
                    atlas.id(),
                    atlas.manifest.version,
                    atlas.digest
                ),
            )
        })
}

/// One generation: the source atlases, except those an installed atlas stands in for, then the
/// installed ones; compiled for evaluation.
fn compose(
    sources: Vec<PathBuf>,
    from_sources: Vec<LoadedAtlas>,
    posted: Vec<LoadedAtlas>,
) -> Result<AtlasState, String> {
    let posted_ids: BTreeSet<String> = posted.iter().map(|a| a.id().to_owned()).collect();
    let source_digests = from_sources
        .iter()
        .map(|a| (a.id().to_owned(), a.digest.clone()))
        .collect();
    let mut loaded: Vec<LoadedAtlas> = from_sources
        .into_iter()
        .filter(|a| !posted_ids.contains(a.id()))
        .collect();
    loaded.extend(posted);
    let set = AtlasSet::from_loaded(&loaded).map_err(|e| format!("atlases: {e}"))?;
    Ok(AtlasState {
        loaded,
        set: Arc::new(set),
        sources,
        posted: posted_ids,
        source_digests,
        generation: None,
    })
}

/// The files of an inline atlas `{"manifest": {...}, "files": {"context/x.md": "text", ...}}`:
/// the manifest becomes `atlas.json` (its compact JSON text), each file its UTF-8 bytes. The
/// shape, the paths (relative, printable ASCII, no `.`/`..` segments) and the size limits of a
/// directory load are checked here; `pointer` locates the object in the request body.
pub(crate) fn inline_files(
    value: &Value,
    pointer: &str,
) -> Result<BTreeMap<String, Vec<u8>>, ApiError> {
    let bad = |at: String, message: String| ApiError::field(Token::InvalidRequest, at, message);
    let obj = value.as_object().ok_or_else(|| {
        bad(
            pointer.to_owned(),
            format!(
                "an inline atlas is an object {{\"manifest\": {{...}}, \"files\": {{...}}}}, found {}",
                crate::extract::json_kind(value)
            ),
        )
    })?;
    for key in obj.keys() {
        if key != "manifest" && key != "files" && key != "signature" {
            let hint = if key == "path" {
                "a server does not read atlases from paths its callers name; send `manifest` and `files`"
            } else {
                "an inline atlas has only `manifest`, `files` and `signature`"
            };
            return Err(bad(
                format!("{pointer}/{}", escape_pointer_token(key)),
                format!("unknown member `{key}`: {hint}"),
            ));
        }
    }
    let manifest = obj.get("manifest").ok_or_else(|| {
        bad(
            format!("{pointer}/manifest"),
            "missing member `manifest` (the content of atlas.json)".to_owned(),
        )
    })?;
    if !manifest.is_object() {
        return Err(bad(
            format!("{pointer}/manifest"),
            format!(
                "the manifest is a JSON object, found {}",
                crate::extract::json_kind(manifest)
            ),
        ));
    }
    if let Some(sig) = obj.get("signature").filter(|s| !s.is_string()) {
        return Err(bad(
            format!("{pointer}/signature"),
            format!(
                "`signature` is the armored SSH signature text, found {}",
                crate::extract::json_kind(sig)
            ),
        ));
    }
    let limits = cra_atlas::load::Limits::default();
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    files.insert(
        cra_atlas::load::MANIFEST_FILE.to_owned(),
        manifest.to_string().into_bytes(),
    );
    let listed = match obj.get("files") {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(other) => {
            return Err(bad(
                format!("{pointer}/files"),
                format!(
                    "`files` maps relative paths to text, found {}",
                    crate::extract::json_kind(other)
                ),
            ));
        }
    };
    for (path, text) in listed.into_iter().flatten() {
        let at = format!("{pointer}/files/{}", escape_pointer_token(path));
        if path == cra_atlas::load::MANIFEST_FILE {
            return Err(bad(
                at,
                "atlas.json is given as `manifest`, not as a file".to_owned(),
            ));
        }
        if !cra_atlas::load::is_portable_path(path) || path.split('/').any(|s| s.starts_with('.')) {
            return Err(bad(
                at,
                format!(
                    "`{path}` is not a portable atlas path: relative, `/`-separated printable \
                     ASCII segments, none empty or starting with `.`"
                ),
            ));
        }
        let Some(text) = text.as_str() else {
            return Err(bad(
                at,
                format!(
                    "a file's content is a string, found {}",
                    crate::extract::json_kind(text)
                ),
            ));
        };
        if text.len() as u64 > limits.max_file_bytes {
            return Err(bad(
                at,
                format!("larger than {} bytes", limits.max_file_bytes),
            ));
        }
        total += text.len() as u64;
        files.insert(path.clone(), text.as_bytes().to_vec());
    }
    if files.len() > limits.max_files || total > limits.max_total_bytes {
        return Err(bad(
            format!("{pointer}/files"),
            format!(
                "an atlas holds at most {} files and {} bytes",
                limits.max_files, limits.max_total_bytes
            ),
        ));
    }
    Ok(files)
}

/// Validates an inline atlas exactly as a directory load of the same files
/// (`cra_carp::atlas_check::from_files`). A refusal is 400 (`invalid_request` for the shape,
/// `invalid_atlas` with one entry per error diagnostic, located in the request body).
pub fn load_inline(value: &Value, pointer: &str) -> Result<LoadedAtlas, ApiError> {
    let files = inline_files(value, pointer)?;
    let mut atlas = cra_carp::atlas_check::from_files(Path::new("(installed over HTTP)"), files)
        .map_err(|e| match e {
            LoadError::Invalid { diagnostics, .. } => invalid_atlas(&diagnostics, pointer),
            other => ApiError::new(Token::InvalidAtlas, other.to_string()),
        })?;
    // Kept with the atlas (and in the catalog) whether or not this server checks it.
    atlas.signature = value
        .get("signature")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(atlas)
}

/// The request-body pointer of a diagnostic: `atlas.json` is `{pointer}/manifest`, any other
/// file `{pointer}/files/<path>` (a pointer inside that file's text goes in the message).
pub(crate) fn diagnostic_pointer(d: &Diagnostic, pointer: &str) -> String {
    if d.file == cra_atlas::load::MANIFEST_FILE {
        format!("{pointer}/manifest{}", d.pointer)
    } else {
        format!("{pointer}/files/{}", escape_pointer_token(&d.file))
    }
}

/// 400 `invalid_atlas` listing every error diagnostic at its request-body pointer.
pub fn invalid_atlas(diagnostics: &[Diagnostic], pointer: &str) -> ApiError {
    let errors: Vec<FieldError> = diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| {
            let inside = if d.file != cra_atlas::load::MANIFEST_FILE && !d.pointer.is_empty() {
                format!(" (at {} in {})", d.pointer, d.file)
            } else {
                String::new()
            };
            FieldError::new(
                diagnostic_pointer(d, pointer),
                format!("{}: {}{inside}", d.code, d.message),
            )
        })
        .collect();
    let summary = match errors.first() {
        Some(first) if errors.len() == 1 => first.message.clone(),
        Some(first) => format!("{} (and {} more errors)", first.message, errors.len() - 1),
        None => "the atlas is invalid".to_owned(),
    };
    ApiError::new(
        Token::InvalidAtlas,
        format!("the atlas is invalid; fix it and send it again: {summary}"),
    )
    .with_errors(errors)
}

/// Every dependency of every atlas in `loaded` resolves inside `loaded` (as the registry checks
/// it); otherwise 400 `invalid_atlas` naming the unresolved dependencies. `pointer_of` locates an
/// installed atlas in the request body (`None`: the atlas came from a source).
fn check_dependencies(
    loaded: &[LoadedAtlas],
    pointer_of: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ApiError> {
    let registry = cra_atlas::Registry::new();
    match registry.insert_all(loaded.to_vec()) {
        Ok(_) => Ok(()),
        Err(cra_atlas::RegistryError::Dependencies {
            atlas_id,
            diagnostics,
        }) => {
            let at = pointer_of(&atlas_id).unwrap_or_default();
            let e = invalid_atlas(&diagnostics, &at);
            Err(ApiError::new(
                Token::InvalidAtlas,
                format!(
                    "atlas {atlas_id} depends on atlases not in force; install them first: {}",
                    e.body.message
                ),
            )
            .with_errors(e.body.details.map(|d| d.errors).unwrap_or_default()))
        }
        Err(other) => Err(ApiError::new(Token::InvalidAtlas, other.to_string())),
    }
}

/// What installing one atlas did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Installed {
    /// The atlas was not in force before.
    Added,
    /// It replaced the atlas with the same id: that atlas's version and digest.
    Replaced {
        /// The replaced version.
        version: String,
        /// The replaced digest.
        digest: String,
    },
    /// The identical atlas (same digest) was already in force: nothing changed.
    Unchanged,
}

/// A cheap fingerprint of the sources' files (paths, sizes, modification times), their
/// signature files included.
pub fn fingerprint(sources: &[PathBuf]) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut out = Vec::new();
    fn walk(p: &Path, out: &mut Vec<(PathBuf, u64, Option<SystemTime>)>) {
        if let Ok(md) = std::fs::metadata(p) {
            if md.is_dir() {
                if let Ok(rd) = std::fs::read_dir(p) {
                    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
                    entries.sort();
                    for e in entries {
                        walk(&e, out);
                    }
                }
            } else {
                out.push((p.to_path_buf(), md.len(), md.modified().ok()));
            }
        }
    }
    for s in sources {
        walk(s, &mut out);
        // An archive's signature sits beside it (a directory's is inside, walked above).
        if !s.is_dir() {
            walk(&cra_atlas::signing::signature_path(s), &mut out);
        }
    }
    out
}

/// A change of the atlas set: the generation it replaced and the one it swapped in.
#[derive(Debug, Clone)]
pub(crate) struct Swapped {
    before: Arc<AtlasState>,
    after: Arc<AtlasState>,
}

impl Swapped {
    /// The stored generation the change swapped in (`None` without a catalog).
    pub(crate) fn generation(&self) -> Option<u64> {
        self.after.generation
    }
}

impl Runtime {
    /// The keys atlases must be signed by (`[atlas_signing]`), read afresh (an `allowed_signers`
    /// edit applies at the next check); `None`: signing is not configured. A file that cannot be
    /// read now is an error, so the atlas being checked is refused (fail closed).
    pub fn atlas_trust(&self) -> Result<Option<Trust>, String> {
        self.config.atlas_signing.trust().map_err(|e| {
            format!("the trusted atlas signing keys cannot be read, so no atlas is taken in: {e}")
        })
    }

    /// The atlases in force now.
    pub fn atlases(&self) -> Arc<AtlasState> {
        self.atlas_state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Builds the next generation from the current one with `next`, commits it to the atlas
    /// catalog (when the server keeps one) as `actor` for `reason`, and swaps it in. When another
    /// change landed meanwhile, here or on another replica, `next` runs again on that one, so
    /// concurrent changes never lose each other. `next` answering `Ok(None)` changes nothing (no
    /// commit, no swap); a catalog failure is answered through `fail`, and nothing changes.
    fn change_atlases<T, E>(
        &self,
        actor: &str,
        reason: &str,
        next: impl Fn(&AtlasState) -> Result<(Option<AtlasState>, T), E>,
        fail: impl Fn(String) -> E,
    ) -> Result<(T, Option<Swapped>), E> {
        loop {
            let current = self.atlases();
            let (state, out) = next(&current)?;
            let Some(mut state) = state else {
                return Ok((out, None));
            };
            if let Some(store) = &self.atlas_catalog {
                let by = (actor, reason);
                match catalog::commit(store.as_ref(), current.generation, &state, by, false) {
                    Ok(n) => state.generation = Some(n),
                    Err(cra_store::catalog::CommitError::Stale { .. }) => {
                        self.refresh_atlases().map_err(&fail)?;
                        continue;
                    }
                    Err(e) => {
                        return Err(fail(format!(
                            "the atlas change could not be stored, and nothing changed: {e}"
                        )));
                    }
                }
            }
            if let Some(swap) = self.swap_in(&current, state) {
                return Ok((out, Some(swap)));
            }
        }
    }

    /// Swaps `state` in when `current` is still in force, or (a stored generation) when it is
    /// newer than the generation in force; answers the swap, or `None` when it was not made.
    fn swap_in(&self, current: &Arc<AtlasState>, state: AtlasState) -> Option<Swapped> {
        let mut guard = self.atlas_state.write().unwrap_or_else(|p| p.into_inner());
        let newer = match (state.generation, guard.generation) {
            (Some(n), Some(old)) => n > old,
            (Some(_), None) => true,
            (None, _) => Arc::ptr_eq(&guard, current),
        };
        if !newer {
            return None;
        }
        let after = Arc::new(state);
        let before = std::mem::replace(&mut *guard, after.clone());
        drop(guard);
        self.tool_lists_changed();
        Some(Swapped { before, after })
    }

    /// Reads the atlas catalog's newest generation and swaps it in when it is newer than the set
    /// in force (another replica's change); answers whether it did. Without a catalog, or when
    /// the generation cannot be used (the last good set stays; the reason is answered), nothing
    /// changes.
    pub fn refresh_atlases(&self) -> Result<bool, String> {
        let Some(store) = &self.atlas_catalog else {
            return Ok(false);
        };
        let Some(head) = store.head().map_err(|e| e.to_string())? else {
            return Ok(false);
        };
        let current = self.atlases();
        if current.generation.is_some_and(|g| g >= head.number) {
            return Ok(false);
        }
        let trust = self.atlas_trust()?;
        let state = catalog::state_of(store.as_ref(), &head, &current, trust.as_ref())?;
        let swapped = self.swap_in(&current, state).is_some();
        if swapped {
            tracing::info!(generation = head.number, actor = %head.actor, reason = %head.reason, "atlases changed in the catalog are now in force");
        }
        Ok(swapped)
    }

    /// Marks the stored generation `generation` recorded in the operator audit chain, once its
    /// events are appended (a failure is logged: the next start would record the change again).
    pub(crate) fn mark_atlases_recorded(&self, generation: Option<u64>) {
        let (Some(store), Some(n)) = (&self.atlas_catalog, generation) else {
            return;
        };
        if let Err(e) = store.mark_recorded(n) {
            tracing::warn!(error = %e, generation = n, "an atlas change was recorded but could not be marked so; the next start records it again");
        }
    }

    /// Undoes `swap`, a change whose event could not be recorded, when nothing has changed the
    /// set since (its generation is still in force; with a catalog, still its newest); returns
    /// whether it did. A change is never left in force unrecorded unless another change was
    /// built on it meanwhile.
    pub(crate) fn undo_atlas_change(&self, swap: &Swapped) -> bool {
        let mut before = (*swap.before).clone();
        if let Some(store) = &self.atlas_catalog {
            let actor = cra_store::retention::OPERATOR_AGENT;
            let by = (actor, "undo");
            match catalog::commit(store.as_ref(), swap.after.generation, &before, by, true) {
                Ok(n) => before.generation = Some(n),
                Err(_) => return false,
            }
        }
        let mut guard = self.atlas_state.write().unwrap_or_else(|p| p.into_inner());
        let in_force = Arc::ptr_eq(&guard, &swap.after);
        if in_force {
            *guard = Arc::new(before);
            drop(guard);
            self.tool_lists_changed();
        }
        in_force
    }

    /// Reloads every source; on success swaps the new set in atomically, on failure keeps the
    /// current one and returns the reason. Atlases installed over HTTP stay in force.
    pub fn reload_atlases(&self) -> Result<usize, String> {
        let actor = cra_store::retention::OPERATOR_AGENT;
        let result = self
            .change_atlases(
                actor,
                "watch",
                |current| {
                    let trust = self.atlas_trust()?;
                    let fresh = load_sources(&current.sources, trust.as_ref())?;
                    let posted: Vec<LoadedAtlas> = current
                        .loaded
                        .iter()
                        .filter(|a| current.posted.contains(a.id()))
                        .cloned()
                        .collect();
                    let state = resolved(compose(current.sources.clone(), fresh, posted)?)?;
                    let n = state.loaded.len();
                    Ok::<_, String>((Some(state), n))
                },
                |e| e,
            )
            .map(|(n, _)| n);
        match result {
            Ok(n) => {
                tracing::info!(atlases = n, "atlases reloaded");
                self.problem(crate::state::Problem::AtlasReload, None);
                Ok(n)
            }
            Err(e) => {
                self.metrics
                    .atlas_reload_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(error = %e, "atlas reload failed; the last good atlases stay in force");
                self.problem(crate::state::Problem::AtlasReload, Some(e.clone()));
                Err(e)
            }
        }
    }

    /// Installs one validated atlas: it joins the set in force, replacing the atlas with the same
    /// id at another version (whether it came from a source or over HTTP). Installing the
    /// identical atlas again changes nothing. Refused (nothing changes) when the same id and
    /// version are in force with other content (409 `atlas_version_conflict`: a published
    /// version never changes), when it would replace an atlas in force and `may_replace` is
    /// false (403 `forbidden`: `specs/http.md`, "Atlases over HTTP"), or when a dependency of
    /// the resulting set does not resolve. Answers the change made, if any, for
    /// [`Runtime::undo_atlas_change`].
    pub(crate) fn install_atlas(
        &self,
        actor: &str,
        atlas: LoadedAtlas,
        may_replace: bool,
    ) -> Result<(Installed, Option<Swapped>), ApiError> {
        let id = atlas.id().to_owned();
        let out = self.change_atlases(
            actor,
            "install",
            |current| {
                let installed = match current.get(&id) {
                    // The same atlas signed anew (a rotated key): only its signature is kept.
                    Some(old) if old.digest == atlas.digest && resigned(old, &atlas) => {
                        Installed::Unchanged
                    }
                    Some(old) if old.digest == atlas.digest => {
                        return Ok::<_, ApiError>((None, Installed::Unchanged));
                    }
                    Some(old) if old.manifest.version == atlas.manifest.version => {
                        return Err(version_conflict(old, &atlas));
                    }
                    Some(old) if !may_replace => return Err(replace_refused(old)),
                    Some(old) => Installed::Replaced {
                        version: old.manifest.version.clone(),
                        digest: old.digest.clone(),
                    },
                    None => Installed::Added,
                };
                let mut posted: Vec<LoadedAtlas> = current
                    .loaded
                    .iter()
                    .filter(|a| current.posted.contains(a.id()) && a.id() != id)
                    .cloned()
                    .collect();
                posted.push(atlas.clone());
                let from_sources: Vec<LoadedAtlas> = current
                    .loaded
                    .iter()
                    .filter(|a| !current.posted.contains(a.id()))
                    .cloned()
                    .collect();
                let mut state = compose(current.sources.clone(), from_sources, posted)
                    .map_err(|e| ApiError::new(Token::InvalidAtlas, e))?;
                state.source_digests = current.source_digests.clone();
                check_dependencies(&state.loaded, &|a| (a == id).then(String::new))?;
                Ok((Some(state), installed))
            },
            unavailable,
        )?;
        if out.0 != Installed::Unchanged {
            tracing::info!(atlas = %id, digest = %atlas.digest, "atlas installed over HTTP");
        }
        Ok(out)
    }

    /// Replaces the whole set in force with `atlases` (validated; distinct ids): the configured
    /// sources leave the set (and `--watch` has nothing left to reload) until the server
    /// restarts. Refused (nothing changes) when a dependency does not resolve inside the list.
    /// Answers the change, for [`Runtime::undo_atlas_change`].
    pub(crate) fn replace_atlases(
        &self,
        actor: &str,
        atlases: Vec<LoadedAtlas>,
    ) -> Result<Option<Swapped>, ApiError> {
        let index: BTreeMap<String, usize> = atlases
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id().to_owned(), i))
            .collect();
        let state = compose(Vec::new(), Vec::new(), atlases)
            .map_err(|e| ApiError::new(Token::InvalidAtlas, e))?;
        check_dependencies(&state.loaded, &|a| {
            index.get(a).map(|i| format!("/atlases/{i}"))
        })?;
        let ids: Vec<String> = state.loaded.iter().map(|a| a.id().to_owned()).collect();
        let next = |_: &AtlasState| Ok::<_, ApiError>((Some(state.clone()), ()));
        let ((), swap) = self.change_atlases(actor, "replace_set", next, unavailable)?;
        tracing::info!(atlases = ?ids, "atlas set replaced over HTTP");
        Ok(swap)
    }
}

/// Whether `atlas`, with the digest of `old`, comes with a signature `old` does not keep.
fn resigned(old: &LoadedAtlas, atlas: &LoadedAtlas) -> bool {
    atlas.signature.is_some() && atlas.signature != old.signature
}

/// 503 `unavailable` for an atlas change the catalog could not take (`message` says why).
fn unavailable(message: String) -> ApiError {
    ApiError::new(Token::Unavailable, message)
}

/// The refusal of an install that would replace `old`, in force, by an author who may not.
fn replace_refused(old: &LoadedAtlas) -> ApiError {
    ApiError::forbidden(format!(
        "atlas `{}` {} is in force: replacing it needs the operator role (or admin), or an atlas signed by a key the server trusts ([atlas_signing]); ask an operator to install it",
        old.id(),
        old.manifest.version
    ))
}

/// The refusal of `atlas` where `old`, the same id and version, is in force with other content.
fn version_conflict(old: &LoadedAtlas, atlas: &LoadedAtlas) -> ApiError {
    ApiError::field(
        Token::AtlasVersionConflict,
        "/manifest/version",
        format!(
            "atlas `{}` version {} is in force with digest {}, and this one has other content ({}); a published version never changes: raise the version, or replace the whole set with PUT /v1/atlases",
            atlas.id(),
            atlas.manifest.version,
            old.digest,
            atlas.digest
        ),
    )
}

/// Polls the sources once a second and reloads on change (for `--watch`); each reload's changes
/// (or its refusal) are recorded in the operator audit chain ([`Watcher::poll_recorded`]).
pub async fn watch(state: crate::state::AppState) {
    let mut watcher = Watcher::new(&state);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        watcher = watcher.poll_recorded(&state).await.0;
    }
}

/// What `--watch` remembers between polls: the sources' file names, sizes and modification
/// times when it last looked.
#[derive(Debug, Clone)]
pub struct Watcher {
    last: Vec<(PathBuf, u64, Option<SystemTime>)>,
}

impl Watcher {
    /// Starts from the sources as they are now.
    pub fn new(state: &Runtime) -> Self {
        Self {
            last: fingerprint(&state.atlases().sources),
        }
    }

    /// Looks once: `None` when nothing changed; otherwise reloads and returns the outcome (the
    /// number of atlases in force, or why the reload failed and the last good set stayed).
    pub fn poll(&mut self, state: &Runtime) -> Option<Result<usize, String>> {
        let now = fingerprint(&state.atlases().sources);
        if now == self.last {
            return None;
        }
        self.last = now;
        Some(state.reload_atlases())
    }

    /// One poll as the `--watch` task makes it: [`Watcher::poll`] on the blocking pool, then
    /// the reload's changes (or its refusal) recorded in the operator audit chain. Returns the
    /// watcher to poll with next (a fresh one if the poll panicked) and the poll's outcome.
    pub async fn poll_recorded(
        self,
        state: &crate::state::AppState,
    ) -> (Self, Option<Result<usize, String>>) {
        let before = state.atlas_summaries();
        let (s, mut w) = (state.clone(), self);
        let polled = tokio::task::spawn_blocking(move || {
            let outcome = w.poll(&s);
            (w, outcome)
        })
        .await;
        match polled {
            Ok((w, outcome)) => {
                if let Some(o) = &outcome {
                    crate::service::atlases::record_reload(&state.0, &before, o).await;
                }
                (w, outcome)
            }
            Err(_) => (Watcher::new(state), None),
        }
    }
}
