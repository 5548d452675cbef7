//! The atlases in force as the store keeps them (`cra_store::catalog`): the one source of truth
//! for every replica sharing a PostgreSQL schema, and what survives a restart on either backend.
//!
//! - Every change of the set in force ([`super::Runtime::install_atlas`], the whole set
//!   replaced, a `--watch` reload) is committed as the catalog's next generation before it is
//!   swapped in here; a change built on a generation another replica has since replaced is built
//!   again on the newest one.
//! - A replica hears of another's generation on the feed (`crate::replicas`) and reads it
//!   ([`super::Runtime::refresh_atlases`]): the atlases it already holds (same digest) are
//!   reused, the others are read from the store, validated as any atlas is, and checked against
//!   their digest.
//! - At start ([`open`]) the directory atlases are loaded into the catalog. One whose id and
//!   version are stored with other content fails the start unless `--replace-atlases` is given
//!   (a published version never changes); one with another version replaces the stored one.
//!   Stored atlases no directory holds stay in force.
//! - A change is committed first and recorded in the operator audit chain after, then marked
//!   recorded in the catalog. A crash in between leaves the newest generation unrecorded: the
//!   next start records the change from the last recorded generation to the newest
//!   (`crate::service::atlases::record_unrecorded`). Recording is at least once: two replicas
//!   starting together, or one starting while another's change is between its commit and its
//!   mark, may both record it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cra_atlas::LoadedAtlas;
use cra_store::AtlasCatalog;
use cra_store::catalog::{CatalogChange, CatalogEntry, CommitError, Generation};

use cra_atlas::signing::Trust;

use super::{AtlasState, SourceError, check_kept, compose, load_sources, resolved};

/// How many times a start builds its change again when other replicas keep committing first.
const START_ATTEMPTS: usize = 20;

/// The catalog members of `state`.
pub(crate) fn members(state: &AtlasState) -> Vec<CatalogEntry> {
    let mut m: Vec<CatalogEntry> = state
        .loaded
        .iter()
        .map(|a| CatalogEntry {
            atlas_id: a.id().to_owned(),
            version: a.manifest.version.clone(),
            digest: a.digest.clone(),
            signature: a.signature.clone(),
        })
        .collect();
    m.sort();
    m
}

/// Commits `state` as the generation after `after`, with the files of each of its atlases (the
/// store keeps those it already holds); answers the generation's number. `recorded`: the change
/// needs no event (see [`CatalogChange::recorded`]).
pub(crate) fn commit(
    catalog: &dyn AtlasCatalog,
    after: Option<u64>,
    state: &AtlasState,
    (actor, reason): (&str, &str),
    recorded: bool,
) -> Result<u64, CommitError> {
    let files: BTreeMap<String, &BTreeMap<String, Vec<u8>>> = state
        .loaded
        .iter()
        .map(|a| (a.digest.clone(), &a.files))
        .collect();
    catalog.commit(&CatalogChange {
        after,
        members: &members(state),
        files: &files,
        actor,
        reason,
        recorded,
    })
}

/// The atlas of `entry`: the one of `known` with its digest, or its files read from the store,
/// validated and checked against the digest.
fn atlas_of(
    catalog: &dyn AtlasCatalog,
    generation: u64,
    entry: &CatalogEntry,
    known: &[LoadedAtlas],
) -> Result<LoadedAtlas, String> {
    if let Some(a) = known.iter().find(|a| a.digest == entry.digest) {
        let mut a = a.clone();
        a.signature.clone_from(&entry.signature);
        return Ok(a);
    }
    let files = catalog
        .files(&entry.digest)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "the atlas catalog's generation {generation} names atlas {} {} ({}), whose files are not stored; restore the catalog from a backup",
                entry.atlas_id, entry.version, entry.digest
            )
        })?;
    let source = PathBuf::from(format!("(atlas catalog: {})", entry.atlas_id));
    let mut atlas = cra_carp::atlas_check::from_files(&source, files).map_err(|e| {
        format!(
            "the stored atlas {} {} does not load with this build: {e}",
            entry.atlas_id, entry.version
        )
    })?;
    if atlas.digest != entry.digest || atlas.id() != entry.atlas_id {
        return Err(format!(
            "the stored files of atlas {} {} hash to {}, not {}: the catalog is damaged; restore it from a backup",
            entry.atlas_id, entry.version, atlas.digest, entry.digest
        ));
    }
    atlas.signature.clone_from(&entry.signature);
    Ok(atlas)
}

/// The state of `generation`: its atlases (reusing `base`'s with the same digest), those the
/// sources of `base` loaded first in `base`'s order, then the others by id; every dependency
/// resolved. With `trust`, each atlas not from `base`'s sources must keep a signature by a
/// trusted key (another replica may have taken it in while trusting none).
pub(crate) fn state_of(
    catalog: &dyn AtlasCatalog,
    generation: &Generation,
    base: &AtlasState,
    trust: Option<&Trust>,
) -> Result<AtlasState, String> {
    let mut atlases = Vec::with_capacity(generation.members.len());
    for entry in &generation.members {
        atlases.push(atlas_of(catalog, generation.number, entry, &base.loaded)?);
    }
    let is_source = |a: &LoadedAtlas| base.source_digests.get(a.id()) == Some(&a.digest);
    let (mut from_sources, posted): (Vec<LoadedAtlas>, Vec<LoadedAtlas>) =
        atlases.into_iter().partition(is_source);
    check_kept(&posted, trust)?;
    let place = |a: &LoadedAtlas| base.loaded.iter().position(|b| b.id() == a.id());
    from_sources.sort_by_key(place);
    let mut state = resolved(compose(base.sources.clone(), from_sources, posted)?)
        .map_err(|e| format!("the atlas catalog's generation {}: {e}", generation.number))?;
    state.source_digests = base.source_digests.clone();
    state.generation = Some(generation.number);
    Ok(state)
}

/// The atlases in force at start: the catalog's newest generation with the atlases of
/// `sources` loaded into it (module documentation). With `trust`, every atlas in force must be
/// signed by a trusted key: a source by its signature file, an atlas the catalog keeps (no
/// source stands in for it) by the signature kept with it; the first that is not fails the
/// start, named. `replace` lets a source atlas replace a stored one with the same id and
/// version and other content.
pub(crate) fn open(
    catalog: &dyn AtlasCatalog,
    sources: &[PathBuf],
    replace: bool,
    actor: &str,
    trust: Option<&cra_atlas::signing::Trust>,
) -> Result<AtlasState, SourceError> {
    let from_sources = load_sources(sources, trust)?;
    let source_digests: BTreeMap<String, String> = from_sources
        .iter()
        .map(|a| (a.id().to_owned(), a.digest.clone()))
        .collect();
    for _ in 0..START_ATTEMPTS {
        let head = catalog.head().map_err(|e| e.to_string())?;
        let stored = match &head {
            Some(g) => state_of(catalog, g, &AtlasState::empty(), None)?.loaded,
            None => Vec::new(),
        };
        check_versions(&stored, &from_sources, replace)?;
        let kept: Vec<LoadedAtlas> = stored
            .iter()
            .filter(|a| !source_digests.contains_key(a.id()))
            .cloned()
            .collect();
        check_kept(&kept, trust)?;
        let mut state = resolved(compose(sources.to_vec(), from_sources.clone(), kept)?)?;
        state.source_digests = source_digests.clone();
        let number = head.as_ref().map(|g| g.number);
        let unchanged = match &head {
            Some(g) => g.members == members(&state),
            None => state.loaded.is_empty(),
        };
        if unchanged {
            state.generation = number;
            return Ok(state);
        }
        // A deployment's first set is its configuration, not a change to record.
        match commit(catalog, number, &state, (actor, "start"), head.is_none()) {
            Ok(n) => {
                state.generation = Some(n);
                return Ok(state);
            }
            Err(CommitError::Stale { .. }) => continue,
            Err(e) => return Err(format!("storing the atlases failed: {e}").into()),
        }
    }
    Err(SourceError::Other(format!(
        "the atlas catalog kept changing while this replica started ({START_ATTEMPTS} attempts); start it again"
    )))
}

/// Refuses a source atlas whose id and version are stored with other content, unless `replace`.
fn check_versions(
    stored: &[LoadedAtlas],
    from_sources: &[LoadedAtlas],
    replace: bool,
) -> Result<(), String> {
    for s in from_sources {
        let clash = stored.iter().find(|a| {
            a.id() == s.id() && a.manifest.version == s.manifest.version && a.digest != s.digest
        });
        if let (Some(old), false) = (clash, replace) {
            return Err(format!(
                "atlas {} {} from {} differs from the one stored with that version ({} stored, {} here); a published version never changes: raise the version in atlas.json, or start with --replace-atlases to replace the stored one",
                s.id(),
                s.manifest.version,
                display(&s.source),
                old.digest,
                s.digest
            ));
        }
    }
    Ok(())
}

fn display(p: &Path) -> String {
    p.display().to_string()
}
