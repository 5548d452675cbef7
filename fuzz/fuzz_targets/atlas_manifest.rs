//! cargo-fuzz target `atlas_manifest`: see `cra_fuzz::atlas_manifest` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::atlas_manifest(data));
