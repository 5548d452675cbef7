//! How `cra atlas check` reports its diagnostics beyond JSON (issue 31, item 6): as SARIF 2.1.0
//! (OASIS), which code-review tools read (GitHub code scanning, editors' SARIF viewers), and as
//! text with the offending source line under each diagnostic.
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
/// severity[code] at pointer: message`), then, when the line is known and the atlas is a
/// directory, that source line under a gutter with its number.
pub fn text(atlas: &Path, d: &Diagnostic) -> String {
    let mut out = format!("{}: {d}", atlas.display());
    if let Some(source) = d
        .line
        .filter(|_| atlas.is_dir())
        .and_then(|line| source_line(&atlas.join(&d.file), line).map(|s| (line, s)))
    {
        let (line, text) = source;
        let width = line.to_string().len();
        let _ = write!(out, "\n {line:>width$} | {text}");
    }
    out
}

/// Line `line` (1-based) of the file at `path`, without its end and at most 200 characters.
fn source_line(path: &Path, line: usize) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let found = text.lines().nth(line.checked_sub(1)?)?;
    let mut shown: String = found.chars().take(200).collect();
    if found.chars().count() > 200 {
        shown.push_str(" ...");
    }
    Some(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

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
