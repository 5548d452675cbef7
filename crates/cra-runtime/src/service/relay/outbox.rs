//! The audit outbox of Relay writes: no Relay change is stored without the TRACE events that
//! tell of it (issue 22 B.14).
//!
//! A Relay write and its events live in different tables, so they are joined by an outbox entry
//! ([`cra_relay::store::OutboxEntry`]):
//! 1. the write's plan turns what the write changed ([`Written`]) into the events it owes
//!    ([`Owed`]), and the store keeps them as an entry in the write's own transaction;
//! 2. the events are appended to their chain in a transaction that also removes the entry
//!    ([`cra_carp::store::StateChange::Settle`]);
//! 3. an entry left by a crash between the two is appended at the next start ([`roll_forward`]).
//!
//! The removal is the claim: an entry already removed refuses the append, so two appenders (a
//! request and a replica rolling the outbox forward at its start) never append it twice, and
//! any replica may roll any entry forward.

use std::sync::{Arc, Mutex};

use cra_carp::CarpStore;
use cra_carp::store::{
    CarpStoreError, Recorded, SessionRecord, Settlement, StateChange, StateLog, StateLogError,
};
use cra_relay::RelayStore;
use cra_relay::store::{Outbox, OutboxEntry, RelayStoreError, Written};
use cra_trace::store::ChainStoreError;
use cra_trace::{EventDraft, Payload, TraceEvent};
use cra_wire::IdGenerator;
use serde::{Deserialize, Serialize};

use super::events::PackageQuarantined;
use super::{audit_agent, project_audit_session};

/// The chain a Relay write's events go to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Chain {
    /// Its session id.
    pub(crate) session_id: String,
    /// The agent that owns it.
    pub(crate) owner: String,
    /// The project written to: its audit chain takes the events when `session_id` has ended
    /// by the time they are appended.
    pub(crate) project_id: String,
}

impl Chain {
    /// The audit chain of `project_id`.
    pub(crate) fn audit(project_id: &str) -> Self {
        Self {
            session_id: project_audit_session(project_id),
            owner: audit_agent(project_id),
            project_id: project_id.to_owned(),
        }
    }

    fn is_audit(&self) -> bool {
        self.session_id == project_audit_session(&self.project_id)
    }
}

/// The events a write owes one chain: an outbox entry's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Owed {
    /// Where they go.
    pub(crate) chain: Chain,
    /// The chain's session record, for events that open the chain (a project's audit chain):
    /// written, unless it exists, before they are appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) opens: Option<SessionRecord>,
    /// The events, in order.
    pub(crate) drafts: Vec<EventDraft>,
}

impl Owed {
    /// One event, `payload`, on a fresh trace and a root span of its own.
    pub(crate) fn event<P: Payload>(chain: Chain, ids: &dyn IdGenerator, payload: &P) -> Self {
        Self {
            chain,
            opens: None,
            drafts: vec![crate::tracelog::root_draft(ids, payload)],
        }
    }
}

/// What a write's plan makes of one change: the events it owes, on zero or more chains.
pub(crate) type Plan = Box<dyn Fn(Written<'_>) -> Vec<Owed> + Send + Sync>;

/// The [`Outbox`] of one write: each entry it makes is kept so the writer can settle it once
/// the write returns. An entry whose write did not commit was never stored, and settling it is
/// refused as settled: nothing is appended for it.
pub(crate) struct Planner {
    ids: Arc<dyn IdGenerator>,
    plan: Plan,
    made: Mutex<Vec<(String, Owed)>>,
}

impl Planner {
    pub(crate) fn new(ids: Arc<dyn IdGenerator>, plan: Plan) -> Self {
        Self {
            ids,
            plan,
            made: Mutex::new(Vec::new()),
        }
    }

    /// The entries made so far, taken.
    pub(crate) fn take(&self) -> Vec<(String, Owed)> {
        std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Planner {
    /// What `written` owes: a quarantine, whatever the operation (a read finds the tampering),
    /// its event in the project's audit chain; anything else, what the write's plan says.
    fn owed(&self, written: Written<'_>) -> Vec<Owed> {
        match written {
            Written::Quarantined(p) => {
                let project_id = p.package.project_id();
                let event = PackageQuarantined {
                    project_id,
                    package_id: p.package.package_id(),
                    content_hash: &p.content_hash,
                    recomputed: p.quarantined.as_deref().unwrap_or_default(),
                };
                vec![Owed::event(
                    Chain::audit(project_id),
                    self.ids.as_ref(),
                    &event,
                )]
            }
            other => (self.plan)(other),
        }
    }
}

impl Outbox for Planner {
    fn entries(&self, written: Written<'_>) -> Result<Vec<OutboxEntry>, RelayStoreError> {
        let mut entries = Vec::new();
        for owed in self.owed(written) {
            let key = self.ids.new_id();
            let body = serde_json::to_string(&owed).map_err(|e| {
                RelayStoreError::Backend(format!("cannot encode an outbox entry: {e}"))
            })?;
            entries.push(OutboxEntry {
                key: key.clone(),
                body,
            });
            self.made
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((key, owed));
        }
        Ok(entries)
    }
}

/// An entry settled: its events as appended (none when another appender settled it first).
#[derive(Debug)]
pub(crate) struct Settled {
    /// The chain they went to (the project's audit chain when the named session had ended).
    pub(crate) chain: Chain,
    /// The events.
    pub(crate) events: Vec<TraceEvent>,
}

/// Appends the events of entry `key` and removes it, in one transaction: creates the chain's
/// session record first for an entry that opens its chain. Events owed to a session that has
/// ended go to the project's audit chain instead. Blocks: call it where blocking is allowed.
pub(crate) fn settle(
    carp: &dyn CarpStore,
    log: &dyn StateLog,
    key: &str,
    owed: Owed,
) -> Result<Settled, StateLogError> {
    if let Some(record) = &owed.opens {
        match carp.create_session(record) {
            Ok(()) | Err(CarpStoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        cra_store::fault_point!("relay.settle.opened");
    }
    let mut chain = owed.chain;
    loop {
        let change = StateChange::Settle(Settlement {
            session_id: chain.session_id.clone(),
            outbox_key: key.to_owned(),
        });
        match log.record_and_append(change, owed.drafts.clone()) {
            Ok(Recorded::Appended(events)) => return Ok(Settled { chain, events }),
            Ok(Recorded::Duplicate) => {
                return Err(ChainStoreError::Unavailable(
                    "the store answered a settlement as a duplicate resolve".into(),
                )
                .into());
            }
            Err(StateLogError::Chain(ChainStoreError::Refused {
                token: cra_wire::Token::AlreadyExists,
                ..
            })) => {
                return Ok(Settled {
                    chain,
                    events: Vec::new(),
                });
            }
            Err(StateLogError::Chain(ChainStoreError::SessionEnded { .. }))
                if !chain.is_audit() =>
            {
                chain = Chain::audit(&chain.project_id);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Why the outbox could not be rolled forward at start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RollForwardError {
    /// The Relay store could not list the outbox.
    #[error("cannot read the Relay outbox: {0}")]
    Relay(#[from] RelayStoreError),
    /// An entry could not be appended; it stays for the next start.
    #[error("cannot append the events of Relay outbox entry `{key}`: {source}")]
    Settle {
        /// The entry.
        key: String,
        /// Why.
        source: StateLogError,
    },
}

/// Appends the events of every entry left in the outbox (a crash came between a Relay write and
/// its append) and removes the entries. Returns how many were appended here. An entry this
/// version cannot read is left and logged.
pub(crate) fn roll_forward(
    relay: &dyn RelayStore,
    carp: &dyn CarpStore,
    log: &dyn StateLog,
) -> Result<usize, RollForwardError> {
    let mut appended = 0;
    for OutboxEntry { key, body } in relay.outbox()? {
        let owed: Owed = match serde_json::from_str(&body) {
            Ok(owed) => owed,
            Err(e) => {
                tracing::warn!(%key, error = %e, "a Relay outbox entry this version cannot read is left in place");
                continue;
            }
        };
        let settled = settle(carp, log, &key, owed).map_err(|source| RollForwardError::Settle {
            key: key.clone(),
            source,
        })?;
        if !settled.events.is_empty() {
            appended += 1;
        }
    }
    Ok(appended)
}
