//! `cra-carp`: CARP/1.0 request and resolution types, request validation, pure policy
//! evaluation (deny > require_approval > rate_limit > budget > allow > default deny) with
//! explanations, and execute authorisation. No I/O: session and resolution state come through the
//! storage trait defined here ([`store::CarpStore`]).
//!
//! * [`types`]: the wire objects of spec §3.
//! * [`explain`]: the opt-in explanation attached to a resolution.
//! * [`store`]: the storage trait `cra-store` implements (redb, PostgreSQL).

pub mod eval;
pub mod explain;
pub mod index;
pub mod shared;
pub mod store;
pub mod types;
pub mod validate;

#[cfg(feature = "test-support")]
pub mod memory;
#[cfg(feature = "test-support")]
pub mod store_contract;

pub use store::{CarpStore, StoreError};
pub use types::{CarpRequest, Resolution};
