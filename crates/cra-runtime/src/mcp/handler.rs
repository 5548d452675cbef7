//! The MCP server handler both transports serve: which CARP session a request acts in, and
//! the MCP methods on it (`specs/mcp.md`, "Which CARP session a request acts in").
//!
//! Over stdio the process has one session. Over HTTP a request acts in the session its
//! `_meta["cra/session_id"]` names (the 2026-07-28 era, where the tools `cra/session.open` and
//! `cra/session.end` mint and end that handle), else in the one its MCP session holds (the
//! 2025-11-25 era, opened by `initialize`), else in none.

use std::sync::Arc;

use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};

use super::http::McpSessions;
use super::{McpSession, protocol_error, read_of, resources_of};
use crate::auth::Actor;

/// The tool that opens a CARP session over HTTP and returns its handle.
pub const SESSION_OPEN: &str = "cra/session.open";
/// The tool that ends the session a request names.
pub const SESSION_END: &str = "cra/session.end";
/// The `_meta` key naming the CARP session a request acts in.
pub const SESSION_META: &str = "cra/session_id";
/// The `_meta` key carrying a call's idempotency key.
pub const IDEMPOTENCY_META: &str = "cra/idempotency_key";

/// The MCP handler: one per stdio process, one per HTTP MCP session or stateless request.
#[derive(Debug, Clone)]
pub enum Handler {
    /// Standard input and output: the process's session.
    Stdio(Arc<McpSession>),
    /// Streamable HTTP: the sessions `/mcp` holds, found per request.
    Http(Arc<McpSessions>),
}

/// The session a request acts in, and whether the client names it by handle (stateless era).
struct Acting {
    session: Option<Arc<McpSession>>,
    stateless: bool,
}

impl Handler {
    /// The session `context`'s request acts in (see the module documentation).
    async fn acting(&self, context: &RequestContext<RoleServer>) -> Result<Acting, ErrorData> {
        let sessions = match self {
            Self::Stdio(s) => {
                return Ok(Acting {
                    session: Some(s.clone()),
                    stateless: false,
                });
            }
            Self::Http(sessions) => sessions,
        };
        let actor = request_actor(context)?;
        if let Some(handle) = context.meta.0.0.get(SESSION_META) {
            let Some(id) = handle.as_str() else {
                return Err(ErrorData::invalid_params(
                    format!("`_meta[\"{SESSION_META}\"]` must be a session id (a string)"),
                    None,
                ));
            };
            let session = sessions.named(actor, id).await.map_err(protocol_error)?;
            return Ok(Acting {
                session: Some(session),
                stateless: true,
            });
        }
        let mcp_session = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        let session = match mcp_session {
            Some(id) => sessions
                .of_mcp_session(&actor, id)
                .map_err(protocol_error)?,
            None => None,
        };
        Ok(Acting {
            stateless: session.is_none(),
            session,
        })
    }

    /// Opens a session for the caller and returns its handle (the `cra/session.open` tool).
    async fn open_session(
        &self,
        context: &RequestContext<RoleServer>,
        arguments: &Map<String, Value>,
    ) -> Result<CallToolResult, ErrorData> {
        let Self::Http(sessions) = self else {
            return Ok(tool_error(
                "this server's session was opened when it started; there is no other to open",
            ));
        };
        let actor = request_actor(context)?;
        let goal = match arguments.get("goal") {
            None => super::DEFAULT_GOAL.to_owned(),
            Some(Value::String(g)) => g.clone(),
            Some(_) => return Ok(tool_error("`goal` must be a string")),
        };
        match sessions.open_named(actor, goal).await {
            Ok(session) => Ok(json_result(&json!({
                "session_id": session.session_id(),
                "agent_id": session.agent_id(),
                "next": format!("send `_meta[\"{SESSION_META}\"]` with this session_id on every request"),
            }))),
            Err(e) => Err(protocol_error(e)),
        }
    }

    /// Ends the session the request names (the `cra/session.end` tool).
    async fn end_session(&self, acting: Acting) -> Result<CallToolResult, ErrorData> {
        let (Self::Http(sessions), Some(session)) =
            (self, acting.session.filter(|_| acting.stateless))
        else {
            return Ok(tool_error(&format!(
                "name the session to end with `_meta[\"{SESSION_META}\"]`"
            )));
        };
        sessions.end_named(&session).await.map_err(protocol_error)?;
        Ok(json_result(
            &json!({"session_id": session.session_id(), "status": "ended"}),
        ))
    }
}

impl Handler {
    /// The runtime the handler serves.
    fn runtime(&self) -> &crate::state::AppState {
        match self {
            Self::Stdio(s) => s.runtime(),
            Self::Http(sessions) => sessions.runtime(),
        }
    }
}

/// The caller the HTTP authentication layer left on the request.
fn request_actor(context: &RequestContext<RoleServer>) -> Result<Actor, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Actor>())
        .cloned()
        .ok_or_else(|| {
            ErrorData::internal_error("the request carries no authenticated caller", None)
        })
}

/// The two session tools of the stateless era.
fn session_tools() -> Vec<Tool> {
    let open = json!({
        "name": SESSION_OPEN,
        "title": "Open a governed session",
        "description": "Opens a CARP session for you and returns its session_id; send it as _meta[\"cra/session_id\"] on every later request. The other tools appear once a request names a session.",
        "inputSchema": {"type": "object", "properties": {"goal": {"type": "string"}}},
    });
    let end = json!({
        "name": SESSION_END,
        "title": "End the governed session",
        "description": "Ends the session this request names in _meta[\"cra/session_id\"].",
        "inputSchema": {"type": "object"},
        "annotations": {"idempotentHint": true},
    });
    [open, end]
        .into_iter()
        .filter_map(|t| serde_json::from_value(t).ok())
        .collect()
}

/// A successful tool result holding `value`'s JSON as text.
fn json_result(value: &Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value.to_string())])
}

/// A tool error result saying `message`.
fn tool_error(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.to_owned())])
}

/// The error result of a call that needs a session and names none.
fn no_session() -> CallToolResult {
    tool_error(&format!(
        "no CARP session: call the tool `{SESSION_OPEN}` first, then send its session_id as `_meta[\"{SESSION_META}\"]`"
    ))
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let instructions = match self {
            Self::Stdio(s) => format!(
                "Governed by cra: CARP session {}. The tools are the actions its policies allow \
                 now; every call is decided and recorded in the session's TRACE chain.",
                s.session_id()
            ),
            Self::Http(_) => format!(
                "Governed by cra. The tools are the actions your session's policies allow now; \
                 every call is decided and recorded in the session's TRACE chain. Without an \
                 MCP session, call `{SESSION_OPEN}` and send its session_id as \
                 `_meta[\"{SESSION_META}\"]`."
            ),
        };
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("cra", env!("CARGO_PKG_VERSION")))
        .with_instructions(instructions)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        if let Self::Http(sessions) = self {
            let actor = request_actor(&context)?;
            let key = context.extensions.get::<super::http::NewMcpSession>();
            let Some(key) = key else {
                return Err(ErrorData::internal_error(
                    "initialize outside an MCP session",
                    None,
                ));
            };
            let session = sessions
                .open_for_mcp_session(actor, &key.0)
                .await
                .map_err(protocol_error)?;
            session.notify_list_changes(context.peer.clone());
            let mut result = self.negotiate_initialize(&request)?;
            result.instructions = Some(format!(
                "Governed by cra: CARP session {}. The tools are the actions its policies allow \
                 now; every call is decided and recorded in the session's TRACE chain.",
                session.session_id()
            ));
            return Ok(result);
        }
        self.negotiate_initialize(&request)
    }

    /// 2026-07-28 clients subscribe to tool-list changes (`subscriptions/listen`); nothing else
    /// is offered.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        Some(accepted)
    }

    /// Tells the subscriber each time its tool list may have changed, until it cancels.
    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.runtime().tool_lists.subscribe();
        loop {
            tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() || subscription.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let acting = self.acting(&context).await?;
        let mut tools = if acting.stateless {
            session_tools()
        } else {
            Vec::new()
        };
        if let Some(session) = &acting.session {
            tools.extend(session.tools().await.map_err(protocol_error)?);
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        if request.name == SESSION_OPEN {
            return self
                .open_session(&context, &arguments)
                .await
                .map(Into::into);
        }
        let acting = self.acting(&context).await?;
        if request.name == SESSION_END {
            return self.end_session(acting).await.map(Into::into);
        }
        let Some(session) = acting.session else {
            return Ok(no_session().into());
        };
        let key = match context.meta.0.0.get(IDEMPOTENCY_META) {
            None => None,
            Some(Value::String(k)) => Some(k.clone()),
            Some(_) => {
                return Err(ErrorData::invalid_params(
                    format!("`_meta[\"{IDEMPOTENCY_META}\"]` must be a string"),
                    None,
                ));
            }
        };
        match session
            .call(&request.name, Value::Object(arguments), key)
            .await
        {
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

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let Some(session) = self.acting(&context).await?.session else {
            return Ok(ListResourcesResult::with_all_items(Vec::new()));
        };
        let blocks = session.context().await.map_err(protocol_error)?;
        resources_of(&blocks).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let blocks = match self.acting(&context).await?.session {
            Some(session) => session.context().await.map_err(protocol_error)?,
            None => Vec::new(),
        };
        match read_of(&blocks, &request.uri) {
            Some(Ok(read)) => Ok(read.into()),
            Some(Err(e)) => Err(ErrorData::internal_error(e.to_string(), None)),
            None => Err(ErrorData::resource_not_found(
                format!(
                    "`{}` is not a context block of this session's latest resolution; list the resources (resources/list)",
                    request.uri
                ),
                None,
            )),
        }
    }
}
