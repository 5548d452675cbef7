//! `cra-wire`: the byte-level contract shared by every cra crate.
//!
//! Everything here is pure (no I/O): the two canonical-JSON profiles ([`canonical`]), SHA-256
//! helpers ([`hash`]), identifier generation and validation ([`id`]), the injectable clock and the
//! wire timestamp form ([`clock`]), a strict JSON parser that refuses duplicate keys and unbounded
//! nesting ([`json`]), and the one error body every HTTP route and CLI `-o json` answer uses
//! ([`error`]), and [`members`] for structs that keep unknown members (without serde's `flatten`).

pub mod canonical;
pub mod clock;
pub mod error;
pub mod hash;
pub mod id;
pub mod json;
pub mod members;

pub use clock::{Clock, FixedClock, SystemClock};
pub use error::{ErrorBody, FieldError, Token};
pub use id::{IdGenerator, SequentialIds, UuidV7Ids};
