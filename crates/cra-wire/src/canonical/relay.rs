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

use serde_json::{Number, Value};

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
    let mut pointer = String::new();
    write_value(value, &mut out, &mut pointer)?;
    Ok(out)
}

fn write_value(
    value: &Value,
    out: &mut String,
    pointer: &mut String,
) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out, pointer)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&i.to_string());
                write_value(item, out, pointer)?;
                pointer.truncate(len);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sort explicitly: the map's own order depends on serde_json features chosen elsewhere.
            let mut members: Vec<(&String, &Value)> =
                map.iter().filter(|(_, v)| !v.is_null()).collect();
            members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                write_value(item, out, pointer)?;
                pointer.truncate(len);
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_number(n: &Number, out: &mut String, pointer: &str) -> Result<(), CanonicalError> {
    let text = n.to_string();
    let parsed: Option<f64> = text.parse::<f64>().ok();
    match parsed {
        Some(d) if d.is_finite() => {
            out.push_str(&ecmascript_number(d));
            Ok(())
        }
        _ => Err(CanonicalError::NumberOutOfRange(text, pointer.to_owned())),
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
