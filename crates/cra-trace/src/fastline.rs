//! The verifier's hot path: one line to a [`LineOutcome`] without building a JSON tree.
//!
//! The top-level object is scanned into borrowed slices of its fields; the payload is written in
//! TRACE canonical form straight from its bytes; the Appendix B preimage is fed to SHA-256 piece
//! by piece. Everything the reference reader ([`crate::verify::parse_event_line`]) refuses is
//! refused here too (syntax, duplicate keys at any depth, depth, field types); whenever this path
//! refuses a line it hands the line to the reference reader, so both report the same message.

use std::borrow::Cow;

use cra_wire::canonical::trace::write_canonical_scanned;
use cra_wire::json::{RawString, Scanner};
use sha2::{Digest, Sha256};

use crate::lifecycle::Facts;
use crate::verify::{HashText, LineOutcome, reference_outcome};

/// Reusable buffers for [`line_outcome`] (one per worker thread).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    payload: String,
    discard: String,
}

const TRACE_VERSION: usize = 0;
const EVENT_ID: usize = 1;
const TRACE_ID: usize = 2;
const SPAN_ID: usize = 3;
const SESSION_ID: usize = 4;
const TIMESTAMP: usize = 5;
const EVENT_TYPE: usize = 6;
const EVENT_HASH: usize = 7;
const PREVIOUS_EVENT_HASH: usize = 8;
const STRINGS: usize = 9;
const PARENT_SPAN_ID: usize = 9;
const SEQUENCE: usize = 10;
const PAYLOAD: usize = 11;

fn field_index(key: &str) -> Option<usize> {
    Some(match key {
        "trace_version" => TRACE_VERSION,
        "event_id" => EVENT_ID,
        "trace_id" => TRACE_ID,
        "span_id" => SPAN_ID,
        "session_id" => SESSION_ID,
        "timestamp" => TIMESTAMP,
        "event_type" => EVENT_TYPE,
        "event_hash" => EVENT_HASH,
        "previous_event_hash" => PREVIOUS_EVENT_HASH,
        "parent_span_id" => PARENT_SPAN_ID,
        "sequence" => SEQUENCE,
        "payload" => PAYLOAD,
        _ => return None,
    })
}

/// The outcome of one line: fast when the line is a well-formed event, by the reference reader
/// otherwise.
pub(crate) fn line_outcome(line: &[u8], scratch: &mut Scratch, lifecycle: bool) -> LineOutcome {
    match fast(line, scratch, lifecycle) {
        Some(outcome) => outcome,
        None => reference_outcome(line, lifecycle),
    }
}

fn fast(line: &[u8], scratch: &mut Scratch, lifecycle: bool) -> Option<LineOutcome> {
    let text = std::str::from_utf8(line).ok()?;
    let mut sc = Scanner::new(text);
    let mut strings: [Option<RawString<'_>>; STRINGS] = [None; STRINGS];
    let mut parent: Option<RawString<'_>> = None;
    let mut sequence: Option<(&str, u64)> = None;
    let mut seen: u16 = 0;
    let mut unknown: Vec<Cow<'_, str>> = Vec::new();
    scratch.payload.clear();

    sc.skip_ws();
    if !sc.eat(b'{') {
        return None;
    }
    sc.skip_ws();
    if sc.peek() == Some(b'}') {
        return None;
    }
    loop {
        sc.skip_ws();
        let key = sc.string().ok()?.decode();
        sc.skip_ws();
        if !sc.eat(b':') {
            return None;
        }
        sc.skip_ws();
        match field_index(&key) {
            Some(i) => {
                if seen & (1 << i) != 0 {
                    return None;
                }
                seen |= 1 << i;
                match i {
                    PARENT_SPAN_ID => match sc.peek() {
                        Some(b'"') => parent = Some(sc.string().ok()?),
                        Some(b'n') => sc.literal("null").ok()?,
                        _ => return None,
                    },
                    SEQUENCE => {
                        if !sc.peek().is_some_and(|b| b.is_ascii_digit()) {
                            return None;
                        }
                        let t = sc.number().ok()?;
                        if !t.bytes().all(|b| b.is_ascii_digit()) {
                            return None;
                        }
                        sequence = Some((t, t.parse().ok()?));
                    }
                    PAYLOAD => {
                        if sc.peek() != Some(b'{') {
                            return None;
                        }
                        write_canonical_scanned(&mut sc, &mut scratch.payload, 1).ok()?;
                    }
                    _ => {
                        if sc.peek() != Some(b'"') {
                            return None;
                        }
                        strings[i] = Some(sc.string().ok()?);
                    }
                }
            }
            None => {
                // Unknown fields are kept by the event type; here they only need to be valid
                // (and free of duplicate keys).
                if unknown.contains(&key) {
                    return None;
                }
                scratch.discard.clear();
                write_canonical_scanned(&mut sc, &mut scratch.discard, 1).ok()?;
                unknown.push(key);
            }
        }
        sc.skip_ws();
        if sc.eat(b',') {
            continue;
        }
        if !sc.eat(b'}') {
            return None;
        }
        break;
    }
    sc.skip_ws();
    if !sc.at_end() {
        return None;
    }
    if seen | (1 << PARENT_SPAN_ID) != (1 << (PAYLOAD + 1)) - 1 {
        return None; // a required field is missing
    }
    let (seq_text, seq) = sequence?;
    let s = |i: usize| strings[i].map(|r| r.decode());
    let [
        Some(trace_version),
        Some(event_id),
        Some(trace_id),
        Some(span_id),
        Some(session_id),
        Some(timestamp),
        Some(event_type),
        Some(event_hash),
        Some(previous_event_hash),
    ] = [
        s(TRACE_VERSION),
        s(EVENT_ID),
        s(TRACE_ID),
        s(SPAN_ID),
        s(SESSION_ID),
        s(TIMESTAMP),
        s(EVENT_TYPE),
        s(EVENT_HASH),
        s(PREVIOUS_EVENT_HASH),
    ]
    else {
        return None;
    };
    let parent = parent.map(|p| p.decode());

    let mut h = Sha256::new();
    h.update(trace_version.as_bytes());
    h.update(event_id.as_bytes());
    h.update(trace_id.as_bytes());
    h.update(span_id.as_bytes());
    if let Some(p) = &parent {
        h.update(p.as_bytes());
    }
    h.update(session_id.as_bytes());
    // JSON integers have no leading zeros, so the text is Python's str(int).
    h.update(seq_text.as_bytes());
    h.update(timestamp.as_bytes());
    h.update(event_type.as_bytes());
    h.update(scratch.payload.as_bytes());
    h.update(previous_event_hash.as_bytes());
    let digest = h.finalize();
    let mut computed = [0u8; 64];
    hex::encode_to_slice(digest, &mut computed).ok()?;

    let facts = if lifecycle {
        // Only action events need a payload field; read it back from the canonical text.
        let payload = if event_type.starts_with("action.") {
            cra_wire::json::parse_strict_str(&scratch.payload).ok()?
        } else {
            serde_json::Value::Null
        };
        Some(Box::new(Facts::new(
            &event_type,
            &timestamp,
            &trace_id,
            &payload,
        )))
    } else {
        None
    };
    Some(LineOutcome::Event {
        sequence: seq,
        event_hash: HashText::new(&event_hash),
        previous_event_hash: HashText::new(&previous_event_hash),
        computed,
        facts,
    })
}
