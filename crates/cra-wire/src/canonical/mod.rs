//! The two canonical-JSON profiles.
//!
//! * [`trace`]: byte-identical to the TRACE spec's Appendix B Python
//!   (`json.dumps(x, sort_keys=True, separators=(',', ':'))` with the default `ensure_ascii`).
//!   Used for event hashes. [`trace_ser`] writes the same bytes straight from a `Serialize`
//!   value.
//! * [`relay`]: RFC 8785 numbers, raw UTF-8, keys in UTF-8 byte order, `null` members dropped at
//!   every depth. Used for Relay content hashes.

pub mod relay;
pub mod trace;
pub mod trace_ser;

pub use relay::{CanonicalError, relay_canonical};
pub use trace::{trace_canonical, write_trace_canonical};
pub use trace_ser::{
    CanonicalSerError, CanonicalText, to_trace_canonical, to_trace_canonical_sized,
};
