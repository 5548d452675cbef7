//! Properties over random trees: the tiles a store would keep answer the same roots and proofs
//! as the in-memory tree, so a tile store never needs the tree rebuilt.

use std::collections::HashMap;

use cra_tlog::tiles::{Tile, tile_data, tiles_for_size};
use cra_tlog::{
    HashReadError, MemoryTree, TileHashReader, TileReader, consistency_proof, inclusion_proof, root,
};
use proptest::prelude::*;

use crate::support::leaves;

/// A tile store: the tiles of one tree size, in a map.
struct TileStore(HashMap<Tile, Vec<u8>>);

impl TileReader for TileStore {
    fn read_tile(&self, tile: &Tile) -> Result<Vec<u8>, HashReadError> {
        self.0.get(tile).cloned().ok_or(HashReadError::Missing {
            level: 0,
            index: tile.index(),
        })
    }
}

fn store_of(tree: &MemoryTree, size: u64) -> TileStore {
    let tiles = tiles_for_size(size).into_iter();
    TileStore(
        tiles
            .map(|t| (t, tile_data(tree, &t).expect("tile data")))
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn the_root_from_tiles_is_the_root_of_the_tree(size in 0u64..150_000, pick in any::<u64>()) {
        let tree = MemoryTree::from_leaf_hashes(&leaves(size));
        let reader = TileHashReader::new(size, store_of(&tree, size));
        prop_assert_eq!(root(&reader, size).ok(), Some(tree.root()));
        if size > 0 {
            let index = pick % size;
            let old = pick % (size + 1);
            prop_assert_eq!(
                inclusion_proof(&reader, index, size).ok(),
                inclusion_proof(&tree, index, size).ok()
            );
            prop_assert_eq!(
                consistency_proof(&reader, old, size).ok(),
                consistency_proof(&tree, old, size).ok()
            );
            prop_assert_eq!(root(&reader, old).ok(), root(&tree, old).ok());
        }
    }
}
