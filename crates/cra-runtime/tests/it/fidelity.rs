//! Spec fidelity, part A (issue 22): each defect the audit found has its test here, named for
//! the rule it holds. Every test talks to a real server over HTTP.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::support::*;

/// Writes an atlas `atlas_id` with one action `report.send` run by `executor`, allowed to
/// every agent.
fn write_atlas(root: &Path, atlas_id: &str, executor: &str) -> std::path::PathBuf {
    let dir = root.join(atlas_id);
    std::fs::create_dir_all(dir.join("actions")).unwrap();
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    let manifest = json!({
        "atlas_version": "1.0", "atlas_id": atlas_id, "version": "1.0.0",
        "name": atlas_id, "description": "An atlas of the executor-selection test.",
        "capabilities": [{"capability_id": "report", "name": "Report",
            "description": "Send reports.", "actions": ["report.send"]}]
    });
    let actions = json!([{
        "action_id": "report.send", "name": "Send a report", "description": "Sends a report.",
        "risk_tier": "low", "idempotent": false, "executor": executor,
        "parameters_schema": {"type": "object"}
    }]);
    let policies = json!([{"policy_id": "allow-all", "type": "allow", "actions": ["*"]}]);
    std::fs::write(dir.join("atlas.json"), manifest.to_string()).unwrap();
    std::fs::write(dir.join("actions/report.json"), actions.to_string()).unwrap();
    std::fs::write(dir.join("policies/allow.json"), policies.to_string()).unwrap();
    dir
}

fn resolve_in(agent: &str, session: &str, atlas: &str) -> Value {
    json!({
        "carp_version": "1.0", "request_id": rid(), "timestamp": "2026-03-02T10:00:00Z",
        "operation": "resolve", "requester": {"agent_id": agent, "session_id": session},
        "task": {"goal": "send the weekly report"}, "atlas_ids": [atlas]
    })
}

/// Resolves `atlas` in `sid` and executes `report.send` under that resolution.
async fn resolve_and_send(s: &TestServer, sid: &str, atlas: &str) -> Value {
    let (st, res) = s
        .post(
            Some(AGENT),
            "/v1/resolve",
            &resolve_in("ops-bot", sid, atlas),
        )
        .await;
    assert_eq!(st, 200, "{res}");
    let resolution_id = res["resolution_id"].as_str().unwrap();
    let exec = execute_request(
        "ops-bot",
        sid,
        &rid(),
        resolution_id,
        "report.send",
        json!({}),
    );
    let (st, body) = s.post(Some(AGENT), "/v1/execute", &exec).await;
    assert_eq!(st, 200, "{body}");
    body
}

/// A.1: two atlases offer one action id with different executors; an execute runs the executor
/// of the atlas its resolution took the action from, in both directions.
#[tokio::test]
async fn an_execute_runs_the_executor_of_the_atlas_its_resolution_chose() {
    let atlases = tempfile::tempdir().unwrap();
    let alpha = write_atlas(atlases.path(), "test.alpha", "http:alpha");
    let beta = write_atlas(atlases.path(), "test.beta", "http:beta");
    let (alpha_url, alpha_calls) = executor_endpoint().await;
    let (beta_url, beta_calls) = executor_endpoint().await;
    let s = TestServer::start_with(move |c| {
        c.atlases = vec![alpha, beta];
        for (name, url) in [("alpha", alpha_url), ("beta", beta_url)] {
            c.executors.insert(
                name.into(),
                cra_runtime::config::ExecutorConfig::http(url, 5_000),
            );
        }
    })
    .await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let calls = |a: &Arc<AtomicU64>, b: &Arc<AtomicU64>| {
        (a.load(Ordering::SeqCst), b.load(Ordering::SeqCst))
    };

    resolve_and_send(&s, &sid, "test.beta").await;
    assert_eq!(
        calls(&alpha_calls, &beta_calls),
        (0, 1),
        "beta's resolution"
    );
    resolve_and_send(&s, &sid, "test.alpha").await;
    assert_eq!(
        calls(&alpha_calls, &beta_calls),
        (1, 1),
        "alpha's resolution"
    );

    let executed: Vec<Value> = s
        .events(&sid)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "action.executed")
        .map(|e| e["payload"]["executor"].clone())
        .collect();
    assert_eq!(executed, [json!("http:beta"), json!("http:alpha")]);
    s.stop().await;
}

/// Resolves the github-ops maintenance capability as the maintainer: merges need approval.
async fn resolve_gated(s: &TestServer, sid: &str) -> Value {
    let req = resolve_request("maintainer-bot", sid, &rid(), &["repo-read", "maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    assert_eq!(res["decision"]["type"], "requires_approval", "{res}");
    res
}

/// A.3: a decision on an approval whose session has ended is refused (403 `session_inactive`)
/// and changes nothing: the approval stays undecided in the store, no event is written, and
/// the session's end names the approvals that lapsed with it.
#[tokio::test]
async fn a_refused_approval_decision_changes_nothing() {
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let res = resolve_gated(&s, &sid).await;
    let approval_id = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    let (st, _) = s.delete(Some(MAINT), &format!("/v1/sessions/{sid}")).await;
    assert_eq!(st, 204);
    let events_before = s.events(&sid).await;

    for decision in ["grant", "reject"] {
        let got = s
            .post(
                Some(OPERATOR),
                &format!("/v1/approvals/{approval_id}"),
                &json!({"decision": decision}),
            )
            .await;
        assert_error(&got, 403, "session_inactive");
    }
    let store = s.server.as_ref().unwrap().state.backends.carp.clone();
    let stored = store.get_approval(&approval_id).unwrap().unwrap();
    assert_eq!(
        stored.status,
        cra_carp::store::ApprovalStatus::Pending,
        "the refusal changed the store"
    );
    assert!(stored.decided_by.is_none());
    assert_eq!(s.events(&sid).await, events_before, "no event was written");
    let end = events_before.last().unwrap();
    assert_eq!(end["event_type"], "session.ended");
    assert_eq!(end["payload"]["lapsed_approvals"], json!([approval_id]));
    let (st, pending) = s.get(Some(OPERATOR), "/v1/approvals").await;
    assert_eq!(st, 200);
    assert_eq!(
        pending,
        json!([]),
        "a lapsed approval is not listed as pending"
    );
    s.stop().await;
}

/// A.5: a resolution executes only in the session it was made in: not in another session of
/// the same agent, whether its own session is still open or has ended.
#[tokio::test]
async fn a_resolution_is_usable_only_in_its_own_session() {
    let (s, calls) = start_with_executor().await;
    let first = s.open_session(AGENT, "ops-bot").await;
    let second = s.open_session(AGENT, "ops-bot").await;
    let (st, res) = s
        .post(
            Some(AGENT),
            "/v1/resolve",
            &resolve_request("ops-bot", &first, &rid(), &["repo-read"]),
        )
        .await;
    assert_eq!(st, 200, "{res}");
    let resolution_id = res["resolution_id"].as_str().unwrap().to_owned();
    let params = json!({"owner": "o", "repo": "r"});
    let elsewhere = || {
        execute_request(
            "ops-bot",
            &second,
            &rid(),
            &resolution_id,
            "repo.get",
            params.clone(),
        )
    };

    let got = s.post(Some(AGENT), "/v1/execute", &elsewhere()).await;
    assert_refused(&got, 403, "session_mismatch");
    assert_eq!(
        got.1["error"]["details"]["errors"][0]["pointer"],
        "/execution/resolution_id"
    );
    let (st, _) = s
        .delete(Some(AGENT), &format!("/v1/sessions/{first}"))
        .await;
    assert_eq!(st, 204);
    let got = s.post(Some(AGENT), "/v1/execute", &elsewhere()).await;
    assert_refused(&got, 403, "session_mismatch");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no executor ran");

    // Both refusals are recorded in the session that asked, as refused attempts.
    let types = s.event_types(&second).await;
    let denied = types.iter().filter(|t| *t == "action.denied").count();
    assert_eq!(denied, 2, "{types:?}");
    assert!(!types.iter().any(|t| t == "action.approved"), "{types:?}");
    s.stop().await;
}

/// A.5: `requester.parent_session_id`, when given, must be the parent the session was opened
/// with; a session opened without a parent accepts no claimed parent.
#[tokio::test]
async fn parent_session_id_must_be_the_sessions_parent() {
    let s = TestServer::start().await;
    let parent = s.open_session(AGENT, "ops-bot").await;
    let stranger = s.open_session(AGENT, "ops-bot").await;
    let (st, child) = s
        .post(
            Some(AGENT),
            "/v1/sessions",
            &json!({"agent_id": "ops-bot", "goal": "a nested task", "parent_session_id": parent}),
        )
        .await;
    assert_eq!(st, 201, "{child}");
    let child = child["session_id"].as_str().unwrap().to_owned();
    let claiming = |session: &str, claimed: Option<&str>| {
        let mut req = resolve_request("ops-bot", session, &rid(), &["repo-read"]);
        if let Some(p) = claimed {
            req["requester"]["parent_session_id"] = json!(p);
        }
        req
    };

    for (session, claimed, ok) in [
        (&child, Some(parent.as_str()), true),
        (&child, None, true),
        (&child, Some(stranger.as_str()), false),
        (&parent, Some(stranger.as_str()), false),
    ] {
        let got = s
            .post(Some(AGENT), "/v1/resolve", &claiming(session, claimed))
            .await;
        if ok {
            assert_eq!(got.0, 200, "{claimed:?}: {}", got.1);
        } else {
            assert_error(&got, 403, "session_mismatch");
            assert_eq!(
                got.1["details"]["errors"][0]["pointer"],
                "/requester/parent_session_id"
            );
        }
    }
    s.stop().await;
}

/// A.6: required capabilities that no candidate atlas declares are named in the decision's
/// reason and keep it from `allow` (`partial` when something is allowed, else `deny`).
#[tokio::test]
async fn unknown_required_capabilities_are_named_and_never_allow() {
    let s = TestServer::start().await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let decide = |caps: &'static [&'static str]| {
        let req = resolve_request("ops-bot", &sid, &rid(), caps);
        let s = &s;
        async move {
            let (st, res) = s.post(Some(AGENT), "/v1/resolve", &req).await;
            assert_eq!(st, 200, "{res}");
            res["decision"].clone()
        }
    };

    let known = decide(&["repo-read"]).await;
    assert_eq!(known["type"], "allow", "{known}");
    let mixed = decide(&["repo-read", "teleport"]).await;
    assert_eq!(mixed["type"], "partial", "{mixed}");
    let reason = mixed["reason"].as_str().unwrap();
    assert!(reason.contains("`teleport`"), "{reason}");
    assert!(!reason.contains("repo-read"), "{reason}");
    let only = decide(&["teleport", "levitate"]).await;
    assert_eq!(only["type"], "deny", "{only}");
    let reason = only["reason"].as_str().unwrap();
    assert!(reason.contains("`teleport`, `levitate`"), "{reason}");
    s.stop().await;
}

/// B.10: `operation: "validate"` on `POST /v1/resolve` is a recorded dry run: the request and
/// one completion marked `dry_run`, no approval opened, and a resolution id that cannot be
/// executed.
#[tokio::test]
async fn validate_is_a_recorded_dry_run() {
    let (s, calls) = start_with_executor().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let mut req = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    req["operation"] = json!("validate");
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    assert_eq!(res["decision"]["type"], "requires_approval", "{res}");

    let events = s.events(&sid).await;
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "session.started",
            "carp.request.received",
            "carp.resolution.completed"
        ]
    );
    assert_eq!(events[1]["payload"]["operation"], "validate");
    assert_eq!(events[2]["payload"]["dry_run"], true);
    assert_eq!(events[2]["payload"]["resolution"], res);
    let (st, pending) = s.get(Some(OPERATOR), "/v1/approvals").await;
    assert_eq!(st, 200);
    assert_eq!(pending, json!([]), "a dry run opens no approval");

    let resolution_id = res["resolution_id"].as_str().unwrap();
    let params = json!({"owner": "o", "repo": "r"});
    let exec = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        resolution_id,
        "repo.get",
        params,
    );
    assert_refused(
        &s.post(Some(MAINT), "/v1/execute", &exec).await,
        404,
        "resolution_not_found",
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The request id was used: a second validate with it is a duplicate.
    assert_error(
        &s.post(Some(MAINT), "/v1/resolve", &req).await,
        409,
        "duplicate_request_id",
    );
    s.stop().await;
}

/// B.8: an identical resolve inside the ttl is answered by the earlier resolution, under its id,
/// and recorded in that resolution's trace as `carp.request.received` + `carp.resolution.cached`
/// in a span of its own; every event meets the event schema, and the session replays identical.
#[tokio::test]
async fn an_identical_resolve_is_answered_from_the_cache_and_replays_identical() {
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let first = resolve_gated(&s, &sid).await;
    let before = s.events(&sid).await.len();
    let again = resolve_gated(&s, &sid).await;
    assert_eq!(again, first, "the cached answer is the earlier resolution");

    let events = s.events(&sid).await;
    let added: Vec<&Value> = events[before..].iter().collect();
    let types: Vec<&str> = added
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["carp.request.received", "carp.resolution.cached"]);
    for e in &added {
        assert_eq!(
            e["trace_id"], first["trace_id"],
            "in the resolution's trace"
        );
        assert_eq!(e["parent_span_id"], first["resolution_id"]);
        assert_ne!(e["span_id"], first["resolution_id"], "a span of its own");
    }
    assert_eq!(
        added[1]["payload"],
        json!({"resolution_id": first["resolution_id"], "cache_hit": true})
    );
    for e in &events {
        let errors = cra_carp::events::event_schema_errors(e);
        assert!(errors.is_empty(), "{errors:?}\n{e}");
    }
    let (st, replay) = s
        .post(
            Some(MAINT),
            "/v1/conformance/eval/replay",
            &json!({"session_id": sid}),
        )
        .await;
    assert_eq!(st, 200, "{replay}");
    assert_eq!(replay["identical"], true, "{replay}");
    assert_eq!(replay["resolutions"], 2, "{replay}");
    let (st, approvals) = s.get(Some(OPERATOR), "/v1/approvals").await;
    assert_eq!(st, 200);
    assert_eq!(
        approvals.as_array().unwrap().len(),
        0,
        "a resolve opens no approval, and neither does a cache hit"
    );
    s.stop().await;
}

/// B.8: with `resolution_cache_entries = 0` every resolve is a fresh resolution.
#[tokio::test]
async fn a_server_without_a_resolution_cache_resolves_every_request_afresh() {
    let s = TestServer::start_with(|c| c.resolution_cache_entries = 0).await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let first = resolve_gated(&s, &sid).await;
    let again = resolve_gated(&s, &sid).await;
    assert_ne!(again["resolution_id"], first["resolution_id"]);
    let types = s.event_types(&sid).await;
    assert!(!types.iter().any(|t| t == "carp.resolution.cached"));
    s.stop().await;
}
