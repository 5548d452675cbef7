//! Health, conformance, metrics, the error body for unknown routes, authentication and limits;
//! atlases installed over HTTP (`POST`/`PUT /v1/atlases`); the conformance suite's evaluation
//! route and settable test clock.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use cra_store::retention::OPERATOR_AUDIT_SESSION;
use cra_trace::store::{AppendDone, ChainStore, ChainStoreError, SessionSummary};
use cra_trace::{EventDraft, TraceEvent};

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn health_and_conformance_are_public() {
    let s = TestServer::start().await;
    let (st, body) = s.get(None, "/v1/health").await;
    assert_eq!(st, 200);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["store"], "redb");
    // Liveness asks nothing but the process; readiness is what /v1/health answers.
    let (st, live) = s.get(None, "/v1/health/live").await;
    assert_eq!((st, live), (200, json!({"status": "ok"})));
    let (st, ready) = s.get(None, "/v1/health/ready").await;
    assert_eq!(
        (st, &ready["status"], &ready["store"]),
        (200, &json!("ok"), &json!("redb"))
    );
    let (st, body) = s.get(None, "/v1/conformance").await;
    assert_eq!(st, 200);
    assert_eq!(body["protocol_version"], "0.1");
    assert_eq!(body["implementation"]["name"], "cra");
    assert_eq!(body["conformance_level"], "L3");
    assert_eq!(
        body["cra_levels"],
        json!(["carp-core", "trace-core", "atlas-core", "cra-full"])
    );
    s.stop().await;
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_the_error_body() {
    let s = TestServer::start().await;
    assert_error(&s.get(Some(ADMIN), "/v1/nowhere").await, 404, "not_found");
    assert_error(&s.delete(Some(ADMIN), "/v1/health").await, 404, "not_found");
    s.stop().await;
}

#[tokio::test]
async fn credentials_are_required_and_checked() {
    let s = TestServer::start().await;
    assert_error(&s.get(None, "/metrics").await, 401, "unauthenticated");
    assert_error(
        &s.get(Some("not-a-key-at-all-xx"), "/metrics").await,
        401,
        "unauthenticated",
    );
    let raw = s
        .http
        .get(s.url("/metrics"))
        .header("authorization", format!("Basic {ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 401);
    s.stop().await;
}

#[tokio::test]
async fn metrics_count_requests_and_need_a_reading_role() {
    let s = TestServer::start().await;
    s.get(None, "/v1/health").await;
    assert_error(&s.get(Some(AGENT), "/metrics").await, 403, "forbidden");
    for key in [ADMIN, OPERATOR, AUDITOR] {
        let resp = s
            .http
            .get(s.url("/metrics"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let text = resp.text().await.unwrap();
        assert!(
            text.contains(
                "cra_http_requests_total{method=\"GET\",route=\"/v1/health\",status=\"200\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("status=\"403\""), "{text}");
        assert!(
            text.contains("cra_http_request_duration_seconds_count{route=\"/v1/health\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("cra_approvals_pending 0\n"), "{text}");
    }
    s.stop().await;
}

/// A maintainer's session whose resolve asked for merges and whose merge now waits for an
/// approval; answers the resolution.
async fn merge_waiting_for_approval(s: &TestServer) -> Value {
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let resolve = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (_, res) = s.post(Some(MAINT), "/v1/resolve", &resolve).await;
    s.ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    res
}

/// The approval queue as an operator alerts on it: how many wait, and for how long the oldest
/// has, by the server's clock.
#[tokio::test]
async fn metrics_show_the_approval_queue_depth_and_its_oldest_age() {
    let s = TestServer::start().await;
    merge_waiting_for_approval(&s).await;
    s.clock.advance(time::Duration::seconds(90));
    let resp = s.http.get(s.url("/metrics")).bearer_auth(OPERATOR);
    let text = resp.send().await.unwrap().text().await.unwrap();
    assert!(text.contains("cra_approvals_pending 1\n"), "{text}");
    assert!(
        text.contains("cra_approvals_oldest_pending_age_seconds 90\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE cra_stream_subscribers gauge\n"),
        "{text}"
    );
    s.stop().await;
}

/// The value of the series `series` (name and labels, as written) in a `/metrics` text.
fn value_of(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
        .parse()
        .unwrap()
}

/// Issue 27, item 3: what an operator alerts on beyond requests. Resolves and executes are
/// timed by operation and outcome (a decision, a status); resolved actions are counted by the
/// policy that decided them; the store's committers by commit time
/// and batch size; the log by its leaves, the leaves its latest checkpoint covers, and how long
/// ago that checkpoint was first seen.
#[tokio::test]
async fn metrics_time_carp_by_outcome_the_store_commits_and_the_checkpoint_lag() {
    let s = TestServer::start().await;
    let res = merge_waiting_for_approval(&s).await;
    let (status, text) = s.metrics().await;
    assert_eq!(status, 200);
    let carp = "cra_carp_duration_seconds_count";
    let resolved = format!("{carp}{{operation=\"resolve\",outcome=\"requires_approval\"}}");
    assert_eq!(value_of(&text, &resolved), 1.0);
    let executed = format!("{carp}{{operation=\"execute\",outcome=\"pending_approval\"}}");
    assert_eq!(value_of(&text, &executed), 1.0);
    assert!(
        text.contains("# TYPE cra_carp_duration_seconds histogram\n"),
        "{text}"
    );
    // Each candidate action the resolve weighed is counted once, under the policy that decided
    // it, in the atlas in force.
    let candidates = res["allowed_actions"].as_array().unwrap().len()
        + res["denied_actions"].as_array().unwrap().len();
    let decided: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("cra_policy_decisions_total{atlas=\"dev.cra.github-ops\",policy=\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(decided, candidates as f64, "{text}");

    // Every append went through a committer: at least one batch, each of at least one append.
    let batches = value_of(&text, "cra_store_commit_duration_seconds_count");
    assert!(batches >= 1.0, "{text}");
    assert_eq!(
        value_of(&text, "cra_store_commit_batch_appends_count"),
        batches
    );
    assert!(value_of(&text, "cra_store_commit_batch_appends_sum") >= batches);
    let inf = "cra_store_commit_duration_seconds_bucket{le=\"+Inf\"}";
    assert_eq!(value_of(&text, inf), batches);

    // The log grew past its checkpoint; a cut covers it, seen just now.
    let leaves = value_of(&text, "cra_log_leaves");
    assert!(leaves > 0.0, "{text}");
    let cut = s
        .http
        .post(s.url("/v1/log/checkpoint"))
        .bearer_auth(OPERATOR);
    assert_eq!(cut.send().await.unwrap().status().as_u16(), 200);
    let (_, text) = s.metrics().await;
    let covered = value_of(&text, "cra_log_checkpoint_leaves");
    assert!(covered >= leaves, "{text}");
    assert!(
        value_of(&text, "cra_log_checkpoint_age_seconds") < 60.0,
        "{text}"
    );
    s.stop().await;
}

/// The series of every metric in a `/metrics` answer, counted by metric name.
async fn series_counts(s: &TestServer) -> BTreeMap<String, usize> {
    let resp = s.http.get(s.url("/metrics")).bearer_auth(OPERATOR);
    let text = resp.send().await.unwrap().text().await.unwrap();
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        *counts.entry(name.to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Issue 29, item 1: on `fda2190` each invented method was a label value of its own, counted
/// before authentication, so anyone could grow the server's memory and `/metrics` without bound.
#[tokio::test]
async fn metric_labels_come_from_a_closed_set_whatever_clients_send() {
    let s = TestServer::start().await;
    let send = |method: String, path: String| {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        s.http.request(method, s.url(&path)).send()
    };
    // One of each kind first: the `other` and `unmatched` series they open are the closed set's.
    let brew = send("BREW".into(), "/v1/traces/x".into()).await.unwrap();
    assert!(brew.status().is_client_error(), "{}", brew.status());
    let nope = send("GET".into(), "/v1/nope".into()).await.unwrap();
    assert!(nope.status().is_client_error(), "{}", nope.status());
    series_counts(&s).await; // `GET /metrics` has its series from now on.
    let before = series_counts(&s).await;
    for i in 0..1000 {
        // Up to 8 KiB each: the probe used 50 kB, as long as hyper's request head allows.
        let method = format!("X{i}{}", "M".repeat(i % 8 * 1024));
        let status = send(method, format!("/v1/traces/{i}"))
            .await
            .unwrap()
            .status();
        assert!(status.is_client_error(), "{status}");
        let unknown = send("GET".into(), format!("/v1/{i}/nowhere?q={i}"))
            .await
            .unwrap();
        assert!(unknown.status().is_client_error(), "{}", unknown.status());
    }
    assert_eq!(
        series_counts(&s).await,
        before,
        "1,000 invented methods and 1,000 unknown paths opened no series"
    );
    s.stop().await;
}

#[tokio::test]
async fn rate_limit_answers_429_per_key() {
    let s = TestServer::start_with(|c| {
        c.limits.requests_per_second = 1;
        c.limits.burst = 3;
    })
    .await;
    for _ in 0..3 {
        assert_eq!(s.get(Some(OPERATOR), "/metrics").await.0, 200);
    }
    // The test clock stands still, so the bucket stays empty.
    assert_error(
        &s.get(Some(OPERATOR), "/metrics").await,
        429,
        "too_many_requests",
    );
    assert_eq!(
        s.get(Some(AUDITOR), "/metrics").await.0,
        200,
        "other keys unaffected"
    );
    s.clock.advance(time::Duration::seconds(1));
    assert_eq!(
        s.get(Some(OPERATOR), "/metrics").await.0,
        200,
        "refilled by the clock"
    );
    let _ = json!({});
    s.stop().await;
}

/// A runtime with the default configuration (no keys file, system clock and ids) over a data
/// directory in `dir`, as `cra serve --data DIR/data` builds it.
fn default_runtime(dir: &Path) -> (cra_runtime::AppState, Vec<cra_runtime::StartNotice>) {
    let config = cra_runtime::RuntimeConfig {
        addr: "127.0.0.1:0".into(),
        data: dir.join("data"),
        ..Default::default()
    };
    cra_runtime::build_runtime(
        config,
        std::sync::Arc::new(cra_wire::SystemClock),
        std::sync::Arc::new(cra_wire::UuidV7Ids),
    )
    .unwrap()
}

#[tokio::test]
async fn first_start_without_keys_creates_a_private_admin_key() {
    let dir = tempfile::tempdir().unwrap();
    let (state, notices) = default_runtime(dir.path());
    let path = dir.path().join("data").join("api-keys.toml");
    assert_eq!(
        notices[0],
        cra_runtime::StartNotice::AdminKeyCreated(path.clone())
    );
    let keys = cra_runtime::auth::KeysFile::load(&path).unwrap();
    let server = cra_runtime::start(state, std::future::pending())
        .await
        .unwrap();
    let resp = cra_runtime::tls::http_client()
        .build()
        .unwrap()
        .get(format!("http://{}/metrics", server.addr))
        .bearer_auth(&keys.keys[0].token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    server.shutdown().await.unwrap();
}

/// An example atlas of the repository as an inline atlas `{manifest, files}` (every file read).
pub(crate) fn inline_example(name: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../atlases")
        .join(name);
    let mut files = BTreeMap::new();
    for entry in walk(&root) {
        let rel = entry
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        files.insert(rel, std::fs::read_to_string(&entry).unwrap());
    }
    let manifest: Value = serde_json::from_str(&files.remove("atlas.json").unwrap()).unwrap();
    json!({"manifest": manifest, "files": files})
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

async fn put(s: &TestServer, key: &str, path: &str, body: &Value) -> (u16, Value) {
    send(
        s.http
            .put(s.url(path))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
}

async fn atlas_ids(s: &TestServer) -> Vec<String> {
    let (st, body) = s.get(Some(AGENT), "/v1/atlases").await;
    assert_eq!(st, 200, "{body}");
    let mut ids: Vec<String> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["atlas_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// The chains, refusing every append to the operator audit chain while `down` is set: the store
/// failing just as an atlas change is recorded.
struct OperatorChainDown {
    inner: std::sync::Arc<dyn ChainStore>,
    down: AtomicBool,
}

impl OperatorChainDown {
    fn refuses(&self, session_id: &str) -> bool {
        self.down.load(Ordering::SeqCst) && session_id == OPERATOR_AUDIT_SESSION
    }
}

impl ChainStore for OperatorChainDown {
    fn append(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        if self.refuses(session_id) {
            return Err(ChainStoreError::Unavailable(
                "the store is down (test hook)".into(),
            ));
        }
        self.inner.append(session_id, drafts)
    }

    fn append_then(&self, session_id: &str, drafts: Vec<EventDraft>, done: AppendDone) {
        if self.refuses(session_id) {
            return done(Err(ChainStoreError::Unavailable(
                "the store is down (test hook)".into(),
            )));
        }
        self.inner.append_then(session_id, drafts, done);
    }

    fn read_range(
        &self,
        session_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        self.inner.read_range(session_id, from, to)
    }

    fn read_after(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TraceEvent>, ChainStoreError> {
        self.inner.read_after(session_id, after, limit)
    }

    fn session(&self, session_id: &str) -> Result<Option<SessionSummary>, ChainStoreError> {
        self.inner.session(session_id)
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, ChainStoreError> {
        self.inner.sessions()
    }
}

/// An install or a replacement whose event cannot be appended to the operator audit chain is
/// undone before the failure is answered (503 `unavailable`): no atlas change stays in force
/// unrecorded. Once the chain takes appends again, the same install goes through and is recorded.
#[tokio::test]
async fn an_atlas_change_that_cannot_be_recorded_is_undone() {
    let mut hook = None;
    let s = TestServer::start_hooked(|rt| {
        let down = std::sync::Arc::new(OperatorChainDown {
            inner: rt.backends.chains.clone(),
            down: AtomicBool::new(false),
        });
        rt.backends.chains = down.clone();
        hook = Some(down);
    })
    .await;
    let down = hook.unwrap();
    let before = atlas_ids(&s).await;
    let payments = inline_example("com.example.payments");
    // The first recorded change starts the operator chain (`session.started`): here a refusal.
    let (st, body) = s
        .post(
            Some(AUTHOR),
            "/v1/atlases",
            &json!({"manifest": {}, "files": {}}),
        )
        .await;
    assert_eq!(st, 400, "{body}");
    assert_eq!(
        s.event_types(OPERATOR_AUDIT_SESSION).await,
        ["session.started", "atlas.refused"]
    );

    down.down.store(true, Ordering::SeqCst);
    assert_error(
        &s.post(Some(AUTHOR), "/v1/atlases", &payments).await,
        503,
        "unavailable",
    );
    assert_eq!(atlas_ids(&s).await, before, "the install was undone");
    let set = json!({"atlases": [payments.clone()]});
    assert_error(
        &put(&s, ADMIN, "/v1/atlases", &set).await,
        503,
        "unavailable",
    );
    assert_eq!(atlas_ids(&s).await, before, "the replacement was undone");

    down.down.store(false, Ordering::SeqCst);
    let (st, body) = s.post(Some(AUTHOR), "/v1/atlases", &payments).await;
    assert_eq!(st, 201, "{body}");
    assert!(
        atlas_ids(&s)
            .await
            .contains(&"com.example.payments".to_owned())
    );
    assert_eq!(
        s.event_types(OPERATOR_AUDIT_SESSION).await,
        ["session.started", "atlas.refused", "atlas.installed"],
        "only the change in force is recorded"
    );
    s.stop().await;
}

#[tokio::test]
async fn an_inline_atlas_is_installed_replaced_and_validated_as_a_directory() {
    let s = TestServer::start().await;
    let payments = inline_example("com.example.payments");
    assert_error(
        &s.post(Some(AGENT), "/v1/atlases", &payments).await,
        403,
        "forbidden",
    );
    let (st, body) = s.post(Some(AUTHOR), "/v1/atlases", &payments).await;
    assert_eq!(st, 201, "{body}");
    assert_eq!(body["atlas_id"], "com.example.payments");
    assert_eq!(body["replaced"], Value::Null);
    assert_eq!(body["unchanged"], false);
    // The digest is the one a directory holding the same files (atlas.json as sent) has.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("atlas.json"),
        payments["manifest"].to_string(),
    )
    .unwrap();
    for (path, text) in payments["files"].as_object().unwrap() {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text.as_str().unwrap()).unwrap();
    }
    let from_dir = cra_atlas::load_dir(dir.path()).unwrap();
    assert_eq!(body["digest"], from_dir.digest);
    assert_eq!(
        atlas_ids(&s).await,
        ["com.example.payments", "dev.cra.github-ops"]
    );

    // The identical atlas again changes nothing.
    let (st, again) = s.post(Some(ADMIN), "/v1/atlases", &payments).await;
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["unchanged"], true);
    assert_eq!(again["digest"], body["digest"]);

    // Other content under the same id and version is refused: a published version never
    // changes. The atlas in force stays.
    let mut changed = payments.clone();
    changed["manifest"]["description"] = json!("changed over HTTP");
    let conflict = s.post(Some(AUTHOR), "/v1/atlases", &changed).await;
    assert_error(&conflict, 409, "atlas_version_conflict");
    assert_eq!(
        conflict.1["details"]["errors"][0]["pointer"],
        "/manifest/version"
    );
    let (_, manifest) = s.get(Some(AGENT), "/v1/atlases/com.example.payments").await;
    assert_ne!(manifest["description"], "changed over HTTP");

    // A new version replaces it, and says what it replaced; not the author's (issue 29, item
    // 9: replacing an atlas in force needs an operator or a trusted signature), an operator's.
    changed["manifest"]["version"] = json!("1.1.0");
    let refused = s.post(Some(AUTHOR), "/v1/atlases", &changed).await;
    assert_error(&refused, 403, "forbidden");
    let (st, replaced) = s.post(Some(OPERATOR), "/v1/atlases", &changed).await;
    assert_eq!(st, 201, "{replaced}");
    assert_eq!(replaced["replaced"]["digest"], body["digest"]);
    assert_eq!(replaced["replaced"]["version"], body["version"]);
    let (_, manifest) = s.get(Some(AGENT), "/v1/atlases/com.example.payments").await;
    assert_eq!(manifest["description"], "changed over HTTP");

    // Each install, refusal and replacement is in the operator audit chain, which an auditor
    // reads and which verifies; the unchanged install is not.
    let audit = cra_store::retention::OPERATOR_AUDIT_SESSION;
    let (st, chain) = s.get(Some(AUDITOR), &format!("/v1/traces/{audit}")).await;
    assert_eq!(st, 200, "{chain}");
    let events = chain.as_array().unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session.started",
            "atlas.installed",
            "atlas.refused",
            "atlas.refused",
            "atlas.replaced"
        ]
    );
    let (installed, refused, forbidden, swapped) = (
        &events[1]["payload"],
        &events[2]["payload"],
        &events[3]["payload"],
        &events[4]["payload"],
    );
    assert_eq!(installed["atlas_id"], "com.example.payments");
    assert_eq!(installed["digest"], body["digest"]);
    assert_eq!(installed["actor"], "alice");
    assert_eq!(installed["source"], "install");
    assert_eq!(refused["error"], "atlas_version_conflict");
    assert_eq!(refused["version"], body["version"]);
    assert_ne!(refused["digest"], body["digest"]);
    assert_eq!(forbidden["error"], "forbidden");
    assert_eq!(swapped["version"], "1.1.0");
    assert_eq!(swapped["actor"], "oscar");
    assert_eq!(swapped["replaced_digest"], body["digest"]);
    let (st, verdict) = s
        .post(
            Some(AUDITOR),
            &format!("/v1/traces/{audit}/verify"),
            &json!({}),
        )
        .await;
    assert_eq!((st, &verdict["valid"]), (200, &json!(true)), "{verdict}");

    // An installed atlas survives a reload of the configured sources.
    let state = &s.server.as_ref().unwrap().state;
    assert_eq!(state.reload_atlases().unwrap(), 2);
    assert_eq!(
        state.atlases().get("com.example.payments").unwrap().digest,
        replaced["digest"].as_str().unwrap()
    );
    s.stop().await;
}

#[tokio::test]
async fn a_refused_atlas_changes_nothing_and_names_every_problem() {
    let s = TestServer::start().await;
    let before = s.get(Some(AGENT), "/v1/atlases").await;
    let good = inline_example("com.example.payments");

    let mut bad = good.clone();
    bad["manifest"]["atlas_id"] = json!("Not-An-Id");
    bad["manifest"]["version"] = json!("one");
    let got = s.post(Some(ADMIN), "/v1/atlases", &bad).await;
    assert_error(&got, 400, "invalid_atlas");
    let pointers: Vec<&str> = got.1["details"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/manifest/atlas_id"), "{pointers:?}");
    assert!(pointers.contains(&"/manifest/version"), "{pointers:?}");

    // A context file the manifest names is missing.
    let mut missing = good.clone();
    let files = missing["files"].as_object_mut().unwrap();
    let context: Vec<String> = files
        .keys()
        .filter(|k| k.starts_with("context/"))
        .cloned()
        .collect();
    for k in &context {
        files.remove(k);
    }
    assert_error(
        &s.post(Some(ADMIN), "/v1/atlases", &missing).await,
        400,
        "invalid_atlas",
    );

    // Shapes a directory cannot have.
    let cases = [
        (json!({"path": "/etc"}), "/path"),
        (json!({"files": {}}), "/manifest"),
        (json!({"manifest": [], "files": {}}), "/manifest"),
        (
            json!({"manifest": good["manifest"], "files": {"../x.md": "x"}}),
            "/files/..~1x.md",
        ),
        (
            json!({"manifest": good["manifest"], "files": {"context/a.md": 1}}),
            "/files/context~1a.md",
        ),
        (
            json!({"manifest": good["manifest"], "files": {"atlas.json": "{}"}}),
            "/files/atlas.json",
        ),
    ];
    for (body, pointer) in cases {
        let got = s.post(Some(ADMIN), "/v1/atlases", &body).await;
        assert_error(&got, 400, "invalid_request");
        assert_eq!(
            got.1["details"]["errors"][0]["pointer"], pointer,
            "{body}: {}",
            got.1
        );
    }
    // A dependency that is not in force.
    let mut dependent = good.clone();
    dependent["manifest"]["dependencies"] = json!({"com.example.absent": "^1"});
    assert_error(
        &s.post(Some(ADMIN), "/v1/atlases", &dependent).await,
        400,
        "invalid_atlas",
    );
    assert_eq!(s.get(Some(AGENT), "/v1/atlases").await, before);
    s.stop().await;
}

#[tokio::test]
async fn put_replaces_the_whole_set_atomically_for_admins_only() {
    let s = TestServer::start().await;
    let payments = inline_example("com.example.payments");
    let support = inline_example("com.example.customer-support");
    let both = json!({"atlases": [payments, support]});
    assert_error(
        &put(&s, AUTHOR, "/v1/atlases", &both).await,
        403,
        "forbidden",
    );
    let (st, body) = put(&s, ADMIN, "/v1/atlases", &both).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body.as_array().unwrap().len(), 2);
    assert_eq!(
        atlas_ids(&s).await,
        ["com.example.customer-support", "com.example.payments"]
    );

    // One bad atlas in the list: nothing changes.
    let mut bad = support.clone();
    bad["manifest"]["version"] = json!("x");
    let got = put(
        &s,
        ADMIN,
        "/v1/atlases",
        &json!({"atlases": [payments, bad]}),
    )
    .await;
    assert_error(&got, 400, "invalid_atlas");
    assert_eq!(
        got.1["details"]["errors"][0]["pointer"],
        "/atlases/1/manifest/version"
    );
    let got = put(
        &s,
        ADMIN,
        "/v1/atlases",
        &json!({"atlases": [payments, payments]}),
    )
    .await;
    assert_error(&got, 400, "invalid_atlas");
    assert_eq!(
        got.1["details"]["errors"][0]["pointer"],
        "/atlases/1/manifest/atlas_id"
    );
    assert_error(
        &put(&s, ADMIN, "/v1/atlases", &json!({"atlas": []})).await,
        400,
        "invalid_request",
    );
    assert_eq!(
        atlas_ids(&s).await,
        ["com.example.customer-support", "com.example.payments"]
    );

    // An empty list leaves nothing in force; the configured source no longer comes back.
    let (st, body) = put(&s, ADMIN, "/v1/atlases", &json!({"atlases": []})).await;
    assert_eq!((st, body), (200, json!([])));
    let state = &s.server.as_ref().unwrap().state;
    assert_eq!(state.reload_atlases().unwrap(), 0);
    assert!(atlas_ids(&s).await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn the_eval_route_answers_pure_verbs_to_any_caller() {
    let s = TestServer::start().await;
    let value = json!({"b": [1, 2.5, "é"], "a": null});
    assert_error(
        &s.post(
            None,
            "/v1/conformance/eval/canonical_trace",
            &json!({"value": value}),
        )
        .await,
        401,
        "unauthenticated",
    );
    let (st, body) = s
        .post(
            Some(AUTHOR),
            "/v1/conformance/eval/canonical_trace",
            &json!({"value": value}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        body["canonical"],
        cra_wire::canonical::trace_canonical(&value)
    );
    assert_error(
        &s.post(
            Some(AGENT),
            "/v1/conformance/eval/hash_event",
            &json!({"event": {"trace_version": "1.0"}}),
        )
        .await,
        400,
        "malformed_event",
    );
    assert_error(
        &s.post(Some(AGENT), "/v1/conformance/eval/resolve", &json!({}))
            .await,
        404,
        "not_found",
    );
    let got = s
        .post(Some(AGENT), "/v1/conformance/eval/verify_chain", &json!({}))
        .await;
    assert_error(&got, 400, "invalid_request");
    assert_eq!(got.1["details"]["errors"][0]["pointer"], "/events");
    // A chain the runtime wrote verifies through the route.
    let sid = s.open_session(AGENT, "ops-bot").await;
    let events = s.events(&sid).await;
    let (st, body) = s
        .post(
            Some(AGENT2),
            "/v1/conformance/eval/verify_chain",
            &json!({"events": events}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["valid"], true);
    assert_eq!(body["events"], 1);
    s.stop().await;
}

#[tokio::test]
async fn replay_and_export_import_read_only_what_the_caller_may_read_and_write_nothing() {
    let s = TestServer::start().await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let (st, body) = s
        .post(
            Some(AGENT),
            "/v1/resolve",
            &resolve_request("ops-bot", &sid, &rid(), &[]),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    let events_before = s.total_events();

    let replay = json!({"session_id": sid});
    let (st, body) = s
        .post(Some(AGENT), "/v1/conformance/eval/replay", &replay)
        .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["identical"], true);
    assert_eq!(body["resolutions"], 1);
    assert_error(
        &s.post(Some(AGENT2), "/v1/conformance/eval/replay", &replay)
            .await,
        403,
        "forbidden",
    );
    assert_error(
        &s.post(
            Some(AUDITOR),
            "/v1/conformance/eval/replay",
            &json!({"session_id": "0190f5d2-8a4e-7b3c-9d1e-5e5519999999"}),
        )
        .await,
        404,
        "session_not_found",
    );
    // Against other atlases (given inline) the recorded resolution diverges.
    let (st, body) = s
        .post(
            Some(AUDITOR),
            "/v1/conformance/eval/replay",
            &json!({"session_id": sid, "atlases": [inline_example("com.example.payments")]}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["identical"], false, "{body}");

    let (st, body) = s
        .post(
            Some(AGENT),
            "/v1/projects",
            &json!({"project_id": "proj_eval", "name": "Eval"}),
        )
        .await;
    assert_eq!(st, 201, "{body}");
    let events_before = events_before.max(s.total_events());
    let export = json!({"project_id": "proj_eval"});
    assert_error(
        &s.post(Some(AGENT2), "/v1/conformance/eval/export_import", &export)
            .await,
        403,
        "unauthorized",
    );
    for key in [AGENT, AUDITOR] {
        let (st, body) = s
            .post(Some(key), "/v1/conformance/eval/export_import", &export)
            .await;
        assert_eq!(st, 200, "{body}");
        assert_eq!(body["hashes_preserved"], true);
        assert_eq!(body["reexport_identical"], true);
    }
    assert_error(
        &s.post(
            Some(ADMIN),
            "/v1/conformance/eval/export_import",
            &json!({"project_id": "proj_absent"}),
        )
        .await,
        404,
        "project_not_found",
    );
    assert_eq!(s.total_events(), events_before, "evaluation wrote events");
    s.stop().await;
}

#[tokio::test]
async fn the_clock_is_settable_only_in_test_mode_and_only_by_admins() {
    let s = TestServer::start().await;
    let when = json!({"now": "2030-05-06T07:08:09Z"});
    let got = s.post(Some(ADMIN), "/v1/conformance/clock", &when).await;
    assert_error(&got, 501, "not_implemented");
    assert_eq!(got.1["capability"], "test_clock");
    s.stop().await;

    let s = TestServer::start_with(|c| c.test_clock = true).await;
    assert_error(
        &s.post(Some(OPERATOR), "/v1/conformance/clock", &when).await,
        403,
        "forbidden",
    );
    assert_error(
        &s.post(
            Some(ADMIN),
            "/v1/conformance/clock",
            &json!({"now": "yesterday"}),
        )
        .await,
        400,
        "invalid_request",
    );
    let (st, body) = s.post(Some(ADMIN), "/v1/conformance/clock", &when).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["now"], "2030-05-06T07:08:09.000000Z");
    let sid = s.open_session(AGENT, "ops-bot").await;
    assert_eq!(
        s.events(&sid).await[0]["timestamp"],
        "2030-05-06T07:08:09.000000Z"
    );
    // The injected clock still drives it: moving that moves "now" by as much.
    s.clock.advance(time::Duration::seconds(5));
    let sid = s.open_session(AGENT, "ops-bot").await;
    assert_eq!(
        s.events(&sid).await[0]["timestamp"],
        "2030-05-06T07:08:14.000000Z"
    );
    s.stop().await;
}

/// On redb, `Runtime::quick` makes store calls on the async worker; a call that panics is still
/// answered 500 `internal_error` naming the task, as on the blocking pool.
#[tokio::test]
async fn quick_store_calls_run_inline_on_redb_and_a_panic_becomes_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _) = default_runtime(dir.path());
    assert!(
        state.backends.quick_reads,
        "redb reads never wait for the writer"
    );
    assert_eq!(state.quick("a probe", || 7).await.unwrap(), 7);
    let err = state
        .quick("a probe", || -> u32 { panic!("a store call that panics") })
        .await
        .unwrap_err();
    assert_eq!(err.status(), 500);
    assert_eq!(err.token(), Some(cra_wire::Token::InternalError));
    assert!(
        err.body.message.starts_with("a probe"),
        "{}",
        err.body.message
    );
}
