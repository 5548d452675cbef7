//! The MCP front door (`specs/mcp.md`): one CARP session served as MCP tools.
//!
//! `tools/list` is a CARP resolve in the session; each allowed action is a tool, named and
//! shaped as the atlas adapter's `mcp` target does it ([`cra_atlas::adapters::tool_name`]).
//! `tools/call` is a CARP execute under the latest list's resolution (a fresh resolve when there
//! is none, or it expired). Both go through the service layer, so every list and every call is
//! decided and recorded exactly as over HTTP. A refusal, an executor failure and a pending
//! approval are tool results with `isError: true` that name the token, the deciding policy and
//! what to do; a tool name that names no atlas action is a protocol error, and nothing is
//! recorded for it.
//!
//! Served here over stdio (`cra mcp serve`); the session ends when the client goes away.

use std::sync::Arc;

use cra_atlas::RiskTier;
use cra_atlas::adapters::{action_id_of, tool_name};
use cra_carp::types::{AllowedAction, ExecuteResponse, ExecuteStatus};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
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
    latest: Mutex<Option<Listed>>,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("session_id", &self.session_id)
            .field("agent", &self.actor.id)
            .finish()
    }
}

/// The resolution a tool list showed, and until when it may be executed under.
#[derive(Debug, Clone)]
struct Listed {
    resolution_id: String,
    expires_at: time::OffsetDateTime,
}

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
        Ok(Self {
            rt,
            actor,
            session_id: view.session_id,
            goal,
            capabilities,
            latest: Mutex::new(None),
        })
    }

    /// The CARP session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Ends the CARP session (`session.ended`, durable when this returns).
    pub async fn end(&self) -> ApiResult<()> {
        sessions::end(&self.rt, &self.actor, &self.session_id).await
    }

    /// The tools this session may call now: one CARP resolve, whose allowed actions they are.
    pub async fn tools(&self) -> ApiResult<Vec<Tool>> {
        let answer =
            crate::service::carp::resolve(&self.rt, &self.actor, &self.resolve_body(), false)
                .await?;
        let resolution = answer.resolution;
        let listed = Listed {
            resolution_id: resolution.resolution_id.clone(),
            expires_at: self.rt.clock.now()
                + time::Duration::seconds(
                    i64::try_from(resolution.ttl_seconds).unwrap_or(i64::MAX),
                ),
        };
        *self.latest.lock().await = Some(listed);
        resolution
            .allowed_actions
            .iter()
            .map(tool_of)
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::internal("an allowed action has no MCP tool form", e))
    }

    /// Calls the tool `name` with `arguments`: a CARP execute of its action. `Ok(None)` when the
    /// name names no action of the atlases in force (nothing is recorded).
    pub async fn call(&self, name: &str, arguments: Value) -> ApiResult<Option<CallToolResult>> {
        let action_id = action_id_of(name);
        let known = self
            .rt
            .atlases()
            .loaded
            .iter()
            .any(|a| a.manifest.actions.iter().any(|x| x.action_id == action_id));
        if !known {
            return Ok(None);
        }
        let resolution_id = self.current_resolution().await?;
        let body = self.request_body(
            "execute",
            json!({"execution": {
                "resolution_id": resolution_id, "action_id": action_id, "parameters": arguments
            }}),
        );
        let response = crate::service::carp::execute(&self.rt, &self.actor, &body).await?;
        Ok(Some(result_of(&response)))
    }

    /// The latest list's resolution while it is valid, else a fresh one.
    async fn current_resolution(&self) -> ApiResult<String> {
        let latest = self.latest.lock().await.clone();
        match latest {
            Some(l) if l.expires_at > self.rt.clock.now() => Ok(l.resolution_id),
            _ => {
                self.tools().await?;
                let latest = self.latest.lock().await.clone();
                latest
                    .map(|l| l.resolution_id)
                    .ok_or_else(|| ApiError::internal("resolve", "no resolution was kept"))
            }
        }
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

/// The MCP tool of an allowed action: the adapter's name and shape (`cra_atlas::adapters`). No
/// `outputSchema`: results are not validated against `returns_schema` (specs/mcp.md).
fn tool_of(a: &AllowedAction) -> Result<Tool, serde_json::Error> {
    let mut schema = a.parameters_schema.value().clone();
    match &mut schema {
        Value::Object(map) => {
            map.entry("type").or_insert_with(|| Value::from("object"));
        }
        _ => schema = json!({"type": "object"}),
    }
    let description = if a.description.is_empty() {
        &a.name
    } else {
        &a.description
    };
    serde_json::from_value(json!({
        "name": tool_name(&a.action_id),
        "title": a.name.as_str(),
        "description": description.as_str(),
        "inputSchema": schema,
        "annotations": {
            "title": a.name.as_str(),
            "destructiveHint": matches!(a.risk_tier, RiskTier::High | RiskTier::Critical),
            "idempotentHint": a.idempotent,
        },
    }))
}

/// The tool result of an execute response: the result's JSON on success; otherwise an error
/// result naming the token, the deciding policy and what to do next.
fn result_of(r: &ExecuteResponse) -> CallToolResult {
    if r.status == ExecuteStatus::Success {
        let text = r.result.as_ref().map_or_else(String::new, Value::to_string);
        return CallToolResult::success(vec![ContentBlock::text(text)]);
    }
    let (code, message, details) = r.error.as_ref().map_or(("error", "", None), |e| {
        (e.code.as_str(), e.message.as_str(), e.details.as_ref())
    });
    let policy = details
        .and_then(|d| d.get("policy_id"))
        .and_then(Value::as_str);
    let approval = details
        .and_then(|d| d.get("approval_id"))
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
    if let Some(a) = approval {
        text.push_str(&format!(" Approval: {a}."));
    }
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A refusal of the service as a protocol error: the token and message, for the client.
fn protocol_error(e: ApiError) -> ErrorData {
    ErrorData::invalid_request(
        format!("{}: {}", e.body.error, e.body.message),
        serde_json::to_value(&e.body).ok(),
    )
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cra", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Governed by cra: CARP session {}. The tools are the actions its policies allow \
                 now; every call is decided and recorded in the session's TRACE chain.",
                self.session_id
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools().await.map_err(protocol_error)?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        match self.call(&request.name, arguments).await {
            Ok(Some(result)) => Ok(result.into()),
            Ok(None) => Err(ErrorData::invalid_params(
                format!(
                    "no atlas action has the tool name `{}`; list the tools (tools/list) for the ones this session may call",
                    request.name
                ),
                None,
            )),
            Err(e) => Err(protocol_error(e)),
        }
    }
}

/// Serves `session` over this process's standard input and output until the client closes
/// its side or `stop` resolves, then ends the CARP session.
///
/// # Errors
/// When the transport cannot start, or the session cannot be ended (its `session.ended` then
/// is not recorded: the message says why).
pub async fn serve_stdio(
    session: McpSession,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let session = Arc::new(session);
    let running = SharedSession(session.clone())
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP connection did not start: {e}"))?;
    let cancel = running.cancellation_token();
    tokio::select! {
        _ = running.waiting() => {}
        () = stop => cancel.cancel(),
    }
    session
        .end()
        .await
        .map_err(|e| format!("the CARP session could not be ended: {}", e.body.message))
}

/// An [`McpSession`] shared between the transport and the caller that ends it.
#[derive(Debug, Clone)]
struct SharedSession(Arc<McpSession>);

impl ServerHandler for SharedSession {
    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.0.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0.call_tool(request, context).await
    }
}
