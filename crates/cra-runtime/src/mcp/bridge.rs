//! `cra mcp serve --url`: a stdio MCP server that relays to a cra server's `/mcp`. The server
//! holds the CARP session (its `initialize` opens it for the token's agent; deleting the MCP
//! session ends it), decides and records every call; this side forwards each request and
//! answer as it is, and tells its client when the server says the tool list changed.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientConfig, Implementation, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RoleClient,
    RoleServer, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, Peer, ServerHandler};
use tokio::sync::{Mutex, Notify};

/// The relay: the connection to the server and what the server said at the handshake.
#[derive(Clone)]
pub(crate) struct Bridge(Arc<Inner>);

struct Inner {
    server: Peer<RoleClient>,
    connection: Mutex<Option<RunningService<RoleClient, Listener>>>,
    info: ServerConfig,
    changed: Arc<Notify>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge").finish_non_exhaustive()
    }
}

/// The client side toward the server: it passes on "the tool list changed".
struct Listener(Arc<Notify>);

impl rmcp::ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notify_waiters();
    }

    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        config.protocol_version = ProtocolVersion::V_2025_11_25;
        config.client_info = Implementation::new("cra mcp serve --url", env!("CARGO_PKG_VERSION"));
        config
    }
}

/// A server's refusal or a broken connection, as this side's protocol error.
fn relayed(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(
            format!("the cra server could not be reached: {other}"),
            None,
        ),
    }
}

impl Bridge {
    /// Connects to `url`'s `/mcp` as `token`'s agent, in the 2025-11-25 era (an MCP session,
    /// which holds the CARP session).
    pub(crate) async fn connect(url: &str, token: &str) -> Result<Self, String> {
        let endpoint = format!("{}/mcp", url.trim_end_matches('/'));
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(endpoint.as_str()).auth_header(token),
        );
        let changed = Arc::new(Notify::new());
        let connection = Listener(changed.clone())
            .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
            .await
            .map_err(|e| {
                format!("the cra server at {endpoint} did not accept the MCP handshake: {e}")
            })?;
        let peer = connection.peer_info();
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("cra", env!("CARGO_PKG_VERSION")));
        info.instructions = peer.and_then(|p| p.instructions.clone());
        Ok(Self(Arc::new(Inner {
            server: connection.peer().clone(),
            connection: Mutex::new(Some(connection)),
            info,
            changed,
        })))
    }

    /// Tells `client` each time the server says the tool list changed, until the bridge closes.
    pub(crate) fn forward_changes(&self, client: Peer<RoleServer>) {
        let changed = self.0.changed.clone();
        tokio::spawn(async move {
            loop {
                changed.notified().await;
                if client.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Leaves the server: the MCP session is deleted, which ends the CARP session there.
    pub(crate) async fn close(&self) {
        if let Some(connection) = self.0.connection.lock().await.take() {
            let _ = connection.cancel().await;
        }
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        self.0.info.clone()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.0.server.list_tools(request).await.map_err(relayed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0
            .server
            .call_tool(request)
            .await
            .map(Into::into)
            .map_err(relayed)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.0.server.list_resources(request).await.map_err(relayed)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.0
            .server
            .read_resource(request)
            .await
            .map(Into::into)
            .map_err(relayed)
    }
}
