//! State reconstruction (spec §4.5, "State Reconstruction"): a session's CARP state rebuilt from
//! its TRACE chain alone, and compared with what the store holds.
//!
//! [`reconstruct`] is a pure function over the events. It rebuilds:
//!
//! * the **session**: owner (`session.started`), parent, whether it ended (`session.ended`);
//! * every **resolution** (`carp.resolution.completed` carries the full resolution): decision,
//!   allowed and denied actions, its approval, its expiry (`timestamp + ttl_seconds`);
//! * every **execution** (`action.requested` opens one; `action.approved` means it was cleared
//!   and its limits consumed; `action.executed` / `action.failed` / `action.denied` /
//!   `action.pending_approval` end it;
//!   `action.deduplicated` counts a repeated idempotency key answered from the first response);
//! * every **approval**: opened by the execute it gates (`approval.requested` naming the call;
//!   before round 2, by its `requires_approval` resolution, announced just before it), decided by
//!   `approval.granted` / `approval.rejected`;
//! * the **rate-limit and budget counters** the session charged: each cleared execution charges
//!   the rate_limit and budget constraints of its resolution that bind its action (the same rule
//!   as [`crate::execute::authorize`]), with the scope's key built from the requester.
//!
//! Anything the events do not allow to rebuild (an execution under a resolution the trace does
//! not hold, an unreadable payload) becomes an [`Issue`]; nothing here panics on input.
//!
//! [`compare_with_store`] then reads the same records from a [`CarpStore`] and lists every
//! difference as a pointer into the state with both values. What cannot be compared is said in
//! `unchecked`: the store looks executions up only by idempotency key, records only executions
//! that ran (not denied or pending ones), and counts agent- and global-scoped limits across
//! sessions (so the store may hold more than this session charged).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use crate::eval::{scope_key, seconds_to_us, unix_micros};
use crate::index::{Scope, budget_cost};
use crate::replay::{REQUEST_RECEIVED, RESOLUTION_COMPLETED};
use crate::store::{ApprovalStatus, CarpStore, CarpStoreError, StoredResolution};
use crate::types::{ConstraintType, DecisionType, Operation, Resolution};
use cra_trace::TraceEvent;

/// Where an execution stands in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Requested; nothing else recorded yet.
    Requested,
    /// Cleared to run (limits consumed); no outcome recorded yet.
    Approved,
    /// Ran and succeeded (`action.executed`).
    Success,
    /// Ran and failed (`action.failed`).
    Error,
    /// Refused (`action.denied`, any token but `approval_pending`).
    Denied,
    /// Waiting for an approval (`action.pending_approval`; older chains: `action.denied` with
    /// `approval_pending`).
    PendingApproval,
}

impl ExecutionStatus {
    /// Whether the store keeps an execution record for this status (only executions that ran).
    pub fn is_recorded(self) -> bool {
        matches!(self, ExecutionStatus::Success | ExecutionStatus::Error)
    }
}

/// The session itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// The session of the chain (from its events).
    pub session_id: Option<String>,
    /// Its owner (`session.started` `agent_id`).
    pub agent_id: Option<String>,
    /// Its parent session, if any.
    pub parent_session_id: Option<String>,
    /// Whether the chain holds `session.ended`.
    pub ended: bool,
}

/// A resolution rebuilt from `carp.resolution.completed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolutionState {
    /// Its id.
    pub resolution_id: String,
    /// The request it answered.
    pub request_id: String,
    /// Its trace id.
    pub trace_id: String,
    /// The requester (from the paired `carp.request.received`, else the session owner).
    pub agent_id: Option<String>,
    /// `allow`, `partial`, `deny` or `requires_approval`.
    pub decision: String,
    /// Allowed action ids, in order.
    pub allowed: Vec<String>,
    /// Denied action ids, in order.
    pub denied: Vec<String>,
    /// The approval it issued, if any.
    pub approval_id: Option<String>,
    /// When it expires: its `timestamp + ttl_seconds`, Unix microseconds.
    pub expires_at_us: i64,
    /// The sequence of its event.
    pub sequence: u64,
    /// The full resolution as recorded (compared with the stored copy; not printed).
    #[serde(skip)]
    pub resolution: Resolution,
}

/// An execution rebuilt from the `action.*` events sharing its `execution_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutionState {
    /// Its id.
    pub execution_id: String,
    /// The execute request.
    pub request_id: Option<String>,
    /// The resolution it ran under.
    pub resolution_id: Option<String>,
    /// The action.
    pub action_id: Option<String>,
    /// The client's idempotency key, if it sent one.
    pub idempotency_key: Option<String>,
    /// Where it stands.
    pub status: ExecutionStatus,
    /// The refusal or failure token, if any.
    pub error: Option<String>,
    /// `sha256:` of the canonical result, on success.
    pub result_hash: Option<String>,
    /// Repeats of its idempotency key answered with its response.
    pub deduplicated: u64,
    /// The sequence of its first event.
    pub sequence: u64,
}

/// An approval rebuilt from its resolution and its decision event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalState {
    /// Its id.
    pub approval_id: String,
    /// The resolution that issued it.
    pub resolution_id: String,
    /// The gated action ids.
    pub actions: Vec<String>,
    /// `pending`, `granted` or `rejected`.
    pub status: ApprovalStatus,
    /// Who decided, once decided.
    pub decided_by: Option<String>,
    /// The decider's note.
    pub note: Option<String>,
    /// When it was issued (the resolution's timestamp).
    pub created_at: String,
    /// When it lapses (Unix microseconds; the resolution's expiry).
    pub expires_at_us: i64,
}

/// Rate limit or budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// Executions counted by a rate_limit policy.
    Rate,
    /// Units spent against a budget policy.
    Budget,
}

/// What this session charged to one counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterState {
    /// The rate_limit or budget policy.
    pub policy_id: String,
    /// `session:<id>`, `agent:<id>` or `global`.
    pub scope_key: String,
    /// Rate limit or budget.
    pub kind: CounterKind,
    /// Executions (rate) or units (budget) this session charged.
    pub value: u64,
}

/// Something the trace did not allow to rebuild.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    /// The event's sequence.
    pub sequence: u64,
    /// What is missing or unreadable.
    pub message: String,
}

/// A session's CARP state as its trace tells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionState {
    /// The session.
    pub session: SessionInfo,
    /// Resolutions by id.
    pub resolutions: BTreeMap<String, ResolutionState>,
    /// Resolve requests refused by a rule (`carp.request.rejected`): request id to token.
    pub rejected_requests: BTreeMap<String, String>,
    /// Executions by id.
    pub executions: BTreeMap<String, ExecutionState>,
    /// Approvals by id.
    pub approvals: BTreeMap<String, ApprovalState>,
    /// Counters charged, ordered by policy, scope and kind.
    pub counters: Vec<CounterState>,
    /// What could not be rebuilt.
    pub issues: Vec<Issue>,
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn scope_of(v: Option<&Value>) -> Scope {
    match v.and_then(Value::as_str) {
        Some("session") => Scope::Session,
        Some("global") => Scope::Global,
        _ => Scope::Agent,
    }
}

/// Rebuilds a session's state from its events (see the module documentation).
pub fn reconstruct(events: &[TraceEvent]) -> SessionState {
    let mut st = SessionState::default();
    // trace_id -> (requester agent, operation) of each carp.request.received.
    let mut requests: BTreeMap<&str, (Option<String>, Option<String>)> = BTreeMap::new();
    let mut counters: BTreeMap<(String, String, CounterKind), u64> = BTreeMap::new();
    // approval.requested comes before the resolution that issues the approval: checked at the end.
    let mut announced: Vec<(u64, String)> = Vec::new();
    for e in events {
        let p = &e.payload;
        let issue = |st: &mut SessionState, message: String| {
            st.issues.push(Issue {
                sequence: e.sequence,
                message,
            });
        };
        if st.session.session_id.is_none() {
            st.session.session_id = Some(e.session_id.clone());
        }
        match e.event_type.as_str() {
            "session.started" => {
                st.session.agent_id = text(p, "agent_id");
                st.session.parent_session_id = text(p, "parent_session_id");
            }
            "session.ended" => st.session.ended = true,
            REQUEST_RECEIVED => {
                let agent = p
                    .pointer("/request/requester/agent_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let op = p
                    .pointer("/request/operation")
                    .or_else(|| p.get("operation"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                requests.insert(e.trace_id.as_str(), (agent, op));
            }
            "carp.request.rejected" => {
                let id = text(p, "request_id").unwrap_or_default();
                let token = text(p, "error").unwrap_or_default();
                st.rejected_requests.insert(id, token);
            }
            RESOLUTION_COMPLETED => {
                let Some(raw) = p.get("resolution") else {
                    issue(
                        &mut st,
                        "the resolution event carries no `resolution`".into(),
                    );
                    continue;
                };
                let res: Resolution = match serde_json::from_value(raw.clone()) {
                    Ok(r) => r,
                    Err(err) => {
                        issue(
                            &mut st,
                            format!("the recorded resolution is unreadable: {err}"),
                        );
                        continue;
                    }
                };
                let (agent, op) = requests
                    .get(e.trace_id.as_str())
                    .cloned()
                    .unwrap_or((None, None));
                if op.as_deref() == Some(Operation::Validate.as_str()) {
                    // A dry run: nothing was stored.
                    continue;
                }
                let at = match cra_wire::clock::parse_rfc3339(&res.timestamp) {
                    Ok(t) => t,
                    Err(err) => {
                        issue(&mut st, format!("the resolution's timestamp: {err}"));
                        continue;
                    }
                };
                let expires_at_us = unix_micros(at).saturating_add(seconds_to_us(res.ttl_seconds));
                // Before round 2 a resolve opened its approval (announced just before this
                // event); since, the execute it gates opens it (below).
                if res.decision.kind == DecisionType::RequiresApproval
                    && let Some(approval_id) = &res.decision.approval_id
                    && announced.iter().any(|(_, id)| id == approval_id)
                {
                    st.approvals.insert(
                        approval_id.clone(),
                        ApprovalState {
                            approval_id: approval_id.clone(),
                            resolution_id: res.resolution_id.clone(),
                            actions: res
                                .allowed_actions
                                .iter()
                                .filter(|a| a.requires_confirmation)
                                .map(|a| a.action_id.to_string())
                                .collect(),
                            status: ApprovalStatus::Pending,
                            decided_by: None,
                            note: None,
                            created_at: res.timestamp.clone(),
                            expires_at_us,
                        },
                    );
                }
                st.resolutions.insert(
                    res.resolution_id.clone(),
                    ResolutionState {
                        resolution_id: res.resolution_id.clone(),
                        request_id: res.request_id.clone(),
                        trace_id: res.trace_id.clone(),
                        agent_id: agent.or_else(|| st.session.agent_id.clone()),
                        decision: res.decision.kind.as_str().to_owned(),
                        allowed: res
                            .allowed_actions
                            .iter()
                            .map(|a| a.action_id.to_string())
                            .collect(),
                        denied: res
                            .denied_actions
                            .iter()
                            .map(|a| a.action_id.to_string())
                            .collect(),
                        approval_id: res.decision.approval_id.clone(),
                        expires_at_us,
                        sequence: e.sequence,
                        resolution: res,
                    },
                );
            }
            "approval.requested" => match text(p, "approval_id") {
                Some(id) if p.get("execution_id").is_some() => {
                    if let Err(m) = opened_by_execute(&mut st, &id, e) {
                        issue(&mut st, m);
                    }
                }
                Some(id) => announced.push((e.sequence, id)),
                None => issue(&mut st, "approval.requested without `approval_id`".into()),
            },
            "approval.granted" | "approval.rejected" => {
                let Some(id) = text(p, "approval_id") else {
                    issue(&mut st, format!("{} without `approval_id`", e.event_type));
                    continue;
                };
                let Some(a) = st.approvals.get_mut(&id) else {
                    issue(
                        &mut st,
                        format!(
                            "approval {id} is decided but no resolution in the trace issued it"
                        ),
                    );
                    continue;
                };
                a.status = if e.event_type == "approval.granted" {
                    ApprovalStatus::Granted
                } else {
                    ApprovalStatus::Rejected
                };
                a.decided_by = p
                    .pointer("/decided_by/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                a.note = text(p, "note");
            }
            "action.requested" => {
                let Some(id) = text(p, "execution_id") else {
                    issue(&mut st, "action.requested without `execution_id`".into());
                    continue;
                };
                st.executions.insert(
                    id.clone(),
                    ExecutionState {
                        execution_id: id,
                        request_id: text(p, "request_id"),
                        resolution_id: text(p, "resolution_id"),
                        action_id: text(p, "action_id"),
                        idempotency_key: text(p, "idempotency_key"),
                        status: ExecutionStatus::Requested,
                        error: None,
                        result_hash: None,
                        deduplicated: 0,
                        sequence: e.sequence,
                    },
                );
            }
            "action.approved"
            | "action.executed"
            | "action.failed"
            | "action.denied"
            | "action.pending_approval"
            | "action.deduplicated" => {
                let Some(id) = text(p, "execution_id") else {
                    issue(&mut st, format!("{} without `execution_id`", e.event_type));
                    continue;
                };
                let Some(x) = st.executions.get_mut(&id) else {
                    issue(
                        &mut st,
                        format!(
                            "{} for execution {id}, which no action.requested announced",
                            e.event_type
                        ),
                    );
                    continue;
                };
                match e.event_type.as_str() {
                    "action.approved" => {
                        x.status = ExecutionStatus::Approved;
                        let (rid, action) = (x.resolution_id.clone(), x.action_id.clone());
                        if let Err(m) =
                            charge(&st, rid.as_deref(), action.as_deref(), &mut counters)
                        {
                            issue(&mut st, m);
                        }
                    }
                    "action.executed" => {
                        x.status = ExecutionStatus::Success;
                        x.result_hash = text(p, "result_hash");
                    }
                    "action.failed" => {
                        x.status = ExecutionStatus::Error;
                        x.error = p
                            .pointer("/error/code")
                            .or_else(|| p.get("error_code"))
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                    }
                    "action.pending_approval" => {
                        x.status = ExecutionStatus::PendingApproval;
                        x.error = text(p, "error");
                    }
                    "action.denied" => {
                        // Chains written before `action.pending_approval` recorded a pending
                        // approval as a denial with its token.
                        let token = text(p, "error");
                        x.status = if token.as_deref() == Some("approval_pending") {
                            ExecutionStatus::PendingApproval
                        } else {
                            ExecutionStatus::Denied
                        };
                        x.error = token;
                    }
                    _ => x.deduplicated += 1,
                }
            }
            _ => {}
        }
    }
    for (sequence, id) in announced {
        if !st.approvals.contains_key(&id) {
            st.issues.push(Issue {
                sequence,
                message: format!(
                    "approval {id} is announced but no resolution in the trace issued it"
                ),
            });
        }
    }
    st.counters = counters
        .into_iter()
        .map(|((policy_id, scope_key, kind), value)| CounterState {
            policy_id,
            scope_key,
            kind,
            value,
        })
        .collect();
    st
}

/// Records the approval an execute opened (`approval.requested` with its call): pending, for
/// the one action it names, lapsing with its resolution.
fn opened_by_execute(st: &mut SessionState, id: &str, e: &TraceEvent) -> Result<(), String> {
    let p = &e.payload;
    let rid = text(p, "resolution_id").ok_or("approval.requested without `resolution_id`")?;
    let Some(r) = st.resolutions.get(&rid) else {
        return Err(format!(
            "approval {id} is opened under resolution {rid}, which the trace does not hold"
        ));
    };
    let actions = p
        .get("actions")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let state = ApprovalState {
        approval_id: id.to_owned(),
        resolution_id: rid,
        actions,
        status: ApprovalStatus::Pending,
        decided_by: None,
        note: None,
        created_at: e.timestamp.clone(),
        expires_at_us: r.expires_at_us,
    };
    st.approvals.insert(id.to_owned(), state);
    Ok(())
}

/// Adds the charges of a cleared execution of `action` under `resolution_id` to `counters`.
fn charge(
    st: &SessionState,
    resolution_id: Option<&str>,
    action: Option<&str>,
    counters: &mut BTreeMap<(String, String, CounterKind), u64>,
) -> Result<(), String> {
    let (Some(rid), Some(action)) = (resolution_id, action) else {
        return Err("a cleared execution names no resolution or action".into());
    };
    let Some(r) = st.resolutions.get(rid) else {
        return Err(format!(
            "execution under resolution {rid}, which the trace does not hold: its limits cannot be counted"
        ));
    };
    let agent = r.agent_id.as_deref().unwrap_or_default();
    let session = st.session.session_id.as_deref().unwrap_or_default();
    for c in &r.resolution.constraints {
        if !c.parameters.binds(action) {
            continue;
        }
        let p = &c.parameters;
        let policy_id = p
            .get("policy_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let key = scope_key(scope_of(p.get("scope")), agent, session);
        match c.kind {
            ConstraintType::RateLimit => {
                *counters
                    .entry((policy_id, key, CounterKind::Rate))
                    .or_default() += 1;
            }
            ConstraintType::Budget => {
                let costs = p
                    .get("costs")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let units = budget_cost(&costs, action);
                let slot = counters
                    .entry((policy_id, key, CounterKind::Budget))
                    .or_default();
                *slot = slot.saturating_add(units);
            }
            ConstraintType::RequireApproval
            | ConstraintType::TimeWindow
            | ConstraintType::Parameters => {}
        }
    }
    Ok(())
}

/// One place where the trace and the store disagree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateDifference {
    /// JSON pointer into the state (`/resolutions/<id>/...`, `/approvals/<id>/status`, ...).
    pub pointer: String,
    /// What the trace says (`null` when it has nothing there).
    pub trace: Value,
    /// What the store holds (`null` when it has nothing there).
    pub store: Value,
}

/// The result of [`compare_with_store`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StateComparison {
    /// Records compared, by kind (`session`, `resolutions`, `approvals`, `executions`,
    /// `counters`).
    pub checked: BTreeMap<String, u64>,
    /// Every disagreement.
    pub differences: Vec<StateDifference>,
    /// What could not be compared, and why.
    pub unchecked: Vec<String>,
}

impl StateComparison {
    /// True when the store holds what the trace says.
    pub fn is_equal(&self) -> bool {
        self.differences.is_empty()
    }

    fn differ(&mut self, pointer: String, trace: Value, store: Value) {
        if trace != store {
            self.differences.push(StateDifference {
                pointer,
                trace,
                store,
            });
        }
    }

    fn count(&mut self, kind: &str) {
        *self.checked.entry(kind.to_owned()).or_default() += 1;
    }
}

fn seg(s: &str) -> String {
    let mut p = String::new();
    cra_wire::json::push_pointer_segment(&mut p, s);
    p
}

/// Every leaf where `a` and `b` differ, as `(pointer, a, b)` with `null` for an absent side.
fn all_differences(pointer: &str, a: &Value, b: &Value, out: &mut Vec<(String, Value, Value)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{pointer}{}", seg(k));
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => all_differences(&p, va, vb, out),
                    (va, vb) => out.push((
                        p,
                        va.cloned().unwrap_or(Value::Null),
                        vb.cloned().unwrap_or(Value::Null),
                    )),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                all_differences(&format!("{pointer}/{i}"), va, vb, out);
            }
        }
        _ => {
            if a != b {
                out.push((pointer.to_owned(), a.clone(), b.clone()));
            }
        }
    }
}

fn opt(v: Option<&str>) -> Value {
    v.map_or(Value::Null, Value::from)
}

/// Compares a reconstructed state with the store's records of the same session (see the module
/// documentation for what cannot be compared). Fails only when the store fails.
pub fn compare_with_store(
    state: &SessionState,
    store: &dyn CarpStore,
) -> Result<StateComparison, CarpStoreError> {
    let mut cmp = StateComparison::default();
    let session_id = state.session.session_id.clone().unwrap_or_default();

    // The session.
    cmp.count("session");
    match store.get_session(&session_id)? {
        None => cmp.differ(
            "/session".into(),
            json!({"session_id": session_id}),
            Value::Null,
        ),
        Some(s) => {
            cmp.differ(
                "/session/agent_id".into(),
                opt(state.session.agent_id.as_deref()),
                Value::from(s.agent_id.as_str()),
            );
            cmp.differ(
                "/session/parent_session_id".into(),
                opt(state.session.parent_session_id.as_deref()),
                opt(s.parent_session_id.as_deref()),
            );
            cmp.differ(
                "/session/ended".into(),
                Value::Bool(state.session.ended),
                Value::Bool(s.ended_at.is_some()),
            );
        }
    }

    // Resolutions: the stored copy must be the recorded one (in its stored form, without the
    // context blocks), for this session and requester.
    for (id, r) in &state.resolutions {
        cmp.count("resolutions");
        let base = format!("/resolutions{}", seg(id));
        let Some(stored) = store.get_resolution(id)? else {
            cmp.differ(base, Value::from(r.decision.as_str()), Value::Null);
            continue;
        };
        cmp.differ(
            format!("{base}/session_id"),
            Value::from(session_id.as_str()),
            Value::from(stored.session_id.as_str()),
        );
        cmp.differ(
            format!("{base}/agent_id"),
            opt(r.agent_id.as_deref()),
            Value::from(stored.agent_id.as_str()),
        );
        cmp.differ(
            format!("{base}/expires_at_us"),
            Value::from(r.expires_at_us),
            Value::from(stored.expires_at_us),
        );
        let ours = serde_json::to_value(StoredResolution::stored_form(&r.resolution))
            .unwrap_or(Value::Null);
        // Copies stored before the stored form dropped the blocks still compare equal.
        let theirs = serde_json::to_value(StoredResolution::stored_form(&stored.resolution))
            .unwrap_or(Value::Null);
        let mut diffs = Vec::new();
        all_differences(&format!("{base}/resolution"), &ours, &theirs, &mut diffs);
        for (p, a, b) in diffs {
            cmp.differ(p, a, b);
        }
    }

    // Approvals.
    for (id, a) in &state.approvals {
        cmp.count("approvals");
        let base = format!("/approvals{}", seg(id));
        let Some(s) = store.get_approval(id)? else {
            cmp.differ(base, Value::from(a.status.as_str()), Value::Null);
            continue;
        };
        cmp.differ(
            format!("{base}/status"),
            Value::from(a.status.as_str()),
            Value::from(s.status.as_str()),
        );
        cmp.differ(
            format!("{base}/resolution_id"),
            Value::from(a.resolution_id.as_str()),
            Value::from(s.resolution_id.as_str()),
        );
        cmp.differ(
            format!("{base}/session_id"),
            Value::from(session_id.as_str()),
            Value::from(s.session_id.as_str()),
        );
        cmp.differ(
            format!("{base}/actions"),
            json!(a.actions),
            json!(s.actions),
        );
        cmp.differ(
            format!("{base}/decided_by"),
            opt(a.decided_by.as_deref()),
            opt(s.decided_by.as_deref()),
        );
        cmp.differ(
            format!("{base}/note"),
            opt(a.note.as_deref()),
            opt(s.note.as_deref()),
        );
        cmp.differ(
            format!("{base}/created_at"),
            Value::from(a.created_at.as_str()),
            Value::from(s.created_at.as_str()),
        );
        cmp.differ(
            format!("{base}/expires_at_us"),
            Value::from(a.expires_at_us),
            Value::from(s.expires_at_us),
        );
    }

    // Executions that ran are recorded; the store finds them by idempotency key only.
    let mut unkeyed = 0u64;
    for (id, x) in &state.executions {
        if !x.status.is_recorded() {
            continue;
        }
        let Some(key) = &x.idempotency_key else {
            unkeyed += 1;
            continue;
        };
        cmp.count("executions");
        let base = format!("/executions{}", seg(id));
        let Some(rec) = store.get_execution_by_key(&session_id, key)? else {
            cmp.differ(base, json!(x.status), Value::Null);
            continue;
        };
        let r = &rec.response;
        cmp.differ(
            format!("{base}/execution_id"),
            Value::from(id.as_str()),
            Value::from(rec.execution_id.as_str()),
        );
        cmp.differ(format!("{base}/status"), json!(x.status), json!(r.status));
        cmp.differ(
            format!("{base}/request_id"),
            opt(x.request_id.as_deref()),
            Value::from(r.request_id.as_str()),
        );
        cmp.differ(
            format!("{base}/resolution_id"),
            opt(x.resolution_id.as_deref()),
            Value::from(r.resolution_id.as_str()),
        );
        let stored_hash = r.result.as_ref().map(cra_wire::hash::canonical_digest);
        cmp.differ(
            format!("{base}/result_hash"),
            opt(x.result_hash.as_deref()),
            opt(stored_hash.as_deref()),
        );
        cmp.differ(
            format!("{base}/error"),
            opt(x.error.as_deref()),
            opt(r.error.as_ref().map(|e| e.code.as_str())),
        );
    }
    if unkeyed > 0 {
        cmp.unchecked.push(format!(
            "{unkeyed} execution(s) without an idempotency key: the store finds executions only by key"
        ));
    }

    // Counters: exact for session scope; at least this session's share for agent and global.
    let session_scope = format!("session:{session_id}");
    for c in &state.counters {
        cmp.count("counters");
        let stored = match c.kind {
            CounterKind::Rate => {
                store.rate_count(&c.policy_id, &c.scope_key, i64::MIN, i64::MAX)?
            }
            CounterKind::Budget => store.budget_spent(&c.policy_id, &c.scope_key)?,
        };
        let pointer = format!("/counters{}{}", seg(&c.policy_id), seg(&c.scope_key));
        // Only this session charges a session counter; others may add to the rest.
        let exact = c.scope_key == session_scope;
        if exact || stored < c.value {
            cmp.differ(pointer, Value::from(c.value), Value::from(stored));
        } else if stored > c.value {
            cmp.unchecked.push(format!(
                "counter {} {} is shared with other sessions: the store counts {stored}, this session {}",
                c.policy_id, c.scope_key, c.value
            ));
        }
    }
    Ok(cmp)
}
