//! Proofs, roots, tile paths and tile contents against Cloudflare's `tlog_tiles` (azul, a port
//! of Go's `sumdb/tlog`), which we did not write.
//!
//! `tlog_tiles` 0.2 names tiles in Go's `sumdb` form (`tile/<H>/<L>/...`, `tile/<H>/data/...`);
//! C2SP tlog-tiles drops the height element and calls data tiles `entries`. The path test maps
//! one form to the other and checks everything else is equal.

use std::collections::BTreeSet;

use cra_tlog::tiles::{Tile, TileKind, tile_data, tiles_for_size};
use cra_tlog::{
    Hash, HashReadError, HashReader, MemoryTree, TileHashReader, TileReader, consistency_proof,
    inclusion_proof, root, verify_consistency, verify_inclusion,
};
use rand::Rng as _;
use tlog_tiles as azul;

use crate::support::{leaves, seeded_rng};

/// Our in-memory tree as azul's `HashReader` (stored-hash indexes to complete subtrees).
struct Azul<'a>(&'a MemoryTree);

impl azul::HashReader for Azul<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<azul::Hash>, azul::Error> {
        indexes
            .iter()
            .map(|&i| {
                let (level, n) = azul::split_stored_hash_index(i);
                let hash = self.0.subtree_hash(level, n);
                hash.map(azul::Hash)
                    .map_err(|_| azul::Error::IndexesNotInTree)
            })
            .collect()
    }
}

fn hashes(proof: &[azul::Hash]) -> Vec<Hash> {
    proof.iter().map(|h| h.0).collect()
}

fn azul_hashes(proof: &[Hash]) -> Vec<azul::Hash> {
    proof.iter().copied().map(azul::Hash).collect()
}

/// Checks one inclusion proof both ways: ours equals azul's, each verifies with the other.
fn check_inclusion(tree: &MemoryTree, leaves: &[Hash], index: u64, size: u64, root_n: &Hash) {
    let ours = inclusion_proof(tree, index, size).expect("our inclusion proof");
    let theirs = azul::prove_record(size, index, &Azul(tree)).expect("azul inclusion proof");
    assert_eq!(ours, hashes(&theirs), "inclusion of {index} in {size}");
    let leaf = leaves[index as usize];
    azul::check_record(
        &azul_hashes(&ours),
        size,
        azul::Hash(*root_n),
        index,
        azul::Hash(leaf),
    )
    .unwrap_or_else(|e| panic!("azul rejects our proof of {index} in {size}: {e}"));
    assert_eq!(
        verify_inclusion(&leaf, index, size, &hashes(&theirs), root_n),
        Ok(())
    );
}

/// Checks one consistency proof both ways (azul takes `1 <= old <= new`).
fn check_consistency(tree: &MemoryTree, old: u64, new: u64) {
    let (r_old, r_new) = (
        root(tree, old).expect("old root"),
        root(tree, new).expect("new root"),
    );
    let ours = consistency_proof(tree, old, new).expect("our consistency proof");
    assert_eq!(verify_consistency(old, new, &r_old, &r_new, &ours), Ok(()));
    if old == 0 {
        assert!(ours.is_empty());
        return;
    }
    let theirs = azul::prove_tree(new, old, &Azul(tree)).expect("azul consistency proof");
    assert_eq!(ours, hashes(&theirs), "consistency {old} -> {new}");
    azul::check_tree(
        &azul_hashes(&ours),
        new,
        azul::Hash(r_new),
        old,
        azul::Hash(r_old),
    )
    .unwrap_or_else(|e| panic!("azul rejects our proof {old} -> {new}: {e}"));
}

#[test]
fn every_proof_of_sizes_1_to_70_agrees_with_azul() {
    let all = leaves(70);
    let tree = MemoryTree::from_leaf_hashes(&all);
    for size in 1..=70u64 {
        let root_n = root(&tree, size).expect("root");
        let theirs = azul::tree_hash(size, &Azul(&tree)).expect("azul root");
        assert_eq!(root_n, theirs.0, "root of {size}");
        for index in 0..size {
            check_inclusion(&tree, &all, index, size, &root_n);
        }
        for old in 0..=size {
            check_consistency(&tree, old, size);
        }
    }
}

#[test]
fn large_random_trees_agree_with_azul() {
    let mut rng = seeded_rng("large_random_trees_agree_with_azul");
    for _ in 0..3 {
        let size: u64 = rng.random_range(1_000..200_000);
        println!("size {size}");
        let all = leaves(size);
        let tree = MemoryTree::from_leaf_hashes(&all);
        let root_n = root(&tree, size).expect("root");
        assert_eq!(
            azul::tree_hash(size, &Azul(&tree)).map(|h| h.0).ok(),
            Some(root_n)
        );
        for _ in 0..40 {
            check_inclusion(&tree, &all, rng.random_range(0..size), size, &root_n);
            let old = rng.random_range(0..=size);
            check_consistency(&tree, old, size);
            let new = rng.random_range(old..=size);
            check_consistency(&tree, old, new);
        }
        check_inclusion(&tree, &all, size - 1, size, &root_n);
        check_consistency(&tree, size - 1, size);
    }
}

fn azul_tile(tile: &Tile) -> azul::Tile {
    let (level, data) = match tile.kind() {
        TileKind::Hashes { level } => (level, false),
        TileKind::Entries => (0, true),
    };
    azul::Tile::new(8, level, tile.index(), u32::from(tile.width()), data)
}

#[test]
fn tile_paths_match_azul_up_to_the_c2sp_naming() {
    let indexes = [0, 1, 999, 1000, 1001, 999_999, 1_234_067, 1 << 40, u64::MAX];
    for index in indexes {
        for width in [1, 17, 255, 256] {
            let mut tiles: Vec<Tile> = (0..6u8)
                .map(|level| Tile::hashes(level, index, width).expect("tile"))
                .collect();
            tiles.push(Tile::entries(index, width).expect("bundle"));
            for tile in tiles {
                let theirs = azul_tile(&tile).path();
                let mapped =
                    theirs
                        .replacen("tile/8/", "tile/", 1)
                        .replacen("/data/", "/entries/", 1);
                assert_eq!(tile.path(), mapped);
                let parsed = azul::Tile::from_path(&theirs).expect("azul parses its path");
                assert_eq!(parsed, azul_tile(&tile));
                assert_eq!(Tile::parse_path(&mapped), Ok(tile));
            }
        }
    }
}

/// Tiles served from our `tile_data` of an in-memory tree.
struct Tiles<'a>(&'a MemoryTree);

impl TileReader for Tiles<'_> {
    fn read_tile(&self, tile: &Tile) -> Result<Vec<u8>, HashReadError> {
        tile_data(self.0, tile)
    }
}

impl azul::TileReader for Tiles<'_> {
    fn height(&self) -> u8 {
        8
    }

    fn read_tiles(&self, tiles: &[azul::Tile]) -> Result<Vec<Vec<u8>>, azul::Error> {
        tiles
            .iter()
            .map(|t| {
                let width = u16::try_from(t.width()).map_err(|_| azul::Error::InvalidTile)?;
                let ours = Tile::hashes(t.level(), t.level_index(), width)
                    .map_err(|_| azul::Error::InvalidTile)?;
                tile_data(self.0, &ours).map_err(|_| azul::Error::InvalidTile)
            })
            .collect()
    }

    fn save_tiles(&self, _tiles: &[azul::Tile], _data: &[Vec<u8>]) {}
}

#[test]
fn tile_contents_match_azul_and_azul_reads_proofs_from_our_tiles() {
    let mut rng = seeded_rng("tile_contents_match_azul_and_azul_reads_proofs_from_our_tiles");
    let mut sizes = BTreeSet::from([1u64, 255, 256, 257, 65_535, 65_536, 65_537, 70_000]);
    sizes.insert(rng.random_range(1..140_000));
    let all = leaves(*sizes.last().expect("sizes"));
    let tree_all = MemoryTree::from_leaf_hashes(&all);
    for size in sizes {
        let tree = MemoryTree::from_leaf_hashes(&all[..size as usize]);
        for tile in tiles_for_size(size) {
            let theirs = azul_tile(&tile).read_data(&Azul(&tree)).expect("azul tile");
            assert_eq!(
                tile_data(&tree, &tile).ok(),
                Some(theirs),
                "{}",
                tile.path()
            );
        }
        let root_n = root(&tree, size).expect("root");
        let served = Tiles(&tree_all);
        let azul_reader = azul::TileHashReader::new(size, azul::Hash(root_n), &served);
        let through_tiles = azul::tree_hash(size, &azul_reader).expect("azul root via tiles");
        assert_eq!(through_tiles.0, root_n, "size {size}");
        let ours = TileHashReader::new(size, Tiles(&tree));
        for _ in 0..10 {
            let index = rng.random_range(0..size);
            let theirs = azul::prove_record(size, index, &azul_reader).expect("azul via tiles");
            let from_our_tiles = inclusion_proof(&ours, index, size).expect("ours via tiles");
            assert_eq!(hashes(&theirs), from_our_tiles, "index {index} of {size}");
        }
    }
}
