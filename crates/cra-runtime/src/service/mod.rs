//! The governance core: every use of cra is one typed operation here, whichever front door (the
//! HTTP routes, and later MCP and the CLI's local mode) it came through. An operation takes an
//! authenticated [`crate::auth::Actor`] and a typed input, takes one snapshot of the atlases,
//! reads the session once, evaluates, records its TRACE events (made only through a
//! [`cra_trace::Span`]) and returns a typed answer or a refusal
//! ([`crate::error::ApiError`]: a token, a message and JSON pointers; the front door picks the
//! status). A resolve's state is written in the same durable append as its events; the other
//! operations still write their state first and their events after (`docs/architecture.md`,
//! "Invariants").
//!
//! * [`carp`]: resolve (with validate, its dry run) and execute.
//! * [`sessions`]: open, read and end a session, and the id and access checks every operation
//!   uses.
//! * [`approvals`]: the pending approvals and their decisions.
//! * [`atlases`]: the atlases in force: list, read, install one, replace the set.
//! * [`relay`]: Relay's projects, packages, reviews and facts, with their grants and events.
//! * [`traces`]: the chains a caller may read, one chain's events, a stored chain re-verified.
//! * [`retention`]: the configured retention of ended sessions, applied and recorded.
//! * [`log`]: the transparency log: key, checkpoints, proofs and tiles.
//! * [`backup`]: an online backup of the whole store, for admins.
//! * [`operator`]: the operator audit chain, where atlas changes and retention runs are
//!   recorded.
//!
//! Nothing here knows HTTP: a tidy test (`crates/cra-tidy`) fails the build when a file of this
//! module names an HTTP crate.

pub mod approvals;
pub mod atlases;
pub mod backup;
pub mod carp;
pub mod log;
pub mod operator;
pub mod relay;
pub mod retention;
pub mod sessions;
pub mod traces;
