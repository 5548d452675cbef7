//! The OpenTelemetry exporter's life with the server's (the export itself is decoded by
//! `opentelemetry-proto` in `tools/peers/otlp_receiver.py`).

use std::time::Duration;

use cra_runtime::config::OtlpConfig;

use crate::support::*;

/// Invariant: nothing of the exporter outlives the server's shutdown: with an export hanging
/// on a collector that never answers (for its whole 5 s timeout), a stopped server's data
/// directory is free at once and a new server opens it.
#[tokio::test]
async fn a_stopped_server_lets_go_of_its_store_while_an_export_hangs() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (took, mut arrived) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buf).await;
            // Kept open and never answered.
            let _ = took.send(socket).await;
        }
    });
    let s = TestServer::start_with(|c| c.otlp = Some(OtlpConfig::to(&url))).await;
    let sid = s.open_session(AGENT, "ops-bot").await;
    let (st, _) = s.delete(Some(AGENT), &format!("/v1/sessions/{sid}")).await;
    assert_eq!(st, 204);
    // The session's span is being posted: the collector has the request.
    let held = tokio::time::timeout(Duration::from_secs(10), arrived.recv())
        .await
        .expect("the export reached the collector within 10 s");
    let dir = s.stop_keep().await;
    let again = TestServer::start_in(dir, |_| {}).await;
    let (st, session) = again.get(Some(AGENT), &format!("/v1/sessions/{sid}")).await;
    assert_eq!((st, &session["status"]), (200, &serde_json::json!("ended")));
    drop(held);
    again.stop().await;
}
