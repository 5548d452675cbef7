//! Session callsigns (§5.5): `adjective-noun`, generated at session start from an injected,
//! seedable source so tests and replays are reproducible. Not unique; a memorability aid.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// 64 adjectives (lowercase ASCII).
pub const ADJECTIVES: [&str; 64] = [
    "amber",
    "bold",
    "brisk",
    "calm",
    "clever",
    "coral",
    "crimson",
    "daring",
    "deft",
    "eager",
    "early",
    "fabled",
    "fleet",
    "gentle",
    "gilded",
    "glad",
    "golden",
    "hardy",
    "hidden",
    "humble",
    "ivory",
    "jade",
    "jolly",
    "keen",
    "kind",
    "lively",
    "lucid",
    "lunar",
    "mellow",
    "misty",
    "nimble",
    "noble",
    "olive",
    "patient",
    "plucky",
    "polar",
    "quiet",
    "rapid",
    "rosy",
    "rustic",
    "sable",
    "sage",
    "scarlet",
    "silent",
    "silver",
    "sly",
    "solar",
    "steady",
    "stout",
    "sunny",
    "swift",
    "tawny",
    "tidal",
    "topaz",
    "upbeat",
    "velvet",
    "vivid",
    "wandering",
    "warm",
    "wild",
    "wise",
    "witty",
    "zesty",
    "zealous",
];

/// 64 nouns (lowercase ASCII; animals and landforms).
pub const NOUNS: [&str; 64] = [
    "badger", "beacon", "bison", "canyon", "cedar", "comet", "condor", "coyote", "crane", "delta",
    "dune", "eagle", "egret", "falcon", "fern", "finch", "fjord", "fox", "gecko", "glacier",
    "harbor", "hawk", "heron", "ibis", "jaguar", "kestrel", "koala", "lark", "lynx", "marten",
    "meadow", "mesa", "moose", "newt", "oriole", "osprey", "otter", "owl", "panda", "pelican",
    "pine", "plover", "quail", "raven", "reef", "ridge", "robin", "salmon", "sparrow", "spruce",
    "stork", "summit", "tern", "thrush", "tiger", "trout", "tundra", "valley", "vole", "walrus",
    "willow", "wren", "yak", "zebra",
];

/// A source of callsigns.
pub trait CallsignSource: Send + Sync + fmt::Debug {
    /// The next callsign.
    fn next_callsign(&self) -> String;
}

/// A deterministic callsign sequence (SplitMix64 over a seed). The same seed gives the same
/// sequence; seed it from the OS for production use.
#[derive(Debug)]
pub struct SeededCallsigns {
    state: AtomicU64,
}

impl SeededCallsigns {
    /// A sequence starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }
}

impl CallsignSource for SeededCallsigns {
    fn next_callsign(&self) -> String {
        let s = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let adj = ADJECTIVES[(z & 63) as usize];
        let noun = NOUNS[((z >> 6) & 63) as usize];
        format!("{adj}-{noun}")
    }
}

/// True when `s` has the callsign shape `word-word` (lowercase ASCII letters).
pub fn is_callsign(s: &str) -> bool {
    match s.split_once('-') {
        Some((a, n)) => {
            !a.is_empty()
                && !n.is_empty()
                && a.bytes().all(|b| b.is_ascii_lowercase())
                && n.bytes().all(|b| b.is_ascii_lowercase())
        }
        None => false,
    }
}
