//! The authorisation matrix: every role against every route, on the owner's session and on
//! another agent's, with the expected status for each cell. Stream cells without an Upgrade
//! header answer 400 once access is granted (the upgrade is checked after access), 403 otherwise.

use serde_json::json;

use crate::support::*;

/// Columns: no key, owner agent, other agent, author, auditor, operator, admin.
const KEYS: [Option<&str>; 7] = [
    None,
    Some(MAINT),
    Some(AGENT2),
    Some(AUTHOR),
    Some(AUDITOR),
    Some(OPERATOR),
    Some(ADMIN),
];
const NAMES: [&str; 7] = [
    "none",
    "owner",
    "other-agent",
    "author",
    "auditor",
    "operator",
    "admin",
];

/// One matrix row: label, method, path, body, and the expected status for each caller column.
type Row = (
    &'static str,
    &'static str,
    String,
    Option<serde_json::Value>,
    [u16; 7],
);

#[tokio::test]
async fn every_role_on_every_route() {
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let unknown = "01890000-0000-7000-8000-000000000000";

    // (label, method, path, body, expected per column)
    let mut rows: Vec<Row> = vec![
        (
            "health",
            "GET",
            "/v1/health".into(),
            None,
            [200, 200, 200, 200, 200, 200, 200],
        ),
        (
            "liveness",
            "GET",
            "/v1/health/live".into(),
            None,
            [200, 200, 200, 200, 200, 200, 200],
        ),
        (
            "readiness",
            "GET",
            "/v1/health/ready".into(),
            None,
            [200, 200, 200, 200, 200, 200, 200],
        ),
        (
            "conformance",
            "GET",
            "/v1/conformance".into(),
            None,
            [200, 200, 200, 200, 200, 200, 200],
        ),
        (
            "metrics",
            "GET",
            "/metrics".into(),
            None,
            [401, 403, 403, 403, 200, 200, 200],
        ),
        (
            "backup",
            "GET",
            "/v1/backup".into(),
            None,
            [401, 403, 403, 403, 403, 403, 200],
        ),
        (
            "atlases",
            "GET",
            "/v1/atlases".into(),
            None,
            [401, 200, 200, 200, 200, 200, 200],
        ),
        (
            "atlas",
            "GET",
            "/v1/atlases/dev.cra.github-ops".into(),
            None,
            [401, 200, 200, 200, 200, 200, 200],
        ),
        (
            "get own/other session",
            "GET",
            format!("/v1/sessions/{sid}"),
            None,
            [401, 200, 403, 403, 200, 200, 200],
        ),
        (
            "get trace",
            "GET",
            format!("/v1/traces/{sid}"),
            None,
            [401, 200, 403, 403, 200, 200, 200],
        ),
        (
            "verify trace",
            "POST",
            format!("/v1/traces/{sid}/verify"),
            Some(json!({})),
            [401, 200, 403, 403, 200, 200, 200],
        ),
        (
            "stream session",
            "GET",
            format!("/v1/traces/stream?session_id={sid}"),
            None,
            [401, 400, 403, 403, 400, 400, 400],
        ),
        (
            "stream all",
            "GET",
            "/v1/traces/stream?all=true".into(),
            None,
            [401, 403, 403, 403, 403, 400, 400],
        ),
        (
            "list approvals",
            "GET",
            "/v1/approvals?status=pending".into(),
            None,
            [401, 403, 403, 403, 200, 200, 200],
        ),
        (
            "decide approval",
            "POST",
            format!("/v1/approvals/{unknown}"),
            Some(json!({"decision": "grant"})),
            [401, 403, 403, 403, 403, 404, 404],
        ),
        (
            "open session for maintainer-bot",
            "POST",
            "/v1/sessions".into(),
            Some(json!({"agent_id": "maintainer-bot", "goal": "g"})),
            [401, 201, 403, 403, 403, 403, 201],
        ),
    ];
    // Resolve in the owner's session: only the owner; everyone else is refused before anything
    // is recorded (identity mismatch, or no agent role).
    for (i, key) in KEYS.iter().enumerate() {
        let body = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read"]);
        let got = match key {
            Some(k) => s.post(Some(k), "/v1/resolve", &body).await,
            None => s.post(None, "/v1/resolve", &body).await,
        };
        let want = [401, 200, 403, 403, 403, 403, 403][i];
        assert_eq!(got.0, want, "resolve as {}: {}", NAMES[i], got.1);
    }
    for (label, method, path, body, want) in rows.drain(..) {
        for (i, key) in KEYS.iter().enumerate() {
            let got = match (method, &body) {
                ("GET", _) => s.get(*key, &path).await,
                (_, Some(b)) => s.post(*key, &path, b).await,
                _ => s.post(*key, &path, &json!({})).await,
            };
            assert_eq!(got.0, want[i], "{label} as {}: {}", NAMES[i], got.1);
            if got.0 >= 400 {
                assert!(
                    got.1["error"].is_string(),
                    "{label} as {}: error body {}",
                    NAMES[i],
                    got.1
                );
            }
        }
    }
    // Ending a session: the owner, operators and admins; each cell on a fresh session.
    for (i, key) in KEYS.iter().enumerate() {
        let fresh = s.open_session(MAINT, "maintainer-bot").await;
        let got = s.delete(*key, &format!("/v1/sessions/{fresh}")).await;
        let want = [401, 204, 403, 403, 403, 204, 204][i];
        assert_eq!(got.0, want, "end session as {}: {}", NAMES[i], got.1);
    }
    s.stop().await;
}

/// Events in every chain, per session (what a refused request must leave unchanged).
async fn chain_lengths(s: &TestServer, sids: &[&str]) -> Vec<usize> {
    let mut out = Vec::new();
    for sid in sids {
        out.push(s.events(sid).await.len());
    }
    out
}

#[tokio::test]
async fn an_agent_cannot_read_or_write_another_agents_session_trace_or_approval() {
    let (s, calls) = start_with_executor().await;
    let mine = s.open_session(AGENT, "ops-bot").await;
    let theirs = s.open_session(AGENT2, "other-bot").await;
    let maint = s.open_session(MAINT, "maintainer-bot").await;
    // The maintainer's resolve asks for an approval (merges are confirmed).
    let (st, res) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &maint, &rid(), &["repo-read", "maintain"]),
        )
        .await;
    assert_eq!(st, 200, "{res}");
    let resolution = res["resolution_id"].as_str().unwrap().to_owned();
    let approval = s
        .ask_merge_approval(MAINT, "maintainer-bot", &maint, &res)
        .await;
    let before = chain_lengths(&s, &[&mine, &theirs, &maint]).await;
    let total = s.total_events();

    // Reads of another agent's session and trace, in every form.
    for path in [
        format!("/v1/sessions/{mine}"),
        format!("/v1/traces/{mine}"),
        format!("/v1/sessions/{maint}"),
        format!("/v1/traces/{maint}"),
    ] {
        assert_error(&s.get(Some(AGENT2), &path).await, 403, "forbidden");
    }
    let ndjson = s
        .http
        .get(s.url(&format!("/v1/traces/{mine}")))
        .bearer_auth(AGENT2)
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(ndjson.status().as_u16(), 403);
    assert_error(
        &s.post(
            Some(AGENT2),
            &format!("/v1/traces/{mine}/verify"),
            &json!({}),
        )
        .await,
        403,
        "forbidden",
    );
    // Writes: end it, open a child of it, resolve or execute in it (as itself or posing as the
    // owner), execute in its own session under the other agent's resolution.
    assert_error(
        &s.delete(Some(AGENT2), &format!("/v1/sessions/{mine}"))
            .await,
        403,
        "forbidden",
    );
    assert_error(
        &s.post(
            Some(AGENT2),
            "/v1/sessions",
            &json!({"agent_id": "other-bot", "goal": "g", "parent_session_id": mine}),
        )
        .await,
        403,
        "forbidden",
    );
    assert_error(
        &s.post(
            Some(AGENT2),
            "/v1/sessions",
            &json!({"agent_id": "ops-bot", "goal": "g"}),
        )
        .await,
        403,
        "identity_mismatch",
    );
    let posing = resolve_request("ops-bot", &mine, &rid(), &["repo-read"]);
    assert_error(
        &s.post(Some(AGENT2), "/v1/resolve", &posing).await,
        403,
        "identity_mismatch",
    );
    let into_theirs = resolve_request("other-bot", &mine, &rid(), &["repo-read"]);
    let got = s.post(Some(AGENT2), "/v1/resolve", &into_theirs).await;
    assert_eq!(got.0, 403, "{}", got.1);
    let exec_in_theirs = execute_request(
        "other-bot",
        &maint,
        &rid(),
        &resolution,
        "repo.get",
        json!({"owner": "o", "repo": "r"}),
    );
    let got = s.post(Some(AGENT2), "/v1/execute", &exec_in_theirs).await;
    assert_eq!(got.0, 403, "{}", got.1);
    let foreign_resolution = execute_request(
        "other-bot",
        &theirs,
        &rid(),
        &resolution,
        "repo.get",
        json!({"owner": "o", "repo": "r"}),
    );
    let got = s
        .post(Some(AGENT2), "/v1/execute", &foreign_resolution)
        .await;
    assert!(
        (400..500).contains(&got.0),
        "another agent's resolution must not authorise anything: {} {}",
        got.0,
        got.1
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Approvals: agents neither list nor decide them, not even the agent that asked.
    for key in [AGENT2, MAINT] {
        assert_error(
            &s.get(Some(key), "/v1/approvals?status=pending").await,
            403,
            "forbidden",
        );
        assert_error(
            &s.post(
                Some(key),
                &format!("/v1/approvals/{approval}"),
                &json!({"decision": "grant"}),
            )
            .await,
            403,
            "forbidden",
        );
    }
    assert_error(
        &s.post(
            Some(AUDITOR),
            &format!("/v1/approvals/{approval}"),
            &json!({"decision": "grant"}),
        )
        .await,
        403,
        "forbidden",
    );
    let (_, pending) = s.get(Some(OPERATOR), "/v1/approvals?status=pending").await;
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["approval_id"] == approval.as_str()),
        "still pending: {pending}"
    );
    // Nothing was written into the other agents' chains. (The refused resolve and execute in the
    // caller's own session are recorded there, which is its own chain.)
    let after = chain_lengths(&s, &[&mine, &theirs, &maint]).await;
    assert_eq!(after[0], before[0], "the victim's chain");
    assert_eq!(after[2], before[2], "the maintainer's chain");
    assert_eq!(s.total_events() - total, (after[1] - before[1]) as u64);
    s.stop().await;
}

#[tokio::test]
async fn relay_projects_refuse_every_route_to_an_agent_without_a_grant() {
    let s = TestServer::start().await;
    let (st, p) = s
        .post(
            Some(MAINT),
            "/v1/projects",
            &json!({"project_id": "proj-g", "name": "G", "members": ["ops-bot"]}),
        )
        .await;
    assert_eq!(st, 201, "{p}");
    let audit = p["audit_session_id"].as_str().unwrap().to_owned();
    let mut pkg = crate::relay::package("pkg_g1", "proj-g", "maintainer-bot", None);
    pkg["status"] = json!("draft");
    assert_eq!(
        s.post(Some(MAINT), "/v1/projects/proj-g/packages", &pkg)
            .await
            .0,
        201
    );
    let fact = json!({"subject": "svc", "predicate": "owner", "value": "team-a"});
    assert_eq!(
        s.post(Some(MAINT), "/v1/projects/proj-g/facts", &fact)
            .await
            .0,
        201
    );
    let audit_len = s.events(&audit).await.len();

    let intruder_pkg = crate::relay::package("pkg_g2", "proj-g", "other-bot", None);
    let member_pkg = crate::relay::package("pkg_g3", "proj-g", "ops-bot", None);
    // (method, path, body, member's status, auditor's status)
    let routes: Vec<(&str, &str, Option<serde_json::Value>, u16, u16)> = vec![
        ("GET", "/v1/projects/proj-g", None, 200, 200),
        ("GET", "/v1/projects/proj-g/packages", None, 200, 200),
        (
            "GET",
            "/v1/projects/proj-g/packages?status=awaiting_review",
            None,
            200,
            200,
        ),
        ("GET", "/v1/packages/pkg_g1", None, 200, 200),
        (
            "GET",
            "/v1/projects/proj-g/facts?subject=svc",
            None,
            200,
            200,
        ),
        (
            "GET",
            "/v1/projects/proj-g/facts?history=true",
            None,
            200,
            200,
        ),
        ("GET", "/v1/projects/proj-g/orient", None, 200, 200),
        ("GET", "/v1/orchestrate?project=proj-g", None, 200, 200),
        (
            "POST",
            "/v1/projects/proj-g/packages",
            Some(intruder_pkg.clone()),
            403,
            403,
        ),
        (
            "POST",
            "/v1/projects/proj-g/facts",
            Some(json!({"subject": "svc", "predicate": "owner", "value": "intruder"})),
            201,
            403,
        ),
        (
            "POST",
            "/v1/packages/pkg_g1/flag",
            Some(json!({"review_type": "agent"})),
            200,
            403,
        ),
        (
            "POST",
            "/v1/packages/pkg_g1/review",
            Some(json!({"outcome": "complete"})),
            200,
            403,
        ),
        (
            "DELETE",
            "/v1/projects/proj-g/facts?subject=svc&predicate=owner",
            None,
            200,
            403,
        ),
        (
            "POST",
            "/v1/projects/proj-g/archive",
            Some(json!({})),
            200,
            403,
        ),
        (
            "POST",
            "/v1/projects/proj-g/unarchive",
            Some(json!({})),
            200,
            403,
        ),
    ];
    let call =
        |key: &'static str, method: &'static str, path: String, body: Option<serde_json::Value>| {
            let s = &s;
            async move {
                let path = path.as_str();
                match (method, body) {
                    ("GET", _) => s.get(Some(key), path).await,
                    ("DELETE", _) => s.delete(Some(key), path).await,
                    (_, Some(b)) => s.post(Some(key), path, &b).await,
                    (_, None) => s.post(Some(key), path, &json!({})).await,
                }
            }
        };
    // The intruder first: every route refused, nothing recorded or stored. A route that names
    // a package by its id alone answers as for an id no project holds (issue 29, item 10: on
    // `fda2190` the 403 told an intruder which ids exist).
    for (method, path, body, _, _) in &routes {
        let got = call(AGENT2, method, path.to_string(), body.clone()).await;
        if path.starts_with("/v1/packages/") {
            let unknown = path.replace("pkg_g1", "pkg_nowhere");
            let none = call(AGENT2, method, unknown, body.clone()).await;
            assert_error(&got, 404, "package_not_found");
            assert_eq!(
                got.1["message"]
                    .as_str()
                    .unwrap()
                    .replace("pkg_g1", "pkg_nowhere"),
                none.1["message"].as_str().unwrap(),
                "{method} {path}: foreign and unknown ids answer alike"
            );
            continue;
        }
        assert_error(&got, 403, "unauthorized");
        assert!(
            got.1["message"].as_str().unwrap().contains("other-bot"),
            "{method} {path}: {}",
            got.1
        );
    }
    // Orchestrate without a project covers every project the caller may read (Relay
    // errata): for the intruder, none of them.
    let (st, digest) = s.get(Some(AGENT2), "/v1/orchestrate").await;
    assert_eq!(st, 200, "{digest}");
    assert_eq!(digest["projects"], json!([]), "{digest}");
    assert_eq!(digest["activity"]["packages"], 0, "{digest}");
    assert_eq!(s.events(&audit).await.len(), audit_len);
    assert_eq!(s.get(Some(ADMIN), "/v1/packages/pkg_g2").await.0, 404);
    let (_, facts) = s
        .get(Some(ADMIN), "/v1/projects/proj-g/facts?history=true")
        .await;
    assert_eq!(facts.as_array().unwrap().len(), 1, "{facts}");
    // The auditor reads everything and writes nothing.
    for (method, path, body, _, auditor) in &routes {
        let got = call(AUDITOR, method, path.to_string(), body.clone()).await;
        assert_eq!(got.0, *auditor, "auditor {method} {path}: {}", got.1);
    }
    assert_eq!(s.events(&audit).await.len(), audit_len);
    // The member listed at creation may do what the creator may (positive control).
    for (method, path, body, member, _) in &routes {
        let body = match *path {
            "/v1/projects/proj-g/packages" if *method == "POST" => Some(member_pkg.clone()),
            _ => body.clone(),
        };
        let want = if *method == "POST" && *path == "/v1/projects/proj-g/packages" {
            201
        } else {
            *member
        };
        let got = call(AGENT, method, path.to_string(), body).await;
        assert_eq!(got.0, want, "member {method} {path}: {}", got.1);
    }
    // The member's orchestrate without a project covers the project it may read.
    let (st, digest) = s.get(Some(AGENT), "/v1/orchestrate").await;
    assert_eq!(st, 200, "{digest}");
    let covered: Vec<&str> = digest["projects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["project_id"].as_str())
        .collect();
    assert!(covered.contains(&"proj-g"), "{digest}");
    s.stop().await;
}

/// Upgrades (or fails to) with `key` and returns the HTTP status of a refused handshake.
async fn ws_refusal(s: &TestServer, key: Option<&str>, query: &str) -> u16 {
    ws_refusal_at(&s.ws_url(query), key).await
}

/// The HTTP status of a refused WebSocket handshake at `url`.
async fn ws_refusal_at(url: &str, key: Option<&str>) -> u16 {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request().unwrap();
    if let Some(k) = key {
        req.headers_mut()
            .insert("authorization", format!("Bearer {k}").parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Ok(_) => panic!("{url}: the upgrade was accepted"),
        Err(e) => panic!("{url}: {e}"),
    }
}

#[tokio::test]
async fn websocket_streams_refuse_foreign_sessions_and_never_leak_foreign_events() {
    let s = TestServer::start().await;
    let mine = s.open_session(AGENT, "ops-bot").await;
    let theirs = s.open_session(AGENT2, "other-bot").await;
    let (_, p) = s
        .post(
            Some(AGENT),
            "/v1/projects",
            &json!({"project_id": "proj-w", "name": "W"}),
        )
        .await;
    let audit = p["audit_session_id"].as_str().unwrap().to_owned();
    // Refused handshakes: another agent's session (also resuming mid-chain), a project's audit
    // chain (even for its creator: auditors read those), the operator stream for anyone but
    // operators and admins, no credentials, a key in the query string instead of the header.
    assert_eq!(
        ws_refusal(&s, Some(AGENT2), &format!("session_id={mine}")).await,
        403
    );
    assert_eq!(
        ws_refusal(&s, Some(AGENT2), &format!("session_id={mine}&since_seq=1")).await,
        403
    );
    assert_eq!(
        ws_refusal(&s, Some(AGENT), &format!("session_id={audit}")).await,
        403
    );
    assert_eq!(
        ws_refusal(&s, Some(AUTHOR), &format!("session_id={mine}")).await,
        403
    );
    for key in [AGENT, AGENT2, AUTHOR, AUDITOR, MAINT] {
        assert_eq!(ws_refusal(&s, Some(key), "all=true").await, 403, "{key}");
        assert_eq!(
            ws_refusal(&s, Some(key), "all=true&agent=ops-bot").await,
            403,
            "{key}"
        );
    }
    assert_eq!(
        ws_refusal(&s, None, &format!("session_id={mine}")).await,
        401
    );
    assert_eq!(
        ws_refusal(&s, None, &format!("session_id={mine}&token={AGENT}")).await,
        401
    );

    // Accepted: the other agent on its own session, the operator on everything.
    let mut own = crate::stream::connect(&s, AGENT2, &format!("session_id={theirs}")).await;
    let mut all = crate::stream::connect(&s, OPERATOR, "all=true").await;
    // Activity in the victim's session while both streams are open.
    for _ in 0..2 {
        let (st, b) = s
            .post(
                Some(AGENT),
                "/v1/resolve",
                &resolve_request("ops-bot", &mine, &rid(), &["repo-read"]),
            )
            .await;
        assert_eq!(st, 200, "{b}");
    }
    let victim_events = s.events(&mine).await.len() - 1;
    // Then the stream's own session ends, which closes its stream after session.ended.
    assert_eq!(
        s.delete(Some(AGENT2), &format!("/v1/sessions/{theirs}"))
            .await
            .0,
        204
    );
    let mut got = Vec::new();
    loop {
        match crate::stream::next_event(&mut own).await {
            Ok(e) => got.push(e),
            Err((code, _)) => {
                assert_eq!(code, 1000);
                break;
            }
        }
    }
    let types: Vec<&str> = got
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["session.started", "session.ended"], "{got:?}");
    assert!(got.iter().all(|e| e["session_id"] == theirs.as_str()));
    // The operator saw the victim's events live (the control that they were published).
    let mut seen_victim = 0;
    while seen_victim < victim_events {
        let e = crate::stream::next_event(&mut all).await.unwrap();
        if e["session_id"] == mine.as_str() {
            seen_victim += 1;
        }
    }
    s.stop().await;
}

// ---- JWTs over HTTP ---------------------------------------------------------------------------

const JWT_SECRET: &str = "crash-test-hs256-secret-0123456789abcdef";
/// A test-only RSA key pair (generated with openssl for these tests; it protects nothing).
const RSA_PRIVATE: &str = include_str!("fixtures/jwt-rs256-private.pem");
const RSA_PUBLIC_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/fixtures/jwt-rs256-public.pem"
);

fn unix_now() -> i64 {
    // JWT expiry is checked against the operating system's clock (specs/SECURITY.md).
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn claims(exp: i64) -> serde_json::Value {
    json!({"sub": "jwt-bot", "roles": ["agent"], "actor_type": "agent", "exp": exp})
}

fn hs(alg: jsonwebtoken::Algorithm, secret: &[u8], claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(alg),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret),
    )
    .unwrap()
}

fn rs(claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        claims,
        &jsonwebtoken::EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// An unsigned token (`alg: none`) with `claims`.
fn unsigned(claims: &serde_json::Value) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none","typ":"JWT"}"#),
        b64.encode(claims.to_string())
    )
}

/// The same token with its signature's last character changed.
fn bad_signature(token: &str) -> String {
    let mut t = token.to_owned();
    let last = t.pop().unwrap();
    t.push(if last == 'A' { 'B' } else { 'A' });
    t
}

async fn status_with(s: &TestServer, token: &str) -> (u16, serde_json::Value) {
    send(
        s.http
            .get(s.url("/v1/atlases"))
            .header("authorization", format!("Bearer {token}")),
    )
    .await
}

#[tokio::test]
async fn jwts_with_none_wrong_algorithms_bad_signatures_or_outside_their_validity_are_refused() {
    let now = unix_now();
    let hs_server = TestServer::start_with(|c| {
        c.jwt = Some(cra_runtime::config::JwtConfig {
            algorithm: "HS256".into(),
            secret: Some(JWT_SECRET.into()),
            secret_file: None,
            public_key_file: None,
            issuer: None,
            audience: None,
        });
    })
    .await;
    let rs_server = TestServer::start_with(|c| {
        c.jwt = Some(cra_runtime::config::JwtConfig {
            algorithm: "RS256".into(),
            secret: None,
            secret_file: None,
            public_key_file: Some(RSA_PUBLIC_FILE.into()),
            issuer: None,
            audience: None,
        });
    })
    .await;
    let secret = JWT_SECRET.as_bytes();
    let good = claims(now + 600);
    let expired = claims(now - 60);
    let mut not_yet = claims(now + 1200);
    not_yet["nbf"] = json!(now + 600);
    let no_exp = json!({"sub": "jwt-bot", "roles": ["agent"]});

    // Positive controls: each server accepts its own algorithm, and the actor is the subject.
    let (st, _) = status_with(
        &hs_server,
        &hs(jsonwebtoken::Algorithm::HS256, secret, &good),
    )
    .await;
    assert_eq!(st, 200);
    let (st, _) = status_with(&rs_server, &rs(&good)).await;
    assert_eq!(st, 200);
    let sid = {
        let t = rs(&good);
        let (st, b) = send(
            rs_server
                .http
                .post(rs_server.url("/v1/sessions"))
                .header("authorization", format!("Bearer {t}"))
                .header("content-type", "application/json")
                .body(json!({"agent_id": "jwt-bot", "goal": "g"}).to_string()),
        )
        .await;
        assert_eq!(st, 201, "{b}");
        b["session_id"].as_str().unwrap().to_owned()
    };
    assert!(!sid.is_empty());

    let public_pem = std::fs::read(RSA_PUBLIC_FILE).unwrap();
    let hs_refused: Vec<(&str, String)> = vec![
        ("alg none", unsigned(&good)),
        ("RS256 to an HS256 server", rs(&good)),
        ("HS384", hs(jsonwebtoken::Algorithm::HS384, secret, &good)),
        ("HS512", hs(jsonwebtoken::Algorithm::HS512, secret, &good)),
        (
            "another secret",
            hs(
                jsonwebtoken::Algorithm::HS256,
                b"another-secret-another-secret-0123456789",
                &good,
            ),
        ),
        (
            "bad signature",
            bad_signature(&hs(jsonwebtoken::Algorithm::HS256, secret, &good)),
        ),
        (
            "expired",
            hs(jsonwebtoken::Algorithm::HS256, secret, &expired),
        ),
        (
            "not yet valid",
            hs(jsonwebtoken::Algorithm::HS256, secret, &not_yet),
        ),
        (
            "no exp",
            hs(jsonwebtoken::Algorithm::HS256, secret, &no_exp),
        ),
    ];
    let rs_refused: Vec<(&str, String)> = vec![
        ("alg none", unsigned(&good)),
        (
            "HS256 to an RS256 server",
            hs(jsonwebtoken::Algorithm::HS256, secret, &good),
        ),
        (
            "HS256 keyed with the RS256 public key (algorithm confusion)",
            hs(jsonwebtoken::Algorithm::HS256, &public_pem, &good),
        ),
        ("bad signature", bad_signature(&rs(&good))),
        ("expired", rs(&expired)),
        ("not yet valid", rs(&not_yet)),
        ("no exp", rs(&no_exp)),
    ];
    for (server, cases) in [(&hs_server, &hs_refused), (&rs_server, &rs_refused)] {
        for (name, token) in cases {
            let got = status_with(server, token).await;
            assert_error(&got, 401, "unauthenticated");
            assert!(
                !got.1.to_string().contains(token.as_str()),
                "{name}: the answer echoes the token"
            );
            // Refused on the WebSocket stream too.
            assert_eq!(
                ws_refusal(server, Some(token), &format!("session_id={sid}")).await,
                401,
                "{name}"
            );
        }
    }
    hs_server.stop().await;
    rs_server.stop().await;
}

// ---- keys and tokens never logged ---------------------------------------------------------------

const LOG_CHILD_VAR: &str = "CRA_RT_LOG_CHILD";
const LOG_FORMAT_VAR: &str = "CRA_RT_LOG_FORMAT";
const LOG_PORT_LINE: &str = "CRA-LOG-PORT ";

/// The server of the logging test, as `cra serve` runs it: the runtime's own log set-up
/// (`init_logging`, standard error, `RUST_LOG` from the parent), keys and a JWT secret from
/// files. Does nothing unless started by [`keys_and_tokens_never_appear_in_the_log`].
#[test]
fn log_child_server() {
    use cra_runtime::config::LogFormat;
    let Some(dir) = std::env::var_os(LOG_CHILD_VAR) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let format = match std::env::var(LOG_FORMAT_VAR).as_deref() {
        Ok("json") => LogFormat::Json,
        _ => LogFormat::Text,
    };
    cra_runtime::server::init_logging(format);
    let mut config = cra_runtime::RuntimeConfig {
        addr: "127.0.0.1:0".into(),
        data: dir.join("data"),
        api_keys: Some(dir.join("keys.toml")),
        log_format: format,
        jwt: Some(cra_runtime::config::JwtConfig {
            algorithm: "HS256".into(),
            secret: None,
            secret_file: Some(dir.join("jwt.secret")),
            public_key_file: None,
            issuer: None,
            audience: None,
        }),
        ..cra_runtime::RuntimeConfig::default()
    };
    config.limits.requests_per_second = 0;
    config.atlases = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../atlases/dev.cra.github-ops"
    ))];
    let (state, _) = cra_runtime::build_runtime(
        config,
        std::sync::Arc::new(cra_wire::SystemClock),
        std::sync::Arc::new(cra_wire::UuidV7Ids),
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let server = cra_runtime::start(state, std::future::pending())
            .await
            .unwrap();
        println!("{LOG_PORT_LINE}{}", server.addr.port());
        let _ = server.wait().await;
    });
}

/// Every 12-character window of `secret`: no part of a credential long enough to matter.
fn windows(secret: &str) -> Vec<&str> {
    (0..=secret.len().saturating_sub(12))
        .map(|i| &secret[i..(i + 12).min(secret.len())])
        .collect()
}

/// GET `path` at `base` with an `Authorization` header value.
async fn get_with(http: &reqwest::Client, base: &str, path: &str, auth: &str) -> u16 {
    http.get(format!("{base}{path}"))
        .header("authorization", auth)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Runs a server process logging everything (`RUST_LOG=trace`) in `format`, sends it
/// authenticated and refused requests of every kind, and returns its log.
async fn log_of_a_session(format: &str, secrets: &Secrets) -> String {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("keys.toml"),
        format!(
            "[[keys]]\ntoken = \"{}\"\nactor_id = \"ops-bot\"\nactor_type = \"agent\"\nroles = [\"agent\"]\n\n[[keys]]\ntoken = \"{}\"\nactor_id = \"root\"\nactor_type = \"human\"\nroles = [\"admin\"]\n",
            secrets.agent_key, secrets.admin_key
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("jwt.secret"), &secrets.jwt_secret).unwrap();
    let log_path = dir.path().join("server.log");
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "authz::log_child_server", "--nocapture"])
        .env(LOG_CHILD_VAR, dir.path())
        .env(LOG_FORMAT_VAR, format)
        .env("RUST_LOG", "trace")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let port = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(120), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the log server did not print its port within 120 s"))
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "the log server ended: {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                )
            });
        if let Some(at) = line.find(LOG_PORT_LINE) {
            break line[at + LOG_PORT_LINE.len()..]
                .trim()
                .parse::<u16>()
                .unwrap();
        }
    };
    let base = format!("http://127.0.0.1:{port}");
    let ws = format!("ws://127.0.0.1:{port}/v1/traces/stream");
    let http = cra_runtime::tls::http_client().build().unwrap();
    let bearer = |t: &str| format!("Bearer {t}");

    // Accepted: an agent's session and resolve, the admin's read, a JWT, a WebSocket stream.
    let (st, b) = send(
        http.post(format!("{base}/v1/sessions"))
            .header("authorization", bearer(&secrets.agent_key))
            .header("content-type", "application/json")
            .body(json!({"agent_id": "ops-bot", "goal": "g"}).to_string()),
    )
    .await;
    assert_eq!(st, 201, "{b}");
    let sid = b["session_id"].as_str().unwrap().to_owned();
    let mut resolve = resolve_request("ops-bot", &sid, &rid(), &["repo-read"]);
    resolve["timestamp"] = json!(cra_wire::clock::format_timestamp(
        time::OffsetDateTime::now_utc()
    ));
    let (st, b) = send(
        http.post(format!("{base}/v1/resolve"))
            .header("authorization", bearer(&secrets.agent_key))
            .header("content-type", "application/json")
            .body(resolve.to_string()),
    )
    .await;
    assert_eq!(st, 200, "{b}");
    let trace = format!("/v1/traces/{sid}");
    assert_eq!(
        get_with(&http, &base, &trace, &bearer(&secrets.admin_key)).await,
        200
    );
    assert_eq!(
        get_with(&http, &base, "/v1/atlases", &bearer(&secrets.jwt_ok)).await,
        200
    );
    {
        use futures::StreamExt;
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = format!("{ws}?session_id={sid}")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("authorization", bearer(&secrets.agent_key).parse().unwrap());
        let (mut stream, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        assert!(matches!(stream.next().await, Some(Ok(_))));
    }
    // Refused: unknown key, expired / forged / unsigned JWTs (HTTP and WebSocket), a key in a
    // malformed header, a forbidden route, a refused body.
    for bad in [
        &secrets.wrong_key,
        &secrets.jwt_expired,
        &secrets.jwt_forged,
        &secrets.jwt_unsigned,
    ] {
        assert_eq!(
            get_with(&http, &base, "/v1/atlases", &bearer(bad)).await,
            401
        );
        assert_eq!(
            ws_refusal_at(&format!("{ws}?session_id={sid}"), Some(bad)).await,
            401
        );
    }
    let malformed = format!("Token {}", secrets.agent_key);
    assert_eq!(get_with(&http, &base, "/v1/atlases", &malformed).await, 401);
    assert_eq!(
        get_with(&http, &base, "/metrics", &bearer(&secrets.agent_key)).await,
        403
    );
    let (st, _) = send(
        http.post(format!("{base}/v1/resolve"))
            .header("authorization", bearer(&secrets.agent_key))
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_eq!(st, 400);
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    std::fs::read_to_string(&log_path).unwrap()
}

/// The credentials of the logging test (random, so no window of them can appear by chance).
struct Secrets {
    agent_key: String,
    admin_key: String,
    wrong_key: String,
    jwt_secret: String,
    jwt_ok: String,
    jwt_expired: String,
    jwt_forged: String,
    jwt_unsigned: String,
}

#[tokio::test]
async fn keys_and_tokens_never_appear_in_the_log() {
    use cra_runtime::auth::{fingerprint, new_token};
    let jwt_secret = new_token();
    let wrong_key = new_token();
    let now = unix_now();
    let sign = |secret: &str, exp: i64| {
        hs(
            jsonwebtoken::Algorithm::HS256,
            secret.as_bytes(),
            &claims(exp),
        )
    };
    let secrets = Secrets {
        agent_key: new_token(),
        admin_key: new_token(),
        jwt_ok: sign(&jwt_secret, now + 600),
        jwt_expired: sign(&jwt_secret, now - 600),
        jwt_forged: sign(&wrong_key, now + 600),
        jwt_unsigned: unsigned(&claims(now + 600)),
        wrong_key,
        jwt_secret,
    };
    for format in ["text", "json"] {
        let log = log_of_a_session(format, &secrets).await;
        // The log is the server's, and it recorded each authentication by fingerprint.
        assert!(log.contains("credentials refused"), "{format}:\n{log}");
        for (what, key) in [
            ("the refused key", &secrets.wrong_key),
            ("the accepted key", &secrets.agent_key),
            ("the accepted JWT", &secrets.jwt_ok),
            ("the forged JWT", &secrets.jwt_forged),
        ] {
            assert!(
                log.contains(&fingerprint(key)),
                "{format}: {what} is not in the log by its fingerprint:\n{log}"
            );
        }
        for (name, secret) in [
            ("agent key", &secrets.agent_key),
            ("admin key", &secrets.admin_key),
            ("unknown key", &secrets.wrong_key),
            ("jwt secret", &secrets.jwt_secret),
        ] {
            for w in windows(secret) {
                assert!(
                    !log.contains(w),
                    "{format}: {name}: `{w}` appears in the log"
                );
            }
        }
        for (name, token) in [
            ("jwt", &secrets.jwt_ok),
            ("expired jwt", &secrets.jwt_expired),
            ("forged jwt", &secrets.jwt_forged),
        ] {
            // The signature is what must never leak; the claims are not secret.
            let signature = token.rsplit('.').next().unwrap();
            for w in windows(signature) {
                assert!(
                    !log.contains(w),
                    "{format}: {name}: `{w}` appears in the log"
                );
            }
        }
    }
}

/// Issue 29, item 8: on `fda2190` a key that is both agent and operator (or an admin) could
/// grant the approval its own execute asked for, and then run the call.
#[tokio::test]
async fn nobody_decides_an_approval_they_requested() {
    const DUAL: &str = "dual-key-0000000000000";
    for separation in [true, false] {
        let (url, _calls) = executor_endpoint().await;
        let s = TestServer::start_with(move |c| {
            c.executors.insert(
                "github".into(),
                cra_runtime::config::ExecutorConfig::http(url, 5_000),
            );
            c.approvals.separation_of_duties = separation;
            // The maintainer's own key, made an operator too.
            let keys = c.api_keys.clone().unwrap();
            let mut text = std::fs::read_to_string(&keys).unwrap();
            text.push_str(&format!(
                "\n[[keys]]\ntoken = \"{DUAL}\"\nactor_id = \"maintainer-bot\"\nactor_type = \"agent\"\nroles = [\"agent\", \"operator\"]\n"
            ));
            std::fs::write(&keys, text).unwrap();
        })
        .await;
        let sid = s.open_session(DUAL, "maintainer-bot").await;
        let resolve = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
        let (st, res) = s.post(Some(DUAL), "/v1/resolve", &resolve).await;
        assert_eq!(st, 200, "{res}");
        let approval = s
            .ask_merge_approval(DUAL, "maintainer-bot", &sid, &res)
            .await;
        let path = format!("/v1/approvals/{approval}");
        let grant = json!({"decision": "grant"});
        let events = s.events(&sid).await.len();
        let own = s.post(Some(DUAL), &path, &grant).await;
        if separation {
            assert_error(&own, 403, "forbidden");
            let message = own.1["message"].as_str().unwrap();
            assert!(message.contains("separation_of_duties"), "{message}");
            assert_eq!(s.events(&sid).await.len(), events, "nothing recorded");
            let (st, body) = s.get(Some(OPERATOR), &path).await;
            assert_eq!((st, &body["status"]), (200, &json!("pending")), "{body}");
            let other = s.post(Some(OPERATOR), &path, &grant).await;
            assert_eq!(other.0, 200, "another operator decides it: {}", other.1);
        } else {
            assert_eq!(own.0, 200, "the rule is off: {}", own.1);
        }
        s.stop().await;
    }
}
