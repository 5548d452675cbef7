//! `cra atlas test`'s stated-expectation cases: `tests/*.test.json`, each a request (with its
//! intended parameters) and the decision it must get, written by the author, as `opa test` and
//! `cedar run-tests` users expect. The recorded traces (`*.trace.jsonl`) are the other kind.
//!
//! ```json
//! {
//!   "description": "Deleting main is refused whatever the goal says",
//!   "now": "2026-01-05T10:00:00Z",
//!   "request": {"agent_id": "maintainer-1", "goal": "Tidy up",
//!               "required_capabilities": ["maintain"],
//!               "intended_parameters": {"branch.delete": {"branch": "main"}}},
//!   "expect": {"decision": "partial",
//!              "actions": {"branch.delete": "deny by deny-protected-branch-deletion"}}
//! }
//! ```
//!
//! `request` takes `agent_id`, `goal` and, optionally, `risk_tier`, `context_hints`,
//! `required_capabilities`, `intended_parameters` and `atlas_ids` (default: the atlas under
//! test). Each `expect.actions` entry is `"<outcome> by <policy>"`, the outcome `allow`,
//! `requires_approval` or `deny`, the policy the one that decided (or `default_deny`); only the
//! actions listed are checked, and `decision` when given. `--update` rewrites `expect` with what
//! the atlas decides now, every candidate action listed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use cra_carp::eval::{CountersSnapshot, ExplainLevel, ResolveOptions, resolve};
use cra_carp::index::AtlasSet;
use cra_carp::validate::parse_request;
use serde_json::{Map, Value, json};

/// The instant a case is judged at when it gives none.
const DEFAULT_NOW: &str = "2026-01-05T10:00:00Z";
/// The session and request ids a case's request carries (fixed: a case is pure).
const SESSION: &str = "0190a000-0000-7000-8000-00000000c0de";
const REQUEST: &str = "0190a000-0000-7000-8000-00000000c0df";

/// What one case did.
#[derive(Debug, Default)]
pub struct CaseRun {
    /// `<file> <description>`.
    pub name: String,
    /// Every difference from the expectation, one line each; `None` when it held.
    pub failure: Option<String>,
    /// Policies of the atlas under test that decided, constrained or were pending.
    pub fired: BTreeSet<String>,
    /// Actions of the atlas under test that were decided.
    pub decided: BTreeSet<String>,
    /// The expectation as the atlas meets it now (for `--update`).
    pub actual: Value,
}

/// Runs the case in `file` against `set`, judging the actions of `atlas_id`.
pub fn run_case(file: &Path, set: &AtlasSet, atlas_id: &str) -> CaseRun {
    let fname = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut run = CaseRun {
        name: fname.clone(),
        ..CaseRun::default()
    };
    let case = match std::fs::read(file)
        .map_err(|e| format!("unreadable: {e}"))
        .and_then(|b| cra_wire::json::parse_strict(&b).map_err(|e| format!("not JSON: {e}")))
    {
        Ok(v) => v,
        Err(e) => {
            run.failure = Some(e);
            return run;
        }
    };
    if let Some(d) = case.get("description").and_then(Value::as_str) {
        run.name = format!("{fname} {d}");
    }
    match judge(&case, set, atlas_id, &mut run) {
        Ok(()) => {}
        Err(e) => run.failure = Some(e),
    }
    run
}

fn judge(case: &Value, set: &AtlasSet, atlas_id: &str, run: &mut CaseRun) -> Result<(), String> {
    let now_text = case
        .get("now")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_NOW);
    let now = cra_wire::clock::parse_rfc3339(now_text)
        .map_err(|e| format!("`now` is not an RFC 3339 instant: {e}"))?;
    let request = carp_request(case.get("request"), atlas_id, now_text)?;
    let options = ResolveOptions {
        explain: ExplainLevel::Full,
        ..ResolveOptions::default()
    };
    let ids = cra_wire::SequentialIds::new(0, 0);
    let resolution = resolve(
        &request,
        set,
        &CountersSnapshot::empty(),
        now,
        &ids,
        &options,
    )
    .map_err(|e| format!("the request cannot be resolved: {e}"))?;
    let mut actions = Map::new();
    for a in resolution.explain.iter().flat_map(|x| &x.actions) {
        let outcome = serde_json::to_value(a.outcome).unwrap_or_default();
        let said = format!("{} by {}", outcome.as_str().unwrap_or("?"), a.decided_by);
        actions.insert(a.action_id.clone(), Value::String(said));
        if a.atlas_id == atlas_id {
            run.decided.insert(a.action_id.clone());
            let fired = a.policies.iter().filter(|p| p.fired());
            run.fired.extend(fired.map(|p| p.policy_id.clone()));
        }
    }
    let decision = resolution.decision.kind.as_str();
    run.actual = json!({"decision": decision, "actions": actions});
    let expect = case
        .get("expect")
        .ok_or("the case has no `expect`; run with --update to write what the atlas decides")?;
    let mut diffs = Vec::new();
    if let Some(want) = expect.get("decision").and_then(Value::as_str)
        && want != decision
    {
        diffs.push(format!("decision: expected {want}, got {decision}"));
    }
    let wanted: BTreeMap<String, Value> = expect
        .get("actions")
        .and_then(Value::as_object)
        .map(|m| m.clone().into_iter().collect())
        .unwrap_or_default();
    for (id, want) in &wanted {
        let got = actions
            .get(id)
            .and_then(Value::as_str)
            .unwrap_or("not a candidate action");
        if want.as_str() != Some(got) {
            diffs.push(format!("action {id}: expected {want}, got \"{got}\""));
        }
    }
    if !diffs.is_empty() {
        run.failure = Some(diffs.join("\n      "));
    }
    Ok(())
}

/// The CARP resolve request a case's short `request` stands for.
fn carp_request(
    short: Option<&Value>,
    atlas_id: &str,
    now: &str,
) -> Result<cra_carp::CarpRequest, String> {
    let short = short
        .and_then(Value::as_object)
        .ok_or("the case has no `request` object")?;
    let text = |k: &str| short.get(k).and_then(Value::as_str);
    let agent = text("agent_id").ok_or("`request.agent_id` is missing")?;
    let goal = text("goal").ok_or("`request.goal` is missing")?;
    let mut task = json!({"goal": goal});
    for k in [
        "risk_tier",
        "context_hints",
        "required_capabilities",
        "intended_parameters",
    ] {
        if let Some(v) = short.get(k) {
            task[k] = v.clone();
        }
    }
    let atlas_ids = short
        .get("atlas_ids")
        .cloned()
        .unwrap_or_else(|| json!([atlas_id]));
    let request = json!({
        "carp_version": "1.0", "request_id": REQUEST, "timestamp": now, "operation": "resolve",
        "requester": {"agent_id": agent, "session_id": SESSION},
        "task": task, "atlas_ids": atlas_ids,
    });
    parse_request(&request).map_err(|e| {
        let fields: Vec<String> = e
            .errors
            .iter()
            .map(|f| format!("{}: {}", f.pointer, f.message))
            .collect();
        format!(
            "the request is not a CARP request: {} {}",
            e.message,
            fields.join("; ")
        )
    })
}

/// Rewrites `file`'s `expect` with `actual`, keeping every other member.
pub fn update(file: &Path, actual: &Value) -> std::io::Result<()> {
    let text = std::fs::read_to_string(file)?;
    let mut case: Value = serde_json::from_str(&text)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if let Some(obj) = case.as_object_mut() {
        obj.insert("expect".into(), actual.clone());
    }
    let mut out = serde_json::to_string_pretty(&case)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    out.push('\n');
    std::fs::write(file, out)
}
