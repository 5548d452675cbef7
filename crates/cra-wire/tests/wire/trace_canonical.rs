//! Differential test of the TRACE canonical profile against Python's `json.dumps(json.loads(x),
//! sort_keys=True, separators=(',', ':'))`.
//!
//! The cases are regenerated on every run by `tools/gen_canonical_cases.py` from a fixed seed
//! (Python computes the expected bytes); both of our writers (from a parsed `Value`, and straight
//! from the text) must reproduce every case byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use cra_wire::canonical::trace::{trace_canonical, trace_canonical_from_str};
use cra_wire::json::parse_strict;

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
        let tree = match parse_strict(input.as_bytes()) {
            Ok(v) => trace_canonical(&v),
            Err(e) => format!("<refused: {e}>"),
        };
        let fast = match trace_canonical_from_str(input) {
            Ok(s) => s,
            Err(e) => format!("<refused: {e}>"),
        };
        if tree != expected || fast != expected {
            failures.push(format!(
                "case {i} [{category}]\n  input:    {input:?}\n  python:   {expected}\n  tree:     {tree}\n  streaming:{fast}"
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
