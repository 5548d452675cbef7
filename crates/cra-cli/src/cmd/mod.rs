//! The command groups, one module each.

pub mod atlas;
pub mod atlas_test;
pub mod conformance;
pub mod relay;
pub mod resolve;
pub mod serve;
pub mod tail;
pub mod trace;
