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
