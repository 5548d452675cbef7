//! cargo-fuzz target `strict_json`: see `cra_fuzz::json::strict_json` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::json::strict_json(data));
