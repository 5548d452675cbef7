//! The strict JSON parser and both canonical-JSON profiles (`cra-wire`).
//!
//! Oracles:
//! * strict parser: never nests deeper than `MAX_DEPTH`; whatever it accepts, serde_json accepts
//!   as the same value; whatever serde_json accepts and it refuses is a duplicate key or excess
//!   depth, never a syntax disagreement; `parse_input` refuses exactly the accepted documents
//!   that hold a number with no finite double, and otherwise answers as the strict parser;
//! * TRACE profile: the streaming writer and the tree writer agree (same output or the same
//!   error); canonical(parse(canonical(x))) == canonical(x); parse(canonical(x)) == x (numbers
//!   compared as the Python reference reads them: integers exactly, other numbers as doubles);
//! * Relay profile: canonical(parse(canonical(x))) == canonical(x); parse(canonical(x)) is x
//!   without its `null` members, numbers compared as doubles; a refusal names a number that has
//!   no finite double.

use cra_wire::canonical::relay::relay_canonical_without;
use cra_wire::canonical::trace::trace_canonical_from_str;
use cra_wire::canonical::{relay_canonical, to_trace_canonical, trace_canonical};
use cra_wire::json::{JsonError, MAX_DEPTH, parse_input, parse_strict, parse_strict_str};
use serde_json::Value;

/// Nesting depth of a value (scalars are 0).
pub fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The strict parser on raw bytes.
pub fn strict_json(data: &[u8]) {
    let strict = parse_strict(data);
    if let Err(e) = &strict {
        // Every error renders and names a sane position.
        let _ = e.to_string();
        if let JsonError::Syntax { line, column, .. } = e {
            assert!(*line >= 1 && *column >= 1, "position {line}:{column}");
            assert!(*line <= data.len() + 1, "line {line} past the input");
        }
    }
    let loose: Result<Value, _> = serde_json::from_slice(data);
    match (&strict, &loose) {
        (Ok(s), Ok(l)) => {
            assert!(depth(s) <= MAX_DEPTH, "accepted nesting {}", depth(s));
            assert_eq!(s, l, "strict and serde_json read different values");
        }
        (Ok(s), Err(e)) => {
            // serde_json stops at its own recursion limit, one level short of ours.
            assert!(
                depth(s) >= 127,
                "strict accepted what serde_json refuses ({e})"
            );
        }
        (Err(JsonError::Syntax { message, .. }), Ok(l)) => {
            panic!("strict refused as a syntax error ({message}) what serde_json reads as {l}");
        }
        (Err(JsonError::DuplicateKey { .. }), Ok(_)) => {}
        (Err(JsonError::TooDeep { .. }), Ok(l)) => {
            assert!(depth(l) > MAX_DEPTH, "refused as too deep at {}", depth(l));
        }
        (Err(JsonError::NotFinite { .. }), _) => panic!("parse_strict checks no number's range"),
        (Err(_), Err(_)) => {}
    }
    match (&strict, parse_input(data)) {
        (Ok(s), Ok(i)) => {
            assert_eq!(s, &i);
            assert!(
                !has_infinite_float(s),
                "parse_input accepted a number with no double"
            );
        }
        (Ok(s), Err(e)) => assert!(
            matches!(e, JsonError::NotFinite { .. }) && has_infinite_float(s),
            "parse_input refused what it must not: {e}"
        ),
        (Err(s), Err(i)) => assert_eq!(s, &i, "parse_input and parse_strict refuse alike"),
        (Err(s), Ok(_)) => panic!("parse_input accepted what parse_strict refuses: {s}"),
    }
}

/// True when `v` holds a non-integer number that overflows a double (its TRACE form is the
/// non-JSON `Infinity`, which cannot be parsed back).
fn has_infinite_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            let t = n.as_str();
            t.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
                && t.parse::<f64>().map_or(true, |f| !f.is_finite())
        }
        Value::Array(a) => a.iter().any(has_infinite_float),
        Value::Object(o) => o.values().any(has_infinite_float),
        _ => false,
    }
}

/// A number as the TRACE reference (Python) reads it.
#[derive(Debug, PartialEq)]
enum PyNumber {
    /// An int, normalised (`-0` is `0`, no leading zeros).
    Int(String),
    /// A float, by its bits.
    Float(u64),
}

fn py_number(text: &str) -> PyNumber {
    if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        PyNumber::Float(text.parse::<f64>().map_or(u64::MAX, f64::to_bits))
    } else {
        let (neg, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text),
        };
        let digits = digits.trim_start_matches('0');
        if digits.is_empty() {
            PyNumber::Int("0".to_owned())
        } else {
            PyNumber::Int(format!("{}{digits}", if neg { "-" } else { "" }))
        }
    }
}

/// Equality as the TRACE reference sees values.
pub fn trace_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => py_number(x.as_str()) == py_number(y.as_str()),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| trace_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| trace_equal(v, w)))
        }
        _ => a == b,
    }
}

/// TRACE-profile canonical JSON of the input text.
pub fn canonical_trace(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let tree = parse_strict_str(text);
    let fast = trace_canonical_from_str(text);
    match (tree, fast) {
        (Ok(v), Ok(c)) => {
            let c1 = trace_canonical(&v);
            assert_eq!(c1, c, "tree and streaming writers disagree");
            assert_eq!(
                to_trace_canonical(&v).as_deref(),
                Ok(c1.as_str()),
                "tree and serializer writers disagree"
            );
            assert!(c1.is_ascii(), "TRACE canonical form is ASCII");
            if !has_infinite_float(&v) {
                let v2 = match parse_strict_str(&c1) {
                    Ok(v2) => v2,
                    Err(e) => panic!("canonical output {c1} does not parse: {e}"),
                };
                assert_eq!(
                    trace_canonical(&v2),
                    c1,
                    "canonical form is not a fixed point"
                );
                assert!(trace_equal(&v, &v2), "parse(canonical(x)) != x for {c1}");
            }
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "the two readers refuse differently"),
        (tree, fast) => panic!("tree reader {tree:?} but streaming writer {fast:?}"),
    }
}

/// Equality of `x` with nulls dropped from objects, numbers as doubles, against `y`.
fn relay_equal(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::Number(a), Value::Number(b)) => {
            let fa = a.as_str().parse::<f64>().unwrap_or(f64::NAN);
            let fb = b.as_str().parse::<f64>().unwrap_or(f64::NAN);
            fa == fb
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(p, q)| relay_equal(p, q))
        }
        (Value::Object(a), Value::Object(b)) => {
            let kept: Vec<(&String, &Value)> = a.iter().filter(|(_, v)| !v.is_null()).collect();
            kept.len() == b.len()
                && kept
                    .iter()
                    .all(|(k, v)| b.get(*k).is_some_and(|w| relay_equal(v, w)))
        }
        _ => x == y,
    }
}

fn has_unrepresentable_number(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_str().parse::<f64>().map_or(true, |f| !f.is_finite()),
        Value::Array(a) => a.iter().any(has_unrepresentable_number),
        // Null members are dropped before numbers are looked at, and numbers cannot be null.
        Value::Object(o) => o.values().any(has_unrepresentable_number),
        _ => false,
    }
}

/// Relay-profile canonical JSON of the input text.
pub fn canonical_relay(data: &[u8]) {
    let Ok(v) = parse_strict(data) else {
        return;
    };
    match relay_canonical(&v) {
        Ok(c) => {
            assert!(
                !has_unrepresentable_number(&v),
                "an infinite number got a form"
            );
            let v2 = match parse_strict_str(&c) {
                Ok(v2) => v2,
                Err(e) => panic!("canonical output {c} does not parse: {e}"),
            };
            assert_eq!(
                relay_canonical(&v2).ok().as_deref(),
                Some(c.as_str()),
                "not a fixed point"
            );
            assert!(relay_equal(&v, &v2), "parse(canonical(x)) is not x for {c}");
            if let Value::Object(map) = &v
                && let Some(key) = map.keys().next()
            {
                let mut without = map.clone();
                without.remove(key);
                assert_eq!(
                    relay_canonical_without(map, key).ok(),
                    relay_canonical(&Value::Object(without)).ok(),
                    "canonical_without({key}) differs from removing it"
                );
            }
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(
                has_unrepresentable_number(&v),
                "refused a value whose numbers are all finite: {e}"
            );
        }
    }
}
