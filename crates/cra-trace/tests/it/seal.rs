//! `seal_prepared` against `seal`: the same hash for any payload, stored JSON byte-identical to
//! the serialised event, and lines whose hashes and links verify (by the streaming verifiers and
//! the reference; the ids are non-ASCII on purpose, so the §4.2 id rule refuses them).

use cra_trace::{ChainHead, Code, EventDraft, PreparedDraft, Report, seal, seal_prepared};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Value, json};

use crate::fuzz_props::payload;
use crate::support::verify_all_ways;

fn draft(payload: Value, parent: Option<&str>) -> EventDraft {
    EventDraft {
        trace_id: "0196b5a0-0000-7000-8000-000000000001".into(),
        span_id: "0196b5a0-0000-7000-8000-00000000000\u{e9}".into(),
        parent_span_id: parent.map(str::to_owned),
        event_type: "x.\"quoted\"".into(),
        payload,
    }
}

/// Seals `payloads` both ways; asserts the hashes agree and returns the stored lines.
fn both_ways(payloads: Vec<Value>) -> Vec<u8> {
    let mut head = ChainHead::genesis();
    let mut text = Vec::new();
    for (i, p) in payloads.into_iter().enumerate() {
        let parent = (i % 2 == 1).then_some("0196b5a0-0000-7000-8000-0000000000ff");
        let id = format!("0196b5a0-0000-7000-8000-{i:012}");
        let stamp = "2026-03-01T12:00:00.000000Z".to_owned();
        let plain = seal(
            draft(p.clone(), parent),
            "s\u{1F600}",
            &head,
            id.clone(),
            stamp.clone(),
        );
        let (event, wire) = seal_prepared(
            PreparedDraft::new(draft(p, parent)),
            "s\u{1F600}",
            &head,
            id,
            stamp,
        );
        assert_eq!(event, plain, "seal_prepared must seal what seal seals");
        // Byte for byte what serialising the sealed event gives: the payload keeps its spelling.
        assert_eq!(
            String::from_utf8_lossy(&wire),
            serde_json::to_string(&plain).unwrap()
        );
        let back = cra_trace::parse_event_line(&wire).expect("the stored JSON parses strictly");
        assert_eq!(cra_trace::compute_event_hash(&back), event.event_hash);
        assert_eq!(
            back.payload,
            serde_json::from_slice::<Value>(&wire).unwrap()["payload"]
        );
        head = ChainHead::after(&event);
        text.extend_from_slice(&wire);
        text.push(b'\n');
    }
    text
}

#[test]
fn awkward_payloads_seal_alike_and_verify() {
    let text = both_ways(vec![
        json!({}),
        json!({"b": 1, "a": [1.5, -0.0, "\u{7f}\u{0}\u{1F600}"], "n": null}),
        serde_json::from_str(r#"{"big": 1e400, "neg": -1e400, "s": "Infinity"}"#).unwrap(),
        serde_json::from_str(r#"{"e": 1E5, "i": 123456789012345678901234567890, "z": -0}"#)
            .unwrap(),
        json!({"deep": [[[{"k": "v"}]]]}),
    ]);
    let report = verify_all_ways(&text, true);
    assert!(only_the_awkward_ids_are_refused(&report), "{report:?}");
}

/// Whether the chain's hashes and links verify: the only findings are the §4.2 id rule refusing
/// the deliberately awkward `span_id` and `session_id` (non-ASCII, so not UUIDs) of each event.
fn only_the_awkward_ids_are_refused(report: &Report) -> bool {
    let ids = report
        .findings
        .iter()
        .map(|f| (f.line, f.code, f.field))
        .collect::<Vec<_>>();
    let expected = (1..=report.events)
        .flat_map(|line| {
            [
                (line, Code::InvalidId, Some("span_id")),
                (line, Code::InvalidId, Some("session_id")),
            ]
        })
        .collect::<Vec<_>>();
    ids == expected
}

proptest! {
    #![proptest_config(Config {
        cases: 2_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/seal.txt",
        ))),
        ..Config::default()
    })]

    #[test]
    fn prepared_sealing_equals_sealing(payloads in prop::collection::vec(payload(), 1..6)) {
        let text = both_ways(payloads);
        let report = verify_all_ways(&text, true);
        prop_assert!(only_the_awkward_ids_are_refused(&report), "{:?}", report);
    }
}
