//! TRACE events to OpenTelemetry spans, pure: a [`Tracker`] reads a replica's appended events in
//! order and answers the spans that each one ends (`specs/otlp.md` has the mapping).
//!
//! - **A session is a trace.** Its trace id is the session id's UUID bytes (the SHA-256 of the
//!   id, cut to 16 bytes, for an id that is not a UUID), so a span's trace is known from any
//!   one of its events, on any replica, after any restart. Its root span, `invoke_agent
//!   {agent}`, ends with `session.ended` and starts `duration_ms` before.
//! - **A TRACE span is an OTLP span.** Events that share a TRACE `span_id` (a resolve's
//!   `resolution_id`, an execute's `execution_id`, an approval decision's own id) make one span,
//!   from the first event's time to the one that ends it; its parent is the TRACE
//!   `parent_span_id`, or the session's root. Span ids are the first 8 bytes of a SHA-256 over
//!   the session and the TRACE id, so parents resolve without state.
//! - **A caller's `traceparent` is a link**, not the parent: the session stays one trace, and
//!   the agent framework's span is linked from the resolve or execute it made.
//!
//! Memory: a span is remembered from its first event to its end; at most [`MAX_OPEN`] are,
//! the oldest forgotten first (it is then exported from its end alone, without its start).

use std::collections::HashMap;

use cra_trace::TraceEvent;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The most spans remembered between their first event and their end.
pub(crate) const MAX_OPEN: usize = 65_536;

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    Str(String),
    Int(i64),
    Bool(bool),
}

/// `Span.SpanKind`: a resolve or execute is the server's answer to a call; the rest is internal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanKind {
    Internal = 1,
    Server = 2,
}

/// `Status`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SpanStatus {
    Unset,
    Ok,
    Error(String),
}

/// A link to another trace's span (a caller's `traceparent`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Link {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub attributes: Vec<(&'static str, Attr)>,
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub name: String,
    pub kind: SpanKind,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Vec<(&'static str, Attr)>,
    pub links: Vec<Link>,
    pub status: SpanStatus,
}

/// What is remembered of a span between its first event and its end.
struct Open {
    start: u64,
    /// The order it was opened in (the oldest is forgotten first).
    opened: u64,
    traceparent: Option<String>,
    agent: Option<String>,
    action: Option<String>,
}

/// Follows appended events; [`Tracker::observe`] answers the spans an event ends.
#[derive(Default)]
pub(crate) struct Tracker {
    open: HashMap<(String, String), Open>,
    opened: u64,
    /// Spans forgotten before their end because [`MAX_OPEN`] were open.
    pub forgotten: u64,
}

/// The trace id of session `session_id`.
pub(crate) fn trace_id(session_id: &str) -> [u8; 16] {
    let hex: String = session_id.chars().filter(|c| *c != '-').collect();
    let mut out = [0u8; 16];
    if hex.len() == 32 && hex::decode_to_slice(&hex, &mut out).is_ok() && out != [0; 16] {
        return out;
    }
    out.copy_from_slice(&Sha256::digest(session_id.as_bytes())[..16]);
    out
}

/// The span id of TRACE span `key` in session `session_id` (`session` for the root).
pub(crate) fn span_id(session_id: &str, key: &str) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(b"cra-otlp-span\0");
    h.update(session_id.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.finalize()[..8]);
    out
}

/// The root span's key.
const ROOT: &str = "session";

fn text<'a>(p: &'a Value, k: &str) -> Option<&'a str> {
    p.get(k).and_then(Value::as_str)
}

/// An event's time in Unix nanoseconds (0 when it cannot be read: never for a stored event).
fn nanos(timestamp: &str) -> u64 {
    cra_wire::clock::parse_rfc3339(timestamp)
        .ok()
        .and_then(|t| u64::try_from(t.unix_timestamp_nanos()).ok())
        .unwrap_or(0)
}

/// The link a validated `traceparent` makes (`00-<trace>-<span>-<flags>`).
fn link(traceparent: &str) -> Option<Link> {
    let mut parts = traceparent.split('-');
    let (_, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    let mut trace_id = [0u8; 16];
    let mut span_id = [0u8; 8];
    hex::decode_to_slice(trace, &mut trace_id).ok()?;
    hex::decode_to_slice(span, &mut span_id).ok()?;
    Some(Link {
        trace_id,
        span_id,
        attributes: vec![("cra.link", Attr::Str("traceparent".into()))],
    })
}

/// The payload members [`Tracker::observe`] reads, and nothing else: a payload written as
/// canonical text (a resolve's completion holds the whole resolution) is read into this, which
/// skips every other member without building it, rather than into a whole JSON value.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct Read {
    decision_type: Option<String>,
    decision: Option<Value>,
    allowed_count: Option<i64>,
    denied_count: Option<i64>,
    traceparent: Option<String>,
    request: Option<ReadRequest>,
    action_id: Option<String>,
    error: Option<Value>,
    error_message: Option<String>,
    error_code: Option<String>,
    policy_id: Option<String>,
    approval_id: Option<String>,
    decided_by: Option<Value>,
    agent_id: Option<String>,
    duration_ms: Option<u64>,
    reason: Option<String>,
    project_id: Option<String>,
    package_id: Option<String>,
    status: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ReadRequest {
    requester: Option<Value>,
}

/// The members of canonical payload text `text` that [`Tracker::observe`] reads, as a JSON
/// object (`null` when the text is not an object).
pub(crate) fn payload_from_text(text: &str) -> Value {
    let Ok(read) = serde_json::from_str::<Read>(text) else {
        return Value::Null;
    };
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.insert(k.to_owned(), v);
        }
    };
    put("decision_type", read.decision_type.map(Value::from));
    put("decision", read.decision);
    put("allowed_count", read.allowed_count.map(Value::from));
    put("denied_count", read.denied_count.map(Value::from));
    put("traceparent", read.traceparent.map(Value::from));
    put(
        "request",
        read.request
            .and_then(|r| r.requester)
            .map(|r| serde_json::json!({"requester": r})),
    );
    put("action_id", read.action_id.map(Value::from));
    put("error", read.error);
    put("error_message", read.error_message.map(Value::from));
    put("error_code", read.error_code.map(Value::from));
    put("policy_id", read.policy_id.map(Value::from));
    put("approval_id", read.approval_id.map(Value::from));
    put("decided_by", read.decided_by);
    put("agent_id", read.agent_id.map(Value::from));
    put("duration_ms", read.duration_ms.map(Value::from));
    put("reason", read.reason.map(Value::from));
    put("project_id", read.project_id.map(Value::from));
    put("package_id", read.package_id.map(Value::from));
    put("status", read.status.map(Value::from));
    Value::Object(out)
}

/// Whether [`Tracker::observe`] reads the payload of events of type `event_type`.
pub(crate) fn reads_payload(event_type: &str) -> bool {
    matches!(
        event_type,
        "carp.request.received"
            | "action.requested"
            | "approval.requested"
            | "carp.resolution.completed"
            | "carp.resolution.cached"
            | "carp.request.rejected"
            | "action.executed"
            | "action.failed"
            | "action.denied"
            | "action.pending_approval"
            | "action.deduplicated"
            | "approval.granted"
            | "approval.rejected"
            | "approval.expired"
            | "relay.package.deposited"
            | "session.ended"
    )
}

/// Whether an event of type `event_type` ends a span.
pub(crate) fn ends_span(event_type: &str) -> bool {
    reads_payload(event_type)
        && !matches!(
            event_type,
            "carp.request.received" | "action.requested" | "approval.requested"
        )
}

impl Tracker {
    /// The spans `e` ends (none for most events).
    pub(crate) fn observe(&mut self, e: &TraceEvent) -> Vec<Span> {
        // The events read here are exactly those whose canonical text the exporter parses.
        if !reads_payload(&e.event_type) {
            return Vec::new();
        }
        let p = &e.payload;
        let at = nanos(&e.timestamp);
        match e.event_type.as_str() {
            "carp.request.received" => {
                let agent = p
                    .pointer("/request/requester/agent_id")
                    .and_then(Value::as_str);
                self.remember(e, at, text(p, "traceparent"), agent, None);
                Vec::new()
            }
            "action.requested" => {
                self.remember(e, at, text(p, "traceparent"), None, text(p, "action_id"));
                Vec::new()
            }
            "approval.requested" => {
                if let Some(id) = text(p, "approval_id") {
                    self.remember_key(
                        &e.session_id,
                        &format!("approval:{id}"),
                        at,
                        None,
                        None,
                        None,
                    );
                }
                Vec::new()
            }
            "carp.resolution.completed" | "carp.resolution.cached" | "carp.request.rejected" => {
                vec![self.resolve_span(e, at)]
            }
            "action.executed"
            | "action.failed"
            | "action.denied"
            | "action.pending_approval"
            | "action.deduplicated" => vec![self.execute_span(e, at)],
            "approval.granted" | "approval.rejected" | "approval.expired" => {
                vec![self.approval_span(e, at)]
            }
            "relay.package.deposited" => vec![self.deposit_span(e, at)],
            "session.ended" => vec![self.session_span(e, at)],
            _ => Vec::new(),
        }
    }

    fn remember(
        &mut self,
        e: &TraceEvent,
        at: u64,
        tp: Option<&str>,
        agent: Option<&str>,
        action: Option<&str>,
    ) {
        self.remember_key(&e.session_id, &e.span_id, at, tp, agent, action);
    }

    fn remember_key(
        &mut self,
        session: &str,
        key: &str,
        at: u64,
        traceparent: Option<&str>,
        agent: Option<&str>,
        action: Option<&str>,
    ) {
        let k = (session.to_owned(), key.to_owned());
        if self.open.contains_key(&k) {
            return;
        }
        if self.open.len() >= MAX_OPEN {
            self.forget_oldest();
        }
        self.opened += 1;
        self.open.insert(
            k,
            Open {
                start: at,
                opened: self.opened,
                traceparent: traceparent.map(str::to_owned),
                agent: agent.map(str::to_owned),
                action: action.map(str::to_owned),
            },
        );
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .open
            .iter()
            .min_by_key(|(_, o)| o.opened)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.open.remove(&k);
            self.forgotten += 1;
        }
    }

    fn take(&mut self, session: &str, key: &str) -> Option<Open> {
        self.open.remove(&(session.to_owned(), key.to_owned()))
    }

    /// A span of `e`'s session, keyed by `key`, under `e`'s TRACE parent (or the root).
    fn span(
        &self,
        e: &TraceEvent,
        key: &str,
        name: String,
        kind: SpanKind,
        start: u64,
        end: u64,
    ) -> Span {
        let parent = match &e.parent_span_id {
            Some(parent) => span_id(&e.session_id, parent),
            None => span_id(&e.session_id, ROOT),
        };
        Span {
            trace_id: trace_id(&e.session_id),
            span_id: span_id(&e.session_id, key),
            parent_span_id: Some(parent),
            name,
            kind,
            start_unix_nano: start.min(end),
            end_unix_nano: end,
            attributes: vec![("gen_ai.conversation.id", Attr::Str(e.session_id.clone()))],
            links: Vec::new(),
            status: SpanStatus::Unset,
        }
    }

    fn resolve_span(&mut self, e: &TraceEvent, at: u64) -> Span {
        let p = &e.payload;
        let open = self.take(&e.session_id, &e.span_id);
        let start = open.as_ref().map_or(at, |o| o.start);
        let mut s = self.span(e, &e.span_id, "resolve".into(), SpanKind::Server, start, at);
        s.attributes
            .push(("cra.operation", Attr::Str("resolve".into())));
        s.attributes
            .push(("cra.resolution_id", Attr::Str(e.span_id.clone())));
        let decision = text(p, "decision_type").or_else(|| text(p, "decision"));
        if let Some(d) = decision {
            s.attributes.push(("cra.decision", Attr::Str(d.to_owned())));
        }
        if e.event_type == "carp.resolution.cached" {
            s.attributes.push(("cra.cache_hit", Attr::Bool(true)));
        }
        if e.event_type == "carp.request.rejected" {
            s.status = SpanStatus::Error(text(p, "error").unwrap_or("rejected").to_owned());
        }
        for (key, counted) in [
            ("cra.actions.allowed", "allowed_count"),
            ("cra.actions.denied", "denied_count"),
        ] {
            if let Some(n) = p.get(counted).and_then(Value::as_i64) {
                s.attributes.push((key, Attr::Int(n)));
            }
        }
        if let Some(o) = open {
            if let Some(agent) = o.agent {
                s.attributes.push(("gen_ai.agent.id", Attr::Str(agent)));
            }
            s.links.extend(o.traceparent.as_deref().and_then(link));
        }
        s
    }

    fn execute_span(&mut self, e: &TraceEvent, at: u64) -> Span {
        let p = &e.payload;
        let open = self.take(&e.session_id, &e.span_id);
        let action = text(p, "action_id")
            .map(str::to_owned)
            .or_else(|| open.as_ref().and_then(|o| o.action.clone()))
            .unwrap_or_default();
        let start = open.as_ref().map_or(at, |o| o.start);
        let name = format!("execute_tool {action}");
        let mut s = self.span(e, &e.span_id, name, SpanKind::Server, start, at);
        s.attributes.extend([
            ("gen_ai.operation.name", Attr::Str("execute_tool".into())),
            ("gen_ai.tool.name", Attr::Str(action)),
            ("gen_ai.tool.call.id", Attr::Str(e.span_id.clone())),
            ("cra.operation", Attr::Str("execute".into())),
        ]);
        let (decision, status) = match e.event_type.as_str() {
            "action.executed" => ("allow", SpanStatus::Ok),
            "action.failed" => {
                let why = text(p, "error_message").or_else(|| text(p, "error_code"));
                (
                    "allow",
                    SpanStatus::Error(why.unwrap_or("the action failed").to_owned()),
                )
            }
            "action.denied" => (
                "deny",
                SpanStatus::Error(text(p, "error").unwrap_or("denied").to_owned()),
            ),
            "action.pending_approval" => ("require_approval", SpanStatus::Unset),
            _ => ("deduplicated", SpanStatus::Ok),
        };
        s.attributes
            .push(("cra.decision", Attr::Str(decision.into())));
        for (key, member) in [
            ("cra.policy_id", "policy_id"),
            ("cra.approval_id", "approval_id"),
        ] {
            if let Some(v) = text(p, member) {
                s.attributes.push((key, Attr::Str(v.to_owned())));
            }
        }
        s.status = status;
        if let Some(tp) = open.and_then(|o| o.traceparent) {
            s.links.extend(link(&tp));
        }
        s
    }

    fn approval_span(&mut self, e: &TraceEvent, at: u64) -> Span {
        let p = &e.payload;
        let id = text(p, "approval_id").unwrap_or_default().to_owned();
        let start = self
            .take(&e.session_id, &format!("approval:{id}"))
            .map_or(at, |o| o.start);
        let mut s = self.span(
            e,
            &e.span_id,
            "approval".into(),
            SpanKind::Internal,
            start,
            at,
        );
        let decision = e.event_type.trim_start_matches("approval.");
        s.attributes.extend([
            ("cra.operation", Attr::Str("approval".into())),
            ("cra.approval_id", Attr::Str(id)),
            ("cra.approval.decision", Attr::Str(decision.to_owned())),
        ]);
        if let Some(by) = p.pointer("/decided_by/id").and_then(Value::as_str) {
            s.attributes
                .push(("cra.approval.decided_by", Attr::Str(by.to_owned())));
        }
        s
    }

    fn deposit_span(&mut self, e: &TraceEvent, at: u64) -> Span {
        let p = &e.payload;
        let mut s = self.span(e, &e.span_id, "deposit".into(), SpanKind::Server, at, at);
        s.attributes
            .push(("cra.operation", Attr::Str("deposit".into())));
        for (key, member) in [
            ("cra.project_id", "project_id"),
            ("cra.package_id", "package_id"),
            ("cra.package.status", "status"),
        ] {
            if let Some(v) = text(p, member) {
                s.attributes.push((key, Attr::Str(v.to_owned())));
            }
        }
        s
    }

    fn session_span(&mut self, e: &TraceEvent, at: u64) -> Span {
        let p = &e.payload;
        let agent = text(p, "agent_id").unwrap_or_default().to_owned();
        let lasted = p.get("duration_ms").and_then(Value::as_u64).unwrap_or(0);
        let start = at.saturating_sub(lasted.saturating_mul(1_000_000));
        // Whatever of this session is still remembered will not end now.
        self.open.retain(|(session, _), _| session != &e.session_id);
        let mut s = self.span(
            e,
            ROOT,
            format!("invoke_agent {agent}"),
            SpanKind::Internal,
            start,
            at,
        );
        s.parent_span_id = None;
        s.attributes.extend([
            ("gen_ai.operation.name", Attr::Str("invoke_agent".into())),
            ("gen_ai.agent.id", Attr::Str(agent)),
            ("cra.operation", Attr::Str("session".into())),
            (
                "cra.events",
                Attr::Int(i64::try_from(e.sequence + 1).unwrap_or(i64::MAX)),
            ),
        ]);
        if let Some(r) = text(p, "reason") {
            s.attributes
                .push(("cra.session.end_reason", Attr::Str(r.to_owned())));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(
        seq: u64,
        t: &str,
        span: &str,
        parent: Option<&str>,
        kind: &str,
        payload: Value,
    ) -> TraceEvent {
        serde_json::from_value(json!({
            "trace_version": "1.0", "event_id": format!("e{seq}"), "trace_id": "t",
            "span_id": span, "parent_span_id": parent,
            "session_id": "0190a000-0000-7000-8000-000000000100", "sequence": seq,
            "timestamp": t, "event_type": kind, "payload": payload,
            "event_hash": "h", "previous_event_hash": "p"
        }))
        .unwrap()
    }

    /// A resolve, an execute under it and the session's end: one span each, parented as TRACE
    /// says, the caller's traceparent a link, the session's UUID the trace id.
    #[test]
    fn a_session_is_a_trace_and_each_operation_a_span() {
        let mut t = Tracker::default();
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut spans = Vec::new();
        for e in [
            event(
                1,
                "2026-01-01T00:00:00Z",
                "res1",
                None,
                "carp.request.received",
                json!({"request": {"requester": {"agent_id": "bot"}}, "traceparent": tp}),
            ),
            event(
                2,
                "2026-01-01T00:00:00.002Z",
                "res1",
                None,
                "carp.resolution.completed",
                json!({"decision_type": "allow", "allowed_count": 2, "denied_count": 1}),
            ),
            event(
                3,
                "2026-01-01T00:00:01Z",
                "ex1",
                Some("res1"),
                "action.requested",
                json!({"action_id": "doc.read"}),
            ),
            event(
                4,
                "2026-01-01T00:00:01.5Z",
                "ex1",
                Some("res1"),
                "action.executed",
                json!({"action_id": "doc.read", "status": "success"}),
            ),
            event(
                5,
                "2026-01-01T00:00:02Z",
                "end",
                None,
                "session.ended",
                json!({"agent_id": "bot", "duration_ms": 3000, "reason": "done"}),
            ),
        ] {
            spans.extend(t.observe(&e));
        }
        let trace = [
            0x01, 0x90, 0xa0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0x01, 0,
        ];
        assert!(spans.iter().all(|s| s.trace_id == trace));
        let [resolve, execute, root] = &spans[..] else {
            panic!("{spans:?}")
        };
        assert_eq!(resolve.name, "resolve");
        assert_eq!(resolve.end_unix_nano - resolve.start_unix_nano, 2_000_000);
        assert_eq!(resolve.parent_span_id, Some(root.span_id));
        assert_eq!(resolve.links.len(), 1);
        assert_eq!(
            resolve.links[0].span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert!(
            resolve
                .attributes
                .contains(&("gen_ai.agent.id", Attr::Str("bot".into())))
        );
        assert_eq!(execute.name, "execute_tool doc.read");
        assert_eq!(execute.parent_span_id, Some(resolve.span_id));
        assert_eq!(execute.status, SpanStatus::Ok);
        assert_eq!(root.parent_span_id, None);
        assert_eq!(root.end_unix_nano - root.start_unix_nano, 3_000_000_000);
        assert!(
            t.open.is_empty(),
            "nothing is remembered once the session ended"
        );
    }

    /// Invariant: a span made from a payload's canonical text (read partially) is the span
    /// made from the whole payload.
    #[test]
    fn a_payload_read_from_its_text_makes_the_same_spans() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let received = json!({"request_id": "q", "request": {"requester": {"agent_id": "bot", "session_id": "s"},
            "task": {"goal": "g"}}, "traceparent": tp, "atlas_digests": {"a": "sha256:1"}});
        let completed = json!({"resolution_id": "res1", "decision_type": "deny", "allowed_count": 0,
            "denied_count": 3, "decision": "deny", "resolution": {"context_blocks": [{"content": "x"}]}});
        let (mut whole, mut partial) = (Tracker::default(), Tracker::default());
        let mut spans = (Vec::new(), Vec::new());
        for (seq, kind, payload) in [
            (1, "carp.request.received", received),
            (2, "carp.resolution.completed", completed),
        ] {
            let e = event(
                seq,
                "2026-01-01T00:00:00Z",
                "res1",
                None,
                kind,
                payload.clone(),
            );
            spans.0.extend(whole.observe(&e));
            let mut read = e.clone();
            read.payload = payload_from_text(&serde_json::to_string(&payload).unwrap());
            spans.1.extend(partial.observe(&read));
        }
        assert_eq!(spans.0, spans.1);
        assert_eq!(spans.0.len(), 1);
    }

    #[test]
    fn ids_that_are_not_uuids_hash_to_non_zero_trace_ids() {
        assert_ne!(trace_id("project-audit"), [0; 16]);
        assert_ne!(trace_id("00000000-0000-0000-0000-000000000000"), [0; 16]);
        assert_ne!(span_id("s", "a"), span_id("s", "b"));
    }

    /// Invariant: memory is bounded; a span forgotten is still exported from its end.
    #[test]
    fn at_most_max_open_spans_are_remembered() {
        let mut t = Tracker::default();
        for i in 0..(MAX_OPEN + 3) {
            let e = event(
                i as u64,
                "2026-01-01T00:00:00Z",
                &format!("ex{i}"),
                None,
                "action.requested",
                json!({"action_id": "a"}),
            );
            t.observe(&e);
        }
        assert_eq!(t.open.len(), MAX_OPEN);
        assert_eq!(t.forgotten, 3);
        let end = event(
            9,
            "2026-01-01T00:00:01Z",
            "ex0",
            None,
            "action.denied",
            json!({"action_id": "a", "error": "rate_limit_exceeded"}),
        );
        let spans = t.observe(&end);
        assert_eq!(
            spans[0].start_unix_nano, spans[0].end_unix_nano,
            "its start was forgotten"
        );
        assert_eq!(
            spans[0].status,
            SpanStatus::Error("rate_limit_exceeded".into())
        );
    }
}
