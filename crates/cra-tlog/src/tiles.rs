//! C2SP `tlog-tiles` (c2sp.org/tlog-tiles): tile coordinates and paths, the contents of a tile
//! from stored hashes, and a [`HashReader`] over tiles so a store that keeps tiles answers
//! proofs.
//!
//! A tile at level `L` and index `N` holds up to [`TILE_WIDTH`] consecutive hashes of Merkle
//! level `L * TILE_HEIGHT`, from index `N * 256`: each is the root of a complete subtree of
//! `256^L` leaves. A full tile is 256 hashes (8,192 bytes); the rightmost tile of a level is
//! partial (1 to 255 hashes, path suffix `.p/<W>`). Entry bundles (`tile/entries/...`) share
//! the index and width scheme; only their paths are here.
//!
//! # Invariants (tested by name)
//! * a path parses back to the tile that printed it, and only canonical paths parse
//!   (`paths_round_trip_and_only_canonical_ones_parse`);
//! * [`tiles_for_size`] lists exactly the tiles of a tree, with the spec's example of 70,000
//!   leaves (`the_tiles_of_a_tree_follow_the_spec_example`);
//! * [`TileHashReader`] answers every complete subtree the tree has, as the hashes the tiles
//!   were made from (`tiles_answer_every_subtree`).

use crate::hash::{HASH_LEN, Hash, root_of};
use crate::proof::{HashReadError, HashReader};

/// The height of a tile: 8 Merkle levels.
pub const TILE_HEIGHT: u8 = 8;

/// The width of a full tile: 256 hashes.
pub const TILE_WIDTH: u16 = 256;

/// The highest tile level a path may name.
pub const MAX_TILE_LEVEL: u8 = 63;

/// What a tile holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TileKind {
    /// Merkle tree hashes at this tile level (0 = leaf hashes).
    Hashes {
        /// The tile level (0..=63).
        level: u8,
    },
    /// An entry bundle (the log entries of a level-0 tile).
    Entries,
}

/// A tile: what it holds, its index in its level, and its width (1..=256; 256 is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tile {
    kind: TileKind,
    index: u64,
    width: u16,
}

/// Why a tile could not be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TileError {
    /// The level is above 63.
    #[error("tile level {level} is above the highest, {MAX_TILE_LEVEL}")]
    LevelTooHigh {
        /// The level.
        level: u8,
    },
    /// The width is 0 or above 256.
    #[error("a tile is 1 to 256 hashes wide, not {width}")]
    BadWidth {
        /// The width.
        width: u16,
    },
    /// The path is not a canonical tile path.
    #[error(
        "{path:?} is not a tile path: tile/<level>/<index in 3-digit groups, all but the last x-prefixed>[.p/<width 1-255>] or tile/entries/..."
    )]
    BadPath {
        /// The path.
        path: String,
    },
}

impl Tile {
    /// A hash tile.
    ///
    /// # Errors
    /// [`TileError::LevelTooHigh`] or [`TileError::BadWidth`].
    pub fn hashes(level: u8, index: u64, width: u16) -> Result<Self, TileError> {
        if level > MAX_TILE_LEVEL {
            return Err(TileError::LevelTooHigh { level });
        }
        Self::new(TileKind::Hashes { level }, index, width)
    }

    /// An entry bundle.
    ///
    /// # Errors
    /// [`TileError::BadWidth`].
    pub fn entries(index: u64, width: u16) -> Result<Self, TileError> {
        Self::new(TileKind::Entries, index, width)
    }

    fn new(kind: TileKind, index: u64, width: u16) -> Result<Self, TileError> {
        if width == 0 || width > TILE_WIDTH {
            return Err(TileError::BadWidth { width });
        }
        Ok(Self { kind, index, width })
    }

    /// What the tile holds.
    pub fn kind(&self) -> TileKind {
        self.kind
    }

    /// The index within its level.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// How many hashes (or entries) it holds.
    pub fn width(&self) -> u16 {
        self.width
    }

    /// Whether it is full (256 wide).
    pub fn is_full(&self) -> bool {
        self.width == TILE_WIDTH
    }

    /// The path, relative to the log's prefix: `tile/<L>/<N>[.p/<W>]` or
    /// `tile/entries/<N>[.p/<W>]`.
    pub fn path(&self) -> String {
        let level = match self.kind {
            TileKind::Hashes { level } => level.to_string(),
            TileKind::Entries => "entries".to_owned(),
        };
        let mut path = format!("tile/{level}/{}", index_path(self.index));
        if !self.is_full() {
            path.push_str(&format!(".p/{}", self.width));
        }
        path
    }

    /// Reads a canonical tile path (exactly what [`Tile::path`] prints).
    ///
    /// # Errors
    /// [`TileError::BadPath`].
    pub fn parse_path(path: &str) -> Result<Self, TileError> {
        let bad = || TileError::BadPath {
            path: path.to_owned(),
        };
        let tile = parse_path_loosely(path).ok_or_else(bad)?;
        if tile.path() != path {
            return Err(bad());
        }
        Ok(tile)
    }
}

/// `N` in 3-digit groups, all but the last prefixed with `x`.
fn index_path(index: u64) -> String {
    let mut groups = vec![format!("{:03}", index % 1000)];
    let mut rest = index / 1000;
    while rest > 0 {
        groups.push(format!("x{:03}", rest % 1000));
        rest /= 1000;
    }
    groups.reverse();
    groups.join("/")
}

/// Reads a path's fields without insisting on its canonical form (the caller re-prints it).
fn parse_path_loosely(path: &str) -> Option<Tile> {
    let rest = path.strip_prefix("tile/")?;
    let (level, rest) = rest.split_once('/')?;
    let (index_part, width) = match rest.split_once(".p/") {
        Some((index_part, width)) => (index_part, width.parse::<u16>().ok()?),
        None => (rest, TILE_WIDTH),
    };
    let mut index: u64 = 0;
    for group in index_part.split('/') {
        let digits = group.strip_prefix('x').unwrap_or(group);
        if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        index = index
            .checked_mul(1000)?
            .checked_add(digits.parse::<u64>().ok()?)?;
    }
    let tile = if level == "entries" {
        Tile::entries(index, width)
    } else {
        Tile::hashes(level.parse().ok()?, index, width)
    };
    tile.ok()
}

/// How many hashes a tree of `size` leaves has at Merkle level `level` (complete subtrees).
fn hashes_at(size: u64, level: u32) -> u64 {
    size.checked_shr(level).unwrap_or(0)
}

/// The tile of hash level `level` and index `index` in a tree of `size` leaves: full if the
/// tree fills it, else partial. `None` when the tree has no hash in it.
pub fn tile_in_tree(level: u8, index: u64, size: u64) -> Option<Tile> {
    let count = hashes_at(size, u32::from(level) * u32::from(TILE_HEIGHT));
    let start = index.checked_mul(u64::from(TILE_WIDTH))?;
    if start >= count {
        return None;
    }
    let width = (count - start).min(u64::from(TILE_WIDTH));
    Tile::hashes(level, index, u16::try_from(width).ok()?).ok()
}

/// Every hash tile of a tree of `size` leaves, level by level, the rightmost of each level
/// partial when the level's count is not a multiple of 256. (A full tile supersedes the
/// partial tiles of its index; those are not listed.)
pub fn tiles_for_size(size: u64) -> Vec<Tile> {
    let mut tiles = Vec::new();
    for level in 0..=MAX_TILE_LEVEL {
        let count = hashes_at(size, u32::from(level) * u32::from(TILE_HEIGHT));
        if count == 0 {
            break;
        }
        let n_tiles = count.div_ceil(u64::from(TILE_WIDTH));
        tiles.extend((0..n_tiles).filter_map(|index| tile_in_tree(level, index, size)));
    }
    tiles
}

/// The tiles a store writes when its tree grows from `old` to `new` leaves: each tile of the
/// new tree whose contents differ from the old tree's (a new tile, or a wider one).
pub fn new_tiles(old: u64, new: u64) -> Vec<Tile> {
    let mut tiles = Vec::new();
    for level in 0..=MAX_TILE_LEVEL {
        let shift = u32::from(level) * u32::from(TILE_HEIGHT);
        let (old_count, new_count) = (hashes_at(old, shift), hashes_at(new, shift));
        if new_count <= old_count {
            break;
        }
        let first = old_count / u64::from(TILE_WIDTH);
        let last = new_count.div_ceil(u64::from(TILE_WIDTH));
        tiles.extend((first..last).filter_map(|index| tile_in_tree(level, index, new)));
    }
    tiles
}

/// The contents of a hash tile: the concatenation of its `width` hashes, read from stored
/// complete subtrees (`subtree_hash(8 * L, N * 256 + i)`).
///
/// # Errors
/// What the reader met; [`HashReadError::Malformed`] for an entry bundle (not hashes).
pub fn tile_data<R: HashReader + ?Sized>(
    reader: &R,
    tile: &Tile,
) -> Result<Vec<u8>, HashReadError> {
    let TileKind::Hashes { level } = tile.kind else {
        return Err(HashReadError::Malformed(
            "an entry bundle holds entries, not hashes".into(),
        ));
    };
    let hash_level = level.checked_mul(TILE_HEIGHT).ok_or_else(|| {
        HashReadError::Malformed(format!("tile level {level} is beyond u8 hash levels"))
    })?;
    let mut data = Vec::with_capacity(usize::from(tile.width) * HASH_LEN);
    for i in 0..u64::from(tile.width) {
        let index = tile
            .index
            .saturating_mul(u64::from(TILE_WIDTH))
            .saturating_add(i);
        data.extend_from_slice(&reader.subtree_hash(hash_level, index)?);
    }
    Ok(data)
}

/// Where a store's tiles come from.
pub trait TileReader {
    /// The contents of a hash tile (exactly `width * 32` bytes).
    ///
    /// # Errors
    /// [`HashReadError::Missing`] when the store does not have it, or what the store met.
    fn read_tile(&self, tile: &Tile) -> Result<Vec<u8>, HashReadError>;
}

/// A [`HashReader`] over the tiles of a tree of a given size: every complete subtree is
/// answered from one tile, hashing at most 128 of its hashes together.
#[derive(Debug, Clone)]
pub struct TileHashReader<T> {
    size: u64,
    tiles: T,
}

impl<T: TileReader> TileHashReader<T> {
    /// A reader of the tree of `size` leaves whose tiles `tiles` holds.
    pub fn new(size: u64, tiles: T) -> Self {
        Self { size, tiles }
    }
}

impl<T: TileReader> HashReader for TileHashReader<T> {
    fn size(&self) -> u64 {
        self.size
    }

    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, HashReadError> {
        let missing = HashReadError::Missing { level, index };
        let (tile_level, below) = (level / TILE_HEIGHT, level % TILE_HEIGHT);
        let first = index
            .checked_shl(u32::from(below))
            .filter(|f| f >> below == index);
        let first = first.ok_or(HashReadError::Missing { level, index })?;
        let span = 1u64 << below;
        let tile_index = first / u64::from(TILE_WIDTH);
        let offset = first % u64::from(TILE_WIDTH);
        let tile = tile_in_tree(tile_level, tile_index, self.size).ok_or(missing)?;
        if offset + span > u64::from(tile.width) {
            return Err(HashReadError::Missing { level, index });
        }
        let data = self.tiles.read_tile(&tile)?;
        if data.len() != usize::from(tile.width) * HASH_LEN {
            return Err(HashReadError::Malformed(format!(
                "tile {} is {} bytes, not {}",
                tile.path(),
                data.len(),
                usize::from(tile.width) * HASH_LEN
            )));
        }
        let hashes: Vec<Hash> = data
            .chunks_exact(HASH_LEN)
            .skip(offset as usize)
            .take(span as usize)
            .filter_map(|c| Hash::try_from(c).ok())
            .collect();
        Ok(root_of(&hashes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::leaf_hash;
    use crate::proof::MemoryTree;
    use std::collections::HashMap;

    #[test]
    fn paths_round_trip_and_only_canonical_ones_parse() {
        let cases = [
            (Tile::hashes(0, 1_234_067, 256), "tile/0/x001/x234/067"),
            (Tile::hashes(1, 5, 17), "tile/1/005.p/17"),
            (Tile::hashes(63, 1000, 1), "tile/63/x001/000.p/1"),
            (Tile::entries(0, 256), "tile/entries/000"),
            (
                Tile::entries(u64::MAX, 3),
                "tile/entries/x018/x446/x744/x073/x709/x551/615.p/3",
            ),
        ];
        for (tile, path) in cases {
            let Ok(tile) = tile else {
                unreachable!("{path}")
            };
            assert_eq!(tile.path(), path);
            assert_eq!(Tile::parse_path(path), Ok(tile));
        }
        let bad = [
            "tile/0/1",
            "tile/0/x000/001",
            "tile/0/001/002",
            "tile/00/001",
            "tile/64/001",
            "tile/0/001.p/256",
            "tile/0/001.p/0",
            "tile/0/001.p/07",
            "tile/data/001",
            "tile/0/",
            "tile/0/x018/x446/x744/x073/x709/x551/616",
            "tiles/0/001",
            "tile/0/-01",
        ];
        for path in bad {
            assert!(Tile::parse_path(path).is_err(), "{path}");
        }
        assert_eq!(Tile::hashes(0, 0, 0), Err(TileError::BadWidth { width: 0 }));
        assert_eq!(
            Tile::hashes(64, 0, 1),
            Err(TileError::LevelTooHigh { level: 64 })
        );
    }

    #[test]
    fn the_tiles_of_a_tree_follow_the_spec_example() {
        let tiles = tiles_for_size(70_000);
        let at = |level| {
            tiles
                .iter()
                .filter(move |t| t.kind == TileKind::Hashes { level })
        };
        assert_eq!(at(0).filter(|t| t.is_full()).count(), 273);
        assert_eq!(
            at(0)
                .filter(|t| !t.is_full())
                .map(|t| t.width)
                .collect::<Vec<_>>(),
            [112]
        );
        assert_eq!(at(1).map(|t| t.width).collect::<Vec<_>>(), [256, 17]);
        assert_eq!(at(2).map(|t| t.width).collect::<Vec<_>>(), [1]);
        assert_eq!(tiles.len(), 277);
        let widths = |size| {
            tiles_for_size(size)
                .iter()
                .map(|t| t.path())
                .collect::<Vec<_>>()
        };
        assert_eq!(widths(256), ["tile/0/000", "tile/1/000.p/1"]);
        assert!(tiles_for_size(0).is_empty());
        assert_eq!(new_tiles(0, 70_000), tiles);
        assert_eq!(
            new_tiles(256, 300)
                .iter()
                .map(Tile::path)
                .collect::<Vec<_>>(),
            ["tile/0/001.p/44"]
        );
    }

    struct Store(HashMap<Tile, Vec<u8>>);

    impl TileReader for Store {
        fn read_tile(&self, tile: &Tile) -> Result<Vec<u8>, HashReadError> {
            self.0
                .get(tile)
                .cloned()
                .ok_or(HashReadError::Missing { level: 0, index: 0 })
        }
    }

    #[test]
    fn tiles_answer_every_subtree() {
        let size = 256 * 3 + 70;
        let leaves: Vec<Hash> = (0..size)
            .map(|i: u64| leaf_hash(&i.to_be_bytes()))
            .collect();
        let tree = MemoryTree::from_leaf_hashes(&leaves);
        let store = Store(
            tiles_for_size(size)
                .into_iter()
                .filter_map(|t| tile_data(&tree, &t).ok().map(|d| (t, d)))
                .collect(),
        );
        let reader = TileHashReader::new(size, store);
        for level in 0..12u8 {
            let count = size >> level;
            for index in 0..count {
                assert_eq!(
                    reader.subtree_hash(level, index).ok(),
                    tree.subtree_hash(level, index).ok(),
                    "level {level}, index {index}"
                );
            }
            assert!(reader.subtree_hash(level, count).is_err());
        }
        assert!(reader.subtree_hash(63, u64::MAX).is_err());
    }
}
