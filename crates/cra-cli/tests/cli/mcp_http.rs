//! `/mcp` on `cra serve` as MCP clients see it, driven by rmcp's client (a peer we did not
//! write) in both protocol eras, and by raw HTTP for what a client should never send: the API's
//! authentication (401 naming `Bearer`), `Origin` validation (403), the body limit (413),
//! malformed JSON-RPC and unknown methods all change nothing, and a session is only its owner's.

use std::path::Path;
use std::sync::Arc;

use cra_runtime::auth::{Actor, ActorType};
use rmcp::model::{
    CallToolRequestParams, ClientConfig, Implementation, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

const AGENT: &str = "mcp-agent-key-00000000";
const OTHER: &str = "mcp-other-key-00000000";
const ADMIN: &str = "mcp-admin-key-00000000";
const OPERATOR: &str = "mcp-operator-key-00000";
const KEYS: &str = r#"
[[keys]]
token = "mcp-operator-key-00000"
actor_id = "oscar"
actor_type = "human"
roles = ["operator"]

[[keys]]
token = "mcp-admin-key-00000000"
actor_id = "root"
actor_type = "human"
roles = ["admin"]

[[keys]]
token = "mcp-agent-key-00000000"
actor_id = "bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "mcp-other-key-00000000"
actor_id = "other-bot"
actor_type = "agent"
roles = ["agent"]
"#;
/// The body limit the server runs with here.
const MAX_BODY: usize = 64 * 1024;

/// The trace fixture atlas.
fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas")
}

/// A `cra serve` in this process over the trace fixture atlas, with the keys above.
async fn serve(dir: &Path) -> cra_runtime::RunningServer {
    serve_with(dir, fixture(), std::collections::BTreeMap::new()).await
}

/// A `cra serve` in this process over `atlas` with `executors`, with the keys above.
async fn serve_with(
    dir: &Path,
    atlas: std::path::PathBuf,
    executors: std::collections::BTreeMap<String, cra_runtime::config::ExecutorConfig>,
) -> cra_runtime::RunningServer {
    std::fs::write(dir.join("keys.toml"), KEYS).unwrap();
    let mut config = cra_runtime::config::RuntimeConfig {
        addr: "127.0.0.1:0".into(),
        data: dir.join("data"),
        api_keys: Some(dir.join("keys.toml")),
        atlases: vec![atlas],
        executors,
        ..Default::default()
    };
    config.limits.requests_per_second = 0;
    config.limits.max_body_bytes = MAX_BODY;
    let (state, _) = cra_runtime::build_runtime(
        config,
        Arc::new(cra_wire::SystemClock),
        Arc::new(cra_wire::UuidV7Ids),
    )
    .unwrap();
    cra_runtime::start(state, std::future::pending())
        .await
        .unwrap()
}

/// An rmcp client of `url` with `key`: the `initialize` handshake (2025-11-25) when `version`
/// is that era's, else `server/discover` and per-request metadata.
async fn client_of(
    url: &str,
    key: &str,
    version: ProtocolVersion,
) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    let transport = StreamableHttpClientTransport::with_client(
        cra_runtime::tls::http_client().build().unwrap(),
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(key),
    );
    let mut config = ClientConfig::default();
    config.client_info = Implementation::new("cra-test", "1");
    let lifecycle = if version == ProtocolVersion::V_2025_11_25 {
        config.protocol_version = version;
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![version],
        }
    };
    config
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .unwrap()
}

fn call(name: &str, arguments: Value, session: Option<&str>) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
    if let Some(id) = session {
        let mut meta = RequestMetaObject::default();
        meta.0.0.insert("cra/session_id".into(), json!(id));
        params.meta = Some(meta);
    }
    params
}

/// The names of `tools`, sorted.
fn sorted_names(tools: Vec<rmcp::model::Tool>) -> Vec<String> {
    let mut names: Vec<String> = tools.into_iter().map(|t| t.name.into_owned()).collect();
    names.sort();
    names
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    serde_json::to_value(&result.content).unwrap().to_string()
}

/// A raw JSON-RPC POST to `/mcp` in the stateless era.
async fn post(
    http: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .body(body);
    if let Some(k) = key {
        request = request.bearer_auth(k);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_http_serves_the_bearers_session_in_both_eras() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path()).await;
    let url = format!("http://{}/mcp", server.addr);

    // 2025-11-25: `initialize` opens a CARP session for the bearer; leaving (DELETE) ends it.
    let legacy = client_of(&url, AGENT, ProtocolVersion::V_2025_11_25).await;
    let instructions = legacy.peer_info().unwrap().instructions.clone().unwrap();
    let legacy_id = instructions
        .split_whitespace()
        .find(|w| w.len() == 37 && w.ends_with('.'))
        .map(|w| w.trim_end_matches('.').to_owned())
        .unwrap_or_else(|| panic!("the instructions name the CARP session: {instructions}"));
    let names = sorted_names(legacy.list_all_tools().await.unwrap());
    assert_eq!(names, ["ci_rerun", "deploy_run", "doc_read"]);
    let read = legacy
        .call_tool(call("doc_read", json!({"page": "intro"}), None))
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true), "{read:?}");
    legacy.cancel().await.unwrap();

    // 2026-07-28: no MCP session; the CARP session is a handle from `cra/session.open`.
    let stateless = client_of(&url, AGENT, ProtocolVersion::V_2026_07_28).await;
    let listed = stateless.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["cra/session.end", "cra/session.open"],
        "no session named yet"
    );
    let orphan = stateless
        .call_tool(call("doc_read", json!({"page": "intro"}), None))
        .await
        .unwrap();
    assert_eq!(orphan.is_error, Some(true));
    assert!(text_of(&orphan).contains("cra/session.open"), "{orphan:?}");
    let opened = stateless
        .call_tool(call("cra/session.open", json!({"goal": "stateless"}), None))
        .await
        .unwrap();
    let opened: Value = serde_json::from_str(
        opened.content[0]
            .as_text()
            .map(|t| t.text.as_str())
            .unwrap(),
    )
    .unwrap();
    let handle = opened["session_id"].as_str().unwrap().to_owned();
    let read = stateless
        .call_tool(call("doc_read", json!({"page": "two"}), Some(&handle)))
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true), "{read:?}");

    // Another agent's key cannot act in that session, and records nothing there.
    let intruder = client_of(&url, OTHER, ProtocolVersion::V_2026_07_28).await;
    let refused = intruder
        .call_tool(call("doc_read", json!({"page": "x"}), Some(&handle)))
        .await;
    assert!(
        refused.is_err_and(|e| e.to_string().contains("belongs to another agent")),
        "only the session's owner acts in it"
    );
    intruder.cancel().await.unwrap();

    let ended = stateless
        .call_tool(call("cra/session.end", json!({}), Some(&handle)))
        .await
        .unwrap();
    assert_ne!(ended.is_error, Some(true), "{ended:?}");
    stateless.cancel().await.unwrap();

    let state = server.state.clone();
    let auditor = Actor::local("auditor", ActorType::Human);
    let chains = state.chains(&auditor).await.unwrap();
    assert_eq!(chains.len(), 2, "one session per era: {chains:?}");
    for chain in &chains {
        assert!(chain.ended, "{} was ended by its client", chain.session_id);
        let events = state.trace(&auditor, &chain.session_id).await.unwrap();
        let requested = events
            .iter()
            .filter(|e| e.event_type == "action.requested")
            .count();
        assert_eq!(requested, 1, "one call each, nothing from the intruder");
        assert!(
            state
                .verify_chain(&auditor, chain.session_id.clone())
                .await
                .unwrap()
                .valid
        );
    }
    assert!(chains.iter().any(|c| c.session_id == legacy_id));
    assert!(chains.iter().any(|c| c.session_id == handle));
    drop(state);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_mcp_requests_get_protocol_errors_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path()).await;
    let url = format!("http://{}/mcp", server.addr);
    let http = cra_runtime::tls::http_client().build().unwrap();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    });
    let open = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "cra/session.open", "arguments": {}, "_meta": meta}})
    .to_string();

    let anonymous = post(&http, &url, None, open.clone()).await;
    assert_eq!(anonymous.status(), 401);
    let challenge = anonymous.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer"), "{challenge}");

    let foreign = http
        .post(&url)
        .bearer_auth(AGENT)
        .header("origin", "https://evil.example")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(open.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403, "a browser origin nobody allowed");

    let huge = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "cra/session.open", "arguments": {"goal": "x".repeat(MAX_BODY)}, "_meta": meta}});
    let oversized = post(&http, &url, Some(AGENT), huge.to_string()).await;
    assert_eq!(oversized.status(), 413, "arguments past the body limit");

    let malformed = post(
        &http,
        &url,
        Some(AGENT),
        "{\"jsonrpc\": \"2.0\", \"id\": 3, ",
    )
    .await;
    assert_eq!(malformed.status(), 400, "malformed JSON-RPC");
    let error: Value = malformed.json().await.unwrap();
    assert_eq!(
        error["error"]["code"], -32700,
        "a JSON-RPC parse error: {error}"
    );

    let unknown = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/delete_everything",
        "params": {"_meta": meta}});
    let answer = http
        .post(&url)
        .bearer_auth(AGENT)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/delete_everything")
        .body(unknown.to_string())
        .send()
        .await
        .unwrap();
    let body = answer.text().await.unwrap();
    assert!(
        body.contains("-32601"),
        "an unknown method is method-not-found: {body}"
    );

    let auditor = Actor::local("auditor", ActorType::Human);
    let chains = server.state.chains(&auditor).await.unwrap();
    assert!(
        chains.is_empty(),
        "no hostile request opened a session: {chains:?}"
    );
    server.shutdown().await.unwrap();
}

/// A 2025-11-25 client that reports each `notifications/tools/list_changed`.
struct Told(tokio::sync::mpsc::UnboundedSender<()>);

impl rmcp::ClientHandler for Told {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(());
    }

    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        config.protocol_version = ProtocolVersion::V_2025_11_25;
        config.client_info = Implementation::new("cra-test", "1");
        config
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atlas_replaced_while_a_client_is_connected_changes_its_tools_and_it_is_told() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path()).await;
    let base = format!("http://{}", server.addr);
    let (told, mut notices) = tokio::sync::mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::with_client(
        cra_runtime::tls::http_client().build().unwrap(),
        StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp")).auth_header(AGENT),
    );
    let client = Told(told)
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .unwrap();
    assert_eq!(
        sorted_names(client.list_all_tools().await.unwrap()),
        ["ci_rerun", "deploy_run", "doc_read"]
    );
    // A 2026-07-28 client subscribes instead (`subscriptions/listen`).
    let stateless = client_of(&format!("{base}/mcp"), AGENT, ProtocolVersion::V_2026_07_28).await;
    let mut subscription = stateless
        .listen(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
        .await
        .unwrap();

    // An admin replaces the set in force: the same atlas, its allow policy now naming reads
    // only (deploys stay listed: an approval policy still offers them).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas");
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("atlas.json")).unwrap()).unwrap();
    manifest["version"] = json!("1.1.0");
    manifest["policies"][0]["actions"] = json!(["doc.read"]);
    let runbook = std::fs::read_to_string(dir.join("context/runbook.md")).unwrap();
    let replaced = cra_runtime::tls::http_client()
        .build()
        .unwrap()
        .put(format!("{base}/v1/atlases"))
        .bearer_auth(ADMIN)
        .json(
            &json!({"atlases": [{"manifest": manifest, "files": {"context/runbook.md": runbook}}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(replaced.status(), 200, "{}", replaced.text().await.unwrap());

    tokio::time::timeout(std::time::Duration::from_secs(10), notices.recv())
        .await
        .expect("the 2025-11-25 client is told within 10 s")
        .unwrap();
    let heard = tokio::time::timeout(std::time::Duration::from_secs(10), subscription.next())
        .await
        .expect("the 2026-07-28 subscriber is told within 10 s")
        .unwrap();
    assert!(
        matches!(
            heard,
            Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))
        ),
        "{heard:?}"
    );
    drop(subscription);
    stateless.cancel().await.unwrap();
    assert_eq!(
        sorted_names(client.list_all_tools().await.unwrap()),
        ["deploy_run", "doc_read"],
        "ci.rerun is no longer allowed"
    );
    client.cancel().await.unwrap();
    server.shutdown().await.unwrap();
}

/// `cra mcp serve --url --token`: a stdio client of the real binary acts in a session the
/// server holds for the token's agent; leaving ends that session on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_with_url_relays_a_stdio_client_to_the_servers_session() {
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};

    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path()).await;
    let url = format!("http://{}", server.addr);
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_cra")).configure(|c| {
        c.args(["mcp", "serve", "--url", &url, "--token", AGENT]);
    });
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let instructions = client.peer_info().unwrap().instructions.clone().unwrap();
    assert!(instructions.contains("CARP session"), "{instructions}");
    let names = sorted_names(client.list_all_tools().await.unwrap());
    assert_eq!(names, ["ci_rerun", "deploy_run", "doc_read"]);
    let read = client
        .call_tool(call("doc_read", json!({"page": "relayed"}), None))
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true), "{read:?}");
    assert!(
        client
            .call_tool(call("no_such_tool", json!({}), None))
            .await
            .is_err(),
        "the server's protocol error, relayed"
    );
    // Leaving waits for the relay to exit, which deletes its MCP session first.
    client.cancel().await.unwrap();

    let auditor = Actor::local("auditor", ActorType::Human);
    let chains = server.state.chains(&auditor).await.unwrap();
    assert_eq!(chains.len(), 1, "{chains:?}");
    assert!(chains[0].ended, "leaving ended the session on the server");
    let events = server
        .state
        .trace(&auditor, &chains[0].session_id)
        .await
        .unwrap();
    assert_eq!(events[0].payload["agent_id"], "bot", "the token's agent");
    server.shutdown().await.unwrap();
}

/// `cra mcp proxy --url --token`: the server runs the upstream (here `cra mcp serve`, governed
/// on its own) as its `mcp` executor under an atlas from `import-mcp --writes approve`; the
/// proxy shows the upstream's tool names, a call waits for an operator, who grants it on the
/// server, and the retried call returns the upstream's own result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_with_url_keeps_upstream_names_and_an_operator_approves_on_the_server() {
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};

    let tmp = tempfile::tempdir().unwrap();
    let cra = env!("CARGO_BIN_EXE_cra");
    let upstream_data = tmp.path().join("upstream-data");
    let upstream: Vec<String> = [cra, "mcp", "serve", "--agent", "upstream-bot", "--atlas"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([
            fixture().display().to_string(),
            "--data".into(),
            upstream_data.display().to_string(),
        ])
        .collect();
    let atlas = tmp.path().join("imported");
    let imported = std::process::Command::new(cra)
        .args([
            "atlas",
            "import-mcp",
            "--name",
            "ops",
            "--writes",
            "approve",
        ])
        .arg("--upstream-cmd")
        .arg(upstream.join(" "))
        .arg("--out")
        .arg(&atlas)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let executors = std::collections::BTreeMap::from([(
        "ops".to_owned(),
        cra_runtime::config::ExecutorConfig::mcp_command(upstream, 30_000),
    )]);
    let server = serve_with(tmp.path(), atlas, executors).await;
    let url = format!("http://{}", server.addr);

    let command = tokio::process::Command::new(cra).configure(|c| {
        c.args(["mcp", "proxy", "--url", &url, "--token", AGENT]);
    });
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let names = sorted_names(client.list_all_tools().await.unwrap());
    assert_eq!(
        names,
        ["ci_rerun", "deploy_run", "doc_read"],
        "the upstream's names, not the server's ops_doc_read"
    );
    let arguments = json!({"page": "approved"});
    let pending = client
        .call_tool(call("doc_read", arguments.clone(), None))
        .await
        .unwrap();
    let approval = approval_named(&pending);
    let granted = cra_runtime::tls::http_client()
        .build()
        .unwrap()
        .post(format!("{url}/v1/approvals/{approval}"))
        .bearer_auth(OPERATOR)
        .json(&json!({"decision": "grant"}))
        .send()
        .await
        .unwrap();
    assert_eq!(granted.status(), 200, "{}", granted.text().await.unwrap());
    let ran = client
        .call_tool(call("doc_read", arguments, None))
        .await
        .unwrap();
    assert_ne!(ran.is_error, Some(true), "{ran:?}");
    assert_eq!(
        text_of(&ran),
        json!([{"type": "text", "text": "{\"echo\":{\"page\":\"approved\"}}"}]).to_string(),
        "the upstream's own result"
    );
    client.cancel().await.unwrap();
    server.shutdown().await.unwrap();
}

/// The approval id a pending tool result names ("approval <id> is asked for this call").
fn approval_named(result: &rmcp::model::CallToolResult) -> String {
    let text = text_of(result);
    assert_eq!(result.is_error, Some(true), "{text}");
    assert!(text.contains("approval_pending"), "{text}");
    text.split("approval ")
        .nth(1)
        .and_then(|t| t.get(..36))
        .unwrap_or_else(|| panic!("names its approval: {text}"))
        .to_owned()
}

/// Approvals are per call over MCP too (`specs/mcp.md`, "Approvals are per call"): two gated
/// calls with other arguments each ask for an approval of their own (the second is not refused
/// `approval_mismatch`), each retry runs its own call once granted, and calling a call that ran
/// again asks for a new approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gated_mcp_call_asks_for_its_own_approval_and_a_retry_runs_it() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path()).await;
    let base = format!("http://{}", server.addr);
    let client = client_of(&format!("{base}/mcp"), AGENT, ProtocolVersion::V_2025_11_25).await;
    let deploy = |version: &str| call("deploy_run", json!({"version": version}), None);
    let first = approval_named(&client.call_tool(deploy("1")).await.unwrap());
    let second = approval_named(&client.call_tool(deploy("2")).await.unwrap());
    assert_ne!(first, second, "the second call asked for its own approval");
    // The first call, made again while it waits, waits on its own approval.
    let again = approval_named(&client.call_tool(deploy("1")).await.unwrap());
    assert_eq!(again, first);

    let http = cra_runtime::tls::http_client().build().unwrap();
    for id in [&first, &second] {
        let granted = http
            .post(format!("{base}/v1/approvals/{id}"))
            .bearer_auth(OPERATOR)
            .json(&json!({"decision": "grant"}))
            .send()
            .await
            .unwrap();
        assert_eq!(granted.status(), 200, "{}", granted.text().await.unwrap());
    }
    for version in ["2", "1"] {
        let ran = client.call_tool(deploy(version)).await.unwrap();
        assert_ne!(ran.is_error, Some(true), "{ran:?}");
    }
    let third = approval_named(&client.call_tool(deploy("1")).await.unwrap());
    assert!(
        third != first && third != second,
        "a call that ran asks anew"
    );
    client.cancel().await.unwrap();
    server.shutdown().await.unwrap();
}
