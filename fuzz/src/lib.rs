//! The harnesses behind cra's cargo-fuzz targets, one function per parser of untrusted input.
//!
//! Each function takes the fuzzer's bytes, runs the parser, and checks an oracle; a violated
//! oracle panics, which libFuzzer reports as a crash with the input saved under `artifacts/`.
//! Inputs the parser refuses are fine as long as it refuses them with an error rather than a
//! panic, a hang or an unbounded allocation (libFuzzer's `-timeout` and `-malloc_limit_mb` catch
//! the last two). The targets in `fuzz_targets/` are one line each; `README.md` lists the
//! oracles.

pub mod archive;
pub mod atlas;
pub mod carp;
pub mod json;
pub mod relay;
pub mod trace;

/// The repository root (the fuzz crate lives in `<root>/fuzz`).
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}

/// The `atlas_manifest` target: one file of an atlas from the input, then the atlas compiled for
/// CARP and a request resolved against it.
pub fn atlas_manifest(data: &[u8]) {
    atlas::atlas_manifest_with(data, carp::compile_and_resolve);
}
