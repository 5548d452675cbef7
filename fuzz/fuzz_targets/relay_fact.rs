//! cargo-fuzz target `relay_fact`: see `cra_fuzz::relay::relay_fact` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::relay::relay_fact(data));
