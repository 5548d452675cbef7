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

/// How a chain's lines are spelled: other writers than serde_json (Python's
/// `json.dumps(event, sort_keys=True)` escapes every non-ASCII character and puts spaces after
/// `:` and `,`), `\/`, uppercase `\u` escapes, unsorted payload objects.
#[derive(Debug, Clone, Copy)]
struct Spelling {
    ascii: bool,
    upper: bool,
    slash: bool,
    spaces: bool,
    reverse: bool,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(ascii, upper, slash, spaces, reverse)| Spelling {
            ascii,
            upper,
            slash,
            spaces,
            reverse,
        })
}

fn spell_string(s: &str, sp: Spelling, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if sp.slash => out.push_str("\\/"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || (sp.ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if sp.upper {
                        out.push_str(&format!("\\u{u:04X}"));
                    } else {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn spell(v: &Value, sp: Spelling, out: &mut String) {
    let (colon, comma) = if sp.spaces { (": ", ", ") } else { (":", ",") };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n.as_str()),
        Value::String(s) => spell_string(s, sp, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                spell(item, sp, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            if sp.reverse {
                entries.reverse();
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                spell_string(k, sp, out);
                out.push_str(colon);
                spell(v, sp, out);
            }
            out.push('}');
        }
    }
}

/// Numbers as other writers write them, floats that can tie, range edges.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:E}")),
        (1u64..(1 << 53), 0u32..30)
            .prop_map(|(m, k)| format!("{:?}", m as f64 / f64::from(1u32 << k))),
        "-?(0|[1-9][0-9]{0,17})\\.[0-9]{1,18}([eE][+-]?[0-9]{1,3})?",
        prop::sample::select(vec![
            "-0",
            "-0.0",
            "1E5",
            "1e16",
            "1e-7",
            "1e400",
            "5e-324",
            "1125899906842624.25",
            "123456789012345678901234567890",
        ])
        .prop_map(str::to_owned),
    ]
    .prop_map(|t| Value::Number(t.parse::<Number>().unwrap()))
}

fn respelled_payload() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        "\\PC{0,10}".prop_map(Value::String),
        "[a-z é😀\"\\\\/\\x00-\\x1f\u{7f}\u{10ffff}]{0,8}".prop_map(Value::String),
    ];
    let tree = leaf.prop_recursive(3, 20, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_é]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z_]{1,8}", tree, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// Which §4.2 field rule the last event of a respelled chain breaks, if any (the chain is sealed
/// either way, so only that rule can fail), or a valid way of writing the fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Valid, ids and timestamps as cra writes them.
    Valid,
    /// Valid, every id's first digit written `\u0030`-style (the quick path refuses escapes).
    EscapedIds,
    /// Valid, timestamps with a `+01:00` offset and nine fraction digits.
    OffsetTimestamps,
    Version,
    EventId,
    ParentId,
    Session,
    Timestamp,
}

fn rule() -> impl Strategy<Value = Rule> {
    prop::sample::select(vec![
        Rule::Valid,
        Rule::Valid,
        Rule::Valid,
        Rule::EscapedIds,
        Rule::OffsetTimestamps,
        Rule::Version,
        Rule::EventId,
        Rule::ParentId,
        Rule::Session,
        Rule::Timestamp,
    ])
}

impl Rule {
    /// The finding the verifier must report for a chain of `n` events, and nothing else.
    fn finding(self, n: usize) -> Option<(u64, Code)> {
        let last = n as u64 - 1;
        match self {
            Rule::Valid | Rule::EscapedIds | Rule::OffsetTimestamps => None,
            Rule::Version => Some((last, Code::InvalidTraceVersion)),
            Rule::EventId | Rule::ParentId => Some((last, Code::InvalidId)),
            Rule::Session => (n > 1).then_some((last, Code::SessionMixed)),
            Rule::Timestamp => Some((last, Code::InvalidTimestamp)),
        }
    }
}

/// A chain whose lines are spelled by `spell` (each line sealed with the reference hash), valid
/// unless `rule` breaks a field rule in its last event.
fn respelled_chain(events: &[(Value, Spelling)], rule: Rule) -> Vec<String> {
    const PLACEHOLDER: &str = "HHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHH";
    let id = |kind: u32, i: usize| format!("0190f5d2-8a4e-7b3c-9d1e-{kind}{i:011}");
    let mut previous = "0".repeat(64);
    let mut lines = Vec::new();
    for (i, (payload, sp)) in events.iter().enumerate() {
        let broken = |r: Rule| rule == r && i + 1 == events.len();
        let mut event = serde_json::Map::new();
        event.insert("event_hash".into(), json!(PLACEHOLDER));
        let event_id = if broken(Rule::EventId) {
            format!("ev-{i}")
        } else {
            id(0, i)
        };
        event.insert("event_id".into(), json!(event_id));
        event.insert("event_type".into(), json!("ext.é/custom"));
        let parent = if broken(Rule::ParentId) {
            json!("sp/0")
        } else if i % 2 == 0 {
            Value::Null
        } else {
            json!(id(1, 0))
        };
        event.insert("parent_span_id".into(), parent);
        event.insert("payload".into(), payload.clone());
        event.insert("previous_event_hash".into(), json!(previous));
        event.insert("sequence".into(), json!(i));
        let session = if broken(Rule::Session) { 9 } else { 8 };
        event.insert("session_id".into(), json!(id(session, 0)));
        event.insert("span_id".into(), json!(id(1, i)));
        let timestamp = match rule {
            _ if broken(Rule::Timestamp) => "2024-12-28T12:00:00.000000".to_owned(),
            Rule::OffsetTimestamps => format!("2024-12-28T13:00:00.{i:09}+01:00"),
            _ => "2024-12-28T12:00:00.000000Z".to_owned(),
        };
        event.insert("timestamp".into(), json!(timestamp));
        event.insert("trace_id".into(), json!(id(2, 0)));
        let version = if broken(Rule::Version) { "2.0" } else { "1.0" };
        event.insert("trace_version".into(), json!(version));
        let mut line = String::new();
        spell(&Value::Object(event), *sp, &mut line);
        if rule == Rule::EscapedIds {
            line = line.replace("\"0190f5d2", "\"\\u0030190f5d2");
        }
        let hash = compute_event_hash(&parse_event_line(line.as_bytes()).unwrap());
        lines.push(line.replacen(PLACEHOLDER, &hash, 1));
        previous = hash;
    }
    lines
}

/// Byte and line damage: (how, where, byte).
fn damage_lines(lines: &[String], damage: &[(u8, usize, u8)]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = lines.iter().map(|l| l.clone().into_bytes()).collect();
    for &(how, at, byte) in damage {
        let n = lines.len();
        if n == 0 {
            break;
        }
        let line = &mut lines[at % n];
        let len = line.len();
        match how % 6 {
            0 => line.insert(at % (len + 1), byte),
            1 if len > 0 => {
                line.remove(at % len);
            }
            2 if len > 0 => line[at % len] = byte,
            3 => {
                lines.remove(at % n);
            }
            4 => lines.swap(at % n, (at / 7) % n),
            _ => line.truncate(at % (len + 1)),
        }
    }
    lines
        .iter()
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect()
}

/// The streaming verifier (its quick path, its general path, the reference fallback) against
/// the reference reader on chains spelled by other writers, some breaking one §4.2 field rule,
/// and then damaged: same findings in both modes, every thread count and chunk size. The seed is printed; rerun a failure with
/// `CRA_VERIFY_SEED=<seed>`.
#[test]
fn respelled_and_damaged_chains_verify_as_the_reference_says() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let seed: u64 = std::env::var("CRA_VERIFY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("respelled chains: seed {seed} (rerun with CRA_VERIFY_SEED={seed})");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 400,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let strategy = (
        prop::collection::vec((respelled_payload(), spelling()), 1..8),
        rule(),
        prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..3),
    );
    let result = runner.run(&strategy, |(events, rule, damage)| {
        let lines = respelled_chain(&events, rule);
        let sealed = join(&lines);
        let report = verify_all_ways(sealed.as_bytes(), true);
        let found: Vec<(u64, Code)> = report
            .findings
            .iter()
            .map(|f| (f.sequence, f.code))
            .collect();
        prop_assert_eq!(
            found,
            rule.finding(events.len()).into_iter().collect::<Vec<_>>(),
            "{:?}",
            rule
        );
        let damaged = damage_lines(&lines, &damage);
        verify_all_ways(&damaged, false);
        verify_all_ways(&damaged, true);
        Ok(())
    });
    if let Err(e) = result {
        panic!("seed {seed}: {e}");
    }
}
