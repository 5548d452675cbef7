//! The operator console's server side: its files are public with their security headers, a
//! browser's stream authenticates with the `cra.bearer.` subprotocol, and the approval history
//! it shows (`specs/console.md`). The console itself is driven in a real browser by
//! `tools/peers/console_browser.mjs`.

use base64::Engine as _;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::stream::next_event;
use crate::support::*;

async fn raw_get(s: &TestServer, path: &str, etag: Option<&str>) -> reqwest::Response {
    let client = cra_runtime::tls::http_client()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut req = client.get(s.url(path));
    if let Some(tag) = etag {
        req = req.header("if-none-match", tag);
    }
    req.send().await.unwrap()
}

/// Invariant: the console's files need no key, and each answer forbids inline script.
#[tokio::test]
async fn the_console_is_served_without_credentials_under_its_policy() {
    let s = TestServer::start().await;
    let moved = raw_get(&s, "/console", None).await;
    assert_eq!(moved.status(), 301);
    assert_eq!(moved.headers()["location"], "/console/");

    let page = raw_get(&s, "/console/", None).await;
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self';"), "{csp}");
    assert!(!csp.contains("unsafe"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(page.text().await.unwrap().contains("./app.js"));

    let module = raw_get(&s, "/console/app.js", None).await;
    assert_eq!(
        module.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let tag = module.headers()["etag"].to_str().unwrap().to_owned();
    let again = raw_get(&s, "/console/app.js", Some(&tag)).await;
    assert_eq!(
        again.status(),
        304,
        "a browser holding the file revalidates it"
    );

    assert_error(&s.get(None, "/console/secret.js").await, 404, "not_found");
    // Only reading is public under /console.
    assert_error(
        &s.post(None, "/console/app.js", &json!({})).await,
        401,
        "unauthenticated",
    );
    s.stop().await;
}

fn bearer_protocol(key: &str) -> String {
    format!(
        "cra.bearer.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
    )
}

/// Connects to a stream offering `protocols` and no `Authorization`; the handshake's answer or
/// its refusal's status.
async fn offer(
    s: &TestServer,
    query: &str,
    protocols: &str,
) -> Result<
    (
        crate::stream::Ws,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    u16,
> {
    let mut req = s.ws_url(query).into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", protocols.parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok(pair) => Ok(pair),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("the handshake failed: {e}"),
    }
}

/// Invariant: a browser's key offered as a subprotocol is checked as a bearer token is, and the
/// server selects `cra.trace.v1`, never echoing the key.
#[tokio::test]
async fn a_browser_stream_authenticates_with_the_bearer_subprotocol() {
    let s = TestServer::start().await;
    let offered = format!("cra.trace.v1, {}", bearer_protocol(OPERATOR));
    let (mut ws, answer) = offer(&s, "all=true", &offered).await.unwrap();
    assert_eq!(answer.headers()["sec-websocket-protocol"], "cra.trace.v1");
    let sid = s.open_session(AGENT, "ops-bot").await;
    let first = next_event(&mut ws).await.unwrap();
    assert_eq!(first["session_id"], sid.as_str());

    // The key's roles hold: an agent may not stream every session, but may stream its own.
    let agent = format!("cra.trace.v1, {}", bearer_protocol(AGENT));
    assert_eq!(offer(&s, "all=true", &agent).await.err(), Some(403));
    let (mut own, _) = offer(&s, &format!("session_id={sid}"), &agent)
        .await
        .unwrap();
    assert_eq!(next_event(&mut own).await.unwrap()["sequence"], 0);

    // An unknown key, a value that is not base64url, and no key at all are refused.
    let unknown = format!(
        "cra.trace.v1, {}",
        bearer_protocol("no-such-key-0000000000")
    );
    assert_eq!(offer(&s, "all=true", &unknown).await.err(), Some(401));
    assert_eq!(
        offer(&s, "all=true", "cra.trace.v1, cra.bearer.%%%")
            .await
            .err(),
        Some(401)
    );
    assert_eq!(offer(&s, "all=true", "cra.trace.v1").await.err(), Some(401));

    // Only the stream reads the header: elsewhere it is no credential.
    let listing = cra_runtime::tls::http_client()
        .build()
        .unwrap()
        .get(s.url("/v1/traces"))
        .header("sec-websocket-protocol", bearer_protocol(OPERATOR))
        .send()
        .await
        .unwrap();
    assert_eq!(listing.status(), 401);
    s.stop().await;
}

/// The history lists decisions (not pending approvals) with who decided and their note; the
/// query is checked and only operators and auditors read it.
#[tokio::test]
async fn the_approval_history_lists_decisions_for_operators() {
    let s = TestServer::start().await;
    let mut decided = Vec::new();
    for (decision, note) in [("grant", "looks right"), ("reject", "not today")] {
        let sid = s.open_session(MAINT, "maintainer-bot").await;
        let (st, res) = s
            .post(
                Some(MAINT),
                "/v1/resolve",
                &resolve_request("maintainer-bot", &sid, &rid(), &["maintain"]),
            )
            .await;
        assert_eq!(st, 200, "{res}");
        let id = s
            .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
            .await;
        let body = json!({"decision": decision, "note": note});
        let (st, _) = s
            .post(Some(OPERATOR), &format!("/v1/approvals/{id}"), &body)
            .await;
        assert_eq!(st, 200);
        decided.push(id);
    }
    // One more stays pending: it is in the queue, not the history.
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let (_, res) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &["maintain"]),
        )
        .await;
    let waiting = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;

    let (st, history) = s.get(Some(AUDITOR), "/v1/approvals?status=decided").await;
    assert_eq!(st, 200, "{history}");
    let history = history.as_array().unwrap();
    let mut ids: Vec<&str> = history
        .iter()
        .map(|a| a["approval_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut want: Vec<&str> = decided.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "the decisions, and not {waiting}");
    let granted = history.iter().find(|a| a["status"] == "granted").unwrap();
    assert_eq!(granted["decided_by"], "oscar");
    assert_eq!(granted["note"], "looks right");
    let (_, one) = s
        .get(Some(OPERATOR), "/v1/approvals?status=decided&limit=1")
        .await;
    assert_eq!(one.as_array().unwrap().len(), 1);

    for bad in [
        "status=decided&limit=0",
        "status=decided&limit=501",
        "status=decided&limit=x",
        "status=granted",
        "limit=5",
    ] {
        assert_error(
            &s.get(Some(OPERATOR), &format!("/v1/approvals?{bad}")).await,
            400,
            "invalid_request",
        );
    }
    assert_error(
        &s.get(Some(MAINT), "/v1/approvals?status=decided").await,
        403,
        "forbidden",
    );
    s.stop().await;
}

/// `GET /v1/whoami` names the credential's actor and roles (the console picks its pages by
/// them) and is refused without a credential.
#[tokio::test]
async fn whoami_names_the_actor_and_its_roles() {
    let s = TestServer::start().await;
    let (st, me) = s.get(Some(OPERATOR), "/v1/whoami").await;
    assert_eq!(st, 200, "{me}");
    assert_eq!(me["actor_id"], "oscar");
    assert_eq!(me["actor_type"], "human");
    assert_eq!(me["roles"], json!(["operator"]));
    assert_eq!(me["key_fingerprint"].as_str().unwrap().len(), 12);
    assert!(
        !me.to_string().contains(OPERATOR),
        "the key itself is never answered"
    );
    let (_, agent) = s.get(Some(AGENT), "/v1/whoami").await;
    assert_eq!(agent["roles"], json!(["agent"]));
    assert_error(&s.get(None, "/v1/whoami").await, 401, "unauthenticated");
    s.stop().await;
}

/// The API's documentation: Swagger UI's files under its policy, and `/openapi.json` exactly
/// the document `schemas/openapi.json` commits (both public).
#[tokio::test]
async fn the_docs_serve_swagger_ui_on_the_committed_description() {
    let s = TestServer::start().await;
    let page = raw_get(&s, "/docs/", None).await;
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self';") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert!(page.text().await.unwrap().contains("./docs.js"));
    let bundle = raw_get(&s, "/docs/swagger-ui-bundle.js", None).await;
    assert_eq!(bundle.status(), 200);
    let served = raw_get(&s, "/openapi.json", None)
        .await
        .text()
        .await
        .unwrap();
    let committed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/openapi.json"),
    )
    .unwrap();
    assert_eq!(served, committed, "run `cargo xtask codegen`");
    assert_eq!(raw_get(&s, "/docs", None).await.status(), 301);
    assert_error(&s.get(None, "/docs/petstore.json").await, 404, "not_found");
    s.stop().await;
}
