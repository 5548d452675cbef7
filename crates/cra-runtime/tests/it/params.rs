//! Issue 25 over HTTP. The "deny main" scenario with the example github-ops atlas, on redb and on
//! PostgreSQL: the protected-branch deny decides on the call's `/branch`, so no wording of the
//! goal gets `main` deleted, the executor is never reached, and the refusal is recorded with the
//! deciding policy. Also: limits on parameters, `Retry-After`, shadow mode's metric, and an
//! agent waiting for its approval.

use std::sync::atomic::Ordering;

use cra_store::testing::{TestSchema, postgres_url};
use serde_json::{Value, json};

use crate::support::{
    MAINT, TestServer, assert_refused, execute_request, rid, start_with_executor,
};

const DENY: &str = "deny-protected-branch-deletion";

async fn resolve(s: &TestServer, sid: &str, goal: &str, intended: Option<Value>) -> Value {
    let mut req = crate::support::resolve_request("maintainer-bot", sid, &rid(), &["maintain"]);
    req["task"]["goal"] = json!(goal);
    if let Some(i) = intended {
        req["task"]["intended_parameters"] = i;
    }
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    res
}

fn delete(sid: &str, resolution: &Value, branch: &str) -> Value {
    execute_request(
        "maintainer-bot",
        sid,
        &rid(),
        resolution["resolution_id"].as_str().unwrap(),
        "branch.delete",
        json!({"owner": "acme", "repo": "widgets", "branch": branch}),
    )
}

#[tokio::test]
async fn main_is_never_deleted_whatever_the_goal_says() {
    let (s, calls) = start_with_executor().await;
    never_main(&s, &calls).await;
    s.stop().await;
}

/// The same scenario on PostgreSQL, with a limit that charges only the calls it tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_is_never_deleted_on_postgres_and_limits_charge_matching_calls() {
    let Some(url) = postgres_url("main_is_never_deleted_on_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "params");
    let (endpoint, calls) = crate::support::executor_endpoint().await;
    let name = schema.name().to_owned();
    let s = TestServer::start_blocking_with(move |c| {
        c.postgres = Some(url);
        c.postgres_schema = name;
        c.executors.insert(
            "github".into(),
            cra_runtime::config::ExecutorConfig::http(endpoint, 5_000),
        );
        c.atlases.push(params_atlas());
    })
    .await;
    never_main(&s, &calls).await;
    debug_logs_are_limited(&s).await;
    s.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// Deleting `main` or a release branch is refused on every goal, and the executor is never
/// reached; each refusal is recorded with the deciding policy.
async fn never_main(s: &TestServer, calls: &std::sync::atomic::AtomicU64) {
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    for goal in [
        "Delete main",
        "Tidy up stale branches",
        "Remove mainline-docs",
    ] {
        let res = resolve(s, &sid, goal, None).await;
        let listed = res["allowed_actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action_id"] == "branch.delete");
        assert!(listed, "{goal}: branch.delete is decided at execute: {res}");
        for branch in ["main", "release/2.1"] {
            let got = s
                .post(Some(MAINT), "/v1/execute", &delete(&sid, &res, branch))
                .await;
            assert_refused(&got, 403, "action_not_allowed");
            assert_eq!(
                got.1["error"]["details"]["policy_id"], DENY,
                "{goal} {branch}"
            );
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the executor was reached");
    let violations: Vec<Value> = s
        .events(&sid)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "policy.violated")
        .map(|e| e["payload"]["policy_id"].clone())
        .collect();
    assert_eq!(violations, vec![json!(DENY); 6]);
}

/// The params atlas's `limit-debug-logs` (one debug line per minute and session) charges debug
/// calls only, and its refusal says when to retry.
async fn debug_logs_are_limited(s: &TestServer) {
    let (sid, id) = params_resolution(s).await;
    let id = id.as_str();
    let log = |level: &str| log_write(&sid, id, level);
    let key = Some(crate::support::AGENT);
    assert_eq!(
        s.post(key, "/v1/execute", &log("debug")).await.1["status"],
        "success"
    );
    let refused = s.post(key, "/v1/execute", &log("debug")).await;
    assert_refused(&refused, 429, "rate_limit_exceeded");
    let wait = refused.1["error"]["details"]["retry_after_seconds"].as_u64();
    assert!(wait.is_some_and(|w| (1..=60).contains(&w)), "{}", refused.1);
    for _ in 0..3 {
        assert_eq!(
            s.post(key, "/v1/execute", &log("info")).await.1["status"],
            "success"
        );
    }
}

/// A session of `ops-bot` and a resolution of the params atlas in it: `(session, resolution)`.
async fn params_resolution(s: &TestServer) -> (String, String) {
    let sid = s.open_session(crate::support::AGENT, "ops-bot").await;
    let mut req = crate::support::resolve_request("ops-bot", &sid, &rid(), &[]);
    req["atlas_ids"] = json!(["com.example.params"]);
    let (st, res) = s
        .post(Some(crate::support::AGENT), "/v1/resolve", &req)
        .await;
    assert_eq!(st, 200, "{res}");
    let id = res["resolution_id"].as_str().unwrap().to_owned();
    (sid, id)
}

/// An execute of the params atlas's `log.write` at `level` under resolution `id`.
fn log_write(sid: &str, id: &str, level: &str) -> Value {
    let params = json!({"level": level});
    execute_request("ops-bot", sid, &rid(), id, "log.write", params)
}

fn params_atlas() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../cra-carp/tests/fixtures/params/atlas"
    ))
}

#[tokio::test]
async fn intended_parameters_decide_the_resolve_and_risk_comes_from_the_atlas() {
    let (s, _calls) = start_with_executor().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let main = json!({"branch.delete": {"owner": "acme", "repo": "widgets", "branch": "main"}});
    let res = resolve(&s, &sid, "Clean up", Some(main)).await;
    let denied = res["denied_actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["action_id"] == "branch.delete")
        .cloned();
    assert_eq!(denied.unwrap()["policy_id"], DENY, "{res}");

    // Another branch: allowed, and gated, because branch.delete is high-risk in the atlas even
    // though the request says the task is low-risk.
    let other = json!({"branch.delete": {"owner": "acme", "repo": "widgets", "branch": "agent/x"}});
    let res = resolve(&s, &sid, "Clean up", Some(other)).await;
    let entry = res["allowed_actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action_id"] == "branch.delete")
        .cloned()
        .unwrap();
    assert_eq!(entry["requires_confirmation"], true, "{res}");
    let got = s
        .post(Some(MAINT), "/v1/execute", &delete(&sid, &res, "agent/x"))
        .await;
    assert_eq!(got.1["status"], "pending_approval", "{}", got.1);
    s.stop().await;
}

/// Shadow mode at execute: the params atlas's `log_only` deny on deploy.run never refuses a
/// call, and each execute it would have decided otherwise records so in `action.requested` and
/// in `/metrics`; an execute it agrees with records nothing.
#[tokio::test]
async fn an_execute_records_what_its_log_only_policies_would_have_decided() {
    let s = TestServer::start_with(|c| c.atlases.push(params_atlas())).await;
    let (sid, id) = params_resolution(&s).await;
    let deploy = |env: &str| {
        let params = json!({"env": env});
        execute_request("ops-bot", &sid, &rid(), &id, "deploy.run", params)
    };
    let agent = Some(crate::support::AGENT);
    let prod = s.post(agent, "/v1/execute", &deploy("prod")).await;
    assert_eq!(
        prod.1["status"], "success",
        "the shadow deny decided: {}",
        prod.1
    );
    let dev = s.post(agent, "/v1/execute", &deploy("dev")).await;
    assert_refused(&dev, 403, "action_not_allowed");
    let info = s
        .post(agent, "/v1/execute", &log_write(&sid, &id, "info"))
        .await;
    assert_eq!(info.1["status"], "success", "{}", info.1);

    let requested: Vec<Value> = s
        .events(&sid)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "action.requested")
        .map(|e| e["payload"].clone())
        .collect();
    let shadow_of = |execution_id: &Value| {
        let e = requested
            .iter()
            .find(|p| &p["execution_id"] == execution_id);
        e.map(|p| p["shadow"].clone()).unwrap_or(Value::Null)
    };
    let frozen = json!({"policy_id": "shadow-deny-deploys", "result": "deny"});
    assert_eq!(
        shadow_of(&prod.1["execution_id"]),
        frozen,
        "another outcome"
    );
    assert_eq!(
        shadow_of(&dev.1["execution_id"]),
        frozen,
        "a deny by another policy than the default deny"
    );
    assert_eq!(shadow_of(&info.1["execution_id"]), Value::Null, "agreeing");
    let metrics = metrics_text(&s).await;
    assert!(
        metrics.contains("\ncra_execute_shadow_disagreements_total 2\n"),
        "{metrics}"
    );
    s.stop().await;
}

async fn metrics_text(s: &TestServer) -> String {
    let rb = s.http.get(s.url("/metrics"));
    let resp = rb.bearer_auth(crate::support::OPERATOR).send().await;
    resp.unwrap().text().await.unwrap()
}

/// A rate-limit refusal carries `Retry-After`: the seconds until the limit's window lets the
/// call through, also in `error.details.retry_after_seconds`.
#[tokio::test]
async fn a_rate_limit_refusal_says_when_to_retry() {
    let s = TestServer::start_with(|c| c.atlases.push(params_atlas())).await;
    let (sid, id) = params_resolution(&s).await;
    let id = id.as_str();
    // The params atlas tries a deny on deploy.run in shadow mode: it disagreed once.
    let metrics = metrics_text(&s).await;
    assert!(
        metrics.contains("\ncra_shadow_disagreements_total 1\n"),
        "{metrics}"
    );
    let log = |level: &str| log_write(&sid, id, level);
    let first = s
        .post(Some(crate::support::AGENT), "/v1/execute", &log("debug"))
        .await;
    assert_eq!(first.1["status"], "success", "{}", first.1);
    s.clock.advance(time::Duration::seconds(20));
    let rb = s
        .http
        .post(s.url("/v1/execute"))
        .bearer_auth(crate::support::AGENT)
        .json(&log("debug"));
    let resp = rb.send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let header = resp.headers().get("retry-after").cloned();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    assert_eq!(header.unwrap().to_str().unwrap(), "40");
    assert_eq!(body["error"]["details"]["retry_after_seconds"], 40);
    s.stop().await;
}

/// `GET /v1/approvals/{id}?wait=N`: the agent that asked reads its approval, another agent may
/// not, and a wait ends when an operator decides (the waiter is seen subscribed first, so the
/// decision wakes it rather than being read before it waits).
#[tokio::test]
async fn an_agent_waits_for_its_approval() {
    use crate::support::{AGENT, OPERATOR, assert_error};
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let req = crate::support::resolve_request("maintainer-bot", &sid, &rid(), &["maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    let id = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    let path = format!("/v1/approvals/{id}");

    let (st, now) = s.get(Some(MAINT), &path).await;
    assert_eq!(st, 200, "{now}");
    assert_eq!(
        (now["status"].clone(), now["lapsed"].clone()),
        (json!("pending"), json!(false))
    );
    assert_error(&s.get(Some(AGENT), &path).await, 403, "forbidden");
    assert_error(
        &s.get(Some(MAINT), &format!("{path}?wait=61")).await,
        400,
        "invalid_request",
    );

    let waiter = {
        let rb = s
            .http
            .get(s.url(&format!("{path}?wait=30")))
            .bearer_auth(MAINT);
        tokio::spawn(crate::support::send(rb))
    };
    let hub = s.server.as_ref().unwrap().state.hub.clone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while hub.listeners(&sid) == 0 {
        if waiter.is_finished() || std::time::Instant::now() >= deadline {
            panic!("the wait never subscribed: {:?}", waiter.await.unwrap());
        }
        tokio::task::yield_now().await;
    }
    let (st, _) = s
        .post(Some(OPERATOR), &path, &json!({"decision": "grant"}))
        .await;
    assert_eq!(st, 200);
    let (st, decided) = waiter.await.unwrap();
    assert_eq!(st, 200, "{decided}");
    assert_eq!(decided["status"], "granted", "{decided}");
    assert_eq!(decided["decided_by"], "oscar");
    s.stop().await;
}

/// A granted approval runs its call once, also when executes of that call race (each with its
/// own request id and no idempotency key): exactly one runs and the others are refused
/// `approval_used`, each recorded as a refusal.
#[tokio::test]
async fn a_granted_approval_runs_its_call_once_under_racing_executes() {
    use crate::support::{MERGE_42, OPERATOR};
    const RACERS: usize = 6;
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let req = crate::support::resolve_request("maintainer-bot", &sid, &rid(), &["maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    let id = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    let (st, body) = s
        .post(
            Some(OPERATOR),
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "grant"}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    let resolution = res["resolution_id"].as_str().unwrap();
    let calls = (0..RACERS).map(|_| {
        let call = execute_request(
            "maintainer-bot",
            &sid,
            &rid(),
            resolution,
            "pr.merge",
            MERGE_42.clone(),
        );
        let s = &s;
        async move { s.post(Some(MAINT), "/v1/execute", &call).await }
    });
    let answers = futures::future::join_all(calls).await;
    let ran = answers.iter().filter(|(st, _)| *st == 200).count();
    assert_eq!(ran, 1, "{answers:?}");
    for (st, body) in answers.iter().filter(|(st, _)| *st != 200) {
        assert_eq!(*st, 403, "{body}");
        assert_eq!(body["error"]["code"], "approval_used", "{body}");
    }
    let types = s.event_types(&sid).await;
    // Cleared to run once (its executor's outcome, success or failure, is another matter).
    let cleared = types.iter().filter(|t| *t == "action.approved").count();
    assert_eq!(cleared, 1, "{types:?}");
    s.stop().await;
}

/// Issue 29, item 7: on `fda2190` a reused idempotency key with other parameters or another
/// action answered the first call's response, telling the agent a call ran that never did.
#[tokio::test]
async fn a_reused_idempotency_key_names_one_call_and_another_call_is_refused() {
    let (s, calls) = start_with_executor().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let resolve = crate::support::resolve_request("maintainer-bot", &sid, &rid(), &["repo-read"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &resolve).await;
    assert_eq!(st, 200, "{res}");
    let resolution = res["resolution_id"].as_str().unwrap();
    let execute = |action: &str, repo: &str| {
        let params = json!({"owner": "octo", "repo": repo});
        let mut e = execute_request("maintainer-bot", &sid, &rid(), resolution, action, params);
        e["execution"]["idempotency_key"] = json!("k-1");
        e
    };
    let (st, first) = s
        .post(Some(MAINT), "/v1/execute", &execute("repo.get", "hello"))
        .await;
    assert_eq!((st, &first["status"]), (200, &json!("success")), "{first}");
    let (st, again) = s
        .post(Some(MAINT), "/v1/execute", &execute("repo.get", "hello"))
        .await;
    assert_eq!(st, 200, "{again}");
    assert_eq!(
        again["execution_id"], first["execution_id"],
        "the same call: its first answer"
    );
    let cases = [
        ("repo.get", "world", "the same action with other parameters"),
        ("pr.list", "hello", "action `repo.get`, not `pr.list`"),
    ];
    for (action, repo, says) in cases {
        let (st, got) = s
            .post(Some(MAINT), "/v1/execute", &execute(action, repo))
            .await;
        assert_eq!((st, &got["status"]), (409, &json!("denied")), "{got}");
        assert_eq!(got["error"]["code"], "idempotency_key_reused", "{got}");
        let pointer = &got["error"]["details"]["errors"][0]["pointer"];
        assert_eq!(pointer, "/execution/idempotency_key", "{got}");
        let message = got["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(says) && message.contains("new key"),
            "{message}"
        );
        assert_ne!(
            got["execution_id"], first["execution_id"],
            "never the first answer: {got}"
        );
    }
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the executor ran once"
    );
    let types = s.event_types(&sid).await;
    assert!(
        types.iter().any(|t| t == "action.deduplicated"),
        "{types:?}"
    );
    s.stop().await;
}
