//! CARP requests (`cra_carp::validate::parse_request_text`) and execute requests, run through the
//! real service ([`cra_carp::engine::Carp`]) over the in-memory store and the repository's
//! example atlases.
//!
//! The input is request text in which the placeholders `$SESSION`, `$AGENT`, `$NOW` and
//! `$RESOLUTION` are replaced by the ids of a session opened (and, for execute, a resolution
//! made) before the input runs, so that mutated requests get past the session and resolution
//! checks and reach evaluation, parameter validation and counter charges.
//!
//! Oracles: no panic; a refusal carries a token and a non-empty message and renders as the one
//! error body; an accepted request serialises and parses back to itself; every resolution and
//! execute response the service produces validates against the published JSON Schema.

use std::sync::{Arc, OnceLock};

use cra_atlas::LoadedAtlas;
use cra_carp::engine::{Carp, CarpConfig, ExecuteOutcome};
use cra_carp::eval::{CountersSnapshot, ExplainLevel, ResolveOptions, resolve};
use cra_carp::index::AtlasSet;
use cra_carp::memory::MemoryStore;
use cra_carp::store::ApprovalDecision;
use cra_carp::types::Operation;
use cra_carp::validate::{CarpError, parse_request, parse_request_text, schemas};
use cra_carp::{CarpRequest, Resolution};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};

/// The session every input runs in.
pub const SESSION: &str = "0190a000-0000-7000-8000-00000000a11d";
/// Its agent (a maintainer, so every policy kind of the example atlas applies).
pub const AGENT: &str = "maintainer-bot";
/// The frozen clock.
pub const NOW: &str = "2026-03-02T10:00:00Z";

/// The repository's `atlases/` directory, found upwards from the crate that includes this file.
fn atlases_dir() -> std::path::PathBuf {
    let mut dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("atlases/dev.cra.github-ops").is_dir() {
        if !dir.pop() {
            panic!("no atlases/ directory above {}", env!("CARGO_MANIFEST_DIR"));
        }
    }
    dir.join("atlases")
}

fn atlases() -> Arc<AtlasSet> {
    static SET: OnceLock<Arc<AtlasSet>> = OnceLock::new();
    SET.get_or_init(|| {
        let root = atlases_dir();
        let loaded: Vec<_> = [
            "dev.cra.github-ops",
            "com.example.payments",
            "com.example.customer-support",
        ]
        .iter()
        .map(|a| match cra_atlas::load_dir(&root.join(a)) {
            Ok(l) => l,
            Err(e) => panic!("example atlas {a}: {e}"),
        })
        .collect();
        match AtlasSet::from_loaded(&loaded) {
            Ok(s) => Arc::new(s),
            Err(e) => panic!("example atlases: {e}"),
        }
    })
    .clone()
}

fn validator(schema: &'static str) -> jsonschema::Validator {
    let v: Value = match serde_json::from_str(schema) {
        Ok(v) => v,
        Err(e) => panic!("embedded schema: {e}"),
    };
    match jsonschema::validator_for(&v) {
        Ok(v) => v,
        Err(e) => panic!("embedded schema: {e}"),
    }
}

fn check_schema(which: &'static str, value: &Value) {
    static RESOLUTION: OnceLock<jsonschema::Validator> = OnceLock::new();
    static EXECUTE_RESPONSE: OnceLock<jsonschema::Validator> = OnceLock::new();
    let v = match which {
        "resolution" => RESOLUTION.get_or_init(|| validator(schemas::RESOLUTION)),
        _ => EXECUTE_RESPONSE.get_or_init(|| validator(schemas::EXECUTE_RESPONSE)),
    };
    let errors: Vec<String> = v.iter_errors(value).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{which} does not match its schema: {errors:?}\n{value}"
    );
}

/// A fresh service with one open session and, when `resolve` is set, one stored resolution.
pub struct World {
    /// The service.
    pub carp: Carp,
    /// The stored resolution's id (a well-formed unknown id when none was made).
    pub resolution_id: String,
}

impl World {
    /// See the type documentation; `grant` decides the resolution's approval (when it has one).
    pub fn new(resolve: bool, grant: bool) -> Self {
        let clock = match FixedClock::parse(NOW) {
            Ok(c) => Arc::new(c),
            Err(e) => panic!("{e}"),
        };
        let carp = Carp::new(
            Arc::new(MemoryStore::new()),
            atlases(),
            clock,
            Arc::new(SequentialIds::new(1_772_445_600_000, 7)),
            CarpConfig::default(),
        );
        if let Err(e) = carp.open_session(AGENT, Some(SESSION), None) {
            panic!("open session: {e}");
        }
        // An unknown (but well-formed) resolution until one is made.
        let mut resolution_id = "0190a000-0000-7000-8000-0000000000aa".to_owned();
        if resolve {
            let req = json!({
                "carp_version": "1.0",
                "request_id": "0190a000-0000-7000-8000-0000000000f0",
                "timestamp": NOW,
                "operation": "resolve",
                "requester": {"agent_id": AGENT, "session_id": SESSION},
                "task": {"goal": "review and merge pull request 42", "risk_tier": "low",
                         "required_capabilities": ["repo-read", "contribute", "maintain"]},
                "atlas_ids": ["dev.cra.github-ops"],
            });
            let res = match parse_request(&req).and_then(|r| carp.resolve(&r, false, None)) {
                Ok(r) => r,
                Err(e) => panic!("setup resolve: {e}"),
            };
            // An approval is opened by the execute it gates: ask it for the first gated
            // action with empty parameters, then grant it.
            let gated = res.allowed_actions.iter().find(|a| a.requires_confirmation);
            if grant && let (Some(approval), Some(action)) = (&res.decision.approval_id, gated) {
                let ask = json!({
                    "carp_version": "1.0",
                    "request_id": "0190a000-0000-7000-8000-0000000000f1",
                    "timestamp": NOW,
                    "operation": "execute",
                    "requester": {"agent_id": AGENT, "session_id": SESSION},
                    "execution": {"resolution_id": res.resolution_id, "action_id": action.action_id,
                                  "parameters": {}},
                });
                let asked = parse_request(&ask).and_then(|r| carp.execute_in_store(&r));
                let opened = matches!(&asked, Ok(ExecuteOutcome::Answered(r))
                    if r.status == cra_carp::types::ExecuteStatus::PendingApproval);
                if opened
                    && let Err(e) =
                        carp.decide_approval(approval, ApprovalDecision::Grant, "fuzz", None)
                {
                    panic!("setup approval: {e}");
                }
            }
            resolution_id = res.resolution_id;
        }
        Self {
            carp,
            resolution_id,
        }
    }

    /// Replaces the placeholders (module documentation) in `text`.
    pub fn substitute(&self, text: &str) -> String {
        text.replace("$SESSION", SESSION)
            .replace("$AGENT", AGENT)
            .replace("$NOW", NOW)
            .replace("$RESOLUTION", &self.resolution_id)
    }
}

fn check_refusal(e: &CarpError) {
    assert!(!e.message.is_empty(), "a refusal without a message");
    let body = match serde_json::to_value(e.to_body()) {
        Ok(b) => b,
        Err(err) => panic!("error body does not serialise: {err}"),
    };
    assert_eq!(body["error"], e.token.as_str());
    for fe in &e.errors {
        assert!(
            fe.pointer.is_empty() || fe.pointer.starts_with('/'),
            "pointer {:?} is not a JSON pointer",
            fe.pointer
        );
    }
}

fn check_round_trip(req: &CarpRequest) {
    let v = match serde_json::to_value(req) {
        Ok(v) => v,
        Err(e) => panic!("an accepted request does not serialise: {e}"),
    };
    match parse_request(&v) {
        Ok(back) => assert_eq!(&back, req, "request changed in a round trip"),
        Err(e) => panic!("an accepted request, written back, is refused: {e:?}\n{v}"),
    }
}

fn check_resolution(res: &Resolution) {
    let v = match serde_json::to_value(res) {
        Ok(v) => v,
        Err(e) => panic!("resolution does not serialise: {e}"),
    };
    check_schema("resolution", &v);
}

fn check_execute(world: &World, req: &CarpRequest) {
    match world.carp.execute_in_store(req) {
        Ok(ExecuteOutcome::Run(cleared)) => {
            match world
                .carp
                .finish_execution(cleared, Ok(json!({"ok": true})))
            {
                Ok(resp) => {
                    let v = serde_json::to_value(&resp).unwrap_or(Value::Null);
                    check_schema("execute response", &v);
                }
                Err(e) => check_refusal(&e),
            }
        }
        Ok(
            ExecuteOutcome::Answered(resp) | ExecuteOutcome::OpenApproval { response: resp, .. },
        ) => {
            let v = serde_json::to_value(&resp).unwrap_or(Value::Null);
            check_schema("execute response", &v);
        }
        Err(e) => check_refusal(&e),
    }
}

/// A CARP request of any operation, then the service call it asks for.
pub fn carp_request(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let world = World::new(false, false);
    let text = world.substitute(text);
    match parse_request_text(&text) {
        Ok(req) => {
            check_round_trip(&req);
            match req.operation {
                Operation::Execute => check_execute(&world, &req),
                _ => match world.carp.resolve(&req, data.len().is_multiple_of(2), None) {
                    Ok(res) => check_resolution(&res),
                    Err(e) => check_refusal(&e),
                },
            }
        }
        Err(e) => check_refusal(&e),
    }
}

/// An execute request against a stored resolution (approval granted for even-length inputs).
pub fn carp_execute(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let world = World::new(true, data.len().is_multiple_of(2));
    let text = world.substitute(text);
    match parse_request_text(&text) {
        Ok(req) => {
            check_round_trip(&req);
            check_execute(&world, &req);
            // The same request again: refused as a duplicate request id, or answered the same.
            if let Err(e) = world.carp.execute_in_store(&req) {
                check_refusal(&e);
            }
        }
        Err(e) => check_refusal(&e),
    }
}

/// Compiles a loaded atlas for CARP (refusals are errors, not panics) and, when it compiles,
/// resolves a request for every capability it declares against it, with the explanation.
pub fn compile_and_resolve(atlas: &LoadedAtlas) {
    let set = match AtlasSet::from_loaded(std::slice::from_ref(atlas)) {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let capabilities: Vec<&str> = atlas
        .manifest
        .capabilities
        .iter()
        .map(|c| c.capability_id.as_str())
        .take(8)
        .collect();
    let req = json!({
        "carp_version": "1.0",
        "request_id": "0190a000-0000-7000-8000-0000000000f1",
        "timestamp": NOW,
        "operation": "resolve",
        "requester": {"agent_id": "fuzz-agent", "session_id": SESSION},
        "task": {"goal": "read and list the notes", "risk_tier": "high",
                 "required_capabilities": capabilities},
        "atlas_ids": [atlas.id()],
    });
    let Ok(req) = parse_request(&req) else {
        return; // an atlas id or capability the request schema refuses
    };
    let now = match cra_wire::clock::parse_rfc3339(NOW) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    };
    let options = ResolveOptions {
        explain: ExplainLevel::Full,
        ..ResolveOptions::default()
    };
    let ids = SequentialIds::new(1_772_445_600_000, 9);
    if let Ok(res) = resolve(
        &req,
        &set,
        &CountersSnapshot::default(),
        now,
        &ids,
        &options,
    ) {
        check_resolution(&res);
    }
}
