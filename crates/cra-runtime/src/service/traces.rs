//! Reading TRACE chains: the chains a caller may read, one chain's events, and a stored chain
//! re-verified against its store's head. Access: a session's own agent reads its chain;
//! auditors, operators and admins read every one (`sessions::can_read`).

use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::service::sessions::{can_read, readable_session};
use crate::state::Runtime;

/// One chain in the list of `GET /v1/traces`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChainListing {
    /// The session whose chain it is.
    pub session_id: String,
    /// The session's agent.
    pub agent_id: String,
    /// Events in the chain.
    pub event_count: u64,
    /// The hash of its last event.
    pub head_hash: String,
    /// The first event's timestamp.
    pub first_timestamp: String,
    /// The last event's timestamp.
    pub last_timestamp: String,
    /// True once the chain closed with `session.ended`.
    pub ended: bool,
}

/// The first failure of a verification.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerifyFinding {
    /// The sequence where the chain first fails.
    pub sequence: u64,
    /// `sequence_gap`, `chain_broken`, `invalid_genesis`, `hash_mismatch`, `malformed_event`, or
    /// a TRACE §4.2 field rule: `invalid_trace_version`, `invalid_id`, `invalid_timestamp`,
    /// `session_mixed` (specs/trace.md).
    pub code: String,
    /// The event field a §4.2 rule found wrong (`event_id`, `timestamp`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For people.
    pub message: String,
}

/// The verification result.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerifyResult {
    /// The session.
    pub session_id: String,
    /// Whether every event verified.
    pub valid: bool,
    /// Events checked.
    pub events: u64,
    /// The first failure, if any.
    pub first_error: Option<VerifyFinding>,
}

impl Runtime {
    /// The CARP sessions' chains `actor` may read, in session id order. Chains without a CARP
    /// session (a Relay project's audit chain) are not listed: `trace` serves CARP sessions.
    pub async fn chains(&self, actor: &Actor) -> ApiResult<Vec<ChainListing>> {
        let (chains, carp, actor) = (
            self.backends.chains.clone(),
            self.backends.carp.clone(),
            actor.clone(),
        );
        crate::error::run_blocking("a store task failed", move || {
            let mut out = Vec::new();
            for s in chains.sessions().map_err(crate::tracelog::chain_error)? {
                let Some(record) = carp
                    .get_session(&s.session_id)
                    .map_err(|e| ApiError::new(cra_wire::Token::Unavailable, e.to_string()))?
                else {
                    continue;
                };
                if can_read(&actor, &record) {
                    out.push(ChainListing {
                        session_id: s.session_id,
                        agent_id: record.agent_id,
                        event_count: s.head.next_sequence,
                        head_hash: s.head.head_hash,
                        first_timestamp: s.first_timestamp,
                        last_timestamp: s.last_timestamp,
                        ended: s.ended,
                    });
                }
            }
            out.sort_by(|a, b| a.session_id.cmp(&b.session_id));
            Ok::<_, ApiError>(out)
        })
        .await?
    }

    /// Every event of session `id`'s chain, to a reader of the session.
    pub async fn trace(&self, actor: &Actor, id: &str) -> ApiResult<Vec<cra_trace::TraceEvent>> {
        readable_session(self, actor, id).await?;
        self.read_all_events(id).await
    }

    /// Session `id`'s stored chain re-verified (sequence, links, Appendix B hashes, §4.2 fields)
    /// and held against the store's head, to a reader of the session.
    pub async fn verify_chain(&self, actor: &Actor, id: String) -> ApiResult<VerifyResult> {
        let events = self.trace(actor, &id).await?;
        let chains = self.backends.chains.clone();
        let sid = id.clone();
        let (report, head_finding) =
            crate::error::run_blocking("the verification task failed", move || {
                let report = cra_trace::verify_events(&events, false);
                let head = chains.session(&sid).map_err(crate::tracelog::chain_error)?;
                let finding = head.and_then(|h| against_head(&events, &h.head));
                Ok::<_, ApiError>((report, finding))
            })
            .await??;
        let first_error = report
            .first_error()
            .map(|f| VerifyFinding {
                sequence: f.sequence,
                code: f.code.as_str().to_owned(),
                field: f.field.map(str::to_owned),
                message: f.message.clone(),
            })
            .or(head_finding);
        Ok(VerifyResult {
            session_id: id,
            valid: first_error.is_none(),
            events: report.events,
            first_error,
        })
    }
}

/// What the chain alone cannot show: events missing after the last stored one. The store keeps
/// each chain's head (event count and last hash) beside the events; a chain that verifies but
/// stops short of its head, or ends on another hash, lost its tail (`sequence_gap` at the first
/// missing sequence) or was rewritten (`chain_broken`). A rewrite that also moves the head is
/// not detectable here (specs/SECURITY.md).
fn against_head(
    events: &[cra_trace::TraceEvent],
    head: &cra_trace::ChainHead,
) -> Option<VerifyFinding> {
    let stored = events.len() as u64;
    if head.next_sequence > stored {
        return Some(VerifyFinding {
            sequence: stored,
            code: "sequence_gap".to_owned(),
            field: None,
            message: format!(
                "the store's head records {} events but only {stored} are stored: events from sequence {stored} on are missing",
                head.next_sequence
            ),
        });
    }
    let last = events.last()?;
    if head.next_sequence == stored && last.event_hash != head.head_hash {
        return Some(VerifyFinding {
            sequence: last.sequence,
            code: "chain_broken".to_owned(),
            field: None,
            message: format!(
                "the store's head names {} as the last hash, the last stored event has {}",
                head.head_hash, last.event_hash
            ),
        });
    }
    None
}
