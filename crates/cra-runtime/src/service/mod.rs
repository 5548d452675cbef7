//! The governance core: every use of cra is one typed operation here, whichever front door (the
//! HTTP routes, and later MCP and the CLI's local mode) it came through. An operation takes an
//! authenticated [`crate::auth::Actor`] and a typed input, takes one snapshot of the atlases,
//! reads the session once, evaluates, records its TRACE events (built only through
//! [`cra_carp::events::Span::event`]) together with the state they describe, and returns a typed answer or
//! a refusal ([`crate::error::ApiError`]: a token, a message and JSON pointers; the front door
//! picks the status).
//!
//! Nothing here knows HTTP: a tidy test (`crates/cra-tidy`) fails the build when a file of this
//! module names an HTTP crate.

pub mod approvals;
pub mod carp;
pub mod sessions;
