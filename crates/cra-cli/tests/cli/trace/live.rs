//! A real session driven through the runtime over HTTP (resolve allow, deny and
//! requires_approval; executions that succeed, fail, are denied by a budget, refused, wait for an
//! approval and are repeated; the approval granted), then exported, verified, reconstructed and
//! compared with the store, and replayed against the same and a changed atlas.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cra_runtime::config::RuntimeConfig;
use cra_runtime::{RunningServer, build_runtime, start};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};

pub(super) const AGENT: &str = "agent-key-000000000000";
pub(super) const OPERATOR: &str = "operator-key-000000000";
/// An agent of no session these tests open.
pub(super) const OTHER_AGENT: &str = "other-agent-key-000000";

const KEYS: &str = r#"
[[keys]]
token = "agent-key-000000000000"
actor_id = "ops-bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "other-agent-key-000000"
actor_id = "other-bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "operator-key-000000000"
actor_id = "oscar"
actor_type = "human"
roles = ["operator"]
"#;

/// The fixture atlas of these tests.
pub(super) fn atlas_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas")
}

/// A running server on a fresh data directory (or PostgreSQL schema).
pub(super) struct Live {
    rt: tokio::runtime::Runtime,
    server: Option<RunningServer>,
    pub base: String,
    clock: Arc<FixedClock>,
    http: reqwest::blocking::Client,
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    step: u32,
    n: u32,
    pub(super) config: RuntimeConfig,
}

/// What the drive produced.
#[derive(Debug, Default)]
pub(super) struct Facts {
    pub session: String,
    pub allow: String,
    pub deny: String,
    pub gated: String,
    pub approval: String,
    pub dedup_execution: String,
}

impl Live {
    /// Starts a server; `postgres` = (url, schema) uses PostgreSQL instead of redb.
    pub(super) fn start(postgres: Option<(&str, &str)>) -> Self {
        Self::start_with(postgres, vec![atlas_dir()])
    }

    /// Starts a server with `atlases` loaded.
    pub(super) fn start_with(postgres: Option<(&str, &str)>, atlases: Vec<PathBuf>) -> Self {
        Self::start_configured(postgres, atlases, |_| {})
    }

    /// Starts a server with `atlases` loaded and its configuration changed by `configure`.
    pub(super) fn start_configured(
        postgres: Option<(&str, &str)>,
        atlases: Vec<PathBuf>,
        configure: impl FnOnce(&mut RuntimeConfig),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys.toml");
        std::fs::write(&keys, KEYS).unwrap();
        let data = dir.path().join("data");
        let mut config = RuntimeConfig {
            addr: "127.0.0.1:0".into(),
            data: data.clone(),
            api_keys: Some(keys),
            atlases,
            ..RuntimeConfig::default()
        };
        config.limits.requests_per_second = 0;
        if let Some((url, schema)) = postgres {
            config.postgres = Some(url.to_owned());
            config.postgres_schema = schema.to_owned();
            // The fixed test clock, not the database's.
            config.clock = cra_runtime::ClockSource::Local;
        }
        configure(&mut config);
        let clock = Arc::new(FixedClock::parse("2026-03-02T10:00:00Z").unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut live = Self {
            rt,
            server: None,
            base: String::new(),
            clock,
            http: cra_runtime::tls::blocking_http_client().build().unwrap(),
            dir,
            data,
            step: 0,
            n: 0,
            config: config.clone(),
        };
        live.serve(config);
        live
    }

    /// Starts serving `config` on this live's clock (ids go on from where they were).
    fn serve(&mut self, config: RuntimeConfig) {
        // Another seed after a restart, so no id repeats one of the first run's.
        let ids = Arc::new(SequentialIds::new(
            1_772_445_600_000,
            7 + u64::from(self.step),
        ));
        let (state, _) = build_runtime(config.clone(), self.clock.clone(), ids).unwrap();
        let server = self
            .rt
            .block_on(start(state, std::future::pending()))
            .unwrap();
        self.base = format!("http://{}", server.addr);
        self.server = Some(server);
        self.config = config;
    }

    /// Stops the server and starts it again on the same store with its configuration changed
    /// by `configure`.
    pub(super) fn restart(&mut self, configure: impl FnOnce(&mut RuntimeConfig)) {
        self.stop();
        self.tick();
        let mut config = self.config.clone();
        configure(&mut config);
        self.serve(config);
    }

    /// Stops the server and closes its store. The last handle on the state is dropped here,
    /// outside the async runtime: the PostgreSQL client blocks when it closes, which panics on
    /// an async thread.
    pub(super) fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            let state = s.state.clone();
            self.rt.block_on(s.shutdown()).unwrap();
            drop(state);
        }
    }

    /// Moves the clock one second on and returns the new instant.
    pub(super) fn tick(&mut self) -> String {
        self.wait(1)
    }

    /// Moves the clock `seconds` on and returns the new instant.
    pub(super) fn wait(&mut self, seconds: u32) -> String {
        self.step += seconds;
        let t = format!(
            "2026-03-02T{:02}:{:02}:{:02}.000000Z",
            10 + self.step / 3600,
            (self.step / 60) % 60,
            self.step % 60
        );
        self.clock.set(cra_wire::clock::parse_rfc3339(&t).unwrap());
        t
    }

    pub(super) fn uuid(&mut self) -> String {
        self.n += 1;
        format!("0190b000-0000-7000-8000-{:012x}", self.n)
    }

    pub(super) fn call(
        &self,
        method: &str,
        key: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let rb = match method {
            "POST" => self.http.post(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.get(url),
        };
        let rb = rb.bearer_auth(key);
        let rb = match body {
            Some(b) => rb
                .header("content-type", "application/json")
                .body(b.to_string()),
            None => rb,
        };
        let resp = rb.send().unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    fn resolve(&mut self, session: &str, goal: &str, caps: &[&str]) -> Value {
        self.resolve_in("test.trace.ops", session, goal, caps)
    }

    /// A resolve in `atlas_id` by ops-bot in `session`.
    pub(super) fn resolve_in(
        &mut self,
        atlas_id: &str,
        session: &str,
        goal: &str,
        caps: &[&str],
    ) -> Value {
        let req = self.resolve_request(atlas_id, session, goal, caps);
        let (st, body) = self.call("POST", AGENT, "/v1/resolve", Some(&req));
        assert_eq!(st, 200, "{body}");
        body
    }

    /// The body of a resolve in `atlas_id` by ops-bot in `session`, a second on.
    pub(super) fn resolve_request(
        &mut self,
        atlas_id: &str,
        session: &str,
        goal: &str,
        caps: &[&str],
    ) -> Value {
        let now = self.tick();
        json!({
            "carp_version": "1.0", "request_id": self.uuid(), "timestamp": now,
            "operation": "resolve",
            "requester": {"agent_id": "ops-bot", "session_id": session},
            "task": {"goal": goal, "required_capabilities": caps},
            "atlas_ids": [atlas_id],
        })
    }

    /// Opens a session of ops-bot for `goal`, a second on; answers its id.
    pub(super) fn open_session(&mut self, goal: &str) -> String {
        self.tick();
        let (st, body) = self.call(
            "POST",
            AGENT,
            "/v1/sessions",
            Some(&json!({"agent_id": "ops-bot", "goal": goal})),
        );
        assert_eq!(st, 201, "{body}");
        body["session_id"].as_str().unwrap().to_owned()
    }

    pub(super) fn execute(
        &mut self,
        session: &str,
        resolution: &str,
        action: &str,
        params: Value,
        key: Option<&str>,
        outcome: Option<Value>,
    ) -> (u16, Value) {
        let now = self.tick();
        let mut exec =
            json!({"resolution_id": resolution, "action_id": action, "parameters": params});
        if let Some(k) = key {
            exec["idempotency_key"] = json!(k);
        }
        if let Some(o) = outcome {
            exec["outcome"] = o;
        }
        let req = json!({
            "carp_version": "1.0", "request_id": self.uuid(), "timestamp": now,
            "operation": "execute",
            "requester": {"agent_id": "ops-bot", "session_id": session},
            "execution": exec,
        });
        self.call("POST", AGENT, "/v1/execute", Some(&req))
    }

    /// Drives the whole session and ends it.
    pub(super) fn drive(&mut self) -> Facts {
        let sid = self.open_session("keep CI green and ship version 2");
        let mut f = Facts {
            session: sid.clone(),
            ..Facts::default()
        };

        let r1 = self.resolve(&sid, "read the runbook and re-run CI", &["read", "ci"]);
        assert_eq!(r1["decision"]["type"], "allow", "{r1}");
        f.allow = r1["resolution_id"].as_str().unwrap().to_owned();
        let r2 = self.resolve(&sid, "drop the staging database", &["danger"]);
        assert_eq!(r2["decision"]["type"], "deny", "{r2}");
        f.deny = r2["resolution_id"].as_str().unwrap().to_owned();
        let r3 = self.resolve(&sid, "deploy version 2 to production", &["ops"]);
        assert_eq!(r3["decision"]["type"], "requires_approval", "{r3}");
        f.gated = r3["resolution_id"].as_str().unwrap().to_owned();
        f.approval = r3["decision"]["approval_id"].as_str().unwrap().to_owned();

        let (allow, deny, gated) = (f.allow.clone(), f.deny.clone(), f.gated.clone());
        let ok = |r: &(u16, Value), status: &str| {
            assert_eq!(r.0, 200, "{}", r.1);
            assert_eq!(r.1["status"], status, "{}", r.1);
        };
        let e1 = self.execute(
            &sid,
            &allow,
            "doc.read",
            json!({"page": "intro"}),
            Some("read-1"),
            None,
        );
        ok(&e1, "success");
        f.dedup_execution = e1.1["execution_id"].as_str().unwrap().to_owned();
        // The same key again: answered from the first execution, nothing runs or is charged.
        let again = self.execute(
            &sid,
            &allow,
            "doc.read",
            json!({"page": "intro"}),
            Some("read-1"),
            None,
        );
        ok(&again, "success");
        assert_eq!(again.1["execution_id"], e1.1["execution_id"]);
        for (job, key) in [(1, "ci-1"), (2, "ci-2"), (3, "ci-3")] {
            let r = self.execute(
                &sid,
                &allow,
                "ci.rerun",
                json!({"job": job}),
                Some(key),
                None,
            );
            ok(&r, "success");
        }
        // 3 x 3 units of a 10-unit budget are spent: the fourth re-run is denied.
        let over = self.execute(
            &sid,
            &allow,
            "ci.rerun",
            json!({"job": 4}),
            Some("ci-4"),
            None,
        );
        assert_eq!(over.1["error"]["code"], "budget_exhausted", "{}", over.1);
        assert_eq!(over.1["status"], "denied", "{}", over.1);
        // Not allowed by its resolution: refused by a rule.
        let drop = self.execute(&sid, &deny, "db.drop", json!({}), Some("drop-1"), None);
        assert_eq!(drop.1["error"]["code"], "action_not_allowed", "{}", drop.1);
        assert_eq!(drop.1["status"], "denied", "{}", drop.1);
        // Before the approval: pending.
        let early = self.execute(
            &sid,
            &gated,
            "deploy.run",
            json!({"version": "2"}),
            Some("deploy-1"),
            None,
        );
        assert_eq!(early.1["error"]["code"], "approval_pending", "{}", early.1);
        assert_eq!(early.1["status"], "pending_approval", "{}", early.1);

        self.tick();
        let (st, body) = self.call(
            "POST",
            OPERATOR,
            &format!("/v1/approvals/{}", f.approval),
            Some(&json!({"decision": "grant", "note": "release window open"})),
        );
        assert_eq!(st, 200, "{body}");

        let deploy = self.execute(
            &sid,
            &gated,
            "deploy.run",
            json!({"version": "2"}),
            Some("deploy-2"),
            Some(json!({"status": "success", "result": {"deployed": "2"}})),
        );
        ok(&deploy, "success");
        // The approval ran its call; version 3 asks its own under a new resolution.
        let r4 = self.resolve(&sid, "deploy version 2 to production", &["ops"]);
        assert_eq!(r4["decision"]["type"], "requires_approval", "{r4}");
        assert_ne!(r4["decision"]["approval_id"], f.approval.as_str(), "{r4}");
        let gated = r4["resolution_id"].as_str().unwrap().to_owned();
        let ask = self.execute(
            &sid,
            &gated,
            "deploy.run",
            json!({"version": "3"}),
            None,
            None,
        );
        assert_eq!(ask.1["status"], "pending_approval", "{}", ask.1);
        self.tick();
        let (st, body) = self.call(
            "POST",
            OPERATOR,
            &format!(
                "/v1/approvals/{}",
                r4["decision"]["approval_id"].as_str().unwrap()
            ),
            Some(&json!({"decision": "grant", "note": "version 3 too"})),
        );
        assert_eq!(st, 200, "{body}");
        let failed = self.execute(
            &sid,
            &gated,
            "deploy.run",
            json!({"version": "3"}),
            Some("deploy-3"),
            Some(json!({"status": "error", "error": {"code": "deploy_failed", "message": "health check failed"}})),
        );
        ok(&failed, "error");
        // Without an idempotency key (the store cannot look it up: reported as unchecked).
        let unkeyed = self.execute(&sid, &allow, "doc.read", json!({"page": "faq"}), None, None);
        ok(&unkeyed, "success");

        self.tick();
        let (st, body) = self.call("DELETE", AGENT, &format!("/v1/sessions/{sid}"), None);
        assert_eq!(st, 204, "{body}");
        f
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.stop();
    }
}
