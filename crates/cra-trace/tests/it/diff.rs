//! Semantic diff: fixture pairs of chains (`tests/fixtures/diff/<case>/{a,b}.trace.jsonl`,
//! made by `make.py` there) with the expected diff as JSON (`expected.json` with the default
//! options, `expected.<include>.json` with `--include`), plus properties that need no fixture.
//!
//! `CRA_BLESS=1` writes the expected files from the current output instead of comparing (review
//! every change before committing it).

use std::path::{Path, PathBuf};

use cra_trace::diff::{DiffOptions, diff, parse_events};
use cra_trace::{ChainHead, EventDraft, TraceEvent, seal, verify_events};
use serde_json::{Value, json};

fn case_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/diff")
        .join(name)
}

fn load(path: &Path) -> Vec<TraceEvent> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let events = parse_events(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        verify_events(&events, false).is_valid(),
        "fixture {} is not a valid chain; regenerate it with make.py",
        path.display()
    );
    events
}

fn check(name: &str, expected_file: &str, options: DiffOptions) -> Value {
    let dir = case_dir(name);
    let a = load(&dir.join("a.trace.jsonl"));
    let b = load(&dir.join("b.trace.jsonl"));
    let got = serde_json::to_value(diff(&a, &b, &options)).unwrap();
    let path = dir.join(expected_file);
    if std::env::var_os("CRA_BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
        return got;
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CRA_BLESS=1 writes it)", path.display()));
    let want: Value = serde_json::from_str(&text).unwrap();
    pretty_assertions_free_eq(&got, &want, &path);
    // The diff of a chain with itself is empty, whatever is included.
    let all = DiffOptions {
        include_ids: true,
        include_timestamps: true,
        include_hashes: true,
    };
    assert!(diff(&a, &a, &all).same);
    assert!(diff(&b, &b, &all).same);
    got
}

fn pretty_assertions_free_eq(got: &Value, want: &Value, path: &Path) {
    if got != want {
        panic!(
            "{} differs from the computed diff:\n{}",
            path.display(),
            serde_json::to_string_pretty(got).unwrap()
        );
    }
}

#[test]
fn another_run_of_the_same_work_is_the_same() {
    let d = check(
        "same-work-other-run",
        "expected.json",
        DiffOptions::default(),
    );
    assert_eq!(d["same"], true);
    assert_eq!(d["paired"], 20);
}

#[test]
fn including_timestamps_shows_every_instant() {
    let d = check(
        "same-work-other-run",
        "expected.timestamps.json",
        DiffOptions {
            include_timestamps: true,
            ..DiffOptions::default()
        },
    );
    assert_eq!(d["same"], false);
    // Every event's timestamp moved by five hours.
    assert_eq!(d["changed"].as_array().unwrap().len(), 20);
    assert!(d["added"].as_array().unwrap().is_empty());
}

#[test]
fn an_extra_resolve_is_added_not_a_shift() {
    let d = check("extra-resolve", "expected.json", DiffOptions::default());
    assert_eq!(d["paired"], 20);
    let added: Vec<&str> = d["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        added,
        [
            "carp.request.received",
            "policy.evaluated",
            "carp.resolution.completed"
        ]
    );
    assert!(d["changed"].as_array().unwrap().is_empty());
}

#[test]
fn a_denied_merge_changes_the_decision_and_drops_the_approval() {
    let d = check("merge-denied", "expected.json", DiffOptions::default());
    let removed: Vec<&str> = d["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        removed,
        [
            "approval.requested",
            "approval.granted",
            "action.requested",
            "action.approved",
            "action.executed"
        ]
    );
    let pointers: Vec<&str> = d["changed"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["fields"].as_array().unwrap())
        .map(|f| f["pointer"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/payload/result"), "{pointers:?}");
    assert!(pointers.contains(&"/payload/decision_type"), "{pointers:?}");
}

#[test]
fn a_reworded_goal_is_a_change_of_the_same_request() {
    let d = check(
        "changed-goal-failed-action",
        "expected.json",
        DiffOptions::default(),
    );
    // The request is paired (by type) despite its goal, and so are its children.
    assert_eq!(d["paired"], 19);
    let removed = d["removed"].as_array().unwrap();
    let added = d["added"].as_array().unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0]["event_type"], "action.executed");
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["event_type"], "action.failed");
}

/// A chain of (span, parent, type, payload) entries with ids derived from `tag`.
fn chain(tag: &str, spec: &[(&str, Option<&str>, &str, Value)]) -> Vec<TraceEvent> {
    let mut head = ChainHead::genesis();
    let mut out = Vec::new();
    for (i, (span, parent, ty, payload)) in spec.iter().enumerate() {
        let e = seal(
            EventDraft {
                trace_id: format!("{tag}-t"),
                span_id: format!("{tag}-{span}"),
                parent_span_id: parent.map(|p| format!("{tag}-{p}")),
                event_type: (*ty).to_owned(),
                payload: payload.clone(),
            },
            &format!("{tag}-session"),
            &head,
            format!("{tag}-e{i}"),
            format!("2026-01-01T00:00:{i:02}.000000Z"),
        );
        head = ChainHead::after(&e);
        out.push(e);
    }
    out
}

#[test]
fn events_pair_by_span_tree_not_by_position() {
    // Two executions under one resolve; B runs them in the other order.
    let a = chain(
        "a",
        &[
            ("r", None, "carp.request.received", json!({"goal": "g"})),
            (
                "x",
                Some("r"),
                "action.requested",
                json!({"action_id": "one", "n": 1}),
            ),
            (
                "y",
                Some("r"),
                "action.requested",
                json!({"action_id": "two", "n": 2}),
            ),
        ],
    );
    let b = chain(
        "b",
        &[
            ("r", None, "carp.request.received", json!({"goal": "g"})),
            (
                "y",
                Some("r"),
                "action.requested",
                json!({"action_id": "two", "n": 2}),
            ),
            (
                "x",
                Some("r"),
                "action.requested",
                json!({"action_id": "one", "n": 1}),
            ),
        ],
    );
    let d = diff(&a, &b, &DiffOptions::default());
    // The LCS keeps one of the two orders; the other execution is removed and re-added, never
    // paired with the wrong action.
    assert_eq!(d.paired, 2);
    assert!(d.changed.is_empty(), "{d:?}");
    assert_eq!(d.removed.len(), 1);
    assert_eq!(d.added.len(), 1);
    assert_eq!(d.removed[0].subject, d.added[0].subject);
}

#[test]
fn spans_under_another_parent_are_not_paired() {
    let a = chain(
        "a",
        &[
            (
                "r1",
                None,
                "carp.request.received",
                json!({"goal": "first"}),
            ),
            (
                "r2",
                None,
                "carp.request.received",
                json!({"goal": "second"}),
            ),
            (
                "x",
                Some("r1"),
                "action.requested",
                json!({"action_id": "go"}),
            ),
        ],
    );
    let b = chain(
        "b",
        &[
            (
                "r1",
                None,
                "carp.request.received",
                json!({"goal": "first"}),
            ),
            (
                "r2",
                None,
                "carp.request.received",
                json!({"goal": "second"}),
            ),
            (
                "x",
                Some("r2"),
                "action.requested",
                json!({"action_id": "go"}),
            ),
        ],
    );
    let d = diff(&a, &b, &DiffOptions::default());
    assert_eq!(d.paired, 2);
    assert_eq!(d.removed.len(), 1);
    assert_eq!(
        d.removed[0].span,
        "carp.request.received \"first\" > action.requested \"go\""
    );
    assert_eq!(
        d.added[0].span,
        "carp.request.received \"second\" > action.requested \"go\""
    );
}

#[test]
fn members_on_one_side_only_are_reported_as_absent() {
    let a = chain("a", &[("s", None, "x.y", json!({"k": 1, "gone": true}))]);
    let b = chain("b", &[("s", None, "x.y", json!({"k": 1.0, "new": [1, 2]}))]);
    let d = diff(&a, &b, &DiffOptions::default());
    let v = serde_json::to_value(&d.changed[0].fields).unwrap();
    assert_eq!(
        v,
        json!([
            {"pointer": "/payload/gone", "a": true},
            {"pointer": "/payload/k", "a": 1, "b": 1.0},
            {"pointer": "/payload/new", "b": [1, 2]},
        ])
    );
}

#[test]
fn parents_that_start_later_cannot_make_a_cycle() {
    // Each span names the other as parent: the first one is a root, the second its child.
    let a = chain(
        "a",
        &[
            ("p", Some("q"), "one", json!({})),
            ("q", Some("p"), "two", json!({})),
        ],
    );
    let d = diff(&a, &a, &DiffOptions::default());
    assert!(d.same);
    assert_eq!(d.paired, 2);
}

#[test]
fn parse_errors_name_the_line() {
    let (_, text) = crate::support::chain(vec![json!({}), json!({})]);
    let mut bad = text.into_bytes();
    bad.extend_from_slice(b"{not json}\n");
    let e = parse_events(&bad).unwrap_err();
    assert_eq!(e.line, 3);
    assert!(parse_events(b"").unwrap().is_empty());
    assert_eq!(
        parse_events(b"\n").unwrap_err().line,
        1,
        "an empty line is not an event"
    );
}
