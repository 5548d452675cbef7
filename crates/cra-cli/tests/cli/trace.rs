//! `cra trace verify`: exit codes, text and JSON output, `--all`, standard input. The other
//! trace commands (`export`, `state`, `replay`, `diff`) are in `trace/commands.rs`, on a real
//! session driven through the runtime by `trace/live.rs`.

mod commands;
mod encrypted;
mod live;
mod receipts;
mod redacted;
mod witnessed;

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Parser;
use cra_cli::cmd::trace::{Progress, VerifyArgs, progress_line, verify};
use cra_cli::{Cli, Command, Exit, OutputFormat};
use serde_json::Value;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/session.trace.jsonl")
}

fn args(file: Option<PathBuf>, all: bool, output: OutputFormat) -> VerifyArgs {
    VerifyArgs {
        file,
        all,
        lifecycle: false,
        output,
        threads: 0,
        progress: Progress::Auto,
        checkpoint: None,
        log_key: None,
    }
}

fn run(args: &VerifyArgs, stdin: &[u8]) -> (Exit, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let exit = verify(args, stdin, &mut out, &mut err, false);
    (
        exit,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn tampered(dir: &tempfile::TempDir) -> PathBuf {
    let text = std::fs::read_to_string(example()).unwrap();
    let bad = text.replacen("\"duration_ms\": 1500", "\"duration_ms\": 1501", 1);
    assert_ne!(bad, text);
    let bad = bad.replacen("\"sequence\": 2,", "\"sequence\": 7,", 1);
    let path = dir.path().join("tampered.trace.jsonl");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(bad.as_bytes())
        .unwrap();
    path
}

#[test]
fn the_shipped_example_is_valid() {
    let (exit, out, _) = run(&args(Some(example()), false, OutputFormat::Text), b"");
    assert_eq!(exit, Exit::Success);
    assert!(out.starts_with("valid: 5 events"), "{out}");

    let (exit, out, _) = run(&args(Some(example()), false, OutputFormat::Json), b"");
    assert_eq!(exit, Exit::Success);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({"valid": true, "events": 5, "first_error": null})
    );

    // The example is also a complete session under the lifecycle rules.
    let mut lifecycle = args(Some(example()), true, OutputFormat::Json);
    lifecycle.lifecycle = true;
    let (exit, out, _) = run(&lifecycle, b"");
    assert_eq!(exit, Exit::Success, "{out}");
}

#[test]
fn lifecycle_rules_are_opt_in() {
    // A hash-valid one-event chain whose first event is not session.started.
    use cra_trace::{ChainHead, EventDraft, seal};
    let draft = EventDraft {
        trace_id: "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70".into(),
        span_id: "0190f5d2-8a4e-7b3c-9d1e-100000000001".into(),
        parent_span_id: None,
        event_type: "policy.evaluated".into(),
        payload: serde_json::json!({"policy_id": "p", "result": "allow"}),
    };
    let head = ChainHead::genesis();
    let e = seal(
        draft,
        "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71",
        &head,
        "0190f5d2-8a4e-7b3c-9d1e-000000000001".into(),
        "2026-01-01T00:00:00.000000Z".into(),
    );
    let text = format!("{}\n", serde_json::to_string(&e).unwrap());
    let (exit, _, _) = run(&args(None, false, OutputFormat::Json), text.as_bytes());
    assert_eq!(exit, Exit::Success);
    let cli = Cli::try_parse_from(["cra", "trace", "verify", "--lifecycle", "-o", "json"]).unwrap();
    let Command::Trace(cra_cli::cmd::trace::TraceCommand::Verify(a)) = cli.command else {
        panic!("not trace verify");
    };
    let (exit, out, _) = run(&a, text.as_bytes());
    assert_eq!(exit, Exit::Negative);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["first_error"]["code"], "lifecycle_not_started");
}

#[test]
fn a_tampered_chain_exits_2_with_the_first_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = tampered(&dir);
    let (exit, out, _) = run(&args(Some(path.clone()), false, OutputFormat::Json), b"");
    assert_eq!(exit, Exit::Negative);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["first_error"]["code"], "sequence_gap");
    assert_eq!(doc["first_error"]["sequence"], 2);
    assert_eq!(doc["first_error"]["line"], 3);
    assert!(
        doc["first_error"]["message"]
            .as_str()
            .unwrap()
            .contains("sequence is 7")
    );
    assert!(doc.get("errors").is_none());

    let (exit, out, _) = run(&args(Some(path.clone()), true, OutputFormat::Json), b"");
    assert_eq!(exit, Exit::Negative);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let codes: Vec<(u64, &str)> = doc["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["sequence"].as_u64().unwrap(), e["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        codes,
        [
            (2, "sequence_gap"),
            (2, "hash_mismatch"),
            (8, "sequence_gap"),
            (4, "hash_mismatch")
        ]
    );
    assert_eq!(doc["events"], 5);

    let (exit, out, _) = run(&args(Some(path), true, OutputFormat::Text), b"");
    assert_eq!(exit, Exit::Negative);
    assert!(
        out.contains("invalid: hash_mismatch at sequence 4 (line 5)"),
        "{out}"
    );
    assert!(
        out.contains("not a valid chain (4 findings, 5 events read)"),
        "{out}"
    );
}

/// The example with `change` applied to the event at `k`, re-sealed from there on: its hashes
/// and links are right, so only a §4.2 field rule can object.
fn resealed_example(k: usize, change: impl FnOnce(&mut cra_trace::TraceEvent)) -> Vec<u8> {
    let text = std::fs::read(example()).unwrap();
    let mut events: Vec<cra_trace::TraceEvent> = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| cra_trace::parse_event_line(l).unwrap())
        .collect();
    change(&mut events[k]);
    let mut previous = cra_trace::GENESIS_PREVIOUS_HASH.to_owned();
    let mut out = Vec::new();
    for e in &mut events {
        e.previous_event_hash = previous;
        e.event_hash = cra_trace::compute_event_hash(e);
        previous = e.event_hash.clone();
        out.extend_from_slice(serde_json::to_string(e).unwrap().as_bytes());
        out.push(b'\n');
    }
    out
}

#[test]
fn a_linked_chain_that_breaks_section_4_2_exits_2_with_the_code_and_field() {
    type Change = fn(&mut cra_trace::TraceEvent);
    let cases: [(&str, &str, Change); 4] = [
        ("invalid_trace_version", "trace_version", |e| {
            e.trace_version = "2.0".into()
        }),
        ("invalid_id", "event_id", |e| e.event_id = "e-3".into()),
        ("session_mixed", "session_id", |e| {
            e.session_id = "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d99".into()
        }),
        ("invalid_timestamp", "timestamp", |e| {
            e.timestamp = "2024-12-28T12:00:02.000000".into()
        }),
    ];
    for (code, field, change) in cases {
        let text = resealed_example(2, change);
        let (exit, out, _) = run(&args(None, false, OutputFormat::Json), &text);
        assert_eq!(exit, Exit::Negative, "{code}: {out}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["valid"], false);
        assert_eq!(doc["first_error"]["code"], code);
        assert_eq!(doc["first_error"]["field"], field);
        assert_eq!(doc["first_error"]["sequence"], 2);
        assert_eq!(doc["first_error"]["line"], 3);
        let (exit, out, _) = run(&args(None, false, OutputFormat::Text), &text);
        assert_eq!(exit, Exit::Negative);
        assert!(
            out.contains(&format!("invalid: {code} at sequence 2 (line 3): {field}")),
            "{out}"
        );
    }
    // An offset timestamp is a valid form; chain findings carry no field.
    let text = resealed_example(2, |e| e.timestamp = "2024-12-28T13:00:02.5+01:00".into());
    let (exit, out, _) = run(&args(None, false, OutputFormat::Json), &text);
    assert_eq!(exit, Exit::Success, "{out}");
}

#[test]
fn standard_input_is_read_for_dash_and_for_no_file() {
    let text = std::fs::read(example()).unwrap();
    for file in [None, Some(PathBuf::from("-"))] {
        let (exit, out, _) = run(&args(file, false, OutputFormat::Text), &text);
        assert_eq!(exit, Exit::Success);
        assert!(out.contains("5 events in standard input"), "{out}");
    }
    let (exit, out, _) = run(
        &args(None, false, OutputFormat::Json),
        b"{\"a\":1,\"a\":2}\n",
    );
    assert_eq!(exit, Exit::Negative);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["first_error"]["code"], "malformed_event");
}

#[test]
fn an_unreadable_file_exits_1() {
    let missing = PathBuf::from("/nonexistent/cra/none.trace.jsonl");
    let (exit, out, err) = run(&args(Some(missing.clone()), false, OutputFormat::Text), b"");
    assert_eq!(exit, Exit::CouldNotRun);
    assert!(out.is_empty());
    assert!(
        err.contains("cannot read /nonexistent/cra/none.trace.jsonl"),
        "{err}"
    );
    let (exit, out, _) = run(&args(Some(missing), false, OutputFormat::Json), b"");
    assert_eq!(exit, Exit::CouldNotRun);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["error"], "not_found");
    let dir = tempfile::tempdir().unwrap();
    let (exit, _, _) = run(
        &args(Some(dir.path().to_owned()), false, OutputFormat::Text),
        b"",
    );
    assert_eq!(exit, Exit::CouldNotRun);
}

#[test]
fn the_command_line_parses_and_explains_itself() {
    let cli =
        Cli::try_parse_from(["cra", "trace", "verify", "x.jsonl", "--all", "-o", "json"]).unwrap();
    let Command::Trace(cra_cli::cmd::trace::TraceCommand::Verify(a)) = cli.command else {
        panic!("not trace verify");
    };
    assert!(a.all);
    assert_eq!(a.output, OutputFormat::Json);
    assert_eq!(a.file, Some(PathBuf::from("x.jsonl")));
    let help = Cli::try_parse_from(["cra", "trace", "verify", "--help"])
        .unwrap_err()
        .to_string();
    for needle in [
        "sequence_gap",
        "invalid_genesis",
        "malformed_event",
        "first_error",
        "--all",
        "Exit status",
    ] {
        assert!(help.contains(needle), "help lacks {needle}:\n{help}");
    }
}

#[test]
fn progress_line_shows_fraction_or_bytes() {
    let line = progress_line(50 << 20, Some(100 << 20), std::time::Duration::from_secs(1));
    assert!(
        line.contains(" 50.0%") && line.contains("50/100 MiB"),
        "{line}"
    );
    let line = progress_line(3 << 20, None, std::time::Duration::from_secs(1));
    assert!(line.contains("3 MiB"), "{line}");
}
