//! Where fixtures are played, and what a target answers.
//!
//! A target materialises a fixture's `setup`, performs its `input` and returns the raw answer;
//! it never sees `expected`. Protocol errors are answers too, in one shape:
//! `{"error": "<token>", "status": <http status>}` (plus whatever the implementation adds).
//! An answer whose `error` is `not_implemented` (or a verb the target does not offer) is the
//! separate [`Outcome::NotImplemented`] category.

pub mod carp;
pub mod http;
pub mod inproc;
pub mod relay;
pub mod runtime;
pub mod ws;

use serde_json::{Map, Value, json};

use crate::fixture::{Fixture, Input};

/// What playing one fixture produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The implementation answered (possibly with a protocol error body).
    Answer(Value),
    /// The implementation does not offer this verb or capability.
    NotImplemented(String),
    /// The case could not be played (setup failed, connection refused, unreadable answer).
    Errored(String),
}

/// An implementation under test.
pub trait Target {
    /// A name for the report (`in-process`, the server URL).
    fn name(&self) -> String;
    /// The levels this implementation declares.
    fn claims(&self) -> Vec<String>;
    /// Materialises `fixture.setup`, performs `fixture.input`, returns the answer.
    fn play(&self, fixture: &Fixture) -> Outcome;
}

/// The error answer shape shared by both targets.
pub fn error_answer(token: &str, status: u16, message: impl Into<String>) -> Value {
    json!({"error": token, "status": status, "message": message.into()})
}

/// The instant a case runs at when its setup does not fix one.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// The instant a case starts at: `setup.now`, or [`DEFAULT_NOW`].
pub fn setup_now(fixture: &Fixture) -> Result<time::OffsetDateTime, String> {
    let now = fixture
        .setup
        .get("now")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_NOW);
    cra_wire::clock::parse_rfc3339(now).map_err(|e| format!("setup.now: {e}"))
}

/// The setup steps of a fixture (`setup.steps`), in order.
pub fn setup_steps(fixture: &Fixture) -> Result<Vec<Input>, String> {
    match fixture.setup.get("steps") {
        None => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("setup.steps: {e}")),
    }
}

/// Replaces every `{"$step": [i, "/pointer"]}` in `args` with the value at `pointer` in the
/// answer of setup step `i` (so an execute can name the resolution a previous step created).
pub fn resolve_step_refs(args: &Value, answers: &[Value]) -> Result<Value, String> {
    Ok(match args {
        Value::Object(o) => {
            if let (1, Some(r)) = (o.len(), o.get("$step")) {
                let i = r
                    .get(0)
                    .and_then(Value::as_u64)
                    .ok_or("$step needs [index, pointer]")?;
                let p = r.get(1).and_then(Value::as_str).unwrap_or("");
                let answer = answers
                    .get(i as usize)
                    .ok_or_else(|| format!("$step {i} refers to a step not yet played"))?;
                return answer
                    .pointer(p)
                    .cloned()
                    .ok_or_else(|| format!("$step {i} answer has nothing at {p}: {answer}"));
            }
            let mut m = Map::new();
            for (k, v) in o {
                m.insert(k.clone(), resolve_step_refs(v, answers)?);
            }
            Value::Object(m)
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|v| resolve_step_refs(v, answers))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// Turns an answer carrying `error: not_implemented` into [`Outcome::NotImplemented`].
pub fn classify(answer: Value) -> Outcome {
    if answer.get("error").and_then(Value::as_str) == Some("not_implemented") {
        let what = answer
            .get("capability")
            .or_else(|| answer.get("message"))
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_else(|| "not implemented".to_owned());
        Outcome::NotImplemented(what)
    } else {
        Outcome::Answer(answer)
    }
}
