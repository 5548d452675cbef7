//! Executes decided again offline: every `action.requested` recorded in a set of chains is
//! decided again, with [`crate::execute::authorize`], under the resolution its resolve was made
//! again into ([`crate::replay`]), and the verdict compared with the recorded one.
//!
//! What the re-decision reads, all from the chains and never from a store:
//!
//! * **The call**: `action.requested`'s `parameters` (chains written before they were recorded
//!   carry only `parameters_hash`: such an execute is reported as not decided again) and its
//!   `timestamp` as the decision's instant.
//! * **The requester**: the agent and session of the request whose resolution the call names.
//! * **History as recorded** (no counterfactual cascade). A mark of an `after` or `bind` test
//!   is left by every call recorded as succeeded (`action.executed`), at that event's instant,
//!   as the atlases decided under make marks ([`AtlasSet::marks`]). A counter (rate limit,
//!   budget, `count_within`, `sum_within`) holds the charges of every call recorded as cleared
//!   to run (`action.approved`) that the re-decision also clears; a call the new atlases refuse
//!   counts toward none, as those limits would never have seen it run. Calls in other chains
//!   count when those chains are given, so agent and global scopes need every chain.
//! * **What the call recorded it read comes first.** An execute records in its
//!   `action.requested` (`history`, [`HistoryRead`]) each mark it asked for and what each
//!   counter held. A re-decision that asks the same question (the same counter, key and window)
//!   takes the recorded answer: it is what the store held, other sessions' calls included, so a
//!   chain replayed alone is decided on the same history. Only a question the call did not ask
//!   (a changed atlas's, or any in a chain written before reads were recorded) is answered from
//!   the chains, and such a read of an agent or global scope marks the case
//!   [`ExecuteCase::reads_beyond_session`].
//! * **Approvals as recorded**: the approval of the recorded resolution stands as the chains
//!   last recorded it before the call (`approval.requested` opens it; `approval.granted`,
//!   `approval.rejected` decide it), and is taken to have been asked under the atlas in force
//!   now: the question is what the new policies decide, not whether a grant would be asked for
//!   again.
//!
//! The verdicts compared are `allow` (cleared to run), `requires_approval` (pending, or asking
//! for an approval) and `deny` with the refusing policy. An execute refused as a request rather
//! than by a policy (recorded `action.denied` with `policy_id: null`: an expired resolution, a
//! repeated idempotency key) and one with no recorded outcome are not decided again.

use std::collections::{BTreeMap, HashMap};

use cra_trace::TraceEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::eval::reaches_beyond_session;
use crate::execute::{Authorization, InForce, authorize, refusal_error};
use crate::history::{HistoryRead, earlier_units};
use crate::index::AtlasSet;
use crate::replay::{ReplayCase, ReplayedResolve};
use crate::store::{ApprovalCall, ApprovalRecord, ApprovalStatus, Charge, ConsumeOutcome};
use crate::types::{CarpRequest, Execution, Operation};
use crate::validate::{CarpError, check_action_allowed};

/// How an execute was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecuteVerdict {
    /// `allow`, `requires_approval` or `deny`.
    pub outcome: &'static str,
    /// The policy that refused (a deny only; `default_deny` when no policy allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_id: Option<String>,
    /// The refusal's token (a deny only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ExecuteVerdict {
    fn of(outcome: &'static str) -> Self {
        Self {
            outcome,
            policy_id: None,
            error: None,
        }
    }

    fn deny(refusal: &CarpError) -> Self {
        Self {
            outcome: "deny",
            policy_id: refusal.policy_id.clone(),
            error: Some(refusal.token.as_str().to_owned()),
        }
    }

    /// `deny by POLICY`, `allow`, `requires_approval`: the verdict in a report's words.
    pub fn describe(&self) -> String {
        match &self.policy_id {
            Some(p) => format!("{} by {p}", self.outcome),
            None => self.outcome.to_owned(),
        }
    }
}

/// What deciding one recorded execute again gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecuteReplay {
    /// Decided again: this verdict.
    Decided(ExecuteVerdict),
    /// Left out, as its recording says it must be (it was refused as a request, not by a
    /// policy; no outcome was recorded; the chain recorded only the parameters' digest), and
    /// why.
    LeftOut(String),
    /// Should have been decided again and could not be (its resolve is missing, or cannot
    /// be decided under the atlases), and why.
    NotDecided(String),
}

/// One recorded execute, decided again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteCase {
    /// The chain that recorded it.
    pub session_id: String,
    /// The sequence of its `action.requested`.
    pub sequence: u64,
    /// Its execution id.
    pub execution_id: String,
    /// The action.
    pub action_id: String,
    /// The resolution it ran under.
    pub resolution_id: String,
    /// How it was decided when recorded.
    pub recorded: ExecuteVerdict,
    /// How it is decided now.
    pub now: ExecuteReplay,
    /// Its decision read history of an agent or global scope (a counter or a mark) that the call
    /// did not record reading: calls of other sessions count there, so the given chains alone
    /// may not hold all of it.
    pub reads_beyond_session: bool,
}

impl ExecuteCase {
    /// The outcome changed (what `cra atlas simulate` counts as a flip).
    pub fn flipped(&self) -> bool {
        matches!(&self.now, ExecuteReplay::Decided(v) if v.outcome != self.recorded.outcome)
    }

    /// The outcome or the refusing policy changed (what `cra trace replay` counts as a
    /// divergence).
    pub fn diverged(&self) -> bool {
        matches!(&self.now, ExecuteReplay::Decided(v)
            if v.outcome != self.recorded.outcome || v.policy_id != self.recorded.policy_id)
    }
}

/// An `action.requested` and what its chain recorded after it.
struct Recorded<'e> {
    requested: &'e TraceEvent,
    at: OffsetDateTime,
    at_us: i64,
    verdict: Result<ExecuteVerdict, String>,
    /// Cleared to run (`action.approved`).
    ran: bool,
    /// When it succeeded (`action.executed`).
    succeeded_us: Option<i64>,
}

/// An approval's recorded life: `(instant, status)` in chain order, and the digest of the call
/// it was asked for.
#[derive(Default)]
struct RecordedApproval {
    states: Vec<(i64, ApprovalStatus)>,
    parameters_hash: Option<String>,
}

/// The recorded history a re-decision reads: marks and counter charges, each at its instant.
#[derive(Default)]
struct History {
    marks: HashMap<(String, String), Vec<i64>>,
    charges: HashMap<(String, String), Vec<(i64, u64)>>,
}

impl History {
    fn has_mark(&self, counter: &str, key: &str, since_us: i64, now_us: i64) -> bool {
        self.marks
            .get(&(counter.to_owned(), key.to_owned()))
            .is_some_and(|at| at.iter().any(|&t| since_us < t && t <= now_us))
    }

    /// The units counted for `charge`'s counter in `(since_us, now_us]`.
    fn used(&self, charge: &Charge, since_us: i64, now_us: i64) -> u64 {
        let key = (charge.policy_id.clone(), charge.scope_key.clone());
        self.charges.get(&key).map_or(0, |v| {
            v.iter()
                .filter(|(t, _)| since_us < *t && *t <= now_us)
                .map(|(_, u)| *u)
                .fold(0u64, u64::saturating_add)
        })
    }

    /// The first of `charges` that does not fit at `now_us`, as the store would refuse it, and
    /// whether a counter beyond the session was counted from the chains rather than read from
    /// `recorded` (what the call recorded the store's counters held).
    fn refused(
        &self,
        charges: &[Charge],
        now_us: i64,
        recorded: &HistoryRead,
    ) -> (Option<ConsumeOutcome>, bool) {
        let mut beyond = false;
        let refused = charges.iter().enumerate().find_map(|(at, c)| {
            let (max, need) = c.kind.cap_and_units();
            let used = recorded.counter_used(charges, at).unwrap_or_else(|| {
                beyond |= reaches_beyond_session(&c.scope_key);
                let since = c.kind.windowed().map_or(i64::MIN, |(_, _, window)| {
                    now_us.saturating_sub(crate::eval::seconds_to_us(window))
                });
                self.used(c, since, now_us)
                    .saturating_add(earlier_units(charges, at))
            });
            (used.saturating_add(need) > max).then(|| ConsumeOutcome::Refused {
                at,
                policy_id: c.policy_id.clone(),
                scope_key: c.scope_key.clone(),
                kind: c.kind.clone(),
                used,
            })
        });
        (refused, beyond)
    }

    fn charge(&mut self, charges: &[Charge], at_us: i64) {
        for c in charges {
            self.charges
                .entry((c.policy_id.clone(), c.scope_key.clone()))
                .or_default()
                .push((at_us, c.kind.cap_and_units().1));
        }
    }
}

fn micros(timestamp: &str) -> Option<i64> {
    cra_wire::clock::parse_rfc3339(timestamp)
        .ok()
        .map(crate::eval::unix_micros)
}

fn str_of<'e>(e: &'e TraceEvent, member: &str) -> Option<&'e str> {
    e.payload.get(member).and_then(Value::as_str)
}

/// The verdict a chain recorded for the execution `requested` opened, from the events after it.
fn recorded_in<'e>(chain: &'e [TraceEvent], at: usize) -> Option<Recorded<'e>> {
    let requested = &chain[at];
    let execution_id = str_of(requested, "execution_id")?;
    let instant = cra_wire::clock::parse_rfc3339(&requested.timestamp).ok()?;
    let mut out = Recorded {
        requested,
        at: instant,
        at_us: crate::eval::unix_micros(instant),
        verdict: Err("no outcome was recorded for it".to_owned()),
        ran: false,
        succeeded_us: None,
    };
    for e in chain[at + 1..]
        .iter()
        .filter(|e| str_of(e, "execution_id") == Some(execution_id))
    {
        match e.event_type.as_str() {
            "action.approved" => {
                out.ran = true;
                out.verdict = Ok(ExecuteVerdict::of("allow"));
            }
            "action.executed" => out.succeeded_us = micros(&e.timestamp),
            "action.pending_approval" => {
                out.verdict = Ok(ExecuteVerdict::of("requires_approval"));
            }
            "action.denied" => {
                let token = str_of(e, "error").unwrap_or_default();
                out.verdict = match str_of(e, "policy_id") {
                    Some(p) => Ok(ExecuteVerdict {
                        outcome: "deny",
                        policy_id: Some(p.to_owned()),
                        error: Some(token.to_owned()),
                    }),
                    None => Err(format!(
                        "it was refused as a request ({token}), not by a policy"
                    )),
                };
            }
            _ => {}
        }
    }
    Some(out)
}

/// Every approval's recorded life, from every chain.
fn recorded_approvals(chains: &[&[TraceEvent]]) -> HashMap<String, RecordedApproval> {
    let mut out: HashMap<String, RecordedApproval> = HashMap::new();
    for e in chains.iter().flat_map(|c| c.iter()) {
        let status = match e.event_type.as_str() {
            "approval.requested" => ApprovalStatus::Pending,
            "approval.granted" => ApprovalStatus::Granted,
            "approval.rejected" => ApprovalStatus::Rejected,
            _ => continue,
        };
        let (Some(id), Some(at)) = (str_of(e, "approval_id"), micros(&e.timestamp)) else {
            continue;
        };
        let a = out.entry(id.to_owned()).or_default();
        a.states.push((at, status));
        if let Some(h) = str_of(e, "parameters_hash") {
            a.parameters_hash = Some(h.to_owned());
        }
    }
    for a in out.values_mut() {
        a.states.sort_by_key(|(t, _)| *t);
    }
    out
}

/// What one re-decision needs besides the call.
struct Decide<'a> {
    resolve: &'a ReplayedResolve,
    atlases: &'a AtlasSet,
    approvals: &'a HashMap<String, RecordedApproval>,
    history: &'a History,
}

impl Decide<'_> {
    /// The recorded approval of the resolution as it stood at `now_us`, bound to this call's
    /// action under the atlas in force.
    fn approval(&self, action_id: &str, hash: &str, now_us: i64) -> Option<ApprovalRecord> {
        let id = self.resolve.resolution.decision.approval_id.as_deref()?;
        let recorded = self.approvals.get(id)?;
        let status = recorded
            .states
            .iter()
            .take_while(|(t, _)| *t <= now_us)
            .last()?
            .1;
        let (atlas_id, atlas_digest) = self.atlas_of(action_id)?;
        let requester = &self.resolve.request.requester;
        Some(ApprovalRecord {
            approval_id: id.to_owned(),
            resolution_id: self.resolve.resolution.resolution_id.clone(),
            session_id: requester.session_id.clone(),
            agent_id: requester.agent_id.clone(),
            actions: vec![action_id.to_owned()],
            created_at: String::new(),
            expires_at_us: i64::MAX,
            status,
            decided_by: None,
            decided_at: None,
            note: None,
            call: Some(ApprovalCall {
                execution_id: String::new(),
                action_id: action_id.to_owned(),
                parameters_hash: recorded.parameters_hash.clone().unwrap_or(hash.to_owned()),
                atlas_id: atlas_id.to_owned(),
                atlas_digest: atlas_digest.to_owned(),
            }),
        })
    }

    fn atlas_of(&self, action_id: &str) -> Option<(&str, &str)> {
        let a = self.atlases.declaring(action_id)?;
        Some((&a.atlas_id, &a.digest))
    }

    /// Decides `call` again: its verdict, the charges it takes when cleared, and whether it
    /// read history beyond its session.
    fn decide(
        &self,
        requested: &TraceEvent,
        parameters: &Value,
        now: OffsetDateTime,
    ) -> Result<(ExecuteVerdict, Vec<Charge>, bool), String> {
        let recorded = match requested.payload.get("history") {
            None => HistoryRead::default(),
            Some(v) => HistoryRead::deserialize(v)
                .map_err(|e| format!("its recorded `history` is not a history read ({e})"))?,
        };
        let recorded = &recorded;
        let now_us = crate::eval::unix_micros(now);
        let action_id = str_of(requested, "action_id").unwrap_or_default();
        let resolution = &self.resolve.resolution;
        let mut request: CarpRequest = self.resolve.request.clone();
        request.operation = Operation::Execute;
        request.task = None;
        request.execution = Some(Execution {
            resolution_id: resolution.resolution_id.clone(),
            action_id: action_id.to_owned(),
            parameters: parameters.clone(),
            idempotency_key: None,
            extra: serde_json::Map::new(),
        });
        let action = match check_action_allowed(&request, resolution) {
            Ok(a) => a,
            Err(refusal) => return Ok((ExecuteVerdict::deny(&refusal), Vec::new(), false)),
        };
        // The resolution was made again from these atlases, so they compiled the schema.
        let validator = self
            .atlases
            .validator_of(action)
            .ok_or("the atlases decided under do not declare the action with this schema")?;
        let hash = cra_wire::hash::canonical_digest(parameters);
        let approval = self.approval(action_id, &hash, now_us);
        let in_force = InForce {
            atlases: Some(self.atlases),
            atlas: self.atlas_of(action_id),
        };
        let beyond = std::cell::Cell::new(false);
        let mut marked = |counter: &str, key: &str, since_us: i64| {
            if let Some(found) = recorded.mark_found(counter, key, since_us, now_us) {
                return Ok(found);
            }
            beyond.set(beyond.get() || reaches_beyond_session(key));
            Ok(self.history.has_mark(counter, key, since_us, now_us))
        };
        let decided = authorize(
            &request,
            resolution,
            action,
            validator,
            approval.as_ref(),
            in_force,
            now,
            &mut marked,
        );
        let (verdict, charges) = match decided {
            Err(refusal) | Ok(Authorization::Denied(refusal)) => {
                (ExecuteVerdict::deny(&refusal), Vec::new())
            }
            Ok(Authorization::OpenApproval { .. } | Authorization::PendingApproval { .. }) => {
                (ExecuteVerdict::of("requires_approval"), Vec::new())
            }
            Ok(Authorization::Proceed { charges, .. }) => {
                let (refused, wide) = self.history.refused(&charges, now_us, recorded);
                beyond.set(beyond.get() || wide);
                match refused.as_ref().and_then(refusal_error) {
                    Some(refusal) => (ExecuteVerdict::deny(&refusal), Vec::new()),
                    None => (ExecuteVerdict::of("allow"), charges),
                }
            }
        };
        Ok((verdict, charges, beyond.get()))
    }
}

/// Decides again every execute recorded in `chains` under the resolutions `resolves` made
/// again (a case's own atlases when it has them, else `atlases`), in the order the calls were
/// recorded across chains (instant, then session, then sequence). `atlases` may be `None`
/// when every case carries its own ([`crate::replay::replay_library`]).
pub fn replay_executes(
    chains: &[&[TraceEvent]],
    resolves: &[ReplayCase],
    atlases: Option<&AtlasSet>,
) -> Vec<ExecuteCase> {
    let by_resolution: BTreeMap<&str, &ReplayedResolve> = resolves
        .iter()
        .filter_map(|c| c.replayed.as_deref())
        .map(|r| (r.recorded_resolution_id.as_str(), r))
        .collect();
    let approvals = recorded_approvals(chains);
    let mut calls: Vec<Recorded<'_>> = chains
        .iter()
        .flat_map(|chain| {
            chain
                .iter()
                .enumerate()
                .filter(|(_, e)| e.event_type == "action.requested")
                .filter_map(|(i, _)| recorded_in(chain, i))
        })
        .collect();
    calls.sort_by(|a, b| {
        (a.at_us, &a.requested.session_id, a.requested.sequence).cmp(&(
            b.at_us,
            &b.requested.session_id,
            b.requested.sequence,
        ))
    });
    let mut history = History::default();
    let mut out = Vec::with_capacity(calls.len());
    for call in &calls {
        let e = call.requested;
        let resolution_id = str_of(e, "resolution_id").unwrap_or_default();
        // The resolve made again, and the atlases it was made with.
        let under = by_resolution
            .get(resolution_id)
            .and_then(|r| Some((*r, r.atlases.as_deref().or(atlases)?)));
        let parameters = e.payload.get("parameters");
        let mut beyond = false;
        let (now, charges) = match (&call.verdict, parameters, under) {
            (Err(why), _, _) => (ExecuteReplay::LeftOut(why.clone()), Vec::new()),
            (Ok(_), None, _) => (
                ExecuteReplay::LeftOut(
                    "its chain recorded only the parameters' digest (written before parameters were recorded)".to_owned(),
                ),
                Vec::new(),
            ),
            (Ok(_), _, None) => (
                ExecuteReplay::NotDecided(format!(
                    "the resolve of resolution {resolution_id} is not in the given chains, or could not be made again"
                )),
                Vec::new(),
            ),
            (Ok(_), Some(parameters), Some((resolve, set))) => {
                let decide = Decide {
                    resolve,
                    atlases: set,
                    approvals: &approvals,
                    history: &history,
                };
                match decide.decide(e, parameters, call.at) {
                    Ok((v, charges, wide)) => {
                        beyond = wide;
                        (ExecuteReplay::Decided(v), charges)
                    }
                    Err(why) => (ExecuteReplay::NotDecided(why), Vec::new()),
                }
            }
        };
        // History as recorded: what ran counts, whatever it is decided now.
        if call.ran {
            history.charge(&charges, call.at_us);
        }
        if let (Some(at), Some(parameters), Some((resolve, set))) =
            (call.succeeded_us, parameters, under)
        {
            let r = &resolve.request.requester;
            let action_id = str_of(e, "action_id").unwrap_or_default();
            for m in set.marks(action_id, parameters, (&r.agent_id, &r.session_id), at) {
                history
                    .marks
                    .entry((m.counter, m.scope_key))
                    .or_default()
                    .push(m.at_us);
            }
        }
        out.push(ExecuteCase {
            session_id: e.session_id.clone(),
            sequence: e.sequence,
            execution_id: str_of(e, "execution_id").unwrap_or_default().to_owned(),
            action_id: str_of(e, "action_id").unwrap_or_default().to_owned(),
            resolution_id: resolution_id.to_owned(),
            recorded: call
                .verdict
                .clone()
                .unwrap_or_else(|_| ExecuteVerdict::of("unknown")),
            now,
            reads_beyond_session: beyond,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use cra_trace::{ChainHead, EventDraft, seal};
    use serde_json::json;

    use super::*;
    use crate::store::ChargeKind;

    const S: i64 = 1_000_000;

    /// A chain of `(seconds after 10:00, event_type, payload)` in session `s-1`.
    fn chain(events: &[(i64, &str, Value)]) -> Vec<TraceEvent> {
        let mut head = ChainHead::genesis();
        let mut out = Vec::new();
        for (i, (at, kind, payload)) in events.iter().enumerate() {
            let draft = EventDraft {
                trace_id: "t".into(),
                span_id: format!("span-{i}"),
                parent_span_id: None,
                event_type: (*kind).to_owned(),
                payload: payload.clone(),
            };
            let timestamp = format!("2026-01-05T10:{:02}:{:02}.000000Z", at / 60, at % 60);
            let e = seal(draft, "s-1", &head, format!("e-{i}"), timestamp);
            head = ChainHead::after(&e);
            out.push(e);
        }
        out
    }

    fn windowed(max: u64, window_seconds: u64, units: u64) -> Charge {
        Charge {
            policy_id: "sum".into(),
            scope_key: "global".into(),
            kind: ChargeKind::Window {
                max_units: max,
                window_seconds,
                units,
            },
        }
    }

    /// A window is `(now - window, now]`, as every store counts it: a charge made exactly one
    /// window ago has left it, one made a microsecond later has not.
    #[test]
    fn history_counts_a_window_open_at_its_start_and_closed_at_now() {
        let none = HistoryRead::default();
        let mut h = History::default();
        h.charge(&[windowed(10, 60, 7)], 100 * S);
        let more = [windowed(10, 60, 4)];
        let refused = |h: &History, charges: &[Charge], at| h.refused(charges, at, &none).0;
        assert!(
            refused(&h, &more, 160 * S).is_none(),
            "the charge left the window"
        );
        assert!(refused(&h, &more, 160 * S - 1).is_some(), "still inside");
        assert!(
            refused(&h, &more, 100 * S).is_some(),
            "counted at its own instant"
        );
        assert!(
            refused(&h, &more, 100 * S - 1).is_none(),
            "not before it was made"
        );
        let budget = Charge {
            kind: ChargeKind::Budget {
                max_units: 10,
                units: 3,
            },
            ..windowed(0, 0, 0)
        };
        h.charge(std::slice::from_ref(&budget), 0);
        h.charge(std::slice::from_ref(&budget), 0);
        h.charge(std::slice::from_ref(&budget), 0);
        assert!(refused(&h, std::slice::from_ref(&budget), 1_000 * S).is_some());
    }

    /// A counter the call recorded reading is taken as recorded (it held other sessions'
    /// calls, which a chain replayed alone does not), with the call's earlier charges on it
    /// added as the store adds them; a counter it did not record is counted from the chains,
    /// and reported as read beyond the session when its scope is an agent's or global.
    #[test]
    fn a_recorded_counter_is_taken_as_read_and_an_unrecorded_one_counted_from_the_chains() {
        let empty = History::default();
        let charges = [windowed(10, 60, 4), windowed(10, 60, 4)];
        let mut recorded = HistoryRead::default();
        recorded.consumed(&charges[..1], &ConsumeOutcome::Consumed { used: vec![5] });
        let (refused, beyond) = empty.refused(&charges, 100 * S, &recorded);
        assert!(!beyond, "both charges were answered from the record");
        assert!(
            matches!(refused, Some(ConsumeOutcome::Refused { used: 9, .. })),
            "5 recorded and the call's first 4 leave no room for 4 more: {refused:?}"
        );
        let (refused, beyond) = empty.refused(&charges, 100 * S, &HistoryRead::default());
        assert!(refused.is_none(), "the chains hold none of the 5");
        assert!(beyond, "a global counter was counted from the chains");
        let other_window = [windowed(10, 3_600, 4)];
        let (_, beyond) = empty.refused(&other_window, 100 * S, &recorded);
        assert!(beyond, "a read over another window is another question");
    }

    /// Marks and counters share one rule for "beyond the session": an agent's or the server's
    /// key, narrowed or not. A session's key, which a granted approval's use is counted on, is
    /// the session's own.
    #[test]
    fn only_agent_and_global_keys_reach_beyond_the_session() {
        assert!(!reaches_beyond_session("session:s-1"));
        assert!(!reaches_beyond_session("session:s-1|sha256:ab"));
        assert!(reaches_beyond_session("agent:a-1|sha256:ab"));
        assert!(reaches_beyond_session("global"));
    }

    #[test]
    fn a_mark_counts_only_after_since_and_up_to_now() {
        let mut h = History::default();
        h.marks
            .entry(("p#0".into(), "session:s".into()))
            .or_default()
            .push(50 * S);
        assert!(h.has_mark("p#0", "session:s", 49 * S, 50 * S));
        assert!(!h.has_mark("p#0", "session:s", 50 * S, 60 * S));
        assert!(!h.has_mark("p#0", "session:s", 0, 50 * S - 1));
        assert!(!h.has_mark("p#0", "session:t", 0, 60 * S));
    }

    /// The recorded verdict is read from the events after `action.requested` that name its
    /// execution, and only those.
    #[test]
    fn the_recorded_verdict_comes_from_the_execution_s_own_events() {
        let requested =
            |id: &str| json!({"execution_id": id, "action_id": "x", "parameters_hash": "h"});
        let events = chain(&[
            (0, "action.requested", requested("a")),
            (0, "action.requested", requested("b")),
            (
                1,
                "action.denied",
                json!({"execution_id": "b", "error": "rate_limit_exceeded", "policy_id": "rl"}),
            ),
            (1, "action.approved", json!({"execution_id": "a"})),
            (2, "action.executed", json!({"execution_id": "a"})),
            (3, "action.requested", requested("c")),
            (3, "action.pending_approval", json!({"execution_id": "c"})),
            (4, "action.requested", requested("d")),
            (
                4,
                "action.denied",
                json!({"execution_id": "d", "error": "resolution_expired", "policy_id": null}),
            ),
            (5, "action.requested", requested("e")),
        ]);
        let at = |i| recorded_in(&events, i).unwrap();
        let a = at(0);
        assert_eq!(a.verdict, Ok(ExecuteVerdict::of("allow")));
        assert_eq!((a.ran, a.succeeded_us.is_some()), (true, true));
        let b = at(1).verdict.unwrap();
        assert_eq!(b.describe(), "deny by rl");
        assert_eq!(b.error.as_deref(), Some("rate_limit_exceeded"));
        assert_eq!(at(5).verdict, Ok(ExecuteVerdict::of("requires_approval")));
        assert!(
            at(7)
                .verdict
                .unwrap_err()
                .contains("refused as a request (resolution_expired)")
        );
        assert!(at(9).verdict.unwrap_err().contains("no outcome"));
    }

    /// An execute of a chain written before `parameters` was recorded is left out; one whose
    /// resolve is not in the chains given could not be decided again.
    #[test]
    fn what_cannot_be_decided_again_says_why() {
        let events = chain(&[
            (
                0,
                "action.requested",
                json!({"execution_id": "a", "action_id": "x", "resolution_id": "r"}),
            ),
            (0, "action.approved", json!({"execution_id": "a"})),
            (
                1,
                "action.requested",
                json!({"execution_id": "b", "action_id": "x", "resolution_id": "r", "parameters": {}}),
            ),
            (1, "action.approved", json!({"execution_id": "b"})),
        ]);
        let set = AtlasSet::new(Vec::new()).unwrap();
        let cases = replay_executes(&[&events], &[], Some(&set));
        assert!(
            matches!(&cases[0].now, ExecuteReplay::LeftOut(w) if w.contains("only the parameters' digest"))
        );
        assert!(
            matches!(&cases[1].now, ExecuteReplay::NotDecided(w) if w.contains("resolution r"))
        );
        assert!(!cases[0].flipped() && !cases[1].diverged());
    }
}
