//! Semantic diff of two TRACE chains (spec §4.5, "Diff Generation"): which events one session
//! has that the other lacks, and which payload fields differ between events that correspond.
//!
//! Two runs of the same work never share ids, timestamps or hashes, and one extra event shifts
//! every sequence after it, so events are not paired by position or id. They are paired by
//! their place in the **span tree** (`span_id` / `parent_span_id`), their **event type** and
//! their **subject** (the payload's `action_id`, else `block_id`, else the request's goal):
//!
//! 1. Each chain becomes a forest of spans. A span's parent is the span named by the
//!    `parent_span_id` of its first event that has one, if that span started earlier in the chain;
//!    otherwise the span is a root. (Parents that start later are ignored so that no input can
//!    make a cycle.)
//! 2. Sibling spans are aligned by their signature, the event type and subject of their first
//!    event, with a longest-common-subsequence alignment ([`lcs_pairs`], Myers' O(ND) algorithm
//!    in linear space); spans left unpaired between two pairs are then paired by the event type
//!    of their first event alone, in order, so a span whose goal changed is reported as changed
//!    rather than as one removal and one addition.
//! 3. Within two paired spans, events are aligned the same way (strict key: event type and
//!    subject; loose key: event type), then their child spans recursively.
//! 4. Paired events are compared field by field. Unpaired events are `removed` (only in A) or
//!    `added` (only in B); every event of an unpaired span is.
//!
//! What is compared, and what is ignored by default (see [`DiffOptions`]):
//!
//! * the payload, member by member (arrays element by element), reported as JSON pointers under
//!   `/payload`;
//! * **ids** (ignored unless asked for): the envelope's `event_id`, `trace_id`, `span_id`,
//!   `parent_span_id`, `session_id`, payload members named in [`ID_MEMBERS`], and any string that
//!   is a canonical UUID;
//! * **timestamps** (ignored unless asked for): the envelope's `timestamp`, payload members named
//!   `timestamp`, ending in `_at`, or named `duration_ms`, and any string that reads as an
//!   RFC 3339 instant;
//! * **hashes** (ignored unless asked for): the envelope's `event_hash` and
//!   `previous_event_hash`, payload members whose name ends in `_hash`, `_digest` or `_digests`
//!   (or is `hash` / `digest`), and any string of 64 lowercase hex digits, with or without a
//!   `sha256:` prefix.
//!
//! `sequence` is never compared (it is what alignment replaces) and chains are not verified
//! here: `cra trace verify` does that.
//!
//! Pure: [`parse_events`] reads bytes already in memory; [`diff`] works on events.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::event::TraceEvent;
use crate::verify::parse_event_line;

/// Payload members that hold generated identifiers (ignored unless ids are included).
pub const ID_MEMBERS: [&str; 11] = [
    "event_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "session_id",
    "parent_session_id",
    "request_id",
    "resolution_id",
    "execution_id",
    "approval_id",
    "callsign",
];

/// What the diff compares beyond the payload's ordinary content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiffOptions {
    /// Also compare ids (envelope ids, id members, UUID strings).
    pub include_ids: bool,
    /// Also compare timestamps (envelope timestamp, `*_at`, `duration_ms`, RFC 3339 strings).
    pub include_timestamps: bool,
    /// Also compare hashes (envelope hashes, `*_hash`, `*_digest(s)`, SHA-256 hex strings).
    pub include_hashes: bool,
}

/// A line of a `.trace.jsonl` that is not a well-formed event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}; run `cra trace verify` on the file for details")]
pub struct ParseError {
    /// 1-based line number.
    pub line: u64,
    /// What is wrong with it.
    pub message: String,
}

/// Reads a whole `.trace.jsonl` text into events (strictly, as the verifier does). A final line
/// without `\n` is accepted; an empty line anywhere else is an error.
pub fn parse_events(text: &[u8]) -> Result<Vec<TraceEvent>, ParseError> {
    let mut events = Vec::new();
    let mut rest = text;
    let mut line_no = 0u64;
    while !rest.is_empty() {
        line_no += 1;
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let event = parse_event_line(line).map_err(|message| ParseError {
            line: line_no,
            message,
        })?;
        events.push(event);
        rest = next;
    }
    Ok(events)
}

/// One event named in a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRef {
    /// Its sequence in its chain.
    pub sequence: u64,
    /// Its type.
    pub event_type: String,
    /// Its subject (action id, block id or goal), if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Where it sits: the signatures of its span and the spans above it, outermost first.
    pub span: String,
}

/// One payload (or envelope) field that differs between two paired events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    /// JSON pointer into the event (`/payload/...` for payload fields).
    pub pointer: String,
    /// The value in A; absent when A does not have the member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a: Option<Value>,
    /// The value in B; absent when B does not have the member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b: Option<Value>,
}

/// Two paired events whose compared fields differ.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangedEvent {
    /// The event in A.
    pub a: EventRef,
    /// The event in B.
    pub b: EventRef,
    /// Every differing field, in document order.
    pub fields: Vec<FieldChange>,
}

/// The result of [`diff`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceDiff {
    /// True when nothing was added, removed or changed.
    pub same: bool,
    /// Events in A.
    pub a_events: usize,
    /// Events in B.
    pub b_events: usize,
    /// Pairs of events that correspond (changed or not).
    pub paired: usize,
    /// Events only in B, in B's order.
    pub added: Vec<EventRef>,
    /// Events only in A, in A's order.
    pub removed: Vec<EventRef>,
    /// Paired events that differ, in A's order.
    pub changed: Vec<ChangedEvent>,
}

/// An entry of the diff in walk order (for printing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `removed[i]`.
    Removed(usize),
    /// `added[i]`.
    Added(usize),
    /// `changed[i]`.
    Changed(usize),
}

/// A [`TraceDiff`] plus the order in which its entries were found (tree walk order), which
/// reads best for people.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffReport {
    /// The result.
    pub diff: TraceDiff,
    /// Its entries in walk order.
    pub order: Vec<Entry>,
}

/// Compares two chains (see the module documentation).
pub fn diff(a: &[TraceEvent], b: &[TraceEvent], options: &DiffOptions) -> TraceDiff {
    diff_report(a, b, options).diff
}

/// [`diff`], with the entries' walk order.
pub fn diff_report(a: &[TraceEvent], b: &[TraceEvent], options: &DiffOptions) -> DiffReport {
    let fa = Forest::build(a);
    let fb = Forest::build(b);
    let mut walk = Walk {
        a,
        b,
        fa: &fa,
        fb: &fb,
        options,
        paired: 0,
        found: Vec::new(),
    };
    walk.spans(&fa.roots, &fb.roots);
    let found = walk.found;
    // `removed` and `changed` in A's order, `added` in B's order; `order` keeps the walk order.
    let mut removed: Vec<(usize, EventRef)> = Vec::new();
    let mut added: Vec<(usize, EventRef)> = Vec::new();
    let mut changed: Vec<(usize, ChangedEvent)> = Vec::new();
    for (i, f) in found.into_iter().enumerate() {
        match f {
            Found::Removed(r) => removed.push((i, r)),
            Found::Added(r) => added.push((i, r)),
            Found::Changed(c) => changed.push((i, c)),
        }
    }
    removed.sort_by_key(|(_, r)| r.sequence);
    added.sort_by_key(|(_, r)| r.sequence);
    changed.sort_by_key(|(_, c)| c.a.sequence);
    let mut order: Vec<(usize, Entry)> = Vec::new();
    order.extend(
        removed
            .iter()
            .enumerate()
            .map(|(k, (i, _))| (*i, Entry::Removed(k))),
    );
    order.extend(
        added
            .iter()
            .enumerate()
            .map(|(k, (i, _))| (*i, Entry::Added(k))),
    );
    order.extend(
        changed
            .iter()
            .enumerate()
            .map(|(k, (i, _))| (*i, Entry::Changed(k))),
    );
    order.sort_by_key(|(i, _)| *i);
    let diff = TraceDiff {
        same: removed.is_empty() && added.is_empty() && changed.is_empty(),
        a_events: a.len(),
        b_events: b.len(),
        paired: walk.paired,
        added: added.into_iter().map(|(_, r)| r).collect(),
        removed: removed.into_iter().map(|(_, r)| r).collect(),
        changed: changed.into_iter().map(|(_, c)| c).collect(),
    };
    DiffReport {
        diff,
        order: order.into_iter().map(|(_, e)| e).collect(),
    }
}

/// The subject of an event: `payload.action_id`, else `payload.block_id`, else the request's
/// goal (`payload.goal` or `payload.request.task.goal`).
pub fn subject(event: &TraceEvent) -> Option<&str> {
    let p = &event.payload;
    p.get("action_id")
        .and_then(Value::as_str)
        .or_else(|| p.get("block_id").and_then(Value::as_str))
        .or_else(|| p.get("goal").and_then(Value::as_str))
        .or_else(|| p.pointer("/request/task/goal").and_then(Value::as_str))
}

/// One span of a chain: its events (indexes into the chain) and child spans (indexes into
/// [`Forest::spans`]), both in chain order.
#[derive(Debug)]
struct Span {
    events: Vec<usize>,
    children: Vec<usize>,
    parent: Option<usize>,
}

#[derive(Debug)]
struct Forest {
    spans: Vec<Span>,
    roots: Vec<usize>,
    by_id: HashMap<String, usize>,
}

impl Forest {
    fn build(events: &[TraceEvent]) -> Self {
        let mut by_id: HashMap<&str, usize> = HashMap::new();
        let mut spans: Vec<Span> = Vec::new();
        let mut parent_ids: Vec<Option<&str>> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let idx = *by_id.entry(e.span_id.as_str()).or_insert_with(|| {
                spans.push(Span {
                    events: Vec::new(),
                    children: Vec::new(),
                    parent: None,
                });
                parent_ids.push(None);
                spans.len() - 1
            });
            spans[idx].events.push(i);
            if parent_ids[idx].is_none() {
                parent_ids[idx] = e.parent_span_id.as_deref();
            }
        }
        let mut roots = Vec::new();
        for idx in 0..spans.len() {
            // Spans are numbered in order of first appearance: only an earlier span can parent.
            let parent = parent_ids[idx]
                .and_then(|p| by_id.get(p).copied())
                .filter(|&p| p < idx);
            spans[idx].parent = parent;
            match parent {
                Some(p) => spans[p].children.push(idx),
                None => roots.push(idx),
            }
        }
        let by_id = by_id.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Self {
            spans,
            roots,
            by_id,
        }
    }
}

/// One step of an alignment of two sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `a[i]` and `b[j]` correspond.
    Both(usize, usize),
    /// `a[i]` has no counterpart.
    OnlyA(usize),
    /// `b[j]` has no counterpart.
    OnlyB(usize),
}

/// Aligns `a` and `b`: a longest common subsequence of their strict keys, then, in each gap
/// between two paired elements, a longest common subsequence of their loose keys. Steps come in
/// order of both sequences.
pub fn align<S: Eq, L: Eq>(
    a_strict: &[S],
    b_strict: &[S],
    a_loose: &[L],
    b_loose: &[L],
) -> Vec<Step> {
    let pairs = lcs_pairs(a_strict, b_strict);
    let mut steps = Vec::with_capacity(a_strict.len().max(b_strict.len()));
    let (mut i, mut j) = (0usize, 0usize);
    let gap = |steps: &mut Vec<Step>, i0: usize, i1: usize, j0: usize, j1: usize| {
        let inner = lcs_pairs(&a_loose[i0..i1], &b_loose[j0..j1]);
        let (mut x, mut y) = (i0, j0);
        for (pi, pj) in inner {
            let (pi, pj) = (pi + i0, pj + j0);
            // Within a gap, removals before additions.
            steps.extend((x..pi).map(Step::OnlyA));
            steps.extend((y..pj).map(Step::OnlyB));
            steps.push(Step::Both(pi, pj));
            (x, y) = (pi + 1, pj + 1);
        }
        steps.extend((x..i1).map(Step::OnlyA));
        steps.extend((y..j1).map(Step::OnlyB));
    };
    for (pi, pj) in pairs {
        gap(&mut steps, i, pi, j, pj);
        steps.push(Step::Both(pi, pj));
        (i, j) = (pi + 1, pj + 1);
    }
    gap(&mut steps, i, a_strict.len(), j, b_strict.len());
    steps
}

/// A longest common subsequence of `a` and `b` as index pairs, in increasing order: Myers'
/// O((N+M)·D) algorithm with the linear-space middle-snake refinement, so memory stays
/// O(N+M) however different the inputs are.
pub fn lcs_pairs<T: Eq>(a: &[T], b: &[T]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let max = a.len() + b.len() + 1;
    let mut vf = vec![0usize; 2 * max + 2];
    let mut vb = vec![0usize; 2 * max + 2];
    lcs_rec(a, b, 0, 0, &mut vf, &mut vb, &mut out);
    out
}

fn lcs_rec<T: Eq>(
    a: &[T],
    b: &[T],
    a_off: usize,
    b_off: usize,
    vf: &mut [usize],
    vb: &mut [usize],
    out: &mut Vec<(usize, usize)>,
) {
    // Common prefix and suffix need no search.
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    out.extend((0..prefix).map(|k| (a_off + k, b_off + k)));
    let (a, b) = (&a[prefix..], &b[prefix..]);
    let (a_off, b_off) = (a_off + prefix, b_off + prefix);
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (n, m) = (a.len() - suffix, b.len() - suffix);
    if n > 0 && m > 0 {
        let (x0, y0, x1, y1) = middle_snake(&a[..n], &b[..m], vf, vb);
        if (x0, y0, x1, y1) == (0, 0, 0, 0) || (x0, y0) == (n, m) {
            // No progress is possible only if the search failed; treat as nothing in common.
        } else {
            lcs_rec(&a[..x0], &b[..y0], a_off, b_off, vf, vb, out);
            out.extend((0..x1 - x0).map(|k| (a_off + x0 + k, b_off + y0 + k)));
            lcs_rec(&a[x1..n], &b[y1..m], a_off + x1, b_off + y1, vf, vb, out);
        }
    }
    out.extend((0..suffix).map(|k| (a_off + n + k, b_off + m + k)));
}

/// The middle snake of an edit path between `a` and `b` (both non-empty, first and last
/// elements differing): `(x0, y0, x1, y1)` with `a[x0..x1] == b[y0..y1]` on one diagonal, such
/// that an optimal path passes through it.
fn middle_snake<T: Eq>(
    a: &[T],
    b: &[T],
    vf: &mut [usize],
    vb: &mut [usize],
) -> (usize, usize, usize, usize) {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let delta = n - m;
    let odd = delta & 1 != 0;
    let off = (n + m + 1) as usize;
    let at = |k: isize| (k + off as isize) as usize;
    let dmax = (n + m + 1) / 2;
    vf[at(1)] = 0;
    vb[at(1)] = 0;
    for d in 0..=dmax {
        let mut k = -d;
        while k <= d {
            let mut x = if k == -d || (k != d && vf[at(k - 1)] < vf[at(k + 1)]) {
                vf[at(k + 1)] as isize
            } else {
                vf[at(k - 1)] as isize + 1
            };
            let mut y = x - k;
            let (sx, sy) = (x, y);
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            vf[at(k)] = x as usize;
            let kr = delta - k;
            if odd && kr > -d && kr < d && x + vb[at(kr)] as isize >= n {
                return (sx as usize, sy as usize, x as usize, y as usize);
            }
            k += 2;
        }
        let mut k = -d;
        while k <= d {
            let mut x = if k == -d || (k != d && vb[at(k - 1)] < vb[at(k + 1)]) {
                vb[at(k + 1)] as isize
            } else {
                vb[at(k - 1)] as isize + 1
            };
            let mut y = x - k;
            let (sx, sy) = (x, y);
            while x < n && y < m && a[(n - x - 1) as usize] == b[(m - y - 1) as usize] {
                x += 1;
                y += 1;
            }
            vb[at(k)] = x as usize;
            let kf = delta - k;
            if !odd && kf >= -d && kf <= d && x + vf[at(kf)] as isize >= n {
                return (
                    (n - x) as usize,
                    (m - y) as usize,
                    (n - sx) as usize,
                    (m - sy) as usize,
                );
            }
            k += 2;
        }
    }
    (0, 0, 0, 0)
}

struct Walk<'a> {
    a: &'a [TraceEvent],
    b: &'a [TraceEvent],
    fa: &'a Forest,
    fb: &'a Forest,
    options: &'a DiffOptions,
    paired: usize,
    found: Vec<Found>,
}

/// A difference as the walk finds it.
enum Found {
    Removed(EventRef),
    Added(EventRef),
    Changed(ChangedEvent),
}

/// Strict and loose keys of an event: (type, subject) and type.
fn strict_key(e: &TraceEvent) -> (&str, Option<&str>) {
    (e.event_type.as_str(), subject(e))
}

impl Walk<'_> {
    fn first_event<'e>(events: &'e [TraceEvent], forest: &Forest, span: usize) -> &'e TraceEvent {
        // Every span has at least one event: spans are created from events.
        &events[forest.spans[span].events[0]]
    }

    fn spans(&mut self, a_spans: &[usize], b_spans: &[usize]) {
        let first_a: Vec<&TraceEvent> = a_spans
            .iter()
            .map(|&s| Self::first_event(self.a, self.fa, s))
            .collect();
        let first_b: Vec<&TraceEvent> = b_spans
            .iter()
            .map(|&s| Self::first_event(self.b, self.fb, s))
            .collect();
        let sa: Vec<_> = first_a.iter().map(|e| strict_key(e)).collect();
        let sb: Vec<_> = first_b.iter().map(|e| strict_key(e)).collect();
        let la: Vec<&str> = first_a.iter().map(|e| e.event_type.as_str()).collect();
        let lb: Vec<&str> = first_b.iter().map(|e| e.event_type.as_str()).collect();
        for step in align(&sa, &sb, &la, &lb) {
            match step {
                Step::Both(i, j) => self.span_pair(a_spans[i], b_spans[j]),
                Step::OnlyA(i) => self.whole_span(true, a_spans[i]),
                Step::OnlyB(j) => self.whole_span(false, b_spans[j]),
            }
        }
    }

    fn span_pair(&mut self, sa: usize, sb: usize) {
        let ea = &self.fa.spans[sa].events;
        let eb = &self.fb.spans[sb].events;
        let ka: Vec<_> = ea.iter().map(|&i| strict_key(&self.a[i])).collect();
        let kb: Vec<_> = eb.iter().map(|&i| strict_key(&self.b[i])).collect();
        let la: Vec<&str> = ea.iter().map(|&i| self.a[i].event_type.as_str()).collect();
        let lb: Vec<&str> = eb.iter().map(|&i| self.b[i].event_type.as_str()).collect();
        for step in align(&ka, &kb, &la, &lb) {
            match step {
                Step::Both(i, j) => self.event_pair(ea[i], eb[j]),
                Step::OnlyA(i) => self.lone_event(true, ea[i]),
                Step::OnlyB(j) => self.lone_event(false, eb[j]),
            }
        }
        let ca = self.fa.spans[sa].children.clone();
        let cb = self.fb.spans[sb].children.clone();
        self.spans(&ca, &cb);
    }

    fn whole_span(&mut self, in_a: bool, span: usize) {
        let forest = if in_a { self.fa } else { self.fb };
        for &e in &forest.spans[span].events {
            self.lone_event(in_a, e);
        }
        for &c in &forest.spans[span].children {
            self.whole_span(in_a, c);
        }
    }

    fn event_ref(&self, in_a: bool, index: usize) -> EventRef {
        let (events, forest) = if in_a {
            (self.a, self.fa)
        } else {
            (self.b, self.fb)
        };
        let e = &events[index];
        EventRef {
            sequence: e.sequence,
            event_type: e.event_type.clone(),
            subject: subject(e).map(str::to_owned),
            span: span_path(events, forest, &e.span_id),
        }
    }

    fn lone_event(&mut self, in_a: bool, index: usize) {
        let r = self.event_ref(in_a, index);
        self.found.push(if in_a {
            Found::Removed(r)
        } else {
            Found::Added(r)
        });
    }

    fn event_pair(&mut self, ia: usize, ib: usize) {
        self.paired += 1;
        let fields = compare_events(&self.a[ia], &self.b[ib], self.options);
        if fields.is_empty() {
            return;
        }
        let change = ChangedEvent {
            a: self.event_ref(true, ia),
            b: self.event_ref(false, ib),
            fields,
        };
        self.found.push(Found::Changed(change));
    }
}

/// `type "subject" > type "subject"`: the first events of the span and its ancestors.
fn span_path(events: &[TraceEvent], forest: &Forest, span_id: &str) -> String {
    let Some(mut idx) = forest.by_id.get(span_id).copied() else {
        return String::new();
    };
    let mut parts = Vec::new();
    loop {
        let e = &events[forest.spans[idx].events[0]];
        parts.push(match subject(e) {
            Some(s) => format!("{} {s:?}", e.event_type),
            None => e.event_type.clone(),
        });
        match forest.spans[idx].parent {
            Some(p) => idx = p,
            None => break,
        }
    }
    parts.reverse();
    parts.join(" > ")
}

/// Why a member is ignored by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Id,
    Timestamp,
    Hash,
}

fn is_hash_text(s: &str) -> bool {
    let hex = s.strip_prefix("sha256:").unwrap_or(s);
    cra_wire::hash::is_sha256_hex(hex)
}

fn value_category(v: &Value) -> Option<Category> {
    let s = v.as_str()?;
    if cra_wire::id::is_canonical_uuid(s) {
        Some(Category::Id)
    } else if is_hash_text(s) {
        Some(Category::Hash)
    } else if s.len() >= 20 && cra_wire::clock::parse_rfc3339(s).is_ok() {
        Some(Category::Timestamp)
    } else {
        None
    }
}

fn key_category(k: &str) -> Option<Category> {
    if ID_MEMBERS.contains(&k) {
        Some(Category::Id)
    } else if k == "timestamp" || k == "duration_ms" || k.ends_with("_at") {
        Some(Category::Timestamp)
    } else if k == "hash"
        || k == "digest"
        || k.ends_with("_hash")
        || k.ends_with("_digest")
        || k.ends_with("_digests")
    {
        Some(Category::Hash)
    } else {
        None
    }
}

fn included(c: Category, o: &DiffOptions) -> bool {
    match c {
        Category::Id => o.include_ids,
        Category::Timestamp => o.include_timestamps,
        Category::Hash => o.include_hashes,
    }
}

/// Whether a member (or array element, `key == None`) with these values is skipped.
fn skipped(key: Option<&str>, a: Option<&Value>, b: Option<&Value>, o: &DiffOptions) -> bool {
    let cats = [
        key.and_then(key_category),
        a.and_then(value_category),
        b.and_then(value_category),
    ];
    cats.iter().flatten().any(|&c| !included(c, o))
}

/// Every compared field that differs between two paired events, in document order.
pub fn compare_events(a: &TraceEvent, b: &TraceEvent, o: &DiffOptions) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let envelope: [(&str, Option<Category>, Value, Value); 8] = [
        (
            "trace_version",
            None,
            Value::from(a.trace_version.as_str()),
            Value::from(b.trace_version.as_str()),
        ),
        (
            "event_id",
            Some(Category::Id),
            Value::from(a.event_id.as_str()),
            Value::from(b.event_id.as_str()),
        ),
        (
            "trace_id",
            Some(Category::Id),
            Value::from(a.trace_id.as_str()),
            Value::from(b.trace_id.as_str()),
        ),
        (
            "span_id",
            Some(Category::Id),
            Value::from(a.span_id.as_str()),
            Value::from(b.span_id.as_str()),
        ),
        (
            "parent_span_id",
            Some(Category::Id),
            a.parent_span_id.as_deref().map_or(Value::Null, Value::from),
            b.parent_span_id.as_deref().map_or(Value::Null, Value::from),
        ),
        (
            "session_id",
            Some(Category::Id),
            Value::from(a.session_id.as_str()),
            Value::from(b.session_id.as_str()),
        ),
        (
            "timestamp",
            Some(Category::Timestamp),
            Value::from(a.timestamp.as_str()),
            Value::from(b.timestamp.as_str()),
        ),
        (
            "event_hash",
            Some(Category::Hash),
            Value::from(a.event_hash.as_str()),
            Value::from(b.event_hash.as_str()),
        ),
    ];
    for (name, cat, va, vb) in envelope {
        if cat.is_none_or(|c| included(c, o)) && va != vb {
            out.push(FieldChange {
                pointer: format!("/{name}"),
                a: Some(va),
                b: Some(vb),
            });
        }
    }
    if o.include_hashes && a.previous_event_hash != b.previous_event_hash {
        out.push(FieldChange {
            pointer: "/previous_event_hash".to_owned(),
            a: Some(Value::from(a.previous_event_hash.as_str())),
            b: Some(Value::from(b.previous_event_hash.as_str())),
        });
    }
    let mut pointer = String::from("/payload");
    compare_values(&mut pointer, &a.payload, &b.payload, o, &mut out);
    compare_extra(&a.extra, &b.extra, o, &mut out);
    out
}

fn compare_extra(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    o: &DiffOptions,
    out: &mut Vec<FieldChange>,
) {
    if a.is_empty() && b.is_empty() {
        return;
    }
    let va = Value::Object(a.clone());
    let vb = Value::Object(b.clone());
    let mut pointer = String::new();
    compare_values(&mut pointer, &va, &vb, o, out);
}

fn compare_values(
    pointer: &mut String,
    a: &Value,
    b: &Value,
    o: &DiffOptions,
    out: &mut Vec<FieldChange>,
) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let (va, vb) = (x.get(k), y.get(k));
                if skipped(Some(k), va, vb, o) {
                    continue;
                }
                let len = pointer.len();
                cra_wire::json::push_pointer_segment(pointer, k);
                match (va, vb) {
                    (Some(va), Some(vb)) => compare_values(pointer, va, vb, o, out),
                    (va, vb) => out.push(FieldChange {
                        pointer: pointer.clone(),
                        a: va.cloned(),
                        b: vb.cloned(),
                    }),
                }
                pointer.truncate(len);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let (va, vb) = (x.get(i), y.get(i));
                if skipped(None, va, vb, o) {
                    continue;
                }
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&i.to_string());
                match (va, vb) {
                    (Some(va), Some(vb)) => compare_values(pointer, va, vb, o, out),
                    (va, vb) => out.push(FieldChange {
                        pointer: pointer.clone(),
                        a: va.cloned(),
                        b: vb.cloned(),
                    }),
                }
                pointer.truncate(len);
            }
        }
        _ => {
            if !same_scalar(a, b) {
                out.push(FieldChange {
                    pointer: pointer.clone(),
                    a: Some(a.clone()),
                    b: Some(b.clone()),
                });
            }
        }
    }
}

/// Equal values; numbers compare by their canonical TRACE form (so `1e5` equals `1E5`).
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => {
            a == b
                || cra_wire::canonical::trace_canonical(a)
                    == cra_wire::canonical::trace_canonical(b)
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Length of a longest common subsequence by dynamic programming (the reference).
    fn lcs_len(a: &[u8], b: &[u8]) -> usize {
        let mut t = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                t[i][j] = if a[i] == b[j] {
                    t[i + 1][j + 1] + 1
                } else {
                    t[i + 1][j].max(t[i][j + 1])
                };
            }
        }
        t[0][0]
    }

    fn check(a: &[u8], b: &[u8]) {
        let pairs = lcs_pairs(a, b);
        assert_eq!(
            pairs.len(),
            lcs_len(a, b),
            "a={a:?} b={b:?} pairs={pairs:?}"
        );
        for w in pairs.windows(2) {
            assert!(
                w[0].0 < w[1].0 && w[0].1 < w[1].1,
                "not increasing: {pairs:?}"
            );
        }
        for &(i, j) in &pairs {
            assert_eq!(a[i], b[j]);
        }
    }

    #[test]
    fn lcs_is_optimal_on_small_cases() {
        check(b"", b"");
        check(b"abc", b"");
        check(b"", b"abc");
        check(b"abcabba", b"cbabac");
        check(b"xaby", b"abz");
        check(b"aaaa", b"aa");
        check(b"ab", b"ba");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn lcs_is_optimal(a in proptest::collection::vec(0u8..4, 0..24),
                          b in proptest::collection::vec(0u8..4, 0..24)) {
            check(&a, &b);
        }
    }

    #[test]
    fn align_pairs_loose_keys_inside_gaps() {
        let steps = align(
            &["s", "x1", "e"],
            &["s", "x2", "e"],
            &["s", "x", "e"],
            &["s", "x", "e"],
        );
        assert_eq!(
            steps,
            vec![Step::Both(0, 0), Step::Both(1, 1), Step::Both(2, 2)]
        );
        let steps = align(&["s", "e"], &["s", "n", "e"], &["s", "e"], &["s", "n", "e"]);
        assert_eq!(
            steps,
            vec![Step::Both(0, 0), Step::OnlyB(1), Step::Both(1, 2)]
        );
    }

    #[test]
    fn categories() {
        let o = DiffOptions::default();
        assert!(skipped(Some("resolution_id"), None, None, &o));
        assert!(skipped(Some("created_at"), None, None, &o));
        assert!(skipped(Some("content_hash"), None, None, &o));
        assert!(skipped(Some("atlas_digests"), None, None, &o));
        assert!(skipped(
            None,
            Some(&Value::from("0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70")),
            None,
            &o
        ));
        assert!(skipped(
            None,
            Some(&Value::from("2026-01-01T00:00:00Z")),
            None,
            &o
        ));
        assert!(skipped(None, Some(&Value::from("a".repeat(64))), None, &o));
        assert!(!skipped(
            Some("action_id"),
            Some(&Value::from("x.y")),
            None,
            &o
        ));
        assert!(!skipped(None, Some(&Value::from("2026")), None, &o));
        let all = DiffOptions {
            include_ids: true,
            include_timestamps: true,
            include_hashes: true,
        };
        assert!(!skipped(Some("resolution_id"), None, None, &all));
    }
}
