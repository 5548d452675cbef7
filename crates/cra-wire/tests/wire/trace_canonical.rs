//! Differential test of the TRACE canonical profile against Python's `json.dumps(json.loads(x),
//! sort_keys=True, separators=(',', ':'))`.
//!
//! The cases are regenerated on every run by `tools/gen_canonical_cases.py` from a fixed seed
//! (Python computes the expected bytes); our three writers (from a parsed `Value`, straight from
//! the text, and from any `Serialize` value) must reproduce every case byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use cra_wire::canonical::trace::{trace_canonical, trace_canonical_from_str};
use cra_wire::canonical::{CanonicalText, to_trace_canonical};
use cra_wire::json::parse_strict;
use serde::Serialize;
use serde_json::json;

const SEED: u64 = 20261122;
const PER_CATEGORY: usize = 1200;

fn generator() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/gen_canonical_cases.py")
}

#[test]
fn canonical_json_matches_python_byte_for_byte() {
    let output = match Command::new("python3")
        .arg(generator())
        .args([
            "--seed",
            &SEED.to_string(),
            "--per-category",
            &PER_CATEGORY.to_string(),
        ])
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!(
            "this test needs python3 on PATH to regenerate its cases (tools/gen_canonical_cases.py): {e}"
        ),
    };
    assert!(
        output.status.success(),
        "gen_canonical_cases.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let mut per_category: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let category = case["category"].as_str().unwrap();
        let input = case["input"].as_str().unwrap();
        let expected = case["expected"].as_str().unwrap();
        *per_category.entry(category.to_owned()).or_default() += 1;
        let (tree, serialized, spliced) = match parse_strict(input.as_bytes()) {
            Ok(v) => (
                trace_canonical(&v),
                to_trace_canonical(&v).unwrap_or_else(|e| format!("<refused: {e}>")),
                // The value's precomputed text, copied into an object between unsorted members.
                to_trace_canonical(&Wrapped::new(v))
                    .map(|s| unwrap_member(&s))
                    .unwrap_or_else(|e| format!("<refused: {e}>")),
            ),
            Err(e) => (
                format!("<refused: {e}>"),
                format!("<refused: {e}>"),
                format!("<refused: {e}>"),
            ),
        };
        let fast = match trace_canonical_from_str(input) {
            Ok(s) => s,
            Err(e) => format!("<refused: {e}>"),
        };
        if tree != expected || fast != expected || serialized != tree || spliced != tree {
            failures.push(format!(
                "case {i} [{category}]\n  input:    {input:?}\n  python:   {expected}\n  tree:     {tree}\n  streaming:{fast}\n  serialized:{serialized}\n  spliced:  {spliced}"
            ));
        }
    }
    let total: usize = per_category.values().sum();
    println!("seed {SEED}: {total} cases {per_category:?}");
    assert!(total >= 10_000, "only {total} cases generated");
    for name in [
        "astral_unicode",
        "bmp_unicode",
        "control_chars",
        "quotes_backslashes_in_keys",
        "floats",
        "big_integers",
        "deep_nesting",
        "empty_containers",
    ] {
        assert!(
            per_category.get(name).copied().unwrap_or(0) > 0,
            "no {name} cases"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases differ from Python (seed {SEED}); first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A value carrying its precomputed canonical text, as the runtime's shared atlas texts do.
struct Precomputed {
    value: serde_json::Value,
    text: CanonicalText,
}

impl Precomputed {
    fn new(value: serde_json::Value) -> Self {
        let text = CanonicalText::of(&value).unwrap();
        Self { value, text }
    }
}

impl Serialize for Precomputed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize_value(&self.value, s)
    }
}

/// `Precomputed` as a member between others that arrive out of key order, so the writer reorders
/// the object around the copied text.
#[derive(Serialize)]
struct Wrapped {
    zz: u8,
    #[serde(rename = "m")]
    value: Precomputed,
    aa: [u8; 0],
}

impl Wrapped {
    fn new(value: serde_json::Value) -> Self {
        Self {
            zz: 1,
            value: Precomputed::new(value),
            aa: [],
        }
    }
}

/// The `m` member's text out of `Wrapped`'s canonical form `{"aa":[],"m":<text>,"zz":1}`.
fn unwrap_member(text: &str) -> String {
    text.strip_prefix(r#"{"aa":[],"m":"#)
        .and_then(|t| t.strip_suffix(r#","zz":1}"#))
        .map_or_else(|| format!("<not wrapped: {text}>"), str::to_owned)
}

/// The canonical writer copies a precomputed text; every other serializer (serde_json's text and
/// `to_value`, before and after a canonical write, as a map key) sees the value.
#[test]
fn a_precomputed_text_is_copied_by_the_writer_and_invisible_elsewhere() {
    let value = json!({"z": "caf\u{e9}\n", "a": [1.0, {"y": null, "b": true}]});
    let wrapped = Wrapped::new(value.clone());
    let plain = json!({"zz": 1, "m": value, "aa": []});
    // The carrier's text is the value's canonical text, and the writer copies it.
    assert_eq!(
        wrapped.value.text.as_str(),
        r#"{"a":[1.0,{"b":true,"y":null}],"z":"caf\u00e9\n"}"#
    );
    assert_eq!(
        to_trace_canonical(&wrapped).unwrap(),
        trace_canonical(&plain)
    );
    for _ in 0..2 {
        assert_eq!(serde_json::to_value(&wrapped).unwrap(), plain);
        let text = serde_json::to_string(&wrapped).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            plain
        );
        to_trace_canonical(&wrapped).unwrap();
    }
    // The writer copies the text without serialising the value again; other serializers do.
    struct Counted(std::cell::Cell<u32>);
    impl Serialize for Counted {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.set(self.0.get() + 1);
            s.serialize_str("counted")
        }
    }
    let counted = Counted(std::cell::Cell::new(0));
    let text = CanonicalText::of(&counted).unwrap();
    struct Carrier<'a>(&'a Counted, &'a CanonicalText);
    impl Serialize for Carrier<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.1.serialize_value(self.0, s)
        }
    }
    let carrier = [Carrier(&counted, &text), Carrier(&counted, &text)];
    assert_eq!(counted.0.get(), 1);
    assert_eq!(
        to_trace_canonical(&carrier).unwrap(),
        r#"["counted","counted"]"#
    );
    assert_eq!(counted.0.get(), 1, "the writer serialised the value again");
    assert_eq!(
        serde_json::to_string(&carrier).unwrap(),
        r#"["counted","counted"]"#
    );
    assert_eq!(counted.0.get(), 3);
    // A copied text inside arrays and maps, several in one payload.
    let many: Vec<_> = (0..3)
        .map(|_| BTreeMap::from([("k", Precomputed::new(json!("\u{1f600}")))]))
        .collect();
    assert_eq!(
        to_trace_canonical(&many).unwrap(),
        r#"[{"k":"\ud83d\ude00"},{"k":"\ud83d\ude00"},{"k":"\ud83d\ude00"}]"#
    );
    // A precomputed string as a map key is the key's plain text.
    struct Key(String, CanonicalText);
    impl PartialEq for Key {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Key {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.cmp(&other.0)
        }
    }
    impl Serialize for Key {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.1.serialize_value(&self.0, s)
        }
    }
    let key = |k: &str| Key(k.to_owned(), CanonicalText::of(k).unwrap());
    let map = BTreeMap::from([(key("b\u{e9}"), 1), (key("a"), 2)]);
    assert_eq!(to_trace_canonical(&map).unwrap(), r#"{"a":2,"b\u00e9":1}"#);
    assert_eq!(
        serde_json::to_string(&map).unwrap(),
        "{\"a\":2,\"b\u{e9}\":1}"
    );
}

/// A raw JSON text (serde_json's `RawValue`) is refused rather than written as the struct serde
/// shows the writer, so a caller takes the tree path, where `to_value` parses it.
#[test]
fn a_raw_json_text_is_refused_not_miswritten() {
    let raw: Box<serde_json::value::RawValue> =
        serde_json::from_str(r#"{"b":1,"a":[true]}"#).unwrap();
    let err = to_trace_canonical(&raw).unwrap_err();
    assert!(err.to_string().contains("raw JSON"), "{err}");
    let tree = serde_json::to_value(&raw).unwrap();
    assert_eq!(trace_canonical(&tree), r#"{"a":[true],"b":1}"#);
}

#[test]
fn every_control_character_and_del_is_escaped_like_python() {
    // Python: json.dumps(chr(c)) for every C0 control and DEL.
    for c in (0u32..0x20).chain([0x7f]) {
        let s = char::from_u32(c).unwrap().to_string();
        let want = match c {
            0x08 => "\"\\b\"".to_owned(),
            0x09 => "\"\\t\"".to_owned(),
            0x0a => "\"\\n\"".to_owned(),
            0x0c => "\"\\f\"".to_owned(),
            0x0d => "\"\\r\"".to_owned(),
            _ => format!("\"\\u{c:04x}\""),
        };
        assert_eq!(
            trace_canonical(&serde_json::Value::String(s)),
            want,
            "U+{c:04X}"
        );
    }
}

/// Typed data of every serde shape (the derive's structs, enums of each variant kind, options,
/// flattened extras, maps with number keys, floats of both widths, 128-bit integers) writes the
/// bytes its `serde_json::Value` writes.
#[test]
fn the_serializer_writes_what_the_value_writes() {
    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Unit,
        Newtype(String),
        Tuple(u8, f64),
        Struct { zeta: bool, alpha: Option<i8> },
    }
    #[derive(Serialize)]
    struct Inner(u16);
    #[derive(Serialize)]
    struct Doc {
        zulu: Vec<Kind>,
        alpha: Option<String>,
        skipped: Option<()>,
        #[serde(skip_serializing_if = "Option::is_none")]
        gone: Option<u8>,
        #[serde(rename = "caf\u{e9}")]
        cafe: &'static str,
        floats: (f32, f64, f64, f32),
        wide: (i128, u128),
        by_number: BTreeMap<u32, Inner>,
        chars: [char; 3],
        bytes: &'static [u8],
        value: serde_json::Value,
        #[serde(flatten)]
        extra: BTreeMap<String, serde_json::Value>,
    }
    let doc = Doc {
        zulu: vec![
            Kind::Unit,
            Kind::Newtype("n\u{1f600}".into()),
            Kind::Tuple(7, -0.0),
            Kind::Struct {
                zeta: true,
                alpha: Some(-3),
            },
        ],
        alpha: None,
        skipped: None,
        gone: None,
        cafe: "\u{7f}\"\\\n\u{1}",
        floats: (0.1, 1e16, 5e-324, 3.0),
        wide: (i128::MIN, u128::MAX),
        by_number: BTreeMap::from([(10, Inner(1)), (9, Inner(2))]),
        chars: ['b', '\u{e9}', '"'],
        bytes: &[0, 255],
        value: json!({"b": [1.50, -0, f64::INFINITY, 1e300, 12345678901234567890123_u128.to_string()], "a": {}}),
        extra: BTreeMap::from([
            ("middle".to_owned(), json!(null)),
            ("aaa".to_owned(), json!([])),
        ]),
    };
    let expected = trace_canonical(&serde_json::to_value(&doc).unwrap());
    assert_eq!(to_trace_canonical(&doc).unwrap(), expected);
    // Values parsed from text (numbers kept as their text) too.
    let parsed: serde_json::Value =
        serde_json::from_str(r#"{"n":[1.50,-0,1E400,100000000000000000000,-1e-7],"s":"\u00e9"}"#)
            .unwrap();
    assert_eq!(
        to_trace_canonical(&parsed).unwrap(),
        trace_canonical(&parsed)
    );
}

/// Where `to_value` would keep one of two members with the same name, the serializer refuses.
#[test]
fn the_serializer_refuses_a_member_written_twice() {
    #[derive(Serialize)]
    struct Doc {
        id: u8,
        #[serde(flatten)]
        extra: BTreeMap<String, u8>,
    }
    let doc = Doc {
        id: 1,
        extra: BTreeMap::from([("id".to_owned(), 2)]),
    };
    let err = to_trace_canonical(&doc).unwrap_err();
    assert!(err.to_string().contains("\"id\" appears twice"), "{err}");
    // A map key that is not a string or a number has no JSON form.
    let err = to_trace_canonical(&BTreeMap::from([((1, 2), 3)])).unwrap_err();
    assert!(err.to_string().contains("map key"), "{err}");
}
