//! The WebSocket trace stream: replay + live, resume with since_seq exactly once, slow consumers
//! told with a close code, operator stream with filters.

use futures::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::*;

pub(crate) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) async fn connect(s: &TestServer, key: &str, query: &str) -> Ws {
    let mut req = s.ws_url(query).into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    ws
}

/// Next event message (or the close frame as Err(code, reason)).
pub(crate) async fn next_event(ws: &mut Ws) -> Result<Value, (u16, String)> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => return Ok(serde_json::from_str(t.as_str()).unwrap()),
            Some(Ok(Message::Close(f))) => {
                return Err(f
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new())));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err((0, e.to_string())),
            None => return Err((0, "ended".into())),
        }
    }
}

/// A test event: `test.tick` number `i`.
fn tick(i: usize) -> cra_trace::EventDraft {
    cra_trace::EventDraft {
        trace_id: "t".into(),
        span_id: "s".into(),
        parent_span_id: None,
        event_type: "test.tick".into(),
        payload: json!({"i": i}),
    }
}

/// Ends `n` sessions' worth of events: appends `count` events to `sid` through real requests
/// (each session open/end pair adds events to its own chain, so use ends of child sessions).
async fn add_events(s: &TestServer, sid: &str, count: usize) {
    let state = &s.server.as_ref().unwrap().state;
    for i in 0..count {
        state
            .append_events(sid, "ops-bot", vec![tick(i)])
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn disconnect_and_resume_gets_every_event_exactly_once() {
    let s = TestServer::start().await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    add_events(&s, &sid, 4).await;
    let mut ws = connect(&s, AGENT, &format!("session_id={sid}")).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(
            next_event(&mut ws).await.unwrap()["sequence"]
                .as_u64()
                .unwrap(),
        );
    }
    ws.close(None).await.unwrap();
    drop(ws);
    // More events while disconnected.
    add_events(&s, &sid, 5).await;
    let resume = seen.last().unwrap() + 1;
    let mut ws = connect(&s, AGENT, &format!("session_id={sid}&since_seq={resume}")).await;
    // Live events after the replay.
    let s2 = &s;
    let sid2 = sid.clone();
    let live = async move {
        add_events(s2, &sid2, 3).await;
    };
    live.await;
    while seen.len() < 13 {
        seen.push(
            next_event(&mut ws).await.unwrap()["sequence"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(seen, (0..13).collect::<Vec<u64>>());
    // Ending the session ends the stream with a normal close.
    assert_eq!(
        s.delete(Some(AGENT), &format!("/v1/sessions/{sid}"))
            .await
            .0,
        204
    );
    assert_eq!(
        next_event(&mut ws).await.unwrap()["event_type"],
        "session.ended"
    );
    assert_eq!(next_event(&mut ws).await.unwrap_err().0, 1000);
    s.stop().await;
}

#[tokio::test]
async fn a_slow_consumer_is_closed_with_a_resume_point() {
    let s = TestServer::start_with(|c| c.limits.stream_queue = 4).await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let mut ws = connect(&s, AGENT, &format!("session_id={sid}")).await;
    assert_eq!(next_event(&mut ws).await.unwrap()["sequence"], 0);
    // One batch larger than the queue: the subscriber overflows deterministically. The stream
    // may still be replaying when the batch lands (then it sends what it reads from the store
    // first); either way it closes with the point to resume from, right after the last event
    // it sent, and a resume from there sends the rest, each event once.
    let state = &s.server.as_ref().unwrap().state;
    let drafts = (0..10).map(tick).collect();
    state.append_events(&sid, "ops-bot", drafts).await.unwrap();
    let mut next = 1u64;
    let (code, reason) = loop {
        match next_event(&mut ws).await {
            Ok(e) => {
                assert_eq!(e["sequence"], next, "in order, once");
                next += 1;
            }
            Err(close) => break close,
        }
    };
    assert_eq!(code, cra_runtime::CLOSE_SLOW_CONSUMER);
    assert!(reason.contains(&format!("since_seq={next}")), "{reason}");
    let mut ws = connect(&s, AGENT, &format!("session_id={sid}&since_seq={next}")).await;
    for want in next..=10u64 {
        assert_eq!(next_event(&mut ws).await.unwrap()["sequence"], want);
    }
    s.stop().await;
}

#[tokio::test]
async fn operator_stream_filters_and_agents_cannot_use_it() {
    let s = TestServer::start().await;
    let mut req = s.ws_url("all=true").into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {AGENT}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 403)
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let mut ws = connect(&s, OPERATOR, "all=true&type=session.&agent=other-bot").await;
    let _mine = s.open_session(AGENT, "ops-bot").await;
    let theirs = s.open_session(AGENT2, "other-bot").await;
    let e = next_event(&mut ws).await.unwrap();
    assert_eq!(e["session_id"], theirs.as_str());
    assert_eq!(e["event_type"], "session.started");
    s.stop().await;
}

#[tokio::test]
async fn other_agents_cannot_stream_a_session() {
    let s = TestServer::start().await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let mut req = s
        .ws_url(&format!("session_id={sid}"))
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {AGENT2}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 403)
        }
        other => panic!("expected 403, got {other:?}"),
    }
    // An auditor may.
    let mut ws = connect(&s, AUDITOR, &format!("session_id={sid}")).await;
    assert_eq!(
        next_event(&mut ws).await.unwrap()["event_type"],
        "session.started"
    );
    s.stop().await;
}

/// A resolve's events reach a live subscriber exactly as they are stored, the completion event
/// too (its payload is written as canonical text and parsed back only for subscribers). The
/// answer's bytes are the resolution's TRACE canonical form, the bytes its chain hashed.
#[tokio::test]
async fn a_live_resolve_streams_the_events_as_stored() {
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let mut ws = connect(&s, MAINT, &format!("session_id={sid}")).await;
    // The stream is live once the session's first event has come through it.
    assert_eq!(next_event(&mut ws).await.unwrap()["sequence"], 0);
    let answer = s
        .http
        .post(s.url("/v1/resolve"))
        .bearer_auth(MAINT)
        .json(&resolve_request(
            "maintainer-bot",
            &sid,
            &rid(),
            &["repo-read"],
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    let res: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(text, cra_wire::canonical::trace_canonical(&res));
    let stored = s.events(&sid).await;
    let mut live = Vec::new();
    while live.len() + 1 < stored.len() {
        live.push(next_event(&mut ws).await.unwrap());
    }
    assert_eq!(live, stored[1..].to_vec());
    let completed = live.last().unwrap();
    assert_eq!(completed["event_type"], "carp.resolution.completed");
    assert_eq!(completed["payload"]["resolution"], res);
    s.stop().await;
}

/// When a replica's feed of the other replicas' appends breaks (its listening connection is
/// terminated), its all-sessions streams close with 4009, since they cannot say what they
/// missed, and its session streams stay open and read the store: events another replica
/// appended meanwhile arrive once and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_replica_feed_closes_all_streams_with_4009_and_session_streams_read_on_postgres() {
    use cra_store::testing::{TestSchema, postgres_url};
    let Some(url) = postgres_url("a_broken_replica_feed_closes_all_streams_with_4009") else {
        return;
    };
    let schema = TestSchema::new(&url, "feedloss");
    let name = schema.name().to_owned();
    let s = TestServer::start_with(|c| {
        c.postgres = Some(url.clone());
        c.postgres_schema = name;
    })
    .await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let mut session = connect(&s, AGENT, &format!("session_id={sid}")).await;
    assert_eq!(next_event(&mut session).await.unwrap()["sequence"], 0);
    let mut all = connect(&s, OPERATOR, "all=true").await;

    let other = {
        let schema_name = schema.name().to_owned();
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let other = cra_store::PgStore::connect(&url, &schema_name).unwrap();
            let killed = other
                .client()
                .unwrap()
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1",
                    &[&format!(
                        "LISTEN \"{}\"",
                        cra_store::pg::feed::channel(&schema_name)
                    )],
                )
                .unwrap()
                .len();
            assert_eq!(killed, 1, "the server's one listening connection");
            other
        })
        .await
        .unwrap()
    };
    let (code, reason) = next_event(&mut all).await.unwrap_err();
    assert_eq!(code, cra_runtime::CLOSE_MAY_HAVE_MISSED, "{reason}");
    assert!(reason.contains("since_seq"), "{reason}");

    let sid2 = sid.clone();
    tokio::task::spawn_blocking(move || {
        cra_trace::store::ChainStore::append(&other, &sid2, vec![tick(1), tick(2)]).unwrap();
        drop(other);
    })
    .await
    .unwrap();
    for want in [1, 2] {
        let e = next_event(&mut session).await.unwrap();
        assert_eq!(
            (e["sequence"].as_u64(), &e["event_type"]),
            (Some(want), &json!("test.tick"))
        );
    }
    s.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}
