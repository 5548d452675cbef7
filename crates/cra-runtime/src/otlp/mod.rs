//! OpenTelemetry export (`--otlp-endpoint`, `[otlp]`; `specs/otlp.md`): each session as a trace,
//! each resolve, execute, approval decision and deposit as a span, sent as OTLP over HTTP with
//! protobuf bodies to a collector.
//!
//! Invariants:
//! - **Never in the append's path.** The exporter taps the live fan-out of appended events,
//!   after the durable append: the fan-out never waits for it and hands it each append's
//!   events as appended (one copy; payloads are parsed and spans made on the exporter's own
//!   task), a tap that falls behind is dropped and counted, and spans wait in a bounded queue
//!   ([`crate::config::OtlpConfig::queue_spans`]) whose overflow is counted
//!   (`cra_otlp_spans_dropped_total`), never buffered without bound. A dead collector costs
//!   the exporter's own task and nothing else (`cargo xtask bench` measures it).
//! - **Once per deployment.** Only the replica that leads follows the appends and exports
//!   (the leader sees every replica's appends through the live feed); on the embedded store
//!   that is the one process.
//! - **Spans from the chain alone** (`spans`): ids derive from session and TRACE ids, so a
//!   span's parent and trace are known without asking the store.
//!
//! * `proto`: the protobuf encoding of `ExportTraceServiceRequest`.
//! * `spans`: events to spans.

mod proto;
pub(crate) mod spans;

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::OtlpConfig;
use crate::state::AppState;
use crate::tracelog::Tapped;
use spans::{Attr, Span, Tracker};

/// Appends the exporter's tap holds, at most (each append's events together).
const FEED_QUEUE: usize = 4_096;

/// A W3C Trace Context `traceparent` value, when it is one this server may record: version
/// `00` exactly as the recommendation writes it (`00-<32 hex>-<16 hex>-<2 hex>`, lower case,
/// neither id all zeros), or a later version's first four fields (then recorded as version
/// `00`'s form of them). Anything else is ignored, never refused.
pub fn traceparent(value: &str) -> Option<String> {
    let value = value.trim();
    let head = value.get(..55)?;
    let rest = &value[55..];
    let mut parts = head.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let ok = lower_hex(version, 2)
        && version != "ff"
        && lower_hex(trace, 32)
        && lower_hex(span, 16)
        && lower_hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && span.bytes().any(|b| b != b'0')
        && (rest.is_empty() || (version != "00" && rest.starts_with('-')));
    ok.then(|| format!("00-{trace}-{span}-{flags}"))
}

/// The URL spans are posted to: the endpoint as configured when its path ends with
/// `/v1/traces`, else the endpoint with `/v1/traces` appended (OTLP/HTTP's default path).
pub fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Exports the spans of appended events until the server stops, while this replica leads: a
/// replica that does not lead does not follow the appends at all (an all-sessions follower
/// would make it read every other replica's events from the store).
///
/// The intake and the sender are two futures of this one task, not tasks of their own: when
/// the server stops (or aborts this task) both end with it, and nothing of the exporter holds
/// the runtime, and so the store, past the server's shutdown.
pub(crate) async fn run(state: AppState, config: OtlpConfig) {
    let (tx, rx) = mpsc::channel::<Span>(config.queue_spans.max(1));
    let intake = async {
        let mut leading = state.leading.subscribe();
        loop {
            if *leading.borrow_and_update() {
                follow(&state, &tx, &mut leading).await;
            }
            tokio::select! {
                () = state.stopping.cancelled() => break,
                changed = leading.changed() => if changed.is_err() { break },
            }
        }
    };
    tokio::join!(intake, send(&state, &config, rx));
}

/// Follows every append through a tap of the fan-out ([`crate::tracelog::Hub::tap`], which
/// costs an append one copy of its events) and queues each ended span, until the server stops
/// or this replica stops leading.
async fn follow(
    state: &AppState,
    tx: &mpsc::Sender<Span>,
    leading: &mut tokio::sync::watch::Receiver<bool>,
) {
    let mut tracker = Tracker::default();
    let mut tap = state.hub.tap(FEED_QUEUE, spans::reads_payload);
    loop {
        tokio::select! {
            () = state.stopping.cancelled() => return,
            changed = leading.changed() => {
                if changed.is_err() || !*leading.borrow_and_update() {
                    return;
                }
            }
            appended = tap.rx.recv() => match appended {
                Some(batch) if tx.capacity() == 0 => {
                    // The queue is full (the collector is slow or gone): the spans these
                    // events end are dropped, counted without being made.
                    let ended = batch.events.iter().filter(|e| spans::ends_span(&e.event_type)).count();
                    state.metrics.otlp_spans_dropped.fetch_add(ended as u64, Ordering::Relaxed);
                }
                Some(batch) => {
                    for span in spans_of(&mut tracker, &batch) {
                        if tx.try_send(span).is_err() {
                            state.metrics.otlp_spans_dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                None => {
                    // The fan-out dropped a tap that overflowed: what it held is lost.
                    if tap.overflow.load(Ordering::SeqCst) {
                        state.metrics.otlp_feed_overflows.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!("the OTLP exporter fell behind the appends; some spans were not made");
                    }
                    tap = state.hub.tap(FEED_QUEUE, spans::reads_payload);
                }
            },
        }
    }
}

/// The spans one append ends. A payload written as canonical text is read here, on the
/// exporter's task, only for the events whose payload the tracker reads, and only the members
/// it reads ([`spans::payload_from_text`]).
fn spans_of(tracker: &mut Tracker, batch: &Tapped) -> Vec<Span> {
    let mut out = Vec::new();
    for (i, event) in batch.events.iter().enumerate() {
        let parsed;
        let event = match batch.text_of(i) {
            Some(text) if spans::reads_payload(&event.event_type) => {
                let mut e = event.clone();
                e.payload = spans::payload_from_text(text);
                parsed = e;
                &parsed
            }
            _ => event,
        };
        out.extend(tracker.observe(event));
    }
    out
}

/// Sends queued spans in batches of at most `batch_spans`: a batch is what is queued when the
/// sender is free, so spans go out as soon as they end, and more at once under load. A batch
/// the collector refuses or does not answer is retried twice (after 1 s, then 2 s), then
/// dropped and counted.
async fn send(state: &AppState, config: &OtlpConfig, mut rx: mpsc::Receiver<Span>) {
    let url = traces_url(&config.endpoint);
    let client = match crate::tls::http_client()
        .timeout(Duration::from_millis(config.timeout_ms))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "the OTLP exporter could not build its HTTP client; nothing is exported");
            return;
        }
    };
    let resource = vec![
        ("service.name", Attr::Str("cra".into())),
        (
            "service.version",
            Attr::Str(env!("CARGO_PKG_VERSION").into()),
        ),
        (
            "service.instance.id",
            Attr::Str(
                state
                    .config
                    .replica_id
                    .clone()
                    .unwrap_or_else(|| "local".into()),
            ),
        ),
    ];
    let mut batch = Vec::with_capacity(config.batch_spans);
    loop {
        let first = tokio::select! {
            () = state.stopping.cancelled() => None,
            first = rx.recv() => first,
        };
        let Some(first) = first else {
            // Stopping: what is still queued is not sent.
            let left = rx.len() as u64;
            state
                .metrics
                .otlp_spans_dropped
                .fetch_add(left, Ordering::Relaxed);
            return;
        };
        batch.push(first);
        while batch.len() < config.batch_spans {
            match rx.try_recv() {
                Ok(s) => batch.push(s),
                Err(_) => break,
            }
        }
        let body = proto::export_request(&resource, env!("CARGO_PKG_VERSION"), &batch);
        let count = batch.len() as u64;
        batch.clear();
        if post(state, &client, &url, config, body).await {
            state
                .metrics
                .otlp_spans_exported
                .fetch_add(count, Ordering::Relaxed);
        } else {
            state
                .metrics
                .otlp_spans_failed
                .fetch_add(count, Ordering::Relaxed);
        }
    }
}

/// Posts one export, retrying twice; whether the collector took it (2xx).
async fn post(
    state: &AppState,
    client: &reqwest::Client,
    url: &str,
    config: &OtlpConfig,
    body: Vec<u8>,
) -> bool {
    for attempt in 0..3u32 {
        if attempt > 0 {
            let pause = Duration::from_secs(1 << (attempt - 1));
            tokio::select! {
                () = state.stopping.cancelled() => return false,
                () = tokio::time::sleep(pause) => {}
            }
        }
        let mut req = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body.clone());
        for (name, value) in &config.headers {
            req = req.header(name, value);
        }
        let answer = tokio::select! {
            () = state.stopping.cancelled() => return false,
            answer = req.send() => answer,
        };
        match answer {
            Ok(resp) if resp.status().is_success() => return true,
            Ok(resp) => {
                tracing::warn!(status = %resp.status(), url, "the OTLP collector refused spans")
            }
            Err(e) => tracing::warn!(error = %e, url, "the OTLP collector could not be reached"),
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_follow_the_recommendation() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(traceparent(good).as_deref(), Some(good));
        assert_eq!(traceparent(&format!(" {good} ")).as_deref(), Some(good));
        // A later version may carry more fields: its first four are kept.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert_eq!(traceparent(later).as_deref(), Some(good));
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01",
        ] {
            assert_eq!(traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(traces_url("http://c/otel/"), "http://c/otel/v1/traces");
    }
}
