//! The fixture file format: one JSON file per case at
//! `conformance/fixtures/<suite>/<surface>/<ID>.json`, its loading and its filtering.
//!
//! A fixture is data only: `setup` is declarative state, `input` names one abstract verb
//! ([`crate::verbs::VERBS`]) with its `args`, and `expected` is a partial structural pattern
//! ([`crate::matcher`]). Loading checks everything the runner relies on (the id equals the file
//! name, the suite and surface equal the directories, the level belongs to the suite, the verb and
//! setup keys are known) so a malformed fixture is reported, never silently skipped.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::verbs;

/// One conformance case.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// Unique id; equals the file name without `.json`.
    pub id: String,
    /// `cra` or `relay`.
    pub suite: String,
    /// One of [`verbs::SURFACES`]; equals the parent directory.
    pub surface: String,
    /// The conformance level this case belongs to.
    pub level: String,
    /// What the case checks, for people.
    pub description: String,
    /// The normative statements it tests (`TRACE §4.4.1`, `Relay §7.3`, `errata: ...`).
    pub spec_refs: Vec<String>,
    /// Declarative state materialised before the operation.
    #[serde(default)]
    pub setup: Map<String, Value>,
    /// The operation performed.
    pub input: Input,
    /// The partial structural pattern the answer must match.
    pub expected: Value,
    /// Free-form remarks (for interop cases: how the case deviates from its source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Where the file was read from (not part of the format).
    #[serde(skip)]
    pub path: PathBuf,
}

/// The operation of a fixture (or of a setup step).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// One of [`verbs::VERBS`].
    pub operation: String,
    /// The verb's arguments.
    #[serde(default)]
    pub args: Value,
    /// When the operation happens, in seconds after `setup.now` (default 0). A target that cannot
    /// move its clock answers `not_implemented` for a non-zero value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_seconds: Option<i64>,
}

/// Why the fixture corpus could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}; check the --fixtures directory")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A fixture file is not a valid fixture.
    #[error("{path}: {message}; fix the fixture file")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Two files share an id.
    #[error("fixture id {id} is used by both {first} and {second}; ids must be unique")]
    DuplicateId {
        /// The id.
        id: String,
        /// One file.
        first: PathBuf,
        /// The other file.
        second: PathBuf,
    },
}

/// Selects fixtures by suite, level (a claimed level includes the levels below it) and surface.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this suite.
    pub suite: Option<String>,
    /// Only fixtures counted by this level.
    pub level: Option<String>,
    /// Only this surface.
    pub surface: Option<String>,
    /// Only ids starting with this prefix.
    pub id_prefix: Option<String>,
}

impl Filter {
    /// Whether `f` is selected.
    pub fn accepts(&self, f: &Fixture) -> bool {
        self.suite.as_ref().is_none_or(|s| *s == f.suite)
            && self
                .level
                .as_ref()
                .is_none_or(|l| verbs::level_covers(l, &f.level))
            && self.surface.as_ref().is_none_or(|s| *s == f.surface)
            && self
                .id_prefix
                .as_ref()
                .is_none_or(|p| f.id.starts_with(p.as_str()))
    }
}

/// Parses and checks one fixture file.
pub fn load_file(path: &Path) -> Result<Fixture, FixtureError> {
    let bytes = std::fs::read(path).map_err(|source| FixtureError::Io {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |message: String| FixtureError::Invalid {
        path: path.to_owned(),
        message,
    };
    let value = cra_wire::json::parse_strict(&bytes).map_err(|e| invalid(e.to_string()))?;
    let mut fixture: Fixture =
        serde_json::from_value(value).map_err(|e| invalid(format!("not a fixture: {e}")))?;
    fixture.path = path.to_owned();
    check(&fixture).map_err(invalid)?;
    Ok(fixture)
}

fn check(f: &Fixture) -> Result<(), String> {
    let stem = f
        .path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if stem != f.id {
        return Err(format!("id {:?} differs from the file name {stem:?}", f.id));
    }
    let surface_dir = dir_name(f.path.parent());
    let suite_dir = dir_name(f.path.parent().and_then(Path::parent));
    if surface_dir != f.surface || suite_dir != f.suite {
        return Err(format!(
            "suite/surface {}/{} differ from the directories {suite_dir}/{surface_dir}",
            f.suite, f.surface
        ));
    }
    if !verbs::SUITES.contains(&f.suite.as_str()) {
        return Err(format!("unknown suite {:?}", f.suite));
    }
    if !verbs::SURFACES.contains(&f.surface.as_str()) {
        return Err(format!("unknown surface {:?}", f.surface));
    }
    if verbs::suite_of_level(&f.level) != Some(f.suite.as_str()) {
        return Err(format!(
            "level {:?} is not a level of suite {:?}",
            f.level, f.suite
        ));
    }
    if f.spec_refs.is_empty() {
        return Err("spec_refs is empty: name the MUST this case tests".to_owned());
    }
    check_verb(&f.input.operation)?;
    for key in f.setup.keys() {
        if !verbs::SETUP_KEYS.contains(&key.as_str()) {
            return Err(format!("unknown setup key {key:?}"));
        }
    }
    if let Some(steps) = f.setup.get("steps") {
        let steps: Vec<Input> =
            serde_json::from_value(steps.clone()).map_err(|e| format!("setup.steps: {e}"))?;
        for s in &steps {
            check_verb(&s.operation)?;
        }
    }
    Ok(())
}

fn check_verb(op: &str) -> Result<(), String> {
    if verbs::VERBS.contains(&op) {
        Ok(())
    } else {
        Err(format!("unknown operation {op:?}"))
    }
}

fn dir_name(p: Option<&Path>) -> String {
    p.and_then(Path::file_name)
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned()
}

/// Loads every `*.json` under `root` (the `conformance/fixtures` directory), sorted by id.
pub fn load_dir(root: &Path) -> Result<Vec<Fixture>, FixtureError> {
    let mut out: Vec<Fixture> = Vec::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.map_err(|e| FixtureError::Io {
            path: e
                .path()
                .map(Path::to_owned)
                .unwrap_or_else(|| root.to_owned()),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("directory walk failed")),
        })?;
        let p = entry.path();
        if entry.file_type().is_file() && p.extension().is_some_and(|e| e == "json") {
            // Data files of a case (atlases, vectors) live under `data/` directories.
            if p.strip_prefix(root)
                .unwrap_or(p)
                .components()
                .any(|c| c.as_os_str() == "data")
            {
                continue;
            }
            out.push(load_file(p)?);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    for pair in out.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(FixtureError::DuplicateId {
                id: pair[0].id.clone(),
                first: pair[0].path.clone(),
                second: pair[1].path.clone(),
            });
        }
    }
    Ok(out)
}
