//! The optional explanation of a resolution: for every candidate action, the policy that decided
//! it (or `default_deny`), every policy that was looked at and each of its conditions with
//! whether it held. Attached as the `explain` member only when the caller asks for it, so the
//! default wire shape stays the spec's.

use serde::{Deserialize, Serialize};

/// The explanation of one resolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    /// One entry per candidate action, in candidate order.
    pub actions: Vec<ActionExplain>,
    /// One entry per context pack of the candidate atlases, in atlas then pack order (empty when
    /// only outcomes were computed, [`crate::eval::ExplainLevel::Outcomes`]).
    #[serde(default)]
    pub context_packs: Vec<PackExplain>,
}

/// How a candidate action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Allowed outright.
    Allow,
    /// Allowed once a human approves.
    RequiresApproval,
    /// Refused.
    Deny,
}

/// Why an action was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyKind {
    /// A policy refused it (a deny policy, or an exhausted rate limit or budget).
    Explicit,
    /// No policy granted it.
    Default,
}

/// The explanation of one candidate action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionExplain {
    /// The action.
    pub action_id: String,
    /// Its atlas.
    pub atlas_id: String,
    /// The outcome.
    pub outcome: Outcome,
    /// The deciding policy, or `default_deny`.
    pub decided_by: String,
    /// Set when `outcome` is `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_kind: Option<DenyKind>,
    /// Every policy whose patterns match the action, in evaluation order, with its verdict (empty
    /// when only outcomes were computed, [`crate::eval::ExplainLevel::Outcomes`]).
    pub policies: Vec<PolicyExplain>,
    /// What the action's `log_only` policies would have decided, enforced, when that differs
    /// from `outcome` (shadow mode); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowExplain>,
}

/// The decision a resolve would have made with its `log_only` policies enforced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowExplain {
    /// The outcome it would have had.
    pub outcome: Outcome,
    /// The policy that would have decided it, or `default_deny`.
    pub decided_by: String,
}

/// What one policy did for one action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyExplain {
    /// The policy.
    pub policy_id: String,
    /// Its type (canonical spelling).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its priority.
    pub priority: i64,
    /// True when every condition held.
    pub applies: bool,
    /// What the policy did: `decided`, `constraint` (a limit attached), `exhausted` (a limit
    /// denied), `pending` (it tests the call's parameters, decided at execute), `log_only` (shadow
    /// mode: it never decides), `not_applicable` (a condition failed) or `not_reached` (an earlier
    /// policy decided).
    pub effect: String,
    /// Each condition, with whether it held.
    pub conditions: Vec<ConditionExplain>,
}

impl PolicyExplain {
    /// Whether the policy took part in the outcome: it decided, bound a constraint, denied as
    /// exhausted, or waits on the call's parameters. What atlas-test coverage counts as fired.
    pub fn fired(&self) -> bool {
        matches!(
            self.effect.as_str(),
            "decided" | "constraint" | "exhausted" | "pending"
        )
    }
}

/// One condition and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionExplain {
    /// `risk_tiers`, `agents`, `capabilities`, `context_matches`, `time_window` or `parameters`.
    pub condition: String,
    /// Whether it held.
    pub held: bool,
    /// What was compared.
    pub detail: String,
}

/// Whether a context pack was injected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackExplain {
    /// The atlas.
    pub atlas_id: String,
    /// The pack.
    pub pack_id: String,
    /// True when its blocks were injected.
    pub injected: bool,
    /// Each condition, with whether it held.
    pub conditions: Vec<ConditionExplain>,
}
