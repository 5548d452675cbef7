//! The §4.2 field rules: a chain whose hashes and links are right but whose events break §4.2
//! (`trace_version`, UUID ids, one session, the timestamp form) is invalid, each rule with its
//! own code and the field it found wrong. Every chain here is re-sealed after the change, so the
//! failure can only come from the field rule; the streaming, reference and in-memory verifiers
//! must agree.

use cra_trace::{Code, TraceEvent, VerifyOptions, compute_event_hash, verify_events_with};
use serde_json::json;

use crate::support::{chain, verify_all_ways};

const OTHER_SESSION: &str = "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d99";

/// A valid five-event chain.
fn events() -> Vec<TraceEvent> {
    chain((0..5).map(|i| json!({"note": "n", "i": i})).collect()).0
}

/// Recomputes every hash and link in order, so the chain is intact whatever its fields say.
fn reseal(events: &mut [TraceEvent]) {
    let mut previous = "0".repeat(64);
    for e in events.iter_mut() {
        e.previous_event_hash = previous;
        e.event_hash = compute_event_hash(e);
        previous = e.event_hash.clone();
    }
}

/// `(sequence, line, code, field)` of every finding, from every verifier (which must agree).
fn findings(events: &[TraceEvent]) -> Vec<(u64, u64, Code, Option<&'static str>)> {
    let text: String = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    let report = verify_all_ways(text.as_bytes(), true);
    let in_memory = verify_events_with(
        events,
        &VerifyOptions {
            all_errors: true,
            ..VerifyOptions::default()
        },
    );
    assert_eq!(report.findings, in_memory.findings);
    // First-error mode stops at the first of them.
    let first = verify_all_ways(text.as_bytes(), false);
    assert_eq!(first.findings.first(), report.findings.first());
    report
        .findings
        .iter()
        .map(|f| (f.sequence, f.line, f.code, f.field))
        .collect()
}

/// `events` with `change` applied to event `k`, re-sealed.
fn changed(k: usize, change: impl FnOnce(&mut TraceEvent)) -> Vec<TraceEvent> {
    let mut events = events();
    change(&mut events[k]);
    reseal(&mut events);
    events
}

#[test]
fn the_unchanged_chain_is_valid() {
    let mut events = events();
    reseal(&mut events);
    assert_eq!(findings(&events), []);
}

#[test]
fn a_linked_chain_with_trace_version_2_is_invalid() {
    for version in ["2.0", "1.1", "1", "1.0 ", ""] {
        let events = changed(2, |e| e.trace_version = version.into());
        assert_eq!(
            findings(&events),
            [(2, 3, Code::InvalidTraceVersion, Some("trace_version"))],
            "{version:?}"
        );
    }
}

#[test]
fn a_linked_chain_with_an_id_that_is_not_a_uuid_is_invalid() {
    let not_uuids = [
        "e-1",
        "",
        "0190F5D2-8A4E-7B3C-9D1E-2F3A4B5C6D70",
        "0190f5d28a4e7b3c9d1e2f3a4b5c6d70",
        "{0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70}",
        "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d7g",
        "0190f5d2-8a4e-7b3c-9d1e_2f3a4b5c6d70",
    ];
    for bad in not_uuids {
        for field in ["event_id", "trace_id", "span_id", "parent_span_id"] {
            let events = changed(3, |e| match field {
                "event_id" => e.event_id = bad.into(),
                "trace_id" => e.trace_id = bad.into(),
                "span_id" => e.span_id = bad.into(),
                _ => e.parent_span_id = Some(bad.into()),
            });
            assert_eq!(
                findings(&events),
                [(3, 4, Code::InvalidId, Some(field))],
                "{field} = {bad:?}"
            );
        }
    }
}

#[test]
fn a_linked_chain_whose_session_id_is_not_a_uuid_is_invalid() {
    let mut events = events();
    for e in &mut events {
        e.session_id = "sess-1".into();
    }
    reseal(&mut events);
    let want: Vec<_> = (0..5)
        .map(|k| (k, k + 1, Code::InvalidId, Some("session_id")))
        .collect();
    assert_eq!(findings(&events), want);
}

#[test]
fn a_linked_chain_with_two_session_ids_is_invalid() {
    let mut events = events();
    for e in &mut events[3..] {
        e.session_id = OTHER_SESSION.into();
    }
    reseal(&mut events);
    // Every event of the other session is reported: the chain's session is its first event's.
    assert_eq!(
        findings(&events),
        [
            (3, 4, Code::SessionMixed, Some("session_id")),
            (4, 5, Code::SessionMixed, Some("session_id")),
        ]
    );
    // One stray event in the middle.
    let events = changed(1, |e| e.session_id = OTHER_SESSION.into());
    assert_eq!(
        findings(&events),
        [(1, 2, Code::SessionMixed, Some("session_id"))]
    );
}

#[test]
fn a_linked_chain_with_a_timestamp_without_a_zone_is_invalid() {
    for bad in [
        "2024-12-28T12:00:04.000004",
        "2024-12-28T12:00:04",
        "2024-12-28 12:00:04.000004Z",
        "2024-12-28T12:00:04.000004z",
        "2024-12-28",
        "1735387204",
    ] {
        let events = changed(4, |e| e.timestamp = bad.into());
        assert_eq!(
            findings(&events),
            [(4, 5, Code::InvalidTimestamp, Some("timestamp"))],
            "{bad:?}"
        );
    }
}

#[test]
fn a_linked_chain_with_a_timestamp_that_is_no_instant_is_invalid() {
    for bad in [
        "2025-02-29T12:00:04.000004Z",
        "2024-13-28T12:00:04.000004Z",
        "2024-12-28T24:00:04.000004Z",
        "2016-12-31T23:59:60.000000Z",
        "2024-12-28T12:00:04.000004+24:00",
        "9999-12-31T23:30:00.000000-01:00",
    ] {
        let events = changed(0, |e| e.timestamp = bad.into());
        assert_eq!(
            findings(&events),
            [(0, 1, Code::InvalidTimestamp, Some("timestamp"))],
            "{bad:?}"
        );
    }
}

#[test]
fn rfc_3339_timestamps_with_a_zone_and_any_fraction_verify() {
    let forms = [
        "2024-12-28T13:00:00.000000+01:00",
        "2024-12-28T12:00:01Z",
        "2024-12-28T12:00:02.5Z",
        "2024-12-28T07:00:03.123456789-05:00",
        "2024-12-28T12:00:04.000004-00:00",
    ];
    let mut events = events();
    for (e, t) in events.iter_mut().zip(forms) {
        e.timestamp = t.into();
    }
    reseal(&mut events);
    assert_eq!(findings(&events), []);
}

#[test]
fn uuids_of_any_version_verify() {
    // The spec's own example ids are not version 7 (errata: accept any canonical UUID).
    let mut events = events();
    for e in &mut events {
        e.trace_id = "11111111-1111-1111-1111-111111111111".into();
        e.session_id = "33333333-3333-3333-3333-333333333333".into();
    }
    events[0].event_id = "01234567-89ab-cdef-0123-456789abcdef".into();
    events[1].parent_span_id = Some("00000000-0000-0000-0000-000000000000".into());
    reseal(&mut events);
    assert_eq!(findings(&events), []);
}

#[test]
fn a_changed_field_is_first_a_hash_mismatch() {
    // Not re-sealed: integrity comes first, the field rule follows in all-errors mode.
    let mut events = events();
    reseal(&mut events);
    events[2].trace_version = "2.0".into();
    events[3].session_id = OTHER_SESSION.into();
    assert_eq!(
        findings(&events),
        [
            (2, 3, Code::HashMismatch, None),
            (2, 3, Code::InvalidTraceVersion, Some("trace_version")),
            (3, 4, Code::HashMismatch, None),
            (3, 4, Code::SessionMixed, Some("session_id")),
        ]
    );
}

#[test]
fn one_event_can_break_several_rules_reported_in_field_order() {
    let events = changed(1, |e| {
        e.trace_version = "2.0".into();
        e.event_id = "e".into();
        e.session_id = "s".into();
        e.timestamp = "noon".into();
    });
    assert_eq!(
        findings(&events),
        [
            (1, 2, Code::InvalidTraceVersion, Some("trace_version")),
            (1, 2, Code::InvalidId, Some("event_id")),
            (1, 2, Code::InvalidId, Some("session_id")),
            (1, 2, Code::InvalidTimestamp, Some("timestamp")),
            (1, 2, Code::SessionMixed, Some("session_id")),
        ]
    );
}

#[test]
fn ids_written_with_escapes_are_read_decoded() {
    // `\u0030` is `0`: the decoded value is the UUID the hash reads too.
    let mut events = events();
    reseal(&mut events);
    let text: String = events
        .iter()
        .map(|e| {
            serde_json::to_string(e)
                .unwrap()
                .replace("\"0190", "\"\\u0030190")
                + "\n"
        })
        .collect();
    assert!(text.contains("\\u0030190"));
    assert!(verify_all_ways(text.as_bytes(), true).is_valid());
}

#[test]
fn messages_name_the_field_and_the_value() {
    let events = changed(2, |e| e.span_id = "sp/2".into());
    let text: String = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    let report = verify_all_ways(text.as_bytes(), false);
    let f = report.first_error().unwrap();
    assert_eq!(
        f.to_string(),
        "invalid_id at sequence 2 (line 3): span_id is \"sp/2\", not a UUID in canonical form \
         (8-4-4-4-12 lowercase hex digits)"
    );
    let events = changed(2, |e| e.session_id = OTHER_SESSION.into());
    let text: String = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    let report = verify_all_ways(text.as_bytes(), false);
    let message = &report.first_error().unwrap().message;
    assert!(message.contains(OTHER_SESSION), "{message}");
    assert!(
        message.contains("0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71"),
        "{message}"
    );
}

#[test]
fn the_codes_have_their_wire_names() {
    let names: Vec<&str> = [
        Code::InvalidTraceVersion,
        Code::InvalidId,
        Code::InvalidTimestamp,
        Code::SessionMixed,
    ]
    .iter()
    .map(|c| c.as_str())
    .collect();
    assert_eq!(
        names,
        [
            "invalid_trace_version",
            "invalid_id",
            "invalid_timestamp",
            "session_mixed"
        ]
    );
}

/// Integers past 64 bits are JSON and Appendix B hashes them exactly, so an event holding one
/// reads back, from its text (as the stores read it) or from a JSON value (as a receipt's event
/// is read), equal to what was written, and its chain verifies. (A CARP request, whose objects
/// nest `#[serde(flatten)]` structs, could not be read with one: `cra_wire::members`.)
#[test]
fn an_event_whose_payload_holds_integers_past_64_bits_reads_back_and_verifies() {
    let wide = [
        "18446744073709551616",
        "123456789012345678901",
        "-170141183460469231731687303715884105728",
        "1234567890123456789012345678901234567890",
    ];
    let payloads = wide
        .iter()
        .map(|n| serde_json::from_str(&format!(r#"{{"result":{{"n":{n}}}}}"#)).unwrap())
        .collect();
    let (events, _) = chain(payloads);
    for (event, n) in events.iter().zip(wide) {
        let text = serde_json::to_string(event).unwrap();
        assert!(text.contains(n), "{text}");
        let read: TraceEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(&read, event);
        let value = serde_json::to_value(event).unwrap();
        let read: TraceEvent = serde_json::from_value(value).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(&read, event);
    }
    assert!(findings(&events).is_empty());
}
