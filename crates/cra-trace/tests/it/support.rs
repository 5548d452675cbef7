//! Shared helpers: building valid chains and running both verifiers.

use cra_trace::{
    ChainHead, EventDraft, Report, TraceEvent, VerifyOptions, seal, verify_reader,
    verify_text_reference, verify_text_reference_with,
};
use serde_json::Value;

/// A valid chain of `payloads.len()` events, as JSONL (one event per line, `\n`-terminated).
pub(crate) fn chain(payloads: Vec<Value>) -> (Vec<TraceEvent>, String) {
    let mut head = ChainHead::genesis();
    let mut events = Vec::new();
    for (i, payload) in payloads.into_iter().enumerate() {
        let draft = EventDraft {
            trace_id: "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70".into(),
            span_id: format!("0190f5d2-8a4e-7b3c-9d1e-{:012x}", 0x1000 + i),
            parent_span_id: (i > 0).then(|| "0190f5d2-8a4e-7b3c-9d1e-000000001000".into()),
            event_type: if i == 0 {
                "session.started".into()
            } else {
                "ext.custom.event".into()
            },
            payload,
        };
        let event = seal(
            draft,
            "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71",
            &head,
            format!("0190f5d2-8a4e-7b3c-9d1e-{:012x}", i + 1),
            format!("2024-12-28T12:00:{:02}.{:06}Z", i % 60, i),
        );
        head = ChainHead::after(&event);
        events.push(event);
    }
    let mut text = String::new();
    for e in &events {
        text.push_str(&serde_json::to_string(e).unwrap());
        text.push('\n');
    }
    (events, text)
}

/// Verifies `text` with the streaming verifier (sequential and parallel, with chunk sizes that
/// cut lines) and the reference; asserts they agree and returns the reference report.
pub(crate) fn verify_all_ways(text: &[u8], all_errors: bool) -> Report {
    verify_all_ways_with(text, all_errors, false)
}

/// [`verify_all_ways`], optionally with the lifecycle rules.
pub(crate) fn verify_all_ways_with(text: &[u8], all_errors: bool, lifecycle: bool) -> Report {
    let reference = verify_text_reference_with(
        text,
        &VerifyOptions {
            all_errors,
            lifecycle,
            ..VerifyOptions::default()
        },
    );
    if !lifecycle {
        assert_eq!(reference, verify_text_reference(text, all_errors));
    }
    for (threads, chunk_size) in [(1, 1 << 20), (2, 1 << 20), (2, 97), (3, 1), (1, 13)] {
        let options = VerifyOptions {
            all_errors,
            threads,
            chunk_size,
            lifecycle,
        };
        let report = verify_reader(text, &options, &mut |_| {}).unwrap();
        assert_eq!(
            (report.events, &report.findings),
            (reference.events, &reference.findings),
            "streaming verifier ({threads} threads, chunks of {chunk_size}) disagrees with the reference"
        );
    }
    reference
}
