//! TRACE profile canonical JSON: what the Appendix B Python produces, byte for byte.
//!
//! The reference is `json.dumps(json.loads(text), sort_keys=True, separators=(',', ':'))` with
//! Python's default `ensure_ascii=True`:
//! * strings: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`; every other character outside printable
//!   ASCII (C0 controls, DEL, every non-ASCII character) as lowercase `\uXXXX`, astral characters
//!   as a UTF-16 surrogate pair;
//! * object keys sorted by code point (compared as UTF-8 bytes, which orders the same way);
//! * integers (no `.`, `e`, `E` in the source text) exactly, whatever their size (`-0` is `0`);
//! * every other number becomes an IEEE 754 double printed like Python's `float.__repr__`:
//!   shortest round-trip digits, positional when the decimal exponent is in `[-4, 16)`, otherwise
//!   scientific with a signed two-digit-minimum exponent (`1e-07`, `1e+16`); overflow prints
//!   `Infinity`/`-Infinity` as Python does.
//!
//! Two entry points produce the same bytes: [`write_trace_canonical`] from a [`Value`], and
//! [`trace_canonical_from_str`] straight from JSON text without building a tree (the verifier's
//! hot path; it also refuses duplicate keys and excess depth like [`crate::json::parse_strict`]).

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

use crate::json::{JsonError, MAX_DEPTH, Scanner, parse_strict_str};

/// The TRACE-profile canonical form of `value`.
pub fn trace_canonical(value: &Value) -> String {
    let mut out = String::new();
    write_trace_canonical(value, &mut out);
    out
}

/// Appends the TRACE-profile canonical form of `value` to `out`.
pub fn write_trace_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_python_number(n.as_str(), out),
        Value::String(s) => write_ascii_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_trace_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sort explicitly: with serde_json's `preserve_order` (which another crate could turn
            // on through feature unification) the map iterates in insertion order.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_ascii_string(k, out);
                out.push(':');
                write_trace_canonical(v, out);
            }
            out.push('}');
        }
    }
}

/// Appends `s` as a JSON string literal escaped the way Python's `ensure_ascii=True` does.
pub fn write_ascii_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let bytes = s.as_bytes();
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            i += 1;
            continue;
        }
        out.push_str(&s[run..i]);
        if b < 0x80 {
            match b {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                0x08 => out.push_str("\\b"),
                0x0c => out.push_str("\\f"),
                _ => {
                    out.push_str("\\u00");
                    out.push(HEX[(b >> 4) as usize] as char);
                    out.push(HEX[(b & 15) as usize] as char);
                }
            }
            i += 1;
        } else {
            // A multi-byte UTF-8 sequence: `s` is a str, so `i` is a char boundary.
            let c = s[i..].chars().next().unwrap_or('\u{fffd}');
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str("\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(HEX[((*unit >> shift) & 15) as usize] as char);
                }
            }
            i += c.len_utf8();
        }
        run = i;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

/// Appends the Python rendering of the JSON number written as `text` (RFC 8259 grammar, or what
/// serde_json produces for numbers it built itself).
pub fn write_python_number(text: &str, out: &mut String) {
    if !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        // A Python int: exact. JSON forbids leading zeros, so only `-0` needs normalising; strip
        // defensively anyway for numbers not produced by a JSON parser.
        let (neg, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let digits = digits.trim_start_matches('0');
        if digits.is_empty() {
            out.push('0');
        } else {
            if neg {
                out.push('-');
            }
            out.push_str(digits);
        }
        return;
    }
    match text.parse::<f64>() {
        Ok(f) => write_python_float(f, out),
        // Unreachable for grammatical input; keep the text rather than panic.
        Err(_) => out.push_str(text),
    }
}

/// Appends `f` the way Python's `float.__repr__` (and therefore `json.dumps`) prints it.
pub fn write_python_float(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    // Python's repr: the fewest significant digits that round-trip and, among those, the digits
    // closest to the exact binary value, ties to even. Rust's `{:e}` finds the fewest digits but
    // may break an exact tie upwards, so re-render that many digits correctly rounded (Rust's
    // precision formatting is exact, ties to even); the result is at least as close, so it still
    // round-trips.
    let mut sci = String::with_capacity(32);
    let _ = write!(sci, "{f:e}");
    let shortest_digits = sci
        .split_once('e')
        .map_or(sci.as_str(), |(m, _)| m)
        .bytes()
        .filter(u8::is_ascii_digit)
        .count();
    sci.clear();
    let _ = write!(sci, "{f:.*e}", shortest_digits.saturating_sub(1));
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    // Trailing zeros can appear when the exact rendering carried (e.g. 9.5 -> "1.0e1").
    let digits = match digits.trim_end_matches('0') {
        "" => "0".to_owned(),
        d => d.to_owned(),
    };
    if neg {
        out.push('-');
    }
    if digits.bytes().all(|b| b == b'0') {
        out.push_str("0.0");
        return;
    }
    // value = 0.d1d2...dn * 10^decpt
    let decpt = exp + 1;
    let n = digits.len() as i32;
    if -4 < decpt && decpt <= 16 {
        if decpt <= 0 {
            out.push_str("0.");
            for _ in 0..-decpt {
                out.push('0');
            }
            out.push_str(&digits);
        } else if decpt < n {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        } else {
            out.push_str(&digits);
            for _ in 0..(decpt - n) {
                out.push('0');
            }
            out.push_str(".0");
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", e.unsigned_abs());
    }
}

/// The TRACE-profile canonical form of the JSON text `text`, without building a tree.
///
/// Refuses exactly what [`crate::json::parse_strict`] refuses (syntax errors, duplicate keys,
/// nesting deeper than [`MAX_DEPTH`]), with the same error.
pub fn trace_canonical_from_str(text: &str) -> Result<String, JsonError> {
    let mut out = String::with_capacity(text.len());
    let mut sc = Scanner::new(text);
    sc.skip_ws();
    let res = write_canonical_scanned(&mut sc, &mut out, 0).and_then(|()| {
        sc.skip_ws();
        if sc.at_end() {
            Ok(())
        } else {
            Err(sc.error("trailing characters after the JSON value"))
        }
    });
    match res {
        Ok(()) => Ok(out),
        // The fast path does not track pointers; the tree parser reports the error precisely.
        Err(fast) => Err(parse_strict_str(text).err().unwrap_or(fast)),
    }
}

/// Reads the next JSON value from `sc` and appends its TRACE-profile canonical form to `out`.
///
/// `depth` is the nesting depth of the value's container (0 at the top). On error `out` holds
/// partial output; errors about duplicate keys and depth carry an empty pointer (callers wanting a
/// precise pointer re-parse with [`crate::json::parse_strict`]).
pub fn write_canonical_scanned(
    sc: &mut Scanner<'_>,
    out: &mut String,
    depth: usize,
) -> Result<(), JsonError> {
    match sc.peek() {
        Some(b'{') => {
            if depth + 1 > MAX_DEPTH {
                return Err(JsonError::TooDeep {
                    pointer: String::new(),
                    limit: MAX_DEPTH,
                });
            }
            sc.expect(b'{', "`{`")?;
            out.push('{');
            sc.skip_ws();
            if sc.eat(b'}') {
                out.push('}');
                return Ok(());
            }
            let region = out.len();
            // (decoded key, start, end) of each member's `"key":value` text inside `out`.
            let mut members: Vec<(Cow<'_, str>, usize, usize)> = Vec::new();
            let mut sorted = true;
            loop {
                sc.skip_ws();
                let key = sc.string()?.decode();
                sc.skip_ws();
                sc.expect(b':', "`:` after an object key")?;
                sc.skip_ws();
                if !members.is_empty() {
                    out.push(',');
                }
                let start = out.len();
                write_ascii_string(&key, out);
                out.push(':');
                write_canonical_scanned(sc, out, depth + 1)?;
                if members
                    .last()
                    .is_some_and(|last| last.0.as_bytes() >= key.as_bytes())
                {
                    sorted = false;
                }
                members.push((key, start, out.len()));
                sc.skip_ws();
                if sc.eat(b',') {
                    continue;
                }
                sc.expect(b'}', "`,` or `}` in an object")?;
                break;
            }
            if !sorted {
                members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                if let Some(w) = members.windows(2).find(|w| w[0].0 == w[1].0) {
                    return Err(JsonError::DuplicateKey {
                        pointer: String::new(),
                        key: w[0].0.clone().into_owned(),
                    });
                }
                let written = out[region..].to_owned();
                out.truncate(region);
                for (i, (_, start, end)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&written[start - region..end - region]);
                }
            }
            out.push('}');
            Ok(())
        }
        Some(b'[') => {
            if depth + 1 > MAX_DEPTH {
                return Err(JsonError::TooDeep {
                    pointer: String::new(),
                    limit: MAX_DEPTH,
                });
            }
            sc.expect(b'[', "`[`")?;
            out.push('[');
            sc.skip_ws();
            if sc.eat(b']') {
                out.push(']');
                return Ok(());
            }
            let mut first = true;
            loop {
                sc.skip_ws();
                if !first {
                    out.push(',');
                }
                first = false;
                write_canonical_scanned(sc, out, depth + 1)?;
                sc.skip_ws();
                if sc.eat(b',') {
                    continue;
                }
                sc.expect(b']', "`,` or `]` in an array")?;
                out.push(']');
                return Ok(());
            }
        }
        Some(b'"') => {
            let s = sc.string()?;
            write_ascii_string(&s.decode(), out);
            Ok(())
        }
        Some(b't') => sc.literal("true").map(|()| out.push_str("true")),
        Some(b'f') => sc.literal("false").map(|()| out.push_str("false")),
        Some(b'n') => sc.literal("null").map(|()| out.push_str("null")),
        Some(b'-' | b'0'..=b'9') => {
            let text = sc.number()?;
            write_python_number(text, out);
            Ok(())
        }
        Some(_) => Err(sc.error("expected a JSON value")),
        None => Err(sc.error("unexpected end of input, expected a JSON value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        let tree = trace_canonical(&crate::json::parse_strict_str(text).unwrap());
        let fast = trace_canonical_from_str(text).unwrap();
        assert_eq!(tree, fast, "tree and streaming writers disagree on {text}");
        tree
    }

    #[test]
    fn python_float_forms() {
        for (input, want) in [
            ("1e16", "1e+16"),
            ("1e15", "1000000000000000.0"),
            ("1e-5", "1e-05"),
            ("1e-7", "1e-07"),
            ("0.0001", "0.0001"),
            ("1.5e300", "1.5e+300"),
            ("1e400", "Infinity"),
            ("-1e400", "-Infinity"),
            ("1e-400", "0.0"),
            ("-0.0", "-0.0"),
            ("1.0", "1.0"),
            ("1E5", "100000.0"),
            ("0.25", "0.25"),
            ("123456789012345678.0", "1.2345678901234568e+17"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("12345.678", "12345.678"),
        ] {
            assert_eq!(canon(input), want, "{input}");
        }
    }

    #[test]
    fn integers_exact() {
        assert_eq!(canon("-0"), "0");
        assert_eq!(
            canon("123456789012345678901234567890"),
            "123456789012345678901234567890"
        );
        assert_eq!(canon("-18446744073709551617"), "-18446744073709551617");
    }

    #[test]
    fn ascii_escapes() {
        assert_eq!(
            canon(r#""\u007f\u0000\u001f é😀\"\\/""#),
            r#""\u007f\u0000\u001f \u00e9\ud83d\ude00\"\\/""#
        );
        assert_eq!(canon(r#""\b\f\n\r\t""#), r#""\b\f\n\r\t""#);
    }

    #[test]
    fn keys_sorted_by_code_point() {
        assert_eq!(
            canon(r#"{"b":1,"a":{"z":[],"y":{}},"é":2,"Z":3,"😀":4,"￿":5}"#),
            r#"{"Z":3,"a":{"y":{},"z":[]},"b":1,"\u00e9":2,"\uffff":5,"\ud83d\ude00":4}"#
        );
    }

    #[test]
    fn streaming_refuses_duplicates_with_pointer() {
        let e = trace_canonical_from_str(r#"{"a":[{"k":1,"j":0,"k":2}]}"#).unwrap_err();
        assert_eq!(
            e,
            JsonError::DuplicateKey {
                pointer: "/a/0".into(),
                key: "k".into()
            }
        );
    }
}
