//! Retention (TRACE §4.6): removing whole ended sessions whose last event is older than the
//! policy's age, never less than 24 hours.
//!
//! Every run that removes something first appends one `operator.retention.applied` event to the
//! operator audit chain ([`OPERATOR_AUDIT_SESSION`]) naming each session it is about to remove
//! (id, event count, head hash, last timestamp), and only then removes them. So nothing is ever
//! removed unrecorded: a crash between the two leaves a record of a removal that the next run
//! performs (and records) again. A session is removed only if its head is still the recorded
//! one, and only whole sessions are removed, so every remaining chain still verifies. The audit
//! chain itself is never removed. The operator chain starts with `session.started` like any other.

use cra_carp::events::SessionStarted;
use cra_trace::store::{ChainStore, ChainStoreError, SessionSummary};
use cra_trace::{ChainHead, Payload, Span, TraceEvent};
use cra_wire::clock::format_timestamp;
use cra_wire::{Clock, IdGenerator};
use serde::Serialize;
use time::Duration;

use crate::{PgStore, RedbStore};

/// The session id of the operator audit chain: `cra_trace::event::derived_session_id` of
/// `cra/operator-audit`, a UUID as TRACE §4.2 requires of every session id.
pub const OPERATOR_AUDIT_SESSION: &str = "00000000-0000-797a-98f2-f77010d9d02c";
/// The agent of the operator audit chain.
pub const OPERATOR_AGENT: &str = "cra-operator";
/// What the operator audit chain's `session.started` says it is for.
pub const OPERATOR_GOAL: &str = "operator audit chain";
/// The event type recording a retention run.
pub const RETENTION_EVENT: &str = RetentionApplied::EVENT_TYPE;
/// The shortest retention any policy may have.
pub const MINIMUM_RETENTION: Duration = Duration::hours(24);

/// `operator.retention.applied`: the sessions a retention run is about to remove, recorded
/// before any is removed.
#[derive(Debug, Serialize)]
pub struct RetentionApplied<'a> {
    /// The policy's age, in seconds.
    pub max_age_seconds: i64,
    /// Sessions whose last event is older than this instant are removed.
    pub cutoff: &'a str,
    /// Each session to remove, with the head it is removed at.
    pub sessions: Vec<RemovedSession<'a>>,
}

impl Payload for RetentionApplied<'_> {
    const EVENT_TYPE: &'static str = "operator.retention.applied";
}

/// A session a retention run removes, as its record names it.
#[derive(Debug, Serialize)]
pub struct RemovedSession<'a> {
    /// The session.
    pub session_id: &'a str,
    /// How many events its chain holds.
    pub events: u64,
    /// Its head's hash.
    pub head_hash: &'a str,
    /// When its last event was recorded.
    pub last_timestamp: &'a str,
}

impl<'a> RemovedSession<'a> {
    /// The record of `summary`'s session.
    pub fn of(summary: &'a SessionSummary) -> Self {
        Self {
            session_id: &summary.session_id,
            events: summary.head.next_sequence,
            head_hash: &summary.head.head_hash,
            last_timestamp: &summary.last_timestamp,
        }
    }
}

/// Keep sessions for at least `max_age` after their last event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    max_age: Duration,
}

/// A retention policy shorter than [`MINIMUM_RETENTION`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "retention of {seconds} s is shorter than the minimum of 24 hours (TRACE §4.6); choose at least 1 day (30 days recommended)"
)]
pub struct RetentionTooShort {
    /// The refused age, in seconds.
    pub seconds: i64,
}

impl RetentionPolicy {
    /// A policy keeping ended sessions for `max_age`, refused below 24 hours.
    pub fn new(max_age: Duration) -> Result<Self, RetentionTooShort> {
        if max_age < MINIMUM_RETENTION {
            return Err(RetentionTooShort {
                seconds: max_age.whole_seconds(),
            });
        }
        Ok(Self { max_age })
    }

    /// A policy keeping ended sessions for `days` days.
    pub fn days(days: u32) -> Result<Self, RetentionTooShort> {
        Self::new(Duration::days(i64::from(days)))
    }

    /// How long ended sessions are kept.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }
}

/// What one retention run did.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionReport {
    /// Sessions whose last event is before this instant (wire form) were eligible.
    pub cutoff: String,
    /// The sessions removed.
    pub removed: Vec<SessionSummary>,
    /// The audit event recorded, when something was removed.
    pub audit_event: Option<TraceEvent>,
}

/// A backend that can delete a whole chain.
pub trait SessionRemoval: Send + Sync {
    /// Removes `session_id`'s events and head if its head is still `expected`; `false` when the
    /// session is gone or has changed.
    fn remove_session(
        &self,
        session_id: &str,
        expected: &ChainHead,
    ) -> Result<bool, ChainStoreError>;
}

impl SessionRemoval for RedbStore {
    fn remove_session(
        &self,
        session_id: &str,
        expected: &ChainHead,
    ) -> Result<bool, ChainStoreError> {
        crate::redb::trace::remove_chain(self, session_id, expected)
    }
}

impl SessionRemoval for PgStore {
    fn remove_session(
        &self,
        session_id: &str,
        expected: &ChainHead,
    ) -> Result<bool, ChainStoreError> {
        crate::pg::trace::remove_chain(self, session_id, expected)
    }
}

/// A chain store that can also remove whole chains: what retention runs on (both backends).
pub trait RetentionStore: ChainStore + SessionRemoval {}

impl<T: ChainStore + SessionRemoval + ?Sized> RetentionStore for T {}

/// The cutoff of `policy` at `clock`'s now (wire form), and the sessions it makes eligible:
/// ended, not the operator audit chain, last event before the cutoff. Changes nothing (what a
/// dry run reports).
pub fn eligible_sessions<S>(
    store: &S,
    policy: &RetentionPolicy,
    clock: &dyn Clock,
) -> Result<(String, Vec<SessionSummary>), ChainStoreError>
where
    S: ChainStore + ?Sized,
{
    let cutoff = format_timestamp(clock.now() - policy.max_age);
    let expired = store
        .sessions()?
        .into_iter()
        .filter(|s| s.ended && s.session_id != OPERATOR_AUDIT_SESSION && s.last_timestamp < cutoff)
        .collect();
    Ok((cutoff, expired))
}

/// Applies `policy` at `clock`'s now: records, then removes, every ended session whose last
/// event is older than the policy allows.
pub fn apply_retention<S>(
    store: &S,
    policy: &RetentionPolicy,
    clock: &dyn Clock,
    ids: &dyn IdGenerator,
) -> Result<RetentionReport, ChainStoreError>
where
    S: ChainStore + SessionRemoval + ?Sized,
{
    let (cutoff, expired) = eligible_sessions(store, policy, clock)?;
    if expired.is_empty() {
        return Ok(RetentionReport {
            cutoff,
            removed: Vec::new(),
            audit_event: None,
        });
    }
    let trace_id = ids.new_id();
    let mut drafts = Vec::new();
    if store.session(OPERATOR_AUDIT_SESSION)?.is_none() {
        let started = SessionStarted::unattended(OPERATOR_AGENT, OPERATOR_GOAL);
        drafts.push(Span::root(&trace_id, &ids.new_id()).draft_of(&started));
    }
    let applied = RetentionApplied {
        max_age_seconds: policy.max_age.whole_seconds(),
        cutoff: &cutoff,
        sessions: expired.iter().map(RemovedSession::of).collect(),
    };
    drafts.push(Span::root(&trace_id, &ids.new_id()).draft_of(&applied));
    let audit_event = store.append(OPERATOR_AUDIT_SESSION, drafts)?.pop();
    let mut removed = Vec::with_capacity(expired.len());
    for session in expired {
        if store.remove_session(&session.session_id, &session.head)? {
            removed.push(session);
        }
    }
    Ok(RetentionReport {
        cutoff,
        removed,
        audit_event,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_audit_session_is_the_uuid_derived_from_its_name() {
        let derived = cra_trace::event::derived_session_id("cra/operator-audit");
        assert_eq!(OPERATOR_AUDIT_SESSION, derived);
        assert!(cra_wire::id::is_canonical_uuid(OPERATOR_AUDIT_SESSION));
    }
}
