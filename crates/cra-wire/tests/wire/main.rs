//! Integration tests of `cra-wire`, one module per area.

#[allow(clippy::panic)]
mod fuzz_props;
mod relay_canonical;
mod trace_canonical;
