//! The cargo-fuzz targets `atlas_manifest` and `atlas_archive` as property tests on the stable
//! toolchain (see `fuzz/README.md`), 10,000 cases each. (`cra-carp`'s `fuzz_props` runs the
//! manifest cases again with the atlas compiled for CARP and a request resolved.)
//!
//! The oracles are the fuzzer's own harnesses (`fuzz/src/atlas.rs`, `fuzz/src/archive.rs`,
//! included below). Manifest inputs are the minimal fixture's files with fields replaced by
//! values of other types, removed, or added, with files at new paths, and sometimes damaged
//! byte-wise. Archive inputs are tar streams built entry by entry (regular files, directories,
//! links, devices, long names, pax headers; names with `..`, absolute, hidden, non-ASCII or
//! duplicated; declared sizes that lie), gzipped or handed over as tar bytes, and sometimes
//! damaged byte-wise, under limits small enough to reach. Failures persist in
//! `proptest-regressions/fuzz_props.txt`.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Map, Value, json};

#[path = "../../../../fuzz/src/atlas.rs"]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's public harnesses, shared with this test"
)]
mod manifest_oracle;

#[path = "../../../../fuzz/src/archive.rs"]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's public harnesses, shared with this test"
)]
mod archive_oracle;

fn junk() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "note.*",
            "**",
            "*",
            "a.b.c",
            "com.example.minimal",
            "1.2.0",
            "low",
            "critical",
            "allow",
            "deny",
            "require_approval",
            "rate_limit",
            "budget",
            "context/overview.md",
            "../outside.md",
            "[a-",
            "x-team",
        ])
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A field-level change.
#[derive(Debug, Clone)]
enum Change {
    Replace(Vec<usize>, Value),
    Remove(Vec<usize>),
    Add(String, Value),
}

fn change() -> impl Strategy<Value = Change> {
    let path = prop::collection::vec(any::<usize>(), 1..4);
    prop_oneof![
        (path.clone(), junk()).prop_map(|(p, v)| Change::Replace(p, v)),
        path.prop_map(Change::Remove),
        (
            prop::sample::select(vec![
                "priority",
                "conditions",
                "parameters",
                "risk_tier",
                "x-extra",
                "unknown",
                "dependencies",
                "time_window",
                "agents",
                "actions",
            ]),
            junk()
        )
            .prop_map(|(k, v)| Change::Add(k.to_owned(), v)),
    ]
}

/// The member (of an object, or an element of an array) that `path` picks.
fn pick<'a>(v: &'a mut Value, path: &[usize]) -> Option<(&'a mut Value, Option<String>)> {
    enum Step {
        IntoKey(String),
        Key(String),
        IntoIndex(usize),
        Index(usize),
    }
    let deeper = |c: &Value| path.len() > 1 && (c.is_object() || c.is_array());
    let step = match &*v {
        Value::Object(o) if !o.is_empty() => {
            let (key, child) = o.iter().nth(path[0] % o.len())?;
            if deeper(child) {
                Step::IntoKey(key.clone())
            } else {
                Step::Key(key.clone())
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = path[0] % a.len();
            if path.len() > 1 {
                Step::IntoIndex(i)
            } else {
                Step::Index(i)
            }
        }
        _ => return None,
    };
    match step {
        Step::IntoKey(k) => pick(v.get_mut(&k)?, &path[1..]),
        Step::Key(k) => Some((v, Some(k))),
        Step::IntoIndex(i) => pick(v.get_mut(i)?, &path[1..]),
        Step::Index(i) => Some((v.get_mut(i)?, None)),
    }
}

fn apply(mut v: Value, changes: &[Change]) -> Value {
    for c in changes {
        match c {
            Change::Replace(path, new) => match pick(&mut v, path) {
                Some((Value::Object(o), Some(k))) => {
                    o.insert(k, new.clone());
                }
                Some((slot, None)) => *slot = new.clone(),
                _ => {}
            },
            Change::Remove(path) => {
                if let Some((Value::Object(o), Some(k))) = pick(&mut v, path) {
                    o.remove(&k);
                }
            }
            Change::Add(k, new) => match &mut v {
                Value::Object(o) => {
                    o.insert(k.clone(), new.clone());
                }
                Value::Array(a) => {
                    if let Some(Value::Object(o)) = a.first_mut() {
                        o.insert(k.clone(), new.clone());
                    }
                }
                _ => {}
            },
        }
    }
    v
}

fn minimal(rel: &str) -> Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minimal");
    let text = std::fs::read_to_string(dir.join(rel)).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// The manifest harness's input form: a selector byte (which file), then its new bytes.
fn manifest_input() -> impl Strategy<Value = Vec<u8>> {
    let bases: Vec<Value> = ["atlas.json", "policies/deny.json", "actions/notes.json"]
        .iter()
        .map(|r| minimal(r))
        .collect();
    let edited = (
        0..3usize,
        prop_oneof![1 => Just(Vec::new()), 4 => prop::collection::vec(change(), 1..4)],
    )
        .prop_map(move |(which, changes)| {
            let mut out = vec![which as u8];
            out.extend(
                apply(bases[which].clone(), &changes)
                    .to_string()
                    .into_bytes(),
            );
            out
        });
    let extra = (
        prop::sample::select(vec![
            "policies/extra.json",
            "actions/extra.json",
            "context/extra.md",
            "adapters/mcp.json",
            "tests/case.trace.jsonl",
            "policies/nested/deep.json",
        ]),
        prop_oneof![
            junk().prop_map(|v| v.to_string()),
            Just(json!([{"policy_id": "p2", "type": "deny", "actions": ["note.get"]}]).to_string()),
            Just(json!([{"action_id": "note.add", "name": "Add"}]).to_string()),
            ".{0,40}",
        ],
    )
        .prop_map(|(path, body)| {
            let mut out = vec![4u8];
            out.extend_from_slice(path.as_bytes());
            out.push(b'\n');
            out.extend(body.into_bytes());
            out
        });
    let damaged = (
        prop_oneof![Just(0u8), Just(1u8), Just(2u8)],
        prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    )
        .prop_map(|(which, edits)| {
            let rel = ["atlas.json", "policies/deny.json", "actions/notes.json"][which as usize];
            let mut bytes = minimal(rel).to_string().into_bytes();
            for (p, b) in edits {
                let at = p % (bytes.len() + 1);
                bytes.insert(at, b);
            }
            let mut out = vec![which];
            out.extend(bytes);
            out
        });
    prop_oneof![6 => edited, 2 => extra, 1 => damaged]
}

/// One tar entry, described.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    kind: u8,
    data: Vec<u8>,
    size_delta: i64,
}

fn entry() -> impl Strategy<Value = Entry> {
    let name = prop_oneof![
        6 => prop::sample::select(vec![
            "atlas.json", "context/a.md", "context/b.md", "policies/p.json", "./atlas.json",
            "context/", ".hidden", ".git/config", "../x", "/abs", "a//b", "a/./b", "caf\u{e9}",
            "a\\b", "context/../x", "x\u{1}",
        ]).prop_map(str::to_owned),
        1 => "[a-z./]{1,12}",
        1 => "[a-z]{90,140}",
    ];
    let kind = prop_oneof![
        8 => Just(b'0'),
        1 => prop::sample::select(b"1234567LKSxg".to_vec()),
    ];
    let data = prop_oneof![
        4 => "[ -~]{0,64}".prop_map(String::into_bytes),
        1 => (0usize..6000).prop_map(|n| vec![b'a'; n]),
        1 => Just(br#"{"atlas_version":"1.0","atlas_id":"com.example.a","version":"1.0.0","name":"A"}"#.to_vec()),
        1 => Just(b"19 path=../evil.md\n".to_vec()),
    ];
    (
        name,
        kind,
        data,
        prop_oneof![8 => Just(0i64), 1 => -600i64..600],
    )
        .prop_map(|(name, kind, data, size_delta)| Entry {
            name,
            kind,
            data,
            size_delta,
        })
}

fn tar_bytes(entries: &[Entry], trailer: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let mut h = tar::Header::new_gnu();
        {
            let old = h.as_old_mut();
            let n = e.name.len().min(old.name.len());
            old.name[..n].copy_from_slice(&e.name.as_bytes()[..n]);
            old.linkname[..10].copy_from_slice(b"atlas.json");
        }
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::new(e.kind));
        let size = (e.data.len() as i64 + e.size_delta).max(0) as u64;
        h.set_size(size);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&e.data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    if trailer {
        out.extend_from_slice(&[0u8; 1024]);
    }
    out
}

/// The archive harness's input form: a selector byte (0: gzip bytes, 1: tar bytes), then bytes.
fn archive_input() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(entry(), 0..8),
        any::<bool>(),
        any::<bool>(),
        prop::option::weighted(
            0.2,
            prop::collection::vec((any::<usize>(), any::<u8>()), 1..3),
        ),
    )
        .prop_map(|(entries, gzip_here, trailer, damage)| {
            let mut bytes = tar_bytes(&entries, trailer);
            if gzip_here {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                std::io::Write::write_all(&mut gz, &bytes).unwrap_or_default();
                bytes = gz.finish().unwrap_or_default();
            }
            for (p, b) in damage.into_iter().flatten() {
                if !bytes.is_empty() {
                    let n = bytes.len();
                    bytes[p % n] = b;
                }
            }
            let mut out = vec![if gzip_here { 0 } else { 1 }];
            out.extend(bytes);
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
    fn atlas_manifest(input in manifest_input()) {
        manifest_oracle::atlas_manifest_with(&input, |_| {});
    }

    #[test]
    fn atlas_archive(input in archive_input()) {
        archive_oracle::atlas_archive(&input);
    }
}

#[test]
fn the_manifest_change_machinery_reaches_nested_members() {
    let v = json!({"a": {"b": [1, {"c": 2}]}});
    let changed = apply(v, &[Change::Replace(vec![0, 0, 1, 0], json!("x"))]);
    assert_eq!(changed, json!({"a": {"b": [1, {"c": "x"}]}}));
    let m: Map<String, Value> = Map::new();
    assert!(apply(Value::Object(m), &[Change::Remove(vec![3])]).is_object());
}
