//! `GET /v1/traces/stream` (WebSocket): one session's events in order (`session_id`, optionally
//! replaying from `since_seq`), or every session's live events for operators (`all=true` with
//! `type`, `agent`, `decision` filters). Each text message is one TRACE event as stored.
//!
//! Delivery: the subscription is registered before the replay, so nothing appended meanwhile is
//! lost; events already sent are skipped and gaps are filled from the store, so each event goes
//! out once and in order. Messages ready together are written with one flush. A consumer whose
//! bounded queue overflows is closed with code [`CLOSE_SLOW_CONSUMER`] and a reason naming the
//! `since_seq` to resume from; a session's stream closes with 1000 after `session.ended`.

use std::sync::Arc;
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
use crate::service::sessions::{check_uuid_field, require_read};
use crate::state::AppState;
use crate::tracelog::{LiveEvent, StreamFilter, Subscription};

/// Close code sent to a consumer that fell behind (private-use range 4000-4999).
pub const CLOSE_SLOW_CONSUMER: u16 = 4008;

/// Close code of an all-sessions stream whose server lost its feed of other replicas' appends
/// for a while (`crate::replicas`): it may have missed events.
pub const CLOSE_MAY_HAVE_MISSED: u16 = 4009;

/// The subprotocol a browser offers (and the server selects) on a trace stream: browsers cannot
/// set `Authorization` on a WebSocket, so they offer their key beside it as
/// [`BEARER_PROTOCOL_PREFIX`] and the key's base64url (`specs/http.md`, "Live streams").
pub const STREAM_PROTOCOL: &str = "cra.trace.v1";

/// The prefix of the subprotocol that carries a bearer token: `cra.bearer.` then the token in
/// unpadded base64url, so any key fits the header's token syntax.
pub const BEARER_PROTOCOL_PREFIX: &str = "cra.bearer.";

/// The `Authorization` value a `Sec-WebSocket-Protocol` header carries, if it offers
/// [`BEARER_PROTOCOL_PREFIX`]: `Bearer <token>`. A value that does not decode is passed on as
/// a bearer token no key matches, so the refusal is the ordinary 401.
pub(crate) fn bearer_from_protocols(headers: &axum::http::HeaderMap) -> Option<String> {
    use base64::Engine as _;
    let offered = headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find_map(|p| p.strip_prefix(BEARER_PROTOCOL_PREFIX))?;
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(offered)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
    Some(format!("Bearer {token}"))
}

/// Query of `GET /v1/traces/stream`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamQuery {
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
pub(crate) async fn stream(
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
            let since = crate::extract::query_u64("since_seq", q.since_seq.as_deref())?;
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
    // Selected when offered (a browser fails the handshake unless one it offered is chosen);
    // the bearer protocol is never echoed.
    let ws = ws.protocols([STREAM_PROTOCOL]);
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
    events: &[Arc<LiveEvent>],
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
        if socket.feed(Message::Text(e.text.clone())).await.is_err() {
            return false;
        }
        any = true;
    }
    !any || socket.flush().await.is_ok()
}

/// How long a session stream waits for the live copy of an event missing below one that arrived
/// before reading it from the store.
const HOLE_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// A stream's keepalive: a ping every `limits.stream_ping_ms` (30 s), so that proxies and the
/// listener never see the stream idle; a peer that has sent nothing (no pong, no frame) by the
/// next ping is gone, and the stream closes with 1001.
struct Keepalive {
    tick: tokio::time::Interval,
    awaiting: bool,
}

impl Keepalive {
    fn new(state: &AppState) -> Self {
        let every = std::time::Duration::from_millis(state.config.limits.stream_ping_ms.max(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            tick,
            awaiting: false,
        }
    }

    /// The peer sent something: it is there.
    fn heard(&mut self) {
        self.awaiting = false;
    }

    /// At each tick: pings, or closes the stream (`false`) when the last ping went unanswered.
    async fn ping(&mut self, socket: &mut WebSocket) -> bool {
        if self.awaiting {
            close(socket, 1001, "no answer to the last ping; reconnect".into()).await;
            return false;
        }
        self.awaiting = true;
        socket.send(Message::Ping(Vec::new().into())).await.is_ok()
    }
}

/// The first sequence at or after `next` missing below the highest event of `ready`, if any.
fn first_hole(next: u64, ready: &[Arc<LiveEvent>]) -> Option<u64> {
    let mut seqs: Vec<u64> = ready
        .iter()
        .map(|e| e.sequence)
        .filter(|s| *s >= next)
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    let mut want = next;
    for s in seqs {
        if s != want {
            return Some(want);
        }
        want = s + 1;
    }
    None
}

/// Puts live events in sequence order from `next` on, without holes: appenders of one session
/// may publish out of order (7 before 6), so every hole below an event that arrived, at the
/// start or between two of them, is filled from the store with `read(after, limit)`. Publication
/// follows the durable commit and sequences are committed in order, so the store holds every
/// event below one that was published; should it not, the stream fails (and the client resumes
/// with `since_seq`) rather than skip an event. Events below `next` (already sent) are dropped.
async fn in_order<F, Fut>(
    next: u64,
    mut ready: Vec<Arc<LiveEvent>>,
    mut read: F,
) -> Result<Vec<Arc<LiveEvent>>, ApiError>
where
    F: FnMut(Option<u64>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<TraceEvent>, ApiError>>,
{
    ready.sort_by_key(|e| e.sequence);
    let mut cursor = next;
    let mut out = Vec::with_capacity(ready.len());
    for e in ready {
        if e.sequence < cursor {
            continue;
        }
        while cursor < e.sequence {
            let want = usize::try_from(e.sequence - cursor).unwrap_or(usize::MAX);
            let gap = read(cursor.checked_sub(1), want).await?;
            let before = cursor;
            for g in gap {
                if g.sequence == cursor && cursor < e.sequence {
                    cursor += 1;
                    out.push(Arc::new(LiveEvent::new(g)));
                }
            }
            if cursor == before {
                return Err(ApiError::new(
                    Token::Unavailable,
                    format!(
                        "event {cursor} of the session is not readable although event {} was published",
                        e.sequence
                    ),
                ));
            }
        }
        cursor = e.sequence + 1;
        out.push(e);
    }
    Ok(out)
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
    // Whether the chain already holds `session.ended`, read before the replay: then the replay
    // reads everything the chain will ever hold. (The session record is not asked: it says
    // ended before `session.ended` is appended, and an end landing during the replay is
    // delivered by the subscription, taken before this.)
    let ended_before = {
        let (chains, sid) = (state.backends.chains.clone(), id.clone());
        state
            .quick("reading the chain's head failed", move || {
                chains.session(&sid)
            })
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .is_some_and(|h| h.ended)
    };
    let mut next = since;
    let mut ended = false;
    // Replay what is stored from `since`.
    if !catch_up(
        &state,
        &mut socket,
        &id,
        &filter,
        &owner,
        &mut next,
        &mut ended,
    )
    .await
    {
        return;
    }
    // A chain that had ended before the replay has nothing more to come, even when the replay
    // started past its `session.ended` (a resume at the end).
    ended |= ended_before;
    // Follow live.
    let mut keepalive = Keepalive::new(&state);
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
                let mut ready = vec![first];
                while let Ok(more) = sub.rx.try_recv() {
                    ready.push(more);
                }
                // A hole's event is committed (it is below one that was published) and its
                // appender is about to publish it: wait briefly for that copy rather than have
                // every subscriber read the store. The store fills what is still missing after
                // the grace, e.g. when the appender's request was dropped before it published.
                let deadline = tokio::time::Instant::now() + HOLE_GRACE;
                while first_hole(next, &ready).is_some() {
                    match tokio::time::timeout_at(deadline, sub.rx.recv()).await {
                        Ok(Some(more)) => {
                            ready.push(more);
                            while let Ok(more) = sub.rx.try_recv() {
                                ready.push(more);
                            }
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
                let sid = id.clone();
                let read = |after: Option<u64>, limit: usize| {
                    let state = state.clone();
                    let sid = sid.clone();
                    async move { state.read_events_after(&sid, after, limit).await }
                };
                let batch = match in_order(next, ready, read).await {
                    Ok(b) => b,
                    Err(e) => {
                        close(&mut socket, 1011, format!("{}; reconnect with since_seq={next}", e.body.message)).await;
                        return;
                    }
                };
                if !send_batch(&mut socket, &batch, &filter, &owner, &mut next, &mut ended).await {
                    return;
                }
            }
            // Other replicas' events may have been missed (`crate::replicas`): the store has them.
            Ok(()) = sub.resync.changed() => {
                if !catch_up(&state, &mut socket, &id, &filter, &owner, &mut next, &mut ended).await {
                    return;
                }
            }
            _ = keepalive.tick.tick() => {
                if !keepalive.ping(&mut socket).await {
                    return;
                }
            }
            msg = socket.recv() => {
                match msg {
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => keepalive.heard(),
                }
            }
        }
    }
}

/// Sends what the store holds from `next` on, in pages; `false` when the stream is over (the
/// client left, or the read failed and the stream was closed saying why).
async fn catch_up(
    state: &AppState,
    socket: &mut WebSocket,
    id: &str,
    filter: &StreamFilter,
    owner: &str,
    next: &mut u64,
    ended: &mut bool,
) -> bool {
    loop {
        let page = match state.read_events_after(id, next.checked_sub(1), 1024).await {
            Ok(p) => p,
            Err(e) => {
                close(socket, 1011, e.body.message).await;
                return false;
            }
        };
        if page.is_empty() {
            return true;
        }
        let page: Vec<Arc<LiveEvent>> = page
            .into_iter()
            .map(|e| Arc::new(LiveEvent::new(e)))
            .collect();
        if !send_batch(socket, &page, filter, owner, next, ended).await {
            return false;
        }
    }
}

async fn all_stream(state: AppState, mut socket: WebSocket, mut sub: Subscription) {
    let mut keepalive = Keepalive::new(&state);
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
                    if socket.feed(Message::Text(e.text.clone())).await.is_err() {
                        return;
                    }
                }
                if socket.flush().await.is_err() {
                    return;
                }
            }
            // The all-sessions stream is live only: it cannot say which events it missed.
            Ok(()) = sub.resync.changed() => {
                close(&mut socket, CLOSE_MAY_HAVE_MISSED, "events of other replicas may have been missed; reconnect, and read each session's missed events with since_seq".into()).await;
                return;
            }
            _ = keepalive.tick.tick() => {
                if !keepalive.ping(&mut socket).await {
                    return;
                }
            }
            msg = socket.recv() => {
                match msg {
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => keepalive.heard(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cra_trace::{ChainHead, seal};
    use serde_json::json;

    /// A session's chain of `n` events.
    fn chain(n: u64) -> Vec<TraceEvent> {
        let mut head = ChainHead::genesis();
        (0..n)
            .map(|i| {
                let e = seal(
                    crate::tracelog::tests::draft("test.tick", json!({"i": i})),
                    "sess",
                    &head,
                    format!("e{i}"),
                    "2026-03-01T12:00:00.000000Z".into(),
                );
                head = ChainHead::after(&e);
                e
            })
            .collect()
    }

    /// Runs `in_order` on the events `arrived` (sequences of `chain`) with the store holding
    /// `stored`; returns the delivered sequences (or the error token) and the number of reads.
    fn run(
        next: u64,
        arrived: &[u64],
        chain: &[TraceEvent],
        stored: &[TraceEvent],
    ) -> (Result<Vec<u64>, String>, usize) {
        let ready = arrived
            .iter()
            .filter_map(|&i| chain.iter().find(|e| e.sequence == i).cloned())
            .map(|e| Arc::new(LiveEvent::new(e)))
            .collect();
        let reads = std::cell::Cell::new(0);
        let read = |after: Option<u64>, limit: usize| {
            reads.set(reads.get() + 1);
            let from = after.map_or(0, |a| a + 1);
            let page: Vec<TraceEvent> = stored
                .iter()
                .filter(|e| e.sequence >= from)
                .take(limit)
                .cloned()
                .collect();
            async move { Ok(page) }
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a test runtime");
        let got = rt
            .block_on(in_order(next, ready, read))
            .map(|v| v.iter().map(|e| e.sequence).collect())
            .map_err(|e| format!("{}: {}", e.body.error, e.body.message));
        (got, reads.get())
    }

    #[test]
    fn holes_between_and_before_arrivals_are_filled_from_the_store() {
        let all = chain(12);
        // (next, arrived, delivered, store reads); written by hand.
        let cases: &[(u64, &[u64], &[u64], usize)] = &[
            (5, &[5, 6, 7], &[5, 6, 7], 0),
            // 6 was published after 7: the hole between two arrivals (the fan-out loss).
            (5, &[5, 7], &[5, 6, 7], 1),
            (5, &[7, 5], &[5, 6, 7], 1),
            // A hole before the first arrival, and one between.
            (3, &[5, 8], &[3, 4, 5, 6, 7, 8], 2),
            // Already sent, duplicated or late copies are dropped.
            (6, &[4, 5, 6, 6, 7], &[6, 7], 0),
            (9, &[2], &[], 0),
        ];
        for (next, arrived, want, reads) in cases {
            let (got, n) = run(*next, arrived, &all, &all);
            assert_eq!(got, Ok(want.to_vec()), "next {next}, arrived {arrived:?}");
            assert_eq!(
                n, *reads,
                "store reads for next {next}, arrived {arrived:?}"
            );
        }
    }

    #[test]
    fn first_hole_finds_what_is_missing_below_an_arrival() {
        let all = chain(10);
        let pick = |seqs: &[usize]| -> Vec<Arc<LiveEvent>> {
            seqs.iter()
                .map(|&i| Arc::new(LiveEvent::new(all[i].clone())))
                .collect()
        };
        assert_eq!(first_hole(5, &pick(&[5, 6, 7])), None);
        assert_eq!(first_hole(5, &pick(&[7, 6, 5, 5])), None);
        assert_eq!(first_hole(5, &pick(&[5, 7])), Some(6));
        assert_eq!(first_hole(5, &pick(&[6])), Some(5));
        assert_eq!(first_hole(5, &pick(&[2, 3])), None);
        assert_eq!(first_hole(5, &[]), None);
    }

    #[test]
    fn a_hole_the_store_cannot_fill_fails_the_stream_instead_of_skipping() {
        let all = chain(8);
        let mut stored = all.clone();
        stored.remove(6);
        let (got, _) = run(5, &[5, 7], &all, &stored);
        let err = got.expect_err("event 6 cannot be delivered");
        assert!(err.starts_with("unavailable: event 6 "), "{err}");
    }
}
