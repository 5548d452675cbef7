//! Executions in flight: each cleared execution holds a lease in the CARP store, owned by this
//! server instance (`replica_id`), from before its executor runs until its outcome is in the
//! session's chain. A server killed in between leaves the lease; when the same instance starts
//! again it closes each of its own leases with an `action.failed` outcome (`executor_interrupted`:
//! the action may or may not have happened), so no `action.approved` stays without an outcome.
//! Another replica's restart never touches them: leases are looked up by owner.

use cra_carp::CarpStore;
use cra_carp::events::ActionFailed;
use cra_carp::store::{CarpStoreError, ExecutionLease, ExecutionRecord, IdempotentCall};
use cra_carp::types::{CARP_VERSION, ExecuteError, ExecuteResponse, ExecuteStatus};
use cra_trace::Span;
use cra_trace::store::{ChainStore, ChainStoreError};
use cra_wire::clock::format_timestamp;
use cra_wire::{Clock, Token};

use crate::atlases::AtlasState;
use crate::error::ApiError;
use crate::state::Runtime;

/// The error code of an execution whose server stopped while it ran.
pub(crate) const INTERRUPTED: &str = "executor_interrupted";

/// Events read per page when looking for an execution's events at start.
const PAGE: usize = 1024;

/// Why closing the interrupted executions failed (the server does not start).
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// The CARP store failed.
    #[error("cannot close interrupted executions: {0}")]
    Store(#[from] CarpStoreError),
    /// The chain store failed.
    #[error("cannot close interrupted executions: {0}")]
    Chain(#[from] ChainStoreError),
}

/// What the chain says of one execution: whether it was approved, and whether it has an outcome.
fn execution_events(
    chains: &dyn ChainStore,
    lease: &ExecutionLease,
) -> Result<(bool, bool), ChainStoreError> {
    let (mut approved, mut finished, mut after) = (false, false, None);
    loop {
        let page = chains.read_after(&lease.session_id, after, PAGE)?;
        for e in page.iter().filter(|e| e.span_id == lease.execution_id) {
            match e.event_type.as_str() {
                "action.approved" => approved = true,
                "action.executed" | "action.failed" => finished = true,
                _ => {}
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.sequence),
            _ => return Ok((approved, finished)),
        }
    }
}

fn interrupted_error() -> ExecuteError {
    ExecuteError {
        code: INTERRUPTED.to_owned(),
        message: "the server stopped while the action ran; its outcome is unknown: check the target system before retrying".to_owned(),
        details: None,
    }
}

/// Records the interrupted outcome (state, then the chain's `action.failed`). Returns whether
/// the event was appended; `false` when the chain had already closed with `session.ended`.
fn close_one(
    carp: &dyn CarpStore,
    chains: &dyn ChainStore,
    atlases: &AtlasState,
    clock: &dyn Clock,
    lease: &ExecutionLease,
) -> Result<bool, RecoveryError> {
    let error = interrupted_error();
    let response = ExecuteResponse {
        carp_version: CARP_VERSION.to_owned(),
        execution_id: lease.execution_id.clone(),
        request_id: lease.request_id.clone(),
        resolution_id: lease.resolution_id.clone(),
        timestamp: format_timestamp(clock.now()),
        status: ExecuteStatus::Error,
        result: None,
        error: Some(error.clone()),
        trace_id: lease.trace_id.clone(),
        extra: serde_json::Map::new(),
    };
    // A repeat of the idempotency key answers this outcome instead of running the action again.
    let call = lease
        .parameters_hash
        .clone()
        .map(|parameters_hash| IdempotentCall {
            action_id: lease.action_id.clone(),
            parameters_hash,
        });
    match carp.record_execution(&ExecutionRecord {
        marks: Vec::new(),
        call,
        execution_id: lease.execution_id.clone(),
        session_id: lease.session_id.clone(),
        idempotency_key: lease.idempotency_key.clone(),
        response,
    }) {
        Ok(_) | Err(CarpStoreError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let stored = carp.get_resolution(&lease.resolution_id)?;
    // The executor's name, for the record; none when no atlas says any more.
    let executor = crate::executor::executor_of(atlases, stored.as_ref(), &lease.action_id)
        .ok()
        .flatten();
    let span = Span {
        trace_id: &lease.trace_id,
        span_id: &lease.execution_id,
        parent: Some(&lease.resolution_id),
    };
    let draft = span.draft_of(&ActionFailed::new(
        &lease.execution_id,
        &lease.action_id,
        executor.as_deref(),
        Some(&error),
    ));
    match chains.append(&lease.session_id, vec![draft]) {
        Ok(_) => Ok(true),
        Err(ChainStoreError::SessionEnded { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Closes every execution `owner` left in flight: an approved one without an outcome gets
/// `action.failed` (`executor_interrupted`); one never approved (the server stopped before its
/// executor could run) only loses its lease. Returns the executions closed with an event.
pub fn close_interrupted(
    carp: &dyn CarpStore,
    chains: &dyn ChainStore,
    atlases: &AtlasState,
    clock: &dyn Clock,
    owner: &str,
) -> Result<usize, RecoveryError> {
    let mut closed = 0;
    for lease in carp.leases_of(owner)? {
        let (approved, finished) = execution_events(chains, &lease)?;
        if approved && !finished {
            if close_one(carp, chains, atlases, clock, &lease)? {
                closed += 1;
            } else {
                tracing::warn!(
                    execution_id = %lease.execution_id,
                    session_id = %lease.session_id,
                    "an interrupted execution's session has ended; its outcome cannot be appended"
                );
            }
        }
        carp.release_execution(&lease.execution_id)?;
    }
    Ok(closed)
}

impl Runtime {
    /// Settles an execution's lease once its outcome's write is over. Written, the outcome
    /// released the lease in the same transaction. Refused because the chain has ended (a
    /// restart could not append it either), the lease is removed here. Any other failure keeps
    /// the lease, so this instance's next start records the outcome as interrupted.
    pub async fn settle_lease<T>(&self, execution_id: &str, appended: &Result<T, ApiError>) {
        if let Err(e) = appended
            && e.token() == Some(Token::SessionInactive)
        {
            self.release_lease(execution_id).await;
        }
    }

    /// Removes an execution's lease; a failure is logged (the next start closes the lease).
    pub async fn release_lease(&self, execution_id: &str) {
        let id = execution_id.to_owned();
        if self.carp(move |s| s.release_execution(&id)).await.is_err() {
            tracing::warn!(%execution_id, "could not release an execution's lease");
        }
    }
}
