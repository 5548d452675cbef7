//! The cargo-fuzz targets `carp_request`, `carp_execute` and `atlas_manifest` as property tests
//! on the stable toolchain (see `fuzz/README.md`), 10,000 cases each.
//!
//! The oracles are the fuzzer's own harnesses (`fuzz/src/carp.rs` and `fuzz/src/atlas.rs`,
//! included below): no panic, every refusal a token with a message, accepted requests
//! round-trip, and every resolution and execute response the real service (in-memory store,
//! the repository's example atlases) produces matches the published schema; atlases that load
//! compile or are refused with an error, and resolve. Inputs are requests built field by field
//! from valid and invalid choices (placeholders for the open session and stored resolution, so
//! cases get past the session checks), with a share of fields then replaced by values of the
//! wrong type or removed, unknown members added, and the text sometimes damaged byte-wise.
//! Failures persist in `proptest-regressions/fuzz_props.txt`.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Map, Value, json};

#[path = "../../../../fuzz/src/carp.rs"]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's public harnesses, shared with this test"
)]
mod oracles;

#[path = "../../../../fuzz/src/atlas.rs"]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's public harnesses, shared with this test"
)]
mod atlas_oracles;

fn junk() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        Just(json!("x".repeat(300))),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn one_of(items: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop::sample::select(items).prop_map(|s| json!(s))
}

fn uuid_like() -> impl Strategy<Value = Value> {
    prop_oneof![
        30 => "0190a000-0000-7000-8000-0000000[0-9a-f]{5}".prop_map(Value::String),
        1 => "0190A000-0000-7000-8000-0000000[0-9A-F]{5}".prop_map(Value::String),
        1 => ".{0,40}".prop_map(Value::String),
    ]
}

const CAPS: &[&str] = &[
    "repo-read",
    "contribute",
    "maintain",
    "payments.read",
    "tickets",
    "unknown-cap",
];
const ATLASES: &[&str] = &[
    "dev.cra.github-ops",
    "com.example.payments",
    "com.example.customer-support",
    "no.such.atlas",
];
const ACTIONS: &[&str] = &[
    "repo.get",
    "pr.list",
    "pr.get",
    "branch.create",
    "pr.merge",
    "pr.review",
    "branch.forcepush",
    "ci.run.rerun",
    "no.such.action",
];

fn task() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            one_of(&[
                "review and merge pull request 42",
                "fix the CI workflow",
                "refund an order"
            ]),
            ".{0,30}".prop_map(Value::String),
        ],
        prop::option::of(one_of(&["low", "medium", "high", "critical", "extreme"])),
        prop::option::of(prop::collection::vec(
            one_of(&["ci", "merge", "refund", "é😀"]),
            0..3,
        )),
        prop::option::of(prop::collection::vec(prop::sample::select(CAPS), 0..4)),
    )
        .prop_map(|(goal, tier, hints, caps)| {
            let mut t = json!({ "goal": goal });
            if let Some(r) = tier {
                t["risk_tier"] = r;
            }
            if let Some(h) = hints {
                t["context_hints"] = json!(h);
            }
            if let Some(c) = caps {
                t["required_capabilities"] = json!(c);
            }
            t
        })
}

fn parameters() -> impl Strategy<Value = Value> {
    prop_oneof![
        // Valid for the most common actions: these reach counters and the executor.
        8 => Just(json!({"owner": "octo", "repo": "hello", "number": 42})),
        1 => Just(json!({"owner": "octo", "repo": "hello"})),
        1 => Just(json!({"owner": "octo", "repo": "hello", "number": 42})),
        1 => Just(json!({"owner": "octo", "repo": "hello", "number": 42, "method": "squash"})),
        1 => Just(json!({"owner": "octo", "repo": "hello", "branch": "agent/fix-ci"})),
        1 => Just(json!({"owner": "octo", "repo": "hello", "number": 7, "event": "APPROVE", "body": "ok"})),
        1 => Just(json!({"owner": "octo", "repo": "hello", "run_id": 9})),
        1 => Just(json!({})),
        1 => (".{0,20}", ".{0,20}", any::<i64>())
            .prop_map(|(o, r, n)| json!({"owner": o, "repo": r, "number": n})),
        1 => junk(),
    ]
}

fn execution() -> impl Strategy<Value = Value> {
    (
        prop_oneof![10 => Just(json!("$RESOLUTION")), 1 => uuid_like()],
        prop::sample::select(ACTIONS),
        parameters(),
        prop::option::of(prop_oneof![
            one_of(&["k1", "k2"]),
            ".{0,10}".prop_map(Value::String)
        ]),
    )
        .prop_map(|(rid, action, params, key)| {
            let mut e = json!({"resolution_id": rid, "action_id": action, "parameters": params});
            if let Some(k) = key {
                e["idempotency_key"] = k;
            }
            e
        })
}

/// A request built field by field, each field valid most of the time (`operation` as given, or
/// any).
fn request(operation: Option<&'static str>) -> impl Strategy<Value = Value> {
    let op = match operation {
        Some(o) => Just(o).boxed(),
        None => prop_oneof![
            6 => Just("resolve"),
            2 => Just("validate"),
            2 => Just("execute"),
            1 => Just("explain"),
        ]
        .boxed(),
    };
    (
        prop_oneof![30 => Just(json!("1.0")), 1 => one_of(&["1.1", "", "1"]), 1 => Just(json!(1.0))],
        uuid_like(),
        prop_oneof![
            30 => Just(json!("$NOW")),
            1 => one_of(&["2026-03-02T10:04:59Z", "2026-03-02T09:00:00Z", "2026-03-02T12:00:00+02:00",
                           "2026-13-02T10:00:00Z", "2026-03-02 10:00:00", "now"]),
        ],
        op,
        prop_oneof![
            20 => Just(json!({"agent_id": "$AGENT", "session_id": "$SESSION"})),
            1 => Just(json!({"agent_id": "other-bot", "session_id": "$SESSION"})),
            1 => uuid_like().prop_map(|s| json!({"agent_id": "$AGENT", "session_id": s})),
        ],
        prop::option::weighted(0.95, task()),
        prop::option::of(prop::collection::vec(
            prop_oneof![10 => prop::sample::select(&ATLASES[..3]), 1 => prop::sample::select(ATLASES)],
            0..3,
        )),
        prop::option::of(prop::collection::btree_map("[a-z]{1,5}", junk(), 0..3)),
        prop::option::weighted(0.95, execution()),
    )
        .prop_map(
            |(version, rid, ts, op, requester, task, atlases, context, exec)| {
                let mut r = json!({
                    "carp_version": version, "request_id": rid, "timestamp": ts,
                    "operation": op, "requester": requester,
                });
                if let Some(t) = task.filter(|_| op != "execute") {
                    r["task"] = t;
                }
                if let Some(a) = atlases {
                    r["atlas_ids"] = json!(a);
                }
                if let Some(c) = context {
                    r["context"] = Value::Object(c.into_iter().collect());
                }
                if let Some(e) = exec.filter(|_| op == "execute") {
                    r["execution"] = e;
                }
                r
            },
        )
}

/// A field-level change to a request.
#[derive(Debug, Clone)]
enum Change {
    Replace(Vec<usize>, Value),
    Remove(Vec<usize>),
    Unknown(String, Value),
}

fn change() -> impl Strategy<Value = Change> {
    let path = prop::collection::vec(any::<usize>(), 1..3);
    prop_oneof![
        (path.clone(), junk()).prop_map(|(p, v)| Change::Replace(p, v)),
        path.prop_map(Change::Remove),
        ("[a-z_]{1,8}|x-[a-z]{1,4}", junk()).prop_map(|(k, v)| Change::Unknown(k, v)),
    ]
}

/// The object member picked by `path` (indexes taken modulo the members), if any.
fn pick<'a>(v: &'a mut Value, path: &[usize]) -> Option<(&'a mut Map<String, Value>, String)> {
    let obj = v.as_object_mut()?;
    if obj.is_empty() {
        return None;
    }
    let key = obj.keys().nth(path[0] % obj.len())?.clone();
    if path.len() > 1 && obj.get(&key).is_some_and(Value::is_object) {
        let child = obj.get_mut(&key)?;
        return pick(child, &path[1..]);
    }
    Some((obj, key))
}

fn apply(mut v: Value, changes: &[Change]) -> Value {
    for c in changes {
        match c {
            Change::Replace(path, new) => {
                if let Some((obj, key)) = pick(&mut v, path) {
                    obj.insert(key, new.clone());
                }
            }
            Change::Remove(path) => {
                if let Some((obj, key)) = pick(&mut v, path) {
                    obj.remove(&key);
                }
            }
            Change::Unknown(k, new) => {
                if let Some(o) = v.as_object_mut() {
                    o.insert(k.clone(), new.clone());
                }
            }
        }
    }
    v
}

/// Request text: built, then (sometimes) changed field-wise, then (rarely) damaged byte-wise.
fn request_text(operation: Option<&'static str>) -> impl Strategy<Value = Vec<u8>> {
    (
        request(operation),
        prop_oneof![2 => Just(Vec::new()), 1 => prop::collection::vec(change(), 1..3)],
        prop::option::weighted(
            0.05,
            (
                any::<usize>(),
                prop::sample::select(b"{}[]\",:\\ \x00\xff".to_vec()),
            ),
        ),
    )
        .prop_map(|(v, changes, byte)| {
            let mut text = apply(v, &changes).to_string().into_bytes();
            if let Some((p, b)) = byte {
                let at = p % (text.len() + 1);
                text.insert(at, b);
            }
            text
        })
}

/// One file of the minimal atlas as the manifest harness takes it: a selector byte, then JSON
/// built from the fixture's own values with fields replaced, removed or added.
fn atlas_input() -> impl Strategy<Value = Vec<u8>> {
    let base = |i: usize| -> Value {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../cra-atlas/tests/fixtures/minimal");
        let rel = ["atlas.json", "policies/deny.json", "actions/notes.json"][i];
        let text = std::fs::read_to_string(dir.join(rel)).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    let bases: Vec<Value> = (0..3).map(base).collect();
    (
        0..3usize,
        prop_oneof![1 => Just(Vec::new()), 3 => prop::collection::vec(change(), 1..4)],
        any::<usize>(),
    )
        .prop_map(move |(which, changes, element)| {
            let mut v = bases[which].clone();
            // Changes apply to the manifest itself or to one element of a file's array.
            match &mut v {
                Value::Array(items) if !items.is_empty() => {
                    let n = items.len();
                    let item = std::mem::take(&mut items[element % n]);
                    items[element % n] = apply(item, &changes);
                }
                _ => v = apply(v, &changes),
            }
            let mut out = vec![which as u8];
            out.extend(v.to_string().into_bytes());
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
    fn carp_request(input in request_text(None)) {
        oracles::carp_request(&input);
    }

    #[test]
    fn carp_execute(input in request_text(Some("execute"))) {
        oracles::carp_execute(&input);
    }

    #[test]
    fn atlas_manifest(input in atlas_input()) {
        atlas_oracles::atlas_manifest_with(&input, oracles::compile_and_resolve);
    }
}
