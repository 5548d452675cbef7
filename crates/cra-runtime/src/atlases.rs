//! The atlases in force: loaded at start (the `--atlas` paths, or every atlas under `./atlases`),
//! compiled once for CARP evaluation, swapped atomically on reload. A reload that fails keeps the
//! last good set and is reported (log line + `cra_atlas_reload_failures_total`). `--watch` polls
//! the sources' file metadata once a second and reloads when it changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use cra_atlas::LoadedAtlas;
use cra_carp::index::AtlasSet;

use crate::state::Runtime;

/// One consistent generation of atlases.
#[derive(Debug)]
pub struct AtlasState {
    /// As loaded (manifests, files, digests).
    pub loaded: Vec<LoadedAtlas>,
    /// Compiled for evaluation.
    pub set: Arc<AtlasSet>,
    /// Where they came from.
    pub sources: Vec<PathBuf>,
}

impl AtlasState {
    /// No atlases.
    pub fn empty() -> Self {
        Self {
            loaded: Vec::new(),
            set: Arc::new(AtlasSet::default()),
            sources: Vec::new(),
        }
    }

    /// `atlas_id -> digest` of every atlas in force.
    pub fn digests(&self) -> std::collections::BTreeMap<String, String> {
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

/// Loads and compiles every source; any failure names the atlas and what is wrong.
pub fn load_all(sources: &[PathBuf]) -> Result<AtlasState, String> {
    let mut loaded = Vec::with_capacity(sources.len());
    for p in sources {
        let a = cra_atlas::load(p).map_err(|e| format!("atlas {}: {e}", p.display()))?;
        loaded.push(a);
    }
    let set = AtlasSet::from_loaded(&loaded).map_err(|e| format!("atlases: {e}"))?;
    Ok(AtlasState {
        loaded,
        set: Arc::new(set),
        sources: sources.to_vec(),
    })
}

/// A cheap fingerprint of the sources' files (paths, sizes, modification times).
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
    }
    out
}

impl Runtime {
    /// The atlases in force now.
    pub fn atlases(&self) -> Arc<AtlasState> {
        self.atlas_state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reloads every source; on success swaps the new set in atomically, on failure keeps the
    /// current one and returns the reason.
    pub fn reload_atlases(&self) -> Result<usize, String> {
        let sources = self.atlases().sources.clone();
        match load_all(&sources) {
            Ok(state) => {
                let n = state.loaded.len();
                *self.atlas_state.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(state);
                tracing::info!(atlases = n, "atlases reloaded");
                Ok(n)
            }
            Err(e) => {
                self.metrics
                    .atlas_reload_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(error = %e, "atlas reload failed; the last good atlases stay in force");
                Err(e)
            }
        }
    }
}

/// Polls the sources once a second and reloads on change (for `--watch`).
pub async fn watch(state: crate::state::AppState) {
    let mut last = fingerprint(&state.atlases().sources);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        let sources = state.atlases().sources.clone();
        let now = tokio::task::spawn_blocking(move || fingerprint(&sources))
            .await
            .unwrap_or_default();
        if now != last {
            last = now;
            let s = state.clone();
            let _ = tokio::task::spawn_blocking(move || s.reload_atlases()).await;
        }
    }
}
