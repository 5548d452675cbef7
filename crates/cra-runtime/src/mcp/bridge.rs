//! `cra mcp serve --url` and `cra mcp proxy --url`: a stdio MCP server that relays to a cra
//! server's `/mcp`. The server holds the CARP session (its `initialize` opens it for the
//! token's agent; deleting the MCP session ends it), decides and records every call; this side
//! forwards each request and answer as it is, and tells its client when the server says the
//! tool list changed. As a proxy it shows the tools the server runs on an MCP upstream (`mcp:`
//! executors) under the upstream's own names ([`Renames`]).

use std::collections::HashMap;
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
    renames: Renames,
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
    pub(crate) async fn connect(url: &str, token: &str, renames: Renames) -> Result<Self, String> {
        let endpoint = format!("{}/mcp", url.trim_end_matches('/'));
        let http = crate::tls::http_client()
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        let transport = StreamableHttpClientTransport::with_client(
            http,
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
            renames,
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
        let mut listed = self.0.server.list_tools(request).await.map_err(relayed)?;
        for tool in &mut listed.tools {
            if let Some(upstream) = self.0.renames.to_upstream.get(tool.name.as_ref()) {
                tool.name = upstream.clone().into();
            }
        }
        Ok(listed)
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(name) = self.0.renames.to_server.get(request.name.as_ref()) {
            request.name = name.clone().into();
        }
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

/// Tool names as a proxy shows them: each action the server runs on an MCP upstream
/// (`mcp:<server>/<tool>`) under `<tool>`, and back. Empty: the server's names as they are.
#[derive(Debug, Clone, Default)]
pub struct Renames {
    to_upstream: HashMap<String, String>,
    to_server: HashMap<String, String>,
}

impl Renames {
    /// The renames of the `mcp:` actions in the server's atlases (`GET /v1/atlases/{id}`).
    ///
    /// # Errors
    /// When the server cannot be read, or two of its actions run upstream tools of one name.
    pub async fn of_server(url: &str, token: &str) -> Result<Self, String> {
        let base = url.trim_end_matches('/');
        let http = crate::tls::http_client()
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        let get = |path: String| {
            let request = http.get(format!("{base}{path}")).bearer_auth(token);
            async move {
                let answer = request
                    .send()
                    .await
                    .map_err(|e| format!("{base}{path}: {e}"))?;
                let answer = answer
                    .error_for_status()
                    .map_err(|e| format!("{base}{path}: {e}"))?;
                answer
                    .json::<serde_json::Value>()
                    .await
                    .map_err(|e| format!("{base}{path}: {e}"))
            }
        };
        let mut renames = Self::default();
        let summaries = get("/v1/atlases".to_owned()).await?;
        for summary in summaries.as_array().into_iter().flatten() {
            let id = summary["atlas_id"].as_str().unwrap_or_default();
            let manifest = get(format!("/v1/atlases/{id}")).await?;
            for action in manifest["actions"].as_array().into_iter().flatten() {
                let (Some(action_id), Some(executor)) =
                    (action["action_id"].as_str(), action["executor"].as_str())
                else {
                    continue;
                };
                if let Some((_, tool)) = cra_atlas::mcp_import::parse_executor_ref(executor) {
                    renames.add(&cra_atlas::adapters::tool_name(action_id), tool)?;
                }
            }
        }
        Ok(renames)
    }

    fn add(&mut self, server_name: &str, upstream: &str) -> Result<(), String> {
        if let Some(other) = self
            .to_server
            .insert(upstream.to_owned(), server_name.to_owned())
        {
            return Err(format!(
                "the server's actions `{other}` and `{server_name}` both run an upstream tool named `{upstream}`; a proxy shows one tool per name"
            ));
        }
        self.to_upstream
            .insert(server_name.to_owned(), upstream.to_owned());
        Ok(())
    }
}
