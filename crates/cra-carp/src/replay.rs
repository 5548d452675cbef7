//! Replay: re-resolve the `carp.request.received` events of a trace against the atlases loaded
//! now, and compare each result with the `carp.resolution.completed` resolution recorded for the
//! same `trace_id`, ignoring ids and timestamps. The recorded resolution is only ever compared
//! with, never returned: a replay that cannot re-resolve reports an error.
//!
//! * The clock of each re-resolve is the recorded time of its request ([`ReplayClock`]): by
//!   default the instant the recorded resolution says it was made (its `timestamp`, the
//!   resolver's own reading), or the request event's `timestamp`.
//! * Counters are the snapshot recorded with the request (`counters`), or zero when none is.
//! * Atlases: [`replay`] uses one given set for every request; [`replay_library`] picks, for each
//!   request, the supplied atlas whose digest the request recorded (several versions of one atlas
//!   may be supplied), and says in [`ReplayCase::atlas_notes`] where that was not possible.
//! * A request an earlier resolution answered again (its span recorded `carp.resolution.cached`)
//!   sits in that resolution's trace and is compared with it, request id aside.
//!
//! Also here: the audit events one resolve emits ([`resolve_drafts`], made by
//! [`crate::events`] as the runtime makes them), so `cra resolve --record` writes the traces the
//! server writes, which replay understands.

use std::collections::{BTreeMap, BTreeSet};

use cra_trace::{ChainHead, EventDraft, PreparedDraft, TraceEvent, seal};
use cra_wire::IdGenerator;
use serde_json::Value;

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use crate::eval::{CountersSnapshot, ExplainLevel, ResolveOptions, resolve};
use crate::events::{SessionStarted, resolve_events, validate_events};
use crate::explain::PolicyExplain;
use crate::index::AtlasSet;
use crate::types::{CarpRequest, Resolution};
use crate::validate::parse_request;
use cra_trace::Span;

/// Event type carrying the full request, atlas digests and counters.
pub const REQUEST_RECEIVED: &str = "carp.request.received";
/// Event type carrying the full resolution.
pub const RESOLUTION_COMPLETED: &str = "carp.resolution.completed";
/// Event type of a resolve answered by an earlier resolution ([`crate::cache`]).
pub const RESOLUTION_CACHED: &str = "carp.resolution.cached";

/// Members ignored when comparing resolutions: generated ids and instants (plus every
/// constraint's `parameters/approval_id`, see [`ignored`]).
const IGNORED: [&str; 5] = [
    "/resolution_id",
    "/timestamp",
    "/trace_id",
    "/decision/approval_id",
    "/decision/expires_at",
];

/// The audit events of one resolve or validate, as the runtime records them
/// ([`crate::events::resolve_events`], [`crate::events::validate_events`]): one span, the
/// resolution's id, in its trace. `resolution` carries `explain` when it was resolved with at
/// least [`ExplainLevel::Outcomes`] (then each candidate's `policy.evaluated` is recorded); the
/// recorded resolution has it removed.
pub fn resolve_drafts(
    request: &CarpRequest,
    resolution: &Resolution,
    atlas_digests: &BTreeMap<String, String>,
    counters: &CountersSnapshot,
) -> Vec<EventDraft> {
    let mut recorded = resolution.clone();
    let explained = recorded.explain.take();
    let span = Span::root(&resolution.trace_id, &resolution.resolution_id);
    let events = if request.operation == crate::types::Operation::Validate {
        validate_events(&span, request, atlas_digests, counters, &recorded)
    } else {
        let explained = explained.as_ref();
        resolve_events(
            &span,
            request,
            atlas_digests,
            counters,
            &recorded,
            explained,
        )
    };
    events.into_iter().map(PreparedDraft::into_draft).collect()
}

/// Seals drafts into a new chain for `session_id`, starting with `started` (for a chain recorded
/// offline, [`SessionStarted::unattended`]: the requester and the task's goal).
pub fn seal_session(
    session_id: &str,
    started: &SessionStarted<'_>,
    timestamp: &str,
    drafts: Vec<EventDraft>,
    ids: &dyn IdGenerator,
) -> Vec<TraceEvent> {
    let mut head = ChainHead::genesis();
    let mut out = Vec::with_capacity(drafts.len() + 1);
    let (trace_id, span_id) = (ids.new_id(), ids.new_id());
    let start = Span::root(&trace_id, &span_id).draft_of(started);
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

/// One place where a replayed resolution differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// JSON pointer into the resolution.
    pub pointer: String,
    /// What the trace recorded there (`null` when absent).
    pub recorded: Value,
    /// What the replay produced there (`null` when absent).
    pub replayed: Value,
}

/// Something about the atlases of one replayed request that the reader should know: the replay
/// still ran, but against other atlases than the recorded ones.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AtlasNote {
    /// The atlas was supplied, but not with the digest the request recorded.
    DigestDiffers {
        /// The atlas.
        atlas_id: String,
        /// The digest in force when the request was recorded.
        recorded: String,
        /// The digest of the atlas used for the replay.
        supplied: String,
    },
    /// The request recorded this atlas, and none with its id was supplied.
    NotSupplied {
        /// The atlas.
        atlas_id: String,
        /// The digest in force when the request was recorded.
        recorded: String,
    },
    /// This atlas was supplied but was not loaded when the request was recorded
    /// ([`replay_library`] leaves it out; [`replay`] uses it).
    NotRecorded {
        /// The atlas.
        atlas_id: String,
        /// Its digest.
        supplied: String,
    },
    /// The request event records no atlas digests: every supplied atlas was used.
    NoDigests,
}

impl std::fmt::Display for AtlasNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AtlasNote::DigestDiffers {
                atlas_id,
                recorded,
                supplied,
            } => write!(
                f,
                "atlas {atlas_id} differs from the recorded one (recorded digest {recorded}, supplied {supplied})"
            ),
            AtlasNote::NotSupplied { atlas_id, recorded } => write!(
                f,
                "atlas {atlas_id} (digest {recorded}) was in force when the request was recorded but was not supplied"
            ),
            AtlasNote::NotRecorded { atlas_id, supplied } => write!(
                f,
                "atlas {atlas_id} (digest {supplied}) was supplied but not loaded when the request was recorded"
            ),
            AtlasNote::NoDigests => write!(
                f,
                "the request records no atlas digests; every supplied atlas was used"
            ),
        }
    }
}

/// One replayed resolve.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayCase {
    /// The request's id.
    pub request_id: String,
    /// The trace id pairing request and resolution.
    pub trace_id: String,
    /// The session whose chain recorded the request.
    pub session_id: String,
    /// The request's goal (a readable name for the case).
    pub goal: String,
    /// The sequence of the request event.
    pub sequence: u64,
    /// The clock the case was re-resolved at (wire form; empty when it could not be read).
    pub now: String,
    /// The verdict.
    pub outcome: CaseOutcome,
    /// Every difference, in document order (empty unless the outcome is `Diverged`, whose
    /// difference is the first of these).
    pub differences: Vec<Divergence>,
    /// Whether the atlas digests in force differ from the recorded ones (informative: the
    /// resolution comparison decides).
    pub digests_changed: bool,
    /// Where the atlases used differ from the recorded ones.
    pub atlas_notes: Vec<AtlasNote>,
    /// Policies that decided an action, attached a constraint or denied by exhaustion.
    pub policies_fired: BTreeSet<(String, String)>,
    /// Actions that were decided (allowed or denied).
    pub actions_decided: BTreeSet<(String, String)>,
    /// Actions whose outcome differs between the recorded and the replayed resolution, in
    /// action-id order (what `cra atlas simulate` counts).
    pub flips: Vec<Flip>,
    /// The request and the resolution made again, which the executes recorded under the
    /// recorded resolution are decided again under ([`crate::execute_replay`]); `None` when
    /// the case could not be re-resolved.
    pub replayed: Option<Box<ReplayedResolve>>,
}

/// A recorded resolve made again: what an execute recorded under it is decided under.
#[derive(Debug, Clone)]
pub struct ReplayedResolve {
    /// The recorded request.
    pub request: CarpRequest,
    /// The resolution made again, carrying the recorded resolution's approval id when it
    /// recorded one (an execute's recorded approval is looked up by it).
    pub resolution: Resolution,
    /// The recorded resolution's id, which the executes under it name.
    pub recorded_resolution_id: String,
    /// The atlases it was made with, when they were chosen for this request alone
    /// ([`replay_library`]); `None` when one set served every request ([`replay_with`]).
    pub atlases: Option<Arc<AtlasSet>>,
}

/// Equal when made of the same request into the same resolution with the same atlases (the
/// same set, not an equal one).
impl PartialEq for ReplayedResolve {
    fn eq(&self, other: &Self) -> bool {
        let same_atlases = match (&self.atlases, &other.atlases) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        same_atlases
            && self.request == other.request
            && self.resolution == other.resolution
            && self.recorded_resolution_id == other.recorded_resolution_id
    }
}

/// One action decided otherwise on replay: outcomes are `allow`, `requires_approval`, `deny`, or
/// `absent` (not a candidate of that resolution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flip {
    /// The action.
    pub action_id: String,
    /// Its recorded outcome.
    pub recorded: String,
    /// Its outcome now.
    pub replayed: String,
    /// The policy deciding it now (or `default_deny`; empty when absent).
    pub decided_by: String,
}

/// Each action's outcome in a resolution (as JSON): allowed ones `allow` or `requires_approval`,
/// denied ones `deny`.
fn outcomes_of(resolution: &Value) -> BTreeMap<String, &'static str> {
    let mut out = BTreeMap::new();
    for a in resolution["allowed_actions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(id) = a["action_id"].as_str() {
            let gated = a["requires_confirmation"].as_bool() == Some(true);
            out.insert(
                id.to_owned(),
                if gated { "requires_approval" } else { "allow" },
            );
        }
    }
    for d in resolution["denied_actions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(id) = d["action_id"].as_str() {
            out.insert(id.to_owned(), "deny");
        }
    }
    out
}

/// The actions decided otherwise in `replayed` than in `recorded`; `decided_by` names the policy
/// deciding each now.
fn flips(recorded: &Value, replayed: &Value, decided_by: &BTreeMap<String, String>) -> Vec<Flip> {
    let (before, after) = (outcomes_of(recorded), outcomes_of(replayed));
    let ids: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    ids.into_iter()
        .filter_map(|id| {
            let (was, now) = (
                before.get(id).copied().unwrap_or("absent"),
                after.get(id).copied().unwrap_or("absent"),
            );
            (was != now).then(|| Flip {
                action_id: id.clone(),
                recorded: was.to_owned(),
                replayed: now.to_owned(),
                decided_by: decided_by.get(id).cloned().unwrap_or_default(),
            })
        })
        .collect()
}

/// Which recorded time a request is re-resolved at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReplayClock {
    /// The recorded resolution's `timestamp` (the instant the resolver used); the request
    /// event's timestamp when the resolution has none that can be read.
    #[default]
    Resolution,
    /// The `timestamp` of the `carp.request.received` event (the chain's clock).
    Event,
}

/// How to replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// The clock of each re-resolve.
    pub clock: ReplayClock,
}

fn recorded_resolutions(events: &[TraceEvent]) -> BTreeMap<&str, &Value> {
    let mut recorded: BTreeMap<&str, &Value> = BTreeMap::new();
    for e in events {
        if e.event_type == RESOLUTION_COMPLETED
            && let Some(r) = e.payload.get("resolution")
        {
            recorded.insert(e.trace_id.as_str(), r);
        }
    }
    recorded
}

/// The spans of the requests an earlier resolution answered again (`carp.resolution.cached`):
/// their recorded resolution was made for another request, whose id it carries.
fn answered_again(events: &[TraceEvent]) -> BTreeSet<&str> {
    events
        .iter()
        .filter(|e| e.event_type == RESOLUTION_CACHED)
        .map(|e| e.span_id.as_str())
        .collect()
}

fn recorded_digests(event: &TraceEvent) -> Option<BTreeMap<String, String>> {
    let d = event
        .payload
        .get("atlas_digests")
        .and_then(Value::as_object)?;
    Some(
        d.iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect(),
    )
}

/// Replays every resolve recorded in `events` against `atlases`, at the recorded resolution
/// instants.
pub fn replay(events: &[TraceEvent], atlases: &AtlasSet) -> Vec<ReplayCase> {
    replay_with(events, atlases, &ReplayOptions::default())
}

/// Replays every resolve recorded in `events` against one atlas set.
pub fn replay_with(
    events: &[TraceEvent],
    atlases: &AtlasSet,
    options: &ReplayOptions,
) -> Vec<ReplayCase> {
    let recorded = recorded_resolutions(events);
    let again = answered_again(events);
    let digests = atlases.digests();
    events
        .iter()
        .filter(|e| e.event_type == REQUEST_RECEIVED)
        .map(|e| {
            let notes = match recorded_digests(e) {
                None => vec![AtlasNote::NoDigests],
                Some(rec) => {
                    let mut notes = Vec::new();
                    for (id, h) in &rec {
                        match digests.get(id) {
                            Some(d) if d == h => {}
                            Some(d) => notes.push(AtlasNote::DigestDiffers {
                                atlas_id: id.clone(),
                                recorded: h.clone(),
                                supplied: d.clone(),
                            }),
                            None => notes.push(AtlasNote::NotSupplied {
                                atlas_id: id.clone(),
                                recorded: h.clone(),
                            }),
                        }
                    }
                    for (id, d) in digests {
                        if !rec.contains_key(id) {
                            notes.push(AtlasNote::NotRecorded {
                                atlas_id: id.clone(),
                                supplied: d.clone(),
                            });
                        }
                    }
                    notes
                }
            };
            replay_one(
                e,
                recorded.get(e.trace_id.as_str()).copied(),
                again.contains(e.span_id.as_str()),
                Ok(atlases),
                None,
                notes,
                options,
            )
        })
        .collect()
}

/// Replays every resolve recorded in `events`, choosing for each request the supplied atlases
/// that match the digests it recorded: per recorded atlas id, the supplied atlas with the
/// recorded digest, else the first supplied atlas with that id (noted as
/// [`AtlasNote::DigestDiffers`]); recorded ids with no supplied atlas are noted as
/// [`AtlasNote::NotSupplied`]; supplied atlases the request did not record are left out
/// ([`AtlasNote::NotRecorded`]). A request that records no digests uses the first supplied atlas
/// of each id.
pub fn replay_library(
    events: &[TraceEvent],
    library: &[cra_atlas::LoadedAtlas],
    options: &ReplayOptions,
) -> Vec<ReplayCase> {
    let recorded = recorded_resolutions(events);
    let again = answered_again(events);
    let mut sets: HashMap<Vec<usize>, Result<Arc<AtlasSet>, String>> = HashMap::new();
    events
        .iter()
        .filter(|e| e.event_type == REQUEST_RECEIVED)
        .map(|e| {
            let (chosen, notes) = choose_atlases(library, recorded_digests(e).as_ref());
            let set = sets
                .entry(chosen.clone())
                .or_insert_with(|| {
                    let picked: Vec<cra_atlas::LoadedAtlas> =
                        chosen.iter().map(|&i| library[i].clone()).collect();
                    AtlasSet::from_loaded(&picked)
                        .map(Arc::new)
                        .map_err(|err| format!("the chosen atlases do not compile: {err}"))
                })
                .clone();
            let shared = set.as_ref().ok().cloned();
            let set = match &set {
                Ok(s) => Ok(s.as_ref()),
                Err(m) => Err(m.clone()),
            };
            replay_one(
                e,
                recorded.get(e.trace_id.as_str()).copied(),
                again.contains(e.span_id.as_str()),
                set,
                shared,
                notes,
                options,
            )
        })
        .collect()
}

/// The library indexes to resolve a request with, and the notes about them.
fn choose_atlases(
    library: &[cra_atlas::LoadedAtlas],
    recorded: Option<&BTreeMap<String, String>>,
) -> (Vec<usize>, Vec<AtlasNote>) {
    let mut notes = Vec::new();
    let mut chosen = Vec::new();
    let first_of = |id: &str| library.iter().position(|a| a.id() == id);
    match recorded {
        None => {
            notes.push(AtlasNote::NoDigests);
            for (i, a) in library.iter().enumerate() {
                if first_of(a.id()) == Some(i) {
                    chosen.push(i);
                }
            }
        }
        Some(rec) => {
            for (id, digest) in rec {
                if let Some(i) = library
                    .iter()
                    .position(|a| a.id() == id && a.digest == *digest)
                {
                    chosen.push(i);
                } else if let Some(i) = first_of(id) {
                    notes.push(AtlasNote::DigestDiffers {
                        atlas_id: id.clone(),
                        recorded: digest.clone(),
                        supplied: library[i].digest.clone(),
                    });
                    chosen.push(i);
                } else {
                    notes.push(AtlasNote::NotSupplied {
                        atlas_id: id.clone(),
                        recorded: digest.clone(),
                    });
                }
            }
            for (i, a) in library.iter().enumerate() {
                if !rec.contains_key(a.id()) && first_of(a.id()) == Some(i) {
                    notes.push(AtlasNote::NotRecorded {
                        atlas_id: a.id().to_owned(),
                        supplied: a.digest.clone(),
                    });
                }
            }
        }
    }
    chosen.sort_unstable();
    (chosen, notes)
}

/// Replays one request. `answered_again`: the request was answered by an earlier resolution
/// (its span recorded `carp.resolution.cached`), so `recorded` names the request that made it
/// and the request ids are not compared.
fn replay_one(
    event: &TraceEvent,
    recorded: Option<&Value>,
    answered_again: bool,
    atlases: Result<&AtlasSet, String>,
    shared: Option<Arc<AtlasSet>>,
    atlas_notes: Vec<AtlasNote>,
    options: &ReplayOptions,
) -> ReplayCase {
    let mut case = ReplayCase {
        request_id: String::new(),
        trace_id: event.trace_id.clone(),
        session_id: event.session_id.clone(),
        goal: String::new(),
        sequence: event.sequence,
        now: String::new(),
        outcome: CaseOutcome::Same,
        differences: Vec::new(),
        digests_changed: atlas_notes
            .iter()
            .any(|n| !matches!(n, AtlasNote::NotRecorded { .. })),
        atlas_notes,
        policies_fired: BTreeSet::new(),
        actions_decided: BTreeSet::new(),
        flips: Vec::new(),
        replayed: None,
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
    let Some(recorded) = recorded else {
        return fail(
            case,
            format!(
                "no {RESOLUTION_COMPLETED} event with trace_id {}",
                event.trace_id
            ),
        );
    };
    let atlases = match atlases {
        Ok(a) => a,
        Err(m) => return fail(case, m),
    };
    let counters = match event.payload.get("counters") {
        None => CountersSnapshot::empty(),
        Some(c) => match serde_json::from_value::<CountersSnapshot>(c.clone()) {
            Ok(s) => CountersSnapshot::new(s.rate, s.budget),
            Err(e) => return fail(case, format!("the recorded counters are unreadable: {e}")),
        },
    };
    let resolution_time = recorded
        .get("timestamp")
        .and_then(Value::as_str)
        .and_then(|t| cra_wire::clock::parse_rfc3339(t).ok());
    let now = match (options.clock, resolution_time) {
        (ReplayClock::Resolution, Some(t)) => t,
        _ => match cra_wire::clock::parse_rfc3339(&event.timestamp) {
            Ok(t) => t,
            Err(e) => return fail(case, e.to_string()),
        },
    };
    case.now = cra_wire::clock::format_timestamp(now);
    let ttl = recorded
        .get("ttl_seconds")
        .and_then(Value::as_u64)
        .unwrap_or(crate::eval::DEFAULT_TTL_SECONDS);
    let options = ResolveOptions {
        ttl_seconds: ttl,
        explain: ExplainLevel::Full,
        trace_id: None,
    };
    let ids = cra_wire::SequentialIds::new(0, 0);
    let mut res = match resolve(&request, atlases, &counters, now, &ids, &options) {
        Ok(r) => r,
        Err(e) => return fail(case, format!("re-resolving failed: {e}")),
    };
    let mut decided_by = BTreeMap::new();
    if let Some(ex) = res.explain.take() {
        for a in ex.actions {
            decided_by.insert(a.action_id.clone(), a.decided_by.clone());
            case.actions_decided
                .insert((a.atlas_id.clone(), a.action_id.clone()));
            for p in a.policies.into_iter().filter(PolicyExplain::fired) {
                case.policies_fired
                    .insert((a.atlas_id.clone(), p.policy_id));
            }
        }
    }
    if answered_again && let Some(id) = recorded.get("request_id").and_then(Value::as_str) {
        id.clone_into(&mut res.request_id);
    }
    let replayed = match serde_json::to_value(&res) {
        Ok(v) => v,
        Err(e) => return fail(case, e.to_string()),
    };
    case.flips = flips(recorded, &replayed, &decided_by);
    every_difference("", recorded, &replayed, &mut case.differences);
    let recorded_approval = recorded["decision"]["approval_id"].as_str();
    if let Some(id) = recorded_approval {
        res.decision.approval_id = Some(id.to_owned());
    }
    case.replayed = Some(Box::new(ReplayedResolve {
        request,
        resolution: res,
        recorded_resolution_id: recorded["resolution_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        atlases: shared,
    }));
    if let Some(first) = case.differences.first() {
        case.outcome = CaseOutcome::Diverged {
            pointer: first.pointer.clone(),
            recorded: first.recorded.clone(),
            replayed: first.replayed.clone(),
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

/// Every place where `a` and `b` differ, in the document order of [`first_difference`] (whose
/// answer is the first of these), skipping ids and timestamps. An array element present on one
/// side only is one difference; so is a member present on one side only.
pub fn every_difference(path: &str, a: &Value, b: &Value, out: &mut Vec<Divergence>) {
    if ignored(path) {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}/{}", escape(k));
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => every_difference(&p, va, vb, out),
                    (va, vb) => {
                        if !ignored(&p) {
                            out.push(Divergence {
                                pointer: p,
                                recorded: va.cloned().unwrap_or(Value::Null),
                                replayed: vb.cloned().unwrap_or(Value::Null),
                            });
                        }
                    }
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}/{i}");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => every_difference(&p, va, vb, out),
                    (va, vb) => out.push(Divergence {
                        pointer: p,
                        recorded: va.cloned().unwrap_or(Value::Null),
                        replayed: vb.cloned().unwrap_or(Value::Null),
                    }),
                }
            }
        }
        _ => {
            if a != b {
                out.push(Divergence {
                    pointer: path.to_owned(),
                    recorded: a.clone(),
                    replayed: b.clone(),
                });
            }
        }
    }
}
