//! Strict JSON reading for untrusted input: refuses duplicate object keys (two parsers could see
//! two different documents), nesting deeper than a limit, and anything RFC 8259 forbids; numbers
//! are kept exactly as written.
//!
//! Two layers:
//! * [`Scanner`]: a byte-level RFC 8259 tokenizer over a `&str` that hands out borrowed slices
//!   (raw string contents, number text). Hot paths (the TRACE verifier, the canonical writer that
//!   works straight from bytes) use it without ever building a [`Value`] tree.
//! * [`parse_strict`]: builds a [`Value`] with the scanner, reporting duplicate keys and excess
//!   depth with the JSON pointer of the offending object.
//!
//! Input that will be stored and hashed also goes through [`require_finite`] ([`parse_input`]
//! does both): a literal such as `1e400` is valid JSON, but canonical JSON reads it as a double,
//! and the nearest double is infinity, which prints as `Infinity`, not JSON. A chain holding one
//! could no longer be exported or verified, so no entry point accepts it.

use std::borrow::Cow;

use serde_json::{Map, Number, Value};

/// The deepest nesting accepted from untrusted input.
pub const MAX_DEPTH: usize = 128;

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all, or truncated.
    #[error("not valid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column (in bytes).
        column: usize,
        /// What the parser expected.
        message: String,
    },
    /// The same key appears twice in one object.
    #[error("duplicate key `{key}` in the object at `{pointer}`: each key may appear once")]
    DuplicateKey {
        /// JSON pointer of the object.
        pointer: String,
        /// The repeated key.
        key: String,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {limit} levels at `{pointer}`")]
    TooDeep {
        /// JSON pointer where the limit was passed.
        pointer: String,
        /// The limit.
        limit: usize,
    },
    /// A number with a fraction or an exponent that no finite double holds (see
    /// [`require_finite`]).
    #[error(
        "the number `{text}` at `{pointer}` is beyond the range of a double (canonical JSON would record it as Infinity, which is not JSON); send a number within ±1.8e308, or the value as a string"
    )]
    NotFinite {
        /// JSON pointer of the number.
        pointer: String,
        /// The number (as serde_json spells it: `1e400` as `1e+400`), its first 40 characters
        /// and `...` after them.
        text: String,
    },
}

impl JsonError {
    /// The JSON pointer this error names (empty for syntax errors, which have a position instead).
    pub fn pointer(&self) -> &str {
        match self {
            JsonError::Syntax { .. } => "",
            JsonError::DuplicateKey { pointer, .. }
            | JsonError::TooDeep { pointer, .. }
            | JsonError::NotFinite { pointer, .. } => pointer,
        }
    }
}

/// Parses `input` strictly (see the module documentation).
pub fn parse_strict(input: &[u8]) -> Result<Value, JsonError> {
    let text = match std::str::from_utf8(input) {
        Ok(t) => t,
        Err(e) => {
            let (line, column) = line_column(input, e.valid_up_to());
            return Err(JsonError::Syntax {
                line,
                column,
                message: "the input is not valid UTF-8".to_owned(),
            });
        }
    };
    parse_strict_str(text)
}

/// Parses `text` strictly (see the module documentation).
pub fn parse_strict_str(text: &str) -> Result<Value, JsonError> {
    let mut sc = Scanner::new(text);
    let mut path = Vec::new();
    sc.skip_ws();
    let value = build_value(&mut sc, 0, &mut path)?;
    sc.skip_ws();
    if !sc.at_end() {
        return Err(sc.error("trailing characters after the JSON value"));
    }
    Ok(value)
}

/// Parses `input` like [`parse_strict`], then refuses what [`require_finite`] refuses: the reader
/// for input that is stored and hashed.
pub fn parse_input(input: &[u8]) -> Result<Value, JsonError> {
    let value = parse_strict(input)?;
    require_finite(&value)?;
    Ok(value)
}

/// Refuses the first number in `value` (array items in order, members by key) that reads as a
/// double, because it has a fraction or an exponent, and is beyond a double's range: Python and
/// canonical JSON read `1e400` as infinity. Integers without either are exact at any length and pass, and so do
/// numbers that round to zero (`1e-400` reads as `0.0` in every reader).
pub fn require_finite(value: &Value) -> Result<(), JsonError> {
    let Some((mut path, number)) = first_non_finite(value) else {
        return Ok(());
    };
    path.reverse();
    let mut text: String = number.chars().take(40).collect();
    if text.len() < number.len() {
        text.push_str("...");
    }
    Err(JsonError::NotFinite {
        pointer: pointer_of(&path),
        text,
    })
}

/// The path (innermost segment first) and text of the first number [`require_finite`] refuses.
fn first_non_finite(value: &Value) -> Option<(Vec<String>, String)> {
    match value {
        Value::Number(n) => {
            let text = n.as_str();
            let float = text.contains(['.', 'e', 'E']);
            let infinite = float && text.parse::<f64>().is_ok_and(f64::is_infinite);
            infinite.then(|| (Vec::new(), text.to_owned()))
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            let (mut path, text) = first_non_finite(v)?;
            path.push(i.to_string());
            Some((path, text))
        }),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let (mut path, text) = first_non_finite(v)?;
            path.push(k.clone());
            Some((path, text))
        }),
        Value::Null | Value::Bool(_) | Value::String(_) => None,
    }
}

/// Appends one JSON pointer segment (RFC 6901 escaping) for `key`.
pub fn push_pointer_segment(pointer: &mut String, key: &str) {
    pointer.push('/');
    for c in key.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

fn pointer_of(path: &[String]) -> String {
    let mut p = String::new();
    for seg in path {
        push_pointer_segment(&mut p, seg);
    }
    p
}

fn build_value(
    sc: &mut Scanner<'_>,
    depth: usize,
    path: &mut Vec<String>,
) -> Result<Value, JsonError> {
    match sc.peek() {
        Some(b'{') => {
            if depth + 1 > MAX_DEPTH {
                return Err(JsonError::TooDeep {
                    pointer: pointer_of(path),
                    limit: MAX_DEPTH,
                });
            }
            sc.bump();
            let mut map = Map::new();
            sc.skip_ws();
            if sc.eat(b'}') {
                return Ok(Value::Object(map));
            }
            loop {
                sc.skip_ws();
                let key = sc.string()?.decode().into_owned();
                sc.skip_ws();
                sc.expect(b':', "`:` after an object key")?;
                sc.skip_ws();
                if map.contains_key(&key) {
                    return Err(JsonError::DuplicateKey {
                        pointer: pointer_of(path),
                        key,
                    });
                }
                path.push(key);
                let v = build_value(sc, depth + 1, path)?;
                let key = path.pop().unwrap_or_default();
                map.insert(key, v);
                sc.skip_ws();
                if sc.eat(b',') {
                    continue;
                }
                sc.expect(b'}', "`,` or `}` in an object")?;
                return Ok(Value::Object(map));
            }
        }
        Some(b'[') => {
            if depth + 1 > MAX_DEPTH {
                return Err(JsonError::TooDeep {
                    pointer: pointer_of(path),
                    limit: MAX_DEPTH,
                });
            }
            sc.bump();
            let mut items = Vec::new();
            sc.skip_ws();
            if sc.eat(b']') {
                return Ok(Value::Array(items));
            }
            loop {
                sc.skip_ws();
                path.push(items.len().to_string());
                let v = build_value(sc, depth + 1, path)?;
                path.pop();
                items.push(v);
                sc.skip_ws();
                if sc.eat(b',') {
                    continue;
                }
                sc.expect(b']', "`,` or `]` in an array")?;
                return Ok(Value::Array(items));
            }
        }
        Some(b'"') => Ok(Value::String(sc.string()?.decode().into_owned())),
        Some(b't') => sc.literal("true").map(|()| Value::Bool(true)),
        Some(b'f') => sc.literal("false").map(|()| Value::Bool(false)),
        Some(b'n') => sc.literal("null").map(|()| Value::Null),
        Some(b'-' | b'0'..=b'9') => {
            let text = sc.number()?;
            let n: Number = text
                .parse()
                .map_err(|_| sc.error("a number serde_json cannot hold"))?;
            Ok(Value::Number(n))
        }
        Some(_) => Err(sc.error("expected a JSON value")),
        None => Err(sc.error("unexpected end of input, expected a JSON value")),
    }
}

/// 1-based (line, column) of byte `pos` in `bytes`.
fn line_column(bytes: &[u8], pos: usize) -> (usize, usize) {
    let pos = pos.min(bytes.len());
    let before = &bytes[..pos];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    (line, pos - line_start + 1)
}

/// The contents of a JSON string as written (between the quotes, escapes not yet resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawString<'a> {
    raw: &'a str,
    escaped: bool,
}

impl<'a> RawString<'a> {
    /// The text between the quotes, escapes unresolved.
    pub fn raw(&self) -> &'a str {
        self.raw
    }

    /// Whether the raw text contains a backslash escape.
    pub fn has_escapes(&self) -> bool {
        self.escaped
    }

    /// The string value (escapes resolved). Borrowed when there was nothing to resolve.
    ///
    /// The scanner has already validated every escape, including surrogate pairing, so this
    /// cannot fail.
    pub fn decode(&self) -> Cow<'a, str> {
        if !self.escaped {
            return Cow::Borrowed(self.raw);
        }
        let b = self.raw.as_bytes();
        let mut out = String::with_capacity(b.len());
        let mut i = 0;
        let mut run = 0;
        while i < b.len() {
            if b[i] != b'\\' {
                i += 1;
                continue;
            }
            out.push_str(&self.raw[run..i]);
            let esc = b.get(i + 1).copied().unwrap_or(b'\\');
            i += 2;
            match esc {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                _ => {
                    let hi = hex4(&b[i..]).unwrap_or(0xfffd);
                    i += 4;
                    let cp = if (0xd800..0xdc00).contains(&hi) {
                        let lo = hex4(b.get(i + 2..).unwrap_or(&[])).unwrap_or(0xdc00);
                        i += 6;
                        0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                    } else {
                        hi
                    };
                    out.push(char::from_u32(cp).unwrap_or('\u{fffd}'));
                }
            }
            run = i;
        }
        out.push_str(&self.raw[run..]);
        Cow::Owned(out)
    }
}

/// The first position at or after `pos` holding `"`, `\\` or a byte below 0x20 (or `b.len()`).
///
/// Looks at eight bytes at a time: for a word `w`, `(w - 0x20..) & !w & 0x80..` is non-zero
/// exactly when some byte is below 0x20, and the same test on `w ^ q..` finds bytes equal to `q`.
#[inline]
fn skip_plain_string_bytes(b: &[u8], mut pos: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = b.get(pos..pos + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let quote = w ^ (LO * u64::from(b'"'));
        let backslash = w ^ (LO * u64::from(b'\\'));
        let special = (w.wrapping_sub(LO * 0x20) & !w)
            | (quote.wrapping_sub(LO) & !quote)
            | (backslash.wrapping_sub(LO) & !backslash);
        if special & HI != 0 {
            break;
        }
        pos += 8;
    }
    while let Some(&c) = b.get(pos) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        pos += 1;
    }
    pos
}

fn hex4(b: &[u8]) -> Option<u32> {
    if b.len() < 4 {
        return None;
    }
    let mut v = 0u32;
    for &c in &b[..4] {
        v = v * 16 + (c as char).to_digit(16)?;
    }
    Some(v)
}

/// A byte-level RFC 8259 tokenizer over UTF-8 text (see the module documentation).
///
/// Every method that reads a token validates it fully; positions in errors are 1-based line and
/// byte column.
#[derive(Debug, Clone)]
pub struct Scanner<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `src`.
    pub fn new(src: &'a str) -> Self {
        Self { src, pos: 0 }
    }

    /// The byte offset of the next unread byte.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Whether every byte has been read.
    pub fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    /// The next byte, not consumed.
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    #[inline]
    fn bump(&mut self) {
        self.pos += 1;
    }

    /// Skips JSON whitespace (space, tab, LF, CR).
    #[inline]
    pub fn skip_ws(&mut self) {
        let b = self.src.as_bytes();
        while let Some(&c) = b.get(self.pos) {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// Consumes `byte` if it is next.
    #[inline]
    pub fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `byte` or fails saying `what` was expected.
    pub fn expect(&mut self, byte: u8, what: &str) -> Result<(), JsonError> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.error(&format!("expected {what}")))
        }
    }

    /// A syntax error at the current position.
    pub fn error(&self, message: &str) -> JsonError {
        let (line, column) = line_column(self.src.as_bytes(), self.pos);
        JsonError::Syntax {
            line,
            column,
            message: message.to_owned(),
        }
    }

    /// Consumes the literal `word` (`true`, `false` or `null`).
    pub fn literal(&mut self, word: &str) -> Result<(), JsonError> {
        if self.src.as_bytes()[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.error(&format!("expected `{word}`")))
        }
    }

    /// Reads a string token (the next byte must be `"`), validating escapes (including surrogate
    /// pairing) and refusing raw control characters.
    pub fn string(&mut self) -> Result<RawString<'a>, JsonError> {
        if !self.eat(b'"') {
            return Err(self.error("expected a string"));
        }
        let start = self.pos;
        let b = self.src.as_bytes();
        let mut escaped = false;
        loop {
            self.pos = skip_plain_string_bytes(b, self.pos);
            let Some(&c) = b.get(self.pos) else {
                return Err(self.error("unterminated string"));
            };
            match c {
                b'"' => {
                    let raw = &self.src[start..self.pos];
                    self.pos += 1;
                    return Ok(RawString { raw, escaped });
                }
                b'\\' => {
                    escaped = true;
                    self.pos += 1;
                    match b.get(self.pos) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.pos += 1
                        }
                        Some(b'u') => {
                            self.pos += 1;
                            let hi = self.hex_escape()?;
                            if (0xd800..0xdc00).contains(&hi) {
                                if b.get(self.pos) != Some(&b'\\')
                                    || b.get(self.pos + 1) != Some(&b'u')
                                {
                                    return Err(self.error(
                                        "a high surrogate escape must be followed by a low surrogate escape",
                                    ));
                                }
                                self.pos += 2;
                                let lo = self.hex_escape()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(self.error(
                                        "a high surrogate escape must be followed by a low surrogate escape",
                                    ));
                                }
                            } else if (0xdc00..0xe000).contains(&hi) {
                                return Err(self.error("a lone low surrogate escape"));
                            }
                        }
                        _ => return Err(self.error("invalid escape in a string")),
                    }
                }
                0x00..=0x1f => {
                    return Err(self.error("raw control character in a string (escape it)"));
                }
                _ => self.pos += 1,
            }
        }
    }

    fn hex_escape(&mut self) -> Result<u32, JsonError> {
        match hex4(self.src.as_bytes().get(self.pos..).unwrap_or(&[])) {
            Some(v) => {
                self.pos += 4;
                Ok(v)
            }
            None => Err(self.error("`\\u` must be followed by four hex digits")),
        }
    }

    /// Reads a number token and returns its text exactly as written (RFC 8259 grammar).
    pub fn number(&mut self) -> Result<&'a str, JsonError> {
        let b = self.src.as_bytes();
        let start = self.pos;
        let digits = |pos: &mut usize| {
            let s = *pos;
            while b.get(*pos).is_some_and(u8::is_ascii_digit) {
                *pos += 1;
            }
            *pos - s
        };
        let mut p = self.pos;
        if b.get(p) == Some(&b'-') {
            p += 1;
        }
        match b.get(p) {
            Some(b'0') => p += 1,
            Some(b'1'..=b'9') => {
                digits(&mut p);
            }
            _ => {
                self.pos = p;
                return Err(self.error("expected a digit in a number"));
            }
        }
        if b.get(p) == Some(&b'.') {
            p += 1;
            if digits(&mut p) == 0 {
                self.pos = p;
                return Err(self.error("expected a digit after the decimal point"));
            }
        }
        if matches!(b.get(p), Some(b'e' | b'E')) {
            p += 1;
            if matches!(b.get(p), Some(b'+' | b'-')) {
                p += 1;
            }
            if digits(&mut p) == 0 {
                self.pos = p;
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        self.pos = p;
        Ok(&self.src[start..p])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_with_pointer() {
        let e = parse_strict(br#"{"a":{"b/~":{"x":1,"x":2}}}"#).unwrap_err();
        assert_eq!(
            e,
            JsonError::DuplicateKey {
                pointer: "/a/b~1~0".into(),
                key: "x".into()
            }
        );
        let e = parse_strict(br#"[0,{"k":1,"k":1}]"#).unwrap_err();
        assert_eq!(e.pointer(), "/1");
    }

    #[test]
    fn escaped_duplicate_is_a_duplicate() {
        assert!(matches!(
            parse_strict(br#"{"a":1,"\u0061":2}"#),
            Err(JsonError::DuplicateKey { .. })
        ));
    }

    #[test]
    fn depth_limit() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse_strict(ok.as_bytes()).is_ok());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(matches!(
            parse_strict(deep.as_bytes()),
            Err(JsonError::TooDeep { .. })
        ));
    }

    #[test]
    fn input_refuses_numbers_beyond_a_double_with_their_pointer() {
        for (text, pointer, shown) in [
            (r#"{"a":[1,{"b/c":1e400}]}"#, "/a/1/b~1c", "1e+400"),
            (r#"[-1.5E+309]"#, "/0", "-1.5e+309"),
            (r#"1e400"#, "", "1e+400"),
        ] {
            let e = parse_input(text.as_bytes()).unwrap_err();
            assert_eq!(e.pointer(), pointer, "{text}");
            assert!(
                matches!(&e, JsonError::NotFinite { text, .. } if text == shown),
                "{e}"
            );
            assert!(parse_strict(text.as_bytes()).is_ok(), "still JSON: {text}");
        }
        let long = format!("[{}e999]", "9".repeat(100));
        let e = parse_input(long.as_bytes()).unwrap_err();
        assert!(
            e.to_string().contains(&format!("`{}...`", "9".repeat(40))),
            "{e}"
        );
    }

    #[test]
    fn input_keeps_long_integers_tiny_numbers_and_the_largest_double() {
        let ok = format!(
            "[{},1e-400,-0.0,1.7976931348623157e308,{}]",
            "9".repeat(5000),
            "1".repeat(400)
        );
        assert_eq!(parse_input(ok.as_bytes()), parse_strict(ok.as_bytes()));
    }

    #[test]
    fn numbers_keep_their_text() {
        let v = parse_strict(b"[1E5,-0,1.50,123456789012345678901234567890,34e-56789]").unwrap();
        let texts: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_number().unwrap().as_str().to_owned())
            .collect();
        assert_eq!(texts[1], "-0");
        assert_eq!(texts[2], "1.50");
        assert_eq!(texts[3], "123456789012345678901234567890");
    }

    #[test]
    fn rejects_what_rfc_8259_forbids() {
        for bad in [
            &b"{\"a\":1,}"[..],
            b"[01]",
            b"[1.]",
            b"[.5]",
            b"[+1]",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"a\tb\"",
            b"\"\\x\"",
            b"[1] x",
            b"",
            b"nul",
            b"[\"\xff\"]",
            b"{\"a\" 1}",
        ] {
            assert!(
                parse_strict(bad).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn decodes_escapes_and_pairs() {
        let v = parse_strict(br#""a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude80z""#).unwrap();
        assert_eq!(
            v.as_str().unwrap(),
            "a\"\\/\u{8}\u{c}\n\r\t\u{e9}\u{1f680}z"
        );
    }

    #[test]
    fn plain_byte_skipping_stops_at_every_special_byte() {
        // Every special byte at every offset of a 20-byte run, with non-ASCII neighbours.
        let specials: Vec<u8> = (0u8..0x20).chain([b'"', b'\\']).collect();
        for &sp in &specials {
            for at in 0..20 {
                let mut v: Vec<u8> = "aé€z~\u{7f}bcdefghijklmn".bytes().take(20).collect();
                v[at] = sp;
                assert_eq!(skip_plain_string_bytes(&v, 0), at, "byte {sp:#x} at {at}");
            }
        }
        let plain = "plain text é 😀 ~\u{7f}".as_bytes();
        assert_eq!(skip_plain_string_bytes(plain, 0), plain.len());
        assert_eq!(skip_plain_string_bytes(plain, 3), plain.len());
    }

    #[test]
    fn syntax_error_positions() {
        let e = parse_strict(b"{\n  \"a\": tru\n}").unwrap_err();
        assert!(
            matches!(
                e,
                JsonError::Syntax {
                    line: 2,
                    column: 8,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
