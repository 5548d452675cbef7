//! Live events of other replicas: on PostgreSQL, every replica's live streams see the events
//! appended through every other replica sharing the schema.
//!
//! The store announces each committed append on the schema's channel (`cra_store::pg::feed`).
//! [`start`] listens to it; for an append made by another replica, and only when a stream or an
//! approval wait here follows its session (or an all-sessions stream is open), it reads the
//! events from the store and publishes them to the [`crate::tracelog::Hub`], as an append made
//! here is published. This replica's own appends are published as they are made and are only
//! counted here. So every subscriber gets each event once, and a session's stream in sequence
//! order (its reader puts concurrent arrivals in order, `crate::stream`); a session that ends on
//! any replica closes its streams everywhere.
//!
//! The same feed announces each new generation of the atlas catalog: one committed by another
//! replica is read and swapped in at once ([`crate::state::Runtime::refresh_atlases`]), so a
//! decision here uses an atlas installed there as soon as the install is answered.
//!
//! Nothing polls the store. It is read without an announcement only when one was lost:
//! - a session followed here whose next announced range does not start where the last one ended
//!   (a sequence gap) has the missing events read and handed to its session readers;
//! - when the listening connection broke, or the queue between the listener and this task
//!   overflowed, [`crate::tracelog::Hub::resync`] has every session reader read the store from
//!   where it is, and closes the all-sessions streams (they are live only, so they cannot say
//!   what they missed; the close reason says how to resume).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cra_store::pg::feed::{Appended, FeedEvent, Listener};
use cra_trace::TraceEvent;
use tokio::sync::mpsc;

use crate::error::ApiResult;
use crate::state::AppState;

/// Announcements queued between the listening thread and the task publishing them; past this
/// the listener drops them and the task resynchronises.
const QUEUE: usize = 8192;

/// Sessions remembered (followed sessions' next sequences, owners) before the memory is
/// cleared; clearing only costs a store read.
const REMEMBERED: usize = 10_000;

/// The feed of other replicas' appends while the server runs; dropping it stops listening.
#[derive(Debug)]
pub(crate) struct ReplicaFeed {
    _listener: Listener,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReplicaFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts following other replicas when the store is PostgreSQL (`None` on the embedded store,
/// which one process owns). Fails when the listening connection cannot be made. Drop the feed
/// on a blocking thread: the listener waits for its thread.
pub(crate) async fn start(
    state: &AppState,
) -> Result<Option<ReplicaFeed>, cra_store::BackendError> {
    let Some(pg) = state.backends.postgres.clone() else {
        return Ok(None);
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    let overflowed = Arc::new(AtomicBool::new(false));
    let listener = {
        let overflowed = overflowed.clone();
        let origin = pg.origin();
        let listen = move || {
            pg.listen(move |event| {
                if tx.try_send(event).is_err() {
                    overflowed.store(true, Ordering::SeqCst);
                }
            })
        };
        let listener = tokio::task::spawn_blocking(listen).await.map_err(|e| {
            cra_store::BackendError::Connect(format!("the feed's start failed: {e}"))
        })??;
        (listener, origin)
    };
    let (listener, own_origin) = listener;
    let follower = Follower {
        state: state.clone(),
        own_origin,
        next: HashMap::new(),
        owners: HashMap::new(),
    };
    let task = tokio::spawn(follower.run(rx, overflowed));
    Ok(Some(ReplicaFeed {
        _listener: listener,
        task,
    }))
}

/// Publishes other replicas' appends to this replica's hub.
struct Follower {
    state: AppState,
    own_origin: u64,
    /// For each session followed here: the sequence its next announcement should start at.
    next: HashMap<String, u64>,
    /// Each session's owning agent, for the all-sessions streams' agent filter.
    owners: HashMap<String, String>,
}

impl Follower {
    async fn run(mut self, mut rx: mpsc::Receiver<FeedEvent>, overflowed: Arc<AtomicBool>) {
        while let Some(event) = rx.recv().await {
            if overflowed.swap(false, Ordering::SeqCst) {
                self.lost("the queue of announcements overflowed");
            }
            match event {
                FeedEvent::Notice(notice) => {
                    let own = notice.origin == self.own_origin;
                    for appended in notice.appended {
                        if let Err(e) = self.appended(own, appended).await {
                            tracing::warn!(error = %e.body.message, "reading another replica's events failed; their readers resynchronise");
                            self.lost("a read of announced events failed");
                        }
                    }
                }
                FeedEvent::Atlases { origin, .. } if origin != self.own_origin => {
                    self.refresh_atlases().await;
                }
                FeedEvent::Atlases { .. } => {}
                FeedEvent::Lost { reason } => {
                    self.lost(&reason);
                    self.refresh_atlases().await;
                }
            }
        }
    }

    /// Swaps in the atlas catalog's newest generation when another replica committed it (or an
    /// announcement may have been lost); a generation that cannot be used leaves the last good
    /// set in force, logged.
    async fn refresh_atlases(&self) {
        let rt = self.state.0.clone();
        match tokio::task::spawn_blocking(move || rt.refresh_atlases()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "another replica's atlases cannot be used here; the last good atlases stay in force");
            }
            Err(e) => tracing::error!(error = %e, "reading the stored atlases failed"),
        }
    }

    /// Every reader here reads the store from where it is; what was being followed is forgotten.
    fn lost(&mut self, reason: &str) {
        tracing::warn!(
            reason,
            "announcements of other replicas' appends may have been lost; live readers read the store"
        );
        self.next.clear();
        self.state.hub.resync();
    }

    /// One session's announced appends: published here when another replica made them and
    /// somebody here listens.
    async fn appended(&mut self, own: bool, a: Appended) -> ApiResult<()> {
        let hub = self.state.hub.clone();
        let followed = hub.listeners(&a.session_id) > 0;
        let expected = self.next.remove(&a.session_id);
        if let Some(from) = expected.filter(|n| *n < a.from) {
            tracing::warn!(session = %a.session_id, from, to = a.from, "an announcement was lost; reading the gap from the store");
            let gap = self.read(&a.session_id, from, a.from).await?;
            hub.republish_to_session(&a.session_id, &gap);
        }
        if !own && (followed || hub.has_all_subscribers()) {
            let events = self.read(&a.session_id, a.from, a.to).await?;
            let owner = self.owner(&a.session_id).await;
            hub.publish(&a.session_id, &owner, &events);
        }
        if followed && !a.ended {
            if self.next.len() >= REMEMBERED {
                self.next.retain(|s, _| hub.listeners(s) > 0);
            }
            self.next.insert(a.session_id, a.to);
        }
        Ok(())
    }

    /// Events `from..to` of `session`.
    async fn read(&self, session: &str, from: u64, to: u64) -> ApiResult<Vec<TraceEvent>> {
        let limit = usize::try_from(to - from).unwrap_or(usize::MAX);
        self.state
            .read_events_after(session, from.checked_sub(1), limit)
            .await
    }

    /// The agent owning `session` (empty when it has no session record, as audit chains).
    async fn owner(&mut self, session: &str) -> String {
        if let Some(o) = self.owners.get(session) {
            return o.clone();
        }
        let owner = match self.state.session_record(session).await {
            Ok(record) => record.agent_id,
            Err(_) => String::new(),
        };
        if self.owners.len() >= REMEMBERED {
            self.owners.clear();
        }
        self.owners.insert(session.to_owned(), owner.clone());
        owner
    }
}
