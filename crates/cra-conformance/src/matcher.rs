//! The partial structural matcher the runner applies to every answer.
//!
//! Rules (documented in `conformance/README.md`):
//! * an expected object matches an actual object when every listed key matches (other keys of
//!   the answer are ignored); a key whose expected value is `{"$absent": true}` must be missing;
//! * an expected array matches an actual array of the same length, element by element;
//! * numbers compare by value (`1` equals `1.0`), other scalars by equality;
//! * a matcher object is an object with exactly one key starting with `$`:
//!   `{"$any": "string"|"number"|"integer"|"boolean"|"object"|"array"|"null"|"any"}` (type only),
//!   `{"$prefix": "sha256:"}`, `{"$present": true}`, `{"$absent": true}`,
//!   `{"$unordered": [...]}` (same length, each element matched by a distinct actual element),
//!   `{"$contains": [...]}` (each element matched by a distinct actual element, others ignored),
//!   `{"$none": pattern}` (an array no element of which matches the pattern),
//!   `{"$range": [lo, hi]}` (inclusive number range), `{"$len": n}` (array, object or string
//!   length), `{"$eq": value}` (exact equality, no partial matching), `{"$instant": "<RFC 3339>"}`
//!   (a timestamp naming the same instant, however rendered), `{"$same": "/pointer"}` (exactly the
//!   value at that pointer of the whole answer: two places of one answer agree, as a cached
//!   resolution's id and the id its trace completed); `$regex` is not offered on purpose
//!   (fixtures stay readable).

use serde_json::Value;

/// The matcher keys, as documented.
pub const MATCHERS: &[&str] = &[
    "$any",
    "$prefix",
    "$present",
    "$absent",
    "$unordered",
    "$contains",
    "$none",
    "$range",
    "$len",
    "$eq",
    "$instant",
    "$same",
];

/// One difference between expected and actual.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// JSON pointer into the answer.
    pub pointer: String,
    /// What was expected there.
    pub expected: String,
    /// What was found (`<missing>` when absent).
    pub actual: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        write!(
            f,
            "at {at}: expected {}, got {}",
            self.expected, self.actual
        )
    }
}

/// Matches `actual` against the pattern `expected`; returns every difference (empty = match).
pub fn match_value(expected: &Value, actual: &Value) -> Vec<Mismatch> {
    let mut out = Vec::new();
    walk(&bind_same(expected, actual), Some(actual), "", &mut out);
    out
}

/// `expected` with every `{"$same": "/pointer"}` whose pointer names a value of `root` replaced
/// by `{"$eq": that value}`; one naming nothing stays, and fails where it is matched.
fn bind_same(expected: &Value, root: &Value) -> Value {
    match expected {
        Value::Object(o) => {
            if let Some(("$same", arg)) = matcher_of(expected)
                && let Some(v) = arg.as_str().and_then(|p| root.pointer(p))
            {
                return serde_json::json!({"$eq": v});
            }
            let bound = o
                .iter()
                .map(|(k, v)| (k.clone(), bind_same(v, root)))
                .collect();
            Value::Object(bound)
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| bind_same(v, root)).collect()),
        other => other.clone(),
    }
}

/// Whether the pattern matches.
pub fn matches(expected: &Value, actual: &Value) -> bool {
    match_value(expected, actual).is_empty()
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 200 {
        let cut: String = s.chars().take(200).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The matcher key of `v`, if `v` is a matcher object.
fn matcher_of(v: &Value) -> Option<(&str, &Value)> {
    let obj = v.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    let (k, arg) = obj.iter().next()?;
    MATCHERS.contains(&k.as_str()).then_some((k.as_str(), arg))
}

fn mismatch(out: &mut Vec<Mismatch>, pointer: &str, expected: String, actual: Option<&Value>) {
    out.push(Mismatch {
        pointer: pointer.to_owned(),
        expected,
        actual: actual.map_or_else(|| "<missing>".to_owned(), short),
    });
}

fn number_eq(a: &Value, b: &Value) -> bool {
    let (Some(x), Some(y)) = (a.as_number(), b.as_number()) else {
        return false;
    };
    if x.to_string() == y.to_string() {
        return true;
    }
    match (x.as_i64(), y.as_i64()) {
        (Some(i), Some(j)) => i == j,
        _ => match (x.as_f64(), y.as_f64()) {
            (Some(f), Some(g)) => f == g,
            _ => false,
        },
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn walk(expected: &Value, actual: Option<&Value>, ptr: &str, out: &mut Vec<Mismatch>) {
    if let Some((m, arg)) = matcher_of(expected) {
        apply(m, arg, actual, ptr, out);
        return;
    }
    let Some(actual) = actual else {
        mismatch(out, ptr, short(expected), None);
        return;
    };
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                walk(ev, a.get(k), &format!("{ptr}/{}", escape(k)), out);
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                mismatch(
                    out,
                    ptr,
                    format!("an array of {} elements {}", e.len(), short(expected)),
                    Some(actual),
                );
                return;
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                walk(ev, Some(av), &format!("{ptr}/{i}"), out);
            }
        }
        (Value::Number(_), Value::Number(_)) => {
            if !number_eq(expected, actual) {
                mismatch(out, ptr, short(expected), Some(actual));
            }
        }
        _ => {
            if expected != actual {
                mismatch(out, ptr, short(expected), Some(actual));
            }
        }
    }
}

fn apply(m: &str, arg: &Value, actual: Option<&Value>, ptr: &str, out: &mut Vec<Mismatch>) {
    match m {
        "$absent" => {
            if actual.is_some() {
                mismatch(out, ptr, "no such member".to_owned(), actual);
            }
        }
        "$present" => {
            if actual.is_none() {
                mismatch(out, ptr, "a member (any value)".to_owned(), None);
            }
        }
        "$any" => {
            let want = arg.as_str().unwrap_or("any");
            let ok = actual.is_some_and(|a| match want {
                "any" => true,
                "integer" => a.as_i64().is_some() || a.as_u64().is_some(),
                t => type_name(a) == t,
            });
            if !ok {
                mismatch(out, ptr, format!("any {want}"), actual);
            }
        }
        "$prefix" => {
            let p = arg.as_str().unwrap_or_default();
            if !actual
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with(p))
            {
                mismatch(out, ptr, format!("a string starting with {p:?}"), actual);
            }
        }
        "$instant" => {
            let want = arg
                .as_str()
                .and_then(|t| cra_wire::clock::parse_rfc3339(t).ok());
            let got = actual
                .and_then(Value::as_str)
                .and_then(|t| cra_wire::clock::parse_rfc3339(t).ok());
            if want.is_none() || want != got {
                mismatch(out, ptr, format!("the instant {arg}"), actual);
            }
        }
        "$same" => {
            let at = arg.as_str().unwrap_or_default();
            mismatch(
                out,
                ptr,
                format!("the value at {at}, which the answer lacks"),
                actual,
            );
        }
        "$eq" => {
            if actual != Some(arg) {
                mismatch(out, ptr, format!("exactly {}", short(arg)), actual);
            }
        }
        "$range" => {
            let lo = arg
                .get(0)
                .and_then(Value::as_f64)
                .unwrap_or(f64::NEG_INFINITY);
            let hi = arg.get(1).and_then(Value::as_f64).unwrap_or(f64::INFINITY);
            if !actual
                .and_then(Value::as_f64)
                .is_some_and(|x| lo <= x && x <= hi)
            {
                mismatch(out, ptr, format!("a number in [{lo}, {hi}]"), actual);
            }
        }
        "$len" => {
            let n = arg.as_u64().unwrap_or(u64::MAX);
            let len = actual.and_then(|a| match a {
                Value::Array(v) => Some(v.len()),
                Value::Object(o) => Some(o.len()),
                Value::String(s) => Some(s.chars().count()),
                _ => None,
            });
            if len.map(|l| l as u64) != Some(n) {
                mismatch(out, ptr, format!("length {n}"), actual);
            }
        }
        "$unordered" | "$contains" => {
            let want = arg.as_array().map(Vec::as_slice).unwrap_or_default();
            let Some(have) = actual.and_then(Value::as_array) else {
                mismatch(out, ptr, format!("an array {m} {}", short(arg)), actual);
                return;
            };
            if m == "$unordered" && want.len() != have.len() {
                mismatch(
                    out,
                    ptr,
                    format!(
                        "an array of {} elements (any order) {}",
                        want.len(),
                        short(arg)
                    ),
                    actual,
                );
                return;
            }
            let mut used = vec![false; have.len()];
            if !assign(want, have, &mut used) {
                let what = if m == "$unordered" {
                    "these elements in any order"
                } else {
                    "an array containing"
                };
                mismatch(out, ptr, format!("{what} {}", short(arg)), actual);
            }
        }
        "$none" => {
            let Some(have) = actual.and_then(Value::as_array) else {
                mismatch(out, ptr, format!("an array with no {}", short(arg)), actual);
                return;
            };
            if let Some(i) = have.iter().position(|a| matches(arg, a)) {
                let at = format!("{ptr}/{i}");
                mismatch(
                    out,
                    &at,
                    format!("no element matching {}", short(arg)),
                    have.get(i),
                );
            }
        }
        _ => mismatch(out, ptr, format!("a known matcher, not {m}"), actual),
    }
}

/// Finds distinct actual elements matching each expected element (backtracking; arrays in
/// fixtures are small).
fn assign(want: &[Value], have: &[Value], used: &mut [bool]) -> bool {
    let Some((first, rest)) = want.split_first() else {
        return true;
    };
    for i in 0..have.len() {
        if !used[i] && matches(first, &have[i]) {
            used[i] = true;
            if assign(rest, have, used) {
                return true;
            }
            used[i] = false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_matches_the_value_at_another_place_of_the_answer() {
        let actual = json!({"id": "r1", "events": [{"of": "r1"}, {"of": "r2"}]});
        assert!(matches(&json!({"id": {"$same": "/events/0/of"}}), &actual));
        let wrong = match_value(&json!({"id": {"$same": "/events/1/of"}}), &actual);
        assert_eq!(wrong.len(), 1, "{wrong:?}");
        assert_eq!(wrong[0].pointer, "/id");
        let nowhere = match_value(&json!({"id": {"$same": "/nothing"}}), &actual);
        assert!(nowhere[0].expected.contains("/nothing"), "{nowhere:?}");
    }

    #[test]
    fn partial_objects_and_matchers() {
        let actual = json!({"a": 1, "b": "sha256:ab", "c": [3, 1, 2], "d": {"x": true, "y": null}});
        assert!(matches(&json!({"a": 1.0}), &actual));
        assert!(matches(
            &json!({"b": {"$prefix": "sha256:"}, "z": {"$absent": true}}),
            &actual
        ));
        assert!(matches(
            &json!({"c": {"$unordered": [1, 2, 3]}, "d": {"x": {"$any": "boolean"}}}),
            &actual
        ));
        assert!(matches(
            &json!({"c": {"$contains": [2]}, "a": {"$range": [0, 1]}, "c2": {"$absent": true}}),
            &actual
        ));
        assert!(!matches(&json!({"c": [1, 2, 3]}), &actual));
        assert!(!matches(&json!({"c": {"$unordered": [1, 2, 2]}}), &actual));
        assert!(!matches(&json!({"a": {"$absent": true}}), &actual));
        assert!(!matches(&json!({"q": {"$present": true}}), &actual));
        assert!(!matches(&json!({"d": {"$eq": {"x": true}}}), &actual));
        assert!(matches(&json!({"c": {"$len": 3}}), &actual));
        let m = match_value(&json!({"d": {"x": false}}), &actual);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].pointer, "/d/x");
    }

    #[test]
    fn none_refuses_an_array_holding_a_matching_element_and_names_it() {
        let actual = json!({"events": [{"t": "a", "n": 1}, {"t": "b", "n": 2}]});
        assert!(matches(&json!({"events": {"$none": {"t": "c"}}}), &actual));
        let m = match_value(&json!({"events": {"$none": {"t": "b"}}}), &actual);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].pointer, "/events/1");
        // Not an array: no claim about its elements holds.
        assert!(!matches(&json!({"n": {"$none": 1}}), &json!({"n": 1})));
    }
}
