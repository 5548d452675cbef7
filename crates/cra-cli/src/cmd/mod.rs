//! The command groups, one module each.

pub mod atlas;
pub mod conformance;
pub mod relay;
pub mod trace;
pub mod serve;
pub mod tail;
pub mod atlas_test;
pub mod resolve;
