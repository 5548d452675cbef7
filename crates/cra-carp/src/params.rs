//! Conditions on a call's parameters (`conditions.parameters`): a list of tests, each an RFC 6901
//! pointer into the execute's `parameters` and one or more operators, all of which must hold.
//!
//! The invariant every operator keeps: **a pointer to an absent member never satisfies a
//! condition**, whatever the operator (`not_in` included), so a deny written on `/branch` cannot
//! be slipped past by leaving the member out, and an allow on it is never granted by omission.
//! A member of the wrong type (a string compared with `gt`) does not satisfy it either.
//!
//! One list compiles from the JSON the atlas author wrote ([`ParamConditions::compile`]); the
//! same JSON travels in a resolution's `parameters` constraint and is compiled again at execute,
//! so an execute decides from the resolution alone, as every other constraint does.

use std::cmp::Ordering;

use serde_json::{Number, Value};

use crate::index::AgentGlob;

/// The longest regex source a condition may hold, and the compiled size it may reach: a policy's
/// regex is the author's, but a hostile atlas must not make every execute slow.
const REGEX_MAX_LEN: usize = 1024;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The operators, in the order they are documented and explained (every member of a test but
/// its `pointer`).
pub const OPERATORS: &[&str] = cra_atlas::model::PARAMETER_TEST_MEMBERS.split_at(1).1;

/// One operator of a test, compiled.
#[derive(Debug, Clone)]
enum Op {
    Equals(Value),
    In(Vec<Value>),
    NotIn(Vec<Value>),
    Matches(Vec<AgentGlob>),
    Prefix(Vec<String>),
    Compare(Ordering, bool, Number),
    Regex(Box<regex::Regex>),
}

/// One test: a pointer and the operators that must all hold on the member it points to.
#[derive(Debug, Clone)]
struct Test {
    pointer: String,
    ops: Vec<Op>,
}

/// A compiled `conditions.parameters` list, with the JSON it came from.
#[derive(Debug, Clone)]
pub struct ParamConditions {
    tests: Vec<Test>,
    written: Value,
}

impl PartialEq for ParamConditions {
    fn eq(&self, other: &Self) -> bool {
        self.written == other.written
    }
}

/// Why a parameters condition does not compile: the JSON pointer inside the list and what is
/// wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamConditionError {
    /// Pointer relative to the list (e.g. `/0/gt`).
    pub pointer: String,
    /// What is wrong, as a sentence fragment.
    pub message: String,
}

/// A compile error at `pointer` (relative to the list).
pub(crate) fn err(pointer: String, message: impl Into<String>) -> ParamConditionError {
    ParamConditionError {
        pointer,
        message: message.into(),
    }
}

/// True when `p` is an RFC 6901 pointer: empty, or `/`-separated tokens where `~` is only
/// followed by `0` or `1`.
pub fn is_json_pointer(p: &str) -> bool {
    if p.is_empty() {
        return true;
    }
    if !p.starts_with('/') {
        return false;
    }
    let b = p.as_bytes();
    b.iter()
        .enumerate()
        .all(|(i, c)| *c != b'~' || matches!(b.get(i + 1), Some(b'0' | b'1')))
}

fn strings(v: &Value, at: &str) -> Result<Vec<String>, ParamConditionError> {
    let list: Vec<&Value> = match v {
        Value::String(_) => vec![v],
        Value::Array(a) if !a.is_empty() => a.iter().collect(),
        _ => {
            return Err(err(
                at.to_owned(),
                "must be a string or a non-empty array of strings",
            ));
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| err(format!("{at}/{i}"), "must be a string"))
        })
        .collect()
}

fn values(v: &Value, at: &str) -> Result<Vec<Value>, ParamConditionError> {
    match v {
        Value::Array(a) if !a.is_empty() => Ok(a.clone()),
        _ => Err(err(at.to_owned(), "must be a non-empty array of values")),
    }
}

fn compile_op(name: &str, v: &Value, at: &str) -> Result<Op, ParamConditionError> {
    let number = || match v {
        Value::Number(n) => Ok(n.clone()),
        _ => Err(err(at.to_owned(), "must be a number")),
    };
    Ok(match name {
        "equals" => Op::Equals(v.clone()),
        "in" => Op::In(values(v, at)?),
        "not_in" => Op::NotIn(values(v, at)?),
        "matches" => Op::Matches(strings(v, at)?.iter().map(|g| AgentGlob::new(g)).collect()),
        "prefix" => Op::Prefix(strings(v, at)?),
        "gt" => Op::Compare(Ordering::Greater, false, number()?),
        "gte" => Op::Compare(Ordering::Greater, true, number()?),
        "lt" => Op::Compare(Ordering::Less, false, number()?),
        "lte" => Op::Compare(Ordering::Less, true, number()?),
        "regex" => {
            let src = v
                .as_str()
                .ok_or_else(|| err(at.to_owned(), "must be a string"))?;
            if src.len() > REGEX_MAX_LEN {
                return Err(err(
                    at.to_owned(),
                    format!("is longer than {REGEX_MAX_LEN} bytes"),
                ));
            }
            let re = regex::RegexBuilder::new(&format!("^(?:{src})$"))
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| err(at.to_owned(), format!("is not a valid regex: {e}")))?;
            Op::Regex(Box::new(re))
        }
        _ => {
            return Err(err(
                at.to_owned(),
                format!(
                    "is not an operator; use pointer with one or more of {}",
                    OPERATORS.join(", ")
                ),
            ));
        }
    })
}

impl ParamConditions {
    /// Compiles the list as written in `conditions.parameters` (or in a constraint's `when`).
    pub fn compile(written: &Value) -> Result<Self, ParamConditionError> {
        let Some(list) = written.as_array().filter(|l| !l.is_empty()) else {
            return Err(err(String::new(), "must be a non-empty array of tests"));
        };
        let mut tests = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let Some(obj) = t.as_object() else {
                return Err(err(format!("/{i}"), "must be an object with a pointer"));
            };
            let pointer = match obj.get("pointer") {
                Some(Value::String(p)) if is_json_pointer(p) => p.clone(),
                Some(_) => {
                    return Err(err(
                        format!("/{i}/pointer"),
                        "must be an RFC 6901 JSON pointer into the parameters, like /branch",
                    ));
                }
                None => return Err(err(format!("/{i}"), "has no pointer")),
            };
            let mut ops = Vec::new();
            for (k, v) in obj {
                if k == "pointer" || k.starts_with("x-") {
                    continue;
                }
                ops.push(compile_op(k, v, &format!("/{i}/{k}"))?);
            }
            if ops.is_empty() {
                return Err(err(
                    format!("/{i}"),
                    format!("has no operator; add one of {}", OPERATORS.join(", ")),
                ));
            }
            tests.push(Test { pointer, ops });
        }
        Ok(Self {
            tests,
            written: written.clone(),
        })
    }

    /// The list as written, for constraints and explanations.
    pub fn written(&self) -> &Value {
        &self.written
    }

    /// True when every test holds on `parameters`.
    pub fn holds(&self, parameters: &Value) -> bool {
        self.tests.iter().all(|t| t.holds(parameters))
    }

    /// The pointers tested, in order, for explanations.
    pub fn pointers(&self) -> Vec<&str> {
        self.tests.iter().map(|t| t.pointer.as_str()).collect()
    }
}

impl Test {
    fn holds(&self, parameters: &Value) -> bool {
        // An absent member satisfies nothing: checked before any operator.
        let Some(v) = parameters.pointer(&self.pointer) else {
            return false;
        };
        self.ops.iter().all(|op| op.holds(v))
    }
}

impl Op {
    fn holds(&self, v: &Value) -> bool {
        match self {
            Op::Equals(want) => same(v, want),
            Op::In(list) => list.iter().any(|w| same(v, w)),
            Op::NotIn(list) => !list.iter().any(|w| same(v, w)),
            Op::Matches(globs) => v
                .as_str()
                .is_some_and(|s| globs.iter().any(|g| g.matches(s))),
            Op::Prefix(ps) => v
                .as_str()
                .is_some_and(|s| ps.iter().any(|p| s.starts_with(p.as_str()))),
            Op::Compare(side, or_equal, bound) => match v {
                Value::Number(n) => compare(n, bound)
                    .is_some_and(|o| o == *side || (*or_equal && o == Ordering::Equal)),
                _ => false,
            },
            Op::Regex(re) => v.as_str().is_some_and(|s| re.is_match(s)),
        }
    }
}

/// JSON equality where numbers compare by value (`500` equals `500.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare(x, y) == Some(Ordering::Equal),
        _ => a == b,
    }
}

/// Orders two JSON numbers exactly when both are integers, else as `f64`.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    let int = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(a), int(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn holds(cond: Value, params: Value) -> bool {
        ParamConditions::compile(&cond).unwrap().holds(&params)
    }

    #[test]
    fn protected_branches_by_glob() {
        let c = json!([{"pointer": "/branch", "matches": ["main", "release/*"]}]);
        for (branch, want) in [
            ("main", true),
            ("release/1.2", true),
            ("release/", true),
            ("maintenance", false),
            ("mainline-docs", false),
            ("feature/main", false),
            ("Main", false),
        ] {
            assert_eq!(
                holds(c.clone(), json!({"branch": branch})),
                want,
                "{branch}"
            );
        }
    }

    #[test]
    fn absent_member_never_satisfies() {
        for c in [
            json!([{"pointer": "/x", "equals": null}]),
            json!([{"pointer": "/x", "not_in": [1]}]),
            json!([{"pointer": "/x", "lt": 10}]),
            json!([{"pointer": "/x", "regex": ".*"}]),
            json!([{"pointer": "/x/y", "prefix": ""}]),
        ] {
            assert!(!holds(c.clone(), json!({})), "{c}");
            assert!(!holds(c, json!({"other": 1})));
        }
        assert!(holds(
            json!([{"pointer": "/x", "equals": null}]),
            json!({"x": null})
        ));
    }

    #[test]
    fn numbers_compare_by_value() {
        let over = json!([{"pointer": "/amount", "gt": 500}]);
        for (amount, want) in [
            (json!(500), false),
            (json!(500.0), false),
            (json!(500.01), true),
            (json!(501), true),
            (json!(-1), false),
            (json!("600"), false),
            (json!(u64::MAX), true),
        ] {
            assert_eq!(
                holds(over.clone(), json!({"amount": amount})),
                want,
                "{amount}"
            );
        }
        let range = json!([{"pointer": "/n", "gte": 1, "lt": 3}]);
        assert!(!holds(range.clone(), json!({"n": 0})));
        assert!(holds(range.clone(), json!({"n": 1})));
        assert!(holds(range.clone(), json!({"n": 2.5})));
        assert!(!holds(range, json!({"n": 3})));
        assert!(holds(
            json!([{"pointer": "/n", "equals": 2}]),
            json!({"n": 2.0})
        ));
        assert!(holds(
            json!([{"pointer": "/n", "lt": -5}]),
            json!({"n": i64::MIN})
        ));
    }

    #[test]
    fn membership_prefix_and_regex() {
        let c = json!([{"pointer": "/env", "in": ["prod", "staging"]}]);
        assert!(holds(c.clone(), json!({"env": "prod"})));
        assert!(!holds(c, json!({"env": "dev"})));
        let n = json!([{"pointer": "/env", "not_in": ["prod"]}]);
        assert!(holds(n.clone(), json!({"env": "dev"})));
        assert!(!holds(n, json!({"env": "prod"})));
        let p = json!([{"pointer": "/path", "prefix": ["/etc/", "/root/"]}]);
        assert!(holds(p.clone(), json!({"path": "/etc/passwd"})));
        assert!(!holds(p, json!({"path": "/home/etc/"})));
        // A regex matches the whole string, so `main` does not match `maintenance`.
        let r = json!([{"pointer": "/branch", "regex": "main|release/.+"}]);
        assert!(holds(r.clone(), json!({"branch": "main"})));
        assert!(holds(r.clone(), json!({"branch": "release/2"})));
        assert!(!holds(r, json!({"branch": "maintenance"})));
        // Pointers escape `/` and `~`.
        let e = json!([{"pointer": "/a~1b/c~0d", "equals": 1}]);
        assert!(holds(e, json!({"a/b": {"c~d": 1}})));
        let arr = json!([{"pointer": "/items/1", "equals": "b"}]);
        assert!(holds(arr, json!({"items": ["a", "b"]})));
    }

    #[test]
    fn every_listed_operator_is_implemented() {
        for op in OPERATORS {
            let value = match *op {
                "gt" | "gte" | "lt" | "lte" => json!(1),
                "in" | "not_in" => json!([1]),
                _ => json!("x"),
            };
            let written = json!([{"pointer": "/a", (*op): value}]);
            assert!(ParamConditions::compile(&written).is_ok(), "{op}");
        }
    }

    #[test]
    fn a_regex_at_the_length_bound_compiles() {
        let at_bound = json!([{"pointer": "/a", "regex": "a".repeat(REGEX_MAX_LEN)}]);
        assert!(holds(at_bound, json!({"a": "a".repeat(REGEX_MAX_LEN)})));
    }

    #[test]
    fn every_test_must_hold() {
        let c = json!([
            {"pointer": "/amount", "gt": 500},
            {"pointer": "/currency", "equals": "EUR"}
        ]);
        assert!(holds(c.clone(), json!({"amount": 600, "currency": "EUR"})));
        assert!(!holds(c, json!({"amount": 600, "currency": "USD"})));
    }

    #[test]
    fn bad_lists_name_their_pointer() {
        for (c, pointer) in [
            (json!([]), ""),
            (json!({}), ""),
            (json!([1]), "/0"),
            (json!([{"equals": 1}]), "/0"),
            (json!([{"pointer": "branch", "equals": 1}]), "/0/pointer"),
            (json!([{"pointer": "/a~2", "equals": 1}]), "/0/pointer"),
            (json!([{"pointer": "/a"}]), "/0"),
            (json!([{"pointer": "/a", "like": "x"}]), "/0/like"),
            (json!([{"pointer": "/a", "gt": "5"}]), "/0/gt"),
            (json!([{"pointer": "/a", "in": []}]), "/0/in"),
            (json!([{"pointer": "/a", "matches": [1]}]), "/0/matches/0"),
            (json!([{"pointer": "/a", "regex": "("}]), "/0/regex"),
            (
                json!([{"pointer": "/a", "regex": "a".repeat(REGEX_MAX_LEN + 1)}]),
                "/0/regex",
            ),
        ] {
            let e = ParamConditions::compile(&c).unwrap_err();
            assert_eq!(e.pointer, pointer, "{c}: {}", e.message);
        }
    }
}
