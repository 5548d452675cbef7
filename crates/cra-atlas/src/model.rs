//! Atlas/1.0 types (spec §5.3, policy shape from the errata).
//!
//! Every struct keeps fields it does not know in `extra` (a `#[serde(flatten)]` map), so `x-*`
//! extensions and future fields survive a load and a re-serialisation. Whether an unknown field
//! is *allowed* is the validator's business (JSON Schema), not the type's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The manifest, `atlas.json`, after inline and folder-held policies and actions are merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `"1.0"`.
    pub atlas_version: String,
    /// Reverse-domain id (§5.4.1).
    pub atlas_id: String,
    /// Semver 2.0.0.
    pub version: String,
    /// Display name.
    pub name: String,
    /// What the atlas governs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Authors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authors: Vec<String>,
    /// SPDX license identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// Domains the atlas covers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// Named groups of actions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Capability>,
    /// Context documents offered to agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_packs: Vec<ContextPack>,
    /// Policies (inline ones plus those from `policies/*.json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<Policy>,
    /// Actions (inline ones plus those from `actions/*.json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// Other atlases this one needs: atlas id to semver range.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dependencies: BTreeMap<String, String>,
    /// The default `enforcement` of the atlas's policies (`log_only` puts every policy without
    /// its own `enforcement` in shadow mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// Redaction rules (`specs/redaction.md`) applied, with the operator's, to every request
    /// that names this atlas (a resolve's `atlas_ids`) or one of its actions (an execute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redaction: Vec<crate::redaction::RedactionRule>,
    /// Unknown and `x-*` fields, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A named group of actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capability {
    /// Capability id, matched against `task.required_capabilities`.
    pub capability_id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it lets an agent do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Action ids in this capability.
    #[serde(default)]
    pub actions: Vec<String>,
    /// Unknown and `x-*` fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A set of context documents injected together when its conditions hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextPack {
    /// Pack id.
    pub pack_id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Files relative to the atlas root (e.g. `context/overview.md`).
    #[serde(default)]
    pub files: Vec<String>,
    /// Higher first when blocks are ordered.
    #[serde(default)]
    pub priority: i64,
    /// When the pack applies (same vocabulary as policy conditions); absent = always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Conditions>,
    /// Unknown and `x-*` fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The five policy types. Input accepts `requires_approval` as a spelling of `require_approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyType {
    /// Refuses matching actions.
    Deny,
    /// Grants matching actions on condition of a human approval.
    #[serde(alias = "requires_approval")]
    RequireApproval,
    /// Limits executions per window; never grants.
    RateLimit,
    /// Limits spent units; never grants.
    Budget,
    /// Grants matching actions.
    Allow,
}

impl PolicyType {
    /// Evaluation order of §5.5 and the errata: deny, require_approval, rate_limit, budget, allow.
    pub const EVALUATION_ORDER: [PolicyType; 5] = [
        PolicyType::Deny,
        PolicyType::RequireApproval,
        PolicyType::RateLimit,
        PolicyType::Budget,
        PolicyType::Allow,
    ];

    /// The canonical spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyType::Deny => "deny",
            PolicyType::RequireApproval => "require_approval",
            PolicyType::RateLimit => "rate_limit",
            PolicyType::Budget => "budget",
            PolicyType::Allow => "allow",
        }
    }
}

/// A policy: `{policy_id, type, actions: [pattern], conditions?, parameters?, priority?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// Policy id, reported in resolutions and TRACE.
    pub policy_id: String,
    /// Which of the five kinds.
    #[serde(rename = "type")]
    pub kind: PolicyType,
    /// Action patterns: exact id, `*` (one segment), `**` (one or more segments); `*` alone = all.
    #[serde(default)]
    pub actions: Vec<String>,
    /// All must hold for the policy to apply; absent = always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Conditions>,
    /// Type-specific: `reason` (deny), `max_calls`/`window_seconds`/`scope` (rate_limit),
    /// `max_units`/`scope`/`costs` (budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Value>>,
    /// Higher first within one type.
    #[serde(default)]
    pub priority: i64,
    /// `log_only`: evaluated and recorded, never deciding (shadow mode); absent: the atlas's
    /// `enforcement`, else `enforce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// Unknown and `x-*` fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Whether a policy decides (`enforce`) or is only evaluated and recorded (`log_only`, shadow
/// mode: what it would have decided goes into the audit trail, the answer does not change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// The policy decides.
    #[default]
    Enforce,
    /// The policy is evaluated in the shadow and never decides.
    LogOnly,
}

/// Risk tiers, ordered from least to most risky.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum RiskTier {
    /// The default.
    #[default]
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Critical.
    Critical,
}

impl RiskTier {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RiskTier::Low => "low",
            RiskTier::Medium => "medium",
            RiskTier::High => "high",
            RiskTier::Critical => "critical",
        }
    }
}

/// The condition vocabulary (errata). Every present condition must hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Conditions {
    /// The request's `task.risk_tier` is one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk_tiers: Option<Vec<RiskTier>>,
    /// `requester.agent_id` matches one of these patterns (`*` wildcards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    /// `task.required_capabilities` names one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// One of these keywords occurs (case-insensitively) in the goal or a context hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_matches: Option<Vec<String>>,
    /// The evaluation instant falls in this UTC window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_window: Option<TimeWindow>,
    /// Tests on the call's `parameters` (RFC 6901 pointers and operators), kept as written:
    /// `cra_carp::params` compiles them. Policies only; decided at execute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Tests on earlier calls (`after`, `bind`, `count_within`, `sum_within`, each with its
    /// `scope`), kept as written: `cra_carp::history` compiles them. Policies only; decided at
    /// execute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Value>,
    /// Unknown and `x-*` fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The members of one `conditions.parameters` test: its `pointer`, then the operators in the
/// order they are documented, explained and formatted (`cra_carp::params` evaluates them).
pub const PARAMETER_TEST_MEMBERS: [&str; 11] = [
    "pointer", "equals", "in", "not_in", "matches", "prefix", "gt", "gte", "lt", "lte", "regex",
];

/// A UTC time window: hours `[start_hour, end_hour)` (wrapping past midnight when
/// `start_hour > end_hour`) on the listed weekdays (`mon` .. `sun`; absent = every day).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeWindow {
    /// First hour inside the window, 0-23.
    #[serde(default)]
    pub start_hour: u8,
    /// First hour after the window, 1-24.
    #[serde(default = "TimeWindow::default_end")]
    pub end_hour: u8,
    /// Days the window applies on (`mon`, `tue`, `wed`, `thu`, `fri`, `sat`, `sun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weekdays: Option<Vec<String>>,
}

impl TimeWindow {
    fn default_end() -> u8 {
        24
    }
}

/// An action an agent may request (§5.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// Dotted id (§5.4.2).
    pub action_id: String,
    /// Display name.
    pub name: String,
    /// What the action does, for the agent.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the parameters.
    #[serde(default = "Action::empty_object_schema")]
    pub parameters_schema: Value,
    /// JSON Schema of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns_schema: Option<Value>,
    /// Risk tier.
    #[serde(default)]
    pub risk_tier: RiskTier,
    /// Whether repeating the action is harmless.
    #[serde(default)]
    pub idempotent: bool,
    /// Which executor performs it (`builtin:echo`, `http:<name>`, ...); absent = the agent itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// Unknown and `x-*` fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Action {
    fn empty_object_schema() -> Value {
        serde_json::json!({"type": "object"})
    }
}
