//! The TRACE/1.0 event (spec §4.2) as it travels on the wire.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The only `trace_version` this crate writes.
pub const TRACE_VERSION: &str = "1.0";

/// The session id of a chain no client opens (an audit chain), derived from its `name` so that
/// every replica computes the same id without shared state: a UUID (§4.2) with version 7 and
/// the RFC 9562 variant bits, a zero time field, and its other bits from SHA-256(`name`).
pub fn derived_session_id(name: &str) -> String {
    let h = Sha256::digest(name.as_bytes());
    let mut b = [0u8; 16];
    b[6..].copy_from_slice(&h[..10]);
    b[6] = 0x70 | (b[6] & 0x0f);
    b[8] = 0x80 | (b[8] & 0x3f);
    let x = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

/// The twelve envelope members of §4.2, in the order §4.2 lists them; every one is required.
pub const ENVELOPE_FIELDS: [&str; 12] = [
    "trace_version",
    "event_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "session_id",
    "sequence",
    "timestamp",
    "event_type",
    "payload",
    "event_hash",
    "previous_event_hash",
];

/// One TRACE event. Field order follows §4.2; `parent_span_id` is always serialised (as `null`
/// when absent) and unknown top-level fields are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Always `"1.0"` for events cra writes.
    pub trace_version: String,
    /// This event's id (UUIDv7 when cra writes it).
    pub event_id: String,
    /// Groups the events of one CARP operation.
    pub trace_id: String,
    /// The operation span this event belongs to.
    pub span_id: String,
    /// The enclosing span, if any.
    #[serde(default)]
    pub parent_span_id: Option<String>,
    /// The session whose chain holds this event.
    pub session_id: String,
    /// Position in the session's chain, from 0 without gaps.
    pub sequence: u64,
    /// Wire timestamp, hashed exactly as written.
    pub timestamp: String,
    /// Dotted event type; unknown types are accepted.
    pub event_type: String,
    /// Event-specific data.
    pub payload: Value,
    /// SHA-256 (lowercase hex) of this event's Appendix B preimage.
    pub event_hash: String,
    /// The previous event's `event_hash`, or 64 zeros at sequence 0.
    pub previous_event_hash: String,
    /// Fields this version does not know; written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a producer supplies; the chain supplies the rest (id, time, sequence, hashes).
/// Serialisable so a draft can wait in an outbox (a Relay write's events) before its append.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDraft {
    /// Groups the events of one CARP operation.
    pub trace_id: String,
    /// The operation span.
    pub span_id: String,
    /// The enclosing span, if any.
    pub parent_span_id: Option<String>,
    /// Dotted event type.
    pub event_type: String,
    /// Event-specific data (an object for every type cra emits).
    pub payload: Value,
}

impl AsRef<EventDraft> for EventDraft {
    fn as_ref(&self) -> &EventDraft {
        self
    }
}
