//! cargo-fuzz target `relay_import`: see `cra_fuzz::relay::relay_import` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::relay::relay_import(data));
