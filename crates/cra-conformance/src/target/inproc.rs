//! The in-process target: plays fixtures by calling the cra crates directly, with a fixed clock
//! and deterministic ids from the fixture's `setup`.
//!
//! Verbs whose area has no public API yet answer `not_implemented` (visible in the report, never a
//! pass). [`Mutation`] deliberately breaks one rule, for the tests proving the suite has teeth;
//! the CLI always runs the faithful target.

use std::sync::Arc;

use cra_wire::{Clock, FixedClock};
use serde_json::{Map, Value, json};

use crate::fixture::{Fixture, Input};
use crate::target::carp::{CarpMutation, CarpWorld};
use crate::target::http::HttpTarget;
use crate::target::relay::{RelayMutation, RelayWorld};
use crate::target::runtime::RouterTransport;
use crate::target::{Outcome, Target, classify, error_answer, resolve_step_refs, setup_steps};

/// A deliberate defect injected into the in-process target (teeth tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The TRACE hash leaves `trace_id` out of the preimage.
    HashFieldLeftOut,
    /// The verifier starts at event 1, as the spec's §4.4.2 loop does (errata: check event 0).
    VerifierSkipsEvent0,
    /// Canonical JSON for the TRACE hash keeps keys in insertion order.
    TraceKeysUnsorted,
    /// The Relay content hash is taken with `null` members kept.
    RelayNullsKept,
    /// Superseded facts are reported with `valid_to` still open.
    SupersessionNotClosing,
    /// Actions no policy granted are allowed.
    DefaultAllow,
    /// A deny does not beat an allow naming the same action.
    DenyNotBeatingAllow,
}

/// The in-process implementation.
#[derive(Debug, Clone, Default)]
pub struct InProcess {
    mutation: Option<Mutation>,
}

/// Why a verb could not be answered.
enum Fail {
    NotImplemented(String),
    Errored(String),
}

type VerbResult = Result<Value, Fail>;

impl InProcess {
    /// The faithful in-process target.
    pub fn new() -> Self {
        Self { mutation: None }
    }

    /// A target with one deliberate defect.
    pub fn mutated(mutation: Mutation) -> Self {
        Self {
            mutation: Some(mutation),
        }
    }

    fn perform(&self, world: &World, op: &str, args: &Value) -> VerbResult {
        if let Some(relay) = &world.relay
            && let Some(answer) = relay.perform(op, args)
        {
            return answer.map_err(Fail::Errored);
        }
        if let Some(carp) = &world.carp
            && let Some(answer) = carp.perform(op, args)
        {
            return Ok(answer);
        }
        match op {
            "validate_request" => Ok(crate::target::carp::validate_request(args)),
            "load_atlas" => Ok(crate::target::carp::load_atlas(args)),
            "canonical_trace" => Ok(self.canonical_trace(arg(args, "value")?)),
            "hash_event" => self.hash_event(arg(args, "event")?),
            "verify_chain" => self.verify_chain(args),
            "relay_canonical" => relay_canonical(arg(args, "value")?),
            "content_hash" => self.content_hash(arg(args, "package")?),
            other => Err(Fail::NotImplemented(format!(
                "the in-process target does not offer `{other}` yet (its crate API has not landed)"
            ))),
        }
    }

    fn canonical_trace(&self, value: &Value) -> Value {
        let text = if self.mutation == Some(Mutation::TraceKeysUnsorted) {
            // serde_json without `preserve_order` sorts keys too; emulate an unsorted writer by
            // reversing the order of every object's members.
            let mut s = String::new();
            write_reversed(value, &mut s);
            s
        } else {
            cra_wire::canonical::trace_canonical(value)
        };
        json!({ "canonical": text })
    }

    fn hash_event(&self, event: &Value) -> VerbResult {
        let mut ev: cra_trace::TraceEvent =
            match serde_json::from_value(with_placeholder_hash(event)) {
                Ok(e) => e,
                Err(e) => return Ok(error_answer("malformed_event", 400, e.to_string())),
            };
        if self.mutation == Some(Mutation::HashFieldLeftOut) {
            ev.trace_id = String::new();
        }
        if self.mutation == Some(Mutation::TraceKeysUnsorted) {
            let canonical = self.canonical_trace(&ev.payload);
            let real = cra_wire::canonical::trace_canonical(&ev.payload);
            let mut pre = cra_trace::event_preimage(&ev);
            if let Some(c) = canonical.get("canonical").and_then(Value::as_str) {
                pre = pre.replacen(&real, c, 1);
            }
            return Ok(json!({"event_hash": cra_wire::hash::sha256_hex(pre.as_bytes())}));
        }
        Ok(json!({ "event_hash": cra_trace::compute_event_hash(&ev) }))
    }

    fn verify_chain(&self, args: &Value) -> VerbResult {
        let mut text = String::new();
        if let Some(lines) = args.get("lines").and_then(Value::as_array) {
            for l in lines {
                text.push_str(l.as_str().ok_or_else(|| {
                    Fail::Errored("verify_chain: `lines` must hold strings".to_owned())
                })?);
                text.push('\n');
            }
        } else if let Some(events) = args.get("events").and_then(Value::as_array) {
            for e in events {
                text.push_str(&e.to_string());
                text.push('\n');
            }
        } else {
            return Err(Fail::Errored(
                "verify_chain needs `events` or `lines`".to_owned(),
            ));
        }
        let skip0 = self.mutation == Some(Mutation::VerifierSkipsEvent0);
        let all = args
            .get("all_errors")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            || skip0;
        let report = cra_trace::verify_text_reference(text.as_bytes(), all);
        let mut findings: Vec<&cra_trace::Finding> = report.findings.iter().collect();
        if skip0 {
            findings.retain(|f| f.line != 1);
            if !args
                .get("all_errors")
                .and_then(Value::as_bool)
                .unwrap_or(false)
            {
                findings.truncate(1);
            }
        }
        let list: Vec<Value> = findings
            .iter()
            .map(|f| json!({"sequence": f.sequence, "line": f.line, "code": f.code.as_str()}))
            .collect();
        let mut out = Map::new();
        out.insert("valid".into(), Value::Bool(list.is_empty()));
        out.insert("events".into(), json!(report.events));
        if let Some(first) = list.first() {
            out.insert("first_error".into(), first.clone());
        }
        out.insert("findings".into(), Value::Array(list));
        Ok(Value::Object(out))
    }

    fn content_hash(&self, package: &Value) -> VerbResult {
        if !package.is_object() {
            return Ok(error_answer(
                "invalid_schema",
                400,
                "a package is a JSON object",
            ));
        }
        let mut p = package.clone();
        if let Some(o) = p.as_object_mut() {
            o.remove("content_hash");
        }
        let text = if self.mutation == Some(Mutation::RelayNullsKept) {
            let mut s = String::new();
            write_keep_nulls(&p, &mut s);
            s
        } else {
            match cra_wire::canonical::relay_canonical(&p) {
                Ok(t) => t,
                Err(e) => return Ok(error_answer("invalid_schema", 400, e.to_string())),
            }
        };
        Ok(json!({ "content_hash": cra_wire::hash::sha256_prefixed(text.as_bytes()) }))
    }
}

fn relay_canonical(value: &Value) -> VerbResult {
    Ok(match cra_wire::canonical::relay_canonical(value) {
        Ok(t) => json!({ "canonical": t }),
        Err(e) => error_answer("invalid_schema", 400, e.to_string()),
    })
}

/// `hash_event` accepts an event without `event_hash` (it is what is being computed).
fn with_placeholder_hash(event: &Value) -> Value {
    let mut e = event.clone();
    if let Some(o) = e.as_object_mut() {
        o.entry("event_hash")
            .or_insert_with(|| Value::String(String::new()));
    }
    e
}

fn arg<'a>(args: &'a Value, name: &str) -> Result<&'a Value, Fail> {
    args.get(name)
        .ok_or_else(|| Fail::Errored(format!("the fixture's args lack `{name}`")))
}

/// Mutant writer: TRACE canonical form with every object's members in reverse sorted order.
fn write_reversed(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            keys.reverse();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                cra_wire::canonical::trace::write_ascii_string(k, out);
                out.push(':');
                if let Some(x) = o.get(*k) {
                    write_reversed(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_reversed(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&cra_wire::canonical::trace_canonical(other)),
    }
}

/// Mutant writer: Relay canonical form that keeps `null` members.
fn write_keep_nulls(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(x) = o.get(*k) {
                    write_keep_nulls(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_keep_nulls(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&cra_wire::canonical::relay_canonical(other).unwrap_or_default()),
    }
}

/// The state one case runs in.
struct World {
    clock: Arc<FixedClock>,
    relay: Option<RelayWorld>,
    carp: Option<CarpWorld>,
}

const RELAY_VERBS: &[&str] = &[
    "deposit",
    "pull",
    "orient",
    "assert_fact",
    "invalidate_fact",
    "get_facts",
    "flag_for_review",
    "review",
    "export_import",
];

impl InProcess {
    fn world(&self, fixture: &Fixture, steps: &[Input]) -> Result<World, Fail> {
        let now = fixture
            .setup
            .get("now")
            .and_then(Value::as_str)
            .unwrap_or("2026-01-01T00:00:00Z");
        let clock =
            Arc::new(FixedClock::parse(now).map_err(|e| Fail::Errored(format!("setup.now: {e}")))?);
        let seed = fixture
            .setup
            .get("id_seed")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let uses = |verbs: &[&str]| {
            verbs.contains(&fixture.input.operation.as_str())
                || steps.iter().any(|s| verbs.contains(&s.operation.as_str()))
        };
        let relay = if uses(RELAY_VERBS) {
            let m = (self.mutation == Some(Mutation::SupersessionNotClosing))
                .then_some(RelayMutation::SupersessionNotClosing);
            Some(RelayWorld::new(&fixture.setup, clock.clone(), seed, m).map_err(Fail::Errored)?)
        } else {
            None
        };
        let carp = if uses(&["resolve", "execute"]) {
            let m = match self.mutation {
                Some(Mutation::DefaultAllow) => Some(CarpMutation::DefaultAllow),
                Some(Mutation::DenyNotBeatingAllow) => Some(CarpMutation::DenyNotBeatingAllow),
                _ => None,
            };
            Some(CarpWorld::new(&fixture.setup, clock.clone(), seed, m).map_err(Fail::Errored)?)
        } else {
            None
        };
        Ok(World { clock, relay, carp })
    }
}

impl InProcess {
    fn play_in_runtime(&self, fixture: &Fixture) -> Outcome {
        let now = fixture
            .setup
            .get("now")
            .and_then(Value::as_str)
            .unwrap_or("2026-01-01T00:00:00Z");
        let clock = match FixedClock::parse(now) {
            Ok(c) => Arc::new(c),
            Err(e) => return Outcome::Errored(format!("setup.now: {e}")),
        };
        let seed = fixture
            .setup
            .get("id_seed")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let ids = Arc::new(cra_wire::SequentialIds::new(1_700_000_000_000, seed));
        let transport = match RouterTransport::start(&fixture.setup, clock, ids) {
            Ok(t) => t,
            Err(e) => return Outcome::Errored(e),
        };
        let admin = Some(crate::target::runtime::token_of("admin"));
        match HttpTarget::over(Box::new(transport), admin, RouterTransport::actor_tokens()) {
            Ok(t) => t.play(fixture),
            Err(e) => Outcome::Errored(e),
        }
    }
}

impl Target for InProcess {
    fn name(&self) -> String {
        match self.mutation {
            None => "in-process".to_owned(),
            Some(m) => format!("in-process (mutant {m:?})"),
        }
    }

    fn claims(&self) -> Vec<String> {
        vec!["cra-full".to_owned(), "L3".to_owned()]
    }

    fn play(&self, fixture: &Fixture) -> Outcome {
        let steps = match setup_steps(fixture) {
            Ok(s) => s,
            Err(e) => return Outcome::Errored(e),
        };
        // TRACE emission and the HTTP contract belong to the runtime: play those cases through
        // an in-process runtime's router.
        let needs_runtime = fixture.input.operation == "replay"
            || fixture.input.args.get("with_trace").is_some()
            || steps.iter().any(|s| s.operation == "http")
            || fixture.input.operation == "http";
        if needs_runtime {
            if self.mutation.is_some() {
                return Outcome::NotImplemented("mutants do not wrap the runtime".to_owned());
            }
            return self.play_in_runtime(fixture);
        }
        let world = match self.world(fixture, &steps) {
            Ok(w) => w,
            Err(Fail::NotImplemented(m)) => return Outcome::NotImplemented(m),
            Err(Fail::Errored(m)) => return Outcome::Errored(format!("setup: {m}")),
        };
        let start = world.clock.now();
        let mut answers = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let args = match resolve_step_refs(&step.args, &answers) {
                Ok(a) => a,
                Err(e) => return Outcome::Errored(e),
            };
            world
                .clock
                .set(start + time::Duration::seconds(step.at_seconds.unwrap_or(0)));
            match self.perform(&world, &step.operation, &args) {
                Ok(v) => answers.push(v),
                Err(Fail::NotImplemented(m)) => return Outcome::NotImplemented(m),
                Err(Fail::Errored(m)) => return Outcome::Errored(format!("setup step {i}: {m}")),
            }
        }
        let args = match resolve_step_refs(&fixture.input.args, &answers) {
            Ok(a) => a,
            Err(e) => return Outcome::Errored(e),
        };
        world
            .clock
            .set(start + time::Duration::seconds(fixture.input.at_seconds.unwrap_or(0)));
        match self.perform(&world, &fixture.input.operation, &args) {
            Ok(v) => classify(v),
            Err(Fail::NotImplemented(m)) => Outcome::NotImplemented(m),
            Err(Fail::Errored(m)) => Outcome::Errored(m),
        }
    }
}
