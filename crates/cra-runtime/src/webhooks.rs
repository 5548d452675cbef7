//! Approver notifications (issue 31, item 5): operator-configured webhooks are told when an
//! approval opens (`approval.requested`), is decided (`approval.granted`, `approval.rejected`)
//! or lapses undecided (`approval.expired`), signed as the Standard Webhooks specification
//! signs (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "id.timestamp.body">`), so receivers verify them with any Standard Webhooks library.
//!
//! Invariants:
//! - **Never in the append's path.** The notifier follows the live fan-out of appended events
//!   (after the durable append) through a bounded queue; a slow or dead receiver delays only its
//!   own deliveries, and a queue that overflows is counted (`cra_notifications_dropped_total`)
//!   and followed again.
//! - **Once per deployment.** Only the replica that leads delivers (every replica sees every
//!   append through the live feed); on the embedded store that is the one process.
//! - **Every delivery is recorded.** Its outcome, after the last attempt, is appended to the
//!   operator audit chain: `notification.delivered` (attempts, status) or `notification.failed`
//!   (attempts, last error), naming the webhook by URL and the approval; never the secret.
//!
//! Retries: an attempt that is not answered 2xx within `timeout_ms` is retried after
//! `retry_initial_ms`, then twice as long each time (at most a minute), `max_attempts` in all.
//! Deliveries still waiting when the process stops are not resumed at the next start, and an
//! approval that lapses while no replica runs is not notified (said in `specs/http.md`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use cra_carp::eval::unix_micros;
use cra_trace::{Payload, TraceEvent};
use hmac::Mac as _;
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::WebhookConfig;
use crate::state::AppState;
use crate::tracelog::StreamFilter;

/// A configured webhook with its secret read.
#[derive(Clone)]
pub struct Webhook {
    config: WebhookConfig,
    secret: Arc<Vec<u8>>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.config.url)
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// The webhook `config` describes.
    ///
    /// # Errors
    /// Its secret cannot be read or is malformed.
    pub fn new(config: WebhookConfig) -> Result<Self, String> {
        let secret = config.secret_bytes()?;
        Ok(Self {
            config,
            secret: Arc::new(secret),
        })
    }
}

/// The Standard Webhooks signature header value of `body` sent as message `id` at `timestamp`
/// (Unix seconds) with `secret`: `v1,` and the base64 of HMAC-SHA256 over `id.timestamp.body`.
pub fn signature(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag)
    )
}

/// One notification to deliver to one webhook.
#[derive(Debug, Clone)]
struct Delivery {
    hook: Webhook,
    kind: &'static str,
    approval_id: String,
    body: Vec<u8>,
}

/// `notification.delivered` / `notification.failed`: a delivery's outcome.
#[derive(Debug, Serialize)]
pub struct NotificationOutcome<'a> {
    /// The webhook's URL.
    pub webhook: &'a str,
    /// The `webhook-id` every attempt carried.
    pub delivery_id: &'a str,
    /// `approval.requested`, `approval.granted`, `approval.rejected` or `approval.expired`.
    pub notification: &'a str,
    /// The approval it was about.
    pub approval_id: &'a str,
    /// Attempts made.
    pub attempts: u32,
    /// The last HTTP status received, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why the last attempt failed (`notification.failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `notification.delivered`: a webhook answered 2xx.
#[derive(Serialize)]
#[serde(transparent)]
struct Delivered<'a>(NotificationOutcome<'a>);

/// `notification.failed`: given up after the last attempt.
#[derive(Serialize)]
#[serde(transparent)]
struct Failed<'a>(NotificationOutcome<'a>);

impl Payload for Delivered<'_> {
    const EVENT_TYPE: &'static str = "notification.delivered";
}
impl Payload for Failed<'_> {
    const EVENT_TYPE: &'static str = "notification.failed";
}

/// What the notifier remembers between events: approvals still open, with when they lapse.
#[derive(Debug, Default)]
pub struct Open {
    /// Approval id to (its session, lapse time in Unix microseconds).
    lapses: BTreeMap<String, (String, i64)>,
}

/// Follows the appended events and delivers notifications until the server stops; `hooks`
/// are the configured webhooks (nothing runs without one).
pub async fn run(state: AppState, hooks: Vec<Webhook>) {
    let mut open = Open::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let filter = StreamFilter {
        type_prefix: Some("approval.".to_owned()),
        ..StreamFilter::default()
    };
    let mut sub = state.hub.subscribe(None, filter.clone(), 4_096);
    loop {
        tokio::select! {
            () = state.stopping.cancelled() => return,
            event = sub.rx.recv() => match event {
                Some(live) => notice(&state, &hooks, &mut open, &live.event),
                None => {
                    // The hub dropped a queue that overflowed: count it and follow again.
                    if sub.overflow.load(Ordering::SeqCst) {
                        state.metrics.notifications_dropped.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!("approval notifications fell behind; some were not sent");
                    }
                    sub = state.hub.subscribe(None, filter.clone(), 4_096);
                }
            },
            _ = tick.tick() => expire_due(&state, &hooks, &mut open).await,
        }
    }
}

/// Handles one appended approval event: remembers or forgets the approval, and sends its
/// notification (when this replica leads).
pub fn notice(state: &AppState, hooks: &[Webhook], open: &mut Open, event: &TraceEvent) {
    let p = &event.payload;
    let Some(approval_id) = p.get("approval_id").and_then(Value::as_str) else {
        return;
    };
    let kind = match event.event_type.as_str() {
        "approval.requested" => {
            let lapse = p
                .get("expires_at")
                .and_then(Value::as_str)
                .and_then(|t| cra_wire::clock::parse_rfc3339(t).ok())
                .map(unix_micros);
            if let Some(at) = lapse {
                open.lapses
                    .insert(approval_id.to_owned(), (event.session_id.clone(), at));
            }
            "approval.requested"
        }
        "approval.granted" => "approval.granted",
        "approval.rejected" => "approval.rejected",
        _ => return,
    };
    if kind != "approval.requested" {
        open.lapses.remove(approval_id);
    }
    let data = json!({
        "approval_id": approval_id,
        "session_id": event.session_id,
        "event": {
            "event_type": event.event_type,
            "sequence": event.sequence,
            "event_hash": event.event_hash,
            "timestamp": event.timestamp,
            "payload": p,
        },
    });
    send(state, hooks, kind, approval_id, data);
}

/// Notifies `approval.expired` for every remembered approval whose lapse time has passed by the
/// server's clock and that is still pending in the store; forgets the others.
pub async fn expire_due(state: &AppState, hooks: &[Webhook], open: &mut Open) {
    let now = state.clock.now();
    let now_us = unix_micros(now);
    let due: Vec<(String, String)> = open
        .lapses
        .iter()
        .filter(|(_, (_, at))| *at <= now_us)
        .map(|(id, (session, _))| (id.clone(), session.clone()))
        .collect();
    for (approval_id, session_id) in due {
        open.lapses.remove(&approval_id);
        let id = approval_id.clone();
        let record = state.carp_read(move |s| s.get_approval(&id)).await;
        let Ok(Some(record)) = record else { continue };
        if record.status != cra_carp::store::ApprovalStatus::Pending {
            continue;
        }
        let data = json!({
            "approval_id": approval_id,
            "session_id": session_id,
            "agent_id": record.agent_id,
            "actions": record.actions,
            "expired_at": cra_wire::clock::format_timestamp(now),
        });
        send(state, hooks, "approval.expired", &approval_id, data);
    }
}

/// Queues `kind` about `approval_id` to every webhook that wants it, when this replica leads.
fn send(state: &AppState, hooks: &[Webhook], kind: &'static str, approval_id: &str, data: Value) {
    if !*state.leading.borrow() {
        return;
    }
    let body = json!({
        "type": kind,
        "timestamp": cra_wire::clock::format_timestamp(state.clock.now()),
        "data": data,
    });
    let body = serde_json::to_vec(&body).unwrap_or_default();
    for hook in hooks.iter().filter(|h| h.config.wants(kind)) {
        let delivery = Delivery {
            hook: hook.clone(),
            kind,
            approval_id: approval_id.to_owned(),
            body: body.clone(),
        };
        tokio::spawn(deliver(state.clone(), delivery));
    }
}

/// Makes a delivery's attempts, then records its outcome in the operator audit chain.
async fn deliver(state: AppState, delivery: Delivery) {
    let id = format!("msg_{}", state.ids.new_id());
    let config = &delivery.hook.config;
    let mut wait = std::time::Duration::from_millis(config.retry_initial_ms);
    let (mut attempts, mut status, mut error) = (0u32, None, None);
    while attempts < config.max_attempts {
        if attempts > 0 {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(std::time::Duration::from_secs(60));
        }
        attempts += 1;
        match attempt(&state, &delivery, &id).await {
            Ok(code) if (200..300).contains(&code) => {
                status = Some(code);
                error = None;
                break;
            }
            Ok(code) => {
                status = Some(code);
                error = Some(format!("answered {code}"));
            }
            Err(e) => error = Some(e),
        }
    }
    let outcome = NotificationOutcome {
        webhook: &config.url,
        delivery_id: &id,
        notification: delivery.kind,
        approval_id: &delivery.approval_id,
        attempts,
        status,
        error: error.clone(),
    };
    let draft = if error.is_none() {
        state
            .metrics
            .notifications_delivered
            .fetch_add(1, Ordering::Relaxed);
        crate::service::operator::draft(&state, &Delivered(outcome))
    } else {
        state
            .metrics
            .notifications_failed
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(webhook = %config.url, attempts, error = ?error, "an approval notification was not delivered");
        crate::service::operator::draft(&state, &Failed(outcome))
    };
    let recorded = match crate::service::operator::lock(&state).await {
        Ok(chain) => chain.append(vec![draft]).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = recorded {
        tracing::error!(error = %e.body.message, "a notification's outcome could not be recorded");
    }
}

/// One POST of `delivery`, signed anew with the time of the attempt; the status, or why there
/// was none.
async fn attempt(state: &AppState, delivery: &Delivery, id: &str) -> Result<u16, String> {
    let config = &delivery.hook.config;
    let timestamp = state.clock.now().unix_timestamp();
    let signature = signature(&delivery.hook.secret, id, timestamp, &delivery.body);
    let sent = state
        .http
        .post(&config.url)
        .timeout(std::time::Duration::from_millis(config.timeout_ms))
        .header("content-type", "application/json")
        .header("user-agent", concat!("cra/", env!("CARGO_PKG_VERSION")))
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(delivery.body.clone())
        .send()
        .await
        .map_err(|e| format!("POST {}: {e}", config.url))?;
    Ok(sent.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signature is HMAC-SHA256 (RFC 2104 over SHA-256) as Standard Webhooks lays it out:
    /// checked against RFC 4231's test case 2 through the same HMAC, then the layout.
    #[test]
    fn the_signature_is_hmac_sha256_of_id_timestamp_and_body() {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"key").unwrap();
        mac.update(b"msg_1.1700000000.{}");
        let expected =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        assert_eq!(
            signature(b"key", "msg_1", 1_700_000_000, b"{}"),
            format!("v1,{expected}")
        );
    }
}
