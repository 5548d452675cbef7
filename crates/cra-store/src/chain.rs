//! What both backends share about TRACE chains: the stored head record and sealing a batch of
//! drafts onto it (one clock reading that never goes back, a new id per event).

use cra_trace::store::{ChainStoreError, SESSION_ENDED, SessionSummary, not_before};
use cra_trace::{ChainHead, PreparedDraft, TraceEvent, seal_prepared};
use cra_wire::clock::format_timestamp;
use serde::{Deserialize, Serialize};

use crate::StoreConfig;

/// A session's head as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HeadRecord {
    pub next_sequence: u64,
    pub head_hash: String,
    pub first_timestamp: String,
    pub last_timestamp: String,
    pub ended: bool,
    /// The events' wire JSON lengths, summed (absent from heads written before it was kept).
    #[serde(default)]
    pub bytes: u64,
}

impl HeadRecord {
    pub(crate) fn genesis() -> Self {
        let g = ChainHead::genesis();
        Self {
            next_sequence: g.next_sequence,
            head_hash: g.head_hash,
            first_timestamp: String::new(),
            last_timestamp: String::new(),
            ended: false,
            bytes: 0,
        }
    }

    pub(crate) fn summary(self, session_id: String) -> SessionSummary {
        SessionSummary {
            session_id,
            head: ChainHead {
                next_sequence: self.next_sequence,
                head_hash: self.head_hash,
            },
            first_timestamp: self.first_timestamp,
            last_timestamp: self.last_timestamp,
            ended: self.ended,
            bytes: self.bytes,
        }
    }
}

pub(crate) fn decode_head(session_id: &str, bytes: &[u8]) -> Result<HeadRecord, ChainStoreError> {
    serde_json::from_slice(bytes).map_err(|e| ChainStoreError::Corrupt {
        session_id: session_id.to_owned(),
        sequence: 0,
        reason: format!("head record: {e}"),
    })
}

pub(crate) fn decode_event(
    session_id: &str,
    sequence: u64,
    bytes: &[u8],
) -> Result<TraceEvent, ChainStoreError> {
    serde_json::from_slice(bytes).map_err(|e| ChainStoreError::Corrupt {
        session_id: session_id.to_owned(),
        sequence,
        reason: e.to_string(),
    })
}

/// A sealed batch: the new head, the events, and each event's wire JSON.
pub(crate) type Sealed = (HeadRecord, Vec<TraceEvent>, Vec<Vec<u8>>);

/// Seals `drafts` onto `head`: one clock reading (never before the chain's last timestamp), a new
/// id per event. Returns the new head, the events and their wire JSON.
pub(crate) fn seal_all(
    config: &StoreConfig,
    session_id: &str,
    mut head: HeadRecord,
    drafts: Vec<PreparedDraft>,
) -> Result<Sealed, ChainStoreError> {
    let timestamp = not_before(format_timestamp(config.clock.now()), &head.last_timestamp);
    let mut sealed = Vec::with_capacity(drafts.len());
    let mut bodies = Vec::with_capacity(drafts.len());
    for draft in drafts {
        let at = ChainHead {
            next_sequence: head.next_sequence,
            head_hash: std::mem::take(&mut head.head_hash),
        };
        let (event, body) = seal_prepared(
            draft,
            session_id,
            &at,
            config.ids.new_id(),
            timestamp.clone(),
        );
        if head.next_sequence == 0 {
            head.first_timestamp = timestamp.clone();
        }
        head.next_sequence += 1;
        head.head_hash = event.event_hash.clone();
        head.ended = event.event_type == SESSION_ENDED;
        head.bytes = head.bytes.saturating_add(body.len() as u64);
        sealed.push(event);
        bodies.push(body);
    }
    head.last_timestamp = timestamp;
    Ok((head, sealed, bodies))
}
