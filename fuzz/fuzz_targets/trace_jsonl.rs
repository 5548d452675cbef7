//! cargo-fuzz target `trace_jsonl`: see `cra_fuzz::trace::trace_jsonl` for the input form and the oracles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cra_fuzz::trace::trace_jsonl(data));
