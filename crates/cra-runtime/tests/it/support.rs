//! Starting a real server for one test, keys for every role, and small HTTP helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use cra_runtime::config::RuntimeConfig;
use cra_runtime::{RunningServer, build_runtime, start};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::Value;

/// One key per role, plus a second agent.
pub(crate) const ADMIN: &str = "admin-key-000000000000";
pub(crate) const AGENT: &str = "agent-key-000000000000";
pub(crate) const AGENT2: &str = "agent2-key-00000000000";
pub(crate) const AUTHOR: &str = "author-key-00000000000";
pub(crate) const AUDITOR: &str = "auditor-key-0000000000";
pub(crate) const OPERATOR: &str = "operator-key-000000000";
pub(crate) const MAINT: &str = "maint-key-000000000000";

pub(crate) const KEYS_TOML: &str = r#"
[[keys]]
token = "admin-key-000000000000"
actor_id = "root"
actor_type = "human"
roles = ["admin"]

[[keys]]
token = "agent-key-000000000000"
actor_id = "ops-bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "agent2-key-00000000000"
actor_id = "other-bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "author-key-00000000000"
actor_id = "alice"
actor_type = "human"
roles = ["author"]
atlas_namespaces = ["com.example", "dev.cra"]

[[keys]]
token = "auditor-key-0000000000"
actor_id = "audrey"
actor_type = "human"
roles = ["auditor"]

[[keys]]
token = "maint-key-000000000000"
actor_id = "maintainer-bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "operator-key-000000000"
actor_id = "oscar"
actor_type = "human"
roles = ["operator"]
"#;

/// The test configuration over `dir`: the test keys written there, its `data` directory, no
/// per-key rate limit, the `dev.cra.github-ops` atlas. Returns it with the data directory.
pub(crate) fn test_config(dir: &std::path::Path) -> (RuntimeConfig, PathBuf) {
    let keys = dir.join("keys.toml");
    std::fs::write(&keys, KEYS_TOML).unwrap();
    let data = dir.join("data");
    let mut config = RuntimeConfig {
        addr: "127.0.0.1:0".into(),
        data: data.clone(),
        api_keys: Some(keys),
        ..RuntimeConfig::default()
    };
    config.limits.requests_per_second = 0;
    // The fixed test clock also on PostgreSQL (the database's clock has its own test).
    config.clock = cra_runtime::ClockSource::Local;
    config.atlases = vec![PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../atlases/dev.cra.github-ops"
    ))];
    (config, data)
}

/// A running server and what a test needs to talk to it.
pub(crate) struct TestServer {
    pub server: Option<RunningServer>,
    pub base: String,
    pub http: reqwest::Client,
    pub clock: Arc<FixedClock>,
    pub _dir: tempfile::TempDir,
    pub data: PathBuf,
}

/// The test clock's start.
pub(crate) const T0: &str = "2026-03-02T10:00:00Z";

impl TestServer {
    /// A server with the test keys and `tweak` applied to the default configuration.
    pub(crate) async fn start_with(tweak: impl FnOnce(&mut RuntimeConfig)) -> Self {
        Self::start_over(tempfile::tempdir().unwrap(), 42, tweak).await
    }

    /// As [`TestServer::start_with`], with ids from `id_seed` (replicas on one schema need
    /// their own).
    pub(crate) async fn start_with_seed(
        id_seed: u64,
        tweak: impl FnOnce(&mut RuntimeConfig),
    ) -> Self {
        Self::start_over(tempfile::tempdir().unwrap(), id_seed, tweak).await
    }

    /// A server over `dir` (keys file, data directory) whose ids start from `id_seed`.
    pub(crate) async fn start_over(
        dir: tempfile::TempDir,
        id_seed: u64,
        tweak: impl FnOnce(&mut RuntimeConfig),
    ) -> Self {
        let (mut config, data) = test_config(dir.path());
        tweak(&mut config);
        let clock = Arc::new(FixedClock::parse(T0).unwrap());
        let ids = Arc::new(SequentialIds::new(1_772_445_600_000, id_seed));
        // On a blocking thread: a PostgreSQL store connects synchronous clients.
        let c = clock.clone();
        let (state, _notices) = tokio::task::spawn_blocking(move || build_runtime(config, c, ids))
            .await
            .unwrap()
            .unwrap();
        let server = start(state, std::future::pending()).await.unwrap();
        let base = server.url();
        Self {
            server: Some(server),
            base,
            http: cra_runtime::tls::http_client().build().unwrap(),
            clock,
            _dir: dir,
            data,
        }
    }

    /// A server with the default test configuration whose runtime `hook` may change before it
    /// serves: a test wraps one of its stores there to inject a failure or hold an operation.
    pub(crate) async fn start_hooked(hook: impl FnOnce(&mut cra_runtime::Runtime)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (config, data) = test_config(dir.path());
        let clock = Arc::new(FixedClock::parse(T0).unwrap());
        let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 42));
        let (mut state, _notices) = build_runtime(config, clock.clone(), ids).unwrap();
        hook(Arc::get_mut(&mut state.0).expect("a fresh runtime has one owner"));
        let server = start(state, std::future::pending()).await.unwrap();
        Self {
            base: server.url(),
            server: Some(server),
            http: cra_runtime::tls::http_client().build().unwrap(),
            clock,
            _dir: dir,
            data,
        }
    }

    /// A server with the default test configuration.
    pub(crate) async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// GET with `key` (or none).
    pub(crate) async fn get(&self, key: Option<&str>, path: &str) -> (u16, Value) {
        let mut rb = self.http.get(self.url(path));
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        send(rb).await
    }

    /// POST a JSON value with `key`.
    pub(crate) async fn post(&self, key: Option<&str>, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(key, path, "application/json", body.to_string().into_bytes())
            .await
    }

    /// POST raw bytes with a content type.
    pub(crate) async fn post_raw(
        &self,
        key: Option<&str>,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut rb = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body);
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        send(rb).await
    }

    /// DELETE with `key`.
    pub(crate) async fn delete(&self, key: Option<&str>, path: &str) -> (u16, Value) {
        let mut rb = self.http.delete(self.url(path));
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        send(rb).await
    }

    /// Graceful stop.
    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await.unwrap();
        }
    }
}

/// Sends and returns (status, body as JSON or as a string value).
pub(crate) async fn send(rb: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = rb.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    (status, v)
}

/// Asserts an error answer: status, token, and that the body has the one error shape.
#[track_caller]
pub(crate) fn assert_error(got: &(u16, Value), status: u16, token: &str) {
    assert_eq!(got.0, status, "status; body {}", got.1);
    assert_eq!(got.1["error"], token, "token; body {}", got.1);
    assert!(got.1["message"].is_string(), "message; body {}", got.1);
}

/// Asserts an execute refusal (CARP §3.5): HTTP `status`, and the body an execute response of
/// status `denied` (or `pending_approval` for `approval_pending`) with `token` in `error.code`.
pub(crate) fn assert_refused(got: &(u16, Value), status: u16, token: &str) {
    let want = if token == "approval_pending" {
        "pending_approval"
    } else {
        "denied"
    };
    assert_eq!(got.0, status, "status; body {}", got.1);
    assert_eq!(got.1["status"], want, "execute status; body {}", got.1);
    assert_eq!(got.1["error"]["code"], token, "token; body {}", got.1);
    assert!(
        got.1["error"]["message"].is_string(),
        "message; body {}",
        got.1
    );
    assert!(
        got.1["execution_id"].is_string(),
        "execution_id; body {}",
        got.1
    );
    assert_eq!(got.1["carp_version"], "1.0", "carp_version; body {}", got.1);
}

impl TestServer {
    /// Opens a session for `agent_id` with `key`; returns its id.
    pub(crate) async fn open_session(&self, key: &str, agent_id: &str) -> String {
        let (st, body) = self
            .post(
                Some(key),
                "/v1/sessions",
                &serde_json::json!({"agent_id": agent_id, "goal": "test the runtime"}),
            )
            .await;
        assert_eq!(st, 201, "{body}");
        body["session_id"].as_str().unwrap().to_owned()
    }

    /// `GET /metrics` as the admin: the status and the Prometheus text.
    pub(crate) async fn metrics(&self) -> (u16, String) {
        let resp = self.http.get(self.url("/metrics")).bearer_auth(ADMIN);
        let resp = resp.send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    /// The session's events over HTTP (as the admin).
    pub(crate) async fn events(&self, session_id: &str) -> Vec<Value> {
        let (st, body) = self
            .get(Some(ADMIN), &format!("/v1/traces/{session_id}"))
            .await;
        assert_eq!(st, 200, "{body}");
        body.as_array().unwrap().clone()
    }

    /// The event types of the session's chain.
    pub(crate) async fn event_types(&self, session_id: &str) -> Vec<String> {
        self.events(session_id)
            .await
            .iter()
            .map(|e| e["event_type"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Number of events in every chain (the "record count" of the TRACE store).
    pub(crate) fn total_events(&self) -> u64 {
        let state = &self.server.as_ref().unwrap().state;
        state
            .backends
            .chains
            .sessions()
            .unwrap()
            .iter()
            .map(|s| s.head.next_sequence)
            .sum()
    }

    /// Asks for the approval of a gated resolution `res` (github-ops, `maintain`): executes
    /// `pr.merge` of pull request 42, which opens the resolution's approval for that call
    /// (`specs/carp.md`, "Approvals bound to the call"), and returns the approval's id.
    pub(crate) async fn ask_merge_approval(
        &self,
        key: &str,
        agent: &str,
        session: &str,
        res: &Value,
    ) -> String {
        let resolution = res["resolution_id"].as_str().unwrap();
        let call = execute_request(
            agent,
            session,
            &rid(),
            resolution,
            "pr.merge",
            MERGE_42.clone(),
        );
        let (st, body) = self.post(Some(key), "/v1/execute", &call).await;
        assert_eq!(
            (st, &body["status"]),
            (409, &serde_json::json!("pending_approval")),
            "{body}"
        );
        res["decision"]["approval_id"].as_str().unwrap().to_owned()
    }

    /// WebSocket URL of a stream query.
    pub(crate) fn ws_url(&self, query: &str) -> String {
        format!(
            "{}/v1/traces/stream?{query}",
            // http:// to ws://, https:// to wss://
            self.base.replacen("http", "ws", 1)
        )
    }
}

/// A CARP resolve request at the test clock's time.
pub(crate) fn resolve_request(
    agent: &str,
    session: &str,
    request_id: &str,
    caps: &[&str],
) -> Value {
    serde_json::json!({
        "carp_version": "1.0",
        "request_id": request_id,
        "timestamp": "2026-03-02T10:00:00Z",
        "operation": "resolve",
        "requester": {"agent_id": agent, "session_id": session},
        "task": {"goal": "review and merge pull request 42", "risk_tier": "low", "required_capabilities": caps},
        "atlas_ids": ["dev.cra.github-ops"]
    })
}

/// A CARP execute request at the test clock's time.
pub(crate) fn execute_request(
    agent: &str,
    session: &str,
    request_id: &str,
    resolution_id: &str,
    action_id: &str,
    parameters: Value,
) -> Value {
    serde_json::json!({
        "carp_version": "1.0",
        "request_id": request_id,
        "timestamp": "2026-03-02T10:00:00Z",
        "operation": "execute",
        "requester": {"agent_id": agent, "session_id": session},
        "execution": {"resolution_id": resolution_id, "action_id": action_id, "parameters": parameters}
    })
}

/// The parameters of the merge [`TestServer::ask_merge_approval`] asks an approval for.
pub(crate) static MERGE_42: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || serde_json::json!({"owner": "acme", "repo": "widgets", "number": 42}),
);

/// A fresh request id (UUIDv7).
pub(crate) fn rid() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

/// A local HTTP endpoint standing in for an operator-configured executor: answers
/// `{"ok": true, "action_id": ..., "parameters": ...}` and counts calls.
pub(crate) async fn executor_endpoint() -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use axum::routing::post;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = calls.clone();
    let app = axum::Router::new().route(
        "/exec",
        post(move |axum::Json(body): axum::Json<Value>| {
            let c = c.clone();
            async move {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                axum::Json(serde_json::json!({"ok": true, "action_id": body["action_id"], "parameters": body["parameters"]}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/exec"), calls)
}

/// A server whose `http:github` executor is a local endpoint.
pub(crate) async fn start_with_executor()
-> (TestServer, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let (url, calls) = executor_endpoint().await;
    let s = TestServer::start_with(move |c| {
        c.executors.insert(
            "github".into(),
            cra_runtime::config::ExecutorConfig::http(url, 5_000),
        );
    })
    .await;
    (s, calls)
}

impl TestServer {
    /// Graceful stop that keeps the data directory and hands it back (for direct edits of the
    /// store, then [`TestServer::start_in`]).
    pub(crate) async fn stop_keep(mut self) -> tempfile::TempDir {
        if let Some(s) = self.server.take() {
            s.shutdown().await.unwrap();
        }
        self._dir
    }

    /// A server with the test keys over an existing directory (one from [`TestServer::stop_keep`]).
    pub(crate) async fn start_in(
        dir: tempfile::TempDir,
        tweak: impl FnOnce(&mut RuntimeConfig),
    ) -> Self {
        // Ids of a restarted server must not repeat the first one's.
        Self::start_over(dir, 43, tweak).await
    }

    /// A session's chain exported as `.trace.jsonl` (NDJSON) over HTTP, as the admin.
    pub(crate) async fn export_ndjson(&self, session_id: &str) -> Vec<u8> {
        let resp = self
            .http
            .get(self.url(&format!("/v1/traces/{session_id}")))
            .bearer_auth(ADMIN)
            .header("accept", "application/x-ndjson")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.bytes().await.unwrap().to_vec()
    }
}

/// Runs `python3 tools/appendix_b.py verify - --json` on `ndjson`; returns its JSON answer.
pub(crate) fn appendix_b_verify(ndjson: &[u8]) -> Value {
    use std::io::Write as _;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/appendix_b.py");
    let mut child = std::process::Command::new("python3")
        .args([script, "verify", "-", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(ndjson).unwrap();
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

impl TestServer {
    /// Like [`TestServer::start_with`], but builds the runtime on a blocking thread: the
    /// PostgreSQL backend's synchronous client cannot connect from inside the async runtime.
    pub(crate) async fn start_blocking_with(
        tweak: impl FnOnce(&mut RuntimeConfig) + Send + 'static,
    ) -> Self {
        Self::start_blocking_seeded(42, tweak).await
    }

    /// Like [`TestServer::start_blocking_with`], with ids from `id_seed` (two servers sharing one
    /// PostgreSQL schema need different ones).
    pub(crate) async fn start_blocking_seeded(
        id_seed: u64,
        tweak: impl FnOnce(&mut RuntimeConfig) + Send + 'static,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (mut config, data) = test_config(dir.path());
        tweak(&mut config);
        let clock = Arc::new(FixedClock::parse(T0).unwrap());
        let ids = Arc::new(SequentialIds::new(1_772_445_600_000, id_seed));
        let c2 = clock.clone();
        let (state, _notices) =
            tokio::task::spawn_blocking(move || build_runtime(config, c2, ids).unwrap())
                .await
                .unwrap();
        let server = start(state, std::future::pending()).await.unwrap();
        let base = server.url();
        Self {
            server: Some(server),
            base,
            http: cra_runtime::tls::http_client().build().unwrap(),
            clock,
            _dir: dir,
            data,
        }
    }

    /// Graceful stop whose last reference to the stores is dropped on a blocking thread (the
    /// PostgreSQL client closes its connections synchronously).
    pub(crate) async fn stop_blocking(mut self) {
        if let Some(s) = self.server.take() {
            let state = s.state.clone();
            s.shutdown().await.unwrap();
            tokio::task::spawn_blocking(move || drop(state))
                .await
                .unwrap();
        }
    }
}
