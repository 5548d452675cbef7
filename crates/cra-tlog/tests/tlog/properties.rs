//! Properties over random trees: the tiles a store would keep answer the same roots and proofs
//! as the in-memory tree, so a tile store never needs the tree rebuilt; and verification and
//! parsing are total (any input gives a value or a typed error, never a panic).

use std::collections::HashMap;

use cra_tlog::tiles::{Tile, tile_data, tiles_for_size};
use cra_tlog::{
    Checkpoint, Ed25519Signer, Ed25519Verifier, Hash, HashReadError, MemoryTree, Note,
    TileHashReader, TileReader, TlogProof, consistency_proof, inclusion_proof, root,
    verify_consistency, verify_inclusion,
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Verification is total: any coordinates and any proof give `Ok` or a typed error.
    #[test]
    fn verification_never_panics(
        index in any::<u64>(),
        size in prop_oneof![any::<u64>(), 0u64..100, Just(u64::MAX)],
        old in prop_oneof![any::<u64>(), 0u64..100, Just(u64::MAX - 1)],
        proof in prop::collection::vec(any::<[u8; 32]>(), 0..70),
        root_a in any::<[u8; 32]>(),
        root_b in any::<[u8; 32]>(),
    ) {
        let proof: Vec<Hash> = proof;
        let _ = verify_inclusion(&root_a, index, size, &proof, &root_b);
        let _ = verify_inclusion(&root_a, size.saturating_sub(1), size, &proof, &root_b);
        let _ = verify_consistency(old, size, &root_a, &root_b, &proof);
        let _ = verify_consistency(size.saturating_sub(1), size, &root_a, &root_b, &proof);
    }

    /// Parsers are total: any text gives a value or a typed error.
    #[test]
    fn parsers_never_panic(text in ".{0,300}", bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        for t in [text.as_str(), &format!("a\n\n\u{2014} {text}\n"), &format!("o\n{text}\n")] {
            let _ = Note::parse(t.as_bytes());
            let _ = Checkpoint::parse(t);
            let _ = TlogProof::parse(t);
            let _ = TlogProof::parse(&format!("c2sp.org/tlog-proof@v1\n{t}"));
            let _ = Tile::parse_path(t);
            let _ = Tile::parse_path(&format!("tile/{t}"));
            let _ = Ed25519Verifier::parse(t);
            let _ = Ed25519Signer::parse(t);
        }
        let _ = Note::parse(&bytes);
    }
}
