//! Chain verification: every single mutation of a valid chain is detected at the right sequence
//! with the right code, and the fast streaming verifier agrees with the reference everywhere.

use cra_trace::{Code, Finding, compute_event_hash, parse_event_line, verify_events};
use proptest::prelude::*;
use serde_json::{Number, Value, json};

use crate::support::{chain, verify_all_ways};

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (any::<f64>().prop_filter("finite", |f| f.is_finite())).prop_map(|f| json!(f)),
        "-?[1-9][0-9]{19,40}".prop_map(|s| Value::Number(s.parse::<Number>().unwrap())),
        "\\PC{0,12}".prop_map(Value::String),
        "[\\x00-\\x1f\\x7f\"\\\\]{0,6}".prop_map(Value::String),
    ]
}

fn payload() -> impl Strategy<Value = Value> {
    let leaf = scalar();
    let tree = leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,6}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (
        prop::collection::btree_map("\\PC{0,6}", tree, 0..4),
        "[a-z]{4,10}",
    )
        .prop_map(|(m, note)| {
            let mut obj: serde_json::Map<String, Value> = m.into_iter().collect();
            obj.insert("note".into(), Value::String(note));
            Value::Object(obj)
        })
}

fn chains() -> impl Strategy<Value = Vec<Value>> {
    prop::collection::vec(payload(), 2..12)
}

fn first(text: &str) -> Option<(u64, Code)> {
    verify_all_ways(text.as_bytes(), false)
        .first_error()
        .map(|f| (f.sequence, f.code))
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_owned).collect()
}

fn join(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn valid_chains_verify(payloads in chains()) {
        let (events, text) = chain(payloads);
        let report = verify_all_ways(text.as_bytes(), true);
        prop_assert!(report.is_valid(), "{:?}", report.findings);
        prop_assert_eq!(report.events, events.len() as u64);
        prop_assert!(verify_events(&events, true).is_valid());
        // The fast path hashes exactly what the reference computes from the tree.
        for (line, event) in text.lines().zip(&events) {
            prop_assert_eq!(compute_event_hash(&parse_event_line(line.as_bytes()).unwrap()), event.event_hash.clone());
        }
    }

    #[test]
    fn a_changed_payload_letter_is_a_hash_mismatch(payloads in chains(), pick in any::<prop::sample::Index>(), letter in 0u8..26) {
        let (events, text) = chain(payloads);
        let k = pick.index(events.len());
        let mut ls = lines(&text);
        let note = events[k].payload["note"].as_str().unwrap().to_owned();
        let mut changed = note.clone().into_bytes();
        changed[0] = b'a' + (changed[0] - b'a' + 1 + letter % 25) % 26;
        let changed = String::from_utf8(changed).unwrap();
        ls[k] = ls[k].replacen(&format!("\"note\":\"{note}\""), &format!("\"note\":\"{changed}\""), 1);
        prop_assert_eq!(first(&join(&ls)), Some((k as u64, Code::HashMismatch)));
    }

    #[test]
    fn a_changed_hash_is_detected_where_it_was_changed(payloads in chains(), pick in any::<prop::sample::Index>(), which in any::<bool>(), digit in 0usize..64) {
        let (events, text) = chain(payloads);
        let k = pick.index(events.len());
        let mut ls = lines(&text);
        let (field, old) = if which {
            ("event_hash", events[k].event_hash.clone())
        } else {
            ("previous_event_hash", events[k].previous_event_hash.clone())
        };
        let mut new = old.clone().into_bytes();
        new[digit] = if new[digit] == b'f' { b'0' } else if new[digit] == b'9' { b'a' } else { new[digit] + 1 };
        let new = String::from_utf8(new).unwrap();
        ls[k] = ls[k].replacen(&format!("\"{field}\":\"{old}\""), &format!("\"{field}\":\"{new}\""), 1);
        let want = match (which, k) {
            (true, _) => Code::HashMismatch,
            (false, 0) => Code::InvalidGenesis,
            (false, _) => Code::ChainBroken,
        };
        prop_assert_eq!(first(&join(&ls)), Some((k as u64, want)));
        // In all-errors mode a changed event_hash also breaks the next link.
        let all = verify_all_ways(join(&ls).as_bytes(), true);
        if which && k + 1 < events.len() {
            prop_assert!(all.findings.iter().any(|f| f.sequence == k as u64 + 1 && f.code == Code::ChainBroken));
        }
    }

    #[test]
    fn a_changed_sequence_is_a_sequence_gap(payloads in chains(), pick in any::<prop::sample::Index>(), to in 0u64..40) {
        let (events, text) = chain(payloads);
        let k = pick.index(events.len());
        prop_assume!(to != k as u64);
        let mut ls = lines(&text);
        ls[k] = ls[k].replacen(&format!("\"sequence\":{k},"), &format!("\"sequence\":{to},"), 1);
        prop_assert_eq!(first(&join(&ls)), Some((k as u64, Code::SequenceGap)));
    }

    #[test]
    fn a_deleted_line_is_a_sequence_gap(payloads in chains(), pick in any::<prop::sample::Index>()) {
        let (events, text) = chain(payloads);
        // Deleting the last line leaves a valid, shorter chain: a chain cannot show truncation.
        let k = pick.index(events.len() - 1);
        let mut ls = lines(&text);
        ls.remove(k);
        prop_assert_eq!(first(&join(&ls)), Some((k as u64, Code::SequenceGap)));
        let mut ls = lines(&text);
        ls.pop();
        prop_assert_eq!(first(&join(&ls)), None);
    }

    #[test]
    fn swapped_lines_are_a_sequence_gap(payloads in chains(), pick in any::<prop::sample::Index>()) {
        let (events, text) = chain(payloads);
        let k = pick.index(events.len() - 1);
        let mut ls = lines(&text);
        ls.swap(k, k + 1);
        prop_assert_eq!(first(&join(&ls)), Some((k as u64, Code::SequenceGap)));
    }

    #[test]
    fn any_byte_change_is_caught_at_its_line_or_changes_nothing(payloads in chains(), pick in any::<prop::sample::Index>(), pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let (events, text) = chain(payloads);
        let k = pick.index(events.len());
        let mut ls: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
        let at = pos.index(ls[k].len());
        prop_assume!(ls[k][at] != byte && byte != b'\n');
        ls[k][at] = byte;
        let mutated: Vec<u8> = ls.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
        let report = verify_all_ways(&mutated, false);
        match report.first_error() {
            Some(Finding { sequence, line, .. }) => {
                prop_assert_eq!(*sequence, k as u64);
                prop_assert_eq!(*line, k as u64 + 1);
            }
            None => {
                // Only a change that leaves every hashed field equal can pass (e.g. `1e5` -> `1E5`).
                let event = parse_event_line(&ls[k]).unwrap();
                prop_assert_eq!(cra_trace::event_preimage(&event), cra_trace::event_preimage(&events[k]));
                prop_assert_eq!(&event.event_hash, &events[k].event_hash);
            }
        }
        // And in all-errors mode both verifiers list the same findings.
        verify_all_ways(&mutated, true);
    }
}
