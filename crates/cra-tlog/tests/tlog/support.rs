//! Shared helpers: leaves, keys, and the seeded generator of the randomised tests.

use cra_tlog::{Ed25519Signer, Hash, leaf_hash};
use rand::SeedableRng as _;
use rand::rngs::StdRng;

/// Leaf hashes of `n` made-up events: the leaf data is a 32-byte "event hash".
pub(crate) fn leaves(n: u64) -> Vec<Hash> {
    (0..n).map(|i| leaf_hash(&event_hash(i))).collect()
}

/// A stand-in for the `event_hash` of event `i`.
pub(crate) fn event_hash(i: u64) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&i.to_be_bytes());
    bytes[31] = 0xe7;
    bytes
}

/// A signer for `name` from a fixed seed.
pub(crate) fn signer(name: &str, seed: u8) -> Ed25519Signer {
    match Ed25519Signer::from_seed(name, &[seed; 32]) {
        Ok(signer) => signer,
        Err(e) => panic!("signer {name}: {e}"),
    }
}

/// A generator seeded from `CRA_TLOG_SEED`, or a fresh seed; the seed is printed so a failure
/// can be replayed.
pub(crate) fn seeded_rng(test: &str) -> StdRng {
    let seed = std::env::var("CRA_TLOG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("{test}: seed {seed} (replay with CRA_TLOG_SEED={seed})");
    StdRng::seed_from_u64(seed)
}
