//! `GET /v1/traces/stream` (WebSocket): one session's events in order (`session_id`, optionally
//! replaying from `since_seq`), or every session's live events for operators (`all=true` with
//! `type`, `agent`, `decision` filters). Each text message is one TRACE event as stored.
//!
//! Delivery: the subscription is registered before the replay, so nothing appended meanwhile is
//! lost; events already sent are skipped and gaps are filled from the store, so each event goes
//! out once and in order. Messages ready together are written with one flush. A consumer whose
//! bounded queue overflows is closed with code [`CLOSE_SLOW_CONSUMER`] and a reason naming the
//! `since_seq` to resume from; a session's stream closes with 1000 after `session.ended`.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use cra_trace::TraceEvent;
use cra_wire::Token;
use futures::SinkExt;
use serde::Deserialize;

use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::extract::QueryParams;
use crate::routes::Caller;
use crate::routes::sessions::{check_uuid_field, require_read};
use crate::state::AppState;
use crate::tracelog::{StreamFilter, Subscription};

/// Close code sent to a consumer that fell behind (private-use range 4000-4999).
pub const CLOSE_SLOW_CONSUMER: u16 = 4008;

/// Query of `GET /v1/traces/stream`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// The session to follow.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Replay from this sequence (inclusive).
    #[serde(default)]
    pub since_seq: Option<String>,
    /// `true`: every session (operators).
    #[serde(default)]
    pub all: Option<String>,
    /// Event type prefix filter.
    #[serde(default, rename = "type")]
    pub type_prefix: Option<String>,
    /// Agent filter (all-sessions stream).
    #[serde(default)]
    pub agent: Option<String>,
    /// Decision filter (all-sessions stream).
    #[serde(default)]
    pub decision: Option<String>,
}

enum Mode {
    Session { id: String, since: u64 },
    All,
}

/// Upgrades to a trace stream after checking access.
#[utoipa::path(get, path = "/v1/traces/stream", tag = "traces",
    params(("session_id" = Option<String>, Query, description = "The session to follow"),
           ("since_seq" = Option<u64>, Query, description = "Replay from this sequence"),
           ("all" = Option<bool>, Query, description = "Every session (operators)"),
           ("type" = Option<String>, Query, description = "Event type prefix"),
           ("agent" = Option<String>, Query, description = "Agent (with all=true)"),
           ("decision" = Option<String>, Query, description = "Decision (with all=true)")),
    responses((status = 101, description = "WebSocket of TRACE events"),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub async fn stream(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<StreamQuery>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let all = match q.all.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `all`: `{other}` is not true or false"),
            ));
        }
    };
    let filter = StreamFilter {
        type_prefix: q.type_prefix.clone(),
        agent: q.agent.clone(),
        decision: q.decision.clone(),
    };
    let mode = match (all, &q.session_id) {
        (true, None) => {
            actor.require(&[Role::Operator], "streaming every session")?;
            if q.since_seq.is_some() {
                return Err(ApiError::new(
                    Token::InvalidRequest,
                    "since_seq applies to one session's stream; the all-sessions stream is live only",
                ));
            }
            Mode::All
        }
        (false, Some(id)) => {
            check_uuid_field("/session_id", id)?;
            let since = match &q.since_seq {
                None => 0,
                Some(s) => s.parse::<u64>().map_err(|_| {
                    ApiError::new(
                        Token::InvalidRequest,
                        format!("query parameter `since_seq`: `{s}` is not a non-negative integer"),
                    )
                })?,
            };
            let record = state.session_record(id).await?;
            require_read(&actor, &record)?;
            Mode::Session {
                id: id.clone(),
                since,
            }
        }
        _ => {
            return Err(ApiError::new(
                Token::InvalidRequest,
                "give exactly one of `session_id=ID` or `all=true`",
            ));
        }
    };
    let ws = ws.map_err(|e| {
        ApiError::new(
            Token::InvalidRequest,
            format!("this route is a WebSocket; connect with an Upgrade request ({e})"),
        )
    })?;
    let capacity = state.config.limits.stream_queue;
    state.metrics.streams_opened.fetch_add(1, Ordering::Relaxed);
    Ok(match mode {
        Mode::Session { id, since } => {
            let sub = state
                .hub
                .subscribe(Some(&id), StreamFilter::default(), capacity);
            ws.on_upgrade(move |socket| session_stream(state, socket, id, since, filter, sub))
                .into_response()
        }
        Mode::All => {
            let sub = state.hub.subscribe(None, filter, capacity);
            ws.on_upgrade(move |socket| all_stream(state, socket, sub))
                .into_response()
        }
    })
}

fn text(event: &TraceEvent) -> Option<Message> {
    serde_json::to_string(event)
        .ok()
        .map(|s| Message::Text(s.into()))
}

async fn close(socket: &mut WebSocket, code: u16, reason: String) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

/// Sends `events` that pass `filter` (advancing `next` past all of them) with one flush.
async fn send_batch(
    socket: &mut WebSocket,
    events: &[TraceEvent],
    filter: &StreamFilter,
    owner: &str,
    next: &mut u64,
    ended: &mut bool,
) -> bool {
    let mut any = false;
    for e in events {
        if e.sequence < *next {
            continue;
        }
        *next = e.sequence + 1;
        if e.event_type == cra_trace::store::SESSION_ENDED {
            *ended = true;
        }
        if !filter.admits(owner, e) {
            continue;
        }
        let Some(m) = text(e) else { continue };
        if socket.feed(m).await.is_err() {
            return false;
        }
        any = true;
    }
    !any || socket.flush().await.is_ok()
}

async fn session_stream(
    state: AppState,
    mut socket: WebSocket,
    id: String,
    since: u64,
    filter: StreamFilter,
    mut sub: Subscription,
) {
    let owner = match state.session_record(&id).await {
        Ok(r) => r.agent_id,
        Err(_) => String::new(),
    };
    let mut next = since;
    let mut ended = false;
    // Replay what is stored from `since`.
    loop {
        let page = match state
            .read_events_after(&id, next.checked_sub(1), 1024)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                close(&mut socket, 1011, e.body.message).await;
                return;
            }
        };
        if page.is_empty() {
            break;
        }
        if !send_batch(&mut socket, &page, &filter, &owner, &mut next, &mut ended).await {
            return;
        }
    }
    // Follow live.
    loop {
        if ended {
            close(&mut socket, 1000, "session ended".into()).await;
            return;
        }
        tokio::select! {
            ev = sub.rx.recv() => {
                let Some(first) = ev else {
                    if sub.overflow.load(Ordering::SeqCst) {
                        state.metrics.streams_slow_closed.fetch_add(1, Ordering::Relaxed);
                        close(&mut socket, CLOSE_SLOW_CONSUMER, format!(
                            "slow consumer: more than {} events queued; reconnect with since_seq={next}",
                            state.config.limits.stream_queue)).await;
                    } else {
                        close(&mut socket, 1001, format!("server going away; reconnect with since_seq={next}")).await;
                    }
                    return;
                };
                let mut ready = vec![(*first).clone()];
                while let Ok(more) = sub.rx.try_recv() {
                    ready.push((*more).clone());
                }
                ready.sort_by_key(|e| e.sequence);
                // Fill a gap (two appenders published out of order) from the store.
                if let Some(lowest) = ready.iter().map(|e| e.sequence).find(|s| *s >= next)
                    && lowest > next
                {
                    match state.read_events_after(&id, next.checked_sub(1), usize::try_from(lowest - next).unwrap_or(usize::MAX)).await {
                        Ok(gap) => {
                            if !send_batch(&mut socket, &gap, &filter, &owner, &mut next, &mut ended).await {
                                return;
                            }
                        }
                        Err(e) => {
                            close(&mut socket, 1011, e.body.message).await;
                            return;
                        }
                    }
                }
                if !send_batch(&mut socket, &ready, &filter, &owner, &mut next, &mut ended).await {
                    return;
                }
            }
            msg = socket.recv() => {
                match msg {
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => {}
                }
            }
        }
    }
}

async fn all_stream(state: AppState, mut socket: WebSocket, mut sub: Subscription) {
    loop {
        tokio::select! {
            ev = sub.rx.recv() => {
                let Some(first) = ev else {
                    if sub.overflow.load(Ordering::SeqCst) {
                        state.metrics.streams_slow_closed.fetch_add(1, Ordering::Relaxed);
                        close(&mut socket, CLOSE_SLOW_CONSUMER, format!(
                            "slow consumer: more than {} events queued; reconnect, and read each session's missed events with since_seq",
                            state.config.limits.stream_queue)).await;
                    } else {
                        close(&mut socket, 1001, "server going away".into()).await;
                    }
                    return;
                };
                let mut batch = vec![first];
                while let Ok(more) = sub.rx.try_recv() {
                    batch.push(more);
                }
                for e in &batch {
                    let Some(m) = text(e) else { continue };
                    if socket.feed(m).await.is_err() {
                        return;
                    }
                }
                if socket.flush().await.is_err() {
                    return;
                }
            }
            msg = socket.recv() => {
                match msg {
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => {}
                }
            }
        }
    }
}

/// For [`ApiResult`] users that need the type in scope.
pub type StreamResult = ApiResult<Response>;
