//! Field-level redaction (CRA §8.3, `specs/redaction.md`): rules, the operator's
//! (`[[redaction.rules]]`) and an atlas's (the manifest's `redaction`), that replace values of an
//! agent's request before anything of it is decided, recorded or answered.
//!
//! A rule is a JSON pointer (`/execution/parameters/card`, `*` standing for any one member or
//! index) whose value is replaced whole, or a regular expression whose matches are replaced
//! inside every string. Either way the replacement is the string [`REDACTED`]: a member is never
//! removed, so the request keeps its shape. Rules reach only the parts of a request that carry
//! an agent's free content ([`REQUEST_ROOTS`], [`SESSION_ROOTS`]), and an executor's result
//! ([`RESULT_ROOTS`]); ids, timestamps, operations and capabilities are out of their reach, so no
//! rule can make a request name another session.

use std::borrow::Cow;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a redacted value (or a redacted part of a string) becomes.
pub const REDACTED: &str = "[REDACTED]";

/// The parts of a CARP request rules reach: the task's goal, hints and intended parameters, the
/// request's context, an execute's parameters.
pub const REQUEST_ROOTS: &[&str] = &[
    "/task/goal",
    "/task/context_hints",
    "/task/intended_parameters",
    "/context",
    "/execution/parameters",
];

/// The parts of a session's opening rules reach: its goal.
pub const SESSION_ROOTS: &[&str] = &["/goal"];

/// The part of an execute's outcome rules reach: the executor's result, as `/result` (the
/// answer's member).
pub const RESULT_ROOTS: &[&str] = &["/result"];

/// Roots whose value is a string: a pointer rule may name them exactly. Under any other root a
/// rule must name a member or index, so that the root keeps its type.
const TEXT_ROOTS: &[&str] = &["/task/goal", "/goal"];

/// One redaction rule: a `pointer` or a `pattern`, and the `reason` recorded for each value it
/// replaces (`context.redacted`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionRule {
    /// A JSON pointer into the request (`/execution/parameters/card`; `*` is any one member or
    /// index) whose value is replaced whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// A regular expression whose matches are replaced inside every string the rules reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Why (recorded as `redaction_reason`).
    pub reason: String,
}

/// A rule that cannot be used: which (its index) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule {index}: {message}")]
pub struct RuleError {
    /// The rule's index in its list.
    pub index: usize,
    /// What is wrong with it.
    pub message: String,
}

/// One value replaced: where, and the rule's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redaction {
    /// The JSON pointer of the value in the body.
    pub pointer: String,
    /// The reason of the rule that replaced it.
    pub reason: String,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// Pointer segments, unescaped; `*` is any one member or index.
    Pointer(Vec<String>),
    Pattern(Regex),
}

#[derive(Debug, Clone)]
struct Rule {
    matcher: Matcher,
    reason: String,
}

/// The rules in force; empty unless configured.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    rules: Vec<Rule>,
}

impl Redactor {
    /// These rules, compiled.
    ///
    /// # Errors
    /// A rule with both or neither of `pointer` and `pattern`, an empty reason, a pointer outside
    /// the reachable roots (or naming an object root whole), or a pattern that does not compile;
    /// the first such rule.
    pub fn new(rules: &[RedactionRule]) -> Result<Self, RuleError> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(index, r)| {
                let bad = |message: String| RuleError { index, message };
                if r.reason.trim().is_empty() {
                    return Err(bad("`reason` must say why (it is recorded)".into()));
                }
                let matcher = match (&r.pointer, &r.pattern) {
                    (Some(p), None) => Matcher::Pointer(parse_pointer(p).map_err(bad)?),
                    (None, Some(p)) => Matcher::Pattern(
                        Regex::new(p)
                            .map_err(|e| bad(format!("`pattern` does not compile: {e}")))?,
                    ),
                    _ => return Err(bad("give exactly one of `pointer` and `pattern`".into())),
                };
                Ok(Rule {
                    matcher,
                    reason: r.reason.clone(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// These rules followed by `more`'s.
    #[must_use]
    pub fn and(&self, more: &Redactor) -> Redactor {
        Redactor {
            rules: self.rules.iter().chain(&more.rules).cloned().collect(),
        }
    }

    /// Whether no rule is configured (nothing is ever redacted).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// `body` with the rules applied under `roots`, and what they replaced; `body` is copied
    /// only when there are rules.
    pub fn apply<'b>(&self, body: &'b Value, roots: &[&str]) -> (Cow<'b, Value>, Vec<Redaction>) {
        if self.is_empty() {
            return (Cow::Borrowed(body), Vec::new());
        }
        let mut copy = body.clone();
        let found = self.redact(&mut copy, roots);
        if found.is_empty() {
            (Cow::Borrowed(body), found)
        } else {
            (Cow::Owned(copy), found)
        }
    }

    /// Replaces, in `body`, every value a rule names under `roots`; answers each replacement in
    /// rule order. A value already [`REDACTED`] is not counted again.
    pub fn redact(&self, body: &mut Value, roots: &[&str]) -> Vec<Redaction> {
        let mut out = Vec::new();
        for rule in &self.rules {
            let mut found = |pointer: String| {
                out.push(Redaction {
                    pointer,
                    reason: rule.reason.clone(),
                });
            };
            match &rule.matcher {
                Matcher::Pointer(segments) => {
                    let pointer = join(segments);
                    if roots.iter().any(|r| under(&pointer, r)) {
                        replace_at(body, segments, String::new(), &mut found);
                    }
                }
                Matcher::Pattern(re) => {
                    for root in roots {
                        if let Some(v) = body.pointer_mut(root) {
                            replace_matches(v, re, (*root).to_owned(), &mut found);
                        }
                    }
                }
            }
        }
        out
    }
}

/// Whether `pointer` (with `*` segments) is `root` or below it.
fn under(pointer: &str, root: &str) -> bool {
    pointer == root || pointer.starts_with(&format!("{root}/"))
}

fn parse_pointer(text: &str) -> Result<Vec<String>, String> {
    let Some(rest) = text.strip_prefix('/') else {
        return Err(format!(
            "`pointer` = `{text}` is not a JSON pointer (it starts with `/`)"
        ));
    };
    let segments: Vec<String> = rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let pointer = join(&segments);
    let reachable = REQUEST_ROOTS
        .iter()
        .chain(SESSION_ROOTS)
        .chain(RESULT_ROOTS)
        .any(|root| under(&pointer, root) && (pointer != *root || TEXT_ROOTS.contains(root)));
    if !reachable {
        return Err(format!(
            "`pointer` = `{text}` is outside what rules may redact: {} or a member below {}",
            TEXT_ROOTS.join(", "),
            REQUEST_ROOTS
                .iter()
                .chain(RESULT_ROOTS)
                .filter(|r| !TEXT_ROOTS.contains(r))
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(segments)
}

fn join(segments: &[String]) -> String {
    segments
        .iter()
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Replaces every value `segments` names below `value` (at `at`).
fn replace_at(value: &mut Value, segments: &[String], at: String, found: &mut dyn FnMut(String)) {
    let Some((first, rest)) = segments.split_first() else {
        if value.as_str() != Some(REDACTED) {
            *value = Value::String(REDACTED.to_owned());
            found(at);
        }
        return;
    };
    let escaped = |k: &str| format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if first == "*" || k == first {
                    replace_at(v, rest, escaped(k), found);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                if first == "*" || *first == i.to_string() {
                    replace_at(v, rest, format!("{at}/{i}"), found);
                }
            }
        }
        _ => {}
    }
}

/// Replaces the matches of `re` in every string at or below `value` (at `at`).
fn replace_matches(value: &mut Value, re: &Regex, at: String, found: &mut dyn FnMut(String)) {
    match value {
        Value::String(s) => {
            let replaced = re.replace_all(s, REDACTED);
            if replaced != s.as_str() {
                *s = replaced.into_owned();
                found(at);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let at = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                replace_matches(v, re, at, found);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                replace_matches(v, re, format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn redactor(rules: &[(&str, &str)]) -> Result<Redactor, RuleError> {
        let rules: Vec<RedactionRule> = rules
            .iter()
            .map(|(kind, text)| RedactionRule {
                pointer: (*kind == "pointer").then(|| (*text).to_owned()),
                pattern: (*kind == "pattern").then(|| (*text).to_owned()),
                reason: "test".into(),
            })
            .collect();
        Redactor::new(&rules)
    }

    #[test]
    fn pointers_replace_whole_values_and_patterns_replace_matches_under_the_roots_only() {
        let r = redactor(&[
            ("pointer", "/execution/parameters/card"),
            ("pointer", "/execution/parameters/rows/*/ssn"),
            ("pattern", "sk-[a-z0-9]{8}"),
        ])
        .unwrap();
        let mut body = json!({
            "request_id": "sk-abcdefgh",
            "execution": {"action_id": "pay", "parameters": {
                "card": 4111111111111111u64, "note": "key sk-abcdefgh and sk-12345678",
                "rows": [{"ssn": "1"}, {"ssn": "2", "x": 1}]}},
        });
        let found = r.redact(&mut body, REQUEST_ROOTS);
        let params = &body["execution"]["parameters"];
        assert_eq!(params["card"], REDACTED);
        assert_eq!(params["rows"][1]["ssn"], REDACTED);
        assert_eq!(params["rows"][1]["x"], 1, "siblings stay");
        assert_eq!(params["note"], "key [REDACTED] and [REDACTED]");
        assert_eq!(body["request_id"], "sk-abcdefgh", "ids are out of reach");
        let pointers: Vec<_> = found.iter().map(|f| f.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/execution/parameters/card",
                "/execution/parameters/rows/0/ssn",
                "/execution/parameters/rows/1/ssn",
                "/execution/parameters/note"
            ]
        );
        assert!(r.redact(&mut body, REQUEST_ROOTS).is_empty(), "idempotent");
    }

    #[test]
    fn rules_that_could_break_a_request_are_refused_at_start() {
        for (kind, text, says) in [
            ("pointer", "/requester/session_id", "outside"),
            ("pointer", "/execution/parameters", "outside"),
            ("pointer", "execution", "JSON pointer"),
            ("pattern", "(", "does not compile"),
        ] {
            let e = redactor(&[(kind, text)]).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("rule 0"), "{text}: {e}");
        }
        assert!(redactor(&[("pointer", "/task/goal"), ("pointer", "/goal")]).is_ok());
        assert!(redactor(&[("pointer", "/result/token")]).is_ok());
        assert!(
            redactor(&[("pointer", "/result")]).is_err(),
            "the result root whole"
        );
        assert!(redactor(&[]).unwrap().is_empty());
    }
}
