//! Helpers shared by the test modules: fixture paths, atlas loading, fixed clocks and ids.

use std::path::{Path, PathBuf};

use cra_carp::index::AtlasSet;
use cra_wire::SequentialIds;
use serde_json::Value;
use time::OffsetDateTime;

/// `tests/fixtures/<rel>`.
pub(crate) fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Reads a fixture as JSON.
pub(crate) fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Loads atlas directories and compiles them into a set.
pub(crate) fn atlas_set(dirs: &[PathBuf]) -> AtlasSet {
    let loaded: Vec<_> = dirs
        .iter()
        .map(|d| cra_atlas::load_dir(d).unwrap_or_else(|e| panic!("{}: {e}", d.display())))
        .collect();
    AtlasSet::from_loaded(&loaded).unwrap()
}

/// An RFC 3339 instant.
pub(crate) fn at(s: &str) -> OffsetDateTime {
    cra_wire::clock::parse_rfc3339(s).unwrap()
}

/// Deterministic ids.
pub(crate) fn ids() -> SequentialIds {
    SequentialIds::new(1_735_387_200_000, 1)
}
