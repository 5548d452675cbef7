//! Loading an atlas from a directory or a packed `.atlas.tar.gz` archive.
//!
//! Both forms are first read into the same in-memory picture, a map from relative path
//! (`/`-separated, printable ASCII) to file bytes, so that a directory and its archive are
//! analysed by one code path and give the same [`LoadedAtlas::digest`].
//!
//! What is read (see `specs/atlas.md`, "Layout"):
//! * every regular file under the root, recursively; entries whose name starts with `.` are
//!   skipped (editor and VCS litter such as `.git/`, `.DS_Store`);
//! * symbolic links and other special files are refused (an archive cannot carry them either);
//! * paths must be printable ASCII without `\` (they are hashed and packed as written);
//! * at most [`Limits::max_files`] files, each at most [`Limits::max_file_bytes`], in total at
//!   most [`Limits::max_total_bytes`].
//!
//! The atlas digest (errata): SHA-256, lowercase hex, of the compact JSON array of
//! `[relative_path, sha256_hex(file)]` pairs for every file read, sorted by path (byte order).
//! With ASCII paths the compact `serde_json` form and the TRACE canonical form are the same bytes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use cra_wire::hash::sha256_hex;

use crate::diag::Diagnostic;
use crate::model::Manifest;
use crate::validate;

/// The manifest's file name.
pub const MANIFEST_FILE: &str = "atlas.json";

/// Size limits applied while reading a directory or an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most files in one atlas.
    pub max_files: usize,
    /// Largest single file, in bytes.
    pub max_file_bytes: u64,
    /// Largest total of all files, in bytes.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_files: 10_000,
            max_file_bytes: 16 << 20,
            max_total_bytes: 256 << 20,
        }
    }
}

/// Where a merged policy or action was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// File relative to the atlas root.
    pub file: String,
    /// JSON pointer of the object inside that file (`""` when the file holds just that object).
    pub pointer: String,
}

/// A loaded, validated atlas.
#[derive(Debug, Clone)]
pub struct LoadedAtlas {
    /// The manifest, with inline and folder-held policies and actions merged (inline first, then
    /// files in path order, each file's array in order).
    pub manifest: Manifest,
    /// Context documents (`context/**`), relative path to text.
    pub context: BTreeMap<String, String>,
    /// Every file of the atlas, relative path to bytes (what the digest covers).
    pub files: BTreeMap<String, Vec<u8>>,
    /// The directory or archive it was loaded from.
    pub source: PathBuf,
    /// The atlas digest (module documentation), 64 lowercase hex characters.
    pub digest: String,
    /// Where each of `manifest.policies` was written (same indexes).
    pub policy_origins: Vec<Origin>,
    /// Where each of `manifest.actions` was written (same indexes).
    pub action_origins: Vec<Origin>,
    /// Warnings found while validating (errors make the load fail instead).
    pub warnings: Vec<Diagnostic>,
    /// The armored `cra-atlas` signature it came with, outside its digest
    /// ([`crate::signing`]): a source's signature file, an inline atlas's `signature` member, or
    /// the one its catalog entry keeps. `None` when it came unsigned. Held as found: whoever
    /// trusts it verifies it first ([`crate::signing::Trust::verify_digest`]).
    pub signature: Option<String>,
}

impl LoadedAtlas {
    /// The atlas id.
    pub fn id(&self) -> &str {
        &self.manifest.atlas_id
    }

    /// The version, parsed (validation guarantees it parses).
    pub fn version(&self) -> Option<semver::Version> {
        semver::Version::parse(&self.manifest.version).ok()
    }

    /// The action with this id.
    pub fn action(&self, action_id: &str) -> Option<&crate::model::Action> {
        self.manifest
            .actions
            .iter()
            .find(|a| a.action_id == action_id)
    }
}

/// Why an atlas could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file or directory could not be read.
    #[error("could not read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The path is neither a directory nor a `.atlas.tar.gz` archive.
    #[error(
        "{} is not an atlas: give a directory holding atlas.json or a .atlas.tar.gz archive",
        path.display()
    )]
    NotAnAtlas {
        /// The path.
        path: PathBuf,
    },
    /// The archive is corrupt or hostile (links, `..`, absolute paths, too large).
    #[error("refusing archive {}: {message}", path.display())]
    BadArchive {
        /// The archive.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The atlas was read but is invalid; `diagnostics` holds every problem (errors first).
    #[error("atlas {} is invalid: {}", source_path.display(), summary(diagnostics))]
    Invalid {
        /// The directory or archive.
        source_path: PathBuf,
        /// Every problem found (errors and warnings).
        diagnostics: Vec<Diagnostic>,
    },
}

fn summary(diagnostics: &[Diagnostic]) -> String {
    let errors: Vec<&Diagnostic> = diagnostics.iter().filter(|d| d.is_error()).collect();
    match errors.first() {
        Some(first) if errors.len() == 1 => first.to_string(),
        Some(first) => format!("{first} (and {} more errors)", errors.len() - 1),
        None => "no errors".to_owned(),
    }
}

/// Loads an atlas from a directory or from a `.atlas.tar.gz` / `.tar.gz` archive.
pub fn load(path: &Path) -> Result<LoadedAtlas, LoadError> {
    let (files, _) = read_any(path)?;
    from_files(path, files)
}

/// Loads an atlas directory (spec §5.2 layout).
pub fn load_dir(path: &Path) -> Result<LoadedAtlas, LoadError> {
    let files = read_dir_files(path, Limits::default())?;
    from_files(path, files)
}

/// Whether a path is read as a directory or as an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A directory.
    Directory,
    /// A gzip-compressed tar archive.
    Archive,
}

/// Reads the files of a directory or archive without analysing them.
pub fn read_any(path: &Path) -> Result<(BTreeMap<String, Vec<u8>>, SourceKind), LoadError> {
    let meta = fs::metadata(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    if meta.is_dir() {
        Ok((
            read_dir_files(path, Limits::default())?,
            SourceKind::Directory,
        ))
    } else if path.to_string_lossy().ends_with(".tar.gz") {
        Ok((
            crate::pack::read_archive(path, Limits::default())?,
            SourceKind::Archive,
        ))
    } else {
        Err(LoadError::NotAnAtlas {
            path: path.to_owned(),
        })
    }
}

/// Validates already-read files and builds the atlas; fails with every diagnostic when any
/// error is found.
pub fn from_files(
    source: &Path,
    files: BTreeMap<String, Vec<u8>>,
) -> Result<LoadedAtlas, LoadError> {
    let analysis = validate::analyse(source, files);
    match analysis.atlas {
        Some(atlas) if !analysis.diagnostics.iter().any(Diagnostic::is_error) => Ok(atlas),
        _ => Err(LoadError::Invalid {
            source_path: source.to_owned(),
            diagnostics: analysis.diagnostics,
        }),
    }
}

/// The atlas digest of a set of files (module documentation).
pub fn atlas_digest(files: &BTreeMap<String, Vec<u8>>) -> String {
    let pairs: Vec<[String; 2]> = files
        .iter()
        .map(|(path, bytes)| [path.clone(), sha256_hex(bytes)])
        .collect();
    // A Vec of ASCII strings always serialises; the fallback only keeps the function total.
    let text = serde_json::to_string(&pairs).unwrap_or_default();
    sha256_hex(text.as_bytes())
}

/// True when `path` is acceptable as a relative atlas path: non-empty `/`-separated segments of
/// printable ASCII, none of them empty, `.` or `..`, no `\`.
pub fn is_portable_path(path: &str) -> bool {
    !path.is_empty()
        && path
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'\\')
        && path
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..")
}

/// Reads every regular file under `root` (module documentation for what is skipped or refused).
pub fn read_dir_files(root: &Path, limits: Limits) -> Result<BTreeMap<String, Vec<u8>>, LoadError> {
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    let mut problems = Vec::new();
    walk(root, "", limits, &mut files, &mut total, &mut problems)?;
    if problems.is_empty() {
        Ok(files)
    } else {
        Err(LoadError::Invalid {
            source_path: root.to_owned(),
            diagnostics: problems,
        })
    }
}

fn walk(
    dir: &Path,
    prefix: &str,
    limits: Limits,
    files: &mut BTreeMap<String, Vec<u8>>,
    total: &mut u64,
    problems: &mut Vec<Diagnostic>,
) -> Result<(), LoadError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| LoadError::Io { path, source }
    };
    let mut entries = fs::read_dir(dir)
        .map_err(io(dir))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io(dir))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        let rel = format!("{prefix}{name}");
        let path = entry.path();
        let kind = entry.file_type().map_err(io(&path))?;
        if !is_portable_path(&rel) {
            problems.push(Diagnostic::error(
                "unportable_path",
                &rel,
                "",
                "file names in an atlas must be printable ASCII without `\\`: rename the file",
            ));
            continue;
        }
        if kind.is_symlink() {
            problems.push(Diagnostic::error(
                "unsupported_file",
                &rel,
                "",
                "symbolic links are not allowed in an atlas (an archive could not carry them): \
                 replace the link by the file itself",
            ));
        } else if kind.is_dir() {
            walk(&path, &format!("{rel}/"), limits, files, total, problems)?;
        } else if kind.is_file() {
            let len = entry.metadata().map_err(io(&path))?.len();
            if len > limits.max_file_bytes {
                problems.push(Diagnostic::error(
                    "too_large",
                    &rel,
                    "",
                    format!(
                        "the file has {len} bytes, more than the limit of {}",
                        limits.max_file_bytes
                    ),
                ));
                continue;
            }
            *total += len;
            if *total > limits.max_total_bytes || files.len() >= limits.max_files {
                problems.push(Diagnostic::error(
                    "too_large",
                    &rel,
                    "",
                    format!(
                        "the atlas exceeds {} files or {} bytes in total",
                        limits.max_files, limits.max_total_bytes
                    ),
                ));
                return Ok(());
            }
            let bytes = fs::read(&path).map_err(io(&path))?;
            files.insert(rel, bytes);
        } else {
            problems.push(Diagnostic::error(
                "unsupported_file",
                &rel,
                "",
                "only regular files and directories may appear in an atlas",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_over_sorted_path_hash_pairs() {
        let mut files = BTreeMap::new();
        files.insert("b.md".to_owned(), b"B".to_vec());
        files.insert("atlas.json".to_owned(), b"{}".to_vec());
        let expected_text = format!(
            "[[\"atlas.json\",\"{}\"],[\"b.md\",\"{}\"]]",
            sha256_hex(b"{}"),
            sha256_hex(b"B")
        );
        assert_eq!(atlas_digest(&files), sha256_hex(expected_text.as_bytes()));
    }

    #[test]
    fn portable_paths() {
        assert!(is_portable_path("context/overview.md"));
        assert!(is_portable_path("context/a b.md"));
        assert!(!is_portable_path("../x"));
        assert!(!is_portable_path("/abs"));
        assert!(!is_portable_path("a//b"));
        assert!(!is_portable_path("a\\b"));
        assert!(!is_portable_path("caf\u{e9}.md"));
        assert!(!is_portable_path("./a"));
    }
}
