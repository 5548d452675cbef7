//! Three `cra serve` processes on one PostgreSQL schema behave as one server
//! (`specs/deployment.md`): each is a real OS process with its own `replica_id`, and every test
//! first checks that all three answered. Skipped (visibly) without `CRA_TEST_POSTGRES_URL`.
//!
//! Deadlines are generous (10 s) and only bound a hang; latency is measured by `cargo xtask
//! bench`, not here.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cra_store::testing::{TestSchema, postgres_url};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const AGENT: &str = "replica-agent-key-0000";
const OPERATOR: &str = "replica-operator-key-0";
const AUTHOR: &str = "replica-author-key-000";
const KEYS: &str = r#"
[[keys]]
token = "replica-author-key-000"
actor_id = "alice"
actor_type = "human"
roles = ["author"]
atlas_namespaces = ["test.replica"]

[[keys]]
token = "replica-agent-key-0000"
actor_id = "bot"
actor_type = "agent"
roles = ["agent"]

[[keys]]
token = "replica-operator-key-0"
actor_id = "oscar"
actor_type = "human"
roles = ["operator"]
"#;

/// How long any one wait may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// One `cra serve` process.
struct Replica {
    child: Child,
    url: String,
    id: String,
}

/// Three replicas on one schema; stopped (SIGTERM, then waited for) when dropped.
struct Cluster {
    replicas: Vec<Replica>,
    /// Every replica's log lines (standard error), with the replica's number (1-3).
    logs: std::sync::mpsc::Receiver<(usize, String)>,
    /// The database the replicas share.
    url: String,
    /// The `[limits]` lines of every replica's configuration.
    limits: String,
    _schema: TestSchema,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts three replicas on a fresh schema, each with its own data directory (which holds
    /// nothing on PostgreSQL) and the trace fixture atlas, and checks that each answers
    /// `/v1/health` with its own `replica_id` from its own process.
    fn start(url: &str, prefix: &str) -> Self {
        Self::start_with(url, prefix, 0, 1000)
    }

    /// As [`Cluster::start`], with the HTTP rate limit `per_second` (0: none) and `burst`.
    fn start_with(url: &str, prefix: &str, per_second: u32, burst: u32) -> Self {
        let schema = TestSchema::new(url, prefix);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keys.toml"), KEYS).unwrap();
        let mut cluster = Self {
            replicas: Vec::new(),
            logs: std::sync::mpsc::channel().1,
            url: url.to_owned(),
            limits: format!("requests_per_second = {per_second}\nburst = {burst}\n"),
            _schema: schema,
            _dir: dir,
        };
        cluster.spawn_all();
        cluster
    }

    /// Starts the three replicas (with fresh logs) and checks that each answers.
    fn spawn_all(&mut self) {
        let atlas = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas");
        let (log, logs) = std::sync::mpsc::channel();
        self.logs = logs;
        let (schema, dir) = (self._schema.name(), self._dir.path());
        self.replicas = (1..=3)
            .map(|i| spawn(&self.url, schema, dir, &atlas, i, &self.limits, log.clone()))
            .collect();
        self.check_three_processes_answer();
    }

    /// Stops every replica (SIGTERM, then waited for) and starts three again on the same schema
    /// and directory, as a rolling restart that happened to take all of them.
    fn restart_all(&mut self) {
        self.stop_all();
        self.spawn_all();
    }

    fn stop_all(&mut self) {
        for r in &mut self.replicas {
            // One already reaped (a test killed it) is not signalled: its pid may be reused.
            if matches!(r.child.try_wait(), Ok(None)) {
                let _ = Command::new("kill")
                    .args(["-TERM", &r.child.id().to_string()])
                    .status();
            }
        }
        for r in &mut self.replicas {
            let _ = r.child.wait();
        }
    }

    fn check_three_processes_answer(&self) {
        let pids: std::collections::BTreeSet<u32> =
            self.replicas.iter().map(|r| r.child.id()).collect();
        assert_eq!(pids.len(), 3, "three processes");
        for r in &self.replicas {
            let health: Value = crate::http_get(format!("{}/v1/health", r.url))
                .unwrap()
                .json()
                .unwrap();
            assert_eq!(health["status"], "ok", "{health}");
            assert_eq!(health["store"], "postgres", "{health}");
            assert_eq!(health["replica_id"], r.id.as_str(), "{health}");
        }
    }

    fn url(&self, replica: usize) -> &str {
        &self.replicas[replica - 1].url
    }

    /// `/v1/health` of `replica`.
    fn health(&self, replica: usize) -> Value {
        crate::http_get(format!("{}/v1/health", self.url(replica)))
            .unwrap()
            .json()
            .unwrap()
    }

    /// Waits for a log line of any replica in `among` containing `text`: the replica's number
    /// and the line. Lines before it are kept for the failure message.
    fn await_log(&self, among: &[usize], text: &str) -> (usize, String) {
        let until = std::time::Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match self.logs.recv_timeout(left) {
                Ok((i, line)) if among.contains(&i) && line.contains(text) => return (i, line),
                Ok(other) => seen.push(other),
                Err(_) => panic!(
                    "no replica of {among:?} logged `{text}` within the deadline; logged: {seen:#?}"
                ),
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// `cra serve` as replica `i`, with retention (so the leader has a job): prints its address,
/// which is awaited; its log lines go to `log`.
fn spawn(
    url: &str,
    schema: &str,
    dir: &Path,
    atlas: &Path,
    i: usize,
    limits: &str,
    log: std::sync::mpsc::Sender<(usize, String)>,
) -> Replica {
    let id = format!("replica-{i}");
    let config = dir.join(format!("{id}.toml"));
    std::fs::write(
        &config,
        format!(
            "postgres_schema = \"{schema}\"\nreplica_id = \"{id}\"\npostgres_pool = 6\n\n[limits]\n{limits}\n[retention]\ndays = 1\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cra"))
        .args(["serve", "--addr", "127.0.0.1:0", "--postgres", url])
        .arg("--config")
        .arg(&config)
        .arg("--data")
        .arg(dir.join(&id))
        .arg("--atlas")
        .arg(atlas)
        .arg("--api-keys")
        .arg(dir.join("keys.toml"))
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let errors = BufReader::new(child.stderr.take().unwrap()).lines();
    std::thread::spawn(move || {
        for line in errors.map_while(Result::ok) {
            let _ = log.send((i, line));
        }
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("{id} stopped before listening"))
            .unwrap();
        if let Some(a) = line.strip_prefix("cra serve: listening on ") {
            break a.to_owned();
        }
    };
    // The rest of its output is drained so the process never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Replica { child, url, id }
}

/// `method path` on `base` with `token`; the status and the JSON body.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    base: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A resolve by the agent in `session`.
fn resolve_body(session: &str) -> Value {
    json!({
        "carp_version": "1.0",
        "request_id": cra_wire::IdGenerator::new_id(&cra_wire::UuidV7Ids),
        "timestamp": cra_wire::clock::format_timestamp(cra_wire::Clock::now(&cra_wire::SystemClock)),
        "operation": "resolve",
        "requester": {"agent_id": "bot", "session_id": session},
        "task": {"goal": "read the runbook"},
        "atlas_ids": ["test.trace.ops"]
    })
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A trace stream of `base` with `query`; once this returns, the server has registered it.
async fn stream(base: &str, token: &str, query: &str) -> Socket {
    let ws = base.replacen("http", "ws", 1);
    let mut req = format!("{ws}/v1/traces/stream?{query}")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

/// Every event `socket` sends until it closes: the events and the close code.
async fn read_to_close(socket: &mut Socket) -> (Vec<Value>, Option<u16>) {
    let mut events = Vec::new();
    let read = async {
        while let Some(msg) = socket.next().await {
            match msg.unwrap() {
                Message::Text(t) => events.push(serde_json::from_str(t.as_str()).unwrap()),
                Message::Close(frame) => return frame.map(|f| u16::from(f.code)),
                _ => {}
            }
        }
        None
    };
    let code = tokio::time::timeout(DEADLINE, read)
        .await
        .expect("the stream closes within the deadline");
    (events, code)
}

/// Events of `session` from an all-sessions stream, until that session's `session.ended`.
async fn read_session_from_all(socket: &mut Socket, session: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let read = async {
        while let Some(msg) = socket.next().await {
            if let Message::Text(t) = msg.unwrap() {
                let e: Value = serde_json::from_str(t.as_str()).unwrap();
                if e["session_id"] == session {
                    let ended = e["event_type"] == "session.ended";
                    events.push(e);
                    if ended {
                        return;
                    }
                }
            }
        }
        panic!("the all-sessions stream closed before the session ended");
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("the session's end reaches the all-sessions stream within the deadline");
    events
}

fn hashes(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event_hash"].as_str().unwrap().to_owned())
        .collect()
}

/// A session opened on replica 1, appended to through replicas 2 and 3 and ended on replica 2:
/// the streams on replicas 1 and 3 get every event of the chain once and in order and close with
/// 1000, and the operator's all-sessions stream on replica 1 gets each event once.
#[test]
fn a_stream_on_one_replica_gets_every_replica_s_events_once_in_order_and_closes_at_the_end() {
    let Some(url) = postgres_url("a_stream_on_one_replica_gets_every_replica_s_events") else {
        return;
    };
    let cluster = Cluster::start(&url, "fanout");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let http = cra_runtime::tls::http_client().build().unwrap();
        let post = reqwest::Method::POST;
        // Live only: opened before the session, so it sees the session's first event too.
        let mut all_on_1 = stream(cluster.url(1), OPERATOR, "all=true").await;
        let (status, opened) = call(
            &http,
            post.clone(),
            cluster.url(1),
            "/v1/sessions",
            AGENT,
            Some(json!({"agent_id": "bot", "goal": "read the runbook"})),
        )
        .await;
        assert_eq!(status, 201, "{opened}");
        let sid = opened["session_id"].as_str().unwrap().to_owned();
        let query = format!("session_id={sid}");
        let mut on_1 = stream(cluster.url(1), AGENT, &query).await;
        let mut on_3 = stream(cluster.url(3), AGENT, &query).await;
        for i in 0..12 {
            let replica = 2 + i % 2;
            let (status, body) = call(
                &http,
                post.clone(),
                cluster.url(replica),
                "/v1/resolve",
                AGENT,
                Some(resolve_body(&sid)),
            )
            .await;
            assert_eq!(status, 200, "resolve {i} on replica {replica}: {body}");
        }
        let (status, body) = call(
            &http,
            reqwest::Method::DELETE,
            cluster.url(2),
            &format!("/v1/sessions/{sid}"),
            AGENT,
            None,
        )
        .await;
        assert!(status < 300, "end on replica 2: {status} {body}");

        let (status, chain) = call(
            &http,
            reqwest::Method::GET,
            cluster.url(3),
            &format!("/v1/traces/{sid}"),
            AGENT,
            None,
        )
        .await;
        assert_eq!(status, 200, "{chain}");
        let chain = chain.as_array().unwrap().clone();
        assert!(chain.len() > 12, "{} events", chain.len());
        for (name, socket) in [("replica 1", &mut on_1), ("replica 3", &mut on_3)] {
            let (events, code) = read_to_close(socket).await;
            assert_eq!(
                code,
                Some(1000),
                "{name}'s stream closes normally at the end"
            );
            assert_eq!(
                hashes(&events),
                hashes(&chain),
                "{name}: the chain, once, in order"
            );
        }
        let seen = read_session_from_all(&mut all_on_1, &sid).await;
        let mut got = hashes(&seen);
        got.sort();
        let mut want = hashes(&chain);
        want.sort();
        assert_eq!(
            got, want,
            "the all-sessions stream: every event of the chain, once"
        );
    });
    cluster.check_three_processes_answer();
}

/// The first replica to start leads the periodic work; killed with SIGKILL, its lock goes with
/// its connection and one of the two others leads at once, and says so.
#[test]
fn killing_the_leader_hands_its_periodic_work_to_another_replica() {
    let Some(url) = postgres_url("killing_the_leader_hands_its_periodic_work_to_another_replica")
    else {
        return;
    };
    let mut cluster = Cluster::start(&url, "leader");
    let leaders: Vec<bool> = (1..=3)
        .map(|i| cluster.health(i)["leader"].as_bool().unwrap())
        .collect();
    assert_eq!(leaders, [true, false, false], "the first to start leads");
    cluster.await_log(&[1], "now leads periodic work");

    let first = &mut cluster.replicas[0].child;
    first.kill().unwrap();
    first.wait().unwrap();
    let (next, line) = cluster.await_log(&[2, 3], "now leads periodic work");
    assert!(line.contains("retention"), "{line}");
    let other = 5 - next;
    assert_eq!(cluster.health(next)["leader"], true);
    assert_eq!(cluster.health(other)["leader"], false);
}

/// The HTTP rate limit is one limit for the three replicas, counted at the database's clock: a
/// key sending 30 requests round-robin gets its burst of 10, plus at most what the rate refilled
/// meanwhile, in total (not 10 per replica), and the refusals are 429 with `Retry-After`.
#[test]
fn the_http_rate_limit_holds_in_total_across_replicas() {
    let Some(url) = postgres_url("the_http_rate_limit_holds_in_total_across_replicas") else {
        return;
    };
    let cluster = Cluster::start_with(&url, "ratelimit", 1, 10);
    let http = cra_runtime::tls::blocking_http_client().build().unwrap();
    let started = std::time::Instant::now();
    let mut admitted = 0;
    for i in 0..30 {
        let resp = http
            .get(format!("{}/v1/traces", cluster.url(1 + i % 3)))
            .bearer_auth(AGENT)
            .send()
            .unwrap();
        match resp.status().as_u16() {
            200 => admitted += 1,
            429 => assert!(resp.headers().contains_key("retry-after")),
            other => panic!("request {i}: {other} {}", resp.text().unwrap()),
        }
    }
    // One token a second refills while the requests run.
    let refilled = started.elapsed().as_secs() + 1;
    assert!(
        (10..=10 + refilled).contains(&admitted),
        "admitted {admitted} of 30 in {:?}; the burst is 10 for all replicas together",
        started.elapsed()
    );
}

/// The fixture atlas as an inline atlas with id `atlas_id` whose one policy denies `doc.read`
/// with a reason naming `atlas_id`, so a decision shows which atlas made it.
fn denying_atlas(atlas_id: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas");
    let text = std::fs::read_to_string(root.join("atlas.json")).unwrap();
    let mut manifest: Value = serde_json::from_str(&text).unwrap();
    manifest["atlas_id"] = json!(atlas_id);
    manifest["policies"] = json!([{
        "policy_id": "deny-reads",
        "type": "deny",
        "actions": ["doc.read"],
        "parameters": {"reason": format!("reads are denied by {atlas_id}")}
    }]);
    let runbook = std::fs::read_to_string(root.join("context/runbook.md")).unwrap();
    json!({"manifest": manifest, "files": {"context/runbook.md": runbook}})
}

/// A resolve on `base` against `atlas_id` in a new session: the decision's body and the digest
/// its `carp.request.received` recorded for that atlas.
async fn decide_with(http: &reqwest::Client, base: &str, atlas_id: &str) -> (Value, Value) {
    let post = reqwest::Method::POST;
    let opened = json!({"agent_id": "bot", "goal": "read the runbook"});
    let (status, opened) = call(
        http,
        post.clone(),
        base,
        "/v1/sessions",
        AGENT,
        Some(opened),
    )
    .await;
    assert_eq!(status, 201, "{opened}");
    let sid = opened["session_id"].as_str().unwrap();
    let mut body = resolve_body(sid);
    body["atlas_ids"] = json!([atlas_id]);
    body["task"]["required_capabilities"] = json!(["read"]);
    let (status, decided) = call(http, post, base, "/v1/resolve", AGENT, Some(body)).await;
    assert_eq!(status, 200, "{base}: {decided}");
    let get = reqwest::Method::GET;
    let (status, events) = call(http, get, base, &format!("/v1/traces/{sid}"), AGENT, None).await;
    assert_eq!(status, 200, "{events}");
    let received = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "carp.request.received")
        .unwrap();
    (
        decided,
        received["payload"]["atlas_digests"][atlas_id].clone(),
    )
}

/// A resolve on `base` against `atlas_id` is denied by that atlas's policy and records
/// `digest` for it (`when` names the case in a failure).
async fn assert_decided_by(
    http: &reqwest::Client,
    base: &str,
    atlas_id: &str,
    digest: &Value,
    when: &str,
) {
    let (decided, recorded) = decide_with(http, base, atlas_id).await;
    let reason = format!("denied by {atlas_id}");
    assert!(decided.to_string().contains(&reason), "{when}: {decided}");
    assert_eq!(
        &recorded, digest,
        "{when}: the digest recorded for {atlas_id}"
    );
}

/// Whether `base` has `atlas_id` in force, asked until it does or the deadline passes (each
/// question is an HTTP round trip; nothing sleeps).
async fn awaits_atlas(http: &reqwest::Client, base: &str, atlas_id: &str) -> bool {
    let until = std::time::Instant::now() + DEADLINE;
    while std::time::Instant::now() < until {
        let get = reqwest::Method::GET;
        let (_, atlases) = call(http, get, base, "/v1/atlases", AGENT, None).await;
        if atlases
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["atlas_id"] == atlas_id))
        {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

/// Acceptance (issue 28): an atlas installed through each replica decides resolves on the two
/// others (the decision its policy makes, and the digest recorded), and still does after every
/// replica restarted.
#[test]
fn an_atlas_installed_on_one_replica_decides_on_the_others_also_after_all_restart() {
    let Some(url) = postgres_url("an_atlas_installed_on_one_replica_decides_on_the_others") else {
        return;
    };
    let mut cluster = Cluster::start(&url, "atlases");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = cra_runtime::tls::http_client().build().unwrap();
    let mut digests = Vec::new();
    rt.block_on(async {
        for i in 1..=3 {
            let atlas_id = format!("test.replica.r{i}");
            let (status, installed) = call(
                &http,
                reqwest::Method::POST,
                cluster.url(i),
                "/v1/atlases",
                AUTHOR,
                Some(denying_atlas(&atlas_id)),
            )
            .await;
            assert_eq!(status, 201, "{installed}");
            digests.push((atlas_id, installed["digest"].clone()));
        }
        for (i, (atlas_id, digest)) in digests.iter().enumerate() {
            for other in (1..=3).filter(|r| *r != i + 1) {
                let base = cluster.url(other);
                assert!(
                    awaits_atlas(&http, base, atlas_id).await,
                    "{atlas_id} on {other}"
                );
                let when = format!("on replica {other}");
                assert_decided_by(&http, base, atlas_id, digest, &when).await;
            }
        }
    });
    cluster.restart_all();
    rt.block_on(async {
        for (i, (atlas_id, digest)) in digests.iter().enumerate() {
            let base = cluster.url(1 + (i + 1) % 3);
            assert_decided_by(&http, base, atlas_id, digest, "after the restart").await;
        }
    });
}
