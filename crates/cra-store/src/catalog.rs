//! The atlas catalog: the atlases in force, stored, so that they survive restarts and every
//! replica sharing a PostgreSQL schema decides with the same ones.
//!
//! Two things are stored. An atlas's files, once, by digest (they never change: a digest names
//! one content). And a numbered *generation* for each change of the set in force, naming its
//! members (id, version, digest), who made the change and why. Generations start at 1, are dense
//! and are only ever added, so the newest one is the set in force and the older ones are its
//! history.
//!
//! [`AtlasCatalog::commit`] is a compare-and-set: it writes generation `n + 1` only while `n` is
//! still the newest, and otherwise answers [`CommitError::Stale`] without writing anything; the
//! caller reads the newest generation and builds its change again on that. On PostgreSQL the
//! commit also announces the new generation on the schema's feed channel
//! (`crate::pg::feed`), so other replicas read it at once instead of polling.
//!
//! Each generation also says whether its change is recorded in the operator audit chain: a change
//! is committed first and recorded after, so a crash between the two leaves a generation
//! unrecorded, which the next start finds ([`AtlasCatalog::last_recorded`]) and records.
//!
//! The store keeps files as bytes and checks nothing about them: validating an atlas, and
//! checking that stored files still hash to their digest, is the runtime's job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::BackendError;

/// One member of a generation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// The atlas id.
    pub atlas_id: String,
    /// Its version.
    pub version: String,
    /// Its digest (the key of its stored files).
    pub digest: String,
    /// The armored signature it was taken in with (outside the digest), kept so that a start
    /// with trusted keys configured can check an atlas no source directory holds. Absent in
    /// generations stored before signatures were kept, and for unsigned atlases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// One change of the set in force, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// Its number: 1 for the first, each next one more.
    pub number: u64,
    /// The atlases in force from it on, ascending by id.
    pub members: Vec<CatalogEntry>,
    /// Who made the change.
    pub actor: String,
    /// What made it (`install`, `replace_set`, `watch`, `start`, `undo`).
    pub reason: String,
    /// When it was committed, RFC 3339 (the database's clock on PostgreSQL).
    pub committed_at: String,
    /// Whether the change is recorded in the operator audit chain ([`AtlasCatalog::mark_recorded`]).
    #[serde(default)]
    pub recorded: bool,
}

/// The next generation to write.
#[derive(Debug, Clone, Copy)]
pub struct CatalogChange<'a> {
    /// The generation it was built on (`None`: the catalog was empty).
    pub after: Option<u64>,
    /// The atlases in force from it on (any order; ids distinct).
    pub members: &'a [CatalogEntry],
    /// The files of every member, by digest, for those the catalog may not hold yet (files
    /// already stored under a digest are kept as they are).
    pub files: &'a BTreeMap<String, &'a BTreeMap<String, Vec<u8>>>,
    /// Who makes it.
    pub actor: &'a str,
    /// Why (see [`Generation::reason`]).
    pub reason: &'a str,
    /// Whether it needs no record (a first configuration, an undo); otherwise it is recorded
    /// later and marked ([`AtlasCatalog::mark_recorded`]).
    pub recorded: bool,
}

/// Why a commit wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// Another change was committed after the generation this one was built on.
    #[error(
        "the atlas catalog changed meanwhile (it is at generation {newest:?}); build the change again on the newest generation"
    )]
    Stale {
        /// The newest generation now.
        newest: Option<u64>,
    },
    /// A member's files are neither stored nor given.
    #[error(
        "atlas {atlas_id} ({digest}) has no stored files and none were given; send its files with the change"
    )]
    MissingFiles {
        /// The member's id.
        atlas_id: String,
        /// Its digest.
        digest: String,
    },
    /// The store failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl CatalogChange<'_> {
    /// The files given for `member`, which the store does not hold yet; refused when none were.
    pub(crate) fn files_of(
        &self,
        member: &CatalogEntry,
    ) -> Result<&BTreeMap<String, Vec<u8>>, CommitError> {
        self.files
            .get(&member.digest)
            .copied()
            .ok_or_else(|| CommitError::MissingFiles {
                atlas_id: member.atlas_id.clone(),
                digest: member.digest.clone(),
            })
    }
}

/// The stored atlases (module documentation). Both backends implement it.
pub trait AtlasCatalog: Send + Sync + std::fmt::Debug {
    /// The newest generation, or `None` while nothing was ever committed.
    fn head(&self) -> Result<Option<Generation>, BackendError>;
    /// The files stored under `digest`, or `None`.
    fn files(&self, digest: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, BackendError>;
    /// Writes `change` as generation `change.after + 1` with the files it names, all in one
    /// transaction, only while `change.after` is still the newest; answers the new number.
    fn commit(&self, change: &CatalogChange<'_>) -> Result<u64, CommitError>;
    /// Marks generation `number` recorded; answers whether it was not yet.
    fn mark_recorded(&self, number: u64) -> Result<bool, BackendError>;
    /// The newest generation marked recorded, or `None`.
    fn last_recorded(&self) -> Result<Option<Generation>, BackendError>;
    /// The catalog's history: up to `limit` generations numbered below `before` (any, when
    /// `None`), newest first.
    fn history(&self, before: Option<u64>, limit: usize) -> Result<Vec<Generation>, BackendError>;
}

/// The first bytes of an encoded file set, naming the format.
const FILES_TAG: &[u8] = b"cra-atlas-files/1\n";

/// An atlas's files as one byte string: the tag, then for each file in path order its path's
/// length (4 bytes, big-endian), the path, its content's length (8 bytes, big-endian) and the
/// content.
pub fn encode_files(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let size: usize = files.iter().map(|(p, c)| 12 + p.len() + c.len()).sum();
    let mut out = Vec::with_capacity(FILES_TAG.len() + size);
    out.extend_from_slice(FILES_TAG);
    for (path, content) in files {
        out.extend_from_slice(&(path.len() as u32).to_be_bytes());
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(&(content.len() as u64).to_be_bytes());
        out.extend_from_slice(content);
    }
    out
}

/// The files [`encode_files`] wrote; an error saying what is wrong for anything else.
pub fn decode_files(bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, BackendError> {
    let corrupt = |what: &str| {
        BackendError::Backend(format!(
            "a stored atlas's files are unreadable ({what}); restore the catalog from a backup"
        ))
    };
    let mut rest = bytes
        .strip_prefix(FILES_TAG)
        .ok_or_else(|| corrupt("unknown format"))?;
    let mut files = BTreeMap::new();
    while !rest.is_empty() {
        let (len, after) = take_len(rest, 4).ok_or_else(|| corrupt("truncated path length"))?;
        let (path, after) = take(after, len).ok_or_else(|| corrupt("truncated path"))?;
        let path = std::str::from_utf8(path).map_err(|_| corrupt("a path is not UTF-8"))?;
        let (len, after) = take_len(after, 8).ok_or_else(|| corrupt("truncated length"))?;
        let (content, after) = take(after, len).ok_or_else(|| corrupt("truncated content"))?;
        if files.insert(path.to_owned(), content.to_vec()).is_some() {
            return Err(corrupt("a path appears twice"));
        }
        rest = after;
    }
    Ok(files)
}

/// A big-endian length of `width` bytes at the start of `bytes`, and what follows it.
fn take_len(bytes: &[u8], width: usize) -> Option<(usize, &[u8])> {
    let (head, rest) = take(bytes, width)?;
    let mut n: u64 = 0;
    for b in head {
        n = (n << 8) | u64::from(*b);
    }
    Some((usize::try_from(n).ok()?, rest))
}

/// The first `n` bytes of `bytes` and the rest, when there are `n`.
fn take(bytes: &[u8], n: usize) -> Option<(&[u8], &[u8])> {
    (bytes.len() >= n).then(|| bytes.split_at(n))
}

/// `members` in the stored order (ascending by id), refusing two members with one id.
pub(crate) fn sorted_members(members: &[CatalogEntry]) -> Result<Vec<CatalogEntry>, BackendError> {
    let mut sorted = members.to_vec();
    sorted.sort();
    if let Some(w) = sorted.windows(2).find(|w| w[0].atlas_id == w[1].atlas_id) {
        return Err(BackendError::Backend(format!(
            "a generation names atlas {} twice; one atlas per id is in force",
            w[0].atlas_id
        )));
    }
    Ok(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_through_their_encoding() {
        let mut files = BTreeMap::new();
        files.insert("atlas.json".to_owned(), b"{\"a\":1}".to_vec());
        files.insert("context/empty.md".to_owned(), Vec::new());
        files.insert("context/é.md".to_owned(), vec![0, 255, 10]);
        let bytes = encode_files(&files);
        assert!(bytes.starts_with(FILES_TAG));
        assert_eq!(decode_files(&bytes).unwrap(), files);
        assert_eq!(
            decode_files(&encode_files(&BTreeMap::new())).unwrap(),
            BTreeMap::new()
        );
    }

    #[test]
    fn damaged_file_sets_are_refused_not_misread() {
        let mut files = BTreeMap::new();
        files.insert("atlas.json".to_owned(), b"{}".to_vec());
        let bytes = encode_files(&files);
        for cut in FILES_TAG.len() + 1..bytes.len() {
            assert!(decode_files(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode_files(b"other/1\n").is_err());
        let mut twice = bytes.clone();
        twice.extend_from_slice(&bytes[FILES_TAG.len()..]);
        assert!(decode_files(&twice).is_err());
    }

    #[test]
    fn members_are_stored_by_id_and_an_id_is_in_force_once() {
        let e = |id: &str, d: &str| CatalogEntry {
            atlas_id: id.to_owned(),
            version: "1.0.0".to_owned(),
            digest: d.to_owned(),
            signature: None,
        };
        let sorted = sorted_members(&[e("b", "1"), e("a", "2")]).unwrap();
        assert_eq!(sorted, vec![e("a", "2"), e("b", "1")]);
        assert!(sorted_members(&[e("a", "1"), e("a", "2")]).is_err());
    }
}
