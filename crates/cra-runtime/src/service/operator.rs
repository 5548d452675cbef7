//! The operator audit chain: where the runtime records changes no agent's session owns (atlas
//! installs, replacements, removals and refusals; retention runs). One TRACE chain per
//! deployment, its session id derived from its name
//! ([`cra_store::retention::OPERATOR_AUDIT_SESSION`]), owned by the agent
//! [`cra_store::retention::OPERATOR_AGENT`]. Like a project audit chain it has a session record,
//! so auditors and operators read it as any chain (`GET /v1/traces/{id}`).
//!
//! This process writes it under one lock ([`Runtime::operator_chain`]), so the chain is started
//! (record, then `session.started`) exactly once before its first event.

use cra_carp::events::SessionStarted;
use cra_carp::store::SessionRecord;
use cra_store::retention::{OPERATOR_AGENT, OPERATOR_AUDIT_SESSION, OPERATOR_GOAL};
use cra_trace::{EventDraft, Payload, TraceEvent};

use crate::error::ApiResult;
use crate::state::Runtime;

/// Holds the operator chain's lock: appends through it are serialised in this process, and the
/// chain exists (record and `session.started`) once it is taken.
pub struct OperatorChain<'a> {
    rt: &'a Runtime,
    _guard: tokio::sync::MutexGuard<'a, bool>,
}

impl std::fmt::Debug for OperatorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorChain")
    }
}

/// Takes the operator chain's lock, starting the chain first if this deployment has none. Once
/// this process has seen the chain started, later locks read nothing (the chain is never ended
/// or removed).
pub async fn lock(rt: &Runtime) -> ApiResult<OperatorChain<'_>> {
    let mut guard = rt.operator_chain.lock().await;
    if *guard {
        return Ok(OperatorChain { rt, _guard: guard });
    }
    let key = OPERATOR_AUDIT_SESSION.to_owned();
    if rt.carp_read(move |s| s.get_session(&key)).await?.is_none() {
        let now = cra_wire::clock::format_timestamp(rt.clock.now());
        let record = SessionRecord::opened(OPERATOR_AUDIT_SESSION, OPERATOR_AGENT, now);
        rt.carp(move |s| s.create_session(&record)).await?;
    }
    let chains = rt.backends.chains.clone();
    let head = rt
        .quick("reading the operator chain failed", move || {
            chains.session(OPERATOR_AUDIT_SESSION)
        })
        .await?
        .map_err(crate::tracelog::chain_error)?;
    if head.is_none() {
        let started = SessionStarted::unattended(OPERATOR_AGENT, OPERATOR_GOAL);
        rt.append_events(
            OPERATOR_AUDIT_SESSION,
            OPERATOR_AGENT,
            vec![draft(rt, &started)],
        )
        .await?;
    }
    *guard = true;
    Ok(OperatorChain { rt, _guard: guard })
}

/// One operator event, on a fresh trace and root span of its own.
pub fn draft<P: Payload>(rt: &Runtime, payload: &P) -> EventDraft {
    rt.root_draft(payload)
}

impl OperatorChain<'_> {
    /// Appends `drafts` to the operator chain, durably, and hands them to live subscribers.
    pub async fn append(&self, drafts: Vec<EventDraft>) -> ApiResult<Vec<TraceEvent>> {
        if drafts.is_empty() {
            return Ok(Vec::new());
        }
        self.rt
            .append_events(OPERATOR_AUDIT_SESSION, OPERATOR_AGENT, drafts)
            .await
    }
}
