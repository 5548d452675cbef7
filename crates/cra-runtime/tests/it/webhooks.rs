//! Approver notifications (issue 31, item 5) against a real receiver on loopback: an approval
//! that opens, is granted, and lapses undecided each reaches the webhooks that asked for it,
//! signed as Standard Webhooks sign (checked here by recomputing the HMAC; the Python client's
//! `test_webhooks.py` checks it with the `standardwebhooks` library, which we did not write);
//! a 500 is retried under the same `webhook-id`; a dead receiver is given up after its attempts;
//! every outcome is recorded in the operator audit chain. On both backends (on PostgreSQL only
//! the leader delivers, so the test waits for this replica to lead).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine as _;
use cra_runtime::config::WebhookConfig;
use cra_store::retention::OPERATOR_AUDIT_SESSION;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::*;

/// One POST the receiver got.
struct Post {
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Post {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).unwrap().to_str().unwrap()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

type Answers = Arc<Mutex<VecDeque<u16>>>;

/// A receiver on loopback answering each POST with the next of `answers` (then 200); its URL
/// and the POSTs it gets.
async fn receiver(answers: Vec<u16>) -> (String, mpsc::UnboundedReceiver<Post>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let answers: Answers = Arc::new(Mutex::new(answers.into()));
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State((tx, answers)): State<(mpsc::UnboundedSender<Post>, Answers)>,
                 headers: HeaderMap,
                 body: Bytes| async move {
                    let _ = tx.send(Post {
                        headers,
                        body: body.to_vec(),
                    });
                    let code = answers.lock().unwrap().pop_front().unwrap_or(200);
                    StatusCode::from_u16(code).unwrap()
                },
            ),
        )
        .with_state((tx, answers));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

/// The next POST (30 s at most: deliveries are asynchronous, never awaited by the append).
async fn next(rx: &mut mpsc::UnboundedReceiver<Post>) -> Post {
    tokio::time::timeout(std::time::Duration::from_secs(30), rx.recv())
        .await
        .expect("a notification within the deadline")
        .unwrap()
}

fn secret() -> (String, Vec<u8>) {
    let bytes = vec![7u8; 32];
    let text = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(&bytes)
    );
    (text, bytes)
}

fn hook(url: &str, events: Option<&[&str]>, max_attempts: u32) -> WebhookConfig {
    WebhookConfig {
        url: url.to_owned(),
        secret: Some(secret().0),
        secret_file: None,
        events: events.map(|e| e.iter().map(|s| (*s).to_owned()).collect()),
        max_attempts,
        retry_initial_ms: 5,
        timeout_ms: 5_000,
    }
}

/// Checks `post`'s signature as a receiver does, and answers its body.
fn verified(post: &Post) -> Value {
    let id = post.header("webhook-id");
    let timestamp: i64 = post.header("webhook-timestamp").parse().unwrap();
    let expected = cra_runtime::webhooks::signature(&secret().1, id, timestamp, &post.body);
    assert_eq!(post.header("webhook-signature"), expected);
    assert!(id.starts_with("msg_"), "{id}");
    assert_eq!(post.header("content-type"), "application/json");
    post.json()
}

/// Waits for the `n`th operator-chain event of `event_type` and answers the events of it.
async fn recorded(s: &TestServer, event_type: &str, n: usize) -> Vec<Value> {
    let state = s.server.as_ref().unwrap().state.clone();
    let mut sub = state.hub.subscribe(
        Some(OPERATOR_AUDIT_SESSION),
        cra_runtime::StreamFilter::default(),
        1_024,
    );
    loop {
        // The operator chain starts with its first record: until then it is not found.
        let path = format!("/v1/traces/{OPERATOR_AUDIT_SESSION}");
        let (status, body) = s.get(Some(ADMIN), &path).await;
        assert!(status == 200 || status == 404, "{body}");
        let found: Vec<Value> = body
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["event_type"] == event_type)
            .cloned()
            .collect();
        if found.len() >= n {
            return found;
        }
        tokio::time::timeout(std::time::Duration::from_secs(30), sub.rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{event_type} #{n} recorded within the deadline"));
    }
}

async fn approvals_are_notified(s: TestServer, good: &mut mpsc::UnboundedReceiver<Post>) {
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let resolve = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &resolve).await;
    assert_eq!(st, 200, "{res}");
    let approval = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;

    // Opened: the first attempt is answered 500, the retry 200, under one delivery id.
    let first = next(good).await;
    let retry = next(good).await;
    assert_eq!(first.header("webhook-id"), retry.header("webhook-id"));
    let body = verified(&retry);
    assert_eq!(body, verified(&first));
    assert_eq!(body["type"], "approval.requested");
    assert_eq!(body["data"]["approval_id"], approval.as_str());
    assert_eq!(body["data"]["session_id"], sid.as_str());
    assert_eq!(body["data"]["event"]["payload"]["action_id"], "pr.merge");
    let delivered = recorded(&s, "notification.delivered", 1).await;
    let p = &delivered[0]["payload"];
    assert_eq!(
        (&p["notification"], &p["attempts"], &p["status"]),
        (&json!("approval.requested"), &json!(2), &json!(200))
    );
    assert_eq!(p["delivery_id"], first.header("webhook-id"));

    // Granted: told to both webhooks; the dead one is given up after its two attempts.
    let (st, dec) = s
        .post(
            Some(OPERATOR),
            &format!("/v1/approvals/{approval}"),
            &json!({"decision": "grant", "note": "checked"}),
        )
        .await;
    assert_eq!(st, 200, "{dec}");
    let granted = verified(&next(good).await);
    assert_eq!(granted["type"], "approval.granted");
    assert_eq!(granted["data"]["event"]["payload"]["note"], "checked");
    let failed = recorded(&s, "notification.failed", 1).await;
    let p = &failed[0]["payload"];
    assert_eq!(
        (&p["notification"], &p["attempts"]),
        (&json!("approval.granted"), &json!(2))
    );
    assert!(p["error"].as_str().unwrap().contains("POST"), "{p}");
    recorded(&s, "notification.delivered", 2).await;

    // A second approval left undecided past its resolution's lifetime: told it expired.
    let resolve = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (_, res) = s.post(Some(MAINT), "/v1/resolve", &resolve).await;
    let second = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    assert_eq!(verified(&next(good).await)["type"], "approval.requested");
    s.clock.advance(time::Duration::hours(2));
    let expired = verified(&next(good).await);
    assert_eq!(expired["type"], "approval.expired");
    assert_eq!(expired["data"]["approval_id"], second.as_str());
    assert_eq!(expired["data"]["agent_id"], "maintainer-bot");
    let chain = serde_json::to_string(&s.events(OPERATOR_AUDIT_SESSION).await).unwrap();
    assert!(!chain.contains(&secret().0), "the secret is never recorded");
    let metrics = s.http.get(s.url("/metrics")).bearer_auth(ADMIN).send();
    let text = metrics.await.unwrap().text().await.unwrap();
    assert!(text.contains("cra_notifications_failed_total 1"), "{text}");
    s.stop_blocking().await;
}

/// Configures the webhooks: `good` gets everything (its first answer is a 500), a dead
/// receiver (a port nobody listens on) only grants, with two attempts.
fn with_hooks(c: &mut cra_runtime::config::RuntimeConfig, good: &str) {
    c.notifications.webhooks = vec![
        hook(good, None, 3),
        hook("http://127.0.0.1:9/hook", Some(&["approval.granted"]), 2),
    ];
}

#[tokio::test]
async fn approvals_are_notified_signed_retried_and_recorded() {
    let (url, mut rx) = receiver(vec![500]).await;
    let s = TestServer::start_with(move |c| with_hooks(c, &url)).await;
    approvals_are_notified(s, &mut rx).await;
}

#[tokio::test]
async fn approvals_are_notified_signed_retried_and_recorded_postgres() {
    let name = "approvals_are_notified_signed_retried_and_recorded_postgres";
    let Some(pg) = cra_store::testing::postgres_url(name) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&pg, "webhooks");
    let schema_name = schema.name().to_owned();
    let (url, mut rx) = receiver(vec![500]).await;
    let s = TestServer::start_with(move |c| {
        with_hooks(c, &url);
        c.postgres = Some(pg);
        c.postgres_schema = schema_name;
    })
    .await;
    let mut leads = s.server.as_ref().unwrap().state.leading.subscribe();
    tokio::time::timeout(std::time::Duration::from_secs(10), leads.wait_for(|l| *l))
        .await
        .expect("the only replica leads")
        .unwrap();
    approvals_are_notified(s, &mut rx).await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// A webhook's settings are checked at start: its URL, its secret, the notifications it names.
#[test]
fn a_webhook_with_a_bad_secret_url_or_event_stops_the_start() {
    let base = hook("http://127.0.0.1:1/hook", None, 3);
    let cases: Vec<(WebhookConfig, &str)> = vec![
        (
            WebhookConfig {
                secret: Some("not-whsec".into()),
                ..base.clone()
            },
            "whsec_",
        ),
        (
            WebhookConfig {
                secret: Some("whsec_AAAA".into()),
                ..base.clone()
            },
            "24 to 64",
        ),
        (
            WebhookConfig {
                secret: None,
                ..base.clone()
            },
            "exactly one",
        ),
        (
            WebhookConfig {
                url: "ftp://x".into(),
                ..base.clone()
            },
            "http",
        ),
        (
            WebhookConfig {
                events: Some(vec!["approval.opened".into()]),
                ..base.clone()
            },
            "approval.requested",
        ),
        (
            WebhookConfig {
                max_attempts: 0,
                ..base.clone()
            },
            "max_attempts",
        ),
    ];
    for (hook, says) in cases {
        let mut c = cra_runtime::config::RuntimeConfig::default();
        c.notifications.webhooks = vec![hook];
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("notifications.webhooks[0]") && e.contains(says),
            "{says}: {e}"
        );
    }
}
