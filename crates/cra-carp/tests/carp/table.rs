//! The table: `tests/fixtures/table/cases/*.json`, each (atlas set, request, counters, now) ->
//! (decision, allowed, denied with policy ids, approval-gated actions, constraints, context).
//! Expectations are written by hand from the errata; see each case's `description`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cra_carp::eval::{CountersSnapshot, ResolveOptions, resolve};
use cra_carp::index::AtlasSet;
use cra_carp::validate::parse_request;
use serde_json::{Value, json};

use crate::common::{at, atlas_set, fixture, ids, json};

pub(crate) const SESSION: &str = "0190a000-0000-7000-8000-000000000001";

/// The engine over a fresh in-memory store (also returned) and [`table_atlases`], at
/// 2026-01-05T10:00:00Z on the returned clock, with [`SESSION`] open for `agent-1`; ids seeded
/// with `seed`.
pub(crate) fn table_engine(
    seed: u64,
) -> (
    cra_carp::engine::Carp,
    std::sync::Arc<cra_wire::FixedClock>,
    std::sync::Arc<cra_carp::memory::MemoryStore>,
) {
    let clock = std::sync::Arc::new(cra_wire::FixedClock::parse("2026-01-05T10:00:00Z").unwrap());
    let store = std::sync::Arc::new(cra_carp::memory::MemoryStore::new());
    let carp = cra_carp::engine::Carp::new(
        store.clone(),
        std::sync::Arc::new(table_atlases()),
        clock.clone(),
        std::sync::Arc::new(cra_wire::SequentialIds::new(1_767_607_200_000, seed)),
        cra_carp::engine::CarpConfig::default(),
    );
    carp.open_session("agent-1", Some(SESSION), None).unwrap();
    (carp, clock, store)
}

/// The five table atlases, loaded through the real loader.
pub(crate) fn table_atlases() -> AtlasSet {
    let dirs: Vec<PathBuf> = ["support", "ops", "empty", "priority", "priority-reversed"]
        .iter()
        .map(|n| fixture(&format!("table/atlases/{n}")))
        .collect();
    atlas_set(&dirs)
}

/// A full CARP request from a case's short form.
pub(crate) fn full_request(short: &Value, now: &str) -> Value {
    let mut task = json!({"goal": short["goal"]});
    for k in ["risk_tier", "context_hints", "required_capabilities"] {
        if let Some(v) = short.get(k) {
            task[k] = v.clone();
        }
    }
    let mut r = json!({
        "carp_version": "1.0",
        "request_id": "0190a000-0000-7000-8000-00000000aaaa",
        "timestamp": now,
        "operation": "resolve",
        "requester": {"agent_id": short["agent_id"], "session_id": SESSION},
        "task": task,
    });
    if let Some(a) = short.get("atlas_ids") {
        r["atlas_ids"] = a.clone();
    }
    r
}

pub(crate) fn case_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture("table/cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

fn check_case(set: &AtlasSet, path: &std::path::Path) -> Result<(), String> {
    let case = json(path);
    let now = case["now"].as_str().unwrap();
    let request = parse_request(&full_request(&case["request"], now)).map_err(|e| e.to_string())?;
    let counters: CountersSnapshot = match case.get("counters") {
        Some(c) => {
            let s: CountersSnapshot = serde_json::from_value(c.clone()).unwrap();
            CountersSnapshot::new(s.rate, s.budget)
        }
        None => CountersSnapshot::empty(),
    };
    let expect = &case["expect"];
    let outcome = resolve(
        &request,
        set,
        &counters,
        at(now),
        &ids(),
        &ResolveOptions::default(),
    );
    if let Some(token) = expect.get("error") {
        return match outcome {
            Err(e) if e.token().as_str() == token => Ok(()),
            other => Err(format!("expected error {token}, got {other:?}")),
        };
    }
    let res = outcome.map_err(|e| format!("unexpected error: {e}"))?;
    let mut problems = Vec::new();
    let decision = res.decision.kind.as_str();
    if decision != expect["decision"] {
        problems.push(format!(
            "decision: {decision}, expected {}",
            expect["decision"]
        ));
    }
    let allowed: Vec<&str> = res
        .allowed_actions
        .iter()
        .map(|a| a.action_id.as_str())
        .collect();
    let want: Vec<&str> = strings(&expect["allowed"]);
    if allowed != want {
        problems.push(format!("allowed: {allowed:?}, expected {want:?}"));
    }
    let denied: Vec<Vec<&str>> = res
        .denied_actions
        .iter()
        .map(|d| vec![d.action_id.as_str(), d.policy_id.as_str()])
        .collect();
    let want_denied: Vec<Vec<&str>> = expect["denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(strings)
        .collect();
    if denied != want_denied {
        problems.push(format!("denied: {denied:?}, expected {want_denied:?}"));
    }
    let confirm: Vec<&str> = res
        .allowed_actions
        .iter()
        .filter(|a| a.requires_confirmation)
        .map(|a| a.action_id.as_str())
        .collect();
    if confirm != strings(&expect["confirm"]) {
        problems.push(format!(
            "requires_confirmation: {confirm:?}, expected {}",
            expect["confirm"]
        ));
    }
    let constraints: BTreeMap<String, Value> = res
        .constraints
        .iter()
        .map(|c| (c.constraint_id.clone(), json!(c.parameters.actions)))
        .collect();
    let want_c: BTreeMap<String, Value> = expect["constraints"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if constraints != want_c {
        problems.push(format!("constraints: {constraints:?}, expected {want_c:?}"));
    }
    if let Some(ctx) = expect.get("context") {
        let blocks: Vec<&str> = res
            .context_blocks
            .iter()
            .map(|b| b.block_id.as_str())
            .collect();
        if blocks != strings(ctx) {
            problems.push(format!("context: {blocks:?}, expected {ctx}"));
        }
    }
    // Structural rules every resolution keeps.
    let gated = res.decision.kind.as_str() == "requires_approval";
    if gated != res.decision.approval_id.is_some() || gated != res.decision.expires_at.is_some() {
        problems.push("approval_id/expires_at must be set exactly when requires_approval".into());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n    "))
    }
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

#[test]
fn table_cases_resolve_as_written_by_hand() {
    let set = table_atlases();
    let files = case_files();
    assert!(
        files.len() >= 60,
        "the table needs at least 60 cases, has {}",
        files.len()
    );
    let mut failures = Vec::new();
    for f in &files {
        if let Err(e) = check_case(&set, f) {
            failures.push(format!(
                "{}:\n    {e}",
                f.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
