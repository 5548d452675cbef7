//! Sessions and traces over HTTP: open, read, end; the chain as JSON and JSON Lines; verify.

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn session_lifecycle_is_traced_and_verifies() {
    let s = TestServer::start().await;
    let project = json!({"project_id": "proj-1", "name": "CI"});
    assert_eq!(s.post(Some(AGENT), "/v1/projects", &project).await.0, 201);
    let (st, body) = s
        .post(
            Some(AGENT),
            "/v1/sessions",
            &json!({"agent_id": "ops-bot", "goal": "triage CI", "project_id": "proj-1"}),
        )
        .await;
    assert_eq!(st, 201, "{body}");
    let id = body["session_id"].as_str().unwrap().to_owned();
    assert!(cra_wire::id::is_uuid_v7(&id));
    assert_eq!(body["agent_id"], "ops-bot");
    assert_eq!(body["status"], "active");
    assert_eq!(body["started_at"], "2026-03-02T10:00:00.000000Z");
    assert!(cra_relay::session::is_callsign(
        body["callsign"].as_str().unwrap()
    ));

    let (st, got) = s.get(Some(AGENT), &format!("/v1/sessions/{id}")).await;
    assert_eq!(st, 200);
    assert_eq!(got["goal"], "triage CI");
    assert_eq!(got["project_id"], "proj-1");
    assert_eq!(got["callsign"], body["callsign"]);
    assert_eq!(got["event_count"], 1);

    assert_eq!(
        s.delete(Some(AGENT), &format!("/v1/sessions/{id}")).await.0,
        204
    );
    assert_eq!(
        s.delete(Some(AGENT), &format!("/v1/sessions/{id}")).await.0,
        204,
        "idempotent"
    );
    assert_eq!(
        s.event_types(&id).await,
        ["session.started", "session.ended"]
    );
    let (_, got) = s.get(Some(AGENT), &format!("/v1/sessions/{id}")).await;
    assert_eq!(got["status"], "ended");

    let (st, v) = s
        .post(
            Some(AUDITOR),
            &format!("/v1/traces/{id}/verify"),
            &json!({}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(v["events"], 2);

    // JSON Lines form: one event per line, same events as the array.
    let resp = s
        .http
        .get(s.url(&format!("/v1/traces/{id}")))
        .bearer_auth(AUDITOR)
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    let text = resp.text().await.unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, s.events(&id).await);
    assert!(text.ends_with('\n'));
    // The offline verifier accepts the export byte for byte.
    let report = cra_trace::verify_text_reference(text.as_bytes(), true);
    assert!(report.is_valid(), "{:?}", report.findings);
    s.stop().await;
}

#[tokio::test]
async fn agents_open_sessions_only_for_themselves() {
    let s = TestServer::start().await;
    let r = s
        .post(
            Some(AGENT),
            "/v1/sessions",
            &json!({"agent_id": "someone-else", "goal": "x"}),
        )
        .await;
    assert_error(&r, 403, "identity_mismatch");
    assert_eq!(r.1["details"]["errors"][0]["pointer"], "/agent_id");
    let r = s
        .post(
            Some(AUDITOR),
            "/v1/sessions",
            &json!({"agent_id": "audrey", "goal": "x"}),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    // Admins may open a session for any agent.
    let r = s
        .post(
            Some(ADMIN),
            "/v1/sessions",
            &json!({"agent_id": "ops-bot", "goal": "x"}),
        )
        .await;
    assert_eq!(r.0, 201);
    assert_eq!(s.total_events(), 1, "refusals stored nothing");
    s.stop().await;
}

/// `GET /v1/traces` lists the chains the caller may read: an agent its own sessions, an auditor
/// every session; without a key, 401.
#[tokio::test]
async fn the_trace_list_shows_each_caller_what_it_may_read() {
    let s = TestServer::start().await;
    let mine = s.open_session(AGENT, "ops-bot").await;
    let theirs = s.open_session(AGENT2, "other-bot").await;
    let ids = |body: &serde_json::Value| -> Vec<String> {
        body.as_array()
            .unwrap()
            .iter()
            .map(|c| c["session_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (st, body) = s.get(Some(AGENT), "/v1/traces").await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(ids(&body), vec![mine.clone()]);
    assert_eq!(body[0]["agent_id"], "ops-bot");
    assert_eq!(body[0]["event_count"], 1);
    assert_eq!(body[0]["ended"], false);
    let (st, body) = s.get(Some(AGENT2), "/v1/traces").await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(ids(&body), vec![theirs.clone()]);
    let (st, body) = s.get(Some(AUDITOR), "/v1/traces").await;
    assert_eq!(st, 200, "{body}");
    let mut both = vec![mine, theirs];
    both.sort();
    assert_eq!(ids(&body), both);
    let got = s.get(None, "/v1/traces").await;
    assert_error(&got, 401, "unauthenticated");
    s.stop().await;
}

/// Issue 29, item 10: on `fda2190` a session could name any project id, another team's or none
/// at all, and ids cra records as itself could be claimed by a session.
#[tokio::test]
async fn a_session_names_only_a_project_its_opener_reads_and_no_reserved_agent() {
    let s = TestServer::start().await;
    let project = json!({"project_id": "proj-theirs", "name": "Theirs"});
    assert_eq!(s.post(Some(MAINT), "/v1/projects", &project).await.0, 201);
    let open = |project: &str| json!({"agent_id": "ops-bot", "goal": "g", "project_id": project});
    let foreign = s
        .post(Some(AGENT), "/v1/sessions", &open("proj-theirs"))
        .await;
    let unknown = s
        .post(Some(AGENT), "/v1/sessions", &open("proj-nowhere"))
        .await;
    for (got, id) in [(&foreign, "proj-theirs"), (&unknown, "proj-nowhere")] {
        assert_error(got, 404, "project_not_found");
        assert_eq!(got.1["details"]["errors"][0]["pointer"], "/project_id");
        let message = got.1["message"].as_str().unwrap().replace(id, "ID");
        let other = unknown.1["message"]
            .as_str()
            .unwrap()
            .replace("proj-nowhere", "ID");
        assert_eq!(message, other, "foreign and unknown answer alike");
    }
    let mine = json!({"agent_id": "maintainer-bot", "goal": "g", "project_id": "proj-theirs"});
    let member = s.post(Some(MAINT), "/v1/sessions", &mine).await;
    assert_eq!(
        member.0, 201,
        "the project's creator names it: {}",
        member.1
    );
    for reserved in ["project:proj-theirs", "cra-operator"] {
        let body = json!({"agent_id": reserved, "goal": "g"});
        let got = s.post(Some(ADMIN), "/v1/sessions", &body).await;
        assert_error(&got, 400, "invalid_request");
        assert!(
            got.1["message"]
                .as_str()
                .unwrap()
                .contains("records as itself"),
            "{}",
            got.1
        );
    }
    s.stop().await;
}

/// A session record marked ended without `session.ended` in its chain (a store an earlier
/// version wrote, stopped between the two writes it then made): ending it again appends the
/// event, once.
#[tokio::test]
async fn a_repeated_end_repairs_an_ended_record_whose_chain_never_ended() {
    let mut carp = None;
    let s = TestServer::start_hooked(|rt| carp = Some(rt.backends.carp.clone())).await;
    let carp = carp.unwrap();
    let sid = s.open_session(AGENT, "ops-bot").await;
    let id = sid.clone();
    tokio::task::spawn_blocking(move || carp.end_session(&id, "2026-03-02T10:00:00.000000Z"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.event_types(&sid).await, ["session.started"]);
    let path = format!("/v1/sessions/{sid}");
    assert_eq!(s.delete(Some(AGENT), &path).await.0, 204);
    assert_eq!(
        s.event_types(&sid).await,
        ["session.started", "session.ended"]
    );
    assert_eq!(s.delete(Some(AGENT), &path).await.0, 204);
    assert_eq!(s.event_types(&sid).await.len(), 2);
    let (st, v) = s.get(Some(AGENT), &path).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("ended")), "{v}");
}
