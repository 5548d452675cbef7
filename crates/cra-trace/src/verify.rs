//! Offline chain verification: the rules, the findings, and the reference (tree-based) line
//! reader.
//!
//! Every line of a `.trace.jsonl` is one event. For each line, in order, the verifier checks:
//! 1. the line is a well-formed event ([`Code::MalformedEvent`] otherwise: not UTF-8, not JSON,
//!    duplicate keys at any depth, a required field missing or of the wrong type);
//! 2. its `sequence` is the expected one: 0 for the first line, then the previous event's
//!    `sequence + 1` ([`Code::SequenceGap`]);
//! 3. its `previous_event_hash` is 64 zeros on the first line ([`Code::InvalidGenesis`]) and the
//!    previous event's `event_hash` afterwards ([`Code::ChainBroken`]);
//! 4. its `event_hash` equals the recomputed Appendix B hash ([`Code::HashMismatch`]);
//! 5. its fields follow §4.2 (`fields`): `trace_version` "1.0"
//!    ([`Code::InvalidTraceVersion`]), canonical UUID ids ([`Code::InvalidId`]), an RFC 3339
//!    timestamp with a zone ([`Code::InvalidTimestamp`]);
//! 6. its `session_id` is the chain's: the first well-formed event's ([`Code::SessionMixed`]).
//!
//! Integrity comes first (a changed `trace_version` is a `hash_mismatch`, as every changed field
//! is); the field rules catch the chain that was written, and sealed, breaking §4.2.
//!
//! Findings carry the sequence the chain expected at that line (so the first finding names the
//! position where the chain stops being trustworthy) and the 1-based line number. After a
//! malformed line the next event's link cannot be checked (there is no previous hash to compare
//! with); checking resumes from that event.
//!
//! This module is pure: `ChainChecker` consumes per-line outcomes; [`crate::stream`] does the
//! reading (in parallel), `fastline` the tree-free parsing.

use std::fmt;

use serde_json::{Map, Value};

use crate::chain::{GENESIS_PREVIOUS_HASH, compute_event_hash};
use crate::event::TraceEvent;
use crate::fields::{Fault, Fields, SessionText, faults};
use crate::lifecycle::{Facts, LifecycleChecker};
use crate::stream::VerifyOptions;

/// What a verification finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The event's `sequence` is not the expected one.
    SequenceGap,
    /// `previous_event_hash` is not the previous event's `event_hash`.
    ChainBroken,
    /// The first event does not start a chain (`previous_event_hash` is not 64 zeros).
    InvalidGenesis,
    /// `event_hash` is not the Appendix B hash of the event.
    HashMismatch,
    /// The line is not a well-formed event.
    MalformedEvent,
    /// `trace_version` is not "1.0" (§4.2.1).
    InvalidTraceVersion,
    /// An id (`event_id`, `trace_id`, `span_id`, `parent_span_id`, `session_id`) is not a
    /// canonical UUID (§4.2; errata: any version on input).
    InvalidId,
    /// `timestamp` is not an RFC 3339 instant with a zone (§4.2.1 "ISO 8601").
    InvalidTimestamp,
    /// The event's `session_id` is not the chain's (the first event's): a chain is one session.
    SessionMixed,
    /// Lifecycle: the first event is not `session.started`.
    NotStarted,
    /// Lifecycle: an event follows `session.ended`.
    AfterEnd,
    /// Lifecycle: an action outcome answers no earlier `action.requested` (same `execution_id`).
    UnmatchedAction,
    /// Lifecycle: a `carp.resolution.completed` answers no earlier `carp.request.received`.
    UnmatchedResolution,
    /// Lifecycle: a timestamp is earlier than the previous event's (or cannot be ordered).
    TimeRegression,
}

impl Code {
    /// The wire token (`sequence_gap`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::SequenceGap => "sequence_gap",
            Code::ChainBroken => "chain_broken",
            Code::InvalidGenesis => "invalid_genesis",
            Code::HashMismatch => "hash_mismatch",
            Code::MalformedEvent => "malformed_event",
            Code::InvalidTraceVersion => "invalid_trace_version",
            Code::InvalidId => "invalid_id",
            Code::InvalidTimestamp => "invalid_timestamp",
            Code::SessionMixed => "session_mixed",
            Code::NotStarted => "lifecycle_not_started",
            Code::AfterEnd => "lifecycle_after_end",
            Code::UnmatchedAction => "lifecycle_unmatched_action",
            Code::UnmatchedResolution => "lifecycle_unmatched_resolution",
            Code::TimeRegression => "lifecycle_time_regression",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One verification failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The sequence the chain expected at this line.
    pub sequence: u64,
    /// 1-based line number in the input.
    pub line: u64,
    /// What failed.
    pub code: Code,
    /// The event field a §4.2 rule found wrong (`event_id`, `timestamp`, ...); `None` for the
    /// chain and lifecycle codes.
    pub field: Option<&'static str>,
    /// What failed, for people.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at sequence {} (line {}): {}",
            self.code, self.sequence, self.line, self.message
        )
    }
}

/// The result of verifying a chain.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// Lines (events) read. In first-error mode reading stops at the first finding.
    pub events: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Every finding (at most one in first-error mode), in input order.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Whether the chain verified.
    pub fn is_valid(&self) -> bool {
        self.findings.is_empty()
    }

    /// The first finding, if any.
    pub fn first_error(&self) -> Option<&Finding> {
        self.findings.first()
    }
}

/// A hash string as written, stored inline when it has the usual 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HashText {
    Inline([u8; 64]),
    Other(Box<str>),
}

impl HashText {
    pub(crate) fn new(s: &str) -> Self {
        match <[u8; 64]>::try_from(s.as_bytes()) {
            Ok(a) => HashText::Inline(a),
            Err(_) => HashText::Other(s.into()),
        }
    }

    /// The hash text `b` (`None` unless UTF-8; 64 bytes are taken as they are, the caller has
    /// validated them).
    pub(crate) fn from_utf8(b: &[u8]) -> Option<Self> {
        match <[u8; 64]>::try_from(b) {
            Ok(a) => Some(HashText::Inline(a)),
            Err(_) => std::str::from_utf8(b)
                .ok()
                .map(|s| HashText::Other(s.into())),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            HashText::Inline(a) => a,
            HashText::Other(s) => s.as_bytes(),
        }
    }

    fn display(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

/// What reading one line produced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "outcomes live in reused per-chunk vectors; boxing the event variant would \
              allocate once per event on the hot path"
)]
pub(crate) enum LineOutcome {
    /// A well-formed event, reduced to what the chain checks need.
    Event {
        sequence: u64,
        event_hash: HashText,
        previous_event_hash: HashText,
        /// The recomputed hash, lowercase hex.
        computed: [u8; 64],
        /// The `session_id`, for the one-session rule.
        session: SessionText,
        /// The §4.2 field rules the event breaks (usually none: then not allocated).
        faults: Vec<Fault>,
        /// What the lifecycle rules need (only when they are checked).
        facts: Option<Box<Facts>>,
    },
    /// Not a well-formed event, and why.
    Malformed(String),
}

/// The outcome for an event already in memory.
pub(crate) fn outcome_of(event: &TraceEvent, lifecycle: bool) -> LineOutcome {
    let computed = compute_event_hash(event);
    let mut hex = [b'0'; 64];
    hex.copy_from_slice(&computed.as_bytes()[..64]);
    LineOutcome::Event {
        sequence: event.sequence,
        event_hash: HashText::new(&event.event_hash),
        previous_event_hash: HashText::new(&event.previous_event_hash),
        computed: hex,
        session: SessionText::new(event.session_id.as_bytes()),
        faults: faults(&Fields {
            trace_version: event.trace_version.as_bytes(),
            event_id: event.event_id.as_bytes(),
            trace_id: event.trace_id.as_bytes(),
            span_id: event.span_id.as_bytes(),
            parent_span_id: event.parent_span_id.as_deref().map(str::as_bytes),
            session_id: event.session_id.as_bytes(),
            timestamp: event.timestamp.as_bytes(),
        }),
        facts: lifecycle.then(|| {
            Box::new(Facts::new(
                &event.event_type,
                &event.timestamp,
                &event.trace_id,
                &event.payload,
            ))
        }),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Prev {
    /// Nothing read yet: the next event must be a genesis event.
    Start,
    /// The previous event's `event_hash`.
    Known(HashText),
    /// The previous line was malformed: the next link cannot be checked.
    Unknown,
}

/// The in-order part of verification: sequence and link checks over per-line outcomes.
#[derive(Debug, Clone)]
pub(crate) struct ChainChecker {
    expected: u64,
    prev: Prev,
    /// The chain's session: the first well-formed event's `session_id`.
    session: Option<SessionText>,
    pub(crate) events: u64,
    lifecycle: Option<LifecycleChecker>,
}

impl ChainChecker {
    pub(crate) fn new(lifecycle: bool) -> Self {
        Self {
            expected: 0,
            prev: Prev::Start,
            session: None,
            events: 0,
            lifecycle: lifecycle.then(LifecycleChecker::default),
        }
    }

    /// Checks the event at 1-based `line`; appends findings to `out` (several in one line are
    /// possible, in the order sequence, link, hash, field rules, session).
    pub(crate) fn check(&mut self, line: u64, outcome: LineOutcome, out: &mut Vec<Finding>) {
        self.events += 1;
        let expected = self.expected;
        let finding = |code: Code, message: String| Finding {
            sequence: expected,
            line,
            code,
            field: None,
            message,
        };
        match outcome {
            LineOutcome::Malformed(message) => {
                out.push(finding(Code::MalformedEvent, message));
                self.prev = Prev::Unknown;
                self.expected = expected.saturating_add(1);
            }
            LineOutcome::Event {
                sequence,
                event_hash,
                previous_event_hash,
                computed,
                session,
                faults,
                facts,
            } => {
                if sequence != expected {
                    out.push(finding(
                        Code::SequenceGap,
                        format!("sequence is {sequence}, expected {expected}"),
                    ));
                }
                match &self.prev {
                    Prev::Start => {
                        if previous_event_hash.as_bytes() != GENESIS_PREVIOUS_HASH.as_bytes() {
                            out.push(finding(
                                Code::InvalidGenesis,
                                format!(
                                    "the first event must have previous_event_hash = 64 zeros, found {}",
                                    previous_event_hash.display()
                                ),
                            ));
                        }
                    }
                    Prev::Known(prev) => {
                        if previous_event_hash != *prev {
                            out.push(finding(
                                Code::ChainBroken,
                                format!(
                                    "previous_event_hash is {}, but the previous event's event_hash is {}",
                                    previous_event_hash.display(),
                                    prev.display()
                                ),
                            ));
                        }
                    }
                    Prev::Unknown => {}
                }
                if event_hash.as_bytes() != computed {
                    out.push(finding(
                        Code::HashMismatch,
                        format!(
                            "event_hash is {}, but the event hashes to {}",
                            event_hash.display(),
                            String::from_utf8_lossy(&computed)
                        ),
                    ));
                }
                if !faults.is_empty() {
                    out.extend(faults.into_iter().map(|f| Finding {
                        field: Some(f.field),
                        message: f.message,
                        ..finding(f.code, String::new())
                    }));
                }
                if let Some(message) = self.check_session(session) {
                    out.push(Finding {
                        field: Some("session_id"),
                        ..finding(Code::SessionMixed, message)
                    });
                }
                if let (Some(rules), Some(facts)) = (&mut self.lifecycle, &facts) {
                    rules.check(expected, line, facts, out);
                }
                self.prev = Prev::Known(event_hash);
                self.expected = sequence.saturating_add(1);
            }
        }
    }
}

impl ChainChecker {
    /// The one-session rule: the first well-formed event names the chain's session; the
    /// message when `session` is another.
    #[inline]
    fn check_session(&mut self, session: SessionText) -> Option<String> {
        match &self.session {
            None => {
                self.session = Some(session);
                None
            }
            Some(chain) if *chain == session => None,
            Some(chain) => Some(format!(
                "session_id is {}, but the chain is session {} (its first event's): \
                 a chain holds one session",
                session.shown(),
                chain.shown()
            )),
        }
    }
}

/// Verifies events already in memory (for example a chain read from a store), in order.
pub fn verify_events<'a>(
    events: impl IntoIterator<Item = &'a TraceEvent>,
    all_errors: bool,
) -> Report {
    verify_events_with(
        events,
        &VerifyOptions {
            all_errors,
            ..VerifyOptions::default()
        },
    )
}

/// [`verify_events`] with options (`threads` and `chunk_size` do not apply).
pub fn verify_events_with<'a>(
    events: impl IntoIterator<Item = &'a TraceEvent>,
    options: &VerifyOptions,
) -> Report {
    let mut verifier = EventVerifier::new(options);
    for event in events {
        if !verifier.push(event) {
            break;
        }
    }
    verifier.finish()
}

/// Verifies a chain handed over one event at a time, holding nothing of the events it has seen
/// but the link to the last: what a reader streaming a stored chain page by page uses, so its
/// memory does not grow with the chain.
#[derive(Debug, Clone)]
pub struct EventVerifier {
    checker: ChainChecker,
    lifecycle: bool,
    all_errors: bool,
    findings: Vec<Finding>,
}

impl EventVerifier {
    /// A verifier for a chain's first event, with `options` (`threads` and `chunk_size` do not
    /// apply).
    pub fn new(options: &VerifyOptions) -> Self {
        Self {
            checker: ChainChecker::new(options.lifecycle),
            lifecycle: options.lifecycle,
            all_errors: options.all_errors,
            findings: Vec::new(),
        }
    }

    /// Checks the chain's next event. Returns whether to go on: `false` once a finding was made
    /// in first-error mode.
    pub fn push(&mut self, event: &TraceEvent) -> bool {
        let line = self.checker.events + 1;
        let outcome = outcome_of(event, self.lifecycle);
        self.checker.check(line, outcome, &mut self.findings);
        self.goes_on()
    }

    /// Records that the chain's next event could not be read at all (`malformed_event` with
    /// `why`). Returns whether to go on, as [`EventVerifier::push`].
    pub fn push_unreadable(&mut self, why: String) -> bool {
        let line = self.checker.events + 1;
        self.checker
            .check(line, LineOutcome::Malformed(why), &mut self.findings);
        self.goes_on()
    }

    fn goes_on(&mut self) -> bool {
        if !self.all_errors && !self.findings.is_empty() {
            self.findings.truncate(1);
            return false;
        }
        true
    }

    /// The report of every event pushed.
    pub fn finish(self) -> Report {
        Report {
            events: self.checker.events,
            bytes: 0,
            findings: self.findings,
        }
    }
}

/// Reads one line as an event the simple way: a full strict parse into a tree, then field by
/// field. The reference the fast path (`fastline`) is tested against, and the source of
/// every malformed-event message.
pub fn parse_event_line(line: &[u8]) -> Result<TraceEvent, String> {
    let value = cra_wire::json::parse_strict(line).map_err(|e| e.to_string())?;
    let Value::Object(mut map) = value else {
        return Err("the line is not a JSON object".to_owned());
    };
    fn take_string(map: &mut Map<String, Value>, field: &str) -> Result<String, String> {
        match map.remove(field) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(format!("field `/{field}` must be a string")),
            None => Err(format!("missing field `/{field}`")),
        }
    }
    let trace_version = take_string(&mut map, "trace_version")?;
    let event_id = take_string(&mut map, "event_id")?;
    let trace_id = take_string(&mut map, "trace_id")?;
    let span_id = take_string(&mut map, "span_id")?;
    let parent_span_id = match map.remove("parent_span_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err("field `/parent_span_id` must be a string or null".to_owned()),
    };
    let session_id = take_string(&mut map, "session_id")?;
    let sequence = match map.remove("sequence") {
        Some(Value::Number(n)) => n
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| n.as_str().parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| {
                format!("field `/sequence` must be an integer from 0 to 2^64-1, found {n}")
            })?,
        Some(_) => return Err("field `/sequence` must be an integer".to_owned()),
        None => return Err("missing field `/sequence`".to_owned()),
    };
    let timestamp = take_string(&mut map, "timestamp")?;
    let event_type = take_string(&mut map, "event_type")?;
    let payload = match map.remove("payload") {
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err("field `/payload` must be an object".to_owned()),
        None => return Err("missing field `/payload`".to_owned()),
    };
    let event_hash = take_string(&mut map, "event_hash")?;
    let previous_event_hash = take_string(&mut map, "previous_event_hash")?;
    Ok(TraceEvent {
        trace_version,
        event_id,
        trace_id,
        span_id,
        parent_span_id,
        session_id,
        sequence,
        timestamp,
        event_type,
        payload,
        event_hash,
        previous_event_hash,
        extra: map,
    })
}

/// The reference outcome of one line (tree-based).
pub(crate) fn reference_outcome(line: &[u8], lifecycle: bool) -> LineOutcome {
    match parse_event_line(line) {
        Ok(event) => outcome_of(&event, lifecycle),
        Err(message) => LineOutcome::Malformed(message),
    }
}

/// Verifies JSONL `text` with the reference reader, single-threaded, in memory. Simple and slow
/// on purpose: the fast streaming verifier ([`crate::stream::verify_reader`]) must agree with it.
pub fn verify_text_reference(text: &[u8], all_errors: bool) -> Report {
    verify_text_reference_with(
        text,
        &VerifyOptions {
            all_errors,
            ..VerifyOptions::default()
        },
    )
}

/// [`verify_text_reference`] with options (`threads` and `chunk_size` do not apply).
pub fn verify_text_reference_with(text: &[u8], options: &VerifyOptions) -> Report {
    let all_errors = options.all_errors;
    let mut checker = ChainChecker::new(options.lifecycle);
    let mut findings = Vec::new();
    let mut lines = text.split(|&b| b == b'\n').peekable();
    let mut line_no = 0u64;
    while let Some(line) = lines.next() {
        if line.is_empty() && lines.peek().is_none() {
            break; // the newline that ends the last line
        }
        line_no += 1;
        checker.check(
            line_no,
            reference_outcome(line, options.lifecycle),
            &mut findings,
        );
        if !all_errors && !findings.is_empty() {
            findings.truncate(1);
            break;
        }
    }
    Report {
        events: checker.events,
        bytes: text.len() as u64,
        findings,
    }
}
