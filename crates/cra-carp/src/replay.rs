//! Replay: re-resolve the `carp.request.received` events of a trace against the atlases loaded
//! now, and compare each result with the `carp.resolution.completed` resolution recorded for the
//! same `trace_id`, ignoring ids and timestamps. The recorded resolution is only ever compared
//! with, never returned: a replay that cannot re-resolve reports an error.
//!
//! Also here: the audit events one resolve emits ([`resolve_drafts`]), so the runtime and the
//! `cra resolve --record` command write traces replay understands.

use std::collections::{BTreeMap, BTreeSet};

use cra_trace::{ChainHead, EventDraft, TraceEvent, seal};
use cra_wire::IdGenerator;
use serde_json::{Value, json};

use crate::eval::{CountersSnapshot, ResolveOptions, resolve};
use crate::explain::Outcome;
use crate::index::AtlasSet;
use crate::types::{CarpRequest, Resolution};
use crate::validate::parse_request;

/// Event type carrying the full request, atlas digests and counters.
pub const REQUEST_RECEIVED: &str = "carp.request.received";
/// Event type carrying the full resolution.
pub const RESOLUTION_COMPLETED: &str = "carp.resolution.completed";

/// Members ignored when comparing resolutions: generated ids and instants (plus every
/// constraint's `parameters/approval_id`, see [`ignored`]).
const IGNORED: [&str; 5] = [
    "/resolution_id",
    "/timestamp",
    "/trace_id",
    "/decision/approval_id",
    "/decision/expires_at",
];

/// The audit events of one resolve (errata, "Events each operation emits"), in order:
/// `carp.request.received` (full request, atlas digests, counters), one `policy.evaluated` per
/// candidate action, one `context.injected` per block, `carp.resolution.completed` (full
/// resolution). `resolution` must carry `explain` (resolve with `explain: true`); it is removed
/// from the recorded resolution.
pub fn resolve_drafts(
    request: &CarpRequest,
    resolution: &Resolution,
    atlas_digests: &BTreeMap<String, String>,
    counters: &CountersSnapshot,
    ids: &dyn IdGenerator,
) -> Vec<EventDraft> {
    let trace_id = resolution.trace_id.clone();
    let root = ids.new_id();
    let draft =
        |event_type: &str, parent: Option<String>, span: String, payload: Value| EventDraft {
            trace_id: trace_id.clone(),
            span_id: span,
            parent_span_id: parent,
            event_type: event_type.to_owned(),
            payload,
        };
    let mut out = Vec::new();
    let mut req = json!({
        "request_id": request.request_id,
        "operation": request.operation.as_str(),
        "request": request,
        "atlas_digests": atlas_digests,
    });
    if !counters.rate.is_empty() || !counters.budget.is_empty() {
        req["counters"] = json!({"rate": counters.rate, "budget": counters.budget});
    }
    out.push(draft(REQUEST_RECEIVED, None, root.clone(), req));
    if let Some(ex) = &resolution.explain {
        for a in &ex.actions {
            let result = match a.outcome {
                Outcome::Allow => "allow",
                Outcome::RequiresApproval => "requires_approval",
                Outcome::Deny => "deny",
            };
            out.push(draft(
                "policy.evaluated",
                Some(root.clone()),
                ids.new_id(),
                json!({"policy_id": a.decided_by, "result": result, "action_id": a.action_id}),
            ));
        }
    }
    for b in &resolution.context_blocks {
        out.push(draft(
            "context.injected",
            Some(root.clone()),
            ids.new_id(),
            json!({"block_id": b.block_id, "source": b.source, "priority": b.priority,
                   "token_estimate": b.token_estimate}),
        ));
    }
    let mut recorded = resolution.clone();
    recorded.explain = None;
    out.push(draft(
        RESOLUTION_COMPLETED,
        Some(root),
        ids.new_id(),
        json!({
            "resolution_id": recorded.resolution_id,
            "request_id": recorded.request_id,
            "decision_type": recorded.decision.kind.as_str(),
            "resolution": recorded,
        }),
    ));
    out
}

/// Seals drafts into a new chain for `session_id`, starting with `session.started`.
pub fn seal_session(
    session_id: &str,
    agent_id: &str,
    timestamp: &str,
    drafts: Vec<EventDraft>,
    ids: &dyn IdGenerator,
) -> Vec<TraceEvent> {
    let mut head = ChainHead::genesis();
    let mut out = Vec::with_capacity(drafts.len() + 1);
    let start = EventDraft {
        trace_id: ids.new_id(),
        span_id: ids.new_id(),
        parent_span_id: None,
        event_type: "session.started".to_owned(),
        payload: json!({"agent_id": agent_id}),
    };
    for d in std::iter::once(start).chain(drafts) {
        let e = seal(d, session_id, &head, ids.new_id(), timestamp.to_owned());
        head = ChainHead {
            next_sequence: e.sequence + 1,
            head_hash: e.event_hash.clone(),
        };
        out.push(e);
    }
    out
}

/// How one recorded resolve replayed.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseOutcome {
    /// Same resolution (ids and timestamps aside).
    Same,
    /// The first difference, by JSON pointer.
    Diverged {
        /// Where.
        pointer: String,
        /// What the trace recorded there (`null` when absent).
        recorded: Value,
        /// What the replay produced there (`null` when absent).
        replayed: Value,
    },
    /// The case could not be replayed.
    Error(String),
}

/// One replayed resolve.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayCase {
    /// The request's id.
    pub request_id: String,
    /// The trace id pairing request and resolution.
    pub trace_id: String,
    /// The request's goal (a readable name for the case).
    pub goal: String,
    /// The sequence of the request event.
    pub sequence: u64,
    /// The verdict.
    pub outcome: CaseOutcome,
    /// Whether the atlas digests in force differ from the recorded ones (informative: the
    /// resolution comparison decides).
    pub digests_changed: bool,
    /// Policies that decided an action, attached a constraint or denied by exhaustion.
    pub policies_fired: BTreeSet<(String, String)>,
    /// Actions that were decided (allowed or denied).
    pub actions_decided: BTreeSet<(String, String)>,
}

/// Replays every resolve recorded in `events`.
pub fn replay(events: &[TraceEvent], atlases: &AtlasSet) -> Vec<ReplayCase> {
    let mut recorded: BTreeMap<&str, &Value> = BTreeMap::new();
    for e in events {
        if e.event_type == RESOLUTION_COMPLETED
            && let Some(r) = e.payload.get("resolution")
        {
            recorded.insert(e.trace_id.as_str(), r);
        }
    }
    let digests = atlases.digests();
    events
        .iter()
        .filter(|e| e.event_type == REQUEST_RECEIVED)
        .map(|e| {
            replay_one(
                e,
                recorded.get(e.trace_id.as_str()).copied(),
                atlases,
                &digests,
            )
        })
        .collect()
}

fn replay_one(
    event: &TraceEvent,
    recorded: Option<&Value>,
    atlases: &AtlasSet,
    digests: &BTreeMap<String, String>,
) -> ReplayCase {
    let mut case = ReplayCase {
        request_id: String::new(),
        trace_id: event.trace_id.clone(),
        goal: String::new(),
        sequence: event.sequence,
        outcome: CaseOutcome::Same,
        digests_changed: false,
        policies_fired: BTreeSet::new(),
        actions_decided: BTreeSet::new(),
    };
    let fail = |mut c: ReplayCase, m: String| {
        c.outcome = CaseOutcome::Error(m);
        c
    };
    let Some(req_value) = event.payload.get("request") else {
        return fail(case, "the request event carries no `request`".into());
    };
    let request = match parse_request(req_value) {
        Ok(r) => r,
        Err(e) => return fail(case, format!("the recorded request is invalid: {e}")),
    };
    case.request_id = request.request_id.clone();
    case.goal = request
        .task
        .as_ref()
        .map(|t| t.goal.clone())
        .unwrap_or_default();
    if let Some(d) = event
        .payload
        .get("atlas_digests")
        .and_then(Value::as_object)
    {
        case.digests_changed = d
            .iter()
            .any(|(id, h)| digests.get(id).map(String::as_str) != h.as_str());
    }
    let Some(recorded) = recorded else {
        return fail(
            case,
            format!(
                "no {RESOLUTION_COMPLETED} event with trace_id {}",
                event.trace_id
            ),
        );
    };
    let counters = match event.payload.get("counters") {
        None => CountersSnapshot::empty(),
        Some(c) => match serde_json::from_value::<CountersSnapshot>(c.clone()) {
            Ok(s) => CountersSnapshot::new(s.rate, s.budget),
            Err(e) => return fail(case, format!("the recorded counters are unreadable: {e}")),
        },
    };
    let now = match cra_wire::clock::parse_rfc3339(&event.timestamp) {
        Ok(t) => t,
        Err(e) => return fail(case, e.to_string()),
    };
    let ttl = recorded
        .get("ttl_seconds")
        .and_then(Value::as_u64)
        .unwrap_or(crate::eval::DEFAULT_TTL_SECONDS);
    let options = ResolveOptions {
        ttl_seconds: ttl,
        explain: true,
        trace_id: None,
    };
    let ids = cra_wire::SequentialIds::new(0, 0);
    let mut res = match resolve(&request, atlases, &counters, now, &ids, &options) {
        Ok(r) => r,
        Err(e) => return fail(case, format!("re-resolving failed: {e}")),
    };
    if let Some(ex) = res.explain.take() {
        for a in ex.actions {
            case.actions_decided
                .insert((a.atlas_id.clone(), a.action_id.clone()));
            for p in a.policies {
                if matches!(p.effect.as_str(), "decided" | "constraint" | "exhausted") {
                    case.policies_fired
                        .insert((a.atlas_id.clone(), p.policy_id));
                }
            }
        }
    }
    let replayed = match serde_json::to_value(&res) {
        Ok(v) => v,
        Err(e) => return fail(case, e.to_string()),
    };
    if let Some((pointer, a, b)) = first_difference("", recorded, &replayed) {
        case.outcome = CaseOutcome::Diverged {
            pointer,
            recorded: a,
            replayed: b,
        };
    }
    case
}

fn ignored(path: &str) -> bool {
    IGNORED.contains(&path)
        || (path.starts_with("/constraints/") && path.ends_with("/parameters/approval_id"))
}

fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// The first place where `a` and `b` differ, in document order, skipping ids and timestamps.
pub fn first_difference(path: &str, a: &Value, b: &Value) -> Option<(String, Value, Value)> {
    if ignored(path) {
        return None;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}/{}", escape(k));
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => {
                        if let Some(d) = first_difference(&p, va, vb) {
                            return Some(d);
                        }
                    }
                    (va, vb) if !ignored(&p) => {
                        return Some((
                            p,
                            va.cloned().unwrap_or(Value::Null),
                            vb.cloned().unwrap_or(Value::Null),
                        ));
                    }
                    _ => {}
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}/{i}");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => {
                        if let Some(d) = first_difference(&p, va, vb) {
                            return Some(d);
                        }
                    }
                    (va, vb) => {
                        return Some((
                            p,
                            va.cloned().unwrap_or(Value::Null),
                            vb.cloned().unwrap_or(Value::Null),
                        ));
                    }
                }
            }
            None
        }
        _ => (a != b).then(|| (path.to_owned(), a.clone(), b.clone())),
    }
}
