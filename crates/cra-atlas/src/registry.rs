//! The registry of loaded atlases: many atlases, many versions each, thread-safe.
//!
//! * [`Registry::insert`] adds an atlas after resolving its dependencies against what is loaded
//!   (a missing or unsatisfiable dependency names both atlases and the range); two atlases with
//!   one id and version is an error (errata) unless they are byte-identical (same digest).
//! * [`Registry::resolve`] answers "which version of this atlas satisfies this range": the highest
//!   loaded version matching the Cargo-style semver requirement (`^1.2`, `~1.2.3`, `>=1, <2`, `*`).
//! * [`Registry::reload`] swaps an atlas atomically: the replacement is loaded and validated
//!   first, then exchanged under the write lock; when anything fails the old atlas stays in force.
//!
//! Readers get `Arc<LoadedAtlas>` snapshots: an evaluation that started with one version keeps
//! it even if a reload happens meanwhile.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use semver::{Version, VersionReq};

use crate::diag::{Diagnostic, push_pointer};
use crate::load::{self, LoadError, LoadedAtlas, MANIFEST_FILE};

type Table = BTreeMap<String, BTreeMap<Version, Arc<LoadedAtlas>>>;

/// Why the registry refused an operation.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Loading or validating the atlas failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The atlas's version does not parse (validation normally prevents this).
    #[error("atlas {atlas_id} has version `{version}`, which is not semver 2.0.0")]
    BadVersion {
        /// The atlas.
        atlas_id: String,
        /// The version text.
        version: String,
    },
    /// Another atlas with the same id and version, and different content, is loaded.
    #[error(
        "atlas {atlas_id} {version} is already loaded with different content (digest {existing}): \
         bump the version, or reload it from its source"
    )]
    Duplicate {
        /// The atlas.
        atlas_id: String,
        /// The version.
        version: String,
        /// Digest of the loaded one.
        existing: String,
    },
    /// One or more dependencies are missing or unsatisfied.
    #[error("atlas {atlas_id} has unresolved dependencies: {}", join(diagnostics))]
    Dependencies {
        /// The atlas.
        atlas_id: String,
        /// One diagnostic per unresolved dependency.
        diagnostics: Vec<Diagnostic>,
    },
    /// No atlas with this id, or no version satisfying the range.
    #[error("{0}")]
    NotFound(String),
    /// The range does not parse.
    #[error("`{range}` is not a semver range: {message}")]
    BadRange {
        /// The text.
        range: String,
        /// Why.
        message: String,
    },
    /// A previous panic poisoned the lock.
    #[error("the atlas registry lock is poisoned: restart the process")]
    Poisoned,
}

fn join(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| d.message.clone())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Many atlases and versions (module documentation).
#[derive(Debug, Default)]
pub struct Registry {
    table: RwLock<Table>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, Table>, RegistryError> {
        self.table.read().map_err(|_| RegistryError::Poisoned)
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, Table>, RegistryError> {
        self.table.write().map_err(|_| RegistryError::Poisoned)
    }

    /// Adds an atlas (module documentation). Adding the identical atlas again is a no-op.
    pub fn insert(&self, atlas: LoadedAtlas) -> Result<Arc<LoadedAtlas>, RegistryError> {
        let version = parse_version(&atlas)?;
        let mut table = self.write()?;
        if let Some(existing) = table.get(atlas.id()).and_then(|v| v.get(&version)) {
            if existing.digest == atlas.digest {
                return Ok(existing.clone());
            }
            return Err(RegistryError::Duplicate {
                atlas_id: atlas.id().to_owned(),
                version: version.to_string(),
                existing: existing.digest.clone(),
            });
        }
        check_in(&table, &atlas)?;
        let atlas = Arc::new(atlas);
        table
            .entry(atlas.id().to_owned())
            .or_default()
            .insert(version, atlas.clone());
        Ok(atlas)
    }

    /// Inserts several atlases in dependency order (an atlas may depend
    /// on one listed after it). Returns the first failure.
    pub fn insert_all(
        &self,
        atlases: Vec<LoadedAtlas>,
    ) -> Result<Vec<Arc<LoadedAtlas>>, RegistryError> {
        let mut pending = atlases;
        let mut done = Vec::new();
        loop {
            let before = pending.len();
            let mut rest = Vec::new();
            let mut last_err = None;
            for atlas in pending {
                match self.insert(atlas.clone()) {
                    Ok(a) => done.push(a),
                    Err(e @ RegistryError::Dependencies { .. }) => {
                        last_err = Some(e);
                        rest.push(atlas);
                    }
                    Err(e) => return Err(e),
                }
            }
            if rest.is_empty() {
                return Ok(done);
            }
            if rest.len() == before {
                return Err(last_err.unwrap_or(RegistryError::Poisoned));
            }
            pending = rest;
        }
    }

    /// Re-reads the atlas at `path` and swaps it in for the version loaded from the same source
    /// (or for the same id and version); on any failure the registry is unchanged.
    pub fn reload(&self, path: &Path) -> Result<Arc<LoadedAtlas>, RegistryError> {
        let fresh = load::load(path)?;
        self.replace(fresh)
    }

    /// Swaps `fresh` in (see [`Registry::reload`]), atomically with respect to readers.
    pub fn replace(&self, fresh: LoadedAtlas) -> Result<Arc<LoadedAtlas>, RegistryError> {
        let version = parse_version(&fresh)?;
        let mut table = self.write()?;
        // Work on a copy of this id's versions; commit it only when everything passed.
        let mut versions = table.get(fresh.id()).cloned().unwrap_or_default();
        versions.retain(|v, a| a.source != fresh.source && *v != version);
        check_in(&table, &fresh)?;
        let fresh = Arc::new(fresh);
        versions.insert(version, fresh.clone());
        table.insert(fresh.id().to_owned(), versions);
        Ok(fresh)
    }

    /// Removes one version; returns it.
    pub fn remove(
        &self,
        atlas_id: &str,
        version: &Version,
    ) -> Result<Option<Arc<LoadedAtlas>>, RegistryError> {
        let mut table = self.write()?;
        let removed = table.get_mut(atlas_id).and_then(|v| v.remove(version));
        if table.get(atlas_id).is_some_and(BTreeMap::is_empty) {
            table.remove(atlas_id);
        }
        Ok(removed)
    }

    /// The exact version.
    pub fn get(&self, atlas_id: &str, version: &Version) -> Option<Arc<LoadedAtlas>> {
        self.read().ok()?.get(atlas_id)?.get(version).cloned()
    }

    /// The highest loaded version of an atlas.
    pub fn latest(&self, atlas_id: &str) -> Option<Arc<LoadedAtlas>> {
        self.read()
            .ok()?
            .get(atlas_id)?
            .last_key_value()
            .map(|(_, a)| a.clone())
    }

    /// The highest loaded version of `atlas_id` satisfying `range`.
    pub fn resolve(&self, atlas_id: &str, range: &str) -> Result<Arc<LoadedAtlas>, RegistryError> {
        let req = VersionReq::parse(range).map_err(|e| RegistryError::BadRange {
            range: range.to_owned(),
            message: e.to_string(),
        })?;
        let table = self.read()?;
        let versions = table
            .get(atlas_id)
            .ok_or_else(|| RegistryError::NotFound(format!("no atlas {atlas_id} is loaded")))?;
        versions
            .iter()
            .rev()
            .find(|(v, _)| req.matches(v))
            .map(|(_, a)| a.clone())
            .ok_or_else(|| {
                RegistryError::NotFound(format!(
                    "no loaded version of {atlas_id} satisfies `{range}` (loaded: {})",
                    list_versions(versions)
                ))
            })
    }

    /// The highest version of every loaded atlas, by id.
    pub fn latest_all(&self) -> Vec<Arc<LoadedAtlas>> {
        self.read()
            .map(|t| {
                t.values()
                    .filter_map(|v| v.last_key_value().map(|(_, a)| a.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every loaded atlas version, by id then version.
    pub fn all(&self) -> Vec<Arc<LoadedAtlas>> {
        self.read()
            .map(|t| t.values().flat_map(|v| v.values().cloned()).collect())
            .unwrap_or_default()
    }

    /// Dependency diagnostics for `atlas` against the current contents (empty when all resolve).
    pub fn dependency_diagnostics(&self, atlas: &LoadedAtlas) -> Vec<Diagnostic> {
        match self.read() {
            Ok(t) => dependency_diagnostics(&t, atlas),
            Err(_) => Vec::new(),
        }
    }
}

fn parse_version(atlas: &LoadedAtlas) -> Result<Version, RegistryError> {
    atlas.version().ok_or_else(|| RegistryError::BadVersion {
        atlas_id: atlas.id().to_owned(),
        version: atlas.manifest.version.clone(),
    })
}

fn list_versions(versions: &BTreeMap<Version, Arc<LoadedAtlas>>) -> String {
    if versions.is_empty() {
        return "none".to_owned();
    }
    versions
        .keys()
        .map(Version::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_in(table: &Table, atlas: &LoadedAtlas) -> Result<(), RegistryError> {
    let diagnostics = dependency_diagnostics(table, atlas);
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(RegistryError::Dependencies {
            atlas_id: atlas.id().to_owned(),
            diagnostics,
        })
    }
}

fn dependency_diagnostics(table: &Table, atlas: &LoadedAtlas) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let me = format!("{} {}", atlas.id(), atlas.manifest.version);
    for (dep, range) in &atlas.manifest.dependencies {
        let pointer = push_pointer("/dependencies", dep);
        let Ok(req) = VersionReq::parse(range) else {
            out.push(Diagnostic::error(
                "invalid_range",
                MANIFEST_FILE,
                pointer,
                format!("atlas {me} depends on {dep} `{range}`, which is not a semver range"),
            ));
            continue;
        };
        match table.get(dep) {
            None => out.push(Diagnostic::error(
                "dependency_missing",
                MANIFEST_FILE,
                pointer,
                format!(
                    "atlas {me} depends on {dep} `{range}`, but no atlas {dep} is loaded: load it \
                     alongside (e.g. `cra atlas check --with DIR`)"
                ),
            )),
            Some(versions) if !versions.keys().any(|v| req.matches(v)) => {
                out.push(Diagnostic::error(
                    "dependency_unsatisfied",
                    MANIFEST_FILE,
                    pointer,
                    format!(
                        "atlas {me} depends on {dep} `{range}`, but the loaded versions of {dep} \
                         ({}) do not satisfy it",
                        list_versions(versions)
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    let text = atlas
        .files
        .get(MANIFEST_FILE)
        .and_then(|b| std::str::from_utf8(b).ok());
    for d in &mut out {
        d.line = text.and_then(|t| crate::diag::line_of_pointer(t, &d.pointer));
    }
    out
}
