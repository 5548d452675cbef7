//! `cra-relay`: Relay (Agentic Protocol v0.1) projects, content-hashed packages, bitemporal
//! facts, sessions, and the seven operations of §8 over the storage trait defined here.
//!
//! * [`model`]: the wire objects and the content hash; [`validate`]: §6 validation with JSON
//!   pointers; [`fact`]: facts with valid and recorded time, supersession and queries (pure).
//! * [`store`]: the [`store::RelayStore`] trait the backends in `cra-store` implement.
//! * [`ops::Relay`]: the operations (deposit, pull, flag/review, facts, sessions, projects);
//!   [`digest`]: orient and orchestrate; [`search`]: chunks, filters and BM25 snippets;
//!   [`export`]: deterministic NDJSON export and verified import.
//! * [`session`]: session callsigns; [`error`]: the operations' errors, each with its wire
//!   token.
//! * `testkit` (feature `test-support`): the backend-independent suite every store runs.

pub mod digest;
pub mod error;
pub mod export;
pub mod fact;
pub mod model;
pub mod ops;
pub mod search;
pub mod session;
pub mod store;
#[cfg(any(test, feature = "test-support"))]
pub mod testkit;
pub mod validate;

pub use error::RelayError;
pub use model::{Actor, ActorType, Package, Project, Status, StoredPackage};
pub use ops::Relay;
pub use store::RelayStore;
