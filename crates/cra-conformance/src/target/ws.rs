//! The `stream` verb's client: a WebSocket trace stream (`GET /v1/traces/stream`, CRA §6.4) read
//! to its end. The runner connects, optionally ends the session over HTTP once the stream is open
//! (so the server must send `session.ended` and close), and reads until the server closes, or
//! until it has read `limit` events and closes itself. A stream that neither ends nor delivers
//! within [`QUIET_LIMIT`] is an error: the runner never waits on a guess.

use std::time::Duration;

use futures::StreamExt;
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};

/// How long the runner waits for the next message before calling the stream stuck.
pub const QUIET_LIMIT: Duration = Duration::from_secs(15);

/// What to stream.
#[derive(Debug, Clone)]
pub struct StreamRequest {
    /// The route with its query (`/v1/traces/stream?session_id=...`).
    pub path: String,
    /// The bearer token.
    pub token: Option<String>,
    /// A route to `DELETE` (with the same token) once the stream is open: ending the session.
    pub end_path: Option<String>,
    /// Stop after this many events, closing the stream from the runner's side.
    pub limit: Option<usize>,
}

/// A stream as read.
#[derive(Debug, Clone, Default)]
pub struct StreamRead {
    /// The upgrade's HTTP status: 101 when the stream opened.
    pub status: u16,
    /// The refusal's body when it did not open.
    pub body: Option<String>,
    /// Each text message, in order.
    pub messages: Vec<String>,
    /// The server's close frame (code, reason); `None` when the runner closed first.
    pub close: Option<(u16, String)>,
}

/// Streams `request` from the server at `base` (`http://host:port`).
pub async fn read_stream(base: &str, request: &StreamRequest) -> Result<StreamRead, String> {
    let url = format!("{}{}", base.replacen("http://", "ws://", 1), request.path);
    let mut upgrade = url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("{url}: {e}"))?;
    if let Some(t) = &request.token {
        let value = format!("Bearer {t}")
            .parse()
            .map_err(|e| format!("the token cannot be a header: {e}"))?;
        upgrade.headers_mut().insert("authorization", value);
    }
    let mut socket = match cra_runtime::tls::ws_connect(upgrade).await {
        Ok((socket, _)) => socket,
        Err(tungstenite::Error::Http(refused)) => {
            let status = refused.status().as_u16();
            let body = refused
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned());
            return Ok(StreamRead {
                status,
                body,
                ..StreamRead::default()
            });
        }
        Err(e) => return Err(format!("GET {url}: {e}")),
    };
    if let Some(end) = &request.end_path {
        end_session(base, end, request.token.as_deref()).await?;
    }
    let mut read = StreamRead {
        status: 101,
        ..StreamRead::default()
    };
    loop {
        if request.limit.is_some_and(|l| read.messages.len() >= l) {
            let _ = socket.close(None).await;
            return Ok(read);
        }
        let next = tokio::time::timeout(QUIET_LIMIT, socket.next())
            .await
            .map_err(|_| {
                format!(
                    "the stream sent nothing for {} s and did not close",
                    QUIET_LIMIT.as_secs()
                )
            })?;
        match next {
            None => return Ok(read),
            Some(Err(e)) => return Err(format!("reading the stream: {e}")),
            Some(Ok(Message::Text(t))) => read.messages.push(t.as_str().to_owned()),
            Some(Ok(Message::Close(frame))) => {
                read.close = Some(frame.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.as_str().to_owned())
                }));
                return Ok(read);
            }
            Some(Ok(_)) => {}
        }
    }
}

/// `DELETE {base}{path}`; anything but a 2xx is an error (the case cannot go on).
async fn end_session(base: &str, path: &str, token: Option<&str>) -> Result<(), String> {
    let client = cra_runtime::tls::http_client()
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let mut req = client.delete(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| format!("DELETE {path}: {e}"))?;
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        let body = resp.text().await.unwrap_or_default();
        return Err(format!("DELETE {path} answered {status}: {body}"));
    }
    Ok(())
}

/// Runs [`read_stream`] on a runtime of its own (for a blocking caller).
pub fn read_stream_blocking(base: &str, request: &StreamRequest) -> Result<StreamRead, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start an async runtime: {e}"))?;
    rt.block_on(read_stream(base, request))
}
