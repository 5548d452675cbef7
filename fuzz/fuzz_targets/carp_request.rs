//! cargo-fuzz target `carp_request`: see `cra_fuzz::carp::carp_request` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::carp::carp_request(data));
