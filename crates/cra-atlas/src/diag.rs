//! Diagnostics: what is wrong with an atlas, where (file, JSON pointer, line), and how bad.
//!
//! Every problem the loader and the validator find becomes one [`Diagnostic`]. The line is
//! computed from the pointer by scanning the file's own text ([`line_of_pointer`]), so it points
//! at the value as the author wrote it, whatever the formatting.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Whether a problem prevents the atlas from being used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The atlas is invalid.
    Error,
    /// Suspicious but usable; `--strict` turns warnings into errors.
    Warning,
}

/// One problem in one file of an atlas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Stable machine-readable code (`schema`, `unknown_action`, ...; see `specs/atlas.md`).
    pub code: String,
    /// File relative to the atlas root, `/`-separated (`atlas.json`, `policies/deny.json`).
    pub file: String,
    /// JSON pointer of the offending value inside `file` (`""` for the whole file).
    pub pointer: String,
    /// 1-based line of the offending value, when the file is JSON text that contains it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What is wrong and what to do.
    pub message: String,
}

impl Diagnostic {
    /// An error.
    pub fn error(
        code: &str,
        file: impl Into<String>,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity: Severity::Error,
            code: code.to_owned(),
            file: file.into(),
            pointer: pointer.into(),
            line: None,
            message: message.into(),
        }
    }

    /// A warning.
    pub fn warning(
        code: &str,
        file: impl Into<String>,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(code, file, pointer, message)
        }
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `file:line: severity[code] at pointer: message` (the line part only when known).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        let pointer = if self.pointer.is_empty() {
            "(document)"
        } else {
            &self.pointer
        };
        write!(f, ": {sev}[{}] at {pointer}: {}", self.code, self.message)
    }
}

/// Escapes one reference token for a JSON pointer (RFC 6901: `~` -> `~0`, `/` -> `~1`).
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Appends one token to a pointer.
pub fn push_pointer(base: &str, token: impl fmt::Display) -> String {
    format!("{base}/{}", escape_token(&token.to_string()))
}

/// The 1-based line where the value at `pointer` starts in the JSON `text`, or `None` when the
/// text is not JSON or has no such value. For an object member the line is that of its key.
pub fn line_of_pointer(text: &str, pointer: &str) -> Option<usize> {
    Some(line_at(text, span_of_pointer(text, pointer)?.start))
}

/// The 1-based line of byte `at` of `text`.
pub fn line_at(text: &str, at: usize) -> usize {
    1 + text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&c| c == b'\n')
        .count()
}

/// Like [`line_of_pointer`], but when `pointer` names an absent member (a missing required
/// field) it answers the line of the nearest enclosing value, which is where the author adds it.
pub fn line_of_pointer_or_ancestor(text: &str, pointer: &str) -> Option<usize> {
    Some(line_at(
        text,
        span_of_pointer_or_ancestor(text, pointer)?.start,
    ))
}

/// The bytes of the JSON `text` that hold the value at `pointer` (for an object member, from
/// its key to the end of its value), or `None` when the text is not JSON or has no such value:
/// what a diagnostic underlines.
pub fn span_of_pointer(text: &str, pointer: &str) -> Option<std::ops::Range<usize>> {
    let tokens: Vec<String> = if pointer.is_empty() {
        Vec::new()
    } else {
        pointer
            .strip_prefix('/')?
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    let mut s = Scanner {
        b: text.as_bytes(),
        i: 0,
    };
    s.ws();
    let start = s.find(&tokens, s.i)?;
    // The cursor is on the value found; a value left open runs to the end of the text.
    let end = s.skip().map_or(text.len(), |()| s.i);
    Some(start..end)
}

/// Like [`span_of_pointer`], falling back to the nearest enclosing value when `pointer` names
/// an absent member.
pub fn span_of_pointer_or_ancestor(text: &str, pointer: &str) -> Option<std::ops::Range<usize>> {
    let mut p = pointer;
    loop {
        if let Some(span) = span_of_pointer(text, p) {
            return Some(span);
        }
        p = &p[..p.rfind('/')?];
    }
}

/// A tolerant JSON walker that only needs to find byte offsets.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    /// With the cursor on a value, returns the offset of the value at `rest` below it
    /// (`anchor` is the offset to report when `rest` is empty: a member's key or the value).
    fn find(&mut self, rest: &[String], anchor: usize) -> Option<usize> {
        let Some((head, tail)) = rest.split_first() else {
            return Some(anchor);
        };
        match self.b.get(self.i)? {
            b'{' => {
                self.i += 1;
                loop {
                    self.ws();
                    match self.b.get(self.i)? {
                        b'}' => return None,
                        b',' => {
                            self.i += 1;
                            continue;
                        }
                        b'"' => {}
                        _ => return None,
                    }
                    let key_at = self.i;
                    let key = self.string()?;
                    self.ws();
                    if self.b.get(self.i) != Some(&b':') {
                        return None;
                    }
                    self.i += 1;
                    self.ws();
                    if key == *head {
                        return self.find(tail, key_at);
                    }
                    self.skip()?;
                }
            }
            b'[' => {
                let want: usize = head.parse().ok()?;
                self.i += 1;
                let mut index = 0;
                loop {
                    self.ws();
                    match self.b.get(self.i)? {
                        b']' => return None,
                        b',' => {
                            self.i += 1;
                            continue;
                        }
                        _ => {}
                    }
                    if index == want {
                        let at = self.i;
                        return self.find(tail, at);
                    }
                    self.skip()?;
                    index += 1;
                }
            }
            _ => None,
        }
    }

    /// Reads a string starting at the cursor and returns its decoded text.
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        self.skip_string()?;
        serde_json::from_slice(&self.b[start..self.i]).ok()
    }

    fn skip_string(&mut self) -> Option<()> {
        self.i += 1;
        while let Some(&c) = self.b.get(self.i) {
            self.i += 1;
            match c {
                b'\\' => self.i += 1,
                b'"' => return Some(()),
                _ => {}
            }
        }
        None
    }

    /// Skips one value.
    fn skip(&mut self) -> Option<()> {
        match self.b.get(self.i)? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                while let Some(&c) = self.b.get(self.i) {
                    match c {
                        b'"' => {
                            self.skip_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
                None
            }
            _ => {
                while let Some(&c) = self.b.get(self.i) {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.i += 1;
                }
                Some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_from_pointers() {
        let text = "{\n  \"a\": 1,\n  \"b\": [\n    {\"c\": \"x}\\\"]\"},\n    {\n      \"d/e\": true\n    }\n  ]\n}\n";
        assert_eq!(line_of_pointer(text, ""), Some(1));
        assert_eq!(line_of_pointer(text, "/a"), Some(2));
        assert_eq!(line_of_pointer(text, "/b"), Some(3));
        assert_eq!(line_of_pointer(text, "/b/0"), Some(4));
        assert_eq!(line_of_pointer(text, "/b/0/c"), Some(4));
        assert_eq!(line_of_pointer(text, "/b/1"), Some(5));
        assert_eq!(line_of_pointer(text, "/b/1/d~1e"), Some(6));
        assert_eq!(line_of_pointer(text, "/b/2"), None);
        assert_eq!(line_of_pointer(text, "/z"), None);
        assert_eq!(line_of_pointer("not json", "/a"), None);
        assert_eq!(line_of_pointer_or_ancestor(text, "/b/1/missing"), Some(5));
        assert_eq!(line_of_pointer_or_ancestor(text, "/z"), Some(1));
    }

    #[test]
    fn spans_from_pointers() {
        let text = "{\"a\": 1, \"b\": [true, {\"c\": \"x}\"}], \"d\": {\"e\": [1, 2]}}";
        let at = |p: &str| span_of_pointer(text, p).map(|r| &text[r]);
        assert_eq!(at(""), Some(text));
        assert_eq!(at("/a"), Some("\"a\": 1"));
        assert_eq!(at("/b/0"), Some("true"));
        assert_eq!(at("/b/1"), Some("{\"c\": \"x}\"}"));
        assert_eq!(at("/b/1/c"), Some("\"c\": \"x}\""));
        assert_eq!(at("/d/e"), Some("\"e\": [1, 2]"));
        assert_eq!(at("/d/e/2"), None);
        let missing = span_of_pointer_or_ancestor(text, "/d/missing").map(|r| &text[r]);
        assert_eq!(missing, Some("\"d\": {\"e\": [1, 2]}"));
        // A value left open runs to the end.
        assert_eq!(span_of_pointer("{\"a\": [1,", "/a"), Some(1..9));
    }

    #[test]
    fn display() {
        let mut d = Diagnostic::error("schema", "atlas.json", "/version", "bad");
        d.line = Some(4);
        assert_eq!(
            d.to_string(),
            "atlas.json:4: error[schema] at /version: bad"
        );
        let w = Diagnostic::warning("x", "a.json", "", "m");
        assert_eq!(w.to_string(), "a.json: warning[x] at (document): m");
    }
}

/// The candidate an author most likely meant by `written` (a misspelt key or id), if one is
/// close: one edit away, or two for names of ten characters or more, the nearest first (ties:
/// the first candidate). Used to end a message with "did you mean `...`?".
pub fn did_you_mean<'a>(
    written: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter(|c| *c != written)
        .map(|c| (strsim::levenshtein(written, c), c))
        .filter(|(d, c)| *d <= (written.chars().count().max(c.chars().count()) / 5).clamp(1, 2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `"; did you mean `x`?"` when a candidate is close to `written`, else nothing.
pub fn suggestion<'a>(written: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(written, candidates).map_or_else(String::new, |c| format!("; did you mean `{c}`?"))
}

#[cfg(test)]
mod suggestion_tests {
    use super::*;

    #[test]
    fn a_close_candidate_is_suggested_and_a_far_one_is_not() {
        let keys = ["policies", "actions", "capabilities"];
        assert_eq!(did_you_mean("polices", keys), Some("policies"));
        assert_eq!(did_you_mean("actons", keys), Some("actions"));
        assert_eq!(did_you_mean("reason", keys), None);
        assert_eq!(did_you_mean("note.lst", ["note.get"]), None);
        assert_eq!(
            did_you_mean("note.remov", ["note.list", "note.remove"]),
            Some("note.remove")
        );
        assert_eq!(
            did_you_mean("risk_tiers", ["risk_tier", "priority"]),
            Some("risk_tier")
        );
        assert_eq!(suggestion("polices", keys), "; did you mean `policies`?");
    }
}
