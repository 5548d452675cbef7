//! The storage contract of TRACE chains: what the runtime's collector needs from a backend.
//!
//! A [`ChainStore`] appends batches of [`EventDraft`]s to a session's chain and reads them back.
//! Implementations (redb and PostgreSQL live in `cra-store`) promise:
//!
//! * **Atomic appends.** One call's drafts become contiguous events, all or none.
//! * **One chain per session.** Concurrent appenders to a session are serialised: sequences run
//!   `0..N` without gaps, each event links to the one before it, and the chain never forks.
//! * **Durability before acknowledgement.** `append` returns `Ok` only once the events are on
//!   stable storage; after a crash every acknowledged event is still there.
//! * **Time under the lock.** Event ids come from the store's injected
//!   [`cra_wire::IdGenerator`], timestamps from its injected [`cra_wire::Clock`], read while the
//!   session is serialised, and never earlier than the chain's previous event.
//! * **Nothing after `session.ended`.** An append to a chain whose last event is `session.ended`
//!   (or one that puts an event after `session.ended`) is refused and changes nothing.
//! * **Exact bytes.** The wire JSON of each event is stored as sealed, so reading it back gives
//!   the fields that were hashed.
//!
//! Traits here are synchronous and object-safe (`Arc<dyn ChainStore>`); async callers use
//! `spawn_blocking`.

use cra_wire::Token;

use crate::chain::ChainHead;
use crate::event::{EventDraft, TraceEvent};

/// The `event_type` that closes a session's chain.
pub const SESSION_ENDED: &str = "session.ended";

/// The longest session id a store accepts, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// What a store knows about one session's chain without reading its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session.
    pub session_id: String,
    /// Where the next event attaches (`next_sequence` is also the number of events).
    pub head: ChainHead,
    /// Timestamp of event 0.
    pub first_timestamp: String,
    /// Timestamp of the last event.
    pub last_timestamp: String,
    /// Whether the last event is `session.ended`.
    pub ended: bool,
    /// The length of the chain's events as sealed (their wire JSON), summed: what the
    /// stored-bytes quota counts. Events a store kept before it counted them add nothing.
    pub bytes: u64,
}

/// Why a chain store could not do what was asked. Nothing was written in any case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainStoreError {
    /// `append` was called without drafts.
    #[error("an append needs at least one event draft; nothing was written")]
    EmptyAppend,
    /// The session id is empty, too long or not printable ASCII.
    #[error(
        "session id `{session_id}` is not usable: it must be 1 to 128 printable ASCII characters without spaces; nothing was written"
    )]
    InvalidSessionId {
        /// The id as given.
        session_id: String,
    },
    /// The chain already ends with `session.ended`, or the batch puts an event after it.
    #[error(
        "session `{session_id}` has ended (its chain closes with `session.ended`); start a new session to record more events"
    )]
    SessionEnded {
        /// The session.
        session_id: String,
    },
    /// A stored event could not be decoded: the store is damaged.
    #[error(
        "stored event {sequence} of session `{session_id}` is unreadable ({reason}); the store needs inspection, run `cra trace verify` on an export"
    )]
    Corrupt {
        /// The session.
        session_id: String,
        /// The damaged event's sequence.
        sequence: u64,
        /// What the decoder said.
        reason: String,
    },
    /// The backend failed or could not be reached.
    #[error("the trace store is unavailable: {0}; nothing was written, retry later")]
    Unavailable(String),
    /// The append carried a change of state that its store refused in the append's own
    /// transaction (an approval decided meanwhile, say), so nothing of either was written.
    #[error("{message}; nothing was written")]
    Refused {
        /// The wire token of the refusal.
        token: Token,
        /// What was refused and why.
        message: String,
    },
}

impl ChainStoreError {
    /// The wire error token for this error.
    pub fn token(&self) -> Token {
        match self {
            Self::EmptyAppend | Self::InvalidSessionId { .. } => Token::InvalidRequest,
            Self::SessionEnded { .. } => Token::SessionInactive,
            Self::Corrupt { .. } => Token::IntegrityError,
            Self::Unavailable(_) => Token::Unavailable,
            Self::Refused { token, .. } => *token,
        }
    }
}

/// Checks that `session_id` can name a chain.
pub fn check_session_id(session_id: &str) -> Result<(), ChainStoreError> {
    let ok = !session_id.is_empty()
        && session_id.len() <= MAX_SESSION_ID_LEN
        && session_id.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(ChainStoreError::InvalidSessionId {
            session_id: session_id.to_owned(),
        })
    }
}

/// Checks that a batch may be appended to a chain whose `ended` flag is `chain_ended`: the chain
/// is open, the batch is not empty, and only its last draft may be `session.ended`.
pub fn check_batch<D: AsRef<EventDraft>>(
    session_id: &str,
    chain_ended: bool,
    drafts: &[D],
) -> Result<(), ChainStoreError> {
    if drafts.is_empty() {
        return Err(ChainStoreError::EmptyAppend);
    }
    let early_end = drafts
        .iter()
        .rev()
        .skip(1)
        .any(|d| d.as_ref().event_type == SESSION_ENDED);
    if chain_ended || early_end {
        return Err(ChainStoreError::SessionEnded {
            session_id: session_id.to_owned(),
        });
    }
    Ok(())
}

/// The later of two wire timestamps. Both must be in cra's fixed-width wire form
/// (`YYYY-MM-DDTHH:MM:SS.ffffffZ`), where text order is time order; stores use it to keep a
/// chain's timestamps from going backwards when the clock does.
pub fn not_before(now: String, previous: &str) -> String {
    if now.as_str() < previous {
        previous.to_owned()
    } else {
        now
    }
}

/// Told the outcome of an append made with [`ChainStore::append_then`].
pub type AppendDone = Box<dyn FnOnce(Result<Vec<TraceEvent>, ChainStoreError>) + Send>;

/// Durable, serialised storage of TRACE chains (see the module documentation for the promises).
pub trait ChainStore: Send + Sync {
    /// Seals `drafts` onto the end of `session_id`'s chain (creating it if needed) and returns the
    /// events as stored, once they are durable.
    fn append(
        &self,
        session_id: &str,
        drafts: Vec<EventDraft>,
    ) -> Result<Vec<TraceEvent>, ChainStoreError>;

    /// As [`ChainStore::append`], telling `done` the outcome (exactly once) instead of returning
    /// it. A store that queues appends for a committer (group commit) returns once the append is
    /// queued and calls `done` from the committer when it is durable, so no thread waits for the
    /// flush; the default appends, then calls `done`, before returning. It may block either way:
    /// call it where blocking is allowed.
    fn append_then(&self, session_id: &str, drafts: Vec<EventDraft>, done: AppendDone) {
        done(self.append(session_id, drafts));
    }

    /// Events with `from <= sequence < to`, in order (empty for an unknown session).
    fn read_range(
        &self,
        session_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<TraceEvent>, ChainStoreError>;

    /// Up to `limit` events with a sequence greater than `after` (from the start when `None`), in
    /// order: the resumable-stream read.
    fn read_after(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TraceEvent>, ChainStoreError>;

    /// The session's summary, or `None` when it has no chain.
    fn session(&self, session_id: &str) -> Result<Option<SessionSummary>, ChainStoreError>;

    /// Every session with a chain, ordered by session id.
    fn sessions(&self) -> Result<Vec<SessionSummary>, ChainStoreError>;
}

/// One page of a chain read with [`read_page`].
#[derive(Debug, Default)]
pub struct Page {
    /// The events read, in order.
    pub events: Vec<TraceEvent>,
    /// The stored event the page stopped at because it cannot be decoded (`Corrupt`): the
    /// chain's readable prefix ends just before it.
    pub unreadable: Option<ChainStoreError>,
}

/// Reads events `from <= sequence < to` of `session_id`, stopping just before the first stored
/// event that cannot be decoded and naming it (`Page::unreadable`) rather than failing the whole
/// page: a chain with one event an earlier version stored in a form that no longer parses still
/// yields what comes before it (issue 29, item 4). Readers that stream a chain call it page by
/// page, so what they hold is bounded by the page, not the chain. Any other failure (a store that
/// cannot answer) is returned as it is.
pub fn read_page(
    chains: &dyn ChainStore,
    session_id: &str,
    from: u64,
    to: u64,
) -> Result<Page, ChainStoreError> {
    match chains.read_range(session_id, from, to) {
        Ok(events) => Ok(Page {
            events,
            unreadable: None,
        }),
        Err(ChainStoreError::Corrupt { .. }) => read_one_by_one(chains, session_id, from, to),
        Err(other) => Err(other),
    }
}

/// [`read_page`]'s second pass over a page that failed to decode: event by event, up to the
/// one that cannot be read.
fn read_one_by_one(
    chains: &dyn ChainStore,
    session_id: &str,
    from: u64,
    to: u64,
) -> Result<Page, ChainStoreError> {
    let mut page = Page::default();
    for sequence in from..to {
        match chains.read_range(session_id, sequence, sequence + 1) {
            Ok(events) => page.events.extend(events),
            Err(e @ ChainStoreError::Corrupt { .. }) => {
                page.unreadable = Some(e);
                break;
            }
            Err(other) => return Err(other),
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(event_type: &str) -> EventDraft {
        EventDraft {
            trace_id: "t".into(),
            span_id: "s".into(),
            parent_span_id: None,
            event_type: event_type.into(),
            payload: json!({}),
        }
    }

    #[test]
    fn session_ids_are_checked() {
        assert!(check_session_id("abc-123").is_ok());
        for bad in ["", "a b", "é", &"x".repeat(129)] {
            assert_eq!(
                check_session_id(bad).map_err(|e| e.token()),
                Err(Token::InvalidRequest),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn batches_respect_session_end() {
        assert_eq!(
            check_batch::<EventDraft>("s", false, &[]),
            Err(ChainStoreError::EmptyAppend)
        );
        assert!(check_batch("s", false, &[draft("a"), draft(SESSION_ENDED)]).is_ok());
        assert!(check_batch("s", false, &[draft(SESSION_ENDED), draft("a")]).is_err());
        assert!(check_batch("s", true, &[draft("a")]).is_err());
    }

    #[test]
    fn timestamps_never_go_back() {
        let a = "2026-01-01T00:00:00.000001Z";
        let b = "2026-01-01T00:00:00.000002Z";
        assert_eq!(not_before(a.into(), b), b);
        assert_eq!(not_before(b.into(), a), b);
    }
}
