//! `cra-trace`: TRACE/1.0 events and their hash chain.
//!
//! * [`event`]: the event type; unknown top-level fields and any payload round-trip untouched.
//! * [`chain`]: the Appendix B hash, and sealing a draft onto a chain head (genesis rules).
//!
//! Pure: no I/O. Storage appends through `cra-store`; the CLI reads files.

pub mod chain;
pub mod event;
pub mod store;

pub use chain::{ChainHead, GENESIS_PREVIOUS_HASH, compute_event_hash, event_preimage, seal};
pub use event::{EventDraft, TRACE_VERSION, TraceEvent};
