//! The closed vocabularies of the fixture format: suites, levels, surfaces, abstract verbs and
//! setup keys. `conformance/README.md` documents the same lists and a test keeps them equal.

/// The two suites.
pub const SUITES: &[&str] = &["cra", "relay"];

/// CRA conformance levels (spec §7.1) and Relay levels (§11), lowest first within a suite.
pub const CRA_LEVELS: &[&str] = &["carp-core", "trace-core", "atlas-core", "cra-full"];
/// Relay levels, each including the ones before it.
pub const RELAY_LEVELS: &[&str] = &["L0", "L1", "L2", "L3"];

/// Every surface a fixture may belong to.
pub const SURFACES: &[&str] = &[
    "schema",
    "hash-chain",
    "verify",
    "policy",
    "resolve",
    "execute",
    "replay",
    "golden",
    "atlas-load",
    "relay-wire",
    "content-hash",
    "deposit",
    "pull",
    "orient",
    "facts-supersession",
    "facts-as-of",
    "review",
    "export-roundtrip",
    "http-errors",
    "interop",
    "stream",
];

/// The abstract verbs an `input.operation` (or a setup step) may name.
pub const VERBS: &[&str] = &[
    "canonical_trace",
    "hash_event",
    "verify_chain",
    "validate_request",
    "resolve",
    "execute",
    "replay",
    "load_atlas",
    "relay_canonical",
    "content_hash",
    "deposit",
    "pull",
    "orient",
    "assert_fact",
    "invalidate_fact",
    "get_facts",
    "flag_for_review",
    "review",
    "export_import",
    "stream",
    "http",
];

/// The keys a fixture's `setup` object may carry.
pub const SETUP_KEYS: &[&str] = &[
    "now", "id_seed", "atlases", "sessions", "events", "projects", "packages", "facts", "steps",
];

/// Whether a fixture at `fixture_level` counts towards a claim of `claimed`: levels include the
/// ones below them (L3 includes L0-L2; `cra-full` includes the three core levels).
pub fn level_covers(claimed: &str, fixture_level: &str) -> bool {
    if claimed == fixture_level {
        return true;
    }
    if claimed == "cra-full" {
        return CRA_LEVELS.contains(&fixture_level);
    }
    match (
        RELAY_LEVELS.iter().position(|l| *l == claimed),
        RELAY_LEVELS.iter().position(|l| *l == fixture_level),
    ) {
        (Some(c), Some(f)) => f <= c,
        _ => false,
    }
}

/// The suite a level belongs to.
pub fn suite_of_level(level: &str) -> Option<&'static str> {
    if CRA_LEVELS.contains(&level) {
        Some("cra")
    } else if RELAY_LEVELS.contains(&level) {
        Some("relay")
    } else {
        None
    }
}
