//! The command groups, one module each.

pub mod approvals;
pub mod atlas;
pub mod atlas_cases;
pub mod atlas_report;
pub mod atlas_sign;
pub mod atlas_simulate;
pub mod atlas_test;
pub mod backup;
pub mod client;
pub mod completions;
pub mod conformance;
pub mod keys;
pub mod log;
pub mod log_receipt;
pub mod mcp;
pub mod migrate;
pub mod relay;
pub mod resolve;
pub mod serve;
pub mod session;
pub mod store;
pub mod tail;
#[cfg(test)]
mod test_dirs;
pub mod trace;
pub mod trace_diff;
pub mod trace_export;
pub mod trace_io;
pub mod trace_proof;
pub mod trace_replay;
pub mod trace_retention;
pub mod trace_state;
pub mod witness;
