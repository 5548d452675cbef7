//! `cra-trace`: TRACE/1.0 events and their hash chain.
//!
//! * [`event`]: the event type; unknown top-level fields and any payload round-trip untouched.
//! * [`chain`]: the Appendix B hash, and sealing a draft onto a chain head (genesis rules).
//! * [`verify`]: the verification rules and findings, and the simple tree-based reference reader
//!   (the §4.2 field rules it applies are in `fields`).
//! * [`lifecycle`]: the optional session lifecycle rules (start, end, answered actions).
//! * [`payload`]: the one way a producer makes an event: a typed [`Payload`] placed on a
//!   [`Span`].
//! * [`diff`]: semantic comparison of two chains (events aligned by span tree, type and subject).
//! * [`store`]: the storage contract of chains ([`store::ChainStore`]) the backends implement.
//! * [`stream`]: streaming, parallel verification of a `.trace.jsonl` in flat memory (with the
//!   tree-free line parser of `fastline`).
//!
//! Pure apart from [`stream`], which reads the `Read` it is given. Storage appends through
//! `cra-store`; the CLI opens files.

pub mod chain;
pub mod diff;
pub mod event;
mod fastline;
mod fields;
pub mod lifecycle;
pub mod payload;
pub mod store;
pub mod stream;
pub mod verify;

pub use chain::{
    ChainHead, GENESIS_PREVIOUS_HASH, PreparedDraft, compute_event_hash, event_preimage, seal,
    seal_prepared,
};
pub use event::{EventDraft, TRACE_VERSION, TraceEvent};
pub use payload::{Payload, Span};
pub use stream::{VerifyOptions, verify_reader};
pub use verify::{
    Code, EventVerifier, Finding, Report, parse_event_line, verify_events, verify_events_with,
    verify_text_reference, verify_text_reference_with,
};
