//! TRACE emission and live fan-out. Every event the runtime records goes through
//! [`Runtime::append_events`]: the batch is appended to the session's chain by the
//! [`cra_trace::store::ChainStore`] (durable before it returns, so before any HTTP answer), then
//! published to live subscribers through the [`Hub`].
//!
//! The hub never buffers without bound: each subscriber has a bounded queue; a batch that does not
//! fit whole is not queued, the subscriber is marked as overflowed and dropped, and its stream is
//! closed with a close code telling the client to resume with `since_seq`. Subscribers that see
//! an event with a later sequence than expected (two appenders publishing out of order) fill the
//! gap from the store, so a stream delivers every event once and in order. Each published event
//! is serialised once ([`LiveEvent`]) and the text shared by every subscriber: with 1,000
//! subscribers, serialising per subscriber was most of the server's work.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use cra_trace::store::ChainStoreError;
use cra_trace::{EventDraft, TraceEvent};
use cra_wire::Token;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::state::Runtime;

/// Filters of the operator's all-sessions stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamFilter {
    /// Only event types starting with this.
    pub type_prefix: Option<String>,
    /// Only sessions owned by this agent.
    pub agent: Option<String>,
    /// Only events whose payload carries this decision (`decision`, `decision.type` or `result`).
    pub decision: Option<String>,
}

impl StreamFilter {
    /// Whether `event` of a session owned by `owner` passes.
    pub fn admits(&self, owner: &str, event: &TraceEvent) -> bool {
        if let Some(p) = &self.type_prefix
            && !event.event_type.starts_with(p.as_str())
        {
            return false;
        }
        if let Some(a) = &self.agent
            && a != owner
        {
            return false;
        }
        if let Some(d) = &self.decision {
            return event_decision(&event.payload).is_some_and(|x| x == d);
        }
        true
    }
}

/// The decision an event's payload carries, if any.
pub(crate) fn event_decision(payload: &Value) -> Option<&str> {
    match payload.get("decision") {
        Some(Value::String(s)) => Some(s),
        Some(Value::Object(o)) => o.get("type").and_then(Value::as_str),
        _ => payload.get("result").and_then(Value::as_str),
    }
}

/// An appended event as the live streams send it: the event and its JSON text, made once.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    /// The event.
    pub event: TraceEvent,
    /// `event` serialised (cheap to clone: shared bytes).
    pub text: axum::extract::ws::Utf8Bytes,
}

impl LiveEvent {
    /// Serialises `event` for the streams.
    pub fn new(event: TraceEvent) -> Self {
        // Serialising a `TraceEvent` cannot fail (string keys, no non-finite floats in a Value).
        let text = serde_json::to_string(&event).unwrap_or_default().into();
        Self { event, text }
    }
}

impl std::ops::Deref for LiveEvent {
    type Target = TraceEvent;
    fn deref(&self) -> &TraceEvent {
        &self.event
    }
}

struct Sub {
    id: u64,
    tx: mpsc::Sender<Arc<LiveEvent>>,
    overflow: Arc<AtomicBool>,
    filter: StreamFilter,
}

/// Live subscribers, per session and for all sessions.
#[derive(Default)]
pub struct Hub {
    next_id: AtomicU64,
    sessions: Mutex<HashMap<String, Vec<Sub>>>,
    all: Mutex<Vec<Sub>>,
    /// Followers of every append that take the events as appended ([`Hub::tap`]).
    taps: Mutex<Vec<TapSender>>,
    /// Bumped when events may have reached the store without reaching the hub
    /// ([`Hub::resync`]).
    resync: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

/// One live subscription; unsubscribes when dropped.
pub struct Subscription {
    /// Events as they are appended.
    pub rx: mpsc::Receiver<Arc<LiveEvent>>,
    /// Set when the queue overflowed and the hub dropped this subscriber.
    pub overflow: Arc<AtomicBool>,
    /// Changes when events may have been stored without being published here ([`Hub::resync`]):
    /// a session's reader then reads the store from where it is.
    pub resync: tokio::sync::watch::Receiver<u64>,
    id: u64,
    session: Option<String>,
    hub: Weak<Hub>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("session", &self.session)
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        match &self.session {
            Some(s) => {
                let mut map = hub.sessions.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(v) = map.get_mut(s) {
                    v.retain(|x| x.id != self.id);
                    if v.is_empty() {
                        map.remove(s);
                    }
                }
            }
            None => {
                let mut v = hub.all.lock().unwrap_or_else(|p| p.into_inner());
                v.retain(|x| x.id != self.id);
            }
        }
    }
}

/// Every event of one append as a tap receives it: copied, but not made shareable (no payload
/// parsed back from its canonical text, nothing serialized), so that a tap costs the append's
/// path one copy and leaves the rest to the follower's own task.
#[derive(Debug)]
pub struct Tapped {
    /// The events, in order. An event whose payload was written as canonical text (a resolve's
    /// completion) has a `null` payload here and its text in `texts`.
    pub events: Vec<TraceEvent>,
    /// Canonical payload texts, by the index of their event in `events`.
    pub texts: Vec<(usize, String)>,
}

impl Tapped {
    /// The payload text of `events[index]`, when it was written as canonical text.
    pub fn text_of(&self, index: usize) -> Option<&str> {
        self.texts
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, t)| t.as_str())
    }
}

/// A tap's receiving end ([`Hub::tap`]); dropping it ends the tap.
pub struct Tap {
    /// Each append's events.
    pub rx: mpsc::Receiver<Arc<Tapped>>,
    /// Set when the queue overflowed and the hub dropped this tap.
    pub overflow: Arc<AtomicBool>,
}

struct TapSender {
    tx: mpsc::Sender<Arc<Tapped>>,
    overflow: Arc<AtomicBool>,
    /// The event types the tap takes (the others are not copied for it).
    wanted: fn(&str) -> bool,
}

/// Queues `events` on every subscriber in `subs` that admits them; drops overflowed or closed ones.
fn fan_out(subs: &mut Vec<Sub>, owner: &str, events: &[Arc<LiveEvent>]) {
    subs.retain(|sub| {
        let chosen: Vec<&Arc<LiveEvent>> = events
            .iter()
            .filter(|e| sub.filter.admits(owner, e))
            .collect();
        if chosen.is_empty() {
            return !sub.tx.is_closed();
        }
        match sub.tx.try_reserve_many(chosen.len()) {
            Ok(permits) => {
                for (permit, e) in permits.zip(chosen) {
                    permit.send(Arc::clone(e));
                }
                true
            }
            Err(mpsc::error::TrySendError::Full(())) => {
                sub.overflow.store(true, Ordering::SeqCst);
                false
            }
            Err(mpsc::error::TrySendError::Closed(())) => false,
        }
    });
}

impl Hub {
    /// Subscribes to `session` (or to every session when `None`) with a queue of `capacity` events.
    pub fn subscribe(
        self: &Arc<Self>,
        session: Option<&str>,
        filter: StreamFilter,
        capacity: usize,
    ) -> Subscription {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let overflow = Arc::new(AtomicBool::new(false));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sub = Sub {
            id,
            tx,
            overflow: overflow.clone(),
            filter,
        };
        match session {
            Some(s) => self
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(s.to_owned())
                .or_default()
                .push(sub),
            None => self.all.lock().unwrap_or_else(|p| p.into_inner()).push(sub),
        }
        Subscription {
            rx,
            overflow,
            resync: self.resync.subscribe(),
            id,
            session: session.map(str::to_owned),
            hub: Arc::downgrade(self),
        }
    }

    /// How many subscribers follow `session` now (its streams and approval waits).
    pub fn listeners(&self, session: &str) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .map_or(0, Vec::len)
    }

    /// How many subscribers follow the hub now: streams, approval waits and the notifier.
    pub fn subscribers(&self) -> usize {
        let sessions: usize = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(Vec::len)
            .sum();
        sessions + self.all.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether anybody follows every session (an all-sessions stream, the notifier, a tap).
    pub fn has_all_subscribers(&self) -> bool {
        !self
            .all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
            || !self
                .taps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    /// Follows every append with a queue of `capacity` appends, each delivered as
    /// [`Tapped`] holding the events whose type is `wanted` (an append with none is not
    /// delivered): for a follower that reads a few members of a few events (the OTLP
    /// exporter), which must not make every append parse and serialize its events as the
    /// streams need them. A tap whose queue overflows is dropped, its `overflow` set.
    pub fn tap(&self, capacity: usize, wanted: fn(&str) -> bool) -> Tap {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let overflow = Arc::new(AtomicBool::new(false));
        self.taps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(TapSender {
                tx,
                overflow: overflow.clone(),
                wanted,
            });
        Tap { rx, overflow }
    }

    /// Tells every subscriber that events may have been stored without being published here
    /// (the feed of another replica's appends broke for a while): session readers read the
    /// store from where they are, and all-sessions streams, which cannot, close.
    pub fn resync(&self) {
        self.resync.send_modify(|generation| *generation += 1);
    }

    /// Hands `events` to `session`'s subscribers only, never to the all-sessions streams: for
    /// events read back from the store that this hub may already have published, which a
    /// session's reader drops by sequence and an all-sessions stream could not.
    pub fn republish_to_session(&self, session: &str, events: &[TraceEvent]) {
        let shared: Vec<Arc<LiveEvent>> = events
            .iter()
            .map(|e| Arc::new(LiveEvent::new(e.clone())))
            .collect();
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(subs) = map.get_mut(session) {
            fan_out(subs, "", &shared);
            if subs.is_empty() {
                map.remove(session);
            }
        }
    }

    /// Hands freshly appended `events` of a session owned by `owner` to its subscribers.
    ///
    /// The events are copied for the streams only when somebody listens: with no subscriber, the
    /// copy was a tenth of the server's CPU under load.
    pub fn publish(&self, session: &str, owner: &str, events: &[TraceEvent]) {
        self.publish_with(session, owner, events, &[]);
    }

    /// As [`Hub::publish`], for events some of whose payloads were written as canonical text
    /// (`texts`, by index in `events`; such an event carries no payload value). Streams get
    /// each payload parsed back, and only when somebody listens; taps get the texts as they are.
    pub fn publish_with(
        &self,
        session: &str,
        owner: &str,
        events: &[TraceEvent],
        texts: &[(usize, String)],
    ) {
        self.tap_out(events, texts);
        let mut shared: Option<Vec<Arc<LiveEvent>>> = None;
        let mut share = || -> Vec<Arc<LiveEvent>> {
            shared
                .get_or_insert_with(|| {
                    events
                        .iter()
                        .enumerate()
                        .map(|(i, e)| {
                            let mut e = e.clone();
                            if let Some((_, text)) = texts.iter().find(|(at, _)| *at == i) {
                                e.payload = serde_json::from_str(text).unwrap_or(Value::Null);
                            }
                            Arc::new(LiveEvent::new(e))
                        })
                        .collect()
                })
                .clone()
        };
        {
            let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(subs) = map.get_mut(session) {
                fan_out(subs, owner, &share());
                if subs.is_empty() {
                    map.remove(session);
                }
            }
        }
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        if !all.is_empty() {
            fan_out(&mut all, owner, &share());
        }
    }

    /// Queues on every tap a [`Tapped`] of the `events` it wants; drops overflowed or closed
    /// taps.
    fn tap_out(&self, events: &[TraceEvent], texts: &[(usize, String)]) {
        let mut taps = self.taps.lock().unwrap_or_else(|p| p.into_inner());
        taps.retain(|tap| {
            let mut tapped = Tapped {
                events: Vec::new(),
                texts: Vec::new(),
            };
            for (i, e) in events.iter().enumerate() {
                if (tap.wanted)(&e.event_type) {
                    if let Some((_, t)) = texts.iter().find(|(at, _)| *at == i) {
                        tapped.texts.push((tapped.events.len(), t.clone()));
                    }
                    tapped.events.push(e.clone());
                }
            }
            if tapped.events.is_empty() {
                return !tap.tx.is_closed();
            }
            tap_send(tap, tapped)
        });
    }
}

/// Queues `tapped` on `tap`; whether the tap stays (false: overflowed, its flag set, or closed).
fn tap_send(tap: &TapSender, tapped: Tapped) -> bool {
    {
        match tap.tx.try_send(Arc::new(tapped)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tap.overflow.store(true, Ordering::SeqCst);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

/// A chain-store failure as an HTTP refusal.
pub(crate) fn chain_error(e: ChainStoreError) -> ApiError {
    match e.token() {
        Token::Unavailable | Token::IntegrityError => ApiError::new(e.token(), e.to_string()),
        t => ApiError::new(t, e.to_string()),
    }
}

/// `payload` as an event on a fresh trace and a root span of its own, both ids from `ids`: a
/// write no resolve or execute carries (Relay writes, operator events).
pub(crate) fn root_draft<P: cra_trace::Payload>(
    ids: &dyn cra_wire::IdGenerator,
    payload: &P,
) -> EventDraft {
    let (trace_id, span_id) = (ids.new_id(), ids.new_id());
    cra_trace::Span::root(&trace_id, &span_id).draft_of(payload)
}

impl Runtime {
    /// `payload` as an event on a fresh trace and a root span of its own, ids from this runtime:
    /// a write no resolve or execute carries (Relay writes, operator events).
    pub fn root_draft<P: cra_trace::Payload>(&self, payload: &P) -> EventDraft {
        root_draft(self.ids.as_ref(), payload)
    }

    /// Appends `drafts` to `session_id`'s chain (owned by `owner`), durably, then publishes them.
    pub async fn append_events(
        &self,
        session_id: &str,
        owner: &str,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ApiError> {
        let chains = self.backends.chains.clone();
        let sid = session_id.to_owned();
        let (done, outcome) = tokio::sync::oneshot::channel();
        // Queueing only prepares the drafts and hands them to the committer; the wait for the
        // durable commit is not on any thread.
        self.quick("the trace append task failed", move || {
            chains.append_then(
                &sid,
                drafts,
                Box::new(move |r| {
                    let _ = done.send(r);
                }),
            );
        })
        .await?;
        let events = outcome
            .await
            .map_err(|e| ApiError::internal("the trace append was dropped", e))?
            .map_err(chain_error)?;
        self.metrics.add_events(events.len() as u64);
        self.hub.publish(session_id, owner, &events);
        Ok(events)
    }

    /// Records a resolve's state and appends its events ([`cra_carp::store::StateLog`]), then
    /// publishes them as [`Runtime::append_events`] does. `Ok(None)`: the request id was already
    /// used in the session and nothing was written.
    ///
    /// Drafts made with [`cra_trace::PreparedDraft::from_canonical`] come back without their
    /// payload value; live subscribers get it parsed from the stored text.
    pub async fn append_resolve(
        &self,
        owner: &str,
        record: cra_carp::store::ResolveRecord,
        drafts: Vec<cra_trace::PreparedDraft>,
    ) -> Result<cra_carp::store::Recorded, ApiError> {
        // The canonical texts of payload-less drafts, by their place in the append.
        let texts: Vec<(usize, String)> = drafts
            .iter()
            .enumerate()
            .filter(|(_, d)| d.is_text_only())
            .map(|(i, d)| (i, d.canonical_payload().to_owned()))
            .collect();
        let sid = record.session_id.clone();
        let change = cra_carp::store::StateChange::Resolve(record);
        let appended = self
            .record_change(change, drafts)
            .await?
            .map_err(|e| match e {
                cra_carp::store::StateLogError::Chain(e) => chain_error(e),
                cra_carp::store::StateLogError::Store(e) => {
                    ApiError::new(Token::Unavailable, e.to_string())
                }
            })?;
        if let cra_carp::store::Recorded::Appended(events) = &appended {
            self.metrics.add_events(events.len() as u64);
            // The drafts were appended in order, so a text's draft index is its event's.
            self.hub.publish_with(&sid, owner, events, &texts);
        }
        Ok(appended)
    }

    /// Records a change of state (a decision, an execution's outcome) and appends the events
    /// that tell of it as one unit ([`cra_carp::store::StateLog`]), then publishes them. A chain
    /// that has ended, or a change the store refuses (an approval decided meanwhile), refuses
    /// both: nothing is written. Resolves go through [`Runtime::append_resolve`].
    pub async fn append_change(
        &self,
        owner: &str,
        change: cra_carp::store::StateChange,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ApiError> {
        let sid = change.session_id().to_owned();
        let drafts = drafts
            .into_iter()
            .map(cra_trace::PreparedDraft::new)
            .collect();
        let recorded = self
            .record_change(change, drafts)
            .await?
            .map_err(|e| match e {
                cra_carp::store::StateLogError::Chain(e) => chain_error(e),
                cra_carp::store::StateLogError::Store(e) => {
                    crate::service::sessions::carp_store_error(e)
                }
            })?;
        let cra_carp::store::Recorded::Appended(events) = recorded else {
            return Err(ApiError::new(
                Token::Unavailable,
                "the store answered a change as a duplicate resolve; nothing was written",
            ));
        };
        self.metrics.add_events(events.len() as u64);
        self.hub.publish(&sid, owner, &events);
        Ok(events)
    }

    /// Hands `change` and its drafts to the state log and waits for the durable outcome. Queueing
    /// only encodes the change and hands it to a committer (on both backends), so the wait for
    /// the commit is not on any thread.
    async fn record_change(
        &self,
        change: cra_carp::store::StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
    ) -> Result<Result<cra_carp::store::Recorded, cra_carp::store::StateLogError>, ApiError> {
        let log = self.backends.state_log.clone();
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.quick("the state log task failed", move || {
            log.record_and_append_then(
                change,
                drafts,
                Box::new(move |r| {
                    let _ = done.send(r);
                }),
            );
        })
        .await?;
        outcome
            .await
            .map_err(|e| ApiError::internal("the state log dropped a change unanswered", e))
    }

    /// Up to `limit` events after sequence `after` (from the start when `None`).
    pub async fn read_events_after(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TraceEvent>, ApiError> {
        let chains = self.backends.chains.clone();
        let sid = session_id.to_owned();
        // A page may hold thousands of events: decoding them stays off the async workers.
        crate::error::run_blocking("the trace read task failed", move || {
            chains.read_after(&sid, after, limit)
        })
        .await?
        .map_err(chain_error)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A test draft: any event type, any payload, on trace `t` and span `s`.
    pub(crate) fn draft(event_type: &str, payload: Value) -> EventDraft {
        EventDraft {
            trace_id: "t".into(),
            span_id: "s".into(),
            parent_span_id: None,
            event_type: event_type.into(),
            payload,
        }
    }

    fn ev(seq: u64, ty: &str, payload: Value) -> TraceEvent {
        cra_trace::seal(
            draft(ty, payload),
            "sess",
            &cra_trace::ChainHead {
                next_sequence: seq,
                head_hash: "0".repeat(64),
            },
            format!("e{seq}"),
            "2026-01-01T00:00:00.000000Z".into(),
        )
    }

    #[test]
    fn a_batch_that_does_not_fit_overflows_the_subscriber() {
        let hub = Arc::new(Hub::default());
        let mut small = hub.subscribe(Some("sess"), StreamFilter::default(), 3);
        let mut big = hub.subscribe(Some("sess"), StreamFilter::default(), 100);
        let batch: Vec<TraceEvent> = (0..5).map(|i| ev(i, "x", json!({}))).collect();
        hub.publish("sess", "bot", &batch);
        assert!(small.overflow.load(Ordering::SeqCst));
        assert!(small.rx.try_recv().is_err(), "nothing partial was queued");
        assert!(!big.overflow.load(Ordering::SeqCst));
        for i in 0..5 {
            assert_eq!(big.rx.try_recv().unwrap().sequence, i);
        }
    }

    /// Invariant: a tap takes each append whole and as appended (texts unparsed), streams get
    /// the payloads parsed back, and a tap that overflows is dropped and told.
    #[test]
    fn a_tap_takes_appends_as_appended_and_is_dropped_when_full() {
        let hub = Arc::new(Hub::default());
        assert!(!hub.has_all_subscribers());
        let mut tap = hub.tap(1, |t| t != "c");
        let mut stream = hub.subscribe(Some("sess"), StreamFilter::default(), 10);
        assert!(hub.has_all_subscribers(), "a tap follows every session");
        let texts = vec![(1, "{\"decision_type\":\"allow\"}".to_owned())];
        let batch = vec![ev(0, "c", json!({"k": 1})), ev(1, "b", Value::Null)];
        hub.publish_with("sess", "bot", &batch, &texts);
        let tapped = tap.rx.try_recv().unwrap();
        assert_eq!(
            tapped.events.len(),
            1,
            "the type it does not want is not copied"
        );
        assert_eq!(
            tapped.events[0].payload,
            Value::Null,
            "the tap parses nothing"
        );
        assert_eq!(tapped.text_of(0), Some("{\"decision_type\":\"allow\"}"));
        hub.publish("sess", "bot", &batch[..1]);
        assert!(
            tap.rx.try_recv().is_err(),
            "an append with nothing wanted is not delivered"
        );
        stream.rx.try_recv().unwrap();
        assert_eq!(
            stream.rx.try_recv().unwrap().payload["decision_type"],
            "allow"
        );
        // A queue of one append: the second is held, the third overflows it.
        hub.publish("sess", "bot", &batch);
        hub.publish("sess", "bot", &batch);
        assert!(tap.overflow.load(Ordering::SeqCst));
        assert!(tap.rx.try_recv().is_ok());
        assert!(tap.rx.try_recv().is_err(), "the hub dropped it");
        drop(stream);
        assert!(!hub.has_all_subscribers());
    }

    #[test]
    fn all_stream_filters_by_type_agent_and_decision() {
        let hub = Arc::new(Hub::default());
        let f = StreamFilter {
            type_prefix: Some("policy.".into()),
            agent: Some("bot".into()),
            decision: Some("deny".into()),
        };
        let mut sub = hub.subscribe(None, f, 10);
        hub.publish(
            "a",
            "bot",
            &[
                ev(0, "policy.evaluated", json!({"result": "deny"})),
                ev(1, "policy.evaluated", json!({"result": "allow"})),
                ev(2, "action.denied", json!({"decision": "deny"})),
            ],
        );
        hub.publish(
            "b",
            "other",
            &[ev(0, "policy.evaluated", json!({"result": "deny"}))],
        );
        assert_eq!(sub.rx.try_recv().unwrap().sequence, 0);
        assert!(sub.rx.try_recv().is_err());
    }

    #[test]
    fn dropping_a_subscription_unregisters_it() {
        let hub = Arc::new(Hub::default());
        let s = hub.subscribe(Some("x"), StreamFilter::default(), 1);
        drop(s);
        assert!(hub.sessions.lock().unwrap().is_empty());
    }
}
