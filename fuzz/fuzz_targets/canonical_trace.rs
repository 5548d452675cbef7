//! cargo-fuzz target `canonical_trace`: see `cra_fuzz::json::canonical_trace` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::json::canonical_trace(data));
