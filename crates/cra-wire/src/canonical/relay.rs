//! Relay profile canonical JSON (relay errata, Appendix A), the bytes a Relay content hash is
//! computed over:
//!
//! * object keys sorted by their UTF-8 bytes (not UTF-16 code units as RFC 8785 says; see vector
//!   C5), no whitespace, arrays in their given order;
//! * object members whose value is `null` are omitted at every depth; a `null` inside an array is
//!   kept (it is positional);
//! * numbers as RFC 8785 / ECMAScript `Number.prototype.toString` of the nearest IEEE 754 double
//!   (`1.0` -> `1`, `1e21` -> `1e+21`, `-0` -> `0`, integers beyond 2^53 lose precision exactly
//!   as a JavaScript producer would); a number with no finite double is refused;
//! * strings escaped as RFC 8785 does: only `"`, `\` and C0 controls, short forms `\b \f \n \r \t`,
//!   the rest `\u00xx` in lowercase hex; everything else is raw UTF-8.

use serde_json::{Map, Number, Value};

/// Why a value has no Relay canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A number outside the IEEE 754 double range (RFC 8785 has no form for it).
    #[error(
        "the number {0} at `{1}` cannot be represented as an IEEE 754 double; send a smaller magnitude or a string"
    )]
    NumberOutOfRange(String, String),
}

/// The Relay-profile canonical form of `value`.
pub fn relay_canonical(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(256);
    write_value(value, &mut out, None).map_err(Bad::into_error)?;
    Ok(out)
}

/// The canonical form of the object `map` without its member `skip` (how a Relay content hash
/// leaves out `content_hash` without copying the package).
pub fn relay_canonical_without(
    map: &Map<String, Value>,
    skip: &str,
) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(256);
    write_object(map, &mut out, Some(skip)).map_err(Bad::into_error)?;
    Ok(out)
}

/// A number without a canonical form, with the path to it built while unwinding (the success
/// path builds no pointers).
struct Bad {
    text: String,
    reversed_path: Vec<String>,
}

impl Bad {
    fn at(mut self, segment: String) -> Self {
        self.reversed_path.push(segment);
        self
    }

    fn into_error(self) -> CanonicalError {
        let pointer: String = self
            .reversed_path
            .iter()
            .rev()
            .map(|s| format!("/{s}"))
            .collect();
        CanonicalError::NumberOutOfRange(self.text, pointer)
    }
}

fn write_value(value: &Value, out: &mut String, skip: Option<&str>) -> Result<(), Bad> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out, None).map_err(|b| b.at(i.to_string()))?;
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, out, skip)?,
    }
    Ok(())
}

fn write_object(map: &Map<String, Value>, out: &mut String, skip: Option<&str>) -> Result<(), Bad> {
    // Sort explicitly: the map's own order depends on serde_json features chosen elsewhere.
    let mut members: Vec<(&String, &Value)> = map
        .iter()
        .filter(|(k, v)| !v.is_null() && Some(k.as_str()) != skip)
        .collect();
    members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (i, (key, item)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        write_value(item, out, None)
            .map_err(|b| b.at(key.replace('~', "~0").replace('/', "~1")))?;
    }
    out.push('}');
    Ok(())
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let mut run_start = 0;
    for (i, b) in s.bytes().enumerate() {
        // Multi-byte UTF-8 sequences never contain bytes below 0x80, so byte scanning is safe.
        let escape: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            _ => None,
        };
        if escape.is_none() && b >= 0x20 {
            continue;
        }
        out.push_str(&s[run_start..i]);
        match escape {
            Some(e) => out.push_str(e),
            None => out.push_str(&format!("\\u{b:04x}")),
        }
        run_start = i + 1;
    }
    out.push_str(&s[run_start..]);
    out.push('"');
}

fn write_number(n: &Number, out: &mut String) -> Result<(), Bad> {
    let text = n.to_string();
    // Fast path: integers of at most 15 digits are exact doubles and print as written.
    let digits = text.strip_prefix('-').unwrap_or(&text);
    if !digits.is_empty() && digits.len() <= 15 && digits.bytes().all(|b| b.is_ascii_digit()) {
        out.push_str(if digits == "0" { "0" } else { &text });
        return Ok(());
    }
    match text.parse::<f64>() {
        Ok(d) if d.is_finite() => {
            out.push_str(&ecmascript_number(d));
            Ok(())
        }
        _ => Err(Bad {
            text,
            reversed_path: Vec::new(),
        }),
    }
}

/// ECMAScript `Number::toString(d)` for a finite double (ECMA-262 §6.1.6.1.20), which RFC 8785
/// adopts: the shortest digit string that round-trips, placed in plain or exponent notation.
pub fn ecmascript_number(d: f64) -> String {
    if d == 0.0 {
        return "0".to_owned();
    }
    let negative = d < 0.0;
    // `{:e}` yields the shortest round-trip digits: "1.2345e-7", "1e21", "5e0".
    let sci = format!("{:e}", d.abs());
    let (mantissa, exp) = match sci.split_once('e') {
        Some(parts) => parts,
        None => (sci.as_str(), "0"),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let e: i64 = exp.parse().unwrap_or(0);
    let k = digits.len() as i64; // number of significant digits
    let n = e + 1; // decimal point position relative to the digits
    let mut out = String::with_capacity(32);
    if negative {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        for _ in 0..(n - k) {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in 0..(-n) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        let exp = n - 1;
        out.push(if exp >= 0 { '+' } else { '-' });
        out.push_str(&exp.abs().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecmascript_forms() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1"),
            (-0.0, "0"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (123.456, "123.456"),
            (-3.25e-10, "-3.25e-10"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.1, "0.1"),
            (1234567.5, "1234567.5"),
        ];
        for (d, want) in cases {
            assert_eq!(ecmascript_number(*d), *want, "{d:?}");
        }
    }

    #[test]
    fn out_of_range_numbers_are_refused_with_their_pointer() {
        let v: Value = serde_json::from_str(r#"{"a":[1,1e400]}"#).unwrap();
        let e = relay_canonical(&v).unwrap_err();
        assert_eq!(
            e,
            CanonicalError::NumberOutOfRange("1e+400".into(), "/a/1".into())
        );
    }
}
