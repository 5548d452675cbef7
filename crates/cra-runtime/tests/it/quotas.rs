//! Quotas (`[quotas]`, `specs/quotas.md`): an agent's open sessions and a session's events are
//! bounded whatever the request rate; a refusal is 429 `quota_exceeded`, names the setting, and
//! changes nothing. On PostgreSQL the replicas sharing a schema keep one count.

use cra_store::testing::{TestSchema, postgres_url};
use serde_json::json;

use crate::support::*;

/// Opens a session for `agent` with `key`, answering the status and body.
async fn try_open(s: &TestServer, key: &str, agent: &str) -> (u16, serde_json::Value) {
    let body = json!({"agent_id": agent, "goal": "test the quotas"});
    s.post(Some(key), "/v1/sessions", &body).await
}

/// Resolves in session `id` until a resolve is refused, at most `tries` times; answers the
/// refusal.
async fn resolve_until_refused(s: &TestServer, id: &str, tries: usize) -> (u16, serde_json::Value) {
    for _ in 0..tries {
        let request = resolve_request("ops-bot", id, &rid(), &["repo-read"]);
        let answer = s.post(Some(AGENT), "/v1/resolve", &request).await;
        if answer.0 != 200 {
            return answer;
        }
    }
    panic!("no resolve of {tries} was refused");
}

/// Invariant: an agent never has more sessions open than `quotas.max_open_sessions`. The start
/// past it is refused and stores nothing (no Retry-After: a place frees when a session ends,
/// which no clock predicts); an admin opening on the agent's behalf counts against the same
/// quota; another agent is not affected; an end makes room.
#[tokio::test]
async fn an_agent_opens_sessions_up_to_its_quota_and_an_end_makes_room() {
    let s = TestServer::start_with(|c| c.quotas.max_open_sessions = 2).await;
    let first = s.open_session(AGENT, "ops-bot").await;
    s.open_session(AGENT, "ops-bot").await;
    let traces_before = s.get(Some(ADMIN), "/v1/traces").await.1;

    let refused = s
        .http
        .post(s.url("/v1/sessions"))
        .bearer_auth(AGENT)
        .json(&json!({"agent_id": "ops-bot", "goal": "one too many"}))
        .send()
        .await
        .unwrap();
    assert!(refused.headers().get("retry-after").is_none());
    let refused = (refused.status().as_u16(), refused.json().await.unwrap());
    assert_error(&refused, 429, "quota_exceeded");
    let message = refused.1["message"].as_str().unwrap();
    assert!(message.contains("quotas.max_open_sessions"), "{message}");
    assert!(message.contains("ops-bot"), "{message}");
    assert_error(&try_open(&s, ADMIN, "ops-bot").await, 429, "quota_exceeded");
    assert_eq!(
        s.get(Some(ADMIN), "/v1/traces").await.1,
        traces_before,
        "a refused start stores no chain"
    );

    let (_, metrics) = s.metrics().await;
    assert!(metrics.contains("cra_quota_exceeded_total 2"), "{metrics}");

    s.open_session(AGENT2, "other-bot").await;
    let ended = s
        .delete(Some(AGENT), &format!("/v1/sessions/{first}"))
        .await;
    assert_eq!(ended.0, 204, "{}", ended.1);
    s.open_session(AGENT, "ops-bot").await;
    assert_error(&try_open(&s, AGENT, "ops-bot").await, 429, "quota_exceeded");
    s.stop().await;
}

/// Invariant: past `quotas.max_session_events`, a session's resolves are refused without
/// writing (its chain keeps its length and verifies), and the session can still be ended.
#[tokio::test]
async fn a_session_holding_its_quota_of_events_refuses_requests_and_still_ends() {
    let s = TestServer::start_with(|c| c.quotas.max_session_events = 6).await;
    let id = s.open_session(AGENT, "ops-bot").await;
    let refused = resolve_until_refused(&s, &id, 10).await;
    assert_error(&refused, 429, "quota_exceeded");
    let message = refused.1["message"].as_str().unwrap();
    assert!(message.contains("quotas.max_session_events"), "{message}");
    let held = s.events(&id).await.len();
    assert!(held >= 6, "refused at {held} events");

    let again = resolve_request("ops-bot", &id, &rid(), &["repo-read"]);
    assert_error(
        &s.post(Some(AGENT), "/v1/resolve", &again).await,
        429,
        "quota_exceeded",
    );
    assert_eq!(s.events(&id).await.len(), held, "a refusal writes nothing");

    let ended = s.delete(Some(AGENT), &format!("/v1/sessions/{id}")).await;
    assert_eq!(ended.0, 204, "{}", ended.1);
    let path = format!("/v1/traces/{id}/verify");
    let (st, report) = s.post(Some(AUDITOR), &path, &json!({})).await;
    assert_eq!((st, &report["valid"]), (200, &json!(true)), "{report}");
    assert_eq!(report["events"], held + 1);
    s.stop().await;
}

/// Two replicas sharing a PostgreSQL schema keep one count of an agent's open sessions: opens
/// alternating between them stop at the quota on both, and an end on one makes room on the
/// other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_keep_one_count_of_open_sessions_postgres() {
    let Some(url) = postgres_url("replicas_keep_one_count_of_open_sessions_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "open_quota");
    let mut replicas = Vec::new();
    for seed in [7, 8] {
        let (url, name) = (url.clone(), schema.name().to_owned());
        replicas.push(
            TestServer::start_blocking_seeded(seed, move |c| {
                c.postgres = Some(url);
                c.postgres_schema = name;
                c.quotas.max_open_sessions = 3;
            })
            .await,
        );
    }
    let mut opened = Vec::new();
    for i in 0..3 {
        opened.push(replicas[i % 2].open_session(AGENT, "ops-bot").await);
    }
    for r in &replicas {
        assert_error(&try_open(r, AGENT, "ops-bot").await, 429, "quota_exceeded");
    }
    let path = format!("/v1/sessions/{}", opened[0]);
    assert_eq!(replicas[1].delete(Some(AGENT), &path).await.0, 204);
    replicas[0].open_session(AGENT, "ops-bot").await;
    assert_error(
        &try_open(&replicas[1], AGENT, "ops-bot").await,
        429,
        "quota_exceeded",
    );
    for r in replicas {
        r.stop_blocking().await;
    }
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// An atlas of `n` actions `g<k>.r<i>.op` (groups of ten, each group a capability `g<k>`), every
/// action allowed, as `POST /v1/atlases` takes it.
fn wide_atlas(n: usize) -> serde_json::Value {
    let actions: Vec<_> = (0..n)
        .map(|i| {
            json!({
                "action_id": format!("g{}.r{i}.op", i / 10),
                "name": format!("Action {i}"),
                "description": "One of many.",
                "risk_tier": "low",
                "parameters_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
            })
        })
        .collect();
    let capabilities: Vec<_> = (0..n.div_ceil(10))
        .map(|g| {
            let ids: Vec<_> = (g * 10..(g * 10 + 10).min(n))
                .map(|i| format!("g{g}.r{i}.op"))
                .collect();
            json!({"capability_id": format!("g{g}"), "name": format!("Group {g}"), "actions": ids})
        })
        .collect();
    json!({
        "manifest": {
            "atlas_version": "1.0", "atlas_id": "com.example.wide", "version": "1.0.0",
            "name": "Wide", "description": "Many actions.",
            "capabilities": capabilities,
            "context_packs": [{"pack_id": "intro", "files": ["context/intro.md"], "priority": 10}],
            "policies": [{"policy_id": "allow-all", "type": "allow", "actions": ["*"]}],
            "actions": actions,
        },
        "files": {"context/intro.md": "# Wide\n\nMany actions.\n"},
    })
}

/// Invariant: one resolve records at most `quotas.max_resolve_actions` candidate actions. A
/// resolve over a wider atlas is refused before anything of its evaluation is written (the
/// refusal itself is recorded, small), and names how to narrow it; the same resolve naming a
/// capability is answered; a resolve at the bound writes a bounded chain.
#[tokio::test]
async fn a_resolve_weighing_more_actions_than_the_bound_is_refused_before_it_writes() {
    let s = TestServer::start_with(|c| c.quotas.max_resolve_actions = 300).await;
    let installed = s.post(Some(ADMIN), "/v1/atlases", &wide_atlas(400)).await;
    assert_eq!(installed.0, 201, "{}", installed.1);
    let id = s.open_session(AGENT, "ops-bot").await;
    let ask = |caps: &[&str]| {
        let mut r = resolve_request("ops-bot", &id, &rid(), caps);
        r["atlas_ids"] = json!(["com.example.wide"]);
        r
    };

    let before = s.events(&id).await.len();
    let refused = s.post(Some(AGENT), "/v1/resolve", &ask(&[])).await;
    assert_error(&refused, 400, "invalid_request");
    let message = refused.1["message"].as_str().unwrap();
    assert!(message.contains("400 candidate actions"), "{message}");
    assert!(message.contains("quotas.max_resolve_actions"), "{message}");
    let pointer = &refused.1["details"]["errors"][0]["pointer"];
    assert_eq!(pointer, "/task/required_capabilities", "{}", refused.1);
    let recorded = s.event_types(&id).await;
    assert_eq!(
        recorded[before..],
        ["carp.request.received", "carp.request.rejected"],
        "only the refusal is recorded"
    );

    let narrowed = s.post(Some(AGENT), "/v1/resolve", &ask(&["g3"])).await;
    assert_eq!(narrowed.0, 200, "{}", narrowed.1);
    assert_eq!(narrowed.1["allowed_actions"].as_array().unwrap().len(), 10);

    let groups: Vec<String> = (0..30).map(|g| format!("g{g}")).collect();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let at_bound = s.post(Some(AGENT), "/v1/resolve", &ask(&groups)).await;
    assert_eq!(at_bound.0, 200, "{}", at_bound.1);
    assert_eq!(at_bound.1["allowed_actions"].as_array().unwrap().len(), 300);
    s.stop().await;
}

/// The stored-bytes quota: a session's view says how many bytes its chain holds (its export's
/// lines, summed), and past `quotas.max_session_bytes` its resolves are refused as past the
/// events quota.
#[tokio::test]
async fn a_session_holding_its_quota_of_bytes_refuses_requests() {
    let s = TestServer::start_with(|c| {
        c.quotas.max_session_events = 0;
        c.quotas.max_session_bytes = 8_000;
    })
    .await;
    let id = s.open_session(AGENT, "ops-bot").await;
    let refused = resolve_until_refused(&s, &id, 20).await;
    assert_error(&refused, 429, "quota_exceeded");
    let message = refused.1["message"].as_str().unwrap();
    assert!(message.contains("quotas.max_session_bytes"), "{message}");

    let (st, view) = s.get(Some(AGENT), &format!("/v1/sessions/{id}")).await;
    assert_eq!(st, 200, "{view}");
    let exported = s.export_ndjson(&id).await;
    let lines: usize = exported.split(|b| *b == b'\n').map(<[u8]>::len).sum();
    assert_eq!(view["stored_bytes"], lines as u64, "{view}");
    assert!(view["stored_bytes"].as_u64().unwrap() >= 8_000, "{view}");
    s.stop().await;
}
