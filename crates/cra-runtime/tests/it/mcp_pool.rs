//! An `mcp` executor's `pool_size` bounds the calls it has open on its upstream at once. The
//! upstream is an MCP server of this test whose one tool tells the test it was reached and then
//! holds until released, so each step is awaited, never slept for: with `pool_size = 1`, a
//! second call waits for the permit while the first is held in the upstream, and runs once the
//! first is over.

use std::sync::Arc;
use std::time::Duration;

use cra_runtime::config::ExecutorConfig;
use cra_runtime::executor::mcp::Upstream;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

/// The upstream: `hold` says it was reached, then waits for one release.
#[derive(Clone)]
struct Holding {
    reached: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
}

impl ServerHandler for Holding {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _ = self.reached.send(());
        let released = self.release.acquire().await;
        released
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
            .forget();
        Ok(CallToolResult::success(vec![ContentBlock::text("released")]).into())
    }
}

/// Serves `handler` over Streamable HTTP on a free loopback port; returns its `/mcp` URL.
async fn serve(handler: Holding) -> String {
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

/// The generous deadline of a step that must happen (it fails the test, never paces it).
const DEADLINE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_size_one_makes_a_second_call_wait_for_the_first() {
    let (reached, mut arrivals) = mpsc::unbounded_channel();
    let release = Arc::new(Semaphore::new(0));
    let url = serve(Holding {
        reached,
        release: release.clone(),
    })
    .await;
    let mut config = ExecutorConfig::mcp_url(url, 30_000);
    config.pool_size = 1;
    let upstream = Arc::new(Upstream::new("holding", config));
    let call = |upstream: Arc<Upstream>| {
        tokio::spawn(async move { upstream.call("hold", &json!({})).await })
    };

    let first = call(upstream.clone());
    tokio::time::timeout(DEADLINE, arrivals.recv())
        .await
        .expect("the first call reaches the upstream");
    let mut waiting = upstream.waiting();
    let second = call(upstream.clone());
    tokio::time::timeout(DEADLINE, waiting.wait_for(|n| *n == 1))
        .await
        .expect("with pool_size 1, the second call waits while the first is held")
        .unwrap();
    assert!(
        arrivals.try_recv().is_err(),
        "the second call reached the upstream while the first held its only permit"
    );

    release_one(&release, first, "the first call").await;
    tokio::time::timeout(DEADLINE, arrivals.recv())
        .await
        .expect("the second call runs once the first is over");
    assert_eq!(*upstream.waiting().borrow(), 0, "nothing waits any more");
    release_one(&release, second, "the second call").await;
}

/// Lets the upstream finish one held call, and checks that `call` then ends well.
async fn release_one(
    release: &Semaphore,
    call: tokio::task::JoinHandle<Result<serde_json::Value, cra_carp::types::ExecuteError>>,
    what: &str,
) {
    release.add_permits(1);
    let outcome = tokio::time::timeout(DEADLINE, call).await.unwrap().unwrap();
    assert!(outcome.is_ok(), "{what} ends: {outcome:?}");
}
