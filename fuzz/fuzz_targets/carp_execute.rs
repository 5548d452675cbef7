//! cargo-fuzz target `carp_execute`: see `cra_fuzz::carp::carp_execute` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::carp::carp_execute(data));
