//! The one integration-test binary of `cra-carp`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cache;
mod common;
mod engine;
mod fuzz_props;
mod golden;
mod history;
mod params;
mod props;
mod reconstruct;
mod replay;
mod store;
mod table;
mod wide_numbers;
