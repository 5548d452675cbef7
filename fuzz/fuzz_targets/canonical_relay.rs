//! cargo-fuzz target `canonical_relay`: see `cra_fuzz::json::canonical_relay` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::json::canonical_relay(data));
