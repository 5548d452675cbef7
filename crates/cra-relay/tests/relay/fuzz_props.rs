//! The cargo-fuzz targets `relay_package`, `relay_fact` and `relay_import` as property tests on
//! the stable toolchain (see `fuzz/README.md`), 10,000 cases each.
//!
//! The oracles are the fuzzer's own harnesses (`fuzz/src/relay.rs`, included below): a valid
//! package hashes the same with an added null member, its wire form verifies, a repeated deposit
//! is an idempotent replay and pulls back verified; asserting, re-asserting and invalidating a
//! fact never leaves an overlap or a hole in its history; whatever an import accepts renders back
//! to the same snapshot and the same bytes. Inputs: the Relay hash-vector packages and fact
//! bodies built field by field, with fields replaced by values of other types (numbers spelled
//! `1.0`, `1e21`, `-0`, big integers; unicode; nulls), removed or added; and exports of a store
//! filled with such packages and facts, their records then edited, lines dropped or repeated,
//! bytes inserted, with and without the manifest's hashes fixed up. Failures persist in
//! `proptest-regressions/fuzz_props.txt`.

use std::sync::Arc;

use cra_relay::export::render;
use cra_relay::session::SeededCallsigns;
use cra_relay::store::RelayStore;
use cra_relay::store::memory::MemoryStore;
use cra_relay::{Actor, ActorType, Relay};
use cra_wire::{FixedClock, SequentialIds};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Value, json};

#[path = "../../../../fuzz/src/relay.rs"]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's public harnesses, shared with this test"
)]
mod oracles;

fn junk() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "1.0",
            "1e21",
            "-0",
            "1e400",
            "0.5",
            "12345678901234567890123",
            "1E-7",
        ])
        .prop_map(|t| serde_json::from_str(t).unwrap_or(Value::Null)),
        ".{0,16}".prop_map(Value::String),
        prop::sample::select(vec![
            "2026-03-01T00:00:00Z",
            "2026-03-02T10:00:00+02:00",
            "2026-03-02T10:00:00.123456789Z",
            "2026-02-30T00:00:00Z",
            "complete",
            "draft",
            "awaiting_review",
            "x-custom",
            "human",
            "agent",
            "script",
            "",
        ])
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}|x-[a-z]{1,4}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A field-level change of an object: set (or add) a member, or remove one.
#[derive(Debug, Clone)]
enum Change {
    Set(String, Value),
    Remove(usize),
}

fn change(fields: &'static [&'static str]) -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (prop::sample::select(fields), junk()).prop_map(|(k, v)| Change::Set(k.to_owned(), v)),
        1 => ("x-[a-z]{1,5}|[a-z]{1,8}", junk()).prop_map(|(k, v)| Change::Set(k, v)),
        1 => any::<usize>().prop_map(Change::Remove),
    ]
}

fn apply(mut v: Value, changes: &[Change]) -> Value {
    if let Value::Object(o) = &mut v {
        for c in changes {
            match c {
                Change::Set(k, new) => {
                    o.insert(k.clone(), new.clone());
                }
                Change::Remove(i) if !o.is_empty() => {
                    let key = o.keys().nth(i % o.len()).cloned().unwrap_or_default();
                    o.remove(&key);
                }
                Change::Remove(_) => {}
            }
        }
    }
    v
}

const PACKAGE_FIELDS: &[&str] = &[
    "package_id",
    "project_id",
    "relay_version",
    "title",
    "status",
    "package_type",
    "review_type",
    "created_at",
    "created_by",
    "tags",
    "decisions_made",
    "open_questions",
    "handoff_note",
    "content_md",
    "topic",
    "significance",
    "description",
    "content_hash",
];

fn vector_packages() -> Vec<Value> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hash-vectors.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_default())
        .unwrap_or(Value::Null);
    v["vectors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| {
            let mut p = x["package"].clone();
            p["project_id"] = json!(oracles::PROJECT);
            p
        })
        .collect()
}

/// A package: a hash-vector package, sometimes changed field-wise.
fn package() -> impl Strategy<Value = Value> {
    let bases = vector_packages();
    let n = bases.len().max(1);
    (
        0..n,
        prop_oneof![1 => Just(Vec::new()), 2 => prop::collection::vec(change(PACKAGE_FIELDS), 1..4)],
        "pkg_[0-9a-f]{8}",
    )
        .prop_map(move |(i, changes, id)| {
            let mut p = bases.get(i).cloned().unwrap_or(Value::Null);
            p["package_id"] = json!(id);
            apply(p, &changes)
        })
}

fn package_text() -> impl Strategy<Value = Vec<u8>> {
    (
        package(),
        prop::option::weighted(0.05, (any::<usize>(), any::<u8>())),
    )
        .prop_map(|(p, byte)| {
            let mut text = p.to_string().into_bytes();
            if let Some((at, b)) = byte {
                let i = at % (text.len() + 1);
                text.insert(i, b);
            }
            text
        })
}

const FACT_FIELDS: &[&str] = &[
    "subject",
    "predicate",
    "value",
    "valid_from",
    "valid_to",
    "confidence",
    "source_package_id",
    "asserted_by",
    "tags",
    "project_id",
];

/// A fact body built field by field, sometimes changed.
fn fact() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["service:api", "s", "é😀", "svc/a"]),
        prop::sample::select(vec!["owner", "p", "deploys_to"]),
        prop_oneof![".{0,10}".prop_map(Value::String), Just(json!("team-a"))],
        prop::option::of(prop::sample::select(vec![
            "2026-03-01T00:00:00Z",
            "2026-03-02T10:00:00Z",
            "2026-03-03T00:00:00+05:30",
            "2026-04-01T00:00:00.5Z",
        ])),
        prop::option::of(prop_oneof![
            (0.0f64..=1.0).prop_map(|f| json!(f)),
            Just(json!(1)),
            Just(json!(0)),
        ]),
        prop_oneof![2 => Just(Vec::new()), 1 => prop::collection::vec(change(FACT_FIELDS), 1..3)],
    )
        .prop_map(|(s, p, v, from, conf, changes)| {
            let mut f = json!({"subject": s, "predicate": p, "value": v});
            if let Some(t) = from {
                f["valid_from"] = json!(t);
            }
            if let Some(c) = conf {
                f["confidence"] = c;
            }
            apply(f, &changes)
        })
}

/// An export of a store holding a few packages and facts, damaged, in the import harness's form
/// (a selector byte: odd means fix the manifest's hashes; then the files joined).
fn import_input() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(package(), 0..3),
        prop::collection::vec(fact(), 0..4),
        any::<u8>(),
        prop::collection::vec(
            (
                0..6usize,
                any::<usize>(),
                prop_oneof![junk(), Just(Value::Null)],
            ),
            0..3,
        ),
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..2),
    )
        .prop_map(|(packages, facts, selector, edits, bytes)| {
            let clock = Arc::new(
                FixedClock::parse("2026-03-02T10:00:00Z").unwrap_or_else(|e| panic!("{e}")),
            );
            let store: Arc<dyn RelayStore> = Arc::new(MemoryStore::new());
            let r = Relay::new(
                store.clone(),
                clock,
                Arc::new(SequentialIds::new(1_772_445_600_000, 3)),
                Arc::new(SeededCallsigns::new(1)),
            );
            let _ = r.create_project(oracles::PROJECT, "Fuzz project");
            for p in &packages {
                let by = p["created_by"]["id"].as_str().unwrap_or("jordan");
                let _ = r.deposit(oracles::PROJECT, &Actor::new(by, ActorType::Human), p);
            }
            let agent = Actor::new("fuzz-agent", ActorType::Agent);
            for f in &facts {
                let _ = r.assert_fact(oracles::PROJECT, &agent, f);
            }
            let mut files = store
                .snapshot()
                .ok()
                .and_then(|s| render(&s).ok())
                .unwrap_or_default();
            // Record edits: file, line, then a member of that record set to a new value.
            for (file, line, value) in edits {
                let count = files.len().max(1);
                let Some((_, body)) = files.get_mut(file % count) else {
                    continue;
                };
                let text = String::from_utf8_lossy(body).into_owned();
                let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
                if lines.is_empty() {
                    continue;
                }
                let n = lines.len();
                let target = &mut lines[line % n];
                if let Ok(Value::Object(mut o)) = serde_json::from_str::<Value>(target) {
                    if o.is_empty() {
                        continue;
                    }
                    let key = o.keys().nth(line % o.len()).cloned().unwrap_or_default();
                    o.insert(key, value);
                    *target = Value::Object(o).to_string();
                } else {
                    lines.remove(line % n);
                }
                *body = (lines.join("\n") + "\n").into_bytes();
            }
            let mut joined = oracles::join_files(&files);
            for (at, b) in bytes {
                let i = at % (joined.len() + 1);
                joined.insert(i, b);
            }
            let mut out = vec![selector];
            out.extend(joined);
            out
        })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 10_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/fuzz_props.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn relay_package(input in package_text()) {
        oracles::relay_package(&input);
    }

    #[test]
    fn relay_fact(input in fact()) {
        oracles::relay_fact(input.to_string().as_bytes());
    }

    #[test]
    fn relay_import(input in import_input()) {
        oracles::relay_import(&input);
    }
}
