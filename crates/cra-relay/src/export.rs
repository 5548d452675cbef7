//! Export and import (§10.3): one NDJSON file per record type plus `manifest.json`, written last
//! (its presence means the export completed).
//!
//! * `projects.ndjson` (by id), `packages.ndjson` (wire form with `content_hash`, by project then
//!   deposit order), `facts.ndjson` (every row of the full history, wire form plus
//!   `x-cra-recorded_at` / `x-cra-superseded_at`), `sessions.ndjson` (by id), `reviews.ndjson`
//!   (review records by package, time).
//! * Every line is compact JSON with keys in UTF-8 byte order (nulls kept, numbers as stored), so
//!   two exports of the same data are byte-identical; the manifest carries each file's record count and SHA-256 and no timestamp.
//! * Import checks everything before writing anything: every package against its content hash
//!   (a tampered package is named), every file against the manifest digest, then restores into an
//!   empty store in one transaction.
//!
//! Quarantined packages are not exported (their bytes no longer match their hash); the manifest
//! lists their ids under `quarantined`.

use std::path::Path;

use cra_wire::hash::sha256_hex;
use serde_json::{Map, Value, json};

use crate::fact::{Fact, FactRecord};
use crate::model::{Project, ReviewRecord, Session, StoredPackage};
use crate::store::{RelayStore, RelayStoreError, Snapshot};

/// The manifest's `format` value.
pub const EXPORT_FORMAT: &str = "cra-relay-export/1";
/// The record files, in manifest order.
pub const FILES: [&str; 5] = [
    "projects.ndjson",
    "packages.ndjson",
    "facts.ndjson",
    "sessions.ndjson",
    "reviews.ndjson",
];
/// The manifest file name.
pub const MANIFEST: &str = "manifest.json";

const RECORDED_AT: &str = "x-cra-recorded_at";
const SUPERSEDED_AT: &str = "x-cra-superseded_at";

/// Why an export or import failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The directory has no manifest: the export did not complete.
    #[error(
        "{0} has no manifest.json: the export is incomplete or this is not an export directory"
    )]
    Incomplete(String),
    /// A record could not be read.
    #[error("{file} line {line}: {message}")]
    BadRecord {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A package's content no longer matches its hash.
    #[error(
        "package {package_id} ({file} line {line}) was tampered with: content_hash {stored} but the content hashes to {recomputed}; nothing was imported"
    )]
    TamperedPackage {
        /// The package.
        package_id: String,
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// The hash in the record.
        stored: String,
        /// The hash of its content.
        recomputed: String,
    },
    /// A file does not match the manifest digest.
    #[error(
        "{file} does not match the manifest (sha256 {actual}, manifest says {expected}); nothing was imported"
    )]
    TamperedFile {
        /// The file.
        file: String,
        /// The manifest's digest.
        expected: String,
        /// The file's digest.
        actual: String,
    },
    /// The store refused.
    #[error("the store refused the import: {0}")]
    Store(#[from] RelayStoreError),
}

impl ExportError {
    /// The wire error token: a tampered package or file is `integrity_error` (409), an
    /// unreadable or incomplete export `invalid_request` (400), a non-empty target store
    /// `already_exists` (409), a failing store `unavailable` (503), a file system failure
    /// `internal_error` (500).
    pub fn token(&self) -> cra_wire::Token {
        use cra_wire::Token;
        match self {
            ExportError::TamperedPackage { .. } | ExportError::TamperedFile { .. } => {
                Token::IntegrityError
            }
            ExportError::Incomplete(_) | ExportError::BadRecord { .. } => Token::InvalidRequest,
            ExportError::Store(RelayStoreError::AlreadyExists(_)) => Token::AlreadyExists,
            ExportError::Store(_) => Token::Unavailable,
            ExportError::Io { .. } => Token::InternalError,
        }
    }

    /// The wire error body.
    pub fn to_body(&self) -> cra_wire::ErrorBody {
        cra_wire::ErrorBody::new(self.token(), self.to_string())
    }
}

/// Reviews in export order.
pub fn sort_reviews(mut reviews: Vec<ReviewRecord>) -> Vec<ReviewRecord> {
    // Stable: records written in the same instant keep their write order.
    reviews.sort_by(|a, b| (&a.package_id, &a.at).cmp(&(&b.package_id, &b.at)));
    reviews
}

fn line(v: &Value) -> Result<String, RelayStoreError> {
    let mut out = String::new();
    write_sorted(v, &mut out)?;
    Ok(out)
}

/// Compact JSON with object keys in UTF-8 byte order, `null` members kept (unlike the canonical
/// form, so a package's explicit nulls survive the round trip) and numbers exactly as stored.
fn write_sorted(v: &Value, out: &mut String) -> Result<(), RelayStoreError> {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&scalar(&Value::String(k.clone()))?);
                out.push(':');
                write_sorted(&map[k], out)?;
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_sorted(item, out)?;
            }
            out.push(']');
        }
        other => out.push_str(&scalar(other)?),
    }
    Ok(())
}

fn scalar(v: &Value) -> Result<String, RelayStoreError> {
    serde_json::to_string(v).map_err(|e| RelayStoreError::Backend(e.to_string()))
}

fn to_value<T: serde::Serialize>(t: &T) -> Result<Value, RelayStoreError> {
    serde_json::to_value(t).map_err(|e| RelayStoreError::Backend(e.to_string()))
}

fn fact_line(r: &FactRecord) -> Result<Value, RelayStoreError> {
    let mut v = to_value(&r.fact)?;
    if let Some(o) = v.as_object_mut() {
        o.insert(RECORDED_AT.into(), Value::String(r.recorded_at.clone()));
        if let Some(s) = &r.superseded_at {
            o.insert(SUPERSEDED_AT.into(), Value::String(s.clone()));
        }
    }
    Ok(v)
}

/// The export files of a snapshot, manifest last: `(file name, bytes)`. Pure and deterministic.
pub fn render(snapshot: &Snapshot) -> Result<Vec<(String, Vec<u8>)>, RelayStoreError> {
    let mut bodies: Vec<(String, String, usize)> = Vec::new();
    let mut add = |name: &str, values: Vec<Value>| -> Result<(), RelayStoreError> {
        let mut s = String::new();
        for v in &values {
            s.push_str(&line(v)?);
            s.push('\n');
        }
        bodies.push((name.to_owned(), s, values.len()));
        Ok(())
    };
    add(
        FILES[0],
        snapshot
            .projects
            .iter()
            .map(to_value)
            .collect::<Result<_, _>>()?,
    )?;
    let mut quarantined = Vec::new();
    let mut packages = Vec::new();
    for p in &snapshot.packages {
        if p.quarantined.is_some() {
            quarantined.push(Value::String(p.package.package_id().to_owned()));
        } else {
            packages.push(p.to_wire());
        }
    }
    add(FILES[1], packages)?;
    add(
        FILES[2],
        snapshot
            .facts
            .iter()
            .map(fact_line)
            .collect::<Result<_, _>>()?,
    )?;
    add(
        FILES[3],
        snapshot
            .sessions
            .iter()
            .map(to_value)
            .collect::<Result<_, _>>()?,
    )?;
    add(
        FILES[4],
        snapshot
            .reviews
            .iter()
            .map(to_value)
            .collect::<Result<_, _>>()?,
    )?;
    let mut files = Map::new();
    for (name, body, n) in &bodies {
        files.insert(
            name.clone(),
            json!({"records": n, "sha256": sha256_hex(body.as_bytes())}),
        );
    }
    let manifest = json!({
        "format": EXPORT_FORMAT,
        "relay_version": crate::model::RELAY_VERSION,
        "files": files,
        "quarantined": quarantined,
    });
    let mut out: Vec<(String, Vec<u8>)> = bodies
        .into_iter()
        .map(|(n, b, _)| (n, b.into_bytes()))
        .collect();
    let mut m = line(&manifest)?;
    m.push('\n');
    out.push((MANIFEST.to_owned(), m.into_bytes()));
    Ok(out)
}

/// The part of a snapshot that belongs to one project (its record, packages, facts, sessions
/// and review records), in the same order: a project is the unit of export (§5.2).
pub fn only_project(snapshot: &Snapshot, project_id: &str) -> Snapshot {
    Snapshot {
        projects: snapshot
            .projects
            .iter()
            .filter(|p| p.project_id == project_id)
            .cloned()
            .collect(),
        packages: snapshot
            .packages
            .iter()
            .filter(|p| p.package.project_id() == project_id)
            .cloned()
            .collect(),
        facts: snapshot
            .facts
            .iter()
            .filter(|f| f.fact.project_id == project_id)
            .cloned()
            .collect(),
        sessions: snapshot
            .sessions
            .iter()
            .filter(|s| s.project_id == project_id)
            .cloned()
            .collect(),
        reviews: snapshot
            .reviews
            .iter()
            .filter(|r| r.project_id == project_id)
            .cloned()
            .collect(),
    }
}

/// The media type of an export bundle.
pub const BUNDLE_MEDIA_TYPE: &str = "application/x-ndjson";

/// Packs export files (as [`render`] makes them) into one NDJSON stream, the form an export
/// travels in over HTTP: for each file in order, a header line
/// `{"file":"<name>","lines":<n>}` followed by the file's `n` lines exactly as they are. Every
/// line is JSON, and [`unbundle`] gives back byte-identical files.
pub fn bundle(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(files.iter().map(|(_, b)| b.len() + 64).sum());
    for (name, bytes) in files {
        let lines = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        let header = json!({"file": name, "lines": lines});
        out.extend_from_slice(header.to_string().as_bytes());
        out.push(b'\n');
        out.extend_from_slice(bytes);
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    out
}

/// Splits a [`bundle`] back into its files. Only the file names of an export are accepted
/// (so a bundle cannot name a path), each at most once; a header that does not parse or lines
/// missing at the end are reported with the 1-based line of the bundle.
pub fn unbundle(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ExportError> {
    const BUNDLE: &str = "the bundle";
    let bad = |line: usize, message: String| ExportError::BadRecord {
        file: BUNDLE.into(),
        line,
        message,
    };
    let mut lines = bytes.split(|b| *b == b'\n').enumerate().peekable();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    while let Some((i, header)) = lines.next() {
        if header.is_empty() {
            if lines.peek().is_none() {
                break;
            }
            return Err(bad(
                i + 1,
                "empty line where a file header was expected".into(),
            ));
        }
        let h: Value = serde_json::from_slice(header)
            .map_err(|e| bad(i + 1, format!("not a file header: {e}")))?;
        let name = h["file"].as_str().unwrap_or_default().to_owned();
        if !FILES.contains(&name.as_str()) && name != MANIFEST {
            return Err(bad(
                i + 1,
                format!(
                    "a file header must name one of {}, {MANIFEST}; got `{name}`",
                    FILES.join(", ")
                ),
            ));
        }
        if files.iter().any(|(n, _)| *n == name) {
            return Err(bad(i + 1, format!("{name} appears twice")));
        }
        let n = h["lines"]
            .as_u64()
            .ok_or_else(|| bad(i + 1, "a file header needs `lines`, a count".into()))?;
        let mut body = Vec::new();
        for _ in 0..n {
            match lines.next() {
                Some((_, l)) if !l.is_empty() => {
                    body.extend_from_slice(l);
                    body.push(b'\n');
                }
                Some((j, _)) => {
                    return Err(bad(j + 1, format!("{name}: fewer than {n} lines")));
                }
                None => return Err(bad(i + 1, format!("{name}: fewer than {n} lines"))),
            }
        }
        files.push((name, body));
    }
    Ok(files)
}

/// Writes export files into `dir` (created if needed): any old manifest is removed first and
/// every file is flushed, the manifest last, so a manifest vouches only for a complete export.
pub fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), ExportError> {
    let io = |path: &Path, source| ExportError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let manifest_path = dir.join(MANIFEST);
    if manifest_path.exists() {
        std::fs::remove_file(&manifest_path).map_err(|e| io(&manifest_path, e))?;
    }
    let ordered = files
        .iter()
        .filter(|(n, _)| n != MANIFEST)
        .chain(files.iter().filter(|(n, _)| n == MANIFEST));
    for (name, bytes) in ordered {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| io(&path, e))?;
        let f = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
        f.sync_all().map_err(|e| io(&path, e))?;
    }
    Ok(())
}

/// Reads the files of an export directory (those present of [`FILES`] and the manifest).
pub fn read_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, ExportError> {
    if !dir.join(MANIFEST).exists() {
        return Err(ExportError::Incomplete(dir.display().to_string()));
    }
    let mut files = Vec::new();
    for name in FILES.iter().chain(std::iter::once(&MANIFEST)) {
        let path = dir.join(name);
        if path.exists() {
            let bytes = std::fs::read(&path).map_err(|source| ExportError::Io {
                path: path.display().to_string(),
                source,
            })?;
            files.push(((*name).to_owned(), bytes));
        }
    }
    Ok(files)
}

/// Exports everything in `store` into `dir` (created if needed), manifest last and flushed.
pub fn export_dir(store: &dyn RelayStore, dir: &Path) -> Result<Snapshot, ExportError> {
    let snapshot = store.snapshot()?;
    write_files(dir, &render(&snapshot)?)?;
    Ok(snapshot)
}

/// Exports one project of `store` into `dir` (see [`only_project`]).
pub fn export_project_dir(
    store: &dyn RelayStore,
    project_id: &str,
    dir: &Path,
) -> Result<Snapshot, ExportError> {
    let snapshot = only_project(&store.snapshot()?, project_id);
    write_files(dir, &render(&snapshot)?)?;
    Ok(snapshot)
}

/// Parses and verifies export files (`name -> bytes`) into a snapshot. Pure.
pub fn parse(files: &[(String, Vec<u8>)]) -> Result<Snapshot, ExportError> {
    let get = |name: &str| {
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    };
    let manifest_bytes =
        get(MANIFEST).ok_or_else(|| ExportError::Incomplete("the export".into()))?;
    let manifest: Value =
        serde_json::from_slice(manifest_bytes).map_err(|e| ExportError::BadRecord {
            file: MANIFEST.into(),
            line: 1,
            message: e.to_string(),
        })?;
    let mut snapshot = Snapshot::default();
    // Packages first, so a tampered package is named rather than reported as a file mismatch.
    for (i, v) in records(FILES[1], get(FILES[1]))?.into_iter().enumerate() {
        let stored = StoredPackage::from_wire(&v).map_err(|errs| ExportError::BadRecord {
            file: FILES[1].into(),
            line: i + 1,
            message: errs
                .iter()
                .map(|e| format!("{} {}", e.pointer, e.message))
                .collect::<Vec<_>>()
                .join("; "),
        })?;
        if let Err(recomputed) = stored.verify() {
            return Err(ExportError::TamperedPackage {
                package_id: stored.package.package_id().into(),
                file: FILES[1].into(),
                line: i + 1,
                stored: stored.content_hash,
                recomputed,
            });
        }
        snapshot.packages.push(stored);
    }
    for name in FILES {
        let body = get(name).unwrap_or(&[]);
        let expected = manifest["files"][name]["sha256"].as_str().unwrap_or("");
        let actual = sha256_hex(body);
        if expected != actual {
            return Err(ExportError::TamperedFile {
                file: name.into(),
                expected: expected.into(),
                actual,
            });
        }
    }
    snapshot.projects = typed::<Project>(FILES[0], get(FILES[0]))?;
    for (i, v) in records(FILES[2], get(FILES[2]))?.into_iter().enumerate() {
        let bad = |m: String| ExportError::BadRecord {
            file: FILES[2].into(),
            line: i + 1,
            message: m,
        };
        let mut v = v;
        let obj = v
            .as_object_mut()
            .ok_or_else(|| bad("not an object".into()))?;
        let recorded_at = match obj.remove(RECORDED_AT) {
            Some(Value::String(s)) => s,
            _ => return Err(bad(format!("{RECORDED_AT} is missing"))),
        };
        let superseded_at = match obj.remove(SUPERSEDED_AT) {
            Some(Value::String(s)) => Some(s),
            None => None,
            Some(_) => return Err(bad(format!("{SUPERSEDED_AT} must be a string"))),
        };
        let fact: Fact = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
        snapshot.facts.push(FactRecord {
            fact,
            recorded_at,
            superseded_at,
        });
    }
    snapshot.sessions = typed::<Session>(FILES[3], get(FILES[3]))?;
    snapshot.reviews = typed::<ReviewRecord>(FILES[4], get(FILES[4]))?;
    Ok(snapshot)
}

fn records(file: &str, body: Option<&[u8]>) -> Result<Vec<Value>, ExportError> {
    let Some(body) = body else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, l) in body.split(|b| *b == b'\n').enumerate() {
        if l.is_empty() {
            continue;
        }
        let v = cra_wire::json::parse_input(l).map_err(|e| ExportError::BadRecord {
            file: file.into(),
            line: i + 1,
            message: e.to_string(),
        })?;
        out.push(v);
    }
    Ok(out)
}

fn typed<T: serde::de::DeserializeOwned>(
    file: &str,
    body: Option<&[u8]>,
) -> Result<Vec<T>, ExportError> {
    records(file, body)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value(v).map_err(|e| ExportError::BadRecord {
                file: file.into(),
                line: i + 1,
                message: e.to_string(),
            })
        })
        .collect()
}

/// Reads, verifies and restores an export directory into an empty store.
pub fn import_dir(store: &dyn RelayStore, dir: &Path) -> Result<Snapshot, ExportError> {
    let snapshot = parse(&read_files(dir)?)?;
    store.restore(&snapshot)?;
    Ok(snapshot)
}
