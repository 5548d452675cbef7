//! The Appendix B vectors (copied from the shared vectors) and the conformance example event.

use cra_trace::{Code, compute_event_hash, event_preimage, parse_event_line};
use serde_json::Value;

use crate::support::verify_all_ways;

const VECTORS: &str = include_str!("../fixtures/trace-appendix-b.json");
const CHAIN: &str = include_str!("../fixtures/trace-chain-appendix-b.jsonl");
const SINGLE: &str = include_str!("../fixtures/conformance-single-event.json");

#[test]
fn every_vector_preimage_and_hash_reproduces() {
    let vectors: Value = serde_json::from_str(VECTORS).unwrap();
    let vectors = vectors["vectors"].as_array().unwrap();
    let lines: Vec<&str> = CHAIN.lines().collect();
    assert_eq!(vectors.len(), lines.len());
    assert_eq!(vectors.len(), 5);
    for (vector, line) in vectors.iter().zip(lines) {
        let event = parse_event_line(line.as_bytes()).unwrap();
        assert_eq!(event.sequence, vector["sequence"].as_u64().unwrap());
        assert_eq!(
            event_preimage(&event),
            vector["preimage"].as_str().unwrap(),
            "preimage of {}",
            event.sequence
        );
        assert_eq!(
            compute_event_hash(&event),
            vector["event_hash"].as_str().unwrap()
        );
        assert_eq!(event.event_hash, vector["event_hash"].as_str().unwrap());
    }
}

#[test]
fn the_vector_chain_verifies() {
    let report = verify_all_ways(CHAIN.as_bytes(), true);
    assert!(report.is_valid(), "{:?}", report.findings);
    assert_eq!(report.events, 5);
}

#[test]
fn the_conformance_example_event_hashes_as_the_errata_say() {
    let doc: Value = serde_json::from_str(SINGLE).unwrap();
    let mut event = doc["event"].clone();
    event["event_hash"] = Value::String(String::new());
    let parsed = parse_event_line(event.to_string().as_bytes()).unwrap();
    assert_eq!(
        compute_event_hash(&parsed),
        "f5b4945b0bb5f9adc249a7062a5bf1bbcf6f095edbd8fb1503bbc2d5a05d19c5"
    );
    assert_eq!(
        doc["event_hash"],
        "f5b4945b0bb5f9adc249a7062a5bf1bbcf6f095edbd8fb1503bbc2d5a05d19c5"
    );
}

#[test]
fn unknown_fields_and_event_types_round_trip() {
    let line = CHAIN.lines().next().unwrap();
    let mut v: Value = serde_json::from_str(line).unwrap();
    v["x_vendor"] = serde_json::json!({"k": [1, 2.5, "é"]});
    v["payload"]["extra_field"] = Value::Bool(true);
    let event = parse_event_line(v.to_string().as_bytes()).unwrap();
    assert_eq!(event.extra["x_vendor"]["k"][2], "é");
    let back: Value = serde_json::to_value(&event).unwrap();
    assert_eq!(back["x_vendor"], v["x_vendor"]);
    assert_eq!(back["payload"], v["payload"]);
    // An unknown top-level field is not part of the hash; a payload change is.
    let report = verify_all_ways(format!("{}\n", v).as_bytes(), false);
    assert_eq!(
        report.first_error().map(|f| f.code),
        Some(Code::HashMismatch)
    );
}

#[test]
fn duplicate_keys_are_malformed_events_at_any_depth() {
    let line = CHAIN.lines().next().unwrap();
    for (from, to) in [
        (
            r#""payload": {"agent_id": "test-agent","#,
            r#""payload": {"agent_id": "x", "agent_id": "test-agent","#,
        ),
        (r#""sequence": 0,"#, r#""sequence": 0, "sequence": 0,"#),
        (
            r#""trace_version": "1.0","#,
            r#""trace_version": "1.0", "extra": {"a": 1, "a": 1},"#,
        ),
        (
            r#""trace_version": "1.0","#,
            r#""x": 1, "trace_version": "1.0", "x": 1,"#,
        ),
    ] {
        assert!(line.contains(from));
        let bad = line.replacen(from, to, 1);
        let text = format!("{bad}\n{}\n", CHAIN.lines().nth(1).unwrap());
        let report = verify_all_ways(text.as_bytes(), false);
        let first = report.first_error().unwrap();
        assert_eq!(
            (first.code, first.sequence, first.line),
            (Code::MalformedEvent, 0, 1),
            "{to}"
        );
        assert!(first.message.contains("duplicate key"), "{}", first.message);
    }
}

#[test]
fn ill_typed_and_missing_fields_are_malformed() {
    let line = CHAIN.lines().next().unwrap();
    for (from, to, says) in [
        (r#""sequence": 0"#, r#""sequence": 0.0"#, "/sequence"),
        (r#""sequence": 0"#, r#""sequence": -1"#, "/sequence"),
        (r#""sequence": 0"#, r#""sequence": "0""#, "/sequence"),
        (
            r#""sequence": 0"#,
            r#""sequence": 18446744073709551616"#,
            "/sequence",
        ),
        (
            r#""parent_span_id": null"#,
            r#""parent_span_id": 5"#,
            "/parent_span_id",
        ),
        (
            r#""payload": {"agent_id": "test-agent", "goal": "Test session"}"#,
            r#""payload": []"#,
            "/payload",
        ),
        (r#""trace_version": "1.0", "#, "", "/trace_version"),
        (
            r#""event_type": "session.started""#,
            r#""event_type": null"#,
            "/event_type",
        ),
        (r#""timestamp""#, r#""timestamq""#, "/timestamp"),
    ] {
        assert!(line.contains(from), "{from}");
        let bad = line.replacen(from, to, 1);
        let report = verify_all_ways(format!("{bad}\n").as_bytes(), true);
        let first = report.first_error().unwrap();
        assert_eq!(first.code, Code::MalformedEvent, "{to}");
        assert!(first.message.contains(says), "{to}: {}", first.message);
    }
    for bad in [
        "",
        "   ",
        "[]",
        "{}",
        "not json",
        "{\"trace_version\": \"1.0\"",
        "\u{fffd}",
    ] {
        let report = verify_all_ways(format!("{bad}\n").as_bytes(), true);
        assert_eq!(
            report.first_error().unwrap().code,
            Code::MalformedEvent,
            "{bad:?}"
        );
    }
    let report = verify_all_ways(b"\xff\xfe\n", true);
    assert_eq!(report.first_error().unwrap().code, Code::MalformedEvent);
}

#[test]
fn empty_input_is_a_valid_empty_chain_and_crlf_is_accepted() {
    let report = verify_all_ways(b"", true);
    assert!(report.is_valid());
    assert_eq!(report.events, 0);
    let crlf = CHAIN.replace('\n', "\r\n");
    assert!(verify_all_ways(crlf.as_bytes(), true).is_valid());
    let no_final_newline = CHAIN.trim_end();
    let report = verify_all_ways(no_final_newline.as_bytes(), true);
    assert!(report.is_valid());
    assert_eq!(report.events, 5);
}
