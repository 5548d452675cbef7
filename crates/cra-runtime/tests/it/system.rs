//! Health, conformance, metrics, the error body for unknown routes, authentication and limits.

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn health_and_conformance_are_public() {
    let s = TestServer::start().await;
    let (st, body) = s.get(None, "/v1/health").await;
    assert_eq!(st, 200);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["store"], "redb");
    let (st, body) = s.get(None, "/v1/conformance").await;
    assert_eq!(st, 200);
    assert_eq!(body["protocol_version"], "0.1");
    assert_eq!(body["implementation"]["name"], "cra");
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
    }
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

#[tokio::test]
async fn first_start_without_keys_creates_a_private_admin_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = cra_runtime::RuntimeConfig {
        addr: "127.0.0.1:0".into(),
        data: dir.path().join("data"),
        ..Default::default()
    };
    let (state, notices) = cra_runtime::build_runtime(
        config,
        std::sync::Arc::new(cra_wire::SystemClock),
        std::sync::Arc::new(cra_wire::UuidV7Ids),
    )
    .unwrap();
    let path = dir.path().join("data").join("api-keys.toml");
    assert_eq!(
        notices[0],
        cra_runtime::StartNotice::AdminKeyCreated(path.clone())
    );
    let keys = cra_runtime::auth::KeysFile::load(&path).unwrap();
    let server = cra_runtime::start(state, std::future::pending())
        .await
        .unwrap();
    let resp = reqwest::Client::new()
        .get(format!("http://{}/metrics", server.addr))
        .bearer_auth(&keys.keys[0].token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    server.shutdown().await.unwrap();
}
