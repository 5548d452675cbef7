//! The hash chain: the Appendix B preimage and hash, and sealing a draft onto a chain head.

use sha2::{Digest, Sha256};

use crate::event::{EventDraft, TRACE_VERSION, TraceEvent};

/// `previous_event_hash` of the genesis event (sequence 0).
pub const GENESIS_PREVIOUS_HASH: &str =
    "0000000000000000000000000000000000000000000000000000000000000000";

/// Where the next event of a chain attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    /// The sequence the next event gets.
    pub next_sequence: u64,
    /// The `event_hash` of the last event, or 64 zeros for an empty chain.
    pub head_hash: String,
}

impl ChainHead {
    /// The head of an empty chain.
    pub fn genesis() -> Self {
        Self {
            next_sequence: 0,
            head_hash: GENESIS_PREVIOUS_HASH.to_owned(),
        }
    }

    /// The head after `event`.
    pub fn after(event: &TraceEvent) -> Self {
        Self {
            next_sequence: event.sequence + 1,
            head_hash: event.event_hash.clone(),
        }
    }
}

/// The exact string Appendix B hashes for `event` (its own `event_hash` is not part of it).
pub fn event_preimage(event: &TraceEvent) -> String {
    let mut s = String::with_capacity(512);
    s.push_str(&event.trace_version);
    s.push_str(&event.event_id);
    s.push_str(&event.trace_id);
    s.push_str(&event.span_id);
    s.push_str(event.parent_span_id.as_deref().unwrap_or(""));
    s.push_str(&event.session_id);
    s.push_str(&event.sequence.to_string());
    s.push_str(&event.timestamp);
    s.push_str(&event.event_type);
    cra_wire::canonical::write_trace_canonical(&event.payload, &mut s);
    s.push_str(&event.previous_event_hash);
    s
}

/// SHA-256 (lowercase hex) of the Appendix B preimage of `event`.
pub fn compute_event_hash(event: &TraceEvent) -> String {
    hex::encode(Sha256::digest(event_preimage(event).as_bytes()))
}

/// Turns `draft` into the next event of the chain at `head`, with the given id and wire timestamp.
pub fn seal(
    draft: EventDraft,
    session_id: &str,
    head: &ChainHead,
    event_id: String,
    timestamp: String,
) -> TraceEvent {
    let mut event = TraceEvent {
        trace_version: TRACE_VERSION.to_owned(),
        event_id,
        trace_id: draft.trace_id,
        span_id: draft.span_id,
        parent_span_id: draft.parent_span_id,
        session_id: session_id.to_owned(),
        sequence: head.next_sequence,
        timestamp,
        event_type: draft.event_type,
        payload: draft.payload,
        event_hash: String::new(),
        previous_event_hash: head.head_hash.clone(),
        extra: serde_json::Map::new(),
    };
    event.event_hash = compute_event_hash(&event);
    event
}
