//! The MCP front door (`specs/mcp.md`): CARP sessions served as MCP tools.
//!
//! `tools/list` is a CARP resolve in the session; each allowed action is a tool, named and
//! shaped as the atlas adapter's `mcp` target does it ([`cra_atlas::adapters::tool_name`]).
//! `tools/call` is a CARP execute under the latest list's resolution (a fresh resolve when there
//! is none, or it expired). Both go through the service layer, so every list and every call is
//! decided and recorded exactly as over HTTP. A refusal, an executor failure and a pending
//! approval are tool results with `isError: true` that name the token, the deciding policy and
//! what to do; a tool name that names no atlas action is a protocol error, and nothing is
//! recorded for it. The latest resolution's context blocks are resources
//! (`cra://context/<block_id>`), whose text hashes to the `content_hash` that `context.injected`
//! recorded.
//!
//! Two transports serve the one [`handler`]: standard input and output ([`stdio`], `cra mcp
//! serve`, one session for the process) and Streamable HTTP ([`http`], `/mcp` on `cra serve`,
//! a session per MCP session or per `cra/session.open` handle). `cra mcp serve --url` relays
//! standard input and output to a server's `/mcp` instead ([`bridge`]). Over pipes, standard
//! input and output are driven by the async workers ([`pipes`]).

pub mod bridge;
pub mod handler;
pub mod http;
pub mod pipes;
pub mod stdio;

pub use stdio::{bridge_stdio, serve_stdio};

use cra_atlas::adapters::{McpToolSource, action_id_of, mcp_tool, tool_name};
use cra_atlas::mcp_import::parse_executor_ref;
use cra_carp::types::{AllowedAction, ContextBlock, ExecuteResponse, ExecuteStatus};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ListResourcesResult, ReadResourceResult, Tool};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::service::sessions::{self, CreateSession};
use crate::state::AppState;

/// A CARP session served over MCP, and the resolution its latest tool list came from.
pub struct McpSession {
    rt: AppState,
    actor: Actor,
    session_id: String,
    goal: String,
    capabilities: Vec<String>,
    naming: Naming,
    latest: Mutex<Option<Listed>>,
    /// Calls that asked for an approval, by `(action id, parameters digest)`: the resolution
    /// whose approval each opened, until it runs or that resolution expires. A call made again
    /// goes to its own approval; another gated call gets a resolution of its own
    /// (`specs/mcp.md`, "Approvals").
    asked: Mutex<std::collections::HashMap<(String, String), Asked>>,
    /// Cancelled when the session ends: its list-change notifier stops.
    ended: tokio_util::sync::CancellationToken,
}

/// How an action's tool is named.
#[derive(Debug, Clone, Default)]
pub enum Naming {
    /// The atlas adapters' reversible mapping: every `.` of the action id a `_`.
    #[default]
    Adapter,
    /// The upstream's own tool names (`cra mcp proxy`): each action that an `mcp:` executor runs
    /// is listed under the name of the tool it runs, so that a client's configuration written
    /// for the upstream keeps working.
    Upstream {
        /// Action id to tool name.
        by_action: std::collections::HashMap<String, String>,
    },
}

impl Naming {
    /// The upstream naming of the `mcp:` actions of `atlases`.
    pub fn upstream_of(atlases: &crate::atlases::AtlasState) -> Self {
        let by_action = atlases
            .loaded
            .iter()
            .flat_map(|a| &a.manifest.actions)
            .filter_map(|a| {
                let (_, tool) = parse_executor_ref(a.executor.as_deref()?)?;
                Some((a.action_id.clone(), tool.to_owned()))
            })
            .collect();
        Self::Upstream { by_action }
    }

    /// The tool name of `action_id`.
    fn tool(&self, action_id: &str) -> String {
        match self {
            Self::Adapter => tool_name(action_id),
            Self::Upstream { by_action } => by_action
                .get(action_id)
                .cloned()
                .unwrap_or_else(|| tool_name(action_id)),
        }
    }

    /// The action id a tool name names (not necessarily an action that exists).
    fn action(&self, tool: &str) -> String {
        match self {
            Self::Adapter => action_id_of(tool),
            Self::Upstream { by_action } => by_action
                .iter()
                .find(|(_, t)| *t == tool)
                .map_or_else(|| action_id_of(tool), |(a, _)| a.clone()),
        }
    }
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("session_id", &self.session_id)
            .field("agent", &self.actor.id)
            .finish()
    }
}

/// The resolution a tool list showed, until when it may be executed under, and its context.
#[derive(Debug, Clone)]
struct Listed {
    resolution_id: String,
    expires_at: time::OffsetDateTime,
    blocks: Vec<ContextBlock>,
    /// The actions it gates on an approval.
    gated: std::collections::BTreeSet<String>,
    /// Whether a call under it opened its approval: the approval is then that call's, and
    /// another gated call needs a fresh resolution.
    approval_taken: bool,
}

/// The resolution under which a call asked for its approval, and until when it stands.
#[derive(Debug, Clone)]
struct Asked {
    resolution_id: String,
    expires_at: time::OffsetDateTime,
}

/// The goal of a session opened without one.
pub const DEFAULT_GOAL: &str = "MCP client";

/// The URI scheme and prefix of a context block as a resource.
const CONTEXT_URI: &str = "cra://context/";

impl McpSession {
    /// Opens a CARP session for `actor` (an agent acting as itself) with `goal`. The session's
    /// resolves ask for `capabilities`, or, when that is empty, for every capability of the
    /// atlases in force.
    pub async fn open(
        rt: AppState,
        actor: Actor,
        goal: String,
        capabilities: Vec<String>,
    ) -> ApiResult<Self> {
        let input = CreateSession {
            agent_id: actor.id.clone(),
            goal: goal.clone(),
            project_id: None,
            parent_session_id: None,
        };
        let view = sessions::open(&rt, &actor, input).await?;
        let capabilities = if capabilities.is_empty() {
            every_capability(&rt)
        } else {
            capabilities
        };
        Ok(Self::served(rt, actor, view.session_id, goal, capabilities))
    }

    /// Takes up the existing session `session_id` for `actor`, who must own it, while it is
    /// active: 404 when there is none, 403 when it is another agent's or has ended.
    /// Its resolves ask for every capability of the atlases in force.
    pub async fn attach(rt: AppState, actor: Actor, session_id: &str) -> ApiResult<Self> {
        let view = sessions::get(&rt, &actor, session_id).await?;
        if view.agent_id != actor.id {
            return Err(ApiError::forbidden(format!(
                "session {session_id} belongs to another agent; open your own with cra/session.open"
            )));
        }
        if view.status != "active" {
            return Err(ApiError::new(
                cra_wire::Token::SessionInactive,
                format!("session {session_id} has ended; open a new one with cra/session.open"),
            ));
        }
        let capabilities = every_capability(&rt);
        let goal = view.goal.unwrap_or_else(|| DEFAULT_GOAL.to_owned());
        Ok(Self::served(rt, actor, view.session_id, goal, capabilities))
    }

    /// The session `session_id`, served under the adapters' names, with no list made yet.
    fn served(
        rt: AppState,
        actor: Actor,
        session_id: String,
        goal: String,
        capabilities: Vec<String>,
    ) -> Self {
        Self {
            rt,
            actor,
            session_id,
            goal,
            capabilities,
            naming: Naming::Adapter,
            latest: Mutex::new(None),
            asked: Mutex::new(std::collections::HashMap::new()),
            ended: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// This session with its tools named by `naming`.
    #[must_use]
    pub fn named(mut self, naming: Naming) -> Self {
        self.naming = naming;
        self
    }

    /// The CARP session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The runtime the session lives in.
    pub fn runtime(&self) -> &AppState {
        &self.rt
    }

    /// The agent the session belongs to.
    pub fn agent_id(&self) -> &str {
        &self.actor.id
    }

    /// Ends the CARP session (`session.ended`, durable when this returns).
    pub async fn end(&self) -> ApiResult<()> {
        self.ended.cancel();
        sessions::end(&self.rt, &self.actor, &self.session_id).await
    }

    /// Tells `peer` (a 2025-11-25 client of this session) each time its tool list may have
    /// changed (`notifications/tools/list_changed`), until the session ends or the client goes.
    pub fn notify_list_changes(&self, peer: rmcp::Peer<rmcp::RoleServer>) {
        let mut changes = self.rt.tool_lists.subscribe();
        let ended = self.ended.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = ended.cancelled() => return,
                    changed = changes.changed() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }

    /// The tools this session may call now: one CARP resolve, whose allowed actions they are.
    pub async fn tools(&self) -> ApiResult<Vec<Tool>> {
        let answer =
            crate::service::carp::resolve(&self.rt, &self.actor, &self.resolve_body(), false)
                .await?;
        let mut resolution = answer.resolution;
        let now = self.rt.clock.now();
        let ttl =
            time::Duration::seconds(i64::try_from(resolution.ttl_seconds).unwrap_or(i64::MAX));
        let listed = Listed {
            resolution_id: std::mem::take(&mut resolution.resolution_id),
            // An expiry past what time can hold counts as now: the next call resolves again.
            expires_at: now.checked_add(ttl).unwrap_or(now),
            blocks: std::mem::take(&mut resolution.context_blocks),
            gated: resolution
                .allowed_actions
                .iter()
                .filter(|a| a.requires_confirmation)
                .map(|a| a.action_id.to_string())
                .collect(),
            approval_taken: false,
        };
        *self.latest.lock().await = Some(listed);
        let atlases = self.rt.atlases();
        resolution
            .allowed_actions
            .iter()
            .map(|a| {
                let executor = crate::executor::executor_of(&atlases, None, &a.action_id)
                    .ok()
                    .flatten();
                tool_of(a, executor.as_deref(), &self.naming)
            })
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::internal("an allowed action has no MCP tool form", e))
    }

    /// Calls the tool `name` with `arguments`: a CARP execute of its action, with the client's
    /// `idempotency_key` when it gave one. `Ok(None)` when the name names no action of the
    /// atlases in force (nothing is recorded).
    pub async fn call(
        &self,
        name: &str,
        arguments: Value,
        idempotency_key: Option<String>,
    ) -> ApiResult<Option<CallToolResult>> {
        let action_id = self.naming.action(name);
        let atlases = self.rt.atlases();
        let Some(action) = atlases.loaded.iter().find_map(|a| a.action(&action_id)) else {
            return Ok(None);
        };
        let runs_a_tool = action
            .executor
            .as_deref()
            .is_some_and(|e| parse_executor_ref(e).is_some());
        drop(atlases);
        let call = (
            action_id.clone(),
            cra_wire::hash::canonical_digest(&arguments),
        );
        let (resolution_id, expires_at) = self.resolution_for(&call).await?;
        let mut execution = json!({
            "resolution_id": resolution_id, "action_id": action_id, "parameters": arguments
        });
        if let Some(key) = idempotency_key {
            execution["idempotency_key"] = Value::String(key);
        }
        let body = self.request_body("execute", json!({ "execution": execution }));
        let response = crate::service::carp::execute(&self.rt, &self.actor, &body).await?;
        self.note_approval(call, &resolution_id, expires_at, &response)
            .await;
        Ok(Some(result_of(&response, runs_a_tool)))
    }

    /// The resolution a call runs under: the one whose approval it asked for, while that
    /// stands; else the latest list's, unless the call is gated there and another call already
    /// took that list's approval, in which case a fresh list's.
    async fn resolution_for(
        &self,
        call: &(String, String),
    ) -> ApiResult<(String, time::OffsetDateTime)> {
        let now = self.rt.clock.now();
        if let Some(a) = self.asked.lock().await.get(call)
            && a.expires_at > now
        {
            return Ok((a.resolution_id.clone(), a.expires_at));
        }
        let current = self.current_resolution().await?;
        let taken = self
            .latest
            .lock()
            .await
            .as_ref()
            .is_some_and(|l| l.approval_taken && l.gated.contains(&call.0));
        if !taken {
            return Ok(current);
        }
        self.tools().await?;
        self.current_resolution().await
    }

    /// Keeps track of the approval a call asked for: a pending answer binds the resolution's
    /// approval to this call; a run (or an approval already used) frees it.
    async fn note_approval(
        &self,
        call: (String, String),
        resolution_id: &str,
        expires_at: time::OffsetDateTime,
        response: &ExecuteResponse,
    ) {
        let code = response.error.as_ref().map(|e| e.code.as_str());
        let mut asked = self.asked.lock().await;
        let now = self.rt.clock.now();
        asked.retain(|_, a| a.expires_at > now);
        match (response.status, code) {
            (ExecuteStatus::PendingApproval, _) => {
                let mut latest = self.latest.lock().await;
                if let Some(l) = latest.as_mut().filter(|l| l.resolution_id == resolution_id) {
                    l.approval_taken = true;
                }
                asked.insert(
                    call,
                    Asked {
                        resolution_id: resolution_id.to_owned(),
                        expires_at,
                    },
                );
            }
            (ExecuteStatus::Success | ExecuteStatus::Error, _)
            | (ExecuteStatus::Denied, Some("approval_used" | "approval_rejected")) => {
                asked.remove(&call);
            }
            (ExecuteStatus::Denied, _) => {}
        }
    }

    /// The context blocks of the latest list's resolution (a list is made first when there is
    /// none).
    pub async fn context(&self) -> ApiResult<Vec<ContextBlock>> {
        if self.latest.lock().await.is_none() {
            self.tools().await?;
        }
        Ok(self
            .latest
            .lock()
            .await
            .as_ref()
            .map(|l| l.blocks.clone())
            .unwrap_or_default())
    }

    /// The latest list's resolution while it is valid, else a fresh one, with its expiry.
    async fn current_resolution(&self) -> ApiResult<(String, time::OffsetDateTime)> {
        // Only the id is read: every call runs this, and the context blocks may be large.
        let valid = |l: &Listed| l.expires_at > self.rt.clock.now();
        if let Some(l) = self.latest.lock().await.as_ref().filter(|l| valid(l)) {
            return Ok((l.resolution_id.clone(), l.expires_at));
        }
        self.tools().await?;
        self.latest
            .lock()
            .await
            .as_ref()
            .map(|l| (l.resolution_id.clone(), l.expires_at))
            .ok_or_else(|| ApiError::internal("resolve", "no resolution was kept"))
    }

    fn resolve_body(&self) -> Value {
        self.request_body(
            "resolve",
            json!({"task": {"goal": self.goal, "required_capabilities": self.capabilities}}),
        )
    }

    /// A CARP request of `operation` in this session, with `members` added.
    fn request_body(&self, operation: &str, members: Value) -> Value {
        let mut body = json!({
            "carp_version": "1.0",
            "request_id": self.rt.ids.new_id(),
            "timestamp": cra_wire::clock::format_timestamp(self.rt.clock.now()),
            "operation": operation,
            "requester": {"agent_id": self.actor.id, "session_id": self.session_id},
        });
        if let (Value::Object(b), Value::Object(m)) = (&mut body, members) {
            b.extend(m);
        }
        body
    }
}

/// Every capability id of the atlases in force, in atlas order, each once.
fn every_capability(rt: &AppState) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for atlas in &rt.atlases().loaded {
        for c in &atlas.manifest.capabilities {
            if !out.contains(&c.capability_id) {
                out.push(c.capability_id.clone());
            }
        }
    }
    out
}

/// The resources of context blocks: `cra://context/<block_id>`, the block's content type.
pub(crate) fn resources_of(
    blocks: &[ContextBlock],
) -> Result<ListResourcesResult, serde_json::Error> {
    let resources: Vec<Value> = blocks
        .iter()
        .map(|b| {
            json!({
                "uri": format!("{CONTEXT_URI}{}", b.block_id.as_str()),
                "name": b.block_id.as_str(),
                "mimeType": b.content_type.as_str(),
                "description": format!("Context from {}", b.source.as_str()),
            })
        })
        .collect();
    // `resultType` is what 2026-07-28 peers require; rmcp strips it for handshake-era peers.
    serde_json::from_value(json!({ "resultType": "complete", "resources": resources }))
}

/// The text of the block `uri` names, as a resource read; `None` when no block has that URI.
pub(crate) fn read_of(
    blocks: &[ContextBlock],
    uri: &str,
) -> Option<Result<ReadResourceResult, serde_json::Error>> {
    let id = uri.strip_prefix(CONTEXT_URI)?;
    let block = blocks.iter().find(|b| b.block_id.as_str() == id)?;
    Some(serde_json::from_value(
        json!({"resultType": "complete", "contents": [{
            "uri": uri,
            "mimeType": block.content_type.as_str(),
            "text": block.content.as_str(),
        }]}),
    ))
}

/// The MCP tool of an allowed action, made as the atlas adapter makes it
/// ([`cra_atlas::adapters::mcp_tool`]): `openWorldHint` when the atlas names an `executor` for
/// the action (as the adapter file says it), and no `outputSchema`, since results are not
/// validated against `returns_schema` (specs/mcp.md).
fn tool_of(
    a: &AllowedAction,
    executor: Option<&str>,
    naming: &Naming,
) -> Result<Tool, serde_json::Error> {
    let source = McpToolSource {
        name: a.name.as_str(),
        description: a.description.as_str(),
        parameters_schema: a.parameters_schema.value(),
        risk_tier: a.risk_tier,
        idempotent: a.idempotent,
        open_world: Some(executor.is_some()),
        output_schema: None,
    };
    serde_json::from_value(mcp_tool(&naming.tool(&a.action_id), &source))
}

/// The tool result of an execute response: on success the result's JSON (or, when
/// `runs_a_tool`, the upstream tool's result itself); otherwise an error result naming the
/// token, the deciding policy and what to do next.
fn result_of(r: &ExecuteResponse, runs_a_tool: bool) -> CallToolResult {
    if r.status == ExecuteStatus::Success {
        // An `mcp` executor's result is the upstream tool's own result: passed on as it is.
        if runs_a_tool
            && let Some(result) = r.result.as_ref()
            && let Ok(upstream) = serde_json::from_value::<CallToolResult>(result.clone())
        {
            return upstream;
        }
        let text = r.result.as_ref().map_or_else(String::new, Value::to_string);
        return CallToolResult::success(vec![ContentBlock::text(text)]);
    }
    let (code, message, details) = r.error.as_ref().map_or(("error", "", None), |e| {
        (e.code.as_str(), e.message.as_str(), e.details.as_ref())
    });
    let policy = details
        .and_then(|d| d.get("policy_id"))
        .and_then(Value::as_str);
    let mut text = format!("{code}: {message}");
    if let Some(p) = policy {
        text.push_str(&format!(" (policy `{p}`)"));
    }
    text.push_str(&format!(" [execution {}]", r.execution_id));
    text.push_str(match r.status {
        ExecuteStatus::PendingApproval => {
            " Ask an operator to decide the approval, then call this tool again with the same arguments."
        }
        ExecuteStatus::Error => " The action ran and its executor failed; see the message.",
        _ => "",
    });
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A refusal of the service as a protocol error carrying the refusal's body (token, message,
/// pointer): a request the client got wrong is invalid params, a server fault an internal
/// error, anything else (credentials, ownership, a missing session) an invalid request.
pub(crate) fn protocol_error(e: ApiError) -> ErrorData {
    let message = format!("{}: {}", e.body.error, e.body.message);
    let data = serde_json::to_value(&e.body).ok();
    match e.status() {
        400 | 413 | 422 => ErrorData::invalid_params(message, data),
        500.. => ErrorData::internal_error(message, data),
        _ => ErrorData::invalid_request(message, data),
    }
}
