//! Issue 29, item 2: slow and half-open clients (`crate::listen`). On `fda2190` the server had no
//! header, body or write timeout and no connection limit: one-byte connections held it, and a
//! half-sent request head kept shutdown waiting forever. Every wait here is on the server (a
//! read that ends when it closes the connection), bounded by a generous deadline; nothing sleeps.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// Generous: the server's own timeouts here are far shorter.
const DEADLINE: Duration = Duration::from_secs(10);

/// A connection that sends part of a request head and then nothing.
async fn half_open(s: &TestServer) -> TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /v1/health HTTP/1.1\r\nHost: cra\r\n")
        .await
        .unwrap();
    tcp
}

/// Reads until the server closes the connection; what it sent before.
async fn until_closed(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(DEADLINE, async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.expect("the server closes the connection");
    got
}

#[tokio::test]
async fn a_half_sent_request_head_is_closed_at_the_header_timeout() {
    let s = TestServer::start_with(|c| c.limits.header_read_timeout_ms = 200).await;
    let mut slow = half_open(&s).await;
    until_closed(&mut slow).await;
    let (st, _) = s.get(None, "/v1/health").await;
    assert_eq!(st, 200, "a whole request is served");
    s.stop().await;
}

#[tokio::test]
async fn half_open_connections_never_lock_out_a_client_that_sends_its_request() {
    let s = TestServer::start_with(|c| c.limits.max_connections = Some(16)).await;
    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(half_open(&s).await);
    }
    let authenticated = tokio::time::timeout(DEADLINE, s.get(Some(OPERATOR), "/metrics"));
    assert_eq!(authenticated.await.unwrap().0, 200);
    // The oldest half-open connections made room: the server closed them.
    until_closed(&mut held[0]).await;
    s.stop().await;
}

#[tokio::test]
async fn shutdown_closes_connections_without_a_request_head_at_once() {
    // A shutdown deadline far past the test's own: passing proves the at-once close.
    let s = TestServer::start_with(|c| c.limits.shutdown_deadline_ms = 600_000).await;
    let mut slow = half_open(&s).await;
    tokio::time::timeout(DEADLINE, s.stop())
        .await
        .expect("shutdown does not wait for a half-sent request head");
    until_closed(&mut slow).await;
}

#[tokio::test]
async fn a_body_slower_than_the_body_timeout_is_408() {
    let s = TestServer::start_with(|c| c.limits.body_timeout_ms = 200).await;
    let addr = s.base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/sessions HTTP/1.1\r\nHost: cra\r\nAuthorization: Bearer {AGENT}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"agent_id\""
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let answer = String::from_utf8_lossy(&until_closed(&mut tcp).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn a_quiet_stream_is_kept_alive_with_pings() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let s = TestServer::start_with(|c| {
        c.limits.stream_ping_ms = 100;
        c.limits.header_read_timeout_ms = 50;
    })
    .await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let mut ws = crate::stream::connect(&s, AGENT, &format!("session_id={sid}")).await;
    // Past the header timeout several times over, the stream still gets its pings (reading
    // them answers each with a pong).
    let mut pings = 0;
    while pings < 3 {
        let frame = tokio::time::timeout(DEADLINE, ws.next()).await.unwrap();
        match frame {
            Some(Ok(Message::Ping(_))) => pings += 1,
            Some(Ok(Message::Text(_))) => {}
            other => panic!("the stream ended: {other:?}"),
        }
    }
    s.stop().await;
}

/// Reads one WebSocket frame a server sent (unmasked): its opcode and payload.
async fn frame(tcp: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    tcp.read_exact(&mut head).await.unwrap();
    let len = match head[1] & 0x7F {
        126 => u64::from(tcp.read_u16().await.unwrap()),
        127 => tcp.read_u64().await.unwrap(),
        n => u64::from(n),
    };
    let mut payload = vec![0u8; usize::try_from(len).unwrap()];
    tcp.read_exact(&mut payload).await.unwrap();
    (head[0] & 0x0F, payload)
}

/// A stream whose client never answers a ping is closed at the next ping's time (1001), so a
/// vanished client does not hold a stream and its subscription. The client here speaks the
/// WebSocket handshake itself and reads frames without answering any (a library client answers
/// pings as it reads).
#[tokio::test]
async fn a_stream_whose_client_answers_no_ping_is_closed() {
    let s = TestServer::start_with(|c| c.limits.stream_ping_ms = 100).await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let addr = s.base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let upgrade = format!(
        "GET /v1/traces/stream?session_id={sid} HTTP/1.1\r\nHost: cra\r\nAuthorization: Bearer {AGENT}\r\n\
         Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    tcp.write_all(upgrade.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        answer.push(tcp.read_u8().await.unwrap());
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let mut pings = 0;
    let close = loop {
        match tokio::time::timeout(DEADLINE, frame(&mut tcp))
            .await
            .unwrap()
        {
            (0x9, _) => pings += 1,
            (0x8, payload) => break payload,
            _ => {} // the session's events
        }
    };
    assert_eq!(pings, 1, "one ping went unanswered");
    assert_eq!(u16::from_be_bytes([close[0], close[1]]), 1001);
    let reason = String::from_utf8_lossy(&close[2..]);
    assert!(reason.contains("no answer to the last ping"), "{reason}");
    s.stop().await;
}
