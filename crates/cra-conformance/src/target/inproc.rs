//! The in-process target: plays fixtures by calling the cra crates directly, with a fixed clock
//! and deterministic ids from the fixture's `setup`.
//!
//! The pure verbs are answered by `cra_runtime::conformance`, the code `cra serve` answers
//! `POST /v1/conformance/eval/{verb}` with; CARP and Relay verbs call their crates over a fresh
//! store; cases that need the runtime (`with_trace`, `http`, `replay`) run in a fresh runtime
//! through its router. [`Mutation`] deliberately breaks one rule, for the tests proving the suite
//! has teeth: the mutated verbs are answered by defective copies kept here, never by the real
//! code. The CLI always runs the faithful target.

use std::sync::Arc;

use cra_wire::{Clock, FixedClock};
use serde_json::{Value, json};

use crate::fixture::{Fixture, Input};
use crate::target::carp::{CarpMutation, CarpWorld};
use crate::target::http::HttpTarget;
use crate::target::relay::{RelayMutation, RelayWorld};
use crate::target::runtime::{RouterTransport, RuntimeDefect};
use crate::target::{Outcome, Target, classify, resolve_step_refs, setup_now, setup_steps};

/// A deliberate defect injected into the in-process target (teeth tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The TRACE hash leaves `trace_id` out of the preimage.
    HashFieldLeftOut,
    /// The verifier starts at event 1, as the spec's §4.4.2 loop does (errata: check event 0).
    VerifierSkipsEvent0,
    /// The verifier checks integrity only and ignores the §4.2 field rules (`trace_version`,
    /// UUID ids, one session, the timestamp form), as cra did before issue 22 item 11.
    VerifierIgnoresEventFields,
    /// Canonical JSON for the TRACE hash keeps keys in insertion order.
    TraceKeysUnsorted,
    /// The Relay content hash is taken with `null` members kept.
    RelayNullsKept,
    /// Superseded facts are reported with `valid_to` still open.
    SupersessionNotClosing,
    /// Package ids are taken as global: a package is the first project's holding the id, the
    /// project named or not, as cra did before issue 22 item 13.
    PackageIdsGlobal,
    /// Actions no policy granted are allowed.
    DefaultAllow,
    /// A deny does not beat an allow naming the same action.
    DenyNotBeatingAllow,
    /// Required capabilities no atlas declares are silently dropped.
    UnknownCapabilitiesDropped,
    /// A resolution executes in any session of its agent.
    ResolutionAnySession,
    /// An execute refusal is answered with the error body alone (no execute response).
    RefusalAsErrorBody,
    /// The runtime never answers a resolve with an earlier resolution (its resolution cache is
    /// off), as cra did before issue 22 item 8. The one defect played through the runtime.
    ResolutionCacheOff,
    /// A resumed trace stream starts one event past `since_seq` (played through the runtime).
    StreamResumesLate,
    /// A `validate` is resolved as a `resolve` (played through the runtime).
    ValidateAsResolve,
    /// Event payloads lack TRACE §4.3's fields beyond the action (played through the runtime).
    PayloadFieldsDropped,
    /// An atlas posted under a version in force with other content replaces it (played through
    /// the runtime).
    AtlasConflictReplaces,
    /// An action runs the executor of the first atlas declaring its id, not of the atlas the
    /// resolution took it from (played through the runtime).
    ExecutorOfFirstAtlas,
    /// Review gates are not enforced: a review is made as a human who is not the author,
    /// whoever asked, as cra did before issue 22 item 2.
    ReviewGateOff,
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
        if let Some(answer) = self.mutant(op, args) {
            return answer;
        }
        // The one implementation of the pure verbs, the one `cra serve` answers over HTTP.
        match cra_runtime::conformance::eval_pure(op, args) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Ok(cra_runtime::conformance::error_answer(&e)),
            None => Err(Fail::NotImplemented(format!(
                "the in-process target does not offer `{op}` outside a runtime"
            ))),
        }
    }

    /// The answer of the mutated implementation of `op`, when the mutation touches `op`.
    fn mutant(&self, op: &str, args: &Value) -> Option<VerbResult> {
        let m = self.mutation?;
        match (m, op) {
            (Mutation::TraceKeysUnsorted, "canonical_trace") => {
                Some(arg(args, "value").map(|v| json!({ "canonical": reversed(v) })))
            }
            (Mutation::TraceKeysUnsorted | Mutation::HashFieldLeftOut, "hash_event") => {
                let event = match arg(args, "event") {
                    Ok(e) => e,
                    Err(e) => return Some(Err(e)),
                };
                let mut e = event.clone();
                if let Some(o) = e.as_object_mut() {
                    o.entry("event_hash")
                        .or_insert_with(|| Value::String(String::new()));
                }
                // A malformed event is answered by the faithful code (the mutation is elsewhere).
                let mut ev: cra_trace::TraceEvent = serde_json::from_value(e).ok()?;
                if m == Mutation::HashFieldLeftOut {
                    ev.trace_id = String::new();
                }
                let mut pre = cra_trace::event_preimage(&ev);
                if m == Mutation::TraceKeysUnsorted {
                    let real = cra_wire::canonical::trace_canonical(&ev.payload);
                    pre = pre.replacen(&real, &reversed(&ev.payload), 1);
                }
                Some(Ok(
                    json!({"event_hash": cra_wire::hash::sha256_hex(pre.as_bytes())}),
                ))
            }
            (
                Mutation::VerifierSkipsEvent0 | Mutation::VerifierIgnoresEventFields,
                "verify_chain",
            ) => {
                let text = match cra_runtime::conformance::chain_text(args) {
                    Ok(t) => t,
                    Err(e) => return Some(Ok(cra_runtime::conformance::error_answer(&e))),
                };
                let report = cra_trace::verify_text_reference(text.as_bytes(), true);
                let kept = |f: &cra_trace::Finding| match m {
                    Mutation::VerifierSkipsEvent0 => f.line != 1,
                    _ => f.field.is_none(),
                };
                let mut findings: Vec<cra_trace::Finding> =
                    report.findings.into_iter().filter(kept).collect();
                if args.get("all_errors").and_then(Value::as_bool) != Some(true) {
                    findings.truncate(1);
                }
                Some(Ok(cra_runtime::conformance::verification_answer(
                    report.events,
                    &findings,
                )))
            }
            (Mutation::RelayNullsKept, "content_hash") => {
                let package = match arg(args, "package") {
                    Ok(p) => p,
                    Err(e) => return Some(Err(e)),
                };
                let mut p = package.as_object()?.clone();
                p.remove("content_hash");
                let mut text = String::new();
                write_keep_nulls(&Value::Object(p), &mut text);
                Some(Ok(
                    json!({ "content_hash": cra_wire::hash::sha256_prefixed(text.as_bytes()) }),
                ))
            }
            _ => None,
        }
    }
}

fn arg<'a>(args: &'a Value, name: &str) -> Result<&'a Value, Fail> {
    args.get(name)
        .ok_or_else(|| Fail::Errored(format!("the fixture's args lack `{name}`")))
}

/// Mutant TRACE canonical form: every object's members in reverse sorted order.
fn reversed(v: &Value) -> String {
    let mut s = String::new();
    write_reversed(v, &mut s);
    s
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
        let clock = Arc::new(FixedClock::new(setup_now(fixture).map_err(Fail::Errored)?));
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
            let m = match self.mutation {
                Some(Mutation::SupersessionNotClosing) => {
                    Some(RelayMutation::SupersessionNotClosing)
                }
                Some(Mutation::PackageIdsGlobal) => Some(RelayMutation::PackageIdsGlobal),
                Some(Mutation::ReviewGateOff) => Some(RelayMutation::ReviewGateOff),
                _ => None,
            };
            Some(RelayWorld::new(&fixture.setup, clock.clone(), seed, m).map_err(Fail::Errored)?)
        } else {
            None
        };
        let carp = if uses(&["resolve", "execute"]) {
            let m = match self.mutation {
                Some(Mutation::DefaultAllow) => Some(CarpMutation::DefaultAllow),
                Some(Mutation::DenyNotBeatingAllow) => Some(CarpMutation::DenyNotBeatingAllow),
                Some(Mutation::UnknownCapabilitiesDropped) => {
                    Some(CarpMutation::UnknownCapabilitiesDropped)
                }
                Some(Mutation::ResolutionAnySession) => Some(CarpMutation::ResolutionAnySession),
                Some(Mutation::RefusalAsErrorBody) => Some(CarpMutation::RefusalAsErrorBody),
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
        let clock = match setup_now(fixture) {
            Ok(t) => Arc::new(FixedClock::new(t)),
            Err(e) => return Outcome::Errored(e),
        };
        let seed = fixture
            .setup
            .get("id_seed")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let ids = Arc::new(cra_wire::SequentialIds::new(1_700_000_000_000, seed));
        let cache_off = self.mutation == Some(Mutation::ResolutionCacheOff);
        let tweak = |c: &mut cra_runtime::RuntimeConfig| {
            if cache_off {
                c.resolution_cache_entries = 0;
            }
        };
        let defect = match self.mutation {
            Some(Mutation::StreamResumesLate) => Some(RuntimeDefect::ResumesLate),
            Some(Mutation::ValidateAsResolve) => Some(RuntimeDefect::ValidateAsResolve),
            Some(Mutation::PayloadFieldsDropped) => Some(RuntimeDefect::PayloadFieldsDropped),
            Some(Mutation::AtlasConflictReplaces) => Some(RuntimeDefect::AtlasConflictReplaces),
            Some(Mutation::ExecutorOfFirstAtlas) => Some(RuntimeDefect::ExecutorOfFirstAtlas),
            _ => None,
        };
        let transport = match RouterTransport::start(clock, ids, tweak) {
            Ok(t) => t.with_defect(defect),
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
            || fixture.input.operation == "http"
            || fixture.input.operation == "stream";
        if needs_runtime {
            let through_runtime = [
                Mutation::ResolutionCacheOff,
                Mutation::StreamResumesLate,
                Mutation::ValidateAsResolve,
                Mutation::PayloadFieldsDropped,
                Mutation::AtlasConflictReplaces,
                Mutation::ExecutorOfFirstAtlas,
            ];
            if self.mutation.is_some_and(|m| !through_runtime.contains(&m)) {
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
