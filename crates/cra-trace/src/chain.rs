//! The hash chain: the Appendix B preimage and hash, and sealing a draft onto a chain head.

use serde_json::Value;
use serde_json::value::RawValue;
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
    cra_wire::hash::digest_hex(&Sha256::digest(event_preimage(event).as_bytes()).into())
}

/// Turns `draft` into the next event of the chain at `head`, with the given id and wire timestamp.
pub fn seal(
    draft: EventDraft,
    session_id: &str,
    head: &ChainHead,
    event_id: String,
    timestamp: String,
) -> TraceEvent {
    let mut event = unsealed(draft, session_id, head, event_id, timestamp);
    event.event_hash = compute_event_hash(&event);
    event
}

/// The event `draft` becomes at `head`, with an empty `event_hash`.
fn unsealed(
    draft: EventDraft,
    session_id: &str,
    head: &ChainHead,
    event_id: String,
    timestamp: String,
) -> TraceEvent {
    TraceEvent {
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
    }
}

/// A draft whose costly, chain-independent part of sealing is done: the payload's TRACE
/// canonical form (what the hash covers) and its JSON for the stored event. A producer prepares
/// its drafts on its own thread, so whoever serialises a chain (the store's committer) only
/// links hashes: ids, time, sequence and the previous hash are all it still has to add.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedDraft {
    /// The draft as produced.
    pub draft: EventDraft,
    /// `payload` in the TRACE canonical profile.
    canonical: String,
    /// `payload` as JSON text for the stored event, when it differs from `canonical`. The stored
    /// event keeps the payload as its producer wrote it (key order, number spelling), so what an
    /// append acknowledges and what a later read returns are the same value.
    wire: Option<String>,
    /// The producer gave only the canonical text ([`PreparedDraft::from_canonical`]):
    /// `draft.payload` holds nothing and is not read.
    text_only: bool,
}

impl PreparedDraft {
    /// Prepares `draft` for sealing.
    pub fn new(draft: EventDraft) -> Self {
        let canonical = cra_wire::canonical::trace_canonical(&draft.payload);
        let wire = if serialises_canonically(&draft.payload) {
            None
        } else {
            // Serialising a `Value` cannot fail (its keys are strings).
            let text = serde_json::to_string(&draft.payload).unwrap_or_else(|_| "null".to_owned());
            (text != canonical).then_some(text)
        };
        Self {
            draft,
            canonical,
            wire,
            text_only: false,
        }
    }

    /// A draft whose payload its producer wrote directly as TRACE canonical text (`canonical`),
    /// without building a [`Value`]: for large payloads on hot paths, where making, walking and
    /// dropping the tree cost more than the rest of the append. The stored event's payload is
    /// that text; `draft.payload` is not read (leave it `Null`), and the event a store returns
    /// for this draft carries it as it is, so whoever needs the payload as a value reads the
    /// stored event or parses `canonical`. `canonical` must be the canonical form of the payload
    /// ([`cra_wire::canonical::trace::trace_canonical_from_str`] of its JSON gives it), or the stored
    /// event will not verify.
    pub fn from_canonical(draft: EventDraft, canonical: String) -> Self {
        Self {
            draft,
            canonical,
            wire: None,
            text_only: true,
        }
    }

    /// Whether the producer gave only the payload's canonical text, so `draft.payload` holds
    /// nothing ([`PreparedDraft::from_canonical`]).
    pub fn is_text_only(&self) -> bool {
        self.text_only
    }

    /// The draft with its payload as a value, parsed from the canonical text when the producer
    /// gave only that ([`PreparedDraft::from_canonical`]): for stores that seal plain drafts.
    pub fn into_draft(self) -> EventDraft {
        let mut draft = self.draft;
        if self.text_only {
            // The canonical text is JSON by construction; were it not, the payload stays null
            // and the sealed event does not verify, which its verification reports.
            draft.payload = serde_json::from_str(&self.canonical).unwrap_or(Value::Null);
        }
        draft
    }

    /// The payload's TRACE canonical form.
    pub fn canonical_payload(&self) -> &str {
        &self.canonical
    }

    fn wire_payload(&self) -> &str {
        self.wire.as_deref().unwrap_or(&self.canonical)
    }
}

/// Whether serde_json writes `value` exactly as its TRACE canonical form, so the text need not be
/// made twice: object keys come sorted from the map already, and the two writers differ only on
/// characters from DEL up (the canonical form escapes them, serde_json writes them raw) and on
/// numbers other than plain integers (the canonical form re-prints floats and `-0`).
fn serialises_canonically(value: &Value) -> bool {
    fn plain(s: &str) -> bool {
        s.bytes().all(|b| b < 0x7f)
    }
    match value {
        Value::Null | Value::Bool(_) => true,
        Value::Number(n) => {
            let text = n.to_string();
            let digits = text.strip_prefix('-').unwrap_or(&text);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && text != "-0"
        }
        Value::String(s) => plain(s),
        Value::Array(items) => items.iter().all(serialises_canonically),
        // Keys are checked to be in order too, should serde_json's `preserve_order` ever be
        // switched on by another crate of the build.
        Value::Object(map) => {
            map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b)
                && map
                    .iter()
                    .all(|(k, v)| plain(k) && serialises_canonically(v))
        }
    }
}

impl AsRef<EventDraft> for PreparedDraft {
    fn as_ref(&self) -> &EventDraft {
        &self.draft
    }
}

impl From<EventDraft> for PreparedDraft {
    fn from(draft: EventDraft) -> Self {
        Self::new(draft)
    }
}

/// A stored event's JSON: the envelope in §4.2 order, the payload as its prepared text.
#[derive(serde::Serialize)]
struct StoredEnvelope<'a> {
    trace_version: &'a str,
    event_id: &'a str,
    trace_id: &'a str,
    span_id: &'a str,
    parent_span_id: Option<&'a str>,
    session_id: &'a str,
    sequence: u64,
    timestamp: &'a str,
    event_type: &'a str,
    payload: &'a RawValue,
    event_hash: &'a str,
    previous_event_hash: &'a str,
}

/// Seals a prepared draft onto `head`, as [`seal`] does, and also returns the event's stored JSON:
/// the envelope in §4.2 order with the payload as prepared. Its hash is the same as `seal`'s, and
/// reading the JSON back gives an event that verifies (the canonical form of a canonical payload
/// is itself).
pub fn seal_prepared(
    prepared: PreparedDraft,
    session_id: &str,
    head: &ChainHead,
    event_id: String,
    timestamp: String,
) -> (TraceEvent, Vec<u8>) {
    let sequence = head.next_sequence.to_string();
    let d = &prepared.draft;
    let mut h = Sha256::new();
    for part in [
        TRACE_VERSION,
        event_id.as_str(),
        d.trace_id.as_str(),
        d.span_id.as_str(),
        d.parent_span_id.as_deref().unwrap_or(""),
        session_id,
        sequence.as_str(),
        timestamp.as_str(),
        d.event_type.as_str(),
        prepared.canonical.as_str(),
        head.head_hash.as_str(),
    ] {
        h.update(part.as_bytes());
    }
    let event_hash = cra_wire::hash::digest_hex(&h.finalize().into());

    // The payload text is JSON by construction (a canonical writer's output, or serde_json's);
    // were it not, the stored event carries `null`, and its verification reports the mismatch.
    let payload =
        serde_json::from_str::<&RawValue>(prepared.wire_payload()).unwrap_or(RawValue::NULL);
    let envelope = StoredEnvelope {
        trace_version: TRACE_VERSION,
        event_id: &event_id,
        trace_id: &d.trace_id,
        span_id: &d.span_id,
        parent_span_id: d.parent_span_id.as_deref(),
        session_id,
        sequence: head.next_sequence,
        timestamp: &timestamp,
        event_type: &d.event_type,
        payload,
        event_hash: &event_hash,
        previous_event_hash: &head.head_hash,
    };
    // Writing strings, an integer and a raw JSON text into a vector cannot fail.
    let wire = serde_json::to_vec(&envelope).unwrap_or_default();

    let mut event = unsealed(prepared.draft, session_id, head, event_id, timestamp);
    event.event_hash = event_hash;
    (event, wire)
}

#[cfg(test)]
mod tests {
    use super::serialises_canonically;
    use serde_json::Value;

    /// Payloads whose serde_json text is taken as canonical must really be; the others are the
    /// cases where the two writers differ (or may).
    #[test]
    fn serialises_canonically_only_when_the_texts_agree() {
        let cases: &[(&str, bool)] = &[
            (
                r#"{"b":1,"a":[true,null,"x y"],"c":{"z":-12,"d":"\"\\/\n\t\u0007"}}"#,
                true,
            ),
            (r#"{"n":123456789012345678901234567890}"#, true),
            (r#"[1.5]"#, false),
            (r#"{"n":1.0}"#, false),
            (r#"{"n":1e2}"#, false),
            (r#"-0"#, false),
            (r#""caf\u00e9""#, false),
            (r#""\u007f""#, false),
            (r#"{"\u00e9":1}"#, false),
            (r#""😀""#, false),
        ];
        for (text, expected) in cases {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(serialises_canonically(&value), *expected, "{text}");
            if *expected {
                assert_eq!(
                    serde_json::to_string(&value).unwrap(),
                    cra_wire::canonical::trace_canonical(&value),
                    "{text}"
                );
            }
        }
    }
}
