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
    /// An agent's listing reads only its own sessions, through the store's owner index (a store
    /// with encrypted records keeps none, and every session is read); a reader of every session
    /// reads them all.
    pub async fn chains(&self, actor: &Actor) -> ApiResult<Vec<ChainListing>> {
        let (chains, carp, actor) = (
            self.backends.chains.clone(),
            self.backends.carp.clone(),
            actor.clone(),
        );
        let unavailable = |e: cra_carp::store::CarpStoreError| {
            ApiError::new(cra_wire::Token::Unavailable, e.to_string())
        };
        crate::error::run_blocking("a store task failed", move || {
            let summaries = if actor.reads_all() {
                chains.sessions().map_err(crate::tracelog::chain_error)?
            } else if !actor.has(crate::auth::Role::Agent) {
                Vec::new()
            } else {
                match carp.sessions_of(&actor.id).map_err(unavailable)? {
                    Some(mine) => summaries_of(chains.as_ref(), &mine)?,
                    // A store with no owner index: every session, filtered below.
                    None => chains.sessions().map_err(crate::tracelog::chain_error)?,
                }
            };
            let mut out = Vec::new();
            for s in summaries {
                let Some(record) = carp.get_session(&s.session_id).map_err(unavailable)? else {
                    continue;
                };
                if !can_read(&actor, &record) {
                    continue;
                }
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
            out.sort_by(|a, b| a.session_id.cmp(&b.session_id));
            Ok::<_, ApiError>(out)
        })
        .await?
    }

    /// The summary of `id`'s chain (its head, whether it has ended), if it has events.
    pub(crate) async fn chain_summary(
        &self,
        id: &str,
    ) -> ApiResult<Option<cra_trace::store::SessionSummary>> {
        let chains = self.backends.chains.clone();
        let sid = id.to_owned();
        self.quick("a store read failed", move || chains.session(&sid))
            .await?
            .map_err(crate::tracelog::chain_error)
    }

    /// Session `id`'s chain opened for reading page by page, to a reader of the session: the
    /// events stored when it was opened (the chain's head then), never the whole chain in memory
    /// at once (issue 29, item 3).
    pub async fn open_chain(&self, actor: &Actor, id: &str) -> ApiResult<ChainReader> {
        readable_session(self, actor, id).await?;
        let head = self.chain_summary(id).await?.map(|s| s.head);
        Ok(ChainReader {
            chains: self.backends.chains.clone(),
            session_id: id.to_owned(),
            next: 0,
            end: head.as_ref().map_or(0, |h| h.next_sequence),
            head,
            stopped: false,
        })
    }

    /// Every event of session `id`'s chain in memory, to a reader of the session: for callers
    /// that need the whole chain at once (in-process tools, tests). `GET /v1/traces/{id}` streams
    /// it instead. An event the store cannot decode fails the read (`integrity_error`).
    pub async fn trace(&self, actor: &Actor, id: &str) -> ApiResult<Vec<cra_trace::TraceEvent>> {
        let mut reader = self.open_chain(actor, id).await?;
        let mut out = Vec::new();
        while let Some(page) = reader.next_page().await? {
            out.extend(page.events);
            if let Some(e) = page.unreadable {
                return Err(crate::tracelog::chain_error(e));
            }
        }
        Ok(out)
    }

    /// Session `id`'s stored chain re-verified (sequence, links, Appendix B hashes, §4.2 fields)
    /// and held against the store's head, to a reader of the session. The chain is read page by
    /// page; an event the store cannot decode is the finding `malformed_event` at its sequence.
    pub async fn verify_chain(&self, actor: &Actor, id: String) -> ApiResult<VerifyResult> {
        let mut reader = self.open_chain(actor, &id).await?;
        let mut verifier = cra_trace::EventVerifier::new(&cra_trace::VerifyOptions::default());
        let mut last: Option<(u64, String)> = None;
        let mut stored = 0u64;
        'pages: while let Some(page) = reader.next_page().await? {
            for event in &page.events {
                stored += 1;
                last = Some((event.sequence, event.event_hash.clone()));
                if !verifier.push(event) {
                    break 'pages;
                }
            }
            if let Some(e) = page.unreadable {
                verifier.push_unreadable(e.to_string());
                break;
            }
        }
        let report = verifier.finish();
        let head_finding = reader
            .head
            .as_ref()
            .and_then(|h| against_head(stored, last.as_ref(), h));
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

/// The chain summaries of the sessions `ids` (those with a chain), in the order given.
fn summaries_of(
    chains: &dyn cra_trace::store::ChainStore,
    ids: &[String],
) -> ApiResult<Vec<cra_trace::store::SessionSummary>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(s) = chains.session(id).map_err(crate::tracelog::chain_error)? {
            out.push(s);
        }
    }
    Ok(out)
}

/// Events a [`ChainReader`] reads from the store at once: what a reader holds is bounded by
/// this many events, not by the chain.
const PAGE_EVENTS: u64 = 64;

/// A session's chain read page by page, up to the head it had when it was opened: a snapshot
/// that events appended meanwhile do not extend.
pub struct ChainReader {
    chains: std::sync::Arc<dyn cra_trace::store::ChainStore>,
    session_id: String,
    next: u64,
    end: u64,
    head: Option<cra_trace::ChainHead>,
    stopped: bool,
}

impl ChainReader {
    /// The number of events the chain held when it was opened: what a complete read yields.
    pub fn event_count(&self) -> u64 {
        self.end
    }

    /// The next page, or `None` once the chain is read. A page that stopped at an event the store
    /// cannot decode (`Page::unreadable`) is the last one.
    pub async fn next_page(&mut self) -> ApiResult<Option<cra_trace::store::Page>> {
        if self.stopped || self.next >= self.end {
            return Ok(None);
        }
        let (chains, sid) = (self.chains.clone(), self.session_id.clone());
        let (from, to) = (self.next, self.end.min(self.next + PAGE_EVENTS));
        // Decoding a page stays off the async workers.
        let page = crate::error::run_blocking("the trace read task failed", move || {
            cra_trace::store::read_page(chains.as_ref(), &sid, from, to)
        })
        .await?
        .map_err(crate::tracelog::chain_error)?;
        self.next = to;
        self.stopped = page.unreadable.is_some() || page.events.is_empty();
        if page.unreadable.is_some() {
            tracing::warn!(
                session_id = %self.session_id,
                "a chain was read up to an event the store cannot decode"
            );
        }
        Ok(Some(page))
    }
}

/// What the chain alone cannot show: events missing after the last stored one. The store keeps
/// each chain's head (event count and last hash) beside the events; a chain that verifies but
/// stops short of its head, or ends on another hash, lost its tail (`sequence_gap` at the first
/// missing sequence) or was rewritten (`chain_broken`). A rewrite that also moves the head is
/// not detectable here (specs/SECURITY.md). `stored` events were read, the last of them `last`
/// (its sequence and hash).
fn against_head(
    stored: u64,
    last: Option<&(u64, String)>,
    head: &cra_trace::ChainHead,
) -> Option<VerifyFinding> {
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
    let (sequence, hash) = last?;
    if head.next_sequence == stored && *hash != head.head_hash {
        return Some(VerifyFinding {
            sequence: *sequence,
            code: "chain_broken".to_owned(),
            field: None,
            message: format!(
                "the store's head names {} as the last hash, the last stored event has {hash}",
                head.head_hash
            ),
        });
    }
    None
}
