//! Periodic work on one replica: on PostgreSQL, the replicas sharing a schema elect one leader
//! with an advisory lock (`cra_store::pg::leader`), and only the leader runs the scheduled jobs
//! (retention today). When the leader stops or dies, its lock's connection ends and a waiting
//! replica takes over at once; its jobs run as soon as it leads. On the embedded store the one
//! process always leads.
//!
//! [`crate::state::Runtime::leading`] says whether this replica leads now (`/v1/health` shows it);
//! each change is logged.

use crate::state::AppState;

/// The job name the periodic work's lock is taken for.
const PERIODIC: &str = "periodic";

/// The jobs the leader runs, as the log names them.
fn jobs(state: &AppState) -> &'static str {
    if state.config.retention.is_some() {
        "retention"
    } else {
        "none configured"
    }
}

/// Bids for the leadership of this replica's schema (`None` on the embedded store, which always
/// leads). Drop the bid on a blocking thread: it waits for its thread.
pub(crate) async fn bid(
    state: &AppState,
) -> Result<Option<cra_store::pg::leader::Leadership>, cra_store::BackendError> {
    let Some(pg) = state.backends.postgres.clone() else {
        return Ok(None);
    };
    let leading = state.leading.clone();
    let (replica, jobs) = (
        state.config.replica_id.clone().unwrap_or_default(),
        jobs(state),
    );
    let bid = move || {
        pg.lead(PERIODIC, move |now| {
            if now {
                tracing::info!(replica = %replica, jobs, "this replica now leads periodic work");
            } else {
                tracing::warn!(replica = %replica, "this replica no longer leads periodic work");
            }
            leading.send_replace(now);
        })
    };
    tokio::task::spawn_blocking(bid)
        .await
        .map_err(|e| cra_store::BackendError::Connect(format!("the leader bid failed: {e}")))?
        .map(Some)
}
