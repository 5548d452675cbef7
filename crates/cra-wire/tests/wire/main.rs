//! Integration tests of `cra-wire`, one module per area.

mod relay_canonical;
mod trace_canonical;
