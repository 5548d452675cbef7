//! Atlases compiled for resolution: every (policy, action) pattern match decided once, each
//! action's policies grouped by type and sorted (priority descending, then `policy_id`), policy
//! parameters and conditions parsed and checked, context files classified and measured, and each
//! action's `parameters_schema` compiled into a validator. A resolve then does no parsing, no
//! pattern matching and no schema compilation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cra_atlas::model::{Conditions, Manifest, PolicyType, RiskTier};
use cra_atlas::pattern;
use serde_json::{Map, Value};

use crate::history::HistoryConditions;
use crate::params::ParamConditions;
use crate::shared::{SharedJson, SharedStr};
use crate::types::{AllowedAction, RateLimitInfo};

/// Why an atlas could not be compiled for resolution. Atlas validation normally catches these
/// first; compiling never trusts that it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// A redaction rule that cannot be used.
    #[error("atlas `{atlas_id}`, redaction rule {pointer}: {message}")]
    Redaction {
        /// The atlas.
        atlas_id: String,
        /// JSON pointer of the rule in the manifest (`/redaction/0`).
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// A policy's `parameters` are missing a member or have one of the wrong type.
    #[error(
        "atlas `{atlas_id}`, policy `{policy_id}`: parameter {pointer} {message}; fix the policy's parameters"
    )]
    PolicyParameters {
        /// The atlas.
        atlas_id: String,
        /// The policy.
        policy_id: String,
        /// JSON pointer inside the policy (e.g. `/parameters/max_calls`).
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// A condition this evaluator does not know (only `x-*` extensions may be added).
    #[error(
        "atlas `{atlas_id}`, {owner}: unknown condition `{condition}`; use risk_tiers, agents, capabilities, context_matches, time_window or parameters"
    )]
    UnknownCondition {
        /// The atlas.
        atlas_id: String,
        /// `policy <id>` or `context pack <id>`.
        owner: String,
        /// The condition name.
        condition: String,
    },
    /// A condition with an out-of-range value.
    #[error("atlas `{atlas_id}`, {owner}: condition {pointer} {message}")]
    BadCondition {
        /// The atlas.
        atlas_id: String,
        /// `policy <id>` or `context pack <id>`.
        owner: String,
        /// JSON pointer inside the owner.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// A policy without any action pattern, or with a malformed one.
    #[error("atlas `{atlas_id}`, policy `{policy_id}`: {message}")]
    BadPattern {
        /// The atlas.
        atlas_id: String,
        /// The policy.
        policy_id: String,
        /// What is wrong.
        message: String,
    },
    /// An action's `parameters_schema` is not a valid JSON Schema.
    #[error(
        "atlas `{atlas_id}`, action `{action_id}`: parameters_schema is not a valid JSON Schema: {message}"
    )]
    ParametersSchema {
        /// The atlas.
        atlas_id: String,
        /// The action.
        action_id: String,
        /// The schema compiler's complaint.
        message: String,
    },
    /// A context pack names a file the atlas does not contain.
    #[error(
        "atlas `{atlas_id}`, context pack `{pack_id}`: file `{file}` is missing; add it or remove it from the pack"
    )]
    MissingContextFile {
        /// The atlas.
        atlas_id: String,
        /// The pack.
        pack_id: String,
        /// The file path.
        file: String,
    },
    /// Two atlases with one id in one set.
    #[error("atlas `{atlas_id}` is loaded twice; load one version per atlas id")]
    DuplicateAtlas {
        /// The atlas.
        atlas_id: String,
    },
}

/// Which counter a rate limit or budget uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// One counter per session.
    Session,
    /// One counter per agent.
    Agent,
    /// One counter for everyone.
    Global,
}

impl Scope {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Agent => "agent",
            Scope::Global => "global",
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        match s {
            "session" => Some(Scope::Session),
            "agent" => Some(Scope::Agent),
            "global" => Some(Scope::Global),
            _ => None,
        }
    }
}

/// A policy's parsed parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyParams {
    /// `deny`: the reason shown in `denied_actions`.
    Deny {
        /// `parameters.reason`, or a sentence naming the policy.
        reason: SharedStr,
    },
    /// `require_approval`: nothing to parse.
    RequireApproval,
    /// `rate_limit`.
    RateLimit {
        /// Executions per window.
        max_calls: u64,
        /// Window length.
        window_seconds: u64,
        /// Counter scope (default `agent`).
        scope: Scope,
    },
    /// `budget`.
    Budget {
        /// Units available.
        max_units: u64,
        /// Counter scope (default `agent`).
        scope: Scope,
        /// `costs` as written (pattern to units), for the constraint.
        costs: Map<String, Value>,
    },
    /// `allow`: nothing to parse.
    Allow,
}

/// A time window, compiled: hours `[start, end)` (wrapping when `start > end`), weekday bitmask
/// (bit 0 = Monday).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledWindow {
    /// First hour inside.
    pub start_hour: u8,
    /// First hour after.
    pub end_hour: u8,
    /// Bit `d` set when weekday `d` (0 = Monday) is inside; `0x7f` for every day.
    pub weekdays: u8,
    /// The weekdays as written, for constraints and explanations.
    pub weekday_names: Option<Vec<String>>,
}

impl CompiledWindow {
    /// True when the UTC instant with this hour and weekday (0 = Monday) is inside.
    pub fn contains(&self, hour: u8, weekday: u8) -> bool {
        let in_hours = if self.start_hour < self.end_hour {
            hour >= self.start_hour && hour < self.end_hour
        } else {
            // Wraps past midnight (start > end); start == end is rejected at compile time.
            hour >= self.start_hour || hour < self.end_hour
        };
        in_hours && (self.weekdays & (1 << weekday)) != 0
    }
}

/// A `*`-glob over agent ids: `*` matches any run of characters, everything else literally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentGlob {
    text: String,
    parts: Vec<String>,
}

impl AgentGlob {
    pub(crate) fn new(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            parts: text.split('*').map(str::to_owned).collect(),
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when `agent` matches.
    pub fn matches(&self, agent: &str) -> bool {
        let parts = &self.parts;
        if parts.len() == 1 {
            return parts[0] == agent;
        }
        let (first, last) = (&parts[0], &parts[parts.len() - 1]);
        if !agent.starts_with(first.as_str()) || agent.len() < first.len() + last.len() {
            return false;
        }
        if !agent.ends_with(last.as_str()) {
            return false;
        }
        let mut rest = &agent[first.len()..agent.len() - last.len()];
        for mid in &parts[1..parts.len() - 1] {
            match rest.find(mid.as_str()) {
                Some(i) => rest = &rest[i + mid.len()..],
                None => return false,
            }
        }
        true
    }
}

/// Conditions, compiled. `None` members are absent (hold trivially).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompiledConditions {
    /// Bit `t` set when risk tier `t` (low = 0) is listed.
    pub risk_tiers: Option<(u8, Vec<RiskTier>)>,
    /// Agent patterns.
    pub agents: Option<Vec<AgentGlob>>,
    /// Capability ids.
    pub capabilities: Option<Vec<String>>,
    /// Keywords, lowercased.
    pub context_matches: Option<Vec<String>>,
    /// The UTC window.
    pub time_window: Option<CompiledWindow>,
    /// Tests on the call's parameters (policies only), decided per call: at execute, or at
    /// resolve when the task states the intended parameters.
    pub parameters: Option<ParamConditions>,
    /// Tests on earlier calls (policies only), decided at execute ([`crate::history`]).
    pub history: Option<HistoryConditions>,
}

impl CompiledConditions {
    /// True when there is no condition at all.
    pub fn is_empty(&self) -> bool {
        self.risk_tiers.is_none()
            && self.agents.is_none()
            && self.capabilities.is_none()
            && self.context_matches.is_none()
            && self.time_window.is_none()
            && self.parameters.is_none()
            && self.history.is_none()
    }
}

/// One policy, compiled.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    /// Its id.
    pub policy_id: SharedStr,
    /// Its type.
    pub kind: PolicyType,
    /// Its priority.
    pub priority: i64,
    /// Its conditions.
    pub conditions: CompiledConditions,
    /// Its parameters.
    pub params: PolicyParams,
    /// `log_only` (its own `enforcement`, else the atlas's): evaluated in the shadow only.
    pub shadow: bool,
}

/// One action, compiled.
#[derive(Debug)]
pub struct CompiledAction {
    /// The `allowed_actions` entry, ready to clone (`requires_confirmation` false, no
    /// `rate_limit`; both are set per resolution).
    pub allowed: AllowedAction,
    /// The executor named by the atlas, if any.
    pub executor: Option<SharedStr>,
    /// Indexes into [`CompiledAtlas::policies`] of the matching policies of each type, in
    /// evaluation order (priority descending, then policy id). Indexed by
    /// [`type_slot`].
    pub by_type: [Vec<usize>; 5],
    /// For each matching budget policy (same order as `by_type[budget]`), the units one
    /// execution of this action costs.
    pub budget_costs: Vec<u64>,
    /// The compiled `parameters_schema`.
    pub validator: jsonschema::Validator,
    /// True when a `log_only` policy matches the action: a resolve that records outcomes then
    /// also evaluates it with those policies enforced (shadow mode).
    pub has_shadow: bool,
    /// The `parameters` constraint's fields the first resolve made for this action without
    /// intended parameters, with the steps they hold: a later resolve walking the same steps
    /// shares them instead of writing the policies' tests out again.
    pub(crate) parameters_fields: std::sync::OnceLock<StepsFields>,
}

/// The slot of a policy type in [`CompiledAction::by_type`] (its evaluation rank).
pub fn type_slot(kind: PolicyType) -> usize {
    match kind {
        PolicyType::Deny => 0,
        PolicyType::RequireApproval => 1,
        PolicyType::RateLimit => 2,
        PolicyType::Budget => 3,
        PolicyType::Allow => 4,
    }
}

/// One context file, ready to become a block.
#[derive(Debug, Clone)]
pub struct CompiledFile {
    /// `<atlas_id>/<pack_id>/<file>`.
    pub block_id: SharedStr,
    /// From the extension.
    pub content_type: SharedStr,
    /// The text.
    pub content: SharedStr,
    /// ceil(chars / 4).
    pub token_estimate: u64,
}

/// One context pack, compiled.
#[derive(Debug, Clone)]
pub struct CompiledPack {
    /// Its id.
    pub pack_id: String,
    /// Its priority.
    pub priority: i64,
    /// Its conditions.
    pub conditions: CompiledConditions,
    /// Its files, in pack order.
    pub files: Vec<CompiledFile>,
}

/// A `parameters` constraint's fields and the steps (policy indexes) they were written for.
pub(crate) type StepsFields = (Vec<usize>, Arc<Map<String, Value>>);

/// A constraint's shared members, built once.
pub(crate) type FieldsCell = std::sync::OnceLock<std::sync::Arc<Map<String, Value>>>;

/// One atlas, compiled.
#[derive(Debug)]
pub struct CompiledAtlas {
    /// The atlas id.
    pub atlas_id: SharedStr,
    /// Its version.
    pub version: String,
    /// Its digest (as given to [`CompiledAtlas::compile`]).
    pub digest: String,
    /// Actions in manifest order.
    pub actions: Vec<CompiledAction>,
    /// Action id to index in `actions`.
    pub action_index: HashMap<String, usize>,
    /// Capability id to the indexes of its actions (manifest order).
    pub capabilities: HashMap<String, Vec<usize>>,
    /// Policies in manifest order.
    pub policies: Vec<CompiledPolicy>,
    /// Context packs in manifest order.
    pub packs: Vec<CompiledPack>,
    /// Per policy and constraint kind, the constraint's shared members (built on first use).
    pub(crate) constraint_fields: Vec<[FieldsCell; 4]>,
    /// `default_deny` and its reason, shared by every resolution.
    pub(crate) default_deny: (SharedStr, SharedStr),
    /// The atlas's redaction rules, compiled.
    pub redactor: cra_atlas::redaction::Redactor,
}

impl CompiledAtlas {
    /// The policy with this id, if the atlas has one.
    pub fn policy(&self, policy_id: &str) -> Option<&CompiledPolicy> {
        self.policies.iter().find(|p| &*p.policy_id == policy_id)
    }
}

/// ceil(UTF-8 characters / 4): the errata's token estimate.
pub fn token_estimate(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

fn content_type_of(path: &str) -> &'static str {
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".md") || lower.ends_with(".markdown") {
        "text/markdown"
    } else if lower.ends_with(".json") {
        "application/json"
    } else {
        "text/plain"
    }
}

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

fn compile_conditions(
    atlas_id: &str,
    owner: &str,
    c: Option<&Conditions>,
    policy_id: Option<&str>,
) -> Result<CompiledConditions, CompileError> {
    let of_policy = policy_id.is_some();
    let Some(c) = c else {
        return Ok(CompiledConditions::default());
    };
    if let Some(k) = c.extra.keys().find(|k| !k.starts_with("x-")) {
        return Err(CompileError::UnknownCondition {
            atlas_id: atlas_id.to_owned(),
            owner: owner.to_owned(),
            condition: k.clone(),
        });
    }
    let bad = |pointer: &str, message: &str| CompileError::BadCondition {
        atlas_id: atlas_id.to_owned(),
        owner: owner.to_owned(),
        pointer: pointer.to_owned(),
        message: message.to_owned(),
    };
    let risk_tiers = c.risk_tiers.as_ref().map(|tiers| {
        let mask = tiers.iter().fold(0u8, |m, t| m | (1 << *t as u8));
        (mask, tiers.clone())
    });
    let time_window = match &c.time_window {
        None => None,
        Some(tw) => {
            if tw.start_hour > 23 {
                return Err(bad("/conditions/time_window/start_hour", "must be 0 to 23"));
            }
            if tw.end_hour > 24 || tw.end_hour == 0 {
                return Err(bad("/conditions/time_window/end_hour", "must be 1 to 24"));
            }
            if tw.start_hour == tw.end_hour {
                return Err(bad(
                    "/conditions/time_window",
                    "start_hour equals end_hour, an empty window; use 0 and 24 for the whole day",
                ));
            }
            let weekdays = match &tw.weekdays {
                None => 0x7f,
                Some(days) => {
                    let mut mask = 0u8;
                    for (i, d) in days.iter().enumerate() {
                        match WEEKDAYS.iter().position(|w| w.eq_ignore_ascii_case(d)) {
                            Some(bit) => mask |= 1 << bit,
                            None => {
                                return Err(bad(
                                    &format!("/conditions/time_window/weekdays/{i}"),
                                    "must be one of mon, tue, wed, thu, fri, sat, sun",
                                ));
                            }
                        }
                    }
                    mask
                }
            };
            Some(CompiledWindow {
                start_hour: tw.start_hour,
                end_hour: tw.end_hour,
                weekdays,
                weekday_names: tw.weekdays.clone(),
            })
        }
    };
    let parameters = match &c.parameters {
        None => None,
        Some(_) if !of_policy => {
            return Err(bad(
                "/conditions/parameters",
                "tests a call's parameters, and a context pack has no call; move it to a policy",
            ));
        }
        Some(written) => Some(
            ParamConditions::compile(written)
                .map_err(|e| bad(&format!("/conditions/parameters{}", e.pointer), &e.message))?,
        ),
    };
    let history = match &c.history {
        None => None,
        Some(_) if !of_policy => {
            return Err(bad(
                "/conditions/history",
                "tests earlier calls, and a context pack has no call; move it to a policy",
            ));
        }
        Some(written) => Some(
            HistoryConditions::compile(policy_id.unwrap_or_default(), written)
                .map_err(|e| bad(&format!("/conditions/history{}", e.pointer), &e.message))?,
        ),
    };
    Ok(CompiledConditions {
        parameters,
        history,
        risk_tiers,
        agents: c
            .agents
            .as_ref()
            .map(|a| a.iter().map(|p| AgentGlob::new(p)).collect()),
        capabilities: c.capabilities.clone(),
        context_matches: c
            .context_matches
            .as_ref()
            .map(|k| k.iter().map(|w| w.to_lowercase()).collect()),
        time_window,
    })
}

fn compile_params(
    atlas_id: &str,
    policy: &cra_atlas::model::Policy,
) -> Result<PolicyParams, CompileError> {
    let empty = Map::new();
    let p = policy.parameters.as_ref().unwrap_or(&empty);
    let err = |member: &str, message: &str| CompileError::PolicyParameters {
        atlas_id: atlas_id.to_owned(),
        policy_id: policy.policy_id.clone(),
        pointer: format!("/parameters/{member}"),
        message: message.to_owned(),
    };
    let uint = |member: &str, min: u64| -> Result<u64, CompileError> {
        match p.get(member) {
            None => Err(err(member, "is required")),
            Some(v) => match v.as_u64() {
                Some(n) if n >= min => Ok(n),
                _ => Err(err(
                    member,
                    &format!("must be an integer of at least {min}"),
                )),
            },
        }
    };
    let scope = || -> Result<Scope, CompileError> {
        match p.get("scope") {
            None => Ok(Scope::Agent),
            Some(Value::String(s)) => {
                Scope::parse(s).ok_or_else(|| err("scope", "must be session, agent or global"))
            }
            Some(_) => Err(err("scope", "must be session, agent or global")),
        }
    };
    Ok(match policy.kind {
        PolicyType::Deny => PolicyParams::Deny {
            reason: match p.get("reason") {
                None => format!("Denied by policy {}", policy.policy_id).into(),
                Some(Value::String(s)) => s.as_str().into(),
                Some(_) => return Err(err("reason", "must be a string")),
            },
        },
        PolicyType::RequireApproval => PolicyParams::RequireApproval,
        PolicyType::RateLimit => PolicyParams::RateLimit {
            max_calls: uint("max_calls", 0)?,
            window_seconds: uint("window_seconds", 1)?,
            scope: scope()?,
        },
        PolicyType::Budget => {
            let costs = match p.get("costs") {
                None => Map::new(),
                Some(Value::Object(m)) => {
                    for (k, v) in m {
                        if v.as_u64().is_none() {
                            return Err(err(
                                &format!("costs/{}", k.replace('~', "~0").replace('/', "~1")),
                                "must be a non-negative integer",
                            ));
                        }
                    }
                    m.clone()
                }
                Some(_) => return Err(err("costs", "must be an object of pattern to units")),
            };
            PolicyParams::Budget {
                max_units: uint("max_units", 0)?,
                scope: scope()?,
                costs,
            }
        }
        PolicyType::Allow => PolicyParams::Allow,
    })
}

/// The units one execution of `action_id` costs under a budget's `costs`: the exact id if
/// listed, else the most specific matching pattern (longest, then alphabetically first), else 1.
pub fn budget_cost(costs: &Map<String, Value>, action_id: &str) -> u64 {
    if let Some(v) = costs.get(action_id).and_then(Value::as_u64) {
        return v;
    }
    costs
        .iter()
        .filter(|(p, _)| pattern::matches(p, action_id))
        .max_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| b.cmp(a)))
        .and_then(|(_, v)| v.as_u64())
        .unwrap_or(1)
}

impl CompiledAtlas {
    /// Compiles a loaded atlas.
    pub fn from_loaded(atlas: &cra_atlas::LoadedAtlas) -> Result<Self, CompileError> {
        Self::compile(&atlas.manifest, &atlas.context, &atlas.digest)
    }

    /// Compiles a manifest with its context files (relative path to text) and digest.
    pub fn compile(
        manifest: &Manifest,
        context: &BTreeMap<String, String>,
        digest: &str,
    ) -> Result<Self, CompileError> {
        let atlas_id = manifest.atlas_id.as_str();
        let mut policies = Vec::with_capacity(manifest.policies.len());
        for p in &manifest.policies {
            if p.actions.is_empty() {
                return Err(CompileError::BadPattern {
                    atlas_id: atlas_id.to_owned(),
                    policy_id: p.policy_id.clone(),
                    message: "`actions` is empty; a policy needs at least one pattern".to_owned(),
                });
            }
            for a in &p.actions {
                pattern::validate_pattern(a).map_err(|e| CompileError::BadPattern {
                    atlas_id: atlas_id.to_owned(),
                    policy_id: p.policy_id.clone(),
                    message: e.to_string(),
                })?;
            }
            let owner = crate::atlas_check::policy_owner(&p.policy_id);
            let conditions =
                compile_conditions(atlas_id, &owner, p.conditions.as_ref(), Some(&p.policy_id))?;
            if p.kind == PolicyType::Deny
                && conditions.history.as_ref().is_some_and(|h| h.has_limits())
            {
                return Err(CompileError::BadCondition {
                    atlas_id: atlas_id.to_owned(),
                    owner,
                    pointer: "/conditions/history".to_owned(),
                    message: "holds count_within or sum_within, limits on the calls a policy grants, and a deny grants none; put the limit on the allow".to_owned(),
                });
            }
            policies.push(CompiledPolicy {
                policy_id: p.policy_id.as_str().into(),
                kind: p.kind,
                priority: p.priority,
                conditions,
                params: compile_params(atlas_id, p)?,
                shadow: p.enforcement.or(manifest.enforcement)
                    == Some(cra_atlas::model::Enforcement::LogOnly),
            });
        }
        // Evaluation order inside a type: priority descending, then policy id, so the order of
        // policies in the files never matters.
        let mut order: Vec<usize> = (0..policies.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&policies[a], &policies[b]);
            pb.priority
                .cmp(&pa.priority)
                .then_with(|| pa.policy_id.cmp(&pb.policy_id))
                .then_with(|| a.cmp(&b))
        });

        let mut actions = Vec::with_capacity(manifest.actions.len());
        let mut action_index = HashMap::new();
        for a in &manifest.actions {
            let mut by_type: [Vec<usize>; 5] = Default::default();
            let mut budget_costs = Vec::new();
            let mut has_shadow = false;
            for &pi in &order {
                let mp = &manifest.policies[pi];
                if pattern::matches_any(&mp.actions, &a.action_id) {
                    by_type[type_slot(mp.kind)].push(pi);
                    has_shadow |= policies[pi].shadow;
                    if let PolicyParams::Budget { costs, .. } = &policies[pi].params {
                        budget_costs.push(budget_cost(costs, &a.action_id));
                    }
                }
            }
            let validator = jsonschema::validator_for(&a.parameters_schema).map_err(|e| {
                CompileError::ParametersSchema {
                    atlas_id: atlas_id.to_owned(),
                    action_id: a.action_id.clone(),
                    message: e.to_string(),
                }
            })?;
            action_index
                .entry(a.action_id.clone())
                .or_insert(actions.len());
            actions.push(CompiledAction {
                allowed: AllowedAction {
                    action_id: a.action_id.as_str().into(),
                    // Written into every resolution that allows the action: each keeps its
                    // canonical text (see `shared`).
                    name: SharedStr::with_canonical(&a.name),
                    description: SharedStr::with_canonical(&a.description),
                    parameters_schema: SharedJson::with_canonical(a.parameters_schema.clone()),
                    returns_schema: a.returns_schema.clone().map(SharedJson::with_canonical),
                    risk_tier: a.risk_tier,
                    requires_confirmation: false,
                    idempotent: a.idempotent,
                    rate_limit: None,
                },
                executor: a.executor.as_deref().map(SharedStr::from),
                by_type,
                budget_costs,
                validator,
                has_shadow,
                parameters_fields: std::sync::OnceLock::new(),
            });
        }

        let mut capabilities: HashMap<String, Vec<usize>> = HashMap::new();
        for c in &manifest.capabilities {
            let entry = capabilities.entry(c.capability_id.clone()).or_default();
            for id in &c.actions {
                if let Some(&i) = action_index.get(id)
                    && !entry.contains(&i)
                {
                    entry.push(i);
                }
            }
            entry.sort_unstable();
        }

        let mut packs = Vec::with_capacity(manifest.context_packs.len());
        for p in &manifest.context_packs {
            let mut files = Vec::with_capacity(p.files.len());
            for f in &p.files {
                let text = context
                    .get(f)
                    .or_else(|| context.get(f.trim_start_matches("./")))
                    .ok_or_else(|| CompileError::MissingContextFile {
                        atlas_id: atlas_id.to_owned(),
                        pack_id: p.pack_id.clone(),
                        file: f.clone(),
                    })?;
                files.push(CompiledFile {
                    block_id: SharedStr::with_canonical(&format!("{atlas_id}/{}/{f}", p.pack_id)),
                    content_type: SharedStr::with_canonical(content_type_of(f)),
                    content: SharedStr::with_canonical(text),
                    token_estimate: token_estimate(text),
                });
            }
            packs.push(CompiledPack {
                pack_id: p.pack_id.clone(),
                priority: p.priority,
                conditions: compile_conditions(
                    atlas_id,
                    &crate::atlas_check::pack_owner(&p.pack_id),
                    p.conditions.as_ref(),
                    None,
                )?,
                files,
            });
        }

        let constraint_fields = (0..policies.len()).map(|_| Default::default()).collect();
        let redactor = cra_atlas::redaction::Redactor::new(&manifest.redaction).map_err(|e| {
            CompileError::Redaction {
                atlas_id: atlas_id.to_owned(),
                pointer: format!("/redaction/{}", e.index),
                message: e.message,
            }
        })?;
        Ok(Self {
            atlas_id: atlas_id.into(),
            version: manifest.version.clone(),
            digest: digest.to_owned(),
            actions,
            action_index,
            capabilities,
            policies,
            packs,
            constraint_fields,
            default_deny: ("default_deny".into(), "No policy allows this action".into()),
            redactor,
        })
    }

    /// The `rate_limit` member shown on an allowed action: the first applicable rate limit.
    pub(crate) fn rate_info(&self, policy: usize) -> Option<RateLimitInfo> {
        match self.policies[policy].params {
            PolicyParams::RateLimit {
                max_calls,
                window_seconds,
                ..
            } => Some(RateLimitInfo {
                max_calls,
                window_seconds,
            }),
            _ => None,
        }
    }
}

/// The atlases a runtime (or a CLI run) resolves against: one compiled atlas per id.
#[derive(Debug, Default)]
pub struct AtlasSet {
    atlases: Vec<CompiledAtlas>,
    by_id: HashMap<String, usize>,
    /// `{atlas_id: digest}`, made once with the set: every resolve records it.
    digests: BTreeMap<String, String>,
}

impl AtlasSet {
    /// The marks a succeeded call of `action_id` with `parameters` leaves, at `at_us`, for every
    /// `after` and `bind` test of every atlas that names the action ([`crate::history`]).
    pub fn marks(
        &self,
        action_id: &str,
        parameters: &Value,
        ids: (&str, &str),
        at_us: i64,
    ) -> Vec<crate::store::Mark> {
        let mut out = Vec::new();
        for a in self.atlases() {
            for p in &a.policies {
                if let Some(h) = &p.conditions.history {
                    out.extend(h.marks(action_id, parameters, ids, at_us));
                }
            }
        }
        out
    }

    /// The atlas that declares `action_id` (the first in atlas id order).
    pub fn declaring(&self, action_id: &str) -> Option<&CompiledAtlas> {
        self.atlases
            .iter()
            .find(|a| a.action_index.contains_key(action_id))
    }

    /// The compiled validator of `action`'s parameters schema, when a loaded atlas declares the
    /// action with that very schema (a resolution made before an atlas change may not).
    pub fn validator_of(&self, action: &AllowedAction) -> Option<&jsonschema::Validator> {
        self.atlases.iter().find_map(|a| {
            let c = &a.actions[*a.action_index.get(action.action_id.as_str())?];
            (c.allowed.parameters_schema == action.parameters_schema).then_some(&c.validator)
        })
    }

    /// A set of compiled atlases, kept in atlas id order.
    pub fn new(mut atlases: Vec<CompiledAtlas>) -> Result<Self, CompileError> {
        atlases.sort_by(|a, b| a.atlas_id.cmp(&b.atlas_id));
        let mut by_id = HashMap::new();
        for (i, a) in atlases.iter().enumerate() {
            if by_id.insert(a.atlas_id.to_string(), i).is_some() {
                return Err(CompileError::DuplicateAtlas {
                    atlas_id: a.atlas_id.to_string(),
                });
            }
        }
        let digests = atlases
            .iter()
            .map(|a| (a.atlas_id.to_string(), a.digest.clone()))
            .collect();
        Ok(Self {
            atlases,
            by_id,
            digests,
        })
    }

    /// Compiles and collects loaded atlases.
    pub fn from_loaded(atlases: &[cra_atlas::LoadedAtlas]) -> Result<Self, CompileError> {
        Self::new(
            atlases
                .iter()
                .map(CompiledAtlas::from_loaded)
                .collect::<Result<_, _>>()?,
        )
    }

    /// Every atlas, in id order.
    pub fn atlases(&self) -> &[CompiledAtlas] {
        &self.atlases
    }

    /// The atlas with this id.
    pub fn get(&self, atlas_id: &str) -> Option<&CompiledAtlas> {
        self.by_id.get(atlas_id).map(|&i| &self.atlases[i])
    }

    /// `{atlas_id: digest}` of every atlas, for `carp.request.received` (made with the set).
    pub fn digests(&self) -> &BTreeMap<String, String> {
        &self.digests
    }
}
