//! cargo-fuzz target `atlas_archive`: see `cra_fuzz::archive::atlas_archive` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::archive::atlas_archive(data));
