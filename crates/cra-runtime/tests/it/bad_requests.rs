//! The bad-request table: each request answers its documented status and token. For malformed
//! requests (and refusals outside a session the caller owns) the store's record counts are the
//! same before and after; for well-formed requests refused by a protocol rule the TRACE events
//! recording the attempt are asserted.

use serde_json::{Value, json};

use crate::support::*;

/// What a case must leave behind.
#[derive(Debug, Clone, Copy)]
enum Leaves {
    /// Nothing at all.
    Nothing,
    /// These event types, last in the named session's chain.
    Events(&'static [&'static str]),
}

struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    key: Option<&'static str>,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    token: &'static str,
    leaves: Leaves,
}

const REJECTED: &[&str] = &["carp.request.received", "carp.request.rejected"];
const VIOLATED: &[&str] = &["action.requested", "action.denied", "policy.violated"];
const PENDING: &[&str] = &["action.requested", "action.pending_approval"];

fn j(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// (chains, events, pending approvals): the store's record counts.
fn counts(s: &TestServer) -> (usize, u64, usize) {
    let st = &s.server.as_ref().unwrap().state;
    let chains = st.backends.chains.sessions().unwrap();
    (
        chains.len(),
        chains.iter().map(|c| c.head.next_sequence).sum(),
        st.backends.carp.list_pending_approvals().unwrap().len(),
    )
}

async fn run(s: &TestServer, c: &Case, chain_of_record: &str) {
    let before = counts(s);
    let events_before = s.events(chain_of_record).await.len();
    let mut rb = match c.method {
        "GET" => s.http.get(s.url(&c.path)),
        "DELETE" => s.http.delete(s.url(&c.path)),
        _ => s.http.post(s.url(&c.path)).body(c.body.clone()),
    };
    if let Some(ct) = c.content_type {
        rb = rb.header("content-type", ct);
    }
    if let Some(k) = c.key {
        rb = rb.bearer_auth(k);
    }
    let got = send(rb).await;
    assert_eq!(got.0, c.status, "case `{}`: status; body {}", c.name, got.1);
    // An admitted execute is answered with an execute response, its token in `error.code`
    // (CARP 3.5); every other refusal with the error body.
    let admitted_execute = c.path == "/v1/execute" && matches!(c.leaves, Leaves::Events(_));
    let (token, message) = if admitted_execute {
        let status = got.1["status"].as_str();
        assert!(
            matches!(status, Some("denied" | "pending_approval")),
            "case `{}`: an execute response; body {}",
            c.name,
            got.1
        );
        (&got.1["error"]["code"], &got.1["error"]["message"])
    } else {
        (&got.1["error"], &got.1["message"])
    };
    assert_eq!(*token, c.token, "case `{}`: token; body {}", c.name, got.1);
    assert!(
        message.as_str().is_some_and(|m| !m.is_empty()),
        "case `{}`",
        c.name
    );
    match c.leaves {
        Leaves::Nothing => {
            assert_eq!(counts(s), before, "case `{}` changed the store", c.name);
        }
        Leaves::Events(types) => {
            let events = s.events(chain_of_record).await;
            let new: Vec<&str> = events[events_before..]
                .iter()
                .map(|e| e["event_type"].as_str().unwrap())
                .collect();
            assert_eq!(new, types, "case `{}`: recorded events", c.name);
            let last = events.last().unwrap();
            let recorded_token = last["payload"]["error"]
                .as_str()
                .or(last["payload"]["rule"].as_str())
                .unwrap_or_default();
            assert_eq!(
                recorded_token, c.token,
                "case `{}`: the record names the token",
                c.name
            );
        }
    }
}

fn case(
    name: &'static str,
    method: &'static str,
    path: impl Into<String>,
    key: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    token: &'static str,
) -> Case {
    Case {
        name,
        method,
        path: path.into(),
        key,
        content_type: Some("application/json"),
        body,
        status,
        token,
        leaves: Leaves::Nothing,
    }
}

fn recorded(mut c: Case, types: &'static [&'static str]) -> Case {
    c.leaves = Leaves::Events(types);
    c
}

fn with_ct(mut c: Case, ct: Option<&'static str>) -> Case {
    c.content_type = ct;
    c
}

#[tokio::test]
async fn every_bad_request_answers_its_token_and_changes_only_what_it_must() {
    let (s, _calls) = start_with_executor().await;
    let s = {
        // A small body limit so the oversize cases stay small.
        drop(s);
        let (url, _c) = executor_endpoint().await;
        TestServer::start_with(move |c| {
            c.limits.max_body_bytes = 16 * 1024;
            c.executors.insert(
                "github".into(),
                cra_runtime::config::ExecutorConfig::http(url, 5000),
            );
        })
        .await
    };
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let other = s.open_session(AGENT2, "other-bot").await;
    let ended = s.open_session(MAINT, "maintainer-bot").await;
    assert_eq!(
        s.delete(Some(MAINT), &format!("/v1/sessions/{ended}"))
            .await
            .0,
        204
    );
    let (_, res) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]),
        )
        .await;
    let resolution = res["resolution_id"].as_str().unwrap().to_owned();
    let approval = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    let used_rid = rid();
    let (st, _) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &used_rid, &["repo-read"]),
        )
        .await;
    assert_eq!(st, 200);
    let unknown = "01890000-0000-7000-8000-000000000000";
    let big = vec![b' '; 17 * 1024];
    let mut oversize = b"{\"agent_id\":\"maintainer-bot\",\"goal\":\"x\"".to_vec();
    oversize.extend_from_slice(&big);
    oversize.push(b'}');
    let nested = format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes();

    let rq = |f: &dyn Fn(&mut Value)| {
        let mut v = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read"]);
        f(&mut v);
        j(&v)
    };
    let ex = |action: &str, params: Value, f: &dyn Fn(&mut Value)| {
        let mut v = execute_request("maintainer-bot", &sid, &rid(), &resolution, action, params);
        f(&mut v);
        j(&v)
    };
    let ok_params = json!({"owner": "octo", "repo": "hello"});
    let sess = |v: Value| j(&v);

    let mut cases: Vec<(Case, &str)> = vec![
        // --- POST /v1/sessions -----------------------------------------------------------
        (
            case(
                "session: broken JSON",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                b"{".to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: empty body",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: array body",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                b"[]".to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: string body",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                b"\"x\"".to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: missing agent_id",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"goal": "g"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: missing goal",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "maintainer-bot"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: agent_id number",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": 7, "goal": "g"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: goal null",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "maintainer-bot", "goal": null})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: goal empty",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "maintainer-bot", "goal": " "})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: agent_id with space",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "a b", "goal": "g"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: agent_id too long",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "a".repeat(200), "goal": "g"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: unknown member",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "maintainer-bot", "goal": "g", "colour": 1})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: parent not a uuid",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "maintainer-bot", "goal": "g", "parent_session_id": "p"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: parent uppercase uuid",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(
                    json!({"agent_id": "maintainer-bot", "goal": "g", "parent_session_id": "01890000-0000-7000-8000-00000000000A"}),
                ),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: unknown parent",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(
                    json!({"agent_id": "maintainer-bot", "goal": "g", "parent_session_id": unknown}),
                ),
                404,
                "session_not_found",
            ),
            "",
        ),
        (
            case(
                "session: parent of another agent",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(
                    json!({"agent_id": "maintainer-bot", "goal": "g", "parent_session_id": other}),
                ),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            with_ct(
                case(
                    "session: text/plain",
                    "POST",
                    "/v1/sessions",
                    Some(MAINT),
                    sess(json!({"agent_id": "maintainer-bot", "goal": "g"})),
                    415,
                    "unsupported_media_type",
                ),
                Some("text/plain"),
            ),
            "",
        ),
        (
            with_ct(
                case(
                    "session: no content type",
                    "POST",
                    "/v1/sessions",
                    Some(MAINT),
                    sess(json!({"agent_id": "maintainer-bot", "goal": "g"})),
                    415,
                    "unsupported_media_type",
                ),
                None,
            ),
            "",
        ),
        (
            case(
                "session: duplicate key",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                br#"{"agent_id":"maintainer-bot","agent_id":"x","goal":"g"}"#.to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: oversize body",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                oversize.clone(),
                413,
                "payload_too_large",
            ),
            "",
        ),
        (
            case(
                "session: identity mismatch",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "ops-bot", "goal": "g"})),
                403,
                "identity_mismatch",
            ),
            "",
        ),
        (
            case(
                "session: no credentials",
                "POST",
                "/v1/sessions",
                None,
                sess(json!({"agent_id": "maintainer-bot", "goal": "g"})),
                401,
                "unauthenticated",
            ),
            "",
        ),
        (
            case(
                "session: unknown key",
                "POST",
                "/v1/sessions",
                Some("no-such-key-0000000000"),
                sess(json!({"agent_id": "maintainer-bot", "goal": "g"})),
                401,
                "unauthenticated",
            ),
            "",
        ),
        (
            case(
                "session: project_id number",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                sess(json!({"agent_id": "maintainer-bot", "goal": "g", "project_id": 3})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: nested too deep",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                nested.clone(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: invalid UTF-8",
                "POST",
                "/v1/sessions",
                Some(MAINT),
                b"{\"agent_id\":\"\xff\",\"goal\":\"g\"}".to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "session: auditor may not open",
                "POST",
                "/v1/sessions",
                Some(AUDITOR),
                sess(json!({"agent_id": "audrey", "goal": "g"})),
                403,
                "forbidden",
            ),
            "",
        ),
        // --- GET / DELETE /v1/sessions/{id} ------------------------------------------------
        (
            case(
                "get session: bad uuid",
                "GET",
                "/v1/sessions/nope",
                Some(MAINT),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "get session: unknown",
                "GET",
                format!("/v1/sessions/{unknown}"),
                Some(MAINT),
                Vec::new(),
                404,
                "session_not_found",
            ),
            "",
        ),
        (
            case(
                "get session: another agent's",
                "GET",
                format!("/v1/sessions/{other}"),
                Some(MAINT),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "end session: bad uuid",
                "DELETE",
                "/v1/sessions/x",
                Some(MAINT),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "end session: unknown",
                "DELETE",
                format!("/v1/sessions/{unknown}"),
                Some(MAINT),
                Vec::new(),
                404,
                "session_not_found",
            ),
            "",
        ),
        (
            case(
                "end session: another agent's",
                "DELETE",
                format!("/v1/sessions/{other}"),
                Some(MAINT),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "end session: auditor",
                "DELETE",
                format!("/v1/sessions/{sid}"),
                Some(AUDITOR),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        // --- POST /v1/resolve: malformed -----------------------------------------------------
        (
            case(
                "resolve: broken JSON",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                b"{\"carp_version\":".to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: array body",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                b"[1]".to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: missing carp_version",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| {
                    v.as_object_mut().unwrap().remove("carp_version");
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: carp_version 2.0",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["carp_version"] = json!("2.0")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: missing request_id",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| {
                    v.as_object_mut().unwrap().remove("request_id");
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: request_id not a uuid",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["request_id"] = json!("req-1")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: request_id number",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["request_id"] = json!(12)),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: timestamp not RFC 3339",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["timestamp"] = json!("yesterday")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: timestamp without zone",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["timestamp"] = json!("2026-03-02T10:00:00")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: missing requester",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| {
                    v.as_object_mut().unwrap().remove("requester");
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: agent_id number",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["requester"]["agent_id"] = json!(5)),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: session_id not a uuid",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["requester"]["session_id"] = json!("s-1")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: operation execute",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["operation"] = json!("execute")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: operation unknown",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["operation"] = json!("fly")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: missing goal",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| {
                    v["task"].as_object_mut().unwrap().remove("goal");
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: risk tier unknown",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["task"]["risk_tier"] = json!("extreme")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: atlas_ids not an array",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["atlas_ids"] = json!("dev.cra.github-ops")),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: context not an object",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["context"] = json!([1])),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: capabilities not strings",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["task"]["required_capabilities"] = json!([1, 2])),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: duplicate key",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                br#"{"carp_version":"1.0","carp_version":"1.0"}"#.to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "resolve: oversize",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                oversize.clone(),
                413,
                "payload_too_large",
            ),
            "",
        ),
        (
            with_ct(
                case(
                    "resolve: text/plain",
                    "POST",
                    "/v1/resolve",
                    Some(MAINT),
                    rq(&|_| {}),
                    415,
                    "unsupported_media_type",
                ),
                Some("text/plain"),
            ),
            "",
        ),
        (
            case(
                "resolve: identity mismatch",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["requester"]["agent_id"] = json!("other-bot")),
                403,
                "identity_mismatch",
            ),
            "",
        ),
        (
            case(
                "resolve: unknown session",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["requester"]["session_id"] = json!(unknown)),
                404,
                "session_not_found",
            ),
            "",
        ),
        (
            case(
                "resolve: another agent's session",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["requester"]["session_id"] = json!(other)),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "resolve: ended session",
                "POST",
                "/v1/resolve",
                Some(MAINT),
                rq(&|v| v["requester"]["session_id"] = json!(ended)),
                403,
                "session_inactive",
            ),
            "",
        ),
        (
            case(
                "resolve: author key",
                "POST",
                "/v1/resolve",
                Some(AUTHOR),
                rq(&|_| {}),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "resolve: no credentials",
                "POST",
                "/v1/resolve",
                None,
                rq(&|_| {}),
                401,
                "unauthenticated",
            ),
            "",
        ),
        (
            case(
                "resolve: explain=maybe",
                "POST",
                "/v1/resolve?explain=maybe",
                Some(MAINT),
                rq(&|_| {}),
                400,
                "invalid_request",
            ),
            "",
        ),
        // --- POST /v1/resolve: refused by a rule, recorded ------------------------------------
        (
            recorded(
                case(
                    "resolve: unknown atlas",
                    "POST",
                    "/v1/resolve",
                    Some(MAINT),
                    rq(&|v| v["atlas_ids"] = json!(["com.example.nowhere"])),
                    404,
                    "atlas_not_found",
                ),
                REJECTED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "resolve: clock skew",
                    "POST",
                    "/v1/resolve",
                    Some(MAINT),
                    rq(&|v| v["timestamp"] = json!("2026-03-02T11:00:00Z")),
                    400,
                    "clock_skew",
                ),
                REJECTED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "resolve: duplicate request_id",
                    "POST",
                    "/v1/resolve",
                    Some(MAINT),
                    rq(&|v| v["request_id"] = json!(used_rid)),
                    409,
                    "duplicate_request_id",
                ),
                REJECTED,
            ),
            "sid",
        ),
        // --- POST /v1/execute: malformed -----------------------------------------------------
        (
            case(
                "execute: broken JSON",
                "POST",
                "/v1/execute",
                Some(MAINT),
                b"{]".to_vec(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "execute: missing execution",
                "POST",
                "/v1/execute",
                Some(MAINT),
                ex("repo.get", ok_params.clone(), &|v| {
                    v.as_object_mut().unwrap().remove("execution");
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "execute: resolution_id not a uuid",
                "POST",
                "/v1/execute",
                Some(MAINT),
                ex("repo.get", ok_params.clone(), &|v| {
                    v["execution"]["resolution_id"] = json!("r")
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "execute: action_id number",
                "POST",
                "/v1/execute",
                Some(MAINT),
                ex("repo.get", ok_params.clone(), &|v| {
                    v["execution"]["action_id"] = json!(3)
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "execute: operation resolve",
                "POST",
                "/v1/execute",
                Some(MAINT),
                ex("repo.get", ok_params.clone(), &|v| {
                    v["operation"] = json!("resolve")
                }),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "execute: identity mismatch",
                "POST",
                "/v1/execute",
                Some(MAINT),
                ex("repo.get", ok_params.clone(), &|v| {
                    v["requester"]["agent_id"] = json!("ops-bot")
                }),
                403,
                "identity_mismatch",
            ),
            "",
        ),
        (
            case(
                "execute: ended session",
                "POST",
                "/v1/execute",
                Some(MAINT),
                ex("repo.get", ok_params.clone(), &|v| {
                    v["requester"]["session_id"] = json!(ended)
                }),
                403,
                "session_inactive",
            ),
            "",
        ),
        (
            case(
                "execute: unknown session",
                "POST",
                "/v1/execute",
                Some(MAINT),
                ex("repo.get", ok_params.clone(), &|v| {
                    v["requester"]["session_id"] = json!(unknown)
                }),
                404,
                "session_not_found",
            ),
            "",
        ),
        (
            case(
                "execute: oversize",
                "POST",
                "/v1/execute",
                Some(MAINT),
                oversize.clone(),
                413,
                "payload_too_large",
            ),
            "",
        ),
        (
            with_ct(
                case(
                    "execute: form content",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    b"a=1".to_vec(),
                    415,
                    "unsupported_media_type",
                ),
                Some("application/x-www-form-urlencoded"),
            ),
            "",
        ),
        (
            case(
                "execute: operator key",
                "POST",
                "/v1/execute",
                Some(OPERATOR),
                ex("repo.get", ok_params.clone(), &|_| {}),
                403,
                "forbidden",
            ),
            "",
        ),
        // --- POST /v1/execute: refused by a rule, recorded ------------------------------------
        (
            recorded(
                case(
                    "execute: unknown resolution",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex("repo.get", ok_params.clone(), &|v| {
                        v["execution"]["resolution_id"] = json!(unknown)
                    }),
                    404,
                    "resolution_not_found",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: action not allowed",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex(
                        "branch.forcepush",
                        json!({"owner": "o", "repo": "r", "branch": "main"}),
                        &|_| {},
                    ),
                    403,
                    "action_not_allowed",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: action unknown to the atlas",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex("repo.delete", json!({}), &|_| {}),
                    403,
                    "action_not_allowed",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: parameters missing a field",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex("repo.get", json!({"owner": "octo"}), &|_| {}),
                    400,
                    "invalid_parameters",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: parameters with an extra field",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex(
                        "repo.get",
                        json!({"owner": "octo", "repo": "r", "x": 1}),
                        &|_| {},
                    ),
                    400,
                    "invalid_parameters",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: parameters of the wrong type",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex("repo.get", json!({"owner": 1, "repo": "r"}), &|_| {}),
                    400,
                    "invalid_parameters",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: parameters failing a pattern",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex(
                        "repo.get",
                        json!({"owner": "bad owner!", "repo": "r"}),
                        &|_| {},
                    ),
                    400,
                    "invalid_parameters",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: approval pending",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex("pr.merge", crate::support::MERGE_42.clone(), &|_| {}),
                    409,
                    "approval_pending",
                ),
                PENDING,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: clock skew",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex("repo.get", ok_params.clone(), &|v| {
                        v["timestamp"] = json!("2026-03-02T09:00:00Z")
                    }),
                    400,
                    "clock_skew",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: duplicate request_id",
                    "POST",
                    "/v1/execute",
                    Some(MAINT),
                    ex("repo.get", ok_params.clone(), &|v| {
                        v["request_id"] = json!(used_rid)
                    }),
                    409,
                    "duplicate_request_id",
                ),
                VIOLATED,
            ),
            "sid",
        ),
        (
            recorded(
                case(
                    "execute: another agent's resolution",
                    "POST",
                    "/v1/execute",
                    Some(AGENT2),
                    j(&execute_request(
                        "other-bot",
                        &other,
                        &rid(),
                        &resolution,
                        "repo.get",
                        ok_params.clone(),
                    )),
                    404,
                    "resolution_not_found",
                ),
                VIOLATED,
            ),
            "other",
        ),
        // --- approvals ------------------------------------------------------------------------
        (
            case(
                "approve: bad uuid",
                "POST",
                "/v1/approvals/nope",
                Some(OPERATOR),
                j(&json!({"decision": "grant"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "approve: unknown approval",
                "POST",
                format!("/v1/approvals/{unknown}"),
                Some(OPERATOR),
                j(&json!({"decision": "grant"})),
                404,
                "approval_not_found",
            ),
            "",
        ),
        (
            case(
                "approve: decision maybe",
                "POST",
                format!("/v1/approvals/{approval}"),
                Some(OPERATOR),
                j(&json!({"decision": "maybe"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "approve: missing decision",
                "POST",
                format!("/v1/approvals/{approval}"),
                Some(OPERATOR),
                j(&json!({"note": "n"})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "approve: note not a string",
                "POST",
                format!("/v1/approvals/{approval}"),
                Some(OPERATOR),
                j(&json!({"decision": "grant", "note": 1})),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "approve: by the agent",
                "POST",
                format!("/v1/approvals/{approval}"),
                Some(MAINT),
                j(&json!({"decision": "grant"})),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "approve: by an auditor",
                "POST",
                format!("/v1/approvals/{approval}"),
                Some(AUDITOR),
                j(&json!({"decision": "grant"})),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            with_ct(
                case(
                    "approve: text/plain",
                    "POST",
                    format!("/v1/approvals/{approval}"),
                    Some(OPERATOR),
                    j(&json!({"decision": "grant"})),
                    415,
                    "unsupported_media_type",
                ),
                Some("text/plain"),
            ),
            "",
        ),
        (
            case(
                "approvals: status=done",
                "GET",
                "/v1/approvals?status=done",
                Some(OPERATOR),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "approvals: unknown parameter",
                "GET",
                "/v1/approvals?colour=red",
                Some(OPERATOR),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "approvals: by an agent",
                "GET",
                "/v1/approvals",
                Some(MAINT),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        // --- traces and streams ---------------------------------------------------------------
        (
            case(
                "trace: bad uuid",
                "GET",
                "/v1/traces/abc",
                Some(MAINT),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "trace: unknown",
                "GET",
                format!("/v1/traces/{unknown}"),
                Some(AUDITOR),
                Vec::new(),
                404,
                "session_not_found",
            ),
            "",
        ),
        (
            case(
                "trace: another agent's",
                "GET",
                format!("/v1/traces/{other}"),
                Some(MAINT),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "verify: another agent's",
                "POST",
                format!("/v1/traces/{other}/verify"),
                Some(MAINT),
                b"{}".to_vec(),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "verify: unknown",
                "POST",
                format!("/v1/traces/{unknown}/verify"),
                Some(AUDITOR),
                b"{}".to_vec(),
                404,
                "session_not_found",
            ),
            "",
        ),
        (
            case(
                "stream: not an upgrade",
                "GET",
                format!("/v1/traces/stream?session_id={sid}"),
                Some(MAINT),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "stream: both modes",
                "GET",
                format!("/v1/traces/stream?session_id={sid}&all=true"),
                Some(OPERATOR),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "stream: neither mode",
                "GET",
                "/v1/traces/stream",
                Some(OPERATOR),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "stream: negative since_seq",
                "GET",
                format!("/v1/traces/stream?session_id={sid}&since_seq=-1"),
                Some(MAINT),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "stream: all=maybe",
                "GET",
                "/v1/traces/stream?all=maybe",
                Some(OPERATOR),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        (
            case(
                "stream: all by an agent",
                "GET",
                "/v1/traces/stream?all=true",
                Some(MAINT),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "stream: another agent's session",
                "GET",
                format!("/v1/traces/stream?session_id={other}"),
                Some(MAINT),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "stream: unknown parameter",
                "GET",
                format!("/v1/traces/stream?session_id={sid}&x=1"),
                Some(MAINT),
                Vec::new(),
                400,
                "invalid_request",
            ),
            "",
        ),
        // --- atlases, metrics, routes ---------------------------------------------------------
        (
            case(
                "atlas: unknown",
                "GET",
                "/v1/atlases/com.example.nowhere",
                Some(AUTHOR),
                Vec::new(),
                404,
                "atlas_not_found",
            ),
            "",
        ),
        (
            case(
                "atlases: no credentials",
                "GET",
                "/v1/atlases",
                None,
                Vec::new(),
                401,
                "unauthenticated",
            ),
            "",
        ),
        (
            case(
                "metrics: agent",
                "GET",
                "/metrics",
                Some(MAINT),
                Vec::new(),
                403,
                "forbidden",
            ),
            "",
        ),
        (
            case(
                "route: unknown",
                "GET",
                "/v1/unknown",
                Some(MAINT),
                Vec::new(),
                404,
                "not_found",
            ),
            "",
        ),
        (
            case(
                "route: wrong method",
                "DELETE",
                "/v1/resolve",
                Some(MAINT),
                Vec::new(),
                404,
                "not_found",
            ),
            "",
        ),
    ];
    assert!(cases.len() >= 80, "the table has {} cases", cases.len());
    for (c, chain) in cases.drain(..) {
        let chain = match chain {
            "other" => other.as_str(),
            _ => sid.as_str(),
        };
        run(&s, &c, chain).await;
    }

    // Expired resolution: the clock moves past the ttl; the attempt is recorded.
    s.clock.advance(time::Duration::seconds(3601));
    let mut v = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        &resolution,
        "repo.get",
        ok_params.clone(),
    );
    v["timestamp"] = json!("2026-03-02T11:00:01Z");
    let c = recorded(
        case(
            "execute: expired resolution",
            "POST",
            "/v1/execute",
            Some(MAINT),
            j(&v),
            409,
            "resolution_expired",
        ),
        VIOLATED,
    );
    run(&s, &c, &sid).await;
    // And every chain still verifies.
    for id in [&sid, &other, &ended] {
        let (_, r) = s
            .post(Some(ADMIN), &format!("/v1/traces/{id}/verify"), &json!({}))
            .await;
        assert_eq!(r["valid"], true, "{r}");
    }
    s.stop().await;
}
