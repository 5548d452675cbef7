//! The cargo-fuzz target `trace_jsonl` as a property test on the stable toolchain (see
//! `fuzz/README.md`), 10,000 cases.
//!
//! The oracle is the fuzzer's own harness (`fuzz/src/trace.rs`, included below): the streaming
//! and reference verifiers agree in every mode and chunk size, and every line the verifier reads
//! as an event reads the same through serde, round-trips, and verifies the same from memory as
//! from text. Inputs are valid sealed chains (lifecycle event types, payloads with unicode, big
//! and fractional numbers) then damaged the ways a tampered or truncated file is: a field changed
//! to another value or type, a field removed, a key duplicated, an unknown field added, lines
//! dropped, swapped or repeated, CRLF endings, blank lines, stray bytes, the text cut short.
//! Failures persist in `proptest-regressions/fuzz_props.txt`.

use cra_trace::{ChainHead, EventDraft, seal};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Map, Value, json};

#[path = "../../../../fuzz/src/trace.rs"]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's public harnesses, shared with this test"
)]
mod oracles;

const TYPES: &[&str] = &[
    "session.started",
    "carp.request.received",
    "carp.resolution.completed",
    "action.requested",
    "action.executed",
    "action.failed",
    "session.ended",
    "x.custom",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "1E5",
            "-0",
            "1e400",
            "123456789012345678901234567890",
            "0.1"
        ])
        .prop_map(|t| serde_json::from_str(t).unwrap_or(Value::Null)),
        "[a-z é😀\"\\\\\\x00-\\x1f\u{7f}]{0,8}".prop_map(Value::String),
    ]
}

pub(crate) fn payload() -> impl Strategy<Value = Value> {
    let value = scalar().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}|execution_id", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (
        prop::collection::btree_map("[a-z_]{1,8}", value, 0..4),
        prop::option::of(prop::sample::select(vec!["e1", "e2"])),
    )
        .prop_map(|(m, exec)| {
            let mut o: Map<String, Value> = m.into_iter().collect();
            if let Some(e) = exec {
                o.insert("execution_id".into(), json!(e));
            }
            Value::Object(o)
        })
}

/// A sealed chain of events, one JSON object per line.
fn chain() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec((prop::sample::select(TYPES), payload(), 0u32..5), 1..7).prop_map(
        |events| {
            let mut head = ChainHead::genesis();
            let mut lines = Vec::new();
            let mut second = 0u32;
            for (i, (event_type, payload, step)) in events.into_iter().enumerate() {
                second += step;
                let event = seal(
                    EventDraft {
                        trace_id: "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70".into(),
                        span_id: format!("0190f5d2-8a4e-7b3c-9d1e-{:012x}", 0x1000 + i),
                        parent_span_id: (i % 2 == 1)
                            .then(|| "0190f5d2-8a4e-7b3c-9d1e-000000001000".into()),
                        event_type: if i == 0 {
                            "session.started"
                        } else {
                            event_type
                        }
                        .into(),
                        payload,
                    },
                    "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71",
                    &head,
                    format!("0190f5d2-8a4e-7b3c-9d1e-{:012x}", i + 1),
                    format!(
                        "2024-12-28T12:{:02}:{:02}.000000Z",
                        second / 60,
                        second % 60
                    ),
                );
                head = ChainHead::after(&event);
                lines.push(serde_json::to_string(&event).unwrap_or_default());
            }
            lines
        },
    )
}

const FIELDS: &[&str] = &cra_trace::event::ENVELOPE_FIELDS;

/// Values a damaged field may take.
fn replacement() -> impl Strategy<Value = Value> {
    prop_oneof![
        scalar(),
        prop::sample::select(vec![
            "0",
            "1",
            "2",
            "-1",
            "1.0",
            "1e2",
            "18446744073709551615",
            "18446744073709551616",
            "\"3\"",
            "[]",
            "{}",
        ])
        .prop_map(|t| serde_json::from_str(t).unwrap_or(Value::Null)),
        Just(json!("0".repeat(64))),
        Just(json!("f".repeat(64))),
    ]
}

/// One way of damaging a chain.
#[derive(Debug, Clone)]
enum Damage {
    SetField(usize, usize, Value),
    RemoveField(usize, usize),
    DuplicateKey(usize, usize),
    UnknownField(usize, Value),
    DropLine(usize),
    SwapLines(usize, usize),
    RepeatLine(usize),
    FlipHashChar(usize, usize),
    Crlf(usize),
    BlankLine(usize),
    InsertByte(usize, u8),
    Truncate(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    let i = any::<usize>();
    let f = 0..FIELDS.len();
    prop_oneof![
        (i, f.clone(), replacement()).prop_map(|(l, f, v)| Damage::SetField(l, f, v)),
        (i, f.clone()).prop_map(|(l, f)| Damage::RemoveField(l, f)),
        (i, f).prop_map(|(l, f)| Damage::DuplicateKey(l, f)),
        (i, scalar()).prop_map(|(l, v)| Damage::UnknownField(l, v)),
        i.prop_map(Damage::DropLine),
        (i, i).prop_map(|(a, b)| Damage::SwapLines(a, b)),
        i.prop_map(Damage::RepeatLine),
        (i, 0..64usize).prop_map(|(l, c)| Damage::FlipHashChar(l, c)),
        i.prop_map(Damage::Crlf),
        i.prop_map(Damage::BlankLine),
        (i, prop::sample::select(b"{}\",:\\0 \n\x00\xff".to_vec()))
            .prop_map(|(p, b)| Damage::InsertByte(p, b)),
        i.prop_map(Damage::Truncate),
    ]
}

fn edit_object(line: &mut String, f: impl FnOnce(&mut Map<String, Value>)) {
    if let Ok(Value::Object(mut o)) = serde_json::from_str::<Value>(line) {
        f(&mut o);
        *line = Value::Object(o).to_string();
    }
}

fn apply(mut lines: Vec<String>, damages: &[Damage]) -> Vec<u8> {
    let mut tail_edits = Vec::new();
    for d in damages {
        let n = lines.len();
        if n == 0 {
            break;
        }
        match d {
            Damage::SetField(l, f, v) => {
                edit_object(&mut lines[l % n], |o| {
                    o.insert(FIELDS[*f].into(), v.clone());
                });
            }
            Damage::RemoveField(l, f) => edit_object(&mut lines[l % n], |o| {
                o.remove(FIELDS[*f]);
            }),
            Damage::DuplicateKey(l, f) => {
                let line = &mut lines[l % n];
                if line.starts_with('{') {
                    line.insert_str(1, &format!("\"{}\":null,", FIELDS[*f]));
                }
            }
            Damage::UnknownField(l, v) => edit_object(&mut lines[l % n], |o| {
                o.insert("x_extra".into(), v.clone());
            }),
            Damage::DropLine(l) => {
                lines.remove(l % n);
            }
            Damage::SwapLines(a, b) => lines.swap(a % n, b % n),
            Damage::RepeatLine(l) => {
                let copy = lines[l % n].clone();
                lines.insert(l % n, copy);
            }
            Damage::FlipHashChar(l, c) => edit_object(&mut lines[l % n], |o| {
                if let Some(Value::String(h)) = o.get_mut("event_hash")
                    && *c < h.len()
                    && h.is_char_boundary(*c)
                    && h.is_char_boundary(c + 1)
                {
                    let flipped = if &h[*c..c + 1] == "0" { "1" } else { "0" };
                    h.replace_range(*c..c + 1, flipped);
                }
            }),
            Damage::Crlf(l) => lines[l % n].push('\r'),
            Damage::BlankLine(l) => lines.insert(l % n, String::new()),
            Damage::InsertByte(..) | Damage::Truncate(_) => tail_edits.push(d.clone()),
        }
    }
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    for d in tail_edits {
        let len = bytes.len();
        match d {
            Damage::InsertByte(p, b) => bytes.insert(p % (len + 1), b),
            Damage::Truncate(p) => bytes.truncate(p % (len + 1)),
            _ => {}
        }
    }
    bytes
}

/// The fuzz target's input form: a chunk-size byte, then the JSONL text.
fn trace_input() -> impl Strategy<Value = Vec<u8>> {
    (any::<u8>(), chain(), prop::collection::vec(damage(), 0..4)).prop_map(
        |(chunk, lines, damages)| {
            let mut out = vec![chunk];
            out.extend(apply(lines, &damages));
            out
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/fuzz_props.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn trace_jsonl(input in trace_input()) {
        oracles::trace_jsonl(&input);
    }
}
