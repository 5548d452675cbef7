//! The transparency log's storage (issue 26, `specs/tlog.md`), shared by both backends: every
//! TRACE event is a leaf of one RFC 6962 tree, appended in the transaction that stores the
//! event, and the tree is kept as C2SP tiles so that proofs read a few tiles and never rebuild
//! anything.
//!
//! **Stored tiles.** A hash tile (`level`, `index`) holds the 256 hashes of Merkle level
//! `8 * level` from `256 * index` (fewer in the rightmost, partial tile). The stored form adds
//! the tile's own inner levels, so any complete subtree inside it is one read and no hashing:
//! a two-byte big-endian width `w`, then the `w` hashes of the tile (exactly the C2SP tile's
//! bytes), then the `w >> 1` hashes one level up, and so on to `w >> 7` (a full tile stores 510
//! hashes). Entry bundles hold the leaf data (the 32-byte event hashes) in log order, 256 a
//! bundle, stored bare and framed as C2SP entries only when served. A partial tile or bundle is
//! rewritten wider as leaves arrive; its prefix never changes, so a reader that meets a wider
//! tile than it asked for takes the prefix. A store may keep level-0 tiles in another form
//! (redb keeps their upper levels and computes the rest from the leaves): it then answers the
//! hashes below tile level 1 itself ([`LogStore::low_subtree_hash`]) and whole tiles when read.
//!
//! **Invariants** (tested by name in `tests/store/tlog.rs`): the log holds exactly one leaf per
//! stored event, in commit order; a tile never loses or changes a hash it held; an append that
//! fails stores no leaf and no event.
//!
//! [`LogStore`] is what the runtime reads the log through; `append` is what each backend's
//! commit calls with the batch's event hashes.

use std::cell::RefCell;
use std::rc::Rc;

use cra_tlog::{Hash, HashReadError, HashReader, Tile, TileKind, leaf_hash, node_hash};

/// Hashes a full tile holds.
pub const TILE_WIDTH: usize = 256;
const HASH_LEN: usize = 32;
/// The inner levels a stored tile keeps above its own (8 levels in all).
const TILE_HEIGHT: u32 = 8;
/// The `level` under which a store keeps entry bundles (hash tile levels stop at 7).
pub const ENTRIES: u8 = u8::MAX;

/// Where a stored tile lives: a hash tile's level and index, or [`ENTRIES`] and a bundle index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TileKey {
    /// The hash tile level (0..=7), or [`ENTRIES`].
    pub level: u8,
    /// The tile's index in its level.
    pub index: u64,
}

/// What went wrong with the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The store could not be read or written.
    #[error("transparency log store: {0}")]
    Store(String),
    /// A stored tile or record is not what the log wrote.
    #[error(
        "the transparency log is damaged: {0}; restore the store from a backup (`cra restore`)"
    )]
    Corrupt(String),
    /// A proof or root was asked of a tree the log does not hold, or with impossible numbers.
    #[error("{0}")]
    Range(String),
    /// The store was set up with another log identity than the one configured.
    #[error(
        "this store's transparency log is `{stored}`, but this server is configured with `{configured}`; every replica of a deployment needs the same `log.origin` and `log.key_file` (a log's key cannot change without starting a new log)"
    )]
    Identity {
        /// The origin and verifier key the store holds.
        stored: String,
        /// The origin and verifier key this server was given.
        configured: String,
    },
}

impl From<HashReadError> for LogError {
    fn from(e: HashReadError) -> Self {
        match e {
            HashReadError::Store(e) => Self::Store(e.to_string()),
            other => Self::Corrupt(other.to_string()),
        }
    }
}

impl From<cra_tlog::ProofError> for LogError {
    fn from(e: cra_tlog::ProofError) -> Self {
        match e {
            cra_tlog::ProofError::Read(e) => e.into(),
            other => Self::Range(other.to_string()),
        }
    }
}

/// Where an event sits in the log: its leaf index and the chain it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafPlace {
    /// The 0-based leaf index.
    pub leaf_index: u64,
    /// The session (or project or audit chain) the event belongs to.
    pub session_id: String,
    /// Its sequence in that chain.
    pub sequence: u64,
}

/// A leaf to append: the event's hash (leaf data) and where it lives.
#[derive(Debug, Clone)]
pub(crate) struct NewLeaf {
    pub(crate) event_hash: Hash,
    /// Shared by the leaves of one append: a commit names each session once, not once an event.
    pub(crate) session_id: std::sync::Arc<str>,
    pub(crate) sequence: u64,
}

impl NewLeaf {
    /// The leaf of a sealed event; a hash that is not 64 hex digits is a bug of sealing.
    pub(crate) fn of(event: &cra_trace::TraceEvent) -> Result<Self, LogError> {
        Ok(Self {
            event_hash: Self::data_of(event)?,
            session_id: event.session_id.as_str().into(),
            sequence: event.sequence,
        })
    }

    /// The leaf data of a sealed event: its hash's 32 bytes.
    pub(crate) fn data_of(event: &cra_trace::TraceEvent) -> Result<Hash, LogError> {
        cra_tlog::hash::from_hex(&event.event_hash)
            .map_err(|e| LogError::Corrupt(format!("event hash `{}`: {e}", event.event_hash)))
    }
}

/// What settling the log's identity did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The store had none: the configured one is recorded.
    First,
    /// The store holds the configured one.
    Same,
    /// A key rotation: the store held `previous_key` (one of the rotating keys), and now holds
    /// the configured key.
    Moved {
        /// The verifier key the store held before.
        previous_key: String,
    },
}

impl Settled {
    /// Whether the store must record the configured identity.
    pub(crate) fn records(&self) -> bool {
        !matches!(self, Settled::Same)
    }
}

/// The log's identity: the origin its checkpoints name and the verifier key that signs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogIdentity {
    /// The checkpoint origin (also the key name).
    pub origin: String,
    /// The verifier key string (`<name>+<hex id>+<base64 key>`).
    pub verifier_key: String,
}

impl LogIdentity {
    pub(crate) fn encode(&self) -> String {
        format!("{}\n{}", self.origin, self.verifier_key)
    }

    pub(crate) fn decode(text: &str) -> Result<Self, LogError> {
        let (origin, verifier_key) = text
            .split_once('\n')
            .ok_or_else(|| LogError::Corrupt(format!("stored log identity `{text}`")))?;
        Ok(Self {
            origin: origin.to_owned(),
            verifier_key: verifier_key.to_owned(),
        })
    }

    /// Records `configured` as the store's identity the first time, else checks that the stored
    /// one is it or, during a key rotation, that the stored key is one of `rotating` (the keys
    /// that sign beside the configured one) with the same origin; answers whether the store must
    /// record `configured` (`stored` is what the store holds, if anything).
    ///
    /// So a replica whose keys share none with the store's refuses to start, and a rotation moves
    /// the stored key only through a configuration that signs with both.
    pub(crate) fn settle(
        stored: Option<Self>,
        configured: &Self,
        rotating: &[String],
    ) -> Result<Settled, LogError> {
        match stored {
            None => Ok(Settled::First),
            Some(s) if s == *configured => Ok(Settled::Same),
            Some(s) if s.origin == configured.origin && rotating.contains(&s.verifier_key) => {
                Ok(Settled::Moved {
                    previous_key: s.verifier_key,
                })
            }
            Some(s) => Err(LogError::Identity {
                stored: format!("{} {}", s.origin, s.verifier_key),
                configured: format!("{} {}", configured.origin, configured.verifier_key),
            }),
        }
    }
}

/// The transparency log as the runtime reads it, on either backend.
pub trait LogStore: Send + Sync {
    /// How many leaves the log holds.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read.
    fn log_size(&self) -> Result<u64, LogError>;

    /// Where the event whose hash is `event_hash` sits in the log, if it is there.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read.
    fn leaf_place(&self, event_hash: &Hash) -> Result<Option<LeafPlace>, LogError>;

    /// The stored tile `key`, as stored (see the module documentation), if any.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read.
    fn read_tile(&self, key: TileKey) -> Result<Option<Vec<u8>>, LogError>;

    /// The hash of the complete subtree `(level, index)`, `level` below 8 (inside a level-0
    /// tile), when the store answers it without a whole stored tile; `None` (the default) reads
    /// the level-0 tile. The caller asks only for subtrees the log holds whole.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read or holds damaged leaves.
    fn low_subtree_hash(&self, level: u8, index: u64) -> Result<Option<Hash>, LogError> {
        let _ = (level, index);
        Ok(None)
    }

    /// The signed checkpoint notes published, the latest first, at most `limit`.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read.
    fn checkpoints(&self, limit: usize) -> Result<Vec<String>, LogError>;

    /// Publishes a signed checkpoint of `size` leaves (`note` is its text), unless one of that
    /// size or larger is already published; answers the latest published note.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be written.
    fn publish_checkpoint(&self, size: u64, note: &str) -> Result<String, LogError>;

    /// Records the log's identity on first use, else checks it is the configured one, or one
    /// with the same origin whose key is among `rotating` (then the configured one is recorded,
    /// so the key moves only through a configuration that still signs with the old one).
    ///
    /// # Errors
    /// [`LogError::Identity`] when the store belongs to another log.
    fn settle_identity(
        &self,
        identity: &LogIdentity,
        rotating: &[String],
    ) -> Result<Settled, LogError>;
}

/// Reads proofs and roots of the log in `store` as it is now.
pub struct LogReader<'a, S: LogStore + ?Sized> {
    store: &'a S,
    size: u64,
    /// Tiles read for this reader (a proof reads each tile up to eight times).
    cache: RefCell<Vec<(TileKey, Rc<Vec<u8>>)>>,
}

impl<'a, S: LogStore + ?Sized> LogReader<'a, S> {
    /// A reader of `store`'s tree at its current size.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read.
    pub fn new(store: &'a S) -> Result<Self, LogError> {
        Ok(Self::at(store, store.log_size()?))
    }

    /// A reader of `store`'s tree taken at `size` leaves (at most what it holds).
    pub fn at(store: &'a S, size: u64) -> Self {
        Self {
            store,
            size,
            cache: RefCell::new(Vec::new()),
        }
    }

    /// The root of the tree of `size` leaves.
    ///
    /// # Errors
    /// [`LogError::Range`] when the log holds fewer leaves.
    pub fn root(&self, size: u64) -> Result<Hash, LogError> {
        Ok(cra_tlog::root(self, size)?)
    }

    /// The inclusion proof of leaf `index` in the tree of `size` leaves.
    ///
    /// # Errors
    /// [`LogError::Range`] for impossible coordinates.
    pub fn inclusion(&self, index: u64, size: u64) -> Result<Vec<Hash>, LogError> {
        Ok(cra_tlog::inclusion_proof(self, index, size)?)
    }

    /// The consistency proof from the tree of `old` leaves to that of `new`.
    ///
    /// # Errors
    /// [`LogError::Range`] for impossible sizes.
    pub fn consistency(&self, old: u64, new: u64) -> Result<Vec<Hash>, LogError> {
        Ok(cra_tlog::consistency_proof(self, old, new)?)
    }

    /// The served bytes of a C2SP tile or entry bundle, if the tree holds it at its width.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read or holds a damaged tile.
    pub fn served_tile(&self, tile: &Tile) -> Result<Option<Vec<u8>>, LogError> {
        let width = usize::from(tile.width());
        let (key, entries) = match tile.kind() {
            TileKind::Hashes { level } => (
                TileKey {
                    level,
                    index: tile.index(),
                },
                false,
            ),
            TileKind::Entries => (
                TileKey {
                    level: ENTRIES,
                    index: tile.index(),
                },
                true,
            ),
        };
        // A tile beyond the reader's tree is not served, even if a later append wrote it.
        let level = if entries { 0 } else { key.level };
        let held = cra_tlog::tiles::tile_in_tree(level, key.index, self.size);
        if held.is_none_or(|t| usize::from(t.width()) < width) {
            return Ok(None);
        }
        let Some(bytes) = self.store.read_tile(key)? else {
            return Ok(None);
        };
        if entries {
            let hashes = bytes.get(..width * HASH_LEN).ok_or_else(|| short(key))?;
            let mut out = Vec::with_capacity(width * (HASH_LEN + 2));
            for h in hashes.chunks_exact(HASH_LEN) {
                out.extend_from_slice(&(HASH_LEN as u16).to_be_bytes());
                out.extend_from_slice(h);
            }
            return Ok(Some(out));
        }
        let stored = StoredTile::parse(key, &bytes)?;
        if stored.width < width {
            return Err(short(key));
        }
        Ok(Some(stored.base()[..width * HASH_LEN].to_vec()))
    }

    fn tile(&self, key: TileKey) -> Result<Rc<Vec<u8>>, HashReadError> {
        if let Some((_, t)) = self.cache.borrow().iter().find(|(k, _)| *k == key) {
            return Ok(t.clone());
        }
        let read = self
            .store
            .read_tile(key)
            .map_err(|e| HashReadError::Store(Box::new(e)))?;
        let bytes = Rc::new(read.ok_or(HashReadError::Missing {
            level: key.level.saturating_mul(8),
            index: key.index,
        })?);
        let mut cache = self.cache.borrow_mut();
        if cache.len() >= 8 {
            cache.remove(0);
        }
        cache.push((key, bytes.clone()));
        Ok(bytes)
    }
}

fn short(key: TileKey) -> LogError {
    LogError::Corrupt(format!(
        "tile {}/{} is narrower than the tree it belongs to",
        key.level, key.index
    ))
}

impl<S: LogStore + ?Sized> HashReader for LogReader<'_, S> {
    fn size(&self) -> u64 {
        self.size
    }

    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, HashReadError> {
        let missing = HashReadError::Missing { level, index };
        let end = index
            .checked_add(1)
            .and_then(|n| n.checked_mul(1u64.checked_shl(u32::from(level))?));
        if level > 63 || end.is_none_or(|end| end > self.size) {
            return Err(missing);
        }
        if u32::from(level) < TILE_HEIGHT {
            let low = self
                .store
                .low_subtree_hash(level, index)
                .map_err(|e| HashReadError::Store(Box::new(e)))?;
            if let Some(hash) = low {
                return Ok(hash);
            }
        }
        let (tile_level, inner) = (level / 8, u32::from(level % 8));
        let first = index << inner;
        let key = TileKey {
            level: tile_level,
            index: first / TILE_WIDTH as u64,
        };
        let pos = (first % TILE_WIDTH as u64) as usize >> inner;
        let bytes = self.tile(key)?;
        let stored =
            StoredTile::parse(key, &bytes).map_err(|e| HashReadError::Malformed(e.to_string()))?;
        stored.node(inner, pos).ok_or(missing)
    }
}

/// A stored hash tile, read in place.
struct StoredTile<'a> {
    width: usize,
    hashes: &'a [u8],
}

/// Bytes of the hashes a stored tile of `width` keeps (its 8 levels).
fn stored_hashes(width: usize) -> usize {
    (0..TILE_HEIGHT).map(|h| width >> h).sum::<usize>() * HASH_LEN
}

impl<'a> StoredTile<'a> {
    fn parse(key: TileKey, bytes: &'a [u8]) -> Result<Self, LogError> {
        let bad = || {
            LogError::Corrupt(format!(
                "stored tile {}/{} has {} bytes, which no width explains",
                key.level,
                key.index,
                bytes.len()
            ))
        };
        let (width, hashes) = bytes.split_first_chunk::<2>().ok_or_else(bad)?;
        let width = usize::from(u16::from_be_bytes(*width));
        if width == 0 || width > TILE_WIDTH || hashes.len() != stored_hashes(width) {
            return Err(bad());
        }
        Ok(Self { width, hashes })
    }

    /// The tile's own hashes (the C2SP tile).
    fn base(&self) -> &'a [u8] {
        &self.hashes[..self.width * HASH_LEN]
    }

    /// The hash at inner level `inner` (0..8) and position `pos` within the tile.
    fn node(&self, inner: u32, pos: usize) -> Option<Hash> {
        let before: usize = (0..inner).map(|h| self.width >> h).sum();
        if pos >= self.width >> inner {
            return None;
        }
        let at = (before + pos) * HASH_LEN;
        self.hashes.get(at..at + HASH_LEN)?.try_into().ok()
    }

    /// The root of a full tile: the next tile level's hash.
    fn root(&self) -> Option<Hash> {
        (self.width == TILE_WIDTH).then(|| {
            let (l, r) = (self.node(7, 0), self.node(7, 1));
            l.zip(r).map(|(l, r)| node_hash(&l, &r))
        })?
    }
}

/// The hashes of inner levels `from` to 7 of the full stored tile `bytes` (at `key`), level by
/// level: what a store that computes the lower levels from the leaves keeps of it.
///
/// # Errors
/// [`LogError::Corrupt`] when `bytes` is not a full stored tile.
pub(crate) fn upper_levels(key: TileKey, bytes: &[u8], from: u32) -> Result<Vec<u8>, LogError> {
    let stored = StoredTile::parse(key, bytes)?;
    if stored.width != TILE_WIDTH {
        return Err(short(key));
    }
    let before: usize = (0..from.min(TILE_HEIGHT)).map(|h| TILE_WIDTH >> h).sum();
    Ok(stored.hashes[before * HASH_LEN..].to_vec())
}

/// The stored form of a tile whose own hashes are `base`.
pub(crate) fn encode_tile(base: &[Hash]) -> Vec<u8> {
    let width = u16::try_from(base.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(2 + stored_hashes(base.len()));
    out.extend_from_slice(&width.to_be_bytes());
    let mut level = base.to_vec();
    for h in 0..TILE_HEIGHT {
        for hash in &level {
            out.extend_from_slice(hash);
        }
        if h + 1 < TILE_HEIGHT {
            level = level
                .chunks_exact(2)
                .map(|pair| node_hash(&pair[0], &pair[1]))
                .collect();
        }
    }
    out
}

/// The tile writes of appending `leaves` to a log of `size` leaves, in key order: the entry
/// bundles and every hash tile the new leaves reach, each in its new stored form. `read` answers
/// the stored partial tiles the append extends.
///
/// # Errors
/// What `read` met, or [`LogError::Corrupt`] when a partial tile is not as wide as `size` says.
pub(crate) fn append(
    size: u64,
    leaves: &[Hash],
    mut read: impl FnMut(TileKey) -> Result<Option<Vec<u8>>, LogError>,
) -> Result<Vec<(TileKey, Vec<u8>)>, LogError> {
    let mut writes = Vec::new();
    if leaves.is_empty() {
        return Ok(writes);
    }
    size.checked_add(leaves.len() as u64)
        .ok_or_else(|| LogError::Range("the log cannot grow past 2^64 leaves".into()))?;
    append_entries(size, leaves, &mut read, &mut writes)?;
    let new: Vec<Hash> = leaves.iter().map(|l| leaf_hash(l)).collect();
    append_hashes(size, 0, new, &mut read, &mut writes)?;
    Ok(writes)
}

/// Adds to `writes` the hash tiles of tile level `level` and above that appending `new` (hashes
/// of Merkle level `8 * level`) changes, in a log of `size` leaves before the append: each tile
/// the new hashes reach, extended from its stored form (only the new hashes and the inner nodes
/// above them are computed), and the roots of those they fill appended one level up in turn.
///
/// # Errors
/// What `read` met, or [`LogError::Corrupt`] when a partial tile is not as wide as `size` says.
pub(crate) fn append_hashes(
    size: u64,
    mut level: u8,
    mut new: Vec<Hash>,
    read: &mut impl FnMut(TileKey) -> Result<Option<Vec<u8>>, LogError>,
    writes: &mut Vec<(TileKey, Vec<u8>)>,
) -> Result<(), LogError> {
    while !new.is_empty() {
        let count = size
            .checked_shr(u32::from(level) * TILE_HEIGHT)
            .unwrap_or(0);
        let mut key = TileKey {
            level,
            index: count / TILE_WIDTH as u64,
        };
        let held = (count % TILE_WIDTH as u64) as usize;
        let stored = if held > 0 {
            Some(read(key)?.ok_or_else(|| short(key))?)
        } else {
            None
        };
        let mut prior = match &stored {
            Some(bytes) => {
                let tile = StoredTile::parse(key, bytes)?;
                if tile.width != held {
                    return Err(short(key));
                }
                Some(tile)
            }
            None => None,
        };
        let mut roots = Vec::new();
        let mut rest = new.as_slice();
        while !rest.is_empty() {
            let room = TILE_WIDTH - prior.as_ref().map_or(0, |t| t.width);
            let (add, after) = rest.split_at(room.min(rest.len()));
            let bytes = extend_tile(key, prior.take(), add)?;
            if let Some(root) = StoredTile::parse(key, &bytes)?.root() {
                roots.push(root);
            }
            writes.push((key, bytes));
            key.index += 1;
            rest = after;
        }
        new = roots;
        level += 1;
    }
    Ok(())
}

/// The stored form of the tile `prior` (none: an empty one) with `add` appended to its own
/// hashes: `prior`'s hashes are copied, and only the inner nodes above the new hashes computed.
/// Equal to [`encode_tile`] of the whole tile; the caller keeps the width within a tile.
fn extend_tile(
    key: TileKey,
    prior: Option<StoredTile<'_>>,
    add: &[Hash],
) -> Result<Vec<u8>, LogError> {
    let old = prior.as_ref().map_or(0, |t| t.width);
    let width = old + add.len();
    let mut out = Vec::with_capacity(2 + stored_hashes(width));
    out.extend_from_slice(&u16::try_from(width).unwrap_or(u16::MAX).to_be_bytes());
    // Where the level below begins in `out`.
    let mut below = 0;
    for h in 0..TILE_HEIGHT {
        let start = out.len();
        let (kept, wide) = (old >> h, width >> h);
        if let Some(tile) = &prior {
            let from = (0..h).map(|i| old >> i).sum::<usize>() * HASH_LEN;
            out.extend_from_slice(&tile.hashes[from..from + kept * HASH_LEN]);
        }
        if h == 0 {
            add.iter().for_each(|hash| out.extend_from_slice(hash));
        } else {
            for pos in kept..wide {
                let (l, r) = pair_at(&out, below + 2 * pos * HASH_LEN).ok_or_else(|| short(key))?;
                let node = node_hash(l, r);
                out.extend_from_slice(&node);
            }
        }
        below = start;
    }
    Ok(out)
}

/// The two hashes from byte `at` of `bytes`, or `None` past its end.
fn pair_at(bytes: &[u8], at: usize) -> Option<(&Hash, &Hash)> {
    let (l, rest) = bytes.get(at..)?.split_first_chunk::<HASH_LEN>()?;
    Some((l, rest.first_chunk::<HASH_LEN>()?))
}

/// The root of the full stored tile `bytes` (at `key`): the hash its level carries up.
///
/// # Errors
/// [`LogError::Corrupt`] when `bytes` is not a full stored tile.
pub(crate) fn tile_root(key: TileKey, bytes: &[u8]) -> Result<Hash, LogError> {
    StoredTile::parse(key, bytes)?
        .root()
        .ok_or_else(|| short(key))
}

fn append_entries(
    size: u64,
    leaves: &[Hash],
    read: &mut impl FnMut(TileKey) -> Result<Option<Vec<u8>>, LogError>,
    writes: &mut Vec<(TileKey, Vec<u8>)>,
) -> Result<(), LogError> {
    let first = size / TILE_WIDTH as u64;
    let held = (size % TILE_WIDTH as u64) as usize;
    let key = TileKey {
        level: ENTRIES,
        index: first,
    };
    let mut data = Vec::with_capacity((held + leaves.len()) * HASH_LEN);
    if held > 0 {
        let bytes = read(key)?.ok_or_else(|| short(key))?;
        if bytes.len() != held * HASH_LEN {
            return Err(short(key));
        }
        data.extend_from_slice(&bytes);
    }
    for leaf in leaves {
        data.extend_from_slice(leaf);
    }
    for (i, chunk) in data.chunks(TILE_WIDTH * HASH_LEN).enumerate() {
        let key = TileKey {
            level: ENTRIES,
            index: first + i as u64,
        };
        writes.push((key, chunk.to_vec()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// Tiles in memory, as a store keeps them.
    #[derive(Default)]
    struct Tiles {
        tiles: Mutex<BTreeMap<TileKey, Vec<u8>>>,
        size: Mutex<u64>,
    }

    impl Tiles {
        fn push(&self, leaves: &[Hash]) {
            let size = *self.size.lock().unwrap();
            let map = self.tiles.lock().unwrap().clone();
            let writes = append(size, leaves, |k| Ok(map.get(&k).cloned())).unwrap();
            let mut tiles = self.tiles.lock().unwrap();
            for (k, v) in writes {
                if let Some(old) = tiles.get(&k) {
                    // A tile only grows: what it held stays.
                    let keep = if k.level == ENTRIES {
                        old.len()
                    } else {
                        old.len().min(2 + 32 * 256)
                    };
                    if k.level == ENTRIES {
                        assert_eq!(&v[..keep], &old[..]);
                    }
                }
                tiles.insert(k, v);
            }
            *self.size.lock().unwrap() += leaves.len() as u64;
        }
    }

    impl LogStore for Tiles {
        fn log_size(&self) -> Result<u64, LogError> {
            Ok(*self.size.lock().unwrap())
        }
        fn leaf_place(&self, _: &Hash) -> Result<Option<LeafPlace>, LogError> {
            Ok(None)
        }
        fn read_tile(&self, key: TileKey) -> Result<Option<Vec<u8>>, LogError> {
            Ok(self.tiles.lock().unwrap().get(&key).cloned())
        }
        fn checkpoints(&self, _: usize) -> Result<Vec<String>, LogError> {
            Ok(Vec::new())
        }
        fn publish_checkpoint(&self, _: u64, note: &str) -> Result<String, LogError> {
            Ok(note.to_owned())
        }
        fn settle_identity(&self, _: &LogIdentity, _: &[String]) -> Result<Settled, LogError> {
            Ok(Settled::Same)
        }
    }

    /// Leaf data for leaf `i`: any 32 bytes will do; these are distinct.
    fn leaf(i: u64) -> Hash {
        cra_tlog::leaf_hash(&i.to_be_bytes())
    }

    /// Appended in uneven batches, the stored tiles answer the same roots and proofs as the
    /// in-memory tree, at every size passed, and serve the same C2SP tiles.
    #[test]
    fn stored_tiles_answer_what_the_tree_answers() {
        let store = Tiles::default();
        let mut tree = cra_tlog::MemoryTree::new();
        let mut n = 0u64;
        let mut sizes = Vec::new();
        for batch in [1u64, 1, 3, 250, 1, 300, 65_536 - 556, 700, 1] {
            let leaves: Vec<Hash> = (n..n + batch).map(leaf).collect();
            for l in &leaves {
                tree.append(leaf_hash(l));
            }
            store.push(&leaves);
            n += batch;
            sizes.push(n);
            let reader = LogReader::new(&store).unwrap();
            assert_eq!(reader.root(n).unwrap(), tree.root(), "size {n}");
        }
        let reader = LogReader::new(&store).unwrap();
        for &old in &sizes {
            assert_eq!(
                reader.consistency(old, n).unwrap(),
                cra_tlog::consistency_proof(&tree, old, n).unwrap()
            );
            for index in [0, old / 2, old - 1] {
                assert_eq!(
                    reader.inclusion(index, old).unwrap(),
                    cra_tlog::inclusion_proof(&tree, index, old).unwrap(),
                    "index {index} size {old}"
                );
            }
        }
        for tile in cra_tlog::tiles::tiles_for_size(n) {
            let served = reader.served_tile(&tile).unwrap().unwrap();
            assert_eq!(served, cra_tlog::tiles::tile_data(&tree, &tile).unwrap());
        }
        let bundle = Tile::entries(1, 4).unwrap();
        let served = reader.served_tile(&bundle).unwrap().unwrap();
        assert_eq!(&served[..2], &[0, 32]);
        assert_eq!(&served[2..34], &leaf(256));
        assert_eq!(served.len(), 4 * 34);
    }

    /// A reader taken at a smaller size serves no tile or proof beyond it.
    #[test]
    fn a_reader_never_answers_beyond_its_size() {
        let store = Tiles::default();
        store.push(&(0..300).map(leaf).collect::<Vec<_>>());
        let reader = LogReader::at(&store, 10);
        assert!(reader.inclusion(10, 11).is_err());
        assert!(
            reader
                .served_tile(&Tile::hashes(0, 0, 11).unwrap())
                .unwrap()
                .is_none()
        );
        assert_eq!(
            reader
                .served_tile(&Tile::hashes(0, 0, 10).unwrap())
                .unwrap()
                .unwrap()
                .len(),
            320
        );
    }

    /// Extending a stored tile computes only the new nodes, and gives the bytes encoding the
    /// whole tile gives, for every split of a tile into what was held and what is added.
    #[test]
    fn an_extended_tile_is_the_whole_tiles_encoding() {
        let base: Vec<Hash> = (0..256).map(leaf).collect();
        let key = TileKey { level: 1, index: 0 };
        for old in [0, 1, 2, 3, 7, 8, 100, 127, 128, 129, 254, 255] {
            for width in [old + 1, old + 2, old + 3, 129, 200, 255, 256] {
                if width <= old || width > 256 {
                    continue;
                }
                let held = encode_tile(&base[..old]);
                let prior = (old > 0).then(|| StoredTile::parse(key, &held).unwrap());
                let extended = extend_tile(key, prior, &base[old..width]).unwrap();
                assert_eq!(extended, encode_tile(&base[..width]), "{old} then {width}");
            }
        }
    }

    /// A stored partial tile narrower than the size says is damage, not a reason to guess.
    #[test]
    fn a_short_partial_tile_is_corruption() {
        let err = append(5, &[leaf(5)], |k| {
            Ok(Some(if k.level == ENTRIES {
                vec![0; 5 * 32]
            } else {
                encode_tile(&[leaf(0); 4])
            }))
        })
        .unwrap_err();
        assert!(matches!(err, LogError::Corrupt(_)), "{err}");
    }
}
