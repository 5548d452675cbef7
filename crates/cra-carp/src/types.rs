//! CARP/1.0 wire objects (spec §3.2 to §3.5): the request (one shape for `resolve`, `execute` and
//! `validate`), the resolution, and the execute response.
//!
//! Every object keeps members it does not know in `extra` (written back with
//! `#[serde(flatten)]`), so a request or resolution read and written back loses nothing. The
//! request's objects are read from a JSON object with `cra_wire::members::Members`, not through
//! `flatten`, which refuses integers between 2^64 and 2^128 anywhere inside them. Shape checking (required members,
//! types, `carp_version == "1.0"`) is done before deserialisation by [`crate::validate`], which
//! reports every bad member with its JSON pointer; these types only carry the data.

use cra_atlas::RiskTier;
use cra_wire::members::Members;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::shared::{SharedJson, SharedStr};

/// The only protocol version this crate speaks.
pub const CARP_VERSION: &str = "1.0";

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Ask which context and actions are available for a goal.
    Resolve,
    /// Run one action allowed by an earlier resolution.
    Execute,
    /// Check a request without resolving or storing anything.
    Validate,
}

impl Operation {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Resolve => "resolve",
            Operation::Execute => "execute",
            Operation::Validate => "validate",
        }
    }
}

/// Who is asking (§3.2 `requester`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct Requester {
    /// The requesting agent; must equal the authenticated actor.
    pub agent_id: String,
    /// The CARP session the request belongs to.
    pub session_id: String,
    /// The parent session, for nested agents (`null` reads as absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// Unknown members, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What the agent wants to do (§3.2 `task`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct Task {
    /// Natural-language intent.
    pub goal: String,
    /// Risk classification; absent means `low`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk_tier: Option<RiskTier>,
    /// Hints for context selection (also searched by `context_matches`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_hints: Option<Vec<String>>,
    /// Capability ids the agent needs; narrows the candidate actions when non-empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_capabilities: Option<Vec<String>>,
    /// Unknown members, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Task {
    /// The effective risk tier (`low` when absent).
    pub fn effective_risk_tier(&self) -> RiskTier {
        self.risk_tier.unwrap_or_default()
    }

    /// The context hints, empty when absent.
    pub fn hints(&self) -> &[String] {
        self.context_hints.as_deref().unwrap_or(&[])
    }

    /// `task.intended_parameters` (an extension of §3.2): per action id, the parameters the agent
    /// means to execute it with, so the resolve can decide on them. Absent when not an object.
    pub fn intended_parameters(&self) -> Option<&Map<String, Value>> {
        self.extra.get("intended_parameters")?.as_object()
    }

    /// The required capabilities, empty when absent.
    pub fn capabilities(&self) -> &[String] {
        self.required_capabilities.as_deref().unwrap_or(&[])
    }
}

/// The `execution` member of an execute request (§3.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct Execution {
    /// The resolution that allowed the action.
    pub resolution_id: String,
    /// The action to run; must be in the resolution's `allowed_actions`.
    pub action_id: String,
    /// Parameters, checked against the action's `parameters_schema`.
    #[serde(default = "empty_object")]
    pub parameters: Value,
    /// Repeats with the same key return the first execution's response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Unknown members, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TryFrom<Map<String, Value>> for Requester {
    type Error = serde_json::Error;
    fn try_from(map: Map<String, Value>) -> Result<Self, Self::Error> {
        let mut m = Members::new(map);
        Ok(Requester {
            agent_id: m.required("agent_id")?,
            session_id: m.required("session_id")?,
            parent_session_id: m.optional("parent_session_id")?,
            extra: m.rest(),
        })
    }
}

impl TryFrom<Map<String, Value>> for Task {
    type Error = serde_json::Error;
    fn try_from(map: Map<String, Value>) -> Result<Self, Self::Error> {
        let mut m = Members::new(map);
        Ok(Task {
            goal: m.required("goal")?,
            risk_tier: m.optional("risk_tier")?,
            context_hints: m.optional("context_hints")?,
            required_capabilities: m.optional("required_capabilities")?,
            extra: m.rest(),
        })
    }
}

impl TryFrom<Map<String, Value>> for Execution {
    type Error = serde_json::Error;
    fn try_from(map: Map<String, Value>) -> Result<Self, Self::Error> {
        let mut m = Members::new(map);
        Ok(Execution {
            resolution_id: m.required("resolution_id")?,
            action_id: m.required("action_id")?,
            // Absent reads as `{}`; a `null` is kept (the parameter schema judges it).
            parameters: m.present("parameters").unwrap_or_else(empty_object),
            idempotency_key: m.optional("idempotency_key")?,
            extra: m.rest(),
        })
    }
}

impl TryFrom<Map<String, Value>> for CarpRequest {
    type Error = serde_json::Error;
    fn try_from(map: Map<String, Value>) -> Result<Self, Self::Error> {
        let mut m = Members::new(map);
        Ok(CarpRequest {
            carp_version: m.required("carp_version")?,
            request_id: m.required("request_id")?,
            timestamp: m.required("timestamp")?,
            operation: m.required("operation")?,
            requester: m.nested_required("requester")?,
            task: m.nested("task")?,
            atlas_ids: m.optional("atlas_ids")?,
            context: m.object("context")?,
            execution: m.nested("execution")?,
            extra: m.rest(),
            traceparent: None,
        })
    }
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// A CARP request (§3.2, and §3.4 when `operation` is `execute`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct CarpRequest {
    /// Always `"1.0"`.
    pub carp_version: String,
    /// Unique within the session.
    pub request_id: String,
    /// RFC 3339 with a zone; must be within the allowed skew of the runtime clock.
    pub timestamp: String,
    /// `resolve`, `execute` or `validate`.
    pub operation: Operation,
    /// Who is asking.
    pub requester: Requester,
    /// The task (required for `resolve` and `validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    /// Atlases to consult; absent or empty means every loaded atlas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atlas_ids: Option<Vec<String>>,
    /// Free key-value context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Map<String, Value>>,
    /// The execution (required for `execute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
    /// Unknown members, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The caller's W3C trace context (`traceparent`, validated) as its front door received it
    /// beside the body (HTTP's `traceparent` header). Never part of the request's JSON: the
    /// request's events record it in a member of their own (`specs/otlp.md`).
    #[serde(skip)]
    pub traceparent: Option<String>,
}

impl CarpRequest {
    /// The requested atlas ids, empty when absent.
    pub fn requested_atlases(&self) -> &[String] {
        self.atlas_ids.as_deref().unwrap_or(&[])
    }
}

/// The overall outcome of a resolution (§3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionType {
    /// Every candidate action is allowed.
    Allow,
    /// No action is allowed.
    Deny,
    /// Some candidates allowed, some denied.
    Partial,
    /// At least one allowed action is gated on a human approval.
    RequiresApproval,
}

impl DecisionType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionType::Allow => "allow",
            DecisionType::Deny => "deny",
            DecisionType::Partial => "partial",
            DecisionType::RequiresApproval => "requires_approval",
        }
    }
}

/// The `decision` member: all four members are always written (as `null` when empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The outcome.
    #[serde(rename = "type")]
    pub kind: DecisionType,
    /// A sentence for people.
    #[serde(default)]
    pub reason: Option<String>,
    /// Set when `kind` is `requires_approval`: one approval covers every gated action.
    #[serde(default)]
    pub approval_id: Option<String>,
    /// Set when `kind` is `requires_approval`: when the approval request lapses.
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// One piece of context offered to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextBlock {
    /// `<atlas_id>/<pack_id>/<file>`: stable across resolutions.
    pub block_id: SharedStr,
    /// The atlas the block comes from.
    pub source: SharedStr,
    /// `text/markdown`, `application/json` or `text/plain`, from the file extension.
    pub content_type: SharedStr,
    /// The file's text.
    pub content: SharedStr,
    /// The pack's priority (higher first).
    pub priority: i64,
    /// ceil(UTF-8 characters / 4).
    pub token_estimate: u64,
}

/// The rate limit shown on an allowed action (§3.3 `allowed_actions[].rate_limit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimitInfo {
    /// Executions allowed per window.
    pub max_calls: u64,
    /// Window length.
    pub window_seconds: u64,
}

/// An action the agent may execute under this resolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllowedAction {
    /// Action id.
    pub action_id: SharedStr,
    /// Display name.
    pub name: SharedStr,
    /// What it does.
    pub description: SharedStr,
    /// JSON Schema of the parameters.
    pub parameters_schema: SharedJson,
    /// JSON Schema of the result, when the atlas gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns_schema: Option<SharedJson>,
    /// The action's risk tier.
    pub risk_tier: RiskTier,
    /// True when a human approval is needed before it runs.
    pub requires_confirmation: bool,
    /// Whether repeating it is harmless.
    pub idempotent: bool,
    /// The strictest-priority rate limit that applies, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitInfo>,
}

/// An action the agent may not execute, with the policy that refused it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeniedAction {
    /// Action id.
    pub action_id: SharedStr,
    /// Why (a deny policy's `parameters.reason`, or a generated sentence).
    pub reason: SharedStr,
    /// The deciding policy, or `default_deny`.
    pub policy_id: SharedStr,
}

/// Constraint kinds (§3.3). Note the spelling `require_approval` (the decision type is
/// `requires_approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConstraintType {
    /// A human must approve before gated actions run.
    RequireApproval,
    /// Executions per window.
    RateLimit,
    /// Units spent.
    Budget,
    /// Executions only inside a UTC window.
    TimeWindow,
    /// The action's outcome depends on the call's parameters: the policies execute decides on
    /// them (an extension of §3.3; `specs/carp.md`, "Conditions on parameters").
    Parameters,
}

impl ConstraintType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ConstraintType::RequireApproval => "require_approval",
            ConstraintType::RateLimit => "rate_limit",
            ConstraintType::Budget => "budget",
            ConstraintType::TimeWindow => "time_window",
            ConstraintType::Parameters => "parameters",
        }
    }
}

/// A condition on executions under this resolution, enforced at execute time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Constraint {
    /// `<type>:<policy_id>`: stable across resolutions.
    pub constraint_id: String,
    /// The kind.
    #[serde(rename = "type")]
    pub kind: ConstraintType,
    /// What the constraint binds and its limits.
    pub parameters: ConstraintParameters,
}

/// The `parameters` of a constraint: always `policy_id`, `atlas_id` and `actions` (the allowed
/// action ids it binds), plus `max_calls`/`window_seconds`/`scope` (rate_limit),
/// `max_units`/`scope`/`costs` (budget), `approval_id` (require_approval),
/// `start_hour`/`end_hour`/`weekdays` (time_window). On the wire one flat object.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstraintParameters {
    /// The policy's members (shared with the compiled atlas; everything but `approval_id` and
    /// `actions`).
    pub fields: std::sync::Arc<Map<String, Value>>,
    /// The resolution's approval, for `require_approval` constraints.
    pub approval_id: Option<String>,
    /// The allowed action ids the constraint binds.
    pub actions: Vec<SharedStr>,
}

impl ConstraintParameters {
    /// A member other than `actions`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// True when the constraint binds `action_id`.
    pub fn binds(&self, action_id: &str) -> bool {
        self.actions.iter().any(|a| a.as_str() == action_id)
    }
}

impl Serialize for ConstraintParameters {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let extra = 1 + usize::from(self.approval_id.is_some());
        let mut m = s.serialize_map(Some(self.fields.len() + extra))?;
        for (k, v) in self.fields.iter() {
            m.serialize_entry(k, v)?;
        }
        if let Some(a) = &self.approval_id {
            m.serialize_entry("approval_id", a)?;
        }
        m.serialize_entry("actions", &self.actions)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for ConstraintParameters {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map = Map::<String, Value>::deserialize(d)?;
        let actions = match map.remove("actions") {
            None => Vec::new(),
            Some(v) => Vec::<SharedStr>::deserialize(v).map_err(D::Error::custom)?,
        };
        let approval_id = match map.remove("approval_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(D::Error::custom("approval_id must be a string")),
        };
        Ok(Self {
            fields: std::sync::Arc::new(map),
            approval_id,
            actions,
        })
    }
}

/// A CARP resolution (§3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolution {
    /// Always `"1.0"`.
    pub carp_version: String,
    /// This resolution's id.
    pub resolution_id: String,
    /// The request it answers.
    pub request_id: String,
    /// When it was made (wire form).
    pub timestamp: String,
    /// The overall outcome.
    pub decision: Decision,
    /// Context for the agent, highest priority first.
    pub context_blocks: Vec<ContextBlock>,
    /// Actions the agent may execute.
    pub allowed_actions: Vec<AllowedAction>,
    /// Candidate actions refused, with the deciding policy.
    pub denied_actions: Vec<DeniedAction>,
    /// Rate limits, budgets, approvals and time windows that bind executions.
    pub constraints: Vec<Constraint>,
    /// Seconds the resolution stays valid.
    pub ttl_seconds: u64,
    /// The TRACE id shared by every event of this resolve.
    pub trace_id: String,
    /// Why each candidate was decided as it was; present only when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<crate::explain::Explain>,
    /// Unknown members, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The status of an execution (§3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecuteStatus {
    /// The action ran and produced `result`.
    Success,
    /// The action could not run or failed; see `error`.
    Error,
    /// A policy refused the execution; see `error`.
    Denied,
    /// The resolution's approval is still pending.
    PendingApproval,
}

/// The `error` member of an execute response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteError {
    /// A `cra_wire::Token` spelling.
    pub code: String,
    /// A sentence for people.
    pub message: String,
    /// Structured detail (field errors, policy id, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// A CARP execute response (§3.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResponse {
    /// Always `"1.0"`.
    pub carp_version: String,
    /// This execution's id.
    pub execution_id: String,
    /// The execute request it answers.
    pub request_id: String,
    /// The resolution it ran under.
    pub resolution_id: String,
    /// When it was answered.
    pub timestamp: String,
    /// The outcome.
    pub status: ExecuteStatus,
    /// The executor's result, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What went wrong, unless `status` is `success`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ExecuteError>,
    /// The resolution's trace id.
    pub trace_id: String,
    /// Unknown members, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
