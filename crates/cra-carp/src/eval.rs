//! Resolution: a pure function of (request, compiled atlas set, counters snapshot, now, id
//! generator, options). Same inputs give a byte-identical resolution.
//!
//! Per candidate action the first matching policy type decides (errata, "CARP semantics"):
//! `deny`; then `require_approval` (a grant, gated on a human); then `rate_limit` and `budget`
//! (they deny only when already exhausted, otherwise they attach a constraint and evaluation
//! goes on); then `allow`; otherwise default deny. Within one type the higher `priority` comes
//! first, ties broken by `policy_id`. See `specs/carp.md` for every choice made here.

use std::collections::HashMap;

use cra_atlas::model::{PolicyType, RiskTier};
use cra_wire::IdGenerator;
use cra_wire::clock::format_timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::explain::{
    ActionExplain, ConditionExplain, DenyKind, Explain, Outcome, PackExplain, PolicyExplain,
    ShadowExplain,
};
use crate::index::{AtlasSet, CompiledAtlas, CompiledConditions, PolicyParams, Scope, type_slot};
use crate::shared::SharedStr;
use crate::store::{CarpStore, CarpStoreError, CounterRead};
use crate::types::{
    AllowedAction, CARP_VERSION, CarpRequest, Constraint, ConstraintParameters, ConstraintType,
    ContextBlock, Decision, DecisionType, DeniedAction, Resolution,
};

/// The errata's default resolution lifetime.
pub const DEFAULT_TTL_SECONDS: u64 = 3600;

/// The policy id reported when no policy granted an action.
pub const DEFAULT_DENY: &str = "default_deny";

/// Knobs of a resolve.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// `ttl_seconds` of the resolution (default 3600).
    pub ttl_seconds: u64,
    /// How much of the `explain` member to compute and attach.
    pub explain: ExplainLevel,
    /// Use this `trace_id` instead of generating one (the runtime's TRACE id for the resolve).
    pub trace_id: Option<String>,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            ttl_seconds: DEFAULT_TTL_SECONDS,
            explain: ExplainLevel::Off,
            trace_id: None,
        }
    }
}

/// How much of the explanation a resolve computes ([`crate::explain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExplainLevel {
    /// None: the resolution has no `explain`.
    #[default]
    Off,
    /// Each candidate action's outcome and deciding policy, with `policies` and `context_packs`
    /// left empty: what a resolve's `policy.evaluated` events record. The policy trail is a few
    /// hundred small allocations per resolve at 16 actions, worth paying only when it is read.
    Outcomes,
    /// Everything: every policy looked at and every condition, for each action and pack.
    Full,
}

impl ExplainLevel {
    /// `Full` when asked for, `Off` otherwise.
    pub fn full_if(asked: bool) -> Self {
        if asked { Self::Full } else { Self::Off }
    }
}

/// Why a request could not be resolved at all (as opposed to being denied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The request has no `task` (required to resolve).
    #[error("the request has no `task`; a resolve needs task.goal")]
    MissingTask,
    /// A requested atlas is not loaded.
    #[error("atlas `{0}` is not loaded; load it or remove it from atlas_ids")]
    AtlasNotFound(String),
}

impl ResolveError {
    /// The wire token.
    pub fn token(&self) -> cra_wire::Token {
        match self {
            ResolveError::MissingTask => cra_wire::Token::InvalidRequest,
            ResolveError::AtlasNotFound(_) => cra_wire::Token::AtlasNotFound,
        }
    }
}

/// The counter key of a scope for a request: `session:<id>`, `agent:<id>` or `global`.
pub fn scope_key(scope: Scope, agent_id: &str, session_id: &str) -> String {
    match scope {
        Scope::Session => format!("session:{session_id}"),
        Scope::Agent => format!("agent:{agent_id}"),
        Scope::Global => "global".to_owned(),
    }
}

/// Whether a counter key (as [`scope_key`] builds it, possibly narrowed with `|<digest>`) counts
/// calls of other sessions too: an agent's or the whole server's. A session's key, and the
/// session-scoped use of a granted approval, count only the session's own calls.
pub fn reaches_beyond_session(scope_key: &str) -> bool {
    !scope_key.starts_with("session:")
}

/// One counter value in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterEntry {
    /// The rate_limit or budget policy.
    pub policy_id: String,
    /// `session:<id>`, `agent:<id>` or `global`.
    pub scope_key: String,
    /// Executions in the policy's window ending now (rate) or units spent (budget).
    pub value: u64,
}

/// The counters a resolve sees: for rate limits, executions inside each policy's window ending
/// at the resolve instant; for budgets, units spent. Absent entries are zero.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CountersSnapshot {
    /// Rate-limit counts.
    #[serde(default)]
    pub rate: Vec<CounterEntry>,
    /// Budget spending.
    #[serde(default)]
    pub budget: Vec<CounterEntry>,
    #[serde(skip)]
    index: Option<SnapshotIndex>,
}

type ScopeMap = HashMap<String, HashMap<String, u64>>;
type SnapshotIndex = (ScopeMap, ScopeMap);

impl CountersSnapshot {
    /// An empty snapshot (every counter zero).
    pub fn empty() -> Self {
        Self::default()
    }

    /// A snapshot with these entries.
    pub fn new(rate: Vec<CounterEntry>, budget: Vec<CounterEntry>) -> Self {
        let mut s = Self {
            rate,
            budget,
            index: None,
        };
        s.build_index();
        s
    }

    fn build_index(&mut self) {
        let idx = |v: &[CounterEntry]| {
            let mut m: ScopeMap = HashMap::new();
            for e in v {
                m.entry(e.policy_id.clone())
                    .or_default()
                    .insert(e.scope_key.clone(), e.value);
            }
            m
        };
        self.index = Some((idx(&self.rate), idx(&self.budget)));
    }

    fn lookup(&self, rate: bool, policy_id: &str, scope_key: &str) -> u64 {
        let list = if rate { &self.rate } else { &self.budget };
        if list.is_empty() {
            return 0;
        }
        if let Some((r, b)) = &self.index {
            let m = if rate { r } else { b };
            return m
                .get(policy_id)
                .and_then(|s| s.get(scope_key))
                .copied()
                .unwrap_or(0);
        }
        list.iter()
            .find(|e| e.policy_id == policy_id && e.scope_key == scope_key)
            .map(|e| e.value)
            .unwrap_or(0)
    }

    /// Reads, from `store`, every counter the request's candidate atlases could consult at `now`.
    pub fn load(
        store: &dyn CarpStore,
        atlases: &AtlasSet,
        request: &CarpRequest,
        now: OffsetDateTime,
    ) -> Result<Self, CarpStoreError> {
        let now_us = unix_micros(now);
        let (agent, session) = (&request.requester.agent_id, &request.requester.session_id);
        // (is rate, policy, scope key, window start) of every counter, then one read of all.
        let mut wanted: Vec<(bool, &str, String, i64)> = Vec::new();
        let requested = request.requested_atlases();
        for atlas in atlases.atlases() {
            if !requested.is_empty() && !requested.iter().any(|r| *r == *atlas.atlas_id) {
                continue;
            }
            for p in &atlas.policies {
                match p.params {
                    PolicyParams::RateLimit {
                        window_seconds,
                        scope,
                        ..
                    } => {
                        let since = now_us.saturating_sub(seconds_to_us(window_seconds));
                        wanted.push((true, &p.policy_id, scope_key(scope, agent, session), since));
                    }
                    PolicyParams::Budget { scope, .. } => {
                        wanted.push((false, &p.policy_id, scope_key(scope, agent, session), 0));
                    }
                    _ => {}
                }
            }
        }
        let reads: Vec<CounterRead<'_>> = wanted
            .iter()
            .map(|(is_rate, policy_id, key, since)| match is_rate {
                true => CounterRead::Rate {
                    policy_id,
                    scope_key: key,
                    since_us: *since,
                    until_us: now_us,
                },
                false => CounterRead::Budget {
                    policy_id,
                    scope_key: key,
                },
            })
            .collect();
        let values = if reads.is_empty() {
            Vec::new()
        } else {
            store.read_counters(&reads)?
        };
        if values.len() != wanted.len() {
            return Err(CarpStoreError::Backend(format!(
                "asked for {} counters, the store answered {}",
                wanted.len(),
                values.len()
            )));
        }
        let (mut rate, mut budget) = (Vec::new(), Vec::new());
        for ((is_rate, policy_id, key, _), value) in wanted.into_iter().zip(values) {
            let entry = CounterEntry {
                policy_id: policy_id.to_owned(),
                scope_key: key,
                value,
            };
            if is_rate {
                rate.push(entry);
            } else {
                budget.push(entry);
            }
        }
        Ok(Self::new(rate, budget))
    }
}

/// Seconds as microseconds, saturating.
pub fn seconds_to_us(s: u64) -> i64 {
    i64::try_from(s)
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000_000)
}

/// Unix microseconds of an instant.
pub fn unix_micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

/// What the conditions see of a request.
struct Facts<'a> {
    agent_id: &'a str,
    /// The task's risk tier (`low` when absent).
    tier: RiskTier,
    capabilities: &'a [String],
    /// The goal and each hint, lowercased.
    texts: Vec<String>,
    hour: u8,
    weekday: u8,
    scope_keys: [String; 3],
    /// `task.intended_parameters`: the parameters the agent means to call each action with.
    intended: Option<&'a Map<String, Value>>,
}

impl Facts<'_> {
    /// The intended parameters of `action_id`, when the task states them.
    fn intended_for(&self, action_id: &str) -> Option<&Value> {
        self.intended?.get(action_id)
    }

    fn scope_key(&self, s: Scope) -> &str {
        match s {
            Scope::Session => &self.scope_keys[0],
            Scope::Agent => &self.scope_keys[1],
            Scope::Global => &self.scope_keys[2],
        }
    }
}

/// True when `c` holds for a context pack: every condition on the request, `risk_tiers` on the
/// task's tier.
fn holds(c: &CompiledConditions, f: &Facts<'_>) -> bool {
    risk_holds(c, f.tier) && holds_but_risk(c, f)
}

/// True when `c`'s `risk_tiers` (if any) lists `tier`.
fn risk_holds(c: &CompiledConditions, tier: RiskTier) -> bool {
    c.risk_tiers
        .as_ref()
        .is_none_or(|(mask, _)| mask & (1 << tier as u8) != 0)
}

/// The tier a policy's `risk_tiers` sees for one action: the riskier of the task's declared
/// tier and the action's own (from the atlas). A request may raise an action's tier, never lower
/// it, so a `risk_tiers` policy cannot be stepped around by declaring a harmless task.
fn action_tier(f: &Facts<'_>, action: &crate::index::CompiledAction) -> RiskTier {
    f.tier.max(action.allowed.risk_tier)
}

/// Every condition on the request but `risk_tiers` (and `parameters`, decided per action).
fn holds_but_risk(c: &CompiledConditions, f: &Facts<'_>) -> bool {
    if let Some(agents) = &c.agents
        && !agents.iter().any(|g| g.matches(f.agent_id))
    {
        return false;
    }
    if let Some(caps) = &c.capabilities
        && !caps.iter().any(|c| f.capabilities.contains(c))
    {
        return false;
    }
    if let Some(words) = &c.context_matches
        && !words
            .iter()
            .any(|w| f.texts.iter().any(|t| t.contains(w.as_str())))
    {
        return false;
    }
    if let Some(tw) = &c.time_window
        && !tw.contains(f.hour, f.weekday)
    {
        return false;
    }
    true
}

/// Each condition of `c` with whether it held; `risk_tiers` is judged on `tier` (the task's for
/// a pack, [`action_tier`] for a policy).
fn explain_conditions(
    c: &CompiledConditions,
    f: &Facts<'_>,
    tier: RiskTier,
) -> Vec<ConditionExplain> {
    let mut out = Vec::new();
    if let Some((_, tiers)) = &c.risk_tiers {
        let names: Vec<&str> = tiers.iter().map(|t| t.as_str()).collect();
        out.push(ConditionExplain {
            condition: "risk_tiers".to_owned(),
            held: risk_holds(c, tier),
            detail: format!("risk tier {} in [{}]", tier.as_str(), names.join(", ")),
        });
    }
    if let Some(agents) = &c.agents {
        let names: Vec<&str> = agents.iter().map(|g| g.as_str()).collect();
        out.push(ConditionExplain {
            condition: "agents".to_owned(),
            held: agents.iter().any(|g| g.matches(f.agent_id)),
            detail: format!("agent {} matches one of [{}]", f.agent_id, names.join(", ")),
        });
    }
    if let Some(caps) = &c.capabilities {
        out.push(ConditionExplain {
            condition: "capabilities".to_owned(),
            held: caps.iter().any(|c| f.capabilities.contains(c)),
            detail: format!(
                "required capabilities [{}] include one of [{}]",
                f.capabilities.join(", "),
                caps.join(", ")
            ),
        });
    }
    if let Some(words) = &c.context_matches {
        out.push(ConditionExplain {
            condition: "context_matches".to_owned(),
            held: words
                .iter()
                .any(|w| f.texts.iter().any(|t| t.contains(w.as_str()))),
            detail: format!("goal or hints contain one of [{}]", words.join(", ")),
        });
    }
    if let Some(tw) = &c.time_window {
        out.push(ConditionExplain {
            condition: "time_window".to_owned(),
            held: tw.contains(f.hour, f.weekday),
            detail: format!(
                "UTC hour {} weekday {} in [{}, {}) on {}",
                f.hour,
                WEEKDAY_NAMES[f.weekday as usize],
                tw.start_hour,
                tw.end_hour,
                tw.weekday_names
                    .as_ref()
                    .map(|d| d.join(", "))
                    .unwrap_or_else(|| "every day".to_owned())
            ),
        });
    }
    out
}

const WEEKDAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

const KINDS: [ConstraintType; 4] = [
    ConstraintType::RequireApproval,
    ConstraintType::RateLimit,
    ConstraintType::Budget,
    ConstraintType::TimeWindow,
];

fn kind_rank(k: ConstraintType) -> usize {
    match k {
        ConstraintType::RequireApproval => 0,
        ConstraintType::RateLimit => 1,
        ConstraintType::Budget => 2,
        // `parameters` constraints are per action, never in the per-policy table.
        ConstraintType::TimeWindow | ConstraintType::Parameters => 3,
    }
}

/// Whether a policy's conditions hold for the request being resolved, once known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Unknown,
    Yes,
    No,
}

/// Where a policy's parameter conditions stand for one action of a resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Param {
    /// The policy has none.
    Unconditional,
    /// They hold on the task's intended parameters for the action.
    Held,
    /// They do not hold on the intended parameters.
    Failed,
    /// No intended parameters: decided at execute.
    Pending,
}

impl Param {
    /// Conditions on history are decided at execute only (the policy's step is always walked
    /// again there). At resolve a grant or limit takes them as holding, so an allow may list
    /// the action and a require_approval asks for its approval; a deny is pending, so it never
    /// refuses at resolve on history it has not seen.
    fn of(p: &crate::index::CompiledPolicy, intended: Option<&Value>) -> Self {
        let on_params = match (&p.conditions.parameters, intended) {
            (None, _) => Param::Unconditional,
            (Some(_), None) => Param::Pending,
            (Some(c), Some(v)) if c.holds(v) => Param::Held,
            (Some(_), Some(_)) => Param::Failed,
        };
        match on_params {
            Param::Unconditional | Param::Held
                if p.kind == PolicyType::Deny && p.conditions.history.is_some() =>
            {
                Param::Pending
            }
            other => other,
        }
    }

    /// Whether the policy applies to the resolve's answer (pending ones do not, yet).
    fn applies(self) -> bool {
        matches!(self, Param::Unconditional | Param::Held)
    }
}

/// The per-action verdict.
enum Verdict {
    Grant {
        approval: bool,
        /// The deciding grant policy (for time-window constraints).
        by: usize,
    },
    Deny {
        policy: Option<usize>,
        reason: SharedStr,
    },
}

/// Builds the constraint parameters of one policy (without `actions`).
fn constraint_of(atlas: &CompiledAtlas, pi: usize, kind: ConstraintType) -> Map<String, Value> {
    let p = &atlas.policies[pi];
    let mut m = Map::new();
    m.insert("policy_id".to_owned(), json!(p.policy_id.as_str()));
    m.insert("atlas_id".to_owned(), json!(atlas.atlas_id.as_str()));
    match (&p.params, kind) {
        (
            PolicyParams::RateLimit {
                max_calls,
                window_seconds,
                scope,
            },
            ConstraintType::RateLimit,
        ) => {
            m.insert("max_calls".to_owned(), json!(max_calls));
            m.insert("window_seconds".to_owned(), json!(window_seconds));
            m.insert("scope".to_owned(), json!(scope.as_str()));
        }
        (
            PolicyParams::Budget {
                max_units,
                scope,
                costs,
            },
            ConstraintType::Budget,
        ) => {
            m.insert("max_units".to_owned(), json!(max_units));
            m.insert("scope".to_owned(), json!(scope.as_str()));
            m.insert("costs".to_owned(), Value::Object(costs.clone()));
        }
        (_, ConstraintType::TimeWindow) => {
            if let Some(tw) = &p.conditions.time_window {
                m.insert("start_hour".to_owned(), json!(tw.start_hour));
                m.insert("end_hour".to_owned(), json!(tw.end_hour));
                m.insert(
                    "weekdays".to_owned(),
                    json!(
                        tw.weekday_names.clone().unwrap_or_else(|| WEEKDAY_NAMES
                            .iter()
                            .map(|d| d.to_string())
                            .collect())
                    ),
                );
            }
        }
        _ => {}
    }
    m
}

/// Resolves `request` against `atlases`.
///
/// Pure: reads nothing but its arguments. Ids are drawn from `ids` in a fixed order
/// (`resolution_id`, then `trace_id` unless given in `options`, then `approval_id` when one is
/// needed), so a deterministic generator makes the whole resolution reproducible.
pub fn resolve(
    request: &CarpRequest,
    atlases: &AtlasSet,
    counters: &CountersSnapshot,
    now: OffsetDateTime,
    ids: &dyn IdGenerator,
    options: &ResolveOptions,
) -> Result<Resolution, ResolveError> {
    resolve_with_origins(request, atlases, counters, now, ids, options).map(|(r, _)| r)
}

/// Where an allowed action of a resolution comes from: the atlas that offered it (the first
/// candidate atlas with that action id) and the executor that atlas names for it. An execute
/// under the resolution runs this executor, whatever other atlas has an action of that id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ActionOrigin {
    /// The atlas that offered the action.
    pub atlas_id: SharedStr,
    /// The executor it names, if any (none: the agent performs the action itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<SharedStr>,
    /// What execute walks to record what the action's `log_only` policies would decide for
    /// the call (shadow mode); absent when none matches the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<crate::shadow::ShadowPlan>,
}

/// As [`resolve`], also returning the origin of each allowed action, in `allowed_actions` order.
pub fn resolve_with_origins(
    request: &CarpRequest,
    atlases: &AtlasSet,
    counters: &CountersSnapshot,
    now: OffsetDateTime,
    ids: &dyn IdGenerator,
    options: &ResolveOptions,
) -> Result<(Resolution, Vec<ActionOrigin>), ResolveError> {
    let task = request.task.as_ref().ok_or(ResolveError::MissingTask)?;

    // Candidate atlases: those requested (in request order, first mention wins), else all.
    let mut chosen: Vec<&CompiledAtlas> = Vec::new();
    let requested = request.requested_atlases();
    if requested.is_empty() {
        chosen.extend(atlases.atlases());
    } else {
        for id in requested {
            let a = atlases
                .get(id)
                .ok_or_else(|| ResolveError::AtlasNotFound(id.clone()))?;
            if !chosen.iter().any(|c| std::ptr::eq(*c, a)) {
                chosen.push(a);
            }
        }
    }

    let tier = task.effective_risk_tier();
    let now_utc = now.to_offset(time::UtcOffset::UTC);
    let mut texts = Vec::with_capacity(1 + task.hints().len());
    texts.push(task.goal.to_lowercase());
    texts.extend(task.hints().iter().map(|h| h.to_lowercase()));
    let facts = Facts {
        agent_id: &request.requester.agent_id,
        tier,
        capabilities: task.capabilities(),
        texts,
        hour: now_utc.hour(),
        weekday: now_utc.weekday().number_days_from_monday(),
        intended: task.intended_parameters(),
        scope_keys: [
            scope_key(
                Scope::Session,
                &request.requester.agent_id,
                &request.requester.session_id,
            ),
            scope_key(
                Scope::Agent,
                &request.requester.agent_id,
                &request.requester.session_id,
            ),
            scope_key(
                Scope::Global,
                &request.requester.agent_id,
                &request.requester.session_id,
            ),
        ],
    };

    let resolution_id = ids.new_id();
    let trace_id = options.trace_id.clone().unwrap_or_else(|| ids.new_id());

    let mut allowed = Vec::new();
    let mut origins = Vec::new();
    let mut denied = Vec::new();
    let outcomes = options.explain != ExplainLevel::Off;
    let full = options.explain == ExplainLevel::Full;
    let mut explains = Vec::new();
    // (constraint type, atlas index in `chosen`, policy index) -> granted action ids it binds.
    // Flat table: slot (atlas offset + policy index) * 4 + constraint kind -> bound action ids.
    let mut offsets = Vec::with_capacity(chosen.len());
    let mut total = 0usize;
    for a in &chosen {
        offsets.push(total);
        total += a.policies.len();
    }
    let mut bound: Vec<Vec<SharedStr>> = vec![Vec::new(); total * 4];
    let slot =
        |kind: ConstraintType, ai: usize, pi: usize| (offsets[ai] + pi) * 4 + kind_rank(kind);
    let mut seen_actions: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let several = chosen.len() > 1;
    let narrow = !task.capabilities().is_empty();
    let mut limits: Vec<(ConstraintType, usize)> = Vec::new();

    let mut held: Vec<Held> = Vec::new();
    let mut steps: Vec<usize> = Vec::new();
    let mut by_parameters: Vec<Constraint> = Vec::new();
    for (ai, atlas) in chosen.iter().enumerate() {
        held.clear();
        held.resize(atlas.policies.len(), Held::Unknown);
        let candidates: Vec<usize> = if narrow {
            let mut v: Vec<usize> = task
                .capabilities()
                .iter()
                .filter_map(|c| atlas.capabilities.get(c))
                .flatten()
                .copied()
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        } else {
            (0..atlas.actions.len()).collect()
        };
        for idx in candidates {
            let action = &atlas.actions[idx];
            let action_id = action.allowed.action_id.as_str();
            if several && !seen_actions.insert(action_id) {
                continue; // An earlier atlas already offered this action id.
            }
            let mut trail: Vec<PolicyExplain> = Vec::new();
            limits.clear();
            steps.clear();
            let (verdict, dependent) = decide(
                atlas,
                action,
                counters,
                &facts,
                full.then_some(&mut trail),
                &mut limits,
                &mut held,
                &mut steps,
                false,
            );
            let granted = matches!(verdict, Verdict::Grant { .. });
            if granted && dependent {
                by_parameters.push(parameters_constraint(
                    atlas,
                    action,
                    &steps,
                    facts.intended_for(action_id),
                ));
            }
            // Shadow mode: the same walk with the `log_only` policies enforced. Its steps make
            // the granted action's shadow plan, which execute walks on the call.
            let shadow_walk = (action.has_shadow && (granted || outcomes)).then(|| {
                let (mut l, mut st) = (Vec::new(), Vec::new());
                let (v, _) = decide(
                    atlas, action, counters, &facts, None, &mut l, &mut held, &mut st, true,
                );
                (v, st)
            });
            match &verdict {
                Verdict::Grant { approval, by } => {
                    let mut entry = action.allowed.clone();
                    entry.requires_confirmation = *approval;
                    entry.rate_limit = limits
                        .iter()
                        .find(|(k, _)| *k == ConstraintType::RateLimit)
                        .and_then(|(_, pi)| atlas.rate_info(*pi));
                    if *approval {
                        bound[slot(ConstraintType::RequireApproval, ai, *by)]
                            .push(action.allowed.action_id.clone());
                    }
                    for (k, pi) in &limits {
                        bound[slot(*k, ai, *pi)].push(action.allowed.action_id.clone());
                    }
                    if atlas.policies[*by].conditions.time_window.is_some() {
                        bound[slot(ConstraintType::TimeWindow, ai, *by)]
                            .push(action.allowed.action_id.clone());
                    }
                    allowed.push(entry);
                    origins.push(ActionOrigin {
                        atlas_id: atlas.atlas_id.clone(),
                        executor: action.executor.clone(),
                        shadow: shadow_walk
                            .as_ref()
                            .map(|(_, st)| crate::shadow::ShadowPlan::of(atlas, &steps, st)),
                    });
                }
                Verdict::Deny { policy, reason } => denied.push(DeniedAction {
                    action_id: action.allowed.action_id.clone(),
                    reason: reason.clone(),
                    policy_id: match policy {
                        Some(pi) => atlas.policies[*pi].policy_id.clone(),
                        None => atlas.default_deny.0.clone(),
                    },
                }),
            }
            if outcomes {
                let (outcome, decided_by, deny_kind) = verdict_outcome(atlas, &verdict);
                // The shadow walk's outcome, recorded only when it would have decided otherwise.
                let shadow = shadow_walk.as_ref().and_then(|(v, _)| {
                    let (o, by, _) = verdict_outcome(atlas, v);
                    (o != outcome || by != decided_by).then_some(ShadowExplain {
                        outcome: o,
                        decided_by: by,
                    })
                });
                explains.push(ActionExplain {
                    action_id: action_id.to_owned(),
                    atlas_id: atlas.atlas_id.to_string(),
                    outcome,
                    decided_by,
                    deny_kind,
                    policies: trail,
                    shadow,
                });
            }
        }
    }

    // Context blocks from every candidate atlas.
    let mut blocks: Vec<ContextBlock> = Vec::new();
    let mut pack_explains = Vec::new();
    for atlas in &chosen {
        for pack in &atlas.packs {
            let ok = holds(&pack.conditions, &facts);
            if full {
                pack_explains.push(PackExplain {
                    atlas_id: atlas.atlas_id.to_string(),
                    pack_id: pack.pack_id.clone(),
                    injected: ok,
                    conditions: explain_conditions(&pack.conditions, &facts, facts.tier),
                });
            }
            if ok {
                blocks.extend(pack.files.iter().map(|f| ContextBlock {
                    block_id: f.block_id.clone(),
                    source: atlas.atlas_id.clone(),
                    content_type: f.content_type.clone(),
                    content: f.content.clone(),
                    priority: pack.priority,
                    token_estimate: f.token_estimate,
                }));
            }
        }
    }
    blocks.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.block_id.cmp(&b.block_id))
    });

    let gated = allowed.iter().any(|a| a.requires_confirmation);
    let approval_id = gated.then(|| ids.new_id());
    let expires = now_utc
        + time::Duration::seconds(i64::try_from(options.ttl_seconds).unwrap_or(i64::MAX / 2));
    let unknown = unknown_capabilities(task.capabilities(), &chosen);
    let decision = decide_overall(&allowed, &denied, &unknown, approval_id.clone(), expires);

    let mut constraints: Vec<Constraint> = Vec::new();
    for (ai, atlas) in chosen.iter().enumerate() {
        for pi in 0..atlas.policies.len() {
            for kind in KINDS {
                let actions = std::mem::take(&mut bound[slot(kind, ai, pi)]);
                if actions.is_empty() {
                    continue;
                }
                constraints.push(Constraint {
                    constraint_id: format!("{}:{}", kind.as_str(), atlas.policies[pi].policy_id),
                    kind,
                    parameters: ConstraintParameters {
                        fields: atlas.constraint_fields[pi][kind_rank(kind)]
                            .get_or_init(|| std::sync::Arc::new(constraint_of(atlas, pi, kind)))
                            .clone(),
                        approval_id: (kind == ConstraintType::RequireApproval)
                            .then(|| approval_id.clone())
                            .flatten(),
                        actions,
                    },
                });
            }
        }
    }
    constraints.append(&mut by_parameters);
    constraints.sort_by(|a, b| {
        a.kind
            .cmp(&b.kind)
            .then_with(|| a.constraint_id.cmp(&b.constraint_id))
    });

    let resolution = Resolution {
        carp_version: CARP_VERSION.to_owned(),
        resolution_id,
        request_id: request.request_id.clone(),
        timestamp: format_timestamp(now_utc),
        decision,
        context_blocks: blocks,
        allowed_actions: allowed,
        denied_actions: denied,
        constraints,
        ttl_seconds: options.ttl_seconds,
        trace_id,
        explain: outcomes.then_some(Explain {
            actions: explains,
            context_packs: pack_explains,
        }),
        extra: Map::new(),
    };
    Ok((resolution, origins))
}

/// The requested capabilities that no candidate atlas declares, in request order (repeats
/// once). An action set narrowed by a capability nobody offers is less than was asked for, so
/// these keep a resolution from being `allow` (CARP §3.3.1; `specs/carp.md`).
fn unknown_capabilities<'a>(requested: &'a [String], chosen: &[&CompiledAtlas]) -> Vec<&'a str> {
    let mut unknown: Vec<&str> = Vec::new();
    for c in requested {
        let declared = chosen.iter().any(|a| a.capabilities.contains_key(c));
        if !declared && !unknown.contains(&c.as_str()) {
            unknown.push(c);
        }
    }
    unknown
}

/// The overall decision: `deny` when nothing is allowed, `requires_approval` when an allowed
/// action is approval-gated, `partial` when a candidate is denied or a requested capability is
/// unknown, else `allow`. Unknown capabilities are named in the reason whatever the type.
fn decide_overall(
    allowed: &[AllowedAction],
    denied: &[DeniedAction],
    unknown: &[&str],
    approval_id: Option<String>,
    expires_at: OffsetDateTime,
) -> Decision {
    let gated = allowed.iter().any(|a| a.requires_confirmation);
    let (kind, reason) = if allowed.is_empty() {
        let why = if denied.is_empty() {
            "No candidate actions: the requested atlases and capabilities offer none"
        } else {
            "No candidate action is allowed"
        };
        (DecisionType::Deny, why)
    } else if gated {
        (
            DecisionType::RequiresApproval,
            "Some allowed actions need a human approval before they run",
        )
    } else if !denied.is_empty() {
        (DecisionType::Partial, "Some actions are denied by policy")
    } else if !unknown.is_empty() {
        (
            DecisionType::Partial,
            "The allowed actions cover only the known capabilities",
        )
    } else {
        (DecisionType::Allow, "All candidate actions are allowed")
    };
    let reason = if unknown.is_empty() {
        reason.to_owned()
    } else {
        format!(
            "{reason}; no candidate atlas declares the required capabilities {}",
            unknown
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let approval = kind == DecisionType::RequiresApproval;
    Decision {
        kind,
        reason: Some(reason),
        approval_id: approval.then_some(approval_id).flatten(),
        expires_at: approval.then(|| format_timestamp(expires_at)),
    }
}

/// The explanation's view of a verdict: outcome, deciding policy (or `default_deny`), deny kind.
fn verdict_outcome(
    atlas: &CompiledAtlas,
    verdict: &Verdict,
) -> (Outcome, String, Option<DenyKind>) {
    match verdict {
        Verdict::Grant { approval, by } => (
            if *approval {
                Outcome::RequiresApproval
            } else {
                Outcome::Allow
            },
            atlas.policies[*by].policy_id.to_string(),
            None,
        ),
        Verdict::Deny {
            policy: Some(pi), ..
        } => (
            Outcome::Deny,
            atlas.policies[*pi].policy_id.to_string(),
            Some(DenyKind::Explicit),
        ),
        Verdict::Deny { policy: None, .. } => (
            Outcome::Deny,
            DEFAULT_DENY.to_owned(),
            Some(DenyKind::Default),
        ),
    }
}

/// Walks one action's policies in evaluation order.
///
/// `held` memoises, per policy of `atlas`, whether its conditions other than `risk_tiers` and
/// `parameters` hold for this request: they depend on the request alone, not on the action, so
/// each is evaluated at most once per resolve however many actions the policy covers.
/// `risk_tiers` is judged per action on [`action_tier`].
///
/// Parameter conditions are per action. With the task's intended parameters for the action they
/// decide like any condition; without, the policy is *pending*: the walk goes on as if it did
/// not apply, and a pending grant keeps the action allowed where only the default deny would
/// refuse it. `steps` receives every policy that execute would walk again on the call (see
/// [`parameters_constraint`]); the second value says whether the outcome depends on the call
/// (a policy reached has parameter or history conditions), for only then does execute walk them.
/// A shadow plan ([`crate::shadow::ShadowPlan`]) walks them either way.
#[allow(clippy::too_many_arguments)]
fn decide(
    atlas: &CompiledAtlas,
    action: &crate::index::CompiledAction,
    counters: &CountersSnapshot,
    facts: &Facts<'_>,
    mut trail: Option<&mut Vec<PolicyExplain>>,
    limits: &mut Vec<(ConstraintType, usize)>,
    held: &mut [Held],
    steps: &mut Vec<usize>,
    enforce_shadow: bool,
) -> (Verdict, bool) {
    let intended = facts.intended_for(&action.allowed.action_id);
    let tier = action_tier(facts, action);
    let mut verdict: Option<Verdict> = None;
    let mut pending_grant: Option<usize> = None;
    // A grant or deny without parameter conditions applied: no later grant or deny can matter
    // at execute, whatever the parameters.
    let mut settled = false;
    let mut dependent = false;
    let mut budget_pos = 0usize;
    for kind in PolicyType::EVALUATION_ORDER {
        for &pi in &action.by_type[type_slot(kind)] {
            let p = &atlas.policies[pi];
            let cost = if kind == PolicyType::Budget {
                let c = action.budget_costs.get(budget_pos).copied().unwrap_or(1);
                budget_pos += 1;
                c
            } else {
                0
            };
            let limit_binds = matches!(kind, PolicyType::RateLimit | PolicyType::Budget);
            if p.shadow && !enforce_shadow {
                // Shadow mode: never decides here; the shadow walk enforces it.
                if let Some(t) = trail.as_deref_mut() {
                    let param = Param::of(p, intended);
                    t.push(policy_explain(p, false, "log_only", facts, tier, param));
                }
                continue;
            }
            if verdict.is_some() && !limit_binds && settled {
                if let Some(t) = trail.as_deref_mut() {
                    let param = Param::of(p, intended);
                    t.push(policy_explain(p, false, "not_reached", facts, tier, param));
                }
                continue;
            }
            let on_request = match held.get(pi).copied() {
                Some(Held::Yes) => true,
                Some(Held::No) => false,
                _ => {
                    let h = holds_but_risk(&p.conditions, facts);
                    if let Some(slot) = held.get_mut(pi) {
                        *slot = if h { Held::Yes } else { Held::No };
                    }
                    h
                }
            };
            let base = on_request && risk_holds(&p.conditions, tier);
            let param = Param::of(p, intended);
            if base && (limit_binds || !settled) {
                // History is decided at execute: its step is walked again there, always.
                let on_history = p.conditions.history.is_some();
                steps.push(pi);
                dependent |= param != Param::Unconditional || on_history;
                settled |= !limit_binds && param == Param::Unconditional && !on_history;
            }
            if verdict.is_some() && !limit_binds {
                if let Some(t) = trail.as_deref_mut() {
                    t.push(policy_explain(p, false, "not_reached", facts, tier, param));
                }
                continue;
            }
            let applies = base && param.applies();
            let effect;
            if !base {
                effect = "not_applicable";
            } else if !applies && !limit_binds {
                // A grant or deny whose parameters say no (or are not known yet).
                if param == Param::Pending && kind != PolicyType::Deny {
                    pending_grant.get_or_insert(pi);
                }
                effect = if param == Param::Pending {
                    "pending"
                } else {
                    "not_applicable"
                };
            } else {
                match (&p.params, &verdict) {
                    (PolicyParams::Deny { reason }, None) => {
                        verdict = Some(Verdict::Deny {
                            policy: Some(pi),
                            reason: reason.clone(),
                        });
                        effect = "decided";
                    }
                    (PolicyParams::RequireApproval, None) => {
                        verdict = Some(Verdict::Grant {
                            approval: true,
                            by: pi,
                        });
                        effect = "decided";
                    }
                    (
                        PolicyParams::RateLimit {
                            max_calls,
                            window_seconds,
                            scope,
                        },
                        v,
                    ) => {
                        let used = counters.lookup(true, &p.policy_id, facts.scope_key(*scope));
                        if matches!(v, Some(Verdict::Deny { .. })) {
                            effect = "not_reached";
                        } else if applies && v.is_none() && used >= *max_calls {
                            verdict = Some(Verdict::Deny {
                                policy: Some(pi),
                                reason: format!(
                                    "Rate limit {} is exhausted: {used} of {max_calls} executions in the last {window_seconds} seconds",
                                    p.policy_id
                                )
                                .into(),
                            });
                            effect = "exhausted";
                        } else {
                            // A limit whose parameters say no (or are not known yet) still
                            // binds: execute charges it when the call's parameters hold.
                            limits.push((ConstraintType::RateLimit, pi));
                            effect = if applies { "constraint" } else { "pending" };
                        }
                    }
                    (
                        PolicyParams::Budget {
                            max_units, scope, ..
                        },
                        v,
                    ) => {
                        let spent = counters.lookup(false, &p.policy_id, facts.scope_key(*scope));
                        if matches!(v, Some(Verdict::Deny { .. })) {
                            effect = "not_reached";
                        } else if applies && v.is_none() && spent.saturating_add(cost) > *max_units
                        {
                            verdict = Some(Verdict::Deny {
                                policy: Some(pi),
                                reason: format!(
                                    "Budget {} is exhausted: {spent} of {max_units} units spent, this action costs {cost}",
                                    p.policy_id
                                )
                                .into(),
                            });
                            effect = "exhausted";
                        } else {
                            limits.push((ConstraintType::Budget, pi));
                            effect = if applies { "constraint" } else { "pending" };
                        }
                    }
                    (PolicyParams::Allow, None) => {
                        verdict = Some(Verdict::Grant {
                            approval: false,
                            by: pi,
                        });
                        effect = "decided";
                    }
                    _ => effect = "not_reached",
                }
            }
            if let Some(t) = trail.as_deref_mut() {
                t.push(policy_explain(p, applies, effect, facts, tier, param));
            }
        }
    }
    let verdict = match (verdict, pending_grant) {
        (Some(Verdict::Deny { policy, reason }), _) => {
            limits.clear();
            Verdict::Deny { policy, reason }
        }
        (Some(v), _) => v,
        // Only the default deny refuses, and a grant waits on the call's parameters: allowed,
        // with the decision left to execute (the `parameters` constraint).
        (None, Some(by)) => Verdict::Grant {
            approval: false,
            by,
        },
        (None, None) => {
            limits.clear();
            Verdict::Deny {
                policy: None,
                reason: atlas.default_deny.1.clone(),
            }
        }
    };
    (verdict, dependent)
}

/// The `parameters` constraint of one allowed action whose outcome depends on the call's
/// parameters: the policies execute walks again, in evaluation order, each with its parameter
/// tests as written (`when`), and the digest of the intended parameters the resolve was decided
/// on, when the task stated them. `constraint_id` is `parameters:<action_id>`.
fn parameters_constraint(
    atlas: &CompiledAtlas,
    action: &crate::index::CompiledAction,
    steps: &[usize],
    intended: Option<&Value>,
) -> Constraint {
    let action_id = action.allowed.action_id.as_str();
    let write = || {
        let list = steps
            .iter()
            .map(|&pi| Value::Object(step_of(atlas, pi)))
            .collect();
        let mut fields = Map::new();
        fields.insert("atlas_id".to_owned(), json!(atlas.atlas_id.as_str()));
        fields.insert("steps".to_owned(), Value::Array(list));
        fields
    };
    // Without intended parameters the fields depend on the steps alone: the first such
    // resolve's are kept on the action and shared while the steps are the same.
    let fields = match intended {
        Some(v) => {
            let mut fields = write();
            fields.insert(
                "intended_parameters_hash".to_owned(),
                json!(cra_wire::hash::canonical_digest(v)),
            );
            std::sync::Arc::new(fields)
        }
        None => {
            let (kept, fields) = action
                .parameters_fields
                .get_or_init(|| (steps.to_vec(), std::sync::Arc::new(write())));
            if kept == steps {
                fields.clone()
            } else {
                std::sync::Arc::new(write())
            }
        }
    };
    Constraint {
        constraint_id: format!("{}:{action_id}", ConstraintType::Parameters.as_str()),
        kind: ConstraintType::Parameters,
        parameters: ConstraintParameters {
            fields,
            approval_id: None,
            actions: vec![action.allowed.action_id.clone()],
        },
    }
}

/// One step of a walk execute makes again: `{policy_id, type, when?, history?, reason?}`, the
/// policy's tests as written ([`parameters_constraint`]).
pub(crate) fn step_of(atlas: &CompiledAtlas, pi: usize) -> Map<String, Value> {
    let p = &atlas.policies[pi];
    let mut step = Map::new();
    step.insert("policy_id".to_owned(), json!(p.policy_id.as_str()));
    step.insert("type".to_owned(), json!(p.kind.as_str()));
    if let Some(c) = &p.conditions.parameters {
        step.insert("when".to_owned(), c.written().clone());
    }
    if let Some(h) = &p.conditions.history {
        step.insert("history".to_owned(), h.written().clone());
    }
    if let PolicyParams::Deny { reason } = &p.params {
        step.insert("reason".to_owned(), json!(reason.as_str()));
    }
    step
}

/// A rate limit's or budget's fields as its constraint states them ([`constraint_of`]).
pub(crate) fn limit_of(atlas: &CompiledAtlas, pi: usize) -> Option<Map<String, Value>> {
    let kind = match atlas.policies[pi].params {
        PolicyParams::RateLimit { .. } => ConstraintType::RateLimit,
        PolicyParams::Budget { .. } => ConstraintType::Budget,
        _ => return None,
    };
    Some(constraint_of(atlas, pi, kind))
}

fn policy_explain(
    p: &crate::index::CompiledPolicy,
    applies: bool,
    effect: &str,
    facts: &Facts<'_>,
    tier: RiskTier,
    param: Param,
) -> PolicyExplain {
    let mut conditions = explain_conditions(&p.conditions, facts, tier);
    if let Some(c) = &p.conditions.parameters {
        let pointers = c.pointers().join(", ");
        conditions.push(ConditionExplain {
            condition: "parameters".to_owned(),
            held: param == Param::Held,
            detail: match param {
                Param::Pending => format!(
                    "parameters {pointers}: decided at execute (the task states no intended parameters for this action)"
                ),
                _ => format!("parameters {pointers} tested on the task's intended parameters"),
            },
        });
    }
    if let Some(h) = &p.conditions.history {
        conditions.push(ConditionExplain {
            condition: "history".to_owned(),
            held: false,
            detail: format!(
                "{}: decided at execute, on the calls recorded then",
                h.describe()
            ),
        });
    }
    PolicyExplain {
        policy_id: p.policy_id.to_string(),
        kind: p.kind.as_str().to_owned(),
        priority: p.priority,
        applies,
        effect: effect.to_owned(),
        conditions,
    }
}
