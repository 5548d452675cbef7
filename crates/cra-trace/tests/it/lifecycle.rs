//! Session lifecycle rules (opt-in): one code per rule, same answers from both verifiers.

use cra_trace::{ChainHead, Code, EventDraft, TraceEvent, VerifyOptions, seal, verify_events_with};
use serde_json::{Value, json};

use crate::support::verify_all_ways_with;

/// (event_type, trace_id, payload, seconds) -> a sealed, hash-valid chain as JSONL.
fn session(events: &[(&str, &str, Value, u32)]) -> (Vec<TraceEvent>, String) {
    let mut head = ChainHead::genesis();
    let mut out = Vec::new();
    let mut text = String::new();
    for (i, (event_type, trace, payload, secs)) in events.iter().enumerate() {
        let draft = EventDraft {
            trace_id: format!("0190f5d2-8a4e-7b3c-9d1e-{trace:0>12}"),
            span_id: format!("0190f5d2-8a4e-7b3c-9d1e-{:012x}", 0x100 + i),
            parent_span_id: None,
            event_type: (*event_type).into(),
            payload: payload.clone(),
        };
        let e = seal(
            draft,
            "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71",
            &head,
            format!("0190f5d2-8a4e-7b3c-9d1e-{:012x}", i + 1),
            format!("2026-01-01T00:00:{secs:02}.000000Z"),
        );
        head = ChainHead::after(&e);
        text.push_str(&serde_json::to_string(&e).unwrap());
        text.push('\n');
        out.push(e);
    }
    (out, text)
}

fn good() -> Vec<(&'static str, &'static str, Value, u32)> {
    vec![
        (
            "session.started",
            "a",
            json!({"agent_id": "x", "goal": "g"}),
            0,
        ),
        (
            "carp.request.received",
            "b",
            json!({"request_id": "r", "operation": "resolve", "goal": "g"}),
            1,
        ),
        (
            "carp.resolution.completed",
            "b",
            json!({"resolution_id": "s", "decision_type": "allow", "allowed_count": 1, "denied_count": 0}),
            1,
        ),
        (
            "action.requested",
            "c",
            json!({"action_id": "t.get", "execution_id": "e1", "parameters_hash": "h"}),
            2,
        ),
        (
            "action.executed",
            "c",
            json!({"action_id": "t.get", "execution_id": "e1", "duration_ms": 1.5}),
            3,
        ),
        (
            "session.ended",
            "a",
            json!({"reason": "completed", "duration_ms": 4000}),
            4,
        ),
    ]
}

fn findings(events: &[(&str, &str, Value, u32)]) -> Vec<(u64, Code)> {
    let (parsed, text) = session(events);
    let report = verify_all_ways_with(text.as_bytes(), true, true);
    let in_memory = verify_events_with(
        &parsed,
        &VerifyOptions {
            all_errors: true,
            lifecycle: true,
            ..VerifyOptions::default()
        },
    );
    assert_eq!(report.findings, in_memory.findings);
    // Without the option the same chains are plain valid chains.
    assert!(verify_all_ways_with(text.as_bytes(), true, false).is_valid());
    report
        .findings
        .iter()
        .map(|f| (f.sequence, f.code))
        .collect()
}

#[test]
fn a_complete_session_passes() {
    assert_eq!(findings(&good()), []);
}

#[test]
fn each_rule_has_its_code() {
    let mut s = good();
    s[0].0 = "context.injected";
    assert_eq!(findings(&s), [(0, Code::NotStarted)]);

    let mut s = good();
    s.push((
        "policy.evaluated",
        "a",
        json!({"policy_id": "p", "result": "allow"}),
        5,
    ));
    assert_eq!(findings(&s), [(6, Code::AfterEnd)]);

    let mut s = good();
    s[4].2["execution_id"] = json!("e2");
    assert_eq!(findings(&s), [(4, Code::UnmatchedAction)]);
    let mut s = good();
    s[4].0 = "action.denied";
    s[4].2.as_object_mut().unwrap().remove("execution_id");
    assert_eq!(findings(&s), [(4, Code::UnmatchedAction)]);
    let mut s = good();
    s[4].0 = "action.failed";
    s.swap(3, 4);
    // Swapping events re-seals them in the new order: only the lifecycle is wrong.
    assert_eq!(
        findings(&s),
        [(3, Code::UnmatchedAction), (4, Code::TimeRegression)]
    );

    let mut s = good();
    s[2].1 = "d";
    assert_eq!(findings(&s), [(2, Code::UnmatchedResolution)]);

    let mut s = good();
    s[3].3 = 0;
    assert_eq!(findings(&s), [(3, Code::TimeRegression)]);

    let codes: Vec<&str> = [
        Code::NotStarted,
        Code::AfterEnd,
        Code::UnmatchedAction,
        Code::UnmatchedResolution,
        Code::TimeRegression,
    ]
    .iter()
    .map(|c| c.as_str())
    .collect();
    assert_eq!(
        codes,
        [
            "lifecycle_not_started",
            "lifecycle_after_end",
            "lifecycle_unmatched_action",
            "lifecycle_unmatched_resolution",
            "lifecycle_time_regression"
        ]
    );
}

#[test]
fn lifecycle_findings_follow_chain_findings_and_stop_first_error_mode() {
    let mut s = good();
    s[0].0 = "context.injected";
    let (_, text) = session(&s);
    let report = verify_all_ways_with(text.as_bytes(), false, true);
    assert_eq!(report.findings.len(), 1);
    assert_eq!(report.findings[0].code, Code::NotStarted);
    assert_eq!(report.events, 1);
}
