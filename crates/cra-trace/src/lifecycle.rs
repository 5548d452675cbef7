//! Session lifecycle rules: what a well-formed session looks like beyond an intact hash chain.
//!
//! Checked in order over a chain's events (opt-in: `VerifyOptions::lifecycle`,
//! `cra trace verify --lifecycle`), one code per rule:
//! * [`Code::NotStarted`]: the first event is `session.started`;
//! * [`Code::AfterEnd`]: nothing follows `session.ended`;
//! * [`Code::UnmatchedAction`]: every `action.executed`, `action.failed`, `action.denied` and
//!   `action.pending_approval` answers an earlier `action.requested` with the same
//!   `payload.execution_id`;
//! * [`Code::UnmatchedResolution`]: every `carp.resolution.completed` answers an earlier
//!   `carp.request.received` with the same `trace_id`;
//! * [`Code::TimeRegression`]: timestamps never go backwards (compared as instants; a timestamp
//!   that is not RFC 3339 is itself a finding of this rule).
//!
//! Memory grows with the number of distinct open execution ids and request trace ids (not with
//! the number of events). Pure: no I/O.

use std::collections::HashSet;

use serde_json::Value;
use time::OffsetDateTime;

use crate::verify::{Code, Finding};

/// What the lifecycle rules need from one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) event_type: Box<str>,
    pub(crate) timestamp: Box<str>,
    pub(crate) trace_id: Box<str>,
    /// `payload.execution_id` when it is a string (read only for `action.*` events).
    pub(crate) execution_id: Option<Box<str>>,
}

impl Facts {
    pub(crate) fn new(event_type: &str, timestamp: &str, trace_id: &str, payload: &Value) -> Self {
        let execution_id = event_type
            .starts_with("action.")
            .then(|| {
                payload
                    .get("execution_id")
                    .and_then(Value::as_str)
                    .map(Box::from)
            })
            .flatten();
        Self {
            event_type: event_type.into(),
            timestamp: timestamp.into(),
            trace_id: trace_id.into(),
            execution_id,
        }
    }
}

/// The in-order lifecycle state of one chain.
#[derive(Debug, Clone, Default)]
pub(crate) struct LifecycleChecker {
    seen_any: bool,
    ended_at: Option<u64>,
    requested: HashSet<Box<str>>,
    received: HashSet<Box<str>>,
    last_time: Option<OffsetDateTime>,
}

impl LifecycleChecker {
    /// Checks the event at `line` (expected sequence `sequence`).
    pub(crate) fn check(
        &mut self,
        sequence: u64,
        line: u64,
        facts: &Facts,
        out: &mut Vec<Finding>,
    ) {
        let mut finding = |code: Code, message: String| {
            out.push(Finding {
                sequence,
                line,
                code,
                field: None,
                message,
            })
        };
        let t = facts.event_type.as_ref();
        if !self.seen_any && t != "session.started" {
            finding(
                Code::NotStarted,
                format!("the first event must be session.started, found {t}"),
            );
        }
        self.seen_any = true;
        if let Some(end) = self.ended_at {
            finding(
                Code::AfterEnd,
                format!("{t} follows session.ended (sequence {end})"),
            );
        }
        if t == "session.ended" && self.ended_at.is_none() {
            self.ended_at = Some(sequence);
        }
        match t {
            "action.requested" => {
                if let Some(id) = &facts.execution_id {
                    self.requested.insert(id.clone());
                }
            }
            "action.executed" | "action.failed" | "action.denied" | "action.pending_approval" => {
                match &facts.execution_id {
                    Some(id) if self.requested.contains(id) => {}
                    Some(id) => finding(
                        Code::UnmatchedAction,
                        format!(
                            "{t} for execution_id {id}, which no earlier action.requested announced"
                        ),
                    ),
                    None => finding(
                        Code::UnmatchedAction,
                        format!(
                            "{t} has no string payload.execution_id to match an action.requested"
                        ),
                    ),
                }
            }
            "carp.request.received" => {
                self.received.insert(facts.trace_id.clone());
            }
            "carp.resolution.completed" if !self.received.contains(&facts.trace_id) => {
                finding(
                    Code::UnmatchedResolution,
                    format!(
                        "carp.resolution.completed in trace {} answers no earlier carp.request.received",
                        facts.trace_id
                    ),
                );
            }
            _ => {}
        }
        match cra_wire::clock::parse_rfc3339(&facts.timestamp) {
            Ok(at) => {
                if self.last_time.is_some_and(|last| at < last) {
                    finding(
                        Code::TimeRegression,
                        format!(
                            "timestamp {} is earlier than the previous event's",
                            facts.timestamp
                        ),
                    );
                }
                if self.last_time.is_none_or(|last| at > last) {
                    self.last_time = Some(at);
                }
            }
            Err(e) => finding(
                Code::TimeRegression,
                format!("timestamp {:?} cannot be ordered: {e}", facts.timestamp),
            ),
        }
    }
}
