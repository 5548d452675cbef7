//! Integration tests of `cra-trace`, one module per area.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod diff;
mod fields;
mod fuzz_props;
mod lifecycle;
mod seal;
mod support;
mod vectors;
mod verify;
