//! TRACE JSONL: the verifier's two line readers and the `TraceEvent` parse.
//!
//! Oracles:
//! * the streaming verifier (`verify_reader`, the tree-free fast line parser, chunked) and the
//!   reference verifier (`verify_text_reference`, full strict parse per line) report the same
//!   findings and event counts, in first-error and all-errors mode, with and without the
//!   lifecycle rules, whatever the chunk size;
//! * every line `parse_event_line` accepts is read the same by serde (`TraceEvent`'s
//!   `Deserialize`), serialises and parses back to itself, and verifying it as an in-memory
//!   event gives the same findings as verifying its text.

use cra_trace::verify::{parse_event_line, verify_events_with, verify_text_reference_with};
use cra_trace::{TraceEvent, VerifyOptions, compute_event_hash, verify_reader};

fn compare(data: &[u8], all_errors: bool, lifecycle: bool, chunk_size: usize) {
    let reference = verify_text_reference_with(
        data,
        &VerifyOptions {
            all_errors,
            lifecycle,
            ..VerifyOptions::default()
        },
    );
    let fast = match verify_reader(
        data,
        &VerifyOptions {
            all_errors,
            lifecycle,
            threads: 1,
            chunk_size,
        },
        &mut |_| {},
    ) {
        Ok(r) => r,
        Err(e) => panic!("reading from memory failed: {e}"),
    };
    assert_eq!(
        fast.findings, reference.findings,
        "fast and reference verifiers disagree (all_errors {all_errors}, lifecycle {lifecycle}, chunk {chunk_size})"
    );
    assert_eq!(fast.events, reference.events, "event counts differ");
    if all_errors {
        assert_eq!(fast.bytes, reference.bytes, "byte counts differ");
    }
}

fn check_line(line: &[u8]) {
    let Ok(event) = parse_event_line(line) else {
        return;
    };
    let _ = compute_event_hash(&event);
    match serde_json::from_slice::<TraceEvent>(line) {
        Ok(via_serde) => assert_eq!(via_serde, event, "serde reads the line differently"),
        Err(e) => panic!("serde refuses a line the verifier accepts: {e}"),
    }
    let text = match serde_json::to_string(&event) {
        Ok(t) => t,
        Err(e) => panic!("an event does not serialise: {e}"),
    };
    match parse_event_line(text.as_bytes()) {
        Ok(back) => assert_eq!(back, event, "event changed in a round trip"),
        Err(e) => panic!("a written event does not parse back: {e}\n{text}"),
    }
    let options = VerifyOptions {
        all_errors: true,
        lifecycle: true,
        ..VerifyOptions::default()
    };
    let from_memory = verify_events_with([&event], &options);
    let from_text = verify_text_reference_with(line, &options);
    assert_eq!(
        from_memory.findings, from_text.findings,
        "in-memory and text verification disagree"
    );
}

/// A `.trace.jsonl` text (the first byte picks the streaming chunk size).
pub fn trace_jsonl(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first % 64) + 1;
    compare(rest, false, false, chunk);
    compare(rest, true, true, chunk);
    compare(rest, true, false, 1 << 16);
    for line in rest.split(|&b| b == b'\n').take(64) {
        check_line(line);
    }
}
