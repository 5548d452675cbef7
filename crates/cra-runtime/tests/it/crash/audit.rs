//! What no crash may leave behind, whatever was acknowledged: a change in the store without the
//! TRACE events that tell of it.
//!
//! After the last restart of a crash run, read from the store and the chains the run fetched:
//! - every session record (the agents' and the projects' audit chains) has a chain that opens
//!   with `session.started`, and the record says ended exactly when the chain ends with
//!   `session.ended`;
//! - every `action.approved` has its outcome (`action.executed` or `action.failed`) in its span;
//! - every package stored in a run's project was deposited in some chain
//!   (`relay.package.deposited`), and every fact in its histories was asserted in one
//!   (`relay.fact.asserted`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use cra_carp::CarpStore;
use cra_carp::store::SessionRecord;
use serde_json::Value;

use super::{PREDICATES, Run, SUBJECTS, agent_id, wire_fact};

/// The session records of the run's agents and of the audit chains of `projects` (read with
/// the server down).
pub(super) fn session_records(
    carp: &dyn CarpStore,
    agents: usize,
    projects: &[String],
) -> Vec<SessionRecord> {
    let mut ids: Vec<String> = Vec::new();
    for i in 0..agents {
        let listed = carp.sessions_of(&agent_id(i)).unwrap();
        ids.extend(listed.expect("an unencrypted store keeps the owner index"));
    }
    ids.extend(
        projects
            .iter()
            .map(|p| cra_runtime::service::relay::project_audit_session(p)),
    );
    ids.iter()
        .filter_map(|id| carp.get_session(id).unwrap())
        .collect()
}

/// The chain `sid` as the run fetched it (`chains/<sid>.jsonl`), or from the server when it was
/// not fetched (a chain opened after the listing).
async fn chain(run: &Run, dir: &Path, sid: &str) -> Result<Vec<Value>, String> {
    let text = match std::fs::read_to_string(dir.join(format!("{sid}.jsonl"))) {
        Ok(t) => t,
        Err(_) => match run.chain_ndjson(sid).await? {
            (404, _) => return Ok(Vec::new()),
            (200, bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            (status, _) => return Err(format!("GET trace {sid}: {status}")),
        },
    };
    text.lines()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("chain {sid}: {e}")))
        .collect()
}

/// Every breach of the module's rules, one line each.
pub(super) async fn unaudited(
    run: &Run,
    records: &[SessionRecord],
    projects: &[String],
) -> Vec<String> {
    let dir = run.dir.path().join("chains");
    let mut found = Vec::new();
    for r in records {
        match chain(run, &dir, &r.session_id).await {
            Ok(events) => found.extend(session_breaches(r, &events)),
            Err(e) => found.push(e),
        }
    }
    let mut told = Told::default();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let sid = path.file_stem().unwrap().to_string_lossy().into_owned();
        match chain(run, &dir, &sid).await {
            Ok(events) => {
                found.extend(execution_breaches(&sid, &events));
                told.note(&events);
            }
            Err(e) => found.push(e),
        }
    }
    for p in projects {
        match told.breaches(run, p).await {
            Ok(b) => found.extend(b),
            Err(e) => found.push(e),
        }
    }
    found
}

fn event_type(e: &Value) -> &str {
    e["event_type"].as_str().unwrap_or_default()
}

/// A session record against its chain.
fn session_breaches(r: &SessionRecord, events: &[Value]) -> Vec<String> {
    let sid = &r.session_id;
    let mut found = Vec::new();
    if events.first().map(event_type) != Some("session.started") {
        found.push(format!(
            "session {sid}: a record whose chain does not open with session.started ({} events)",
            events.len()
        ));
    }
    let chain_ended = events.last().map(event_type) == Some("session.ended");
    if r.ended_at.is_some() != chain_ended {
        found.push(format!(
            "session {sid}: the record says ended {:?}, the chain ends with session.ended: {chain_ended}",
            r.ended_at
        ));
    }
    found
}

/// Approved executions of a chain without an outcome.
fn execution_breaches(sid: &str, events: &[Value]) -> Vec<String> {
    let mut open: BTreeMap<&str, bool> = BTreeMap::new();
    for e in events {
        let span = e["span_id"].as_str().unwrap_or_default();
        match event_type(e) {
            "action.approved" => {
                open.entry(span).or_insert(false);
            }
            "action.executed" | "action.failed" => {
                open.insert(span, true);
            }
            _ => {}
        }
    }
    open.into_iter()
        .filter(|(_, finished)| !finished)
        .map(|(span, _)| format!("execution {span} in {sid}: approved, without an outcome"))
        .collect()
}

/// The Relay changes the chains tell of.
#[derive(Default)]
struct Told {
    packages: BTreeSet<String>,
    facts: BTreeSet<String>,
}

impl Told {
    fn note(&mut self, events: &[Value]) {
        for e in events {
            match event_type(e) {
                "relay.package.deposited" => {
                    let id = e["payload"]["package_id"].as_str().unwrap_or_default();
                    self.packages.insert(id.to_owned());
                }
                "relay.fact.asserted" => {
                    let id = wire_fact(&e["payload"]["fact"])["fact_id"]
                        .as_str()
                        .unwrap_or_default();
                    self.facts.insert(id.to_owned());
                }
                _ => {}
            }
        }
    }

    /// The packages and facts of `project` no chain tells of.
    async fn breaches(&self, run: &Run, project: &str) -> Result<Vec<String>, String> {
        let mut found = Vec::new();
        let listed = run.get(&format!("/v1/projects/{project}/packages")).await?;
        let packages = listed
            .as_array()
            .or_else(|| listed["packages"].as_array())
            .ok_or_else(|| format!("project {project}: the package listing is {listed}"))?;
        for p in packages {
            let id = p["package_id"].as_str().unwrap_or_default();
            if !self.packages.contains(id) {
                found.push(format!(
                    "package {id} of {project}: stored, never deposited in a chain"
                ));
            }
        }
        for s in SUBJECTS {
            for pr in PREDICATES {
                for row in run.fact_history(project, s, pr).await? {
                    let id = row["fact_id"].as_str().unwrap_or_default();
                    if !self.facts.contains(id) {
                        found.push(format!(
                            "fact {id} of {project}: stored, never asserted in a chain"
                        ));
                    }
                }
            }
        }
        Ok(found)
    }
}
