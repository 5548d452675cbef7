//! The command groups, one module each.

pub mod trace;
