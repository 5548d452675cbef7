//! Executors of kind `mcp` (`specs/mcp.md`, "Executors of kind `mcp`"): an MCP server's tools
//! run as actions. An action names one as `mcp:<name>/<tool>`; the operator binds `<name>` to a
//! command (a child process spoken to over stdio) or a URL (Streamable HTTP) under
//! `[executors.<name>] kind = "mcp"`.
//!
//! Each executor keeps a pool of at most `pool_size` connections, made when a call needs one.
//! A call that outlives `timeout_ms` is `executor_timeout`; a connection that dies during a
//! call (the child killed, the server gone) is `executor_crashed`, and is dropped, so the next
//! call starts a fresh upstream. A tool that answers `isError: true` is `tool_error` with the
//! tool's text. The result of a successful call is the tool's `CallToolResult` as JSON.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cra_carp::types::ExecuteError;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::config::ExecutorConfig;

/// One live connection to an upstream.
type Connection = RunningService<RoleClient, ()>;

/// The `mcp` executors of a runtime, by name.
#[derive(Debug, Default)]
pub struct McpExecutors {
    by_name: BTreeMap<String, Arc<Upstream>>,
}

/// One `mcp` executor: its configuration, its idle connections and the permits that bound them.
#[derive(Debug)]
pub struct Upstream {
    name: String,
    config: ExecutorConfig,
    idle: Mutex<Vec<Connection>>,
    /// Connections given up on (a timed-out or crashed call), each being shut down by a task of
    /// its own; [`McpExecutors::close`] waits for them.
    retiring: Mutex<tokio::task::JoinSet<()>>,
    permits: Semaphore,
    /// How many calls are waiting for a permit now (every permit is in use).
    waiting: tokio::sync::watch::Sender<usize>,
}

/// One call counted in [`Upstream::waiting`] from its making until dropped.
struct Waiting<'a>(&'a tokio::sync::watch::Sender<usize>);

impl<'a> Waiting<'a> {
    fn count(waiting: &'a tokio::sync::watch::Sender<usize>) -> Self {
        waiting.send_modify(|n| *n += 1);
        Self(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The value behind `mutex`, even when a panic poisoned it (each use leaves it whole).
fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn fail(code: &str, message: impl Into<String>) -> ExecuteError {
    ExecuteError {
        code: code.to_owned(),
        message: message.into(),
        details: None,
    }
}

impl McpExecutors {
    /// The `mcp` executors among `executors` (the configuration's table).
    pub fn from_config(executors: &BTreeMap<String, ExecutorConfig>) -> Self {
        let by_name = executors
            .iter()
            .filter(|(_, c)| c.kind == crate::config::ExecutorKind::Mcp)
            .map(|(name, config)| (name.clone(), Arc::new(Upstream::new(name, config.clone()))))
            .collect();
        Self { by_name }
    }

    /// The executor `name`, when one is configured.
    pub fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.by_name.get(name)
    }

    /// Shuts every upstream down, as MCP's stdio shutdown asks: its input is closed, then it
    /// is sent SIGTERM, then killed, each step after a wait of rmcp's (3 s). Waits for the idle
    /// connections and for those already being retired. Called when the runtime stops, so that
    /// no upstream outlives the process that started it: a connection merely dropped is shut
    /// down by a task, which a stopping runtime never runs.
    pub async fn close(&self) {
        let shutdowns = self.by_name.values().map(|u| u.close());
        futures::future::join_all(shutdowns).await;
    }

    /// Runs the executor reference `reference` (`mcp:<name>/<tool>`) with `arguments`.
    pub(crate) async fn run(
        &self,
        reference: &str,
        arguments: &Value,
    ) -> Result<Value, ExecuteError> {
        let Some((name, tool)) = cra_atlas::mcp_import::parse_executor_ref(reference) else {
            return Err(fail(
                "executor_unknown",
                format!("`{reference}` names no tool: write mcp:<executor>/<tool>"),
            ));
        };
        let Some(upstream) = self.get(name) else {
            return Err(fail(
                "executor_not_configured",
                format!(
                    "no MCP server is configured for executor `{name}`; an operator adds [executors.{name}] kind = \"mcp\" with a command or url to the runtime configuration"
                ),
            ));
        };
        upstream.call(tool, arguments).await
    }
}

impl Upstream {
    /// An executor named `name` with `config`; nothing is started until a call.
    pub fn new(name: &str, config: ExecutorConfig) -> Self {
        let permits = Semaphore::new(config.pool_size.max(1));
        Self {
            name: name.to_owned(),
            config,
            idle: Mutex::new(Vec::new()),
            retiring: Mutex::new(tokio::task::JoinSet::new()),
            permits,
            waiting: tokio::sync::watch::Sender::new(0),
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }

    /// A new connection: the command started, or the URL reached, and the MCP handshake made.
    async fn connect(&self) -> Result<Connection, ExecuteError> {
        let started = if let Some((program, args)) = self.config.command.split_first() {
            let command = tokio::process::Command::new(program).configure(|c| {
                c.args(args).stderr(std::process::Stdio::null());
            });
            let transport = TokioChildProcess::new(command).map_err(|e| {
                fail(
                    "executor_unavailable",
                    format!("executor `{}` could not start `{program}`: {e}", self.name),
                )
            })?;
            tokio::time::timeout(self.timeout(), ().serve(transport)).await
        } else {
            let http = crate::tls::http_client().build().map_err(|e| {
                fail(
                    "executor_unavailable",
                    format!("executor `{}`: cannot build an HTTP client: {e}", self.name),
                )
            })?;
            let transport = StreamableHttpClientTransport::with_client(
                http,
                StreamableHttpClientTransportConfig::with_uri(self.config.url.as_str()),
            );
            tokio::time::timeout(self.timeout(), ().serve(transport)).await
        };
        match started {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(e)) => Err(fail(
                "executor_unavailable",
                format!(
                    "executor `{}` did not complete the MCP handshake: {e}",
                    self.name
                ),
            )),
            Err(_) => Err(fail(
                "executor_timeout",
                format!(
                    "executor `{}` did not complete the MCP handshake within {} ms",
                    self.name, self.config.timeout_ms
                ),
            )),
        }
    }

    /// An idle live connection, or a new one.
    async fn connection(&self) -> Result<Connection, ExecuteError> {
        loop {
            let idle = locked(&self.idle).pop();
            match idle {
                Some(c) if !c.is_closed() => return Ok(c),
                Some(_) => {}
                None => return self.connect().await,
            }
        }
    }

    /// A permit to use a connection: at most `pool_size` calls hold one at a time, the rest
    /// wait (counted in [`Upstream::waiting`] while they do).
    async fn permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ExecuteError> {
        let acquired = match self.permits.try_acquire() {
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                // Counted out however the wait ends, the caller's cancellation included.
                let _counted = Waiting::count(&self.waiting);
                self.permits.acquire().await.ok()
            }
            acquired => acquired.ok(),
        };
        acquired.ok_or_else(|| fail("executor_unavailable", "the executor is shutting down"))
    }

    /// How many calls are waiting for a free connection now: the pool's saturation, and what a
    /// test of the bound waits on.
    pub fn waiting(&self) -> tokio::sync::watch::Receiver<usize> {
        self.waiting.subscribe()
    }

    /// Shuts `connection` down in the background (see [`McpExecutors::close`]).
    fn retire(&self, connection: Connection) {
        let mut retiring = locked(&self.retiring);
        // Forget the shutdowns already over, so that the set holds only those still running.
        while retiring.try_join_next().is_some() {}
        retiring.spawn(async move {
            let _ = connection.cancel().await;
        });
    }

    async fn close(&self) {
        let idle = std::mem::take(&mut *locked(&self.idle));
        for connection in idle {
            self.retire(connection);
        }
        let retiring = std::mem::take(&mut *locked(&self.retiring));
        retiring.join_all().await;
    }

    fn put_back(&self, connection: Connection) {
        locked(&self.idle).push(connection);
    }

    /// Calls `tool` with `arguments` on a pooled connection.
    pub async fn call(&self, tool: &str, arguments: &Value) -> Result<Value, ExecuteError> {
        let Value::Object(arguments) = arguments.clone() else {
            return Err(fail(
                "invalid_parameters",
                "MCP tool arguments are a JSON object",
            ));
        };
        let _permit = self.permit().await?;
        let connection = self.connection().await?;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let answer = tokio::time::timeout(self.timeout(), connection.call_tool(params)).await;
        let result = match answer {
            // The connection may still be working on the call: it is not reused.
            Err(_) => {
                self.retire(connection);
                return Err(fail(
                    "executor_timeout",
                    format!(
                        "executor `{}` did not answer `{tool}` within {} ms",
                        self.name, self.config.timeout_ms
                    ),
                ));
            }
            Ok(Err(ServiceError::McpError(e))) => {
                self.put_back(connection);
                return Err(fail(
                    "tool_error",
                    format!("executor `{}` refused `{tool}`: {}", self.name, e.message),
                ));
            }
            Ok(Err(e)) => {
                self.retire(connection);
                return Err(fail(
                    "executor_crashed",
                    format!(
                        "executor `{}` went away during `{tool}` ({e}); the next call starts it again",
                        self.name
                    ),
                ));
            }
            Ok(Ok(result)) => {
                self.put_back(connection);
                result
            }
        };
        let value = serde_json::to_value(&result)
            .map_err(|e| fail("executor_error", format!("an unreadable tool result: {e}")))?;
        if result.is_error == Some(true) {
            let mut error = fail("tool_error", text_of(&value));
            error.details = Some(value);
            return Err(error);
        }
        Ok(value)
    }

    /// The upstream's tools (every page).
    ///
    /// # Errors
    /// When no connection can be made or the listing fails.
    pub async fn tools(&self) -> Result<Vec<Tool>, ExecuteError> {
        let connection = self.connection().await?;
        let listed = tokio::time::timeout(self.timeout(), connection.list_all_tools()).await;
        match listed {
            Ok(Ok(tools)) => {
                self.put_back(connection);
                Ok(tools)
            }
            Ok(Err(e)) => Err(fail(
                "executor_unavailable",
                format!("executor `{}` could not list its tools: {e}", self.name),
            )),
            Err(_) => Err(fail(
                "executor_timeout",
                format!("executor `{}` did not list its tools in time", self.name),
            )),
        }
    }

    /// The upstream's tools as an imported atlas describes them.
    ///
    /// # Errors
    /// As [`Upstream::tools`].
    pub async fn described_tools(
        &self,
    ) -> Result<Vec<cra_atlas::mcp_import::UpstreamTool>, ExecuteError> {
        Ok(self.tools().await?.iter().map(described).collect())
    }
}

/// The parts of an upstream tool an imported atlas needs; annotations absent take MCP's
/// defaults (not read-only, destructive, not idempotent).
fn described(tool: &Tool) -> cra_atlas::mcp_import::UpstreamTool {
    let annotations = tool.annotations.as_ref();
    cra_atlas::mcp_import::UpstreamTool {
        name: tool.name.to_string(),
        title: tool.title.clone(),
        description: tool.description.as_ref().map(ToString::to_string),
        input_schema: Value::Object((*tool.input_schema).clone()),
        read_only: annotations.and_then(|a| a.read_only_hint).unwrap_or(false),
        destructive: annotations.and_then(|a| a.destructive_hint).unwrap_or(true),
        idempotent: annotations.and_then(|a| a.idempotent_hint).unwrap_or(false),
    }
}

/// The text items of a tool result, joined (a tool error's message).
pub(crate) fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
