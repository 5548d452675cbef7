//! How `cra atlas check` reports its diagnostics beyond JSON (issue 31, item 6): as SARIF 2.1.0
//! (OASIS), which code-review tools read (GitHub code scanning, editors' SARIF viewers), and as
//! text: each diagnostic's line, then its source drawn by `miette` (the lines around the
//! offending value, the value underlined, a did-you-mean as the label), in colour only on a
//! terminal and without `NO_COLOR`.
//!
//! SARIF, as written here: one run whose tool is `cra` (with its version) and whose rules are
//! the diagnostic codes that occur (`specs/atlas.md` lists them); one result per diagnostic,
//! `level` `error` or `warning`, the message as text, the file as a relative URI reference
//! (the atlas path as given, joined with the file, `/`-separated and percent-encoded; an
//! absolute path becomes a `file://` URI), the 1-based line as the region when it is known,
//! and the JSON pointer as a logical location. A diagnostic inside a packed archive names the
//! archive as its artifact and the file inside it in `properties.file`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use cra_atlas::diag::{Diagnostic, Severity};
use serde_json::{Value, json};

use crate::cmd::atlas::Checked;

/// The SARIF 2.1.0 document of `checked`.
pub fn sarif(checked: &[Checked]) -> Value {
    let mut rules: BTreeMap<&str, usize> = BTreeMap::new();
    for c in checked {
        for d in &c.diagnostics {
            let next = rules.len();
            rules.entry(d.code.as_str()).or_insert(next);
        }
    }
    let mut by_index: Vec<(&str, usize)> = rules.iter().map(|(k, v)| (*k, *v)).collect();
    by_index.sort_by_key(|(_, i)| *i);
    let results: Vec<Value> = checked
        .iter()
        .flat_map(|c| {
            let rules = &rules;
            c.diagnostics
                .iter()
                .map(move |d| result(&c.path, d, rules.get(d.code.as_str()).copied()))
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "cra",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": by_index
                    .iter()
                    .map(|(code, _)| json!({"id": code, "name": code}))
                    .collect::<Vec<_>>(),
            }},
            "invocations": [{"executionSuccessful": true}],
            "results": results,
        }],
    })
}

/// One diagnostic of the atlas at `atlas` as a SARIF result.
fn result(atlas: &Path, d: &Diagnostic, rule_index: Option<usize>) -> Value {
    let level = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let archive = atlas.is_file();
    let uri = if archive || d.file.is_empty() {
        uri_of(atlas)
    } else {
        uri_of(&atlas.join(&d.file))
    };
    let mut physical = json!({"artifactLocation": {"uri": uri}});
    if let Some(line) = d.line.filter(|l| *l >= 1 && !archive) {
        physical["region"] = json!({"startLine": line});
    }
    let mut location = json!({"physicalLocation": physical});
    if !d.pointer.is_empty() {
        location["logicalLocations"] = json!([{"fullyQualifiedName": d.pointer, "kind": "member"}]);
    }
    let mut result = json!({
        "ruleId": d.code,
        "level": level,
        "message": {"text": d.message},
        "locations": [location],
    });
    if let Some(i) = rule_index {
        result["ruleIndex"] = json!(i);
    }
    if archive {
        result["properties"] = json!({"file": d.file});
    }
    result
}

/// `path` as a URI reference: relative paths stay relative (`/`-separated, no leading `./`),
/// absolute ones become `file://` URIs; every byte outside RFC 3986's unreserved set and `/`
/// is percent-encoded.
fn uri_of(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    let mut trimmed = text.as_str();
    while let Some(rest) = trimmed.strip_prefix("./") {
        trimmed = rest;
    }
    let mut out = String::with_capacity(trimmed.len() + 8);
    if path.is_absolute() {
        out.push_str("file://");
    }
    for b in trimmed.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The text report of one diagnostic of the atlas at `atlas`: its line (`file:line:
/// severity[code] at pointer: message`), then, when the atlas is a directory whose file holds
/// the value, that source drawn with the value underlined.
pub fn text(atlas: &Path, d: &Diagnostic, colour: bool) -> String {
    let mut out = format!("{}: {d}", atlas.display());
    if let Some(drawn) = Snippet::of(atlas, d).and_then(|s| s.draw(colour)) {
        // The drawing's first line is its empty heading (the line above says what is wrong).
        for line in drawn.trim_end().lines().skip(1) {
            out.push('\n');
            out.push_str(line);
        }
    }
    out
}

/// Whether reports to standard error may be coloured: it is a terminal, and `NO_COLOR` is not
/// set (no-color.org).
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// What to underline in `text`: the value at `pointer` (or the value that should hold it), unless
/// the diagnostic's `line` is another one (a syntax error is at a line, not a value): then that
/// line's text.
fn span_on_line(text: &str, pointer: &str, line: Option<usize>) -> Option<std::ops::Range<usize>> {
    let span = cra_atlas::diag::span_of_pointer_or_ancestor(text, pointer);
    match (span, line) {
        (Some(span), Some(line)) if cra_atlas::diag::line_at(text, span.start) == line => {
            Some(span)
        }
        (_, Some(line)) => {
            let start: usize = text
                .split_inclusive('\n')
                .take(line - 1)
                .map(str::len)
                .sum();
            let whole = text[start..].split('\n').next()?;
            let indent = whole.len() - whole.trim_start().len();
            Some(start + indent..start + whole.trim_end().len())
        }
        (span, None) => span,
    }
}

/// A diagnostic with its source, as `miette` draws it.
#[derive(Debug)]
struct Snippet {
    severity: Severity,
    source: miette::NamedSource<String>,
    span: miette::SourceSpan,
    label: String,
}

impl Snippet {
    /// The snippet of `d` when its file is in the directory `atlas` and holds the value (or,
    /// for a missing member, the value that should hold it); the span is cut at its first
    /// line, so a large object shows where it starts.
    fn of(atlas: &Path, d: &Diagnostic) -> Option<Self> {
        if !atlas.is_dir() {
            return None;
        }
        let text = std::fs::read_to_string(atlas.join(&d.file)).ok()?;
        let span = span_on_line(&text, &d.pointer, d.line)?;
        let line_end = text[span.clone()]
            .find('\n')
            .map_or(span.end, |n| span.start + n);
        // A did-you-mean is what the author wants beside the value; else the pointer.
        let label = d.message.rfind("did you mean").map_or_else(
            || {
                format!(
                    "at {}",
                    if d.pointer.is_empty() {
                        "(document)"
                    } else {
                        &d.pointer
                    }
                )
            },
            |at| d.message[at..].to_owned(),
        );
        Some(Self {
            severity: d.severity,
            source: miette::NamedSource::new(&d.file, text),
            span: (span.start, line_end - span.start).into(),
            label,
        })
    }

    /// The drawing: `colour` chooses the theme.
    fn draw(&self, colour: bool) -> Option<String> {
        let theme = if colour {
            miette::GraphicalTheme::unicode()
        } else {
            miette::GraphicalTheme::unicode_nocolor()
        };
        let mut out = String::new();
        miette::GraphicalReportHandler::new_themed(theme)
            .with_width(120)
            .render_report(&mut out, self)
            .ok()?;
        Some(out)
    }
}

/// Empty: the report's own line above the drawing says what is wrong, and `text` leaves out
/// the heading this would fill.
impl std::fmt::Display for Snippet {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

impl std::error::Error for Snippet {}

impl miette::Diagnostic for Snippet {
    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        let label = miette::LabeledSpan::new_primary_with_span(Some(self.label.clone()), self.span);
        Some(Box::new(std::iter::once(label)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The drawing of a misspelt key: its line and the lines around it, numbered, the key and
    /// its value underlined with the did-you-mean beside them; colour only when asked.
    #[test]
    fn a_diagnostic_is_drawn_over_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let source = "{\n  \"atlas_id\": \"x\",\n  \"verson\": \"1.0.0\",\n  \"name\": \"X\"\n}\n";
        std::fs::write(dir.path().join("atlas.json"), source).unwrap();
        let mut d = Diagnostic::error(
            "schema",
            "atlas.json",
            "/verson",
            "'verson' was unexpected; did you mean `version`?",
        );
        d.line = Some(3);
        let plain = text(dir.path(), &d, false);
        let lines: Vec<&str> = plain.lines().collect();
        assert!(lines[0].ends_with("atlas.json:3: error[schema] at /verson: 'verson' was unexpected; did you mean `version`?"), "{plain}");
        assert!(lines.contains(&" 3 │   \"verson\": \"1.0.0\","), "{plain}");
        assert!(lines.contains(&" 2 │   \"atlas_id\": \"x\","), "{plain}");
        let under = lines.iter().position(|l| l.contains("────")).unwrap();
        let column = |l: &str, c: char| l.chars().position(|x| x == c);
        assert_eq!(
            column(lines[under], '─'),
            column(lines[under - 1], '"'),
            "{plain}"
        );
        assert!(plain.contains("╰── did you mean `version`?"), "{plain}");
        assert!(!plain.contains('\u{1b}'), "{plain}");
        assert!(text(dir.path(), &d, true).contains('\u{1b}'));
        // A file that is not there (or an archive) gets the line alone.
        let mut gone = d.clone();
        gone.file = "policies/none.json".into();
        assert_eq!(text(dir.path(), &gone, false).lines().count(), 1);
    }

    #[test]
    fn paths_become_uri_references() {
        assert_eq!(
            uri_of(Path::new("./atlases/a b/x.json")),
            "atlases/a%20b/x.json"
        );
        assert_eq!(
            uri_of(Path::new("/srv/atlas#1/é.json")),
            "file:///srv/atlas%231/%C3%A9.json"
        );
        assert_eq!(
            uri_of(Path::new("policies/deny.json")),
            "policies/deny.json"
        );
    }
}
