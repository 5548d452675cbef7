//! `cra-carp`: CARP/1.0 request and resolution types, request validation, pure policy
//! evaluation (deny > require_approval > rate_limit > budget > allow > default deny) with
//! explanations, and execute authorisation. No I/O: session and resolution state come through the
//! storage trait defined here ([`store::CarpStore`]).
//!
//! * [`types`]: the wire objects of spec §3.
//! * [`atlas_check`]: the one atlas validator (every stage, the evaluator's included).
//! * [`validate`]: request shape (JSON Schema, every bad member with its pointer) and the §3.6
//!   rules, one token each.
//! * [`index`]: atlases compiled for resolution; [`eval`]: the pure resolve.
//! * [`params`]: conditions on a call's parameters (RFC 6901 pointers and operators).
//! * [`history`]: conditions on earlier calls (`after`, `bind`, `count_within`, `sum_within`).
//! * [`cache`]: which earlier resolution answers an identical resolve again.
//! * [`explain`]: the opt-in explanation attached to a resolution.
//! * [`execute`]: execute authorisation.
//! * [`shadow`]: shadow mode at execute (what the `log_only` policies would decide for a call).
//! * [`engine`]: the operations over a store, recording nothing (the runtime's governance core,
//!   `cra_runtime::service::carp`, calls it and records what it decides).
//! * [`events`]: the TRACE events of CARP's operations, one typed payload each.
//! * [`shared`]: reference-counted texts shared by every resolution, with their canonical form.
//! * [`replay`]: re-resolving recorded requests and reporting the first divergence.
//! * [`execute_replay`]: deciding recorded executes again on the history the chains recorded.
//! * [`reconstruct`]: a session's state rebuilt from its trace, and compared with the store.
//! * [`store`]: the storage trait `cra-store` implements (redb, PostgreSQL).
//! * `memory` and `store_contract` (feature `test-support`): an in-memory store and the
//!   behaviour every store must show.

pub mod atlas_check;
pub mod cache;
pub mod engine;
pub mod eval;
pub mod events;
pub mod execute;
pub mod execute_replay;
pub mod explain;
pub mod history;
pub mod index;
pub mod params;
pub mod reconstruct;
pub mod replay;
pub mod shadow;
pub mod shared;
pub mod store;
pub mod types;
pub mod validate;

#[cfg(feature = "test-support")]
pub mod memory;
#[cfg(feature = "test-support")]
pub mod store_contract;

pub use store::{CarpStore, CarpStoreError};
pub use types::{CarpRequest, Resolution};
