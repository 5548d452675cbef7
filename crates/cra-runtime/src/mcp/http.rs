//! `/mcp` on `cra serve`: the MCP handler over Streamable HTTP (rmcp's transport), behind the
//! API's own authentication layer (a 401 names `Bearer`), with `Origin` validated and bodies
//! bounded (413).
//!
//! [`McpSessions`] holds the CARP sessions the door serves. It is also the transport's session
//! manager (it wraps rmcp's in-memory one), so that an MCP session's CARP session is opened by
//! its `initialize` and ended when the MCP session closes, by `DELETE /mcp` (before the answer)
//! or by the transport giving up on an idle client. Sessions named by handle
//! (`cra/session.open`, `_meta["cra/session_id"]`) live in the store like any other: a handle
//! this process has not seen (another replica's, or one from before a restart) is taken up from
//! there, its owner checked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};

use super::McpSession;
use super::handler::Handler;
use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// How many sessions named by handle are kept in memory; past it the one named least recently
/// is forgotten (it is taken up again from the store when next named, its list made anew).
const MAX_NAMED: usize = 4096;

/// The MCP session an `initialize` opens: the session manager leaves it on the request for the
/// handler.
#[derive(Debug, Clone)]
pub struct NewMcpSession(pub SessionId);

/// The CARP sessions `/mcp` serves, by MCP session and by handle; the transport's session
/// manager.
#[derive(Debug)]
pub struct McpSessions {
    rt: AppState,
    transport: LocalSessionManager,
    by_mcp_session: Mutex<HashMap<SessionId, Arc<McpSession>>>,
    by_handle: Mutex<Recent<Arc<McpSession>>>,
}

/// The `/mcp` route over `rt`'s runtime: Streamable HTTP in both MCP eras, its answers mended
/// where the transport's differ from what MCP clients expect (`as_mcp_expects`).
pub fn router<S: Clone + Send + Sync + 'static>(rt: AppState) -> axum::Router<S> {
    axum::Router::new()
        .route_service("/mcp", service(rt))
        .layer(axum::middleware::map_response(as_mcp_expects))
}

/// What rmcp's transport answers, as MCP clients expect it: a session's `DELETE` is 204, not
/// 202 (the official Python SDK reports 202 as a failed termination), and a body that is not
/// JSON is 400 with a JSON-RPC parse error, not 415 with a line of text.
async fn as_mcp_expects(method: Method, response: Response) -> Response {
    match (method, response.status()) {
        (Method::DELETE, StatusCode::ACCEPTED) => {
            let (mut parts, body) = response.into_parts();
            parts.status = StatusCode::NO_CONTENT;
            Response::from_parts(parts, body)
        }
        (Method::POST, StatusCode::UNSUPPORTED_MEDIA_TYPE) => {
            let (parts, body) = response.into_parts();
            let text = axum::body::to_bytes(body, 64 * 1024)
                .await
                .unwrap_or_default();
            if !text.starts_with(b"fail to deserialize") {
                return Response::from_parts(parts, axum::body::Body::from(text));
            }
            let error = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": -32700,
                "message": format!("the body is not a JSON-RPC message: {}", String::from_utf8_lossy(&text)),
            }});
            (
                StatusCode::BAD_REQUEST,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                error.to_string(),
            )
                .into_response()
        }
        _ => response,
    }
}

/// The `/mcp` service over `rt`'s runtime: Streamable HTTP in both MCP eras.
pub fn service(rt: AppState) -> StreamableHttpService<Handler, McpSessions> {
    let config = StreamableHttpServerConfig::default()
        // The API's bearer authentication stands in front of `/mcp`, so a rebound host name
        // gains a page nothing without a key; deployments serve non-loopback names.
        .disable_allowed_hosts()
        .with_allowed_origins(rt.config.mcp.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(rt.config.limits.max_body_bytes)
        .with_cancellation_token(rt.stopping.child_token());
    let sessions = Arc::new(McpSessions {
        rt,
        transport: LocalSessionManager::default(),
        by_mcp_session: Mutex::new(HashMap::new()),
        by_handle: Mutex::new(Recent::new(MAX_NAMED)),
    });
    let handlers = sessions.clone();
    StreamableHttpService::new(
        move || Ok(Handler::Http(handlers.clone())),
        sessions,
        config,
    )
}

/// A table of at most `capacity` entries that forgets the one used least recently to make room.
#[derive(Debug)]
struct Recent<T> {
    capacity: usize,
    /// Counts uses; an entry keeps the count of its latest.
    uses: u64,
    entries: HashMap<String, (T, u64)>,
}

impl<T: Clone> Recent<T> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            uses: 0,
            entries: HashMap::new(),
        }
    }

    fn used(&mut self) -> u64 {
        self.uses += 1;
        self.uses
    }

    /// The entry `key`, now the most recently used.
    fn get(&mut self, key: &str) -> Option<T> {
        let now = self.used();
        let (value, used) = self.entries.get_mut(key)?;
        *used = now;
        Some(value.clone())
    }

    /// Keeps `value` as `key`, forgetting the least recently used entry when full. The scan
    /// for it runs only when the table is full.
    fn insert(&mut self, key: String, value: T) {
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        let now = self.used();
        self.entries.insert(key, (value, now));
    }

    fn remove(&mut self, key: &str) {
        self.entries.remove(key);
    }
}

/// Locks `m`, whose data stays consistent through a panicking holder (a map of shared sessions).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// 403 unless `session` is `actor`'s own.
fn require_own(actor: &Actor, session: &McpSession) -> ApiResult<()> {
    if session.agent_id() == actor.id {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "session {} belongs to another agent; only its owner acts in it",
            session.session_id()
        )))
    }
}

impl McpSessions {
    /// The runtime the sessions live in.
    pub fn runtime(&self) -> &AppState {
        &self.rt
    }

    /// The session the handle `id` names, for `actor` (its owner).
    pub(crate) async fn named(&self, actor: Actor, id: &str) -> ApiResult<Arc<McpSession>> {
        let known = lock(&self.by_handle).get(id);
        if let Some(session) = known {
            require_own(&actor, &session)?;
            return Ok(session);
        }
        let session = Arc::new(McpSession::attach(self.rt.clone(), actor, id).await?);
        self.keep_named(session.clone());
        Ok(session)
    }

    /// Opens a session for `actor` with `goal`, named by handle from now on.
    pub(crate) async fn open_named(
        &self,
        actor: Actor,
        goal: String,
    ) -> ApiResult<Arc<McpSession>> {
        let session = Arc::new(McpSession::open(self.rt.clone(), actor, goal, Vec::new()).await?);
        self.keep_named(session.clone());
        Ok(session)
    }

    /// Ends a session named by handle.
    pub(crate) async fn end_named(&self, session: &McpSession) -> ApiResult<()> {
        session.end().await?;
        lock(&self.by_handle).remove(session.session_id());
        Ok(())
    }

    fn keep_named(&self, session: Arc<McpSession>) {
        lock(&self.by_handle).insert(session.session_id().to_owned(), session);
    }

    /// Opens the CARP session of the MCP session `key`, for `actor` (its `initialize`).
    pub(crate) async fn open_for_mcp_session(
        &self,
        actor: Actor,
        key: &SessionId,
    ) -> ApiResult<Arc<McpSession>> {
        let goal = super::DEFAULT_GOAL.to_owned();
        let session = Arc::new(McpSession::open(self.rt.clone(), actor, goal, Vec::new()).await?);
        lock(&self.by_mcp_session).insert(key.clone(), session.clone());
        Ok(session)
    }

    /// The CARP session of the MCP session `id`, for `actor` (its owner); `None` when that MCP
    /// session holds none.
    pub(crate) fn of_mcp_session(
        &self,
        actor: &Actor,
        id: &str,
    ) -> ApiResult<Option<Arc<McpSession>>> {
        let session = lock(&self.by_mcp_session).get(id).cloned();
        if let Some(s) = &session {
            require_own(actor, s)?;
        }
        Ok(session)
    }
}

impl SessionManager for McpSessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.transport.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        if let ClientJsonRpcMessage::Request(r) = &mut message {
            r.request.extensions_mut().insert(NewMcpSession(id.clone()));
        }
        self.transport.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.transport.has_session(id).await
    }

    /// Closes the MCP session, then ends its CARP session (`session.ended` is durable when
    /// this returns, so before `DELETE /mcp` answers).
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.transport.close_session(id).await;
        let session = lock(&self.by_mcp_session).remove(id);
        if let Some(session) = session
            && let Err(e) = session.end().await
        {
            tracing::warn!(
                session_id = session.session_id(),
                error = %e.body.message,
                "an MCP session closed and its CARP session could not be ended"
            );
        }
        closed
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.transport.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.transport.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.transport.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.transport.resume(id, last_event_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn a_full_table_forgets_the_entry_named_least_recently() {
        let mut table = Recent::new(2);
        table.insert("a".to_owned(), 1);
        table.insert("b".to_owned(), 2);
        // Naming `a` makes `b` the least recently used.
        assert_eq!(table.get("a"), Some(1));
        table.insert("c".to_owned(), 3);
        assert_eq!(table.get("b"), None, "b was used least recently");
        assert_eq!((table.get("a"), table.get("c")), (Some(1), Some(3)));
        // Keeping a known key again replaces it and forgets nothing.
        table.insert("c".to_owned(), 4);
        assert_eq!((table.get("a"), table.get("c")), (Some(1), Some(4)));
        table.remove("a");
        assert_eq!(table.get("a"), None);
    }
}
